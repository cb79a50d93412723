// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * pf1.c - scenario pf1, like will-it-scale page_fault1: each thread maps a
 * fresh region, writes one byte to every page (a zero-fill missing fault
 * each), unmaps it, and repeats until the round's time is up. Every touch
 * is timed, so p50/p99 are the faulting thread's view of a fault.
 *
 * Variants: kernel (plain anonymous memory), uffd-minimal (a bare handler
 * loop per thread), faultd (a region per iteration, per-region locking),
 * faultd-global (the same in FAULTD_LOCK_GLOBAL mode).
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"
#include "uffd-minimal.h"

enum { V_KERNEL, V_MINIMAL, V_FAULTD, V_GLOBAL };

struct pf1_thread {
	unsigned int variant;
	size_t len;
	double deadline;
	struct faultd_ctx *ctx;
	uint64_t faults;
	int err;
	struct lat_hist lat;
} __attribute__((aligned(64)));

static void touch_pages(struct pf1_thread *t, char *p)
{
	for (size_t off = 0; off < t->len; off += 4096) {
		uint64_t t0 = now_ns();

		p[off] = 1;
		lat_record(&t->lat, now_ns() - t0);
	}
	t->faults += t->len / 4096;
}

static void *map_anon(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void run_kernel(struct pf1_thread *t)
{
	while (bench_now() < t->deadline) {
		char *p = map_anon(t->len);

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
		char *p = map_anon(t->len);

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

	while (bench_now() < t->deadline) {
		struct faultd_region *r;

		t->err = faultd_region_create(t->ctx, &o, &r);
		if (t->err)
			return;
		touch_pages(t, faultd_region_base(r));
		faultd_region_destroy(r);
	}
}

static void *pf1_thread_main(void *arg)
{
	struct pf1_thread *t = arg;

	switch (t->variant) {
	case V_KERNEL: run_kernel(t); break;
	case V_MINIMAL: run_minimal(t); break;
	default: run_faultd(t); break;
	}
	return NULL;
}

static int pf1_run(const struct bench_opts *o, unsigned int v,
		   struct sample *out)
{
	static struct pf1_thread th[BENCH_MAX_THREADS];
	struct faultd_ctx *ctx = NULL;
	uint64_t faults = 0;
	double t0;
	int ret;

	if (v >= V_FAULTD) {
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
					     .deadline = t0 + o->seconds,
					     .ctx = ctx };
	}
	ret = run_threads(o->threads, pf1_thread_main, th, sizeof(th[0]));
	for (unsigned int i = 0; !ret && i < o->threads; i++) {
		ret = th[i].err;
		faults += th[i].faults;
	}
	out->value[0] = (double)faults / (bench_now() - t0);
	lat_percentiles(&th[0].lat, o->threads, sizeof(th[0]),
			&out->value[1], &out->value[2]);
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
	.metrics = { "faults_per_s", "p50_ns", "p99_ns" },
	.nmetrics = 3,
	.variants = { "kernel", "uffd-minimal", "faultd", "faultd-global" },
	.nvariants = 4,
	.ratios = { { V_FAULTD, V_MINIMAL },
		    { V_FAULTD, V_KERNEL },
		    { V_FAULTD, V_GLOBAL } },
	.nratios = 3,
	.default_threads = 1,
	.default_size_mib = 32,
	.run = pf1_run,
};
