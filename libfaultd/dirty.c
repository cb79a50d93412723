// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * dirty.c - write-protection and dirty tracking.
 *
 * Synchronous mode (FAULTD_REGION_WP): pages are installed write-protected
 * when they are filled; the first write to each faults to a handler, which
 * calls the region's write hook with the page's old content, sets the
 * page's bit in the dirty bitmap and removes the protection (fault.c).
 * Collection write-protects the range again and takes the bitmap.
 *
 * Asynchronous mode (FAULTD_REGION_WP_ASYNC): the same protection, but the
 * kernel resolves write faults itself (UFFD_FEATURE_WP_ASYNC) and only
 * records that the page was written; collection is one PAGEMAP_SCAN that
 * reports the written pages and protects them again. Writers never stop.
 *
 * The collection guarantee (both modes): a write that completed before
 * faultd_region_dirty() was called is reported by that call or an earlier
 * one; a write that starts after the call returned is reported by a later
 * call; a write concurrent with the call is reported by it or the next. No
 * write goes unreported. In sync mode this rests on dirty_lock: a handler
 * sets the bit and removes the protection under it for reading, and a
 * collection protects and takes the bitmap under it for writing, so no
 * page can be unprotected with its bit already taken.
 *
 * Discarded pages are forgotten exactly (dirty_discard()): their content
 * is dropped and their writes cleared under dirty_lock for writing, so no
 * write fault marks a page (sync) and no collection reports one (async)
 * in between. In async mode the kernel reports a PTE left empty as
 * written - without its write-protect marker it cannot tell what the page
 * held - so the discard protects exactly the empty PTEs of the range
 * again; a page filled and written since the drop is present and keeps
 * its write.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static bool range_ok(const struct faultd_region *r, uint64_t off, size_t len)
{
	size_t cur = atomic_load(&r->len);

	return len && !(off & (r->page_size - 1)) &&
	       !(len & (r->page_size - 1)) && off < cur && len <= cur - off;
}

/* Set the dirty bits of [off, off + len). Context: dirty_lock (read). */
void dirty_mark(struct faultd_region *r, uint64_t off, size_t len)
{
	for (uint64_t pg = off / r->page_size; pg < (off + len) / r->page_size;
	     pg++)
		bitmap_test_and_set(r->dirty, pg, memory_order_relaxed);
}

/*
 * dirty_write_begin() - [off, off + len) is about to become writable
 * (installed writable, or unprotected): mark it dirty (sync mode) and
 * hold dirty_lock for reading until dirty_write_end(), so that no
 * collection sits between the mark and the install (see above).
 * Context: the region's lock held.
 */
void dirty_write_begin(struct faultd_region *r, uint64_t off, size_t len)
{
	pthread_rwlock_rdlock(&r->dirty_lock);
	if (r->wp_mode == WP_SYNC)
		dirty_mark(r, off, len);
}

void dirty_write_end(struct faultd_region *r)
{
	pthread_rwlock_unlock(&r->dirty_lock);
}

/*
 * dirty_take_pages() - take (test and clear) the dirty bits of the @n
 * pages at region offsets @offs into @was (sync mode). Under dirty_lock
 * for writing, which waits for a handler between dirty_write_begin() and
 * dirty_write_end(). Context: the pages are held and unmapped (evict.c),
 * so that no write can mark them again.
 */
void dirty_take_pages(struct faultd_region *r, const uint64_t *offs,
		      size_t n, bool *was)
{
	pthread_rwlock_wrlock(&r->dirty_lock);
	for (size_t i = 0; i < n; i++) {
		was[i] = bitmap_test_and_clear(r->dirty, offs[i] / r->page_size,
					       memory_order_seq_cst);
	}
	pthread_rwlock_unlock(&r->dirty_lock);
}

/*
 * bitmap_grow() - make the page bitmap *@map, of *@words words, hold
 * @bits bits, keeping the bits set and clearing the new ones. Returns 0,
 * or -ENOMEM with the old bitmap kept. Context: no other user of it.
 */
int bitmap_grow(_Atomic uint64_t **map, size_t *words, size_t bits)
{
	size_t want = bitmap_words(bits);
	_Atomic uint64_t *p;

	if (want <= *words)
		return 0;
	p = fd_realloc((void *)*map, want * sizeof(*p));
	if (!p)
		return -ENOMEM;
	memset((void *)(p + *words), 0, (want - *words) * sizeof(*p));
	*map = p;
	*words = want;
	return 0;
}

/*
 * dirty_alloc() - the bitmap for @len bytes of pages (sync mode), keeping
 * the bits already set. Context: the region not visible yet, or its lock
 * held for writing.
 */
int dirty_alloc(struct faultd_region *r, size_t len)
{
	return bitmap_grow(&r->dirty, &r->dirty_words, len / r->page_size);
}

/* Take (read and clear) the bits of pages [first, first + n) into @out. */
static ssize_t bitmap_take(struct faultd_region *r, size_t first, size_t n,
			   uint64_t *out)
{
	ssize_t count = 0;

	memset(out, 0, bitmap_words(n) * sizeof(*out));
	for (size_t i = 0; i < n;) {
		size_t pg = first + i, bit = pg % 64;
		size_t take = 64 - bit < n - i ? 64 - bit : n - i;
		uint64_t mask = (take == 64 ? ~0ull : ((1ull << take) - 1)) << bit;
		uint64_t got = atomic_fetch_and(&r->dirty[bit_word(pg)], ~mask) & mask;

		for (; got; got &= got - 1) {
			size_t at = i + (size_t)__builtin_ctzll(got) - bit;

			out[bit_word(at)] |= bit_mask(at);
			count++;
		}
		i += take;
	}
	return count;
}

static ssize_t collect_sync(struct faultd_region *r, uint64_t off,
			    size_t len, uint64_t *bitmap)
{
	ssize_t n;
	int ret;

	pthread_rwlock_wrlock(&r->dirty_lock);
	ret = uffd_writeprotect(r->group->uffd, r->base + off, len, true);
	n = ret < 0 ? ret
		    : bitmap_take(r, off / r->page_size, len / r->page_size,
				  bitmap);
	pthread_rwlock_unlock(&r->dirty_lock);
	return n;
}

/* Report written pages and protect them again. Under dirty_lock (read):
 * a discard is not half done (see above). */
static ssize_t collect_async(struct faultd_region *r, uint64_t off,
			     size_t len, uint64_t *bitmap)
{
	ssize_t n;

	pthread_rwlock_rdlock(&r->dirty_lock);
	n = pagemap_scan_protect(r, off, len, PAGE_IS_WRITTEN, 0, bitmap);
	pthread_rwlock_unlock(&r->dirty_lock);
	return n;
}

/*
 * protect_emptied() - protect the empty PTEs of [off, off + len) again
 * (async mode): "written" but neither present nor swapped. A present page
 * is left as it is, written or not.
 */
static int protect_emptied(struct faultd_region *r, uint64_t off, size_t len)
{
	ssize_t n = pagemap_scan_protect(
		r, off, len, PAGE_IS_WRITTEN | PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
		PAGE_IS_PRESENT | PAGE_IS_SWAPPED, NULL);

	if (n < 0)
		fd_err(r->ctx, "%s: cannot protect discarded pages: %s",
		       r->name, strerror((int)-n));
	return n < 0 ? (int)n : 0;
}

/*
 * dirty_collect() - take the dirty set of [off, off + len) into @bitmap
 * and re-arm tracking (see the guarantee above).
 * Returns the number of dirty pages or -errno.
 * Context: the region's lock held; a checked range of a tracked region.
 */
ssize_t dirty_collect(struct faultd_region *r, uint64_t off, size_t len,
		      uint64_t *bitmap)
{
	if (r->wp_mode == WP_SYNC)
		return collect_sync(r, off, len, bitmap);
	return collect_async(r, off, len, bitmap);
}

/*
 * dirty_rearm() - [off, off + len) was collected but its content did not
 * reach its destination (a write-back failed): report it dirty again.
 * Context: as dirty_collect().
 */
int dirty_rearm(struct faultd_region *r, uint64_t off, size_t len)
{
	int ret;

	pthread_rwlock_rdlock(&r->dirty_lock);
	if (r->wp_mode == WP_SYNC) {
		dirty_mark(r, off, len);
		ret = 0;
	} else { /* async: an unprotected page is a written page */
		ret = uffd_writeprotect(r->group->uffd, r->base + off, len,
					false);
	}
	pthread_rwlock_unlock(&r->dirty_lock);
	return ret;
}

/* Forget the writes to [off, off + len). Context: dirty_lock (write). */
static int forget_locked(struct faultd_region *r, uint64_t off, size_t len)
{
	size_t first = off / r->page_size, n = len / r->page_size;

	if (r->wp_mode == WP_ASYNC)
		return protect_emptied(r, off, len);
	if (r->wp_mode != WP_SYNC || first >= r->dirty_words * 64)
		return 0;
	if (n > r->dirty_words * 64 - first)
		n = r->dirty_words * 64 - first;
	for (size_t pg = first; pg < first + n; pg++)
		bitmap_test_and_clear(r->dirty, pg, memory_order_relaxed);
	return 0;
}

/*
 * dirty_clear() - forget the writes to [off, off + len): its content was
 * dropped, and no write can land on it until the caller lets it go (its
 * pages taken, or the range cut off). Returns 0 or -errno (async mode: the
 * pages could not be protected again, and are reported dirty).
 * Context: the region's lock held.
 */
int dirty_clear(struct faultd_region *r, uint64_t off, size_t len)
{
	int ret;

	if (r->wp_mode == WP_NONE)
		return 0;
	pthread_rwlock_wrlock(&r->dirty_lock);
	ret = forget_locked(r, off, len);
	pthread_rwlock_unlock(&r->dirty_lock);
	return ret;
}

/*
 * dirty_discard() - mem_discard() [off, off + len) and forget its writes,
 * with no write marked and no collection in between (see above).
 * Context: the region's lock held for reading; a region without a budget.
 */
int dirty_discard(struct faultd_region *r, uint64_t off, size_t len)
{
	int ret;

	if (r->wp_mode == WP_NONE)
		return mem_discard(r, off, len);
	pthread_rwlock_wrlock(&r->dirty_lock);
	ret = mem_discard(r, off, len);
	if (!ret)
		ret = forget_locked(r, off, len);
	pthread_rwlock_unlock(&r->dirty_lock);
	return ret;
}

FAULTD_EXPORT ssize_t faultd_region_dirty(struct faultd_region *r,
					  uint64_t off, size_t len,
					  uint64_t *bitmap)
{
	ssize_t n;

	if (!r || !bitmap)
		return -EINVAL;
	if (r->wp_mode == WP_NONE)
		return -EOPNOTSUPP;
	if (in_handler_of(r->ctx))
		return -EDEADLK;
	pthread_rwlock_rdlock(&r->lock);
	n = range_ok(r, off, len) ? dirty_collect(r, off, len, bitmap)
				  : -EINVAL;
	pthread_rwlock_unlock(&r->lock);
	return n;
}

/*
 * Unprotected pages are reported dirty by the next collection in both
 * modes: async, because the kernel's written bit is the absence of the
 * protection; sync, because unprotect marks them.
 */
static int set_protection(struct faultd_region *r, uint64_t off, size_t len,
			  bool wp)
{
	int ret = -EINVAL;

	if (!r)
		return -EINVAL;
	if (r->wp_mode == WP_NONE)
		return -EOPNOTSUPP;
	if (in_handler_of(r->ctx))
		return -EDEADLK;
	/* A parent's protection is what saves its pages for its clones. */
	if (!wp && r->snaps)
		return -EBUSY;
	pthread_rwlock_rdlock(&r->lock);
	if (range_ok(r, off, len)) {
		pthread_rwlock_rdlock(&r->dirty_lock);
		if (!wp && r->wp_mode == WP_SYNC)
			dirty_mark(r, off, len);
		ret = uffd_writeprotect(r->group->uffd, r->base + off, len, wp);
		pthread_rwlock_unlock(&r->dirty_lock);
	}
	pthread_rwlock_unlock(&r->lock);
	return ret;
}

FAULTD_EXPORT int faultd_region_protect(struct faultd_region *r, uint64_t off,
					size_t len)
{
	return set_protection(r, off, len, true);
}

FAULTD_EXPORT int faultd_region_unprotect(struct faultd_region *r,
					  uint64_t off, size_t len)
{
	return set_protection(r, off, len, false);
}
