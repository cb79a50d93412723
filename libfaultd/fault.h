/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fault.h - the fault path's own types, for the files that resolve faults
 * of their kind of region (struct region_ops, kinds.c): the fault being
 * handled, as struct vm_fault is for the kernel's ->fault(), and the steps
 * of fault.c that every kind's fault code is made of. A kind's fault
 * function returns what fault.c's do_*_fault() functions do: 0 (resolved,
 * or its waiters woken), FAULTD_RETRY (it needs the context lock),
 * FAULTD_PARK (an event is pending: try again later), or a -errno the
 * caller turns into a poison.
 *
 * Context of everything here: a handler thread, the region held for
 * reading (and the context lock when f->flags has FAULT_LOCKED).
 */
#ifndef FAULTD_FAULT_H
#define FAULTD_FAULT_H

#include "internal.h"

/* The fault being handled, like struct vm_fault. */
struct fault {
	struct handler *h;
	struct fault_req *req;
	struct faultd_region *r;
	uintptr_t addr;		/* page-aligned */
	uint64_t off;		/* addr - region base */
	size_t len;		/* bytes to resolve: one page */
	uint64_t msg_flags;	/* UFFD_PAGEFAULT_FLAG_* */
	unsigned int flags;	/* FAULT_* */
	struct stat_block *st;	/* this thread's counters for the region */
	enum stat_item kind;	/* how it is counted as resolved; ST_NR: not */
};

#define FAULT_LOCKED (1u << 0)  /* the context lock is held for reading */
#define FAULT_WRITE (1u << 1)	/* a write to a missing page */
#define FAULT_WP (1u << 2)	/* install the page write-protected */
#define FAULT_DIRTIES (1u << 3) /* install writable: it is dirty now */

/* Counting (see fault.c): before the ioctl that wakes the thread. */
void fault_count_as(struct fault *f, enum stat_item kind);
void fault_commit(struct fault *f, enum stat_item kind);

/* Content. */
int fault_can_call_pager(const struct fault *f,
			 const struct pager_ref *pager);
ssize_t fault_fill(struct fault *f, struct pager_ref *pager, uint64_t off,
		   void *buf, size_t len);
void fault_readahead(struct fault *f, uint64_t end);

/* Resolutions: each ends the fault (0 or FAULTD_PARK) or poisons. */
int fault_copy(struct fault *f, const void *src);
int fault_continue(struct fault *f, bool prepared);
int fault_poison(struct fault *f, int err);
int fault_poison_page(struct fault *f);
int fault_wake(const struct fault *f);

/* The fault of the plain kind: zeros, or the pager's content. */
int do_missing_fault(struct fault *f);
int do_zero_fault(struct fault *f);

/* The other kinds' faults, each in its kind's file. */
int do_heap_fault(struct fault *f);	/* heap.c */
int do_pcache_fault(struct fault *f);	/* pcache_fault.c */
int do_cow_fault(struct fault *f);	/* clone.c */

#endif /* FAULTD_FAULT_H */
