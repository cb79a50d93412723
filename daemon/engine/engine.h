/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * engine.h - the session engine: one fault loop for every front end.
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
 * held for reading (installs) or writing (events).
 */
#ifndef FAULTD_ENGINE_H
#define FAULTD_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common.h"
#include "internal.h"
#include "persist.h"
#include "source.h"
#include "wset.h"

#define PUSHERS 2		/* push threads per session */

/* Client [start, start + len) is source [src_off, src_off + len). */
struct srange {
	uint64_t start, len, src_off;
};

/* Source [off, off + len) is tracked: its pages are to be pushed. */
struct sseg {
	uint64_t off, len;
	uint64_t bit;		/* the bit of its first page */
};

/* Counters of a space; atomics, summed for the session's view. */
struct space_stats {
	atomic_uint_fast64_t faults;	/* page-fault messages handled */
	atomic_uint_fast64_t urgent;	/* pages installed for faults */
	atomic_uint_fast64_t background;/* pages installed by the push */
	atomic_uint_fast64_t zero;	/* pages resolved as zeros */
	atomic_uint_fast64_t eexist;	/* installs that found the page in */
	atomic_uint_fast64_t eagain;	/* faults parked for an event */
	atomic_uint_fast64_t removes;	/* REMOVE and UNMAP events */
	atomic_uint_fast64_t remaps;	/* REMAP events */
	atomic_uint_fast64_t forks;	/* FORK events */
	atomic_uint_fast64_t poisoned;	/* pages poisoned: bad content */
	atomic_uint_fast64_t replayed;	/* pages installed by a replay */
};

struct session;

struct space {
	struct session *s;
	struct uport port;
	int uffd;
	int pidfd;
	pid_t pid;
	uint64_t id;		/* the front end's name for it (a CRIU pid) */
	struct source *src;	/* a reference of the session's sources */
	size_t page_size;
	size_t around;		/* fault-around window, bytes */
	bool huge;		/* hugetlb: zeros are copied */

	pthread_rwlock_t ev_lock; /* reads of events against installs */
	pthread_rwlock_t lock;
	uint64_t gen;		/* changes with every event */
	struct srange *r;	/* sorted by start, apart */
	size_t nr, cap;
	struct sseg *seg;	/* sorted by off, apart; fixed */
	size_t nseg;
	_Atomic uint64_t *done;	/* tracked page: in, removed or gone */
	_Atomic uint64_t *zero;	/* tracked page: reads zeros from now on */
	/* Both bitmaps live in a memfd a restarted daemon finds (persist.c),
	 * with the journal of the range table. */
	int state_fd;
	struct kspace *state;
	size_t state_len;
	uint32_t src_index;	/* which of the session's sources */
	uint64_t nr_pages;	/* tracked pages */
	atomic_uint_fast64_t pending; /* tracked pages not done */
	atomic_bool dead;	/* its process is gone */
	/* Recording (session->rec): tracked pages whose first fault is
	 * noted, and the space's index in the record; NULL: not noted. */
	_Atomic uint64_t *seen;
	uint32_t rec_space;

	struct space_stats st;
	struct stat_block lat;	/* fault read to wake (shared counts) */
	struct space *next;	/* the session's list, under spaces_lock */
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
	 * stops ends it. Else it is kept until its processes are gone. */
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

struct session {
	uint64_t id;
	struct session_opts o;
	char name_buf[48];	/* o.name, when the front end names it so */
	const struct session_ops *fe;
	void *fe_data;
	void (*fe_free)(void *fe_data); /* with the session; may be NULL */
	bool close_peer;	/* peer_fd is the session's to close */
	int record_fd;		/* its record (persist.c); -1: none yet */
	int old_record_fd;	/* the one a put replaces; -1 between puts */
	atomic_bool kept;	/* its entry has been put */
	atomic_bool unkept;	/* ... and dropped: the session ended */
	int peer_fd;		/* polled for the front end; -1: none;
				   cleared under spaces_lock (write) */
	uid_t uid;		/* the peer's, for faultctl */
	pid_t pid;		/* the peer's */
	uint64_t started_ns;

	pthread_rwlock_t spaces_lock;
	struct space *spaces;
	atomic_uint nr_spaces;
	struct source **srcs;	/* owned; freed with the session */
	size_t nr_srcs;
	int epfd;		/* the handlers wait on every space's uffd */
	int ctl_epfd;		/* the control loop: peer, pidfds, wake */
	int wake_fd;		/* eventfd: the control loop has news */
	int stop_fd;		/* eventfd: handlers and pushers stop */

	atomic_bool stop;
	atomic_bool running;
	/* Every range the peer will register is registered: a page that
	 * is in no registered mapping (ENOENT) is gone, not yet to come.
	 * False while CRIU restores (until RSTF). */
	atomic_bool settled;
	atomic_uint_fast64_t pending;	/* sum of the spaces' pending */
	atomic_uint_fast64_t faults;	/* of every space */
	atomic_uint_fast64_t last_fault_ns;
	atomic_uint_fast64_t first_fault_ns; /* 0: none yet */
	atomic_uint_fast64_t all_in_ns;	/* when pending reached 0; 0: not */
	/* Where a fault asks the push to go on: space and address. */
	_Atomic(struct space *) push_space;
	atomic_uint_fast64_t push_from;
	atomic_uint_fast64_t push_hint_seq;

	struct worker *workers;
	unsigned int nr_handlers;
	pthread_t pushers[PUSHERS];
	unsigned int nr_pushers;
	pthread_mutex_t push_lock;	/* with push_cond: pushers wait */
	pthread_cond_t push_cond;
	struct wset_rec *rec;	/* recording; NULL: not */
	bool rec_saved;		/* the control loop's: written once */
	/* First faults are noted (false once the record ended: written on
	 * request, or every page in; set before the session runs). */
	atomic_bool rec_open;
	atomic_bool rec_end_asked; /* session_record_end() */
	struct replay *replay;	/* the set to replay; NULL: none */
	bool replay_prepared;	/* under push_lock: loaded (or refused) */
	atomic_uint_fast64_t replay_pages, replay_bytes;
	atomic_uint_fast64_t replay_start_ns, replay_end_ns;
	struct session *next;	/* the daemon's list, under sessions_lock */
};

/* A handler thread of a session: its read state and staging buffer. */
struct worker {
	struct ureader rd;
	struct session *s;
	pthread_t thread;
	char *buf;		/* the largest window a fault reads */
	size_t buf_len;
	unsigned int slot;	/* its install slot (persist.h) */
};

/* session.c */
int session_create(const struct session_opts *o,
		   const struct session_ops *fe, void *fe_data,
		   struct session **sp);
int session_own_source(struct session *s, struct source *src);
uint32_t session_source_index(const struct session *s,
			      const struct source *src);
int session_add_space(struct session *s, int uffd, pid_t pid, int pidfd,
		      uint64_t id, struct source *src, const struct srange *r,
		      size_t nr, const struct sseg *seg, size_t nseg,
		      const char **why, struct space **spp);
int session_adopt_space(struct session *s, struct space *sp);
int session_run(struct session *s);
void session_set_identity(struct session *s, uint64_t id, uid_t uid,
			  pid_t pid, uint64_t started_ns);
void session_settle(struct session *s);
void session_peer_done(struct session *s);
bool daemon_stopping(void);
void session_stop(struct session *s);
void session_wake(struct session *s);
void session_free(struct session *s);
bool session_all_in(const struct session *s);
void session_note_all_in(struct session *s);
void session_note_fault(struct session *s, struct space *sp, uint64_t page);
int session_record_save(struct session *s);
void session_record_end(struct session *s);
void sessions_record_end_all(void);
void sessions_stop_all(void);
void sessions_persist_all(void);
size_t sessions_count(void);
bool sessions_left_kept(void);

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

/* space.c */
extern const struct uport_ops space_port_ops;

/* A run of pages the push installs: client addresses and their source. */
struct space_run {
	uint64_t start;
	uint64_t len;
	uint64_t src_off;
	enum src_kind kind;	/* SRC_DATA: read it; else zeros */
};

int space_create(struct session *s, int uffd, pid_t pid, uint64_t id,
		 struct source *src, const struct srange *r, size_t nr,
		 const struct sseg *seg, size_t nseg, const char **why,
		 struct space **spp);
int space_fork_locked(struct space *sp, int ufd, struct space **childp);
struct space *space_alloc(struct session *s, struct source *src,
			  size_t page_size);
void space_restored(struct space *sp);
void space_free(struct space *sp);
void space_mark_gone(struct space *sp);
bool space_next_pending(struct space *sp, uint64_t from,
			struct space_run *run, size_t max, uint64_t *gen);
ssize_t space_install_run(struct space *sp, const struct space_run *run,
			  const void *buf, uint64_t gen, bool background,
			  unsigned int slot);
void space_recheck_inflight(struct space *sp);
void space_poison_run(struct space *sp, const struct space_run *run,
		      uint64_t gen, int err);
int space_read(struct space *sp, uint64_t off, size_t len, char *buf,
	       unsigned int flags);
uint64_t space_replay(struct space *sp, uint64_t off, uint64_t len,
		      const char *buf, unsigned int slot);
void space_describe(const struct space *sp, struct wset_space *out);
void space_record_ended(struct space *sp);

/* replay.c */
/*
 * Is set space @d one of the front end's sources? false: *why (of
 * @why_len bytes) says why not. The front end's, for replay_check().
 */
typedef bool (*replay_known_fn)(const struct wset_space *d, void *arg,
				char *why, size_t why_len);
int replay_check(const char *path, replay_known_fn known, void *arg,
		 char *why, size_t why_len);
void replay_start(struct session *s);
void replay_run(struct session *s, unsigned int k, unsigned int slot);
bool replay_busy(const struct session *s);
void replay_free(struct session *s);

/* push.c */
int push_start(struct session *s);
void push_stop(struct session *s);

#endif /* FAULTD_ENGINE_H */
