// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * front.c - the front ends' table, and the options the server and the
 * front ends share.
 */
#include <stddef.h>
#include <string.h>

#include "front.h"

struct daemon_opts dopts = {
	.max_sessions = 1024,
	.max_conns = 256,
	.max_user_conns = 16,
	.handshake_ms = 5000,
	.keeper_grace_s = 30,
};
unsigned int dopts_given;
uint64_t daemon_started_ms;

/* Every front end; a new one is one line here (its id: enum front_id). */
const struct front *const fronts[] = {
	&fdp_front,
	&criu_front,
	&fc_front,
	NULL,
};

/* The front end of `faultd @command` (NULL: faultd alone); NULL: none. */
const struct front *front_by_command(const char *command)
{
	for (const struct front *const *f = fronts; *f; f++)
		if ((*f)->start &&
		    (command ? (*f)->command && !strcmp((*f)->command, command)
			     : !(*f)->command))
			return *f;
	return NULL;
}

/* The front end that answers request @type of the faultd protocol. */
const struct front *front_for_request(enum proto_type type)
{
	for (const struct front *const *f = fronts; *f; f++)
		if ((*f)->request == type && (*f)->answer)
			return *f;
	return NULL;
}

/* The front end of a kept session, by its id; NULL: none. */
const struct session_ops *front_session_ops(uint16_t id)
{
	for (const struct front *const *f = fronts; *f; f++)
		if ((*f)->session->front_id == id)
			return (*f)->session;
	return NULL;
}

void front_nbd_log(void *arg, const char *line)
{
	(void)arg;
	dlog(LOG_WARNING, "%s", line);
}

/* The chunk NBD source @s fetches at once (0: not one): a session's
 * fault-around, so that a fault installs what its fetch brought. */
size_t nbd_chunk(struct source *s)
{
	struct src_nbd_stats st;

	if (!src_nbd_is(s))
		return 0;
	src_nbd_stats(s, &st);
	return st.chunk;
}

/* @allow_local_files: the URI may name TLS files of this host (it was
 * written by root or the administrator). */
struct src_nbd_opts front_nbd_opts(bool allow_local_files)
{
	return (struct src_nbd_opts){
		.size = sizeof(struct src_nbd_opts),
		.retry = { .deadline_ms = dopts.nbd_deadline_ms },
		.allow_local_files = allow_local_files,
		.log = front_nbd_log,
	};
}
