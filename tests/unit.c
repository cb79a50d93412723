// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * unit.c - suite "unit": the API's contract for bad input (exact negative
 * errno, nothing left behind), the feature probe, option-struct sizing, the
 * region map and the statistics helpers.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <sys/mman.h>

#include "helpers.h"
#include "internal.h"

Test(api, version_matches_header)
{
	cr_expect_str_eq(faultd_version(), FAULTD_VERSION_STRING);
}

Test(api, probe_reports_this_kernel)
{
	struct faultd_features f = { .size = sizeof(f) };

	cr_assert_eq(faultd_probe(&f), 0);
	cr_expect(f.uffd_features & UFFD_FEATURE_MISSING_SHMEM);
	cr_expect(f.have & FAULTD_HAVE_MISSING_SHMEM);
	/* Every HAVE bit the probe derives must match its kernel bit. */
	cr_expect_eq(!!(f.have & FAULTD_HAVE_POISON),
		     !!(f.uffd_features & UFFD_FEATURE_POISON));
	cr_expect_eq(!!(f.have & FAULTD_HAVE_WP_ASYNC),
		     !!(f.uffd_features & UFFD_FEATURE_WP_ASYNC));
	f.size = 4;
	cr_expect_eq(faultd_probe(&f), -EINVAL);
	cr_expect_eq(faultd_probe(NULL), -EINVAL);
}

Test(api, ctx_bad_options)
{
	struct faultd_ctx_opts o = { .size = sizeof(o) };
	struct {
		struct faultd_ctx_opts o;
		uint64_t future;
	} big = { .o = { .size = sizeof(big) }, .future = 1 };
	struct faultd_ctx *ctx = NULL;

	cr_expect_eq(faultd_ctx_create(&o, NULL), -EINVAL);
	o.size = 3;
	cr_expect_eq(faultd_ctx_create(&o, &ctx), -EINVAL);
	o.size = sizeof(o);
	o.lock_mode = 7;
	cr_expect_eq(faultd_ctx_create(&o, &ctx), -EINVAL);
	/* A newer caller's struct: fine when its extra fields are zero. */
	cr_expect_eq(faultd_ctx_create(&big.o, &ctx), -E2BIG);
	big.future = 0;
	cr_expect_eq(faultd_ctx_create(&big.o, &ctx), 0);
	faultd_ctx_destroy(ctx);
	faultd_ctx_destroy(NULL);
}

static int create(struct faultd_ctx *ctx, struct faultd_region_opts o)
{
	struct faultd_region *r = NULL;
	int ret;

	o.size = o.size ? o.size : sizeof(o);
	ret = faultd_region_create(ctx, &o, &r);
	if (ret == 0)
		faultd_region_destroy(r);
	else
		cr_expect_null(r, "a failed create returned a region");
	return ret;
}

Test(api, region_bad_options)
{
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_ctx *other = ctx_new();
	struct faultd_pager nofill = { .size = sizeof(nofill) };
	struct faultd_pager badflags = pattern_pager(1, 1u << 7);
	struct faultd_group *g;
	struct faultd_region *r;
	struct faultd_region_opts ok = { .size = sizeof(ok),
					 .length = 16 * PAGE };

	cr_expect_eq(faultd_region_create(NULL, &ok, &r), -EINVAL);
	cr_expect_eq(faultd_region_create(ctx, NULL, &r), -EINVAL);
	cr_expect_eq(faultd_region_create(ctx, &ok, NULL), -EINVAL);
	cr_expect_eq(create(ctx, (struct faultd_region_opts){ .size = 4,
							      .length = PAGE }),
		     -EINVAL);
	cr_expect_eq(create(ctx, (struct faultd_region_opts){ .length = 0 }),
		     -EINVAL);
	cr_expect_eq(create(ctx, (struct faultd_region_opts){ .length = 4097 }),
		     -EINVAL);
	cr_expect_eq(create(ctx, (struct faultd_region_opts){
				     .length = PAGE, .flags = 1ull << 40 }),
		     -EINVAL);
	cr_expect_eq(create(ctx, (struct faultd_region_opts){
				     .length = PAGE,
				     .flags = FAULTD_REGION_FIXED }),
		     -EINVAL);
	cr_expect_eq(create(ctx, (struct faultd_region_opts){
				     .length = PAGE,
				     .addr = (void *)0x7f0000000000 }),
		     -EINVAL);
	cr_expect_eq(create(ctx, (struct faultd_region_opts){
				     .length = PAGE,
				     .flags = FAULTD_REGION_FIXED,
				     .addr = (void *)0x7f0000000100 }),
		     -EINVAL);
	cr_expect_eq(create(ctx, (struct faultd_region_opts){
				     .length = PAGE, .pager = &nofill }),
		     -EINVAL);
	cr_expect_eq(create(ctx, (struct faultd_region_opts){
				     .length = PAGE, .pager = &badflags }),
		     -EINVAL);
	cr_assert_eq(faultd_group_create(other, NULL, &g), 0);
	cr_expect_eq(create(ctx, (struct faultd_region_opts){
				     .length = PAGE, .group = g }),
		     -EINVAL);
	faultd_ctx_destroy(other);
	faultd_ctx_destroy(ctx);
}

Test(api, fixed_address_overlaps_give_eexist)
{
	struct faultd_ctx *ctx = ctx_new();
	/*
	 * A hole in the middle of a large free range, so that no allocation
	 * of the library or the allocator lands there while we use it.
	 */
	char *hole = mmap(NULL, 1ul << 30, PROT_NONE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	char *taken = hole + (512ul << 20);
	struct faultd_region *r;
	struct faultd_region_opts o = { .size = sizeof(o),
					.length = 16 * PAGE,
					.flags = FAULTD_REGION_FIXED };

	cr_assert_neq(hole, MAP_FAILED);
	/* Overlapping a plain mapping. */
	o.addr = taken + 8 * PAGE;
	cr_expect_eq(create(ctx, o), -EEXIST);
	/* At a free fixed address, then overlapping that region. */
	munmap(hole, 1ul << 30);
	o.addr = taken;
	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	cr_expect_eq(faultd_region_base(r), taken);
	o.addr = (char *)taken + 4 * PAGE;
	cr_expect_eq(create(ctx, o), -EEXIST);
	faultd_region_destroy(r);
	faultd_ctx_destroy(ctx);
}

/* Create at @addr (NULL: anywhere), check the base, destroy; the base. */
static void *create_at(struct faultd_ctx *ctx, void *addr, size_t len,
		       uint64_t flags, unsigned int threads, int *err)
{
	struct faultd_region_opts o = {
		.size = sizeof(o),
		.length = len,
		.flags = flags | (addr ? FAULTD_REGION_FIXED : 0),
		.addr = addr,
		.handler_threads = threads,
	};
	struct faultd_region *r;
	void *base;

	*err = faultd_region_create(ctx, &o, &r);
	if (*err < 0)
		return NULL;
	base = faultd_region_base(r);
	cr_expect(!addr || base == addr);
	cr_assert_eq(faultd_region_destroy(r), 0);
	return base;
}

/*
 * A fixed address that is free must be taken, whatever else the creation
 * maps (handler stacks, staging buffers): at a hole just unmapped - where
 * the next mappings of the process go - and at the address of a region
 * just destroyed, each many times. The creations have 8 handler threads,
 * the destroyed regions one: the C library keeps the stacks of exited
 * threads for new ones, so it is more threads that need new stacks.
 * Lengths: one page (a staging buffer fits the hole), 16 MiB (a thread
 * stack does).
 */
Test(api, fixed_address_free_is_taken, .timeout = 60)
{
	static const struct {
		size_t len;
		uint64_t flags;
	} cases[] = { { PAGE, 0 }, { 16 * MIB, 0 },
		      { 16 * MIB, FAULTD_REGION_MEMFD } };
	struct faultd_ctx *ctx = ctx_new();
	int err;

	for (size_t c = 0; c < ARRAY_SIZE(cases); c++) {
		size_t len = cases[c].len;
		uint64_t flags = cases[c].flags;
		void *at;

		for (int i = 0; i < 20; i++) {
			at = mmap(NULL, len, PROT_NONE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			cr_assert_neq(at, MAP_FAILED);
			munmap(at, len);
			create_at(ctx, at, len, flags, 8, &err);
			cr_expect_eq(err, 0,
				     "%zu bytes at a hole just unmapped, "
				     "try %d: %s", len, i, strerror(-err));
		}
		for (int i = 0; i < 20; i++) {
			at = create_at(ctx, NULL, len, flags, 1, &err);
			cr_assert_eq(err, 0);
			create_at(ctx, at, len, flags, 8, &err);
			cr_expect_eq(err, 0,
				     "%zu bytes at a destroyed region's "
				     "address, try %d: %s", len, i,
				     strerror(-err));
		}
	}
	faultd_ctx_destroy(ctx);
}

Test(api, region_calls_bad_ranges)
{
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region_opts o = { .size = sizeof(o),
					.length = 16 * PAGE };
	struct faultd_stats s = { .size = sizeof(s) };
	struct faultd_region *r;
	struct faultd_group *g;

	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	cr_expect_eq(faultd_region_resize(r, 0), -EINVAL);
	cr_expect_eq(faultd_region_resize(r, 100), -EINVAL);
	cr_expect_eq(faultd_region_resize(NULL, PAGE), -EINVAL);
	cr_expect_eq(faultd_region_discard(r, 0, 0), -EINVAL);
	cr_expect_eq(faultd_region_discard(r, 1, PAGE), -EINVAL);
	cr_expect_eq(faultd_region_discard(r, 16 * PAGE, PAGE), -EINVAL);
	cr_expect_eq(faultd_region_discard(r, 15 * PAGE, 2 * PAGE), -EINVAL);
	cr_expect_eq(faultd_region_discard(r, 0, 16 * PAGE), 0);
	cr_expect_eq(faultd_region_memfd(r), -EINVAL);
	cr_expect_eq(faultd_region_stats(r, NULL), -EINVAL);
	cr_expect_eq(faultd_region_stats(NULL, &s), -EINVAL);
	cr_expect_eq(faultd_ctx_stats(NULL, &s), -EINVAL);
	s.size = 2;
	cr_expect_eq(faultd_ctx_stats(ctx, &s), -EINVAL);
	cr_expect_eq(faultd_region_destroy(NULL), 0);
	cr_expect_eq(faultd_group_destroy(NULL), 0);
	cr_expect_eq(faultd_group_create(ctx, NULL, NULL), -EINVAL);
	cr_assert_eq(faultd_group_create(ctx, NULL, &g), 0);
	o.group = g;
	o.handler_threads = 2; /* threads belong to the group */
	cr_expect_eq(create(ctx, o), -EINVAL);
	faultd_region_destroy(r);
	faultd_ctx_destroy(ctx);
}

Test(api, stats_size_versioning)
{
	struct faultd_ctx *ctx = ctx_new();
	struct {
		size_t size;
		uint64_t faults;
		uint64_t guard;
	} old = { .size = offsetof(struct faultd_stats, zero_fills),
		  .guard = 0x1234 };

	/* An older, shorter struct gets only the fields it has. */
	cr_expect_eq(faultd_ctx_stats(ctx, (struct faultd_stats *)&old), 0);
	cr_expect_eq(old.guard, 0x1234);
	faultd_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------
 * Internals: the map and the histogram.
 */

Test(map, sorted_insert_lookup_remove)
{
	struct faultd_ctx ctx = { 0 };
	struct faultd_region r[5];
	struct region_map *old;
	const uintptr_t bases[5] = { 0x50000, 0x10000, 0x30000, 0x70000,
				     0x20000 };

	cr_assert_eq(map_init(&ctx), 0);
	cr_assert_eq(rwlock_init_writer_pref(&ctx.map_lock), 0);
	map_write_lock(&ctx); /* what the _locked calls need */
	for (int i = 0; i < 5; i++) {
		memset(&r[i], 0, sizeof(r[i]));
		r[i].base = bases[i];
		atomic_init(&r[i].len, 0x8000);
		cr_assert_eq(map_insert_locked(&ctx, &r[i], &old), 0);
		free(old);
	}
	for (size_t i = 1; i < ctx.map->nr; i++)
		cr_expect_lt(ctx.map->e[i - 1].base, ctx.map->e[i].base);
	cr_expect_eq(map_lookup(&ctx, 0x30000), &r[2]);
	cr_expect_eq(map_lookup(&ctx, 0x37fff), &r[2]);
	cr_expect_null(map_lookup(&ctx, 0x38000));
	cr_expect_null(map_lookup(&ctx, 0xffff));
	cr_expect_eq(map_lookup(&ctx, 0x77fff), &r[3]);
	/* Overlaps are refused. */
	struct faultd_region bad = { .base = 0x34000 };
	atomic_init(&bad.len, 0x1000);
	cr_expect_eq(map_insert_locked(&ctx, &bad, &old), -EEXIST);
	free(map_remove_locked(&ctx, &r[2]));
	cr_expect_null(map_lookup(&ctx, 0x30000));
	cr_expect_eq(map_lookup(&ctx, 0x20000), &r[4]);
	cr_expect_eq(ctx.map->nr, 4);
	map_write_unlock(&ctx);
	pthread_rwlock_destroy(&ctx.map_lock);
	map_destroy(&ctx);
}

Test(stats, latency_percentiles)
{
	struct stat_block b;
	struct faultd_stats s = { .size = sizeof(s) };

	memset(&b, 0, sizeof(b));
	for (int i = 0; i < 90; i++)
		stat_latency(&b, 10000); /* 10 us */
	for (int i = 0; i < 10; i++)
		stat_latency(&b, 1000000); /* 1 ms */
	stat_export(&s, &b);
	uint64_t p50 = faultd_stats_latency(&s, 50);
	uint64_t p99 = faultd_stats_latency(&s, 99);

	cr_expect(p50 > 8000 && p50 < 12000, "p50 %llu",
		  (unsigned long long)p50);
	cr_expect(p99 > 800000 && p99 < 1200000, "p99 %llu",
		  (unsigned long long)p99);
	/* A caller built before the fields after latency[] still gets it. */
	s.size = offsetof(struct faultd_stats, latency) + sizeof(s.latency);
	cr_expect_eq(faultd_stats_latency(&s, 50), p50);
	s.size = offsetof(struct faultd_stats, latency);
	cr_expect_eq(faultd_stats_latency(&s, 50), 0);
	s.size = sizeof(s);
	cr_expect_eq(faultd_stats_latency(&s, NAN),
		     faultd_stats_latency(&s, 0), "NaN is 0");
	memset(&s.latency, 0, sizeof(s.latency));
	cr_expect_eq(faultd_stats_latency(&s, 50), 0);
}

/* CRC32C: the standard check value, and the three-stream hardware path
 * equal to the table at every length and alignment. */
Test(crc32c, check_value_and_fast_path_equals_table)
{
	size_t len = 3 * 8192 * 2 + 3 * 256 * 3 + 77;
	unsigned char *b = malloc(len + 64);

	cr_assert_eq(crc32c(0, "123456789", 9), 0xe3069283u);
	cr_assert_eq(crc32c_sw(0, "123456789", 9), 0xe3069283u);
	for (size_t i = 0; i < len + 64; i++)
		b[i] = (unsigned char)(i * 131 + (i >> 7));
	for (size_t l = 0; l <= len; l += l < 1024 ? 1 : 997)
		for (size_t o = 0; o < 16; o += 5)
			cr_assert_eq(crc32c(7, b + o, l), crc32c_sw(7, b + o, l),
				     "length %zu offset %zu", l, o);
	/* Continuing a CRC is the CRC of the concatenation. */
	cr_assert_eq(crc32c(crc32c(0, b, 1000), b + 1000, len - 1000),
		     crc32c(0, b, len));
	free(b);
}
