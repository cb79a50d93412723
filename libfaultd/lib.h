/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * lib.h - the small helpers of libfaultd that the daemon, the bench and
 * the tests share with it (as liburing's lib.h): macros, the library's
 * threads, command-line numbers, io_uring file I/O, CRC32C. Nothing here
 * knows contexts, regions or sessions; internal.h has those.
 */
#ifndef FAULTD_LIB_H
#define FAULTD_LIB_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define container_of(p, type, member)                                          \
	((type *)((char *)(p) - offsetof(type, member)))
#define CACHELINE 64

/* stats.c: CLOCK_MONOTONIC in nanoseconds, the clock of every latency. */
uint64_t now_ns(void);

/* ------------------------------------------------------------------------
 * cmdline.c - numbers on the command lines of faultd and faultctl.
 */

unsigned int cmdline_uint(const char *prog, const char *opt, const char *arg,
			  unsigned int min, unsigned int max);

/* ------------------------------------------------------------------------
 * thread.c - the library's own threads: named, signals blocked.
 */

int thread_start(pthread_t *t, void *(*fn)(void *), void *arg,
		 const char *name);

/* ------------------------------------------------------------------------
 * ring.c - file I/O through io_uring, a ring per thread.
 */

int ring_probe(void);
ssize_t ring_rw(int fd, bool write, uint64_t off, void *buf, size_t len);
void ring_thread_close(void);

/* ------------------------------------------------------------------------
 * crc32c.c
 */

uint32_t crc32c(uint32_t crc, const void *buf, size_t len);
uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t len);

#endif /* FAULTD_LIB_H */
