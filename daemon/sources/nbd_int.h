/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_int.h - the inside of a connection set (nbd_set.h): its structures,
 * and the functions of the three files that make it:
 *   nbd_cache.c  the chunks: table, queues, LRU, states, the memory bound
 *   nbd_io.c     sending reads, the connections' threads, reconnection
 *   nbd_set.c    reads and read-ahead, the sets of the host, making and
 *                freeing a set
 *
 * A chunk is [idx * chunk, (idx + 1) * chunk) of the export. Its life:
 *
 *   QUEUED  --dispatch-->  SENT  --answer-->  READY  --evicted--> freed
 *     ^ (urgent or normal     | server error       (in the LRU list
 *     |  queue)               v                      while nobody holds it)
 *     +---- due ------  DELAYED (backoff)
 *     +---- the connection was lost (back at the head, in its old order)
 *   any but READY --given up--> FAILED: out of the table, freed by its
 *                                        last holder
 *
 * A read takes a reference on each chunk it covers (creating and queueing
 * the missing ones), sends what can be sent, then waits for each in turn
 * and copies it out. Sending: any thread that queued work (a reader, or a
 * connection's thread after answers) takes free slots of the connections
 * that are up, urgent queue first, and calls nbd_aio_pread() without the
 * set's lock. Each connection has a thread that polls its socket, runs
 * libnbd's state machine, collects the answers (the completion callback
 * only marks its slot done and wakes that thread), and makes the
 * connection again after a loss (retry.h).
 *
 * Locks, in order:
 *   reg_lock     (nbd_set.c) the list of sets, and each set's users and
 *                opening; held only to find, add or drop a set. Nothing
 *                nests inside.
 *   set->lock    everything of a set that changes: the chunk table, the
 *                queues and the LRU, chunk states and references,
 *                connection states, slots and counts, the counters. Never
 *                held across a libnbd call that waits, a copy or a
 *                connect. Readers wait on a chunk's cv under it. A
 *                _locked function is called with it held.
 *   libnbd's handle lock is taken inside libnbd only; the completion
 *   callback runs under it and takes no lock of ours.
 * A connection's handle (conn->h) is changed only by its thread, while
 * the connection is DOWN and no sender is using it (conn->submitting 0).
 */
#ifndef FAULTD_SRC_NBD_INT_H
#define FAULTD_SRC_NBD_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "nbd_set.h"

#define MS 1000000ull

enum chunk_state {
	CH_QUEUED,	/* in set->urgent or set->normal */
	CH_SENT,	/* a connection's slot reads it */
	CH_DELAYED,	/* in set->delayed: the server failed it; again at due */
	CH_READY,	/* buf holds it; in set->lru while nobody holds it */
	CH_FAILED,	/* given up: out of the table */
};

struct nbd_chunk;

struct chunk_list {
	struct nbd_chunk *head, *tail;
	uint32_t n;
};

struct nbd_chunk {
	uint64_t idx;
	struct nbd_chunk *hnext;	/* the table's chain */
	struct nbd_chunk *prev, *next;	/* in *list */
	struct chunk_list *list;	/* NULL: in none */
	enum chunk_state state;
	bool urgent;
	uint32_t refs;			/* readers holding it */
	uint32_t tries;			/* server errors so far */
	uint64_t seq;			/* order of first queueing */
	uint64_t due;			/* CH_DELAYED: when to ask again */
	uint32_t len;			/* bytes of the export in it */
	uint32_t lo, hi;		/* the part fetched; zeros around it */
	pthread_cond_t cv;		/* READY or FAILED */
	char *buf;
};

struct nbd_conn;

struct nbd_slot {
	struct nbd_conn *conn;
	struct nbd_chunk *c;	/* NULL: free (under set->lock) */
	bool first;		/* the connection had none in flight */
	atomic_bool done;	/* the callback ran; err is set */
	int err;
};

enum conn_state {
	C_DOWN,		/* its thread connects it (again) */
	C_UP,
	C_GONE,		/* the export changed: it tries no more */
};

struct nbd_conn {
	struct nbd_set *set;
	struct nbd_handle *h;		/* set by its thread only */
	enum conn_state state;
	bool was_up;
	uint32_t inflight;		/* slots in use */
	uint32_t submitting;		/* senders using h, not under lock */
	uint32_t tries;			/* failed attempts since up */
	uint64_t next_try;		/* C_DOWN: when to try */
	uint64_t progress;		/* the last answer, or the first send */
	pthread_cond_t idle;		/* submitting fell to 0 */
	int efd;			/* wakes its thread */
	bool started;
	pthread_t thread;
	struct nbd_slot *slots;		/* o.depth */
};

struct nbd_set {
	/* Under reg_lock. */
	struct nbd_set *next;
	char *key;
	uint32_t users;
	bool opening;
	/* Fixed once open. */
	struct nbd_set_info info;
	struct nbd_target target;
	struct src_nbd_opts o;
	struct retry_policy rp;
	struct retry_log log;
	uint32_t shift;
	uint32_t nconns;
	atomic_bool stopping;
	/* Under lock. */
	pthread_mutex_t lock;
	struct nbd_chunk **table;
	uint64_t mask;
	struct chunk_list urgent, normal, delayed, lru;
	uint64_t seq;
	uint64_t cached;		/* bytes of the chunks */
	char **spare;			/* chunk buffers to use again */
	uint32_t nspare;
	struct retry_link link;
	bool changed;
	uint32_t up, rr;
	struct src_nbd_stats st;
	struct nbd_conn conns[];
};


enum get_mode {
	GET_READ,	/* a read that nobody waits for yet */
	GET_URGENT,	/* a fault waits for it */
	GET_AHEAD,	/* willneed(): no reference, only if it fits */
};

static inline uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* nbd_cache.c */
/* The hull of the data in [start, end), cut to whole minimum blocks. */
void ncache_hull(const struct nbd_set *set, uint64_t start, uint64_t end,
		 uint64_t *lo, uint64_t *hi);
struct nbd_chunk *ncache_get_locked(struct nbd_set *set, uint64_t idx,
				    enum get_mode m);
void ncache_put_locked(struct nbd_set *set, struct nbd_chunk *c);
struct nbd_chunk *ncache_pop_locked(struct nbd_set *set);
void ncache_ready_locked(struct nbd_set *set, struct nbd_chunk *c);
void ncache_error_locked(struct nbd_set *set, struct nbd_chunk *c, int err);
void ncache_requeue_locked(struct nbd_set *set, struct nbd_chunk *c,
			   bool front);
void ncache_fail_queued_locked(struct nbd_set *set);
bool ncache_dead_locked(const struct nbd_set *set);
uint64_t ncache_tick_locked(struct nbd_set *set, uint64_t now);
void ncache_free_locked(struct nbd_set *set, struct nbd_chunk *c);
int ncache_init(struct nbd_set *set);
void ncache_destroy(struct nbd_set *set);

/* nbd_io.c */
void nio_dispatch_locked(struct nbd_set *set);
void *nio_main(void *arg);
void nio_close(struct nbd_conn *c);

#endif /* FAULTD_SRC_NBD_INT_H */
