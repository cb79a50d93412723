// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * pagemap.c - what this process's page tables say about its regions:
 * /proc/self/pagemap entries (PM_* in internal.h).
 *
 * The context opens /proc/self/pagemap once (ctx->pagemap_fd); without it
 * every read fails. Entries are read for small pages whatever the
 * region's page size. Who asks: the fault path (is the page still
 * write-protected?), fills (which pages of a span are missing?),
 * checkpoints (which blocks hold anything?) and clones (is the parent's
 * page there to copy? does a frozen view hold pages of its own?).
 *
 * PAGEMAP_SCAN (Linux 6.7) answers for a whole range at once, by page
 * categories; where the kernel lacks it (uffd_have()) the entries are read.
 * In a range tracked asynchronously (dirty.c) it also write-protects the
 * written pages it reports, in the same walk: collection takes no second
 * pass and loses no write in between.
 */
#include <errno.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "internal.h"

#define SCAN_VEC 256 /* page runs reported by one PAGEMAP_SCAN */

/*
 * mem_pagemap() - the /proc/self/pagemap entries of the @n small pages from
 * @addr (PM_PRESENT, PM_SWAPPED). Returns 0, or -EIO when they cannot be
 * read: then every entry is 0, "not present" - right for callers that
 * fill such pages, wrong for those that would skip them (check).
 */
int mem_pagemap(struct faultd_ctx *ctx, uintptr_t addr, size_t n,
		uint64_t *pm)
{
	size_t ps = (size_t)ctx->page_size;
	off_t at = (off_t)(addr / ps * sizeof(*pm));

	if (ctx->pagemap_fd >= 0 &&
	    pread(ctx->pagemap_fd, pm, n * sizeof(*pm), at) ==
		    (ssize_t)(n * sizeof(*pm)))
		return 0;
	memset(pm, 0, n * sizeof(*pm));
	return -EIO;
}

/* 1 if the page at @addr is in memory or swap, 0 if not, or -EIO. */
int pagemap_present(struct faultd_ctx *ctx, uintptr_t addr)
{
	uint64_t e;

	if (mem_pagemap(ctx, addr, 1, &e) < 0)
		return -EIO;
	return !!(e & (PM_PRESENT | PM_SWAPPED));
}

/* pagemap_has_private() from pagemap entries: kernels without PAGEMAP_SCAN. */
static int has_private_slow(const struct faultd_region *r)
{
	size_t n = atomic_load(&r->len) / r->page_size;
	uint64_t pm[512];

	for (size_t i = 0; i < n; i += ARRAY_SIZE(pm)) {
		size_t k = n - i < ARRAY_SIZE(pm) ? n - i : ARRAY_SIZE(pm);

		if (mem_pagemap(r->ctx, r->base + i * r->page_size, k, pm) < 0)
			return -EIO;
		for (size_t j = 0; j < k; j++)
			if ((pm[j] & (PM_PRESENT | PM_SWAPPED)) &&
			    !(pm[j] & PM_FILE))
				return 1;
	}
	return 0;
}

/*
 * pagemap_has_private() - does a frozen view hold pages of its own
 * (written since the freeze)? Returns 1, 0, or -errno.
 */
int pagemap_has_private(const struct faultd_region *r)
{
	struct page_region v;
	struct pm_scan_arg a = {
		.size = sizeof(a),
		.start = r->base,
		.end = r->base + atomic_load(&r->len),
		.vec = (uintptr_t)&v,
		.vec_len = 1,
		.max_pages = 1,
		.category_inverted = PAGE_IS_FILE,
		.category_mask = PAGE_IS_PRESENT | PAGE_IS_FILE,
		.return_mask = PAGE_IS_PRESENT,
	};
	int n;

	if (!(uffd_have() & FAULTD_HAVE_PAGEMAP_SCAN))
		return has_private_slow(r);
	n = ioctl(r->ctx->pagemap_fd, PAGEMAP_SCAN, &a);
	return n < 0 ? -errno : n > 0;
}

/*
 * pagemap_scan_protect() - one PAGEMAP_SCAN after another over [off, off +
 * len) of @r that reports the written pages matching categories @mask
 * (those of @inverted inverted) and write-protects them again (async
 * mode); their bits go into @bitmap (pages from @off) unless it is NULL.
 * Returns the number of pages matched or -errno.
 */
ssize_t pagemap_scan_protect(struct faultd_region *r, uint64_t off,
			     size_t len, uint64_t mask, uint64_t inverted,
			     uint64_t *bitmap)
{
	struct page_region vec[SCAN_VEC];
	uintptr_t start = r->base + off, end = start + len;
	struct pm_scan_arg a = {
		.size = sizeof(a),
		.flags = PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
		.vec = (uintptr_t)vec,
		.vec_len = SCAN_VEC,
		.category_inverted = inverted,
		.category_mask = mask,
		.return_mask = PAGE_IS_WRITTEN,
	};
	ssize_t count = 0;

	if (bitmap)
		memset(bitmap, 0,
		       bitmap_words(len / r->page_size) * sizeof(*bitmap));
	for (a.start = start; a.start < end; a.start = a.walk_end) {
		int n;

		a.end = end;
		n = ioctl(r->ctx->pagemap_fd, PAGEMAP_SCAN, &a);
		if (n < 0)
			return -errno;
		for (int i = 0; i < n; i++) {
			if (bitmap)
				bitmap_set_range(bitmap,
					(vec[i].start - start) / r->page_size,
					(vec[i].end - start) / r->page_size);
			count += (ssize_t)((vec[i].end - vec[i].start) /
					   r->page_size);
		}
	}
	return count;
}
