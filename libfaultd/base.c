// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * base.c - page-cache bases: a memfd whose pages the library prepares in
 * place and maps with UFFDIO_CONTINUE, without copying them.
 *
 * Two kinds of region use one. A memfd-hugetlb region maps its base
 * MAP_SHARED: a page is allocated (the kernel clears it), filled by the
 * pager or cleared after a discard through the library's own mapping of
 * the memfd (the alias), then mapped. A frozen memfd region and its clones
 * map the base MAP_PRIVATE: the page cache holds the content as of the
 * clone, shared by all of them; UFFDIO_CONTINUE maps it read-only and the
 * kernel copies a page on the first write to it.
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
 * base_create() - a base over @r's memfd (a duplicate of the fd: both own
 * theirs), sized for @r's reservation, with a reference to @r's pager.
 * Context: map_lock held for writing, or @r not yet visible.
 */
int base_create(struct faultd_region *r)
{
	struct region_base *b = fd_calloc(1, sizeof(*b));
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
	r->ops = r->ev ? &budget_ops : &base_ops;
	return 0;
}

struct region_base *base_get(struct region_base *b)
{
	atomic_fetch_add(&b->refs, 1);
	return b;
}

void base_put(struct region_base *b)
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
 * base_grow() - cover @len bytes. Only for a base with one user (memfd
 * hugetlb); frozen bases do not change size.
 * Context: that region's lock held for writing (no handler uses it).
 */
int base_grow(struct region_base *b, size_t len)
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

struct page_state *base_state(struct region_base *b, uint64_t off)
{
	return &b->states[off / b->page_size];
}

/*
 * base_claim() - decide who prepares the page.
 * Returns BASE_CLAIM_PREPARE (the caller owns the page: prepare it, then
 * call base_release()), or BASE_CLAIM_MAPPED (its content is in place:
 * just map it). A MINOR fault on a page nobody prepared means its content
 * came from elsewhere (written through the memfd before it was frozen, or
 * by its owner): it is in place as it is.
 *
 * In an @evictable base (a region with a budget, evict.c) the page cache
 * loses pages whenever the evictor takes them, so a MINOR fault proves
 * nothing, and a page is held (BUSY) while it is mapped: BASE_CLAIM_MAPPED
 * then also means the caller owns it and releases it READY after mapping.
 */
int base_claim(struct page_state *s, bool minor, bool evictable,
	       bool *was_stale)
{
	int32_t v;

	for (;;) {
		v = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
		switch (v & ~PAGE_WAITERS) {
		case PAGE_READY:
			if (!evictable)
				return BASE_CLAIM_MAPPED;
			if (base_trylock(s, PAGE_READY))
				return BASE_CLAIM_MAPPED;
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
				return BASE_CLAIM_PREPARE;
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
 * base_trylock() - take the page if it is @from (never waits).
 * Returns whether the caller owns it now (BUSY).
 */
bool base_trylock(struct page_state *s, int32_t from)
{
	return __atomic_compare_exchange_n(&s->state, &from, PAGE_BUSY, false,
					   __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* base_release() - end the preparation: the page is @state now. */
void base_release(struct page_state *s, int32_t state)
{
	int32_t old = __atomic_exchange_n(&s->state, state, __ATOMIC_ACQ_REL);

	if (old & PAGE_WAITERS)
		futex_noasync(&s->state, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/*
 * base_mark_stale() - [off, off + len) was zapped but its pages stay in the
 * page cache: the next fault must prepare them again (shared views only).
 */
void base_mark_stale(struct region_base *b, uint64_t off, size_t len)
{
	for (uint64_t o = off; o < off + len; o += b->page_size)
		base_release(base_state(b, o), PAGE_STALE);
}

/* base_forget() - pages of [off, off + len) left the page cache. */
void base_forget(struct region_base *b, uint64_t off, size_t len)
{
	for (uint64_t o = off; o < off + len && o / b->page_size < b->nr_states;
	     o += b->page_size)
		base_release(base_state(b, o), PAGE_NONE);
}
