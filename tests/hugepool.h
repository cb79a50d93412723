/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * hugepool.h - the huge page pool for tests that need huge pages: reserve
 * them through sysfs (nr_hugepages) for the length of the test, give them
 * back when it ends, and skip the test with the reason when the system
 * cannot provide them. Include after <criterion/criterion.h>; a suite that
 * reserves sets .fini = hugepool_give_back.
 */
#ifndef FAULTD_TEST_HUGEPOOL_H
#define FAULTD_TEST_HUGEPOOL_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/file.h>

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

static struct {
	size_t ps;
	unsigned long before;
	bool changed;
} pool;

/*
 * The pool is shared by the whole machine, so tests that change it take a
 * lock file for as long as they run (each test is a process of its own:
 * the lock goes with it).
 */
static inline void lock_pool(void)
{
	int lock = open("/tmp/faultd-hugetlb-tests.lock",
			O_RDWR | O_CREAT | O_CLOEXEC, 0666);

	if (lock < 0 || flock(lock, LOCK_EX) < 0)
		cr_skip_test("cannot lock the huge page pool for this test");
}

/* Make @n more pages of size @ps free, or skip the test saying why. */
static inline void reserve_or_skip(size_t ps, unsigned long n)
{
	unsigned long total;

	lock_pool();
	total = pool_read(ps, "nr_hugepages");

	pool.ps = ps;
	pool.before = total;
	if (!pool_write(ps, total + n))
		cr_skip_test("cannot write nr_hugepages for %zu kB pages "
			     "(not root?)", ps >> 10);
	pool.changed = true;
	if (pool_read(ps, "free_hugepages") < n)
		cr_skip_test("the kernel could not reserve %lu huge pages of "
			     "%zu kB (memory too fragmented?)", n, ps >> 10);
}

static inline void hugepool_give_back(void)
{
	if (pool.changed)
		pool_write(pool.ps, pool.before);
	pool.changed = false;
}

#endif /* FAULTD_TEST_HUGEPOOL_H */
