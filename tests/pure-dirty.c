// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * pure-dirty.c - suite "pure": the page bitmaps of dirty tracking (dirty.c)
 * on a region made by hand, without userfaultfd: bitmap_grow(), marking,
 * taking (bitmap_take(), what a sync collection returns), and forgetting
 * a range, bit by bit across word boundaries.
 *
 * bitmap_take() is static, so dirty.c is part of this program: its other
 * functions are the ones the library links with, here compiled once more
 * (the archive's copy is not linked: every symbol of it is defined
 * already). bitmap_set_range() is bitmap.h's.
 */
#include <criterion/criterion.h>

#include "helpers.h"
#include "../libfaultd/dirty.c"

#define BITS 256 /* pages of the test region: four words */

/* A sync-mode region of BITS pages with only its bitmap. */
static void region_init(struct faultd_region *r)
{
	memset(r, 0, sizeof(*r));
	r->page_size = PAGE;
	r->wp_mode = WP_SYNC;
	atomic_store(&r->len, BITS * PAGE);
	pthread_rwlock_init(&r->dirty_lock, NULL);
	cr_assert_eq(bitmap_grow(&r->dirty, &r->dirty_words, BITS), 0);
	cr_assert_eq(r->dirty_words, BITS / 64);
}

static void region_fini(struct faultd_region *r)
{
	pthread_rwlock_destroy(&r->dirty_lock);
	free((void *)r->dirty);
}

static bool bit(const uint64_t *map, size_t i)
{
	return map[i / 64] >> (i % 64) & 1;
}

static bool dirty_bit(struct faultd_region *r, size_t i)
{
	return atomic_load(&r->dirty[i / 64]) >> (i % 64) & 1;
}

static size_t dirty_count(struct faultd_region *r)
{
	size_t n = 0;

	for (size_t i = 0; i < r->dirty_words * 64; i++)
		n += dirty_bit(r, i);
	return n;
}

Test(bitmap, grow_keeps_bits_and_clears_the_new_words)
{
	_Atomic uint64_t *map = NULL;
	size_t words = 0;

	cr_assert_eq(bitmap_grow(&map, &words, 1), 0);
	cr_expect_eq(words, 1);
	cr_expect_eq(atomic_load(&map[0]), 0);
	atomic_store(&map[0], 0x8000000000000001ull);
	cr_assert_eq(bitmap_grow(&map, &words, 64), 0);
	cr_expect_eq(words, 1, "64 bits fit one word");
	cr_assert_eq(bitmap_grow(&map, &words, 65), 0);
	cr_expect_eq(words, 2);
	cr_expect_eq(atomic_load(&map[0]), 0x8000000000000001ull);
	cr_expect_eq(atomic_load(&map[1]), 0);
	atomic_store(&map[1], 5);
	cr_assert_eq(bitmap_grow(&map, &words, 64 * 7 + 1), 0);
	cr_expect_eq(words, 8);
	cr_expect_eq(atomic_load(&map[0]), 0x8000000000000001ull);
	cr_expect_eq(atomic_load(&map[1]), 5);
	for (size_t i = 2; i < 8; i++)
		cr_expect_eq(atomic_load(&map[i]), 0, "word %zu", i);
	/* Shrinking is not growing: the bitmap stays. */
	cr_assert_eq(bitmap_grow(&map, &words, 3), 0);
	cr_expect_eq(words, 8);
	free((void *)map);
}

Test(bitmap, mark_sets_exactly_the_pages_of_the_range)
{
	struct faultd_region r;

	region_init(&r);
	dirty_mark(&r, 62 * PAGE, 4 * PAGE);	/* across words 0 and 1 */
	dirty_mark(&r, 255 * PAGE, PAGE);	/* the last page */
	dirty_mark(&r, 100 * PAGE, 0);		/* nothing */
	for (size_t i = 0; i < BITS; i++)
		cr_expect_eq(dirty_bit(&r, i), (i >= 62 && i < 66) || i == 255,
			     "page %zu", i);
	/* Rearming (a failed write-back, sync mode) marks again. */
	cr_expect_eq(dirty_rearm(&r, 0, 2 * PAGE), 0);
	cr_expect(dirty_bit(&r, 0) && dirty_bit(&r, 1));
	cr_expect_eq(dirty_count(&r), 7);
	region_fini(&r);
}

Test(bitmap, set_range_sets_from_to_exclusive)
{
	uint64_t map[3] = { 0 };

	bitmap_set_range(map, 63, 129);
	cr_expect_eq(map[0], 1ull << 63);
	cr_expect_eq(map[1], ~0ull);
	cr_expect_eq(map[2], 1);
	bitmap_set_range(map, 5, 5);
	cr_expect_eq(map[0], 1ull << 63);
}

/*
 * bitmap_take() of pages [first, first + n): the set bits come out
 * numbered from first, are cleared in the region, and the bits outside
 * stay where they were.
 */
static void check_take(size_t first, size_t n, const size_t *set,
		       size_t nset)
{
	struct faultd_region r;
	uint64_t out[BITS / 64 + 1];
	size_t inside = 0;
	ssize_t got;

	region_init(&r);
	for (size_t i = 0; i < nset; i++) {
		dirty_mark(&r, set[i] * PAGE, PAGE);
		inside += set[i] >= first && set[i] < first + n;
	}
	memset(out, 0xff, sizeof(out));
	got = bitmap_take(&r, first, n, out);
	cr_expect_eq(got, (ssize_t)inside, "take [%zu, +%zu): %zd pages", first,
		     n, got);
	for (size_t i = 0; i < (n + 63) / 64 * 64; i++) {
		bool want = false;

		for (size_t k = 0; k < nset; k++)
			want |= i < n && set[k] == first + i;
		cr_expect_eq(bit(out, i), want, "take [%zu, +%zu): bit %zu",
			     first, n, i);
	}
	/* The words past the result are the caller's. */
	cr_expect_eq(out[(n + 63) / 64], ~0ull);
	for (size_t k = 0; k < nset; k++) {
		bool kept = set[k] < first || set[k] >= first + n;

		cr_expect_eq(dirty_bit(&r, set[k]), kept, "page %zu", set[k]);
	}
	cr_expect_eq(dirty_count(&r), nset - inside);
	region_fini(&r);
}

static const size_t pattern[] = { 0, 1, 59, 60, 63, 64, 65, 127, 128,
				  190, 191, 192, 250, 255 };
#define NPAT (sizeof(pattern) / sizeof(pattern[0]))

Test(bitmap, take_whole_words)
{
	check_take(0, BITS, pattern, NPAT);
	check_take(64, 128, pattern, NPAT);
}

Test(bitmap, take_unaligned_ranges)
{
	check_take(60, 70, pattern, NPAT);	/* three words, partly */
	check_take(1, 63, pattern, NPAT);	/* the rest of word 0 */
	check_take(63, 2, pattern, NPAT);	/* across one boundary */
	check_take(65, 1, pattern, NPAT);
	check_take(191, 65, pattern, NPAT);	/* to the last page */
	check_take(2, 57, pattern, NPAT);	/* inside a word, no bit set */
}

Test(bitmap, take_twice_gives_nothing_the_second_time)
{
	struct faultd_region r;
	uint64_t out[BITS / 64];

	region_init(&r);
	dirty_mark(&r, 10 * PAGE, 100 * PAGE);
	cr_expect_eq(bitmap_take(&r, 0, BITS, out), 100);
	cr_expect_eq(bitmap_take(&r, 0, BITS, out), 0);
	for (size_t i = 0; i < BITS / 64; i++)
		cr_expect_eq(out[i], 0, "word %zu", i);
	region_fini(&r);
}

Test(bitmap, clear_forgets_the_range_and_stops_at_the_bitmap_end)
{
	struct faultd_region r;

	region_init(&r);
	/* Words past the bitmap's end, to see that nothing writes there. */
	r.dirty = realloc((void *)r.dirty,
			  2 * r.dirty_words * sizeof(*r.dirty));
	cr_assert_not_null(r.dirty);
	for (size_t i = r.dirty_words; i < 2 * r.dirty_words; i++)
		atomic_store(&r.dirty[i], ~0ull);
	dirty_mark(&r, 0, BITS * PAGE);
	cr_expect_eq(dirty_clear(&r, 63 * PAGE, 3 * PAGE), 0);
	for (size_t i = 60; i < 70; i++)
		cr_expect_eq(dirty_bit(&r, i), i < 63 || i >= 66, "page %zu",
			     i);
	/* A range past the bitmap (a region grown since) is clipped. */
	cr_expect_eq(dirty_clear(&r, 250 * PAGE, 100 * PAGE), 0);
	cr_expect_eq(dirty_clear(&r, 300 * PAGE, PAGE), 0);
	cr_expect_eq(dirty_count(&r), BITS - 3 - 6);
	cr_expect(dirty_bit(&r, 249));
	for (size_t i = r.dirty_words; i < 2 * r.dirty_words; i++)
		cr_expect_eq(atomic_load(&r.dirty[i]), ~0ull, "word %zu", i);
	/* No tracking: nothing is touched. */
	r.wp_mode = WP_NONE;
	cr_expect_eq(dirty_clear(&r, 0, BITS * PAGE), 0);
	cr_expect_eq(dirty_count(&r), BITS - 9);
	region_fini(&r);
}
