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
 * faultd-sigbus: the faulting threads' regions are FAULTD_REGION_SAME_THREAD
 * (each resolves its own faults in its SIGBUS handler): no handler thread,
 * no wake-up, and no retry of the fault under the kernel's mmap_lock -
 * which every fault resolved by another thread takes on 6.x (the per-VMA
 * lock covers only the first attempt), in both lock modes alike. Against
 * faultd-sigbus-global (its faults under the context lock, taken in the
 * SIGBUS handler) it is the A/B without the kernel's retry.
 *
 * Metrics: faults/s of the faulting threads, their p99 touch latency, and
 * map changes/s of the churning thread. --place and --handlers (place.c)
 * place every thread, the churner as thread N, and its regions. Each round
 * also accounts for its time (account.c): per role (faulting threads,
 * their handlers, the churner) CPU and run-queue time over a window that
 * starts after each region's first fault, the others' load on our CPUs,
 * and the library's lock times. Threads are named lock-fault<i> and
 * lock-churn for tools that account by thread (bench/trace-report).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

enum { V_FAULTD, V_GLOBAL, V_SIGBUS, V_SIGBUS_GLOBAL };

struct lock_thread {
	struct faultd_ctx *ctx;
	size_t len;
	double deadline;
	bool churner;
	bool same_thread;	/* its region's faults: in its SIGBUS handler */
	unsigned int index;
	struct placement pl;
	uint64_t ops;
	int err;
	struct lat_hist lat;
	/* Time over the measured window: the thread's own, and for a
	 * faulting thread its region's handlers'. */
	struct sched_time self, handlers;
	unsigned int nhandlers;
	bool window;		/* the times above were measured */
} __attribute__((aligned(64)));

/* The schedstat of @r's handler threads, summed; -1 if one is missing. */
static int handlers_read(struct faultd_region *r, struct sched_time *t)
{
	struct faultd_group *g = r->group;

	memset(t, 0, sizeof(*t));
	for (unsigned int i = 0; i < g->nthreads; i++) {
		struct sched_time one, zero = { 0 };
		pid_t tid = atomic_load(&g->handlers[i].tid);

		if (!tid || sched_read(tid, &one) < 0)
			return -1;
		sched_since(t, &zero, &one);
	}
	return 0;
}

/*
 * The window starts after the region's first fault, so that its handler
 * threads have run (and made their ids known); it ends with the loop.
 */
static void fault_window(struct lock_thread *t, struct faultd_region *r,
			 struct sched_time *self, struct sched_time *hnd)
{
	struct sched_time s, h;

	if (sched_read(0, &s) < 0 || handlers_read(r, &h) < 0)
		return;
	sched_since(&t->self, self, &s);
	sched_since(&t->handlers, hnd, &h);
	t->nhandlers = r->group->nthreads;
	t->window = true;
}

static void fault_loop(struct lock_thread *t)
{
	struct faultd_region_opts o = { .size = sizeof(o), .length = t->len };
	struct sched_time self0, hnd0;
	struct faultd_region *r;
	char *p;

	if (t->same_thread)
		o.flags |= FAULTD_REGION_SAME_THREAD;
	place_region(&t->pl, &o);
	/* One region, emptied with discard each pass: no map changes here. */
	t->err = faultd_region_create(t->ctx, &o, &r);
	if (t->err)
		return;
	p = faultd_region_base(r);
	((volatile char *)p)[0] = 1;
	if (sched_read(0, &self0) < 0 || handlers_read(r, &hnd0) < 0)
		t->err = -EIO;
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
	/* Page 0 of the first pass faulted before the window. */
	if (t->ops)
		t->ops--;
	if (!t->err)
		fault_window(t, r, &self0, &hnd0);
	faultd_region_destroy(r);
}

static void churn_loop(struct lock_thread *t)
{
	struct faultd_region_opts o = { .size = sizeof(o),
					.length = 1 << 20,
					.max_length = 4 << 20 };
	struct faultd_heap_opts ho = { .size = sizeof(ho),
				       .max_size = 16 << 20 };
	struct sched_time s0, s1;
	struct faultd_heap *h;
	void *prev;

	place_region(&t->pl, &o);
	t->err = faultd_heap_create(t->ctx, &ho, &h);
	if (sched_read(0, &s0) < 0)
		t->err = -EIO;
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
	if (!t->err && sched_read(0, &s1) == 0)
		sched_since(&t->self, &s0, &s1);
	faultd_heap_destroy(h);
}

static void *lock_thread_main(void *arg)
{
	struct lock_thread *t = arg;
	char name[16];

	/* Named for tools that account by thread (perf sched, top -H). */
	if (t->churner)
		snprintf(name, sizeof(name), "lock-churn");
	else
		snprintf(name, sizeof(name), "lock-fault%u", t->index % 1000);
	pthread_setname_np(pthread_self(), name);
	place_self(&t->pl);
	if (t->churner)
		churn_loop(t);
	else
		fault_loop(t);
	return NULL;
}

/* Each thread's window, by role, into @out. */
static void lock_account(const struct lock_thread *th, unsigned int n,
			 struct sample *out)
{
	struct sched_time zero = { 0 };

	out->has_roles = true;
	for (unsigned int i = 0; i < n; i++) {
		const struct lock_thread *t = &th[i];

		if (t->churner) {
			sched_since(&out->role[ROLE_CHURN], &zero, &t->self);
			out->role_threads[ROLE_CHURN]++;
			continue;
		}
		if (!t->window)
			out->has_roles = false;
		sched_since(&out->role[ROLE_APP], &zero, &t->self);
		sched_since(&out->role[ROLE_HANDLER], &zero, &t->handlers);
		out->role_threads[ROLE_APP]++;
		out->role_threads[ROLE_HANDLER] += t->nhandlers;
		out->window_ops += (double)t->ops;
	}
}

static int lock_run(const struct bench_opts *o, unsigned int v,
		    struct sample *out)
{
	static struct lock_thread th[BENCH_MAX_THREADS + 1];
	unsigned int n = o->threads + 1;
	struct machine_time m0, m1;
	struct faultd_ctx *ctx;
	uint64_t faults = 0;
	double t0, p50;
	int ret;

	ctx = bench_ctx(v == V_GLOBAL || v == V_SIGBUS_GLOBAL
				? FAULTD_LOCK_GLOBAL
				: FAULTD_LOCK_REGION,
			1);
	if (!ctx)
		return -EIO;
	t0 = bench_now();
	for (unsigned int i = 0; i < n; i++) {
		memset(&th[i], 0, sizeof(th[i]));
		th[i] = (struct lock_thread){ .ctx = ctx,
					      .len = o->size_mib << 20,
					      .deadline = t0 + o->seconds,
					      .churner = i == o->threads,
					      .same_thread = v == V_SIGBUS ||
							     v == V_SIGBUS_GLOBAL,
					      .index = i };
		place_thread(o, i, -1, &th[i].pl);
	}
	machine_read(&m0);
	ret = run_threads(n, lock_thread_main, th, sizeof(th[0]));
	machine_read(&m1);
	machine_since(&out->machine, &m0, &m1);
	for (unsigned int i = 0; !ret && i < n; i++)
		ret = th[i].err;
	for (unsigned int i = 0; i < o->threads; i++)
		faults += th[i].ops;
	out->value[0] = (double)faults / (bench_now() - t0);
	lat_percentiles(&th[0].lat, o->threads, sizeof(th[0]), &p50,
			&out->value[1]);
	out->value[2] = (double)th[o->threads].ops / (bench_now() - t0);
	sample_ctx_stats(ctx, out);
	sample_ctx_locks(ctx, out);
	lock_account(th, n, out);
	faultd_ctx_destroy(ctx);
	return ret;
}

const struct scenario scenario_lock = {
	.name = "lock",
	.desc = "faults while another thread creates, resizes and destroys "
		"regions",
	.metrics = { "faults_per_s", "p99_ns", "map_ops_per_s" },
	.nmetrics = 3,
	.variants = { "faultd", "faultd-global", "faultd-sigbus",
		      "faultd-sigbus-global" },
	.nvariants = 4,
	.ratios = { { V_FAULTD, V_GLOBAL }, { V_SIGBUS, V_SIGBUS_GLOBAL } },
	.nratios = 2,
	.default_threads = 1,
	.default_size_mib = 16,
	.run = lock_run,
};
