/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * peer.h - the process at the other end of a front end's connection
 * (peer.c), and the checks of what it asks to be served (check.c).
 */
#ifndef FAULTD_PEER_H
#define FAULTD_PEER_H

#include <stddef.h>
#include <sys/types.h>

struct image;
struct proto_register;
struct srange;

/* peer.c */
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

/* check.c */
int check_uffd(int fd, const char **why);
int check_ranges(const struct proto_register *m, const struct image *img,
		 const struct peer *peer, const char **why);
int check_mapped(const struct peer *peer, const struct srange *r, size_t nr,
		 size_t page_size, const char **why);

#endif /* FAULTD_PEER_H */
