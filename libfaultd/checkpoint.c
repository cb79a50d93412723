// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * checkpoint.c - writing an image of a region (faultd_checkpoint()); the
 * format is in image.c.
 *
 * The region is read block by block from its own memory, by the calling
 * thread: pages a pager would produce are faulted in on the way (a region
 * without a pager or page cache skips blocks with no page present, which
 * would read as zeros). Each block is copied by that thread into a buffer
 * first, and written and checked from there: the kernel never reads
 * region memory on the library's behalf (a userfaultfd of user faults
 * only, all an unprivileged process may have, cannot resolve the kernel's
 * own access to a missing page), and the bytes written are the bytes
 * checked even while the application writes. A block of zeros takes no
 * space; the others are written with their check. An incremental image
 * holds only the blocks with a page written since the last collection of
 * the region's dirty set (write tracking), and names its parent. A full
 * image of a tracked region collects that set first, so the next
 * incremental image is against this one. With a key file, every check is
 * an AES-256-GMAC (or, asked for, an HMAC-SHA256) under the image's key
 * instead of a CRC32C (imgcheck.c); the image's new random id makes its
 * key new, so that no GMAC nonce of an earlier image under the same name
 * is used again under its key.
 *
 * The image goes to a temporary file in the target's directory and is
 * renamed over the target only when complete: a crash leaves the old image
 * or the new one, never a mix. With FAULTD_CKPT_SYNC the file and the
 * directory are fsync'd before it returns.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "internal.h"

#define CKPT_KNOWN \
	(FAULTD_CKPT_SYNC | FAULTD_CKPT_INCREMENTAL | FAULTD_CKPT_HMAC)

/* An image being written. */
struct ckpt {
	struct faultd_region *r;
	size_t len;		/* the region's length */
	int fd;			/* the temporary file */
	struct img_header h;
	struct img_checker *chk;
	size_t check_size;	/* bytes of one check */
	struct img_extent *ext;	/* nr_extents used */
	size_t ext_cap;
	uint8_t *checks;	/* nr_blocks used, check_size bytes each */
	size_t checks_cap;
	uint64_t *dirty;	/* incremental: the pages to write */
	size_t parent_len;	/* incremental: what the parent covers */
};

static bool block_is_zero(const char *p, size_t len)
{
	const uint64_t *w = (const uint64_t *)p;

	for (size_t i = 0; i < len / 8; i++)
		if (w[i])
			return false;
	return true;
}

/* Does block @b need writing at all? */
static bool block_wanted(struct ckpt *c, uint64_t b)
{
	size_t ps = c->r->page_size, first = b * IMG_BLOCK / ps;
	size_t n = (IMG_BLOCK < c->len - b * IMG_BLOCK ? IMG_BLOCK
						       : c->len - b * IMG_BLOCK) /
		   ps;
	uint64_t pm[IMG_BLOCK / 4096];

	if (c->dirty && b * IMG_BLOCK < c->parent_len) {
		for (size_t i = first; i < first + n; i++)
			if (c->dirty[bit_word(i)] & bit_mask(i))
				return true;
		return false;
	}
	/* Only a plain anonymous zero-fill region's missing pages are
	 * zeros: the others' come from a pager, a parent or a page cache. */
	if (c->r->kind != REGION_ANON || c->r->pager || c->r->cow ||
	    c->r->heap || ps != 4096)
		return true;
	if (mem_pagemap(c->r->ctx, c->r->base + b * IMG_BLOCK, n, pm) < 0)
		return true; /* cannot tell: read it */
	for (size_t i = 0; i < n; i++)
		if (pm[i] & (PM_PRESENT | PM_SWAPPED))
			return true;
	return false;
}

/* Extend the last extent with block @b of @kind, or start one. */
static int extent_add(struct ckpt *c, uint64_t b, uint32_t kind)
{
	struct img_extent *e = c->h.nr_extents ? &c->ext[c->h.nr_extents - 1]
					       : NULL;

	if (e && e->kind == kind &&
	    e->offset + e->blocks * IMG_BLOCK == b * IMG_BLOCK) {
		e->blocks++;
		return 0;
	}
	if (c->h.nr_extents == c->ext_cap) {
		size_t cap = c->ext_cap ? 2 * c->ext_cap : 64;
		void *p = realloc(c->ext, cap * sizeof(*c->ext));

		if (!p)
			return -ENOMEM;
		c->ext = p;
		c->ext_cap = cap;
	}
	c->ext[c->h.nr_extents++] = (struct img_extent){
		.offset = b * IMG_BLOCK,
		.blocks = 1,
		.data_block = kind == IMG_DATA ? c->h.nr_blocks : 0,
		.kind = kind,
	};
	return 0;
}

/* Append block @b's content, a copy of IMG_BLOCK bytes at @src, as data. */
static int data_add(struct ckpt *c, uint64_t b, const char *src)
{
	int ret;

	if (c->h.nr_blocks == c->checks_cap) {
		size_t cap = c->checks_cap ? 2 * c->checks_cap : 256;
		void *q = realloc(c->checks, cap * c->check_size);

		if (!q)
			return -ENOMEM;
		c->checks = q;
		c->checks_cap = cap;
	}
	ret = extent_add(c, b, IMG_DATA);
	if (ret < 0)
		return ret;
	errno = EIO; /* what a short write reports */
	if (pwrite(c->fd, src, IMG_BLOCK,
		   (off_t)(IMG_BLOCK + c->h.nr_blocks * IMG_BLOCK)) !=
	    (ssize_t)IMG_BLOCK)
		return -errno;
	ret = img_check(c->chk, IMG_L_DATA, c->h.nr_blocks, src, IMG_BLOCK,
			c->checks + c->h.nr_blocks * c->check_size);
	if (!ret)
		c->h.nr_blocks++;
	return ret;
}

/*
 * Every wanted block of the region, in order, each copied into @buf by
 * this thread (see above); the region's last, short block zero-padded.
 */
static int blocks_write(struct ckpt *c)
{
	uint64_t nb = (c->len + IMG_BLOCK - 1) / IMG_BLOCK;
	char *buf = malloc(IMG_BLOCK);
	int ret = buf ? 0 : -ENOMEM;

	for (uint64_t b = 0; !ret && b < nb; b++) {
		const char *p = (const char *)c->r->base + b * IMG_BLOCK;
		size_t l = c->len - b * IMG_BLOCK < IMG_BLOCK
				   ? c->len - b * IMG_BLOCK
				   : IMG_BLOCK;

		if (!block_wanted(c, b))
			continue;
		memcpy(buf, p, l);
		memset(buf + l, 0, IMG_BLOCK - l);
		if (block_is_zero(buf, IMG_BLOCK))
			ret = extent_add(c, b, IMG_ZERO);
		else
			ret = data_add(c, b, buf);
	}
	free(buf);
	return ret;
}

/*
 * Write table @label from @off: @n entries of @size bytes at @p, in chunks
 * of IMG_CHUNK that end with their check (unused entries zeros).
 */
static int table_write(struct ckpt *c, enum img_label label, uint64_t off,
		       const void *p, uint64_t n, size_t size)
{
	uint64_t per = (IMG_CHUNK - IMG_TRAILER) / size;
	char *chunk = malloc(IMG_CHUNK);
	int ret = chunk ? 0 : -ENOMEM;

	for (uint64_t i = 0; !ret && i * per < n; i++) {
		uint64_t k = n - i * per < per ? n - i * per : per;

		memset(chunk, 0, IMG_CHUNK);
		memcpy(chunk, (const char *)p + i * per * size, k * size);
		ret = img_check(c->chk, label, i, chunk, IMG_CHUNK - IMG_TRAILER,
				(uint8_t *)chunk + IMG_CHUNK - IMG_TRAILER);
		errno = EIO; /* what a short write reports */
		if (!ret && pwrite(c->fd, chunk, IMG_CHUNK,
				   (off_t)(off + i * IMG_CHUNK)) != IMG_CHUNK)
			ret = -errno;
	}
	free(chunk);
	return ret;
}

/* The number of chunks of @n entries of @size bytes. */
static uint64_t chunks_of(uint64_t n, size_t size)
{
	uint64_t per = (IMG_CHUNK - IMG_TRAILER) / size;

	return (n + per - 1) / per;
}

/* The header, with its MAC (IMG_MAC) and its CRC, at the file's start. */
static int header_write(struct ckpt *c)
{
	struct img_header *h = &c->h;
	char *hdr;
	int ret = 0;

	h->header_crc = 0;
	memset(h->header_mac, 0, sizeof(h->header_mac));
	if (h->flags & IMG_MAC) {
		struct img_header m = *h;

		ret = img_check(c->chk, IMG_L_HEADER, 0, &m, sizeof(m),
				h->header_mac);
	}
	h->header_crc = crc32c(0, h, sizeof(*h));
	hdr = ret ? NULL : calloc(1, 4096);
	if (!hdr)
		return ret ? ret : -ENOMEM;
	memcpy(hdr, h, sizeof(*h));
	errno = EIO; /* what a short write reports */
	if (pwrite(c->fd, hdr, 4096, 0) != 4096)
		ret = -errno;
	free(hdr);
	return ret;
}

/* The tables after the data, then the header that makes them valid. */
static int tables_write(struct ckpt *c)
{
	struct img_header *h = &c->h;
	uint64_t end;
	int ret;

	h->data_off = IMG_BLOCK;
	h->extents_off = h->data_off + h->nr_blocks * IMG_BLOCK;
	h->checks_off = h->extents_off +
			chunks_of(h->nr_extents, sizeof(*c->ext)) * IMG_CHUNK;
	end = h->checks_off + chunks_of(h->nr_blocks, c->check_size) * IMG_CHUNK;
	/* The file reaches the end of its tables, also when they are empty. */
	if (ftruncate(c->fd, (off_t)end) < 0)
		return -errno;
	ret = table_write(c, IMG_L_EXTENTS, h->extents_off, c->ext,
			  h->nr_extents, sizeof(*c->ext));
	if (!ret)
		ret = table_write(c, IMG_L_CHECKS, h->checks_off, c->checks,
				  h->nr_blocks, c->check_size);
	return ret ? ret : header_write(c);
}

/*
 * An incremental image: the parent's identity, and the pages written since
 * the region's dirty set was last collected.
 */
static int ckpt_parent(struct ckpt *c, const char *parent,
		       const struct img_key *key)
{
	struct image *p;
	char name[PATH_MAX];
	int fd, ret;

	fd = image_file_open(parent); /* a FIFO must not block the call */
	if (fd < 0)
		return fd;
	ret = image_open(fd, parent, key, &p, NULL);
	close(fd);
	if (ret < 0)
		return ret;
	snprintf(name, sizeof(name), "%s", parent);
	ret = snprintf(c->h.parent, sizeof(c->h.parent), "%s",
		       basename(name)) >= (int)sizeof(c->h.parent)
		      ? -ENAMETOOLONG
		      : 0;
	memcpy(c->h.parent_id, p->h.id, sizeof(c->h.parent_id));
	c->parent_len = p->h.region_len;
	c->h.flags |= IMG_INCREMENTAL;
	image_close(p);
	return ret;
}

/* Collect (and re-arm) the dirty set; keep it for an incremental image. */
static int ckpt_collect(struct ckpt *c, bool keep)
{
	struct faultd_region *r = c->r;
	uint64_t *bm = calloc(bitmap_words(c->len / r->page_size), 8);
	ssize_t n;

	if (!bm)
		return -ENOMEM;
	pthread_rwlock_rdlock(&r->lock);
	n = dirty_collect(r, 0, c->len, bm);
	pthread_rwlock_unlock(&r->lock);
	if (n < 0 || !keep) {
		free(bm);
		return n < 0 ? (int)n : 0;
	}
	c->dirty = bm;
	return 0;
}

/* The temporary file, the header's constants, the checker of @key. */
static int ckpt_begin(struct ckpt *c, const char *path, char *tmp,
		      const struct img_key *key, unsigned int flags)
{
	int ret;

	if (snprintf(tmp, PATH_MAX, "%s.XXXXXX", path) >= PATH_MAX)
		return -ENAMETOOLONG;
	c->fd = mkostemp(tmp, O_CLOEXEC);
	if (c->fd < 0)
		return -errno;
	memcpy(c->h.magic, IMG_MAGIC, sizeof(c->h.magic));
	c->h.version = IMG_VERSION;
	c->h.header_size = sizeof(c->h);
	c->h.page_size = 4096;
	c->h.block_size = IMG_BLOCK;
	c->h.chunk_size = IMG_CHUNK;
	c->h.region_len = c->len;
	c->h.base_addr = c->r->base;
	c->h.flags |= key ? IMG_MAC : 0;
	if (key)
		c->h.mac_alg = flags & FAULTD_CKPT_HMAC ? IMG_ALG_HMAC_SHA256
							: IMG_ALG_GMAC_AES256;
	if (getrandom(c->h.id, sizeof(c->h.id), 0) != sizeof(c->h.id))
		return -errno ? -errno : -EIO;
	ret = img_checker_new(&c->h, key, &c->chk);
	if (!ret)
		c->check_size = img_check_size(c->chk);
	return ret;
}

/* Make the image durable and visible under @path. */
static int ckpt_commit(struct ckpt *c, const char *path, const char *tmp,
		       bool sync)
{
	char dir[PATH_MAX];
	int dfd, ret = 0;

	if (sync && fsync(c->fd) < 0)
		return -errno;
	if (rename(tmp, path) < 0)
		return -errno;
	if (!sync)
		return 0;
	snprintf(dir, sizeof(dir), "%s", path);
	dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) < 0)
		ret = -errno;
	if (dfd >= 0)
		close(dfd);
	return ret;
}

/*
 * A region whose pager writes back owns its dirty set: a page taken by a
 * checkpoint would no longer be written back by sync or eviction.
 */
static bool ckpt_dirty_is_writebacks(const struct faultd_region *r)
{
	struct pager_ref *p = r->cache ? r->cache->pager : r->pager;

	return p && p->p.writeback;
}

static int ckpt_check(struct faultd_region *r, const char *path,
		      const struct faultd_checkpoint_opts *o)
{
	if (!r || !path || !*path || (o->flags & ~CKPT_KNOWN))
		return -EINVAL;
	if (!!(o->flags & FAULTD_CKPT_INCREMENTAL) != !!o->parent ||
	    ((o->flags & FAULTD_CKPT_HMAC) && !o->key_file))
		return -EINVAL;
	if ((o->flags & FAULTD_CKPT_INCREMENTAL) &&
	    (r->wp_mode == WP_NONE || ckpt_dirty_is_writebacks(r)))
		return -EOPNOTSUPP; /* nothing says what changed */
	if (r->page_size != 4096 || r->sig_slot >= 0)
		return -EOPNOTSUPP;
	return in_handler_of(r->ctx) ? -EDEADLK : 0;
}

/* Write the image to @tmp and put it in place as @path. */
static int ckpt_write(struct ckpt *c, const char *path, char *tmp,
		      const struct faultd_checkpoint_opts *o,
		      const struct img_key *key)
{
	struct faultd_region *r = c->r;
	int ret = 0;

	/* The parent is checked before any file is made. */
	if (o->parent)
		ret = ckpt_parent(c, o->parent, key);
	if (!ret)
		ret = ckpt_begin(c, path, tmp, key, o->flags);
	if (!ret && r->wp_mode != WP_NONE && !ckpt_dirty_is_writebacks(r))
		ret = ckpt_collect(c, o->parent != NULL);
	if (!ret)
		ret = blocks_write(c);
	if (!ret)
		ret = tables_write(c);
	if (!ret)
		ret = ckpt_commit(c, path, tmp, o->flags & FAULTD_CKPT_SYNC);
	return ret;
}

FAULTD_EXPORT int faultd_checkpoint(struct faultd_region *r, const char *path,
				    const struct faultd_checkpoint_opts *opts)
{
	struct faultd_checkpoint_opts o = { .size = sizeof(o) };
	struct ckpt c = { .r = r, .fd = -1 };
	struct img_key key;
	char tmp[PATH_MAX];
	int ret = 0;

	if (opts)
		ret = opts_copy(&o, sizeof(o), opts,
				offsetof(struct faultd_checkpoint_opts, flags) +
					sizeof(o.flags));
	if (!ret)
		ret = ckpt_check(r, path, &o);
	if (!ret && o.key_file)
		ret = img_key_load(o.key_file, &key);
	if (ret < 0)
		return ret;
	c.len = atomic_load(&r->len);
	tmp[0] = 0;
	ret = ckpt_write(&c, path, tmp, &o, o.key_file ? &key : NULL);
	if (ret < 0 && tmp[0] && c.fd >= 0)
		unlink(tmp);
	if (c.fd >= 0)
		close(c.fd);
	explicit_bzero(&key, sizeof(key));
	img_checker_free(c.chk);
	free(c.ext);
	free(c.checks);
	free(c.dirty);
	return ret;
}
