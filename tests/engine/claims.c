// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * claims.c - the engine suite: a fault's window and the push never
 * install the same page twice (space.c, claims).
 *
 * A program reading its memory in order from the start catches up with
 * the push at once, and its faults' windows then cover the pages the push
 * is installing. Each installer claims a page before it installs it and
 * leaves a page claimed by another to it, so the only page two installs
 * may both try is a fault's own page (always installed: its thread must
 * be woken): at most one page found in already per fault. Without claims
 * a reader in order found thousands (faultd-bench run criu: 8,700-9,700
 * of 66,000 pages). Each round a reader reads one word of every page of
 * REGION in order, from the moment the session runs, checks each, and
 * the session's counts are checked once every page is in. Rounds run
 * until ROUNDS or until one has raced: a round where no fault found the
 * push in its window proves nothing, and is not counted as one.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

#define REGION (32ul << 20)
#define PAGES (REGION / PG)
#define ROUNDS 8
#define TAG 0xc1a1

struct reader {
	const char *base;
	pthread_t t;
	size_t bad;		/* pages that read wrong */
	size_t first_bad;
};

static void *read_in_order(void *arg)
{
	struct reader *r = arg;

	for (size_t p = 0; p < PAGES; p++) {
		uint64_t w = *(const volatile uint64_t *)(r->base + p * PG);

		if (w != content_word(TAG, p * PG) && !r->bad++)
			r->first_bad = p;
	}
	return NULL;
}

/* One round; returns the session's counts once every page is in. */
static void one_round(struct session_view *v)
{
	struct session_opts o = { .name = "claims", .push = true };
	struct msrc_opts so = { .size = REGION, .tag = TAG };
	struct reader rd = { 0 };
	struct msrc *m;
	struct front f;
	struct space *sp = NULL;
	struct srange r;
	const char *why = "";
	char *base;
	int uffd = uffd_new(0);

	cr_assert_geq(uffd, 0);
	cr_assert_eq(msrc_create(&so, &m), 0);
	base = mmap(NULL, REGION, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert(base != MAP_FAILED);
	madvise(base, REGION, MADV_NOHUGEPAGE);
	cr_assert_eq(uffd_register_range(uffd, base, REGION), 0);
	r = (struct srange){ (uintptr_t)base, REGION, 0 };
	cr_assert_eq(front_create(&f, &o), 0);
	cr_assert_eq(session_own_source(f.s, msrc_source(m)), 0);
	cr_assert_eq(session_add_space(f.s, uffd, 0, -1, 1, msrc_source(m),
				       &r, 1, NULL, 0, &why, &sp),
		     0, "%s", why);
	rd.base = base;
	cr_assert_eq(front_run(&f), 0);
	cr_assert_eq(pthread_create(&rd.t, NULL, read_in_order, &rd), 0);
	pthread_join(rd.t, NULL);
	cr_assert_eq(rd.bad, 0, "%zu pages read wrong, the first page %zu",
		     rd.bad, rd.first_bad);
	cr_assert(front_wait_all_in(&f, DEADLINE_MS), "%llu pages still to "
		  "come", (unsigned long long)atomic_load(&sp->pending));
	engine_sync(sp);
	session_view(f.s, v);
	front_free(&f);
	munmap(base, REGION);
}

TestSuite(claims, .timeout = 120);

Test(claims, a_reader_in_order_and_the_push_install_each_page_once)
{
	unsigned int raced = 0;

	for (unsigned int i = 0; i < 4 * ROUNDS && raced < ROUNDS; i++) {
		struct session_view v;

		one_round(&v);
		cr_assert_eq(v.pages_urgent + v.pages_background, PAGES,
			     "%llu + %llu pages in, of %lu",
			     (unsigned long long)v.pages_urgent,
			     (unsigned long long)v.pages_background, PAGES);
		cr_assert_leq(v.eexist, v.faults,
			      "round %u: %llu pages were found in already by "
			      "%llu faults and the push", i,
			      (unsigned long long)v.eexist,
			      (unsigned long long)v.faults);
		raced += v.faults > 1 && v.pages_background > 0;
	}
	cr_assert_eq(raced, ROUNDS, "only %u rounds of %u had the reader "
		     "fault during the push", raced, 4 * ROUNDS);
}
