// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * pure-readahead.c - suite "pure": the read-ahead window (ra_next() and
 * readahead_fault() in prefetch.c) on a region made by hand, without
 * userfaultfd or prefetch workers: the windows a sequence of faults
 * queues, where each marker is, what a fault behind the window or
 * elsewhere does, and the clipping at the region's end.
 *
 * The requests go into a prefetch pool that has no worker thread, where
 * the test reads them. The pool, struct readahead and ra_next() are
 * static, so prefetch.c is part of this program: its other functions are
 * the ones the library links with, here compiled once more (the archive's
 * copy is not linked: every symbol of it is defined already).
 */
#include <criterion/criterion.h>

#include "helpers.h"
#include "../libfaultd/prefetch.c"

#define KIB 1024ul

struct ra {
	struct faultd_ctx ctx;
	struct pf_pool pool;
	struct faultd_region r;
	struct readahead state;
	struct stat_block st;
	unsigned int seen; /* requests checked so far */
};

/* A region of @len bytes with read-ahead up to @ra_max, as
 * prefetch_setup() leaves it, and a pool nobody takes requests from. */
static struct ra *ra_new(size_t len, size_t fault_around, size_t ra_max)
{
	struct ra *t = calloc(1, sizeof(*t));

	cr_assert_not_null(t);
	pthread_mutex_init(&t->pool.lock, NULL);
	pthread_cond_init(&t->pool.cond, NULL);
	t->pool.ctx = &t->ctx;
	t->ctx.pf = &t->pool;
	t->r.ctx = &t->ctx;
	t->r.page_size = PAGE;
	atomic_store(&t->r.len, len);
	t->r.fault_around = fault_around;
	t->r.ra_max = ra_max;
	pthread_mutex_init(&t->state.lock, NULL);
	t->state.prev_end = t->state.marker = NO_MARKER;
	t->r.ra = &t->state;
	return t;
}

static void ra_free(struct ra *t)
{
	pthread_mutex_destroy(&t->state.lock);
	pthread_cond_destroy(&t->pool.cond);
	pthread_mutex_destroy(&t->pool.lock);
	free(t);
}

/* A fault at @off whose fill ended at @end (as the fault path calls it). */
static void fault(struct ra *t, uint64_t off, uint64_t end)
{
	readahead_fault(&t->r, &t->st, off, end);
}

/* The next request is [off, off + len) with @marker left missing. */
static void expect_queued(struct ra *t, uint64_t off, size_t len,
			  uint64_t marker)
{
	const struct pf_req *q;

	cr_assert_gt(t->pool.n, t->seen, "request %u was not queued",
		     t->seen);
	q = &t->pool.q[(t->pool.head + t->seen) % PF_QUEUE];
	cr_expect_eq(q->r, &t->r);
	cr_expect_eq(q->off, off, "request %u at %#llx, want %#llx", t->seen,
		     (unsigned long long)q->off, (unsigned long long)off);
	cr_expect_eq(q->len, len, "request %u of %zu bytes, want %zu", t->seen,
		     q->len, len);
	cr_expect_eq(q->marker, marker, "request %u marker %#llx, want %#llx",
		     t->seen, (unsigned long long)q->marker,
		     (unsigned long long)marker);
	t->seen++;
}

static void expect_nothing_more(struct ra *t)
{
	cr_expect_eq(t->pool.n, t->seen, "%u requests, want %u", t->pool.n,
		     t->seen);
	cr_expect_eq(atomic_load(&t->r.pf_pending), (int)t->pool.n);
}

Test(readahead, the_window_doubles_up_to_the_maximum)
{
	struct ra *t = ra_new(64 * MIB, 0, MIB);
	static const size_t win[] = { 128 * KIB, 256 * KIB, 512 * KIB, MIB,
				      MIB, MIB };
	uint64_t start = 8 * KIB, marker;

	/* The first fault starts nothing; the one after it does. */
	fault(t, 0, 4 * KIB);
	expect_nothing_more(t);
	fault(t, 4 * KIB, 8 * KIB);
	for (size_t i = 0; i < sizeof(win) / sizeof(win[0]); i++) {
		marker = start + win[i] / 2;
		expect_queued(t, start, win[i], marker);
		cr_expect_eq(t->state.win, win[i]);
		cr_expect_eq(t->state.marker, marker);
		cr_expect_eq(t->state.q_start, 8 * KIB);
		cr_expect_eq(t->state.q_end, start + win[i]);
		/* The reader reaches the marker: the next window starts
		 * where this one ends. */
		fault(t, marker, marker + 4 * KIB);
		start += win[i];
	}
	expect_queued(t, start, MIB, start + MIB / 2);
	expect_nothing_more(t);
	cr_expect_eq(t->st.c[ST_RA_HITS], sizeof(win) / sizeof(win[0]));
	cr_expect(atomic_load(&t->r.pf_used));
	ra_free(t);
}

Test(readahead, fault_around_sets_the_first_window)
{
	/* Twice the fault-around window when that is more than 128 KiB. */
	struct ra *t = ra_new(64 * MIB, 256 * KIB, 4 * MIB);

	fault(t, 0, 256 * KIB);
	fault(t, 256 * KIB, 512 * KIB);
	expect_queued(t, 512 * KIB, 512 * KIB, 768 * KIB);
	fault(t, 768 * KIB, 1024 * KIB);
	expect_queued(t, 1024 * KIB, MIB, 1536 * KIB);
	expect_nothing_more(t);
	ra_free(t);

	/* The maximum caps the first window too. */
	t = ra_new(64 * MIB, 0, 64 * KIB);
	fault(t, 0, 4 * KIB);
	fault(t, 4 * KIB, 8 * KIB);
	expect_queued(t, 8 * KIB, 64 * KIB, 40 * KIB);
	expect_nothing_more(t);
	ra_free(t);
}

Test(readahead, a_fault_behind_the_window_changes_nothing)
{
	struct ra *t = ra_new(64 * MIB, 0, MIB);

	fault(t, 0, 4 * KIB);
	fault(t, 4 * KIB, 8 * KIB);
	expect_queued(t, 8 * KIB, 128 * KIB, 72 * KIB);
	/* The workers are behind the reader: inside the queued range, not
	 * at the marker; its first page too, though that one also follows
	 * the last fault. */
	fault(t, 8 * KIB, 12 * KIB);
	fault(t, 20 * KIB, 24 * KIB);
	fault(t, 132 * KIB, 136 * KIB);
	expect_nothing_more(t);
	cr_expect_eq(t->state.win, 128 * KIB);
	cr_expect_eq(t->state.marker, 72 * KIB);
	cr_expect_eq(t->state.q_start, 8 * KIB);
	cr_expect_eq(t->state.q_end, 136 * KIB);
	/* The marker still continues it. */
	fault(t, 72 * KIB, 76 * KIB);
	expect_queued(t, 136 * KIB, 256 * KIB, 264 * KIB);
	expect_nothing_more(t);
	cr_expect_eq(t->st.c[ST_RA_HITS], 1);
	ra_free(t);
}

Test(readahead, a_fault_elsewhere_ends_the_sequence)
{
	struct ra *t = ra_new(64 * MIB, 0, MIB);

	fault(t, 0, 4 * KIB);
	fault(t, 4 * KIB, 8 * KIB);
	fault(t, 72 * KIB, 76 * KIB);
	t->seen = 2;
	fault(t, 32 * MIB, 32 * MIB + 4 * KIB);
	expect_nothing_more(t);
	cr_expect_eq(t->state.win, 0);
	cr_expect_eq(t->state.q_start, 0);
	cr_expect_eq(t->state.q_end, 0);
	cr_expect_eq(t->state.marker, NO_MARKER);
	/* The old marker is nothing now... */
	fault(t, 264 * KIB, 268 * KIB);
	expect_nothing_more(t);
	/* ... and a new sequence starts from the first window again. */
	fault(t, 268 * KIB, 272 * KIB);
	expect_queued(t, 272 * KIB, 128 * KIB, 336 * KIB);
	expect_nothing_more(t);
	cr_expect_eq(t->st.c[ST_RA_HITS], 1);
	ra_free(t);
}

Test(readahead, the_region_end_clips_the_window)
{
	/* 200 KiB: the first window fits, the second is cut to 64 KiB. */
	struct ra *t = ra_new(200 * KIB, 0, MIB);

	fault(t, 0, 4 * KIB);
	fault(t, 4 * KIB, 8 * KIB);
	expect_queued(t, 8 * KIB, 128 * KIB, 72 * KIB);
	fault(t, 72 * KIB, 76 * KIB);
	expect_queued(t, 136 * KIB, 64 * KIB, 168 * KIB);
	cr_expect_eq(t->state.win, 256 * KIB, "the window grows regardless");
	cr_expect_eq(t->state.q_end, 200 * KIB);
	/* At the end: nothing left to queue. */
	fault(t, 168 * KIB, 172 * KIB);
	expect_nothing_more(t);
	cr_expect_eq(t->state.q_end, 200 * KIB);
	cr_expect_eq(t->state.marker, 200 * KIB);
	ra_free(t);
}

Test(readahead, a_short_window_has_no_marker_and_odd_ones_round_down)
{
	/* 148 KiB: after 8 + 128, 12 KiB (three pages) are left. */
	struct ra *t = ra_new(148 * KIB, 0, MIB);

	fault(t, 0, 4 * KIB);
	fault(t, 4 * KIB, 8 * KIB);
	fault(t, 72 * KIB, 76 * KIB);
	t->seen = 1;
	expect_queued(t, 136 * KIB, 12 * KIB, 140 * KIB);
	ra_free(t);

	/* One page left: no marker; the sequence goes on from its end. */
	t = ra_new(140 * KIB, 0, MIB);
	fault(t, 0, 4 * KIB);
	fault(t, 4 * KIB, 8 * KIB);
	fault(t, 72 * KIB, 76 * KIB);
	t->seen = 1;
	expect_queued(t, 136 * KIB, 4 * KIB, NO_MARKER);
	cr_expect_eq(t->state.marker, 140 * KIB);
	expect_nothing_more(t);
	ra_free(t);
}

Test(readahead, a_dying_region_queues_nothing)
{
	struct ra *t = ra_new(64 * MIB, 0, MIB);

	atomic_store(&t->r.pf_dying, true);
	fault(t, 0, 4 * KIB);
	fault(t, 4 * KIB, 8 * KIB);
	expect_nothing_more(t);
	cr_expect_eq(atomic_load(&t->r.pf_pending), 0);
	ra_free(t);
}
