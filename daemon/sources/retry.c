// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * retry.c - the backoff, the deadline and what is counted and logged
 * when a server fails a network source (retry.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "retry.h"

#define MS 1000000ull

uint64_t retry_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void log_line(const struct retry_log *log, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void log_line(const struct retry_log *log, const char *fmt, ...)
{
	char line[512];
	int n;
	va_list ap;

	if (!log || !log->fn)
		return;
	n = snprintf(line, sizeof(line), "%s: ", log->who ? log->who : "");
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	log->fn(log->arg, line);
}

struct retry_policy retry_policy_resolve(const struct retry_policy *p)
{
	struct retry_policy r = p ? *p : (struct retry_policy){ 0 };

	if (!r.backoff_min_ms)
		r.backoff_min_ms = RETRY_BACKOFF_MIN_MS;
	if (!r.backoff_max_ms)
		r.backoff_max_ms = RETRY_BACKOFF_MAX_MS;
	if (r.backoff_max_ms < r.backoff_min_ms)
		r.backoff_max_ms = r.backoff_min_ms;
	if (!r.deadline_ms)
		r.deadline_ms = RETRY_DEADLINE_MS;
	if (!r.read_retries)
		r.read_retries = RETRY_READ_RETRIES;
	return r;
}

uint64_t retry_backoff_ns(const struct retry_policy *p, uint32_t n)
{
	uint64_t ms = p->backoff_min_ms;

	while (n-- && ms < p->backoff_max_ms)
		ms *= 2;
	return (ms < p->backoff_max_ms ? ms : p->backoff_max_ms) * MS;
}

void retry_link_down(struct retry_link *l, struct retry_stats *st,
		     const struct retry_log *log, uint64_t now,
		     const char *why)
{
	if (l->down_since_ns)
		return;
	*l = (struct retry_link){ .down_since_ns = now };
	st->outages++;
	log_line(log, "server unreachable (%s): reconnecting, reads wait",
		 why);
}

uint64_t retry_link_failed(struct retry_link *l, const struct retry_policy *p,
			   uint64_t now, uint32_t *tries)
{
	if (l->down_since_ns)
		l->attempts++;
	return now + retry_backoff_ns(p, (*tries)++);
}

bool retry_link_check(struct retry_link *l, const struct retry_policy *p,
		      struct retry_stats *st, const struct retry_log *log,
		      uint64_t now, uint64_t *until)
{
	uint64_t end = l->down_since_ns + p->deadline_ms * MS;

	*until = UINT64_MAX;
	if (!l->down_since_ns || l->expired)
		return l->expired;
	if (now < end) {
		*until = end;
		return false;
	}
	l->expired = true;
	st->expired++;
	log_line(log, "server unreachable for %u ms, the deadline: reads "
		 "fail (the pages are poisoned) until it is back",
		 p->deadline_ms);
	return true;
}

void retry_link_up(struct retry_link *l, struct retry_stats *st,
		   const struct retry_log *log, uint64_t now)
{
	if (!l->down_since_ns)
		return;
	log_line(log, "server back after %u attempts, %llu ms%s",
		 l->attempts,
		 (unsigned long long)((now - l->down_since_ns) / MS),
		 l->expired ? " (reads failed meanwhile)" : "");
	*l = (struct retry_link){ 0 };
	st->recovered++;
}

bool retry_read_failed(const struct retry_policy *p, struct retry_stats *st,
		       const struct retry_log *log, uint32_t tries, int err,
		       const char *what, uint64_t now, uint64_t *when)
{
	if (tries <= p->read_retries) {
		st->retries++;
		*when = now + retry_backoff_ns(p, tries - 1);
		return true;
	}
	st->gave_up++;
	log_line(log, "reading %s failed %u times (%s): given up", what,
		 tries, strerror(err));
	return false;
}
