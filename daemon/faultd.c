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

#include <systemd/sd-daemon.h>

#include "daemon.h"

#define HANDSHAKE_TIMEOUT_S 5

struct daemon_opts dopts = { .max_sessions = 1024, .keeper_grace_s = 30 };
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
 * reads them): its descriptor when one listening SOCK_SEQPACKET socket was
 * passed to this process, 0 when none was, -EINVAL when what was passed is
 * not that (more than one, or the wrong kind: the unit file is wrong).
 * Descriptors of the fd store (named NAME.N, keep.c) are not sockets to
 * listen on and are left to keep_fetch(). The variables are removed once
 * all is read, so that nothing the daemon starts inherits them.
 */
static int activated_socket(void)
{
	int n = sd_listen_fds(0), found = 0;

	for (int fd = SD_LISTEN_FDS_START; n > 0 && fd < SD_LISTEN_FDS_START + n;
	     fd++) {
		if (sd_is_socket(fd, AF_UNIX, SOCK_SEQPACKET, 1) <= 0)
			continue;
		if (found)
			return -EINVAL;
		found = fd;
		fcntl(fd, F_SETFD, FD_CLOEXEC);
	}
	return n < 0 || (n > 0 && !found && !dopts.fd_store) ? -EINVAL : found;
}

/* The path a passed socket is bound to (the keeper's is next to it). */
static const char *socket_path(int ls, char *buf, size_t len)
{
	struct sockaddr_un a;
	socklen_t alen = sizeof(a);

	if (getsockname(ls, (struct sockaddr *)&a, &alen) < 0 ||
	    alen <= offsetof(struct sockaddr_un, sun_path) || !a.sun_path[0] ||
	    strlen(a.sun_path) >= len)
		return NULL;
	strcpy(buf, a.sun_path);
	return buf;
}

/* Descriptors 0-2 are always open, so that no source ever gets one. */
static void std_fds(void)
{
	for (int fd = open("/dev/null", O_RDWR | O_CLOEXEC); fd >= 0 && fd < 3;
	     fd = open("/dev/null", O_RDWR | O_CLOEXEC))
		fcntl(fd, F_SETFD, 0);
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
	fprintf(f, "usage: faultd [--socket PATH] [--max-sessions N] "
		   "[--keeper-grace SECONDS] [--no-keeper] [--fd-store] "
		   "[-v]...\n"
		   "       faultd keeper --socket PATH --grace SECONDS\n");
}

/* `faultd keeper`: started by faultd itself (keep.c). */
static int keeper_cmd(int argc, char **argv)
{
	const char *sock = NULL;
	unsigned int grace = 0;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--socket"))
			sock = argv[i + 1];
		else if (!strcmp(argv[i], "--grace"))
			grace = (unsigned int)strtoul(argv[i + 1], NULL, 10);
	}
	if (!sock) {
		usage(stderr);
		return 2;
	}
	return keeper_main(sock, grace);
}

static int parse(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "max-sessions", required_argument, NULL, 'm' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "keeper-grace", required_argument, NULL, 'g' },
		{ "no-keeper", no_argument, NULL, 'K' },
		{ "fd-store", no_argument, NULL, 'F' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "s:m:vh", longopts, NULL)) != -1) {
		switch (c) {
		case 's': dopts.socket = optarg; break;
		case 'm': dopts.max_sessions = (unsigned int)atoi(optarg); break;
		case 'v': dopts.verbose++; break;
		case 'g':
			dopts.keeper_grace_s = (unsigned int)strtoul(optarg,
								     NULL, 10);
			break;
		case 'K': dopts.no_keeper = true; break;
		case 'F': dopts.fd_store = true; break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
	}
	return optind == argc ? 0 : -1;
}

/* Serve until SIGTERM or SIGINT. */
static void serve_loop(int ls, int sfd)
{
	for (;;) {
		struct pollfd p[3] = { { .fd = ls, .events = POLLIN },
				       { .fd = sfd, .events = POLLIN },
				       { .fd = restart_fd(), .events = 0 } };

		if (poll(p, 3, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (p[2].revents)
			restart_keeper_lost();
		if (p[0].revents)
			accept_one(ls);
	}
}

/* Attach to the keeper (or store): sessions adopted, socket perhaps. */
static int keep_begin(void)
{
	struct keep_opts ko = { .socket = dopts.socket,
				.grace_s = dopts.keeper_grace_s,
				.fd_store = dopts.fd_store };

	if (dopts.no_keeper)
		return -1;
	fe_kind_register(&fdp_kind);
	return restart_begin(&ko);
}

int main(int argc, char **argv)
{
	char def[108];
	sigset_t stop;
	int ls, sfd;
	bool own;

	if (argc > 1 && !strcmp(argv[1], "keeper"))
		return keeper_cmd(argc - 1, argv + 1);
	if (parse(argc, argv) < 0)
		return 2;
	std_fds();
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
	if (!own && !dopts.socket)
		dopts.socket = socket_path(ls, def, sizeof(def));
	if (!dopts.socket)
		dopts.socket = proto_default_socket(def, sizeof(def));
	if (!dopts.socket) {
		fprintf(stderr, "faultd: no socket path: %s\n",
			strerror(ENAMETOOLONG));
		return 1;
	}
	if (own) {
		int kept = keep_begin();

		if (kept < -1)
			return 1;
		ls = kept >= 0 ? kept : listen_on(dopts.socket);
		if (ls >= 0 && kept < 0)
			restart_keep_listen(ls);
	} else if (keep_begin() < -1) {
		return 1;
	}
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (ls < 0) {
		fprintf(stderr, "faultd: %s: %s\n", dopts.socket, strerror(-ls));
		return 1;
	}
	dlog(1, "listening on %s", own ? dopts.socket : "an activated socket");
	serve_loop(ls, sfd);
	dlog(1, "stopping: %u sessions", atomic_load(&nr_sessions));
	sessions_stop_all();
	if (restart_end() && own)
		unlink(dopts.socket);
	close(ls);
	return 0;
}
