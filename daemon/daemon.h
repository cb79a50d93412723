/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * daemon.h - what the parts of the faultd daemon share: options, logging,
 * sessions, and the checks of a registration.
 *
 * Threads: the main thread accepts connections (faultd.c); each
 * connection gets a thread that reads its HELLO and REGISTER and, once the
 * registration is accepted, runs the session's control loop (session.c);
 * each session has its own handler and push threads. The lock order of
 * sessions is in session.h.
 */
#ifndef FAULTD_DAEMON_H
#define FAULTD_DAEMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <sys/socket.h>

#include "internal.h"
#include "proto.h"
#include "session.h"

/* faultd.c - options, logging */
struct daemon_opts {
	const char *socket;
	int verbose;		/* 0: warnings, 1: info, 2: debug */
	unsigned int max_sessions;
	bool no_keeper;		/* --no-keeper: a restart loses sessions */
	bool fd_store;		/* --fd-store: systemd keeps them */
	unsigned int keeper_grace_s;
};

extern struct daemon_opts dopts;
extern uint64_t daemon_started_ms;

void dlog(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t now_ms(void);

/* front_fdp.c - the faultd protocol's sessions */
int fdp_register(int sock, const struct proto_register *m, int *fds,
		 const struct ucred *peer);
void fdp_status(int sock, uid_t uid);
extern const struct fe_kind fdp_kind;

/* src_image.c - a faultd image as a source */
int src_image_open(int fd, struct source **sp);
struct image *src_image_of(struct source *s);

/* restart.c - the keeper at the daemon's start and end */
int restart_begin(const struct keep_opts *o);
void restart_keep_listen(int ls);
int restart_fd(void);
void restart_keeper_lost(void);
bool restart_end(void);

/* check.c - the checks of a registration */
int check_uffd(int fd);
int check_ranges(const struct proto_register *m, const struct image *img,
		 pid_t pid, const char **why);

#endif /* FAULTD_DAEMON_H */
