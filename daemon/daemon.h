/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * daemon.h - what the parts of the faultd daemon share: options, logging,
 * sessions, and the checks of a registration.
 *
 * Threads: the main thread accepts connections and reads every
 * connection's HELLO and REGISTER or STATUS, non-blocking, with a deadline
 * for each message (conn.c); a REGISTER gets a thread of its own that
 * checks it and, once it is accepted, runs the session's control loop
 * (session.c); each session has its own handler and push threads. The
 * lock order of sessions is in session.h; users_lock (conn.c) is a leaf.
 */
#ifndef FAULTD_DAEMON_H
#define FAULTD_DAEMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include <sys/socket.h>

#include "internal.h"
#include "proto.h"
#include "session.h"

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
	bool no_keeper;		/* --no-keeper: a restart loses sessions */
	bool fd_store;		/* --fd-store: systemd keeps them */
	unsigned int keeper_grace_s;
	bool status_only;	/* the socket answers STATUS, no REGISTER
				   (faultd lazy-pages' control socket) */
};

extern struct daemon_opts dopts;
extern uint64_t daemon_started_ms;

void dlog(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t now_ms(void);
void daemon_std_fds(void);
void daemon_raise_nofile(void);
struct sockfile;
int daemon_listen(struct sockfile *f, const char *path, int type);
unsigned int daemon_parse_uint(const char *opt, const char *arg,
			       unsigned int min, unsigned int max);

/* front_fdp.c - the faultd protocol's sessions */
struct peer;
/* wset_cmd.c: faultd working-set ... */
int wset_cmd(int argc, char **argv);

int fdp_register(int sock, const struct proto_register *m, int *fds,
		 struct peer *peer);
void fdp_status(int sock, uid_t uid);
extern const struct fe_kind fdp_kind;

/* front_fc.c - `faultd firecracker`: Firecracker's handshake's sessions */
int fc_main(int argc, char **argv);
extern const struct fe_kind fc_kind;

/* src_image.c - a faultd image as a source */
int src_image_open(int fd, const struct img_key *key, struct source **sp,
		   const char **why);
struct image *src_image_of(struct source *s);

/* restart.c - the keeper at the daemon's start and end */
int restart_begin(const struct keep_opts *o);
void restart_keep_listen(int ls);
int restart_fd(void);
void restart_keeper_lost(void);
bool restart_end(void);

/* conn.c - connections until they register, and the limits */
int conn_prepare(void);
int conn_loop(int ls, int sfd);
void conn_session_gone(uid_t uid);

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
int check_mapped(const struct peer *peer, const struct srange *r, size_t nr,
		 size_t page_size, const char **why);

#endif /* FAULTD_DAEMON_H */
