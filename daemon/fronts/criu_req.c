// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * lazy_daemon.c - restores of CRIU dumps served by the long-running
 * daemon, next to its other sessions: `faultctl lazy-pages -D DIR
 * [-W WORKDIR] [OPTIONS]` asks it (LAZY_PAGES, faultd-protocol(7)) to do
 * for one restore what `faultd lazy-pages -D DIR -W WORKDIR [OPTIONS]`
 * does, with the command's options but --page-server: --verify,
 * --fault-around, --handlers and the working sets.
 *
 * The request is checked, and its dump opened and checked, in the
 * daemon's connection loop: what faultd cannot serve is refused to
 * faultctl before criu restore can connect. Then a thread of the
 * request's own listens on WORKDIR/lazy-pages.socket (made as the command
 * makes it: 0600, only root and the daemon's user may connect), accepts
 * criu restore once and runs its session (front_criu.c) until every page
 * is in. Each request has its own struct lazy_pages, freed with its
 * session (lazy_pages_ended()). A restarted daemon adopts such a session
 * from the keeper like any other and opens its dump again from the folder
 * the session's record names.
 *
 * Only root and the daemon's own user may ask: the daemon reads the dump
 * with its own rights and serves whoever of them connects.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "front.h"
#include "criu.h"
#include "lazy_pages.h"
#include "sockfile.h"

#define SOCK_NAME "lazy-pages.socket"
#define WAITING_MAX 64	/* requests whose criu restore has not come yet */

/* Requests whose criu restore has not connected yet (their socket is in
 * the server's loop). */
static atomic_uint nr_waiting;

/* Is @path absolute and shorter than @max? Else -EINVAL with *why. */
static int abs_path_ok(const char *path, size_t max, char *why,
		       size_t why_len)
{
	if (path[0] == '/' && strlen(path) < max)
		return 0;
	return why_set(why, why_len, -EINVAL, "%s: not an absolute path of "
			"at most %zu bytes", path, max - 1);
}

/*
 * lazy_daemon_open() - one restore's struct lazy_pages, of the dump in
 * folder @dir (absolute), its pages checked against the --sum sidecar
 * @verify (absolute; "": none): opened and checked, or -errno with *why.
 */
int lazy_daemon_open(const char *dir, const char *verify,
		     struct lazy_pages **lpp, char *why, size_t why_len)
{
	struct lazy_pages *lp = calloc(1, sizeof(*lp));
	int ret = lp ? abs_path_ok(dir, sizeof(lp->dir), why, why_len)
		     : why_set(why, why_len, -ENOMEM, "out of memory");

	if (!ret && verify[0])
		ret = abs_path_ok(verify, sizeof(lp->verify), why, why_len);
	if (ret) {
		free(lp);
		return ret;
	}
	strcpy(lp->dir, dir);
	strcpy(lp->verify, verify);
	lp->done_fd = -1;
	lp->one_restore = true;
	ret = criu_dump_open(dir, &lp->dump, why, why_len);
	if (!ret && verify[0])
		ret = lazy_pages_verify(lp, verify, why, why_len);
	if (ret) {
		lazy_daemon_free(lp);
		return ret;
	}
	*lpp = lp;
	return 0;
}

void lazy_daemon_free(struct lazy_pages *lp)
{
	if (lp->sums)
		criu_sums_free(lp->sums);
	if (lp->dump)
		criu_dump_close(lp->dump);
	free(lp);
}

/* The lazy pages of every live task of @lp's dump. */
static uint64_t lazy_pages_of(const struct lazy_pages *lp)
{
	const struct criu_task *t;
	size_t n = criu_dump_tasks(lp->dump, &t);
	uint64_t pages = 0;

	for (size_t i = 0; i < n; i++) {
		const struct criu_range *r;
		ssize_t nr = t[i].zombie ? 0 : criu_task_lazy(lp->dump,
							      t[i].pid, &r);

		for (ssize_t j = 0; j < nr; j++)
			pages += r[j].len / CRIU_PAGE_SIZE;
	}
	return pages;
}

/* lazy_daemon_served() - the restore of @lp came: one fewer waits. */
void lazy_daemon_served(struct lazy_pages *lp)
{
	(void)lp;
	atomic_fetch_sub(&nr_waiting, 1);
}

/* A request's socket closed before its restore came: its dump goes. */
static void waiting_drop(void *arg)
{
	lazy_daemon_served(arg);
	lazy_daemon_free(arg);
}

/*
 * The socket of @m's restore, listening (made as the command makes it:
 * 0600, only root and the daemon's user may connect), into *flp for the
 * server's loop, which serves one criu restore on it (criu_cmd.c).
 */
static int start_waiting(const struct proto_lazy_pages *m,
			 struct lazy_pages *lp, struct front_listen **flp,
			 char *why, size_t why_len)
{
	const char *wd = m->workdir[0] ? m->workdir : m->dir;
	struct front_listen *fl = calloc(1, sizeof(*fl));
	int ret;

	if (!fl)
		return why_set(why, why_len, -ENOMEM, "out of memory");
	if (wd[0] != '/' ||
	    snprintf(fl->path, sizeof(fl->path), "%s/%s", wd, SOCK_NAME) >=
		    (int)sizeof(fl->path)) {
		free(fl);
		return why_set(why, why_len, -ENAMETOOLONG, "%s/%s: not an "
				"absolute path that fits a socket address",
				wd, SOCK_NAME);
	}
	if (atomic_fetch_add(&nr_waiting, 1) >= WAITING_MAX) {
		atomic_fetch_sub(&nr_waiting, 1);
		free(fl);
		return why_set(why, why_len, -EBUSY, "%u restores wait for "
				"criu restore already", WAITING_MAX);
	}
	fl->fd = lazy_pages_listen(&fl->sf, fl->path, SOCK_STREAM);
	if (fl->fd < 0) {
		ret = fl->fd;
		sockfile_close(&fl->sf);
		free(fl);
		atomic_fetch_sub(&nr_waiting, 1);
		return why_set(why, why_len, ret, "%s/%s: %s", wd, SOCK_NAME,
				strerror(-ret));
	}
	fl->type = SOCK_STREAM;
	fl->ops = &criu_stream_ops;
	fl->flags = LISTEN_STRICT | LISTEN_ONCE;
	fl->arg = lp;
	fl->drop = waiting_drop;
	dlog(LOG_INFO, "%s: waits for criu restore of %s", fl->path, lp->dir);
	*flp = fl;
	return 0;
}

/* Is @s a NUL-terminated string of @len bytes at most? */
static bool terminated(const char *s, size_t len)
{
	return memchr(s, '\0', len) != NULL;
}

/* Is every path of @m NUL-terminated, and each one given absolute? */
static int paths_ok(const struct proto_lazy_pages *m, char *why,
		    size_t why_len)
{
	const char *const paths[] = { m->dir, m->workdir, m->verify,
				      m->wset, m->record };
	int ret = 0;

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]) && !ret; i++)
		if (!terminated(paths[i], PROTO_PATH_MAX))
			ret = why_set(why, why_len, -EINVAL,
				       "a path is not NUL-terminated");
		else if (i == 0 || paths[i][0])
			ret = abs_path_ok(paths[i], PROTO_PATH_MAX, why,
					  why_len);
	return ret;
}

/* What request @m of @peer asks for, checked before anything is opened. */
static int request_ok(const struct peer *peer,
		      const struct proto_lazy_pages *m, char *why,
		      size_t why_len)
{
	if (peer->uid != 0 && peer->uid != geteuid())
		return why_set(why, why_len, -EPERM, "only root or uid %u "
				"may have this daemon serve a restore",
				(unsigned int)geteuid());
	if (m->flags)
		return why_set(why, why_len, -EINVAL, "unknown flags %#x",
				m->flags);
	if (m->reserved)
		return why_set(why, why_len, -EINVAL, "the reserved field is "
				"%u, not 0", m->reserved);
	if (m->around_kib > PROTO_LP_AROUND_MAX ||
	    m->handlers > PROTO_LP_HANDLERS_MAX)
		return why_set(why, why_len, -EINVAL, "fault-around %u KiB "
				"(at most %u), %u handlers (at most %u)",
				m->around_kib, PROTO_LP_AROUND_MAX,
				m->handlers, PROTO_LP_HANDLERS_MAX);
	if (m->wset[0] && m->record[0])
		return why_set(why, why_len, -EINVAL, "a working set to "
				"replay and one to record: not both (a "
				"replayed page never faults)");
	return paths_ok(m, why, why_len);
}

/*
 * The working set @m asks @lp's restore to replay (checked against the
 * dump), or to record, if any. Returns 0, or -errno with *why.
 */
static int wset_asked(struct lazy_pages *lp, const struct proto_lazy_pages *m,
		      char *why, size_t why_len)
{
	int ret = 0;

	if (m->wset[0] && !(ret = criu_wset_check(lp, m->wset, why, why_len)))
		lp->wset = strcpy(lp->wset_buf, m->wset);
	if (m->record[0])
		lp->record = strcpy(lp->record_buf, m->record);
	return ret;
}

/*
 * lazy_daemon_asked() - LAZY_PAGES @msg came from @peer on @sock: start
 * serving the restore (its socket into *add, for the server's loop), and
 * answer ACK or ERROR (why). Context: the server's loop.
 */
void lazy_daemon_asked(int sock, const struct peer *peer, const void *msg,
		       size_t len, struct front_listen **add)
{
	const struct proto_lazy_pages *m = msg;
	struct proto_ack ack = { .session = 0 };
	struct lazy_pages *lp = NULL;
	char why[512];
	int ret = len == sizeof(*m) ? request_ok(peer, m, why, sizeof(why))
				    : why_set(why, sizeof(why), -EPROTO,
					       "LAZY_PAGES of %zu bytes", len);

	if (!ret)
		ret = lazy_daemon_open(m->dir, m->verify, &lp, why,
				       sizeof(why));
	if (!ret && (ret = wset_asked(lp, m, why, sizeof(why))))
		lazy_daemon_free(lp);
	if (!ret) {
		lp->around = (size_t)m->around_kib << 10;
		lp->handlers = m->handlers;
		ack.pages_total = lazy_pages_of(lp);
		ret = start_waiting(m, lp, add, why, sizeof(why));
		if (ret)
			lazy_daemon_free(lp);
	}
	if (ret) {
		dlog(LOG_INFO, "LAZY_PAGES of uid %u refused: %s",
		     (unsigned int)peer->uid, why);
		proto_error_send(sock, ret, "%s", why);
		return;
	}
	proto_init(&ack.h, MSG_ACK, sizeof(ack));
	proto_send(sock, &ack, NULL, 0);
}
