// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * fill.c - claims on the pages that are copied in from a pager, so that
 * the faults, their fault-around windows, other handler threads and the
 * prefetch workers never read a page twice.
 *
 * A region whose missing pages are filled with UFFDIO_COPY from a pager
 * has a bit per page, set while someone - a handler, a prefetch worker -
 * reads that page from the pager and installs it, as the kernel locks a
 * page-cache page while it reads it. A filler claims the pages it means
 * to read, and only then asks pagemap which of them are missing: a page
 * that is present was installed by whoever claimed it before (every
 * filler installs its pages before it lets them go), so what the filler
 * reads is missing and no one else's to read. A fault on a page someone
 * else has claimed leaves it to them and marks the page waited on; the
 * claimer wakes a waited-on page when it lets it go, whatever it did with
 * it (it may have found the page present just before a discard dropped
 * it, and then installed nothing: the woken thread faults again). A filler
 * that lets a missing page go without installing it (a pager error, a
 * changing address space, a window cut short) wakes it too. Waiter and
 * claimer each change their bit first and read the other's after (both
 * sequentially consistent): one of them sees the other.
 *
 * Fillers that take no claim - same-thread regions' SIGBUS handlers,
 * regions without claims - race as before: UFFDIO_COPY never replaces a
 * present page, and the loser's read is lost.
 *
 * A single page is not checked against pagemap (a system call) where no
 * one else fills the region: no read-ahead, one handler thread, no
 * prefetch ever queued.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Regions that get claims: see the header. */
static bool fill_claimed(const struct faultd_region *r)
{
	return r->pager && !r->ev && !r->cache &&
	       r->kind != REGION_MEMFD_HUGETLB &&
	       r->kind != REGION_MEMFD_PRIVATE &&
	       r->page_size == (size_t)r->ctx->page_size &&
	       !(r->flags & FAULTD_REGION_SAME_THREAD);
}

/* fill_setup() - the claims of a new region, for its whole reservation. */
int fill_setup(struct faultd_region *r)
{
	size_t words = bitmap_words(r->max_len / r->page_size);

	if (!fill_claimed(r))
		return 0;
	r->claims = fd_calloc(words, sizeof(*r->claims));
	r->claim_waiters = fd_calloc(words, sizeof(*r->claim_waiters));
	if (r->claims && r->claim_waiters)
		return 0;
	fill_free(r);
	return -ENOMEM;
}

void fill_free(struct faultd_region *r)
{
	free((void *)r->claims);
	free((void *)r->claim_waiters);
	r->claims = NULL;
	r->claim_waiters = NULL;
}

/* Take page @pg; false if someone else has it. */
static bool claim_page(struct faultd_region *r, size_t pg)
{
	return !bitmap_test_and_set(r->claims, pg, memory_order_seq_cst);
}

/* Let page @pg go; whether a fault waited on it meanwhile. */
static bool unclaim_page(struct faultd_region *r, size_t pg)
{
	bitmap_test_and_clear(r->claims, pg, memory_order_seq_cst);
	return bitmap_test_and_clear(r->claim_waiters, pg,
				     memory_order_seq_cst);
}

/*
 * Page @pg is someone else's: leave it to them, waited on. Returns true if
 * it became the caller's meanwhile (it was let go before the claimer
 * could see the mark).
 */
static bool wait_on_page(struct faultd_region *r, size_t pg)
{
	bitmap_test_and_set(r->claim_waiters, pg, memory_order_seq_cst);
	return claim_page(r, pg);
}

/* Does anyone but the caller fill pages of @r? */
static bool fill_racing(const struct faultd_region *r)
{
	return r->ra || r->group->nthreads > 1 || atomic_load(&r->pf_used);
}

static void span_mark_present(struct fill_span *sp, size_t i)
{
	sp->present[bit_word(i)] |= bit_mask(i);
}

/*
 * Which pages of the span pagemap shows present. Not those it shows
 * swapped: a page never written but write-protected in advance (async
 * tracking) has a marker that pagemap reports so, and is missing; a page
 * really swapped out is stepped over by the copy (EEXIST), as are the
 * present ones when pagemap cannot tell (fill_copy()).
 */
static void span_pagemap(const struct faultd_region *r, struct fill_span *sp)
{
	size_t n = (sp->end - sp->start) / r->page_size;
	uint64_t pm[FILL_MAX_PAGES];

	if (mem_pagemap(r->ctx, r->base + sp->start, n, pm) < 0)
		return;
	for (size_t i = 0; i < n; i++)
		if (pm[i] & PM_PRESENT)
			span_mark_present(sp, i);
}

/*
 * fill_claim() - claim the pages of [lo, hi) around @off that no one else
 * has claimed, as one span (in a region without claims: all of them), and
 * learn which are missing. Region offsets, page-aligned; hi - lo is at
 * most FILL_MAX_PAGES pages. Returns false if @off is someone else's.
 * Context: holding the region (fault path, prefetch worker).
 */
bool fill_claim(struct faultd_region *r, uint64_t off, uint64_t lo,
		uint64_t hi, struct fill_span *sp)
{
	size_t ps = r->page_size;

	fd_assert_internal(hi - lo <= FILL_MAX_PAGES * ps);
	memset(sp, 0, sizeof(*sp));
	sp->start = lo;
	sp->end = hi;
	if (r->claims) {
		if (!claim_page(r, off / ps) && !wait_on_page(r, off / ps))
			return false;
		sp->start = off;
		sp->end = off + ps;
		while (sp->end < hi && claim_page(r, sp->end / ps))
			sp->end += ps;
		while (sp->start > lo && claim_page(r, sp->start / ps - 1))
			sp->start -= ps;
	}
	sp->first = sp->start;
	if (ps == (size_t)r->ctx->page_size &&
	    (sp->end - sp->start > ps || fill_racing(r)))
		span_pagemap(r, sp);
	return true;
}

bool fill_missing(const struct faultd_region *r, const struct fill_span *sp,
		  uint64_t off)
{
	size_t i = (off - sp->first) / r->page_size;

	return !(sp->present[bit_word(i)] & bit_mask(i));
}

/*
 * fill_run() - the first run of missing pages of the span at or after
 * *at: its start in *at, its length returned (0: none is left).
 */
size_t fill_run(const struct faultd_region *r, const struct fill_span *sp,
		uint64_t *at)
{
	size_t ps = r->page_size;
	uint64_t e;

	while (*at < sp->end && !fill_missing(r, sp, *at))
		*at += ps;
	for (e = *at; e < sp->end && fill_missing(r, sp, e); e += ps)
		;
	return e - *at;
}

/* fill_run_around() - the run of missing pages around @off (missing):
 * its start in *start, its length returned. */
size_t fill_run_around(const struct faultd_region *r,
		       const struct fill_span *sp, uint64_t off,
		       uint64_t *start)
{
	size_t ps = r->page_size;

	*start = off;
	while (*start > sp->start && fill_missing(r, sp, *start - ps))
		*start -= ps;
	return fill_run(r, sp, start);
}

static void wake_part(struct faultd_region *r, uint64_t from, uint64_t to)
{
	if (to > from)
		uffd_wake(r->group->uffd, r->base + from, to - from);
}

/*
 * Release [from, to) of the span's claims, waking the pages a fault waited
 * on; returns whether a page was missing.
 */
static bool release_part(struct faultd_region *r, const struct fill_span *sp,
			 uint64_t from, uint64_t to)
{
	bool missing = false;

	for (uint64_t o = from; o < to; o += r->page_size) {
		if (r->claims && unclaim_page(r, o / r->page_size))
			wake_part(r, o, o + r->page_size);
		missing |= fill_missing(r, sp, o);
	}
	return missing;
}

/*
 * fill_trim() - keep [start, start + len) of the span; release the rest,
 * waking its missing pages (after the release: see the header).
 */
void fill_trim(struct faultd_region *r, struct fill_span *sp, uint64_t start,
	       size_t len)
{
	if (release_part(r, sp, sp->start, start))
		wake_part(r, sp->start, start);
	if (release_part(r, sp, start + len, sp->end))
		wake_part(r, start + len, sp->end);
	sp->start = start;
	sp->end = start + len;
}

/*
 * fill_release() - the span is done; @wake: some of its missing pages
 * were not installed, so its threads are woken (after the release).
 */
void fill_release(struct faultd_region *r, const struct fill_span *sp,
		  bool wake)
{
	release_part(r, sp, sp->start, sp->end);
	if (wake)
		wake_part(r, sp->start, sp->end);
}

/*
 * fill_release_parked() - fill_release(@wake) for a span whose faulting
 * page @off is parked: that fault is tried again and wakes its thread
 * then. Woken now, the thread would fault again, and the page be served
 * (and counted) twice.
 */
void fill_release_parked(struct faultd_region *r, const struct fill_span *sp,
			 uint64_t off)
{
	release_part(r, sp, sp->start, sp->end);
	wake_part(r, sp->start, off);
	wake_part(r, off + r->page_size, sp->end);
}

/*
 * fill_window() - the naturally aligned fault-around window of the page at
 * address @page (the page alone without fault-around), clipped to the
 * region: its length, its start in *start.
 */
size_t fill_window(const struct faultd_region *r, uintptr_t page,
		   uintptr_t *start)
{
	size_t w = r->fault_around ? r->fault_around : r->page_size;
	uintptr_t s = page & ~((uintptr_t)w - 1), e = s + w;
	uintptr_t end = r->base + atomic_load(&r->len);

	*start = s < r->base ? r->base : s;
	return (e > end ? end : e) - *start;
}

/*
 * fill_copy() - install [off, off + len) of @r from @src (install_range(),
 * @flags INST_*), stepping over pages that turn out present (a filler
 * without a claim was first) or in no mapping. Fills in *res: the bytes
 * covered from @off (installed, stepped over), those installed, and
 * whether the page at @watch (UINT64_MAX: none) was present. Returns 0
 * when all are covered, else the -errno that stopped the copy at
 * res->done.
 */
int fill_copy(struct faultd_region *r, uint64_t off, const void *src,
	      size_t len, unsigned int flags, uint64_t watch,
	      struct fill_result *res)
{
	struct inst_req q = {
		.uffd = r->group->uffd, .op = INST_COPY, .flags = flags,
		.dst = r->base + off, .len = len, .page_size = r->page_size,
		.src = src, .watch = watch == UINT64_MAX ? 0 : r->base + watch,
	};
	struct inst_res ir;

	install_range(&q, &ir);
	res->installed = ir.done;
	res->done = ir.done + ir.present + ir.gone;
	res->watch_present = ir.watch_present;
	if (ir.end == UFFD_DONE)
		return 0;
	return ir.err ? ir.err : -EIO;
}
