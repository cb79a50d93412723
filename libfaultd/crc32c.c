// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * crc32c.c - CRC32C (Castagnoli), the checksum of image chunks.
 *
 * With SSE 4.2 the CPU's crc32 instruction, on three streams at once - one
 * instruction has a latency of three cycles and a throughput of one - whose
 * CRCs are then combined by "shifting" the first ones over the length of
 * the rest (multiplying by x^(8n) modulo the polynomial, with tables made
 * once), the method of Mark Adler's crc32c.c; otherwise a byte-wise table.
 * Both compute the standard CRC32C: initial value ~0, reflected
 * polynomial 0x82f63b78, final complement; crc32c("123456789") is
 * 0xe3069283.
 */
#include <pthread.h>
#include <string.h>

#include "internal.h"

#define POLY 0x82f63b78u

#define STREAM_LONG 8192
#define STREAM_SHORT 256

static uint32_t table[256];
static uint32_t shift_long[4][256];	/* x^(8 * STREAM_LONG) */
static uint32_t shift_short[4][256];	/* x^(8 * STREAM_SHORT) */
static bool have_sse42;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* Over GF(2): the 32x32 matrix @mat (a column per bit) times @vec. */
static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
	uint32_t sum = 0;

	for (; vec; vec >>= 1, mat++)
		if (vec & 1)
			sum ^= *mat;
	return sum;
}

static void gf2_square(uint32_t *sq, const uint32_t *mat)
{
	for (int n = 0; n < 32; n++)
		sq[n] = gf2_times(mat, mat[n]);
}

/* The operator that appends @len zero bytes to a CRC register. */
static void zeros_op(uint32_t *even, size_t len)
{
	uint32_t odd[32], row = 1;

	odd[0] = POLY; /* one zero bit */
	for (int n = 1; n < 32; n++, row <<= 1)
		odd[n] = row;
	gf2_square(even, odd); /* two bits */
	gf2_square(odd, even); /* four */
	for (;;) { /* each square doubles: a byte, two, four... */
		gf2_square(even, odd);
		len >>= 1;
		if (!len)
			return;
		gf2_square(odd, even);
		len >>= 1;
		if (!len)
			break;
	}
	memcpy(even, odd, sizeof(odd));
}

/* Byte-wise tables applying the operator of @len zero bytes. */
static void zeros_table(uint32_t t[4][256], size_t len)
{
	uint32_t op[32];

	zeros_op(op, len);
	for (uint32_t n = 0; n < 256; n++)
		for (int k = 0; k < 4; k++)
			t[k][n] = gf2_times(op, n << (8 * k));
}

static uint32_t crc_shift(uint32_t t[4][256], uint32_t crc)
{
	return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^
	       t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
}

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
		table[i] = c;
	}
	zeros_table(shift_long, STREAM_LONG);
	zeros_table(shift_short, STREAM_SHORT);
#if defined(__x86_64__)
	have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_bytes(uint32_t c, const uint8_t *p, size_t len)
{
	while (len--)
		c = table[(c ^ *p++) & 0xff] ^ (c >> 8);
	return c;
}

#if defined(__x86_64__)
/* Three streams of @n bytes each at @p, combined into @c. */
__attribute__((target("sse4.2"))) static uint64_t
crc_hw3(uint64_t c, const uint8_t *p, size_t n, uint32_t shift[4][256])
{
	uint64_t c1 = 0, c2 = 0;

	for (size_t i = 0; i < n; i += 8) {
		uint64_t a, b, d;

		__builtin_memcpy(&a, p + i, 8);
		__builtin_memcpy(&b, p + n + i, 8);
		__builtin_memcpy(&d, p + 2 * n + i, 8);
		c = __builtin_ia32_crc32di(c, a);
		c1 = __builtin_ia32_crc32di(c1, b);
		c2 = __builtin_ia32_crc32di(c2, d);
	}
	c = crc_shift(shift, (uint32_t)c) ^ c1;
	return crc_shift(shift, (uint32_t)c) ^ c2;
}

__attribute__((target("sse4.2"))) static uint32_t
crc_hw(uint32_t c, const uint8_t *p, size_t len)
{
	uint64_t c64 = c;

	for (; len >= 3 * STREAM_LONG; p += 3 * STREAM_LONG,
					len -= 3 * STREAM_LONG)
		c64 = crc_hw3(c64, p, STREAM_LONG, shift_long);
	for (; len >= 3 * STREAM_SHORT; p += 3 * STREAM_SHORT,
					 len -= 3 * STREAM_SHORT)
		c64 = crc_hw3(c64, p, STREAM_SHORT, shift_short);
	for (; len >= 8; p += 8, len -= 8) {
		uint64_t v;

		__builtin_memcpy(&v, p, 8);
		c64 = __builtin_ia32_crc32di(c64, v);
	}
	c = (uint32_t)c64;
	for (; len; p++, len--)
		c = __builtin_ia32_crc32qi(c, *p);
	return c;
}
#endif

/* The table-driven CRC32C, for checking the fast one. */
uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&init_once, crc_init);
	return ~crc_bytes(~crc, buf, len);
}

/* crc32c() - the CRC32C of [buf, buf + len), continuing from @crc (0 to
 * start). */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
	uint32_t c = ~crc;

	pthread_once(&init_once, crc_init);
#if defined(__x86_64__)
	if (have_sse42)
		return ~crc_hw(c, buf, len);
#endif
	return ~crc_bytes(c, buf, len);
}
