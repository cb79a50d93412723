// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * pcache.c - page caches: a memfd whose pages the library prepares in
 * place and maps with UFFDIO_CONTINUE, without copying them.
 *
 * Three kinds of region use one (pcache_ops, budget_ops and view_ops in
 * kinds.c); struct page_cache is r->cache. A memfd-hugetlb region maps its
 * page cache MAP_SHARED: a page is allocated (the kernel clears it),
 * filled by the pager or cleared after a discard through the library's
 * own mapping of the memfd (the alias), then mapped. A region with a
 * budget does the same for 4 KiB pages (evict.c). A frozen memfd region
 * and its clones map it MAP_PRIVATE: the page cache holds the content as
 * of the clone, shared by all of them; UFFDIO_CONTINUE maps it read-only
 * and the kernel copies a page on the first write to it.
 *
 * Preparing a page through the alias is not atomic with mapping it, so each
 * page has a state (struct page_state), claimed by one handler at a time: a
 * second fault on a page being prepared waits for it, and a page that is in
 * place is never prepared again until it is discarded.
 *
 * A base is shared by reference count; it owns the memfd and the alias,
 * and keeps a reference to the pager that fills the pages nobody prepared.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <urcu/futex.h>

#include "internal.h"

/*
 * pcache_create() - a base over @r's memfd (a duplicate of the fd: both own
 * theirs), sized for @r's reservation, with a reference to @r's pager.
 * Context: map_lock held for writing, or @r not yet visible.
 */
int pcache_create(struct faultd_region *r)
{
	struct page_cache *b = fd_calloc(1, sizeof(*b));
	void *p;

	if (!b)
		return -ENOMEM;
	b->memfd = dup(r->memfd);
	if (b->memfd < 0) {
		free(b);
		return -errno;
	}
	b->page_size = r->page_size;
	b->alias_len = r->max_len;
	b->nr_states = r->max_len / r->page_size;
	b->states = fd_calloc(b->nr_states, sizeof(*b->states));
	p = mmap(NULL, b->alias_len, PROT_READ | PROT_WRITE, MAP_SHARED,
		 r->memfd, 0);
	if (!b->states || p == MAP_FAILED) {
		int err = p == MAP_FAILED ? -errno : -ENOMEM;

		/* A hugetlb memfd reserves its pages here, at the map. */
		if (p == MAP_FAILED && err == -ENOMEM &&
		    r->page_size > (size_t)r->ctx->page_size)
			huge_log_enomem(r, b->alias_len);
		if (p != MAP_FAILED)
			munmap(p, b->alias_len);
		close(b->memfd);
		free(b->states);
		free(b);
		return err;
	}
	b->alias = p;
	atomic_init(&b->refs, 1);
	b->pager = pager_get(r->pager);
	r->cache = b;
	r->ops = r->ev ? &budget_ops : &pcache_ops;
	return 0;
}

struct page_cache *pcache_get(struct page_cache *b)
{
	atomic_fetch_add(&b->refs, 1);
	return b;
}

void pcache_put(struct page_cache *b)
{
	if (!b || atomic_fetch_sub(&b->refs, 1) != 1)
		return;
	munmap(b->alias, b->alias_len);
	close(b->memfd);
	pager_put(b->pager);
	free(b->states);
	free(b);
}

/*
 * pcache_grow() - cover @len bytes. Only for a base with one user (memfd
 * hugetlb); frozen bases do not change size.
 * Context: that region's lock held for writing (no handler uses it).
 */
int pcache_grow(struct page_cache *b, size_t len)
{
	size_t n = len / b->page_size;
	struct page_state *s;
	void *p;

	if (len <= b->alias_len)
		return 0;
	s = fd_realloc(b->states, n * sizeof(*s));
	if (!s)
		return -ENOMEM;
	memset(s + b->nr_states, 0, (n - b->nr_states) * sizeof(*s));
	b->states = s;
	b->nr_states = n;
	p = mremap(b->alias, b->alias_len, len, MREMAP_MAYMOVE);
	if (p == MAP_FAILED)
		return -errno;
	b->alias = p;
	b->alias_len = len;
	return 0;
}

struct page_state *pcache_state(struct page_cache *b, uint64_t off)
{
	return &b->states[off / b->page_size];
}

/*
 * pcache_claim() - decide who prepares the page.
 * Returns PCACHE_CLAIM_PREPARE (the caller owns the page: prepare it, then
 * call pcache_release()), or PCACHE_CLAIM_MAPPED (its content is in place:
 * just map it). A MINOR fault on a page nobody prepared means its content
 * came from elsewhere (written through the memfd before it was frozen, or
 * by its owner): it is in place as it is.
 *
 * In an @evictable base (a region with a budget, evict.c) the page cache
 * loses pages whenever the evictor takes them, so a MINOR fault proves
 * nothing, and a page is held (BUSY) while it is mapped: PCACHE_CLAIM_MAPPED
 * then also means the caller owns it and releases it READY after mapping.
 */
int pcache_claim(struct page_state *s, bool minor, bool evictable,
	       bool *was_stale)
{
	int32_t v;

	for (;;) {
		v = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
		switch (v & ~PAGE_WAITERS) {
		case PAGE_READY:
			if (!evictable)
				return PCACHE_CLAIM_MAPPED;
			if (pcache_trylock(s, PAGE_READY))
				return PCACHE_CLAIM_MAPPED;
			continue;
		case PAGE_NONE:
			if (minor && !evictable) {
				__atomic_compare_exchange_n(
					&s->state, &v, PAGE_READY, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
				continue;
			}
			/* fallthrough */
		case PAGE_STALE:
			if (__atomic_compare_exchange_n(
				    &s->state, &v, PAGE_BUSY, false,
				    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
				*was_stale = v == PAGE_STALE;
				return PCACHE_CLAIM_PREPARE;
			}
			continue;
		default: /* BUSY: another handler prepares it; wait */
			if (!(v & PAGE_WAITERS) &&
			    !__atomic_compare_exchange_n(
				    &s->state, &v, v | PAGE_WAITERS, false,
				    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				continue;
			futex_noasync(&s->state, FUTEX_WAIT, v | PAGE_WAITERS,
				      NULL, NULL, 0);
		}
	}
}

/*
 * pcache_trylock() - take the page if it is @from (never waits).
 * Returns whether the caller owns it now (BUSY).
 */
bool pcache_trylock(struct page_state *s, int32_t from)
{
	return __atomic_compare_exchange_n(&s->state, &from, PAGE_BUSY, false,
					   __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* pcache_release() - end the preparation: the page is @state now. */
void pcache_release(struct page_state *s, int32_t state)
{
	int32_t old = __atomic_exchange_n(&s->state, state, __ATOMIC_ACQ_REL);

	if (old & PAGE_WAITERS)
		futex_noasync(&s->state, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/*
 * pcache_mark_stale() - [off, off + len) was zapped but its pages stay in the
 * page cache: the next fault must prepare them again (shared views only).
 */
void pcache_mark_stale(struct page_cache *b, uint64_t off, size_t len)
{
	for (uint64_t o = off; o < off + len; o += b->page_size)
		pcache_release(pcache_state(b, o), PAGE_STALE);
}

/* pcache_forget() - pages of [off, off + len) left the page cache. */
void pcache_forget(struct page_cache *b, uint64_t off, size_t len)
{
	for (uint64_t o = off; o < off + len && o / b->page_size < b->nr_states;
	     o += b->page_size)
		pcache_release(pcache_state(b, o), PAGE_NONE);
}
