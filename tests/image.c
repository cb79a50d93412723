// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * image.c - checkpoint images and restoring from them in the process:
 * content byte for byte, zeros that take no space, incremental images,
 * every kind of damage refused or poisoned, never served; a checkpoint
 * written by an unprivileged user; hostile images refused with bounded
 * memory, and tables of any size read in bounded memory; authenticated
 * images (a key file), and every way of changing one without the key
 * caught.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <dirent.h>
#include <grp.h>
#include <setjmp.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "helpers.h"
#include "image-helpers.h"
#include "tmpdir.h"
#include "internal.h"

#define TAG 0x1a6e
#define BLOCK (64 * 1024ul)

static void setup(void)
{
	tmpdir_make("image");
}

static void teardown(void)
{
	tmpdir_remove();
}

TestSuite(image, .init = setup, .fini = teardown, .timeout = 120);

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

	cr_assert_eq(chmod(test_dir, 0755), 0);
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

/* ------------------------------------------------------------------------
 * Hostile images: refused with a clear error, in bounded memory
 */

/*
 * Table memory allowed to one image, and so the most VmHWM may grow by
 * while one is opened or read: the chunk cache (128 KiB), the scan buffer
 * (64 KiB), a bounce block, and what this thread's io_uring ring and
 * malloc take on first use. A reader that loads a table whole takes the
 * table's size instead: 2 GiB, 16 MiB below.
 */
#define TABLE_BOUND_KIB 2048

static int try_restore_key(struct faultd_ctx *ctx, const char *path,
			   const char *key)
{
	struct faultd_restore_opts o = { .size = sizeof(o),
					 .flags = FAULTD_RESTORE_LAZY,
					 .key_file = key };
	struct faultd_region *r;
	int ret = faultd_restore(ctx, path, &o, &r);

	if (!ret)
		faultd_region_destroy(r);
	return ret;
}

/* faultd_restore() of @path, and by how much VmHWM grew meanwhile. */
static int restore_peak(struct faultd_ctx *ctx, const char *path,
			long *grew_kib)
{
	long before;
	int ret;

	hwm_reset(0);
	before = proc_status_kib(0, "VmHWM");
	ret = try_restore(ctx, path);
	*grew_kib = proc_status_kib(0, "VmHWM") - before;
	return ret;
}

/*
 * A sparse file - 4 KiB on disk - whose header claims a 2 GiB extent
 * table, or a 64 MiB check table behind 1 TiB of data blocks, all inside
 * the file's length: refused at the first chunk that does not match its
 * check, without the table ever being in memory.
 */
Test(image, sparse_file_claiming_huge_tables_is_refused_in_bounded_memory)
{
	struct faultd_ctx *ctx = ctx_new();
	struct img_header ext = test_header(1ull << 45, 1ull << 26, 0, 0);
	struct img_header chk = test_header(1ull << 45, 0, 1ull << 24, 0);
	const char *p1 = path_of("huge-ext"), *p2 = path_of("huge-checks");
	long grew;
	struct stat st;

	header_file(p1, ext, test_end(&ext));
	header_file(p2, chk, test_end(&chk));
	cr_assert_eq(stat(p1, &st), 0);
	cr_assert_geq(st.st_size, 2ll << 30, "the file claims 2 GiB");
	cr_assert_leq(st.st_blocks * 512, 64 * 1024, "and is sparse");
	cr_assert_eq(restore_peak(ctx, p1, &grew), -EBADMSG);
	cr_assert_lt(grew, TABLE_BOUND_KIB, "VmHWM grew by %ld KiB", grew);
	cr_assert_eq(restore_peak(ctx, p2, &grew), -EBADMSG);
	cr_assert_lt(grew, TABLE_BOUND_KIB, "VmHWM grew by %ld KiB", grew);
	faultd_ctx_destroy(ctx);
}

/* Sizes whose products wrap, or that disagree: refused from the header
 * alone, before anything is allocated. */
Test(image, lengths_that_overflow_are_refused)
{
	struct faultd_ctx *ctx = ctx_new();
	struct img_header h[8];
	const char *p = path_of("wrap");
	long grew;

	h[0] = test_header(UINT64_MAX, 0, 0, 0); /* blocks would wrap */
	h[1] = test_header((1ull << 57) + 4096, 0, 0, 0);
	/* nr_extents * 32 wraps to 32: a v1 layout would read one extent */
	h[2] = test_header(1ull << 40, (1ull << 59) + 1, 0, 0);
	h[2].checks_off = h[2].extents_off + 32;
	/* nr_blocks * 64 KiB wraps to 64 KiB */
	h[3] = test_header(1ull << 40, 1, (1ull << 48) + 1, 0);
	h[3].extents_off = IMG_BLOCK + IMG_BLOCK;
	h[3].checks_off = h[3].extents_off + IMG_CHUNK;
	/* more data blocks than the region has */
	h[4] = test_header(16 * IMG_BLOCK, 0, 17, 0);
	/* tables where the layout does not put them */
	h[5] = test_header(16 * IMG_BLOCK, 2, 2, 0);
	h[5].extents_off += IMG_CHUNK;
	h[6] = test_header(16 * IMG_BLOCK, 2, 2, 0);
	h[6].checks_off -= IMG_CHUNK;
	h[7] = test_header(16 * IMG_BLOCK, 2, 2, 0);
	h[7].chunk_size = 2 * IMG_CHUNK;
	for (int i = 0; i < 8; i++) {
		header_file(p, h[i], 4 * IMG_BLOCK);
		cr_expect_eq(restore_peak(ctx, p, &grew), -EBADMSG,
			     "header %d", i);
		cr_expect_lt(grew, TABLE_BOUND_KIB, "header %d: VmHWM +%ld KiB",
			     i, grew);
	}
	faultd_ctx_destroy(ctx);
}

/* A header whose tables end past the end of the file. */
Test(image, tables_past_eof_are_refused)
{
	struct faultd_ctx *ctx = ctx_new();
	struct img_header h = test_header(1ull << 30, 1000, 10, 0);
	const char *p = path_of("past-eof");

	header_file(p, h, test_end(&h) - 1);
	cr_assert_eq(try_restore(ctx, p), -EBADMSG, "a byte short");
	header_file(p, h, h.checks_off);
	cr_assert_eq(try_restore(ctx, p), -EBADMSG, "no check table");
	header_file(p, h, h.extents_off + IMG_CHUNK);
	cr_assert_eq(try_restore(ctx, p), -EBADMSG, "half an extent table");
	header_file(p, h, test_end(&h));
	cr_assert_eq(try_restore(ctx, p), -EBADMSG,
		     "long enough, but holes for tables");
	faultd_ctx_destroy(ctx);
}

/*
 * A valid image of a 64 GiB region with a 16 MiB extent table: a zero
 * extent on every other block, every 4096th of them data. Read whole,
 * forwards and at random, every byte checked, while VmHWM stays within
 * the bound: the table is never in memory whole (big_extent(),
 * image-helpers.h).
 */

/* Region offset @off (a page) reads what big_extent() says, via @img. */
static void big_page_check(struct image *img, uint64_t off, char *buf)
{
	uint64_t b = off / IMG_BLOCK;
	bool data = b % 2 == 0 && (b / 2) % BIG_DATA_EVERY == 0;

	cr_assert_eq(image_read(img, off, buf, PAGE), (ssize_t)PAGE);
	if (data)
		cr_assert_eq(pattern_check(TAG, off, buf, PAGE), 0,
			     "data at %#llx", (unsigned long long)off);
	else
		cr_assert(buf[0] == 0 && !memcmp(buf, buf + 1, PAGE - 1),
			  "zeros at %#llx", (unsigned long long)off);
}

Test(image, big_table_is_read_in_bounded_memory, .timeout = 240)
{
	const char *p = path_of("big-table");
	uint64_t len = 2 * BIG_EXTENTS * IMG_BLOCK, x = 0x9e3779b97f4a7c15ull;
	char *buf = aligned_alloc(4096, MIB);
	struct img_header h;
	struct image *img;
	long before, grew;
	int fd;

	cr_assert(buf);
	test_image_write(p, len, BIG_EXTENTS, big_extent, NULL, TAG, NULL, &h);
	cr_assert_geq(h.checks_off - h.extents_off, 16 * MIB);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	cr_assert(fd >= 0);
	memset(buf, 0, MIB);
	hwm_reset(0);
	before = proc_status_kib(0, "VmHWM");
	cr_assert_eq(image_open(fd, p, NULL, &img, NULL), 0);
	close(fd);
	for (uint64_t off = 0; off < len; off += IMG_BLOCK)
		big_page_check(img, off, buf);
	for (int i = 0; i < 20000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		big_page_check(img, x % (len / PAGE) * PAGE, buf);
	}
	/* A read across many extents at once. */
	cr_assert_eq(image_read(img, 0, buf, MIB), (ssize_t)MIB);
	cr_assert_eq(pattern_check(TAG, 0, buf, IMG_BLOCK), 0);
	grew = proc_status_kib(0, "VmHWM") - before;
	assert_kib_bound(grew, TABLE_BOUND_KIB, "VmHWM grew by %ld KiB", grew);
	image_close(img);
	free(buf);
}

/* ------------------------------------------------------------------------
 * Authenticated images
 */

static struct faultd_region *restore_key(struct faultd_ctx *ctx,
					 const char *path, const char *key,
					 unsigned int flags)
{
	struct faultd_restore_opts o = { .size = sizeof(o), .flags = flags,
					 .key_file = key };
	struct faultd_region *r;

	cr_assert_eq(faultd_restore(ctx, path, &o, &r), 0);
	return r;
}

static int checkpoint_key_flags(struct faultd_region *r, const char *path,
				const char *key, const char *parent,
				unsigned int flags)
{
	struct faultd_checkpoint_opts o = { .size = sizeof(o),
					    .flags = flags,
					    .parent = parent,
					    .key_file = key };

	if (parent)
		o.flags |= FAULTD_CKPT_INCREMENTAL;
	return faultd_checkpoint(r, path, &o);
}

static int checkpoint_key(struct faultd_region *r, const char *path,
			  const char *key, const char *parent)
{
	return checkpoint_key_flags(r, path, key, parent, 0);
}

Test(image, authenticated_full_and_incremental_roundtrip)
{
	size_t len = 120 * BLOCK;
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = sample_region(ctx, len, FAULTD_REGION_WP), *x;
	const char *key = path_of("key"), *full = path_of("mfull");
	const char *inc = path_of("minc");
	struct img_header h;
	char *p = faultd_region_base(r);

	key_write(key, 0, 0600);
	cr_assert_eq(checkpoint_key(r, full, key, NULL), 0);
	h = header_of(full);
	cr_assert(h.flags & IMG_MAC);
	cr_assert_eq(h.version, 3);
	cr_assert_eq(h.mac_alg, IMG_ALG_GMAC_AES256, "GMAC is the default");
	x = restore_key(ctx, full, key, 0);
	cr_assert_eq(faultd_restore_wait(x), 0);
	cr_assert_eq(bad_blocks(faultd_region_base(x), len), 0);
	faultd_region_destroy(x);
	memset(p + 5 * BLOCK + 100, 0x42, 10);
	pattern_fill(TAG + 1, 8 * BLOCK, p + 8 * BLOCK, BLOCK);
	cr_assert_eq(checkpoint_key(r, inc, key, full), 0);
	x = restore_key(ctx, inc, key, 0);
	cr_assert_eq(faultd_restore_wait(x), 0);
	cr_assert_eq(memcmp(p, faultd_region_base(x), len), 0);
	faultd_ctx_destroy(ctx);
}

Test(image, authentication_refusals)
{
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = sample_region(ctx, 30 * BLOCK,
						FAULTD_REGION_WP);
	const char *key = path_of("k"), *other = path_of("k2");
	const char *open_key = path_of("k-0644"), *short_key = path_of("k31");
	const char *mac = path_of("mac"), *crc = path_of("crc");
	int fd;

	key_write(key, 0, 0600);
	key_write(other, 0, 0400);
	key_write(open_key, 0, 0644);
	fd = open(short_key, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	cr_assert_eq(write(fd, "0123456789012345678901234567890", 31), 31);
	close(fd);
	cr_assert_eq(checkpoint_key(r, mac, key, NULL), 0);
	cr_assert_eq(checkpoint_key(r, crc, NULL, NULL), 0);
	cr_assert_eq(try_restore_key(ctx, mac, key), 0);
	cr_assert_eq(try_restore_key(ctx, mac, NULL), -ENOKEY,
		     "an authenticated image without its key");
	cr_assert_eq(try_restore_key(ctx, mac, other), -EKEYREJECTED,
		     "another key");
	cr_assert_eq(try_restore_key(ctx, crc, key), -EKEYREJECTED,
		     "a key, and an image without MACs");
	cr_assert_eq(try_restore_key(ctx, mac, open_key), -EPERM);
	cr_assert_eq(try_restore_key(ctx, mac, short_key), -EINVAL);
	cr_assert_eq(try_restore_key(ctx, mac, test_dir), -EINVAL,
		     "a directory");
	cr_assert_eq(try_restore_key(ctx, mac, path_of("no-key")), -ENOENT);
	cr_assert_eq(checkpoint_key(r, path_of("x"), open_key, NULL), -EPERM);
	cr_assert_eq(checkpoint_key(r, path_of("x"), key, crc), -EKEYREJECTED,
		     "authenticated on top of a parent without MACs");
	cr_assert_eq(checkpoint_key(r, path_of("x"), NULL, mac), -ENOKEY,
		     "a parent with MACs, and no key");
	faultd_ctx_destroy(ctx);
}

/* Block 3 (the second data block) of an image of sample_region(30 blocks)
 * must be poisoned, blocks 0 and 6 intact: exits by the poison signal. */
struct tamper {
	const char *img, *key;
};

static void tampered_child(void *arg)
{
	const struct tamper *t = arg;
	struct faultd_ctx *ctx;
	struct faultd_restore_opts o = { .size = sizeof(o),
					 .flags = FAULTD_RESTORE_LAZY,
					 .key_file = t->key };
	struct faultd_region *r;
	char *p;

	if (faultd_ctx_create(NULL, &ctx) || faultd_restore(ctx, t->img, &o, &r))
		_exit(3);
	p = faultd_region_base(r);
	if (pattern_check(TAG, 0, p, BLOCK) ||
	    pattern_check(TAG, 6 * BLOCK, p + 6 * BLOCK, BLOCK))
		_exit(4);
	(void)*(volatile char *)(p + 3 * BLOCK + 4096 * 5);
	_exit(5);
}

static void expect_poisoned(const char *img, const char *key,
			    const char *what)
{
	struct tamper t = { img, key };
	int how = run_in_child(tampered_child, &t);

	cr_assert_eq(how, poison_signal(), "%s: the child ended with %d", what,
		     how);
}

/* Seal check chunk 0 of the image @h at @fd again, from @chunk: with
 * @key (NULL: a CRC32C, as one without a key can in an image of them). */
static void check_chunk_reseal(int fd, const struct img_header *h,
			       const struct img_key *key, char *chunk)
{
	struct img_checker *chk;

	cr_assert_eq(img_checker_new(h, key, &chk), 0);
	memset(chunk + IMG_CHUNK - IMG_TRAILER, 0, IMG_TRAILER);
	test_chunk_put(fd, chk, IMG_L_CHECKS, h->checks_off, 0, chunk);
	img_checker_free(chk);
}

/*
 * Swap data blocks @a and @b of the image at @path, and their checks (in
 * the first check chunk); with @reseal, seal that chunk again (with @key,
 * NULL: a CRC32C).
 */
static void blocks_swap(const char *path, uint64_t a, uint64_t b, bool reseal,
			const struct img_key *key)
{
	struct img_header h = header_of(path);
	size_t cs = img_check_size_of(&h);
	char *x = malloc(IMG_BLOCK), *y = malloc(IMG_BLOCK);
	char *chunk = malloc(IMG_CHUNK), tmp[32];
	int fd = open(path, O_RDWR | O_CLOEXEC);

	cr_assert(fd >= 0 && x && y && chunk);
	cr_assert_eq(pread(fd, x, IMG_BLOCK, (off_t)(h.data_off + a * IMG_BLOCK)),
		     (ssize_t)IMG_BLOCK);
	cr_assert_eq(pread(fd, y, IMG_BLOCK, (off_t)(h.data_off + b * IMG_BLOCK)),
		     (ssize_t)IMG_BLOCK);
	cr_assert_eq(pwrite(fd, y, IMG_BLOCK, (off_t)(h.data_off + a * IMG_BLOCK)),
		     (ssize_t)IMG_BLOCK);
	cr_assert_eq(pwrite(fd, x, IMG_BLOCK, (off_t)(h.data_off + b * IMG_BLOCK)),
		     (ssize_t)IMG_BLOCK);
	cr_assert_eq(pread(fd, chunk, IMG_CHUNK, (off_t)h.checks_off),
		     (ssize_t)IMG_CHUNK);
	memcpy(tmp, chunk + a * cs, cs);
	memcpy(chunk + a * cs, chunk + b * cs, cs);
	memcpy(chunk + b * cs, tmp, cs);
	if (reseal) {
		check_chunk_reseal(fd, &h, key, chunk);
	} else {
		cr_assert_eq(pwrite(fd, chunk, IMG_CHUNK, (off_t)h.checks_off),
			     (ssize_t)IMG_CHUNK);
	}
	close(fd);
	free(chunk);
	free(x);
	free(y);
}

/*
 * Changes made without the key: a data byte flipped, a header field
 * changed (its CRC32C made to match), two data blocks swapped with their
 * checks, an extent changed, the whole image re-signed with CRC32Cs. With
 * the key each is poisoned or refused; the re-signed image is served only
 * to a reader without a key - with the change in it, which is why a key
 * is the only way to know.
 */
Test(image, changes_without_the_key_are_caught)
{
	size_t len = 30 * BLOCK;
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = sample_region(ctx, len, 0), *x;
	const char *key = path_of("tk"), *img = path_of("timg"), *t;
	struct img_header h;
	char *q;

	key_write(key, 0, 0600);
	cr_assert_eq(checkpoint_key(r, img, key, NULL), 0);
	h = header_of(img);
	expect_poisoned(damaged_copy(img, "flip", (off_t)(h.data_off + BLOCK + 77),
				     1, -1), key, "a flipped data byte");
	t = damaged_copy(img, "header", 0, 0, -1);
	h.base_addr ^= 4096;
	header_reseal(t, h);
	h.base_addr ^= 4096;
	cr_assert_eq(try_restore_key(ctx, t, key), -EKEYREJECTED,
		     "a header changed, its CRC32C made to match");
	t = damaged_copy(img, "swap", 0, 0, -1);
	blocks_swap(t, 1, 4, false, NULL);
	cr_assert_eq(try_restore_key(ctx, t, key), -EBADMSG,
		     "two blocks swapped with their MACs: the chunk's MAC");
	cr_assert_eq(try_restore_key(ctx, damaged_copy(img, "ext",
						       (off_t)h.extents_off + 24,
						       1, -1), key),
		     -EBADMSG, "an extent's kind changed");
	t = damaged_copy(img, "resigned", (off_t)(h.data_off + BLOCK + 77), 1,
			 -1);
	image_resign_crc(t);
	cr_assert_eq(try_restore_key(ctx, t, key), -EKEYREJECTED,
		     "re-signed with CRC32Cs");
	x = restore_key(ctx, t, NULL, FAULTD_RESTORE_LAZY);
	q = faultd_region_base(x);
	cr_assert_eq(pattern_check(TAG, 3 * BLOCK, q + 3 * BLOCK, BLOCK), 1,
		     "without a key, the change is served");
	faultd_ctx_destroy(ctx);
}

/*
 * The same swap in an image of CRC32Cs, its check chunk sealed again: an
 * accident of that shape (a block written at another block's place, its
 * CRC with it) is caught, since each check names its block.
 */
Test(image, crc_checks_are_bound_to_their_block)
{
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = sample_region(ctx, 30 * BLOCK, 0);
	const char *img = path_of("cswap");

	cr_assert_eq(faultd_checkpoint(r, img, NULL), 0);
	blocks_swap(img, 1, 4, true, NULL);
	expect_poisoned(img, NULL, "two blocks swapped with their CRCs");
	faultd_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------
 * The MACs themselves: what they are, what they are bound to, which one
 */

/* NIST CAVP gcmEncryptExtIV256.rsp, [PTlen = 0] [AADlen = 128], Count 0. */
static const uint8_t nist_key[32] = {
	0x78, 0xdc, 0x4e, 0x0a, 0xaf, 0x52, 0xd9, 0x35, 0xc3, 0xc0, 0x1e,
	0xea, 0x57, 0x42, 0x8f, 0x00, 0xca, 0x1f, 0xd4, 0x75, 0xf5, 0xda,
	0x86, 0xa4, 0x9c, 0x8d, 0xd7, 0x3d, 0x68, 0xc8, 0xe2, 0x23,
};
static const uint8_t nist_iv[12] = { 0xd7, 0x9c, 0xf2, 0x2d, 0x50, 0x4c,
				     0xc7, 0x93, 0xc3, 0xfb, 0x6c, 0x8a };
static const uint8_t nist_aad[16] = { 0xb9, 0x6b, 0xaa, 0x8c, 0x1c, 0x75,
				      0xa6, 0x71, 0xbf, 0xb2, 0xd0, 0x8d,
				      0x06, 0xbe, 0x5f, 0x36 };
static const uint8_t nist_tag[16] = { 0x3e, 0x5d, 0x48, 0x6a, 0xa2, 0xe3,
				      0x0b, 0x22, 0xe0, 0x40, 0xb8, 0x57,
				      0x23, 0xa0, 0x6e, 0x76 };

/*
 * The tags of data block 7, 64 bytes 0, 1, ... 63, of the image whose id is
 * 0, 1, ... 15, with the user key of 32 bytes 0x5a, as faultd-image(5)
 * defines them: computed apart from libfaultd, by Python's hmac and the
 * AESGCM of its cryptography package.
 */
static const uint8_t kat_gmac[16] = { 0x12, 0x6f, 0x75, 0x78, 0x6a, 0x48,
				      0x35, 0xde, 0x2e, 0x92, 0x2d, 0x8f,
				      0x38, 0x2f, 0x23, 0x11 };
static const uint8_t kat_hmac[32] = {
	0x5f, 0x03, 0x09, 0x29, 0x58, 0xf3, 0xa3, 0x37, 0x8c, 0x31, 0x40,
	0xa4, 0x7e, 0xba, 0x17, 0xfb, 0xa4, 0xe3, 0x5a, 0x79, 0x93, 0xd2,
	0xc9, 0x42, 0x52, 0x8b, 0x28, 0xca, 0x25, 0xe0, 0x81, 0x8c,
};

static struct img_checker *checker_new(uint32_t alg, const uint8_t *id,
				       const struct img_key *key)
{
	struct img_header h = { .flags = IMG_MAC, .mac_alg = alg };
	struct img_checker *c;

	memcpy(h.id, id, sizeof(h.id));
	cr_assert_eq(img_checker_new(&h, key, &c), 0);
	return c;
}

Test(image, macs_are_the_ones_the_format_defines)
{
	struct img_key k = { .image_key = true };
	uint8_t id[16], data[64], tag[IMG_CHECK_MAX];
	struct img_checker *c;
	uint32_t label;
	uint64_t index;

	/* GMAC is AES-256-GCM's tag of the bytes as additional data; its
	 * nonce is the label's 4 bytes, then the index's 8. */
	memcpy(k.key, nist_key, sizeof(k.key));
	memcpy(&label, nist_iv, sizeof(label));
	memcpy(&index, nist_iv + sizeof(label), sizeof(index));
	memset(id, 0, sizeof(id));
	c = checker_new(IMG_ALG_GMAC_AES256, id, &k);
	cr_assert_eq(img_check_size(c), 16);
	cr_assert_eq(img_check(c, (enum img_label)label, index, nist_aad,
			       sizeof(nist_aad), tag), 0);
	cr_assert_arr_eq(tag, nist_tag, sizeof(nist_tag));
	img_checker_free(c);
	/* From the user key: the image key derived, then the tag. */
	memset(k.key, 0x5a, sizeof(k.key));
	k.image_key = false;
	for (unsigned int i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)i;
	memcpy(id, data, sizeof(id));
	c = checker_new(IMG_ALG_GMAC_AES256, id, &k);
	cr_assert_eq(img_check(c, IMG_L_DATA, 7, data, sizeof(data), tag), 0);
	cr_assert_arr_eq(tag, kat_gmac, sizeof(kat_gmac));
	img_checker_free(c);
	c = checker_new(IMG_ALG_HMAC_SHA256, id, &k);
	cr_assert_eq(img_check_size(c), 32);
	cr_assert_eq(img_check(c, IMG_L_DATA, 7, data, sizeof(data), tag), 0);
	cr_assert_arr_eq(tag, kat_hmac, sizeof(kat_hmac), "version 2's HMAC");
	img_checker_free(c);
}

/*
 * A tag verifies only what it was made for: the same label and index of
 * the same image (its key). GMAC binds them as its nonce, HMAC hashes
 * them first; and the two MACs of one image do not share a key.
 */
Test(image, mac_tags_are_bound_to_label_index_and_image)
{
	static const enum img_label other[] = { IMG_L_HEADER, IMG_L_EXTENTS,
						IMG_L_CHECKS };
	static const uint32_t algs[] = { IMG_ALG_GMAC_AES256,
					 IMG_ALG_HMAC_SHA256 };
	struct img_key user = { .image_key = false }, ka, kb;
	uint8_t id_a[16], id_b[16], tag[IMG_CHECK_MAX];
	char *block = malloc(IMG_BLOCK);

	cr_assert(block);
	pattern_fill(TAG, 0, block, IMG_BLOCK);
	cr_assert_eq(getrandom(user.key, sizeof(user.key), 0), 32);
	cr_assert_eq(getrandom(id_a, sizeof(id_a), 0), 16);
	memcpy(id_b, id_a, sizeof(id_b));
	id_b[15] ^= 1;
	for (unsigned int i = 0; i < 2; i++) {
		struct img_checker *a = checker_new(algs[i], id_a, &user);
		struct img_checker *b = checker_new(algs[i], id_b, &user);

		cr_assert_eq(img_check(a, IMG_L_DATA, 5, block, IMG_BLOCK, tag),
			     0);
		cr_assert_eq(img_check_verify(a, IMG_L_DATA, 5, block,
					      IMG_BLOCK, tag), 0);
		cr_assert_eq(img_check_verify(a, IMG_L_DATA, 6, block,
					      IMG_BLOCK, tag), -EBADMSG,
			     "alg %u: another index", algs[i]);
		cr_assert_eq(img_check_verify(a, IMG_L_DATA, 5 | 1ull << 40,
					      block, IMG_BLOCK, tag), -EBADMSG,
			     "alg %u: an index's high bits", algs[i]);
		for (unsigned int l = 0; l < 3; l++)
			cr_assert_eq(img_check_verify(a, other[l], 5, block,
						      IMG_BLOCK, tag),
				     -EBADMSG, "alg %u: label %d", algs[i],
				     other[l]);
		cr_assert_eq(img_check_verify(b, IMG_L_DATA, 5, block,
					      IMG_BLOCK, tag), -EBADMSG,
			     "alg %u: another image", algs[i]);
		img_checker_key(a, i ? &kb : &ka);
		img_checker_free(a);
		img_checker_free(b);
	}
	cr_assert(memcmp(ka.key, kb.key, sizeof(ka.key)),
		  "GMAC's and HMAC's keys of one image differ");
	free(block);
}

/*
 * The same, in images: a data block and its tag moved to another block's
 * place, or the tag of the same block of another image under the same
 * key, each put in with the check chunk sealed again with the image's
 * own key (what only a holder of the key can do; without it the chunk's
 * MAC catches the change first) - the block is still poisoned.
 */
Test(image, moved_or_foreign_tags_are_poisoned)
{
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = sample_region(ctx, 30 * BLOCK, 0);
	const char *key = path_of("bk"), *a = path_of("ba"), *b = path_of("bb");
	const char *t;
	struct img_key user;
	struct img_header ha, hb;
	char *ca = malloc(IMG_CHUNK), *cb = malloc(IMG_CHUNK);
	size_t cs;
	int fd;

	key_write(key, 0, 0600);
	user = key_read(key);
	cr_assert_eq(checkpoint_key(r, a, key, NULL), 0);
	cr_assert_eq(checkpoint_key(r, b, key, NULL), 0);
	t = damaged_copy(a, "moved", 0, 0, -1);
	blocks_swap(t, 1, 4, true, &user);
	expect_poisoned(t, key, "a block and its tag moved, resealed");
	/* Same content, same key, another image: data block 1's tag of b. */
	ha = header_of(a);
	hb = header_of(b);
	cs = img_check_size_of(&ha);
	cr_assert(ca && cb && cs == 16);
	fd = open(b, O_RDONLY | O_CLOEXEC);
	cr_assert_eq(pread(fd, cb, IMG_CHUNK, (off_t)hb.checks_off), IMG_CHUNK);
	close(fd);
	t = damaged_copy(a, "foreign", 0, 0, -1);
	fd = open(t, O_RDWR | O_CLOEXEC);
	cr_assert_eq(pread(fd, ca, IMG_CHUNK, (off_t)ha.checks_off), IMG_CHUNK);
	cr_assert(memcmp(ca + cs, cb + cs, cs), "the images' tags differ");
	memcpy(ca + cs, cb + cs, cs);
	check_chunk_reseal(fd, &ha, &user, ca);
	close(fd);
	expect_poisoned(t, key, "another image's tag of the same block");
	cr_assert_eq(run_in_child(tampered_child, &(struct tamper){ a, key }),
		     -6, "the image itself serves block 3 (exit 5)");
	free(ca);
	free(cb);
	faultd_ctx_destroy(ctx);
}

/* Write header @h at @path with its MAC (under @key) and its CRC sealed
 * again: a change only a holder of the key can make. */
static void header_resign(const char *path, struct img_header h,
			  const struct img_key *key)
{
	struct img_checker *chk;
	int fd = open(path, O_WRONLY | O_CLOEXEC);

	cr_assert(fd >= 0);
	cr_assert_eq(img_checker_new(&h, key, &chk), 0);
	test_header_seal(&h, chk);
	cr_assert_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	img_checker_free(chk);
	close(fd);
}

/* A copy of @img named @name whose header is @h, its CRC32C made to
 * match (its MAC left as it was). */
static const char *header_changed(const char *img, const char *name,
				  struct img_header h)
{
	const char *t = damaged_copy(img, name, 0, 0, -1);

	header_reseal(t, h);
	return t;
}

static void restored_right(struct faultd_ctx *ctx, const char *img,
			   const char *key, size_t len)
{
	struct faultd_region *x = restore_key(ctx, img, key, 0);

	cr_assert_eq(faultd_restore_wait(x), 0);
	cr_assert_eq(bad_blocks(faultd_region_base(x), len), 0, "%s", img);
	faultd_region_destroy(x);
}

/*
 * The header's mac_alg: HMAC-SHA256 written on request and read, in
 * version 3 and in version 2 (libfaultd's images before GMAC); covered by
 * the header's MAC; an unknown one refused as such, a malformed one as
 * damage; and the bytes after a tag are zeros.
 */
Test(image, the_mac_algorithm_is_read_and_authenticated)
{
	size_t len = 30 * BLOCK;
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = sample_region(ctx, len, 0);
	const char *key = path_of("ak"), *hm = path_of("ahmac");
	const char *gm = path_of("agmac"), *crc = path_of("acrc");
	struct img_key user;
	struct img_header h;
	off_t at;

	key_write(key, 0, 0600);
	user = key_read(key);
	cr_assert_eq(checkpoint_key_flags(r, path_of("ax"), NULL, NULL,
					  FAULTD_CKPT_HMAC),
		     -EINVAL, "HMAC without a key");
	cr_assert_eq(checkpoint_key_flags(r, hm, key, NULL, FAULTD_CKPT_HMAC),
		     0);
	cr_assert_eq(checkpoint_key(r, gm, key, NULL), 0);
	cr_assert_eq(faultd_checkpoint(r, crc, NULL), 0);
	h = header_of(hm);
	cr_assert_eq(h.mac_alg, IMG_ALG_HMAC_SHA256);
	cr_assert_eq(img_check_size_of(&h), 32);
	restored_right(ctx, hm, key, len);
	h.version = 2;
	header_resign(damaged_copy(hm, "av2", 0, 0, -1), h, &user);
	restored_right(ctx, path_of("av2"), key, len);

	h = header_of(gm);
	cr_assert_eq(img_check_size_of(&h), 16);
	h.mac_alg = IMG_ALG_HMAC_SHA256;
	cr_assert_eq(try_restore_key(ctx, header_changed(gm, "a-hmac", h), key),
		     -EKEYREJECTED, "GMAC's image said to be HMAC's");
	h.mac_alg = 7;
	cr_assert_eq(try_restore_key(ctx, header_changed(gm, "a-alg7", h), key),
		     -EPROTONOSUPPORT, "an unknown MAC");
	h = header_of(gm);
	h.version = 2;
	cr_assert_eq(try_restore_key(ctx, header_changed(gm, "a-v2gmac", h),
				     key),
		     -EBADMSG, "version 2 with GMAC");
	h = header_of(gm);
	h.header_mac[20] = 1;
	cr_assert_eq(try_restore_key(ctx, header_changed(gm, "a-hmac20", h),
				     key),
		     -EBADMSG, "a byte after the header's tag");
	h = header_of(gm);
	at = (off_t)(h.extents_off + IMG_CHUNK - IMG_TRAILER + 20);
	cr_assert_eq(try_restore_key(ctx, damaged_copy(gm, "a-trailer", at, 1,
						       -1),
				     key),
		     -EBADMSG, "a byte after a chunk's tag");
	h = header_of(crc);
	h.mac_alg = IMG_ALG_GMAC_AES256;
	cr_assert_eq(try_restore_key(ctx, header_changed(crc, "a-crcalg", h),
				     NULL),
		     -EBADMSG, "a MAC algorithm without IMG_MAC");
	h = header_of(crc);
	h.header_mac[0] = 1;
	cr_assert_eq(try_restore_key(ctx, header_changed(crc, "a-crcmac", h),
				     NULL),
		     -EBADMSG, "a header MAC without IMG_MAC");
	cr_assert_eq(try_restore_key(ctx, crc, NULL), 0);
	faultd_ctx_destroy(ctx);
}

/*
 * A block that fails its MAC is reported as one that fails its CRC32C:
 * the same poison (SIGBUS, caught here) and the same counters.
 */
struct counted {
	const char *img, *key;
	int pipe;
};

static sigjmp_buf bus_jmp;

static void bus_handler(int sig)
{
	(void)sig;
	siglongjmp(bus_jmp, 1);
}

static void counted_child(void *arg)
{
	const struct counted *c = arg;
	struct faultd_restore_opts o = { .size = sizeof(o),
					 .flags = FAULTD_RESTORE_LAZY,
					 .key_file = c->key };
	struct faultd_stats s = { .size = sizeof(s) };
	struct sigaction sa = { .sa_handler = bus_handler };
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	volatile char *p;
	uint64_t out[3] = { 0 };

	if (faultd_ctx_create(NULL, &ctx) || faultd_restore(ctx, c->img, &o, &r))
		_exit(3);
	p = faultd_region_base(r);
	sigaction(SIGBUS, &sa, NULL);
	if (!sigsetjmp(bus_jmp, 1))
		(void)p[3 * BLOCK + 4096 * 5];
	else
		out[0] = 1; /* the access got SIGBUS */
	faultd_region_stats(r, &s);
	out[1] = s.poisoned;
	out[2] = s.pager_errors;
	_exit(write(c->pipe, out, sizeof(out)) == sizeof(out) ? 0 : 6);
}

static void damaged_counts(const char *img, const char *key, uint64_t *out)
{
	int fds[2];
	struct counted c = { img, key };

	cr_assert_eq(pipe(fds), 0);
	c.pipe = fds[1];
	cr_assert_eq(run_in_child(counted_child, &c), -1);
	close(fds[1]);
	cr_assert_eq(read(fds[0], out, 3 * sizeof(*out)),
		     (ssize_t)(3 * sizeof(*out)));
	close(fds[0]);
}

Test(image, mac_failure_is_reported_as_a_crc_failure)
{
	size_t len = 30 * BLOCK;
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = sample_region(ctx, len, 0);
	const char *key = path_of("rk"), *mac = path_of("rmac");
	const char *crc = path_of("rcrc");
	uint64_t m[3], c[3];
	struct img_header hm, hc;

	key_write(key, 0, 0600);
	cr_assert_eq(checkpoint_key(r, mac, key, NULL), 0);
	cr_assert_eq(checkpoint_key(r, crc, NULL, NULL), 0);
	hm = header_of(mac);
	hc = header_of(crc);
	damaged_counts(damaged_copy(mac, "rmac-bad",
				    (off_t)(hm.data_off + BLOCK + 77), 1, -1),
		       key, m);
	damaged_counts(damaged_copy(crc, "rcrc-bad",
				    (off_t)(hc.data_off + BLOCK + 77), 1, -1),
		       NULL, c);
	cr_assert_eq(c[0], 1, "the CRC failure's access got SIGBUS");
	cr_assert_gt(c[1], 0);
	cr_assert_gt(c[2], 0);
	cr_assert_eq(m[0], 1, "the MAC failure's access got SIGBUS");
	cr_assert_eq(m[1], c[1], "poisoned: MAC %llu, CRC %llu",
		     (unsigned long long)m[1], (unsigned long long)c[1]);
	cr_assert_eq(m[2], c[2], "pager errors: MAC %llu, CRC %llu",
		     (unsigned long long)m[2], (unsigned long long)c[2]);
	faultd_ctx_destroy(ctx);
}
