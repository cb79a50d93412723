// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * fault.c - the fault path: from one page-fault message to its resolution.
 *
 * It mirrors the kernel's do_user_addr_fault() since "Handle more faults
 * under the VMA lock": find the region under RCU, try-lock it for reading,
 * resolve the fault under that lock alone. When the resolution needs the
 * context lock, it returns FR_RETRY; the fault is then looked up again
 * and handled with the context lock held for reading. In FAULTD_LOCK_GLOBAL
 * mode every fault takes that second path.
 *
 * Every step says what it came to as a struct fault_ret (uffd.h), as the
 * kernel's do the vm_fault_t: FR_DONE, FR_RETRY, FR_PARK, or FR_ERROR
 * with the errno of content that cannot be produced, which one function,
 * fault_settle(), turns into a poisoned page.
 *
 * A fault is resolved as its region's kind does it (r->ops, kinds.c):
 * here the missing and write-protect faults and the steps every kind's
 * fault code is made of (fault.h); the heap's, the page cache's and
 * the copy-on-write clone's are in heap.c, pcache_fault.c and clone.c.
 *
 * Every path ends in exactly one of: the page filled (waking the waiters),
 * the waiters woken because someone else filled it, the page poisoned, the
 * fault parked for a retry, or the waiters woken to find the memory gone.
 * No thread is left asleep and no page is silently zero-filled in place of
 * content.
 */
#define _LGPL_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <urcu/urcu-bp.h>

#include "fault.h"

/*
 * fault_count_as() - count the fault as resolved by @kind (a fill, a map,
 * a poison...; ST_NR: not resolved), in place of what it was counted as.
 * The counters of resolutions count only what was done: the ioctl that
 * loses a race (EEXIST), finds the range gone or must be retried takes its
 * count back (fault_finish()).
 */
void fault_count_as(struct fault *f, enum stat_item kind)
{
	if (f->kind == kind)
		return;
	if (f->kind != ST_NR)
		stat_add(f->st, f->kind, (uint64_t)-1);
	if (kind != ST_NR)
		stat_inc(f->st, kind);
	f->kind = kind;
}

/*
 * fault_commit() - the fault is about to be resolved as @kind (ST_NR: a
 * poison, counted by fault_poison_page()). Count it now, before the ioctl
 * that wakes the faulting thread, so that a thread that sees its page also
 * sees the fault counted. A parked fault that is retried is counted once.
 */
void fault_commit(struct fault *f, enum stat_item kind)
{
	if (!f->req->counted) {
		f->req->counted = true;
		stat_inc(f->st, ST_FAULTS);
		stat_inc(f->st,
			 (f->flags & FAULT_LOCKED) ? ST_LOCKED : ST_FAST);
	}
	fault_count_as(f, kind);
}

/*
 * How a fill installs the page in a region that watches writes (dirty
 * tracking, a clone's parent, a clone): async tracking always protects
 * (the kernel marks the first write); otherwise a page filled for a read
 * is protected, and a page filled for a write is installed writable, the
 * write's consequences taken at once (fault_before_write()), saving a
 * second fault. A page cache maps pages read-only anyway, so it
 * always protects.
 */
static void fault_setup(struct fault *f, uintptr_t addr)
{
	struct faultd_region *r = f->r;

	f->addr = addr & ~((uintptr_t)r->page_size - 1);
	f->off = f->addr - r->base;
	f->len = r->page_size;
	f->st = &r->stats[f->h->slot];
	f->flags &= FAULT_LOCKED;
	if (f->msg_flags & UFFD_PAGEFAULT_FLAG_WRITE)
		f->flags |= FAULT_WRITE;
	if (r->wp_mode == WP_NONE && !r->snaps && !r->cow)
		return;
	if (r->wp_mode == WP_ASYNC || r->cache || !(f->flags & FAULT_WRITE))
		f->flags |= FAULT_WP;
	else
		f->flags |= FAULT_DIRTIES;
}

static int fault_uffd(const struct fault *f)
{
	return f->r->group->uffd;
}

/*
 * fault_inst() - install [start, start + len) for @f through the one
 * layer (install.c): @op from @src, write-protected where @f installs
 * clean pages (FAULT_WP), with @flags INST_* besides. The layer wakes
 * the waiters of what it found present or gone; fault_finish() reads
 * *res for the faulting page.
 */
static void fault_inst(const struct fault *f, enum inst_op op,
		       uintptr_t start, size_t len, const void *src,
		       unsigned int flags, struct inst_res *res)
{
	struct inst_req q = {
		.uffd = fault_uffd(f), .op = op, .dst = start, .len = len,
		.flags = flags | ((f->flags & FAULT_WP) ? INST_WP : 0),
		.page_size = f->len, .src = src,
		.zeros_len = ZERO_BUF_LEN,
	};

	install_range(&q, res);
}

/*
 * fault_wake() - wake the waiters of the page without filling it: it is
 * there already (EEXIST), or its range is gone (ENOENT): an munmap() wakes
 * no one, so they would sleep on; woken, they get SIGSEGV. A wake that
 * fails would leave them asleep too: the fault is then parked and tried
 * again later.
 */
struct fault_ret fault_wake(const struct fault *f)
{
	return fr(uffd_wake(fault_uffd(f), f->addr, f->len) < 0 ? FR_PARK
								 : FR_DONE);
}

/*
 * fault_finish() - count what the install of the faulting page did
 * (install_range()) and return what it means for the fault, as
 * install_fault_ret() says: the fault is resolved as counted only when
 * the page went in.
 */
static struct fault_ret fault_finish(struct fault *f,
				     const struct inst_res *res)
{
	enum uffd_outcome how = install_outcome(res);

	if (how != UFFD_DONE)
		fault_count_as(f, ST_NR);
	if (how == UFFD_EXISTS)
		stat_inc(f->st, ST_EEXIST);
	else if (how == UFFD_AGAIN)
		stat_inc(f->st, ST_EAGAIN);
	else if (how == UFFD_GONE)
		stat_inc(f->st, ST_GONE);
	return install_fault_ret(res);
}

/*
 * fault_finish() for an install that stopped with @err before the page,
 * or an ioctl that is not an install: nothing woke the waiters of a page
 * found there or gone, so the wake is made here.
 */
static struct fault_ret fault_finish_err(struct fault *f, int err)
{
	struct inst_res res = { .end = uffd_classify(err), .err = err };

	if (res.end == UFFD_EXISTS || res.end == UFFD_GONE)
		res.woken = !uffd_wake(fault_uffd(f), f->addr, f->len);
	return fault_finish(f, &res);
}

/*
 * Poisoning: the content of the page cannot be produced, so every access
 * to it fails with SIGBUS (UFFDIO_POISON); it is never filled with zeros.
 * Without UFFDIO_POISON (kernels before 6.6) the page is made
 * inaccessible instead, and the access gets SIGSEGV.
 */
static struct fault_ret poison_by_mprotect(struct fault *f)
{
	if (mprotect((void *)f->addr, f->len, PROT_NONE) < 0)
		fd_err(f->r->ctx, "%s: cannot make the page inaccessible: %s",
		       f->r->name, strerror(errno));
	return fault_wake(f);
}

/* Counted as poisoned once done (a parked poison is retried). */
struct fault_ret fault_poison_page(struct fault *f)
{
	struct fault_ret ret;
	struct inst_res res;

	fault_count_as(f, ST_POISONED);
	if (uffd_have() & FAULTD_HAVE_POISON) {
		fault_inst(f, INST_POISON, f->addr, f->len, NULL, 0, &res);
		ret = fault_finish(f, &res);
		if (!fr_is(ret, FR_ERROR))
			return ret;
		fd_err(f->r->ctx, "%s: UFFDIO_POISON: %s", f->r->name,
		       strerror(-ret.err));
		fault_count_as(f, ST_POISONED);
	}
	return poison_by_mprotect(f);
}

/*
 * fault_settle() - the one place where a failed resolution becomes a
 * poisoned page: FR_ERROR (a pager error, a clone's lost page, an install
 * that failed) is logged, counted and poisoned; any other result passes.
 * Called on every kind's result (handle_region_fault()), and by a kind
 * that holds the page against other fillers (a fill claim, a page-cache
 * page held under a budget) before it lets go, so that a thread woken by
 * the release finds the page poisoned rather than missing.
 */
struct fault_ret fault_settle(struct fault *f, struct fault_ret ret)
{
	if (!fr_is(ret, FR_ERROR))
		return ret;
	fault_commit(f, ST_NR);
	fd_err(f->r->ctx, "%s: page at offset %#llx: %s: poisoned", f->r->name,
	       (unsigned long long)f->off, strerror(-ret.err));
	return fault_poison_page(f);
}

/*
 * fault_before_write() - a write is about to land on a page whose content
 * is @old: clones that still read it get a copy, and the region's write
 * hook sees it.
 */
static void fault_before_write(struct fault *f, const void *old)
{
	struct faultd_region *r = f->r;

	if (r->snaps)
		stat_add(f->st, ST_COW_SAVED,
			 clone_save_before_write(r, f->off, old, f->len));
	if (r->write_hook)
		r->write_hook(r->hook_arg, r, f->off, old);
}

/* Resolve with @len bytes copied from @src (FR_ERROR: the copy failed). */
struct fault_ret fault_copy(struct fault *f, const void *src)
{
	struct inst_res res;

	if (f->flags & FAULT_DIRTIES) {
		/* Marked and installed as one step: see dirty.c. */
		fault_before_write(f, src);
		dirty_write_begin(f->r, f->off, f->len);
		fault_inst(f, INST_COPY, f->addr, f->len, src, 0, &res);
		dirty_write_end(f->r);
	} else {
		fault_inst(f, INST_COPY, f->addr, f->len, src, 0, &res);
	}
	return fault_finish(f, &res);
}

/*
 * Fault-around fills pages nobody asked for, so it installs them clean:
 * write-protected where writes are tracked (FAULT_WP). Not for a write
 * that must dirty its page at once, nor for clones and their parents,
 * whose pages each have a history.
 */
static bool fault_around_ok(const struct fault *f)
{
	return f->r->fault_around && !(f->flags & FAULT_DIRTIES) &&
	       !f->r->snaps && !f->r->cow;
}

/*
 * fault_around() - like the kernel's ->map_pages(): resolve the whole
 * window [start, start + len) around the faulting page with zeros in one
 * install, copied (@zero_copy) or the zero page. The ioctl never replaces a
 * present page: one in the window stops it short, and the faulting page
 * is then resolved on its own unless it was among those filled (what was
 * filled stays, as a prefetch).
 * Returns whether the faulting page is resolved (and its waiters woken).
 */
static bool fault_around(struct fault *f, bool zero_copy, uintptr_t start,
			 size_t len)
{
	uint64_t extra = len / f->len - 1, done;
	struct inst_res res;

	/* Counted before the ioctl wakes the thread, as fault_commit(). */
	stat_add(f->st, ST_AROUND, extra);
	fault_inst(f, INST_ZERO, start, len, f->r->ctx->zero_page,
		   INST_STOP_PRESENT | (zero_copy ? INST_ZERO_COPY : 0), &res);
	if (res.done == len)
		return true;
	/* Stopped short. Only this thread writes the counter. A page in no
	 * mapping before it: the faulting page is resolved on its own. */
	done = res.done / f->len;
	if (!res.gone && f->addr < start + done * f->len) {
		stat_add(f->st, ST_AROUND, done - 1 - extra);
		return true;
	}
	stat_add(f->st, ST_AROUND, done - extra);
	return false;
}

/*
 * How zero-fill resolves a page: hugetlb has no UFFDIO_ZEROPAGE; write
 * tracking needs a write-protect mode ZEROPAGE lacks; and an anonymous
 * write would fault a second time to replace the zero page. In those
 * cases, a copy of the context's zeros.
 */
static bool zero_by_copy(const struct fault *f)
{
	return f->r->kind == REGION_HUGETLB ||
	       (f->flags & (FAULT_WP | FAULT_DIRTIES)) ||
	       ((f->flags & FAULT_WRITE) && f->r->kind == REGION_ANON);
}

/*
 * do_zero_fault() - a missing page of a region without a pager. A read
 * maps the shared zero page (UFFDIO_ZEROPAGE), as the kernel does for a
 * read of anonymous memory; shmem has no zero page, so there ZEROPAGE
 * allocates. See zero_by_copy() for the rest.
 */
struct fault_ret do_zero_fault(struct fault *f)
{
	struct inst_res res;
	uintptr_t start;
	size_t len;

	fault_commit(f, ST_ZERO_FILLS);
	if (fault_around_ok(f)) {
		len = fill_window(f->r, f->addr, &start);
		if (fault_around(f, zero_by_copy(f), start, len))
			return fr(FR_DONE);
	}
	if (zero_by_copy(f))
		return fault_copy(f, f->r->ctx->zero_page);
	fault_inst(f, INST_ZERO, f->addr, f->len, NULL, 0, &res);
	return fault_finish(f, &res);
}

/*
 * fault_can_call_pager() - like vmf_can_call_fault(): a pager that is not
 * audited for concurrency (no FAULTD_PAGER_CONCURRENT) relies on the
 * context lock. False on the fast path: the fault must be retried under
 * the lock (FR_RETRY).
 */
bool fault_can_call_pager(const struct fault *f,
			  const struct pager_ref *pager)
{
	return pager_concurrent(pager) || (f->flags & FAULT_LOCKED);
}

/* The pager's content of [off, off + len) into @buf, counted. */
ssize_t fault_fill(struct fault *f, struct pager_ref *pager,
			  uint64_t off, void *buf, size_t len)
{
	ssize_t n = pager_call_fill(f->r, pager, off, buf, len);

	if (n > 0)
		stat_add(f->st, ST_BYTES_READ, (uint64_t)n);
	return n;
}

/* Sequential faults start read-ahead (prefetch.c); @end: filled up to. */
void fault_readahead(struct fault *f, uint64_t end)
{
	if (f->r->ra)
		readahead_fault(f->r, f->st, f->off, end);
}

/*
 * fault_claim() - claim the pages of the faulting page's fault-around
 * window (or the page alone) that no one else fills (fill.c); if the
 * faulting page is missing, only the run of missing pages around it is
 * kept. Returns false if another handler or a prefetch worker fills it.
 */
static bool fault_claim(struct fault *f, struct fill_span *sp)
{
	uintptr_t start = f->addr;
	size_t len = f->len;
	uint64_t s;

	if (fault_around_ok(f))
		len = fill_window(f->r, f->addr, &start);
	if (!fill_claim(f->r, f->off, start - f->r->base,
			start - f->r->base + len, sp))
		return false;
	if (fill_missing(f->r, sp, f->off)) {
		len = fill_run_around(f->r, sp, f->off, &s);
		fill_trim(f->r, sp, s, len);
	}
	return true;
}

/*
 * fault_install() - map the claimed run [s, s + len) from @buf, the
 * faulting page among them; the others count as fault-around (before the
 * ioctl that wakes the thread, as fault_commit()). A window the ioctl
 * fails is given up for the faulting page alone. Returns as fault_finish()
 * does for the faulting page; *done: every page of the run is in.
 */
static struct fault_ret fault_install(struct fault *f, uint64_t s,
				      const void *buf, size_t len, bool *done)
{
	uint64_t extra = len / f->len - 1, got;
	struct fill_result res;
	bool covered;
	int err;

	stat_add(f->st, ST_AROUND, extra);
	err = fill_copy(f->r, s, buf, len,
			(f->flags & FAULT_WP) ? INST_WP : 0, f->off, &res);
	*done = res.done == len;
	covered = res.done > f->off - s;
	got = res.installed / f->len - (covered && !res.watch_present);
	/* Only this thread writes the counter. */
	stat_add(f->st, ST_AROUND, got - extra);
	if (covered && res.watch_present) {
		fault_count_as(f, ST_NR); /* someone else's fill */
		stat_inc(f->st, ST_EEXIST);
		return fault_wake(f);
	}
	if (covered)
		return fr(FR_DONE);
	if (len > f->len && uffd_classify(err) == UFFD_FAILED)
		return fault_copy(f, (const char *)buf + (f->off - s));
	return fault_finish_err(f, err);
}

/*
 * fault_fill_span() - fill the claimed run (the faulting page in it) from
 * the pager in one call and map it; a window the pager fails is given up
 * for the faulting page alone. *done: every page of the run is in, or
 * the faulting page alone is to be poisoned (FR_ERROR of a failed copy).
 */
static struct fault_ret fault_fill_span(struct fault *f,
					const struct fill_span *sp, char *buf,
					bool *done)
{
	uint64_t s = sp->start;
	size_t len = sp->end - s;
	ssize_t n = fault_fill(f, f->r->pager, s, buf, len);
	struct fault_ret ret;
	bool whole = true;

	*done = false;
	if (n < 0 && len > f->len) {
		s = f->off;
		len = f->len;
		whole = false;
		n = fault_fill(f, f->r->pager, s, buf, len);
	}
	fault_commit(f, n < 0 ? ST_NR : ST_PAGER_FILLS);
	if (n < 0) {
		stat_inc(f->st, ST_PAGER_ERRORS);
		return fr_error((int)n);
	}
	install_fill_tail(buf, n, len);
	if (fault_around_ok(f)) {
		ret = fault_install(f, s, buf, len, done);
	} else {
		ret = fault_copy(f, buf);
		*done = !fr_is(ret, FR_PARK);
	}
	*done &= whole;
	return ret;
}

/*
 * do_pager_fault() - a missing page whose content comes from the pager,
 * with the missing pages around it in its fault-around window, each read
 * once: a page another filler has claimed is left to it (it wakes the
 * thread), and one found present only needs a wake. A page that cannot
 * be filled is poisoned before its claim goes (fault_settle()).
 */
static struct fault_ret do_pager_fault(struct fault *f)
{
	struct fault_ret ret = fr(FR_DONE);
	uint64_t end = f->off + f->len;
	struct fill_span sp;
	bool done = false;

	if (!fault_can_call_pager(f, f->r->pager))
		return fr(FR_RETRY);
	restore_note_fault(f->r, f->off); /* a restore may record it */
	if (!fault_claim(f, &sp)) {
		/* Another filler has it, and wakes the thread (fill.c). */
		fault_commit(f, ST_NR);
		stat_inc(f->st, ST_EEXIST);
	} else if (!fill_missing(f->r, &sp, f->off)) {
		fault_commit(f, ST_NR);
		stat_inc(f->st, ST_EEXIST);
		fill_release(f->r, &sp, true); /* the wake of an EEXIST */
	} else {
		ret = fault_settle(f, fault_fill_span(f, &sp, f->h->staging,
						      &done));
		if (fr_is(ret, FR_PARK))
			fill_release_parked(f->r, &sp, f->off);
		else
			fill_release(f->r, &sp, !done);
		end = sp.end;
	}
	fault_readahead(f, end);
	return ret;
}

struct fault_ret do_missing_fault(struct fault *f)
{
	if (!f->r->pager)
		return do_zero_fault(f);
	return do_pager_fault(f);
}

/*
 * Map the page the page cache holds (FR_ERROR: that failed). The fault
 * that @prepared the page resolved it even when another fault mapped it
 * first (EEXIST): the page both map is its fill.
 */
struct fault_ret fault_continue(struct fault *f, bool prepared)
{
	struct inst_res res;

	fault_inst(f, INST_CONTINUE, f->addr, f->len, NULL, 0, &res);
	if (prepared && install_outcome(&res) == UFFD_EXISTS)
		return install_fault_ret(&res);
	return fault_finish(f, &res);
}

/*
 * fault_unprotect() - let the write go on: record the page as dirty and
 * remove its protection, which wakes the writer, as one step against
 * collections (dirty_write_begin(), dirty.c).
 */
static struct fault_ret fault_unprotect(struct fault *f)
{
	struct faultd_region *r = f->r;
	struct fault_ret ret;
	int err;

	dirty_write_begin(r, f->off, f->len);
	err = uffd_writeprotect(fault_uffd(f), f->addr, f->len, false);
	dirty_write_end(r);
	ret = fault_finish_err(f, err);
	if (!fr_is(ret, FR_ERROR))
		return ret;
	/* The writer must not sleep forever: it faults again and retries. */
	fd_err(r->ctx, "%s: cannot unprotect offset %#llx: %s", r->name,
	       (unsigned long long)f->off, strerror(-ret.err));
	return fault_wake(f);
}

/*
 * Two handlers can each read a WP message for one page (two writers, or
 * a writer woken and faulting again before the first message is
 * answered); by the time the second runs, the first may have unprotected
 * the page and the write landed. The write hook must run once, before the
 * write: so it runs under the region's claim lock of the page, and only
 * while the page is still write-protected (pagemap's PM_UFFD_WP); a
 * message for a page no longer protected is answered with a wake. Only
 * WP faults of regions with a hook take a claim lock.
 */
static pthread_mutex_t *wp_claim_of(const struct fault *f)
{
	return &f->r->wp_claim[(f->off / f->r->page_size) % WP_CLAIMS];
}

/* Is the page still write-protected? Yes when pagemap cannot tell: a hook
 * run twice is better than a first write without one. */
static bool wp_still_protected(const struct fault *f)
{
	uint64_t pm;

	return mem_pagemap(f->r->ctx, f->addr, 1, &pm) < 0 ||
	       (pm & PM_UFFD_WP);
}

/*
 * do_wp_fault() - the first write to a write-protected page. The page is
 * present and read-only: the write hook sees its old content in place.
 */
static struct fault_ret do_wp_fault(struct fault *f)
{
	pthread_mutex_t *claim = f->r->write_hook ? wp_claim_of(f) : NULL;
	struct fault_ret ret;

	fault_commit(f, ST_WP);
	if (f->r->cow) /* a clone's page, installed read-only: now its own */
		stat_inc(f->st, ST_COW);
	if (!claim) {
		fault_before_write(f, (const void *)f->addr);
		return fault_unprotect(f);
	}
	pthread_mutex_lock(claim);
	if (wp_still_protected(f)) {
		fault_before_write(f, (const void *)f->addr);
		ret = fault_unprotect(f);
	} else {
		/* Answered already: unprotecting again could undo a protect
		 * made since, and let a write pass without its hook. */
		fault_count_as(f, ST_NR);
		stat_inc(f->st, ST_EEXIST);
		ret = fault_wake(f);
	}
	pthread_mutex_unlock(claim);
	return ret;
}

/*
 * handle_region_fault() - resolve a fault in a region the caller holds: a
 * write-protect fault here, the others as the region's kind does them; a
 * failure is settled into a poison. Returns FR_DONE, FR_PARK or FR_RETRY.
 */
static struct fault_ret handle_region_fault(struct fault *f)
{
	struct fault_ret ret;

	if (f->msg_flags & UFFD_PAGEFAULT_FLAG_WP)
		ret = do_wp_fault(f);
	else
		ret = f->r->ops->fault(f);
	return fault_settle(f, ret);
}

/*
 * Count the fault's retry or latency in its region's stats (f->st): while
 * the caller still holds the region, which may be freed once it lets go.
 */
static void fault_account(const struct fault *f, struct fault_ret ret)
{
	if (fr_is(ret, FR_RETRY)) {
		/* Once a fault, also when it is parked and comes again. */
		if (!f->req->retried)
			stat_inc(f->st, ST_RETRY);
		f->req->retried = true;
	} else if (!fr_is(ret, FR_PARK)) {
		stat_latency(f->st, now_ns() - f->req->t_read);
	}
}

/*
 * handler_lookup() - map_lookup() for a handler: a region of another group
 * is no region. A message read late - its region destroyed since - may
 * name an address that a region of another group took meanwhile; that
 * region's userfaultfd and counters (one per thread of its own group) are
 * not this handler's. Context: as map_lookup().
 */
static struct faultd_region *handler_lookup(struct handler *h, uintptr_t addr)
{
	struct faultd_region *r = map_lookup(h->group->ctx, addr);

	return r && r->group == h->group ? r : NULL;
}

/*
 * lock_region_under_rcu() - like lock_vma_under_rcu(): find the region of
 * @addr and take its read lock without any context-wide lock.
 * Returns the region, read-locked, or NULL with *why: ST_MISS (no region,
 * or it went away) or ST_ABORT (it is being changed) - the caller then
 * takes the context lock, and counts *why there (fault_handle()).
 */
static struct faultd_region *lock_region_under_rcu(struct handler *h,
						   uintptr_t addr,
						   enum stat_item *why)
{
	struct faultd_region *r;

	urcu_bp_read_lock();
	r = handler_lookup(h, addr);
	if (!r) {
		*why = ST_MISS;
		goto fail;
	}
	if (!region_read_trylock(r)) {
		*why = ST_ABORT;
		goto fail;
	}
	/* Destroyed or shrunk between the lookup and the lock? */
	if (unlikely(r->dead || !region_contains(r, addr))) {
		region_read_unlock(r);
		*why = ST_MISS;
		goto fail;
	}
	map_rcu_read_unlock();
	return r;
fail:
	map_rcu_read_unlock();
	return NULL;
}

/*
 * A fault in no region: its region was destroyed (or the range shrunk)
 * after the fault was queued. Wake the thread; it faults again on unmapped
 * memory and gets SIGSEGV - or, where a region of another group took the
 * address since, the wake reaches no one (not its userfaultfd).
 */
static struct fault_ret fault_no_region(struct handler *h, uintptr_t addr)
{
	size_t ps = (size_t)h->group->ctx->page_size;

	stat_inc(&h->stats, ST_FAULTS);
	stat_inc(&h->stats, ST_NO_REGION);
	uffd_wake(h->group->uffd, addr & ~(ps - 1), ps);
	return fr(FR_DONE);
}

/* Is this fault of @h one whose locks are timed (one in LOCK_SAMPLE)? */
static bool lock_timed(struct handler *h)
{
	return !(h->lock_tick++ & (LOCK_SAMPLE - 1));
}

/* Record into @h's lock stats the time since @since, if it was taken. */
static void lock_since(struct handler *h, enum lock_item i, uint64_t since)
{
	if (since)
		lock_record(&h->locks, i, now_ns() - since);
}

/*
 * fault_fast() - the fault under its region's lock alone. Returns as
 * handle_region_fault(), or FR_RETRY with *why set when the lock-free
 * lookup failed. @timed: time the region lock's hold.
 */
static struct fault_ret fault_fast(struct fault *f, enum stat_item *why,
				   bool timed)
{
	struct fault_ret ret;
	uint64_t held;

	f->r = lock_region_under_rcu(f->h, f->req->addr, why);
	if (!f->r)
		return fr(FR_RETRY);
	held = timed ? now_ns() : 0;
	fault_setup(f, f->req->addr);
	ret = handle_region_fault(f);
	fault_account(f, ret);
	region_read_unlock(f->r);
	lock_since(f->h, LK_REGION_READ_HOLD, held);
	fd_assert_internal(!fr_is(ret, FR_RETRY) || f->kind == ST_NR);
	return ret;
}

/*
 * fault_locked() - the fault under the context lock held for reading. A
 * miss or an abort of the lock-free lookup (@why) is counted here, once
 * the lock is held: in the region then found at the address (whose
 * counters cannot be retired meanwhile, as they could while the region
 * was being destroyed under the failed try-lock), or in the handler's
 * own, the context's, when there is none. @timed: time the lock's wait
 * and hold.
 */
static struct fault_ret fault_locked(struct fault *f, enum stat_item why,
				     bool timed)
{
	struct handler *h = f->h;
	struct faultd_ctx *ctx = h->group->ctx;
	uint64_t asked = timed ? now_ns() : 0, held = 0;
	struct fault_ret ret;

	map_read_lock(ctx);
	if (asked) {
		held = now_ns();
		lock_record(&h->locks, LK_CTX_READ_WAIT, held - asked);
	}
	f->r = handler_lookup(h, f->req->addr);
	if (!f->r) {
		map_read_unlock(ctx);
		lock_since(h, LK_CTX_READ_HOLD, held);
		if (why != ST_NR)
			stat_inc(&h->stats, why);
		return fault_no_region(h, f->req->addr);
	}
	f->flags |= FAULT_LOCKED;
	fault_setup(f, f->req->addr);
	if (why != ST_NR)
		stat_inc(f->st, why);
	ret = handle_region_fault(f);
	fd_assert_internal(!fr_is(ret, FR_RETRY));
	fault_account(f, ret);
	map_read_unlock(ctx);
	lock_since(h, LK_CTX_READ_HOLD, held);
	return ret;
}

/*
 * fault_handle() - handle one page-fault message.
 * Returns FR_DONE, or FR_PARK when the fault must be retried after the
 * pending events have been read.
 * Context: a handler thread, registered with RCU, holding no lock.
 */
struct fault_ret fault_handle(struct handler *h, struct fault_req *req)
{
	struct fault f = { .h = h, .req = req, .msg_flags = req->flags,
			   .kind = ST_NR };
	enum stat_item why = ST_NR;
	bool timed = lock_timed(h);
	struct fault_ret ret;

	if (!lock_global(h->group->ctx)) {
		ret = fault_fast(&f, &why, timed);
		if (!fr_is(ret, FR_RETRY))
			return ret;
	}
	return fault_locked(&f, why, timed);
}
