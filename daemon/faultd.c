// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * faultd.c - the daemon: serves the page faults of restored processes from
 * their checkpoint images.
 *
 *   faultd [--socket PATH] [--max-sessions N] [--max-user-sessions N]
 *          [--max-connections N] [--max-user-connections N]
 *          [--handshake-timeout MS] [-v] [-v]
 *
 * It listens on a SOCK_SEQPACKET Unix socket (PATH, or the one systemd
 * passes with socket activation, or $XDG_RUNTIME_DIR/faultd.sock, else
 * /run/faultd/faultd.sock). One loop reads every connection's HELLO and
 * REGISTER (a session, see session.c) or STATUS (for faultctl), within
 * the limits (conn.c). A client is identified by SO_PEERCRED; a daemon
 * not run as root serves only its own user. Anything malformed gets an
 * ERROR saying what, and the connection is closed; the daemon carries
 * on. SIGTERM or SIGINT ends the sessions (their clients serve themselves
 * from then on) and the daemon.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"

struct daemon_opts dopts = {
	.max_sessions = 1024,
	.max_conns = 256,
	.max_user_conns = 16,
	.handshake_ms = 5000,
};
uint64_t daemon_started_ms;

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
	int s, probe, ret;
	mode_t mask;

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
	/*
	 * The file bind() makes takes the socket's mode less the umask, so
	 * the umask sets it: a chmod() of the path afterwards would follow
	 * whatever another user put there meanwhile. No other thread runs
	 * yet to see this umask.
	 */
	mask = umask(geteuid() == 0 ? 0111 : 0177);
	ret = bind(s, (struct sockaddr *)&a, sizeof(a));
	umask(mask);
	if (ret < 0 || listen(s, 128) < 0) {
		int err = -errno;

		close(s);
		return err;
	}
	return s;
}

/* Strict: all of @arg a decimal number in [@min, @max], or exit 2. */
static unsigned int parse_uint(const char *opt, const char *arg,
			       unsigned int min, unsigned int max)
{
	unsigned long v;
	char *end;

	errno = 0;
	v = strtoul(arg, &end, 10);
	if (*arg < '0' || *arg > '9' || *end || errno || v < min || v > max) {
		fprintf(stderr, "faultd: --%s: '%s' is not a number from %u "
			"to %u\n", opt, arg, min, max);
		exit(2);
	}
	return (unsigned int)v;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: faultd [--socket PATH] [--max-sessions N] "
		   "[--max-user-sessions N]\n"
		   "              [--max-connections N] "
		   "[--max-user-connections N]\n"
		   "              [--handshake-timeout MS] [-v]...\n");
}

#define MAX_LIMIT 1000000

static int parse(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "max-sessions", required_argument, NULL, 'm' },
		{ "max-user-sessions", required_argument, NULL, 'u' },
		{ "max-connections", required_argument, NULL, 'c' },
		{ "max-user-connections", required_argument, NULL, 'C' },
		{ "handshake-timeout", required_argument, NULL, 't' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct daemon_opts *o = &dopts;
	int c;

	while ((c = getopt_long(argc, argv, "s:m:vh", longopts, NULL)) != -1) {
		unsigned int *limit = NULL, max = MAX_LIMIT;
		int i;

		switch (c) {
		case 's': o->socket = optarg; continue;
		case 'm': limit = &o->max_sessions; break;
		case 'u': limit = &o->max_user_sessions; break;
		case 'c': limit = &o->max_conns; break;
		case 'C': limit = &o->max_user_conns; break;
		case 't': limit = &o->handshake_ms; max = 3600000; break;
		case 'v': o->verbose++; continue;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
		for (i = 0; longopts[i].val != c; i++)
			;
		*limit = parse_uint(longopts[i].name, optarg, 1, max);
	}
	/* By default one user may take a quarter of the sessions. */
	if (!o->max_user_sessions)
		o->max_user_sessions = o->max_sessions / 4 ? o->max_sessions / 4 : 1;
	return optind == argc ? 0 : -1;
}

/* Sessions need many descriptors: take the hard limit (systemd's soft
 * default is 1024 for compatibility with select(), which is not used). */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int main(int argc, char **argv)
{
	char def[108];
	sigset_t stop;
	int ls, sfd, ret;
	bool own;

	if (parse(argc, argv) < 0)
		return 2;
	raise_nofile();
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
	ret = conn_loop(ls, sfd);
	if (ret < 0)
		fprintf(stderr, "faultd: cannot serve: %s\n", strerror(-ret));
	dlog(1, "stopping");
	sessions_stop_all();
	if (own)
		unlink(dopts.socket);
	close(ls);
	return ret < 0 ? 1 : 0;
}
