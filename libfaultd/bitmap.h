/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * bitmap.h - bits of page bitmaps: arrays of 64-bit words, bit i in word
 * bit_word(i) under bit_mask(i), as the kernel's BIT_WORD()/BIT_MASK().
 * Every page bitmap of the library and the daemon (dirty pages, claims,
 * a clone's own pages, the evictor's used bits, poisons, a daemon space's
 * done and zero pages) is indexed through these, plain or atomic alike:
 * the helpers below for whole-bit operations, bit_word()/bit_mask() for
 * the rest. The caller of an atomic one picks its memory order.
 */
#ifndef FAULTD_BITMAP_H
#define FAULTD_BITMAP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The word of bit @i. */
static inline size_t bit_word(uint64_t i)
{
	return (size_t)(i / 64);
}

/* Bit @i within its word. */
static inline uint64_t bit_mask(uint64_t i)
{
	return 1ull << (i % 64);
}

/* Words for @bits bits. */
static inline size_t bitmap_words(uint64_t bits)
{
	return (size_t)((bits + 63) / 64);
}

/* Is bit @i of plain bitmap @map set? */
static inline bool bitmap_test(const uint64_t *map, uint64_t i)
{
	return map[bit_word(i)] & bit_mask(i);
}

/* Set bits [from, to) of plain bitmap @map. */
static inline void bitmap_set_range(uint64_t *map, uint64_t from, uint64_t to)
{
	for (uint64_t i = from; i < to; i++)
		map[bit_word(i)] |= bit_mask(i);
}

/*
 * Bitmaps that threads change concurrently (_Atomic words), a bit at a
 * time, as the kernel's test_bit(), test_and_set_bit() and
 * test_and_clear_bit(). @mo orders the access against the caller's other
 * accesses (memory_order_relaxed where a lock does, seq_cst where two
 * threads each change their bit and then read the other's).
 */

/* Is bit @i of @map set? */
static inline bool bitmap_test_atomic(_Atomic uint64_t *map, uint64_t i,
				      memory_order mo)
{
	return atomic_load_explicit(&map[bit_word(i)], mo) & bit_mask(i);
}

/* Set bit @i of @map; whether it was set before. */
static inline bool bitmap_test_and_set(_Atomic uint64_t *map, uint64_t i,
				       memory_order mo)
{
	return atomic_fetch_or_explicit(&map[bit_word(i)], bit_mask(i), mo) &
	       bit_mask(i);
}

/* Clear bit @i of @map; whether it was set before. */
static inline bool bitmap_test_and_clear(_Atomic uint64_t *map, uint64_t i,
					 memory_order mo)
{
	return atomic_fetch_and_explicit(&map[bit_word(i)], ~bit_mask(i),
					 mo) &
	       bit_mask(i);
}

#endif /* FAULTD_BITMAP_H */
