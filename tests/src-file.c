// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * src-file.c - suite "unit": the file source (daemon/src_file.h) over
 * sparse files made here, on the file system of /var/tmp and on tmpfs:
 * its extents against the layout written, its reads against pread(),
 * from several threads at once, and its refusals.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "file.h"

#define PAGE 4096ul
#define HUGE (2ul << 20)
#define MIB (1ul << 20)

static char path[64];
static char why[192];

static void mkfile(const char *dir)
{
	int fd;

	snprintf(path, sizeof(path), "%s/src-file-XXXXXX", dir);
	fd = mkstemp(path);
	cr_assert_geq(fd, 0, "mkstemp %s: %s", path, strerror(errno));
	close(fd);
}

static void rmfile(void)
{
	unlink(path);
}

/* Byte @i of the data: never zero, so a hole cannot pass for it. */
static uint8_t data_byte(uint64_t i)
{
	return (uint8_t)((i * 2654435761u >> 13) % 255 + 1);
}

static void put(int fd, uint64_t off, size_t len)
{
	uint8_t *b = malloc(len);

	for (size_t i = 0; i < len; i++)
		b[i] = data_byte(off + i);
	cr_assert_eq(pwrite(fd, b, len, (off_t)off), (ssize_t)len);
	free(b);
}

/*
 * A file of @size bytes, holes except these [off, off + len) of data;
 * a final hole is made by ftruncate().
 */
static void layout(uint64_t size, const uint64_t (*d)[2], size_t n)
{
	int fd = open(path, O_RDWR | O_TRUNC);

	cr_assert_geq(fd, 0);
	for (size_t i = 0; i < n; i++)
		put(fd, d[i][0], d[i][1]);
	cr_assert_eq(ftruncate(fd, (off_t)size), 0);
	close(fd);
}

static struct source *open_ok(uint64_t size, size_t ps)
{
	struct source *s = NULL;
	int ret = src_file_open(path, size, ps, &s, why, sizeof(why));

	cr_assert_eq(ret, 0, "src_file_open: %d (%s)", ret, why);
	cr_assert_not_null(s);
	cr_expect_str_eq(s->ops->name, "file");
	cr_expect_eq(s->page_size, ps);
	return s;
}

/* The extents from 0 to the end: contiguous, aligned, and in @want. */
struct want {
	uint64_t off, len;
	enum src_kind kind;
};

static void extents_are(struct source *s, const struct want *w, size_t n)
{
	struct src_extent e;
	uint64_t at = 0;
	size_t i = 0;

	while (at < s->size) {
		cr_assert_eq(source_extent(s, at, &e), 0, "at %#lx", at);
		cr_assert_lt(i, n, "more extents than expected at %#lx", at);
		cr_expect_eq(e.off, w[i].off, "extent %zu off %#lx", i, e.off);
		cr_expect_eq(e.len, w[i].len, "extent %zu len %#lx", i, e.len);
		cr_expect_eq(e.kind, w[i].kind, "extent %zu kind", i);
		/* Any offset inside finds the same extent. */
		for (uint64_t o = e.off; o < e.off + e.len; o += e.len / 3 + 1) {
			struct src_extent f;

			cr_assert_eq(source_extent(s, o, &f), 0);
			cr_expect(f.off == e.off && f.len == e.len &&
				  f.kind == e.kind, "at %#lx", o);
		}
		at = e.off + e.len;
		i++;
	}
	cr_expect_eq(i, n, "%zu extents, not %zu", i, n);
	cr_expect_eq(source_extent(s, s->size, &e), -ERANGE);
	cr_expect_eq(source_extent(s, UINT64_MAX, &e), -ERANGE);
}

/* read() of [off, off + len) returns what pread() finds in the file. */
static void reads_data(struct source *s, uint64_t off, size_t len)
{
	uint8_t *b = malloc(len), *want = malloc(len);
	int fd = open(path, O_RDONLY);

	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, want, len, (off_t)off), (ssize_t)len);
	memset(b, 0, len);
	cr_assert_eq(source_read(s, off, b, len), (ssize_t)len, "at %#lx", off);
	cr_expect(!memcmp(b, want, len), "[%#lx, +%#zx) differs from the file",
		  off, len);
	close(fd);
	free(want);
	free(b);
}

static void sparse_4k(const char *dir)
{
	/* Data: page 1 (one byte in it), pages 4-6, 2 MiB at 8 MiB, and a
	 * page ending the file; holes between, and a hole at the start. */
	static const uint64_t d[][2] = {
		{ PAGE + 100, 1 },
		{ 4 * PAGE, 3 * PAGE },
		{ 8 * MIB, 2 * MIB },
		{ 16 * MIB - PAGE, PAGE },
	};
	static const struct want w[] = {
		{ 0, PAGE, SRC_ZERO },
		{ PAGE, PAGE, SRC_DATA },
		{ 2 * PAGE, 2 * PAGE, SRC_ZERO },
		{ 4 * PAGE, 3 * PAGE, SRC_DATA },
		{ 7 * PAGE, 8 * MIB - 7 * PAGE, SRC_ZERO },
		{ 8 * MIB, 2 * MIB, SRC_DATA },
		{ 10 * MIB, 6 * MIB - PAGE, SRC_ZERO },
		{ 16 * MIB - PAGE, PAGE, SRC_DATA },
	};
	struct source *s;

	mkfile(dir);
	layout(16 * MIB, d, 4);
	s = open_ok(0, PAGE);
	cr_expect_eq(s->size, 16 * MIB);
	extents_are(s, w, sizeof(w) / sizeof(w[0]));
	reads_data(s, PAGE, PAGE);
	reads_data(s, 4 * PAGE, 3 * PAGE);
	reads_data(s, 5 * PAGE, PAGE);
	reads_data(s, 8 * MIB, 2 * MIB);
	reads_data(s, 16 * MIB - PAGE, PAGE);
	source_destroy(s);
	rmfile();
}

Test(src_file, holes_are_zero_extents_4k)
{
	sparse_4k("/var/tmp");
}

Test(src_file, holes_are_zero_extents_4k_tmpfs)
{
	sparse_4k("/dev/shm");
}

/* With 2 MiB pages, a page with any data in it is DATA, all of it. */
Test(src_file, huge_pages_widen_data_to_whole_pages)
{
	static const uint64_t d[][2] = {
		{ HUGE + 5 * PAGE, 2 * PAGE },	/* inside huge page 1 */
		{ 4 * HUGE - PAGE, 2 * PAGE },	/* across pages 3 and 4 */
	};
	static const struct want w[] = {
		{ 0, HUGE, SRC_ZERO },
		{ HUGE, HUGE, SRC_DATA },
		{ 2 * HUGE, HUGE, SRC_ZERO },
		{ 3 * HUGE, 2 * HUGE, SRC_DATA },
		{ 5 * HUGE, 3 * HUGE, SRC_ZERO },
	};
	struct source *s;

	mkfile("/var/tmp");
	layout(8 * HUGE, d, 2);
	s = open_ok(0, HUGE);
	extents_are(s, w, sizeof(w) / sizeof(w[0]));
	reads_data(s, HUGE, HUGE);
	reads_data(s, 3 * HUGE, 2 * HUGE);
	source_destroy(s);
	rmfile();
}

Test(src_file, a_file_without_holes_is_one_data_extent)
{
	static const uint64_t d[][2] = { { 0, 3 * MIB } };
	static const struct want w[] = { { 0, 3 * MIB, SRC_DATA } };
	struct source *s;

	mkfile("/var/tmp");
	layout(3 * MIB, d, 1);
	s = open_ok(0, PAGE);
	extents_are(s, w, 1);
	reads_data(s, 0, 3 * MIB);
	source_destroy(s);
	/* All holes: one zero extent. */
	layout(3 * MIB, d, 0);
	s = open_ok(0, PAGE);
	extents_are(s, (const struct want[]){ { 0, 3 * MIB, SRC_ZERO } }, 1);
	source_destroy(s);
	rmfile();
}

/* A source of the first part of a longer file ends where it was asked. */
Test(src_file, a_prefix_of_the_file)
{
	static const uint64_t d[][2] = { { 0, PAGE }, { 3 * PAGE, 2 * PAGE } };
	static const struct want w[] = {
		{ 0, PAGE, SRC_DATA },
		{ PAGE, 2 * PAGE, SRC_ZERO },
		{ 3 * PAGE, PAGE, SRC_DATA },
	};
	struct source *s;
	char b[PAGE];

	mkfile("/var/tmp");
	layout(16 * PAGE + 123, d, 2);
	s = open_ok(4 * PAGE, PAGE);
	cr_expect_eq(s->size, 4 * PAGE);
	extents_are(s, w, 3);
	cr_expect_eq(source_read(s, 4 * PAGE, b, PAGE), -ERANGE);
	source_destroy(s);
	rmfile();
}

Test(src_file, reads_outside_data_or_misaligned_are_refused)
{
	static const uint64_t d[][2] = { { 2 * PAGE, 2 * PAGE } };
	struct source *s;
	char *b = malloc(8 * PAGE);

	mkfile("/var/tmp");
	layout(8 * PAGE, d, 1);
	s = open_ok(0, PAGE);
	cr_expect_eq(source_read(s, 0, b, PAGE), -ERANGE);	 /* a hole */
	cr_expect_eq(source_read(s, PAGE, b, 2 * PAGE), -ERANGE); /* partly */
	cr_expect_eq(source_read(s, 3 * PAGE, b, 2 * PAGE), -ERANGE);
	cr_expect_eq(source_read(s, 8 * PAGE, b, PAGE), -ERANGE); /* beyond */
	cr_expect_eq(source_read(s, UINT64_MAX & ~(PAGE - 1), b, PAGE),
		     -ERANGE);
	cr_expect_eq(source_read(s, 2 * PAGE + 1, b, PAGE), -EINVAL);
	cr_expect_eq(source_read(s, 2 * PAGE, b, PAGE - 1), -EINVAL);
	cr_expect_eq(source_read(s, 2 * PAGE, b, 0), -EINVAL);
	cr_expect_eq(source_read(s, 2 * PAGE, b, 2 * PAGE), (ssize_t)(2 * PAGE));
	source_destroy(s);
	free(b);
	rmfile();
}

static void open_refused(uint64_t size, size_t ps, int err, const char *words)
{
	struct source *s = (struct source *)0x1;
	int ret = src_file_open(path, size, ps, &s, why, sizeof(why));

	cr_expect_eq(ret, err, "%d (%s), not %d", ret, why, err);
	cr_expect(strstr(why, words), "\"%s\" lacks \"%s\"", why, words);
	cr_expect_eq(s, (struct source *)0x1, "*out written on failure");
}

Test(src_file, bad_files_are_refused_at_open)
{
	static const uint64_t d[][2] = { { 0, 2 * MIB } };

	mkfile("/var/tmp");
	layout(4 * MIB, d, 1);
	open_refused(4 * MIB + PAGE, PAGE, -ERANGE, "the file has 4194304 "
		     "bytes, fewer than the 4198400 it must hold");
	open_refused(0, 8192, -EINVAL, "page size 8192: only 4096 and "
		     "2097152");
	open_refused(PAGE + 1, PAGE, -EINVAL, "4097 bytes are no whole number "
		     "of 4096-byte pages");
	open_refused(PAGE, HUGE, -EINVAL, "no whole number of 2097152-byte");
	layout(4 * MIB + 100, d, 1);
	open_refused(0, PAGE, -EINVAL, "4194404 bytes are no whole number");
	layout(0, d, 0);
	open_refused(0, PAGE, -EINVAL, "0 bytes are no whole number");
	rmfile();
	open_refused(0, PAGE, -ENOENT, "No such file");
	snprintf(path, sizeof(path), "/var/tmp");
	open_refused(0, PAGE, -EINVAL, "not a regular file");
}

/* Content that went away underneath is an error, never zeros. */
Test(src_file, a_file_truncated_after_open_reads_as_an_error)
{
	static const uint64_t d[][2] = { { 0, 4 * PAGE } };
	struct source *s;
	char b[4 * PAGE];

	mkfile("/var/tmp");
	layout(4 * PAGE, d, 1);
	s = open_ok(0, PAGE);
	cr_assert_eq(truncate(path, 2 * PAGE), 0);
	cr_expect_eq(source_read(s, 0, b, 2 * PAGE), (ssize_t)(2 * PAGE));
	cr_expect_eq(source_read(s, 0, b, 4 * PAGE), -EIO);
	cr_expect_eq(source_read(s, 3 * PAGE, b, PAGE), -EIO);
	source_destroy(s);
	rmfile();
}

Test(src_file, id_is_device_inode_size_and_mtime)
{
	static const uint64_t d[][2] = { { 0, PAGE } };
	struct timeval tv[2] = { { 1000000, 0 }, { 1000000, 0 } };
	struct source *a, *b;
	uint8_t id[32];

	mkfile("/var/tmp");
	layout(2 * PAGE, d, 1);
	cr_assert_eq(utimes(path, tv), 0);
	a = open_ok(0, PAGE);
	b = open_ok(PAGE, PAGE);
	/* The file's identity, not the part asked for. */
	cr_expect_arr_eq(a->id, b->id, sizeof(a->id));
	memcpy(id, a->id, sizeof(id));
	source_destroy(a);
	source_destroy(b);
	tv[1].tv_usec = 1;
	cr_assert_eq(utimes(path, tv), 0);
	a = open_ok(0, PAGE);
	cr_expect_arr_neq(a->id, id, sizeof(id), "mtime changed, id did not");
	source_destroy(a);
	tv[1].tv_usec = 0;
	cr_assert_eq(utimes(path, tv), 0);
	a = open_ok(0, PAGE);
	cr_expect_arr_eq(a->id, id, sizeof(id));
	source_destroy(a);
	cr_assert_eq(truncate(path, 3 * PAGE), 0);
	cr_assert_eq(utimes(path, tv), 0);
	a = open_ok(0, PAGE);
	cr_expect_arr_neq(a->id, id, sizeof(id), "size changed, id did not");
	source_destroy(a);
	rmfile();
}

/* More data extents than the table holds: the rest are served as DATA,
 * holes and all, and read as what the file holds. */
Test(src_file, a_fragmented_file_past_the_table, .timeout = 60)
{
	const uint64_t n = SRC_FILE_MAX_EXTENTS + 8, size = 2 * n * PAGE;
	struct src_extent e;
	struct source *s;
	char *b = malloc(4 * PAGE), page[PAGE];
	int fd;

	mkfile("/dev/shm");
	fd = open(path, O_RDWR);
	memset(page, 0x5a, sizeof(page));
	for (uint64_t i = 0; i < n; i++)
		cr_assert_eq(pwrite(fd, page, PAGE, (off_t)(2 * i * PAGE)),
			     (ssize_t)PAGE);
	cr_assert_eq(ftruncate(fd, (off_t)size), 0);
	close(fd);
	s = open_ok(0, PAGE);
	cr_assert_eq(source_extent(s, PAGE, &e), 0);
	cr_expect(e.kind == SRC_ZERO && e.off == PAGE && e.len == PAGE);
	/* Extent MAX - 1 is the last one kept; it takes all the rest. */
	cr_assert_eq(source_extent(s, 2 * (n - 1) * PAGE, &e), 0);
	cr_expect_eq(e.kind, SRC_DATA);
	cr_expect_eq(e.off, 2 * (SRC_FILE_MAX_EXTENTS - 1) * PAGE);
	cr_expect_eq(e.off + e.len, size - PAGE);
	cr_assert_eq(source_read(s, 2 * (n - 2) * PAGE, b, 3 * PAGE),
		     (ssize_t)(3 * PAGE));
	cr_expect_eq(b[0], 0x5a);
	cr_expect_eq(b[PAGE], 0, "a hole read as zeros");
	cr_expect_eq(b[2 * PAGE], 0x5a);
	cr_assert_eq(source_extent(s, size - PAGE, &e), 0);
	cr_expect(e.kind == SRC_ZERO && e.len == PAGE);
	source_destroy(s);
	free(b);
	rmfile();
}

/* ------------------------------------------------------------------------
 * read() and extent() from several threads at once.
 */

#define THREADS 4
#define ROUNDS 20000

struct reader {
	struct source *s;
	unsigned int seed;
	size_t wrong;
};

/* The file of the test below: 1 MiB, 64 KiB of data, 64 KiB of hole... */
static bool is_data(uint64_t off)
{
	return (off / (64 * 1024)) % 2 == 0;
}

static void *reader_run(void *arg)
{
	struct reader *r = arg;
	uint8_t b[PAGE];

	for (int i = 0; i < ROUNDS; i++) {
		uint64_t off = (uint64_t)(rand_r(&r->seed) % 256) * PAGE;
		struct src_extent e;

		if (source_extent(r->s, off, &e) ||
		    e.kind != (is_data(off) ? SRC_DATA : SRC_ZERO) ||
		    e.off > off || e.off + e.len <= off) {
			r->wrong++;
			continue;
		}
		if (e.kind == SRC_ZERO)
			continue;
		if (source_read(r->s, off, b, PAGE) != (ssize_t)PAGE ||
		    b[17] != data_byte(off + 17) ||
		    b[PAGE - 1] != data_byte(off + PAGE - 1))
			r->wrong++;
	}
	return NULL;
}

Test(src_file, concurrent_reads_and_extents, .timeout = 60)
{
	uint64_t d[8][2];
	struct reader r[THREADS];
	pthread_t t[THREADS];
	struct source *s;

	for (int i = 0; i < 8; i++) {
		d[i][0] = (uint64_t)i * 128 * 1024;
		d[i][1] = 64 * 1024;
	}
	mkfile("/var/tmp");
	layout(MIB, (const uint64_t (*)[2])d, 8);
	s = open_ok(0, PAGE);
	for (int i = 0; i < THREADS; i++) {
		r[i] = (struct reader){ .s = s, .seed = (unsigned int)i + 1 };
		cr_assert_eq(pthread_create(&t[i], NULL, reader_run, &r[i]), 0);
	}
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		cr_expect_eq(r[i].wrong, 0, "thread %d: %zu wrong", i,
			     r[i].wrong);
	}
	source_destroy(s);
	rmfile();
}
