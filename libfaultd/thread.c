// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * thread.c - the threads the library starts for itself: the evictor,
 * the prefetch workers, a restore's watcher and working-set replayers.
 *
 * Each is named (faultd-*) for ps and debuggers, and runs with every
 * signal blocked, so that the application's signals go to its own threads
 * and none of its signal handlers runs on a thread it did not make.
 * Handler threads are not made here: handler.c names and places them.
 */
#include <signal.h>

#include "internal.h"

/*
 * thread_start() - a thread of the library's own (not a handler): named,
 * with every signal blocked, so that the application's signals go to its
 * own threads. Returns 0 or -errno.
 */
int thread_start(pthread_t *t, void *(*fn)(void *), void *arg,
		 const char *name)
{
	sigset_t all, old;
	int ret;

	if (inject_fail(INJ_THREAD, &ret))
		return ret;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = -pthread_create(t, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!ret)
		pthread_setname_np(*t, name);
	return ret;
}
