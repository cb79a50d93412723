// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * heap.c - brk-like heaps that grow in place.
 *
 * A heap reserves its maximum size once, as a region of its own, and moves
 * a break inside it. Growth is the expand-only path of the kernel's
 * do_brk_flags() with VMG_FLAG_JUST_EXPAND: it moves the break of this one
 * region and nothing else - no region-map update, no neighbour, no system
 * call. The region's handler serves the pages: zeros below the break, a
 * poison marker (SIGBUS) above it.
 *
 * Shrinking keeps the pages it frees until the tail of present memory above
 * the break passes the trim threshold, then gives it back (MADV_DONTNEED).
 * Kept pages hold old data, so growth clears what it re-exposes with
 * faultd_clear() - only up to the highest page ever faulted in, which is
 * all that can hold data. A poison marker stays until its page is zapped
 * (and the fallback for kernels without UFFDIO_POISON, PROT_NONE, until
 * it is undone), so growth also unpoisons what it re-exposes - only when
 * poisoning reached there, tracked by poison_hi; those are the only system
 * calls growth may make.
 *
 * Locking: heap->lock serializes sbrk/brk. The handler reads brk,
 * present_hi and poison_hi without it (atomics, see heap_fault()).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fault.h"

#define TRIM_DEFAULT (128ul << 10) /* glibc's M_TRIM_THRESHOLD default */

struct faultd_heap {
	struct faultd_region *region;
	uintptr_t base, limit;	 /* the reservation [base, limit) */
	size_t page;
	pthread_mutex_t lock;	 /* serializes sbrk/brk */
	_Atomic uintptr_t brk;	 /* the break; read by the handler */
	_Atomic uintptr_t present_hi; /* end of the highest page faulted in */
	_Atomic uintptr_t poison_hi;  /* end of the highest poisoned page */
	size_t trim_threshold;
	/* under lock */
	uint64_t growths, shrinks, trims, bytes_returned, bytes_cleared;
};

static uintptr_t page_up(const struct faultd_heap *h, uintptr_t a)
{
	return (a + h->page - 1) & ~(uintptr_t)(h->page - 1);
}

static void atomic_max(_Atomic uintptr_t *v, uintptr_t x)
{
	uintptr_t cur = atomic_load(v);

	while (cur < x && !atomic_compare_exchange_weak(v, &cur, x))
		;
}

/* ------------------------------------------------------------------------
 * The fault side (called from fault.c under the region's lock).
 */

/*
 * heap_fault_below_break() - is the page at @addr below the break (zeros),
 * or above it (poison)? A page below is recorded as present before it is
 * filled, so that a later growth knows to clear it.
 */
bool heap_fault_below_break(struct faultd_heap *h, uintptr_t addr)
{
	if (addr >= page_up(h, atomic_load(&h->brk)))
		return false;
	atomic_max(&h->present_hi, addr + h->page);
	return true;
}

/*
 * heap_note_poison() - the page at @addr is about to be poisoned. Recorded
 * first, and the break checked again after: a growth that raced past it
 * either sees poison_hi and zaps the marker, or is seen here.
 * Returns true when the page is still above the break.
 */
bool heap_note_poison(struct faultd_heap *h, uintptr_t addr)
{
	atomic_max(&h->poison_hi, addr + h->page);
	return addr >= page_up(h, atomic_load(&h->brk));
}

/*
 * Undo poisoning of [addr, addr + len): give back the access that the
 * fallback without UFFDIO_POISON took away (fault.c, poison_by_mprotect(),
 * kernels before 6.6; a no-op otherwise), then zap the pages and markers,
 * so that the next access faults to the handler again.
 */
static void heap_unpoison(uintptr_t addr, size_t len)
{
	mprotect((void *)addr, len, PROT_READ | PROT_WRITE);
	madvise((void *)addr, len, MADV_DONTNEED);
}

/* After poisoning: if the break moved over the page meanwhile, unpoison. */
void heap_poisoned(struct faultd_heap *h, uintptr_t addr)
{
	if (addr < page_up(h, atomic_load(&h->brk)))
		heap_unpoison(addr, h->page);
}

/* ------------------------------------------------------------------------
 * Moving the break (under heap->lock).
 */

/* Zap poison markers left in [from, to) by accesses above the break. */
static void heap_unpoison_locked(struct faultd_heap *h, uintptr_t from,
				 uintptr_t to)
{
	uintptr_t hi = atomic_load(&h->poison_hi);

	if (hi <= from)
		return;
	heap_unpoison(from, (hi < to ? hi : to) - from);
	if (hi <= to) /* all of them: forget, unless a new one came */
		atomic_compare_exchange_strong(&h->poison_hi, &hi, from);
}

/*
 * heap_expand_locked() - the expand-only path. The new break is published
 * first, so that a fault in the new range (including one the clear below
 * takes on a page that is not present) is served with zeros.
 */
static void heap_expand_locked(struct faultd_heap *h, uintptr_t old,
			       uintptr_t new)
{
	uintptr_t dirty = atomic_load(&h->present_hi);

	assert_mutex_held(&h->lock);
	atomic_store(&h->brk, new);
	if (old < dirty) {
		size_t n = (dirty < new ? dirty : new) - old;

		faultd_clear((void *)old, n);
		h->bytes_cleared += n;
	}
	heap_unpoison_locked(h, page_up(h, old), page_up(h, new));
	h->growths++;
}

/* Give back present memory above the break once it passes the threshold. */
static void heap_trim_locked(struct faultd_heap *h, uintptr_t keep)
{
	uintptr_t hi = atomic_load(&h->present_hi);

	if (hi <= keep || hi - keep <= h->trim_threshold)
		return;
	madvise((void *)keep, hi - keep, MADV_DONTNEED);
	atomic_compare_exchange_strong(&h->present_hi, &hi, keep);
	h->trims++;
	h->bytes_returned += hi - keep;
}

static void heap_shrink_locked(struct faultd_heap *h, uintptr_t new)
{
	atomic_store(&h->brk, new);
	heap_trim_locked(h, page_up(h, new));
	h->shrinks++;
}

static int heap_move_locked(struct faultd_heap *h, uintptr_t new)
{
	uintptr_t old = atomic_load(&h->brk);

	assert_mutex_held(&h->lock);
	if (new < h->base)
		return -EINVAL;
	if (new > h->limit)
		return -ENOMEM;
	if (new > old)
		heap_expand_locked(h, old, new);
	else if (new < old)
		heap_shrink_locked(h, new);
	return 0;
}

FAULTD_EXPORT int faultd_heap_sbrk(struct faultd_heap *h, intptr_t incr,
				   void **prev)
{
	uintptr_t old, new;
	int ret = 0;

	if (!h || !prev)
		return -EINVAL;
	pthread_mutex_lock(&h->lock);
	old = atomic_load(&h->brk);
	new = old + (uintptr_t)incr;
	if (incr > 0 && new < old)
		ret = -ENOMEM; /* wrapped past the end of the address space */
	else if (incr < 0 && new > old)
		ret = -EINVAL; /* wrapped below zero */
	else if (incr)
		ret = heap_move_locked(h, new);
	pthread_mutex_unlock(&h->lock);
	if (!ret)
		*prev = (void *)old;
	return ret;
}

FAULTD_EXPORT int faultd_heap_brk(struct faultd_heap *h, void *addr)
{
	int ret;

	if (!h)
		return -EINVAL;
	pthread_mutex_lock(&h->lock);
	ret = heap_move_locked(h, (uintptr_t)addr);
	pthread_mutex_unlock(&h->lock);
	return ret;
}

/* ------------------------------------------------------------------------
 * Lifecycle and counters.
 */

FAULTD_EXPORT int faultd_heap_create(struct faultd_ctx *ctx,
				     const struct faultd_heap_opts *opts,
				     struct faultd_heap **heapp)
{
	struct faultd_heap_opts o;
	struct faultd_region_opts ro = { .size = sizeof(ro) };
	struct faultd_heap *h;
	int ret;

	if (!ctx || !opts || !heapp)
		return -EINVAL;
	ret = opts_copy(&o, sizeof(o), opts,
			offsetof(struct faultd_heap_opts, max_size) +
				sizeof(o.max_size));
	if (ret < 0)
		return ret;
	h = fd_calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	ro.length = o.max_size;
	ro.name = o.name ? o.name : "heap";
	ret = faultd_region_create(ctx, &ro, &h->region);
	if (ret < 0) {
		free(h);
		return ret;
	}
	pthread_mutex_init(&h->lock, NULL);
	h->page = faultd_region_page_size(h->region);
	h->base = (uintptr_t)faultd_region_base(h->region);
	h->limit = h->base + o.max_size;
	atomic_init(&h->brk, h->base);
	atomic_init(&h->present_hi, h->base);
	atomic_init(&h->poison_hi, h->base);
	h->trim_threshold = o.trim_threshold ? o.trim_threshold : TRIM_DEFAULT;
	/* No access is possible before the heap is returned: no fault yet. */
	h->region->heap = h;
	h->region->ops = &heap_ops;
	*heapp = h;
	return 0;
}

/* heap_free() - the heap's region is freed: so is the heap it carries. */
void heap_free(struct faultd_heap *h)
{
	if (!h)
		return;
	pthread_mutex_destroy(&h->lock);
	free(h);
}

FAULTD_EXPORT void faultd_heap_destroy(struct faultd_heap *h)
{
	int ret;

	if (!h)
		return;
	/* The region owns the heap (heap_free()), also when the context
	 * is destroyed first. */
	ret = faultd_region_destroy(h->region);
	if (ret < 0)
		fd_err(h->region->ctx, "%s: heap not destroyed: %s",
		       h->region->name, strerror(-ret));
}

FAULTD_EXPORT void *faultd_heap_base(const struct faultd_heap *h)
{
	return h ? (void *)h->base : NULL;
}

FAULTD_EXPORT int faultd_heap_stats(const struct faultd_heap *ch,
				    struct faultd_heap_stats *s)
{
	struct faultd_heap *h = (struct faultd_heap *)ch;
	struct faultd_heap_stats full = { .size = sizeof(full) };
	struct faultd_stats rs = { .size = sizeof(rs) };
	size_t n;

	if (!h || !s || s->size < sizeof(s->size))
		return -EINVAL;
	faultd_region_stats(h->region, &rs);
	pthread_mutex_lock(&h->lock);
	full.growths = h->growths;
	full.shrinks = h->shrinks;
	full.trims = h->trims;
	full.bytes_returned = h->bytes_returned;
	full.bytes_cleared = h->bytes_cleared;
	pthread_mutex_unlock(&h->lock);
	full.faults = rs.faults;
	full.poisoned = rs.poisoned;
	n = s->size < sizeof(full) ? s->size : sizeof(full);
	memcpy(s, &full, n);
	s->size = n;
	return 0;
}

/* ------------------------------------------------------------------------
 * The heap's faults (heap_ops, kinds.c).
 */

/*
 * do_heap_fault() - a missing page of a heap: zeros below the break; above
 * it the access is the application's error and gets SIGBUS, never zeros.
 * That is the heap's contract, not a failure of the library: logged at
 * debug level only.
 */
struct fault_ret do_heap_fault(struct fault *f)
{
	struct faultd_heap *h = f->r->heap;
	struct fault_ret ret;

	while (!heap_fault_below_break(h, f->addr)) {
		if (!heap_note_poison(h, f->addr))
			continue; /* the break just moved over it: again */
		fault_commit(f, ST_NR);
		fd_dbg(f->r->ctx, "%s: access above the break at offset "
			"%#llx: SIGBUS", f->r->name,
		       (unsigned long long)f->off);
		ret = fault_poison_page(f);
		heap_poisoned(h, f->addr);
		return ret;
	}
	return do_zero_fault(f);
}
