// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * faultd.c - the daemon: serves the page faults of restored processes from
 * their checkpoint images.
 *
 *   faultd [--socket PATH] [--max-sessions N] [-v] [-v]
 *
 * It listens on a SOCK_SEQPACKET Unix socket (PATH, or the one systemd
 * passes with socket activation, or $XDG_RUNTIME_DIR/faultd.sock, else
 * /run/faultd/faultd.sock). Each connection gets a thread: HELLO, then
 * REGISTER (a session, see session.c) or STATUS (for faultctl). A client
 * is identified by SO_PEERCRED; a daemon not run as root serves only its
 * own user. Anything malformed gets an ERROR saying what, and the
 * connection is closed; the daemon carries on. SIGTERM or SIGINT ends the
 * sessions (their clients serve themselves from then on) and the daemon.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"

#define HANDSHAKE_TIMEOUT_S 5

struct daemon_opts dopts = { .max_sessions = 1024 };
uint64_t daemon_started_ms;
static atomic_uint nr_sessions;

uint64_t now_ms(void)
{
	return now_ns() / 1000000;
}

/* Log to stderr: 0 errors and warnings (always), 1 info, 2 debug. */
void dlog(int level, const char *fmt, ...)
{
	static const char *const names[] = { "warning", "info", "debug" };
	va_list ap;

	if (level > dopts.verbose)
		return;
	fprintf(stderr, "faultd: %s: ", names[level < 3 ? level : 2]);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ------------------------------------------------------------------------
 * One connection.
 */

/* Receive one well-formed message; on a bad one, tell the peer why. */
static ssize_t recv_checked(int sock, void *buf, size_t max, int *fds,
			    unsigned int max_fds, unsigned int *nfds)
{
	const char *why;
	ssize_t n = proto_recv_checked(sock, buf, max, fds, max_fds, nfds,
				       &why);

	if (n < 0 && why)
		proto_error_send(sock, (int)n, "%s", why);
	return n;
}

static int hello(int sock)
{
	struct proto_hello h, reply = { .min_version = PROTO_VERSION,
					.max_version = PROTO_VERSION,
					.features = PROTO_FEATURES };
	ssize_t n = recv_checked(sock, &h, sizeof(h), NULL, 0, NULL);

	if (n < 0)
		return (int)n;
	if (h.h.type != MSG_HELLO) {
		proto_error_send(sock, -EPROTO, "expected HELLO first");
		return -EPROTO;
	}
	if (h.min_version > PROTO_VERSION || h.max_version < PROTO_VERSION) {
		proto_error_send(sock, -EPROTONOSUPPORT,
				 "this daemon speaks protocol version %u only",
				 PROTO_VERSION);
		return -EPROTONOSUPPORT;
	}
	proto_init(&reply.h, MSG_HELLO, sizeof(reply));
	return proto_send(sock, &reply, NULL, 0);
}

/* A REGISTER (a session until it ends) or a STATUS, after HELLO. */
static void serve(int sock, const struct ucred *cred)
{
	union {
		struct proto_register reg;
		char buf[PROTO_MAX_MSG];
	} *u = malloc(sizeof(*u));
	int fds[2] = { -1, -1 };
	unsigned int nfds = 0;
	ssize_t n = u ? recv_checked(sock, u, sizeof(*u), fds, 2, &nfds) : -ENOMEM;

	if (n < 0)
		goto out;
	if (u->reg.h.type == MSG_STATUS) {
		fdp_status(sock, cred->uid);
		goto out;
	}
	if (u->reg.h.type != MSG_REGISTER || nfds != 2) {
		proto_error_send(sock, -EPROTO, u->reg.h.type == MSG_REGISTER
			? "REGISTER needs two descriptors: uffd and image"
			: "expected REGISTER or STATUS");
		goto out;
	}
	if (atomic_fetch_add(&nr_sessions, 1) >= dopts.max_sessions) {
		proto_error_send(sock, -EBUSY, "too many sessions");
		atomic_fetch_sub(&nr_sessions, 1);
		goto out;
	}
	fdp_register(sock, &u->reg, fds, cred);
	atomic_fetch_sub(&nr_sessions, 1);
out:
	for (unsigned int i = 0; i < nfds; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(u);
	close(sock);
}

static void *conn_main(void *arg)
{
	int sock = (int)(intptr_t)arg;
	struct timeval tv = { .tv_sec = HANDSHAKE_TIMEOUT_S };
	struct ucred cred;
	socklen_t len = sizeof(cred);

	setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
	    (geteuid() != 0 && cred.uid != geteuid())) {
		proto_error_send(sock, -EACCES, "not allowed");
		close(sock);
		return NULL;
	}
	if (hello(sock) < 0) {
		close(sock);
		return NULL;
	}
	serve(sock, &cred);
	return NULL;
}

/* ------------------------------------------------------------------------
 * Listening.
 */

/*
 * The socket systemd passed (LISTEN_PID and LISTEN_FDS, as sd_listen_fds(3)
 * reads them): 3 when one listening SOCK_SEQPACKET socket was passed to
 * this process, 0 when none was, -EINVAL when what was passed is not that
 * (more than one, or the wrong kind: the unit file is wrong). The
 * variables are removed so that nothing the daemon starts inherits them.
 */
static int activated_socket(void)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
	int type = 0, listening = 0, ret = 3;
	socklen_t len = sizeof(int);

	if (!pid || !fds || atoi(pid) != getpid())
		return 0;
	if (atoi(fds) != 1 ||
	    getsockopt(3, SOL_SOCKET, SO_TYPE, &type, &len) < 0 ||
	    getsockopt(3, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0 ||
	    type != SOCK_SEQPACKET || !listening)
		ret = -EINVAL;
	else
		fcntl(3, F_SETFD, FD_CLOEXEC);
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	return ret;
}

static int listen_on(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char dir[sizeof(a.sun_path)];
	int s, probe;

	if (strlen(path) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	strcpy(a.sun_path, path);
	strcpy(dir, path);
	mkdir(dirname(dir), 0755);
	probe = proto_connect(path);
	if (probe >= 0) { /* someone serves there already */
		close(probe);
		return -EADDRINUSE;
	}
	unlink(path); /* a stale socket of a daemon that died */
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    chmod(path, geteuid() == 0 ? 0666 : 0600) < 0 ||
	    listen(s, 128) < 0) {
		int err = -errno;

		close(s);
		return err;
	}
	return s;
}

static void accept_one(int ls)
{
	int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
	pthread_t t;
	pthread_attr_t attr;

	if (c < 0)
		return;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, conn_main, (void *)(intptr_t)c)) {
		proto_error_send(c, -EAGAIN, "cannot start a thread");
		close(c);
	}
	pthread_attr_destroy(&attr);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: faultd [--socket PATH] [--max-sessions N] [-v]...\n");
}

static int parse(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "max-sessions", required_argument, NULL, 'm' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "s:m:vh", longopts, NULL)) != -1) {
		switch (c) {
		case 's': dopts.socket = optarg; break;
		case 'm': dopts.max_sessions = (unsigned int)atoi(optarg); break;
		case 'v': dopts.verbose++; break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
	}
	return optind == argc ? 0 : -1;
}

int main(int argc, char **argv)
{
	char def[108];
	sigset_t stop;
	int ls, sfd;
	bool own;

	if (parse(argc, argv) < 0)
		return 2;
	daemon_started_ms = now_ms();
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	sfd = signalfd(-1, &stop, SFD_CLOEXEC);
	ls = activated_socket();
	if (ls < 0) {
		fprintf(stderr, "faultd: the passed socket (LISTEN_FDS) must be "
			"one listening SOCK_SEQPACKET socket\n");
		return 1;
	}
	own = ls == 0;
	if (own) {
		if (!dopts.socket)
			dopts.socket = proto_default_socket(def, sizeof(def));
		ls = dopts.socket ? listen_on(dopts.socket) : -ENAMETOOLONG;
	}
	if (ls < 0) {
		fprintf(stderr, "faultd: %s: %s\n", dopts.socket, strerror(-ls));
		return 1;
	}
	dlog(1, "listening on %s", own ? dopts.socket : "an activated socket");
	for (;;) {
		struct pollfd p[2] = { { .fd = ls, .events = POLLIN },
				       { .fd = sfd, .events = POLLIN } };

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (p[0].revents)
			accept_one(ls);
	}
	dlog(1, "stopping: %u sessions", atomic_load(&nr_sessions));
	sessions_stop_all();
	if (own)
		unlink(dopts.socket);
	close(ls);
	return 0;
}
