/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * persist.h - a session's state kept where a restarted daemon finds it:
 * its spaces' memfds (state.c) and its record (record.c).
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

/* The session options a record keeps. */
struct session_opts_rec {
	uint32_t push, push_after_first, handlers, push_fair;
	uint64_t around;
};

#define INFLIGHT_SLOTS 8	/* install slots of a space: handlers, pushers */

extern struct keep *daemon_keep;

/* record.c */
int session_persist(struct session *s);
void session_unpersist(struct session *s);
struct session_ops;
typedef const struct session_ops *(*session_front_fn)(uint16_t front_id);
int session_adopt_entry(struct keep_entry *e, session_front_fn front_of,
			struct session **sp);

#endif /* FAULTD_PERSIST_H */
