// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * criu_cmd.c - `faultd lazy-pages`: a drop-in for `criu lazy-pages`
 * (faultd(8), "faultd lazy-pages").
 *
 *   faultd lazy-pages -D DIR [-W WORKDIR] [--page-server --address A
 *          --port P] [--verify FILE] [--status-fd FD] [-o LOG] [-d
 *          [--pidfile F]] [--fault-around KIB] [--handlers N]
 *          [--working-set FILE | --record-working-set FILE] [-v]...
 *   faultd lazy-pages --sum -D DIR [--verify FILE]
 *
 * It opens and checks the dump first (what faultd cannot serve is refused
 * before criu restore can connect); the server (server/main.c) then
 * attaches to its keeper at WORKDIR/lazy-pages.socket.keeper and adopts a
 * session a killed faultd lazy-pages left there; else it listens on
 * WORKDIR/lazy-pages.socket, as criu lazy-pages does, for the one
 * connection of `criu restore --lazy-pages`, and serves it (criu.c).
 * It answers faultctl's STATUS on WORKDIR/lazy-pages.socket.ctl. It exits
 * 0 when every page of the restore is in, non-zero when the restore failed
 * or a page could not be served. A --working-set of another dump is
 * refused before it listens (logged; the restore is served without it);
 * SIGUSR1 ends a recording restore's record (criu.c).
 *
 * The socket: only root and the daemon's own user may connect. It is made
 * 0600 before bind (the file takes the socket's mode; the path is never
 * touched after), the SO_PEERCRED of whoever connects must be root or the
 * daemon's uid (anyone else is refused and the daemon waits on), and a
 * path that exists is taken over only when it is a socket of this user
 * that nobody listens on (one a faultd left); anything else is refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "criu.h"
#include "front.h"
#include "lazy_pages.h"
#include "lib.h"

#define SOCK_NAME "lazy-pages.socket"
#define SUM_NAME "faultd-pages.crc32c"
#define PEER_TIMEOUT_S 10

struct lp_opts {
	const char *dir, *workdir, *address, *verify, *log, *pidfile;
	const char *wset, *record;
	bool page_server, sum, daemonize;
	unsigned int port;
	int status_fd;
	unsigned int around_kib, handlers;
};

static struct lazy_pages lp;

void lazy_pages_started(struct lazy_pages *l)
{
	atomic_fetch_add(&l->live, 1);
}

/* A session of @l ended; one of the daemon's restores is freed with it. */
void lazy_pages_ended(struct lazy_pages *l, bool ok)
{
	uint64_t one = 1;

	atomic_fetch_add(ok ? &l->ok : &l->failed, 1);
	atomic_fetch_sub(&l->live, 1);
	if (l->one_restore)
		lazy_daemon_free(l);
	else
		(void)!write(l->done_fd, &one, sizeof(one));
}

/*
 * lazy_pages_verify() - check @l's pages against the --sum sidecar
 * @file: loaded into l->sums and matched against l->dump. Returns 0,
 * or -errno with *why.
 */
int lazy_pages_verify(struct lazy_pages *l, const char *file, char *why,
		      size_t why_len)
{
	int ret = criu_sums_load(file, &l->sums, why, why_len);

	return ret ? ret : criu_dump_sums_match(l->dump, l->sums, why,
						 why_len);
}

static void lp_usage(FILE *f)
{
	fprintf(f,
		"       faultd lazy-pages -D DIR [-W WORKDIR] [--page-server "
		"--address A --port P]\n"
		"                         [--verify FILE] [--status-fd FD] "
		"[-o LOG] [-d [--pidfile F]]\n"
		"                         [--fault-around KIB] [--handlers N]\n"
		"                         [--working-set FILE | "
		"--record-working-set FILE] [-v]...\n"
		"       faultd lazy-pages --sum -D DIR [--verify FILE]\n");
}

static unsigned int number(const char *opt, const char *arg, unsigned int max)
{
	return cmdline_uint("faultd lazy-pages", opt, arg, 0, max);
}

static struct lp_opts lo = { .status_fd = -1 };

/* CRIU's own names and letters, so that a criu lazy-pages command line
 * works as it is. */
static const struct option lp_options[] = {
	{ "images-dir", required_argument, NULL, 'D' },
	{ "work-dir", required_argument, NULL, 'W' },
	{ "page-server", no_argument, NULL, 'S' },
	{ "address", required_argument, NULL, 'a' },
	{ "port", required_argument, NULL, 'p' },
	{ "verify", required_argument, NULL, 'V' },
	{ "sum", no_argument, NULL, 'U' },
	{ "status-fd", required_argument, NULL, 'f' },
	{ "log-file", required_argument, NULL, 'o' },
	{ "daemon", no_argument, NULL, 'd' },
	{ "pidfile", required_argument, NULL, 'P' },
	{ "fault-around", required_argument, NULL, 'A' },
	{ "handlers", required_argument, NULL, 'H' },
	{ "working-set", required_argument, NULL, 'w' },
	{ "record-working-set", required_argument, NULL, 'r' },
	{ "verbosity", optional_argument, NULL, 'v' },
	{ NULL, 0, NULL, 0 },
};

static int lp_option(int id, const char *arg)
{
	switch (id) {
	case 'D': lo.dir = arg; break;
	case 'W': lo.workdir = arg; break;
	case 'S': lo.page_server = true; break;
	case 'a': lo.address = arg; break;
	case 'p': lo.port = number("port", arg, 65535); break;
	case 'V': lo.verify = arg; break;
	case 'U': lo.sum = true; break;
	case 'f': lo.status_fd = (int)number("status-fd", arg, INT_MAX); break;
	case 'o': lo.log = arg; break;
	case 'd': lo.daemonize = true; break;
	case 'P': lo.pidfile = arg; break;
	case 'A': lo.around_kib = number("fault-around", arg,
					PROTO_LP_AROUND_MAX); break;
	case 'H': lo.handlers = number("handlers", arg,
				      PROTO_LP_HANDLERS_MAX); break;
	case 'w': lo.wset = arg; break;
	case 'r': lo.record = arg; break;
	case 'v':
		/* criu's -vN sets a level; faultd has 0-2 */
		dopts.verbose = arg ? (int)number("verbosity", arg, 4) - 2
				    : dopts.verbose + 1;
		break;
	default: return -1;
	}
	return 0;
}

/* The options together: what criu lazy-pages refuses, refused too. */
static int lp_options_check(void)
{
	if (!lo.dir || (lo.page_server && (!lo.address || !lo.port)) ||
	    (lo.sum && (lo.page_server || lo.daemonize))) {
		lp_usage(stderr);
		return -2;
	}
	if (lo.wset && lo.record) {
		fprintf(stderr, "faultd lazy-pages: --working-set and "
			"--record-working-set: not both (a replayed page never "
			"faults, so a set recorded with a replay would miss "
			"it)\n");
		return -2;
	}
	if (lo.page_server && lo.verify) {
		fprintf(stderr, "faultd lazy-pages: --verify checks "
			"pages-N.img, which --page-server does not read\n");
		return -2;
	}
	return 0;
}

/* --sum: the sidecar of DIR's pages files, DIR/faultd-pages.crc32c or
 * --verify's FILE. */
static int sum_cmd(const struct lp_opts *o)
{
	char path[PATH_MAX], why[512];
	int ret;

	if (o->verify)
		snprintf(path, sizeof(path), "%s", o->verify);
	else if (snprintf(path, sizeof(path), "%s/%s", o->dir, SUM_NAME) >=
		 (int)sizeof(path))
		return 1;
	ret = criu_sums_write(o->dir, path, why, sizeof(why));
	if (ret) {
		fprintf(stderr, "faultd lazy-pages: --sum: %s\n", why);
		return 1;
	}
	printf("%s\n", path);
	return 0;
}

/* ------------------------------------------------------------------------
 * What is served: the dump, the sidecar, the page server.
 */

/* What the page-server connection says of its losses and retries. */
static void ps_log_line(void *arg, const char *line)
{
	(void)arg;
	dlog(LOG_WARNING, "%s", line);
}

static int open_sources(const struct lp_opts *o)
{
	char why[512];
	int ret = criu_dump_open(o->dir, &lp.dump, why, sizeof(why));
	char *dir = ret ? NULL : realpath(o->dir, NULL);

	if (!ret && (!dir || strlen(dir) >= sizeof(lp.dir)))
		ret = why_set(why, sizeof(why), dir ? -ENAMETOOLONG : -errno,
			       "%s: %s", o->dir,
			       strerror(dir ? ENAMETOOLONG : errno));
	if (!ret)
		strcpy(lp.dir, dir);
	free(dir);

	if (!ret && o->verify)
		ret = lazy_pages_verify(&lp, o->verify, why, sizeof(why));
	if (!ret && o->page_server) {
		struct criu_ps_opts po = { .size = sizeof(po),
					   .log = ps_log_line };

		ret = criu_ps_connect(o->address, (uint16_t)o->port, &po,
				      &lp.ps);
		if (ret)
			snprintf(why, sizeof(why), "page server %s:%u: %s",
				 o->address, o->port, strerror(-ret));
	}
	if (ret)
		fprintf(stderr, "faultd lazy-pages: %s\n", why);
	return ret;
}

/* --working-set, checked against the dump: used, or not at all. */
static void check_wset(const struct lp_opts *o)
{
	char why[256];

	lp.record = o->record;
	if (!o->wset || !criu_wset_check(&lp, o->wset, why, sizeof(why))) {
		lp.wset = o->wset;
		return;
	}
	fprintf(stderr, "faultd lazy-pages: --working-set %s: %s: not used, "
		"the restore is served without it\n", o->wset, why);
}

static void close_sources(void)
{
	if (lp.ps)
		criu_ps_close(lp.ps);
	criu_sums_free(lp.sums);
	criu_dump_close(lp.dump);
}

/* ------------------------------------------------------------------------
 * The sockets.
 */

/*
 * lazy_pages_listen() - a socket of @type listening at @path, made through
 * @f (sockfile.h: removed by the directory opened now, never by the path
 * again), 0600 from its bind on: the file takes the socket's mode (fchmod()
 * before bind) less the umask. The umask is left alone: the daemon's other
 * threads may be creating files. A path that exists is taken over only
 * when it is a socket of this user that nobody listens on (one a faultd
 * left); anything else is refused, and logged.
 */
int lazy_pages_listen(struct sockfile *f, const char *path, int type)
{
	int ret = sockfile_open(f, path, false);

	if (!ret)
		ret = sockfile_listen(f, type, 0600, 16, 0);
	if (ret == -EEXIST)
		dlog(LOG_WARNING, "%s exists and is not a socket of this user: refused",
		     path);
	else if (ret == -EADDRINUSE)
		dlog(LOG_WARNING, "%s: somebody listens there already: refused", path);
	return ret;
}

/* ------------------------------------------------------------------------
 * criu restore's connection, as the server's loop reads it (front.h):
 * the command's socket, and those the daemon makes for the restores it is
 * asked to serve (criu_req.c). Only root and the daemon's user may
 * connect; anyone else is refused and the socket waits on. A connection
 * that closes without a byte was no criu restore but a look whether
 * somebody listens (lazy_pages_listen() of another faultd): the socket
 * stays for the restore. criu restore sends its first task's pid soon
 * after it connects; one that sends nothing for PEER_TIMEOUT_S is taken
 * as the restore (its session times it out).
 */

static unsigned int stream_deadline_ms(void)
{
	return PEER_TIMEOUT_S * 1000;
}

static int stream_admit(struct conn *c, const char **why)
{
	struct timeval tv = { .tv_sec = PEER_TIMEOUT_S };

	*why = "only root or the daemon's user restores through this socket";
	if (c->uid != 0 && c->uid != geteuid())
		return -EPERM;
	setsockopt(c->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return 0;
}

static enum conn_next stream_input(struct conn *c)
{
	char b;
	ssize_t n = recv(c->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return CONN_WAIT;
	return n > 0 ? CONN_SERVE : CONN_CLOSE; /* n <= 0: a probe */
}

static enum conn_next stream_late(struct conn *c)
{
	(void)c;
	return CONN_SERVE;
}

static enum conn_next stream_refuse(struct conn *c, int err, const char *why)
{
	dlog(LOG_WARNING, "refused a connection of uid %u (pid %d): %s (uid "
	     "%u)", (unsigned int)c->uid, (int)c->peer.pid, why,
	     (unsigned int)geteuid());
	(void)err;
	return CONN_CLOSE;
}

/* The restore, to its end (or until every page is in). */
static void stream_serve(struct conn *c)
{
	struct lazy_pages *l = c->listen_arg;
	int sock = c->sock, ret;

	c->sock = -1; /* criu_serve()'s */
	if (l->one_restore)
		lazy_daemon_served(l);
	lazy_pages_started(l);
	ret = criu_serve(l, sock, c->uid, c->peer.pid);
	if (ret)
		dlog(LOG_WARNING, "cannot serve the restore: %s", strerror(-ret));
}

const struct conn_ops criu_stream_ops = {
	.name = "criu restore",
	.deadline_ms = stream_deadline_ms,
	.admit = stream_admit,
	.input = stream_input,
	.late = stream_late,
	.refuse = stream_refuse,
	.serve = stream_serve,
};

/* -d: the parent waits until the daemon is ready (a byte on the pipe). */
static int daemonize(const struct lp_opts *o, int *ready)
{
	int p[2];
	pid_t pid;
	char c;

	if (pipe2(p, O_CLOEXEC))
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		close(p[0]);
		setsid();
		*ready = p[1];
		return 0;
	}
	close(p[1]);
	if (read(p[0], &c, 1) != 1)
		exit(1);
	if (o->pidfile) {
		FILE *f = fopen(o->pidfile, "w");

		if (!f || fprintf(f, "%d\n", (int)pid) < 0 || fclose(f)) {
			kill(pid, SIGKILL);
			exit(1);
		}
	}
	exit(0);
}

/* The status byte criu lazy-pages writes when it listens, and -d's. */
static void tell_ready(const struct lp_opts *o, int ready)
{
	char c = 0;

	if (o->status_fd >= 0) {
		(void)!write(o->status_fd, &c, 1);
		close(o->status_fd);
	}
	if (ready >= 0) {
		(void)!write(ready, &c, 1);
		close(ready);
	}
}

static int log_to(const struct lp_opts *o, const char *workdir)
{
	char path[PATH_MAX];

	if (!o->log)
		return 0;
	if (snprintf(path, sizeof(path), "%s%s%s", o->log[0] == '/' ? "" :
		     workdir, o->log[0] == '/' ? "" : "/", o->log) >=
	    (int)sizeof(path)) {
		errno = ENAMETOOLONG;
		return -errno;
	}
	if (!freopen(path, "a", stderr))
		return -errno;
	setvbuf(stderr, NULL, _IOLBF, 0);
	return 0;
}

/* The restore's folder and sockets: WORKDIR/lazy-pages.socket for criu
 * restore (served once; not made when a restore was adopted) and .ctl for
 * faultctl's STATUS. */
static int lp_sockets(struct front_start *st, const char *workdir)
{
	struct front_listen *l = st->listen;

	st->nr = 2;
	l[0] = (struct front_listen){ .type = SOCK_STREAM,
				      .ops = &criu_stream_ops, .arg = &lp,
				      .flags = LISTEN_STRICT | LISTEN_ONCE |
					       LISTEN_UNLESS_ADOPTED,
				      .fd = -1 };
	l[1] = (struct front_listen){ .type = SOCK_SEQPACKET,
				      .ops = &fdp_conn_ops,
				      .flags = LISTEN_STRICT | LISTEN_STATUS,
				      .fd = -1 };
	if ((size_t)snprintf(l[0].path, sizeof(l[0].path), "%s/%s", workdir,
			     SOCK_NAME) >= sizeof(l[0].path) - 8 ||
	    (size_t)snprintf(l[1].path, sizeof(l[1].path), "%s.ctl",
			     l[0].path) >= sizeof(l[1].path)) {
		fprintf(stderr, "faultd lazy-pages: %s/%s: %s\n", workdir,
			SOCK_NAME, strerror(ENAMETOOLONG));
		return -1;
	}
	return 0;
}

static int ready_fd = -1;	/* -d: the pipe the parent waits on */

/*
 * Everything before criu restore may connect: the options, --sum (which
 * is all it does), the log, -d, the dump and the set checked.
 */
static int lp_start(struct front_start *st)
{
	char workdir[PATH_MAX];
	int ret = lp_options_check();

	if (ret)
		return ret;
	if (lo.sum) {
		st->exit_now = sum_cmd(&lo);
		return 0;
	}
	if (!realpath(lo.workdir ? lo.workdir : lo.dir, workdir)) {
		fprintf(stderr, "faultd lazy-pages: %s: %s\n",
			lo.workdir ? lo.workdir : lo.dir, strerror(errno));
		return -1;
	}
	if (log_to(&lo, workdir)) {
		fprintf(stderr, "faultd lazy-pages: %s: %s\n", lo.log,
			strerror(errno));
		return -1;
	}
	/* Only this process says it is ready: not the keeper it starts. */
	if (lo.status_fd >= 0 && fcntl(lo.status_fd, F_SETFD, FD_CLOEXEC)) {
		fprintf(stderr, "faultd lazy-pages: --status-fd %d: %s\n",
			lo.status_fd, strerror(errno));
		return -1;
	}
	if (lo.daemonize && daemonize(&lo, &ready_fd))
		return -1;
	lp.around = (size_t)lo.around_kib << 10;
	lp.handlers = lo.handlers;
	lp.done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (lp.done_fd < 0 || open_sources(&lo))
		return -1;
	check_wset(&lo);
	criu_front_init(&lp);
	return lp_sockets(st, workdir);
}

static void lp_ready(void)
{
	if (atomic_load(&lp.live))
		dlog(LOG_WARNING, "adopted the restore a faultd lazy-pages "
		     "before this one served");
	tell_ready(&lo, ready_fd);
}

/* Every restore it started (or adopted) has ended. */
static bool lp_done(void)
{
	return !atomic_load(&lp.live) &&
	       atomic_load(&lp.ok) + atomic_load(&lp.failed);
}

static int lp_news(void)
{
	return lp.done_fd;
}

static void lp_stop(void)
{
	if (atomic_load(&lp.live))
		dlog(LOG_WARNING, "stopping: the restore stays with the keeper "
		     "for the next faultd lazy-pages");
}

/* 0 when every page of the restore is in; else 1. */
static int lp_finish(bool stopped)
{
	bool ok = !stopped && !atomic_load(&lp.failed) && atomic_load(&lp.ok);

	close_sources();
	return ok ? 0 : 1;
}

const struct front criu_front = {
	.name = "CRIU lazy-pages",
	.command = "lazy-pages",
	.session = &criu_session_ops,
	.request = MSG_LAZY_PAGES,
	.answer = lazy_daemon_asked,
	.shortopts = "D:W:o:dv::",
	.options = lp_options,
	.option = lp_option,
	.usage = lp_usage,
	.start = lp_start,
	.ready = lp_ready,
	.done = lp_done,
	.news = lp_news,
	.stop = lp_stop,
	.finish = lp_finish,
};
