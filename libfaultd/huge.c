// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * huge.c - huge-page regions: page sizes, reservation errors, the alias
 * view of memfd-hugetlb regions and the state of their pages.
 *
 * Page sizes come from libhugetlbfs. An anonymous hugetlb region is
 * resolved like any other with UFFDIO_COPY (hugetlb has no zero page, so
 * zero-fill copies from a buffer of zeros). A memfd-hugetlb region is
 * resolved with UFFDIO_CONTINUE: the handler prepares the page in the page
 * cache through the library's own mapping of the memfd (the alias) - the
 * kernel allocates it zeroed, a pager fills it in place, a discarded page is
 * cleared with faultd_clear() - and maps it. No copy of the page is made.
 *
 * Preparing a page through the alias is not atomic with mapping it, so each
 * huge page has a state (struct huge_state), claimed by one handler at a
 * time: a second fault on a page being prepared waits for it, and a page
 * that is mapped is never prepared again until it is discarded.
 */
#include <errno.h>
#include <linux/memfd.h>
#include <stddef.h>
#include <hugetlbfs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <urcu/futex.h>

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

/* A counter of the huge page pool of size @ps, e.g. "free_hugepages". */
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

/* ------------------------------------------------------------------------
 * The alias view and page states of memfd-hugetlb regions.
 */

int huge_alias_map(struct faultd_region *r)
{
	void *p = mmap(NULL, r->max_len, PROT_READ | PROT_WRITE, MAP_SHARED,
		       r->memfd, 0);

	if (p == MAP_FAILED)
		return -errno;
	r->alias = p;
	r->nr_states = r->max_len / r->page_size;
	r->states = calloc(r->nr_states, sizeof(*r->states));
	if (!r->states) {
		munmap(p, r->max_len);
		r->alias = NULL;
		return -ENOMEM;
	}
	return 0;
}

void huge_alias_unmap(struct faultd_region *r)
{
	if (r->alias)
		munmap(r->alias, r->alias_len ? r->alias_len : r->max_len);
	free(r->states);
	r->alias = NULL;
	r->states = NULL;
}

/*
 * huge_alias_grow() - cover a larger reservation.
 * Context: region lock held for writing (no handler uses the alias).
 */
int huge_alias_grow(struct faultd_region *r, size_t max_len)
{
	size_t old = r->alias_len ? r->alias_len : r->max_len;
	size_t n = max_len / r->page_size;
	struct huge_state *s;
	void *p;

	if (max_len <= old)
		return 0;
	s = realloc(r->states, n * sizeof(*s));
	if (!s)
		return -ENOMEM;
	memset(s + r->nr_states, 0, (n - r->nr_states) * sizeof(*s));
	r->states = s;
	r->nr_states = n;
	p = mremap(r->alias, old, max_len, MREMAP_MAYMOVE);
	if (p == MAP_FAILED)
		return -errno;
	r->alias = p;
	r->alias_len = max_len;
	return 0;
}

struct huge_state *huge_state_of(struct faultd_region *r, uint64_t off)
{
	return &r->states[off / r->page_size];
}

/*
 * huge_claim() - decide who prepares the page.
 * Returns HUGE_CLAIM_PREPARE (the caller owns the page: prepare it, then
 * call huge_release()), or HUGE_CLAIM_MAPPED (its content is in place:
 * just map it).
 * A MINOR fault on a page nobody prepared means its content came from
 * elsewhere (written through the memfd): it is ready as it is.
 */
int huge_claim(struct huge_state *s, bool minor, bool *was_stale)
{
	int32_t v;

	for (;;) {
		v = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
		switch (v & ~HUGE_WAITERS) {
		case HUGE_READY:
			return HUGE_CLAIM_MAPPED;
		case HUGE_NONE:
			if (minor) {
				__atomic_compare_exchange_n(
					&s->state, &v, HUGE_READY, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
				continue;
			}
			/* fallthrough */
		case HUGE_STALE:
			if (__atomic_compare_exchange_n(
				    &s->state, &v, HUGE_BUSY, false,
				    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
				*was_stale = v == HUGE_STALE;
				return HUGE_CLAIM_PREPARE;
			}
			continue;
		default: /* BUSY: another handler prepares it; wait */
			if (!(v & HUGE_WAITERS) &&
			    !__atomic_compare_exchange_n(
				    &s->state, &v, v | HUGE_WAITERS, false,
				    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				continue;
			futex_noasync(&s->state, FUTEX_WAIT, v | HUGE_WAITERS,
				      NULL, NULL, 0);
		}
	}
}

/* huge_release() - end the preparation: the page is @state now. */
void huge_release(struct huge_state *s, int32_t state)
{
	int32_t old = __atomic_exchange_n(&s->state, state, __ATOMIC_ACQ_REL);

	if (old & HUGE_WAITERS)
		futex_noasync(&s->state, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/*
 * huge_mark_stale() - [off, off + len) was zapped but its pages stay in the
 * page cache: the next fault must prepare them again.
 * Context: region lock held (for reading at least).
 */
void huge_mark_stale(struct faultd_region *r, uint64_t off, size_t len)
{
	for (uint64_t o = off; o < off + len; o += r->page_size)
		huge_release(huge_state_of(r, o), HUGE_STALE);
}

/* huge_forget() - pages of [off, off + len) left the page cache. */
void huge_forget(struct faultd_region *r, uint64_t off, size_t len)
{
	for (uint64_t o = off; o < off + len && o / r->page_size < r->nr_states;
	     o += r->page_size)
		huge_release(huge_state_of(r, o), HUGE_NONE);
}
