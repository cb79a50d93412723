// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * pf1.c - scenario pf1, like will-it-scale page_fault1: each thread maps a
 * fresh region, writes one byte to every page (a zero-fill missing fault
 * each), unmaps it, and repeats until the round's time is up. Every touch
 * is timed, so p50/p99 are the faulting thread's view of a fault.
 *
 * Variants, all in one run:
 * - kernel: plain anonymous memory.
 * - uffd-minimal: a bare handler loop per thread (bench/uffd-minimal.c),
 *   placed by the scheduler; uffd-minimal-same-cpu: the same, with the
 *   faulting thread and its handler pinned to one CPU.
 * - faultd: a region per pass, the library's defaults; faultd-global: the
 *   same in FAULTD_LOCK_GLOBAL mode.
 * - faultd-same-cpu, faultd-per-cpu, faultd-busy-poll: handler placement
 *   (FAULTD_PLACE_CPU with the faulting thread on that CPU too,
 *   FAULTD_PLACE_PER_CPU, a 50 us busy poll).
 * - faultd-sigbus: FAULTD_REGION_SAME_THREAD, no wake-up at all.
 * - faultd-fa64k, faultd-sigbus-fa64k: 64 KiB zero-fill fault-around.
 * - with 2 MiB pages: kernel-hugetlb (MAP_HUGETLB), faultd-hugetlb
 *   (anonymous hugetlb, UFFDIO_COPY of zeros), faultd-hugetlb-memfd (page
 *   allocated in place, UFFDIO_CONTINUE) and faultd-hugetlb-reuse (the
 *   same region kept across passes and discarded after each: its pages
 *   stay allocated and each fault clears one with faultd_clear()). The
 *   huge pages are reserved for the run and given back.
 *
 * --place and --handlers (place.c) apply to every variant alike: the
 * threads, the memory the bench maps itself (mbind) and the regions; a
 * variant that pins its threads or handlers itself keeps its CPUs.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"
#include "uffd-minimal.h"

#define HPAGE (2ul << 20)
#define SAME_CPU (1u << 0)   /* pin each faulting thread (and handler) */
#define HUGE (1u << 1)	     /* 2 MiB pages */
#define REUSE (1u << 2)	     /* one region, discarded after each pass */

enum kind { KERNEL, MINIMAL, FAULTD };

struct pf1_variant {
	const char *name;
	enum kind kind;
	unsigned int how;	 /* SAME_CPU, HUGE, REUSE */
	unsigned int lock_mode;
	uint64_t flags;		 /* region flags */
	unsigned int placement;
	unsigned int busy_poll_us;
	size_t fault_around;
};

static const struct pf1_variant variants[] = {
	{ "kernel", KERNEL },
	{ "uffd-minimal", MINIMAL },
	{ "uffd-minimal-same-cpu", MINIMAL, SAME_CPU },
	{ "faultd", FAULTD },
	{ "faultd-global", FAULTD, .lock_mode = FAULTD_LOCK_GLOBAL },
	{ "faultd-same-cpu", FAULTD, SAME_CPU, .placement = FAULTD_PLACE_CPU },
	{ "faultd-per-cpu", FAULTD, .placement = FAULTD_PLACE_PER_CPU },
	{ "faultd-busy-poll", FAULTD, .busy_poll_us = 50 },
	{ "faultd-sigbus", FAULTD, .flags = FAULTD_REGION_SAME_THREAD },
	{ "faultd-fa64k", FAULTD, .fault_around = 64 << 10 },
	{ "faultd-sigbus-fa64k", FAULTD, .flags = FAULTD_REGION_SAME_THREAD,
	  .fault_around = 64 << 10 },
	{ "kernel-hugetlb", KERNEL, HUGE },
	{ "faultd-hugetlb", FAULTD, HUGE, .flags = FAULTD_REGION_HUGETLB },
	{ "faultd-hugetlb-memfd", FAULTD, HUGE,
	  .flags = FAULTD_REGION_HUGETLB | FAULTD_REGION_MEMFD },
	{ "faultd-hugetlb-reuse", FAULTD, HUGE | REUSE,
	  .flags = FAULTD_REGION_HUGETLB | FAULTD_REGION_MEMFD },
};

enum { V_KERNEL, V_MINIMAL, V_MINIMAL_SAME, V_FAULTD, V_GLOBAL, V_SAME,
       V_PER_CPU, V_BUSY, V_SIGBUS, V_FA, V_SIGBUS_FA, V_KHUGE, V_HUGE,
       V_HUGE_MEMFD, V_HUGE_REUSE, NR_V };

struct pf1_thread {
	const struct pf1_variant *v;
	int cpu;		/* with SAME_CPU */
	size_t len, stride;
	double deadline;
	struct faultd_ctx *ctx;
	struct placement pl;
	uint64_t faults;
	int err;
	struct lat_hist lat;
} __attribute__((aligned(64)));

static void pin_self(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static void touch_pages(struct pf1_thread *t, char *p)
{
	for (size_t off = 0; off < t->len; off += t->stride) {
		uint64_t t0 = now_ns();

		p[off] = 1;
		lat_record(&t->lat, now_ns() - t0);
	}
	t->faults += t->len / t->stride;
	where_app();
	where_memory(p, t->len);
}

static char *map_anon(size_t len, bool huge)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS |
			       (huge ? MAP_HUGETLB | (21 << MAP_HUGE_SHIFT) : 0),
		       -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void run_kernel(struct pf1_thread *t)
{
	while (!t->err && bench_now() < t->deadline) {
		char *p = map_anon(t->len, t->v->how & HUGE);

		if (!p) {
			t->err = -ENOMEM;
			return;
		}
		t->err = place_mbind(&t->pl, p, t->len);
		if (!t->err)
			touch_pages(t, p);
		munmap(p, t->len);
	}
}

static void run_minimal(struct pf1_thread *t)
{
	struct uffd_minimal m;

	t->err = uffd_minimal_start(&m, t->cpu);
	if (t->err)
		return;
	pthread_setname_np(m.thread, "uffd-min"); /* for where_handlers() */
	if (t->cpu < 0)
		place_handler(&t->pl, m.thread);
	while (!t->err && bench_now() < t->deadline) {
		char *p = map_anon(t->len, false);

		if (!p) {
			t->err = -ENOMEM;
			break;
		}
		t->err = place_mbind(&t->pl, p, t->len);
		if (!t->err)
			t->err = uffd_minimal_register(&m, p, t->len);
		if (!t->err) {
			touch_pages(t, p);
			where_handlers();
		}
		munmap(p, t->len);
	}
	uffd_minimal_stop(&m);
}

static void region_opts(const struct pf1_thread *t, struct faultd_region_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->length = t->len;
	o->flags = t->v->flags;
	o->placement = t->v->placement;
	o->cpu = t->cpu < 0 ? 0 : (unsigned int)t->cpu;
	o->busy_poll_us = t->v->busy_poll_us;
	o->fault_around = t->v->fault_around;
	place_region(&t->pl, o);
}

static void run_faultd(struct pf1_thread *t)
{
	struct faultd_region_opts o;
	struct faultd_region *r = NULL;

	region_opts(t, &o);
	if (t->v->how & REUSE)
		t->err = faultd_region_create(t->ctx, &o, &r);
	while (!t->err && bench_now() < t->deadline) {
		if (!(t->v->how & REUSE))
			t->err = faultd_region_create(t->ctx, &o, &r);
		if (t->err)
			return;
		touch_pages(t, faultd_region_base(r));
		where_handlers();
		if (t->v->how & REUSE)
			t->err = faultd_region_discard(r, 0, t->len);
		else
			faultd_region_destroy(r);
	}
	if (t->v->how & REUSE)
		faultd_region_destroy(r);
}

static void *pf1_thread_main(void *arg)
{
	struct pf1_thread *t = arg;

	if (t->cpu >= 0)
		pin_self(t->cpu);
	else
		place_self(&t->pl);
	switch (t->v->kind) {
	case KERNEL: run_kernel(t); break;
	case MINIMAL: run_minimal(t); break;
	case FAULTD: run_faultd(t); break;
	}
	return NULL;
}

static int reserve_huge(const struct bench_opts *o, struct sample *out)
{
	int ret = bench_hugepages(o->threads * ((o->size_mib << 20) / HPAGE));

	if (ret < 0)
		out->skipped = "cannot reserve 2 MiB huge pages";
	return ret;
}

static int pf1_run(const struct bench_opts *o, unsigned int vi,
		   struct sample *out)
{
	static struct pf1_thread th[BENCH_MAX_THREADS];
	const struct pf1_variant *v = &variants[vi];
	size_t stride = v->how & HUGE ? HPAGE : 4096;
	struct faultd_ctx *ctx = NULL;
	uint64_t faults = 0;
	double t0;
	int ret;

	if ((v->how & HUGE) && (ret = reserve_huge(o, out)) < 0)
		return ret;
	if (v->kind == FAULTD && !(ctx = bench_ctx(v->lock_mode, 1)))
		return -EIO;
	t0 = bench_now();
	for (unsigned int i = 0; i < o->threads; i++) {
		memset(&th[i], 0, sizeof(th[i]));
		th[i] = (struct pf1_thread){
			.v = v,
			.cpu = v->how & SAME_CPU ? place_cpu(o, i) : -1,
			.len = o->size_mib << 20,
			.stride = stride,
			.deadline = t0 + o->seconds,
			.ctx = ctx,
		};
		place_thread(o, i, th[i].cpu, &th[i].pl);
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
	.variants = {
		"kernel", "uffd-minimal", "uffd-minimal-same-cpu", "faultd",
		"faultd-global", "faultd-same-cpu", "faultd-per-cpu",
		"faultd-busy-poll", "faultd-sigbus", "faultd-fa64k",
		"faultd-sigbus-fa64k", "kernel-hugetlb", "faultd-hugetlb",
		"faultd-hugetlb-memfd", "faultd-hugetlb-reuse",
	},
	.nvariants = NR_V,
	.ratios = {
		{ V_FAULTD, V_MINIMAL },
		{ V_FAULTD, V_MINIMAL_SAME },
		{ V_FAULTD, V_KERNEL },
		{ V_FAULTD, V_GLOBAL },
		{ V_SAME, V_MINIMAL_SAME },
		{ V_SIGBUS, V_MINIMAL_SAME },
		{ V_FA, V_KERNEL },
		{ V_SIGBUS_FA, V_KERNEL },
		{ V_HUGE, V_KHUGE },
		{ V_HUGE_MEMFD, V_KHUGE },
		{ V_HUGE_REUSE, V_KHUGE },
	},
	.nratios = 11,
	.default_threads = 1,
	.default_size_mib = 32,
	.run = pf1_run,
};
