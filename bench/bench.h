/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * bench.h - what faultd-bench's scenarios share: options, the sample a
 * variant returns for one round, the scenario table, and small helpers
 * (threads started together, per-touch latency, counters).
 *
 * A scenario runs all its variants in one process, interleaved: round 0 is
 * a warm-up, then A B A B ... for the given number of rounds. The driver
 * (faultd-bench.c) reports median/min/max per variant and metric, and the
 * median of per-round ratios for the scenario's headline pairs.
 */
#ifndef FAULTD_BENCH_H
#define FAULTD_BENCH_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <faultd.h>

#include "internal.h" /* stat_block and its histogram, shared with the library */

#define BENCH_MAX_METRICS 6
#define BENCH_MAX_VARIANTS 16
#define BENCH_MAX_RATIOS 12
#define BENCH_MAX_THREADS 256

struct bench_opts {
	double seconds;		/* per variant per round */
	unsigned int threads;	/* application threads; 0: scenario default */
	size_t size_mib;	/* per-thread or total size; 0: default */
	unsigned int rounds;	/* measured rounds, after one warm-up */
	bool json;
};

/* What one variant produced in one round. */
struct sample {
	double value[BENCH_MAX_METRICS];
	bool has_stats;		/* a faultd variant: counters below */
	struct faultd_stats stats;
	const char *skipped;	/* non-NULL: could not run, and why */
};

struct ratio {
	unsigned int num, den; /* indices into the scenario's variants */
};

/* As a ratio's den: the best other variant of the same round. */
#define RATIO_BEST 255u

struct scenario {
	const char *name;
	const char *desc;
	const char *metrics[BENCH_MAX_METRICS]; /* metrics[0] is the headline */
	unsigned int nmetrics;
	const char *variants[BENCH_MAX_VARIANTS];
	unsigned int nvariants;
	struct ratio ratios[BENCH_MAX_RATIOS];
	unsigned int nratios;
	unsigned int default_threads;
	size_t default_size_mib;
	/* Run variant @v once with options @o (defaults applied). */
	int (*run)(const struct bench_opts *o, unsigned int v,
		   struct sample *out);
};

extern const struct scenario scenario_pf1;
extern const struct scenario scenario_lock;
extern const struct scenario scenario_pager;
extern const struct scenario scenario_clear;
extern const struct scenario scenario_brk;
extern const struct scenario scenario_pf2;
extern const struct scenario scenario_pf3;
extern const struct scenario scenario_dirty;
extern const struct scenario scenario_file;

/* ------------------------------------------------------------------------
 * Helpers (bench-util.c)
 */

/* Start @n threads running fn(arg + i * stride) together; join them all. */
int run_threads(unsigned int n, void *(*fn)(void *), void *args,
		size_t stride);

/* The number of CPUs this process may run on. */
unsigned int bench_cpus(void);

/* Seconds since an arbitrary start, monotonic. */
double bench_now(void);

/* A thread's latency record: a histogram, summed into a sample later. */
struct lat_hist {
	struct stat_block b;
};

static inline void lat_record(struct lat_hist *h, uint64_t ns)
{
	stat_latency(&h->b, ns);
}

/* p50 and p99 of the merged histograms of @n threads, in ns. */
void lat_percentiles(const struct lat_hist *h, unsigned int n,
		     size_t stride, double *p50, double *p99);

/* Counters of @ctx accumulated into @out (faultd variants). */
void sample_ctx_stats(struct faultd_ctx *ctx, struct sample *out);

/*
 * Make @n 2 MiB huge pages free for the rest of the run (given back at
 * exit). Returns 0 or -errno.
 */
int bench_hugepages(unsigned long n);

/* A context for a variant: lock mode and handler threads per region. */
struct faultd_ctx *bench_ctx(unsigned int lock_mode, unsigned int handlers);

#endif /* FAULTD_BENCH_H */
