// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * clear.c - scenario clear: zeroing 2 MiB pages.
 *
 * cold: clear 2 MiB chunks cycling over a buffer 8 times the size of the
 * last-level cache, so every chunk starts out of the cache (a freshly
 * allocated huge page). hot: clear the same 2 MiB chunk again and again.
 * Variants: per-4k (one 4 KiB page at a time, the kernel before range
 * clears; kept only as this reference), each strategy forced, and
 * faultd_clear as the library chooses per call. The "best" ratio divides
 * by the fastest strategy of the same round.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench.h"

enum { V_PER4K, V_MEMSET, V_REP_STOSB, V_NT, V_CLZERO, V_AUTO, NR_V };

#define CHUNK (2ul << 20)

static size_t cold_buffer_size(void)
{
	long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);

	if (llc <= 0)
		llc = 32l << 20;
	return 8 * (size_t)llc;
}

static void clear_variant(unsigned int v, void *p, size_t len)
{
	switch (v) {
	case V_PER4K: clear_per_4k(p, len); break;
	case V_AUTO: faultd_clear(p, len); break;
	default: clear_with((int)(v - V_MEMSET) + FAULTD_CLEAR_MEMSET, p, len);
	}
}

static double gbps(unsigned int v, char *buf, size_t buflen, double secs)
{
	double t0 = bench_now(), t;
	size_t done = 0, off = 0;

	do {
		clear_variant(v, buf + off, CHUNK);
		done += CHUNK;
		off = (off + CHUNK) % buflen;
		t = bench_now() - t0;
	} while (t < secs);
	return (double)done / t / 1e9;
}

static int clear_run(const struct bench_opts *o, unsigned int v,
		     struct sample *out)
{
	static char *buf;
	static size_t buflen;
	struct faultd_clear_info info = { .size = sizeof(info) };

	faultd_clear_info(&info);
	if (v == V_CLZERO && !(info.available & (1u << FAULTD_CLEAR_CLZERO))) {
		out->skipped = "no CLZERO on this CPU";
		return -ENOTSUP;
	}
	if (!buf) {
		buflen = cold_buffer_size();
		buf = mmap(NULL, buflen, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
		if (buf == MAP_FAILED) {
			buf = NULL;
			return -ENOMEM;
		}
	}
	out->value[0] = gbps(v, buf, buflen, o->seconds / 2);
	out->value[1] = gbps(v, buf, CHUNK, o->seconds / 2);
	return 0;
}

const struct scenario scenario_clear = {
	.name = "clear",
	.desc = "zeroing 2 MiB pages, cold (cycling over 8x LLC) and hot",
	.metrics = { "cold_gb_per_s", "hot_gb_per_s" },
	.nmetrics = 2,
	.variants = { "per-4k", "memset", "rep-stosb", "nt-store", "clzero",
		      "faultd_clear" },
	.nvariants = NR_V,
	.ratios = { { V_AUTO, V_PER4K }, { V_AUTO, RATIO_BEST } },
	.nratios = 2,
	.default_threads = 1,
	.default_size_mib = 2,
	.run = clear_run,
};
