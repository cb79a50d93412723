/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * server.h - the server: main, the connection loop and its limits, the
 * keeper at the daemon's start and end.
 *
 * Threads: the main thread runs the loop (conn.c): it accepts connections
 * and reads their handshakes, non-blocking, with a deadline for each
 * message; a connection whose handshake is whole gets a thread of its own
 * that runs its session's control loop (engine/session.c); each session
 * has its own handler and push threads. The lock order of sessions is in
 * engine/engine.h; users_lock (conn.c) is a leaf.
 */
#ifndef FAULTD_SERVER_H
#define FAULTD_SERVER_H

#include <stdbool.h>
#include <stdio.h>

#include "front.h"
#include "proto.h"

/* main.c */
int server_main(int argc, char **argv);
int server_keeper(int argc, char **argv);

/* opts.c - the one command-line parser */
int server_opts(const struct front *front, int argc, char **argv);
void server_usage(FILE *f);

/* keeper.c - `faultd keeper` */
int keeper_main(const char *socket, unsigned int grace_s);

/* restart.c - the keeper at the daemon's start and end */
int restart_begin(const struct keep_opts *o);
void restart_keep_listen(int ls);
int restart_fd(void);
void restart_keeper_lost(void);
bool restart_end(void);
unsigned int restart_adopted(void);

/* conn.c - the one loop: listening sockets, handshakes, limits */
int conn_prepare(const struct front *front, int sfd);
int conn_listen(const struct front_listen *fl, int fd, bool ours);
int conn_loop(void);
void conn_fini(bool keep_kept);

#endif /* FAULTD_SERVER_H */
