// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * lock.c - scenario lock: faults against changes to the region map.
 *
 * N threads fault in their own regions (fresh pages each pass, as pf1)
 * while one more thread changes the map as fast as it can: it creates a
 * region, touches a page, grows it, shrinks it and destroys it, and grows
 * and shrinks a heap. Every map change holds the context lock for
 * writing; the heap's growth is expand-only and takes no lock at all. With per-region locking the
 * faulting threads never take that lock; in FAULTD_LOCK_GLOBAL mode every
 * fault takes it for reading and waits behind the writer - the mmap_lock
 * contention the kernel's per-VMA locks removed.
 *
 * Metrics: faults/s of the faulting threads, their p99 touch latency, and
 * map changes/s of the churning thread. --place and --handlers (place.c)
 * place every thread, the churner as thread N, and its regions.
 */
#include <errno.h>
#include <string.h>

#include "bench.h"

enum { V_FAULTD, V_GLOBAL };

struct lock_thread {
	struct faultd_ctx *ctx;
	size_t len;
	double deadline;
	bool churner;
	struct placement pl;
	uint64_t ops;
	int err;
	struct lat_hist lat;
} __attribute__((aligned(64)));

static void fault_loop(struct lock_thread *t)
{
	struct faultd_region_opts o = { .size = sizeof(o), .length = t->len };
	struct faultd_region *r;
	char *p;

	place_region(&t->pl, &o);
	/* One region, emptied with discard each pass: no map changes here. */
	t->err = faultd_region_create(t->ctx, &o, &r);
	if (t->err)
		return;
	p = faultd_region_base(r);
	while (!t->err && bench_now() < t->deadline) {
		for (size_t off = 0; off < t->len; off += 4096) {
			uint64_t t0 = now_ns();

			p[off] = 1;
			lat_record(&t->lat, now_ns() - t0);
		}
		t->ops += t->len / 4096;
		where_app();
		where_memory(p, t->len);
		where_handlers();
		t->err = faultd_region_discard(r, 0, t->len);
	}
	faultd_region_destroy(r);
}

static void churn_loop(struct lock_thread *t)
{
	struct faultd_region_opts o = { .size = sizeof(o),
					.length = 1 << 20,
					.max_length = 4 << 20 };
	struct faultd_heap_opts ho = { .size = sizeof(ho),
				       .max_size = 16 << 20 };
	struct faultd_heap *h;
	void *prev;

	place_region(&t->pl, &o);
	t->err = faultd_heap_create(t->ctx, &ho, &h);
	while (!t->err && bench_now() < t->deadline) {
		struct faultd_region *r;

		t->err = faultd_region_create(t->ctx, &o, &r);
		if (t->err)
			break;
		((volatile char *)faultd_region_base(r))[0] = 1;
		t->err = faultd_region_resize(r, 4 << 20);
		if (!t->err)
			t->err = faultd_region_resize(r, 2 << 20);
		faultd_region_destroy(r);
		if (!t->err)
			t->err = faultd_heap_sbrk(h, 1 << 20, &prev);
		if (!t->err)
			t->err = faultd_heap_sbrk(h, -(1 << 20), &prev);
		t->ops += 6;
	}
	faultd_heap_destroy(h);
}

static void *lock_thread_main(void *arg)
{
	struct lock_thread *t = arg;

	place_self(&t->pl);
	if (t->churner)
		churn_loop(t);
	else
		fault_loop(t);
	return NULL;
}

static int lock_run(const struct bench_opts *o, unsigned int v,
		    struct sample *out)
{
	static struct lock_thread th[BENCH_MAX_THREADS + 1];
	unsigned int n = o->threads + 1;
	struct faultd_ctx *ctx;
	uint64_t faults = 0;
	double t0, p50;
	int ret;

	ctx = bench_ctx(v == V_GLOBAL ? FAULTD_LOCK_GLOBAL : FAULTD_LOCK_REGION,
			1);
	if (!ctx)
		return -EIO;
	t0 = bench_now();
	for (unsigned int i = 0; i < n; i++) {
		memset(&th[i], 0, sizeof(th[i]));
		th[i] = (struct lock_thread){ .ctx = ctx,
					      .len = o->size_mib << 20,
					      .deadline = t0 + o->seconds,
					      .churner = i == o->threads };
		place_thread(o, i, -1, &th[i].pl);
	}
	ret = run_threads(n, lock_thread_main, th, sizeof(th[0]));
	for (unsigned int i = 0; !ret && i < n; i++)
		ret = th[i].err;
	for (unsigned int i = 0; i < o->threads; i++)
		faults += th[i].ops;
	out->value[0] = (double)faults / (bench_now() - t0);
	lat_percentiles(&th[0].lat, o->threads, sizeof(th[0]), &p50,
			&out->value[1]);
	out->value[2] = (double)th[o->threads].ops / (bench_now() - t0);
	sample_ctx_stats(ctx, out);
	faultd_ctx_destroy(ctx);
	return ret;
}

const struct scenario scenario_lock = {
	.name = "lock",
	.desc = "faults while another thread creates, resizes and destroys "
		"regions",
	.metrics = { "faults_per_s", "p99_ns", "map_ops_per_s" },
	.nmetrics = 3,
	.variants = { "faultd", "faultd-global" },
	.nvariants = 2,
	.ratios = { { V_FAULTD, V_GLOBAL } },
	.nratios = 1,
	.default_threads = 1,
	.default_size_mib = 16,
	.run = lock_run,
};
