/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * stats.h - the counters and histograms of faults and locks (stats.c,
 * lock.c), kept per thread and summed when read: the library's, and the
 * daemon's latency histograms.
 */
#ifndef FAULTD_STATS_H
#define FAULTD_STATS_H

#include <stdint.h>

#include "faultd.h"
#include "lib.h"

/* ------------------------------------------------------------------------
 * stats.c - counters kept per (region, handler thread), summed when read.
 */

/*
 * In the order of the fields of struct faultd_stats after .size: those
 * before latency[], then those after it.
 */
enum stat_item {
	ST_FAULTS,
	ST_ZERO_FILLS,
	ST_PAGER_FILLS,
	ST_MAPPED,
	ST_WP,
	ST_AROUND,
	ST_COW,
	ST_COW_READS,
	ST_COW_PREPARE,
	ST_COW_SAVED,
	ST_FAST,
	ST_RETRY,
	ST_ABORT,
	ST_MISS,
	ST_LOCKED,
	ST_EEXIST,
	ST_EAGAIN,
	ST_GONE,
	ST_NO_REGION,
	ST_POISONED,
	ST_PAGER_ERRORS,
	ST_EVENTS,
	ST_V1_NR, /* the fields before latency[] end here */
	ST_READAHEAD = ST_V1_NR,
	ST_RA_HITS,
	ST_EVICTIONS,
	ST_WRITEBACKS,
	ST_BYTES_READ,
	ST_BYTES_WRITTEN,
	ST_NR,
};

/*
 * One writer (the handler thread that owns it) increments with plain
 * relaxed stores; readers sum with relaxed loads. Cache-line aligned so two
 * threads never share a line.
 */
struct stat_block {
	uint64_t c[ST_NR];
	uint64_t lat[FAULTD_HIST_BUCKETS];
} __attribute__((aligned(CACHELINE)));

static inline void stat_add(struct stat_block *s, enum stat_item i,
			    uint64_t n)
{
	__atomic_store_n(&s->c[i], s->c[i] + n, __ATOMIC_RELAXED);
}

static inline void stat_inc(struct stat_block *s, enum stat_item i)
{
	stat_add(s, i, 1);
}

/* For a block that several threads count into (a region's bg_stats). */
static inline void stat_add_shared(struct stat_block *s, enum stat_item i,
				   uint64_t n)
{
	__atomic_fetch_add(&s->c[i], n, __ATOMIC_RELAXED);
}

void stat_latency(struct stat_block *s, uint64_t ns);
void stat_latency_shared(struct stat_block *s, uint64_t ns);
void stat_sum(struct stat_block *acc, const struct stat_block *s);
void stat_export(struct faultd_stats *out, const struct stat_block *s);
uint64_t hist_percentile(const uint64_t *hist, double pct);

/*
 * Lock waits and holds, as histograms of ns (the buckets of latency[]),
 * with their count and sum. What they time:
 *  - the fault path's: the context lock read-locked by a fault (its wait,
 *    and its hold: the whole locked resolution), and the region lock held
 *    by a fast-path fault (taken with a try-lock: no wait). Sampled: one
 *    fault in LOCK_SAMPLE of each handler thread is timed, which costs a
 *    counter and a branch per fault and three clock reads per sample;
 *  - the writers': every write-lock of the context lock (wait and hold),
 *    and the region write-locks of destroy and resize (wait: for the faults
 *    in the region to drain). Timed under the context lock held for
 *    writing, so one writer at a time counts into the context's block.
 * Not timed: the context lock's other readers (stats, prefetch, dirty
 * tracking), and the region lock of discards, clones and collections.
 */
enum lock_item {
	LK_CTX_READ_WAIT,
	LK_CTX_READ_HOLD,
	LK_REGION_READ_HOLD,
	LK_CTX_WRITE_WAIT,
	LK_CTX_WRITE_HOLD,
	LK_REGION_WRITE_WAIT,
	LK_REGION_WRITE_HOLD,
	LK_NR,
};

#define LOCK_SAMPLE 16u /* a power of two */

struct lock_hist {
	uint64_t n;	/* timed acquisitions */
	uint64_t ns;	/* their sum */
	uint64_t b[FAULTD_HIST_BUCKETS];
};

/* One writer (a handler thread; or writers under map_lock held for
 * writing); read with relaxed loads, like struct stat_block. */
struct lock_stats {
	struct lock_hist h[LK_NR];
} __attribute__((aligned(CACHELINE)));

void lock_record(struct lock_stats *s, enum lock_item i, uint64_t ns);
void lock_stats_sum(struct lock_stats *acc, const struct lock_stats *s);

#endif /* FAULTD_STATS_H */
