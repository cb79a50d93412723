/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * front.h - the front ends: what the server knows of each, and the
 * options they share with it (front.c).
 */
#ifndef FAULTD_FRONT_H
#define FAULTD_FRONT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "engine.h"
#include "peer.h"
#include "proto.h"

/* The options the server and the front ends share. The limits count
 * users other than root: root's connections and sessions are never
 * refused for anyone's. */
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

/* fdp.c - the faultd protocol's sessions */
int fdp_register(int sock, const struct proto_register *m, int *fds,
		 struct peer *peer);
void fdp_status(int sock, uid_t uid);
extern const struct fe_kind fdp_kind;

/* fc.c - `faultd firecracker`: Firecracker's handshake's sessions */
int fc_main(int argc, char **argv);
extern const struct fe_kind fc_kind;

#endif /* FAULTD_FRONT_H */
