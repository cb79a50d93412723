// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * pager.c - scenario pager: faults served by a pager that sleeps ~20 us
 * per page, like a read from fast storage.
 *
 * One region with 4 handler threads; the application threads fault
 * disjoint pages of it. A FAULTD_PAGER_CONCURRENT pager runs in all the
 * handler threads at once; an unaudited one is serialized under the
 * context lock (vmf_can_call_fault()); global mode takes the context lock
 * for every fault but lets concurrent fills run in parallel under it.
 */
#include <errno.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "bench.h"

enum { V_CONCURRENT, V_SERIALIZED, V_GLOBAL };

#define PAGER_SLEEP_NS 20000
#define PAGER_HANDLERS 4

static ssize_t sleepy_fill(void *arg, struct faultd_region *r, uint64_t off,
			   void *buf, size_t len)
{
	static __thread bool slack_set;
	struct timespec ts = { .tv_nsec = PAGER_SLEEP_NS };

	if (!slack_set) { /* sleep 20 us, not 20 us + the 50 us default slack */
		prctl(PR_SET_TIMERSLACK, 1000);
		slack_set = true;
	}
	nanosleep(&ts, NULL);
	memset(buf, (int)(off >> 12), len);
	return (ssize_t)len;
}

struct pager_thread {
	char *base;
	size_t len;
	double deadline;
	struct faultd_region *r;
	uint64_t faults;
	int err;
	struct lat_hist lat;
} __attribute__((aligned(64)));

static void *pager_thread_main(void *arg)
{
	struct pager_thread *t = arg;

	while (!t->err && bench_now() < t->deadline) {
		for (size_t off = 0; off < t->len; off += 4096) {
			uint64_t t0 = now_ns();

			(void)*(volatile char *)(t->base + off);
			lat_record(&t->lat, now_ns() - t0);
		}
		t->faults += t->len / 4096;
		t->err = faultd_region_discard(t->r, (uint64_t)(t->base -
				(char *)faultd_region_base(t->r)), t->len);
	}
	return NULL;
}

static int pager_run(const struct bench_opts *o, unsigned int v,
		     struct sample *out)
{
	static struct pager_thread th[BENCH_MAX_THREADS];
	struct faultd_pager p = {
		.size = sizeof(p),
		.flags = v == V_SERIALIZED ? 0 : FAULTD_PAGER_CONCURRENT,
		.fill = sleepy_fill,
	};
	size_t per = (o->size_mib << 20) / o->threads & ~4095ul;
	struct faultd_region_opts ro = { .size = sizeof(ro),
					 .length = per * o->threads,
					 .pager = &p };
	struct faultd_region *r;
	struct faultd_ctx *ctx;
	uint64_t faults = 0;
	double t0;
	int ret;

	if (!per)
		return -EINVAL;
	ctx = bench_ctx(v == V_GLOBAL ? FAULTD_LOCK_GLOBAL : FAULTD_LOCK_REGION,
			PAGER_HANDLERS);
	if (!ctx)
		return -EIO;
	ret = faultd_region_create(ctx, &ro, &r);
	if (ret < 0)
		goto out;
	t0 = bench_now();
	for (unsigned int i = 0; i < o->threads; i++) {
		memset(&th[i], 0, sizeof(th[i]));
		th[i] = (struct pager_thread){
			.base = (char *)faultd_region_base(r) + i * per,
			.len = per, .deadline = t0 + o->seconds, .r = r };
	}
	ret = run_threads(o->threads, pager_thread_main, th, sizeof(th[0]));
	for (unsigned int i = 0; !ret && i < o->threads; i++) {
		ret = th[i].err;
		faults += th[i].faults;
	}
	out->value[0] = (double)faults / (bench_now() - t0);
	lat_percentiles(&th[0].lat, o->threads, sizeof(th[0]), &out->value[1],
			&out->value[2]);
	sample_ctx_stats(ctx, out);
out:
	faultd_ctx_destroy(ctx);
	return ret;
}

const struct scenario scenario_pager = {
	.name = "pager",
	.desc = "faults served by a pager that sleeps 20 us per page",
	.metrics = { "faults_per_s", "p50_ns", "p99_ns" },
	.nmetrics = 3,
	.variants = { "concurrent", "serialized", "global" },
	.nvariants = 3,
	.ratios = { { V_CONCURRENT, V_SERIALIZED }, { V_GLOBAL, V_SERIALIZED } },
	.nratios = 2,
	.default_threads = 4,
	.default_size_mib = 4,
	.run = pager_run,
};
