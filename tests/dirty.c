// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * dirty.c - suite "uffd": write-protection and dirty tracking.
 *
 * Dirty sets are exact in both modes over repeated collect/re-arm epochs
 * (writers stop at each collection), and complete while writers keep
 * running (every page written is reported, nothing else is); both modes
 * report the same sets for the same writes. The write hook sees a page's
 * old content before the write lands. Discards forget their pages' writes
 * exactly, also while writers race them. Bad input gets exact errors.
 */
#include <criterion/criterion.h>

#include "helpers.h"

#define NPAGES 1024
#define WORDS (NPAGES / 64)

static struct faultd_region *tracked(struct faultd_ctx *ctx, uint64_t mode,
				     uint64_t kind, faultd_write_hook hook,
				     void *hook_arg)
{
	static struct faultd_pager p = { .size = sizeof(p),
					 .flags = FAULTD_PAGER_CONCURRENT,
					 .fill = pattern_pager_fill,
					 .arg = (void *)5 };
	struct faultd_region_opts o = {
		.size = sizeof(o),
		.flags = mode | kind,
		.length = NPAGES * PAGE,
		.pager = &p,
		.write_hook = hook,
		.hook_arg = hook_arg,
	};
	struct faultd_region *r;
	int ret = faultd_region_create(ctx, &o, &r);

	if (ret == -EOPNOTSUPP)
		cr_skip_test("this kernel cannot track writes in %s mode",
			     mode == FAULTD_REGION_WP ? "sync" : "async");
	cr_assert_eq(ret, 0, "create: %s", strerror(-ret));
	return r;
}

static size_t popcount_bitmap(const uint64_t *b)
{
	size_t n = 0;

	for (size_t i = 0; i < WORDS; i++)
		n += (size_t)__builtin_popcountll(b[i]);
	return n;
}

/* ------------------------------------------------------------------------
 * Epochs: writers write a known set, stop, the set is collected exactly.
 */

struct epoch_writer {
	char *base;
	const uint64_t *set;	/* the pages to write this epoch */
	unsigned int idx, n;	/* this thread writes pages p % n == idx */
};

static void *write_set(void *arg)
{
	struct epoch_writer *w = arg;

	for (size_t p = w->idx; p < NPAGES; p += w->n)
		if (w->set[p / 64] & (1ull << (p % 64)))
			w->base[p * PAGE + (p * 7) % PAGE] = (char)p;
	return NULL;
}

static void run_epochs(uint64_t mode, uint64_t kind, unsigned int seed,
		       uint64_t (*sets)[WORDS], int nepochs)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 2);
	struct faultd_region *r = tracked(ctx, mode, kind, NULL, NULL);
	char *base = faultd_region_base(r);
	uint64_t got[WORDS];
	volatile char sink = 0;

	/* Reading every page fills it clean (installed write-protected). */
	for (size_t p = 0; p < NPAGES; p += 2)
		sink ^= base[p * PAGE];
	cr_assert_eq(faultd_region_dirty(r, 0, NPAGES * PAGE, got), 0,
		     "pages filled for reads must be clean");
	for (int e = 0; e < nepochs; e++) {
		struct epoch_writer w[3];
		pthread_t t[3];

		for (size_t i = 0; i < WORDS; i++)
			sets[e][i] = ((uint64_t)rand_r(&seed) << 32 |
				      (uint64_t)rand_r(&seed)) &
				     ((uint64_t)rand_r(&seed) << 32 |
				      (uint64_t)rand_r(&seed));
		for (unsigned int i = 0; i < 3; i++) {
			w[i] = (struct epoch_writer){ .base = base,
						      .set = sets[e],
						      .idx = i,
						      .n = 3 };
			pthread_create(&t[i], NULL, write_set, &w[i]);
		}
		for (unsigned int i = 0; i < 3; i++)
			pthread_join(t[i], NULL);
		cr_assert_eq(faultd_region_dirty(r, 0, NPAGES * PAGE, got),
			     (ssize_t)popcount_bitmap(sets[e]));
		cr_assert_arr_eq(got, sets[e], sizeof(got), "epoch %d", e);
	}
	(void)sink;
	faultd_ctx_destroy(ctx);
}

static void both_modes_agree(uint64_t kind)
{
	static uint64_t s_sync[8][WORDS], s_async[8][WORDS];

	run_epochs(FAULTD_REGION_WP, kind, 42, s_sync, 8);
	run_epochs(FAULTD_REGION_WP_ASYNC, kind, 42, s_async, 8);
	cr_expect_arr_eq(s_sync, s_async, sizeof(s_sync));
}

Test(dirty, exact_sets_both_modes_anon, .timeout = 120)
{
	both_modes_agree(0);
}

Test(dirty, exact_sets_both_modes_memfd, .timeout = 120)
{
	both_modes_agree(FAULTD_REGION_MEMFD);
}

/* ------------------------------------------------------------------------
 * Writers never stop: nothing is lost, nothing is invented.
 */

struct runner {
	char *base;
	unsigned int idx;
	atomic_bool *stop;
	_Atomic uint64_t *written; /* the pages this run wrote, as a bitmap */
	atomic_long *returned;	   /* collections that have returned */
	atomic_long *last_start;   /* per page: @returned before its last write */
};

static void atomic_max_long(atomic_long *v, long x)
{
	long cur = atomic_load(v);

	while (cur < x && !atomic_compare_exchange_weak(v, &cur, x))
		;
}

static void *keep_writing(void *arg)
{
	struct runner *w = arg;
	unsigned int seed = w->idx + 1;

	while (!atomic_load(w->stop)) {
		/* Only pages whose number is a multiple of 3 are written. */
		size_t p = ((size_t)rand_r(&seed) % (NPAGES / 3)) * 3;
		long started_after = atomic_load(w->returned);

		/* Relaxed atomic: two writers may pick the same page. */
		__atomic_store_n(&w->base[p * PAGE + 8], (char)seed,
				 __ATOMIC_RELAXED);
		atomic_fetch_or(&w->written[p / 64], 1ull << (p % 64));
		atomic_max_long(&w->last_start[p], started_after);
	}
	return NULL;
}

/* Remember, per page, the last collection that reported it. */
static void note_reports(const uint64_t *got, long c, long *last_report)
{
	for (size_t p = 0; p < NPAGES; p++)
		if (got[p / 64] & (1ull << (p % 64)))
			last_report[p] = c;
}

static void concurrent_collection(uint64_t mode)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 2);
	struct faultd_region *r = tracked(ctx, mode, 0, NULL, NULL);
	static _Atomic uint64_t written[WORDS];
	static atomic_long last_start[NPAGES];
	static long last_report[NPAGES];
	uint64_t seen[WORDS] = { 0 }, got[WORDS];
	atomic_long returned = 0;
	atomic_bool stop = false;
	struct runner w[2];
	pthread_t t[2];
	long c;

	for (size_t p = 0; p < NPAGES; p++) {
		atomic_store(&last_start[p], -1);
		last_report[p] = -1;
	}
	for (size_t i = 0; i < WORDS; i++)
		atomic_store(&written[i], 0);
	for (unsigned int i = 0; i < 2; i++) {
		w[i] = (struct runner){ .base = faultd_region_base(r),
					.idx = i,
					.stop = &stop,
					.written = written,
					.returned = &returned,
					.last_start = last_start };
		pthread_create(&t[i], NULL, keep_writing, &w[i]);
	}
	for (uint64_t end = test_now_ns() + 2000000000ull;
	     test_now_ns() < end;) {
		c = atomic_load(&returned);
		cr_assert_geq(faultd_region_dirty(r, 0, NPAGES * PAGE, got), 0);
		note_reports(got, c, last_report);
		for (size_t i = 0; i < WORDS; i++)
			seen[i] |= got[i];
		atomic_fetch_add(&returned, 1);
	}
	atomic_store(&stop, true);
	for (unsigned int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	c = atomic_load(&returned);
	cr_assert_geq(faultd_region_dirty(r, 0, NPAGES * PAGE, got), 0);
	note_reports(got, c, last_report);
	for (size_t i = 0; i < WORDS; i++)
		seen[i] |= got[i];
	/* Reported = written, exactly: nothing lost, nothing invented. */
	for (size_t i = 0; i < WORDS; i++)
		cr_expect_eq(seen[i], atomic_load(&written[i]), "word %zu", i);
	/*
	 * A write that started after collection k returned is reported by a
	 * collection after k: the last report of each page is no older than
	 * the start of its last write.
	 */
	for (size_t p = 0; p < NPAGES; p++)
		cr_expect_geq(last_report[p], atomic_load(&last_start[p]),
			      "page %zu: last written after collection %ld "
			      "returned, last reported by collection %ld",
			      p, atomic_load(&last_start[p]), last_report[p]);
	cr_log_info("%ld collections under concurrent writers", c);
	/* With the writers stopped, a collection finds nothing new. */
	cr_expect_eq(faultd_region_dirty(r, 0, NPAGES * PAGE, got), 0);
	faultd_ctx_destroy(ctx);
}

Test(dirty, nothing_lost_under_concurrent_writers_sync, .timeout = 60)
{
	concurrent_collection(FAULTD_REGION_WP);
}

Test(dirty, nothing_lost_under_concurrent_writers_async, .timeout = 60)
{
	concurrent_collection(FAULTD_REGION_WP_ASYNC);
}

/* ------------------------------------------------------------------------
 * The write hook, protect/unprotect, bad input.
 */

struct hook_log {
	atomic_int calls;
	uint64_t off[8];
	uint64_t old_word[8];
};

static void log_old(void *arg, struct faultd_region *r, uint64_t off,
		    const void *old)
{
	struct hook_log *l = arg;
	int i = atomic_fetch_add(&l->calls, 1);

	if (i < 8) {
		l->off[i] = off;
		memcpy(&l->old_word[i], (const char *)old + 64, 8);
	}
}

Test(dirty, write_hook_sees_old_content, .timeout = 30)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 2);
	struct hook_log log = { 0 };
	struct faultd_region *r =
		tracked(ctx, FAULTD_REGION_WP, 0, log_old, &log);
	volatile uint64_t *b = faultd_region_base(r);
	struct faultd_stats s = { .size = sizeof(s) };
	uint64_t got[WORDS];

	/* Page 3: read first (installed protected), then written. */
	cr_expect_eq(b[3 * PAGE / 8 + 8], pattern_word(5, 3 * PAGE + 64));
	b[3 * PAGE / 8 + 8] = 111;
	/* Page 9: a write to a missing page: the hook sees the fill. */
	b[9 * PAGE / 8 + 8] = 222;
	/* A second write to a page is no longer a fault. */
	b[3 * PAGE / 8 + 8] = 333;
	cr_assert_eq(atomic_load(&log.calls), 2);
	cr_expect_eq(log.off[0], 3 * PAGE);
	cr_expect_eq(log.old_word[0], pattern_word(5, 3 * PAGE + 64));
	cr_expect_eq(log.off[1], 9 * PAGE);
	cr_expect_eq(log.old_word[1], pattern_word(5, 9 * PAGE + 64));
	cr_expect_eq(b[3 * PAGE / 8 + 8], 333);
	cr_expect_eq(b[9 * PAGE / 8 + 8], 222);
	cr_assert_eq(faultd_region_stats(r, &s), 0);
	cr_expect_eq(s.wp_faults, 1);
	cr_expect_eq(faultd_region_dirty(r, 0, NPAGES * PAGE, got), 2);
	cr_expect_eq(got[0], (1ull << 3) | (1ull << 9));
	/* Protect again: the next write calls the hook again. */
	cr_assert_eq(faultd_region_protect(r, 3 * PAGE, PAGE), 0);
	b[3 * PAGE / 8 + 8] = 444;
	cr_expect_eq(atomic_load(&log.calls), 3);
	cr_expect_eq(log.old_word[2], 333);
	/* Unprotected pages count as dirty. */
	cr_assert_eq(faultd_region_dirty(r, 0, NPAGES * PAGE, got), 1);
	cr_assert_eq(faultd_region_unprotect(r, 100 * PAGE, 2 * PAGE), 0);
	cr_expect_eq(faultd_region_dirty(r, 0, NPAGES * PAGE, got), 2);
	cr_expect_eq(got[1], 3ull << (100 - 64));
	faultd_ctx_destroy(ctx);
}

/*
 * Three writers write one protected page at once, round after round, with
 * two handler threads: two WP messages for the page are common. The hook
 * must run exactly once a round, and see the page as it was before the
 * round (its first word @round), never a writer's value.
 */
#define RACE_ROUNDS 3000
#define RACE_WRITERS 3

struct hook_race {
	atomic_int calls;
	atomic_int stale;	/* hooks that saw a written value */
	uint64_t stale_old, stale_round;
	uint64_t round;		/* the page's first word before the writes */
	pthread_barrier_t go, done;
	volatile uint64_t *page;
};

static void count_old(void *arg, struct faultd_region *r, uint64_t off,
		      const void *old)
{
	struct hook_race *h = arg;

	(void)r;
	(void)off;
	atomic_fetch_add(&h->calls, 1);
	if (*(const volatile uint64_t *)old != h->round &&
	    !atomic_fetch_add(&h->stale, 1)) {
		h->stale_old = *(const volatile uint64_t *)old;
		h->stale_round = h->round;
	}
}

static void *race_writer(void *arg)
{
	struct hook_race *h = arg;

	for (int i = 0; i < RACE_ROUNDS; i++) {
		pthread_barrier_wait(&h->go);
		__atomic_store_n(&h->page[1], h->round + 1, __ATOMIC_RELAXED);
		pthread_barrier_wait(&h->done);
	}
	return NULL;
}

Test(dirty, write_hook_runs_once_when_writers_race, .timeout = 120)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 2);
	struct hook_race h = { 0 };
	struct faultd_region *r =
		tracked(ctx, FAULTD_REGION_WP, 0, count_old, &h);
	pthread_t t[RACE_WRITERS];
	int base;

	h.page = faultd_region_base(r);
	h.round = pattern_word(5, 0); /* the pager's first word of page 0 */
	h.page[0] = 0; /* filled for a write: one hook call, writable now */
	base = atomic_load(&h.calls);
	pthread_barrier_init(&h.go, NULL, RACE_WRITERS + 1);
	pthread_barrier_init(&h.done, NULL, RACE_WRITERS + 1);
	for (int i = 0; i < RACE_WRITERS; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, race_writer, &h), 0);
	for (uint64_t i = 0; i < RACE_ROUNDS; i++) {
		h.round = i;
		h.page[0] = i;
		cr_assert_eq(faultd_region_protect(r, 0, PAGE), 0);
		pthread_barrier_wait(&h.go);
		pthread_barrier_wait(&h.done);
		cr_assert_eq(atomic_load(&h.calls) - base, (int)i + 1,
			     "round %llu: %d hook calls", (unsigned long long)i,
			     atomic_load(&h.calls) - base);
	}
	for (int i = 0; i < RACE_WRITERS; i++)
		pthread_join(t[i], NULL);
	cr_expect_eq(atomic_load(&h.stale), 0,
		     "%d hooks saw another page: first word %llu in round %llu",
		     atomic_load(&h.stale), (unsigned long long)h.stale_old,
		     (unsigned long long)h.stale_round);
	faultd_ctx_destroy(ctx);
}

Test(dirty, bad_input_exact_errors)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 2);
	struct faultd_region *r = tracked(ctx, FAULTD_REGION_WP, 0, NULL, NULL);
	struct faultd_region_opts o = { .size = sizeof(o), .length = 16 * PAGE };
	struct faultd_region *plain, *x;
	struct faultd_group *g;
	uint64_t bm[WORDS];

	cr_assert_eq(faultd_region_create(ctx, &o, &plain), 0);
	cr_expect_eq(faultd_region_dirty(plain, 0, PAGE, bm), -EOPNOTSUPP);
	cr_expect_eq(faultd_region_protect(plain, 0, PAGE), -EOPNOTSUPP);
	cr_expect_eq(faultd_region_protect(r, NPAGES * PAGE, PAGE), -EINVAL);
	cr_expect_eq(faultd_region_protect(r, (NPAGES - 1) * PAGE, 2 * PAGE),
		     -EINVAL);
	cr_expect_eq(faultd_region_protect(r, 100, PAGE), -EINVAL);
	cr_expect_eq(faultd_region_unprotect(r, 0, 0), -EINVAL);
	cr_expect_eq(faultd_region_dirty(r, 0, PAGE + 1, bm), -EINVAL);
	cr_expect_eq(faultd_region_dirty(r, 0, PAGE, NULL), -EINVAL);
	cr_expect_eq(faultd_region_dirty(NULL, 0, PAGE, bm), -EINVAL);
	o.flags = FAULTD_REGION_WP | FAULTD_REGION_WP_ASYNC;
	cr_expect_eq(faultd_region_create(ctx, &o, &x), -EINVAL);
	o.flags = 0;
	o.write_hook = log_old;
	cr_expect_eq(faultd_region_create(ctx, &o, &x), -EINVAL);
	o.write_hook = NULL;
	cr_assert_eq(faultd_group_create(ctx, NULL, &g), 0);
	o.flags = FAULTD_REGION_WP_ASYNC;
	o.group = g;
	cr_expect_eq(faultd_region_create(ctx, &o, &x), -EINVAL);
	faultd_ctx_destroy(ctx);
}

/*
 * faultd_region_discard() forgets the writes to the pages it drops, in
 * both modes: after written and never-written pages of a tracked region
 * are discarded, a collection reports exactly the written pages outside
 * the discarded range; reading the discarded pages again fills them
 * clean, and only a new write makes one of them dirty.
 */
static void discard_forgets(uint64_t mode, uint64_t kind)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 2);
	struct faultd_region *r = tracked(ctx, mode, kind, NULL, NULL);
	char *base = faultd_region_base(r);
	uint64_t want[WORDS] = { 0 }, got[WORDS];
	volatile char sink = 0;

	for (size_t p = 0; p < NPAGES; p++)
		sink ^= base[p * PAGE];
	cr_assert_eq(faultd_region_dirty(r, 0, NPAGES * PAGE, got), 0);
	/* Every third page written; pages [256, 512) discarded. */
	for (size_t p = 0; p < NPAGES; p += 3) {
		base[p * PAGE + 1] = 1;
		if (p < 256 || p >= 512)
			want[p / 64] |= 1ull << (p % 64);
	}
	cr_assert_eq(faultd_region_discard(r, 256 * PAGE, 256 * PAGE), 0);
	cr_expect_eq(faultd_region_dirty(r, 0, NPAGES * PAGE, got),
		     (ssize_t)popcount_bitmap(want));
	cr_expect_arr_eq(got, want, sizeof(got));
	/* Filled again for reads: clean. */
	for (size_t p = 256; p < 512; p++)
		cr_expect_eq(base[p * PAGE + 64],
			     (char)pattern_word(5, p * PAGE + 64));
	cr_expect_eq(faultd_region_dirty(r, 0, NPAGES * PAGE, got), 0);
	/* A discarded range never touched again is clean too. */
	cr_assert_eq(faultd_region_discard(r, 256 * PAGE, 256 * PAGE), 0);
	cr_expect_eq(faultd_region_dirty(r, 0, NPAGES * PAGE, got), 0);
	base[300 * PAGE] = 1;
	cr_expect_eq(faultd_region_dirty(r, 0, NPAGES * PAGE, got), 1);
	cr_expect_eq(got[300 / 64], 1ull << (300 % 64));
	(void)sink;
	faultd_ctx_destroy(ctx);
}

Test(dirty, discard_forgets_writes_sync_anon, .timeout = 60)
{
	discard_forgets(FAULTD_REGION_WP, 0);
}

Test(dirty, discard_forgets_writes_async_anon, .timeout = 60)
{
	discard_forgets(FAULTD_REGION_WP_ASYNC, 0);
}

Test(dirty, discard_forgets_writes_sync_memfd, .timeout = 60)
{
	discard_forgets(FAULTD_REGION_WP, FAULTD_REGION_MEMFD);
}

Test(dirty, discard_forgets_writes_async_memfd, .timeout = 60)
{
	discard_forgets(FAULTD_REGION_WP_ASYNC, FAULTD_REGION_MEMFD);
}

/*
 * Writers keep writing pages of a range that is discarded over and over.
 * Whenever a write lands after the discard dropped its page, the page
 * keeps it and must be reported; a page discarded last is the pager's
 * again and must not be. So once the writers stop, the dirty set is
 * exactly the set of pages whose content is not the pager's; after one
 * more discard of the range it is empty. FAULTD_STRESS_SECONDS sets how
 * long the writers and discards race (default 1 s).
 */
#define DISCARD_PAGES 256

struct discard_writer {
	char *base;
	unsigned int seed;
	atomic_bool *stop;
};

static void *write_discarded(void *arg)
{
	struct discard_writer *w = arg;

	while (!atomic_load(w->stop)) {
		size_t p = (size_t)rand_r(&w->seed) % DISCARD_PAGES;
		uint64_t off = p * PAGE + 16;

		__atomic_store_n((uint64_t *)(w->base + off),
				 ~pattern_word(5, off), __ATOMIC_RELAXED);
	}
	return NULL;
}

static void discard_races_writers(uint64_t mode, uint64_t kind)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 2);
	struct faultd_region *r = tracked(ctx, mode, kind, NULL, NULL);
	char *base = faultd_region_base(r);
	uint64_t got[WORDS], want[WORDS] = { 0 };
	struct discard_writer w[2];
	atomic_bool stop = false;
	pthread_t t[2];
	long rounds = 0;
	volatile char sink = 0;

	for (size_t p = 0; p < NPAGES; p++)
		sink ^= base[p * PAGE];
	cr_assert_eq(faultd_region_dirty(r, 0, NPAGES * PAGE, got), 0);
	for (unsigned int i = 0; i < 2; i++) {
		w[i] = (struct discard_writer){ .base = base, .seed = i + 1,
						.stop = &stop };
		cr_assert_eq(pthread_create(&t[i], NULL, write_discarded,
					    &w[i]), 0);
	}
	for (uint64_t end = test_now_ns() + (uint64_t)(race_seconds(1.0) * 1e9);
	     test_now_ns() < end; rounds++)
		cr_assert_eq(faultd_region_discard(r, 0,
						   DISCARD_PAGES * PAGE), 0);
	atomic_store(&stop, true);
	for (unsigned int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	cr_assert_geq(faultd_region_dirty(r, 0, NPAGES * PAGE, got), 0);
	for (size_t p = 0; p < NPAGES; p++) {
		uint64_t off = p * PAGE + 16;

		if (*(uint64_t *)(base + off) != pattern_word(5, off))
			want[p / 64] |= 1ull << (p % 64);
	}
	for (size_t i = 0; i < WORDS; i++)
		cr_expect_eq(got[i], want[i], "pages %zu-%zu: reported %#llx, "
			     "written %#llx", i * 64, i * 64 + 63,
			     (unsigned long long)got[i],
			     (unsigned long long)want[i]);
	cr_log_info("%ld discards under writers", rounds);
	cr_assert_eq(faultd_region_discard(r, 0, DISCARD_PAGES * PAGE), 0);
	cr_expect_eq(faultd_region_dirty(r, 0, NPAGES * PAGE, got), 0);
	(void)sink;
	faultd_ctx_destroy(ctx);
}

Test(dirty, discard_races_writers_sync, .timeout = 600)
{
	discard_races_writers(FAULTD_REGION_WP, 0);
}

Test(dirty, discard_races_writers_async, .timeout = 600)
{
	discard_races_writers(FAULTD_REGION_WP_ASYNC, 0);
}

Test(dirty, discard_races_writers_sync_memfd, .timeout = 600)
{
	discard_races_writers(FAULTD_REGION_WP, FAULTD_REGION_MEMFD);
}

Test(dirty, discard_races_writers_async_memfd, .timeout = 600)
{
	discard_races_writers(FAULTD_REGION_WP_ASYNC, FAULTD_REGION_MEMFD);
}
