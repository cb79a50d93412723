/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * harness.h - the daemon's session engine (daemon/engine/) on its own, for
 * the engine suite: what tests/engine/{table,race,keep}.c share, made in
 * msrc.c, front.c and client.c. Nothing here uses Criterion (each test
 * program is built on it, or under TSan on tests/tsan/'s runner, whose
 * main() may be in one file only): functions return 0 or -errno, and the
 * tests assert.
 *
 *   msrc     a source (daemon/sources/source.h) whose content is a function
 *            of the offset, with known-zero extents, per-page read errors,
 *            gates that hold a read until the test opens them, and read
 *            counts; or the same gates over another source (a file source,
 *            for the kept state), whose type it then takes
 *   front    a scripted front end: a struct session_ops whose hooks note
 *            what they saw, and a control thread that runs session_run()
 *   model    the client's memory as the test believes it is (what each
 *            page of a window maps, or that it reads zeros), changed by
 *            real events on registered memory (madvise, munmap, mremap,
 *            mmap over), and checked against the engine's range table,
 *            its pending count and the memory itself
 *   toucher  a thread that touches a page (write(2) of it to a pipe, so
 *            that a page that went away is EFAULT, not a signal), and the
 *            deadline it must meet
 */
#ifndef FAULTD_TEST_ENGINE_HARNESS_H
#define FAULTD_TEST_ENGINE_HARNESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "engine_int.h"

#define PG 4096ul

/* How long a faulting thread, a held read or an engine's news may take
 * before the test fails: no test waits for these on a fast machine. */
#define DEADLINE_MS 20000

/* The content of byte @off of a source tagged @tag: a function of both. */
static inline uint64_t content_word(uint64_t tag, uint64_t off)
{
	uint64_t x = (off / 8) * 0x9e3779b97f4a7c15ull ^ tag;

	x ^= x >> 29;
	return x * 0xbf58476d1ce4e5b9ull;
}

void content_fill(uint64_t tag, uint64_t off, void *buf, size_t len);

/* ------------------------------------------------------------------------
 * msrc: the test source.
 */

#define MSRC_GATES 4
#define GATE_URGENT (1u << 0)	 /* a demand read (SRC_READ_URGENT) */
#define GATE_BACKGROUND (1u << 1) /* the push's, a replay's */

struct msrc_zero {
	uint64_t off, len;	/* a known-zero extent; pages */
};

struct msrc_opts {
	uint64_t size;		/* bytes, whole pages */
	uint64_t tag;		/* content_word(tag, off) */
	const struct msrc_zero *zeros; /* sorted, apart */
	size_t nzeros;
	/* Reads and extents from @inner instead (taken over), whose type
	 * and kept descriptor the source then has: a kept session keeps it
	 * as an @inner. */
	struct source *inner;
};

struct msrc;

int msrc_create(const struct msrc_opts *o, struct msrc **mp);
struct source *msrc_source(struct msrc *m);
/* Reads that cover page @off fail with @err (0: no more). */
void msrc_fail(struct msrc *m, uint64_t off, int err);
/* Each background read takes @us longer: a slow disk under the push. */
void msrc_delay(struct msrc *m, unsigned int us);
/*
 * Gate @g: the next read of a kind in @kinds that covers @off copies its
 * content, then waits until msrc_gate_open(); @notify_fd >= 0 gets a byte
 * when it does (for a test in another process). One read is held; the
 * reads after it pass.
 */
void msrc_gate(struct msrc *m, unsigned int g, uint64_t off,
	       unsigned int kinds, int notify_fd);
/* Is a read held at gate @g, within @ms? */
bool msrc_gate_wait(struct msrc *m, unsigned int g, unsigned int ms);
void msrc_gate_open(struct msrc *m, unsigned int g);
/* The reads the thread gate @g held made after it was let go. */
unsigned long msrc_gate_after(struct msrc *m, unsigned int g);
void msrc_gates_open(struct msrc *m);
/* The reads of @kinds that covered page @off so far. */
unsigned long msrc_reads(struct msrc *m, uint64_t off, unsigned int kinds);
/* Is page @off in a known-zero extent? */
bool msrc_zero_at(const struct msrc *m, uint64_t off);
uint64_t msrc_tag(const struct msrc *m);

/* ------------------------------------------------------------------------
 * front: the scripted front end.
 */

#define FRONT_ID 0x7e57	/* the test front end's id in a kept record */
#define FRONT_BLOB "engine-test front end"

struct front {
	struct session *s;
	int peer;		/* the test's end of the peer's connection */
	pthread_t control;
	bool running;
	int run_ret;
	atomic_int inputs;	/* peer_input() calls */
	atomic_int bytes;	/* bytes it read */
	atomic_int ticks, ticks_all_in, gone;
	atomic_bool ended;
	atomic_bool adopted;	/* adopt() saw the blob save() wrote */
};

extern const struct session_ops front_ops;

/* A session of @f with @o (name, handlers...), with a peer to drive. */
int front_create(struct front *f, const struct session_opts *o);
/* The same on a connection of the caller's: the session's end (taken
 * over), the test's (front_free() closes it). */
int front_create_on(struct front *f, const struct session_opts *o,
		    int session_end, int test_end);
/* The control loop in a thread of its own: session_run(); returns once
 * the loop runs (every thread of the session started). */
int front_run(struct front *f);
/* One byte from the peer ('q': the front end ends the session). */
int front_peer_send(struct front *f, char c);
/* Has the front end read @n bytes of its peer, within @ms? */
bool front_wait_bytes(struct front *f, int n, unsigned int ms);
/* session_stop(), the control thread joined; session_free(). */
void front_stop(struct front *f);
void front_free(struct front *f);
/* Did the control loop tell the front end that every page is in? */
bool front_wait_all_in(struct front *f, unsigned int ms);
/* The front end of an adopted session @s, whose peer's other end is
 * @peer: @f takes both over. */
void front_adopted(struct front *f, struct session *s, int peer);

/* ------------------------------------------------------------------------
 * userfaultfd and memory.
 */

/* A userfaultfd with @features (UFFD_FEATURE_EVENT_*), non-blocking.
 * Returns the fd, or -errno (-ENOSYS, -EPERM, -EINVAL: unavailable). */
int uffd_new(uint64_t features);
/* Register [addr, addr + len) for missing faults. 0 or -errno. */
int uffd_register_range(int uffd, void *addr, size_t len);
/*
 * @pages of address space, PROT_NONE, unregistered, aligned to
 * WINDOW_ALIGN: in as few of the push's stripes (1 MiB of addresses each,
 * push.c) as it can be, so that one push thread pushes all of a window of
 * 1 MiB or less, and none pushes while the test holds it. NULL on failure.
 */
#define WINDOW_ALIGN (1ul << 20)
char *reserve_pages(size_t pages);
/* Anonymous read-write pages over [addr, addr + len) (MAP_FIXED). */
int map_rw(char *addr, size_t len);
/* Is the page at @addr in memory (mincore)? */
bool resident(const char *addr);
/* Does a load of @addr get SIGBUS (a poisoned page)? From the test's
 * thread: ASan and TSan are told to leave SIGBUS alone. */
bool load_sigbus(const void *addr);
/*
 * Quiet: a read of @sp's events is over (its handler holds ev_lock from
 * the read() to the last event applied), and so is every install under
 * way (each holds sp->lock, and counts its pages after the ioctl that
 * woke the faulting thread).
 */
void engine_sync(struct space *sp);

/* ------------------------------------------------------------------------
 * model: a window of the client's memory as the test believes it is.
 */

enum mkind {
	MP_FILL,	/* PROT_NONE, not registered: the test's own */
	MP_DATA,	/* registered: source offset src (or zeros) */
	MP_HOLE,	/* unmapped and taken by someone else: never used */
};

struct mpage {
	uint8_t kind;
	bool zero;		/* removed: reads zeros */
	bool seen;		/* found resident: its fault came */
	uint64_t src;
};

struct model {
	char *base;
	size_t pages;
	struct mpage *pg;
	struct msrc *src;
	uint64_t tag;
	size_t src_pages;
	bool *src_done;		/* installed, removed or unmapped */
	/* What the engine must have counted. */
	uint64_t faults, urgent, remaps, cuts, removes;
};

int model_init(struct model *m, size_t pages, struct msrc *src);
void model_free(struct model *m);
/* Pages [first, first + n) are registered and map source @src on. */
void model_map(struct model *m, size_t first, size_t n, uint64_t src);
char *model_addr(const struct model *m, size_t p);

/*
 * The events, on the memory and in the model. Each returns 0 or -errno
 * of the system call (the model unchanged then).
 * remove: MADV_DONTNEED (REMOVE); cut: munmap() and the hole filled again
 * (UNMAP), or with @over an mmap() over it (UNMAP); move: mremap() to
 * @to, MREMAP_FIXED (REMAP, and UNMAP of what was registered there).
 */
int ev_remove(struct model *m, size_t first, size_t n);
int ev_cut(struct model *m, size_t first, size_t n, bool over);
int ev_move(struct model *m, size_t from, size_t n, size_t to);

/*
 * Check page @p against the model: its content (@quick: its first and
 * last words) or zeros, counting the fault if it was not resident. 0, or
 * -EBADMSG with what was wrong in @why.
 */
int model_check_page(struct model *m, size_t p, bool quick, char *why,
		     size_t why_len);
/* Does @data hold what page @p must read? No side effect: a forked
 * child may call it. */
bool model_page_matches(const struct model *m, size_t p, const void *data);
/* Note which registered pages are resident (their sources are done). */
void model_note_resident(struct model *m);
/* The engine's range table of @sp is what the model maps, page by page. */
int model_check_table(struct model *m, struct space *sp, char *why,
		      size_t why_len);
/* Tracked pages the model says are still to come. */
uint64_t model_pending(const struct model *m);
/* First page of kind @kind at or after @from (wrapping), or SIZE_MAX. */
size_t model_find(const struct model *m, size_t from, enum mkind kind);
/* Pages of kind @kind from @p on (at most @max). */
size_t model_run(const struct model *m, size_t p, enum mkind kind, size_t max);

/* ------------------------------------------------------------------------
 * toucher: a faulting thread, and its watchdog.
 */

struct toucher {
	const char *addr;
	size_t len;
	int pipe[2];
	pthread_t thread;
	atomic_bool done;
	ssize_t ret;		/* write(2)'s */
	int err;		/* its errno */
	bool started;
};

/* A thread that writes [addr, addr + len) to a pipe: it faults there. */
int toucher_start(struct toucher *t, const void *addr, size_t len);
/* Did it return within @ms? Then *t says what it got; *buf its bytes. */
bool toucher_wait(struct toucher *t, unsigned int ms, void *buf);
void toucher_free(struct toucher *t);

/* The monotonic clock, ns; a pause of 1 ms between two looks at a
 * condition that has a deadline. */
uint64_t mono_ns(void);
void pause_ms(void);

/* A seeded generator: xorshift64*. */
static inline uint64_t rng_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

/* The seed of a random test: $FAULTD_TEST_SEED, else the clock's. */
uint64_t test_seed(void);

#endif /* FAULTD_TEST_ENGINE_HARNESS_H */
