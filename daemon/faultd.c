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
static atomic_uint_fast64_t next_session_id = 1;

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

static void status(int sock)
{
	size_t max = PROTO_MAX_SESSIONS;
	struct proto_status *st = calloc(1, PROTO_MAX_MSG);
	size_t n;

	if (!st)
		return;
	n = sessions_status(st->s, max);
	proto_init(&st->h, MSG_STATUS, sizeof(*st) + n * sizeof(st->s[0]));
	st->nr_sessions = (uint32_t)n;
	st->uptime_ms = now_ms() - daemon_started_ms;
	proto_send(sock, st, NULL, 0);
	free(st);
}

/*
 * The image of a REGISTER, checked with the key it carries, if any: the
 * image's own key (the client holds the user's key and derives it), so
 * that the daemon checks every block as the client would and learns
 * nothing that serves for another image. Whatever key a client sends only
 * decides what is served into its own memory.
 */
static int session_image(struct session *s, const struct proto_register *m,
			 int fd, const char **why)
{
	struct img_key key = { .image_key = true };
	int ret;

	if (m->flags & PROTO_REG_MAC)
		memcpy(key.key, proto_register_key(m), PROTO_KEY_LEN);
	ret = image_open(fd, NULL, m->flags & PROTO_REG_MAC ? &key : NULL,
			 &s->img, why);
	explicit_bzero(&key, sizeof(key));
	if (ret == -EINVAL)
		*why = "the second descriptor is not a full checkpoint image";
	return ret;
}

/* The session of an accepted REGISTER: image checked, ranges checked. */
static int session_new(int sock, const struct proto_register *m,
		       const int *fds, pid_t pid, struct session **sp)
{
	struct session *s = calloc(1, sizeof(*s));
	const char *why = "the image cannot be used";
	int ret;

	if (!s)
		return -ENOMEM;
	*s = (struct session){ .sock = -1, .uffd = -1, .pidfd = -1,
			       .wake_fd = -1, .pid = pid,
			       .features = m->uffd_features,
			       .lazy = m->flags & PROTO_REG_LAZY };
	rwlock_init_writer_pref(&s->lock);
	ret = check_uffd(fds[0]) < 0 ? -EBADF : 0;
	if (ret)
		why = "the first descriptor is not a userfaultfd";
	if (!ret)
		ret = session_image(s, m, fds[1], &why);
	if (!ret && (m->flags & ~PROTO_REG_FLAGS)) {
		ret = -EINVAL;
		why = "unknown REGISTER flags";
	}
	if (!ret)
		ret = check_ranges(m, s->img, pid, &why);
	if (ret) {
		proto_error_send(sock, ret, "%s", why);
		session_free(s);
		return ret;
	}
	s->uffd = fds[0];
	s->nr_pages = (s->img->h.region_len + 4095) / 4096;
	s->nr_blocks = (s->img->h.region_len + IMG_BLOCK - 1) / IMG_BLOCK;
	s->removed = calloc((s->nr_pages + 63) / 64, 8);
	s->served = calloc((s->nr_blocks + 63) / 64, 8);
	s->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	for (uint32_t i = 0; i < m->nr_ranges; i++)
		s->r[s->nr++] = (struct srange){ m->r[i].start, m->r[i].len,
						 m->r[i].image_off };
	if (!s->removed || !s->served || s->pidfd < 0) {
		ret = s->pidfd < 0 ? -ESRCH : -ENOMEM;
		proto_error_send(sock, ret, "cannot start the session");
		s->uffd = -1; /* the caller closes it */
		session_free(s);
		return ret;
	}
	*sp = s;
	return 0;
}

/* A REGISTER: check it, acknowledge, serve until the session ends. */
static void serve(int sock, pid_t pid)
{
	union {
		struct proto_register reg;
		char buf[PROTO_MAX_MSG];
	} *u = malloc(sizeof(*u));
	int fds[2];
	unsigned int nfds = 0;
	struct session *s = NULL;
	struct proto_ack ack;
	ssize_t n = u ? recv_checked(sock, u, sizeof(*u), fds, 2, &nfds) : -ENOMEM;

	if (n < 0)
		goto out;
	if (u->reg.h.type == MSG_STATUS) {
		status(sock);
		goto out_fds;
	}
	if (u->reg.h.type != MSG_REGISTER || nfds != 2) {
		proto_error_send(sock, -EPROTO, u->reg.h.type == MSG_REGISTER
			? "REGISTER needs two descriptors: uffd and image"
			: "expected REGISTER or STATUS");
		goto out_fds;
	}
	if (atomic_fetch_add(&nr_sessions, 1) >= dopts.max_sessions) {
		proto_error_send(sock, -EBUSY, "too many sessions");
		atomic_fetch_sub(&nr_sessions, 1);
		goto out_fds;
	}
	if (session_new(sock, &u->reg, fds, pid, &s) < 0) {
		atomic_fetch_sub(&nr_sessions, 1);
		goto out_fds;
	}
	close(fds[1]); /* the image keeps its own duplicate */
	s->id = atomic_fetch_add(&next_session_id, 1);
	s->sock = sock;
	s->started_ms = now_ms();
	proto_init(&ack.h, MSG_ACK, sizeof(ack));
	ack.session = s->id;
	ack.pages_total = s->nr_pages;
	dlog(1, "session %llu: pid %d, %llu pages", (unsigned long long)s->id,
	     (int)pid, (unsigned long long)s->nr_pages);
	if (!proto_send(sock, &ack, NULL, 0))
		session_run(s);
	dlog(1, "session %llu ends", (unsigned long long)s->id);
	session_free(s); /* closes sock */
	atomic_fetch_sub(&nr_sessions, 1);
	free(u);
	return;
out_fds:
	for (unsigned int i = 0; i < nfds; i++)
		close(fds[i]);
out:
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
	serve(sock, cred.pid);
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
