/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * retry.h - what a network source does when its server fails it: one
 * policy for every source that reaches a server (the NBD source now; the
 * CRIU page-server source can take the same), so that a page the engine
 * waits for is waited for, and given up, the same way whatever brings it.
 *
 * Two kinds of failure:
 *   - the link: no connection to the server. Connections are made again
 *     with a growing wait between attempts (the backoff: min, doubling,
 *     capped at max). The reads on them wait. When the server has stayed
 *     unreachable for the deadline, the outage has expired: the reads
 *     waiting and every read asked while it lasts fail with -EIO (the
 *     engine poisons the pages); attempts go on at the cap, and reads
 *     work again once a connection is back.
 *   - a read the server answered with an error: tried again after the
 *     backoff, at most `read_retries` times more, then -EIO.
 *
 * What is counted (struct retry_stats) and logged: an outage's beginning
 * (with the error), its end (after how many attempts and how long), its
 * expiry; a read given up. A retry of a read is counted, not logged: a
 * failing server makes many.
 *
 * Context: the functions take no lock; a caller serialises the calls on
 * one struct retry_link / retry_stats (its own lock).
 */
#ifndef FAULTD_SRC_RETRY_H
#define FAULTD_SRC_RETRY_H

#include <stdbool.h>
#include <stdint.h>

/* 0 in a field: its default. */
struct retry_policy {
	uint32_t backoff_min_ms;	/* first wait; default 10 */
	uint32_t backoff_max_ms;	/* the cap; default 1000 */
	uint32_t deadline_ms;		/* unreachable this long: fail; 30000 */
	uint32_t read_retries;		/* a failed read, again; default 3 */
};

#define RETRY_BACKOFF_MIN_MS 10
#define RETRY_BACKOFF_MAX_MS 1000
#define RETRY_DEADLINE_MS 30000
#define RETRY_READ_RETRIES 3

struct retry_stats {
	uint64_t retries;	/* reads asked again after a server error */
	uint64_t outages;	/* times the server became unreachable */
	uint64_t recovered;	/* outages that ended: reachable again */
	uint64_t expired;	/* outages that outlasted the deadline */
	uint64_t gave_up;	/* reads failed for good (-EIO) */
};

/* Where lines go: @fn(arg, line) with @who's name before it; fn NULL: not. */
struct retry_log {
	void (*fn)(void *arg, const char *line);
	void *arg;
	const char *who;
};

/* One server's reachability. */
struct retry_link {
	uint64_t down_since_ns;	/* 0: reachable */
	uint32_t attempts;	/* connection attempts in this outage */
	bool expired;		/* down for longer than the deadline */
};

/* @p with its zero fields set to the defaults. */
struct retry_policy retry_policy_resolve(const struct retry_policy *p);

/* The wait before attempt @n (0-based) of a connection or a read: min *
 * 2^n, at most max. */
uint64_t retry_backoff_ns(const struct retry_policy *p, uint32_t n);

/*
 * retry_link_down() - the last connection to the server was lost (or the
 * first could not be made) at @now, for @why. Begins an outage unless
 * one is under way: counted and logged once.
 */
void retry_link_down(struct retry_link *l, struct retry_stats *st,
		     const struct retry_log *log, uint64_t now,
		     const char *why);

/*
 * An attempt to connect failed at @now, the *@tries-th in a row of one
 * connection (a link may have several): counted in the outage, if one is
 * under way. Returns when that connection tries next; *tries grows.
 */
uint64_t retry_link_failed(struct retry_link *l, const struct retry_policy *p,
			   uint64_t now, uint32_t *tries);

/*
 * retry_link_check() - has the outage outlasted the deadline at @now?
 * The first time it has, it is marked expired, counted and logged; true
 * from then on until retry_link_up(). @until: when it will expire, for
 * a caller's time-out (UINT64_MAX when up or expired).
 */
bool retry_link_check(struct retry_link *l, const struct retry_policy *p,
		      struct retry_stats *st, const struct retry_log *log,
		      uint64_t now, uint64_t *until);

/* A connection is up again: ends the outage, if any (counted, logged). */
void retry_link_up(struct retry_link *l, struct retry_stats *st,
		   const struct retry_log *log, uint64_t now);

/*
 * retry_read_failed() - the server answered a read with @err, the
 * @tries-th failure of that read (1 on the first). Returns true and the
 * time to ask again in *when, or false when it is given up (counted,
 * logged with @what, e.g. "bytes 0x1000-0x2000").
 */
bool retry_read_failed(const struct retry_policy *p, struct retry_stats *st,
		       const struct retry_log *log, uint32_t tries, int err,
		       const char *what, uint64_t now, uint64_t *when);

/* Monotonic time in ns. */
uint64_t retry_now_ns(void);

#endif /* FAULTD_SRC_RETRY_H */
