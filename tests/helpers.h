/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * helpers.h - what the test programs share: contexts made with the
 * options a test names, the content pattern pagers write, pattern pagers
 * and one that fails, how long a race runs, a rendezvous with a deadline,
 * a log callback that keeps lines, and a child-process runner for tests
 * that expect a signal. The functions that assert use Criterion.
 */
#ifndef FAULTD_TEST_HELPERS_H
#define FAULTD_TEST_HELPERS_H

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <faultd.h>

#define PAGE 4096ul
#define MIB (1ul << 20)

/* A ThreadSanitizer build (scripts/sanitize.sh tsan). */
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

/* An AddressSanitizer build (scripts/sanitize.sh asan). */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/*
 * A bound on memory measured from outside (VmHWM, KiB): asserted, except
 * under ASan and TSan, whose allocators (redzones, quarantine, shadow,
 * history) add megabytes the library does not use; there it is logged.
 * The plain suites assert it.
 */
#define assert_kib_bound(grew, bound, ...)                                    \
	do {                                                                   \
		if (UNDER_ASAN || UNDER_TSAN)                                  \
			cr_log_info("under a sanitizer, not asserted: "      \
				    "%ld KiB of %ld", (long)(grew),            \
				    (long)(bound));                            \
		else                                                           \
			cr_assert_lt((grew), (bound), __VA_ARGS__);            \
	} while (0)

/* A context with the default options. */
static inline struct faultd_ctx *ctx_new(void)
{
	struct faultd_ctx *ctx = NULL;

	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	return ctx;
}

/* A context with @lock_mode (enum faultd_lock_mode) and @handlers threads. */
static inline struct faultd_ctx *make_ctx(unsigned int lock_mode,
					  unsigned int handlers)
{
	struct faultd_ctx_opts o = {
		.size = sizeof(o),
		.lock_mode = lock_mode,
		.handler_threads = handlers,
	};
	struct faultd_ctx *ctx = NULL;

	cr_assert_eq(faultd_ctx_create(&o, &ctx), 0);
	return ctx;
}

/*
 * How long a race runs: FAULTD_STRESS_SECONDS (make stress sets it), or
 * @dflt seconds, the short run of a plain test suite.
 */
static inline double race_seconds(double dflt)
{
	const char *s = getenv("FAULTD_STRESS_SECONDS");
	double v = s ? atof(s) : 0;

	return v > 0 ? v : dflt;
}

/* The content of byte @off of a region tagged @tag: a function of both. */
static inline uint64_t pattern_word(uint64_t tag, uint64_t off)
{
	uint64_t x = (off / 8) * 0x9e3779b97f4a7c15ull ^ tag;

	x ^= x >> 29;
	return x * 0xbf58476d1ce4e5b9ull;
}

static inline void pattern_fill(uint64_t tag, uint64_t off, void *buf,
				size_t len)
{
	uint64_t *w = buf;

	for (size_t i = 0; i < len / 8; i++)
		w[i] = pattern_word(tag, off + i * 8);
}

/* Number of 8-byte words of [base, base+len) that differ from the pattern. */
static inline size_t pattern_check(uint64_t tag, uint64_t off,
				   const void *base, size_t len)
{
	const uint64_t *w = base;
	size_t bad = 0;

	for (size_t i = 0; i < len / 8; i++)
		bad += w[i] != pattern_word(tag, off + i * 8);
	return bad;
}

/* A pager that writes pattern_word(tag, offset); tag is the arg. */
static inline ssize_t pattern_pager_fill(void *arg, struct faultd_region *r,
					 uint64_t off, void *buf, size_t len)
{
	(void)r;
	pattern_fill((uint64_t)(uintptr_t)arg, off, buf, len);
	return (ssize_t)len;
}

/* A pager whose tag is the region it serves, so content is per region. */
static inline ssize_t region_pattern_fill(void *arg, struct faultd_region *r,
					  uint64_t off, void *buf, size_t len)
{
	(void)arg;
	pattern_fill((uint64_t)(uintptr_t)r, off, buf, len);
	return (ssize_t)len;
}

/* A pager fill that always fails with -EIO. */
static inline ssize_t failing_fill(void *arg, struct faultd_region *r,
				   uint64_t off, void *buf, size_t len)
{
	return -EIO;
}

static inline struct faultd_pager pattern_pager(uint64_t tag,
						unsigned int flags)
{
	struct faultd_pager p = {
		.size = sizeof(p),
		.flags = flags,
		.fill = pattern_pager_fill,
		.arg = (void *)(uintptr_t)tag,
	};
	return p;
}

static inline uint64_t test_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * Wait until *v >= want or @timeout_ms pass (a deadline, not a sleep used
 * as synchronization: the caller asserts the result). Returns whether the
 * condition was met.
 */
static inline bool wait_at_least(atomic_int *v, int want, int timeout_ms)
{
	uint64_t end = test_now_ns() + (uint64_t)timeout_ms * 1000000ull;

	while (atomic_load(v) < want) {
		if (test_now_ns() > end)
			return false;
		sched_yield();
	}
	return true;
}

/*
 * The signal an access to a poisoned page gets: SIGBUS (UFFDIO_POISON,
 * Linux 6.6+), or on older kernels SIGSEGV, because there the library
 * makes the page inaccessible instead (README, "Kernel requirements").
 * Never zeros either way.
 */
static inline int poison_signal(void)
{
	struct faultd_features f = { .size = sizeof(f) };

	if (faultd_probe(&f) == 0 && !(f.have & FAULTD_HAVE_POISON))
		return SIGSEGV;
	return SIGBUS;
}

/*
 * A log callback that keeps the first LOG_LINES lines it gets, with their
 * levels; any thread may call it. Initialize with LOG_CAPTURE_INIT.
 */
#define LOG_LINES 64

struct log_capture {
	pthread_mutex_t lock;
	int n; /* lines received, kept or not */
	int level[LOG_LINES];
	char line[LOG_LINES][256];
};

#define LOG_CAPTURE_INIT { .lock = PTHREAD_MUTEX_INITIALIZER }

static inline void log_capture_fn(void *arg, int level, const char *msg)
{
	struct log_capture *c = arg;

	pthread_mutex_lock(&c->lock);
	if (c->n < LOG_LINES) {
		c->level[c->n] = level;
		snprintf(c->line[c->n], sizeof(c->line[0]), "%s", msg);
	}
	c->n++;
	pthread_mutex_unlock(&c->lock);
}

/* How many kept lines contain @needle at a level of at most @max (the
 * levels are syslog's: lower is more severe); -1 for @max: any level. */
static inline int log_count(struct log_capture *c, const char *needle,
			    int max)
{
	int found = 0;

	pthread_mutex_lock(&c->lock);
	for (int i = 0; i < c->n && i < LOG_LINES; i++)
		found += (max < 0 || c->level[i] <= max) &&
			 strstr(c->line[i], needle) != NULL;
	pthread_mutex_unlock(&c->lock);
	return found;
}

/* FAULTD_HAVE_* of this kernel (0 if userfaultfd is unavailable). */
static inline uint64_t probe_have(void)
{
	struct faultd_features f = { .size = sizeof(f) };

	return faultd_probe(&f) ? 0 : f.have;
}

/* Skip the test, saying why, when the kernel lacks any of @bits. */
#define skip_without(bits, what)                                              \
	do {                                                                   \
		if ((probe_have() & (bits)) != (bits))                         \
			cr_skip_test("this kernel lacks %s", what);            \
	} while (0)

/*
 * Run @fn in a child process and return how it ended: the signal number
 * that killed it (> 0), or -(exit status + 1).
 */
static inline int run_in_child(void (*fn)(void *), void *arg)
{
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		fn(arg);
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1000;
	if (WIFSIGNALED(status))
		return WTERMSIG(status);
	return -(WEXITSTATUS(status) + 1);
}

#endif /* FAULTD_TEST_HELPERS_H */
