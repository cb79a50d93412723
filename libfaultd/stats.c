// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * stats.c - fault counters and latency histograms, and a context's sums of
 * them.
 *
 * Counters live in struct stat_block, one per (region, handler thread): the
 * hot path increments its own cache line with no atomic read-modify-write
 * and no counter shared between threads or regions. Readers sum the blocks.
 * The latency histogram has FAULTD_HIST_SUB buckets per power of two of
 * nanoseconds, so p50/p99 are good to about 20%. Lock waits and holds
 * (struct lock_stats) use the same buckets.
 *
 * The blocks of regions and handler threads that are gone are folded into
 * their context (ctx->retired) under stats_lock alone, a leaf lock, so
 * that a pager or a write hook may read the statistics while it holds a
 * region.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

_Static_assert(offsetof(struct faultd_stats, events) -
			       offsetof(struct faultd_stats, faults) ==
		       (ST_EVENTS - ST_FAULTS) * sizeof(uint64_t),
	       "enum stat_item must follow the fields of struct faultd_stats");
_Static_assert(offsetof(struct faultd_stats, bytes_written) -
			       offsetof(struct faultd_stats, readahead) ==
		       (ST_BYTES_WRITTEN - ST_READAHEAD) * sizeof(uint64_t) &&
		       ST_BYTES_WRITTEN + 1 == ST_NR &&
		       offsetof(struct faultd_stats, readahead) ==
			       offsetof(struct faultd_stats, latency) +
				       FAULTD_HIST_BUCKETS * sizeof(uint64_t),
	       "the fields after latency[] must follow it in enum order");

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static unsigned int hist_bucket(uint64_t ns)
{
	unsigned int octave, idx;

	if (ns < FAULTD_HIST_SUB)
		return (unsigned int)ns;
	octave = 63 - (unsigned int)__builtin_clzll(ns);
	idx = octave * FAULTD_HIST_SUB +
	      (unsigned int)((ns >> (octave - 2)) & (FAULTD_HIST_SUB - 1));
	return idx < FAULTD_HIST_BUCKETS ? idx : FAULTD_HIST_BUCKETS - 1;
}

/* The middle of bucket @idx, in ns. */
static uint64_t hist_value(unsigned int idx)
{
	unsigned int octave = idx / FAULTD_HIST_SUB;
	uint64_t width, low;

	if (idx < FAULTD_HIST_SUB)
		return idx;
	width = 1ull << (octave - 2);
	low = (1ull << octave) + (idx % FAULTD_HIST_SUB) * width;
	return low + width / 2;
}

void stat_latency(struct stat_block *s, uint64_t ns)
{
	unsigned int b = hist_bucket(ns);

	__atomic_store_n(&s->lat[b], s->lat[b] + 1, __ATOMIC_RELAXED);
}

/* For a histogram that several threads count into. */
void stat_latency_shared(struct stat_block *s, uint64_t ns)
{
	__atomic_fetch_add(&s->lat[hist_bucket(ns)], 1, __ATOMIC_RELAXED);
}

void stat_sum(struct stat_block *acc, const struct stat_block *s)
{
	for (unsigned int i = 0; i < ST_NR; i++)
		acc->c[i] += __atomic_load_n(&s->c[i], __ATOMIC_RELAXED);
	for (unsigned int i = 0; i < FAULTD_HIST_BUCKETS; i++)
		acc->lat[i] += __atomic_load_n(&s->lat[i], __ATOMIC_RELAXED);
}

/* Copy a summed block into a caller's struct of (possibly older) size. */
void stat_export(struct faultd_stats *out, const struct stat_block *s)
{
	struct faultd_stats full;
	size_t n = out->size < sizeof(full) ? out->size : sizeof(full);

	memset(&full, 0, sizeof(full));
	full.size = n;
	memcpy(&full.faults, s->c, ST_V1_NR * sizeof(s->c[0]));
	memcpy(full.latency, s->lat, sizeof(s->lat));
	memcpy(&full.readahead, s->c + ST_V1_NR,
	       (ST_NR - ST_V1_NR) * sizeof(s->c[0]));
	memcpy(out, &full, n);
}

/* The value at percentile @pct (0..100) of histogram @hist; 0 if empty. */
uint64_t hist_percentile(const uint64_t *hist, double pct)
{
	uint64_t total = 0, seen = 0, target;

	if (!(pct >= 0)) /* also NaN */
		pct = 0;
	if (pct > 100)
		pct = 100;
	for (unsigned int i = 0; i < FAULTD_HIST_BUCKETS; i++)
		total += hist[i];
	if (!total)
		return 0;
	target = (uint64_t)(pct / 100.0 * (double)total + 0.999999);
	if (target == 0)
		target = 1;
	for (unsigned int i = 0; i < FAULTD_HIST_BUCKETS; i++) {
		seen += hist[i];
		if (seen >= target)
			return hist_value(i);
	}
	return hist_value(FAULTD_HIST_BUCKETS - 1);
}

FAULTD_EXPORT uint64_t faultd_stats_latency(const struct faultd_stats *s,
					    double pct)
{
	/* Older callers' structs end after latency[]: that is enough. */
	if (!s || s->size < offsetof(struct faultd_stats, latency) +
				    sizeof(s->latency))
		return 0;
	return hist_percentile(s->latency, pct);
}

/* Context: the block's one writer (see struct lock_stats). */
void lock_record(struct lock_stats *s, enum lock_item i, uint64_t ns)
{
	struct lock_hist *h = &s->h[i];
	unsigned int b = hist_bucket(ns);

	__atomic_store_n(&h->n, h->n + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&h->ns, h->ns + ns, __ATOMIC_RELAXED);
	__atomic_store_n(&h->b[b], h->b[b] + 1, __ATOMIC_RELAXED);
}

void lock_stats_sum(struct lock_stats *acc, const struct lock_stats *s)
{
	for (unsigned int i = 0; i < LK_NR; i++) {
		const struct lock_hist *h = &s->h[i];

		acc->h[i].n += __atomic_load_n(&h->n, __ATOMIC_RELAXED);
		acc->h[i].ns += __atomic_load_n(&h->ns, __ATOMIC_RELAXED);
		for (unsigned int b = 0; b < FAULTD_HIST_BUCKETS; b++)
			acc->h[i].b[b] +=
				__atomic_load_n(&h->b[b], __ATOMIC_RELAXED);
	}
}

/* Fold the counters of a destroyed region or an exiting group in. */
void ctx_retire_stats_locked(struct faultd_ctx *ctx,
			     const struct stat_block *s, unsigned int n)
{
	assert_mutex_held(&ctx->stats_lock);

	for (unsigned int i = 0; i < n; i++)
		stat_sum(&ctx->retired, &s[i]);
}

/* Fold the counters and lock times of an exited handler thread in. */
void ctx_retire_handler(struct faultd_ctx *ctx, const struct handler *h)
{
	pthread_mutex_lock(&ctx->stats_lock);
	ctx_retire_stats_locked(ctx, &h->stats, 1);
	lock_stats_sum(&ctx->locks_retired, &h->locks);
	pthread_mutex_unlock(&ctx->stats_lock);
}

static void ctx_sum_live_locked(const struct faultd_ctx *ctx,
				struct stat_block *acc)
{
	for (const struct faultd_region *r = ctx->regions; r; r = r->next) {
		for (unsigned int i = 0; i < r->nr_stats; i++)
			stat_sum(acc, &r->stats[i]);
		stat_sum(acc, r->bg_stats);
	}
	for (const struct faultd_group *g = ctx->groups; g; g = g->next)
		for (unsigned int i = 0; i < g->nthreads; i++)
			stat_sum(acc, &g->handlers[i].stats);
}

/*
 * ctx_lock_stats() - the lock times of @ctx so far (see struct
 * lock_stats) added to @acc: the fault path's of every handler thread,
 * live or exited, and the writers'.
 * Context: any thread; takes stats_lock (a leaf), as faultd_ctx_stats().
 */
void ctx_lock_stats(struct faultd_ctx *ctx, struct lock_stats *acc)
{
	pthread_mutex_lock(&ctx->stats_lock);
	lock_stats_sum(acc, &ctx->locks_retired);
	lock_stats_sum(acc, &ctx->wlocks);
	for (const struct faultd_group *g = ctx->groups; g; g = g->next)
		for (unsigned int i = 0; i < g->nthreads; i++)
			lock_stats_sum(acc, &g->handlers[i].locks);
	pthread_mutex_unlock(&ctx->stats_lock);
}

/*
 * Under stats_lock alone (a leaf lock), not the context lock: a pager or
 * write hook may call this while holding a region, with a writer waiting.
 */
FAULTD_EXPORT int faultd_ctx_stats(const struct faultd_ctx *cctx,
				   struct faultd_stats *stats)
{
	struct faultd_ctx *ctx = (struct faultd_ctx *)cctx;
	struct stat_block *acc;

	if (!ctx || !stats || stats->size < sizeof(stats->size))
		return -EINVAL;
	acc = calloc(1, sizeof(*acc));
	if (!acc)
		return -ENOMEM;
	pthread_mutex_lock(&ctx->stats_lock);
	stat_sum(acc, &ctx->retired);
	ctx_sum_live_locked(ctx, acc);
	pthread_mutex_unlock(&ctx->stats_lock);
	stat_export(stats, acc);
	free(acc);
	return 0;
}
