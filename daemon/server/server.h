/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * server.h - the server: main, the connection loop and its limits, the
 * keeper at the daemon's start and end.
 *
 * Threads: the main thread accepts connections and reads every
 * connection's HELLO and REGISTER or STATUS, non-blocking, with a deadline
 * for each message (conn.c); a REGISTER gets a thread of its own that
 * checks it and, once it is accepted, runs the session's control loop
 * (session.c); each session has its own handler and push threads. The
 * lock order of sessions is in session.h; users_lock (conn.c) is a leaf.
 */
#ifndef FAULTD_SERVER_H
#define FAULTD_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include <sys/socket.h>

#include "front.h"
#include "internal.h"
#include "proto.h"

unsigned int daemon_parse_uint(const char *opt, const char *arg,
			       unsigned int min, unsigned int max);

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

#endif /* FAULTD_SERVER_H */
