// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * pf1.c - scenario pf1, like will-it-scale page_fault1: each thread maps a
 * fresh region, writes one byte to every page (a zero-fill missing fault
 * each), unmaps it, and repeats until the round's time is up. Every touch
 * is timed, so p50/p99 are the faulting thread's view of a fault.
 *
 * Variants: kernel (plain anonymous memory), uffd-minimal (a bare handler
 * loop per thread), faultd (a region per iteration, per-region locking),
 * faultd-global (the same in FAULTD_LOCK_GLOBAL mode); and with 2 MiB
 * pages: kernel-hugetlb (MAP_HUGETLB), faultd-hugetlb (anonymous hugetlb,
 * UFFDIO_COPY of zeros) and faultd-hugetlb-memfd (hugetlb memfd, page
 * allocated in place and mapped with UFFDIO_CONTINUE) and
 * faultd-hugetlb-reuse (the same region kept across passes and discarded
 * after each: its huge pages stay allocated and each fault clears one with
 * faultd_clear() instead of the kernel allocating and clearing a new one).
 * The huge pages are reserved for the run and given back.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"
#include "uffd-minimal.h"

enum {
	V_KERNEL,
	V_MINIMAL,
	V_FAULTD,
	V_GLOBAL,
	V_KERNEL_HUGE,
	V_FAULTD_HUGE,
	V_FAULTD_HUGE_MEMFD,
	V_FAULTD_HUGE_REUSE,
	NR_V
};

#define HPAGE (2ul << 20)

struct pf1_thread {
	unsigned int variant;
	size_t len;
	size_t stride;	/* the page size: one touch per page */
	double deadline;
	struct faultd_ctx *ctx;
	uint64_t faults;
	int err;
	struct lat_hist lat;
} __attribute__((aligned(64)));

static void touch_pages(struct pf1_thread *t, char *p)
{
	for (size_t off = 0; off < t->len; off += t->stride) {
		uint64_t t0 = now_ns();

		p[off] = 1;
		lat_record(&t->lat, now_ns() - t0);
	}
	t->faults += t->len / t->stride;
}

static void *map_anon(size_t len, bool huge)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS |
			       (huge ? MAP_HUGETLB | (21 << MAP_HUGE_SHIFT) : 0),
		       -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void run_kernel(struct pf1_thread *t)
{
	while (bench_now() < t->deadline) {
		char *p = map_anon(t->len, t->variant == V_KERNEL_HUGE);

		if (!p) {
			t->err = -ENOMEM;
			return;
		}
		touch_pages(t, p);
		munmap(p, t->len);
	}
}

static void run_minimal(struct pf1_thread *t)
{
	struct uffd_minimal m;

	t->err = uffd_minimal_start(&m);
	if (t->err)
		return;
	while (!t->err && bench_now() < t->deadline) {
		char *p = map_anon(t->len, false);

		if (!p) {
			t->err = -ENOMEM;
			break;
		}
		t->err = uffd_minimal_register(&m, p, t->len);
		if (!t->err)
			touch_pages(t, p);
		munmap(p, t->len);
	}
	uffd_minimal_stop(&m);
}

static void run_faultd(struct pf1_thread *t)
{
	struct faultd_region_opts o = { .size = sizeof(o), .length = t->len };

	if (t->variant == V_FAULTD_HUGE)
		o.flags = FAULTD_REGION_HUGETLB;
	if (t->variant == V_FAULTD_HUGE_MEMFD)
		o.flags = FAULTD_REGION_HUGETLB | FAULTD_REGION_MEMFD;

	while (bench_now() < t->deadline) {
		struct faultd_region *r;

		t->err = faultd_region_create(t->ctx, &o, &r);
		if (t->err)
			return;
		touch_pages(t, faultd_region_base(r));
		faultd_region_destroy(r);
	}
}

static void run_faultd_reuse(struct pf1_thread *t)
{
	struct faultd_region_opts o = {
		.size = sizeof(o),
		.flags = FAULTD_REGION_HUGETLB | FAULTD_REGION_MEMFD,
		.length = t->len,
	};
	struct faultd_region *r = NULL;

	t->err = faultd_region_create(t->ctx, &o, &r);
	while (!t->err && bench_now() < t->deadline) {
		touch_pages(t, faultd_region_base(r));
		t->err = faultd_region_discard(r, 0, t->len);
	}
	faultd_region_destroy(r);
}

static void *pf1_thread_main(void *arg)
{
	struct pf1_thread *t = arg;

	switch (t->variant) {
	case V_KERNEL:
	case V_KERNEL_HUGE: run_kernel(t); break;
	case V_MINIMAL: run_minimal(t); break;
	case V_FAULTD_HUGE_REUSE: run_faultd_reuse(t); break;
	default: run_faultd(t); break;
	}
	return NULL;
}

static bool is_huge(unsigned int v)
{
	return v >= V_KERNEL_HUGE;
}

static int pf1_run(const struct bench_opts *o, unsigned int v,
		   struct sample *out)
{
	static struct pf1_thread th[BENCH_MAX_THREADS];
	struct faultd_ctx *ctx = NULL;
	size_t stride = is_huge(v) ? HPAGE : 4096;
	uint64_t faults = 0;
	double t0;
	int ret;

	if (is_huge(v)) {
		ret = bench_hugepages(o->threads * ((o->size_mib << 20) / HPAGE));
		if (ret < 0) {
			out->skipped = "cannot reserve 2 MiB huge pages";
			return ret;
		}
	}
	if (v != V_KERNEL && v != V_MINIMAL && v != V_KERNEL_HUGE) {
		ctx = bench_ctx(v == V_GLOBAL ? FAULTD_LOCK_GLOBAL
					      : FAULTD_LOCK_REGION, 1);
		if (!ctx)
			return -EIO;
	}
	t0 = bench_now();
	for (unsigned int i = 0; i < o->threads; i++) {
		memset(&th[i], 0, sizeof(th[i]));
		th[i] = (struct pf1_thread){ .variant = v,
					     .len = o->size_mib << 20,
					     .stride = stride,
					     .deadline = t0 + o->seconds,
					     .ctx = ctx };
	}
	ret = run_threads(o->threads, pf1_thread_main, th, sizeof(th[0]));
	for (unsigned int i = 0; !ret && i < o->threads; i++) {
		ret = th[i].err;
		faults += th[i].faults;
	}
	out->value[0] = (double)faults / (bench_now() - t0);
	out->value[1] = out->value[0] * (double)stride / 1e9;
	lat_percentiles(&th[0].lat, o->threads, sizeof(th[0]),
			&out->value[2], &out->value[3]);
	if (ctx) {
		sample_ctx_stats(ctx, out);
		faultd_ctx_destroy(ctx);
	}
	return ret;
}

const struct scenario scenario_pf1 = {
	.name = "pf1",
	.desc = "zero-fill missing faults, fresh region per pass "
		"(page_fault1)",
	.metrics = { "faults_per_s", "gb_per_s", "p50_ns", "p99_ns" },
	.nmetrics = 4,
	.variants = { "kernel", "uffd-minimal", "faultd", "faultd-global",
		      "kernel-hugetlb", "faultd-hugetlb", "faultd-hugetlb-memfd",
		      "faultd-hugetlb-reuse" },
	.nvariants = NR_V,
	.ratios = { { V_FAULTD, V_MINIMAL },
		    { V_FAULTD, V_KERNEL },
		    { V_FAULTD, V_GLOBAL },
		    { V_FAULTD_HUGE, V_KERNEL_HUGE },
		    { V_FAULTD_HUGE_MEMFD, V_KERNEL_HUGE },
		    { V_FAULTD_HUGE_REUSE, V_KERNEL_HUGE } },
	.nratios = 6,
	.default_threads = 1,
	.default_size_mib = 32,
	.run = pf1_run,
};
