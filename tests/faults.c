// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * faults.c - suite "uffd": the fault path against the real kernel.
 *
 * Concurrent faults from several application threads into regions served by
 * several handler threads, in both lock modes, with every byte verified and
 * the counters checked exactly; the pager locking contract; global mode
 * taking the context lock on every path that resolves faults; region
 * churn while faulting; racing faults; destroy while busy; poisoning.
 */
#include <criterion/criterion.h>
#include <setjmp.h>
#include <sys/mman.h>

#include "helpers.h"
#include "internal.h" /* ctx_lock_stats() */

static struct faultd_region *make_region(struct faultd_ctx *ctx, size_t len,
					 const struct faultd_pager *p,
					 uint64_t flags)
{
	struct faultd_region_opts o = {
		.size = sizeof(o),
		.flags = flags,
		.length = len,
		.pager = p,
	};
	struct faultd_region *r = NULL;

	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	return r;
}

static struct faultd_stats region_stats(struct faultd_region *r)
{
	struct faultd_stats s = { .size = sizeof(s) };

	cr_assert_eq(faultd_region_stats(r, &s), 0);
	return s;
}

/*
 * Counters that are decided after the faulting thread was woken (EEXIST:
 * the loser of a race finishes after the winner woke everyone) are exact
 * once the regions are idle. Destroying them waits for every fault in
 * progress; their counters then sit in the context's. A message a handler
 * read but had not handled yet when its region went counts as no_region.
 */
static struct faultd_stats drained_stats(struct faultd_ctx *ctx,
					 struct faultd_region **r,
					 unsigned int n)
{
	struct faultd_stats s = { .size = sizeof(s) };

	for (unsigned int i = 0; i < n; i++)
		cr_assert_eq(faultd_region_destroy(r[i]), 0);
	cr_assert_eq(faultd_ctx_stats(ctx, &s), 0);
	return s;
}

/* ------------------------------------------------------------------------
 * Several threads fault every page of several regions.
 */

#define NREGIONS 3
#define NTOUCHERS 3

struct touch_job {
	struct faultd_region **regions;
	unsigned int nregions;
	unsigned int idx, nthreads;
	pthread_barrier_t *start;
	size_t bad;
};

/* Each thread walks all pages of all regions from its own starting point. */
static void *touch_all(void *arg)
{
	struct touch_job *j = arg;

	pthread_barrier_wait(j->start);
	for (unsigned int k = 0; k < j->nregions; k++) {
		struct faultd_region *r = j->regions[(k + j->idx) % j->nregions];
		const char *base = faultd_region_base(r);
		size_t pages = faultd_region_size(r) / PAGE;

		for (size_t i = 0; i < pages; i++) {
			size_t pg = (i + j->idx * pages / j->nthreads) % pages;

			j->bad += pattern_check((uintptr_t)r, pg * PAGE,
						base + pg * PAGE, PAGE);
		}
	}
	return NULL;
}

static void run_touchers(struct faultd_region **regions, unsigned int n)
{
	pthread_t t[NTOUCHERS];
	struct touch_job jobs[NTOUCHERS];
	pthread_barrier_t start;

	pthread_barrier_init(&start, NULL, NTOUCHERS);
	for (unsigned int i = 0; i < NTOUCHERS; i++) {
		jobs[i] = (struct touch_job){ .regions = regions,
					      .nregions = n,
					      .idx = i,
					      .nthreads = NTOUCHERS,
					      .start = &start };
		pthread_create(&t[i], NULL, touch_all, &jobs[i]);
	}
	for (unsigned int i = 0; i < NTOUCHERS; i++) {
		pthread_join(t[i], NULL);
		cr_expect_eq(jobs[i].bad, 0, "thread %u read %zu bad words", i,
			     jobs[i].bad);
	}
	pthread_barrier_destroy(&start);
}

static void check_every_page(unsigned int lock_mode)
{
	struct faultd_ctx *ctx = make_ctx(lock_mode, 2);
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_CONCURRENT,
				  .fill = region_pattern_fill };
	struct faultd_region *r[NREGIONS];
	const size_t len = 8 * MIB, pages = len / PAGE;

	for (unsigned int i = 0; i < NREGIONS; i++)
		r[i] = make_region(ctx, len, &p,
				   i == 1 ? FAULTD_REGION_MEMFD : 0);
	run_touchers(r, NREGIONS);
	for (unsigned int i = 0; i < NREGIONS; i++) {
		struct faultd_stats s = region_stats(r[i]);

		cr_expect_geq(s.faults, pages);
		cr_expect_eq(s.pager_fills, pages);
	}
	struct faultd_stats s = drained_stats(ctx, r, NREGIONS);
	/* Each page is filled exactly once: a fault on a page another
	 * handler fills is left to it (counted in eexist). */
	cr_expect_eq(s.pager_fills, NREGIONS * pages);
	cr_expect_eq(s.faults - s.eexist - s.no_region, NREGIONS * pages,
		     "%llu faults, %llu eexist", (unsigned long long)s.faults,
		     (unsigned long long)s.eexist);
	cr_expect_eq(s.poisoned + s.gone, 0);
	if (lock_mode == FAULTD_LOCK_GLOBAL) {
		cr_expect_eq(s.fast, 0);
		cr_expect_eq(s.locked, s.faults);
	} else {
		cr_expect_eq(s.fast, s.faults);
		cr_expect_eq(s.locked, 0);
	}
	faultd_ctx_destroy(ctx);
}

Test(faults, every_page_region_lock, .timeout = 120)
{
	check_every_page(FAULTD_LOCK_REGION);
}

Test(faults, every_page_global_lock, .timeout = 120)
{
	check_every_page(FAULTD_LOCK_GLOBAL);
}

/*
 * The lock times (struct lock_stats) count what they say, exactly: one
 * fault in LOCK_SAMPLE of a handler thread, in the lock of its mode only;
 * every write-lock of the context lock, and the region write-locks of
 * resize and destroy. One thread writes each page once: one fault each.
 */
static void check_lock_times(unsigned int lock_mode)
{
	struct faultd_ctx *ctx = make_ctx(lock_mode, 1);
	struct faultd_region *r = make_region(ctx, 4 * MIB, NULL, 0);
	const size_t pages = 4 * MIB / PAGE - 3;
	const uint64_t sampled = (pages + LOCK_SAMPLE - 1) / LOCK_SAMPLE;
	bool global = lock_mode == FAULTD_LOCK_GLOBAL;
	volatile char *b = faultd_region_base(r);
	struct lock_stats ls;
	struct faultd_stats s = { .size = sizeof(s) };

	for (size_t i = 0; i < pages; i++)
		b[i * PAGE] = 1;
	cr_assert_eq(faultd_region_resize(r, 2 * MIB), 0);
	cr_assert_eq(faultd_region_destroy(r), 0);
	cr_assert_eq(faultd_ctx_stats(ctx, &s), 0);
	cr_assert_eq(s.faults, pages, "%llu faults",
		     (unsigned long long)s.faults);
	memset(&ls, 0, sizeof(ls));
	ctx_lock_stats(ctx, &ls);
	cr_expect_eq(ls.h[LK_REGION_READ_HOLD].n, global ? 0 : sampled);
	cr_expect_eq(ls.h[LK_CTX_READ_WAIT].n, global ? sampled : 0);
	cr_expect_eq(ls.h[LK_CTX_READ_HOLD].n, global ? sampled : 0);
	/* create, resize, destroy */
	cr_expect_eq(ls.h[LK_CTX_WRITE_WAIT].n, 3);
	cr_expect_eq(ls.h[LK_CTX_WRITE_HOLD].n, 3);
	/* resize, destroy */
	cr_expect_eq(ls.h[LK_REGION_WRITE_WAIT].n, 2);
	cr_expect_eq(ls.h[LK_REGION_WRITE_HOLD].n, 2);
	for (unsigned int i = 0; i < LK_NR; i++) {
		uint64_t in_buckets = 0;

		for (unsigned int k = 0; k < FAULTD_HIST_BUCKETS; k++)
			in_buckets += ls.h[i].b[k];
		cr_expect_eq(in_buckets, ls.h[i].n, "item %u", i);
	}
	/* A hold spans at least a system call: never 0 ns in all. */
	cr_expect_gt(ls.h[global ? LK_CTX_READ_HOLD : LK_REGION_READ_HOLD].ns,
		     0);
	cr_expect_gt(ls.h[LK_CTX_WRITE_HOLD].ns, 0);
	faultd_ctx_destroy(ctx);
}

Test(faults, lock_times_region_lock, .timeout = 60)
{
	check_lock_times(FAULTD_LOCK_REGION);
}

Test(faults, lock_times_global_lock, .timeout = 60)
{
	check_lock_times(FAULTD_LOCK_GLOBAL);
}

Test(faults, zero_fill_reads_and_writes, .timeout = 60)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 2);
	struct faultd_region *anon = make_region(ctx, 4 * MIB, NULL, 0);
	struct faultd_region *shm =
		make_region(ctx, 4 * MIB, NULL, FAULTD_REGION_MEMFD);
	struct faultd_region *both[2] = { anon, shm };

	for (int k = 0; k < 2; k++) {
		unsigned char *b = faultd_region_base(both[k]);
		size_t nonzero = 0;

		/* Reads of odd pages first, then writes to every page. */
		for (size_t i = PAGE; i < 4 * MIB; i += 2 * PAGE)
			nonzero += b[i + 17] != 0;
		for (size_t i = 0; i < 4 * MIB; i += PAGE) {
			nonzero += b[i + 9] != 0;
			b[i] = (unsigned char)(i / PAGE);
		}
		for (size_t i = 0; i < 4 * MIB; i += PAGE)
			nonzero += b[i] != (unsigned char)(i / PAGE);
		cr_expect_eq(nonzero, 0);
		struct faultd_stats s = region_stats(both[k]);
		/* One thread: each fault is counted before it is woken. */
		cr_expect_eq(s.zero_fills, s.faults);
		cr_expect_eq(s.faults, 4 * MIB / PAGE);
		cr_expect_eq(s.eexist, 0);
	}
	faultd_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------
 * The pager locking contract, checked from inside the pager.
 */

struct probe_pager {
	struct faultd_ctx *ctx;
	bool expect_locked;
	bool rendezvous;	/* make the first two fills meet */
	atomic_int in_flight;
	atomic_int max_in_flight;
	atomic_int violations;
	atomic_int calls;
	atomic_bool met;
};

static ssize_t probe_fill(void *arg, struct faultd_region *r, uint64_t off,
			  void *buf, size_t len)
{
	struct probe_pager *pp = arg;
	int n = atomic_fetch_add(&pp->in_flight, 1) + 1;
	int max = atomic_load(&pp->max_in_flight);

	while (n > max &&
	       !atomic_compare_exchange_weak(&pp->max_in_flight, &max, n))
		;
	if (faultd_ctx_lock_held(pp->ctx) != pp->expect_locked)
		atomic_fetch_add(&pp->violations, 1);
	if (pp->rendezvous && !atomic_load(&pp->met)) {
		/* A concurrent pager must see a second fill arrive. */
		wait_at_least(&pp->in_flight, 2, 10000);
		atomic_store(&pp->met, true);
	}
	atomic_fetch_add(&pp->calls, 1);
	pattern_fill((uintptr_t)r, off, buf, len);
	atomic_fetch_sub(&pp->in_flight, 1);
	return (ssize_t)len;
}

static void pager_contract(unsigned int flags, bool expect_locked)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 2);
	struct probe_pager pp = { .ctx = ctx,
				  .expect_locked = expect_locked,
				  .rendezvous = !expect_locked };
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = flags,
				  .fill = probe_fill,
				  .arg = &pp };
	struct faultd_region *r[2];

	r[0] = make_region(ctx, 2 * MIB, &p, 0);
	r[1] = make_region(ctx, 2 * MIB, &p, FAULTD_REGION_MEMFD);
	run_touchers(r, 2);
	cr_expect_eq(atomic_load(&pp.violations), 0,
		     "fill called with the context lock %s",
		     expect_locked ? "not held" : "held");
	for (int i = 0; i < 2; i++) {
		struct faultd_stats s = region_stats(r[i]);

		if (expect_locked) {
			/* vmf_can_call_fault(): every fault retried locked */
			cr_expect_eq(s.retry, s.faults);
			cr_expect_eq(s.locked, s.faults);
			cr_expect_eq(s.fast, 0);
		} else {
			cr_expect_eq(s.fast, s.faults);
			cr_expect_eq(s.retry, 0);
		}
	}
	if (expect_locked)
		cr_expect_eq(atomic_load(&pp.max_in_flight), 1,
			     "unaudited pager ran %d fills at once",
			     atomic_load(&pp.max_in_flight));
	else
		cr_expect_geq(atomic_load(&pp.max_in_flight), 2,
			      "concurrent pager never ran two fills at once");
	faultd_ctx_destroy(ctx);
}

Test(pager, unaudited_called_under_context_lock_only, .timeout = 60)
{
	pager_contract(0, true);
}

Test(pager, concurrent_called_without_context_lock, .timeout = 60)
{
	pager_contract(FAULTD_PAGER_CONCURRENT, false);
}

/* ------------------------------------------------------------------------
 * FAULTD_LOCK_GLOBAL is global on every path that resolves a fault.
 */

/*
 * A pager that counts the pages it fills with and without the context
 * lock held. Atomics only: it also runs in SIGBUS handlers.
 */
struct lock_probe {
	struct faultd_ctx *ctx;
	atomic_long locked, unlocked;	/* pages */
};

static ssize_t lock_probe_fill(void *arg, struct faultd_region *r,
			       uint64_t off, void *buf, size_t len)
{
	struct lock_probe *lp = arg;

	atomic_fetch_add(faultd_ctx_lock_held(lp->ctx) ? &lp->locked
						       : &lp->unlocked,
			 (long)(len / PAGE));
	pattern_fill(11, off, buf, len);
	return (ssize_t)len;
}

#define PATH_LEN (1 * MIB)

enum { P_HANDLER, P_SIGBUS, P_SIGBUS_ZERO, P_PREFETCH, P_READAHEAD,
       P_PARENT, P_CHILD, P_NR };

static struct faultd_region *path_region(struct faultd_ctx *ctx,
					 const struct faultd_pager *p,
					 uint64_t flags, size_t readahead)
{
	struct faultd_region_opts o = { .size = sizeof(o),
					.flags = flags,
					.length = PATH_LEN,
					.pager = p,
					.fault_around = FAULTD_FAULT_AROUND_OFF,
					.readahead_max = readahead };
	struct faultd_region *r = NULL;

	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	return r;
}

/* Read every page once, in order; the pages that are not the pattern. */
static size_t read_pages(struct faultd_region *r, bool pager)
{
	const char *b = faultd_region_base(r);
	size_t bad = 0;

	for (size_t off = 0; off < PATH_LEN; off += PAGE)
		bad += pager ? pattern_check(11, off, b + off, PAGE) != 0
			     : b[off] != 0;
	return bad;
}

/*
 * Every path that resolves a fault, in a context of @lock_mode: handler
 * threads, same-thread faults (with a pager and zero-fill), a prefetch,
 * read-ahead, and a copy-on-write clone whose faults read its parent's
 * pager. Each page is read from the pager once (claims), so the pages
 * filled with the context lock held and without it are exact.
 */
static void every_path(unsigned int lock_mode, struct lock_probe *lp,
		       struct faultd_stats *st)
{
	struct faultd_ctx *ctx = make_ctx(lock_mode, 1);
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_SIGNAL_SAFE,
				  .fill = lock_probe_fill, .arg = lp };
	struct faultd_clone_opts co = { .size = sizeof(co) };
	struct faultd_region *r[P_NR];
	size_t bad = 0;

	lp->ctx = ctx;
	r[P_HANDLER] = path_region(ctx, &p, 0, 0);
	r[P_SIGBUS] = path_region(ctx, &p, FAULTD_REGION_SAME_THREAD, 0);
	r[P_SIGBUS_ZERO] = path_region(ctx, NULL, FAULTD_REGION_SAME_THREAD,
				       0);
	r[P_PREFETCH] = path_region(ctx, &p, 0, 0);
	r[P_READAHEAD] = path_region(ctx, &p, 0, 256 * 1024);
	r[P_PARENT] = path_region(ctx, &p, 0, 0);
	cr_assert_eq(faultd_region_clone(r[P_PARENT], &co, &r[P_CHILD]), 0);
	cr_assert_eq(faultd_region_prefetch(r[P_PREFETCH], 0, PATH_LEN), 0);
	cr_assert_eq(faultd_region_prefetch_wait(r[P_PREFETCH]), 0);
	for (int i = 0; i < P_NR; i++)
		if (i != P_PARENT) /* the child reads it, without faults */
			bad += read_pages(r[i], i != P_SIGBUS_ZERO);
	cr_assert_eq(faultd_region_prefetch_wait(r[P_READAHEAD]), 0);
	cr_expect_eq(bad, 0, "%zu pages read wrong", bad);
	for (int i = 0; i < P_NR; i++) {
		st[i] = (struct faultd_stats){ .size = sizeof(st[i]) };
		cr_assert_eq(faultd_region_stats(r[i], &st[i]), 0);
	}
	faultd_ctx_destroy(ctx);
}

Test(lock_mode, global_takes_the_context_lock_on_every_path, .timeout = 60)
{
	struct lock_probe lp = { 0 };
	struct faultd_stats st[P_NR];
	const long pages = PATH_LEN / PAGE;

	skip_without(FAULTD_HAVE_SIGBUS | FAULTD_HAVE_WP,
		     "UFFD_FEATURE_SIGBUS and write-protection");
	every_path(FAULTD_LOCK_GLOBAL, &lp, st);
	/* Handler, same-thread, prefetch, read-ahead, the child's reads of
	 * its parent: each page filled once, every fill under the lock. */
	cr_expect_eq(atomic_load(&lp.unlocked), 0);
	cr_expect_eq(atomic_load(&lp.locked), 5 * pages);
	for (int i = 0; i < P_NR; i++) {
		if (i == P_PARENT || i == P_PREFETCH)
			continue; /* no faults */
		if (i != P_READAHEAD)
			cr_expect_eq(st[i].faults, pages, "path %d", i);
		cr_expect_eq(st[i].locked, st[i].faults, "path %d", i);
		cr_expect_eq(st[i].fast, 0, "path %d", i);
		cr_expect_eq(st[i].retry, 0, "path %d", i);
	}
	/* Each page of the read-ahead region in by its fault or a worker. */
	cr_expect_gt(st[P_READAHEAD].readahead, 0);
	cr_expect_eq(st[P_READAHEAD].pager_fills + st[P_READAHEAD].readahead,
		     pages);
}

Test(lock_mode, region_takes_it_for_a_clone_s_first_fault_only,
     .timeout = 60)
{
	struct lock_probe lp = { 0 };
	struct faultd_stats st[P_NR];
	const long pages = PATH_LEN / PAGE;

	skip_without(FAULTD_HAVE_SIGBUS | FAULTD_HAVE_WP,
		     "UFFD_FEATURE_SIGBUS and write-protection");
	every_path(FAULTD_LOCK_REGION, &lp, st);
	/* Only the child's first fault, which allocates its page state
	 * under the lock (vmf_anon_prepare()), reads there. */
	cr_expect_eq(atomic_load(&lp.locked), 1);
	cr_expect_eq(atomic_load(&lp.unlocked), 5 * pages - 1);
	for (int i = 0; i < P_NR; i++) {
		bool child = i == P_CHILD;

		if (i == P_PARENT || i == P_PREFETCH)
			continue;
		cr_expect_eq(st[i].locked, child, "path %d", i);
		cr_expect_eq(st[i].retry, child, "path %d", i);
		cr_expect_eq(st[i].fast, st[i].faults - child, "path %d", i);
	}
	cr_expect_eq(st[P_SIGBUS].faults, pages);
	cr_expect_eq(st[P_SIGBUS_ZERO].faults, pages);
}

/* ------------------------------------------------------------------------
 * Faults keep working while another thread changes the region map.
 */

struct churn_job {
	struct faultd_ctx *ctx;
	atomic_bool stop;
	unsigned long rounds;
	size_t bad;
	int err;
};

static void *churn(void *arg)
{
	struct churn_job *j = arg;
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_CONCURRENT,
				  .fill = region_pattern_fill };

	while (!atomic_load(&j->stop)) {
		struct faultd_region_opts o = { .size = sizeof(o),
						.length = 256 * 1024,
						.max_length = 512 * 1024,
						.pager = &p };
		struct faultd_region *r;
		char *b;

		j->err = faultd_region_create(j->ctx, &o, &r);
		if (j->err)
			return NULL;
		b = faultd_region_base(r);
		j->bad += pattern_check((uintptr_t)r, 8 * PAGE, b + 8 * PAGE,
					PAGE);
		j->err = faultd_region_resize(r, 512 * 1024);
		if (j->err)
			return NULL;
		j->bad += pattern_check((uintptr_t)r, 100 * PAGE,
					b + 100 * PAGE, PAGE);
		faultd_region_destroy(r);
		j->rounds++;
	}
	return NULL;
}

Test(faults, map_changes_while_faulting, .timeout = 120)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 2);
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_CONCURRENT,
				  .fill = region_pattern_fill };
	struct churn_job cj = { .ctx = ctx };
	struct faultd_region *r[2];
	pthread_t t;

	r[0] = make_region(ctx, 16 * MIB, &p, 0);
	r[1] = make_region(ctx, 16 * MIB, NULL, 0);
	faultd_region_destroy(r[1]);
	r[1] = make_region(ctx, 16 * MIB, &p, FAULTD_REGION_MEMFD);
	pthread_create(&t, NULL, churn, &cj);
	run_touchers(r, 2);
	atomic_store(&cj.stop, true);
	pthread_join(t, NULL);
	cr_expect_eq(cj.err, 0, "churn: %s", strerror(-cj.err));
	cr_expect_eq(cj.bad, 0);
	cr_expect_gt(cj.rounds, 0);
	for (int i = 0; i < 2; i++)
		cr_expect_gt(region_stats(r[i]).fast, 0);
	struct faultd_stats s = drained_stats(ctx, r, 2);
	/* Both regions' pages once each, two pages per churn round. */
	cr_expect_eq(s.faults - s.eexist - s.no_region,
		     2 * 16 * MIB / PAGE + 2 * cj.rounds);
	cr_expect_eq(s.fast + s.locked, s.faults - s.no_region);
	faultd_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------
 * Racing faults on the same page: one fill. The handler that reads the
 * second fault finds the page claimed by the first (counted as EEXIST) and
 * leaves it: the first one's copy wakes both threads.
 */

struct race_pager {
	atomic_int entered[64];
};

/* The region's EEXIST count, read from inside its pager (no lock). */
static uint64_t eexist_of(struct faultd_region *r)
{
	struct faultd_stats s = { .size = sizeof(s) };

	faultd_region_stats(r, &s);
	return s.eexist;
}

static ssize_t race_fill(void *arg, struct faultd_region *r, uint64_t off,
			 void *buf, size_t len)
{
	struct race_pager *rp = arg;
	uint64_t end = test_now_ns() + 10000000000ull;

	/* Hold the fill of page n until the racing fault on it was seen. */
	atomic_fetch_add(&rp->entered[(off / PAGE) % 64], 1);
	while (eexist_of(r) < off / PAGE + 1 && test_now_ns() < end)
		sched_yield();
	pattern_fill((uintptr_t)r, off, buf, len);
	return (ssize_t)len;
}

struct race_job {
	const char *base;
	struct faultd_region *r;
	pthread_barrier_t *bar;
	size_t bad;
};

static void *race_touch(void *arg)
{
	struct race_job *j = arg;

	for (size_t pg = 0; pg < 64; pg++) {
		pthread_barrier_wait(j->bar);
		j->bad += pattern_check((uintptr_t)j->r, pg * PAGE,
					j->base + pg * PAGE, PAGE);
	}
	return NULL;
}

Test(faults, racing_faults_same_page_eexist, .timeout = 120)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 2);
	struct race_pager rp = { 0 };
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_CONCURRENT,
				  .fill = race_fill,
				  .arg = &rp };
	struct faultd_region *r = make_region(ctx, 64 * PAGE, &p, 0);
	pthread_barrier_t bar;
	struct race_job j[2];
	pthread_t t[2];

	pthread_barrier_init(&bar, NULL, 2);
	for (int i = 0; i < 2; i++) {
		j[i] = (struct race_job){ .base = faultd_region_base(r),
					  .r = r,
					  .bar = &bar };
		pthread_create(&t[i], NULL, race_touch, &j[i]);
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		cr_expect_eq(j[i].bad, 0);
	}
	struct faultd_stats s = drained_stats(ctx, &r, 1);
	/* Two faults per page, one fill; the other fault sees EEXIST. */
	cr_expect_eq(s.faults, 128);
	cr_expect_eq(s.eexist, 64);
	cr_expect_eq(s.pager_fills, 64);
	cr_expect_eq(s.poisoned + s.gone, 0);
	for (int i = 0; i < 64; i++)
		cr_expect_eq(atomic_load(&rp.entered[i]), 1, "page %d", i);
	pthread_barrier_destroy(&bar);
	faultd_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------
 * Aborts of the lock-free lookup are counted in their region.
 */

struct abort_job {
	struct faultd_region *r;
	unsigned int idx;
	atomic_bool *stop;
	size_t bad;
	int err;
};

/* Touch this thread's 64 pages, check them, discard them: again. */
static void *touch_and_discard(void *arg)
{
	struct abort_job *j = arg;
	const char *b = faultd_region_base(j->r);
	uint64_t off = j->idx * 64 * PAGE;

	while (!atomic_load(j->stop) && !j->err) {
		j->bad += pattern_check((uintptr_t)j->r, off, b + off,
					64 * PAGE);
		j->err = faultd_region_discard(j->r, off, 64 * PAGE);
	}
	return NULL;
}

/* Grow the region and cut it back, over and over: its lock taken for
 * writing, so that faults' try-locks fail (abort). */
static void *resize_tail(void *arg)
{
	struct abort_job *j = arg;

	while (!atomic_load(j->stop) && !j->err) {
		j->err = faultd_region_resize(j->r, 512 * PAGE);
		if (!j->err)
			j->err = faultd_region_resize(j->r, 256 * PAGE);
	}
	return NULL;
}

/*
 * Two threads fault their pages while a third resizes the region's
 * untouched tail. Every abort is then of this region, which the slow
 * path finds again: the region's abort and miss are the context's.
 * FAULTD_STRESS_SECONDS sets how long (default 1 s).
 */
Test(faults, aborts_and_misses_counted_in_their_region, .timeout = 600)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 2);
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_CONCURRENT,
				  .fill = region_pattern_fill };
	struct faultd_region_opts o = { .size = sizeof(o),
					.length = 256 * PAGE,
					.max_length = 512 * PAGE,
					.pager = &p };
	struct faultd_stats rs = { .size = sizeof(rs) }, cs = rs;
	atomic_bool stop = false;
	struct abort_job j[3];
	struct faultd_region *r;
	pthread_t t[3];

	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	for (unsigned int i = 0; i < 3; i++) {
		j[i] = (struct abort_job){ .r = r, .idx = i, .stop = &stop };
		cr_assert_eq(pthread_create(&t[i], NULL,
					    i < 2 ? touch_and_discard
						  : resize_tail,
					    &j[i]),
			     0);
	}
	for (uint64_t end = test_now_ns() + (uint64_t)(race_seconds(1.0) * 1e9);
	     test_now_ns() < end;)
		sched_yield();
	atomic_store(&stop, true);
	for (unsigned int i = 0; i < 3; i++) {
		pthread_join(t[i], NULL);
		cr_expect_eq(j[i].err, 0, "thread %u: %s", i,
			     strerror(-j[i].err));
		cr_expect_eq(j[i].bad, 0, "thread %u: %zu bad words", i,
			     j[i].bad);
	}
	/* Every fault of the touchers was counted before it returned. */
	cr_assert_eq(faultd_region_stats(r, &rs), 0);
	cr_assert_eq(faultd_ctx_stats(ctx, &cs), 0);
	cr_expect_eq(rs.abort, cs.abort, "region %llu aborts, context %llu",
		     (unsigned long long)rs.abort,
		     (unsigned long long)cs.abort);
	cr_expect_eq(rs.miss, cs.miss);
	cr_log_info("%llu aborts in %llu faults", (unsigned long long)rs.abort,
		    (unsigned long long)rs.faults);
	faultd_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------
 * Destroying a region while its handler is inside a fill.
 */

struct gate_pager {
	atomic_int entered;
	atomic_int open;
	atomic_int exited;
	atomic_int released;
};

static ssize_t gate_fill(void *arg, struct faultd_region *r, uint64_t off,
			 void *buf, size_t len)
{
	struct gate_pager *g = arg;

	atomic_fetch_add(&g->entered, 1);
	wait_at_least(&g->open, 1, 30000);
	pattern_fill(7, off, buf, len);
	atomic_fetch_add(&g->exited, 1);
	return (ssize_t)len;
}

static void gate_release(void *arg)
{
	struct gate_pager *g = arg;

	atomic_fetch_add(&g->released, 1);
}

static __thread sigjmp_buf segv_jmp;

static void segv_handler(int sig)
{
	siglongjmp(segv_jmp, sig);
}

struct reader {
	const char *addr;
	uint64_t off;
	atomic_int *go;	    /* if set, read once *go is */
	atomic_int started; /* running (and waiting for *go) */
	int outcome;	    /* 1: correct data, 0: wrong data, SIGSEGV */
};

static void *read_one_page(void *arg)
{
	struct reader *rd = arg;
	int sig = sigsetjmp(segv_jmp, 1);

	if (sig) {
		rd->outcome = sig;
		return NULL;
	}
	atomic_store(&rd->started, 1);
	if (rd->go)
		wait_at_least(rd->go, 1, 30000);
	rd->outcome = pattern_check(7, rd->off, rd->addr, PAGE) == 0;
	return NULL;
}

struct destroyer {
	struct faultd_region *r;
	struct gate_pager *g;
	int fills_done_at_return;
	int ret;
};

static void *destroy_region(void *arg)
{
	struct destroyer *d = arg;

	d->ret = faultd_region_destroy(d->r);
	d->fills_done_at_return = atomic_load(&d->g->exited);
	return NULL;
}

Test(faults, destroy_while_fill_in_progress, .timeout = 60)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 1);
	struct gate_pager g = { 0 };
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_CONCURRENT,
				  .fill = gate_fill,
				  .release = gate_release,
				  .arg = &g };
	struct faultd_region *r = make_region(ctx, 16 * PAGE, &p, 0);
	const char *base = faultd_region_base(r);
	struct reader first = { .addr = base + 3 * PAGE, .off = 3 * PAGE };
	struct reader second = { .addr = base + 5 * PAGE, .off = 5 * PAGE,
				 .go = &g.open };
	struct destroyer d = { .r = r, .g = &g };
	struct sigaction sa = { .sa_handler = segv_handler };
	pthread_t t1, t2, td;

	sigaction(SIGSEGV, &sa, NULL);
	pthread_create(&t1, NULL, read_one_page, &first);
	cr_assert(wait_at_least(&g.entered, 1, 10000));
	/*
	 * The second reader starts before the destroy and reads when the gate
	 * opens: a thread that started after the munmap() could map memory of
	 * its own there (a sanitizer's per-thread state does) and read it.
	 */
	pthread_create(&t2, NULL, read_one_page, &second);
	cr_assert(wait_at_least(&second.started, 1, 10000));
	/* The handler holds the region's read lock inside fill. */
	pthread_create(&td, NULL, destroy_region, &d);
	atomic_store(&g.open, 1);
	pthread_join(t1, NULL);
	pthread_join(td, NULL);
	pthread_join(t2, NULL);
	cr_expect_eq(d.ret, 0);
	/* Destroy waited for the fill in progress to finish. */
	cr_expect_geq(d.fills_done_at_return, 1);
	cr_expect_eq(atomic_load(&g.released), 1);
	/*
	 * Each reader raced with the destroy: it sees the right data or
	 * SIGSEGV (the memory is gone) - never zeros, and it never hangs.
	 * Under TSan only the last holds: TSan's own mmap()s, in any thread,
	 * soon reuse the freed range, and a reader may read them.
	 */
	if (!UNDER_TSAN) {
		cr_expect(first.outcome == 1 || first.outcome == SIGSEGV,
			  "first reader outcome %d", first.outcome);
		cr_expect(second.outcome == 1 || second.outcome == SIGSEGV,
			  "second reader outcome %d", second.outcome);
		cr_expect_eq(msync((void *)base, 16 * PAGE, MS_ASYNC), -1);
		cr_expect_eq(errno, ENOMEM);
	}
	faultd_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------
 * Context teardown with live regions gives every resource back.
 */

static int count_dir(const char *path)
{
	char cmd[128];
	FILE *f;
	int n = -1;

	snprintf(cmd, sizeof(cmd), "ls -1 %s | wc -l", path);
	f = popen(cmd, "r");
	if (f && fscanf(f, "%d", &n) != 1)
		n = -1;
	if (f)
		pclose(f);
	return n;
}

static int count_lines_with(const char *path, const char *needle)
{
	char line[512];
	FILE *f = fopen(path, "r");
	int n = 0;

	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	if (f)
		fclose(f);
	return n;
}

Test(faults, ctx_destroy_with_live_regions, .timeout = 60)
{
	int fds0, tasks0, maps0;
	struct gate_pager g = { .open = 1 };
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_CONCURRENT,
				  .fill = gate_fill,
				  .release = gate_release,
				  .arg = &g };
	struct faultd_ctx *ctx;
	void *bases[4];

	/*
	 * One round first, of the same shape: what stays for the process
	 * (the probe, liburcu's state, glibc's cache of thread stacks) is
	 * there before counting.
	 */
	for (int round = 0; round < 2; round++) {
		if (round == 1) {
			fds0 = count_dir("/proc/self/fd");
			tasks0 = count_dir("/proc/self/task");
			maps0 = count_lines_with("/proc/self/maps", "");
		}
		ctx = make_ctx(FAULTD_LOCK_REGION, 2);
		for (int i = 0; i < 4; i++) {
			struct faultd_region *r = make_region(
				ctx, MIB, &p, i % 2 ? FAULTD_REGION_MEMFD : 0);
			bases[i] = faultd_region_base(r);
			cr_expect_eq(pattern_check(7, 0, bases[i], PAGE), 0);
		}
		faultd_ctx_destroy(ctx);
	}
	cr_expect_eq(atomic_load(&g.released), 8);
	for (int i = 0; i < 4; i++)
		cr_expect_eq(msync(bases[i], MIB, MS_ASYNC), -1);
	cr_expect_eq(count_dir("/proc/self/fd"), fds0);
	cr_expect_eq(count_dir("/proc/self/task"), tasks0);
	/* TSan splits and adds mappings of its own as memory comes and goes. */
	if (!UNDER_TSAN)
		cr_expect_eq(count_lines_with("/proc/self/maps", ""), maps0);
}

/* ------------------------------------------------------------------------
 * A pager error is never a page of zeros.
 */

static void touch_failing_page(void *arg)
{
	struct faultd_ctx *ctx = NULL;
	struct faultd_pager p = { .size = sizeof(p), .fill = failing_fill };
	struct faultd_region_opts o = { .size = sizeof(o),
					.length = MIB,
					.pager = &p };
	struct faultd_region *r;
	volatile char *b;

	if (faultd_ctx_create(NULL, &ctx) || faultd_region_create(ctx, &o, &r))
		_exit(10);
	b = faultd_region_base(r);
	if (b[5 * PAGE] == 0)
		_exit(11); /* read zeros: the bug this test is for */
	_exit(12);
}

Test(faults, pager_error_sigbus_in_child, .timeout = 30)
{
	int how = run_in_child(touch_failing_page, NULL);

	cr_expect_eq(how, poison_signal(), "child ended with %d (expected %d)",
		     how, poison_signal());
}

static __thread sigjmp_buf bus_jmp;

static void bus_handler(int sig)
{
	siglongjmp(bus_jmp, sig);
}

struct short_pager {
	ssize_t (*how)(size_t len);
};

static ssize_t half_fill(void *arg, struct faultd_region *r, uint64_t off,
			 void *buf, size_t len)
{
	memset(buf, 0xab, len); /* stale bytes the library must clear */
	pattern_fill(3, off, buf, len / 2);
	return (ssize_t)(len / 2);
}

static ssize_t over_fill(void *arg, struct faultd_region *r, uint64_t off,
			 void *buf, size_t len)
{
	return (ssize_t)len + 1;
}

Test(faults, short_fill_zero_tail_and_overlong_poisoned, .timeout = 30)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 1);
	struct faultd_pager half = { .size = sizeof(half), .fill = half_fill };
	struct faultd_pager over = { .size = sizeof(over), .fill = over_fill };
	struct faultd_region *rh = make_region(ctx, 4 * PAGE, &half, 0);
	struct faultd_region *ro = make_region(ctx, 4 * PAGE, &over, 0);
	const unsigned char *h = faultd_region_base(rh);
	volatile const char *o = faultd_region_base(ro);
	struct sigaction sa = { .sa_handler = bus_handler };
	size_t nonzero = 0;
	int sig;

	cr_expect_eq(pattern_check(3, PAGE, h + PAGE, PAGE / 2), 0);
	for (size_t i = PAGE / 2; i < PAGE; i++)
		nonzero += h[PAGE + i] != 0;
	cr_expect_eq(nonzero, 0, "short fill left %zu stale bytes", nonzero);

	sigaction(poison_signal(), &sa, NULL);
	sig = sigsetjmp(bus_jmp, 1);
	if (!sig)
		(void)o[2 * PAGE];
	cr_expect_eq(sig, poison_signal());
	struct faultd_stats s = region_stats(ro);
	cr_expect_eq(s.poisoned, 1);
	cr_expect_eq(s.pager_errors, 1);
	faultd_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------
 * Resize, discard, memfd and shared groups.
 */

/* Resident pages in [p, p + len). */
static size_t mincore_resident(void *p, size_t len)
{
	static unsigned char vec[4096];
	size_t n = 0;

	if (len / PAGE > sizeof(vec) || mincore(p, len, vec) < 0)
		return (size_t)-1;
	for (size_t i = 0; i < len / PAGE; i++)
		n += vec[i] & 1;
	return n;
}

Test(regions, resize_grow_and_shrink, .timeout = 30)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 1);
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_CONCURRENT,
				  .fill = region_pattern_fill };

	for (int k = 0; k < 2; k++) {
		struct faultd_region_opts o = {
			.size = sizeof(o),
			.flags = k ? FAULTD_REGION_MEMFD : 0,
			.length = 64 * PAGE,
			.max_length = 128 * PAGE,
			.pager = &p,
		};
		struct faultd_region *r;
		char *b;
		int ret;

		cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
		b = faultd_region_base(r);
		cr_expect_eq(pattern_check((uintptr_t)r, 0, b, PAGE), 0);
		/* Within the reservation, then past it (may have no room). */
		cr_assert_eq(faultd_region_resize(r, 128 * PAGE), 0);
		cr_expect_eq(faultd_region_size(r), 128 * PAGE);
		cr_expect_eq(faultd_region_base(r), b);
		cr_expect_eq(pattern_check((uintptr_t)r, 100 * PAGE,
					   b + 100 * PAGE, PAGE),
			     0);
		cr_assert_eq(faultd_region_resize(r, 32 * PAGE), 0);
		/* The cut tail is inaccessible again (PROT_NONE), its
		 * memory given back; the rest keeps its content. */
		cr_expect_eq(mincore_resident(b + 32 * PAGE, 96 * PAGE), 0);
		cr_expect_eq(pattern_check((uintptr_t)r, 31 * PAGE,
					   b + 31 * PAGE, PAGE),
			     0);
		/* Grown back: the tail faults in afresh from the pager. */
		cr_assert_eq(faultd_region_resize(r, 128 * PAGE), 0);
		cr_expect_eq(pattern_check((uintptr_t)r, 32 * PAGE,
					   b + 32 * PAGE, 96 * PAGE),
			     0);
		ret = faultd_region_resize(r, 4096 * PAGE);
		cr_expect(ret == 0 || ret == -ENOMEM, "resize: %d", ret);
		if (ret == 0)
			cr_expect_eq(pattern_check((uintptr_t)r, 4000 * PAGE,
						   b + 4000 * PAGE, PAGE),
				     0);
		faultd_region_destroy(r);
	}
	faultd_ctx_destroy(ctx);
}

Test(regions, discard_refaults_from_pager, .timeout = 30)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 1);
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_CONCURRENT,
				  .fill = region_pattern_fill };

	for (int k = 0; k < 2; k++) {
		struct faultd_region *r = make_region(
			ctx, 64 * PAGE, &p, k ? FAULTD_REGION_MEMFD : 0);
		char *b = faultd_region_base(r);

		cr_expect_eq(pattern_check((uintptr_t)r, 0, b, 64 * PAGE), 0);
		memset(b + 8 * PAGE, 0x55, 8 * PAGE); /* local changes */
		cr_assert_eq(faultd_region_discard(r, 8 * PAGE, 8 * PAGE), 0);
		cr_expect_eq(pattern_check((uintptr_t)r, 0, b, 64 * PAGE), 0);
		struct faultd_stats s = region_stats(r);
		cr_expect_eq(s.pager_fills, 64 + 8);
		faultd_region_destroy(r);
	}
	faultd_ctx_destroy(ctx);
}

Test(regions, memfd_content_visible_through_fd, .timeout = 30)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 1);
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_CONCURRENT,
				  .fill = region_pattern_fill };
	struct faultd_region *r = make_region(ctx, 16 * PAGE, &p,
					      FAULTD_REGION_MEMFD);
	char *b = faultd_region_base(r);
	char buf[PAGE];
	int fd = faultd_region_memfd(r);

	cr_assert_geq(fd, 0);
	cr_expect_eq(pattern_check((uintptr_t)r, 4 * PAGE, b + 4 * PAGE, PAGE),
		     0);
	cr_assert_eq(pread(fd, buf, PAGE, 4 * PAGE), (ssize_t)PAGE);
	cr_expect_eq(pattern_check((uintptr_t)r, 4 * PAGE, buf, PAGE), 0);
	faultd_ctx_destroy(ctx);
}

Test(regions, shared_group_serves_many_regions, .timeout = 60)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 1);
	struct faultd_group_opts go = { .size = sizeof(go), .threads = 2 };
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_CONCURRENT,
				  .fill = region_pattern_fill };
	struct faultd_region *r[16];
	struct faultd_group *g;

	cr_assert_eq(faultd_group_create(ctx, &go, &g), 0);
	for (int i = 0; i < 16; i++) {
		struct faultd_region_opts o = { .size = sizeof(o),
						.length = 32 * PAGE,
						.pager = &p,
						.group = g };

		cr_assert_eq(faultd_region_create(ctx, &o, &r[i]), 0);
	}
	run_touchers(r, 16);
	cr_expect_eq(faultd_group_destroy(g), -EBUSY);
	struct faultd_stats s = drained_stats(ctx, r, 16);
	cr_expect_eq(s.faults - s.eexist - s.no_region, 16 * 32);
	cr_expect_eq(faultd_group_destroy(g), 0);
	faultd_ctx_destroy(ctx);
}
