/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * extents.h - the data extents of a source that knows where its holes are
 * (a file's SEEK_HOLE, an NBD export's block status): a sorted table of
 * what holds data, everything between reading zeros (extents.c).
 */
#ifndef FAULTD_SRC_EXTENTS_H
#define FAULTD_SRC_EXTENTS_H

#include <stddef.h>
#include <stdint.h>

#include "source.h"

/* [start, end) of the source, page-aligned, holding data. */
struct data_ext {
	uint64_t start, end;
};

/* Sorted; neither overlapping nor touching (touching ones merge). */
struct data_exts {
	struct data_ext *ext;
	size_t n, cap;
};

/*
 * The table holds at most this many extents; past it, the holes between
 * later data are served as DATA (read as the zeros they hold): a source
 * that fragmented costs reads, never wrong content.
 */
#define DATA_EXTS_MAX (1u << 16)

/* Index of the first extent that ends after @off (x->n if none). */
size_t exts_find(const struct data_exts *x, uint64_t off);
int exts_add(struct data_exts *x, uint64_t start, uint64_t end);
int exts_extent(const struct data_exts *x, uint64_t size, uint64_t off,
		struct src_extent *e);
int exts_data_range(const struct data_exts *x, uint64_t size,
		    size_t page_size, uint64_t off, size_t len);
void exts_free(struct data_exts *x);

#endif /* FAULTD_SRC_EXTENTS_H */
