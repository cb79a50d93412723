// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * image.c - checkpoint images and restoring from them in the process:
 * content byte for byte, zeros that take no space, incremental images,
 * and every kind of damage refused or poisoned, never served.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "helpers.h"
#include "internal.h"

#define TAG 0x1a6e
#define BLOCK (64 * 1024ul)

static char dir[] = "/var/tmp/faultd-image-XXXXXX";
static char *paths[32]; /* made by path_of(), freed by teardown() */
static size_t nr_paths;

static void setup(void)
{
	cr_assert(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
	while (nr_paths)
		free(paths[--nr_paths]);
}

TestSuite(image, .init = setup, .fini = teardown, .timeout = 120);

/* A path in the test's directory; teardown() frees it. */
static const char *path_of(const char *name)
{
	char *p;

	cr_assert(nr_paths < sizeof(paths) / sizeof(paths[0]));
	cr_assert(asprintf(&p, "%s/%s", dir, name) > 0);
	return paths[nr_paths++] = p;
}

static struct faultd_ctx *ctx_new(void)
{
	struct faultd_ctx *ctx;

	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	return ctx;
}

/*
 * A zero-fill region of @len bytes: block b holds the pattern if b % 3 ==
 * 0, zeros written over it if b % 3 == 1, and is never touched otherwise.
 */
static struct faultd_region *sample_region(struct faultd_ctx *ctx,
					   size_t len, uint64_t flags)
{
	struct faultd_region_opts o = { .size = sizeof(o), .length = len,
					.flags = flags };
	struct faultd_region *r;
	char *p;

	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	p = faultd_region_base(r);
	for (size_t b = 0; b < len / BLOCK; b++) {
		if (b % 3 == 0)
			pattern_fill(TAG, b * BLOCK, p + b * BLOCK, BLOCK);
		else if (b % 3 == 1)
			memset(p + b * BLOCK, 0, BLOCK);
	}
	return r;
}

static size_t bad_blocks(const char *p, size_t len)
{
	size_t bad = 0;
	static const char zero[BLOCK];

	for (size_t b = 0; b < len / BLOCK; b++)
		bad += b % 3 == 0
			       ? pattern_check(TAG, b * BLOCK, p + b * BLOCK,
					       BLOCK) != 0
			       : memcmp(p + b * BLOCK, zero, BLOCK) != 0;
	return bad;
}

static off_t file_size(const char *path)
{
	struct stat st;

	cr_assert_eq(stat(path, &st), 0);
	return st.st_size;
}

static struct faultd_region *restore(struct faultd_ctx *ctx,
				     const char *path, unsigned int flags)
{
	struct faultd_restore_opts o = { .size = sizeof(o), .flags = flags };
	struct faultd_region *r;

	cr_assert_eq(faultd_restore(ctx, path, &o, &r), 0);
	return r;
}

Test(image, full_roundtrip_and_zeros_take_no_space)
{
	size_t len = 300 * BLOCK + 3 * 4096; /* a short last block */
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = sample_region(ctx, len, 0), *x;
	const char *img = path_of("full");
	struct faultd_stats s = { .size = sizeof(s) };

	cr_assert_eq(faultd_checkpoint(r, img, NULL), 0);
	/* Data blocks only: 100 of 300, plus the header and tables. */
	cr_assert_lt(file_size(img), (off_t)(102 * BLOCK));
	cr_assert_geq(file_size(img), (off_t)(101 * BLOCK));
	x = restore(ctx, img, FAULTD_RESTORE_LAZY);
	cr_assert_eq(faultd_region_size(x), len);
	cr_assert_eq(bad_blocks(faultd_region_base(x), len - len % BLOCK), 0);
	for (size_t i = len - len % BLOCK; i < len; i++)
		cr_assert_eq(((char *)faultd_region_base(x))[i], 0);
	cr_assert_eq(faultd_region_stats(x, &s), 0);
	/* One fault per 64 KiB block, none for pages already filled. */
	cr_assert_eq(s.faults, (len + BLOCK - 1) / BLOCK);
	cr_assert_eq(faultd_restore_wait(x), -EAGAIN);
	faultd_ctx_destroy(ctx);
}

Test(image, background_population_fills_everything)
{
	size_t len = 32 * 1024 * 1024;
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = sample_region(ctx, len, 0), *x;
	const char *img = path_of("bg");
	struct faultd_restore_progress p = { .size = sizeof(p) };
	struct faultd_stats s = { .size = sizeof(s) };

	cr_assert_eq(faultd_checkpoint(r, img, NULL), 0);
	x = restore(ctx, img, 0);
	cr_assert_eq(faultd_restore_wait(x), 0);
	cr_assert_eq(faultd_restore_progress(x, &p), 0);
	cr_assert(p.done);
	cr_assert_eq(p.pages_background, len / 4096);
	cr_assert_eq(bad_blocks(faultd_region_base(x), len), 0);
	cr_assert_eq(faultd_region_stats(x, &s), 0);
	cr_assert_eq(s.faults, 0, "everything was in before the reads");
	faultd_ctx_destroy(ctx);
}

/* A region with a pager: pages never touched are the pager's, not 0s. */
Test(image, pager_region_is_read_whole)
{
	size_t len = 64 * BLOCK;
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_pager pp = pattern_pager(TAG, FAULTD_PAGER_CONCURRENT);
	struct faultd_region_opts o = { .size = sizeof(o), .length = len,
					.pager = &pp };
	struct faultd_region *r, *x;
	const char *img = path_of("pager");

	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	cr_assert_eq(faultd_checkpoint(r, img, NULL), 0);
	x = restore(ctx, img, FAULTD_RESTORE_LAZY);
	cr_assert_eq(pattern_check(TAG, 0, faultd_region_base(x), len), 0);
	faultd_ctx_destroy(ctx);
}

Test(image, incremental_holds_only_what_changed)
{
	size_t len = 120 * BLOCK;
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = sample_region(ctx, len, FAULTD_REGION_WP), *x;
	const char *full = path_of("base"), *inc = path_of("inc1");
	struct faultd_checkpoint_opts o = { .size = sizeof(o),
					    .flags = FAULTD_CKPT_INCREMENTAL |
						     FAULTD_CKPT_SYNC,
					    .parent = full };
	char *p = faultd_region_base(r), *q;

	cr_assert_eq(faultd_checkpoint(r, full, NULL), 0);
	memset(p + 5 * BLOCK + 100, 0x42, 10);	     /* a data block */
	memset(p + 7 * BLOCK, 0, BLOCK);	     /* data becomes zeros */
	pattern_fill(TAG + 1, 8 * BLOCK, p + 8 * BLOCK, BLOCK); /* was 0 */
	cr_assert_eq(faultd_checkpoint(r, inc, &o), 0);
	/* Two data blocks (5 and 8), one zero extent. */
	cr_assert_lt(file_size(inc), (off_t)(4 * BLOCK));
	x = restore(ctx, inc, 0);
	cr_assert_eq(faultd_restore_wait(x), 0);
	q = faultd_region_base(x);
	cr_assert_eq(memcmp(p, q, len), 0, "restored != region");
	o.parent = path_of("nothing-there");
	cr_assert_eq(faultd_checkpoint(r, path_of("inc2"), &o), -ENOENT);
	o.parent = NULL;
	cr_assert_eq(faultd_checkpoint(r, path_of("inc2"), &o), -EINVAL);
	faultd_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------
 * Damage
 */

static const char *damaged_copy(const char *img, const char *name,
				off_t at, size_t flip_len, off_t truncate_to)
{
	const char *out = path_of(name);
	char cmd[600];
	int fd;

	snprintf(cmd, sizeof(cmd), "cp %s %s", img, out);
	cr_assert_eq(system(cmd), 0);
	fd = open(out, O_RDWR);
	cr_assert(fd >= 0);
	for (size_t i = 0; i < flip_len; i++) {
		unsigned char c;

		cr_assert_eq(pread(fd, &c, 1, at + (off_t)i), 1);
		c ^= 0x5a;
		cr_assert_eq(pwrite(fd, &c, 1, at + (off_t)i), 1);
	}
	if (truncate_to >= 0)
		cr_assert_eq(ftruncate(fd, truncate_to), 0);
	close(fd);
	return out;
}

static struct img_header header_of(const char *path)
{
	struct img_header h;
	int fd = open(path, O_RDONLY);

	cr_assert_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	return h;
}

static int try_restore(struct faultd_ctx *ctx, const char *path)
{
	struct faultd_restore_opts o = { .size = sizeof(o),
					 .flags = FAULTD_RESTORE_LAZY };
	struct faultd_region *r;
	int ret = faultd_restore(ctx, path, &o, &r);

	if (!ret)
		faultd_region_destroy(r);
	return ret;
}

/* A FIFO where an image or its parent should be is refused at once: an
 * open that blocked for a writer would hang the restore forever. */
Test(image, fifo_as_image_or_parent_is_refused)
{
	size_t len = 8 * BLOCK;
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = sample_region(ctx, len, FAULTD_REGION_WP);
	const char *full = path_of("fbase"), *inc = path_of("finc");
	struct faultd_checkpoint_opts o = { .size = sizeof(o),
					    .flags = FAULTD_CKPT_INCREMENTAL,
					    .parent = full };

	cr_assert_eq(faultd_checkpoint(r, full, NULL), 0);
	memset(faultd_region_base(r), 0x42, 10);
	cr_assert_eq(faultd_checkpoint(r, inc, &o), 0);
	cr_assert_eq(unlink(full), 0);
	cr_assert_eq(mkfifo(full, 0600), 0);
	cr_assert_eq(try_restore(ctx, full), -EINVAL, "the image is a FIFO");
	cr_assert_eq(try_restore(ctx, inc), -EINVAL, "the parent is a FIFO");
	faultd_ctx_destroy(ctx);
}

Test(image, damaged_tables_and_versions_are_refused)
{
	size_t len = 30 * BLOCK;
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = sample_region(ctx, len, 0);
	const char *img = path_of("good");
	struct img_header h;

	cr_assert_eq(faultd_checkpoint(r, img, NULL), 0);
	h = header_of(img);
	cr_assert_eq(try_restore(ctx, img), 0);
	cr_assert_eq(try_restore(ctx, damaged_copy(img, "ext", (off_t)h.extents_off + 3, 1, -1)),
		     -EBADMSG, "a flipped byte in the extent table");
	cr_assert_eq(try_restore(ctx, damaged_copy(img, "crc", (off_t)h.checks_off, 1, -1)),
		     -EBADMSG, "a flipped byte in the CRC table");
	cr_assert_eq(try_restore(ctx, damaged_copy(img, "hdr", 40, 1, -1)),
		     -EBADMSG, "a flipped byte in the header");
	cr_assert_eq(try_restore(ctx, damaged_copy(img, "ver", 8, 1, -1)),
		     -EPROTONOSUPPORT, "another version");
	cr_assert_eq(try_restore(ctx, damaged_copy(img, "magic", 0, 1, -1)),
		     -EINVAL, "not an image");
	cr_assert_eq(try_restore(ctx, damaged_copy(img, "cut", 0, 0,
						   (off_t)h.checks_off)),
		     -EBADMSG, "truncated");
	cr_assert_eq(try_restore(ctx, damaged_copy(img, "tiny", 0, 0, 100)),
		     -EINVAL, "shorter than a header");
	cr_assert_eq(try_restore(ctx, path_of("missing")), -ENOENT);
	faultd_ctx_destroy(ctx);
}

/* A block whose data does not match its checksum: poisoned, not data. */
static void corrupt_child(void *arg)
{
	const char *img = arg;
	struct faultd_ctx *ctx;
	struct faultd_restore_opts o = { .size = sizeof(o),
					 .flags = FAULTD_RESTORE_LAZY };
	struct faultd_region *r;
	char *p;

	if (faultd_ctx_create(NULL, &ctx) || faultd_restore(ctx, img, &o, &r))
		_exit(3);
	p = faultd_region_base(r);
	/* Blocks 0 and 6 are fine; block 3's data (the 2nd data block)
	 * was damaged. */
	if (pattern_check(TAG, 0, p, BLOCK) ||
	    pattern_check(TAG, 6 * BLOCK, p + 6 * BLOCK, BLOCK))
		_exit(4);
	(void)*(volatile char *)(p + 3 * BLOCK + 4096 * 5);
	_exit(5);
}

Test(image, damaged_data_block_is_poisoned)
{
	size_t len = 30 * BLOCK;
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = sample_region(ctx, len, 0);
	const char *img = path_of("data"), *bad;
	struct img_header h;

	cr_assert_eq(faultd_checkpoint(r, img, NULL), 0);
	h = header_of(img);
	bad = damaged_copy(img, "data-bad", (off_t)(h.data_off + BLOCK + 77), 1,
			   -1);
	int how = run_in_child(corrupt_child, (void *)bad);

	cr_assert_eq(how, poison_signal(), "the child ended with %d", how);
	faultd_ctx_destroy(ctx);
}

Test(image, bad_arguments)
{
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = sample_region(ctx, 4 * BLOCK, 0);
	struct faultd_checkpoint_opts o = { .size = sizeof(o), .flags = 1u << 9 };
	struct faultd_restore_opts ro = { .size = sizeof(ro), .flags = 1u << 9 };
	struct faultd_region *x;

	cr_assert_eq(faultd_checkpoint(NULL, path_of("a"), NULL), -EINVAL);
	cr_assert_eq(faultd_checkpoint(r, NULL, NULL), -EINVAL);
	cr_assert_eq(faultd_checkpoint(r, path_of("a"), &o), -EINVAL);
	o.flags = FAULTD_CKPT_INCREMENTAL;
	o.parent = path_of("a");
	cr_assert_eq(faultd_checkpoint(r, path_of("b"), &o), -EOPNOTSUPP,
		     "incremental without write tracking");
	cr_assert_eq(faultd_checkpoint(r, "/nonexistent-dir/x", NULL), -ENOENT);
	cr_assert_eq(faultd_restore(ctx, path_of("a"), &ro, &x), -EINVAL);
	cr_assert_eq(faultd_restore(NULL, path_of("a"), NULL, &x), -EINVAL);
	cr_assert_eq(faultd_restore_wait(r), -EINVAL, "not a restored region");
	faultd_ctx_destroy(ctx);
}
