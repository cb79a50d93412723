/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * workload.h - the content of the CRIU test workload's memory: a function
 * of a seed, a region number and the offset, so that the workload (after
 * its restore) and the tests (reading a dump) check the same bytes.
 */
#ifndef FAULTD_TEST_CRIU_WORKLOAD_H
#define FAULTD_TEST_CRIU_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#define WL_PAGE 4096ul
#define WL_SPARSE_LEN (4ul << 20)	/* region 1 */
#define WL_SPARSE_CHUNK (128ul << 10)	/* its first halves are written */

/* Word @off / 8 of region @region (splitmix64 of the three). */
static inline uint64_t wl_word(uint64_t seed, unsigned int region,
			       uint64_t off)
{
	uint64_t x = seed ^ ((uint64_t)region << 56) ^
		     (off / 8 + 1) * 0x9e3779b97f4a7c15ull;

	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Whether byte @off of region @region holds data (else it is zero). */
static inline int wl_written(unsigned int region, uint64_t off)
{
	return region == 0 || off % WL_SPARSE_CHUNK < WL_SPARSE_CHUNK / 2;
}

static inline void wl_fill(uint64_t seed, unsigned int region, uint64_t off,
			   void *buf, size_t len)
{
	uint64_t *w = buf;

	for (size_t i = 0; i < len / 8; i++)
		w[i] = wl_written(region, off + i * 8)
			       ? wl_word(seed, region, off + i * 8)
			       : 0;
}

/*
 * Words of [p, p + len), region offset @off, that differ from what they
 * should hold; the offset of the first in *first (if any).
 */
static inline size_t wl_check(uint64_t seed, unsigned int region,
			      uint64_t off, const void *p, size_t len,
			      uint64_t *first)
{
	const uint64_t *w = p;
	size_t bad = 0;

	for (size_t i = 0; i < len / 8; i++) {
		uint64_t o = off + i * 8;
		uint64_t want = wl_written(region, o) ? wl_word(seed, region, o)
						      : 0;

		if (w[i] != want && !bad++ && first)
			*first = o;
	}
	return bad;
}

#endif
