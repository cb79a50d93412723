/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fault.h - the fault path's own types, for the files that resolve faults
 * of their kind of region (struct region_ops, kinds.c): the fault being
 * handled, as struct vm_fault is for the kernel's ->fault(), and the steps
 * of fault.c that every kind's fault code is made of. A kind's fault
 * function returns a struct fault_ret (uffd.h), as the kernel's return a
 * vm_fault_t: FR_DONE (resolved, or its waiters woken), FR_RETRY (it needs
 * the context lock), FR_PARK (an event is pending: try again later), or
 * FR_ERROR with the errno of content that cannot be produced, which the
 * caller settles into a poison (fault_settle()). It never returns
 * FR_REPLAN: a kind plans under the locks it resolves under.
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
bool fault_can_call_pager(const struct fault *f,
			  const struct pager_ref *pager);
ssize_t fault_fill(struct fault *f, struct pager_ref *pager, uint64_t off,
		   void *buf, size_t len);
void fault_readahead(struct fault *f, uint64_t end);

/* Resolutions: each ends the fault (FR_DONE or FR_PARK), or fails
 * (FR_ERROR) for fault_settle() to poison. */
struct fault_ret fault_copy(struct fault *f, const void *src);
struct fault_ret fault_continue(struct fault *f, bool prepared);
struct fault_ret fault_wake(const struct fault *f);
struct fault_ret fault_poison_page(struct fault *f);
struct fault_ret fault_settle(struct fault *f, struct fault_ret ret);

/* The fault of the plain kind: zeros, or the pager's content. */
struct fault_ret do_missing_fault(struct fault *f);
struct fault_ret do_zero_fault(struct fault *f);

/* The other kinds' faults, each in its kind's file. */
struct fault_ret do_heap_fault(struct fault *f);	/* heap.c */
struct fault_ret do_pcache_fault(struct fault *f);	/* pcache_fault.c */
struct fault_ret do_cow_fault(struct fault *f);		/* clone.c */

#endif /* FAULTD_FAULT_H */
