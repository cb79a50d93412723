/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * keep_proto.h - the messages between faultd and its keeper, on a
 * SOCK_SEQPACKET Unix socket (one message a packet; descriptors by
 * SCM_RIGHTS with PUT and ENTRY only).
 *
 *   daemon                         keeper
 *   HELLO {version, pid}      ->
 *                             <-   HELLO {version, pid, entries} | ERROR
 *   FETCH                     ->
 *                             <-   ENTRY {name, ...} + fds, ..., END
 *   PUT {name, ...} + fds     ->   (replaces an entry of that name)
 *   DROP {name}               ->
 *   BYE                       ->   (the keeper closes all and exits)
 */
#ifndef FAULTD_KEEP_PROTO_H
#define FAULTD_KEEP_PROTO_H

#include <stdint.h>

#include "keep.h"

#define KEEP_MAGIC 0x5045454bu /* "KEEP" */
#define KEEP_VERSION 1

enum keep_type {
	K_HELLO = 1,
	K_FETCH,
	K_ENTRY,
	K_END,
	K_PUT,
	K_DROP,
	K_BYE,
	K_ERROR,
};

struct keep_msg {
	uint32_t magic;		/* KEEP_MAGIC */
	uint16_t version;	/* KEEP_VERSION */
	uint16_t type;		/* enum keep_type */
	int32_t pid;		/* HELLO: the sender's */
	int32_t err;		/* ERROR: a negative errno */
	uint32_t nfds;		/* PUT, ENTRY: descriptors attached */
	uint32_t flags;		/* KEEP_F_* */
	uint64_t watch;		/* bit i: fds[i] is a pidfd to watch */
	uint64_t entries;	/* HELLO from the keeper */
	char name[KEEP_NAME_MAX];
	char text[160];		/* ERROR: why, NUL-terminated */
};

int keep_send(int sock, const struct keep_msg *m, const int *fds,
	      unsigned int nfds);
int keep_recv(int sock, struct keep_msg *m, int *fds, unsigned int *nfds);

#endif /* FAULTD_KEEP_PROTO_H */
