// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * mac.c - scenario mac: the checks of an image's data blocks, on one core.
 *
 * Each variant checks 64 KiB blocks (IMG_BLOCK) of a 1 MiB buffer (a
 * daemon push run's most, which stays in the cache) in turn, through the
 * library's own checker (img_check(), imgcheck.c) with a random image key.
 * Variants: crc32c (an image without a key), hmac-sha256 (version 2's MAC,
 * FAULTD_CKPT_HMAC), aes256-gmac (what an authenticated image has).
 * Metric: gb_per_s of the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), the
 * speed of one core whatever else the machine runs; and ns_per_block.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "bench.h"

enum { V_CRC, V_HMAC, V_GMAC };

#define BUF_BLOCKS 16

static double cpu_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A checker of variant @v's kind, under a random image key. */
static int checker_of(unsigned int v, struct img_checker **cp)
{
	struct img_header h = { .flags = v == V_CRC ? 0 : IMG_MAC,
				.mac_alg = v == V_GMAC ? IMG_ALG_GMAC_AES256
						       : IMG_ALG_HMAC_SHA256 };
	struct img_key k = { .image_key = true };

	if (getrandom(k.key, sizeof(k.key), 0) != sizeof(k.key) ||
	    getrandom(h.id, sizeof(h.id), 0) != sizeof(h.id))
		return -EIO;
	return img_checker_new(&h, v == V_CRC ? NULL : &k, cp);
}

static int mac_run(const struct bench_opts *o, unsigned int v,
		   struct sample *out)
{
	static char *buf;
	struct img_checker *c;
	uint8_t tag[IMG_CHECK_MAX];
	uint64_t blocks = 0;
	double t0, t;
	int ret;

	if (!buf) {
		buf = aligned_alloc(4096, BUF_BLOCKS * IMG_BLOCK);
		if (!buf || getrandom(buf, 256, 0) != 256)
			return -ENOMEM;
		for (size_t i = 256; i < BUF_BLOCKS * IMG_BLOCK; i++)
			buf[i] = (char)(buf[i % 256] + i / 256);
	}
	ret = checker_of(v, &c);
	if (ret)
		return ret;
	t0 = cpu_now();
	do { /* the clock is a system call: read once per buffer */
		for (unsigned int i = 0; !ret && i < BUF_BLOCKS; i++, blocks++)
			ret = img_check(c, IMG_L_DATA, blocks,
					buf + i * IMG_BLOCK, IMG_BLOCK, tag);
		t = cpu_now() - t0;
	} while (!ret && t < o->seconds);
	img_checker_free(c);
	out->value[0] = (double)(blocks * IMG_BLOCK) / t / 1e9;
	out->value[1] = t / (double)blocks * 1e9;
	return ret;
}

const struct scenario scenario_mac = {
	.name = "mac",
	.desc = "the check of a 64 KiB image block on one core: CRC32C, "
		"HMAC-SHA256, AES-256-GMAC (GB/s of CPU time)",
	.metrics = { "gb_per_s", "ns_per_block" },
	.nmetrics = 2,
	.variants = { "crc32c", "hmac-sha256", "aes256-gmac" },
	.nvariants = 3,
	.ratios = { { V_GMAC, V_HMAC }, { V_GMAC, V_CRC } },
	.nratios = 2,
	.default_threads = 1,
	.default_size_mib = 1,
	.run = mac_run,
};
