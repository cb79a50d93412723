/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * keep.h - where a session's descriptors outlive the daemon.
 *
 * A faultd that dies (kill -9, OOM, a crash) must leave its sessions'
 * faults waiting, never answered by the kernel, and a faultd started again
 * must adopt them. So every session's descriptors (its userfaultfds, its
 * sources, the peer's connection, and memfds holding the session's state)
 * are also held outside the daemon:
 *
 *   under systemd (--fd-store): in the service's file-descriptor store,
 *     through sd_pid_notify_with_fds(FDSTORE=1); systemd hands them back
 *     to the restarted daemon with LISTEN_FDS / LISTEN_FDNAMES;
 *   elsewhere: in a keeper, a small process faultd starts (`faultd keeper`)
 *     that holds nothing but descriptors, on SOCKET.keeper (0600, checked
 *     by SO_PEERCRED both ways).
 *
 * An entry is a name and up to KEEP_MAX_FDS descriptors. When the daemon
 * dies, the keeper keeps every entry; an entry whose peer can serve itself
 * (KEEP_F_TAKEOVER: a library client) is dropped after the grace time if
 * no daemon came back, so that its client sees the end of its connection
 * and takes over; other entries are kept until the processes of their
 * pidfds (the `watch` mask) have exited. A daemon that stops cleanly says
 * BYE for what it ended. Two daemons on one keeper, or a keeper of another
 * protocol version, are refused with a clear error.
 */
#ifndef FAULTD_KEEP_H
#define FAULTD_KEEP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define KEEP_MAX_FDS 240	/* below the kernel's SCM_MAX_FD (253) */
#define KEEP_NAME_MAX 48
#define KEEP_F_TAKEOVER (1u << 0) /* its peer serves itself if dropped */
#define KEEP_F_LISTEN (1u << 1)	 /* the daemon's listening socket */

struct keep;

struct keep_opts {
	const char *socket;	/* the daemon's; the keeper is SOCKET.keeper */
	unsigned int grace_s;	/* how long to wait for a new daemon */
	bool fd_store;		/* systemd's store instead of a keeper */
};

/* An entry handed back to a new daemon; fds are its to close. */
struct keep_entry {
	char name[KEEP_NAME_MAX];
	unsigned int flags;
	uint64_t watch;
	unsigned int nfds;
	int fds[KEEP_MAX_FDS];
};

typedef void (*keep_fn)(void *arg, struct keep_entry *e);

int keep_open(const struct keep_opts *o, struct keep **kp);
int keep_fetch(struct keep *k, keep_fn fn, void *arg);
int keep_put(struct keep *k, const char *name, const int *fds,
	     unsigned int nfds, unsigned int flags, uint64_t watch);
int keep_drop(struct keep *k, const char *name);
bool keep_lost(struct keep *k);
int keep_reopen(struct keep *k);
pid_t keep_pid(const struct keep *k);
int keep_fd(const struct keep *k);
void keep_close(struct keep *k, bool bye);


#endif /* FAULTD_KEEP_H */
