// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * convoy.c - scenario convoy: one slow region must not stall the others.
 *
 * The case the kernel's per-VMA locks were written for: a fault that must
 * read (I/O) held mmap_lock for the whole read; a writer (mmap, munmap)
 * queued behind it; every other fault of the process queued behind the
 * writer. The library has the same convoy in FAULTD_LOCK_GLOBAL mode.
 *
 * The work, three kinds of thread in one context:
 *  - S: CONVOY_S_THREADS threads touch their part of region S, whose
 *    concurrent pager sleeps CONVOY_S_SLEEP_NS per fill (a remote or cold
 *    store), with as many handler threads, so that the fills overlap;
 *    each pass discards their part, so they fault all the time. A fill
 *    holds what the mode says: S's region lock (read), or in global mode
 *    the context lock (read).
 *  - H: --threads threads (default 1: on a small machine a CPU is left
 *    for the rest), each with two regions of its own, one zero-fill and
 *    one with a fast pager (a memset), each with one handler thread: a
 *    pass faults every page of one of them, then discards it (as pf1 and
 *    lock), the next pass the other.
 *  - the map changer: every CONVOY_CHURN_NS it creates a 1 MiB region,
 *    touches a page of it, resizes it to 2 MiB and destroys it: three map
 *    changes, each with the context lock held for writing. Its regions
 *    share one handler group, so that a change is a change of the map
 *    (mmap, registration, the region map), not a thread's start and exit.
 *
 * Variants: faultd (per-region locking), faultd-global, and the same two
 * with H's faults resolved in the faulting thread's SIGBUS handler
 * (FAULTD_REGION_SAME_THREAD: faultd-sigbus, faultd-sigbus-global).
 * Metrics: H's faults/s (all H threads), the p50, p99 and p99.9 of an H
 * touch as the application sees it, S's fills/s, map changes/s. Ratios:
 * each per-region variant over its global one. The goals (issue 29): H's
 * p99 under faultd at most 1/10 of faultd-global's, H's faults/s at
 * least 3x. Each round also accounts for its time as lock does
 * (account.c: H threads as "app", their handlers, the map changer) and
 * reports the library's lock times: the breakdown of a figure.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "bench.h"

enum { V_FAULTD, V_GLOBAL, V_SIGBUS, V_SIGBUS_GLOBAL };

enum { M_H_RATE, M_H_P50, M_H_P99, M_H_P999, M_S_FILLS, M_MAP_OPS, M_NR };

#define CONVOY_S_THREADS 2
#define CONVOY_S_LEN (1ul << 20)	/* per S thread */
#define CONVOY_S_SLEEP_NS 1000000L
#define CONVOY_CHURN_NS 200000L

enum convoy_role { R_H, R_S, R_CHURN };

struct convoy_thread {
	struct faultd_ctx *ctx;
	enum convoy_role role;
	unsigned int index;
	size_t len;
	double deadline;
	bool same_thread;	/* H: its faults in its SIGBUS handler */
	struct faultd_region *s;	/* S: the shared region */
	size_t s_off;		/* S: its part */
	struct placement pl;
	uint64_t ops;
	int err;
	struct lat_hist lat;
	struct sched_time self, handlers;
	unsigned int nhandlers;
	bool window;
} __attribute__((aligned(64)));

static atomic_ullong s_fills;

/* Sleep @ns with 1 us of timer slack, not the default 50 us. */
static void sleep_ns(long ns)
{
	static __thread bool slack_set;
	struct timespec ts = { .tv_sec = ns / 1000000000L,
			       .tv_nsec = ns % 1000000000L };

	if (!slack_set) {
		prctl(PR_SET_TIMERSLACK, 1000);
		slack_set = true;
	}
	nanosleep(&ts, NULL);
}

/* S's pager: a read from a slow store. */
static ssize_t slow_fill(void *arg, struct faultd_region *r, uint64_t off,
			 void *buf, size_t len)
{
	sleep_ns(CONVOY_S_SLEEP_NS);
	memset(buf, (int)(off >> 12), len);
	atomic_fetch_add_explicit(&s_fills, 1, memory_order_relaxed);
	return (ssize_t)len;
}

/* H's fast pager (odd H threads): a memset; safe in a signal handler. */
static ssize_t fast_fill(void *arg, struct faultd_region *r, uint64_t off,
			 void *buf, size_t len)
{
	memset(buf, (int)(off >> 12) | 1, len);
	return (ssize_t)len;
}

static const struct faultd_pager slow_pager = {
	.size = sizeof(struct faultd_pager),
	.flags = FAULTD_PAGER_CONCURRENT,
	.fill = slow_fill,
};

static const struct faultd_pager fast_pager = {
	.size = sizeof(struct faultd_pager),
	.flags = FAULTD_PAGER_CONCURRENT | FAULTD_PAGER_SIGNAL_SAFE,
	.fill = fast_fill,
};

/*
 * The schedstat of @r's handler threads, summed; -1 if one is missing. A
 * handler makes its id known when it starts: one that has not yet run
 * (the other handler served the first fault) is waited for, a while.
 */
static int handlers_read(struct faultd_region *r, struct sched_time *t)
{
	struct faultd_group *g = r->group;
	double give_up = bench_now() + 1.0;

	memset(t, 0, sizeof(*t));
	for (unsigned int i = 0; i < g->nthreads; i++) {
		struct sched_time one, zero = { 0 };
		pid_t tid;

		while (!(tid = atomic_load(&g->handlers[i].tid)) &&
		       bench_now() < give_up)
			sched_yield();
		if (!tid || sched_read(tid, &one) < 0)
			return -1;
		sched_since(t, &zero, &one);
	}
	return 0;
}

/* Touch every page of [p, p + len); each touch's time into @t->lat. */
static void touch_pass(struct convoy_thread *t, char *p, size_t len)
{
	for (size_t off = 0; off < len; off += 4096) {
		uint64_t t0 = now_ns();

		(void)*(volatile char *)(p + off);
		lat_record(&t->lat, now_ns() - t0);
	}
}

/* The summed schedstat of both H regions' handlers; -1 if one is missing. */
static int h_handlers_read(struct faultd_region **r, struct sched_time *t)
{
	struct sched_time one, zero = { 0 };

	if (handlers_read(r[1], &one) < 0 || handlers_read(r[0], t) < 0)
		return -1;
	sched_since(t, &zero, &one);
	return 0;
}

/* An H thread's two regions, zero-fill and fast pager; page 0 faulted. */
static int h_regions(struct convoy_thread *t, struct faultd_region **r)
{
	struct faultd_region_opts o = { .size = sizeof(o), .length = t->len };
	int ret = 0;

	if (t->same_thread)
		o.flags |= FAULTD_REGION_SAME_THREAD;
	place_region(&t->pl, &o);
	for (int i = 0; i < 2 && !ret; i++) {
		o.pager = i ? &fast_pager : NULL;
		ret = faultd_region_create(t->ctx, &o, &r[i]);
		if (!ret)
			(void)*(volatile char *)faultd_region_base(r[i]);
	}
	return ret;
}

/*
 * An H thread: a pass over one of its regions, then it is emptied, the
 * next pass the other. The accounting window starts after each region's
 * first fault (the handlers have run and are known).
 */
static void h_loop(struct convoy_thread *t)
{
	struct faultd_region *r[2] = { NULL, NULL };
	struct sched_time self0, hnd0, s, h;

	t->err = h_regions(t, r);
	if (!t->err &&
	    (sched_read(0, &self0) < 0 || h_handlers_read(r, &hnd0) < 0))
		t->err = -EIO;
	for (unsigned int pass = 0; !t->err && bench_now() < t->deadline;
	     pass++) {
		struct faultd_region *x = r[pass & 1];

		touch_pass(t, faultd_region_base(x), t->len);
		t->ops += t->len / 4096;
		where_app();
		where_handlers();
		t->err = faultd_region_discard(x, 0, t->len);
	}
	if (t->ops)
		t->ops--; /* page 0 of the first pass was before the window */
	if (!t->err && sched_read(0, &s) == 0 && h_handlers_read(r, &h) == 0) {
		sched_since(&t->self, &self0, &s);
		sched_since(&t->handlers, &hnd0, &h);
		t->nhandlers = r[0]->group->nthreads + r[1]->group->nthreads;
		t->window = true;
	}
	faultd_region_destroy(r[0]);
	faultd_region_destroy(r[1]);
}

/* An S thread: its part of S, read from the slow pager, again and again. */
static void s_loop(struct convoy_thread *t)
{
	char *p = (char *)faultd_region_base(t->s) + t->s_off;

	while (!t->err && bench_now() < t->deadline) {
		for (size_t off = 0; off < t->len && bench_now() < t->deadline;
		     off += 4096)
			(void)*(volatile char *)(p + off);
		t->err = faultd_region_discard(t->s, t->s_off, t->len);
	}
}

/* The next tick of a CONVOY_CHURN_NS clock; late ones start at once. */
static void churn_pace(uint64_t *next)
{
	uint64_t now = now_ns();

	*next += CONVOY_CHURN_NS;
	if (*next <= now) {
		*next = now;
		return;
	}
	sleep_ns((long)(*next - now));
}

static void churn_loop(struct convoy_thread *t)
{
	struct faultd_region_opts o = { .size = sizeof(o),
					.length = 1 << 20,
					.max_length = 2 << 20 };
	struct sched_time s0, s1;
	uint64_t next = now_ns();

	t->err = faultd_group_create(t->ctx, NULL, &o.group);
	place_region(&t->pl, &o);
	if (!t->err && sched_read(0, &s0) < 0)
		t->err = -EIO;
	while (!t->err && bench_now() < t->deadline) {
		struct faultd_region *r;

		t->err = faultd_region_create(t->ctx, &o, &r);
		if (t->err)
			break;
		(void)*(volatile char *)faultd_region_base(r);
		t->err = faultd_region_resize(r, 2 << 20);
		faultd_region_destroy(r);
		t->ops += 3;
		churn_pace(&next);
	}
	if (!t->err && sched_read(0, &s1) == 0)
		sched_since(&t->self, &s0, &s1);
	faultd_group_destroy(o.group);
}

static void *convoy_thread_main(void *arg)
{
	static const char *const names[] = { "convoy-h", "convoy-s",
					     "convoy-churn" };
	struct convoy_thread *t = arg;
	char name[16];

	snprintf(name, sizeof(name), "%s%u", names[t->role], t->index % 100);
	pthread_setname_np(pthread_self(), name);
	place_self(&t->pl);
	if (t->role == R_H)
		h_loop(t);
	else if (t->role == R_S)
		s_loop(t);
	else
		churn_loop(t);
	return NULL;
}

/* The H threads' windows, and the map changer's, by role into @out. */
static void convoy_account(const struct convoy_thread *th, unsigned int n,
			   struct sample *out)
{
	struct sched_time zero = { 0 };

	out->has_roles = true;
	for (unsigned int i = 0; i < n; i++) {
		const struct convoy_thread *t = &th[i];

		if (t->role == R_CHURN) {
			sched_since(&out->role[ROLE_CHURN], &zero, &t->self);
			out->role_threads[ROLE_CHURN]++;
		}
		if (t->role != R_H)
			continue;
		out->has_roles &= t->window;
		sched_since(&out->role[ROLE_APP], &zero, &t->self);
		sched_since(&out->role[ROLE_HANDLER], &zero, &t->handlers);
		out->role_threads[ROLE_APP]++;
		out->role_threads[ROLE_HANDLER] += t->nhandlers;
		out->window_ops += (double)t->ops;
	}
}

/* Percentile @pct of the H threads' touch times, in ns. */
static double h_latency(const struct convoy_thread *th, unsigned int n,
			double pct)
{
	struct faultd_stats s = { .size = sizeof(s) };
	struct stat_block acc;

	memset(&acc, 0, sizeof(acc));
	for (unsigned int i = 0; i < n; i++)
		if (th[i].role == R_H)
			stat_sum(&acc, &th[i].lat.b);
	stat_export(&s, &acc);
	return (double)faultd_stats_latency(&s, pct);
}

/* Threads: H 0..nh-1, then S, then the map changer. */
static void convoy_setup(const struct bench_opts *o, unsigned int v,
			 struct faultd_ctx *ctx, struct faultd_region *s,
			 struct convoy_thread *th, unsigned int n)
{
	double deadline = bench_now() + o->seconds;
	unsigned int nh = o->threads;

	for (unsigned int i = 0; i < n; i++) {
		struct convoy_thread *t = &th[i];

		memset(t, 0, sizeof(*t));
		t->ctx = ctx;
		t->deadline = deadline;
		t->role = i < nh ? R_H : i < n - 1 ? R_S : R_CHURN;
		t->index = t->role == R_S ? i - nh : i;
		t->len = t->role == R_H ? o->size_mib << 20 : CONVOY_S_LEN;
		t->same_thread = v == V_SIGBUS || v == V_SIGBUS_GLOBAL;
		t->s = s;
		t->s_off = (size_t)t->index * CONVOY_S_LEN;
		place_thread(o, i, -1, &t->pl);
	}
}

static int convoy_run(const struct bench_opts *o, unsigned int v,
		      struct sample *out)
{
	static struct convoy_thread th[BENCH_MAX_THREADS + CONVOY_S_THREADS +
				       1];
	unsigned int n = o->threads + CONVOY_S_THREADS + 1;
	bool global = v == V_GLOBAL || v == V_SIGBUS_GLOBAL;
	struct faultd_region_opts so = {
		.size = sizeof(so),
		.length = CONVOY_S_THREADS * CONVOY_S_LEN,
		.pager = &slow_pager,
		.handler_threads = CONVOY_S_THREADS,
	};
	struct machine_time m0, m1;
	struct faultd_region *s;
	struct faultd_ctx *ctx;
	uint64_t h_faults = 0;
	double t0, secs;
	int ret;

	ctx = bench_ctx(global ? FAULTD_LOCK_GLOBAL : FAULTD_LOCK_REGION, 1);
	if (!ctx)
		return -EIO;
	ret = faultd_region_create(ctx, &so, &s);
	if (ret < 0)
		goto out;
	atomic_store(&s_fills, 0);
	convoy_setup(o, v, ctx, s, th, n);
	t0 = bench_now();
	machine_read(&m0);
	ret = run_threads(n, convoy_thread_main, th, sizeof(th[0]));
	machine_read(&m1);
	secs = bench_now() - t0;
	machine_since(&out->machine, &m0, &m1);
	for (unsigned int i = 0; i < n; i++) {
		if (!ret)
			ret = th[i].err;
		if (th[i].role == R_H)
			h_faults += th[i].ops;
	}
	out->value[M_H_RATE] = (double)h_faults / secs;
	out->value[M_H_P50] = h_latency(th, n, 50);
	out->value[M_H_P99] = h_latency(th, n, 99);
	out->value[M_H_P999] = h_latency(th, n, 99.9);
	out->value[M_S_FILLS] = (double)atomic_load(&s_fills) / secs;
	out->value[M_MAP_OPS] = (double)th[n - 1].ops / secs;
	sample_ctx_stats(ctx, out);
	sample_ctx_locks(ctx, out);
	convoy_account(th, n, out);
out:
	faultd_ctx_destroy(ctx);
	return ret;
}

const struct scenario scenario_convoy = {
	.name = "convoy",
	.desc = "faults on fast regions while a slow pager (1 ms a fill) "
		"fills another and the map changes every 200 us",
	.metrics = { "h_faults_per_s", "h_p50_ns", "h_p99_ns", "h_p999_ns",
		     "s_fills_per_s", "map_ops_per_s" },
	.nmetrics = M_NR,
	.variants = { "faultd", "faultd-global", "faultd-sigbus",
		      "faultd-sigbus-global" },
	.nvariants = 4,
	.ratios = { { V_FAULTD, V_GLOBAL }, { V_SIGBUS, V_SIGBUS_GLOBAL } },
	.nratios = 2,
	.default_threads = 1,
	.default_size_mib = 4,
	.run = convoy_run,
};
