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

#define REGION_WP_FLAGS (FAULTD_REGION_WP | FAULTD_REGION_WP_ASYNC)
#define REGION_KNOWN_FLAGS                                                     \
	(FAULTD_REGION_MEMFD | FAULTD_REGION_HUGETLB | FAULTD_REGION_THP |     \
	 REGION_WP_FLAGS | FAULTD_REGION_SAME_THREAD | FAULTD_REGION_FIXED)
#define PAGER_KNOWN_FLAGS (FAULTD_PAGER_CONCURRENT | FAULTD_PAGER_SIGNAL_SAFE)

bool region_read_trylock(struct faultd_region *r)
{
	return pthread_rwlock_tryrdlock(&r->lock) == 0;
}

void region_read_unlock(struct faultd_region *r)
{
	pthread_rwlock_unlock(&r->lock);
}

/*
 * region_write_lock_locked() - write-lock @r for a destroy or a resize,
 * timed (struct lock_stats): the wait is the drain of the faults being
 * resolved in it. Returns when it was taken, for the unlock.
 * Context: map_lock held for writing.
 */
uint64_t region_write_lock_locked(struct faultd_region *r)
{
	uint64_t asked = now_ns(), held;

	assert_map_write_held(r->ctx);
	pthread_rwlock_wrlock(&r->lock);
	held = now_ns();
	lock_record(&r->ctx->wlocks, LK_REGION_WRITE_WAIT, held - asked);
	return held;
}

void region_write_unlock_locked(struct faultd_region *r, uint64_t since)
{
	lock_record(&r->ctx->wlocks, LK_REGION_WRITE_HOLD, now_ns() - since);
	pthread_rwlock_unlock(&r->lock);
}

static bool aligned(uint64_t v, size_t a)
{
	return (v & (a - 1)) == 0;
}

static enum region_kind kind_of(uint64_t flags)
{
	if (flags & FAULTD_REGION_HUGETLB)
		return flags & FAULTD_REGION_MEMFD ? REGION_MEMFD_HUGETLB
						   : REGION_HUGETLB;
	return flags & FAULTD_REGION_MEMFD ? REGION_MEMFD : REGION_ANON;
}

/* The page size of a region with these options, or -errno. */
static long region_page_size(const struct faultd_ctx *ctx,
			     const struct faultd_region_opts *o)
{
	uint64_t have = uffd_have();

	if (!(o->flags & FAULTD_REGION_HUGETLB))
		return !o->page_size || o->page_size == (size_t)ctx->page_size
			       ? ctx->page_size
			       : -EINVAL;
	if (o->flags & FAULTD_REGION_THP)
		return -EINVAL;
	if (!(have & FAULTD_HAVE_MISSING_HUGETLB) ||
	    ((o->flags & FAULTD_REGION_MEMFD) &&
	     !(have & FAULTD_HAVE_MINOR_HUGETLB)))
		return -EOPNOTSUPP;
	return huge_page_size(o->page_size);
}

/* Can this kernel track writes the way @flags ask? 0 or -errno. */
static int region_wp_check(const struct faultd_region_opts *o)
{
	uint64_t have = uffd_have(), wp = o->flags & REGION_WP_FLAGS;
	bool anon = !(o->flags & (FAULTD_REGION_MEMFD | FAULTD_REGION_HUGETLB));

	if (!wp)
		return o->write_hook ? -EINVAL : 0;
	if (wp == REGION_WP_FLAGS)
		return -EINVAL;
	if (!(have & (anon ? FAULTD_HAVE_WP : FAULTD_HAVE_WP_SHMEM)))
		return -EOPNOTSUPP;
	/* A memfd-hugetlb region maps with UFFDIO_CONTINUE: protected. */
	if ((o->flags & FAULTD_REGION_MEMFD) &&
	    (o->flags & FAULTD_REGION_HUGETLB) &&
	    !(have & FAULTD_HAVE_CONTINUE_WP))
		return -EOPNOTSUPP;
	if (wp == FAULTD_REGION_WP)
		return 0;
	if (o->write_hook || o->group)
		return -EINVAL;
	if ((have & (FAULTD_HAVE_WP_ASYNC | FAULTD_HAVE_PAGEMAP_SCAN)) !=
	    (FAULTD_HAVE_WP_ASYNC | FAULTD_HAVE_PAGEMAP_SCAN))
		return -EOPNOTSUPP;
	return 0;
}

/* A same-thread region: SIGBUS support, nothing that needs messages. */
static int region_same_thread_check(const struct faultd_region_opts *o)
{
	if (!(o->flags & FAULTD_REGION_SAME_THREAD))
		return 0;
	if (!(uffd_have() & FAULTD_HAVE_SIGBUS))
		return -EOPNOTSUPP;
	if ((o->flags & (REGION_WP_FLAGS | FAULTD_REGION_THP)) || o->group ||
	    ((o->flags & FAULTD_REGION_HUGETLB) &&
	     (o->flags & FAULTD_REGION_MEMFD)) ||
	    (o->pager && !(o->pager->flags & FAULTD_PAGER_SIGNAL_SAFE)))
		return -EINVAL;
	return 0;
}

/* Fault-around and read-ahead: sizes, and regions that can have them. */
static int region_fill_ahead_check(const struct faultd_region_opts *o,
				   size_t ps)
{
	size_t fa = o->fault_around, ra = o->readahead_max;

	if (fa > FAULTD_FAULT_AROUND_OFF &&
	    ((fa & (fa - 1)) || fa < ps || fa > (2ul << 20) ||
	     (o->flags & FAULTD_REGION_HUGETLB) || o->budget))
		return -EINVAL;
	if (ra > FAULTD_READAHEAD_OFF &&
	    (!aligned(ra, ps) || ra > (256ul << 20) || !o->pager ||
	     (o->flags & (FAULTD_REGION_HUGETLB | FAULTD_REGION_SAME_THREAD))))
		return -EINVAL;
	return 0;
}

/*
 * A budget: a memfd region (the caller set FAULTD_REGION_MEMFD) of small
 * pages whose writes are tracked synchronously, with a concurrent pager
 * that can write back - the evictor calls it from its own thread, and a
 * dirty page can only leave through it.
 */
static int region_budget_check(const struct faultd_region_opts *o, size_t ps)
{
	uint64_t have = uffd_have();

	if (!o->budget)
		return o->budget_low ? -EINVAL : 0;
	if (!aligned(o->budget, ps) || o->budget < 16 * ps ||
	    !aligned(o->budget_low, ps) || o->budget_low >= o->budget)
		return -EINVAL;
	if (!o->pager || !o->pager->writeback ||
	    !(o->pager->flags & FAULTD_PAGER_CONCURRENT) ||
	    !(o->flags & FAULTD_REGION_WP) ||
	    (o->flags & (FAULTD_REGION_HUGETLB | FAULTD_REGION_THP |
			 FAULTD_REGION_SAME_THREAD)))
		return -EINVAL;
	/* Its pages are mapped write-protected with UFFDIO_CONTINUE. */
	if ((have & (FAULTD_HAVE_MINOR_SHMEM | FAULTD_HAVE_CONTINUE_WP)) !=
	    (FAULTD_HAVE_MINOR_SHMEM | FAULTD_HAVE_CONTINUE_WP))
		return -EOPNOTSUPP;
	return 0;
}

static int region_opts_check(const struct faultd_ctx *ctx,
			     const struct faultd_region_opts *o, size_t ps)
{
	int ret;

	if (o->flags & ~REGION_KNOWN_FLAGS)
		return -EINVAL;
	ret = region_wp_check(o);
	if (!ret)
		ret = region_same_thread_check(o);
	if (ret < 0)
		return ret;
	if (!o->length || !aligned(o->length, ps))
		return -EINVAL;
	if (o->max_length && (o->max_length < o->length ||
			      !aligned(o->max_length, ps)))
		return -EINVAL;
	if (!!(o->flags & FAULTD_REGION_FIXED) != !!o->addr)
		return -EINVAL;
	if (o->addr && !aligned((uintptr_t)o->addr, ps))
		return -EINVAL;
	if (o->group && (o->group->ctx != ctx || o->handler_threads ||
			 ps > o->group->staging_len))
		return -EINVAL;
	if (numa_check(o->numa_policy, o->numa_node, o->numa_nodes) < 0)
		return -EINVAL;
	if (o->pager && (o->pager->size < sizeof(struct faultd_pager) ||
			 !o->pager->fill ||
			 (o->pager->flags & ~PAGER_KNOWN_FLAGS)))
		return -EINVAL;
	ret = region_fill_ahead_check(o, ps);
	return ret ? ret : region_budget_check(o, ps);
}

/* Free @r and what it owns; its memory is unmapped (or never was). */
static void region_free(struct faultd_region *r)
{
	restore_free(r);
	heap_free(r->heap);
	evict_free(r);
	prefetch_free(r);
	free(r->bg_stats);
	sigbus_free(r);
	pager_put(r->pager);
	pcache_put(r->cache);
	if (r->memfd >= 0)
		close(r->memfd);
	free((void *)atomic_load(&r->cow_own));
	free(r->stats);
	free((void *)r->dirty);
	pthread_rwlock_destroy(&r->dirty_lock);
	for (int i = 0; i < WP_CLAIMS; i++)
		pthread_mutex_destroy(&r->wp_claim[i]);
	pthread_rwlock_destroy(&r->lock);
	free(r);
}

/*
 * Free a region that never became visible. A pager the caller passed in
 * options stays the caller's: its release() is not called (the contract
 * of faultd_region_create()).
 */
static void region_free_unborn(struct faultd_region *r, bool callers_pager)
{
	if (callers_pager && r->pager)
		pager_disown(r->pager);
	region_free(r);
}

/* Take over what a library-internal creation hands to the region. */
static void region_take_init(struct faultd_region *r,
			     const struct region_init *init)
{
	r->kind = init->kind;
	r->cache = init->cache;
	if (init->cache) /* a clone's view of its frozen parent */
		r->ops = &view_ops;
	r->memfd = init->memfd;
	r->pager = init->pager;
	r->wp_registered = init->wp_registered;
}

/* Release what a library-internal creation handed over, on failure. */
static void region_init_release(const struct region_init *init)
{
	if (!init)
		return;
	pcache_put(init->cache);
	pager_put(init->pager);
	if (init->memfd >= 0)
		close(init->memfd);
}

/* Served by the file pager, with pages of the base size, by handlers. */
static bool region_plain_file(const struct faultd_ctx *ctx,
			      const struct faultd_region_opts *o, size_t ps)
{
	return o->pager && pager_is_file(o->pager) &&
	       ps == (size_t)ctx->page_size &&
	       !(o->flags & FAULTD_REGION_SAME_THREAD);
}

/*
 * The fault-around and read-ahead of a region: as asked, or the defaults -
 * on for regions served by the file pager (64 KiB, like the kernel's
 * fault_around_bytes, and up to 2 MiB ahead), off otherwise. A region
 * with a budget has no fault-around (it maps pages one by one to see them
 * used) and reads ahead at most a quarter of its budget.
 */
static size_t region_fault_around(const struct faultd_ctx *ctx,
				  const struct faultd_region_opts *o, size_t ps)
{
	if (o->fault_around > FAULTD_FAULT_AROUND_OFF)
		return o->fault_around;
	if (!o->fault_around && region_plain_file(ctx, o, ps) && !o->budget)
		return 64ul << 10;
	return 0;
}

static void region_fill_ahead(struct faultd_region *r,
			      const struct faultd_region_opts *o)
{
	r->fault_around = region_fault_around(r->ctx, o, r->page_size);
	if (o->readahead_max > FAULTD_READAHEAD_OFF)
		r->ra_max = o->readahead_max;
	else if (!o->readahead_max &&
		 region_plain_file(r->ctx, o, r->page_size))
		r->ra_max = 2ul << 20;
	if (o->budget && r->ra_max > o->budget / 4)
		r->ra_max = o->budget / 4 & ~(r->page_size - 1);
}

static size_t region_max_len(const struct faultd_region_opts *o)
{
	return o->max_length > o->length ? o->max_length : o->length;
}

/*
 * Reserve the address space of a region with these options, aligned to
 * its fault-around window too: windows start at pages of the region that
 * are multiples of it.
 */
static int region_reserve(const struct faultd_ctx *ctx,
			  const struct faultd_region_opts *o, size_t ps,
			  uintptr_t *base)
{
	size_t fa = region_fault_around(ctx, o, ps);

	return mem_reserve(o->addr, region_max_len(o), fa > ps ? fa : ps,
			   base);
}

/* A region over the reservation at @base; NULL if out of memory. */
static struct faultd_region *region_alloc(struct faultd_ctx *ctx,
					  const struct faultd_region_opts *o,
					  const struct region_init *init,
					  size_t ps, uintptr_t base)
{
	struct faultd_region *r = fd_calloc(1, sizeof(*r));

	if (!r) {
		region_init_release(init);
		return NULL;
	}
	r->base = base;
	r->memfd = -1;
	r->sig_slot = -1;
	r->ops = &missing_ops; /* until it gets content of another kind */
	if (init)
		region_take_init(r, init);
	if (rwlock_init_writer_pref(&r->lock) < 0) {
		region_init_release(init);
		free(r);
		return NULL;
	}
	pthread_rwlock_init(&r->dirty_lock, NULL);
	for (int i = 0; i < WP_CLAIMS; i++)
		pthread_mutex_init(&r->wp_claim[i], NULL);
	r->ctx = ctx;
	r->flags = o->flags;
	if (!init)
		r->kind = kind_of(o->flags);
	r->page_size = ps;
	atomic_init(&r->len, o->length);
	r->max_len = region_max_len(o);
	if (!init && o->pager && !(r->pager = pager_ref_new(o->pager))) {
		region_free(r);
		return NULL;
	}
	r->wp_mode = (o->flags & FAULTD_REGION_WP)	 ? WP_SYNC
		     : (o->flags & FAULTD_REGION_WP_ASYNC) ? WP_ASYNC
							   : WP_NONE;
	r->wp_registered |= r->wp_mode != WP_NONE;
	r->write_hook = o->write_hook;
	r->hook_arg = o->hook_arg;
	region_fill_ahead(r, o);
	r->numa_policy = o->numa_policy;
	r->numa_node = o->numa_node;
	r->numa_nodes = o->numa_nodes;
	r->bg_stats = fd_aligned_alloc(CACHELINE, sizeof(*r->bg_stats));
	if (!r->bg_stats ||
	    (r->wp_mode == WP_SYNC && dirty_alloc(r, r->max_len) < 0) ||
	    evict_setup(r, o) < 0) {
		region_free_unborn(r, !init);
		return NULL;
	}
	memset(r->bg_stats, 0, sizeof(*r->bg_stats));
	snprintf(r->name, sizeof(r->name), "%s", o->name ? o->name : "region");
	return r;
}

/* Attach @r to its group: the caller's, or a new one of its own. */
static int region_attach_group(struct faultd_region *r,
			       const struct faultd_region_opts *o,
			       bool deferred)
{
	struct faultd_group *g = o->group;
	unsigned int n = o->handler_threads ? o->handler_threads
					    : r->ctx->handler_threads;
	int ret;

	if (!g) {
		struct group_policy pol = {
			.threads = n,
			.placement = o->placement,
			.cpu = o->cpu,
			.busy_poll_us = o->busy_poll_us,
			.numa_node = o->numa_policy == FAULTD_NUMA_BIND
					     ? (int)o->numa_node
					     : -1,
			.staging_len = r->page_size,
			.features = GROUP_FEATURES,
			.deferred = deferred,
		};

		if (r->wp_mode == WP_ASYNC)
			pol.features |= UFFD_FEATURE_WP_ASYNC;
		if (r->flags & FAULTD_REGION_SAME_THREAD) {
			pol.features |= UFFD_FEATURE_SIGBUS;
			pol.threads = 0;
		}
		ret = group_create(r->ctx, &pol, true, &g);
		if (ret < 0)
			return ret;
	}
	r->group = g;
	r->nr_stats = g->nthreads;
	r->stats = fd_aligned_alloc(CACHELINE, (g->nthreads ? g->nthreads : 1) *
						       sizeof(*r->stats));
	if (!r->stats)
		return -ENOMEM;
	memset(r->stats, 0, (g->nthreads ? g->nthreads : 1) * sizeof(*r->stats));
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

/*
 * The context's lists change under map_lock (write) and stats_lock, so
 * that faultd_ctx_stats() can walk them under stats_lock alone.
 */
static void region_link_locked(struct faultd_region *r)
{
	struct faultd_ctx *ctx = r->ctx;

	assert_map_write_held(r->ctx);
	pthread_mutex_lock(&ctx->stats_lock);
	r->next = ctx->regions;
	if (r->next)
		r->next->pprev = &r->next;
	r->pprev = &ctx->regions;
	ctx->regions = r;
	r->group->nregions++;
	if (r->group->implicit)
		group_link_locked(r->group);
	pthread_mutex_unlock(&ctx->stats_lock);
}

/*
 * Unlink @r and fold its counters into the context's, in one step. The
 * lists are doubly linked so that destroying n regions costs O(n), not
 * O(n^2): with 16,000 regions the walk was 40% of the time.
 */
static void region_unlink_locked(struct faultd_region *r)
{
	struct faultd_ctx *ctx = r->ctx;

	assert_map_write_held(r->ctx);
	pthread_mutex_lock(&ctx->stats_lock);
	*r->pprev = r->next;
	if (r->next)
		r->next->pprev = r->pprev;
	r->group->nregions--;
	if (r->group->implicit)
		group_unlink_locked(r->group);
	ctx_retire_stats_locked(ctx, r->stats, r->nr_stats);
	ctx_retire_stats_locked(ctx, r->bg_stats, 1);
	pthread_mutex_unlock(&ctx->stats_lock);
}


/*
 * region_create() - create a region from checked options; @init (may be
 * NULL) is what the library hands over for a clone. On failure everything
 * @init handed over is released.
 */
int region_create(struct faultd_ctx *ctx, const struct faultd_region_opts *o,
		  const struct region_init *init, struct faultd_region **rp)
{
	struct region_map *old = NULL;
	struct faultd_region *r;
	uintptr_t base;
	long ps;
	int ret;

	ps = region_page_size(ctx, o);
	ret = ps < 0 ? (int)ps : region_opts_check(ctx, o, (size_t)ps);
	if (!ret && in_handler_of(ctx))
		ret = -EDEADLK;
	/* Before anything else maps memory: it could take a fixed address. */
	if (!ret)
		ret = region_reserve(ctx, o, (size_t)ps, &base);
	if (ret < 0) {
		region_init_release(init);
		return ret;
	}
	r = region_alloc(ctx, o, init, (size_t)ps, base);
	if (!r) { /* what @init handed over is released */
		mem_release(base, region_max_len(o));
		return -ENOMEM;
	}
	/* Threads: their errors (-EAGAIN) are not region_alloc()'s -ENOMEM. */
	ret = prefetch_setup(r);
	if (!ret)
		ret = evict_start(r);
	if (!ret)
		ret = region_attach_group(r, o, init && init->deferred);
	if (ret < 0)
		goto err_unmap;

	map_write_lock(ctx);
	ret = mem_map(r);
	if (!ret && (r->flags & FAULTD_REGION_SAME_THREAD))
		ret = sigbus_add(r);
	/* Accessible once registered and its faults can be resolved: in a
	 * signal handler from here on, by the handlers after the unlock. */
	if (!ret)
		ret = mem_expose(r);
	if (!ret)
		ret = map_insert_locked(ctx, r, &old);
	if (ret < 0)
		goto err_unlock;
	region_link_locked(r);
	map_write_unlock(ctx);

	map_free_after_gp(old);
	*rp = r;
	return 0;

err_unlock:
	sigbus_remove(r);
	map_write_unlock(ctx);
err_unmap:
	/* Unmapped before the group's userfaultfd closes, which would leave
	 * what is mapped accessible without its registration. */
	mem_unmap(r);
	region_detach_group(r);
	region_free_unborn(r, !init);
	return ret;
}

FAULTD_EXPORT int faultd_region_create(struct faultd_ctx *ctx,
				       const struct faultd_region_opts *opts,
				       struct faultd_region **regionp)
{
	struct faultd_region_opts o;
	int ret;

	if (!ctx || !opts || !regionp)
		return -EINVAL;
	/* Fields after name are optional for callers built before them. */
	ret = opts_copy(&o, sizeof(o), opts,
			offsetof(struct faultd_region_opts, name) +
				sizeof(o.name));
	if (ret < 0)
		return ret;
	if (o.budget) /* its pages live in a page cache: see evict.c */
		o.flags |= FAULTD_REGION_MEMFD;
	return region_create(ctx, &o, NULL, regionp);
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
	uint64_t held = region_write_lock_locked(r);

	assert_map_write_held(r->ctx);
	r->dead = true;
	sigbus_remove(r);
	/*
	 * munmap() before any wake: a thread woken while the range is still
	 * mapped would re-fault, and once the registration is gone the
	 * kernel would fill the page with zeros.
	 */
	mem_unmap(r);
	region_write_unlock_locked(r, held);
	region_unlink_locked(r);
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
	/* Before any lock: their threads take the region's lock. */
	restore_stop(r);
	prefetch_quiesce(r);
	evict_stop(r);
	clone_parent_destroy(r);
	len = atomic_load(&r->len);
	map_write_lock(ctx);
	old = region_kill_locked(r);
	clone_child_destroy_locked(r);
	/*
	 * Threads still asleep on a fault here now get SIGSEGV. Before the
	 * unlock: once it is dropped, a new region of the group may be
	 * mapped at this address, and the wake would send its faulting
	 * threads back to fault again - a second message for each.
	 */
	uffd_wake(g->uffd, r->base, len);
	map_write_unlock(ctx);

	/* After the grace period no RCU reader can reach @r. */
	map_free_after_gp(old);
	if (g->implicit) {
		group_stop(g);
		group_free(g);
	}
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

FAULTD_EXPORT size_t faultd_region_page_size(const struct faultd_region *r)
{
	return r ? r->page_size : 0;
}

FAULTD_EXPORT int faultd_region_memfd(const struct faultd_region *r)
{
	return r && r->memfd >= 0 ? r->memfd : -EINVAL;
}

static int region_resize_locked(struct faultd_region *r, size_t old_len,
				size_t len)
{
	int ret = 0;

	assert_map_write_held(r->ctx);
	assert_rwlock_held(&r->lock);
	if (len > old_len && r->wp_mode == WP_SYNC)
		ret = dirty_alloc(r, len);
	if (!ret && len > old_len)
		ret = evict_grow(r, len);
	if (!ret && len > old_len) {
		ret = mem_grow(r, old_len, len);
	} else if (len < old_len) {
		/* The cut tail's writes go with it, as with ftruncate(). */
		dirty_clear(r, len, old_len - len);
		evict_shrink(r, old_len, len);
		mem_shrink(r, old_len, len);
	}
	if (!ret)
		atomic_store(&r->len, len);
	return ret;
}

FAULTD_EXPORT int faultd_region_resize(struct faultd_region *r, size_t len)
{
	struct faultd_ctx *ctx;
	size_t old_len;
	uint64_t held;
	int ret;

	if (!r || !len || !aligned(len, r->page_size))
		return -EINVAL;
	ctx = r->ctx;
	if (in_handler_of(ctx))
		return -EDEADLK;
	map_write_lock(ctx);
	held = region_write_lock_locked(r);
	old_len = atomic_load(&r->len);
	if (r->snaps || r->cow)
		ret = -EBUSY; /* clones read the parent as it was */
	else if (!r->ops->resize || r->sig_slot >= 0)
		ret = -EOPNOTSUPP; /* a frozen view; or in the SIGBUS table */
	else
		ret = region_resize_locked(r, old_len, len);
	region_write_unlock_locked(r, held);
	map_write_unlock(ctx);
	/* Threads asleep on a fault in the cut tail get SIGSEGV. */
	if (!ret && len < old_len)
		uffd_wake(r->group->uffd, r->base + len, old_len - len);
	return ret;
}

FAULTD_EXPORT int faultd_region_discard(struct faultd_region *r,
					uint64_t off, size_t len)
{
	size_t cur;
	int ret;

	if (!r || !len || !aligned(off, r->page_size) ||
	    !aligned(len, r->page_size))
		return -EINVAL;
	if (in_handler_of(r->ctx))
		return -EDEADLK;
	pthread_rwlock_rdlock(&r->lock);
	cur = atomic_load(&r->len);
	if (off >= cur || len > cur - off)
		ret = -EINVAL;
	else if (r->snaps)
		ret = -EBUSY;
	else if (!r->ops->discard)
		ret = -EOPNOTSUPP;
	else /* the content goes, and its writes with it */
		ret = r->ops->discard(r, off, len);
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
	if (r->bg_stats)
		stat_sum(&acc, r->bg_stats);
	stat_export(stats, &acc);
	return 0;
}
