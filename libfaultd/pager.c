// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * pager.c - pagers: the shared reference that keeps one alive, and the
 * two functions that call its fill() and its writeback().
 *
 * A pager may outlive the region it was given to: a page-cache base of a
 * frozen region and a clone's snapshot keep using it to produce pages the
 * region never faulted in. It is released when the last of them goes.
 *
 * Unaudited pagers (no FAULTD_PAGER_CONCURRENT) are called with the context
 * lock held for reading - the fault path retries to get it, like
 * vmf_can_call_fault() - and serialized by the context's pager lock, which
 * nests inside it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct pager_ref *pager_ref_new(const struct faultd_pager *p)
{
	struct pager_ref *ref = fd_malloc(sizeof(*ref));

	if (!ref)
		return NULL;
	ref->p = *p;
	atomic_init(&ref->refs, 1);
	return ref;
}

struct pager_ref *pager_get(struct pager_ref *ref)
{
	if (ref)
		atomic_fetch_add(&ref->refs, 1);
	return ref;
}

void pager_put(struct pager_ref *ref)
{
	if (!ref || atomic_fetch_sub(&ref->refs, 1) != 1)
		return;
	if (ref->p.release)
		ref->p.release(ref->p.arg);
	free(ref);
}

/* The pager goes back to its owner: dropping @ref will not release it. */
void pager_disown(struct pager_ref *ref)
{
	ref->p.release = NULL;
}

bool pager_concurrent(const struct pager_ref *ref)
{
	return ref->p.flags &
	       (FAULTD_PAGER_CONCURRENT | FAULTD_PAGER_SIGNAL_SAFE);
}

/*
 * pager_call_fill() - [off, off + len) of @r from the pager, into @buf.
 * Returns the bytes produced, or -errno (also for a pager that claims more
 * than it was asked for).
 * Context: a handler thread; the context lock held for reading unless the
 * pager is concurrent.
 */
ssize_t pager_call_fill(struct faultd_region *r, struct pager_ref *ref,
			uint64_t off, void *buf, size_t len)
{
	bool serial = !pager_concurrent(ref);
	ssize_t n;

	if (serial)
		pthread_mutex_lock(&r->ctx->pager_lock);
	n = ref->p.fill(ref->p.arg, r, off, buf, len);
	if (serial)
		pthread_mutex_unlock(&r->ctx->pager_lock);
	if (n > (ssize_t)len)
		n = -ERANGE;
	return n;
}

/*
 * pager_call_writeback() - [off, off + len) of @r from @src to the pager,
 * counted (len <= WRITEBACK_MAX). On failure the range is reported dirty
 * again. Returns 0 or -errno.
 * Context: the context lock held for reading unless the pager is
 * concurrent.
 */
int pager_call_writeback(struct faultd_region *r, uint64_t off, size_t len,
			 const void *src)
{
	struct pager_ref *p = r->cache ? r->cache->pager : r->pager;
	bool serial = !pager_concurrent(p);
	uint64_t n;
	int ret;

	if (serial) /* the caller holds the context lock (read) */
		pthread_mutex_lock(&r->ctx->pager_lock);
	ret = p->p.writeback(p->p.arg, r, off, src, len);
	if (serial)
		pthread_mutex_unlock(&r->ctx->pager_lock);

	if (!ret) {
		stat_add_shared(r->bg_stats, ST_WRITEBACKS, len / r->page_size);
		stat_add_shared(r->bg_stats, ST_BYTES_WRITTEN, len);
		return 0;
	}
	/* A failing device fails every retry: log the 1st, 2nd, 4th... */
	n = __atomic_add_fetch(&r->bg_stats->c[ST_PAGER_ERRORS], 1,
			       __ATOMIC_RELAXED);
	if (!(n & (n - 1)))
		fd_err(r->ctx,
		       "%s: write-back of %zu bytes at offset %#llx: %s "
		       "(%llu failures; the pages stay dirty)",
		       r->name, len, (unsigned long long)off, strerror(-ret),
		       (unsigned long long)n);
	dirty_rearm(r, off, len);
	return ret;
}
