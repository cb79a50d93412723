/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * lazy_pages.h - the CRIU front end: CRIU's lazy-pages stream as a
 * session (criu.c), `faultd lazy-pages` and criu restore's connections
 * (criu_cmd.c), the restores the daemon is asked to serve (criu_req.c).
 */
#ifndef FAULTD_LAZY_PAGES_H
#define FAULTD_LAZY_PAGES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "front.h"

struct criu_dump;
struct criu_ps;
struct criu_sums;

/*
 * What restores are served from: the command's (shared by its sessions),
 * or one restore's that the daemon serves (criu_req.c), which its one
 * session frees when it ends (lazy_pages_ended()).
 */
struct lazy_pages {
	char dir[1024];		/* -D, absolute: kept for a restart */
	char verify[1024];	/* --verify, absolute; "": none (the daemon's) */
	struct criu_dump *dump;	/* -D, opened and checked at the start */
	struct criu_ps *ps;	/* --page-server: the data from there */
	struct criu_sums *sums;	/* --verify: every page checked */
	size_t around;		/* --fault-around, bytes (0: the engine's) */
	const char *wset;	/* --working-set, checked; NULL: none */
	const char *record;	/* --record-working-set; NULL: none */
	char wset_buf[1024];	/* the daemon's: what wset points to */
	char record_buf[1024];	/* the daemon's: what record points to */
	unsigned int handlers;	/* --handlers (0: the engine's) */
	int done_fd;		/* eventfd: a session ended; -1: none */
	bool one_restore;	/* the daemon's: freed as its session ends */
	atomic_uint live;	/* sessions started and not freed */
	atomic_uint ok;		/* sessions that ended all in */
	atomic_uint failed;	/* sessions that did not */
};

/* criu_cmd.c - `faultd lazy-pages`, and criu restore's connections */
extern const struct conn_ops criu_stream_ops;
void lazy_pages_started(struct lazy_pages *lp);
void lazy_pages_ended(struct lazy_pages *lp, bool ok);
int lazy_pages_verify(struct lazy_pages *lp, const char *file, char *why,
		      size_t why_len);
int lazy_pages_listen(struct sockfile *f, const char *path, int type);

/* criu_req.c - the daemon's restores, asked for with faultctl */
int lazy_daemon_open(const char *dir, const char *verify,
		     struct lazy_pages **lpp, char *why, size_t why_len);
void lazy_daemon_free(struct lazy_pages *lp);
void lazy_daemon_asked(int sock, const struct peer *peer, const void *msg,
		       size_t len, struct front_listen **add);
void lazy_daemon_served(struct lazy_pages *lp);

/* criu.c - CRIU's lazy-pages stream as a session */
extern const struct session_ops criu_session_ops;
void criu_front_init(struct lazy_pages *lp);
int criu_serve(struct lazy_pages *lp, int sock, uid_t uid, pid_t pid);
int criu_wset_check(struct lazy_pages *lp, const char *path, char *why,
		    size_t why_len);

#endif /* FAULTD_LAZY_PAGES_H */
