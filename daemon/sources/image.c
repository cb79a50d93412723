// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * image.c - a faultd checkpoint image as a source: offsets are region
 * offsets, extents are the image's (data, or zeros where it stores none),
 * and every block read is checked against its checksum by image_read():
 * a block that fails reads as -EBADMSG, which the engine poisons.
 *
 * The image is a local file (src_image_open(), type "image"), or is read
 * through another source of the image file's bytes (src_image_open_over(),
 * type "remote-image": an NBD export of the file), which it owns: the
 * same checks apply end to end, the reads of data blocks a fault waits
 * for are urgent there, and the working-set replay's read-ahead reaches
 * it as willneed().
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "image.h"
#include "img.h"
#include "wset.h"

struct src_image {
	struct source src;
	struct image *img;
	bool has_key;		/* checked with @key */
	struct img_key key;	/* the image's own key, for a reopen */
	struct source *under;	/* remote-image: the file's bytes; owned */
};

static ssize_t img_read(struct source *s, uint64_t off, void *buf,
			size_t len, unsigned int flags)
{
	struct src_image *si = (struct src_image *)s;
	ssize_t n = image_read_flags(si->img, off, buf, len,
				     flags & SRC_READ_URGENT ? IMG_READ_URGENT
							     : 0);

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
	source_destroy(si->under);
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

/* ------------------------------------------------------------------------
 * An image read through another source.
 */

/* Aligned [off, off + len) of @u, zeros where it says so. */
static ssize_t under_read_pages(struct source *u, uint64_t off, char *buf,
				size_t len, unsigned int flags)
{
	for (size_t done = 0; done < len;) {
		struct src_extent e;
		uint64_t at = off + done;
		size_t l;
		ssize_t n = source_extent(u, at, &e);

		if (n < 0 || e.kind == SRC_NONE)
			return -EIO;
		l = e.off + e.len - at < len - done ? e.off + e.len - at
						    : len - done;
		if (e.kind == SRC_ZERO)
			memset(buf + done, 0, l);
		else if ((n = source_read_flags(u, at, buf + done, l, flags)) < 0)
			return n;
		done += l;
	}
	return (ssize_t)len;
}

/* struct img_reader's read(): any [off, off + len) of the file, through
 * a bounce of whole pages where it is not aligned. */
static ssize_t under_read(void *arg, uint64_t off, void *buf, size_t len,
			  unsigned int flags)
{
	struct source *u = arg;
	uint64_t ps = u->page_size, lo = off & ~(ps - 1);
	uint64_t hi = (off + len + ps - 1) & ~(ps - 1);
	unsigned int f = flags & IMG_READ_URGENT ? SRC_READ_URGENT : 0;
	char *tmp;
	ssize_t n;

	if (hi > u->size)
		return -EIO;
	if (lo == off && hi == off + len)
		return under_read_pages(u, off, buf, len, f);
	tmp = aligned_alloc(ps, hi - lo);
	if (!tmp)
		return -ENOMEM;
	n = under_read_pages(u, lo, tmp, hi - lo, f);
	if (n >= 0) {
		memcpy(buf, tmp + (off - lo), len);
		n = (ssize_t)len;
	}
	free(tmp);
	return n;
}

static void under_willneed(void *arg, uint64_t off, uint64_t len)
{
	source_willneed(arg, off, len);
}

/* What a restart needs: the key, and the source under the image (its
 * type's id, and what its save() wrote). */
struct remote_blob {
	struct image_blob key;
	uint16_t type;
	uint16_t reserved;
	uint32_t under_len;
	/* the source's blob follows */
};

static ssize_t remote_save(struct source *s, void *blob, size_t max)
{
	struct src_image *si = (struct src_image *)s;
	const struct source_type *t = si->under->ops->type;
	struct remote_blob b = { .key.has_key = si->has_key,
				 .type = t ? t->id : 0 };
	ssize_t n;

	if (!t || max < sizeof(b))
		return t ? -E2BIG : -EOPNOTSUPP;
	n = t->save(si->under, (char *)blob + sizeof(b), max - sizeof(b));
	if (n < 0)
		return n;
	b.under_len = (uint32_t)n;
	memcpy(b.key.key, si->key.key, sizeof(b.key.key));
	memcpy(blob, &b, sizeof(b));
	explicit_bzero(&b, sizeof(b));
	return (ssize_t)sizeof(b) + n;
}

static int remote_reopen(const void *blob, size_t len, int fd,
			 struct source **sp, char *why, size_t why_len)
{
	struct img_key key = { .image_key = true };
	const struct source_type *t = NULL;
	struct source *under;
	struct remote_blob b;
	const char *bad;
	int ret;

	if (fd >= 0)
		close(fd);
	if (len >= sizeof(b)) {
		memcpy(&b, blob, sizeof(b));
		t = source_type_by_id(b.type);
	}
	if (!t || t == &src_remote_image_type ||
	    b.under_len != len - sizeof(b)) {
		snprintf(why, why_len, "not a saved remote image");
		ret = -EBADMSG;
		goto out;
	}
	/* Its own reason, if the source under the image cannot be had. */
	ret = t->reopen((const char *)blob + sizeof(b), b.under_len, -1,
			&under, why, why_len);
	if (ret)
		goto out;
	memcpy(key.key, b.key.key, sizeof(key.key));
	ret = src_image_open_over(under, b.key.has_key ? &key : NULL, sp,
				  &bad);
	if (ret)
		snprintf(why, why_len, "the image: %s: %s", bad,
			 strerror(-ret));
out:
	explicit_bzero(&b, sizeof(b));
	explicit_bzero(&key, sizeof(key));
	return ret;
}

const struct source_type src_remote_image_type = {
	.name = "remote-image", .id = 7, .save = remote_save,
	.reopen = remote_reopen,
};

static const struct source_ops src_remote_image_ops = {
	.name = "remote-image",
	.type = &src_remote_image_type,
	.read = img_read,
	.extent = img_extent,
	.willneed = img_willneed,
	.destroy = img_destroy,
};

/*
 * src_image_header() - the header of the image whose file is @under's
 * content, read and checked as image_header_check() does (not its MAC:
 * that needs the key, which the client derives from this header).
 * Returns 0, or -errno with *why.
 */
int src_image_header(struct source *under, struct img_header *h,
		     const char **why)
{
	ssize_t n;

	*why = "the image is shorter than a header";
	if (under->size < sizeof(*h))
		return -EINVAL;
	n = under_read(under, 0, h, sizeof(*h), IMG_READ_URGENT);
	*why = "the image's header cannot be read";
	if (n < 0)
		return (int)n;
	return image_header_check(h, under->size, why);
}

/*
 * src_image_open_over() - a source over the full image whose file is
 * @under's content (offsets: the file's; a page size of 4 KiB), checked
 * with @key (NULL: none) as src_image_open() checks one. It owns @under
 * from the call on, also when it fails (then @under is destroyed).
 * Returns 0, or as src_image_open() with *why; -EINVAL also for an
 * incremental image.
 */
int src_image_open_over(struct source *under, const struct img_key *key,
			struct source **sp, const char **why)
{
	struct src_image *si = calloc(1, sizeof(*si));
	struct img_reader rd = { .read = under_read,
				 .willneed = under_willneed, .arg = under,
				 .len = under->size };
	struct wset_space ws;
	int ret;

	*why = "out of memory";
	if (!si) {
		source_destroy(under);
		return -ENOMEM;
	}
	si->under = under;
	ret = image_open_reader(&rd, key, &si->img, why);
	if (ret) {
		img_destroy(&si->src);
		return ret;
	}
	if (key) {
		si->has_key = true;
		si->key = *key;
	}
	si->src.ops = &src_remote_image_ops;
	si->src.size = (si->img->h.region_len + 4095) & ~4095ull;
	si->src.page_size = 4096;
	si->src.remote = under->remote;
	wset_image_space(si->img, &ws);
	memcpy(si->src.id, ws.src_id, sizeof(si->src.id));
	*sp = &si->src;
	return 0;
}
