/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * persist.h - a session's state kept where a restarted daemon finds it
 * (persist.c), and what a front end tells it about its sessions.
 */
#ifndef FAULTD_PERSIST_H
#define FAULTD_PERSIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keep.h"

struct session;
struct space;
struct source;

enum fe_kind_id {
	FE_FDP = 1,	/* the faultd protocol (front_fdp.c) */
	FE_CRIU,	/* CRIU's lazy-pages stream */
	FE_FC,		/* Firecracker's handshake */
	FE_NR,
};

/* How a front end's sessions are kept and adopted. */
struct fe_kind {
	enum fe_kind_id id;
	const char *name;
	/* Its peer serves itself when the session is dropped (a library
	 * client): a keeper drops it after the grace time; a daemon that
	 * stops ends it. Else it is kept until its processes are gone. */
	bool takeover;
	/* The front end's own state, for the record; returns its length. */
	size_t (*save)(struct session *s, void *blob, size_t max);
	/*
	 * Re-make the front end of an adopted session @s: its ops and data,
	 * its peer connection @peer (-1: none) and its sources, from their
	 * descriptors @srcfds (taken over; -1 where none was kept) in the
	 * order of the session's sources. Returns 0 or -errno.
	 */
	int (*adopt)(struct session *s, const void *blob, size_t len,
		     int peer, int *srcfds, size_t nr_srcs);
};

/* The session options a record keeps. */
struct session_opts_rec {
	uint32_t push, push_after_first, handlers, push_fair;
	uint64_t around;
};

#define INFLIGHT_SLOTS 8	/* install slots of a space: handlers, pushers */

extern struct keep *daemon_keep;

void fe_kind_register(const struct fe_kind *k);
int state_create(struct space *sp);
int state_journal(struct space *sp);
int state_restore(struct session *s, int fd, int uffd,
		  struct source *const *srcs, size_t nr_srcs,
		  struct space **spp);
void state_free(struct space *sp);
void state_inflight(struct space *sp, unsigned int slot, uint64_t off,
		    uint64_t len);
size_t state_inflight_get(const struct space *sp, uint64_t *off,
			  uint64_t *len, size_t max);
int session_persist(struct session *s);
void session_unpersist(struct session *s);
int session_adopt_entry(struct keep_entry *e, struct session **sp);

#endif /* FAULTD_PERSIST_H */
