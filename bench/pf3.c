// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * pf3.c - scenario pf3, like will-it-scale page_fault3 with dirty
 * tracking: write one byte to every page of populated memory that is
 * being tracked, then collect the dirty set, again and again.
 *
 * Variants: kernel (a MAP_SHARED file on disk, collected with msync: the
 * kernel write-protects clean pages and each first write faults to
 * page_mkwrite), faultd-wp-sync (FAULTD_REGION_WP: each first write is a
 * userfaultfd round trip) and faultd-wp-async (FAULTD_REGION_WP_ASYNC:
 * the kernel records the write, PAGEMAP_SCAN collects). Metric: page
 * writes per second, collection included.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench.h"

enum { V_KERNEL, V_SYNC, V_ASYNC };

static int run_kernel(size_t len, double secs, uint64_t *writes)
{
	char path[] = "/var/tmp/faultd-pf3-XXXXXX";
	int fd = mkstemp(path);
	double t0 = bench_now();
	char *p;

	if (fd < 0)
		return -errno;
	unlink(path);
	if (ftruncate(fd, (off_t)len) < 0)
		return -errno;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	memset(p, 1, len);
	msync(p, len, MS_SYNC);
	for (int k = 2; bench_now() - t0 < secs; k++) {
		for (size_t off = 0; off < len; off += 4096)
			p[off] = (char)k;
		msync(p, len, MS_SYNC);
		*writes += len / 4096;
	}
	munmap(p, len);
	close(fd);
	return 0;
}

static int run_tracked(struct faultd_ctx *ctx, uint64_t mode, size_t len,
		       double secs, uint64_t *writes)
{
	struct faultd_region_opts o = { .size = sizeof(o),
					.flags = mode,
					.length = len };
	uint64_t *bitmap = calloc((len / 4096 + 63) / 64, sizeof(uint64_t));
	struct faultd_region *r;
	double t0 = bench_now();
	char *p;
	int ret = bitmap ? faultd_region_create(ctx, &o, &r) : -ENOMEM;

	if (ret < 0) {
		free(bitmap);
		return ret;
	}
	p = faultd_region_base(r);
	memset(p, 1, len);
	faultd_region_dirty(r, 0, len, bitmap);
	for (int k = 2; bench_now() - t0 < secs; k++) {
		ssize_t n;

		for (size_t off = 0; off < len; off += 4096)
			p[off] = (char)k;
		n = faultd_region_dirty(r, 0, len, bitmap);
		if (n != (ssize_t)(len / 4096)) {
			ret = n < 0 ? (int)n : -EIO;
			break;
		}
		*writes += len / 4096;
	}
	faultd_region_destroy(r);
	free(bitmap);
	return ret;
}

static int pf3_run(const struct bench_opts *o, unsigned int v,
		   struct sample *out)
{
	size_t len = o->size_mib << 20;
	uint64_t writes = 0;
	struct faultd_ctx *ctx;
	double t0 = bench_now();
	int ret;

	if (v == V_KERNEL) {
		ret = run_kernel(len, o->seconds, &writes);
	} else {
		ctx = bench_ctx(FAULTD_LOCK_REGION, 1);
		if (!ctx)
			return -EIO;
		ret = run_tracked(ctx,
				  v == V_SYNC ? FAULTD_REGION_WP
					      : FAULTD_REGION_WP_ASYNC,
				  len, o->seconds, &writes);
		sample_ctx_stats(ctx, out);
		faultd_ctx_destroy(ctx);
	}
	out->value[0] = (double)writes / (bench_now() - t0);
	return ret;
}

const struct scenario scenario_pf3 = {
	.name = "pf3",
	.desc = "writes to tracked memory, then collect the dirty set "
		"(page_fault3)",
	.metrics = { "writes_per_s" },
	.nmetrics = 1,
	.variants = { "kernel", "faultd-wp-sync", "faultd-wp-async" },
	.nvariants = 3,
	.ratios = { { V_ASYNC, V_SYNC }, { V_ASYNC, V_KERNEL },
		    { V_SYNC, V_KERNEL } },
	.nratios = 3,
	.default_threads = 1,
	.default_size_mib = 16,
	.run = pf3_run,
};
