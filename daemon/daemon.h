/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * daemon.h - what the parts of the faultd daemon share: options, logging,
 * sessions, and the checks of a registration.
 *
 * Threads: the main thread accepts connections and reads every
 * connection's HELLO and REGISTER or STATUS, non-blocking, with a deadline
 * for each message (conn.c); a REGISTER gets a thread of its own that
 * checks it and, once it is accepted, becomes the session's fault thread;
 * each session also has two push threads, at nice 19, that fill the rest
 * in the background (session.c). So the threads are 1 + 3 per session,
 * and sessions are bounded by the limits (conn.c). Lock order:
 * sessions_lock > session->lock (an rwlock); users_lock (conn.c) is a
 * leaf.
 */
#ifndef FAULTD_DAEMON_H
#define FAULTD_DAEMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "internal.h"
#include "proto.h"

/* faultd.c - options, logging. The limits count users other than root:
 * root's connections and sessions are never refused for anyone's. */
struct daemon_opts {
	const char *socket;
	int verbose;		/* 0: warnings, 1: info, 2: debug */
	unsigned int max_sessions;	/* of all users but root together */
	unsigned int max_user_sessions;	/* of one user */
	unsigned int max_conns;		/* not registered yet, together */
	unsigned int max_user_conns;	/* not registered yet, of one user */
	unsigned int handshake_ms;	/* for each message before a session */
};

extern struct daemon_opts dopts;
extern uint64_t daemon_started_ms;

void dlog(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t now_ms(void);

/* A range of the client, mapped to the image (proto_range, in use). */
struct srange {
	uint64_t start, len, image_off;
};

#define PUSHERS 2	/* push threads per session */

struct session {
	uint64_t id;
	int sock, uffd, pidfd, wake_fd;
	pid_t pid;
	uid_t uid;		/* of the client when it connected */
	uint64_t features;	/* UFFD_FEATURE_* of the client's uffd */
	bool lazy;		/* PROTO_REG_LAZY: no push threads */
	struct image *img;
	uint64_t started_ms;

	/* Read: copying into the client, translating addresses. Write:
	 * an event changes the ranges or removes pages. */
	pthread_rwlock_t lock;
	struct srange r[PROTO_MAX_RANGES * 2 + 2];
	unsigned int nr;
	_Atomic uint64_t *removed; /* image pages: zeros from now on */
	_Atomic uint64_t *served;  /* image blocks: in (or nothing to do) */
	uint64_t nr_pages, nr_blocks;
	atomic_uint_fast64_t blocks_done;

	atomic_bool stop;	/* end: client gone, daemon stopping, done */
	atomic_uint_fast64_t faults, pages_urgent, pages_background;
	atomic_uint_fast64_t pages_poisoned; /* bad image blocks */
	atomic_uint_fast64_t prefetch_block; /* hint; UINT64_MAX: none */
	atomic_uint_fast64_t push_from;	/* after the last fault's block */
	pthread_t pushers[PUSHERS];
	unsigned int nr_pushers;
	struct stat_block lat;	/* fault latency; the fault thread writes */
	struct session *next;	/* sessions, under sessions_lock */
};

/* session.c */
int session_run(struct session *s);
void session_progress(struct session *s, struct proto_progress *p,
		      enum proto_type type);
void session_free(struct session *s);
void sessions_stop_all(void);
size_t sessions_status(struct proto_session *out, size_t max, uid_t uid);

/* conn.c - connections until they register, and the limits */
int conn_loop(int ls, int sfd);

/* peer.c - the process at the other end of a connection */
struct peer {
	pid_t pid;		/* the process that connected */
	uid_t uid;		/* its effective IDs then (SO_PEERCRED) */
	gid_t gid;
	gid_t *groups;		/* its supplementary groups then */
	unsigned int nr_groups;
	int pidfd;		/* of that process: never of another */
	int mm_fd;		/* its /proc/PID/maps, opened at accept: it
				   reads nothing once the process exec'd */
	char *creds;		/* its credential lines of /proc/PID/status
				   at accept */
};

void peer_init(struct peer *p);
int peer_cred(int sock, struct peer *p);
int peer_bind(int sock, struct peer *p, const char **why);
int peer_unchanged(const struct peer *p, const char **why);
int peer_open(const struct peer *p, const char *file);
void peer_release(struct peer *p);

/* check.c - the checks of a registration */
int check_uffd(int fd, const char **why);
int check_ranges(const struct proto_register *m, const struct image *img,
		 const struct peer *peer, const char **why);

#endif /* FAULTD_DAEMON_H */
