// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * lazy_pages.c - `faultd lazy-pages`: a drop-in for `criu lazy-pages`
 * (faultd(8), "faultd lazy-pages").
 *
 *   faultd lazy-pages -D DIR [-W WORKDIR] [--page-server --address A
 *          --port P] [--verify FILE] [--status-fd FD] [-o LOG] [-d
 *          [--pidfile F]] [--fault-around KIB] [--handlers N]
 *          [--working-set FILE | --record-working-set FILE] [-v]...
 *   faultd lazy-pages --sum -D DIR [--verify FILE]
 *
 * It opens and checks the dump first (what faultd cannot serve is refused
 * before criu restore can connect), attaches to its keeper at
 * WORKDIR/lazy-pages.socket.keeper (restart.c) and adopts a session a
 * killed faultd lazy-pages left there; else it listens on
 * WORKDIR/lazy-pages.socket, as criu lazy-pages does, for the one
 * connection of `criu restore --lazy-pages`, and serves it (front_criu.c).
 * It answers faultctl's STATUS on WORKDIR/lazy-pages.socket.ctl. It exits
 * 0 when every page of the restore is in, non-zero when the restore failed
 * or a page could not be served. A --working-set of another dump is
 * refused before it listens (logged; the restore is served without it);
 * SIGUSR1 ends a recording restore's record (front_criu.c).
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
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "front.h"
#include "server.h"
#include "criu.h"
#include "lazy_pages.h"
#include "sockfile.h"

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

static void usage(FILE *f)
{
	fprintf(f,
		"usage: faultd lazy-pages -D DIR [-W WORKDIR] [--page-server "
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

static int parse(int argc, char **argv, struct lp_opts *o)
{
	static const struct option lo[] = {
		{ "images-dir", required_argument, NULL, 'D' },
		{ "work-dir", required_argument, NULL, 'W' },
		{ "page-server", no_argument, NULL, 'S' },
		{ "address", required_argument, NULL, 'a' },
		{ "port", required_argument, NULL, 'p' },
		{ "verify", required_argument, NULL, 'V' },
		{ "sum", no_argument, NULL, 's' },
		{ "status-fd", required_argument, NULL, 'f' },
		{ "log-file", required_argument, NULL, 'o' },
		{ "daemon", no_argument, NULL, 'd' },
		{ "pidfile", required_argument, NULL, 'P' },
		{ "fault-around", required_argument, NULL, 'A' },
		{ "handlers", required_argument, NULL, 'H' },
		{ "working-set", required_argument, NULL, 'w' },
		{ "record-working-set", required_argument, NULL, 'r' },
		{ "verbosity", optional_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct lp_opts){ .status_fd = -1 };
	optind = 1;
	while ((c = getopt_long(argc, argv, "D:W:o:dv::h", lo, NULL)) != -1) {
		switch (c) {
		case 'D': o->dir = optarg; break;
		case 'W': o->workdir = optarg; break;
		case 'S': o->page_server = true; break;
		case 'a': o->address = optarg; break;
		case 'p': o->port = number("port", optarg, 65535); break;
		case 'V': o->verify = optarg; break;
		case 's': o->sum = true; break;
		case 'f': o->status_fd = (int)number("status-fd", optarg,
						     INT_MAX); break;
		case 'o': o->log = optarg; break;
		case 'd': o->daemonize = true; break;
		case 'P': o->pidfile = optarg; break;
		case 'A': o->around_kib = number("fault-around", optarg,
						 PROTO_LP_AROUND_MAX); break;
		case 'H': o->handlers = number("handlers", optarg,
					       PROTO_LP_HANDLERS_MAX); break;
		case 'w': o->wset = optarg; break;
		case 'r': o->record = optarg; break;
		case 'v':
			/* criu's -vN sets a level; faultd has 0-2 */
			dopts.verbose = optarg ? (int)number("verbosity", optarg,
							     4) - 2
					       : dopts.verbose + 1;
			break;
		case 'h': usage(stdout); exit(0);
		default: return -1;
		}
	}
	if (optind != argc || !o->dir ||
	    (o->page_server && (!o->address || !o->port)) ||
	    (o->sum && (o->page_server || o->daemonize))) {
		usage(stderr);
		return -1;
	}
	if (o->wset && o->record) {
		fprintf(stderr, "faultd lazy-pages: --working-set and "
			"--record-working-set: not both (a replayed page never "
			"faults, so a set recorded with a replay would miss "
			"it)\n");
		return -1;
	}
	if (o->page_server && o->verify) {
		fprintf(stderr, "faultd lazy-pages: --verify checks "
			"pages-N.img, which --page-server does not read\n");
		return -1;
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

static int open_sources(const struct lp_opts *o)
{
	char why[512];
	int ret = criu_dump_open(o->dir, &lp.dump, why, sizeof(why));
	char *dir = ret ? NULL : realpath(o->dir, NULL);

	if (!ret && (!dir || strlen(dir) >= sizeof(lp.dir)))
		ret = criu_why(why, sizeof(why), dir ? -ENAMETOOLONG : -errno,
			       "%s: %s", o->dir,
			       strerror(dir ? ENAMETOOLONG : errno));
	if (!ret)
		strcpy(lp.dir, dir);
	free(dir);

	if (!ret && o->verify)
		ret = lazy_pages_verify(&lp, o->verify, why, sizeof(why));
	if (!ret && o->page_server) {
		ret = criu_ps_connect(o->address, (uint16_t)o->port, NULL,
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

/* Is the process at the other end root or of our own user? */
static int lazy_pages_peer_ok(int c, struct ucred *cr)
{
	socklen_t len = sizeof(*cr);
	struct timeval tv = { .tv_sec = PEER_TIMEOUT_S };

	if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, cr, &len))
		return -errno;
	if (cr->uid != 0 && cr->uid != geteuid()) {
		dlog(LOG_WARNING, "refused a connection of uid %u (pid %d): only root "
			"or uid %u restores through this socket",
		     (unsigned int)cr->uid, (int)cr->pid,
		     (unsigned int)geteuid());
		return -EPERM;
	}
	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return 0;
}

/*
 * lazy_pages_probe() - did connection @c close without a byte? Then it
 * was no criu restore but a look whether somebody listens (path_free() of
 * another faultd): the socket stays for the restore. criu restore sends
 * its first task's pid soon after it connects; one that sends nothing for
 * PEER_TIMEOUT_S is taken as the restore (its session times it out).
 */
static bool lazy_pages_probe(int c)
{
	struct pollfd p = { .fd = c, .events = POLLIN | POLLRDHUP };
	char b;

	if (poll(&p, 1, PEER_TIMEOUT_S * 1000) != 1)
		return false;
	return recv(c, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/*
 * A signal came: SIGUSR1 ends the record of a recording restore (false);
 * any other stops the command (true).
 */
static bool stop_signal(int sfd)
{
	struct signalfd_siginfo si;

	if (read(sfd, &si, sizeof(si)) != sizeof(si) ||
	    si.ssi_signo != SIGUSR1)
		return true;
	dlog(LOG_INFO, "SIGUSR1: the working set recorded so far is written");
	sessions_record_end_all();
	return false;
}

/*
 * lazy_pages_accept() - criu restore's connection on @ls: root's or our
 * user's, and no probe (lazy_pages_probe()); or -ECANCELED once
 * @stopped(@stop_fd) says so when @stop_fd is readable.
 */
int lazy_pages_accept(int ls, int stop_fd, bool (*stopped)(int fd),
		      struct ucred *cr)
{
	for (;;) {
		struct pollfd p[2] = { { .fd = ls, .events = POLLIN },
				       { .fd = stop_fd, .events = POLLIN } };
		int c;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return -errno;
		if (p[1].revents && stopped(stop_fd))
			return -ECANCELED;
		if (!p[0].revents)
			continue;
		c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0 && (errno == EINTR || errno == ECONNABORTED))
			continue;
		if (c < 0)
			return -errno;
		if (!lazy_pages_peer_ok(c, cr) && !lazy_pages_probe(c))
			return c;
		close(c);
	}
}

/* ------------------------------------------------------------------------
 * Threads: the restore's session, the control socket.
 */

struct serve_arg {
	int sock;
	struct ucred cr;
};

static void *serve_main(void *arg)
{
	struct serve_arg *a = arg;
	int ret = criu_serve(&lp, a->sock, a->cr.uid, a->cr.pid);

	if (ret)
		dlog(LOG_WARNING, "cannot serve the restore: %s", strerror(-ret));
	free(a);
	return NULL;
}

struct ctl {
	struct sockfile sf;
	int ls;
	int stop_fd;
	pthread_t t;
	bool running;
};

static void *ctl_main(void *arg)
{
	struct ctl *c = arg;

	conn_loop(c->ls, c->stop_fd);
	return NULL;
}

/* faultctl's STATUS on PATH.ctl (a failure is logged, not fatal). */
static void ctl_start(struct ctl *c, const char *path)
{
	c->ls = lazy_pages_listen(&c->sf, path, SOCK_SEQPACKET);
	c->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (c->ls < 0 || c->stop_fd < 0) {
		dlog(LOG_WARNING, "%s: %s: no status for faultctl", path,
		     strerror(c->ls < 0 ? -c->ls : errno));
		return;
	}
	dopts.status_only = true;
	c->running = !thread_start(&c->t, ctl_main, c, "faultd-ctl");
}

static void ctl_stop(struct ctl *c)
{
	uint64_t one = 1;

	if (c->running) {
		(void)!write(c->stop_fd, &one, sizeof(one));
		pthread_join(c->t, NULL);
	}
	if (c->ls >= 0)
		close(c->ls);
	sockfile_remove(&c->sf);
	sockfile_close(&c->sf);
	if (c->stop_fd >= 0)
		close(c->stop_fd);
}

/* ------------------------------------------------------------------------
 * The command.
 */

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

static int signals(void)
{
	sigset_t set;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	return signalfd(-1, &set, SFD_CLOEXEC);
}

/* Listen, accept criu restore, start its session. Returns 0 or -errno. */
static int serve_new(const struct lp_opts *o, const char *path, int sfd,
		     int ready)
{
	struct serve_arg *a = calloc(1, sizeof(*a));
	struct sockfile sf = SOCKFILE_INIT;
	int ls = a ? lazy_pages_listen(&sf, path, SOCK_STREAM) : -ENOMEM;

	if (ls < 0) {
		sockfile_close(&sf);
		fprintf(stderr, "faultd lazy-pages: %s: %s\n", path,
			strerror(-ls));
		free(a);
		return ls;
	}
	dlog(LOG_INFO, "listening on %s", path);
	tell_ready(o, ready);
	a->sock = lazy_pages_accept(ls, sfd, stop_signal, &a->cr);
	close(ls);
	sockfile_remove(&sf); /* criu restore connects once */
	sockfile_close(&sf);
	if (a->sock < 0) {
		int ret = a->sock;

		free(a);
		return ret;
	}
	lazy_pages_started(&lp);
	if (daemon_thread_start(serve_main, a, "faultd-criu") < 0) {
		close(a->sock);
		free(a);
		lazy_pages_ended(&lp, false);
		return -EAGAIN;
	}
	return 0;
}

/* Until every session ended; a signal leaves them to the keeper. */
static bool wait_sessions(int sfd)
{
	bool stopped = false;

	while (atomic_load(&lp.live)) {
		struct pollfd p[2] = { { .fd = lp.done_fd, .events = POLLIN },
				       { .fd = sfd, .events = POLLIN } };
		uint64_t v;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[0].revents)
			(void)!read(lp.done_fd, &v, sizeof(v));
		if (p[1].revents && stop_signal(sfd) && !stopped) {
			stopped = true;
			dlog(LOG_WARNING, "stopping: the restore stays with the keeper "
				"for the next faultd lazy-pages");
			sessions_stop_all();
		}
	}
	return stopped;
}

static int run(const struct lp_opts *o, const char *workdir, int ready)
{
	char path[PATH_MAX], ctl_path[PATH_MAX];
	struct keep_opts ko = { .socket = path,
				.grace_s = dopts.keeper_grace_s };
	struct ctl ctl = { .sf = SOCKFILE_INIT, .ls = -1, .stop_fd = -1 };
	int sfd = signals(), ret = 0;
	bool stopped;

	if (snprintf(path, sizeof(path), "%s/%s", workdir, SOCK_NAME) >=
		    (int)sizeof(path) - 8 ||
	    snprintf(ctl_path, sizeof(ctl_path), "%s.ctl", path) >=
		    (int)sizeof(ctl_path))
		return -ENAMETOOLONG;
	lp.done_fd = eventfd(0, EFD_CLOEXEC);
	if (sfd < 0 || lp.done_fd < 0)
		return -errno;
	criu_front_init(&lp);
	if (restart_begin(&ko) < -1)
		return -EBUSY;
	ctl_start(&ctl, ctl_path);
	if (atomic_load(&lp.live)) {
		dlog(LOG_WARNING, "adopted the restore a faultd lazy-pages before this "
			"one served");
		tell_ready(o, ready);
	} else {
		ret = serve_new(o, path, sfd, ready);
	}
	stopped = wait_sessions(sfd);
	ctl_stop(&ctl);
	restart_end();
	if (!ret && (stopped || atomic_load(&lp.failed) || !atomic_load(&lp.ok)))
		ret = -EIO;
	return ret;
}

int lazy_pages_main(int argc, char **argv)
{
	struct lp_opts o;
	char workdir[PATH_MAX];
	int ready = -1, ret;

	if (parse(argc, argv, &o))
		return 2;
	log_set_verbosity(dopts.verbose);
	if (o.sum)
		return sum_cmd(&o);
	if (!realpath(o.workdir ? o.workdir : o.dir, workdir)) {
		fprintf(stderr, "faultd lazy-pages: %s: %s\n",
			o.workdir ? o.workdir : o.dir, strerror(errno));
		return 1;
	}
	if (log_to(&o, workdir)) {
		fprintf(stderr, "faultd lazy-pages: %s: %s\n", o.log,
			strerror(errno));
		return 1;
	}
	/* Only this process says it is ready: not the keeper it starts. */
	if (o.status_fd >= 0 && fcntl(o.status_fd, F_SETFD, FD_CLOEXEC)) {
		fprintf(stderr, "faultd lazy-pages: --status-fd %d: %s\n",
			o.status_fd, strerror(errno));
		return 1;
	}
	if (o.daemonize && daemonize(&o, &ready))
		return 1;
	daemon_started_ms = now_ms();
	lp.around = (size_t)o.around_kib << 10;
	lp.handlers = o.handlers;
	if (open_sources(&o))
		return 1;
	check_wset(&o);
	ret = run(&o, workdir, ready);
	daemon_threads_wait(THREADS_WAIT_MS);
	close_sources();
	return ret ? 1 : 0;
}
