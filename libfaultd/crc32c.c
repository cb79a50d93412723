// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * crc32c.c - CRC32C (Castagnoli), the checksum of image chunks.
 *
 * With SSE 4.2 the CPU's crc32 instruction, 8 bytes at a time; otherwise
 * a byte-wise table. Both compute the same standard CRC32C: initial value
 * ~0, reflected polynomial 0x82f63b78, final complement; crc32c("123456789")
 * is 0xe3069283.
 */
#include <pthread.h>

#include "internal.h"

#define POLY 0x82f63b78u

static uint32_t table[256];
static bool have_sse42;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
		table[i] = c;
	}
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
__attribute__((target("sse4.2"))) static uint32_t
crc_hw(uint32_t c, const uint8_t *p, size_t len)
{
	uint64_t c64 = c;

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
