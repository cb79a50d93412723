// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * extents.c - a source's table of data extents (extents.h): built in
 * order as the holes are found, looked up by binary search.
 */
#include <errno.h>
#include <stdlib.h>

#include "extents.h"

/*
 * exts_add() - append [start, end), after every extent so far. It merges
 * into the last one when it touches it, or when the table is full (the
 * hole between them is then served as DATA). Returns 0 or -ENOMEM.
 */
int exts_add(struct data_exts *x, uint64_t start, uint64_t end)
{
	struct data_ext *last = x->n ? &x->ext[x->n - 1] : NULL;

	if (last && (start <= last->end || x->n == DATA_EXTS_MAX)) {
		if (end > last->end)
			last->end = end;
		return 0;
	}
	if (x->n == x->cap) {
		size_t cap = x->cap ? x->cap * 2 : 64;
		struct data_ext *e = realloc(x->ext, cap * sizeof(*e));

		if (!e)
			return -ENOMEM;
		x->ext = e;
		x->cap = cap;
	}
	x->ext[x->n++] = (struct data_ext){ start, end };
	return 0;
}

/* Index of the first extent that ends after @off (x->n if none). */
size_t exts_find(const struct data_exts *x, uint64_t off)
{
	size_t lo = 0, hi = x->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (x->ext[mid].end <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * exts_extent() - the extent of a source of @size bytes that holds @off,
 * as source.h's extent(): the data extent, or the hole around @off.
 * Returns 0 or -ERANGE (@off past the end).
 */
int exts_extent(const struct data_exts *x, uint64_t size, uint64_t off,
		struct src_extent *e)
{
	size_t i;

	if (off >= size)
		return -ERANGE;
	i = exts_find(x, off);
	if (i < x->n && x->ext[i].start <= off) {
		*e = (struct src_extent){ x->ext[i].start,
					  x->ext[i].end - x->ext[i].start,
					  SRC_DATA };
		return 0;
	}
	e->off = i ? x->ext[i - 1].end : 0;
	e->len = (i < x->n ? x->ext[i].start : size) - e->off;
	e->kind = SRC_ZERO;
	return 0;
}

/*
 * exts_data_range() - is [off, off + len) whole pages of one DATA extent
 * of a source of @size bytes? 0, -EINVAL (not whole pages, or empty) or
 * -ERANGE (past the end, or not all data).
 */
int exts_data_range(const struct data_exts *x, uint64_t size,
		    size_t page_size, uint64_t off, size_t len)
{
	size_t i;

	if (!len || (off | len) & (page_size - 1))
		return -EINVAL;
	if (off >= size || len > size - off)
		return -ERANGE;
	/* Touching extents are merged: a DATA range lies in one. */
	i = exts_find(x, off);
	if (i == x->n || x->ext[i].start > off || x->ext[i].end - off < len)
		return -ERANGE;
	return 0;
}

void exts_free(struct data_exts *x)
{
	free(x->ext);
	*x = (struct data_exts){ NULL, 0, 0 };
}
