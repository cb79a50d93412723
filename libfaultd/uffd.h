/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * uffd.h - the userfaultfd layer every server of faults shares: the library's
 * handler threads, its prefetch and same-thread paths, and the daemon.
 *
 *   uffd.c     the system call and ioctls; errno becomes -errno here only;
 *              the feature probe; uffd_classify(), the meaning of a result
 *   install.c  install_range(): fill-and-install a range, classified, woken
 *   uloop.c    the read loop: events first, then parked faults, then new
 *              faults; a userfaultfd read by one or several threads
 *
 * Nothing here knows regions, pagers or sessions: callers bring those
 * through the ops of a port (uloop) and the content of an install.
 */
#ifndef FAULTD_UFFD_H
#define FAULTD_UFFD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "compat.h"
#include "faultd.h"
#include "lib.h"

/* ------------------------------------------------------------------------
 * uffd.c - the userfaultfd system call and ioctls, feature probe, result
 * classification. errno becomes -errno here and nowhere else.
 */

/*
 * What a uffd ioctl result says, named after the kernel's answer; what it
 * means for a fault is install_fault_ret()'s (below).
 */
enum uffd_outcome {
	UFFD_DONE,	/* resolved; waiters woken unless DONTWAKE */
	UFFD_EXISTS,	/* someone resolved it first: wake the waiters */
	UFFD_AGAIN,	/* EAGAIN: the address space is changing */
	UFFD_GONE,	/* range unmapped or process gone: wake the waiters */
	UFFD_FAILED,	/* anything else: poison or report */
};

int uffd_open(uint64_t features, bool nonblock);
int uffd_probe(struct faultd_features *f);
uint64_t uffd_have(void); /* FAULTD_HAVE_* of this kernel (after probe) */
int uffd_register(int fd, uintptr_t start, size_t len, uint64_t mode,
		  uint64_t *ioctls);
int uffd_unregister(int fd, uintptr_t start, size_t len);
ssize_t uffd_read_msgs(int fd, struct uffd_msg *msgs, size_t max);
ssize_t uffd_copy(int fd, uintptr_t dst, const void *src, size_t len,
		  uint64_t mode);
ssize_t uffd_zeropage(int fd, uintptr_t dst, size_t len, uint64_t mode);
ssize_t uffd_continue(int fd, uintptr_t dst, size_t len, uint64_t mode);
int uffd_wake(int fd, uintptr_t start, size_t len);
int uffd_writeprotect(int fd, uintptr_t start, size_t len, bool wp);
ssize_t uffd_poison(int fd, uintptr_t start, size_t len, uint64_t mode);
enum uffd_outcome uffd_classify(ssize_t ret);

/* ------------------------------------------------------------------------
 * Fault results: what handling one fault came to, for every server of
 * faults (the library's fault path, the daemon's engine) and the read loop
 * between them, as vm_fault_t is for the kernel. A struct, so that neither
 * an int, nor a byte count, nor an errno passes for one unnoticed.
 * Internal values of the fault path; nothing here is public.
 */
enum fault_code {
	FR_DONE,	/* over: resolved, poisoned, or its waiters woken */
	FR_RETRY,	/* needs the context lock: handle it again under it */
	FR_PARK,	/* an event is pending (an install got EAGAIN), or a
			   wake failed: try it again after the events */
	FR_REPLAN,	/* the plan is stale (the map's generation moved
			   while the source was read): plan it again */
	FR_ERROR,	/* the content cannot be produced (.err): poison */
};

struct fault_ret {
	enum fault_code code;
	int err;	/* FR_ERROR: the -errno; 0 otherwise */
};

static inline struct fault_ret fr(enum fault_code code)
{
	return (struct fault_ret){ .code = code };
}

static inline struct fault_ret fr_error(int err)
{
	return (struct fault_ret){ .code = FR_ERROR, .err = err };
}

static inline bool fr_is(struct fault_ret ret, enum fault_code code)
{
	return ret.code == code;
}

/* ------------------------------------------------------------------------
 * install.c - the one fill-and-install layer.
 */

enum inst_op {
	INST_COPY,	/* from q->src */
	INST_ZERO,	/* zeros: ZEROPAGE, or a copy of zeros (below) */
	INST_CONTINUE,	/* map what the page cache holds (MINOR faults) */
	INST_POISON,	/* every access gets SIGBUS */
};

#define INST_WP		  (1u << 0) /* install write-protected */
#define INST_DONTWAKE	  (1u << 1) /* the caller wakes the waiters */
#define INST_STOP_PRESENT (1u << 2) /* stop at a present page, not past it */
#define INST_ZERO_COPY	  (1u << 3) /* zeros by copy (hugetlb, or asked) */

struct inst_req {
	int uffd;
	enum inst_op op;
	unsigned int flags;	/* INST_* */
	uintptr_t dst;		/* page-aligned */
	size_t len;		/* a multiple of page_size, > 0 */
	size_t page_size;
	/* COPY: len bytes. ZERO by copy: zeros_len bytes of zeros, or NULL
	 * for the layer's own (up to 2 MiB pages). */
	const void *src;
	size_t zeros_len;
	uintptr_t watch;	/* a page to report on (0: none) */
};

struct inst_res {
	size_t done;		/* bytes installed by this call */
	size_t present;		/* bytes found there already, stepped over */
	size_t gone;		/* bytes in no registered mapping (ENOENT) */
	enum uffd_outcome end;	/* UFFD_DONE: reached the end; else why not */
	int err;		/* -errno of the stop, when it stopped */
	bool watch_present;	/* q->watch was stepped over, present */
	bool woken;		/* the layer woke the range's waiters */
};

void install_range(const struct inst_req *q, struct inst_res *res);
void install_wake(const struct inst_req *q, struct inst_res *res);
enum uffd_outcome install_outcome(const struct inst_res *res);
struct fault_ret install_fault_ret(const struct inst_res *res);
const void *install_zeros(size_t len);
ssize_t install_fill_tail(void *buf, ssize_t n, size_t len);

/* ------------------------------------------------------------------------
 * uloop.c - the read loop of a userfaultfd.
 */

#define ULOOP_BATCH 64	/* messages per read() with a single reader */
#define ULOOP_PARK_MAX 256	/* faults a reader keeps for a retry */
/*
 * A parked fault is tried again no sooner than ULOOP_RETRY_MIN_NS after
 * it parked, twice that after its second try, and so on up to
 * ULOOP_RETRY_MAX_NS. The kernel fails installs with EAGAIN from an
 * event's start until the thread that caused it (the one in madvise(),
 * mremap()) runs again after the event was read, so a try right after the
 * read fails too, and trying at every message would spin while that
 * thread waits for a CPU - one the tries take from it.
 */
#define ULOOP_RETRY_MIN_NS 50000ull
#define ULOOP_RETRY_MAX_NS 800000ull

/* A page-fault message being handled, or parked for a retry. */
struct fault_req {
	uintptr_t addr;
	uint64_t flags;	  /* UFFD_PAGEFAULT_FLAG_* */
	uint64_t t_read;  /* when it was read, for the latency histogram */
	bool counted;	  /* its counters are in (see fault_commit()) */
	bool retried;	  /* counted as retried under the context lock */
};

struct uport;
struct ureader;

struct uport_ops {
	/*
	 * A non-cooperative event (FORK, REMAP, REMOVE, UNMAP). Called with
	 * the port's read lock held when it is shared, so that no message
	 * read after the event is handled before the event has been applied.
	 * Must not block on anything a fault being resolved holds.
	 */
	void (*event)(struct ureader *rd, struct uport *p,
		      const struct uffd_msg *m);
	/*
	 * A page fault. Returns FR_PARK to have it kept and tried again
	 * after the events (ULOOP_RETRY_MIN_NS); anything else ends it, so
	 * the op must have resolved it, poisoned it or woken its thread.
	 */
	struct fault_ret (*fault)(struct ureader *rd, struct uport *p,
				  struct fault_req *req);
	/* After the faults of one read (e.g. wake a DONTWAKE batch); may
	 * be NULL. */
	void (*batch_end)(struct ureader *rd, struct uport *p);
	/*
	 * Around every read() of the port and the application of the
	 * events it returned, by every reader, shared or not; may be NULL.
	 * The kernel lets installs succeed again as soon as an event has
	 * been read, and the process goes on (a MADV_DONTNEED zaps its
	 * pages) before the event is applied: an owner whose other threads
	 * install pages (several handlers, a push) excludes them here, so
	 * that no install made from a plan of before the event lands after.
	 */
	void (*read_begin)(struct uport *p);
	void (*read_end)(struct uport *p);
};

/*
 * A userfaultfd and how it is read. With several readers (shared), each
 * read() and the events it returned are handled under read_lock; the
 * faults it returned are resolved after, concurrently with the others.
 */
struct uport {
	int uffd;
	const struct uport_ops *ops;
	void *owner;		/* the region group, or the daemon's space */
	size_t page_size;	/* to wake a fault that cannot be parked */
	unsigned int batch;	/* messages per read: 1..ULOOP_BATCH */
	bool shared;		/* several threads read it */
	pthread_mutex_t read_lock;
};

struct parked_fault {
	struct uport *port;
	struct fault_req req;
	uint64_t due_ns;	/* not tried again before (now_ns()) */
	unsigned int tries;	/* how often it was tried and parked */
};

/* What one thread keeps while it reads ports: its parked faults. */
struct ureader {
	void *owner;		/* the handler, or the daemon's thread */
	unsigned int nr_parked;
	struct parked_fault parked[ULOOP_PARK_MAX];
	struct uffd_msg msgs[ULOOP_BATCH];
};

void uport_init(struct uport *p, int uffd, const struct uport_ops *ops,
		void *owner, size_t page_size, unsigned int readers);
void uport_destroy(struct uport *p);
ssize_t uloop_service(struct ureader *rd, struct uport *p);
void uloop_retry_parked(struct ureader *rd);
void uloop_forget_port(struct ureader *rd, const struct uport *p);

#endif /* FAULTD_UFFD_H */
