/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * front.h - the front ends, as the server sees them.
 *
 * A front end turns a peer's handshake into a session of the engine (the
 * faultd protocol's REGISTER, CRIU's lazy-pages stream, Firecracker's
 * handshake). Each is one registered struct front in one table
 * (front.c); the server walks the table, so nothing can be forgotten:
 *
 *   `faultd COMMAND`    runs the front end whose command it is (faultd
 *                       alone: the faultd protocol's), with the server's
 *                       shared options and the front end's own;
 *   a restart           finds a kept session's front end by its id
 *                       (session_ops.front_id);
 *   a request           of the faultd protocol on the daemon's socket
 *                       goes to the front end that answers its type.
 *
 * The server owns the one loop (server/conn.c) that accepts connections on
 * the sockets front ends ask for, reads their handshakes with deadlines
 * and per-user limits, and hands each, once its handshake is whole, to a
 * thread of its own that runs its session (struct conn_ops). The faultd
 * protocol's control messages (HELLO, STATUS) are answered there for
 * every command, the same way (fdp.c).
 *
 * Front ends use the engine (engine.h) and the sources; never the server.
 */
#ifndef FAULTD_FRONT_H
#define FAULTD_FRONT_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "engine.h"
#include "nbd.h"
#include "peer.h"
#include "proto.h"
#include "sockfile.h"

/* ------------------------------------------------------------------------
 * The options the server parses for every command that takes them
 * (struct front.shared says which).
 */

struct daemon_opts {
	const char *socket;	/* --socket */
	int verbose;		/* -v: 0 warnings, 1 info, 2 debug */
	/* The limits count users other than root: root's connections and
	 * sessions are never refused for anyone's. */
	unsigned int max_sessions;	/* of all users but root together */
	unsigned int max_user_sessions;	/* of one user */
	unsigned int max_conns;		/* in their handshake, together */
	unsigned int max_user_conns;	/* in their handshake, of one user */
	unsigned int handshake_ms;	/* for each message before a session */
	bool no_keeper;		/* --no-keeper: a restart loses sessions */
	bool fd_store;		/* --fd-store: systemd keeps them */
	unsigned int keeper_grace_s;
	const char *nbd_allow;	/* --nbd-allow FILE; NULL: NBD_ALLOW_FILE */
	unsigned int nbd_deadline_ms; /* --nbd-deadline; 0: retry.h's */
};

extern struct daemon_opts dopts;
extern unsigned int dopts_given;	/* the OPT_* given on the command line */
extern uint64_t daemon_started_ms;

#define OPT_SOCKET	(1u << 0)	/* --socket PATH */
#define OPT_SESSION_LIMITS (1u << 1)	/* --max-[user-]sessions */
#define OPT_CONN_LIMITS	(1u << 6)	/* --max-[user-]connections */
#define OPT_HANDSHAKE	(1u << 2)	/* --handshake-timeout MS */
#define OPT_KEEPER	(1u << 3)	/* --keeper-grace S, --no-keeper */
#define OPT_FD_STORE	(1u << 4)	/* --fd-store */
#define OPT_VERBOSE	(1u << 5)	/* -v, --verbose */
#define OPT_NBD_ALLOW	(1u << 7)	/* --nbd-allow FILE */
#define OPT_NBD		(1u << 8)	/* --nbd-deadline MS */

/* ------------------------------------------------------------------------
 * Connections, as the server's loop holds them for a front end.
 */

struct conn;

enum conn_next {
	CONN_WAIT,	/* more of the handshake to come, same deadline */
	CONN_NEXT,	/* a message answered: the next one's deadline */
	CONN_SERVE,	/* whole: its thread runs conn_ops.serve() */
	CONN_CLOSE,	/* over: answered or refused by the front end */
};

/* How the server treats the connections of one listening socket. */
struct conn_ops {
	const char *name;
	/* Its deadline, ms: dopts.handshake_ms where 0. */
	unsigned int (*deadline_ms)(void);
	/* Accepted: may this peer connect? 0, or -errno and *why (the
	 * server then calls refuse()). */
	int (*admit)(struct conn *c, const char **why);
	/* Readable (or hung up). */
	enum conn_next (*input)(struct conn *c);
	/* The deadline passed: CONN_SERVE (take it as it is) or CONN_CLOSE
	 * (answered, refused). NULL: refused with -ETIMEDOUT. */
	enum conn_next (*late)(struct conn *c);
	/* Refused (a limit, admit(), no thread): tell the peer as its
	 * protocol does. CONN_CLOSE: told, close it; CONN_WAIT: it waits
	 * for the peer (the faultd protocol answers the HELLO that comes),
	 * and input() or late() tell it then. */
	enum conn_next (*refuse)(struct conn *c, int err, const char *why);
	/* On a thread of its own after CONN_SERVE: the session, to its end.
	 * The connection's socket and state are its (c->sock is closed
	 * after, unless set to -1). */
	void (*serve)(struct conn *c);
	/* The connection leaves the server: free c->state. */
	void (*release)(struct conn *c);
	/* CONN_SERVE takes one of the user's sessions (--max-*sessions). */
	bool session;
};

/* A connection. The server fills the first part; c->state is the front
 * end's, and so is c->listen_arg (its listening socket's). */
struct conn {
	int sock;
	struct peer peer;	/* identified at accept */
	uid_t uid;		/* whose limits it counts in */
	void *listen_arg;	/* struct front_listen.arg */
	void *state;		/* the front end's */
	bool status_only;	/* a control socket: HELLO and STATUS only */
	/* Set by input(): one more socket to listen on (malloc'd; the
	 * server takes it). */
	struct front_listen *add;
	/* The server's own: */
	const struct conn_ops *ops;
	bool counted;		/* in the connection limits */
	bool refusing;		/* refused, waiting for its peer */
	uint64_t deadline_ms;
	struct conn *prev, *next;
};

/* ------------------------------------------------------------------------
 * Listening sockets front ends ask for.
 */

#define LISTEN_KEEP	(1u << 0) /* kept with the sessions: the path
				     stays served across a restart */
#define LISTEN_STRICT	(1u << 1) /* 0600, and a path that holds anything
				     but a stale socket of ours is refused */
#define LISTEN_ONCE	(1u << 2) /* one connection served, then closed
				     and its file removed */
#define LISTEN_STATUS	(1u << 3) /* the faultd protocol's control
				     socket: HELLO and STATUS only */
#define LISTEN_UNLESS_ADOPTED (1u << 4) /* not when the keeper held a
				     session of the front end: it is served */

struct front_listen {
	char path[108];
	int type;		/* SOCK_STREAM, SOCK_SEQPACKET */
	const struct conn_ops *ops;
	unsigned int flags;
	void *arg;		/* its connections' listen_arg */
	/* Listening already (the front end made it, to answer a request
	 * with what failed): its socket and file; else fd -1. */
	int fd;
	struct sockfile sf;
	/* A LISTEN_ONCE socket that served none when the daemon stops:
	 * free @arg. NULL: nothing to free. */
	void (*drop)(void *arg);
};

#define FRONT_LISTEN_MAX 2

/* ------------------------------------------------------------------------
 * The front ends.
 */

/* The ids kept sessions name their front end by: never reused. */
enum front_id {
	FRONT_FDP = 1,	/* the faultd protocol (fdp.c) */
	FRONT_CRIU,	/* CRIU's lazy-pages stream (criu.c) */
	FRONT_FC,	/* Firecracker's handshake (fc.c) */
};

/* What a front end's start() says. */
struct front_start {
	struct front_listen listen[FRONT_LISTEN_MAX]; /* the first: the
				main one, whose path names the keeper */
	unsigned int nr;
	bool activated;		/* the first may be systemd's socket */
	int exit_now;		/* >= 0: exit with it at once (--sum); the
				   server sets -1 */
};

struct front {
	const char *name;
	const char *command;	/* faultd COMMAND; NULL: faultd alone */
	const struct session_ops *session;
	/* A request of the faultd protocol it answers on the daemon's
	 * socket (0: none), and the answer, in the server's loop (nothing
	 * that waits). A socket it listens on for what it asked goes into
	 * *add (NULL: none; malloc'd, the server's then). */
	enum proto_type request;
	void (*answer)(int sock, const struct peer *peer, const void *msg,
		       size_t len, struct front_listen **add);
	/* Its command (NULL start: it has none). */
	unsigned int shared;	/* OPT_* it takes */
	const char *shortopts;	/* its own letters, getopt(3)'s way */
	const struct option *options; /* its own; ids: its letters, or 256
				   and up (the server's are below 256) */
	int (*option)(int id, const char *arg); /* 0, or -1: usage */
	void (*usage)(FILE *f);
	/* After the options, before the keeper: open what it serves and
	 * name its sockets. 0, or -1: it cannot serve (said why). */
	int (*start)(struct front_start *st);
	/* Its sockets listen, or it adopted its sessions: it is ready. */
	void (*ready)(void);
	/* Its work is over: the command exits. Asked after every round of
	 * the loop; news() is an eventfd the front end writes when the
	 * answer may have changed (NULL: none). */
	bool (*done)(void);
	int (*news)(void);
	/* Asked to stop (SIGTERM): what stays for the next one is logged. */
	void (*stop)(void);
	/* Its sessions ended: the exit status. */
	int (*finish)(bool stopped);
};

/* front.c */
extern const struct front *const fronts[]; /* NULL-terminated */
const struct front *front_by_command(const char *command);
const struct front *front_for_request(enum proto_type type);
const struct session_ops *front_session_ops(uint16_t id);

/* fdp.c - the faultd protocol */
extern const struct front fdp_front;
extern const struct session_ops fdp_session_ops;
extern const struct conn_ops fdp_conn_ops;
int proto_answer_hello(int sock, const void *msg, size_t len);
void fdp_status(int sock, uid_t uid);

/* front.c: the NBD sources' options (--nbd-deadline; their lines to the
 * daemon's log), where their lines go, and the chunk a source fetches at
 * once (0: not an NBD source). */
struct src_nbd_opts front_nbd_opts(bool allow_local_files);
size_t nbd_chunk(struct source *s);
void front_nbd_log(void *arg, const char *line);

/* fc.c - Firecracker */
extern const struct front fc_front;
extern const struct session_ops fc_session_ops;

/* criu.c, criu_cmd.c, criu_req.c - CRIU (lazy_pages.h) */
extern const struct front criu_front;

#endif /* FAULTD_FRONT_H */
