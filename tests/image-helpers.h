/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * image-helpers.h - images made by hand, for the tests of their readers
 * (the library and the daemon): a writer of the format of faultd-image(5)
 * that does not share faultd_checkpoint()'s code - so that it checks the
 * reader against the format, and makes tables of any size and hostile
 * headers - an image re-signed with CRC32Cs as an attacker without the
 * key would, key files, and the peak resident memory of a process.
 */
#ifndef FAULTD_TEST_IMAGE_HELPERS_H
#define FAULTD_TEST_IMAGE_HELPERS_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "helpers.h"
#include "internal.h"

/* ------------------------------------------------------------------------
 * Peak resident memory (VmHWM), of this process (pid 0) or another.
 */

static inline long proc_status_kib(pid_t pid, const char *field)
{
	char path[64], line[256];
	size_t n = strlen(field);
	long kib = -1;
	FILE *f;

	if (pid)
		snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	else
		snprintf(path, sizeof(path), "/proc/self/status");
	f = fopen(path, "re");
	cr_assert(f, "%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, n) && line[n] == ':')
			kib = strtol(line + n + 1, NULL, 10);
	fclose(f);
	cr_assert_geq(kib, 0, "no %s in %s", field, path);
	return kib;
}

/* Start VmHWM again from the current VmRSS (clear_refs(5): "5"). */
static inline void hwm_reset(pid_t pid)
{
	char path[64];
	int fd;

	if (pid)
		snprintf(path, sizeof(path), "/proc/%d/clear_refs", (int)pid);
	else
		snprintf(path, sizeof(path), "/proc/self/clear_refs");
	fd = open(path, O_WRONLY | O_CLOEXEC);
	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(write(fd, "5", 1), 1);
	close(fd);
}

/* ------------------------------------------------------------------------
 * Keys.
 */

/* A key file of 32 bytes, each @byte (0: random), with @mode. */
static inline void key_write(const char *path, int byte, mode_t mode)
{
	uint8_t k[32];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	cr_assert(fd >= 0);
	if (byte)
		memset(k, byte, sizeof(k));
	else
		cr_assert_eq(getrandom(k, sizeof(k), 0), (ssize_t)sizeof(k));
	cr_assert_eq(write(fd, k, sizeof(k)), (ssize_t)sizeof(k));
	cr_assert_eq(fchmod(fd, mode), 0);
	close(fd);
}

static inline struct img_key key_read(const char *path)
{
	struct img_key k;

	cr_assert_eq(img_key_load(path, &k), 0);
	return k;
}

/* ------------------------------------------------------------------------
 * Headers.
 */

static inline uint64_t test_chunks(uint64_t n, size_t size)
{
	uint64_t per = (IMG_CHUNK - IMG_TRAILER) / size;

	return n / per + !!(n % per);
}

/* A full image's header for @region_len, its tables laid out for
 * @nr_extents and @nr_blocks, not yet sealed. */
static inline struct img_header test_header(uint64_t region_len,
					    uint64_t nr_extents,
					    uint64_t nr_blocks, uint64_t flags)
{
	struct img_header h = { .version = IMG_VERSION,
				.header_size = sizeof(h),
				.page_size = 4096,
				.block_size = IMG_BLOCK,
				.chunk_size = IMG_CHUNK,
				.region_len = region_len,
				.flags = flags,
				.nr_extents = nr_extents,
				.nr_blocks = nr_blocks,
				.data_off = IMG_BLOCK };

	memcpy(h.magic, IMG_MAGIC, sizeof(h.magic));
	cr_assert_eq(getrandom(h.id, sizeof(h.id), 0), (ssize_t)sizeof(h.id));
	h.extents_off = h.data_off + nr_blocks * IMG_BLOCK;
	h.checks_off = h.extents_off +
		       test_chunks(nr_extents, sizeof(struct img_extent)) *
			       IMG_CHUNK;
	return h;
}

/* The end of @h's check table, where the writer ends the file. */
static inline uint64_t test_end(const struct img_header *h)
{
	return h->checks_off +
	       test_chunks(h->nr_blocks, img_check_size_of(h)) * IMG_CHUNK;
}

/* Header MAC (with @chk, when IMG_MAC) and CRC. */
static inline void test_header_seal(struct img_header *h,
				    struct img_checker *chk)
{
	h->header_crc = 0;
	memset(h->header_mac, 0, sizeof(h->header_mac));
	if (h->flags & IMG_MAC) {
		struct img_header m = *h;

		cr_assert_eq(img_check(chk, IMG_L_HEADER, 0, &m, sizeof(m),
				       h->header_mac), 0);
	}
	h->header_crc = crc32c(0, h, sizeof(*h));
}

/* A file that is a sealed CRC32C header @h and holes up to @len bytes. */
static inline void header_file(const char *path, struct img_header h,
			       uint64_t len)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	test_header_seal(&h, NULL);
	cr_assert(fd >= 0);
	cr_assert_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	cr_assert_eq(ftruncate(fd, (off_t)len), 0);
	close(fd);
}

/* ------------------------------------------------------------------------
 * Whole images, written by hand.
 */

/* The extents of an image being made: extent @i into *e (data_block is
 * the writer's); region offset @off of data holds pattern(tag, off). */
typedef void test_extent_fn(uint64_t i, struct img_extent *e, void *arg);

/* Chunk @c of table @label, of @buf's entries: sealed, written. */
static inline void test_chunk_put(int fd, struct img_checker *chk,
				  enum img_label label, uint64_t off,
				  uint64_t c, char *buf)
{
	cr_assert_eq(img_check(chk, label, c, buf, IMG_CHUNK - IMG_TRAILER,
			       (uint8_t *)buf + IMG_CHUNK - IMG_TRAILER), 0);
	cr_assert_eq(pwrite(fd, buf, IMG_CHUNK, (off_t)(off + c * IMG_CHUNK)),
		     (ssize_t)IMG_CHUNK);
	memset(buf, 0, IMG_CHUNK);
}

struct test_writer {
	int fd;
	struct img_header h;
	struct img_checker *chk;
	size_t cs;			/* bytes of a check */
	char ext[IMG_CHUNK], checks[IMG_CHUNK];
	char block[IMG_BLOCK];
	uint64_t next_block;
};

/* Data block w->next_block: the content of region offset @off. */
static inline void test_block_put(struct test_writer *w, uint64_t off,
				  uint64_t tag)
{
	uint64_t b = w->next_block++, per = (IMG_CHUNK - IMG_TRAILER) / w->cs;

	pattern_fill(tag, off, w->block, IMG_BLOCK);
	cr_assert_eq(pwrite(w->fd, w->block, IMG_BLOCK,
			    (off_t)(w->h.data_off + b * IMG_BLOCK)),
		     (ssize_t)IMG_BLOCK);
	cr_assert_eq(img_check(w->chk, IMG_L_DATA, b, w->block, IMG_BLOCK,
			       (uint8_t *)w->checks + (b % per) * w->cs), 0);
	if (b % per == per - 1)
		test_chunk_put(w->fd, w->chk, IMG_L_CHECKS, w->h.checks_off,
			       b / per, w->checks);
}

/*
 * test_image_write() - at @path, a full image of @region_len bytes with
 * the @n extents @fn gives (in order), its data the pattern of @tag,
 * authenticated with @key (GMACs; NULL: CRC32Cs). Its header into *hp
 * (may be NULL).
 */
static inline void test_image_write(const char *path, uint64_t region_len,
				    uint64_t n, test_extent_fn *fn, void *arg,
				    uint64_t tag, const struct img_key *key,
				    struct img_header *hp)
{
	struct test_writer *w = calloc(1, sizeof(*w));
	uint64_t nb = 0, per_ext = IMG_EXT_PER_CHUNK, per;
	struct img_extent e;

	cr_assert(w);
	for (uint64_t i = 0; i < n; i++) {
		fn(i, &e, arg);
		nb += e.kind == IMG_DATA ? e.blocks : 0;
	}
	w->h = test_header(region_len, n, nb, key ? IMG_MAC : 0);
	w->h.mac_alg = key ? IMG_ALG_GMAC_AES256 : 0;
	cr_assert_eq(img_checker_new(&w->h, key, &w->chk), 0);
	w->cs = img_check_size(w->chk);
	per = (IMG_CHUNK - IMG_TRAILER) / w->cs;
	w->fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	cr_assert(w->fd >= 0);
	cr_assert_eq(ftruncate(w->fd, (off_t)test_end(&w->h)), 0);
	for (uint64_t i = 0; i < n; i++) {
		fn(i, &e, arg);
		e.data_block = e.kind == IMG_DATA ? w->next_block : 0;
		for (uint64_t b = 0; e.kind == IMG_DATA && b < e.blocks; b++)
			test_block_put(w, e.offset + b * IMG_BLOCK, tag);
		memcpy(w->ext + (i % per_ext) * sizeof(e), &e, sizeof(e));
		if (i % per_ext == per_ext - 1 || i == n - 1)
			test_chunk_put(w->fd, w->chk, IMG_L_EXTENTS,
				       w->h.extents_off, i / per_ext, w->ext);
	}
	if (nb % per)
		test_chunk_put(w->fd, w->chk, IMG_L_CHECKS, w->h.checks_off,
			       nb / per, w->checks);
	test_header_seal(&w->h, w->chk);
	cr_assert_eq(pwrite(w->fd, &w->h, sizeof(w->h), 0),
		     (ssize_t)sizeof(w->h));
	if (hp)
		*hp = w->h;
	close(w->fd);
	img_checker_free(w->chk);
	free(w);
}

static inline struct img_header header_read_of(const char *path)
{
	struct img_header h;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	cr_assert(fd >= 0);
	cr_assert_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	return h;
}

/* Seal the header of the image at @path again (its CRC32C only), as one
 * who changed it and has no key can. */
static inline void header_reseal(const char *path, struct img_header h)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);

	cr_assert(fd >= 0);
	h.header_crc = 0;
	h.header_crc = crc32c(0, &h, sizeof(h));
	cr_assert_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
}

/*
 * image_resign_crc() - turn the authenticated image at @path into an
 * image of CRC32Cs with the same content, as one who changed it and has
 * no key would: every check recomputed, IMG_MAC cleared.
 */
static inline void image_resign_crc(const char *path)
{
	struct img_header h = header_read_of(path);
	struct test_writer *w = calloc(1, sizeof(*w));
	uint64_t per = (IMG_CHUNK - IMG_TRAILER) / 4;

	cr_assert(w && (h.flags & IMG_MAC));
	h.flags &= ~IMG_MAC;
	h.mac_alg = 0;
	w->h = h;
	w->cs = 4;
	cr_assert_eq(img_checker_new(&h, NULL, &w->chk), 0);
	w->fd = open(path, O_RDWR | O_CLOEXEC);
	cr_assert(w->fd >= 0);
	for (uint64_t c = 0; c < test_chunks(h.nr_extents, 32); c++) {
		cr_assert_eq(pread(w->fd, w->ext, IMG_CHUNK,
				   (off_t)(h.extents_off + c * IMG_CHUNK)),
			     (ssize_t)IMG_CHUNK);
		memset(w->ext + IMG_CHUNK - IMG_TRAILER, 0, IMG_TRAILER);
		test_chunk_put(w->fd, w->chk, IMG_L_EXTENTS, h.extents_off, c,
			       w->ext);
	}
	for (uint64_t b = 0; b < h.nr_blocks; b++) {
		cr_assert_eq(pread(w->fd, w->block, IMG_BLOCK,
				   (off_t)(h.data_off + b * IMG_BLOCK)),
			     (ssize_t)IMG_BLOCK);
		cr_assert_eq(img_check(w->chk, IMG_L_DATA, b, w->block,
				       IMG_BLOCK,
				       (uint8_t *)w->checks + (b % per) * 4),
			     0);
		if (b % per == per - 1 || b == h.nr_blocks - 1)
			test_chunk_put(w->fd, w->chk, IMG_L_CHECKS,
				       h.checks_off, b / per, w->checks);
	}
	cr_assert_eq(ftruncate(w->fd, (off_t)test_end(&h)), 0);
	test_header_seal(&h, NULL);
	cr_assert_eq(pwrite(w->fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(w->fd);
	img_checker_free(w->chk);
	free(w);
}

/*
 * The extents of a big table, for test_image_write(): a 64 GiB region,
 * a zero extent on every other block, every BIG_DATA_EVERY-th of them
 * data; a 16 MiB extent table.
 */
#define BIG_EXTENTS (1ull << 19)
#define BIG_DATA_EVERY 4096

static void big_extent(uint64_t i, struct img_extent *e, void *arg)
{
	(void)arg;
	*e = (struct img_extent){ .offset = 2 * i * IMG_BLOCK, .blocks = 1,
				  .kind = i % BIG_DATA_EVERY ? IMG_ZERO
							     : IMG_DATA };
}

#endif
