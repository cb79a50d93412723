/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * daemon-helpers.h - a faultd daemon for a test: started from
 * FAULTD_DAEMON (set by meson test) on a socket of the test's, stopped or
 * killed, and never left behind by a test that dies.
 */
#ifndef FAULTD_TEST_DAEMON_HELPERS_H
#define FAULTD_TEST_DAEMON_HELPERS_H

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "proto.h"

/*
 * Start the daemon on @sock with @extra (an option, or NULL), without
 * FAULTD_INJECT (the failure points are the test's, not the daemon's),
 * and wait - with a 5 s deadline - until it answers a HELLO.
 */
static inline pid_t test_daemon_start_with(const char *sock,
					   const char *extra)
{
	const char *exe = getenv("FAULTD_DAEMON");
	uint64_t end = test_now_ns() + 5000000000ull;
	pid_t pid;
	int s;

	cr_assert(exe, "FAULTD_DAEMON not set (run through meson test)");
	pid = fork();
	if (pid == 0) {
		/* A test that dies must not leave its daemon behind. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		unsetenv("FAULTD_INJECT");
		execl(exe, exe, "--socket", sock, extra, (char *)NULL);
		_exit(127);
	}
	cr_assert(pid > 0);
	/* Until it answers a HELLO: a socket that accepts may be one a
	 * keeper held for it before its loop runs. */
	for (;;) {
		struct proto_hello h;
		int ok;

		s = proto_connect(sock);
		ok = s >= 0 && proto_hello(s, 0, &h) == 0;
		if (s >= 0)
			close(s);
		if (ok)
			break;
		cr_assert(test_now_ns() < end, "the daemon did not come up");
		sched_yield();
	}
	return pid;
}

/* Send @sig to the daemon and reap it; returns its wait status. */
static inline int test_daemon_kill(pid_t pid, int sig)
{
	int status;

	kill(pid, sig);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	return status;
}

static inline pid_t test_daemon_start(const char *sock)
{
	return test_daemon_start_with(sock, NULL);
}

#endif
