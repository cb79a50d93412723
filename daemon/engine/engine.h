/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * engine.h - the session engine: one fault loop for every front end.
 * This is what front ends and the server use of it; sessions and spaces
 * are the engine's own (engine_int.h says what is in them).
 *
 * A front end (the faultd protocol, CRIU's lazy-pages stream, the
 * Firecracker handshake) turns a peer's handshake into a session and one or
 * more spaces; the engine serves them until the front end says the session
 * is over. It owns nothing of the peer's protocol.
 *
 *   session   a peer's restore: its spaces, the handler threads that read
 *             their userfaultfds, the push threads, the control loop (the
 *             front end's connection, the processes' pidfds, progress)
 *   space     one userfaultfd and the address space behind it: the range
 *             table (client address -> source offset), the tracked pages
 *             (done / reads-zero bits), the source (space.c)
 *
 * Threads of a session: the caller of session_run() runs the control loop;
 * handler threads (opts.handlers, default 1 per CPU, at most 4) read every
 * space's userfaultfd through the shared read loop (libfaultd/uloop.c) and
 * resolve faults; PUSHERS push threads at nice 19 copy the pages nobody
 * asked for. A waking handler preempts a pusher at once.
 *
 * Locks, outer to inner:
 *   space->ev_lock (rwlock, writers first. Write: a read() of the uffd
 *     until its events are applied (uloop.c's read_begin/read_end). Read:
 *     every install (copy, zeros, poison) of the space. So an install
 *     planned before an event cannot land after the process went on past
 *     it: the kernel lets installs through once the event is read, and a
 *     MADV_DONTNEED zaps its pages right after. Never held across a source
 *     read or a wait for a peer.)
 *   sessions_lock (the daemon's list of sessions; session.c)
 *     session->spaces_lock (the list of spaces: read to walk it, write to add)
 *       space->lock (rwlock. Read: translate an address and install; the
 *         source is read with it *not* held. Write: an event changes the
 *         ranges. Never held across a source read or a wait for a peer.)
 *         port read_lock (uloop.c: a read() and its events; takes
 *           space->lock for writing inside, through the event handler)
 *   session->push_lock (pushers wait on push_cond under it; the first
 *     push thread loads a working set under it, replay_start(): a file
 *     read, and spaces_lock for reading inside)
 *   session->rec->lock (wset.h: the record's entries; a leaf, also taken
 *     under space->lock when a fork's space is noted; never held across
 *     I/O)
 * Bits of a space's bitmaps are changed with atomics under space->lock
 * held for reading (installs) or writing (events). An install claims each
 * tracked page it takes (space->busy, a test-and-set under space->lock
 * for reading) and gives the claim back once the page is counted done or
 * its install failed; a page claimed by another is left to it (space.c,
 * claims). Claims are not locks: nothing waits on one.
 */
#ifndef FAULTD_ENGINE_H
#define FAULTD_ENGINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common.h"
#include "persist.h"
#include "source.h"
#include "wset.h"

struct session;
struct space;

/* Client [start, start + len) is source [src_off, src_off + len). */
struct srange {
	uint64_t start, len, src_off;
};

/* Source [off, off + len) is tracked: its pages are to be pushed. */
struct sseg {
	uint64_t off, len;
	uint64_t bit;		/* the bit of its first page */
};

/* What a front end asks of the engine. */
struct session_opts {
	const char *name;	/* for logs: "session 7", "criu 4242" */
	unsigned int handlers;	/* 0: one per CPU, at most 4 */
	bool push;		/* push what nobody asked for */
	bool push_after_first;	/* ... only once a fault came (prefetch) */
	/* The push at the daemon's own priority, not nice 19: on a machine
	 * busy with other work a nice 19 push all but stops, and a restore
	 * that must end (CRIU's) waits for it. */
	bool push_fair;
	size_t around;		/* fault-around window; 0: 64 KiB */
	/*
	 * Working sets (faultd-working-set(5)). Record: the pages that
	 * faulted while pending, in the order of first touch, written when
	 * every page is in and when the session ends - to record_path
	 * (through a temporary file renamed over it) or, if record_fd > 0,
	 * into that file from offset 0. Replay: the set in wset_fd (> 0) or
	 * at wset_path is loaded before the push (and with push false too),
	 * once the session is settled; a set that is not of the session's
	 * sources, or is corrupt, is logged and not used. Descriptors are
	 * the session's from session_create() on, which closes them (also
	 * when it fails).
	 */
	const char *record_path;
	int record_fd;
	const char *wset_path;
	int wset_fd;
	/*
	 * While the session records, push nothing (also with push_after_
	 * first): every page the peer touches faults and is in the set, the
	 * way the set of a run without a push would be. The push starts when
	 * the record ends (session_record_end(), or every page in).
	 */
	bool push_after_record;
};

/*
 * The front end's side of a session: its hooks (each may be NULL) and how
 * its sessions are kept. The front end's registered struct (fronts/
 * front.h) points at it; a kept session names it by @front_id, and a
 * restarted daemon finds it again by that id (record.c).
 */
struct session_ops {
	uint16_t front_id;	/* kept: never reused; 0: never kept */
	/* Its peer serves itself when the session is dropped (a library
	 * client): a keeper drops it after the grace time; a daemon that
	 * stops ends it. Else it is kept until its processes are gone.
	 * A session may say otherwise (session_set_takeover(): a library
	 * client whose image only the daemon can reach); its adopt() says
	 * so again. */
	bool takeover;
	/*
	 * The front end's connection (session->peer_fd) is readable, or
	 * hung up. Returns false to end the session.
	 */
	bool (*peer_input)(struct session *s);
	/* Every PROGRESS_MS, and once when every tracked page is in. */
	void (*tick)(struct session *s, bool all_in);
	/* The process of @sp is gone; returns false to end the session. */
	bool (*space_gone)(struct session *s, struct space *sp);
	/*
	 * The session ended: its handler and push threads are joined, so
	 * its counters (session_view()) are final. Called once, by
	 * session_run(), before it returns.
	 */
	void (*ended)(struct session *s);
	/* The front end's own state, for the record; returns its length. */
	size_t (*save)(struct session *s, void *blob, size_t max);
	/*
	 * Re-make the front end's side of an adopted session @s (its
	 * sources are open again already): its data from what save() wrote,
	 * its peer connection @peer (-1: none; taken over, closed on
	 * failure). Returns 0 or -errno.
	 */
	int (*adopt)(struct session *s, const void *blob, size_t len,
		     int peer);
};

/* session.c */
int session_create(const struct session_opts *o,
		   const struct session_ops *fe, void *fe_data,
		   struct session **sp);
int session_own_source(struct session *s, struct source *src);
int session_add_space(struct session *s, int uffd, pid_t pid, int pidfd,
		      uint64_t id, struct source *src, const struct srange *r,
		      size_t nr, const struct sseg *seg, size_t nseg,
		      const char **why, struct space **spp);
int session_run(struct session *s);
void session_settle(struct session *s);
void session_unsettle(struct session *s);
void session_peer_done(struct session *s);
void session_end(struct session *s);
void session_stop(struct session *s);
void session_free(struct session *s);
bool session_all_in(const struct session *s);
void session_push_from(struct session *s, struct space *sp, uint64_t addr);
void sessions_record_end_all(void);
void sessions_stop_all(void);
void sessions_persist_all(void);
size_t sessions_count(void);
bool sessions_left_kept(void);

/*
 * What a front end sets and reads of its session: its own data (freed
 * with the session by @free_fn, may be NULL), its peer's connection
 * (polled for its peer_input(); closed with the session when @close),
 * whether its peer serves itself once it is dropped (session_ops.takeover
 * unless set), its name in the logs, whose it is.
 */
void session_set_front(struct session *s, void *data,
		       void (*free_fn)(void *data));
void *session_front(const struct session *s);
void session_set_takeover(struct session *s, bool takeover);
void session_set_peer(struct session *s, int fd, bool close);
void session_set_name(struct session *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
const char *session_name(const struct session *s);
void session_set_owner(struct session *s, uid_t uid, pid_t pid);
uint64_t session_id(const struct session *s);
pid_t session_pid(const struct session *s);
unsigned int session_nr_spaces(const struct session *s);
size_t session_nr_sources(const struct session *s);
struct source *session_source(const struct session *s, size_t i);
const struct session_opts *session_opts(const struct session *s);
unsigned int session_handlers(const struct session *s);
bool session_records(const struct session *s);

/* space.c: what a front end reads of a space it added. */
uint64_t space_id(const struct space *sp);
uint64_t space_nr_pages(const struct space *sp);
size_t space_nr_ranges(const struct space *sp);
size_t space_page_size(const struct space *sp);

/* What faultctl and the front ends report of a session. */
struct session_view {
	uint64_t id;
	pid_t pid;
	uid_t uid;
	unsigned int spaces;
	bool all_in;
	bool kept;		/* a restarted daemon would adopt it */
	uint64_t pages_total, pages_urgent, pages_background, pages_zero;
	uint64_t faults, eexist, eagain, removes, poisoned;
	uint64_t pages_replayed, replay_bytes, replay_ms; /* 0: none */
	uint64_t p50_ns, p99_ns;
	uint64_t first_fault_ms, all_in_ms, age_ms;
};

void session_view(struct session *s, struct session_view *v);
size_t sessions_list(struct session_view *out, size_t max, bool all,
		     uid_t uid);

/* replay.c */
/*
 * Is set space @d one of the front end's sources? false: *why (of
 * @why_len bytes) says why not. The front end's, for replay_check().
 */
typedef bool (*replay_known_fn)(const struct wset_space *d, void *arg,
				char *why, size_t why_len);
int replay_check(const char *path, replay_known_fn known, void *arg,
		 char *why, size_t why_len);

#endif /* FAULTD_ENGINE_H */
