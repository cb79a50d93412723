/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * hugepool.h - the huge page pool for tests that need huge pages: reserve
 * them through sysfs (nr_hugepages) for the length of the test, give them
 * back when it ends, and skip the test with the reason when the system
 * cannot provide them. Include after <criterion/criterion.h>.
 */
#ifndef FAULTD_TEST_HUGEPOOL_H
#define FAULTD_TEST_HUGEPOOL_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "setting.h"

#define HPAGE (2ul << 20)
#define GPAGE (1ul << 30)

static inline const char *pool_path(size_t ps, const char *what)
{
	static char path[4][128];
	static unsigned int i;
	char *p = path[i++ % 4];

	snprintf(p, sizeof(path[0]),
		 "/sys/kernel/mm/hugepages/hugepages-%zukB/%s", ps >> 10, what);
	return p;
}

static inline unsigned long pool_read(size_t ps, const char *what)
{
	return setting_number(pool_path(ps, what));
}

/*
 * The pools are shared by the whole machine, and the tests count the free
 * pages: a test holds the pool of one page size alone (setting.h, held
 * exclusive; the lock is the one checkouts before setting.h took) from
 * lock_pool() or reserve_or_skip() until its process exits - passed,
 * failed or skipped (Criterion 2.4 runs .fini after a pass or a failure,
 * not after a skip; atexit() handlers in all three cases). What a test
 * killed for its timeout changed is put back by the next one.
 */
#define POOL_PREFIX "/tmp/faultd-hugetlb-tests"

static struct {
	size_t ps;
	char path[128];		/* its nr_hugepages */
	struct setting s;
	bool at_exit;
} pool = { .s = { .guard = -1, .lock = -1 } };

static inline void hugepool_give_back(void)
{
	setting_release(&pool.s);
}

/* Hold the pool of @ps pages alone for this test. */
static inline void lock_pool_of(size_t ps)
{
	const char *why;
	int err;

	if (pool.s.lock >= 0) {
		cr_assert_eq(pool.ps, ps, "one page size per test");
		return;
	}
	pool.ps = ps;
	snprintf(pool.path, sizeof(pool.path), "%s",
		 pool_path(ps, "nr_hugepages"));
	pool.s = (struct setting)SETTING_INIT(pool.path, POOL_PREFIX);
	err = setting_exclusive(&pool.s, &why);
	if (err)
		cr_skip_test("cannot lock the huge page pool for this test: "
			     "%s (%s)", why, strerror(-err));
	if (!pool.at_exit)
		cr_assert_eq(atexit(hugepool_give_back), 0);
	pool.at_exit = true;
}

/* The pool of 2 MiB pages, for tests that read or empty it. */
static inline void lock_pool(void)
{
	lock_pool_of(HPAGE);
}

/*
 * Size the pool of @ps pages to @n (held: lock_pool_of()), to be given
 * back as the test ends; false if the pool cannot be written (not root?).
 */
static inline bool pool_change(size_t ps, unsigned long n)
{
	char v[SETTING_LEN];
	const char *why;

	lock_pool_of(ps);
	snprintf(v, sizeof(v), "%lu", n);
	return setting_set(&pool.s, v, &why) == 0;
}

/* Make @n more pages of size @ps free, or skip the test saying why. */
static inline void reserve_or_skip(size_t ps, unsigned long n)
{
	lock_pool_of(ps);
	if (!pool_change(ps, pool_read(ps, "nr_hugepages") + n))
		cr_skip_test("cannot write nr_hugepages for %zu kB pages "
			     "(not root?)", ps >> 10);
	if (pool_read(ps, "free_hugepages") < n)
		cr_skip_test("the kernel could not reserve %lu huge pages of "
			     "%zu kB (memory too fragmented?)", n, ps >> 10);
}

#endif /* FAULTD_TEST_HUGEPOOL_H */
