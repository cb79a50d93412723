// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * image.c - checkpoint images and restoring from them in the process:
 * content byte for byte, zeros that take no space, incremental images,
 * and every kind of damage refused or poisoned, never served; a
 * checkpoint written by an unprivileged user.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <dirent.h>
#include <grp.h>
#include <sys/resource.h>
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
	cr_assert_eq(try_restore(ctx, damaged_copy(img, "crc", (off_t)h.crcs_off, 1, -1)),
		     -EBADMSG, "a flipped byte in the CRC table");
	cr_assert_eq(try_restore(ctx, damaged_copy(img, "hdr", 40, 1, -1)),
		     -EBADMSG, "a flipped byte in the header");
	cr_assert_eq(try_restore(ctx, damaged_copy(img, "ver", 8, 1, -1)),
		     -EPROTONOSUPPORT, "another version");
	cr_assert_eq(try_restore(ctx, damaged_copy(img, "magic", 0, 1, -1)),
		     -EINVAL, "not an image");
	cr_assert_eq(try_restore(ctx, damaged_copy(img, "cut", 0, 0,
						   (off_t)h.crcs_off)),
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

/* ------------------------------------------------------------------------
 * Unprivileged checkpoints
 */

#define NOBODY 65534

/* What an unprivileged child reports in its exit status. */
enum {
	CHILD_OK,
	CHILD_SKIP = 77,	/* no userfaultfd of any kind */
	CHILD_SETUP = 90,	/* a context or region could not be made */
	CHILD_CONTENT = 91,	/* the restored content is wrong */
	CHILD_PRIVILEGED = 92,	/* root could not be dropped */
	CHILD_CKPT = 100,	/* + the checkpoint's errno */
};

/* Give up root for good: groups, gid, uid; no capability is left. */
static bool drop_root(void)
{
	return !setgroups(0, NULL) && !setresgid(NOBODY, NOBODY, NOBODY) &&
	       !setresuid(NOBODY, NOBODY, NOBODY) && geteuid() == NOBODY;
}

/* Checkpoint @r to @img, restore it and compare with the region. */
static int roundtrip_as_user(struct faultd_ctx *ctx, struct faultd_region *r,
			     const char *img)
{
	struct faultd_restore_opts o = { .size = sizeof(o) };
	size_t len = faultd_region_size(r);
	struct faultd_region *x;
	int ret = faultd_checkpoint(r, img, NULL);

	if (ret < 0)
		return CHILD_CKPT + (-ret & 0x7f);
	if (faultd_restore(ctx, img, &o, &x) || faultd_restore_wait(x))
		return CHILD_SETUP;
	return memcmp(faultd_region_base(r), faultd_region_base(x), len)
		       ? CHILD_CONTENT
		       : CHILD_OK;
}

/*
 * Two regions whose blocks each hold a filled page with non-zero bytes
 * followed by pages never touched: a pager region (every page has
 * content) and a zero-fill region where only the first page of each
 * block was written.
 */
static void unprivileged_child(void *arg)
{
	const char *sub = arg;
	struct faultd_pager pp = pattern_pager(TAG, FAULTD_PAGER_CONCURRENT);
	struct faultd_region_opts o = { .size = sizeof(o), .length = 16 * BLOCK,
					.pager = &pp };
	struct faultd_region *pr, *zr;
	struct faultd_ctx *ctx;
	char img[256];
	char *z;
	int ret;

	if (!drop_root())
		_exit(CHILD_PRIVILEGED);
	if (probe_have() == 0)
		_exit(CHILD_SKIP);
	if (faultd_ctx_create(NULL, &ctx) || faultd_region_create(ctx, &o, &pr))
		_exit(CHILD_SETUP);
	(void)*(volatile char *)faultd_region_base(pr);
	o.pager = NULL;
	if (faultd_region_create(ctx, &o, &zr))
		_exit(CHILD_SETUP);
	z = faultd_region_base(zr);
	for (size_t b = 0; b < 16; b++)
		z[b * BLOCK + 100] = (char)(b + 1);
	snprintf(img, sizeof(img), "%s/pager", sub);
	ret = roundtrip_as_user(ctx, pr, img);
	if (ret == CHILD_OK) {
		snprintf(img, sizeof(img), "%s/zero", sub);
		ret = roundtrip_as_user(ctx, zr, img);
	}
	_exit(ret);
}

Test(image, unprivileged_checkpoint_of_missing_pages)
{
	const char *sub = path_of("nobody");
	int how;

	cr_assert_eq(chmod(dir, 0755), 0);
	cr_assert_eq(mkdir(sub, 0700), 0);
	cr_assert_eq(chown(sub, NOBODY, NOBODY), 0);
	how = run_in_child(unprivileged_child, (void *)sub);
	if (how == -(CHILD_SKIP + 1))
		cr_skip_test("no userfaultfd for an unprivileged user here");
	cr_assert_eq(how, -(CHILD_OK + 1),
		     "the unprivileged child ended with %d (exit status %d; "
		     "%d + errno: the checkpoint failed)",
		     how, -how - 1, CHILD_CKPT);
	cr_assert_eq(access(path_of("nobody/zero"), F_OK), 0);
}

/* ------------------------------------------------------------------------
 * Failed checkpoints leave nothing behind
 */

/* The number of entries of directory @d besides "." and "..". */
static int entries_of(const char *d)
{
	DIR *dp = opendir(d);
	struct dirent *e;
	int n = 0;

	cr_assert(dp, "opendir %s: %s", d, strerror(errno));
	while ((e = readdir(dp)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(dp);
	return n;
}

/*
 * A parent that is a FIFO (no writer will ever come), missing, or not an
 * image: the incremental checkpoint fails at once with the error of
 * opening it, and makes no file. This test's timeout is short: a
 * checkpoint that opened the FIFO for reading would wait for a writer.
 */
Test(image, bad_parent_fails_at_once_and_leaves_nothing, .timeout = 20)
{
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = sample_region(ctx, 8 * BLOCK,
						FAULTD_REGION_WP);
	const char *sub = path_of("badparent");
	char fifo[256], notimg[256], missing[256], img[256];
	struct faultd_checkpoint_opts o = { .size = sizeof(o),
					    .flags = FAULTD_CKPT_INCREMENTAL,
					    .parent = fifo };

	cr_assert_eq(mkdir(sub, 0700), 0);
	snprintf(fifo, sizeof(fifo), "%s/fifo", sub);
	snprintf(notimg, sizeof(notimg), "%s/notimg", sub);
	snprintf(missing, sizeof(missing), "%s/missing", sub);
	snprintf(img, sizeof(img), "%s/inc", sub);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	cr_assert_eq(faultd_checkpoint(r, img, &o), -EINVAL, "FIFO parent");
	o.parent = missing;
	cr_assert_eq(faultd_checkpoint(r, img, &o), -ENOENT, "no parent");
	cr_assert_eq(close(open(notimg, O_CREAT | O_WRONLY, 0600)), 0);
	o.parent = notimg;
	cr_assert_eq(faultd_checkpoint(r, img, &o), -EINVAL, "empty parent");
	cr_assert_eq(entries_of(sub), 2, "only the FIFO and the empty file");
	faultd_ctx_destroy(ctx);
}

/* Checkpoint @arg's region with files limited to 256 KiB: EFBIG. */
static void fsize_limited_child(void *arg)
{
	const char *img = arg;
	struct rlimit rl = { .rlim_cur = 4 * BLOCK, .rlim_max = 4 * BLOCK };
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	struct faultd_region_opts o = { .size = sizeof(o),
					.length = 32 * BLOCK };
	int ret;

	signal(SIGXFSZ, SIG_IGN);
	if (faultd_ctx_create(NULL, &ctx) || faultd_region_create(ctx, &o, &r))
		_exit(CHILD_SETUP);
	pattern_fill(TAG, 0, faultd_region_base(r), 32 * BLOCK);
	if (setrlimit(RLIMIT_FSIZE, &rl))
		_exit(CHILD_SETUP);
	ret = faultd_checkpoint(r, img, NULL);
	_exit(ret < 0 ? CHILD_CKPT + (-ret & 0x7f) : CHILD_OK);
}

/* A checkpoint that fails while it writes its data removes its file. */
Test(image, failed_write_leaves_nothing)
{
	const char *sub = path_of("efbig");
	char img[256];
	int how;

	cr_assert_eq(mkdir(sub, 0700), 0);
	snprintf(img, sizeof(img), "%s/full", sub);
	how = run_in_child(fsize_limited_child, img);
	cr_assert_eq(how, -(CHILD_CKPT + EFBIG + 1),
		     "the child ended with %d, not EFBIG", how);
	cr_assert_eq(entries_of(sub), 0, "the temporary file is gone");
}
