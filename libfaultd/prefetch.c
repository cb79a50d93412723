// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * prefetch.c - filling pages before they are faulted: the prefetch workers
 * of a context, faultd_region_prefetch(), and read-ahead.
 *
 * A context has one pool of worker threads, started by the first region
 * that needs it. Requests are (region, range) in a fixed ring: queueing one
 * from the fault path takes a short lock and allocates nothing. A worker
 * fills at most PF_CHUNK of a request at a time and puts the rest back at
 * the tail, so that a large prefetch does not hold up read-ahead and the
 * workers share it. Pages already present are left alone, and a page a
 * fault is filling is the fault's: workers and faults claim the pages they
 * read (fill.c), so no page is read twice.
 *
 * A region counts its requests in pf_pending. Destroying it first sets
 * pf_dying - from then on its requests are dropped - and waits for the
 * count to fall to zero, before it takes any lock; so a worker holds no
 * reference the region could outlive. Workers take the region's lock for
 * reading around each chunk, and inside the context lock where a fault
 * of the region would hold it: for a pager that is not concurrent, and in
 * FAULTD_LOCK_GLOBAL mode.
 *
 * Read-ahead, like the kernel's: a fault that continues the previous one
 * queues the next window; the window doubles while the sequence holds, up
 * to the region's readahead_max, and a fault elsewhere drops it. The
 * kernel marks a page of each window PG_readahead and starts the next
 * window when it is touched; here the marker is a page in the middle of
 * the window that the worker leaves missing, so that the reader faults on
 * it with half a window still ahead of it, and that fault queues the next.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <urcu/futex.h>

#include "internal.h"

#define PF_WORKERS 2
#define PF_QUEUE 1024
#define PF_CHUNK (512ul << 10)
#define RA_INIT (128ul << 10)
#define NO_MARKER UINT64_MAX

struct pf_req {
	struct faultd_region *r;
	uint64_t off;
	size_t len;
	uint64_t marker; /* a page to leave missing, or NO_MARKER */
};

struct pf_pool {
	struct faultd_ctx *ctx;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	unsigned int head, n; /* the ring, under lock */
	struct pf_req q[PF_QUEUE];
	unsigned int nthreads;
	pthread_t threads[PF_WORKERS];
	void *staging[PF_WORKERS];
};

/* The read-ahead state of a region, under its lock. */
struct readahead {
	pthread_mutex_t lock;
	uint64_t prev_end; /* where the last fault's fill ended */
	uint64_t marker;   /* the fault that continues the sequence */
	uint64_t q_start;  /* [q_start, q_end): queued in this sequence */
	uint64_t q_end;
	size_t win;	   /* the last window; 0: no sequence */
};

/* ------------------------------------------------------------------------
 * Filling: what a worker does with one chunk.
 */

/*
 * copy_run() - fill [off, off + len), claimed, from the pager (or zeros)
 * and install it with UFFDIO_COPY, write-protected where writes are
 * tracked (the pages are clean); a page found present is stepped over.
 * Returns whether every page is in.
 */
static bool copy_run(struct faultd_region *r, uint64_t off, size_t len,
		     void *buf)
{
	const void *src = r->ctx->zero_page;
	struct fill_result res;
	ssize_t n;
	int err;

	if (r->pager) {
		n = pager_call_fill(r, r->pager, off, buf, len);
		if (n < 0) { /* the fault that needs it will report it */
			stat_add_shared(r->bg_stats, ST_PAGER_ERRORS, 1);
			return false;
		}
		stat_add_shared(r->bg_stats, ST_BYTES_READ, (uint64_t)n);
		install_fill_tail(buf, n, len);
		src = buf;
	}
	err = fill_copy(r, off, src, len, r->wp_mode != WP_NONE ? INST_WP : 0,
			UINT64_MAX, &res);
	stat_add_shared(r->bg_stats, ST_READAHEAD, res.installed / r->page_size);
	return !err;
}

/*
 * copy_populate() - fill the missing pages of [off, off + len) (len <=
 * PF_CHUNK) but the marker: claimed span by span (fill.c), each missing
 * run of a span read and installed at once.
 */
static void copy_populate(struct faultd_region *r, uint64_t off, size_t len,
			  uint64_t marker, void *buf)
{
	size_t ps = r->page_size;

	for (uint64_t o = off; o < off + len;) {
		uint64_t hi = marker > o && marker < off + len ? marker
							       : off + len;
		struct fill_span sp;
		bool all = true;
		size_t n;

		if (o == marker || !fill_claim(r, o, o, hi, &sp)) {
			o += ps;
			continue;
		}
		for (uint64_t at = sp.start; (n = fill_run(r, &sp, &at));
		     at += n)
			all &= copy_run(r, at, n, (char *)buf + (at - off));
		fill_release(r, &sp, !all);
		o = sp.end;
	}
}

/*
 * pcache_map() - map [off, off + len) from the page cache, write-protected
 * (clean). A page that another thread mapped first, or one gone, is
 * stepped over; one that cannot be mapped now (an event is pending, or
 * the ioctl fails) is left to the fault that needs it, which maps it.
 */
static void pcache_map(struct faultd_region *r, uint64_t off, size_t len)
{
	struct inst_req q = { .uffd = r->group->uffd, .op = INST_CONTINUE,
			      .flags = INST_WP, .dst = r->base + off,
			      .len = len, .page_size = r->page_size };
	struct inst_res res;

	install_range(&q, &res);
}

/*
 * pcache_run() - pages [off, off + len) of a region with a budget, claimed
 * by the caller and charged to the budget: fill them in the page cache
 * and map them (write-protected: they are clean).
 */
static void pcache_run(struct faultd_region *r, uint64_t off, size_t len)
{
	struct page_cache *b = r->cache;
	size_t ps = r->page_size;
	ssize_t n = pager_call_fill(r, b->pager, off, b->alias + off, len);

	if (n < 0) {
		stat_add_shared(r->bg_stats, ST_PAGER_ERRORS, 1);
		/* Give back what the fill allocated; faults try again. */
		(void)!fallocate(b->memfd,
				 FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				 (off_t)off, (off_t)len);
		evict_unreserve(r, len / ps);
		for (uint64_t o = off; o < off + len; o += ps)
			pcache_release(pcache_state(b, o), PAGE_NONE);
		return;
	}
	stat_add_shared(r->bg_stats, ST_BYTES_READ, (uint64_t)n);
	install_fill_tail(b->alias + off, n, len);
	pcache_map(r, off, len);
	evict_mapped(r, off, len);
	for (uint64_t o = off; o < off + len; o += ps)
		pcache_release(pcache_state(b, o), PAGE_READY);
	stat_add_shared(r->bg_stats, ST_READAHEAD, len / ps);
}

/*
 * pcache_populate() - the same for a region with a budget: pages not in the
 * page cache are claimed without waiting (a page someone else holds is
 * skipped), in runs, each charged to the budget, filled and mapped at
 * once. The part of a run the budget has no room for is let go: room is
 * made holding no page (evict.c), and the rest claimed again - unless the
 * pages in the budget cannot be written back: then the rest is left to
 * the faults, which may go over the budget, and read-ahead may not.
 */
static void pcache_populate(struct faultd_region *r, uint64_t off, size_t len,
			  uint64_t marker)
{
	size_t ps = r->page_size;

	for (uint64_t o = off; o < off + len;) {
		uint64_t start = o;
		size_t n, got;

		while (o < off + len && o != marker &&
		       pcache_trylock(pcache_state(r->cache, o), PAGE_NONE))
			o += ps;
		if (o == start) {
			o += ps;
			continue;
		}
		n = (o - start) / ps;
		got = evict_reserve(r, n, false);
		for (size_t i = got; i < n; i++)
			pcache_release(pcache_state(r->cache, start + i * ps),
				     PAGE_NONE);
		if (got)
			pcache_run(r, start, got * ps);
		else if (evict_make_room(r))
			return;
		o = start + got * ps;
	}
}

/*
 * Is a chunk filled under the context lock? Where a fault would be: its
 * pager is not concurrent (vmf_can_call_fault()), or every resolution
 * takes the lock (FAULTD_LOCK_GLOBAL: read-ahead under mmap_lock, as the
 * kernel's before per-VMA locks).
 */
static bool needs_ctx_lock(const struct faultd_region *r)
{
	struct pager_ref *p = r->cache ? r->cache->pager : r->pager;

	return lock_global(r->ctx) || (p && !pager_concurrent(p));
}

/* Fill one chunk of a request; the caller keeps the region alive. */
static void pf_fill(struct faultd_region *r, uint64_t off, size_t len,
		    uint64_t marker, void *buf)
{
	bool locked = needs_ctx_lock(r);
	size_t cur;

	if (locked)
		map_read_lock(r->ctx);
	pthread_rwlock_rdlock(&r->lock);
	cur = atomic_load(&r->len);
	if (!r->dead && off < cur) {
		if (len > cur - off)
			len = cur - off;
		if (r->ev)
			pcache_populate(r, off, len, marker);
		else
			copy_populate(r, off, len, marker, buf);
	}
	pthread_rwlock_unlock(&r->lock);
	if (locked)
		map_read_unlock(r->ctx);
}

/* ------------------------------------------------------------------------
 * The pool.
 */

static void pf_done(struct faultd_region *r)
{
	if (atomic_fetch_sub(&r->pf_pending, 1) == 1)
		futex_noasync((int32_t *)&r->pf_pending, FUTEX_WAKE, INT_MAX,
			      NULL, NULL, 0);
}

/* Put @req in the ring. Returns false if it is full. */
static bool pf_push(struct pf_pool *pool, const struct pf_req *req)
{
	bool ok;

	pthread_mutex_lock(&pool->lock);
	ok = pool->n < PF_QUEUE;
	if (ok) {
		pool->q[(pool->head + pool->n++) % PF_QUEUE] = *req;
		pthread_cond_signal(&pool->cond);
	}
	pthread_mutex_unlock(&pool->lock);
	return ok;
}

/* Take the oldest request; false when the pool stops. */
static bool pf_pop(struct pf_pool *pool, struct pf_req *req)
{
	bool got;

	pthread_mutex_lock(&pool->lock);
	while (!pool->n && !pool->stop)
		pthread_cond_wait(&pool->cond, &pool->lock);
	got = pool->n;
	if (got) {
		*req = pool->q[pool->head];
		pool->head = (pool->head + 1) % PF_QUEUE;
		pool->n--;
	}
	pthread_mutex_unlock(&pool->lock);
	return got;
}

/*
 * Work on @req a chunk at a time; put the rest back when there is room,
 * so that other requests get their turn.
 */
static void pf_run(struct pf_pool *pool, struct pf_req *req, void *buf)
{
	struct faultd_region *r = req->r;

	while (req->len && !atomic_load(&r->pf_dying)) {
		size_t step = req->len < PF_CHUNK ? req->len : PF_CHUNK;

		pf_fill(r, req->off, step, req->marker, buf);
		req->off += step;
		req->len -= step;
		if (req->len && pf_push(pool, req))
			return; /* still pending */
	}
	pf_done(r);
}

struct pf_worker {
	struct pf_pool *pool;
	unsigned int i;
};

static void *pf_main(void *arg)
{
	struct pf_worker w = *(struct pf_worker *)arg;
	struct pf_req req;

	free(arg);
	while (pf_pop(w.pool, &req))
		pf_run(w.pool, &req, w.pool->staging[w.i]);
	return NULL;
}

static int pf_start(struct pf_pool *pool, unsigned int i)
{
	struct pf_worker *w = fd_malloc(sizeof(*w));
	int ret;

	pool->staging[i] = mmap(NULL, PF_CHUNK, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!w || pool->staging[i] == MAP_FAILED) {
		if (pool->staging[i] != MAP_FAILED)
			munmap(pool->staging[i], PF_CHUNK);
		pool->staging[i] = NULL;
		free(w);
		return -ENOMEM;
	}
	*w = (struct pf_worker){ .pool = pool, .i = i };
	ret = thread_start(&pool->threads[i], pf_main, w, "faultd-prefetch");
	if (ret < 0)
		free(w);
	return ret;
}

static void pool_free(struct pf_pool *pool)
{
	pthread_mutex_lock(&pool->lock);
	pool->stop = true;
	pthread_cond_broadcast(&pool->cond);
	pthread_mutex_unlock(&pool->lock);
	for (unsigned int i = 0; i < pool->nthreads; i++)
		pthread_join(pool->threads[i], NULL);
	for (unsigned int i = 0; i < PF_WORKERS; i++)
		if (pool->staging[i])
			munmap(pool->staging[i], PF_CHUNK);
	pthread_cond_destroy(&pool->cond);
	pthread_mutex_destroy(&pool->lock);
	free(pool);
}

/* The context's pool, started on first use. Not from a handler thread. */
static struct pf_pool *pf_pool_get(struct faultd_ctx *ctx, int *err)
{
	struct pf_pool *pool;

	pthread_mutex_lock(&ctx->pf_lock);
	pool = ctx->pf;
	if (pool)
		goto out;
	pool = fd_calloc(1, sizeof(*pool));
	*err = -ENOMEM;
	if (!pool)
		goto out;
	pool->ctx = ctx;
	pthread_mutex_init(&pool->lock, NULL);
	pthread_cond_init(&pool->cond, NULL);
	for (unsigned int i = 0; i < PF_WORKERS; i++) {
		*err = pf_start(pool, i);
		if (*err < 0)
			break;
		pool->nthreads++;
	}
	if (!pool->nthreads) {
		pool_free(pool);
		pool = NULL;
		goto out;
	}
	ctx->pf = pool;
out:
	pthread_mutex_unlock(&ctx->pf_lock);
	return pool;
}

void pf_pool_destroy(struct faultd_ctx *ctx)
{
	if (ctx->pf)
		pool_free(ctx->pf);
	ctx->pf = NULL;
}

/*
 * pf_queue() - queue [off, off + len) of @r. The region's lock or the
 * context lock is held, or the caller owns @r: it is not being destroyed
 * unless pf_dying is set. pf_pending is raised before pf_dying is read and
 * prefetch_quiesce() does the opposite, so either the request is dropped
 * here or the destroyer waits for it.
 * Returns 0, -ENODEV (dying), -EAGAIN (the ring is full).
 */
static int pf_queue(struct faultd_region *r, uint64_t off, size_t len,
		    uint64_t marker)
{
	struct pf_req req = { r, off, len, marker };

	atomic_store(&r->pf_used, true);
	atomic_fetch_add(&r->pf_pending, 1);
	if (atomic_load(&r->pf_dying)) {
		pf_done(r);
		return -ENODEV;
	}
	if (!pf_push(r->ctx->pf, &req)) {
		pf_done(r);
		return -EAGAIN;
	}
	return 0;
}

/* ------------------------------------------------------------------------
 * Read-ahead.
 */

/* Clip the window [start, start + win) to the region; 0 if nothing left. */
static size_t ra_clip(const struct faultd_region *r, uint64_t start,
		      size_t win)
{
	size_t cur = atomic_load(&r->len);

	if (start >= cur)
		return 0;
	return win < cur - start ? win : cur - start;
}

/* The next window after @win while a sequence holds. */
static size_t ra_grow(const struct faultd_region *r, size_t win)
{
	size_t init = 2 * r->fault_around > RA_INIT ? 2 * r->fault_around
						    : RA_INIT;

	win = win ? 2 * win : init;
	return win < r->ra_max ? win : r->ra_max;
}

/*
 * ra_next() - queue the window after what is queued (or after @end), and
 * set the marker whose fault will continue the sequence.
 * Returns the window's length (0: the region ends); *start, *marker.
 * Context: ra->lock held.
 */
static size_t ra_next(struct faultd_region *r, struct readahead *ra,
		      uint64_t end, uint64_t *start, uint64_t *marker)
{
	size_t win;

	ra->win = ra_grow(r, ra->win);
	*start = end > ra->q_end ? end : ra->q_end;
	if (!ra->q_end)
		ra->q_start = *start;
	win = ra_clip(r, *start, ra->win);
	ra->q_end = *start + win;
	*marker = NO_MARKER;
	if (win >= 2 * r->page_size)
		*marker = *start + (win / 2 & ~(uint64_t)(r->page_size - 1));
	ra->marker = *marker != NO_MARKER ? *marker : ra->q_end;
	return win;
}

/*
 * readahead_fault() - a fault at @off filled [.., @end). The marker (or a
 * fault just after the previous one's fill) continues the sequence: the
 * next window is queued. A fault inside what is queued means the workers
 * are behind the reader: nothing changes. Anywhere else the sequence is
 * broken and read-ahead stops until a new one starts.
 * Context: a handler thread holding the region (fault path).
 */
void readahead_fault(struct faultd_region *r, struct stat_block *st,
		     uint64_t off, uint64_t end)
{
	struct readahead *ra = r->ra;
	uint64_t start = 0, marker = NO_MARKER;
	size_t win = 0;

	pthread_mutex_lock(&ra->lock);
	if (off == ra->marker) {
		stat_inc(st, ST_RA_HITS);
		win = ra_next(r, ra, end, &start, &marker);
	} else if (off >= ra->q_start && off < ra->q_end) {
		/* behind: the workers will skip what this fault filled */
	} else if (off == ra->prev_end) {
		win = ra_next(r, ra, end, &start, &marker);
	} else {
		ra->win = 0;
		ra->q_start = ra->q_end = 0;
		ra->marker = NO_MARKER;
	}
	ra->prev_end = end;
	pthread_mutex_unlock(&ra->lock);
	if (win)
		pf_queue(r, start, win, marker);
}

/* ------------------------------------------------------------------------
 * Regions.
 */

/*
 * prefetch_setup() - read-ahead state and the workers, for a new region,
 * and the claims that keep them and the faults from reading a page twice.
 */
int prefetch_setup(struct faultd_region *r)
{
	int err = fill_setup(r);

	if (err < 0 || !r->ra_max)
		return err;
	r->ra = fd_calloc(1, sizeof(*r->ra));
	if (!r->ra)
		return -ENOMEM;
	pthread_mutex_init(&r->ra->lock, NULL);
	r->ra->prev_end = r->ra->marker = NO_MARKER;
	return pf_pool_get(r->ctx, &err) ? 0 : err;
}

static void pf_wait(struct faultd_region *r)
{
	int v;

	while ((v = atomic_load(&r->pf_pending)))
		futex_noasync((int32_t *)&r->pf_pending, FUTEX_WAIT, v, NULL,
			      NULL, 0);
}

/* prefetch_quiesce() - drop the region's requests and wait for them. */
void prefetch_quiesce(struct faultd_region *r)
{
	atomic_store(&r->pf_dying, true);
	pf_wait(r);
}

void prefetch_free(struct faultd_region *r)
{
	fill_free(r);
	if (!r->ra)
		return;
	pthread_mutex_destroy(&r->ra->lock);
	free(r->ra);
	r->ra = NULL;
}

/* Regions whose pages a worker can fill: see the header. */
static int prefetch_supported(const struct faultd_region *r)
{
	if (r->snaps)
		return -EBUSY;
	if (!r->ops->prefetch || r->page_size != (size_t)r->ctx->page_size)
		return -EOPNOTSUPP;
	return 0;
}

FAULTD_EXPORT int faultd_region_prefetch(struct faultd_region *r,
					 uint64_t off, size_t len)
{
	size_t cur;
	int ret = 0;

	if (!r || !len || (off | len) & (r->page_size - 1))
		return -EINVAL;
	if (in_handler_of(r->ctx))
		return -EDEADLK;
	cur = atomic_load(&r->len);
	if (off >= cur || len > cur - off)
		return -EINVAL;
	ret = prefetch_supported(r);
	if (!ret && !pf_pool_get(r->ctx, &ret))
		return ret;
	return ret ? ret : pf_queue(r, off, len, NO_MARKER);
}

FAULTD_EXPORT int faultd_region_prefetch_wait(struct faultd_region *r)
{
	if (!r)
		return -EINVAL;
	if (in_handler_of(r->ctx))
		return -EDEADLK;
	pf_wait(r);
	return 0;
}
