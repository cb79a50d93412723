// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * kvstore.c - a small key-value store whose table lives in a file, served
 * by libfaultd's file pager with a memory budget smaller than the file.
 *
 * The table is an array of 64-byte slots (open addressing, linear
 * probing) in a file of 16 MiB; the region that maps it may keep only
 * 4 MiB in memory. Pages come in from the file on first access, read
 * ahead when access is sequential; when the budget is passed, pages not
 * used lately are evicted - written back first if they were changed.
 *
 * The program loads keys, updates some, syncs (faultd_region_sync(), the
 * msync of this library), closes the table, opens it again from the file
 * and checks every key. It exits with 1 if any value is wrong.
 *
 *   kvstore [FILE]     (default: a temporary file, removed at the end)
 *
 * Build against an installed libfaultd with:
 *   cc kvstore.c $(pkg-config --cflags --libs libfaultd) -o kvstore
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <faultd.h>

#define TABLE_SIZE (16ul << 20)
#define BUDGET (4ul << 20)
#define SLOT_SIZE 64
#define NSLOTS (TABLE_SIZE / SLOT_SIZE)
#define NKEYS (NSLOTS / 8)

struct slot {
	uint64_t key;	/* 0: empty */
	uint64_t version;
	char value[48];
};

struct table {
	struct faultd_ctx *ctx;
	struct faultd_region *region;
	struct slot *slots;
};

static void die(const char *what, int err)
{
	fprintf(stderr, "kvstore: %s: %s\n", what, strerror(-err));
	exit(2);
}

/* Map the table in @fd. Pages are read from the file when touched. */
static void table_open(struct table *t, int fd)
{
	struct faultd_file_opts fo = { .size = sizeof(fo), .fd = fd };
	struct faultd_region_opts ro = {
		.size = sizeof(ro),
		.length = TABLE_SIZE,
		.flags = FAULTD_REGION_WP, /* track writes: write-back */
		.budget = BUDGET,
		.name = "kvstore",
	};
	struct faultd_pager pager;
	int ret;

	ret = faultd_ctx_create(NULL, &t->ctx);
	if (ret < 0)
		die("faultd_ctx_create", ret);
	ret = faultd_file_pager(&fo, &pager);
	if (ret < 0)
		die("faultd_file_pager", ret);
	ro.pager = &pager;
	ret = faultd_region_create(t->ctx, &ro, &t->region);
	if (ret < 0) {
		pager.release(pager.arg); /* not taken: still ours */
		die("faultd_region_create", ret);
	}
	t->slots = faultd_region_base(t->region);
}

static void table_close(struct table *t)
{
	faultd_region_destroy(t->region);
	faultd_ctx_destroy(t->ctx);
}

static uint64_t hash(uint64_t key)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	return key;
}

/* The slot of @key, or the empty slot where it would go. */
static struct slot *lookup(struct table *t, uint64_t key)
{
	for (uint64_t i = hash(key) % NSLOTS;; i = (i + 1) % NSLOTS)
		if (t->slots[i].key == key || t->slots[i].key == 0)
			return &t->slots[i];
}

static void put(struct table *t, uint64_t key, uint64_t version)
{
	struct slot *s = lookup(t, key);

	s->key = key;
	s->version = version;
	snprintf(s->value, sizeof(s->value), "value of %llu, version %llu",
		 (unsigned long long)key, (unsigned long long)version);
}

static int check(struct table *t, uint64_t key, uint64_t version)
{
	struct slot *s = lookup(t, key);
	char want[sizeof(s->value)];

	snprintf(want, sizeof(want), "value of %llu, version %llu",
		 (unsigned long long)key, (unsigned long long)version);
	return s->key == key && s->version == version &&
	       !strcmp(s->value, want);
}

static void print_stats(const char *when, struct table *t)
{
	struct faultd_stats s = { .size = sizeof(s) };

	faultd_region_stats(t->region, &s);
	printf("%-8s faults %7llu  read %5llu MiB  read ahead %6llu pages  "
	       "evicted %6llu  written back %6llu pages\n",
	       when, (unsigned long long)s.faults,
	       (unsigned long long)(s.bytes_read >> 20),
	       (unsigned long long)s.readahead,
	       (unsigned long long)s.evictions,
	       (unsigned long long)s.writebacks);
}

/* Keys 1..NKEYS; every 7th is updated to version 2. */
static uint64_t version_of(uint64_t key, int updated)
{
	return updated && key % 7 == 0 ? 2 : 1;
}

int main(int argc, char **argv)
{
	char tmp[] = "/var/tmp/kvstore-XXXXXX";
	const char *path = argc > 1 ? argv[1] : tmp;
	struct table t;
	size_t bad = 0;
	int fd, ret;

	fd = argc > 1 ? open(path, O_RDWR | O_CREAT | O_TRUNC, 0644)
		      : mkstemp(tmp);
	if (fd < 0 || ftruncate(fd, TABLE_SIZE) < 0)
		die(path, -errno);

	table_open(&t, fd);
	for (uint64_t key = 1; key <= NKEYS; key++)
		put(&t, key, 1);
	print_stats("load", &t);
	for (uint64_t key = 7; key <= NKEYS; key += 7)
		put(&t, key, 2);
	ret = faultd_region_sync(t.region, 0, TABLE_SIZE);
	if (ret < 0)
		die("faultd_region_sync", ret);
	print_stats("update", &t);
	table_close(&t);

	table_open(&t, fd); /* everything comes from the file now */
	for (uint64_t key = 1; key <= NKEYS; key++)
		bad += !check(&t, key, version_of(key, 1));
	print_stats("verify", &t);
	table_close(&t);
	close(fd);
	if (argc == 1)
		unlink(tmp);
	printf("%zu keys in a %lu MiB file through a %lu MiB budget: %s\n",
	       (size_t)NKEYS, TABLE_SIZE >> 20, BUDGET >> 20,
	       bad ? "MISMATCH" : "all correct");
	if (bad)
		fprintf(stderr, "kvstore: %zu keys wrong\n", bad);
	return bad ? 1 : 0;
}
