// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * pcache_fault.c - the faults of regions whose pages live in a page cache of
 * their own (pcache.c): hugetlb memfd regions, clones' views of a frozen
 * memfd and regions with a budget (pcache_ops, view_ops, budget_ops in
 * kinds.c). The handler that claims a page prepares it in the page cache
 * through the alias; every fault on it then maps it with UFFDIO_CONTINUE.
 * With a budget, a page is charged before it comes in and held while it
 * is mapped (evict.c).
 */
#include "fault.h"

/*
 * pcache_prepare() - put the content of a claimed page into the page cache
 * through the alias: a missing page is allocated (the kernel clears it) by
 * touching it, a stale one is cleared, a pager fills either in place.
 * Returns 0 or the pager's -errno.
 */
static int pcache_prepare(struct fault *f, bool stale)
{
	char *p = f->r->cache->alias + f->off;
	ssize_t n;

	if (!f->r->cache->pager) {
		fault_commit(f, ST_ZERO_FILLS);
		if (stale)
			faultd_clear(p, f->len);
		else
			(void)*(volatile char *)p;
		return 0;
	}
	n = fault_fill(f, f->r->cache->pager, f->off, p, f->len);
	fault_commit(f, n < 0 ? ST_NR : ST_PAGER_FILLS);
	if (n < 0) {
		stat_inc(f->st, ST_PAGER_ERRORS);
		return (int)n;
	}
	install_fill_tail(p, n, f->len);
	return 0;
}

/*
 * pcache_claim_charged() - pcache_claim(); in a region with a budget, a page
 * that comes into the page cache (not a stale one, which is there) is
 * charged to the budget first. While the budget is full the page is let
 * go again - a thread that holds a page never waits for room - room is
 * made (evict.c) and the page claimed again; over the budget if the pages
 * in it cannot be written back.
 */
static int pcache_claim_charged(struct fault *f, struct page_state *s,
			      bool *stale)
{
	bool minor = f->msg_flags & UFFD_PAGEFAULT_FLAG_MINOR, over = false;
	struct faultd_region *r = f->r;
	int claim;

	for (;;) {
		*stale = false;
		claim = pcache_claim(s, minor, r->ev, stale);
		if (!r->ev || claim == PCACHE_CLAIM_MAPPED || *stale ||
		    evict_reserve(r, 1, over))
			return claim;
		pcache_release(s, PAGE_NONE);
		over = evict_make_room(r);
	}
}

/*
 * do_pcache_fault() - a missing or minor fault in a region with a page-cache
 * base. The handler that claims the page prepares it in the page cache;
 * everyone then maps it with UFFDIO_CONTINUE. No copy of the page is made.
 * In a region with a budget the page is held while it is mapped, so that
 * the evictor cannot take it from the page cache in between (evict.c);
 * mapping it marks it used for the evictor's CLOCK, and a page that
 * cannot be mapped is poisoned before it is let go (fault_settle()). A
 * page whose content could not be produced stays charged, stale: it may
 * hold memory.
 */
struct fault_ret do_pcache_fault(struct fault *f)
{
	struct faultd_region *r = f->r;
	struct page_state *s = pcache_state(r->cache, f->off);
	struct fault_ret ret;
	bool stale;
	int claim, err;

	if (r->cache->pager && !fault_can_call_pager(f, r->cache->pager))
		return fr(FR_RETRY);
	claim = pcache_claim_charged(f, s, &stale);
	if (claim == PCACHE_CLAIM_MAPPED) {
		fault_commit(f, ST_MAPPED);
	} else {
		err = pcache_prepare(f, stale);
		if (err) {
			pcache_release(s, PAGE_STALE);
			return fr_error(err);
		}
		if (!r->ev)
			pcache_release(s, PAGE_READY);
	}
	ret = fault_continue(f, claim == PCACHE_CLAIM_PREPARE);
	if (!r->ev)
		return ret;
	ret = fault_settle(f, ret);
	evict_mapped(r, f->off, f->len);
	pcache_release(s, PAGE_READY);
	if (claim == PCACHE_CLAIM_PREPARE)
		fault_readahead(f, f->off + f->len);
	return ret;
}
