// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * huge.c - huge-page regions: page sizes (from libhugetlbfs), mmap and
 * memfd flags, and a reservation error that says how to fix it.
 *
 * An anonymous hugetlb region is resolved like any other with UFFDIO_COPY
 * (hugetlb has no zero page, so zero-fill copies from a buffer of zeros).
 * A memfd-hugetlb region has a page cache (pcache.c) and is resolved
 * with UFFDIO_CONTINUE, without copying the page.
 */
#include <errno.h>
#include <linux/memfd.h>
#include <stddef.h>
#include <hugetlbfs.h>
#include <stdio.h>
#include <sys/mman.h>

#include "internal.h"

#define MAX_PAGE_SIZES 8

/* The huge page sizes of this system, from libhugetlbfs. */
static int system_sizes(long *sizes, int n)
{
	n = gethugepagesizes(sizes, n);
	return n < 0 ? 0 : n;
}

/*
 * huge_page_size() - validate a requested huge page size (0: the system's
 * default). Returns the size, -EOPNOTSUPP without huge pages, -EINVAL for a
 * size this system does not have.
 */
long huge_page_size(size_t want)
{
	long sizes[MAX_PAGE_SIZES];
	int n = system_sizes(sizes, MAX_PAGE_SIZES);

	if (!n)
		return -EOPNOTSUPP;
	if (!want) {
		long def = gethugepagesize();

		return def > 0 ? def : sizes[0];
	}
	for (int i = 0; i < n; i++)
		if ((size_t)sizes[i] == want)
			return sizes[i];
	return -EINVAL;
}

static unsigned int size_shift(size_t ps)
{
	return (unsigned int)__builtin_ctzl(ps);
}

int huge_mmap_flags(size_t ps)
{
	return MAP_HUGETLB | (int)(size_shift(ps) << MAP_HUGE_SHIFT);
}

unsigned int huge_memfd_flags(size_t ps)
{
	return MFD_HUGETLB | (size_shift(ps) << MFD_HUGE_SHIFT);
}

/* A counter of the huge page pool of size @ps, e.g. "free_hugepages"
 * (libhugetlbfs 2.24's public header exports no counters: sysfs). */
static unsigned long pool_counter(size_t ps, const char *name)
{
	char path[128];
	unsigned long v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%zukB/%s",
		 ps >> 10, name);
	f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%lu", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v;
}

/* Say why a huge page reservation failed and how to fix it. */
void huge_log_enomem(const struct faultd_region *r, size_t len)
{
	size_t ps = r->page_size;
	unsigned long free_pages = pool_counter(ps, "free_hugepages");
	unsigned long total = pool_counter(ps, "nr_hugepages");

	fd_err(r->ctx,
	       "%s: cannot reserve %zu huge pages of %zu kB (%lu of %lu free); "
	       "reserve more with: echo %lu > "
	       "/sys/kernel/mm/hugepages/hugepages-%zukB/nr_hugepages",
	       r->name, len / ps, ps >> 10, free_pages, total,
	       total + len / ps, ps >> 10);
}
