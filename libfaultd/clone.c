// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * clone.c - copy-on-write clones of regions.
 *
 * A memfd parent shares its pages: the first clone freezes the memfd as a
 * page cache (pcache.c) and turns the parent into a private view of it,
 * like the child; the kernel copies a page on its first write.
 *
 * Any other parent is copied page by page, and must not change what its
 * clone will read: this is "copy before write". At the clone the parent is
 * write-protected; before a write lands on one of its pages, the old
 * content is saved into the clone's snapshot (a sparse memfd) unless the
 * child already has its own copy. A child's fault reads its page as of the
 * clone without taking any fault itself (source_read()): from the parent's
 * page tables when the page is present, otherwise from what the parent
 * would have produced (its pager, its own snapshot, or zeros), then takes
 * the saved copy instead if the parent saved one meanwhile. So a child's
 * handler never waits for the parent's handlers.
 *
 * Locking: parent->snaps changes under map_lock (write) and the parent's
 * lock (write), and is read under the parent's lock or map_lock (read).
 * snapshot->parent becomes NULL, when the parent goes, under map_lock and
 * the child's lock (write). A snapshot's page is saved or read under its
 * stripe lock, which nests inside region locks and takes no fault.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fault.h"

#define SNAP_LOCKS 64

struct snapshot {
	struct faultd_region *parent; /* NULL once the parent is gone */
	struct faultd_region *child;
	int memfd;		      /* saved pages, at their offsets */
	size_t npages, page_size;
	/* Set with release, read with acquire (as the child's cow_own): what
	 * was saved before a bit was set is seen by whoever sees the bit. */
	_Atomic uint64_t *saved;      /* saved before the parent changed it */
	_Atomic uint64_t *lost;	      /* saving failed: the child poisons */
	pthread_mutex_t locks[SNAP_LOCKS];
	struct snapshot *next;	      /* in parent->snaps */
};

static _Atomic uint64_t *bitmap_new(size_t n)
{
	return fd_calloc(bitmap_words(n), sizeof(uint64_t));
}

static pthread_mutex_t *snap_lock(struct snapshot *s, size_t pg)
{
	return &s->locks[pg % SNAP_LOCKS];
}

static void snap_free(struct snapshot *s)
{
	if (!s)
		return;
	if (s->memfd >= 0)
		close(s->memfd);
	for (int i = 0; i < SNAP_LOCKS; i++)
		pthread_mutex_destroy(&s->locks[i]);
	free((void *)s->saved);
	free((void *)s->lost);
	free(s);
}

static struct snapshot *snap_new(const struct faultd_region *parent)
{
	struct snapshot *s = fd_calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->page_size = parent->page_size;
	s->npages = atomic_load(&parent->len) / parent->page_size;
	s->memfd = memfd_create("faultd:snapshot", MFD_CLOEXEC);
	s->saved = bitmap_new(s->npages);
	s->lost = bitmap_new(s->npages);
	for (int i = 0; i < SNAP_LOCKS; i++)
		pthread_mutex_init(&s->locks[i], NULL);
	if (s->memfd < 0 || !s->saved || !s->lost ||
	    ftruncate(s->memfd, (off_t)(s->npages * s->page_size)) < 0) {
		snap_free(s);
		return NULL;
	}
	return s;
}

static bool snap_saved(struct snapshot *s, size_t pg)
{
	return bitmap_test_atomic(s->saved, pg, memory_order_acquire);
}

static bool child_owns(struct snapshot *s, size_t pg)
{
	_Atomic uint64_t *own = atomic_load(&s->child->cow_own);

	return own && bitmap_test_atomic(own, pg, memory_order_acquire);
}

/* ------------------------------------------------------------------------
 * Reading a page as of the clone, without taking a fault.
 */

/* Copy present memory of this process; a poisoned page gives -EFAULT. */
static int read_present(uintptr_t addr, void *buf, size_t len)
{
	struct iovec local = { .iov_base = buf, .iov_len = len };
	struct iovec remote = { .iov_base = (void *)addr, .iov_len = len };
	ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);

	if (n < 0)
		return -errno;
	return n == (ssize_t)len ? 0 : -EFAULT;
}

/*
 * pager_read() - the pager's content of [off, off + len), zero-filled past
 * a short fill. Only under the context lock (@locked) for a pager without
 * FAULTD_PAGER_CONCURRENT: else FR_RETRY, as fault_can_call_pager().
 */
static struct fault_ret pager_read(struct faultd_region *r, uint64_t off,
				   void *buf, size_t len, bool locked)
{
	ssize_t n;

	if (!pager_concurrent(r->pager) && !locked)
		return fr(FR_RETRY);
	n = pager_call_fill(r, r->pager, off, buf, len);
	if (n < 0)
		return fr_error((int)n);
	install_fill_tail(buf, n, len);
	return fr(FR_DONE);
}

static struct fault_ret snap_read(struct snapshot *s, uint64_t off,
				  void *buf, size_t len, bool locked);

/*
 * source_read() - what @r holds at @off, or would produce on a fault,
 * into @buf (@len bytes): present memory, its own clone content, its
 * pager, or zeros. Returns FR_DONE with @buf filled, FR_RETRY (an
 * unaudited pager needs the context lock) or FR_ERROR.
 * Context: @r cannot go away (see the file comment).
 */
static struct fault_ret source_read(struct faultd_region *r, uint64_t off,
				    void *buf, size_t len, bool locked)
{
	int ret = pagemap_present(r->ctx, r->base + off);

	if (ret > 0)
		ret = read_present(r->base + off, buf, len);
	else if (!ret && r->cow)
		return snap_read(r->cow, off, buf, len, locked);
	else if (!ret && r->pager)
		return pager_read(r, off, buf, len, locked);
	else if (!ret)
		faultd_clear(buf, len);
	return ret < 0 ? fr_error(ret) : fr(FR_DONE);
}

/*
 * snap_read() - the page at @off as of the clone. The parent's current
 * page is read first, without the page's lock (it may call a pager); if
 * the parent saved the page meanwhile, the saved copy wins. A parent write
 * cannot land unsaved: it saves first, under the lock.
 */
static struct fault_ret snap_read(struct snapshot *s, uint64_t off,
				  void *buf, size_t len, bool locked)
{
	size_t pg = off / s->page_size;
	struct fault_ret ret = fr_error(-EIO);

	if (!snap_saved(s, pg) && s->parent)
		ret = source_read(s->parent, off, buf, len, locked);
	if (fr_is(ret, FR_RETRY))
		return ret;
	pthread_mutex_lock(snap_lock(s, pg));
	if (bitmap_test_atomic(s->lost, pg, memory_order_acquire))
		ret = fr_error(-EIO);
	else if (snap_saved(s, pg))
		ret = pread(s->memfd, buf, len, (off_t)off) == (ssize_t)len
			      ? fr(FR_DONE)
			      : fr_error(-EIO);
	pthread_mutex_unlock(snap_lock(s, pg));
	return ret;
}

/*
 * clone_read() - the child's page at @off as of the clone, into @buf, as
 * source_read() returns it. @locked: the context lock is held (an
 * unaudited pager of an ancestor may be called).
 */
struct fault_ret clone_read(struct faultd_region *child, uint64_t off,
			    void *buf, size_t len, bool locked)
{
	return snap_read(child->cow, off, buf, len, locked);
}

/* ------------------------------------------------------------------------
 * The child's private state, and the parent's copy before write.
 */

bool clone_prepared(struct faultd_region *child)
{
	return atomic_load_explicit(&child->cow_own, memory_order_acquire);
}

/*
 * clone_prepare_locked() - allocate the child's private page state, like
 * anon_vma_prepare(). Returns 1 if this call allocated it, 0 if another
 * did, -ENOMEM. Context: map_lock held (for reading, so two handlers may
 * race here: the first to publish wins).
 */
int clone_prepare_locked(struct faultd_region *child)
{
	_Atomic uint64_t *own = bitmap_new(child->cow->npages);
	_Atomic uint64_t *none = NULL;

	assert_map_held(child->ctx);
	if (!own)
		return -ENOMEM;
	if (atomic_compare_exchange_strong(&child->cow_own, &none, own))
		return 1;
	free((void *)own);
	return 0;
}

void clone_own(struct faultd_region *child, uint64_t off)
{
	bitmap_test_and_set(atomic_load(&child->cow_own), off / child->page_size,
			    memory_order_release);
}

/* Save the page's old content for @s, unless it has it or needs none. */
static bool snap_save(struct snapshot *s, uint64_t off, const void *old,
		      size_t len, struct faultd_region *parent)
{
	size_t pg = off / s->page_size;
	bool saved = false;

	if (pg >= s->npages || snap_saved(s, pg) || child_owns(s, pg))
		return false;
	pthread_mutex_lock(snap_lock(s, pg));
	if (!snap_saved(s, pg) && !child_owns(s, pg)) {
		if (pwrite(s->memfd, old, len, (off_t)off) == (ssize_t)len) {
			saved = true;
		} else {
			fd_err(parent->ctx, "%s: cannot save offset %#llx for "
			       "a clone: the clone's page is poisoned",
			       parent->name, (unsigned long long)off);
			bitmap_test_and_set(s->lost, pg, memory_order_release);
		}
		bitmap_test_and_set(s->saved, pg, memory_order_release);
	}
	pthread_mutex_unlock(snap_lock(s, pg));
	return saved;
}

/*
 * clone_save_before_write() - a write is about to change @parent's page at
 * @off, whose content is @old: save it for every clone that may need it.
 * Returns the number of copies made.
 * Context: a handler thread holding @parent's lock or map_lock (read).
 */
unsigned int clone_save_before_write(struct faultd_region *parent,
				     uint64_t off, const void *old, size_t len)
{
	unsigned int n = 0;

	for (struct snapshot *s = parent->snaps; s; s = s->next)
		n += snap_save(s, off, old, len, parent);
	return n;
}

/* ------------------------------------------------------------------------
 * Lifetimes.
 */

/*
 * clone_parent_destroy() - the parent is going: save every page its clones
 * still read from it, then detach them.
 * Context: faultd_region_destroy(), before the parent leaves the map; the
 * context lock is taken here (for reading while saving, so that unaudited
 * pagers may be called; for writing to detach).
 */
void clone_parent_destroy(struct faultd_region *parent)
{
	void *buf;

	if (!parent->snaps)
		return;
	buf = aligned_alloc(parent->page_size, parent->page_size);
	map_read_lock(parent->ctx);
	for (struct snapshot *s = parent->snaps; s && buf; s = s->next)
		for (size_t pg = 0; pg < s->npages; pg++) {
			uint64_t off = pg * s->page_size;

			if (snap_saved(s, pg) || child_owns(s, pg))
				continue;
			if (!fr_is(source_read(parent, off, buf, s->page_size,
					       true),
				   FR_DONE))
				bitmap_test_and_set(s->lost, pg,
						    memory_order_release);
			snap_save(s, off, buf, s->page_size, parent);
		}
	map_read_unlock(parent->ctx);
	free(buf);
	map_write_lock(parent->ctx);
	for (struct snapshot *s = parent->snaps; s; s = s->next) {
		pthread_rwlock_wrlock(&s->child->lock);
		s->parent = NULL;
		pthread_rwlock_unlock(&s->child->lock);
	}
	/* Faults of the parent read snaps under its lock (fast path). */
	pthread_rwlock_wrlock(&parent->lock);
	parent->snaps = NULL;
	pthread_rwlock_unlock(&parent->lock);
	map_write_unlock(parent->ctx);
}

/*
 * clone_child_destroy_locked() - the child is gone: take its snapshot off
 * its parent's list and free it.
 * Context: map_lock held for writing; the child is dead.
 */
void clone_child_destroy_locked(struct faultd_region *child)
{
	struct snapshot *s = child->cow, **ps;

	assert_map_write_held(child->ctx);
	if (!s)
		return;
	if (s->parent) {
		pthread_rwlock_wrlock(&s->parent->lock);
		for (ps = &s->parent->snaps; *ps != s; ps = &(*ps)->next)
			;
		*ps = s->next;
		pthread_rwlock_unlock(&s->parent->lock);
	}
	child->cow = NULL;
	child->ops = &missing_ops;
	snap_free(s);
}

/* ------------------------------------------------------------------------
 * Creating clones.
 */

/*
 * Freeze a memfd region: its memfd becomes a page cache and its
 * mapping a private view of it. The view is moved into place with no lock
 * held, because the region's handlers must read the REMAP event for the
 * move to finish; faults meanwhile go through the base already.
 */
static int clone_freeze(struct faultd_region *p)
{
	struct faultd_ctx *ctx = p->ctx;
	int ret;

	map_write_lock(ctx);
	pthread_rwlock_wrlock(&p->lock);
	/* A freeze that failed after this step left its base: go on with it. */
	ret = p->cache ? 0 : pcache_create(p);
	pthread_rwlock_unlock(&p->lock);
	map_write_unlock(ctx);
	if (ret < 0)
		return ret;
	ret = mem_freeze(p);
	if (ret < 0)
		return ret;
	map_write_lock(ctx);
	pthread_rwlock_wrlock(&p->lock);
	p->kind = REGION_MEMFD_PRIVATE;
	p->ops = &view_ops;
	pthread_rwlock_unlock(&p->lock);
	map_write_unlock(ctx);
	return 0;
}

static void child_opts(const struct faultd_region *parent,
		       const struct faultd_clone_opts *c,
		       struct faultd_region_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->flags = c->flags;
	o->length = atomic_load(&parent->len);
	o->handler_threads = c->handler_threads;
	o->name = c->name ? c->name : "clone";
	o->write_hook = c->write_hook;
	o->hook_arg = c->hook_arg;
}

/* The memfd path: parent and child share the frozen base's pages. */
static int clone_shared(struct faultd_region *p, const struct faultd_clone_opts *c,
			struct faultd_region **childp)
{
	struct region_init init = { .kind = REGION_MEMFD_PRIVATE,
				    .wp_registered = c->flags & FAULTD_REGION_WP };
	struct faultd_region_opts o;
	int ret;

	/* The clones map the base's pages write-protected (UFFDIO_CONTINUE
	 * with MODE_WP, 6.2 and later), so that they see their own writes. */
	if (!(uffd_have() & FAULTD_HAVE_MINOR_SHMEM) ||
	    !(uffd_have() & FAULTD_HAVE_CONTINUE_WP) || p->wp_mode == WP_ASYNC)
		return -EOPNOTSUPP;
	if (p->kind == REGION_MEMFD)
		ret = clone_freeze(p);
	else
		ret = pagemap_has_private(p);
	if (ret)
		return ret < 0 ? ret : -EBUSY;
	init.memfd = fcntl(p->cache->memfd, F_DUPFD_CLOEXEC, 0);
	if (init.memfd < 0)
		return -errno;
	init.cache = pcache_get(p->cache);
	init.pager = pager_get(p->cache->pager);
	child_opts(p, c, &o);
	return region_create(p->ctx, &o, &init, childp);
}

/*
 * The copy path. The parent gains write protection if it had none, is
 * protected as a whole, and carries the child's snapshot from then on.
 */
static int clone_copy(struct faultd_region *p, const struct faultd_clone_opts *c,
		      struct faultd_region **childp)
{
	struct region_init init = { .kind = REGION_ANON,
				    .memfd = -1,
				    .wp_registered = true };
	struct faultd_region_opts o;
	struct faultd_region *child;
	struct snapshot *s = snap_new(p);
	int ret;

	if (!s)
		return -ENOMEM;
	child_opts(p, c, &o);
	ret = region_create(p->ctx, &o, &init, &child);
	if (ret < 0) {
		snap_free(s);
		return ret;
	}
	map_write_lock(p->ctx);
	pthread_rwlock_wrlock(&p->lock);
	ret = p->wp_registered ? 0 : mem_reregister(p);
	if (!ret)
		ret = uffd_writeprotect(p->group->uffd, p->base,
					atomic_load(&p->len), true);
	if (!ret) {
		s->parent = p;
		s->child = child;
		s->next = p->snaps;
		p->snaps = s;
		child->cow = s;
		child->ops = &cow_ops;
	}
	pthread_rwlock_unlock(&p->lock);
	map_write_unlock(p->ctx);
	if (ret < 0) {
		faultd_region_destroy(child);
		snap_free(s);
		return ret;
	}
	*childp = child;
	return 0;
}

FAULTD_EXPORT int faultd_region_clone(struct faultd_region *p,
				      const struct faultd_clone_opts *opts,
				      struct faultd_region **childp)
{
	struct faultd_clone_opts c = { .size = sizeof(c) };
	int ret;

	if (!p || !childp)
		return -EINVAL;
	if (opts) {
		ret = opts_copy(&c, sizeof(c), opts,
				offsetof(struct faultd_clone_opts, flags) +
					sizeof(c.flags));
		if (ret < 0)
			return ret;
	}
	if (c.ctx && c.ctx != p->ctx)
		return -EXDEV;
	if ((c.flags & ~FAULTD_REGION_WP) ||
	    (c.write_hook && !(c.flags & FAULTD_REGION_WP)))
		return -EINVAL;
	if (in_handler_of(p->ctx))
		return -EDEADLK;
	if (p->ev || p->sig_slot >= 0) /* a budget; faults in signal handlers */
		return -EOPNOTSUPP;
	if (p->kind == REGION_MEMFD || p->kind == REGION_MEMFD_PRIVATE)
		return clone_shared(p, &c, childp);
	if (p->kind != REGION_ANON || p->wp_mode == WP_ASYNC)
		return -EOPNOTSUPP;
	return clone_copy(p, &c, childp);
}

/* ------------------------------------------------------------------------
 * A copy-on-write clone's faults (cow_ops, kinds.c).
 */

/*
 * fault_cow_prepare() - like vmf_anon_prepare(): a clone's private page
 * state is allocated by its first COW fault, and only under the context
 * lock; the fast path retries there. Later faults find it. Returns
 * whether the fault goes on; if not, *ret says how it ends.
 */
static bool fault_cow_prepare(struct fault *f, struct fault_ret *ret)
{
	int err;

	if (likely(clone_prepared(f->r)))
		return true;
	if (!(f->flags & FAULT_LOCKED)) {
		*ret = fr(FR_RETRY);
		return false;
	}
	err = clone_prepare_locked(f->r);
	if (err < 0) {
		*ret = fr_error(err);
		return false;
	}
	if (err > 0)
		stat_inc(f->st, ST_COW_PREPARE);
	return true;
}

/*
 * do_cow_fault() - a missing page of a copy-on-write clone: the parent's
 * content as of the clone, read without faulting (clone.c). A read
 * installs it write-protected, a write makes it the clone's own at once.
 */
struct fault_ret do_cow_fault(struct fault *f)
{
	void *buf = f->h->staging;
	struct fault_ret ret;

	if (!fault_cow_prepare(f, &ret))
		return ret;
	ret = clone_read(f->r, f->off, buf, f->len, f->flags & FAULT_LOCKED);
	if (!fr_is(ret, FR_DONE))
		return ret;
	clone_own(f->r, f->off);
	fault_commit(f, (f->flags & FAULT_WRITE) ? ST_COW : ST_COW_READS);
	return fault_copy(f, buf);
}
