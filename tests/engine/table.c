// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * table.c - the engine suite: a space's range table under random events,
 * checked against a model (harness.h).
 *
 * The test process is the client: it registers a window of its own memory
 * with a userfaultfd the engine serves from a test source, and changes it
 * with the events a client makes - MADV_DONTNEED (REMOVE), munmap() and an
 * mmap() over pages (UNMAP), mremap() (REMAP, and UNMAP of what was at the
 * target) - so that the table is split, cut and moved as a real client's
 * is. After every event: the engine's table maps every page as the model
 * does; the pages the event touched, those around its edges and a few
 * others read what the model says (the source's content for their offset,
 * zeros after a REMOVE), through real faults; the engine counted exactly
 * the faults, the data pages and the moves the model did, no page waited
 * for an event, none was poisoned, and its pending count is the model's.
 * Every page is read every SWEEP steps. Pages are not all read after every
 * event: a page in is never faulted again, and the translation of pages
 * that moved before their first fault would go unchecked.
 *
 * Seeded: $FAULTD_TEST_SEED replays a run; every failure says its seed.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <linux/userfaultfd.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

#define WIN 1024	/* pages of the window */
#define MAPPED 768	/* of them registered at first: the source */
#define CHUNK 128	/* first ranges: chunks of the source, shuffled */
#define SWEEP 50	/* every page read every SWEEP steps */
#define FEATURES                                                               \
	(UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_EVENT_REMOVE |                \
	 UFFD_FEATURE_EVENT_UNMAP)

static const struct msrc_zero zeros[] = {
	{ 64 * PG, 16 * PG }, { 300 * PG, PG }, { 500 * PG, 32 * PG },
};

/* One round: a session, its space, the window and the model of it. */
struct round {
	struct model m;
	struct front f;
	struct space *sp;
	uint64_t seed, rng;
	unsigned int round, step;
	bool push;
	size_t touched[96];
	size_t nr_touched;
};

#define CHECK(r, cond, fmt, ...)                                               \
	cr_assert(cond, "seed %#llx (FAULTD_TEST_SEED), round %u, step %u: "   \
		  fmt, (unsigned long long)(r)->seed, (r)->round, (r)->step,   \
		  ##__VA_ARGS__)

static size_t rnd(struct round *r, size_t n)
{
	return (size_t)(rng_next(&r->rng) % n);
}

static void round_start(struct round *r, bool push)
{
	struct session_opts o = { .name = "table", .handlers = 2,
				  .push = push, .around = PG };
	struct msrc_opts so = { .size = MAPPED * PG, .tag = r->rng,
				.zeros = zeros,
				.nzeros = sizeof(zeros) / sizeof(zeros[0]) };
	struct srange ranges[MAPPED / CHUNK];
	size_t perm[MAPPED / CHUNK];
	struct msrc *src;
	const char *why = "";
	int uffd = uffd_new(FEATURES);

	if (uffd == -EPERM || uffd == -ENOSYS || uffd == -EINVAL)
		cr_skip_test("no userfaultfd with REMAP, REMOVE and UNMAP "
			     "events here: %s", strerror(-uffd));
	cr_assert_geq(uffd, 0, "userfaultfd: %s", strerror(-uffd));
	cr_assert_eq(msrc_create(&so, &src), 0);
	cr_assert_eq(model_init(&r->m, WIN, src), 0);
	cr_assert_eq(map_rw(r->m.base, MAPPED * PG), 0);
	cr_assert_eq(uffd_register_range(uffd, r->m.base, MAPPED * PG), 0);
	for (size_t i = 0; i < MAPPED / CHUNK; i++)
		perm[i] = i;
	for (size_t i = MAPPED / CHUNK - 1; i > 0; i--) {
		size_t j = rnd(r, i + 1), t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
	for (size_t i = 0; i < MAPPED / CHUNK; i++) {
		ranges[i] = (struct srange){
			(uintptr_t)model_addr(&r->m, i * CHUNK), CHUNK * PG,
			perm[i] * CHUNK * PG };
		model_map(&r->m, i * CHUNK, CHUNK, perm[i] * CHUNK * PG);
	}
	if (push)
		msrc_delay(src, 200);
	cr_assert_eq(front_create(&r->f, &o), 0);
	cr_assert_eq(session_own_source(r->f.s, msrc_source(src)), 0);
	cr_assert_eq(session_add_space(r->f.s, uffd, 0, -1, 1,
				       msrc_source(src), ranges,
				       MAPPED / CHUNK, NULL, 0, &why, &r->sp),
		     0, "%s", why);
	cr_assert_eq(front_run(&r->f), 0);
	r->push = push;
}

static void touch_add(struct round *r, size_t p)
{
	if (p < WIN && r->nr_touched < sizeof(r->touched) / sizeof(r->touched[0]))
		r->touched[r->nr_touched++] = p;
}

/* [p, p + n) and the page each side of it are checked after the step. */
static void touch_span(struct round *r, size_t p, size_t n)
{
	if (p)
		touch_add(r, p - 1);
	for (size_t i = 0; i < n && i < 32; i++)
		touch_add(r, p + i);
	touch_add(r, p + n);
}

/* Has [p, p + n) a page someone else mapped? Events stay off it. */
static bool any_hole(const struct round *r, size_t p, size_t n)
{
	for (size_t i = p; i < p + n; i++)
		if (r->m.pg[i].kind == MP_HOLE)
			return true;
	return false;
}

static void step_remove(struct round *r)
{
	size_t p = rnd(r, WIN), n = 1 + rnd(r, 16);
	int ret;

	n = n < WIN - p ? n : WIN - p;
	if (any_hole(r, p, n))
		return;
	ret = ev_remove(&r->m, p, n);
	CHECK(r, !ret, "MADV_DONTNEED of pages [%zu, +%zu): %s", p, n,
	      strerror(-ret));
	touch_span(r, p, n);
}

static void step_cut(struct round *r)
{
	size_t p = rnd(r, WIN), n = 1 + rnd(r, 8);
	bool over = rnd(r, 2);
	int ret;

	n = n < WIN - p ? n : WIN - p;
	if (any_hole(r, p, n))
		return;
	ret = ev_cut(&r->m, p, n, over);
	CHECK(r, !ret, "%s of pages [%zu, +%zu): %s",
	      over ? "mmap over" : "munmap", p, n, strerror(-ret));
	touch_span(r, p, n);
}

/* Where @n pages from @from may go: mostly the test's own free pages,
 * else anywhere that is not the pages themselves. SIZE_MAX: nowhere. */
static size_t move_target(struct round *r, size_t from, size_t n)
{
	size_t start = rnd(r, WIN);

	for (size_t i = 0; rnd(r, 4) && i < WIN; i++) {
		size_t t = (start + i) % WIN;

		if (model_run(&r->m, t, MP_FILL, n) == n)
			return t;
	}
	start = rnd(r, WIN - n + 1);
	for (size_t i = 0; i < WIN - n + 1; i++) {
		size_t t = (start + i) % (WIN - n + 1);

		if ((t + n <= from || t >= from + n) && !any_hole(r, t, n))
			return t;
	}
	return SIZE_MAX;
}

static void step_move(struct round *r)
{
	size_t from = model_find(&r->m, rnd(r, WIN), MP_DATA), n, to;
	int ret;

	if (from == SIZE_MAX)
		return;
	n = model_run(&r->m, from, MP_DATA, 1 + rnd(r, 32));
	to = move_target(r, from, n);
	if (to == SIZE_MAX)
		return;
	/* Pages that are not one mapping (the kernel merged them with none
	 * of their neighbours) cannot move at once: fewer, down to one. */
	while ((ret = ev_move(&r->m, from, n, to)) == -EFAULT && n > 1)
		n /= 2;
	CHECK(r, !ret, "mremap of pages [%zu, +%zu) to %zu: %s", from, n, to,
	      strerror(-ret));
	touch_span(r, from, n);
	touch_span(r, to, n);
}

static void check_page(struct round *r, size_t p)
{
	char why[256];
	int ret = model_check_page(&r->m, p, true, why, sizeof(why));

	CHECK(r, !ret, "%s", why);
}

/* What the engine counted is what the model says it did. */
static void check_counters(struct round *r)
{
	struct session_view v;
	uint64_t pending = model_pending(&r->m);

	engine_sync(r->sp);
	session_view(r->f.s, &v);
	CHECK(r, atomic_load(&r->sp->st.remaps) == r->m.remaps,
	      "REMAP events: %llu, moves: %llu",
	      (unsigned long long)atomic_load(&r->sp->st.remaps),
	      (unsigned long long)r->m.remaps);
	CHECK(r, v.removes >= r->m.removes + r->m.cuts,
	      "REMOVE and UNMAP events: %llu, fewer than the %llu removes "
	      "and cuts of registered pages", (unsigned long long)v.removes,
	      (unsigned long long)(r->m.removes + r->m.cuts));
	CHECK(r, !v.eagain && !v.poisoned, "faults parked: %llu, pages "
	      "poisoned: %llu", (unsigned long long)v.eagain,
	      (unsigned long long)v.poisoned);
	if (r->push)
		return;
	CHECK(r, v.faults == r->m.faults, "faults: %llu, the model's %llu",
	      (unsigned long long)v.faults, (unsigned long long)r->m.faults);
	CHECK(r, v.pages_urgent == r->m.urgent, "data pages in: %llu, the "
	      "model's %llu", (unsigned long long)v.pages_urgent,
	      (unsigned long long)r->m.urgent);
	CHECK(r, atomic_load(&r->sp->pending) == pending,
	      "pending pages: %llu, the model's %llu",
	      (unsigned long long)atomic_load(&r->sp->pending),
	      (unsigned long long)pending);
}

static void check_step(struct round *r, bool sweep)
{
	char why[256];
	int ret;

	engine_sync(r->sp);
	ret = model_check_table(&r->m, r->sp, why, sizeof(why));
	CHECK(r, !ret, "%s", why);
	for (int i = 0; i < 4; i++)
		touch_add(r, model_find(&r->m, rnd(r, WIN), MP_DATA));
	for (size_t i = 0; i < r->nr_touched; i++)
		check_page(r, r->touched[i]);
	for (size_t p = 0; sweep && p < WIN; p++)
		check_page(r, p);
	r->nr_touched = 0;
	model_note_resident(&r->m);
	check_counters(r);
}

static void one_round(struct round *r, unsigned int steps)
{
	for (r->step = 0; r->step < steps; r->step++) {
		size_t op = rnd(r, 100);

		if (op < 30)
			step_remove(r);
		else if (op < 50)
			step_cut(r);
		else
			step_move(r);
		check_step(r, r->step % SWEEP == SWEEP - 1 ||
				      r->step == steps - 1);
	}
}

/* When the push ran along: it ends with every page in. */
static void check_all_in(struct round *r)
{
	CHECK(r, front_wait_all_in(&r->f, DEADLINE_MS),
	      "the push never brought every page in: %llu pending",
	      (unsigned long long)atomic_load(&r->sp->pending));
	for (size_t p = 0; p < WIN; p++)
		CHECK(r, r->m.pg[p].kind != MP_DATA ||
			      resident(model_addr(&r->m, p)),
		      "page %zu is not in, yet every page is said to be", p);
	check_step(r, true);
	CHECK(r, model_pending(&r->m) == 0 &&
		      atomic_load(&r->sp->pending) == 0,
	      "pending: %llu, the model's %llu",
	      (unsigned long long)atomic_load(&r->sp->pending),
	      (unsigned long long)model_pending(&r->m));
}

static void run_rounds(unsigned int rounds, unsigned int steps, bool push)
{
	struct round r = { .seed = test_seed() };

	r.rng = r.seed;
	cr_log_info("seed %#llx (FAULTD_TEST_SEED replays it)",
		    (unsigned long long)r.seed);
	for (r.round = 0; r.round < rounds; r.round++) {
		round_start(&r, push);
		one_round(&r, steps);
		if (push)
			check_all_in(&r);
		front_free(&r.f);
		model_free(&r.m);
	}
}

TestSuite(table, .timeout = 240);

/* 10,000 events, one at a time, no push: every count is exact. */
Test(table, random_events)
{
	run_rounds(40, 250, false);
}

/* The same while the push installs pages: content, table, all in. */
Test(table, random_events_pushed)
{
	run_rounds(20, 100, true);
}
