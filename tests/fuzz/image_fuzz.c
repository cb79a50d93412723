// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * image_fuzz.c - libFuzzer target for checkpoint images (image.c).
 *
 * Covers image_open() - the header, the chunks of the extent and check
 * tables, an incremental image's parent found by name and checked by id,
 * chains and cycles, the MACs of an authenticated image (opened with the
 * key of fuzz-key.h when its header says IMG_MAC) - and, for an image it
 * accepts, image_read(): whole and partial blocks, extents of data and of
 * zeros, the parent's blocks, past the end; every block's check and every
 * table chunk's checked on the way.
 *
 * Input: one image, or several one after the other, each starting with
 * its magic "FAULTDIM" (at most MAX_IMAGES). The i-th is written to the
 * file "i" in a directory of the target's own and "0" is opened: an
 * incremental image names its parent "1", and so on. Each image is
 * squeezed: its header (sizeof(struct img_header) bytes), then everything
 * from data_off (IMG_BLOCK) on; the padding between, which the reader
 * never reads, comes back as a hole. fuzz-seeds writes seeds in this form.
 *
 * Each input runs as it is, then (if that changes it) with its checks
 * recomputed (CRC32Cs, or MACs with the fuzz key), so that a mutation gets
 * past them to the checks behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz-key.h"
#include "internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_IMAGES  4
#define HEAD	    sizeof(struct img_header)
#define READ_MAX    (4 * IMG_BLOCK) /* the most one check reads */
#define MAX_EXTENTS 8		    /* extents whose pages are read */

static char dir[PATH_MAX];
static struct img_key fuzz_key;	/* 32 bytes of FUZZ_KEY_BYTE */
static char buf[READ_MAX] __attribute__((aligned(4096)));

static const char *path_of(unsigned int i)
{
	static char path[PATH_MAX + 16];

	snprintf(path, sizeof(path), "%s/%u", dir, i);
	return path;
}

static void dir_remove(void)
{
	for (unsigned int i = 0; i < MAX_IMAGES; i++)
		unlink(path_of(i));
	rmdir(dir);
}

/* The images' directory: in $TMPDIR, else in memory where there is one. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *tmp = getenv("TMPDIR");

	(void)argc;
	(void)argv;
	if (!tmp || !*tmp)
		tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(dir, sizeof(dir), "%s/faultd-image-fuzz-XXXXXX", tmp);
	if (!mkdtemp(dir))
		abort();
	memset(fuzz_key.key, FUZZ_KEY_BYTE, sizeof(fuzz_key.key));
	atexit(dir_remove);
	return 0;
}

/*
 * File "i" is image @p unsqueezed: header, hole to IMG_BLOCK, the rest.
 * Cut to length rather than O_TRUNC: on ext4, a file truncated to 0 and
 * rewritten is flushed on close, and each run would wait for the disk.
 */
static void image_write(unsigned int i, const uint8_t *p, size_t len)
{
	size_t head = len < HEAD ? len : HEAD, rest = len - head;
	off_t flen = (off_t)(len < HEAD ? len : IMG_BLOCK + rest);
	int fd = open(path_of(i), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);

	if (fd < 0 || ftruncate(fd, (off_t)head) < 0 ||
	    pwrite(fd, p, head, 0) != (ssize_t)head ||
	    (rest && pwrite(fd, p + head, rest, IMG_BLOCK) != (ssize_t)rest) ||
	    ftruncate(fd, flen) < 0)
		abort();
	close(fd);
}

/* The input's images: [at[i], at[i] + len[i]), split at each magic. */
struct parts {
	unsigned int n;
	size_t at[MAX_IMAGES], len[MAX_IMAGES];
};

static void parts_split(const uint8_t *data, size_t size, struct parts *ps)
{
	size_t at = 0;

	for (ps->n = 0; ps->n < MAX_IMAGES; ps->n++) {
		const uint8_t *next = NULL;

		if (size - at > 1 && ps->n + 1 < MAX_IMAGES)
			next = memmem(data + at + 1, size - at - 1, IMG_MAGIC,
				      strlen(IMG_MAGIC));
		ps->at[ps->n] = at;
		ps->len[ps->n] = next ? (size_t)(next - data) - at : size - at;
		if (!next)
			break;
		at = (size_t)(next - data);
	}
	ps->n++;
}

/* Files "0", "1"... the images; none beyond. */
static void images_write(const uint8_t *data, const struct parts *ps)
{
	for (unsigned int i = 0; i < MAX_IMAGES; i++)
		if (i < ps->n)
			image_write(i, data + ps->at[i], ps->len[i]);
		else
			unlink(path_of(i));
}

/* Where file offset [off, off + len) is in squeezed image @p, if it is. */
static uint8_t *squeezed(uint8_t *p, size_t size, uint64_t off, uint64_t len)
{
	if (size < HEAD || off < IMG_BLOCK || off - IMG_BLOCK > size - HEAD ||
	    len > size - HEAD - (off - IMG_BLOCK))
		return NULL;
	return p + HEAD + (off - IMG_BLOCK);
}

/* The key an image with header @h is opened with: the fuzz key if its
 * header asks for one. */
static const struct img_key *key_for(const uint8_t *p, size_t size)
{
	struct img_header h;

	if (size < HEAD)
		return NULL;
	memcpy(&h, p, sizeof(h));
	return h.flags & IMG_MAC ? &fuzz_key : NULL;
}

/* Seal each chunk of a table of @chunks chunks at file offset @off with
 * its check, as far as the chunks are there. */
static void chunks_repair(uint8_t *p, size_t size, struct img_checker *chk,
			  enum img_label label, uint64_t off, uint64_t chunks)
{
	for (uint64_t c = 0; c < chunks; c++) {
		uint8_t *q = squeezed(p, size, off + c * IMG_CHUNK, IMG_CHUNK);

		if (!q)
			break;
		memset(q + IMG_CHUNK - IMG_TRAILER, 0, IMG_TRAILER);
		if (img_check(chk, label, c, q, IMG_CHUNK - IMG_TRAILER,
			      q + IMG_CHUNK - IMG_TRAILER))
			abort();
	}
}

/* Each data block's check, into the check table, as far as both are
 * there. */
static void blocks_repair(uint8_t *p, size_t size, const struct img_header *h,
			  struct img_checker *chk)
{
	size_t cs = img_check_size(chk);
	uint64_t per = (IMG_CHUNK - IMG_TRAILER) / cs;

	for (uint64_t i = 0; i < h->nr_blocks; i++) {
		uint8_t *b = squeezed(p, size, h->data_off + i * IMG_BLOCK,
				      IMG_BLOCK);
		uint8_t *e = squeezed(p, size, h->checks_off +
				      i / per * IMG_CHUNK + i % per * cs, cs);

		if (!b || !e)
			break;
		if (img_check(chk, IMG_L_DATA, i, b, IMG_BLOCK, e))
			abort();
	}
}

/*
 * Make the checks of squeezed image @p match its content - data blocks,
 * table chunks, header - so that a mutation reaches the checks behind
 * them. Tables longer than the input are repaired as far as they go.
 */
static void checks_repair(uint8_t *p, size_t size)
{
	uint64_t max = IMG_BLOCK + size;
	struct img_checker *chk;
	struct img_header h;
	uint64_t per;
	size_t cs;

	if (size < HEAD)
		return;
	memcpy(&h, p, sizeof(h));
	if (h.nr_blocks > max / 4 ||
	    h.nr_extents > max / sizeof(struct img_extent) ||
	    img_checker_new(&h, key_for(p, size), &chk))
		return;
	cs = img_check_size(chk);
	blocks_repair(p, size, &h, chk);
	chunks_repair(p, size, chk, IMG_L_EXTENTS, h.extents_off,
		      (h.nr_extents + IMG_EXT_PER_CHUNK - 1) / IMG_EXT_PER_CHUNK);
	per = (IMG_CHUNK - IMG_TRAILER) / cs;
	chunks_repair(p, size, chk, IMG_L_CHECKS, h.checks_off,
		      (h.nr_blocks + per - 1) / per);
	h.header_crc = 0;
	memset(h.header_mac, 0, sizeof(h.header_mac));
	if ((h.flags & IMG_MAC) &&
	    img_check(chk, IMG_L_HEADER, 0, &h, sizeof(h), h.header_mac))
		abort();
	h.header_crc = crc32c(0, &h, sizeof(h));
	memcpy(p, &h, sizeof(h));
	img_checker_free(chk);
}

static bool all_zero(const char *p, size_t len)
{
	return !len || (!p[0] && !memcmp(p, p + 1, len - 1));
}

/* image_read() of [off, off + len) returns all of it or -EBADMSG. */
static void read_check(struct image *img, uint64_t off, size_t len,
		       bool zeros)
{
	ssize_t n = image_read(img, off, buf, len);

	if (n != (ssize_t)len && n != -EBADMSG && n != -ENOMEM)
		abort();
	if (n == (ssize_t)len && zeros && !all_zero(buf, len))
		abort(); /* a zero extent, or past every image's end */
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* An extent's first page, its last, and as much of it as fits. */
static void extent_reads(struct image *img, const struct img_extent *e)
{
	uint64_t len = e->blocks * IMG_BLOCK;
	bool zero = e->kind == IMG_ZERO;

	read_check(img, e->offset, 4096, zero);
	read_check(img, e->offset + len - 4096, 4096, zero);
	read_check(img, e->offset, min_u64(len, READ_MAX), zero);
}

static void reads_check(struct image *img)
{
	uint64_t head = min_u64(img->h.region_len, READ_MAX), end = 0;
	struct img_extent e;

	read_check(img, 0, (head + 4095) & ~4095ull, false);
	read_check(img, IMG_BLOCK - 4096, 8192, false); /* across blocks */
	for (uint64_t i = 0; i < min_u64(img->h.nr_extents, MAX_EXTENTS); i++)
		if (!image_extent(img, i, &e))
			extent_reads(img, &e);
	/* No extent reaches past its image's last block. */
	for (const struct image *p = img; p; p = p->parent)
		if (p->h.region_len > end)
			end = p->h.region_len;
	if (end <= UINT64_MAX - 2 * IMG_BLOCK)
		read_check(img, (end + IMG_BLOCK - 1) & ~(IMG_BLOCK - 1), 4096,
			   true);
}

/* Write the images, open "0" (with its parents), read what it accepts. */
static void image_run(const uint8_t *data, const struct parts *ps)
{
	struct image *img = NULL;
	int fd, ret;

	images_write(data, ps);
	fd = open(path_of(0), O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		abort();
	ret = image_open(fd, path_of(0), key_for(data + ps->at[0], ps->len[0]),
			 &img, NULL);
	close(fd);
	if (ret != 0 && ret != -EINVAL && ret != -EPROTONOSUPPORT &&
	    ret != -EBADMSG && ret != -ESTALE && ret != -ELOOP &&
	    ret != -ENOENT && ret != -ENOMEM && ret != -ENOKEY &&
	    ret != -EKEYREJECTED)
		abort(); /* not one of image_open()'s errors */
	if (ret)
		return;
	/* Its users count its pages and blocks: that must not wrap. */
	if (img->h.region_len > UINT64_MAX - (IMG_BLOCK - 1))
		abort();
	reads_check(img);
	image_close(img);
}

/* The input as it is, then with every checksum made to match. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *fixed = malloc(size ? size : 1);
	struct parts ps;

	if (!fixed)
		abort();
	parts_split(data, size, &ps);
	image_run(data, &ps);
	memcpy(fixed, data, size);
	for (unsigned int i = 0; i < ps.n; i++)
		checks_repair(fixed + ps.at[i], ps.len[i]);
	if (memcmp(fixed, data, size))
		image_run(fixed, &ps);
	free(fixed);
	return 0;
}
