// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * dirty.c - scenario dirty: the cost of dirty tracking per written page,
 * and of one collection.
 *
 * A populated region is tracked; a round writes 10% of its pages (spread
 * evenly) and collects, then writes all of them and collects. Metrics: ns
 * per written page (writes and collection together) at 10% and 100%, and
 * the time of one collection of the whole region when every page is dirty
 * and when none is. Variants: wp-sync, wp-async.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

enum { V_SYNC, V_ASYNC };

/* Write every @step-th page and collect; ns per written page. */
static double write_collect(struct faultd_region *r, char *p, size_t len,
			    size_t step, uint64_t *bitmap, int k)
{
	size_t pages = 0;
	double t0 = bench_now();

	for (size_t off = 0; off < len; off += step * 4096, pages++)
		p[off] = (char)k;
	if (faultd_region_dirty(r, 0, len, bitmap) != (ssize_t)pages)
		return -1;
	return (bench_now() - t0) * 1e9 / (double)pages;
}

static int dirty_run(const struct bench_opts *o, unsigned int v,
		     struct sample *out)
{
	size_t len = o->size_mib << 20;
	struct faultd_region_opts ro = {
		.size = sizeof(ro),
		.flags = v == V_SYNC ? FAULTD_REGION_WP : FAULTD_REGION_WP_ASYNC,
		.length = len,
	};
	uint64_t *bitmap = calloc((len / 4096 + 63) / 64, sizeof(uint64_t));
	struct faultd_ctx *ctx = bench_ctx(FAULTD_LOCK_REGION, 1);
	struct faultd_region *r;
	double t0;
	char *p;
	int ret = ctx && bitmap ? faultd_region_create(ctx, &ro, &r) : -ENOMEM;

	if (ret < 0)
		goto out;
	p = faultd_region_base(r);
	memset(p, 1, len);
	faultd_region_dirty(r, 0, len, bitmap);
	out->value[0] = write_collect(r, p, len, 10, bitmap, 2);
	out->value[1] = write_collect(r, p, len, 1, bitmap, 3);
	memset(p, 4, len);
	t0 = bench_now();
	faultd_region_dirty(r, 0, len, bitmap);
	out->value[2] = (bench_now() - t0) * 1e3;
	t0 = bench_now();
	faultd_region_dirty(r, 0, len, bitmap);
	out->value[3] = (bench_now() - t0) * 1e3;
	if (out->value[0] < 0 || out->value[1] < 0)
		ret = -EIO;
	sample_ctx_stats(ctx, out);
out:
	faultd_ctx_destroy(ctx);
	free(bitmap);
	return ret;
}

const struct scenario scenario_dirty = {
	.name = "dirty",
	.desc = "dirty tracking: ns per written page at 10%/100%, one "
		"collection",
	.metrics = { "ns_per_page_10pct", "ns_per_page_100pct",
		     "collect_all_dirty_ms", "collect_clean_ms" },
	.nmetrics = 4,
	.variants = { "wp-sync", "wp-async" },
	.nvariants = 2,
	.ratios = { { V_SYNC, V_ASYNC } },
	.nratios = 1,
	.default_threads = 1,
	.default_size_mib = 64,
	.run = dirty_run,
};
