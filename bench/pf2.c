// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * pf2.c - scenario pf2, like will-it-scale page_fault2: write one byte to
 * every page of a copy-on-write mapping of populated memory, then throw
 * the copy away, again and again.
 *
 * Variants: kernel (a MAP_PRIVATE mapping of a populated memfd: the kernel
 * copies each page on the write), faultd-clone (a clone of a populated
 * anonymous region: each write fault reads the parent's page and installs
 * a private copy) and faultd-clone-memfd (a clone of a memfd region: the
 * fault maps the shared page with UFFDIO_CONTINUE, the kernel copies it on
 * the write). Metric: write faults per second.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench.h"

enum { V_KERNEL, V_CLONE, V_CLONE_MEMFD };

static int run_kernel(size_t len, double secs, uint64_t *faults)
{
	int fd = memfd_create("pf2", MFD_CLOEXEC);
	char *p;
	double t0 = bench_now();

	if (fd < 0 || ftruncate(fd, (off_t)len) < 0)
		return -errno;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	memset(p, 1, len); /* populate the page cache */
	munmap(p, len);
	while (bench_now() - t0 < secs) {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
		if (p == MAP_FAILED)
			return -errno;
		for (size_t off = 0; off < len; off += 4096)
			p[off] = 2;
		munmap(p, len);
		*faults += len / 4096;
	}
	close(fd);
	return 0;
}

static int run_clone(struct faultd_ctx *ctx, bool memfd, size_t len,
		     double secs, uint64_t *faults)
{
	struct faultd_region_opts o = {
		.size = sizeof(o),
		.flags = memfd ? FAULTD_REGION_MEMFD : 0,
		.length = len,
	};
	struct faultd_clone_opts co = { .size = sizeof(co) };
	struct faultd_region *parent;
	double t0;
	int ret = faultd_region_create(ctx, &o, &parent);

	if (ret < 0)
		return ret;
	memset(faultd_region_base(parent), 1, len);
	t0 = bench_now();
	while (!ret && bench_now() - t0 < secs) {
		struct faultd_region *c;
		char *p;

		ret = faultd_region_clone(parent, &co, &c);
		if (ret < 0)
			break;
		p = faultd_region_base(c);
		for (size_t off = 0; off < len; off += 4096)
			p[off] = 2;
		faultd_region_destroy(c);
		*faults += len / 4096;
	}
	faultd_region_destroy(parent);
	return ret;
}

static int pf2_run(const struct bench_opts *o, unsigned int v,
		   struct sample *out)
{
	size_t len = o->size_mib << 20;
	uint64_t faults = 0;
	struct faultd_ctx *ctx;
	double t0 = bench_now();
	int ret;

	if (v == V_KERNEL) {
		ret = run_kernel(len, o->seconds, &faults);
	} else {
		ctx = bench_ctx(FAULTD_LOCK_REGION, 1);
		if (!ctx)
			return -EIO;
		ret = run_clone(ctx, v == V_CLONE_MEMFD, len, o->seconds,
				&faults);
		sample_ctx_stats(ctx, out);
		faultd_ctx_destroy(ctx);
	}
	out->value[0] = (double)faults / (bench_now() - t0);
	return ret;
}

const struct scenario scenario_pf2 = {
	.name = "pf2",
	.desc = "write faults on a copy-on-write clone of populated memory "
		"(page_fault2)",
	.metrics = { "faults_per_s" },
	.nmetrics = 1,
	.variants = { "kernel", "faultd-clone", "faultd-clone-memfd" },
	.nvariants = 3,
	.ratios = { { V_CLONE, V_KERNEL }, { V_CLONE_MEMFD, V_KERNEL } },
	.nratios = 2,
	.default_threads = 1,
	.default_size_mib = 16,
	.run = pf2_run,
};
