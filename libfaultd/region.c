// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * region.c - regions: reserve address space, register it with the group's
 * userfaultfd, publish it in the map; resize, discard and destroy it.
 *
 * Every change to a region takes the context lock for writing (it changes
 * the map, or what a lookup may find) and then the region's own lock for
 * writing, which waits for the faults being resolved in it on the fast path
 * - vma_start_write() in the kernel. A fault that finds the region
 * write-locked falls back to the context lock and waits there.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

#define REGION_KIND_FLAGS (FAULTD_REGION_MEMFD)
#define REGION_KNOWN_FLAGS (REGION_KIND_FLAGS | FAULTD_REGION_FIXED)

bool region_read_trylock(struct faultd_region *r)
{
	return pthread_rwlock_tryrdlock(&r->lock) == 0;
}

void region_read_unlock(struct faultd_region *r)
{
	pthread_rwlock_unlock(&r->lock);
}

static bool aligned(uint64_t v, size_t a)
{
	return (v & (a - 1)) == 0;
}

static int region_opts_check(const struct faultd_ctx *ctx,
			     const struct faultd_region_opts *o)
{
	size_t ps = (size_t)ctx->page_size;

	if (o->flags & ~REGION_KNOWN_FLAGS)
		return -EINVAL;
	if (!o->length || !aligned(o->length, ps))
		return -EINVAL;
	if (o->max_length && (o->max_length < o->length ||
			      !aligned(o->max_length, ps)))
		return -EINVAL;
	if (!!(o->flags & FAULTD_REGION_FIXED) != !!o->addr)
		return -EINVAL;
	if (o->addr && !aligned((uintptr_t)o->addr, ps))
		return -EINVAL;
	if (o->group && (o->group->ctx != ctx || o->handler_threads))
		return -EINVAL;
	if (o->pager && (o->pager->size < sizeof(struct faultd_pager) ||
			 !o->pager->fill ||
			 (o->pager->flags & ~FAULTD_PAGER_CONCURRENT)))
		return -EINVAL;
	return 0;
}

static struct faultd_region *region_alloc(struct faultd_ctx *ctx,
					  const struct faultd_region_opts *o)
{
	struct faultd_region *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	if (rwlock_init_writer_pref(&r->lock) < 0) {
		free(r);
		return NULL;
	}
	r->ctx = ctx;
	r->flags = o->flags;
	r->kind = (o->flags & FAULTD_REGION_MEMFD) ? REGION_MEMFD : REGION_ANON;
	r->page_size = (size_t)ctx->page_size;
	r->memfd = -1;
	atomic_init(&r->len, o->length);
	r->max_len = o->max_length > o->length ? o->max_length : o->length;
	if (o->pager) {
		r->has_pager = true;
		r->pager = *o->pager;
	}
	snprintf(r->name, sizeof(r->name), "%s", o->name ? o->name : "region");
	return r;
}

static void region_free(struct faultd_region *r)
{
	free(r->stats);
	pthread_rwlock_destroy(&r->lock);
	free(r);
}

/* Attach @r to its group: the caller's, or a new one of its own. */
static int region_attach_group(struct faultd_region *r,
			       const struct faultd_region_opts *o)
{
	struct faultd_group *g = o->group;
	unsigned int n = o->handler_threads ? o->handler_threads
					    : r->ctx->handler_threads;
	int ret;

	if (!g) {
		ret = group_create(r->ctx, n, true, &g);
		if (ret < 0)
			return ret;
	}
	r->group = g;
	r->nr_stats = g->nthreads;
	r->stats = aligned_alloc(CACHELINE, g->nthreads * sizeof(*r->stats));
	if (!r->stats)
		return -ENOMEM;
	memset(r->stats, 0, g->nthreads * sizeof(*r->stats));
	return 0;
}

/* Undo region_attach_group() for a region that never became visible. */
static void region_detach_group(struct faultd_region *r)
{
	if (r->group && r->group->implicit) {
		group_stop(r->group);
		group_free(r->group);
	}
	r->group = NULL;
}

static int memfd_open(struct faultd_region *r, size_t len)
{
	char name[48];
	int fd;

	snprintf(name, sizeof(name), "faultd:%s", r->name);
	fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	r->memfd = fd;
	return 0;
}

/*
 * Address space is reserved first (PROT_NONE, no memory) for max_len bytes;
 * the region's pages are then mapped over the start of the reservation with
 * MAP_FIXED and registered. Growth maps more of the reservation, shrinking
 * maps the tail back to PROT_NONE: both in place, with no window in which
 * another mmap() could take the range.
 */
static int reserve_va(void *addr, size_t len, uintptr_t *base)
{
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
	void *p;

	if (addr)
		flags |= MAP_FIXED_NOREPLACE;
	p = mmap(addr, len, PROT_NONE, flags, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	if (addr && p != addr) { /* a kernel that ignores NOREPLACE */
		munmap(p, len);
		return -EEXIST;
	}
	*base = (uintptr_t)p;
	return 0;
}

/* Give [off, off + len) back to the reservation: memory freed, unmapped. */
static void region_unpopulate(struct faultd_region *r, size_t off, size_t len)
{
	mmap((char *)r->base + off, len, PROT_NONE,
	     MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
}

/* Map [off, off + len) over the reservation and register it. */
static int region_populate(struct faultd_region *r, size_t off, size_t len)
{
	char *at = (char *)r->base + off;
	int flags = MAP_FIXED | (r->memfd >= 0 ? MAP_SHARED
					       : MAP_PRIVATE | MAP_ANONYMOUS);
	int ret;

	if (mmap(at, len, PROT_READ | PROT_WRITE, flags, r->memfd,
		 r->memfd >= 0 ? (off_t)off : 0) == MAP_FAILED) {
		ret = -errno;
		goto err;
	}
	/* A forked child must not see unfilled pages as zeros: keep it out. */
	madvise(at, len, MADV_DONTFORK);
	ret = uffd_register(r->group->uffd, (uintptr_t)at, len,
			    UFFDIO_REGISTER_MODE_MISSING, NULL);
	if (ret < 0)
		goto err;
	return 0;
err:
	region_unpopulate(r, off, len);
	return ret;
}

/* Reserve the memory of @r and register it. Context: map_lock (write). */
static int region_map_memory(struct faultd_region *r, void *addr)
{
	size_t len = atomic_load(&r->len);
	int ret;

	ret = reserve_va(addr, r->max_len, &r->base);
	if (ret < 0)
		return ret;
	if (r->kind == REGION_MEMFD) {
		ret = memfd_open(r, len);
		if (ret < 0)
			goto err_unreserve;
	}
	ret = region_populate(r, 0, len);
	if (ret < 0)
		goto err_memfd;
	return 0;

err_memfd:
	if (r->memfd >= 0)
		close(r->memfd);
	r->memfd = -1;
err_unreserve:
	munmap((void *)r->base, r->max_len);
	return ret;
}

static void region_unmap_memory(struct faultd_region *r)
{
	munmap((void *)r->base, r->max_len);
	if (r->memfd >= 0)
		close(r->memfd);
	r->memfd = -1;
}

static void region_link_locked(struct faultd_region *r)
{
	struct faultd_ctx *ctx = r->ctx;

	r->next = ctx->regions;
	ctx->regions = r;
	r->group->nregions++;
	if (r->group->implicit) {
		r->group->next = ctx->groups;
		ctx->groups = r->group;
	}
}

static void region_unlink_locked(struct faultd_region *r)
{
	struct faultd_ctx *ctx = r->ctx;
	struct faultd_region **pr = &ctx->regions;
	struct faultd_group **pg = &ctx->groups;

	while (*pr != r)
		pr = &(*pr)->next;
	*pr = r->next;
	r->group->nregions--;
	if (!r->group->implicit)
		return;
	while (*pg != r->group)
		pg = &(*pg)->next;
	*pg = r->group->next;
}

FAULTD_EXPORT int faultd_region_create(struct faultd_ctx *ctx,
				       const struct faultd_region_opts *opts,
				       struct faultd_region **regionp)
{
	struct faultd_region_opts o;
	struct region_map *old = NULL;
	struct faultd_region *r;
	int ret;

	if (!ctx || !opts || !regionp)
		return -EINVAL;
	ret = opts_copy(&o, sizeof(o), opts,
			offsetof(struct faultd_region_opts, name) +
				sizeof(o.name));
	if (ret < 0)
		return ret;
	ret = region_opts_check(ctx, &o);
	if (ret < 0)
		return ret;
	if (in_handler_of(ctx))
		return -EDEADLK;
	r = region_alloc(ctx, &o);
	if (!r)
		return -ENOMEM;
	ret = region_attach_group(r, &o);
	if (ret < 0)
		goto err_group;

	map_write_lock(ctx);
	ret = region_map_memory(r, o.addr);
	if (ret < 0)
		goto err_unlock;
	ret = map_insert_locked(ctx, r, &old);
	if (ret < 0)
		goto err_unmap;
	region_link_locked(r);
	map_write_unlock(ctx);

	map_free_after_gp(old);
	*regionp = r;
	return 0;

err_unmap:
	region_unmap_memory(r);
err_unlock:
	map_write_unlock(ctx);
err_group:
	region_detach_group(r);
	region_free(r);
	return ret;
}

/*
 * Take @r out of the map and out of the address space.
 * Context: map_lock (write). On return no fault can be in progress in @r
 * and none can start: lookups miss, and a stale lookup that try-locks it
 * finds it dead.
 */
static struct region_map *region_kill_locked(struct faultd_region *r)
{
	struct region_map *old = map_remove_locked(r->ctx, r);

	pthread_rwlock_wrlock(&r->lock);
	r->dead = true;
	/*
	 * munmap() before any wake: a thread woken while the range is still
	 * mapped would re-fault, and once the registration is gone the
	 * kernel would fill the page with zeros.
	 */
	region_unmap_memory(r);
	pthread_rwlock_unlock(&r->lock);
	region_unlink_locked(r);
	ctx_retire_stats(r->ctx, r->stats, r->nr_stats);
	return old;
}

FAULTD_EXPORT int faultd_region_destroy(struct faultd_region *r)
{
	struct faultd_ctx *ctx;
	struct faultd_group *g;
	struct region_map *old;
	size_t len;

	if (!r)
		return 0;
	ctx = r->ctx;
	g = r->group;
	if (in_handler_of(ctx))
		return -EDEADLK;
	len = atomic_load(&r->len);
	map_write_lock(ctx);
	old = region_kill_locked(r);
	map_write_unlock(ctx);

	/* Threads still asleep on a fault here now get SIGSEGV. */
	uffd_wake(g->uffd, r->base, len);
	/* After the grace period no RCU reader can reach @r. */
	map_free_after_gp(old);
	if (g->implicit) {
		group_stop(g);
		group_free(g);
	}
	if (r->has_pager && r->pager.release)
		r->pager.release(r->pager.arg);
	region_free(r);
	return 0;
}

FAULTD_EXPORT void *faultd_region_base(const struct faultd_region *r)
{
	return r ? (void *)r->base : NULL;
}

FAULTD_EXPORT size_t faultd_region_size(const struct faultd_region *r)
{
	return r ? atomic_load(&r->len) : 0;
}

FAULTD_EXPORT int faultd_region_memfd(const struct faultd_region *r)
{
	return r && r->memfd >= 0 ? r->memfd : -EINVAL;
}

/* Extend the reservation in place to @len bytes, or -ENOMEM. */
static int region_reserve_more(struct faultd_region *r, size_t len)
{
	uintptr_t at;
	int ret;

	ret = reserve_va((char *)r->base + r->max_len, len - r->max_len, &at);
	if (ret < 0)
		return ret == -EEXIST ? -ENOMEM : ret;
	r->max_len = len;
	return 0;
}

static int region_grow_locked(struct faultd_region *r, size_t old_len,
			      size_t len)
{
	int ret;

	if (len > r->max_len) {
		ret = region_reserve_more(r, len);
		if (ret < 0)
			return ret;
	}
	if (r->memfd >= 0 && ftruncate(r->memfd, (off_t)len) < 0)
		return -errno;
	ret = region_populate(r, old_len, len - old_len);
	if (ret < 0 && r->memfd >= 0)
		(void)!ftruncate(r->memfd, (off_t)old_len);
	return ret;
}

static void region_shrink_locked(struct faultd_region *r, size_t len)
{
	region_unpopulate(r, len, atomic_load(&r->len) - len);
	if (r->memfd >= 0)
		(void)!ftruncate(r->memfd, (off_t)len);
}

static int region_resize_locked(struct faultd_region *r, size_t old_len,
				size_t len)
{
	int ret = 0;

	if (len > old_len)
		ret = region_grow_locked(r, old_len, len);
	else if (len < old_len)
		region_shrink_locked(r, len);
	if (!ret)
		atomic_store(&r->len, len);
	return ret;
}

FAULTD_EXPORT int faultd_region_resize(struct faultd_region *r, size_t len)
{
	struct faultd_ctx *ctx;
	size_t old_len;
	int ret;

	if (!r || !len || !aligned(len, r->page_size))
		return -EINVAL;
	ctx = r->ctx;
	if (in_handler_of(ctx))
		return -EDEADLK;
	map_write_lock(ctx);
	pthread_rwlock_wrlock(&r->lock);
	old_len = atomic_load(&r->len);
	ret = region_resize_locked(r, old_len, len);
	pthread_rwlock_unlock(&r->lock);
	map_write_unlock(ctx);
	/* Threads asleep on a fault in the cut tail get SIGSEGV. */
	if (!ret && len < old_len)
		uffd_wake(r->group->uffd, r->base + len, old_len - len);
	return ret;
}

FAULTD_EXPORT int faultd_region_discard(struct faultd_region *r,
					uint64_t off, size_t len)
{
	char *p;
	int ret = 0;

	if (!r || !len || !aligned(off, r->page_size) ||
	    !aligned(len, r->page_size))
		return -EINVAL;
	pthread_rwlock_rdlock(&r->lock);
	if (off >= atomic_load(&r->len) || len > atomic_load(&r->len) - off) {
		ret = -EINVAL;
		goto out;
	}
	p = (char *)r->base + off;
	/* shmem keeps pages in the page cache: punch them out of the file. */
	if (r->memfd >= 0)
		ret = fallocate(r->memfd,
				FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				(off_t)off, (off_t)len);
	else
		ret = madvise(p, len, MADV_DONTNEED);
	ret = ret < 0 ? -errno : 0;
out:
	pthread_rwlock_unlock(&r->lock);
	return ret;
}

FAULTD_EXPORT int faultd_region_stats(const struct faultd_region *r,
				      struct faultd_stats *stats)
{
	struct stat_block acc;

	if (!r || !stats || stats->size < sizeof(stats->size))
		return -EINVAL;
	memset(&acc, 0, sizeof(acc));
	for (unsigned int i = 0; i < r->nr_stats; i++)
		stat_sum(&acc, &r->stats[i]);
	stat_export(stats, &acc);
	return 0;
}
