/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * netns.h - a network of two namespaces of the test's own, for servers
 * reached over a real network path: the test process moves into a new
 * network namespace (the client's), a child holds another one (the
 * server's), and a veth pair joins them, 10.250.28.1 (client, hnbd0) to
 * 10.250.28.2 (server, hnbd1). Nothing else is in either namespace, so
 * nothing else can be contacted, and no name or address can collide with
 * another test's. A program may name its own pair and addresses: define
 * NETNS_DEV, NETNS_CLIENT and NETNS_SERVER before including this.
 *
 * Cleanup needs no step that could be skipped: the client's namespace
 * goes with the test process, the server's with its holder, which gets
 * SIGKILL when the test process dies (PR_SET_PDEATHSIG) - so a test that
 * fails or crashes leaves nothing behind. netns_end() only does it early.
 * Processes started in the server's namespace (netns_enter() in a child)
 * die with the test process too (servers.h).
 */
#ifndef FAULTD_TEST_NBD_NETNS_H
#define FAULTD_TEST_NBD_NETNS_H

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef NETNS_DEV
#define NETNS_DEV "hnbd"	/* the pair: NETNS_DEV "0" and NETNS_DEV "1" */
#define NETNS_CLIENT "10.250.28.1"
#define NETNS_SERVER "10.250.28.2"
#endif

struct netns {
	pid_t holder;	/* holds the server's namespace; 0: none */
	int fd;		/* the server's namespace; -1: none */
};

static inline int netns_fail(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static inline int netns_fail(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return -1;
}

/* Run a shell command; 0 when it exited 0. */
static inline int netns_sh(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static inline int netns_sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = system(cmd);
	return st == 0 ? 0 : -1;
}

/* In a child: die with the parent, even if it died already. */
static inline void netns_die_with_parent(pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
}

/* A child in a new network namespace that waits to be killed. */
static inline pid_t netns_holder(void)
{
	pid_t parent = getpid(), pid;
	int p[2];
	char c = 0;

	if (pipe(p))
		return -1;
	pid = fork();
	if (pid == 0) {
		netns_die_with_parent(parent);
		close(p[0]);
		c = unshare(CLONE_NEWNET) ? 'n' : 'y';
		if (write(p[1], &c, 1) != 1 || c != 'y')
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	if (pid < 0 || read(p[0], &c, 1) != 1 || c != 'y') {
		if (pid > 0) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
		}
		pid = -1;
	}
	close(p[0]);
	return pid;
}

/* Wait (up to 10 s) until the client's end of the pair is up. */
static inline int netns_wait_up(void)
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };

	for (int i = 0; i < 1000; i++) {
		if (!netns_sh("ip -o link show dev " NETNS_DEV "0 | grep -q "
			      "'state UP'"))
			return 0;
		nanosleep(&ts, NULL);
	}
	return -1;
}

/*
 * netns_make() - move the calling process into a new namespace and make
 * the pair. Returns 0, -1 with the reason in @err (then the caller skips:
 * no privilege for namespaces, no ip(8)).
 */
static inline int netns_make(struct netns *n, char *err, size_t len)
{
	char path[64];

	*n = (struct netns){ .fd = -1 };
	if (access("/usr/sbin/ip", X_OK) && access("/sbin/ip", X_OK) &&
	    access("/usr/bin/ip", X_OK))
		return netns_fail(err, len, "no ip(8) (iproute2)");
	if (unshare(CLONE_NEWNET))
		return netns_fail(err, len, "unshare(CLONE_NEWNET): %s",
				  strerror(errno));
	n->holder = netns_holder();
	if (n->holder < 0)
		return netns_fail(err, len, "no namespace for the server");
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)n->holder);
	n->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (n->fd < 0 ||
	    netns_sh("ip link set lo up && ip link add " NETNS_DEV "0 type "
		     "veth peer name " NETNS_DEV "1 netns %d && ip addr add "
		     "%s/24 dev " NETNS_DEV "0 && ip link set " NETNS_DEV "0 "
		     "up", (int)n->holder, NETNS_CLIENT) ||
	    netns_sh("nsenter -t %d -n sh -c 'ip link set lo up && ip addr add "
		     "%s/24 dev " NETNS_DEV "1 && ip link set " NETNS_DEV "1 "
		     "up'", (int)n->holder,
		     NETNS_SERVER) ||
	    netns_wait_up())
		return netns_fail(err, len, "setting up the veth pair failed");
	return 0;
}

/* In a child about to exec a server: into the server's namespace. */
static inline int netns_enter(const struct netns *n)
{
	return n && n->fd >= 0 ? setns(n->fd, CLONE_NEWNET) : 0;
}

static inline void netns_end(struct netns *n)
{
	if (n->fd >= 0)
		close(n->fd);
	if (n->holder > 0) {
		kill(n->holder, SIGKILL);
		waitpid(n->holder, NULL, 0);
	}
	*n = (struct netns){ .fd = -1 };
}

#endif /* FAULTD_TEST_NBD_NETNS_H */
