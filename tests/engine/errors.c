// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * errors.c - the engine suite: a source that cannot give a page's
 * content. The page is poisoned (its accesses get SIGBUS), never served
 * as zeros, and only that page: a fault whose window reads the bad page
 * reads its own page again alone (space.c, fill_plan()), and the push
 * reads a run that fails a page at a time (push.c, push_pagewise()). The
 * session still ends with every page in: a poisoned page is done.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <linux/userfaultfd.h>
#include <string.h>

#include <faultd.h>

#include "harness.h"

#define PAGES 64
#define GOOD 3		/* a page whose fault-around window holds BAD */
#define BAD 5		/* -EIO */
#define BAD_MAC 40	/* -EBADMSG: content that failed its check */

struct errs {
	struct model m;
	struct msrc *src;
	struct front f;
	struct space *sp;
};

static void errs_setup(struct errs *e, bool push)
{
	struct session_opts o = { .name = "errors", .handlers = 1,
				  .push = push };
	struct msrc_opts so = { .size = PAGES * PG, .tag = 0xe1 };
	struct faultd_features feat = { .size = sizeof(feat) };
	struct srange r;
	const char *why = "";
	int uffd;

	if (faultd_probe(&feat) || !(feat.have & FAULTD_HAVE_POISON))
		cr_skip_test("no UFFDIO_POISON here: a bad page would be made "
			     "inaccessible (SIGSEGV), not poisoned");
	uffd = uffd_new(0);
	cr_assert_geq(uffd, 0, "userfaultfd: %s", strerror(-uffd));
	cr_assert_eq(msrc_create(&so, &e->src), 0);
	msrc_fail(e->src, BAD * PG, -EIO);
	msrc_fail(e->src, BAD_MAC * PG, -EBADMSG);
	cr_assert_eq(model_init(&e->m, PAGES, e->src), 0);
	cr_assert_eq(map_rw(e->m.base, PAGES * PG), 0);
	cr_assert_eq(uffd_register_range(uffd, e->m.base, PAGES * PG), 0);
	model_map(&e->m, 0, PAGES, 0);
	r = (struct srange){ (uintptr_t)e->m.base, PAGES * PG, 0 };
	cr_assert_eq(front_create(&e->f, &o), 0);
	cr_assert_eq(session_own_source(e->f.s, msrc_source(e->src)), 0);
	cr_assert_eq(session_add_space(e->f.s, uffd, 0, -1, 1,
				       msrc_source(e->src), &r, 1, NULL, 0,
				       &why, &e->sp),
		     0, "%s", why);
	cr_assert_eq(front_run(&e->f), 0);
}

/* Every page but the bad ones reads its content; those get SIGBUS. */
static void check_pages(struct errs *e)
{
	char why[256];

	for (size_t p = 0; p < PAGES; p++) {
		if (p == BAD || p == BAD_MAC) {
			cr_assert(load_sigbus(model_addr(&e->m, p)),
				  "page %zu, which the source cannot give, "
				  "was served", p);
			continue;
		}
		cr_assert_eq(model_check_page(&e->m, p, false, why,
					      sizeof(why)),
			     0, "%s", why);
	}
}

static void errs_end(struct errs *e)
{
	struct session_view v;

	cr_assert(front_wait_all_in(&e->f, DEADLINE_MS),
		  "%llu pages still to come",
		  (unsigned long long)atomic_load(&e->sp->pending));
	engine_sync(e->sp);
	session_view(e->f.s, &v);
	cr_assert_eq(v.poisoned, 2, "%llu pages poisoned, not the 2 the "
		     "source cannot give", (unsigned long long)v.poisoned);
	front_free(&e->f);
	model_free(&e->m);
}

TestSuite(errors, .timeout = 60);

/* A fault whose window holds a bad page gets its own page. */
Test(errors, demand)
{
	struct errs e;
	struct toucher t;
	char buf[PG];

	errs_setup(&e, false);
	cr_assert_eq(toucher_start(&t, model_addr(&e.m, GOOD), PG), 0);
	cr_assert(toucher_wait(&t, DEADLINE_MS, buf),
		  "the fault at page %d, whose window holds a bad page, was "
		  "left asleep", GOOD);
	cr_assert_eq(t.ret, (ssize_t)PG, "page %d, whose window holds a bad "
		     "page, was not served: %s", GOOD, strerror(t.err));
	cr_assert(model_page_matches(&e.m, GOOD, buf));
	cr_assert_geq(msrc_reads(e.src, GOOD * PG, GATE_URGENT), 2,
		      "the faulting page was not read again alone");
	toucher_free(&t);
	cr_assert_eq(toucher_start(&t, model_addr(&e.m, BAD), PG), 0);
	cr_assert(toucher_wait(&t, DEADLINE_MS, NULL),
		  "the fault at the bad page was left asleep");
	cr_assert(t.ret < 0 && t.err == EFAULT,
		  "the bad page was served (%zd)", t.ret);
	toucher_free(&t);
	check_pages(&e);
	errs_end(&e);
}

/* The push poisons what it cannot read, and pushes the rest. */
Test(errors, push)
{
	struct errs e;

	errs_setup(&e, true);
	cr_assert(front_wait_all_in(&e.f, DEADLINE_MS),
		  "the push never brought every page in");
	for (size_t p = 0; p < PAGES; p++)
		cr_assert(p == BAD || p == BAD_MAC ||
				  resident(model_addr(&e.m, p)),
			  "page %zu was not pushed", p);
	check_pages(&e);
	errs_end(&e);
}
