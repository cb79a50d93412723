// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * faultctl.c - ask the faultd daemon how it is doing, or to serve a CRIU
 * restore.
 *
 *   faultctl [--socket PATH] status [--json]    one report
 *   faultctl [--socket PATH] watch              a live view, every 200 ms,
 *                                               until no session is left
 *   faultctl [--socket PATH] lazy-pages -D DIR [-W WORKDIR] [--verify FILE]
 *            [--fault-around KIB] [--handlers N]
 *            [--working-set FILE | --record-working-set FILE]
 *                                               the daemon serves the next
 *                                               criu restore --lazy-pages
 *                                               of DIR (lazy_daemon.c)
 *
 * For each session: the client's pid, pages in / total (urgent: filled
 * for faults; background: pushed), faults, and fault latency p50/p99
 * (from reading the fault to waking the thread). On a terminal, watch
 * draws a progress bar per session. A user other than root sees only
 * the sessions of its own processes. faultctl talks only to a daemon of
 * root's or of its own user, through directories no other user can
 * change (proto_connect_daemon()).
 */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib.h"
#include "proto.h"

static const char *sock_path;

/* One exchange with the daemon: @req, its answer into @reply (@max). */
static ssize_t daemon_call(const void *req, void *reply, size_t max)
{
	struct proto_hello hello;
	static char def[108];
	const char *why;
	ssize_t n;
	int s;

	if (!sock_path && !(sock_path = proto_default_socket(def, sizeof(def))))
		return -ENAMETOOLONG;
	s = proto_connect_daemon(sock_path, &why);
	if (s < 0 && why)
		fprintf(stderr, "faultctl: %s: %s\n", sock_path, why);
	if (s < 0)
		return s;
	n = proto_hello(s, 0, &hello);
	if (!n)
		n = proto_call(s, req, NULL, 0, reply, max);
	close(s);
	return n;
}

/* One STATUS exchange into @st (PROTO_MAX_MSG bytes). 0 or -errno. */
static int status_get(struct proto_status *st)
{
	struct proto_hdr req;
	ssize_t n;

	proto_init(&req, MSG_STATUS, sizeof(req));
	n = daemon_call(&req, st, PROTO_MAX_MSG);
	if (n < 0)
		return (int)n;
	return st->h.type == MSG_STATUS ? 0 : -EPROTO;
}

/* The absolute form of @path into @out (@len bytes), or -errno (said). */
static int abs_path(const char *path, char *out, size_t len)
{
	char *p = realpath(path, NULL);
	int ret = p ? 0 : -errno;

	if (p && strlen(p) >= len)
		ret = -ENAMETOOLONG;
	if (!ret)
		strcpy(out, p);
	else
		fprintf(stderr, "faultctl: %s: %s\n", path, strerror(-ret));
	free(p);
	return ret;
}

/*
 * The absolute form of @path, a file that may not exist yet (its folder
 * must), into @out (@len bytes), or -errno (said).
 */
static int abs_new_path(const char *path, char *out, size_t len)
{
	char *d = strdup(path), *b = strdup(path);
	const char *base = b ? basename(b) : "";
	int ret = d && b ? 0 : -ENOMEM;

	if (!ret && (!strcmp(base, ".") || !strcmp(base, "..") ||
		     !strcmp(base, "/")))
		ret = -EISDIR;
	if (!ret)
		ret = abs_path(dirname(d), out, len);
	else
		fprintf(stderr, "faultctl: %s: %s\n", path, strerror(-ret));
	if (!ret && strlen(out) + 1 + strlen(base) >= len) {
		ret = -ENAMETOOLONG;
		fprintf(stderr, "faultctl: %s: %s\n", path, strerror(-ret));
	}
	if (!ret) {
		if (strcmp(out, "/"))
			strcat(out, "/");
		strcat(out, base);
	}
	free(d);
	free(b);
	return ret;
}

/* What lazy-pages asks for: the command line's words. */
struct lp_req {
	const char *dir, *workdir, *verify, *wset, *record;
	unsigned int around_kib, handlers;
};

/* The LAZY_PAGES message of @r into @m, or -errno (said). */
static int lazy_pages_msg(const struct lp_req *r, struct proto_lazy_pages *m)
{
	int ret = abs_path(r->dir, m->dir, sizeof(m->dir));

	if (!ret && r->workdir)
		ret = abs_path(r->workdir, m->workdir, sizeof(m->workdir));
	if (!ret && r->verify)
		ret = abs_path(r->verify, m->verify, sizeof(m->verify));
	if (!ret && r->wset)
		ret = abs_path(r->wset, m->wset, sizeof(m->wset));
	if (!ret && r->record)
		ret = abs_new_path(r->record, m->record, sizeof(m->record));
	m->around_kib = r->around_kib;
	m->handlers = r->handlers;
	proto_init(&m->h, MSG_LAZY_PAGES, sizeof(*m));
	return ret;
}

/*
 * lazy-pages: the daemon serves the next criu restore of the dump in
 * @r->dir on WORKDIR/lazy-pages.socket (@r->workdir, or @r->dir). @buf:
 * room for the answer (PROTO_MAX_MSG).
 */
static int lazy_pages(const struct lp_req *r, void *buf)
{
	struct proto_lazy_pages *m = calloc(1, sizeof(*m));
	const struct proto_error *e = buf;
	const struct proto_ack *a = buf;
	ssize_t n = m ? lazy_pages_msg(r, m) : -ENOMEM;
	bool said = m && n; /* a path's failure, told already */

	if (!n)
		n = daemon_call(m, buf, PROTO_MAX_MSG);
	if (n > 0 && a->h.type == MSG_ACK)
		printf("faultctl: the daemon serves the restore of %s on "
		       "%s/lazy-pages.socket (%llu lazy pages)\n", m->dir,
		       m->workdir[0] ? m->workdir : m->dir,
		       (unsigned long long)a->pages_total);
	else if (n > 0 && e->h.type == MSG_ERROR)
		fprintf(stderr, "faultctl: lazy-pages: %s\n", e->msg);
	else if (n < 0 && !said)
		fprintf(stderr, "faultctl: lazy-pages: %s\n",
			strerror((int)-n));
	if (n > 0)
		n = a->h.type == MSG_ACK ? 0
		    : e->h.type == MSG_ERROR && e->err < 0 ? e->err : -EPROTO;
	free(m);
	return (int)n;
}

static double pct(const struct proto_session *s)
{
	uint64_t in = s->pages_urgent + s->pages_background + s->pages_zero;

	return s->pages_total ? 100.0 * (double)in / (double)s->pages_total
			      : 100.0;
}

static void print_json(const struct proto_status *st)
{
	printf("{\"uptime_ms\":%llu,\"sessions\":[",
	       (unsigned long long)st->uptime_ms);
	for (uint32_t i = 0; i < st->nr_sessions; i++) {
		const struct proto_session *s = &st->s[i];

		printf("%s{\"session\":%llu,\"pid\":%d,\"done\":%s,"
		       "\"pages_total\":%llu,\"pages_urgent\":%llu,"
		       "\"pages_background\":%llu,\"pages_zero\":%llu,"
		       "\"faults\":%llu,\"eexist\":%llu,\"eagain\":%llu,"
		       "\"removes\":%llu,\"poisoned\":%llu,"
		       "\"p50_ns\":%llu,\"p99_ns\":%llu,"
		       "\"first_fault_ms\":%llu,\"all_in_ms\":%llu,"
		       "\"kept\":%s,\"age_ms\":%llu}",
		       i ? "," : "", (unsigned long long)s->session, s->pid,
		       s->done ? "true" : "false",
		       (unsigned long long)s->pages_total,
		       (unsigned long long)s->pages_urgent,
		       (unsigned long long)s->pages_background,
		       (unsigned long long)s->pages_zero,
		       (unsigned long long)s->faults,
		       (unsigned long long)s->eexist,
		       (unsigned long long)s->eagain,
		       (unsigned long long)s->removes,
		       (unsigned long long)s->poisoned,
		       (unsigned long long)s->p50_ns,
		       (unsigned long long)s->p99_ns,
		       (unsigned long long)s->first_fault_ms,
		       (unsigned long long)s->all_in_ms,
		       s->kept ? "true" : "false",
		       (unsigned long long)s->age_ms);
	}
	printf("]}\n");
}

static void print_bar(double p)
{
	int w = 30, full = (int)(p / 100.0 * w + 0.5);

	printf("[");
	for (int i = 0; i < w; i++)
		putchar(i < full ? '#' : '.');
	printf("]");
}

static void print_text(const struct proto_status *st, bool bars)
{
	printf("faultd: up %.1f s, %u session%s\n",
	       (double)st->uptime_ms / 1000, st->nr_sessions,
	       st->nr_sessions == 1 ? "" : "s");
	for (uint32_t i = 0; i < st->nr_sessions; i++) {
		const struct proto_session *s = &st->s[i];

		printf("  session %llu pid %d ", (unsigned long long)s->session,
		       s->pid);
		if (bars)
			print_bar(pct(s));
		printf(" %5.1f%%  %llu/%llu pages (urgent %llu, background "
		       "%llu, zero %llu), %llu faults, p50 %.1f us, p99 %.1f "
		       "us\n",
		       pct(s),
		       (unsigned long long)(s->pages_urgent +
					    s->pages_background +
					    s->pages_zero),
		       (unsigned long long)s->pages_total,
		       (unsigned long long)s->pages_urgent,
		       (unsigned long long)s->pages_background,
		       (unsigned long long)s->pages_zero,
		       (unsigned long long)s->faults, (double)s->p50_ns / 1e3,
		       (double)s->p99_ns / 1e3);
	}
}

static int watch(struct proto_status *st)
{
	bool tty = isatty(STDOUT_FILENO);
	int ret;

	while (!(ret = status_get(st))) {
		if (tty)
			printf("\033[H\033[J");
		print_text(st, tty);
		fflush(stdout);
		if (!st->nr_sessions)
			return 0;
		usleep(200000);
	}
	return ret;
}

static unsigned int number(const char *opt, const char *arg,
			   unsigned int max)
{
	return cmdline_uint("faultctl", opt, arg, 0, max);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: faultctl [--socket PATH] status [--json]\n"
		   "       faultctl [--socket PATH] watch\n"
		   "       faultctl [--socket PATH] lazy-pages -D DIR "
		   "[-W WORKDIR] [--verify FILE]\n"
		   "                [--fault-around KIB] [--handlers N]\n"
		   "                [--working-set FILE | "
		   "--record-working-set FILE]\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "images-dir", required_argument, NULL, 'D' },
		{ "work-dir", required_argument, NULL, 'W' },
		{ "verify", required_argument, NULL, 'V' },
		{ "fault-around", required_argument, NULL, 'A' },
		{ "handlers", required_argument, NULL, 'H' },
		{ "working-set", required_argument, NULL, 'w' },
		{ "record-working-set", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct proto_status *st;
	struct lp_req r = { 0 };
	bool json = false, lp_opt = false;
	int c, ret;

	while ((c = getopt_long(argc, argv, "s:jhD:W:", longopts, NULL)) !=
	       -1) {
		switch (c) {
		case 's': sock_path = optarg; break;
		case 'j': json = true; break;
		case 'D': r.dir = optarg; break;
		case 'W': r.workdir = optarg; break;
		case 'V': r.verify = optarg; lp_opt = true; break;
		case 'A': r.around_kib = number("fault-around", optarg,
						PROTO_LP_AROUND_MAX);
			  lp_opt = true; break;
		case 'H': r.handlers = number("handlers", optarg,
					      PROTO_LP_HANDLERS_MAX);
			  lp_opt = true; break;
		case 'w': r.wset = optarg; lp_opt = true; break;
		case 'r': r.record = optarg; lp_opt = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc - 1 ||
	    !strcmp(argv[optind], "lazy-pages") != !!r.dir ||
	    ((r.workdir || lp_opt) && !r.dir) || (r.wset && r.record)) {
		usage(stderr);
		return 2;
	}
	st = calloc(1, PROTO_MAX_MSG);
	if (!st) {
		fprintf(stderr, "faultctl: %s\n", strerror(ENOMEM));
		return 1;
	}
	if (r.dir) {
		ret = lazy_pages(&r, st);
	} else if (!strcmp(argv[optind], "watch")) {
		ret = watch(st);
	} else if (!strcmp(argv[optind], "status")) {
		ret = status_get(st);
		if (!ret && json)
			print_json(st);
		else if (!ret)
			print_text(st, false);
	} else {
		usage(stderr);
		ret = 2;
	}
	if (ret < 0 && !r.dir)
		fprintf(stderr, "faultctl: %s\n", strerror(-ret));
	free(st);
	return ret < 0 ? 1 : ret > 0 ? 2 : 0;
}
