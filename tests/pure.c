// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * pure.c - suite "pure": the state machines that need no userfaultfd and
 * no handler thread, driven by hand as the kernel drives mm/vma.c in user
 * space. Here the page cache's page states (pcache_claim() and the
 * calls around it, pcache.c) and the latency histogram's buckets (stats.c),
 * both reached through internal.h. The files next to this one include a
 * library source to reach its static functions: pure-dirty.c (bitmaps),
 * pure-evict.c (the CLOCK), pure-readahead.c (the read-ahead window).
 */
#include <criterion/criterion.h>
#include <inttypes.h>

#include "helpers.h"
#include "internal.h"

/* ------------------------------------------------------------------------
 * pcache_claim(): who prepares a page of a page cache.
 */

struct claim_case {
	int32_t from;
	bool minor, evictable;
	int ret;	/* PCACHE_CLAIM_* */
	int32_t to;	/* the page's state after the claim */
	bool stale;	/* *was_stale after a PREPARE */
};

static const struct claim_case claim_cases[] = {
	/* Nobody prepared it: the claimer does, unless a MINOR fault of a
	 * base the evictor never shrinks says its content is in place. */
	{ PAGE_NONE, false, false, PCACHE_CLAIM_PREPARE, PAGE_BUSY, false },
	{ PAGE_NONE, true, false, PCACHE_CLAIM_MAPPED, PAGE_READY, false },
	{ PAGE_NONE, false, true, PCACHE_CLAIM_PREPARE, PAGE_BUSY, false },
	{ PAGE_NONE, true, true, PCACHE_CLAIM_PREPARE, PAGE_BUSY, false },
	/* In place: map it; with a budget the mapper holds it. */
	{ PAGE_READY, false, false, PCACHE_CLAIM_MAPPED, PAGE_READY, false },
	{ PAGE_READY, true, false, PCACHE_CLAIM_MAPPED, PAGE_READY, false },
	{ PAGE_READY, false, true, PCACHE_CLAIM_MAPPED, PAGE_BUSY, false },
	{ PAGE_READY, true, true, PCACHE_CLAIM_MAPPED, PAGE_BUSY, false },
	/* Discarded: prepared again, whatever the fault says. */
	{ PAGE_STALE, false, false, PCACHE_CLAIM_PREPARE, PAGE_BUSY, true },
	{ PAGE_STALE, true, false, PCACHE_CLAIM_PREPARE, PAGE_BUSY, true },
	{ PAGE_STALE, false, true, PCACHE_CLAIM_PREPARE, PAGE_BUSY, true },
	{ PAGE_STALE, true, true, PCACHE_CLAIM_PREPARE, PAGE_BUSY, true },
};

Test(pcache_claim, every_free_state_by_fault_and_base)
{
	for (size_t i = 0; i < sizeof(claim_cases) / sizeof(claim_cases[0]);
	     i++) {
		const struct claim_case *c = &claim_cases[i];
		struct page_state s = { c->from };
		/* The opposite of what a PREPARE must report, so that it
		 * shows the claim wrote it. */
		bool stale = c->ret == PCACHE_CLAIM_PREPARE ? !c->stale : false;
		int ret = pcache_claim(&s, c->minor, c->evictable, &stale);

		cr_expect_eq(ret, c->ret, "case %zu: claim %d, want %d", i, ret,
			     c->ret);
		cr_expect_eq(s.state, c->to, "case %zu: state %d, want %d", i,
			     s.state, c->to);
		cr_expect_eq(stale, c->stale, "case %zu: was_stale %d", i,
			     stale);
	}
}

Test(pcache_claim, trylock_takes_only_the_state_named)
{
	struct page_state s = { PAGE_READY };

	cr_expect_not(pcache_trylock(&s, PAGE_STALE));
	cr_expect_eq(s.state, PAGE_READY);
	cr_expect_not(pcache_trylock(&s, PAGE_NONE));
	cr_expect_eq(s.state, PAGE_READY);
	cr_expect(pcache_trylock(&s, PAGE_READY));
	cr_expect_eq(s.state, PAGE_BUSY);
	/* Held: nobody takes it again, from any state. */
	cr_expect_not(pcache_trylock(&s, PAGE_READY));
	cr_expect_not(pcache_trylock(&s, PAGE_BUSY | PAGE_WAITERS));
	cr_expect_eq(s.state, PAGE_BUSY);
	pcache_release(&s, PAGE_STALE);
	cr_expect_eq(s.state, PAGE_STALE);
	cr_expect(pcache_trylock(&s, PAGE_STALE));
	cr_expect_eq(s.state, PAGE_BUSY);
}

/* A thread that claims a page someone holds, and what it got. */
struct claimer {
	pthread_t t;
	struct page_state *s;
	bool evictable;
	int ret;
	bool stale;
	atomic_int *done;
};

static void *claimer_main(void *arg)
{
	struct claimer *c = arg;

	c->ret = pcache_claim(c->s, false, c->evictable, &c->stale);
	atomic_fetch_add(c->done, 1);
	return NULL;
}

static void claimer_start(struct claimer *c, struct page_state *s,
			  bool evictable, atomic_int *done)
{
	*c = (struct claimer){ .s = s, .evictable = evictable, .done = done };
	cr_assert_eq(pthread_create(&c->t, NULL, claimer_main, c), 0);
}

/*
 * Wait (with a deadline) until the page shows a waiter and @done claims
 * have returned; a claimer that sees BUSY sets PAGE_WAITERS before it
 * sleeps, and nothing but this thread releases the page.
 */
static void wait_waiting(struct page_state *s, atomic_int *done, int want)
{
	uint64_t end = test_now_ns() + 10000000000ull;

	while (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) !=
		       (PAGE_BUSY | PAGE_WAITERS) ||
	       atomic_load(done) != want) {
		cr_assert(test_now_ns() < end,
			  "no claimer waits on the page: state %#x, %d done",
			  (unsigned int)s->state, atomic_load(done));
		sched_yield();
	}
}

static void claim_after_release(int32_t to, int want_ret, bool want_stale)
{
	struct page_state s = { PAGE_BUSY };
	atomic_int done = 0;
	struct claimer c;

	claimer_start(&c, &s, false, &done);
	wait_waiting(&s, &done, 0);
	pcache_release(&s, to);
	cr_assert(wait_at_least(&done, 1, 10000), "the waiter was not woken");
	pthread_join(c.t, NULL);
	cr_expect_eq(c.ret, want_ret);
	cr_expect_eq(c.stale, want_stale);
	cr_expect_eq(s.state, want_ret == PCACHE_CLAIM_PREPARE ? PAGE_BUSY
							     : PAGE_READY);
}

Test(pcache_claim, busy_waits_then_maps_what_was_prepared, .timeout = 30)
{
	claim_after_release(PAGE_READY, PCACHE_CLAIM_MAPPED, false);
}

Test(pcache_claim, busy_waits_then_prepares_what_was_dropped, .timeout = 30)
{
	claim_after_release(PAGE_NONE, PCACHE_CLAIM_PREPARE, false);
	claim_after_release(PAGE_STALE, PCACHE_CLAIM_PREPARE, true);
}

/*
 * With a budget a mapped page is held: of two waiters woken by one
 * release, one takes it and the other waits again until it is let go.
 */
Test(pcache_claim, evictable_waiters_take_the_page_in_turn, .timeout = 30)
{
	struct page_state s = { PAGE_BUSY };
	atomic_int done = 0;
	struct claimer c[2];

	claimer_start(&c[0], &s, true, &done);
	claimer_start(&c[1], &s, true, &done);
	wait_waiting(&s, &done, 0);
	pcache_release(&s, PAGE_READY);
	wait_waiting(&s, &done, 1);
	cr_expect_eq(atomic_load(&done), 1);
	pcache_release(&s, PAGE_READY);
	cr_assert(wait_at_least(&done, 2, 10000), "the second waiter sleeps");
	for (int i = 0; i < 2; i++) {
		pthread_join(c[i].t, NULL);
		cr_expect_eq(c[i].ret, PCACHE_CLAIM_MAPPED, "claimer %d", i);
	}
	cr_expect_eq(s.state, PAGE_BUSY);
}

Test(pcache_claim, release_sets_the_state_and_clears_waiters)
{
	struct page_state s = { PAGE_BUSY | PAGE_WAITERS };

	/* Nobody waits in fact: the wake finds no one and the state is
	 * exactly the one released. */
	pcache_release(&s, PAGE_READY);
	cr_expect_eq(s.state, PAGE_READY);
}

/* A base with @n page states and two more past its end, to see that
 * nothing writes there. */
static struct page_cache *base_of(size_t n)
{
	struct page_cache *b = calloc(1, sizeof(*b));

	cr_assert_not_null(b);
	b->page_size = PAGE;
	b->nr_states = n;
	b->states = calloc(n + 2, sizeof(*b->states));
	cr_assert_not_null(b->states);
	for (size_t i = 0; i < n + 2; i++)
		b->states[i].state = PAGE_READY;
	return b;
}

static void base_free(struct page_cache *b)
{
	free(b->states);
	free(b);
}

Test(pcache_claim, mark_stale_and_forget_cover_exactly_their_range)
{
	struct page_cache *b = base_of(4);

	cr_expect_eq(pcache_state(b, 3 * PAGE), &b->states[3]);
	cr_expect_eq(pcache_state(b, 3 * PAGE + PAGE - 1), &b->states[3]);
	pcache_mark_stale(b, PAGE, 2 * PAGE);
	cr_expect_eq(b->states[0].state, PAGE_READY);
	cr_expect_eq(b->states[1].state, PAGE_STALE);
	cr_expect_eq(b->states[2].state, PAGE_STALE);
	cr_expect_eq(b->states[3].state, PAGE_READY);
	/* Forgetting past the end (a shrunk region) stops at its end. */
	pcache_forget(b, 2 * PAGE, 4 * PAGE);
	cr_expect_eq(b->states[1].state, PAGE_STALE);
	cr_expect_eq(b->states[2].state, PAGE_NONE);
	cr_expect_eq(b->states[3].state, PAGE_NONE);
	cr_expect_eq(b->states[4].state, PAGE_READY);
	cr_expect_eq(b->states[5].state, PAGE_READY);
	base_free(b);
}

/* ------------------------------------------------------------------------
 * The latency histogram: FAULTD_HIST_SUB buckets per power of two.
 */

_Static_assert(FAULTD_HIST_SUB == 4, "the cases below count 4 a power of 2");

/* The one bucket stat_latency() counts @ns in. */
static unsigned int bucket_of(uint64_t ns, bool shared)
{
	struct stat_block b;
	unsigned int found = FAULTD_HIST_BUCKETS, n = 0;

	memset(&b, 0, sizeof(b));
	if (shared)
		stat_latency_shared(&b, ns);
	else
		stat_latency(&b, ns);
	for (unsigned int i = 0; i < FAULTD_HIST_BUCKETS; i++) {
		if (b.lat[i]) {
			cr_assert_eq(b.lat[i], 1,
				     "%" PRIu64 " ns counted twice", ns);
			found = i;
			n++;
		}
	}
	for (unsigned int i = 0; i < ST_NR; i++)
		cr_assert_eq(b.c[i], 0, "a latency moved counter %u", i);
	cr_assert_eq(n, 1, "%" PRIu64 " ns is in %u buckets", ns, n);
	return found;
}

static void expect_bucket(uint64_t ns, unsigned int want)
{
	unsigned int got = bucket_of(ns, false);

	cr_expect_eq(got, want, "%" PRIu64 " ns: bucket %u, want %u", ns, got,
		     want);
	cr_expect_eq(bucket_of(ns, true), got, "%" PRIu64 " ns shared", ns);
}

Test(hist_bucket, below_sub_one_bucket_per_ns)
{
	for (unsigned int ns = 0; ns < FAULTD_HIST_SUB; ns++)
		expect_bucket(ns, ns);
	/* Octaves 0 and 1 are those buckets: 4 ns opens octave 2, at 8. */
	expect_bucket(4, 8);
	expect_bucket(5, 9);
	expect_bucket(6, 10);
	expect_bucket(7, 11);
}

/* Bucket 4k opens [2^k, 2^(k+1)); each quarter of it is one bucket. */
Test(hist_bucket, powers_of_two_and_their_neighbours)
{
	for (unsigned int k = 3; k < 40; k++) {
		uint64_t p = 1ull << k, q = p >> 2;

		expect_bucket(p - 1, 4 * k - 1);
		expect_bucket(p, 4 * k);
		expect_bucket(p + 1, 4 * k);
		expect_bucket(p + q - 1, 4 * k);
		expect_bucket(p + q, 4 * k + 1);
		expect_bucket(p + 2 * q, 4 * k + 2);
		expect_bucket(p + 3 * q - 1, 4 * k + 2);
		expect_bucket(p + 3 * q, 4 * k + 3);
		expect_bucket(2 * p - 1, 4 * k + 3);
	}
}

Test(hist_bucket, the_last_bucket_takes_everything_longer)
{
	const unsigned int last = FAULTD_HIST_BUCKETS - 1;

	cr_assert_eq(last, 159);
	expect_bucket((1ull << 40) - 1, last);
	expect_bucket(1ull << 40, last);
	expect_bucket((1ull << 40) + 1, last);
	expect_bucket(1ull << 63, last);
	expect_bucket(UINT64_MAX, last);
}

/* A percentile of one sample lies in that sample's bucket. */
Test(hist_bucket, percentile_of_one_sample_is_in_its_bucket)
{
	static const uint64_t ns[] = { 0, 3, 4, 7, 8, 1000, 12345, 1ull << 20,
				       (1ull << 39) + 5 };

	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		struct stat_block b;
		uint64_t v;

		memset(&b, 0, sizeof(b));
		stat_latency(&b, ns[i]);
		v = hist_percentile(b.lat, 50);
		cr_expect_eq(bucket_of(v, false), bucket_of(ns[i], false),
			     "%" PRIu64 " ns reads back as %" PRIu64, ns[i], v);
	}
}
