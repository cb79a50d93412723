// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * image.c - a faultd checkpoint image as a source: offsets are region
 * offsets, extents are the image's (data, or zeros where it stores none),
 * and every block read is checked against its checksum by image_read():
 * a block that fails reads as -EBADMSG, which the engine poisons.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "image.h"
#include "internal.h"
#include "wset.h"

struct src_image {
	struct source src;
	struct image *img;
	bool has_key;		/* checked with @key */
	struct img_key key;	/* the image's own key, for a reopen */
};

static ssize_t img_read(struct source *s, uint64_t off, void *buf,
			size_t len, unsigned int flags)
{
	struct src_image *si = (struct src_image *)s;
	ssize_t n = image_read(si->img, off, buf, len);

	return n < 0 ? n : (ssize_t)len;
}

static int img_extent(struct source *s, uint64_t off, struct src_extent *e)
{
	struct src_image *si = (struct src_image *)s;
	uint64_t start, len;
	int data = image_extent_at(si->img, off, &start, &len);

	if (data < 0)
		return data;
	/* The region's last page may be partly past its length. */
	len = (len + 4095) & ~4095ull;
	*e = (struct src_extent){ start, len, data ? SRC_DATA : SRC_ZERO };
	return 0;
}

static void img_willneed(struct source *s, uint64_t off, uint64_t len)
{
	image_willneed(((struct src_image *)s)->img, off, len);
}

static void img_destroy(struct source *s)
{
	struct src_image *si = (struct src_image *)s;

	image_close(si->img);
	explicit_bzero(&si->key, sizeof(si->key));
	free(si);
}

/* What a restart needs beside the image's descriptor: the key it is
 * checked with (the image's own, derived by the client: the keeper is
 * root's, and the key serves for no other image). */
struct image_blob {
	uint32_t has_key;
	uint32_t reserved;
	uint8_t key[32];
};

static ssize_t img_save(struct source *s, void *blob, size_t max)
{
	struct src_image *si = (struct src_image *)s;
	struct image_blob b = { .has_key = si->has_key };

	if (max < sizeof(b))
		return -E2BIG;
	memcpy(b.key, si->key.key, sizeof(b.key));
	memcpy(blob, &b, sizeof(b));
	explicit_bzero(&b, sizeof(b));
	return sizeof(b);
}

static int img_reopen(const void *blob, size_t len, int fd,
		      struct source **sp, char *why, size_t why_len)
{
	struct img_key key = { .image_key = true };
	struct image_blob b;
	const char *bad = "the kept image";
	int ret = -EBADMSG;

	if (len == sizeof(b) && fd >= 0) {
		memcpy(&b, blob, sizeof(b));
		memcpy(key.key, b.key, sizeof(key.key));
		ret = src_image_open(fd, b.has_key ? &key : NULL, sp, &bad);
		explicit_bzero(&b, sizeof(b));
		explicit_bzero(&key, sizeof(key));
	}
	if (ret)
		snprintf(why, why_len, "%s: %s", bad, strerror(-ret));
	if (fd >= 0)
		close(fd); /* the image keeps its own */
	return ret;
}

const struct source_type src_image_type = {
	.name = "image", .id = 1, .save = img_save, .reopen = img_reopen,
};

static const struct source_ops src_image_ops = {
	.name = "image",
	.type = &src_image_type,
	.read = img_read,
	.extent = img_extent,
	.willneed = img_willneed,
	.destroy = img_destroy,
};

/*
 * src_image_open() - a source over the image open on @fd (the caller
 * keeps @fd; the image holds its own), checked with @key (NULL: none).
 * Returns 0, -EINVAL (not an image), -EOPNOTSUPP (incremental: served in
 * the process only), or -errno, with *why from image_open().
 */
int src_image_open(int fd, const struct img_key *key, struct source **sp,
		   const char **why)
{
	struct src_image *si = calloc(1, sizeof(*si));
	struct wset_space ws;
	int ret;

	if (!si)
		return -ENOMEM;
	ret = image_open(fd, NULL, key, &si->img, why);
	if (!ret && (si->img->h.flags & IMG_INCREMENTAL))
		ret = -EOPNOTSUPP;
	if (ret) {
		if (si->img)
			image_close(si->img);
		free(si);
		return ret;
	}
	if (key) {
		si->has_key = true;
		si->key = *key;
	}
	si->src.ops = &src_image_ops;
	si->src.size = (si->img->h.region_len + 4095) & ~4095ull;
	si->src.page_size = 4096;
	si->src.keep_fd = si->img->fd;
	wset_image_space(si->img, &ws);
	memcpy(si->src.id, ws.src_id, sizeof(si->src.id));
	*sp = &si->src;
	return 0;
}

/* The image behind a source made by src_image_open(). */
struct image *src_image_of(struct source *s)
{
	return ((struct src_image *)s)->img;
}
