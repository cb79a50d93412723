/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * inject.h - fault injection: named failure points that fail on demand in a
 * build with -Dfault-injection=true, and cost nothing in any other build
 * (inject_fail() is then a constant false the compiler folds away).
 *
 * The environment variable FAULTD_INJECT arms them: a comma-separated list
 * of point[:nth[+][:errno]]. A point fails its nth hit (1: the first), or
 * with "+" every hit from the nth on; without nth, every hit. errno is a
 * name (EAGAIN, ENOMEM, ...) or a number; without it, the point's default.
 * Hits are counted per point, in the whole process, from the first hit of
 * any point (or from inject_reset()). A malformed list aborts the process:
 * a typo must not make a test pass without injecting anything.
 *
 *   point         where                                     default errno
 *   alloc         the library's allocations on setup paths  ENOMEM
 *                 (fd_malloc() and the like, below)
 *   thread        every thread the library starts           EAGAIN
 *   register      UFFDIO_REGISTER                           ENOMEM
 *   copy          UFFDIO_COPY                               ENOMEM
 *   zeropage      UFFDIO_ZEROPAGE                           ENOMEM
 *   wake          UFFDIO_WAKE                               ENOMEM
 *   writeprotect  UFFDIO_WRITEPROTECT                       ENOMEM
 *   continue      UFFDIO_CONTINUE                           ENOMEM
 *   poison        UFFDIO_POISON                             ENOMEM
 *   read          file and image reads (ring_rw())          EIO
 *   short-read    the same reads, cut to half a length      (none)
 *                 (page-aligned, so a page reads nothing)
 *   send          daemon protocol: proto_send()             EPIPE
 *   recv          daemon protocol: proto_recv()             ECONNRESET
 *
 * An injected ioctl failure is one the kernel could return: errno is set
 * and nothing is done, so the uffd layer reports it as it would a real one.
 * The feature probe's own ioctls are not failure points.
 *
 * Example: FAULTD_INJECT=copy:3:EAGAIN,alloc:2+ fails the third
 * UFFDIO_COPY with EAGAIN and every allocation from the second on.
 */
#ifndef FAULTD_INJECT_H
#define FAULTD_INJECT_H

#include <stdbool.h>
#include <stdlib.h>

enum inject_point {
	INJ_ALLOC,
	INJ_THREAD,
	INJ_REGISTER,
	INJ_COPY,
	INJ_ZEROPAGE,
	INJ_WAKE,
	INJ_WRITEPROTECT,
	INJ_CONTINUE,
	INJ_POISON,
	INJ_READ,
	INJ_SHORT_READ,
	INJ_SEND,
	INJ_RECV,
	INJ_NR, /* not a point: never fails */
};

#ifdef FAULTD_FAULT_INJECTION
/*
 * inject_fail() - count a hit of @p; true if it must fail, with the
 * negative errno to report in *err (may be NULL).
 * Context: any thread; a signal handler (same-thread regions) once a
 * point was hit outside one, as region creation does: FAULTD_INJECT is
 * parsed then, and after that a hit is lock-free.
 */
bool inject_fail(enum inject_point p, int *err);
/*
 * inject_reset() - read FAULTD_INJECT again and restart the counts, for
 * tests that arm points as they go. Returns 0 or -EINVAL (malformed: no
 * point is armed). inject_fired() - how many times @p failed since.
 * Context: no failure point is being evaluated concurrently (the library
 * is idle: its threads wait for faults or requests).
 */
int inject_reset(void);
unsigned long inject_fired(enum inject_point p);
#else
static inline bool inject_fail(enum inject_point p, int *err)
{
	(void)p;
	(void)err;
	return false;
}
#endif

/* The library's allocations on setup paths: failure points "alloc". */
static inline void *fd_malloc(size_t n)
{
	return inject_fail(INJ_ALLOC, NULL) ? NULL : malloc(n);
}

static inline void *fd_calloc(size_t nmemb, size_t n)
{
	return inject_fail(INJ_ALLOC, NULL) ? NULL : calloc(nmemb, n);
}

static inline void *fd_aligned_alloc(size_t align, size_t n)
{
	return inject_fail(INJ_ALLOC, NULL) ? NULL : aligned_alloc(align, n);
}

/* On failure the old block stays, as with realloc(). */
static inline void *fd_realloc(void *p, size_t n)
{
	return inject_fail(INJ_ALLOC, NULL) ? NULL : realloc(p, n);
}

#endif /* FAULTD_INJECT_H */
