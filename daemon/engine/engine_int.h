/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * engine_int.h - what the engine's files share and nobody else sees:
 * sessions, spaces and the functions of each file that the others call.
 * The engine's threads and lock order are in engine.h.
 */
#ifndef FAULTD_ENGINE_INT_H
#define FAULTD_ENGINE_INT_H

#include <pthread.h>

#include "bitmap.h"
#include "engine.h"
#include "stats.h"
#include "uffd.h"

#define PUSHERS 2		/* push threads per session */
/* The most one fault of a reader in order installs (space.c,
 * around_now()); a handler's buffer holds that much. */
#define AROUND_SEQ_MAX (2ul << 20)

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
	/* A reader in order (around_now()): where the window of the last
	 * fault ended (a source offset), and its width. Hints, read and set
	 * by every handler without a lock. */
	atomic_uint_fast64_t seq_end, seq_win;
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
	/* Tracked page: an install of it is under way (space.c, claims).
	 * The daemon's own: a restarted daemon starts with none. */
	_Atomic uint64_t *busy;
	/* Both bitmaps live in a memfd a restarted daemon finds (persist.c),
	 * with the journal of the range table. */
	int state_fd;
	struct kspace *state;
	size_t state_len;
	uint32_t src_index;	/* which of the session's sources */
	uint64_t nr_pages;	/* tracked pages */
	atomic_uint_fast64_t pending; /* tracked pages not done */
	atomic_bool dead;	/* its process is gone */
	bool forked;		/* a child's, from a FORK event: nobody but
				   the daemon holds its userfaultfd */
	/* Recording (session->rec): tracked pages whose first fault is
	 * noted, and the space's index in the record; NULL: not noted. */
	_Atomic uint64_t *seen;
	uint32_t rec_space;

	struct space_stats st;
	struct stat_block lat;	/* fault read to wake (shared counts) */
	struct space *next;	/* the session's list, under spaces_lock */
};

struct session {
	uint64_t id;
	struct session_opts o;
	char name_buf[48];	/* o.name, when the front end names it so */
	const struct session_ops *fe;
	void *fe_data;
	void (*fe_free)(void *fe_data); /* with the session; may be NULL */
	bool close_peer;	/* peer_fd is the session's to close */
	bool takeover;		/* fe->takeover, or session_set_takeover() */
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
	/* Asked to end (session_end()): once its forked children have every
	 * page, it stops. Draining: its own spaces are left to the peer,
	 * the push runs for the children's. */
	atomic_bool end_asked;
	atomic_bool draining;
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

/* state.c */
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
/* session.c */
uint32_t session_source_index(const struct session *s,
			      const struct source *src);
int session_adopt_space(struct session *s, struct space *sp);
void session_set_identity(struct session *s, uint64_t id, uid_t uid,
			  pid_t pid, uint64_t started_ns);
bool daemon_stopping(void);
void session_wake(struct session *s);
void session_note_all_in(struct session *s);
void session_note_fault(struct session *s);
int session_record_save(struct session *s);
void session_record_end(struct session *s);

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
int space_restored(struct space *sp);
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
void replay_start(struct session *s);
void replay_run(struct session *s, unsigned int k, unsigned int slot);
bool replay_busy(const struct session *s);
void replay_free(struct session *s);

/* push.c */
int push_start(struct session *s);
void push_stop(struct session *s);

#endif /* FAULTD_ENGINE_INT_H */
