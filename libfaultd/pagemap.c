// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * pagemap.c - what this process's page tables say about its regions:
 * /proc/self/pagemap entries (PM_* in internal.h).
 *
 * The context opens /proc/self/pagemap once (ctx->pagemap_fd); without it
 * every read fails. Entries are read for small pages whatever the
 * region's page size. Who asks: the fault path (is the page still
 * write-protected?), fills (which pages of a span are missing?),
 * checkpoints (which blocks hold anything?) and clones.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

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
