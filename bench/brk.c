// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * brk.c - scenario brk: moving a heap's break.
 *
 * aim9 brk_test: sbrk(+1 MiB), then { sbrk(-64 KiB), 16 x sbrk(+4 KiB) }
 * in a loop; will-it-scale brk1: { sbrk(+4 KiB), sbrk(-4 KiB) }. Each with
 * and without writing a byte to every page the growth exposes. Variants:
 * kernel (the process's own brk, run in a child that does nothing else so
 * malloc does not move the break), faultd-heap (default trim threshold:
 * shrunk pages are kept and cleared when re-exposed) and faultd-heap-trim
 * (every shrink gives its pages back, so every touch after a growth is a
 * userfaultfd fault: how far the fault cost dominates). Metrics: calls/s.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

enum { V_KERNEL, V_HEAP, V_HEAP_TRIM };

typedef int (*sbrk_fn)(void *ctx, intptr_t incr, void **prev);

static int kernel_sbrk(void *unused, intptr_t incr, void **prev)
{
	void *p = sbrk(incr);

	(void)unused;
	if (p == (void *)-1)
		return -ENOMEM;
	*prev = p;
	return 0;
}

static int heap_sbrk(void *heap, intptr_t incr, void **prev)
{
	return faultd_heap_sbrk(heap, incr, prev);
}

/* aim9 brk_test for @secs; returns calls per second, or -1. */
static double aim9(sbrk_fn fn, void *c, double secs, bool touch)
{
	double t0 = bench_now();
	uint64_t calls = 1;
	void *p;

	if (fn(c, 1 << 20, &p))
		return -1;
	do {
		for (int i = 0; i < 64; i++) {
			if (fn(c, -(64 << 10), &p))
				return -1;
			for (int k = 0; k < 16; k++) {
				if (fn(c, 4096, &p))
					return -1;
				if (touch)
					*(volatile char *)p = 1;
			}
			calls += 17;
		}
	} while (bench_now() - t0 < secs);
	fn(c, -(1 << 20), &p);
	return (double)calls / (bench_now() - t0);
}

static double brk1(sbrk_fn fn, void *c, double secs, bool touch)
{
	double t0 = bench_now();
	uint64_t calls = 0;
	void *p;

	do {
		for (int i = 0; i < 256; i++) {
			if (fn(c, 4096, &p))
				return -1;
			if (touch)
				*(volatile char *)p = 1;
			if (fn(c, -4096, &p))
				return -1;
		}
		calls += 512;
	} while (bench_now() - t0 < secs);
	return (double)calls / (bench_now() - t0);
}

static void run_all(sbrk_fn fn, void *c, double secs, double *out)
{
	out[0] = aim9(fn, c, secs / 4, false);
	out[1] = brk1(fn, c, secs / 4, false);
	out[2] = aim9(fn, c, secs / 4, true);
	out[3] = brk1(fn, c, secs / 4, true);
}

static int run_kernel(double secs, double *out)
{
	double *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
			      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int status = -1;
	pid_t pid;

	if (shared == MAP_FAILED)
		return -ENOMEM;
	pid = fork();
	if (pid == 0) {
		run_all(kernel_sbrk, NULL, secs, shared);
		_exit(0);
	}
	if (pid > 0)
		waitpid(pid, &status, 0);
	memcpy(out, shared, 4 * sizeof(double));
	munmap(shared, 4096);
	return status == 0 ? 0 : -EIO;
}

static int brk_run(const struct bench_opts *o, unsigned int v,
		   struct sample *out)
{
	struct faultd_heap_opts ho = {
		.size = sizeof(ho),
		.max_size = 64ul << 20,
		.trim_threshold = v == V_HEAP_TRIM ? 1 : 0,
	};
	struct faultd_heap *h;
	struct faultd_ctx *ctx;
	int ret;

	if (v == V_KERNEL)
		return run_kernel(o->seconds, out->value);
	ctx = bench_ctx(FAULTD_LOCK_REGION, 1);
	if (!ctx)
		return -EIO;
	ret = faultd_heap_create(ctx, &ho, &h);
	if (!ret) {
		run_all(heap_sbrk, h, o->seconds, out->value);
		sample_ctx_stats(ctx, out);
	}
	faultd_ctx_destroy(ctx);
	for (int i = 0; i < 4 && !ret; i++)
		if (out->value[i] < 0)
			ret = -EIO;
	return ret;
}

const struct scenario scenario_brk = {
	.name = "brk",
	.desc = "moving a heap's break: aim9 brk_test and will-it-scale brk1",
	.metrics = { "aim9_calls_per_s", "brk1_calls_per_s",
		     "aim9_touch_calls_per_s", "brk1_touch_calls_per_s" },
	.nmetrics = 4,
	.variants = { "kernel", "faultd-heap", "faultd-heap-trim" },
	.nvariants = 3,
	.ratios = { { V_HEAP, V_KERNEL }, { V_HEAP_TRIM, V_KERNEL } },
	.nratios = 2,
	.default_threads = 1,
	.default_size_mib = 64,
	.run = brk_run,
};
