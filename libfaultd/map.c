// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * map.c - the region map: which region holds an address.
 *
 * The map is an immutable sorted array of (base, region), published with a
 * release store (map_publish(), the kernel's rcu_assign_pointer()) - the
 * user-space counterpart of the maple tree walked under RCU. Lookups take
 * no lock: a handler thread inside an RCU read-side section binary-searches
 * the array it dereferenced. Updates run under the context lock held for
 * writing: copy the array with the change, publish it, and free the old
 * one after a grace period, outside the lock.
 *
 * The old array is freed after synchronize_rcu() rather than call_rcu():
 * liburcu requires call_rcu() callers to be registered reader threads, and
 * map updates come from application threads. The grace period is paid by
 * the updater, never by a fault.
 *
 * The flavor is liburcu-bp, not memb: a library cannot make the
 * application call RCU's fork hooks, and with memb a child that forked
 * without exec crashed in its first synchronize_rcu() walking the
 * registrations of its parent's threads. bp's hooks, installed with
 * pthread_atfork() when the first context is made (map_init()), drop
 * those registrations in the child.
 */
#define _LGPL_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <urcu/urcu-bp.h>

#include "internal.h"

static struct region_map *map_alloc(size_t nr)
{
	struct region_map *m;

	m = fd_malloc(sizeof(*m) + nr * sizeof(m->e[0]));
	if (m)
		m->nr = nr;
	return m;
}

#ifdef FAULTD_TSAN
char map_tsan_gp; /* see map_rcu_read_unlock() */
#endif

/*
 * Publish @n: a release store, as the kernel's rcu_assign_pointer() is.
 * liburcu 0.13's is a fence and a volatile store, the same on x86 but not
 * an ordering ThreadSanitizer can see.
 */
static void map_publish(struct faultd_ctx *ctx, struct region_map *n)
{
	__atomic_store_n(&ctx->map, n, __ATOMIC_RELEASE);
}

static void map_atfork(void)
{
	pthread_atfork(urcu_bp_before_fork, urcu_bp_after_fork_parent,
		       urcu_bp_after_fork_child);
}

int map_init(struct faultd_ctx *ctx)
{
	static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

	pthread_once(&atfork_once, map_atfork);
	ctx->map = map_alloc(0);
	return ctx->map ? 0 : -ENOMEM;
}

void map_destroy(struct faultd_ctx *ctx)
{
	free(ctx->map);
	ctx->map = NULL;
}

/* Index of the first entry whose base is above @addr. */
static size_t map_upper_bound(const struct region_map *m, uintptr_t addr)
{
	size_t lo = 0, hi = CMM_LOAD_SHARED(m->nr);

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (CMM_LOAD_SHARED(m->e[mid].base) <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * map_lookup() - the region that contains @addr, or NULL.
 * Context: inside rcu_read_lock(), or with ctx->map_lock held. The region
 * may be concurrently resized or destroyed unless the caller also holds its
 * lock or the context lock: a fast-path caller must try-lock the region and
 * check it again, as lock_vma_under_rcu() does.
 */
struct faultd_region *map_lookup(struct faultd_ctx *ctx, uintptr_t addr)
{
	struct region_map *m = rcu_dereference(ctx->map);
	size_t i = map_upper_bound(m, addr);
	struct faultd_region *r;

	if (i == 0)
		return NULL;
	r = CMM_LOAD_SHARED(m->e[i - 1].region);
	return region_contains(r, addr) ? r : NULL;
}

static bool overlaps(const struct faultd_region *a, uintptr_t base,
		     size_t len)
{
	size_t alen = atomic_load_explicit(&a->len, memory_order_relaxed);

	return base < a->base + alen && a->base < base + len;
}

/*
 * map_insert_locked() - publish a map that also holds @r.
 * Returns 0 and the map to free in *old, or -EEXIST (overlap), -ENOMEM.
 * Context: ctx->map_lock held for writing.
 */
int map_insert_locked(struct faultd_ctx *ctx, struct faultd_region *r,
		      struct region_map **old)
{
	struct region_map *m = ctx->map, *n;
	size_t len = atomic_load_explicit(&r->len, memory_order_relaxed);
	size_t i = map_upper_bound(m, r->base);

	assert_map_write_held(ctx);
	if ((i > 0 && overlaps(m->e[i - 1].region, r->base, len)) ||
	    (i < m->nr && overlaps(m->e[i].region, r->base, len)))
		return -EEXIST;
	n = map_alloc(m->nr + 1);
	if (!n)
		return -ENOMEM;
	memcpy(n->e, m->e, i * sizeof(m->e[0]));
	n->e[i] = (struct map_entry){ .base = r->base, .region = r };
	memcpy(n->e + i + 1, m->e + i, (m->nr - i) * sizeof(m->e[0]));
	map_publish(ctx, n);
	*old = m;
	return 0;
}

/*
 * Remove entry @i from the published array itself, for when a copy cannot
 * be allocated. A reader racing with the shift may see a torn entry or miss
 * a region; both are safe: the lookup checks that the region it found
 * contains the address, and a miss sends the fault to the slow path, which
 * waits for this writer.
 */
static void map_remove_in_place(struct region_map *m, size_t i)
{
	for (; i + 1 < m->nr; i++) {
		CMM_STORE_SHARED(m->e[i].region, m->e[i + 1].region);
		CMM_STORE_SHARED(m->e[i].base, m->e[i + 1].base);
	}
	CMM_STORE_SHARED(m->nr, m->nr - 1);
}

/*
 * map_remove_locked() - publish a map without @r. Never fails, so that
 * destroy cannot: without memory for a copy, the entry is removed in place.
 * Returns the map to free (NULL after an in-place removal).
 * Context: ctx->map_lock held for writing; @r is in the map.
 */
struct region_map *map_remove_locked(struct faultd_ctx *ctx,
				     struct faultd_region *r)
{
	struct region_map *m = ctx->map, *n;
	size_t i = map_upper_bound(m, r->base) - 1;

	assert_map_write_held(ctx);
	fd_assert_internal(m->e[i].region == r);
	n = map_alloc(m->nr - 1);
	if (!n) {
		map_remove_in_place(m, i);
		return NULL;
	}
	memcpy(n->e, m->e, i * sizeof(m->e[0]));
	memcpy(n->e + i, m->e + i + 1, (m->nr - i - 1) * sizeof(m->e[0]));
	map_publish(ctx, n);
	return m;
}

/*
 * map_free_after_gp() - wait for a grace period, then free @old (may be
 * NULL). On return no RCU reader can still reach a region that was removed
 * from the map before the call.
 * Context: not inside an RCU read-side section, not under map_lock.
 */
void map_free_after_gp(struct region_map *old)
{
	urcu_bp_synchronize_rcu();
#ifdef FAULTD_TSAN
	__tsan_acquire(&map_tsan_gp);
#endif
	free(old);
}
