// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * sync.c - faultd_region_sync(): the dirty pages of a range written back
 * to the region's pager, of any region whose pager writes back, with or
 * without a budget.
 *
 * The dirty set is collected (dirty.c) and re-armed first, then each run
 * of dirty pages is written back (pager_call_writeback()): a write after
 * the collection is reported by the next one, and a run whose write-back
 * fails is reported dirty again. With a budget (evict.c) the evictor is
 * held off for the whole call, and the pages of a run are held while it
 * is written from the page-cache alias.
 */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

/*
 * sync_run() - write back the dirty run [off, off + len) (len <=
 * WRITEBACK_MAX). With a budget, from the alias, holding the pages so
 * that none is evicted or re-read meanwhile; a page that turns out not to
 * be in the page cache was evicted, written back already.
 */
static int sync_run(struct faultd_region *r, uint64_t off, size_t len)
{
	size_t ps = r->page_size, n = len / ps;
	int32_t was[WRITEBACK_MAX / 4096];
	int ret = 0;

	if (!r->ev)
		return pager_call_writeback(r, off, len,
					    (const char *)r->base + off);
	evict_take_range(r, off, len, was);
	for (size_t i = 0, j; i < n; i = j) {
		for (j = i + 1; j < n && (was[j] == PAGE_READY) ==
						 (was[i] == PAGE_READY);
		     j++)
			;
		if (was[i] == PAGE_READY) {
			int err = pager_call_writeback(
				r, off + i * ps, (j - i) * ps,
				r->cache->alias + off + i * ps);

			ret = ret ? ret : err;
		}
	}
	for (size_t i = 0; i < n; i++)
		pcache_release(pcache_state(r->cache, off + i * ps), was[i]);
	return ret;
}

/* Write back each run of set bits of @bitmap (pages from @off). */
static int sync_bitmap(struct faultd_region *r, uint64_t off, size_t len,
		       const uint64_t *bitmap)
{
	size_t ps = r->page_size, n = len / ps, max = WRITEBACK_MAX / ps;
	int ret = 0;

	for (size_t i = 0, j; i < n; i = j) {
		if (!(bitmap[bit_word(i)] & bit_mask(i))) {
			j = i + 1;
			continue;
		}
		for (j = i + 1; j < n && j - i < max &&
				(bitmap[bit_word(j)] & bit_mask(j));
		     j++)
			;
		int err = sync_run(r, off + i * ps, (j - i) * ps);

		ret = ret ? ret : err;
	}
	return ret;
}

static int sync_check(struct faultd_region *r, uint64_t off, size_t len)
{
	struct pager_ref *p;
	size_t cur;

	if (!r || !len || (off | len) & (r->page_size - 1))
		return -EINVAL;
	cur = atomic_load(&r->len);
	if (off >= cur || len > cur - off)
		return -EINVAL;
	p = r->cache ? r->cache->pager : r->pager;
	if (r->wp_mode == WP_NONE || !p || !p->p.writeback || !r->ops->sync)
		return -EOPNOTSUPP; /* a clone's pages are not the file's */
	if (r->snaps) /* clones read unfilled pages from the file */
		return -EBUSY;
	return in_handler_of(r->ctx) ? -EDEADLK : 0;
}

FAULTD_EXPORT int faultd_region_sync(struct faultd_region *r, uint64_t off,
				     size_t len)
{
	struct pager_ref *p;
	uint64_t *bitmap;
	bool locked;
	ssize_t n;
	int ret = sync_check(r, off, len);

	if (ret < 0)
		return ret;
	bitmap = calloc(bitmap_words(len / r->page_size), sizeof(*bitmap));
	if (!bitmap)
		return -ENOMEM;
	p = r->cache ? r->cache->pager : r->pager;
	locked = !pager_concurrent(p);
	if (locked)
		map_read_lock(r->ctx);
	pthread_rwlock_rdlock(&r->lock);
	evict_lock(r);
	n = dirty_collect(r, off, len, bitmap);
	ret = n < 0 ? (int)n : n ? sync_bitmap(r, off, len, bitmap) : 0;
	evict_unlock(r);
	pthread_rwlock_unlock(&r->lock);
	if (locked)
		map_read_unlock(r->ctx);
	free(bitmap);
	return ret;
}
