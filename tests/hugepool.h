/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * hugepool.h - the huge page pool for tests that need huge pages: reserve
 * them through sysfs (nr_hugepages) for the length of the test, give them
 * back when it ends, and skip the test with the reason when the system
 * cannot provide them. Include after <criterion/criterion.h>.
 */
#ifndef FAULTD_TEST_HUGEPOOL_H
#define FAULTD_TEST_HUGEPOOL_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>

#define HPAGE (2ul << 20)
#define GPAGE (1ul << 30)

static inline unsigned long pool_read(size_t ps, const char *what)
{
	char path[128];
	unsigned long v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%zukB/%s",
		 ps >> 10, what);
	f = fopen(path, "r");
	if (f && fscanf(f, "%lu", &v) != 1)
		v = 0;
	if (f)
		fclose(f);
	return v;
}

static inline bool pool_write(size_t ps, unsigned long n)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path),
		 "/sys/kernel/mm/hugepages/hugepages-%zukB/nr_hugepages",
		 ps >> 10);
	f = fopen(path, "w");
	if (!f)
		return false;
	fprintf(f, "%lu\n", n);
	return fclose(f) == 0;
}

/*
 * What the test changed: the pool of one page size, and its size before.
 * It is given back when the test process exits - passed, failed or
 * skipped (Criterion runs a suite's .fini only after a test that ran to
 * its end, atexit() handlers in all three cases). A test killed for its
 * timeout gives back nothing: STATE records the change while the lock is
 * held, and whoever takes the lock next puts the pool back first.
 */
#define LOCK "/tmp/faultd-hugetlb-tests.lock"
#define STATE "/tmp/faultd-hugetlb-tests.state"

static struct {
	size_t ps;
	unsigned long before;
	bool changed, at_exit;
} pool;

static inline void hugepool_give_back(void)
{
	if (pool.changed && pool_write(pool.ps, pool.before))
		unlink(STATE);
	pool.changed = false;
}

/* A test before this one left the pool changed: put it back. */
static inline void undo_dead_test(void)
{
	FILE *f = fopen(STATE, "r");
	unsigned long before;
	size_t ps;

	if (!f)
		return;
	if (fscanf(f, "%zu %lu", &ps, &before) == 2 && pool_write(ps, before))
		unlink(STATE);
	fclose(f);
}

/*
 * The pool is shared by the whole machine, so tests that change it take a
 * lock file for as long as they run (each test is a process of its own:
 * the lock goes with it).
 */
static inline void lock_pool(void)
{
	int lock = open(LOCK, O_RDWR | O_CREAT | O_CLOEXEC, 0666);

	if (lock < 0 || flock(lock, LOCK_EX) < 0)
		cr_skip_test("cannot lock the huge page pool for this test");
	undo_dead_test();
}

/*
 * Size the pool of @ps pages to @n (lock_pool() first), to be given back
 * as the test ends; false if the pool cannot be written (not root?). One
 * page size per test.
 */
static inline bool pool_change(size_t ps, unsigned long n)
{
	FILE *f;

	if (!pool.changed) {
		pool.ps = ps;
		pool.before = pool_read(ps, "nr_hugepages");
		f = fopen(STATE, "w");
		cr_assert(f, "cannot write " STATE);
		fprintf(f, "%zu %lu\n", ps, pool.before);
		cr_assert_eq(fclose(f), 0);
		pool.changed = true;
		if (!pool.at_exit)
			cr_assert_eq(atexit(hugepool_give_back), 0);
		pool.at_exit = true;
	}
	cr_assert_eq(pool.ps, ps, "one page size per test");
	return pool_write(ps, n);
}

/* Make @n more pages of size @ps free, or skip the test saying why. */
static inline void reserve_or_skip(size_t ps, unsigned long n)
{
	unsigned long total;

	lock_pool();
	total = pool_read(ps, "nr_hugepages");
	if (!pool_change(ps, total + n))
		cr_skip_test("cannot write nr_hugepages for %zu kB pages "
			     "(not root?)", ps >> 10);
	if (pool_read(ps, "free_hugepages") < n)
		cr_skip_test("the kernel could not reserve %lu huge pages of "
			     "%zu kB (memory too fragmented?)", n, ps >> 10);
}

#endif /* FAULTD_TEST_HUGEPOOL_H */
