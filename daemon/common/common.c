// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * common.c - the daemon's clock, the setup of its process, and the threads
 * it joins before it exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "lib.h"
#include "uffd.h"

/*
 * why_set() - the reason of an error, for a caller that answers with a
 * sentence: printed into @why (@why_len bytes; NULL or 0: nowhere).
 * Returns @err, so that `return why_set(why, len, -EINVAL, ...)` reads.
 */
int why_set(char *why, size_t why_len, int err, const char *fmt, ...)
{
	va_list ap;

	if (!why || !why_len)
		return err;
	va_start(ap, fmt);
	vsnprintf(why, why_len, fmt, ap);
	va_end(ap);
	return err;
}

uint64_t now_ms(void)
{
	return now_ns() / 1000000;
}

/* Descriptors 0-2 are always open, so that no source ever gets one. */
void daemon_std_fds(void)
{
	for (int fd = open("/dev/null", O_RDWR | O_CLOEXEC); fd >= 0 && fd < 3;
	     fd = open("/dev/null", O_RDWR | O_CLOEXEC))
		fcntl(fd, F_SETFD, 0);
}

/* Strict: all of @arg a decimal number in [@min, @max], or exit 2. */
unsigned int daemon_parse_uint(const char *opt, const char *arg,
			       unsigned int min, unsigned int max)
{
	return cmdline_uint("faultd", opt, arg, min, max);
}

/* Sessions need many descriptors: take the hard limit (systemd's soft
 * default is 1024 for compatibility with select(), which is not used). */
void daemon_raise_nofile(void)
{
	struct rlimit rl;

	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* ------------------------------------------------------------------------
 * The daemon's own threads that no one joins by name (a session's control
 * loop, a restore that waits for CRIU, an adopted session). The daemon
 * exits only once they have ended, thread-exit handlers included: a
 * process that exits under them hands what they hold to its exit path,
 * and LeakSanitizer reports the thread-local state of a library (OpenSSL
 * keeps one per thread, freed as the thread ends) that a thread ending
 * during its check still held. So each is joined: at the next start
 * once it is done, or by daemon_threads_wait().
 */

struct daemon_thread {
	void *(*fn)(void *);
	void *arg;
	pthread_t t;
	struct daemon_thread *next;
};

static pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t threads_cond = PTHREAD_COND_INITIALIZER;
static unsigned int nr_threads;		/* running @fn */
static struct daemon_thread *threads_done; /* @fn returned, not joined */

static void *daemon_thread_main(void *p)
{
	struct daemon_thread *d = p;

	d->fn(d->arg);
	pthread_mutex_lock(&threads_lock);
	nr_threads--;
	d->next = threads_done;
	threads_done = d;
	pthread_cond_broadcast(&threads_cond);
	pthread_mutex_unlock(&threads_lock);
	return NULL;
}

/* Join the threads whose @fn returned (they end at once). */
static void threads_reap(void)
{
	struct daemon_thread *d;

	pthread_mutex_lock(&threads_lock);
	d = threads_done;
	threads_done = NULL;
	pthread_mutex_unlock(&threads_lock);
	while (d) {
		struct daemon_thread *next = d->next;

		pthread_join(d->t, NULL);
		free(d);
		d = next;
	}
}

/*
 * daemon_thread_start() - run @fn(@arg) on a thread named @name, joined
 * once @fn returns. Returns 0 or -errno (@fn not called: @arg is still
 * the caller's).
 */
int daemon_thread_start(void *(*fn)(void *), void *arg, const char *name)
{
	struct daemon_thread *d = malloc(sizeof(*d));
	int ret;

	threads_reap();
	if (!d)
		return -ENOMEM;
	d->fn = fn;
	d->arg = arg;
	pthread_mutex_lock(&threads_lock);
	nr_threads++;
	/* Under the lock: @d is on threads_done only after d->t is set. */
	ret = thread_start(&d->t, daemon_thread_main, d, name);
	if (ret)
		nr_threads--;
	pthread_mutex_unlock(&threads_lock);
	if (ret)
		free(d);
	return ret;
}

/*
 * daemon_threads_wait() - after sessions_stop_all(): wait up to @ms for
 * every thread of daemon_thread_start() to end, and join them. Returns
 * how many still run (logged: the daemon exits anyway, a stuck peer does
 * not hold it).
 */
unsigned int daemon_threads_wait(unsigned int ms)
{
	struct timespec until;
	unsigned int left;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += ms / 1000;
	until.tv_nsec += (long)(ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&threads_lock);
	while (nr_threads &&
	       pthread_cond_clockwait(&threads_cond, &threads_lock,
				      CLOCK_MONOTONIC, &until) != ETIMEDOUT)
		;
	left = nr_threads;
	pthread_mutex_unlock(&threads_lock);
	threads_reap();
	if (left)
		dlog(LOG_WARNING, "exiting with %u thread(s) still at work", left);
	return left;
}

