// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * image.c - checkpoint images: the format, and reading a region's content
 * from one (faultd_checkpoint() in checkpoint.c writes them).
 *
 * An image stores a region in blocks of IMG_BLOCK (64 KiB, the default
 * fault-around window): the unit of storage, of checksums and of reads. A
 * file is
 *
 *   [header, 4 KiB][padding to IMG_BLOCK][data blocks][extent table][CRCs]
 *
 * The extent table is sorted by region offset and says, for runs of
 * blocks, where their data is (IMG_DATA) or that they are zeros (IMG_ZERO,
 * no space taken). A block in no extent was never present: zeros in a full
 * image; in an incremental image, unchanged since the parent, whose file
 * is named in the header and found next to this one. Every data block has
 * a CRC32C; the header, the extent table and the CRC table have their own.
 *
 * Reading verifies the structure once when the image is opened (anything
 * inconsistent: -EBADMSG) and each block's checksum on every read: a block
 * that does not match is an error (its pages are poisoned by the fault
 * path), never data. Reads go through io_uring (ring_rw(), file.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define IMG_HEADER_LEN 4096

/* ------------------------------------------------------------------------
 * Opening and checking an image.
 */

static uint32_t header_crc(const struct img_header *h)
{
	struct img_header c = *h;

	c.header_crc = 0;
	return crc32c(0, &c, sizeof(c));
}

/* Read exactly @len bytes at @off; -EBADMSG if the file is shorter. */
static int read_full(int fd, void *buf, size_t len, uint64_t off)
{
	ssize_t n = ring_rw(fd, false, off, buf, len);

	if (n < 0)
		return (int)n;
	return (size_t)n == len ? 0 : -EBADMSG;
}

/*
 * A region is at most IMG_MAX_REGION (no address space is larger): its
 * pages and blocks, and the offsets of its tables, are counted without
 * wrapping - here and by every user of the image.
 */
#define IMG_MAX_REGION (1ull << 57)

static int header_check(const struct img_header *h, uint64_t file_len)
{
	uint64_t blocks = (h->region_len + IMG_BLOCK - 1) / IMG_BLOCK;

	if (memcmp(h->magic, IMG_MAGIC, sizeof(h->magic)))
		return -EINVAL; /* not an image */
	if (h->version != IMG_VERSION ||
	    (h->header_crc == header_crc(h) &&
	     (h->flags & ~(uint64_t)IMG_INCREMENTAL)))
		return -EPROTONOSUPPORT; /* another version, or a newer flag */
	if (h->header_crc != header_crc(h) ||
	    h->header_size != sizeof(*h) || h->block_size != IMG_BLOCK ||
	    h->page_size != 4096 || !h->region_len ||
	    h->region_len > IMG_MAX_REGION ||
	    h->data_off != IMG_BLOCK || h->nr_blocks > blocks ||
	    h->nr_extents > blocks ||
	    h->extents_off != h->data_off + h->nr_blocks * IMG_BLOCK ||
	    h->crcs_off != h->extents_off +
				   h->nr_extents * sizeof(struct img_extent) ||
	    file_len < h->crcs_off + h->nr_blocks * sizeof(uint32_t) ||
	    (h->flags & ~(uint64_t)IMG_INCREMENTAL) ||
	    memchr(h->parent, 0, sizeof(h->parent)) == NULL)
		return -EBADMSG;
	return 0;
}

/* Extents sorted, apart, inside the region; data inside the data area. */
static int extents_check(const struct image *img)
{
	uint64_t end = 0, blocks = img->h.region_len + IMG_BLOCK - 1;

	blocks /= IMG_BLOCK;
	for (uint64_t i = 0; i < img->h.nr_extents; i++) {
		const struct img_extent *e = &img->ext[i];
		uint64_t first = e->offset / IMG_BLOCK;

		if (e->offset % IMG_BLOCK || first < end || !e->blocks ||
		    e->blocks > blocks - first || first >= blocks ||
		    (e->kind != IMG_DATA && e->kind != IMG_ZERO) ||
		    (e->kind == IMG_DATA &&
		     (e->data_block > img->h.nr_blocks ||
		      e->blocks > img->h.nr_blocks - e->data_block)))
			return -EBADMSG;
		end = first + e->blocks;
	}
	return 0;
}

static int tables_load(struct image *img, int fd)
{
	size_t elen = img->h.nr_extents * sizeof(*img->ext);
	size_t clen = img->h.nr_blocks * sizeof(*img->crcs);
	int ret;

	img->ext = fd_malloc(elen ? elen : 1);
	img->crcs = fd_malloc(clen ? clen : 1);
	if (!img->ext || !img->crcs)
		return -ENOMEM;
	ret = read_full(fd, img->ext, elen, img->h.extents_off);
	if (!ret)
		ret = read_full(fd, img->crcs, clen, img->h.crcs_off);
	if (ret)
		return ret;
	if (crc32c(0, img->ext, elen) != img->h.extents_crc ||
	    crc32c(0, img->crcs, clen) != img->h.crcs_crc)
		return -EBADMSG;
	return extents_check(img);
}

#define MAX_CHAIN 64 /* incremental images on top of a full one */

static int image_open_chain(int fd, const char *path, unsigned int depth,
			    const uint8_t *want_id, struct image **imgp);

/*
 * Open the image file at @path for reading: a descriptor, or -errno, or
 * -EINVAL when it is not a regular file or a block device. A FIFO put where
 * an image (or a parent) should be must not block the opener: it is
 * opened non-blocking, and O_NONBLOCK is cleared once the file is known
 * to be one whose reads it would only break (io_uring would return
 * EAGAIN for cold pages instead of waiting for them).
 */
int image_file_open(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	int ret = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || fcntl(fd, F_SETFL, 0) < 0)
		ret = -errno;
	else if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
		ret = -EINVAL;
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

/* The parent of an incremental image: its file, next to @path's. */
static int parent_open(struct image *img, const char *path,
		       unsigned int depth)
{
	char dir[PATH_MAX], full[PATH_MAX * 2];
	int fd, ret;

	if (strchr(img->h.parent, '/') || !img->h.parent[0])
		return -EBADMSG;
	snprintf(dir, sizeof(dir), "%s", path);
	snprintf(full, sizeof(full), "%s/%s", dirname(dir), img->h.parent);
	fd = image_file_open(full);
	if (fd < 0)
		return fd;
	ret = image_open_chain(fd, full, depth + 1, img->h.parent_id,
			       &img->parent);
	close(fd);
	return ret;
}

/*
 * image_open() - check and load the image in @fd (a duplicate is kept).
 * @path (may be NULL for a full image) locates an incremental image's
 * parent. Returns 0, -EINVAL (not an image), -EPROTONOSUPPORT (another
 * version), -EBADMSG (corrupt or truncated), -ESTALE (the parent file is
 * not this image's parent), -ELOOP (a chain of more than MAX_CHAIN
 * images, or a cycle), -ENOMEM, or the error of opening the parent.
 */
int image_open(int fd, const char *path, struct image **imgp)
{
	return image_open_chain(fd, path, 0, NULL, imgp);
}

/* image_open() for the @depth-th image of a chain, which must be @want_id
 * (checked before its own parent is opened). */
static int image_open_chain(int fd, const char *path, unsigned int depth,
			    const uint8_t *want_id, struct image **imgp)
{
	struct image *img = fd_calloc(1, sizeof(*img));
	struct stat st;
	int ret;

	if (!img)
		return -ENOMEM;
	img->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	ret = img->fd < 0 ? -errno : 0;
	if (!ret && fstat(img->fd, &st) < 0)
		ret = -errno;
	if (!ret && !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
		ret = -EINVAL; /* a pipe or socket would block the reader */
	if (!ret)
		ret = read_full(img->fd, &img->h, sizeof(img->h), 0);
	if (ret == -EBADMSG) /* shorter than a header */
		ret = -EINVAL;
	if (!ret)
		ret = header_check(&img->h, (uint64_t)st.st_size);
	if (!ret && want_id && memcmp(img->h.id, want_id, sizeof(img->h.id)))
		ret = -ESTALE; /* not the image the child was taken against */
	if (!ret && depth > MAX_CHAIN)
		ret = -ELOOP;
	if (!ret)
		ret = tables_load(img, img->fd);
	if (!ret && (img->h.flags & IMG_INCREMENTAL))
		ret = path ? parent_open(img, path, depth) : -EINVAL;
	if (ret) {
		image_close(img);
		return ret;
	}
	*imgp = img;
	return 0;
}

/* image_close() - also the calling thread's ring: see ring_thread_close(). */
void image_close(struct image *img)
{
	if (!img)
		return;
	image_close(img->parent);
	if (img->fd >= 0)
		close(img->fd);
	free(img->ext);
	free(img->crcs);
	free(img);
	ring_thread_close();
}

/* ------------------------------------------------------------------------
 * Reading content.
 */

/* The extent holding block offset @off, or NULL. */
static const struct img_extent *extent_find(const struct image *img,
					    uint64_t off)
{
	uint64_t lo = 0, hi = img->h.nr_extents;

	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		const struct img_extent *e = &img->ext[mid];

		if (off < e->offset)
			hi = mid;
		else if (off >= e->offset + e->blocks * IMG_BLOCK)
			lo = mid + 1;
		else
			return e;
	}
	return NULL;
}

/* Read data blocks [first, first + n) into @buf and check each. */
static int blocks_read(const struct image *img, uint64_t first, size_t n,
		       void *buf)
{
	int ret = read_full(img->fd, buf, n * IMG_BLOCK,
			    img->h.data_off + first * IMG_BLOCK);

	for (size_t i = 0; !ret && i < n; i++)
		if (crc32c(0, (char *)buf + i * IMG_BLOCK, IMG_BLOCK) !=
		    img->crcs[first + i])
			ret = -EBADMSG;
	return ret;
}

/* Part [off, off + len) of one data block, through a bounce buffer. */
static int block_part(const struct image *img, uint64_t block, uint64_t off,
		      void *buf, size_t len)
{
	char *tmp = aligned_alloc(4096, IMG_BLOCK);
	int ret;

	if (!tmp)
		return -ENOMEM;
	ret = blocks_read(img, block, 1, tmp);
	if (!ret)
		memcpy(buf, tmp + off % IMG_BLOCK, len);
	free(tmp);
	return ret;
}

/*
 * image_read_run() - [off, off + len), inside one block or whole blocks
 * of one extent (or of no extent): read, zeroed, or from the parent.
 */
static int image_read_run(const struct image *img, uint64_t off, void *buf,
			  size_t len)
{
	const struct img_extent *e = extent_find(img, off - off % IMG_BLOCK);
	uint64_t block;

	if (!e) {
		if (img->parent && off < img->parent->h.region_len)
			return image_read(img->parent, off, buf, len);
		memset(buf, 0, len);
		return 0;
	}
	if (e->kind == IMG_ZERO) {
		memset(buf, 0, len);
		return 0;
	}
	block = e->data_block + (off - e->offset) / IMG_BLOCK;
	if (off % IMG_BLOCK || len < IMG_BLOCK)
		return block_part(img, block, off, buf, len);
	return blocks_read(img, block, len / IMG_BLOCK, buf);
}

/*
 * How much of [off, off + len) one image_read_run() can take: the rest of
 * a block, or whole blocks while they stay in one extent (or none).
 */
static size_t run_len(const struct image *img, uint64_t off, size_t len)
{
	const struct img_extent *e;
	uint64_t end;

	if (off % IMG_BLOCK || len < IMG_BLOCK) {
		end = off - off % IMG_BLOCK + IMG_BLOCK;
		return end - off < len ? end - off : len;
	}
	e = extent_find(img, off);
	end = e ? e->offset + e->blocks * IMG_BLOCK : off + IMG_BLOCK;
	if (!e) /* up to the next extent */
		while (end - off < len && !extent_find(img, end))
			end += IMG_BLOCK;
	len -= len % IMG_BLOCK;
	return end - off < len ? end - off : len;
}

/*
 * image_read() - the region's content of [off, off + len) (page-aligned)
 * into @buf. Returns len, or -EBADMSG (a block's checksum does not match,
 * or the file was cut short), or another read error. Past the image's
 * length it reads zeros.
 * Context: any thread; several at once.
 */
ssize_t image_read(const struct image *img, uint64_t off, void *buf,
		   size_t len)
{
	for (size_t done = 0; done < len;) {
		size_t l = run_len(img, off + done, len - done);
		int ret = image_read_run(img, off + done, (char *)buf + done, l);

		if (ret < 0)
			return ret;
		done += l;
	}
	return (ssize_t)len;
}
