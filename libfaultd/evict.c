// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * evict.c - bounded memory and write-back: a region's resident budget and
 * the CLOCK that chooses what to evict.
 *
 * A region with a budget is a memfd with a page cache (pcache.c): its
 * pages are prepared in the page cache and mapped with UFFDIO_CONTINUE,
 * always write-protected, so the first write to each is a write-protect
 * fault that marks it dirty (dirty.c). "Resident" means in the page
 * cache: the pages the memfd has allocated.
 *
 * The budget is a limit, not a target. The fault path and the prefetch
 * workers charge a page to it (evict_reserve()) before they bring it into
 * the page cache, and only as far as it fits; pages leave the count only
 * once they have left the page cache. So the count, and with it what the
 * memfd holds, never exceeds the budget, at any instant. A thread that
 * finds it full makes room itself (evict_make_room(), the kernel's direct
 * reclaim: it evicts a batch, or waits while another thread evicts) and
 * charges again. To keep faults from waiting for that, the evictor thread
 * is woken halfway from budget_low to the budget, and evicts down to
 * budget_low.
 *
 * CLOCK (second chance): a page is "used" when it is mapped - by a fault,
 * or a prefetch - which sets its bit in ref. The hand sweeps the pages in
 * the page cache; a used page has its bit cleared and its mapping zapped
 * (MADV_DONTNEED on the shared mapping: the page stays in the page cache),
 * so that the next access to it is a minor fault that marks it used again;
 * a page not used since the hand last passed is evicted. The kernel's
 * accessed bits are not visible from user space without privileges
 * (idle-page tracking); the minor fault is our accessed bit.
 *
 * Eviction of a page never loses a write: the page is taken (BUSY: faults
 * on it wait), unmapped - after MADV_DONTNEED returns no CPU can write it
 * - then its dirty bit is taken under dirty_lock for writing, which waits
 * for a handler that is between marking a page dirty and unprotecting it;
 * a dirty page is written back from the library's alias, and only then is
 * it punched out of the page cache. If the write-back fails the page stays,
 * dirty. A write that was held by its write-protect fault when the page was
 * taken is retried by the writer after the eviction, on a page read again.
 *
 * Lock order: region->lock (read) > ev->lock > dirty_lock. ev->lock makes
 * the evictor thread, the threads that make room, faultd_region_sync() and
 * discards of the region take turns. Nothing waits for a page (BUSY) while
 * it holds one, except sync and discard, which hold ev->lock - so no
 * evictor holds one then; and a thread that makes room holds no page while
 * it waits for ev->lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

#define EVICT_BATCH 256

struct evict {
	size_t high;		/* pages: the budget, never exceeded */
	size_t low;		/* the evictor thread stops there */
	size_t wake;		/* the evictor thread is woken past it */
	size_t batch;		/* what a thread that makes room evicts */
	/* Pages in the page cache, and those charged to come in: a page is
	 * added before it comes in, subtracted once it has gone. */
	atomic_size_t resident;
	_Atomic uint64_t *ref;	/* a bit per page: used since the hand passed */
	size_t ref_words;

	atomic_size_t maps;	/* pages mapped so far: the application's pace */
	pthread_mutex_t lock;	/* eviction, sync and discard take turns */
	size_t hand;		/* page index, under lock */
	size_t kept;		/* under lock: victims of the last run that
				   stayed (write-back or punch failed) */
	size_t wrap_maps;	/* maps when the hand last passed page 0 */
	uint64_t victims[EVICT_BATCH];	/* page offsets, under lock */
	bool dirty[EVICT_BATCH];
	int32_t was[EVICT_BATCH];	/* discard: the states it took */

	pthread_t thread;
	bool started;
	pthread_mutex_t wait_lock;
	pthread_cond_t wait_cond;
	bool kicked, stopping;	/* under wait_lock */
	atomic_bool kick_pending;
};

static struct page_state *state(struct faultd_region *r, uint64_t off)
{
	return pcache_state(r->cache, off);
}

/* ------------------------------------------------------------------------
 * Eviction.
 */

/* Zap the mappings of [first, first + n) pages; the page cache keeps them. */
static void zap(struct faultd_region *r, size_t first, size_t n)
{
	if (n)
		madvise((char *)r->base + first * r->page_size,
			n * r->page_size, MADV_DONTNEED);
}

/*
 * The end of the run of victims from @i: consecutive pages that agree on
 * being dirty (with @by_dirty).
 */
static size_t run_end(const struct evict *ev, size_t i, size_t n, size_t ps,
		      bool by_dirty)
{
	size_t j = i + 1;

	while (j < n && ev->victims[j] == ev->victims[j - 1] + ps &&
	       (!by_dirty || ev->dirty[j] == ev->dirty[i]))
		j++;
	return j;
}

/* Punch [off, off + len) out of the page cache and forget its pages. */
static size_t drop_run(struct faultd_region *r, uint64_t off, size_t len)
{
	size_t ps = r->page_size;
	bool ok = !fallocate(r->cache->memfd,
			     FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			     (off_t)off, (off_t)len);

	if (!ok)
		fd_err(r->ctx, "%s: cannot punch offset %#llx: %s", r->name,
		       (unsigned long long)off, strerror(errno));
	for (uint64_t o = off; o < off + len; o += ps)
		pcache_release(state(r, o), ok ? PAGE_NONE : PAGE_READY);
	return ok ? len / ps : 0;
}

/* Write back the run of victims [i, j); returns false if it failed. */
static bool evict_writeback(struct faultd_region *r, struct evict *ev,
			    size_t i, size_t j)
{
	size_t ps = r->page_size, max = WRITEBACK_MAX / ps;

	for (size_t k = i; k < j; k += max) {
		size_t l = (j - k < max ? j - k : max) * ps;
		uint64_t off = ev->victims[k];

		if (pager_call_writeback(r, off, l, r->cache->alias + off) < 0)
			return false;
	}
	return true;
}

/*
 * evict_batch() - evict the @n victims the caller took (BUSY): unmap,
 * take their dirty bits, write the dirty ones back, then drop them. A run
 * whose write-back fails stays, dirty (counted in ev->kept, as pages that
 * cannot be punched). Returns the pages evicted.
 */
static size_t evict_batch(struct faultd_region *r, struct evict *ev, size_t n)
{
	size_t ps = r->page_size, gone = 0;

	for (size_t i = 0, j; i < n; i = j) {
		j = run_end(ev, i, n, ps, false);
		zap(r, ev->victims[i] / ps, j - i);
	}
	dirty_take_pages(r, ev->victims, n, ev->dirty);
	for (size_t i = 0, j; i < n; i = j) {
		j = run_end(ev, i, n, ps, true);
		if (ev->dirty[i] && !evict_writeback(r, ev, i, j)) {
			for (size_t k = i; k < j; k++)
				pcache_release(state(r, ev->victims[k]),
					     PAGE_READY);
			continue;
		}
		gone += drop_run(r, ev->victims[i], (j - i) * ps);
	}
	ev->kept += n - gone;
	/* Counted first: who takes the room sees the evictions that made it. */
	stat_add_shared(r->bg_stats, ST_EVICTIONS, gone);
	atomic_fetch_sub(&ev->resident, gone);
	return gone;
}

/* Clear the page's used bit; returns whether it was set. */
static bool ref_test_clear(struct evict *ev, size_t pg)
{
	return bitmap_test_and_clear(ev->ref, pg, memory_order_seq_cst);
}

/*
 * The hand starts a new round only once the application has mapped pages
 * since it started the last one: a page whose bit it cleared must have had
 * the time to be used again before it comes back, or CLOCK degrades to
 * FIFO (rounds that clear every bit and then evict everything). A thread
 * that needs room (@force) does not wait for that.
 */
static bool clock_may_wrap(struct evict *ev, bool force)
{
	size_t maps = atomic_load(&ev->maps);

	if (!force && maps - ev->wrap_maps < ev->high - ev->low)
		return false;
	ev->wrap_maps = maps;
	return true;
}

/* How clock_scan() goes. */
struct clock_pass {
	size_t steps;	  /* pages the hand may still pass */
	size_t blind;	  /* with fewer steps left, use is ignored */
	size_t max;	  /* victims wanted, up to EVICT_BATCH */
	bool force;	  /* a thread needs room: see clock_may_wrap() */
};

/*
 * clock_scan() - move the hand over up to c->steps pages: used pages get
 * a second chance (bit cleared, mapping zapped), the others are taken as
 * victims, up to c->max. Returns the number of victims.
 */
static size_t clock_scan(struct faultd_region *r, struct evict *ev,
			 size_t nr, struct clock_pass *c)
{
	size_t n = 0, zap_first = 0, zap_n = 0;

	while (n < c->max && c->steps) {
		size_t pg = ev->hand;
		struct page_state *s;
		int32_t v;

		if (!pg && !clock_may_wrap(ev, c->force)) {
			c->steps = 0;
			break;
		}
		s = state(r, pg * r->page_size);
		v = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
		ev->hand = pg + 1 < nr ? pg + 1 : 0;
		c->steps--;
		if (v != PAGE_READY && v != PAGE_STALE)
			continue;
		if (ref_test_clear(ev, pg) && c->steps >= c->blind) {
			if (zap_first + zap_n != pg) {
				zap(r, zap_first, zap_n);
				zap_first = pg;
				zap_n = 0;
			}
			zap_n++;
			continue;
		}
		if (pcache_trylock(s, v))
			ev->victims[n++] = pg * r->page_size;
	}
	zap(r, zap_first, zap_n);
	return n;
}

/*
 * evict_run() - evict until at most @target pages are resident. The
 * evictor thread stops when the hand has gone round once, or may not
 * start a new round yet (clock_may_wrap()): what is left is for its next
 * kick. A thread that needs room (@force) goes round up to three times:
 * the second round evicts what the first gave a second chance, the third
 * ignores use - so that it finds room whenever a page is not held, even
 * if the application uses every page faster than the hand passes.
 * Returns the pages evicted.
 * Context: ev->lock held; the caller keeps the region from changing (its
 * lock, or the context lock, held for reading).
 */
static size_t evict_run(struct faultd_region *r, size_t target, bool force)
{
	struct evict *ev = r->ev;
	size_t nr = atomic_load(&r->len) / r->page_size, done = 0;
	struct clock_pass c = { .steps = force ? 3 * nr : nr,
				.blind = force ? nr : 0,
				.force = force };

	if (ev->hand >= nr)
		ev->hand = 0;
	ev->kept = 0;
	while (c.steps) {
		size_t res = atomic_load(&ev->resident), n;

		if (res <= target)
			break;
		c.max = res - target < EVICT_BATCH ? res - target : EVICT_BATCH;
		n = clock_scan(r, ev, nr, &c);
		if (n)
			done += evict_batch(r, ev, n);
	}
	return done;
}

/* ------------------------------------------------------------------------
 * The evictor thread and the charge that wakes it.
 */

static void *evictor_main(void *arg)
{
	struct faultd_region *r = arg;
	struct evict *ev = r->ev;

	for (;;) {
		bool stop;

		pthread_mutex_lock(&ev->wait_lock);
		while (!ev->kicked && !ev->stopping)
			pthread_cond_wait(&ev->wait_cond, &ev->wait_lock);
		ev->kicked = false;
		stop = ev->stopping; /* read under wait_lock, as it is set */
		pthread_mutex_unlock(&ev->wait_lock);
		if (stop)
			break;
		pthread_rwlock_rdlock(&r->lock);
		pthread_mutex_lock(&ev->lock);
		if (!r->dead)
			evict_run(r, ev->low, false);
		pthread_mutex_unlock(&ev->lock);
		pthread_rwlock_unlock(&r->lock);
		atomic_store(&ev->kick_pending, false);
	}
	return NULL;
}

static void evictor_kick(struct evict *ev)
{
	if (atomic_exchange(&ev->kick_pending, true))
		return;
	pthread_mutex_lock(&ev->wait_lock);
	ev->kicked = true;
	pthread_cond_signal(&ev->wait_cond);
	pthread_mutex_unlock(&ev->wait_lock);
}

/*
 * evict_reserve() - charge up to @want pages that are about to come into
 * the page cache to the budget, as many as fit, or all of them @over it
 * (when evict_make_room() said so). Returns how many: 0 when the budget
 * is full (evict_make_room(), then try again). Past ev->wake the evictor
 * thread is woken.
 * Context: the fault path or a prefetch worker, holding the region.
 */
size_t evict_reserve(struct faultd_region *r, size_t want, bool over)
{
	struct evict *ev = r->ev;
	size_t res = atomic_load(&ev->resident), n;

	do {
		n = res < ev->high ? ev->high - res : 0;
		n = n < want && !over ? n : want;
	} while (n && !atomic_compare_exchange_weak(&ev->resident, &res,
						     res + n));
	if (res + n > ev->wake)
		evictor_kick(ev);
	return n;
}

/* evict_unreserve() - @pages charged by evict_reserve() never came in. */
void evict_unreserve(struct faultd_region *r, size_t pages)
{
	atomic_fetch_sub(&r->ev->resident, pages);
}

/*
 * evict_make_room() - the budget was full: evict a batch (down to
 * ev->batch below the budget), or, if the evictor thread is at work, wait
 * for it and see. When nothing could be evicted because every page in the
 * page cache is held - by threads that bring it in or map it, and will let
 * go - the caller yields to them before it tries again.
 * Returns true when nothing could be evicted because pages failed to go
 * (their write-back failed: they stay, dirty): then the caller may charge
 * its pages over the budget (evict_reserve()) - the budget never costs a
 * write, and no fault waits for a device that may never come back.
 * Context: the fault path or a prefetch worker, holding the region but no
 * page (none is held while waiting for ev->lock: see the lock order).
 */
bool evict_make_room(struct faultd_region *r)
{
	struct evict *ev = r->ev;
	size_t evicted = 0, kept = 0;
	bool full;

	pthread_mutex_lock(&ev->lock);
	full = atomic_load(&ev->resident) >= ev->high;
	if (full) {
		evicted = evict_run(r, ev->high - ev->batch, true);
		kept = ev->kept;
	}
	pthread_mutex_unlock(&ev->lock);
	if (full && !evicted && !kept)
		sched_yield();
	return full && !evicted && kept;
}

/* evict_mapped() - [off, off + len) was mapped: it is used. */
void evict_mapped(struct faultd_region *r, uint64_t off, size_t len)
{
	atomic_fetch_add_explicit(&r->ev->maps, len / r->page_size,
				  memory_order_relaxed);
	for (size_t pg = off / r->page_size; pg < (off + len) / r->page_size;
	     pg++)
		bitmap_test_and_set(r->ev->ref, pg, memory_order_relaxed);
}

/* ------------------------------------------------------------------------
 * Regions.
 */

static int ref_alloc(struct evict *ev, size_t pages)
{
	return bitmap_grow(&ev->ref, &ev->ref_words, pages);
}

/*
 * evict_setup() - the budget of a new region (checked options). The
 * thread is started by evict_start() once the region is mapped.
 */
int evict_setup(struct faultd_region *r, const struct faultd_region_opts *o)
{
	struct evict *ev;
	size_t ps = r->page_size;

	if (!o->budget)
		return 0;
	ev = fd_calloc(1, sizeof(*ev));
	if (!ev || ref_alloc(ev, r->max_len / ps) < 0) {
		free(ev);
		return -ENOMEM;
	}
	ev->high = o->budget / ps;
	ev->low = o->budget_low ? o->budget_low / ps : ev->high / 8 * 7;
	ev->wake = ev->low + (ev->high - ev->low) / 2;
	ev->batch = ev->high - ev->wake < EVICT_BATCH ? ev->high - ev->wake
						      : EVICT_BATCH;
	pthread_mutex_init(&ev->lock, NULL);
	pthread_mutex_init(&ev->wait_lock, NULL);
	pthread_cond_init(&ev->wait_cond, NULL);
	r->ev = ev;
	return 0;
}

int evict_start(struct faultd_region *r)
{
	int ret;

	if (!r->ev)
		return 0;
	ret = thread_start(&r->ev->thread, evictor_main, r, "faultd-evict");
	r->ev->started = !ret;
	return ret;
}

/* evict_stop() - stop the evictor. Context: no region lock held. */
void evict_stop(struct faultd_region *r)
{
	struct evict *ev = r->ev;

	if (!ev || !ev->started)
		return;
	pthread_mutex_lock(&ev->wait_lock);
	ev->stopping = true;
	pthread_cond_signal(&ev->wait_cond);
	pthread_mutex_unlock(&ev->wait_lock);
	pthread_join(ev->thread, NULL);
	ev->started = false;
}

void evict_free(struct faultd_region *r)
{
	struct evict *ev = r->ev;

	if (!ev)
		return;
	evict_stop(r);
	pthread_cond_destroy(&ev->wait_cond);
	pthread_mutex_destroy(&ev->wait_lock);
	pthread_mutex_destroy(&ev->lock);
	free((void *)ev->ref);
	free(ev);
	r->ev = NULL;
}

/* evict_grow() - cover @len bytes. Context: the region write-locked. */
int evict_grow(struct faultd_region *r, size_t len)
{
	return r->ev ? ref_alloc(r->ev, len / r->page_size) : 0;
}

/*
 * evict_shrink() - the pages of [len, old_len) are about to leave.
 * Context: the region write-locked: no page of it is held.
 */
void evict_shrink(struct faultd_region *r, size_t old_len, size_t len)
{
	size_t gone = 0;

	if (!r->ev)
		return;
	for (uint64_t o = len; o < old_len; o += r->page_size)
		gone += state(r, o)->state != PAGE_NONE;
	atomic_fetch_sub(&r->ev->resident, gone);
}

/*
 * evict_lock() - hold off the evictor thread, the threads that make room
 * and discards of @r (ev->lock), for faultd_region_sync(); nothing without
 * a budget. Context: the region's lock held for reading.
 */
void evict_lock(struct faultd_region *r)
{
	if (r->ev)
		pthread_mutex_lock(&r->ev->lock);
}

void evict_unlock(struct faultd_region *r)
{
	if (r->ev)
		pthread_mutex_unlock(&r->ev->lock);
}

/*
 * evict_take_range() - own every page of [off, off + len), waiting for
 * those someone holds; the states they had go to @was (READY, NONE or
 * STALE). Context: ev->lock held (evict_lock()), so no evictor holds pages.
 */
void evict_take_range(struct faultd_region *r, uint64_t off, size_t len,
		      int32_t *was)
{
	for (size_t i = 0; i < len / r->page_size; i++) {
		bool stale = false;
		int c = pcache_claim(state(r, off + i * r->page_size), false, true,
				   &stale);

		was[i] = c == PCACHE_CLAIM_MAPPED ? PAGE_READY
			 : stale		 ? PAGE_STALE
						 : PAGE_NONE;
	}
}

/*
 * evict_discard() - drop [off, off + len) of a region with a budget: its
 * pages leave the page cache and their writes are forgotten; the next
 * access reads them from the pager again.
 * Context: the region's lock held for reading.
 */
int evict_discard(struct faultd_region *r, uint64_t off, size_t len)
{
	struct evict *ev = r->ev;
	size_t ps = r->page_size, chunk = EVICT_BATCH * ps;
	int ret = 0;

	pthread_mutex_lock(&ev->lock);
	for (uint64_t o = off; o < off + len; o += chunk) {
		size_t l = off + len - o < chunk ? off + len - o : chunk, gone = 0;

		evict_take_range(r, o, l, ev->was);
		if (fallocate(r->cache->memfd,
			      FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			      (off_t)o, (off_t)l) < 0 && !ret)
			ret = -errno;
		dirty_clear(r, o, l);
		for (size_t i = 0; i < l / ps; i++) {
			gone += ev->was[i] != PAGE_NONE;
			pcache_release(state(r, o + i * ps), PAGE_NONE);
		}
		atomic_fetch_sub(&ev->resident, gone);
	}
	pthread_mutex_unlock(&ev->lock);
	return ret;
}
