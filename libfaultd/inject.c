// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * inject.c - fault injection (built only with -Dfault-injection=true): the
 * rules FAULTD_INJECT sets (syntax in inject.h), the per-point hit counts,
 * and the decision of each hit.
 *
 * The list is parsed once, at the first hit of any point (pthread_once).
 * A hit costs an atomic increment and a walk of the few rules; the table
 * of rules changes only in inject_reset(), which tests call while the
 * library is idle, so readers take no lock.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define INJECT_MAX_RULES 16

struct inject_rule {
	enum inject_point point;
	unsigned long nth;	/* the hit that fails; 1: the first */
	bool onwards;		/* and every hit after it */
	int err;		/* negative errno */
};

static const struct {
	const char *name;
	int err;
} points[INJ_NR] = {
	[INJ_ALLOC] = { "alloc", ENOMEM },
	[INJ_THREAD] = { "thread", EAGAIN },
	[INJ_REGISTER] = { "register", ENOMEM },
	[INJ_COPY] = { "copy", ENOMEM },
	[INJ_ZEROPAGE] = { "zeropage", ENOMEM },
	[INJ_WAKE] = { "wake", ENOMEM },
	[INJ_WRITEPROTECT] = { "writeprotect", ENOMEM },
	[INJ_CONTINUE] = { "continue", ENOMEM },
	[INJ_POISON] = { "poison", ENOMEM },
	[INJ_READ] = { "read", EIO },
	[INJ_SHORT_READ] = { "short-read", 0 }, /* no errno: fewer bytes */
	[INJ_SEND] = { "send", EPIPE },
	[INJ_RECV] = { "recv", ECONNRESET },
};

/* The errno names a rule may use; others go by number. */
static const struct {
	const char *name;
	int err;
} errnos[] = {
	{ "EAGAIN", EAGAIN },	    { "EEXIST", EEXIST },
	{ "ENOENT", ENOENT },	    { "ENOMEM", ENOMEM },
	{ "ESRCH", ESRCH },	    { "EIO", EIO },
	{ "EINTR", EINTR },	    { "EINVAL", EINVAL },
	{ "EFAULT", EFAULT },	    { "EPERM", EPERM },
	{ "EPIPE", EPIPE },	    { "ECONNRESET", ECONNRESET },
	{ "EBADMSG", EBADMSG },	    { "ENOSPC", ENOSPC },
};

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static unsigned int nr_rules;
static struct inject_rule rules[INJECT_MAX_RULES];
static atomic_uint armed; /* a bit per point that has a rule */
static atomic_ulong hits[INJ_NR];
static atomic_ulong fired[INJ_NR];

static int parse_point(const char *s, size_t len, enum inject_point *p)
{
	for (int i = 0; i < INJ_NR; i++)
		if (strlen(points[i].name) == len &&
		    !strncmp(points[i].name, s, len)) {
			*p = (enum inject_point)i;
			return 0;
		}
	return -EINVAL;
}

static int parse_errno(const char *s, int *err)
{
	char *end;
	long v;

	for (size_t i = 0; i < ARRAY_SIZE(errnos); i++)
		if (!strcmp(errnos[i].name, s)) {
			*err = -errnos[i].err;
			return 0;
		}
	v = strtol(s, &end, 10);
	if (end == s || *end || v <= 0 || v > 4095)
		return -EINVAL;
	*err = (int)-v;
	return 0;
}

/* One "point[:nth[+][:errno]]" (NUL-terminated) into @r. */
static int parse_rule(char *s, struct inject_rule *r)
{
	char *nth = strchr(s, ':'), *err = NULL, *end;

	if (nth) {
		*nth++ = '\0';
		err = strchr(nth, ':');
		if (err)
			*err++ = '\0';
	}
	if (parse_point(s, strlen(s), &r->point) < 0)
		return -EINVAL;
	r->nth = 1;
	r->onwards = !nth;
	r->err = -points[r->point].err;
	if (nth) {
		if (*nth < '0' || *nth > '9')
			return -EINVAL;
		r->nth = strtoul(nth, &end, 10);
		r->onwards = *end == '+';
		if (!r->nth || *(end + r->onwards))
			return -EINVAL;
	}
	return err ? parse_errno(err, &r->err) : 0;
}

/* Replace the rules by those of @spec (NULL: none). */
static int parse_rules(const char *spec)
{
	char buf[512], *save, *tok;
	unsigned int bits = 0;

	nr_rules = 0;
	atomic_store(&armed, 0);
	if (!spec || !*spec)
		return 0;
	if (strlen(spec) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, spec);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (nr_rules == INJECT_MAX_RULES ||
		    parse_rule(tok, &rules[nr_rules]) < 0) {
			nr_rules = 0;
			return -EINVAL;
		}
		bits |= 1u << rules[nr_rules++].point;
	}
	atomic_store(&armed, bits);
	return 0;
}

static void load(void)
{
	const char *spec = getenv("FAULTD_INJECT");

	if (parse_rules(spec) < 0) {
		fprintf(stderr, "libfaultd: FAULTD_INJECT=\"%s\": expected "
				"point[:nth[+][:errno]],...\n", spec);
		abort();
	}
}

bool inject_fail(enum inject_point p, int *err)
{
	unsigned long hit;

	if (p >= INJ_NR)
		return false;
	pthread_once(&load_once, load);
	hit = atomic_fetch_add_explicit(&hits[p], 1, memory_order_relaxed) + 1;
	if (!(atomic_load_explicit(&armed, memory_order_acquire) & (1u << p)))
		return false;
	for (unsigned int i = 0; i < nr_rules; i++) {
		const struct inject_rule *r = &rules[i];

		if (r->point != p ||
		    !(hit == r->nth || (r->onwards && hit > r->nth)))
			continue;
		if (err)
			*err = r->err;
		atomic_fetch_add_explicit(&fired[p], 1, memory_order_relaxed);
		return true;
	}
	return false;
}

/* The environment as inject_reset() reads it: no load at a later hit. */
static void load_by_reset(void)
{
}

int inject_reset(void)
{
	pthread_once(&load_once, load_by_reset);
	for (int i = 0; i < INJ_NR; i++) {
		atomic_store(&hits[i], 0);
		atomic_store(&fired[i], 0);
	}
	return parse_rules(getenv("FAULTD_INJECT"));
}

unsigned long inject_fired(enum inject_point p)
{
	return p < INJ_NR ? atomic_load(&fired[p]) : 0;
}
