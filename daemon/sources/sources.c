// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * sources.c - the table of source types, and the stale source that
 * stands in for one that cannot be opened again.
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "criu.h"
#include "file.h"
#include "image.h"
#include "nbd.h"
#include "source.h"

static const struct source_type src_stale_type;

/* Every source type a kept session may name; an id is never reused. */
static const struct source_type *const types[] = {
	&src_image_type,
	&src_file_type,
	&src_criu_type,
	&src_criu_ps_type,
	&src_stale_type,
	&src_nbd_type,
	&src_remote_image_type,
};

const struct source_type *source_type_by_id(uint16_t id)
{
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (types[i]->id == id)
			return types[i];
	return NULL;
}

/* ------------------------------------------------------------------------
 * A stale source: one that is not what it was when its session began (a
 * restart found it changed or gone). Every read fails, so its pages are
 * poisoned, never served wrong; its extents are data, so that every page
 * is read (and poisoned) rather than served as zeros.
 */

static ssize_t stale_read(struct source *s, uint64_t off, void *buf,
			  size_t len, unsigned int flags)
{
	(void)s, (void)off, (void)buf, (void)len, (void)flags;
	return -ESTALE;
}

static int stale_extent(struct source *s, uint64_t off, struct src_extent *e)
{
	if (off >= s->size)
		return -ERANGE;
	*e = (struct src_extent){ off & ~(uint64_t)(s->page_size - 1),
				  s->page_size, SRC_DATA };
	return 0;
}

static void stale_destroy(struct source *s)
{
	free(s);
}

struct stale_blob {
	uint64_t size, page_size;
};

static ssize_t stale_save(struct source *s, void *blob, size_t max)
{
	struct stale_blob b = { s->size, s->page_size };

	if (max < sizeof(b))
		return -E2BIG;
	*(struct stale_blob *)blob = b;
	return sizeof(b);
}

static int stale_reopen(const void *blob, size_t len, int fd,
			struct source **sp, char *why, size_t why_len)
{
	const struct stale_blob *b = blob;

	(void)why, (void)why_len;
	if (fd >= 0)
		close(fd);
	if (len != sizeof(*b))
		return -EBADMSG;
	return source_stale(b->size, (size_t)b->page_size, sp);
}

static const struct source_type src_stale_type = {
	.name = "stale", .id = 5, .save = stale_save, .reopen = stale_reopen,
};

static const struct source_ops stale_ops = {
	.name = "stale",
	.type = &src_stale_type,
	.read = stale_read,
	.extent = stale_extent,
	.destroy = stale_destroy,
};

/* source_stale() - a stale source of @size bytes in pages of @page_size. */
int source_stale(uint64_t size, size_t page_size, struct source **sp)
{
	struct source *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	*s = (struct source){ .ops = &stale_ops, .size = size,
			      .page_size = page_size, .stale = true };
	*sp = s;
	return 0;
}
