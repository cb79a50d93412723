/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * internal.h - the library's own structures and cross-file prototypes,
 * grouped under the file that defines them.
 *
 * Lock order, the whole of it (outer to inner; docs/HACKING.md says what
 * each protects and who takes it):
 *   heap->lock (a heap's break; growth takes nothing else)
 *   ctx->map_lock (the context lock, like mmap_lock)
 *     region->lock (the per-region lock, like the per-VMA lock; not taken
 *         by the slow fault path, which map_lock covers)
 *       ctx->pager_lock (unaudited pagers; only under map_lock)
 *       region->wp_claim[] (one write hook per write-protect fault)
 *       ev->lock (a budget's CLOCK and victims; evict.c)
 *         region->dirty_lock (the dirty bitmap against collections)
 *       clone snapshot stripe locks (clone.c)
 *       page-cache page states (PAGE_BUSY, a futex; pcache.c), fill claims
 *           (a bit per page; fill.c): nothing waits for one holding
 *           another, but sync and discard under ev->lock
 *       ra->lock, pool->lock (prefetch.c)
 *     slots_lock (sigbus.c; under map_lock held for writing)
 *     ctx->stats_lock (the lists of regions and groups, retired counters)
 *   Leaves, under anything: ctx->pf_lock, a port's read_lock (uloop.c),
 *   image->lock and the checker's lock, rs->lock (restore.c), a working
 *   set record's lock, ev->wait_lock.
 * Held across a pager call (fill, writeback) and a write hook: the region
 * lock (read), map_lock (read) for a pager without FAULTD_PAGER_CONCURRENT
 * and for hooks on the slow path, pager_lock, a wp_claim lock, ev->lock
 * (write-back), a page's BUSY state or fill claim. A pager or hook that
 * blocks holds up its region's writers (resize, destroy) - and, through
 * map_lock, every region's - so it must not block indefinitely.
 * RCU read-side sections (liburcu bp) nest inside nothing and contain no
 * blocking call; only handler threads are RCU readers.
 * With -Ddebug-checks=true the _locked functions assert what they need
 * (assert_map_write_held() and friends, below).
 */
#ifndef FAULTD_INTERNAL_H
#define FAULTD_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "bitmap.h"
#include "compat.h"
#include "faultd.h"
#include "img.h"
#include "inject.h"
#include "lib.h"
#include "stats.h"
#include "uffd.h"

#define FAULTD_EXPORT __attribute__((visibility("default")))

/* Assertions in tiers (as mimalloc): cheap ones always, internal ones with
 * -Ddebug-checks=true. */
#ifdef FAULTD_DEBUG_CHECKS
#include <assert.h>
#include <errno.h>
#define fd_assert_internal(x) assert(x)
#else
#define fd_assert_internal(x) ((void)0)
#endif

/* An option struct is usable when it covers the fields up to @field. */
#define OPTS_HAS(opts, type, field)                                          \
	((opts)->size >= offsetof(type, field) + sizeof(((type *)0)->field))

struct handler;
void ctx_retire_handler(struct faultd_ctx *ctx, const struct handler *h);
void ctx_retire_stats_locked(struct faultd_ctx *ctx,
			     const struct stat_block *s, unsigned int n);
void ctx_lock_stats(struct faultd_ctx *ctx, struct lock_stats *acc);

/* ------------------------------------------------------------------------
 * clear.c - range clears.
 */

void clear_setup(void);
void clear_per_4k(void *dst, size_t len); /* the bench's reference only */
void clear_with(int strategy, void *dst, size_t len);

/* ------------------------------------------------------------------------
 * ctx.c - contexts.
 */

struct region_map;

/*
 * Enough zeros for the largest page a region may have (1 GiB). Address
 * space only: it is never written, so reading it maps the zero page.
 */
#define ZERO_BUF_LEN (1ul << 30)

struct faultd_ctx {
	/*
	 * The context lock. Write: any change of the region map (create,
	 * destroy, resize) and of the group list. Read: the slow fault path;
	 * in FAULTD_LOCK_GLOBAL mode every resolution (lock_global()).
	 * Writer-preferring, so a waiting writer makes new fast-path
	 * try-locks of its region fail.
	 */
	pthread_rwlock_t map_lock;
	/* RCU-published; replaced under map_lock held for writing. */
	struct region_map *map;
	/* Serializes the callbacks of pagers without CONCURRENT. */
	pthread_mutex_t pager_lock;

	unsigned int lock_mode;
	unsigned int handler_threads;
	long page_size;

	faultd_log_fn log;
	void *log_arg;
	int log_level;

	/* Changed under map_lock (write) and stats_lock; read under either */
	struct faultd_region *regions; /* list of live regions */
	struct faultd_group *groups;   /* list of groups */

	/* Counters of destroyed regions and exited handler threads; also
	 * held (inside map_lock) to change the lists above. A leaf. */
	pthread_mutex_t stats_lock;
	struct stat_block retired;
	struct lock_stats locks_retired; /* of exited handler threads */

	/* The writers' lock times: changed under map_lock (write). */
	struct lock_stats wlocks;
	uint64_t write_since;	/* when map_lock was write-locked */

	/* ZERO_BUF_LEN bytes of zeros, never written: the source of
	 * zero-fill copies. */
	void *zero_page;
	int pagemap_fd;	/* /proc/self/pagemap, for PAGEMAP_SCAN */

	/* Prefetch workers, started by the first region that needs them. */
	pthread_mutex_t pf_lock;
	struct pf_pool *pf;
};

/* ------------------------------------------------------------------------
 * log.c - the log sink: lines to the context's callback.
 */

void fd_log(const struct faultd_ctx *ctx, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
#define fd_err(ctx, ...) fd_log(ctx, FAULTD_LOG_ERR, __VA_ARGS__)
#define fd_warn(ctx, ...) fd_log(ctx, FAULTD_LOG_WARNING, __VA_ARGS__)
#define fd_info(ctx, ...) fd_log(ctx, FAULTD_LOG_INFO, __VA_ARGS__)
#define fd_dbg(ctx, ...) fd_log(ctx, FAULTD_LOG_DEBUG, __VA_ARGS__)

/* ------------------------------------------------------------------------
 * opts.c - option structs of any size (copy_struct_from_user()).
 */

int opts_copy(void *dst, size_t dst_size, const void *src, size_t min);

/* ------------------------------------------------------------------------
 * lock.c - the context lock; writer-preferring rwlocks.
 */

int rwlock_init_writer_pref(pthread_rwlock_t *lock);
void map_read_lock(struct faultd_ctx *ctx);
bool map_read_trylock(struct faultd_ctx *ctx);
void map_read_unlock(struct faultd_ctx *ctx);
void map_write_lock(struct faultd_ctx *ctx);
void map_write_unlock(struct faultd_ctx *ctx);
bool map_lock_held(const struct faultd_ctx *ctx, bool write);

/*
 * FAULTD_LOCK_GLOBAL: every resolution of a fault, on every path - handler
 * threads, same-thread faults, prefetch and read-ahead, working-set replay,
 * clone reads - holds the context lock for reading, where the kernel
 * before per-VMA locks held mmap_lock. The "before" of the A/B.
 */
static inline bool lock_global(const struct faultd_ctx *ctx)
{
	return ctx->lock_mode == FAULTD_LOCK_GLOBAL;
}

/*
 * What a _locked function needs, checked with -Ddebug-checks=true: the
 * context lock (held for writing, or at all), or a mutex or rwlock held by
 * someone (a try-lock fails: pthreads cannot name the holder; the one
 * that needs it is the usual caller).
 */
#define assert_map_write_held(ctx) fd_assert_internal(map_lock_held(ctx, true))
#define assert_map_held(ctx) fd_assert_internal(map_lock_held(ctx, false))
#define assert_mutex_held(m)                                                 \
	fd_assert_internal(pthread_mutex_trylock(m) == EBUSY)
#define assert_rwlock_held(l)                                                \
	fd_assert_internal(pthread_rwlock_trywrlock(l) == EBUSY)

/* ------------------------------------------------------------------------
 * map.c - the region map: a sorted array of regions published with RCU.
 * Lookups take no lock; updates copy the array under map_lock (write),
 * publish it, and free the old one after a grace period.
 */

struct map_entry {
	uintptr_t base; /* inline, so the search does not chase pointers */
	struct faultd_region *region;
};

struct region_map {
	size_t nr;
	struct map_entry e[]; /* sorted by base, no overlaps */
};

struct faultd_region *map_lookup(struct faultd_ctx *ctx, uintptr_t addr);
int map_insert_locked(struct faultd_ctx *ctx, struct faultd_region *r,
		      struct region_map **old);
struct region_map *map_remove_locked(struct faultd_ctx *ctx,
				     struct faultd_region *r);
void map_free_after_gp(struct region_map *old);
int map_init(struct faultd_ctx *ctx);
void map_destroy(struct faultd_ctx *ctx);

/*
 * The end of a read-side section. liburcu-bp 0.13 is not instrumented and
 * ThreadSanitizer cannot see it wait for readers; under TSan each unlock
 * releases map_tsan_gp and each grace period acquires it when it ends, so
 * what a reader did happens before what follows the grace period, as RCU
 * guarantees (liburcu 0.15 annotates itself so). Else it is only the unlock.
 */
#if defined(__SANITIZE_THREAD__)
#define FAULTD_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FAULTD_TSAN 1
#endif
#endif
#ifdef FAULTD_TSAN
#include <sanitizer/tsan_interface.h>
extern char map_tsan_gp;
#define map_rcu_read_unlock()                                                  \
	do {                                                                   \
		__tsan_release(&map_tsan_gp);                                  \
		urcu_bp_read_unlock();                                         \
	} while (0)
#else
#define map_rcu_read_unlock() urcu_bp_read_unlock()
#endif

/* ------------------------------------------------------------------------
 * pager.c - pagers: shared references, the calls to fill() and writeback().
 */

struct pager_ref {
	struct faultd_pager p;
	atomic_int refs;
};

struct pager_ref *pager_ref_new(const struct faultd_pager *p);
struct pager_ref *pager_get(struct pager_ref *ref);
void pager_put(struct pager_ref *ref);
void pager_disown(struct pager_ref *ref);
bool pager_concurrent(const struct pager_ref *ref);
ssize_t pager_call_fill(struct faultd_region *r, struct pager_ref *ref,
			uint64_t off, void *buf, size_t len);
#define WRITEBACK_MAX (4ul << 20)	/* bytes per pager_call_writeback() */
int pager_call_writeback(struct faultd_region *r, uint64_t off, size_t len,
			 const void *src);

/* ------------------------------------------------------------------------
 * region.c - regions: reserve, register, destroy, resize; the region lock.
 */

enum wp_mode {
	WP_NONE,
	WP_SYNC,	/* write-protect faults reach a handler */
	WP_ASYNC,	/* the kernel resolves them; PAGEMAP_SCAN collects */
};

enum region_kind {
	REGION_ANON,		/* private anonymous, 4 KiB (THP optional) */
	REGION_MEMFD,		/* shmem behind a memfd, 4 KiB */
	REGION_HUGETLB,		/* private anonymous hugetlb: UFFDIO_COPY */
	REGION_MEMFD_HUGETLB,	/* hugetlb memfd: base + UFFDIO_CONTINUE */
	REGION_MEMFD_PRIVATE,	/* private view of a frozen base (clones) */
};

struct fault;

/*
 * struct region_ops - what a region does, by where its content comes
 * from, as vm_operations_struct is for a VMA; kinds.c has the table of
 * every kind and what each can do. A region's ops are set when it gets
 * its content (region.c, pcache.c, heap.c, clone.c) and read, never tested
 * against pointers, by the fault path and the operations below. A NULL
 * operation, or a false capability, is -EOPNOTSUPP.
 */
struct region_ops {
	const char *name;
	/* A missing or minor fault (not a write-protect fault: fault.c's
	 * own). Returns as fault.h says. */
	struct fault_ret (*fault)(struct fault *f);
	/* faultd_region_discard() of a checked range. Context: r->lock for
	 * reading. */
	int (*discard)(struct faultd_region *r, uint64_t off, size_t len);
	bool resize;	/* faultd_region_resize() */
	bool prefetch;	/* faultd_region_prefetch(), read-ahead */
	bool sync;	/* faultd_region_sync() (with a write-back pager) */
};

extern const struct region_ops missing_ops, heap_ops, pcache_ops,
	budget_ops, view_ops, cow_ops;

/* The state of one page of a page cache (see pcache.c). */
struct page_state {
	int32_t state;
};

#define PAGE_NONE 0	 /* not in the page cache (as far as we know) */
#define PAGE_BUSY 1	 /* a handler prepares it */
#define PAGE_READY 2	 /* its content is in the page cache */
#define PAGE_STALE 3	 /* in the page cache, but discarded: prepare again */
#define PAGE_WAITERS 0x100 /* with BUSY: someone waits for it */

struct page_cache {
	int memfd;
	char *alias;		/* the library's MAP_SHARED view of memfd */
	size_t alias_len;
	size_t page_size;
	struct page_state *states;
	size_t nr_states;
	struct pager_ref *pager;/* a reference; NULL: zeros */
	atomic_int refs;
};

struct faultd_region {
	struct faultd_ctx *ctx;
	struct faultd_group *group;
	uintptr_t base;
	_Atomic size_t len; /* changes under lock (write) + map_lock (write) */
	size_t max_len;	    /* reserved address space, >= len */

	/*
	 * The per-region lock. Read: a fault being resolved in the region
	 * (taken with a try-lock under RCU). Write: a change of the region
	 * (destroy, resize). Writer-preferring.
	 */
	pthread_rwlock_t lock;
	bool dead; /* set under lock (write); checked after a try-lock */

	enum region_kind kind;
	const struct region_ops *ops;	/* kinds.c */
	uint64_t flags;
	size_t page_size;
	int memfd;
	/* memfd-hugetlb and frozen memfd views: the page cache */
	struct page_cache *cache;
	struct pager_ref *pager; /* a reference; NULL: zero-fill */
	struct faultd_heap *heap; /* a heap's region: see heap.c */
	size_t fault_around;	  /* bytes; 0: off */
	unsigned int numa_policy; /* numa.c */
	unsigned int numa_node;
	uint64_t numa_nodes;

	/* Same-thread regions (sigbus.c) */
	int sig_slot;		  /* in the SIGBUS table; -1: none */
	struct sig_staging *sig_staging;
	/* Counted with atomics by threads other than the group's handlers:
	 * SIGBUS handlers, prefetch workers, the evictor, sync callers. */
	struct stat_block *bg_stats;

	/* Read-ahead and prefetch (prefetch.c) */
	size_t ra_max;		  /* bytes; 0: no read-ahead */
	struct readahead *ra;
	atomic_int pf_pending;	  /* prefetch requests queued or running */
	atomic_bool pf_dying;	  /* being destroyed: drop requests */
	atomic_bool pf_used;	  /* a request was ever queued (fill.c) */
	/* Pages being filled from the pager, a bit each (fill.c); NULL: the
	 * region takes no claims */
	_Atomic uint64_t *claims;
	_Atomic uint64_t *claim_waiters; /* a fault left the page to its claimer */

	/* Bounded memory (evict.c); NULL: no budget */
	struct evict *ev;

	/* A restored region (restore.c); NULL: not one */
	struct restore *rs;

	/* Write-protection and dirty tracking (dirty.c) */
	enum wp_mode wp_mode;
	faultd_write_hook write_hook;
	void *hook_arg;
	/* read: set+unprotect, async collect; write: sync collect, discard */
	pthread_rwlock_t dirty_lock;
	/* A WP fault with a hook claims its page: one of these by page
	 * number (fault.c, do_wp_fault()). */
#define WP_CLAIMS 8
	pthread_mutex_t wp_claim[WP_CLAIMS];
	_Atomic uint64_t *dirty;     /* sync mode: a bit per page */
	size_t dirty_words;
	bool wp_registered;	     /* UFFDIO_REGISTER_MODE_WP is on */

	/* Copy-on-write clones (clone.c) */
	struct snapshot *snaps;	     /* as a parent: one per live child */
	struct snapshot *cow;	     /* as a generic clone: its parent's */
	/* The child's private page state (anon_vma): the pages it has its
	 * own copy of. Allocated by the first COW fault, under map_lock. */
	_Atomic uint64_t *_Atomic cow_own;

	/* One per handler thread of the group, indexed by handler slot. */
	unsigned int nr_stats;
	struct stat_block *stats;

	struct faultd_region *next; /* ctx->regions, under map_lock */
	struct faultd_region **pprev; /* what points at it: O(1) unlink */
	char name[32];
};

static inline bool region_contains(const struct faultd_region *r,
				   uintptr_t addr)
{
	return addr - r->base <
	       atomic_load_explicit(&r->len, memory_order_relaxed);
}

bool region_read_trylock(struct faultd_region *r);
uint64_t region_write_lock_locked(struct faultd_region *r);
void region_write_unlock_locked(struct faultd_region *r, uint64_t since);

/* mem.c - the OS layer of regions (see there for the lock rules). */
int mem_reserve(void *addr, size_t len, size_t align, uintptr_t *base);
void mem_release(uintptr_t base, size_t len);
int mem_map(struct faultd_region *r);
int mem_expose(struct faultd_region *r);
void mem_unmap(struct faultd_region *r);
int mem_grow(struct faultd_region *r, size_t old_len, size_t len);
void mem_shrink(struct faultd_region *r, size_t old_len, size_t len);
int mem_discard(struct faultd_region *r, uint64_t off, size_t len);
int mem_freeze(struct faultd_region *r);
int mem_reregister(struct faultd_region *r);
void region_read_unlock(struct faultd_region *r);

/* ------------------------------------------------------------------------
 * pagemap.c - what the page tables say: /proc/self/pagemap, PAGEMAP_SCAN.
 */

/* Bits of a /proc/self/pagemap entry (Documentation/admin-guide/mm/
 * pagemap.rst; not in the uapi headers). */
#define PM_PRESENT (1ull << 63)
#define PM_SWAPPED (1ull << 62)
#define PM_FILE (1ull << 61)	/* a page-cache (or shared anonymous) page */
#define PM_UFFD_WP (1ull << 57)	/* the PTE is userfaultfd write-protected */

int mem_pagemap(struct faultd_ctx *ctx, uintptr_t addr, size_t n,
		uint64_t *pm);
int pagemap_present(struct faultd_ctx *ctx, uintptr_t addr);
int pagemap_has_private(const struct faultd_region *r);
ssize_t pagemap_scan_protect(struct faultd_region *r, uint64_t off,
			     size_t len, uint64_t mask, uint64_t inverted,
			     uint64_t *bitmap);

/* ------------------------------------------------------------------------
 * huge.c - huge-page regions: sizes, flags, reservation errors.
 */

long huge_page_size(size_t want);
int huge_mmap_flags(size_t ps);
unsigned int huge_memfd_flags(size_t ps);
void huge_log_enomem(const struct faultd_region *r, size_t len);

/* ------------------------------------------------------------------------
 * pcache.c - page caches shared by memfd-hugetlb and frozen regions.
 */

#define PCACHE_CLAIM_MAPPED 0  /* the page is ready: map it */
#define PCACHE_CLAIM_PREPARE 1 /* the caller prepares it, then releases */

int pcache_create(struct faultd_region *r);
struct page_cache *pcache_get(struct page_cache *b);
void pcache_put(struct page_cache *b);
int pcache_grow(struct page_cache *b, size_t len);
struct page_state *pcache_state(struct page_cache *b, uint64_t off);
int pcache_claim(struct page_state *s, bool minor, bool evictable,
	       bool *was_stale);
void pcache_release(struct page_state *s, int32_t state);
void pcache_mark_stale(struct page_cache *b, uint64_t off, size_t len);
void pcache_forget(struct page_cache *b, uint64_t off, size_t len);
bool pcache_trylock(struct page_state *s, int32_t from);

/* ------------------------------------------------------------------------
 * clone.c - copy-on-write clones.
 */

/* How a region is created inside the library (NULL: from the options). */
struct region_init {
	enum region_kind kind;
	struct page_cache *cache; /* a reference, taken over */
	int memfd;		   /* owned, taken over */
	struct pager_ref *pager;   /* a reference, taken over */
	bool wp_registered;
	bool deferred;		   /* its handlers start later (restore.c) */
};

int region_create(struct faultd_ctx *ctx, const struct faultd_region_opts *o,
		  const struct region_init *init, struct faultd_region **rp);
bool clone_prepared(struct faultd_region *child);
int clone_prepare_locked(struct faultd_region *child);
struct fault_ret clone_read(struct faultd_region *child, uint64_t off,
			    void *buf, size_t len, bool locked);
void clone_own(struct faultd_region *child, uint64_t off);
unsigned int clone_save_before_write(struct faultd_region *parent,
				     uint64_t off, const void *old, size_t len);
void clone_parent_destroy(struct faultd_region *parent);
void clone_child_destroy_locked(struct faultd_region *child);

/* ------------------------------------------------------------------------
 * dirty.c - write-protection and dirty tracking.
 */

void dirty_mark(struct faultd_region *r, uint64_t off, size_t len);
void dirty_write_begin(struct faultd_region *r, uint64_t off, size_t len);
void dirty_write_end(struct faultd_region *r);
void dirty_take_pages(struct faultd_region *r, const uint64_t *offs,
		      size_t n, bool *was);
int bitmap_grow(_Atomic uint64_t **map, size_t *words, size_t bits);
int dirty_alloc(struct faultd_region *r, size_t len);

int dirty_clear(struct faultd_region *r, uint64_t off, size_t len);
int dirty_discard(struct faultd_region *r, uint64_t off, size_t len);
ssize_t dirty_collect(struct faultd_region *r, uint64_t off, size_t len,
		      uint64_t *bitmap);
int dirty_rearm(struct faultd_region *r, uint64_t off, size_t len);

/* ------------------------------------------------------------------------
 * prefetch.c - prefetch workers (one pool per context) and read-ahead.
 */

struct pf_pool;

int prefetch_setup(struct faultd_region *r);
void prefetch_quiesce(struct faultd_region *r);
void prefetch_free(struct faultd_region *r);
void pf_pool_destroy(struct faultd_ctx *ctx);
void readahead_fault(struct faultd_region *r, struct stat_block *st,
		     uint64_t off, uint64_t end);

/* ------------------------------------------------------------------------
 * fill.c - claims on the pages filled from a pager with UFFDIO_COPY, by
 * faults and prefetch workers alike: no page is read twice.
 */

#define FILL_MAX_PAGES 512 /* pages of a span: a 2 MiB fault-around window */

/* Pages claimed together, and which of them were present when claimed. */
struct fill_span {
	uint64_t start, end;	/* region offsets */
	uint64_t first;		/* the page of present[]'s bit 0 */
	uint64_t present[FILL_MAX_PAGES / 64];
};

struct fill_result {
	size_t done;		/* bytes covered: installed or present */
	size_t installed;	/* bytes installed by this copy */
	bool watch_present;	/* the watched page was present */
};

int fill_setup(struct faultd_region *r);
void fill_free(struct faultd_region *r);
bool fill_claim(struct faultd_region *r, uint64_t off, uint64_t lo,
		uint64_t hi, struct fill_span *sp);
bool fill_missing(const struct faultd_region *r, const struct fill_span *sp,
		  uint64_t off);
size_t fill_run(const struct faultd_region *r, const struct fill_span *sp,
		uint64_t *at);
size_t fill_run_around(const struct faultd_region *r,
		       const struct fill_span *sp, uint64_t off,
		       uint64_t *start);
void fill_trim(struct faultd_region *r, struct fill_span *sp, uint64_t start,
	       size_t len);
void fill_release(struct faultd_region *r, const struct fill_span *sp,
		  bool wake);
void fill_release_parked(struct faultd_region *r, const struct fill_span *sp,
			 uint64_t off);
size_t fill_window(const struct faultd_region *r, uintptr_t page,
		   uintptr_t *start);
int fill_copy(struct faultd_region *r, uint64_t off, const void *src,
	      size_t len, unsigned int flags, uint64_t watch,
	      struct fill_result *res);

/* ------------------------------------------------------------------------
 * evict.c - bounded memory: the resident budget, CLOCK, eviction.
 */

int evict_setup(struct faultd_region *r, const struct faultd_region_opts *o);
int evict_start(struct faultd_region *r);
void evict_stop(struct faultd_region *r);
void evict_free(struct faultd_region *r);
int evict_grow(struct faultd_region *r, size_t len);
void evict_shrink(struct faultd_region *r, size_t old_len, size_t len);
void evict_mapped(struct faultd_region *r, uint64_t off, size_t len);
size_t evict_reserve(struct faultd_region *r, size_t want, bool over);
void evict_unreserve(struct faultd_region *r, size_t pages);
bool evict_make_room(struct faultd_region *r);
int evict_discard(struct faultd_region *r, uint64_t off, size_t len);
void evict_lock(struct faultd_region *r);
void evict_unlock(struct faultd_region *r);
void evict_take_range(struct faultd_region *r, uint64_t off, size_t len,
		      int32_t *was);

/* ------------------------------------------------------------------------
 * file.c - the file pager.
 */

bool pager_is_file(const struct faultd_pager *p);

/* ------------------------------------------------------------------------
 * restore.c - restored regions.
 */

void restore_stop(struct faultd_region *r);
void restore_free(struct faultd_region *r);
void restore_note_fault(struct faultd_region *r, uint64_t off);

/* ------------------------------------------------------------------------
 * restore_ws.c - the working sets of restored regions (wset.h).
 */

struct rwset;

int rws_create(struct faultd_region *r, struct image *img,
	       const struct faultd_restore_opts *o, struct rwset **wp);
void rws_daemon_fds(const struct rwset *w, int *record_fd, int *set_fd);
void rws_note_fault(struct rwset *w, uint64_t off);
void rws_save(struct rwset *w);
int rws_replay_start(struct rwset *w, bool then_prefetch, bool waited);
void rws_replay_wait(struct rwset *w);
bool rws_replay_done(const struct rwset *w);
void rws_progress(const struct rwset *w, struct faultd_restore_progress *p);
void rws_stop(struct rwset *w);
void rws_free(struct rwset *w);

/* ------------------------------------------------------------------------
 * heap.c - brk-like heaps: what the fault path asks of them.
 */

bool heap_fault_below_break(struct faultd_heap *h, uintptr_t addr);
bool heap_note_poison(struct faultd_heap *h, uintptr_t addr);
void heap_poisoned(struct faultd_heap *h, uintptr_t addr);
void heap_free(struct faultd_heap *h);

/* ------------------------------------------------------------------------
 * numa.c - NUMA placement of regions and handler threads.
 */

#include <sched.h>

int numa_check(unsigned int policy, unsigned int node, uint64_t nodes);
int numa_apply(struct faultd_region *r, void *addr, size_t len);
int numa_node_cpus(unsigned int node, cpu_set_t *set);

/* ------------------------------------------------------------------------
 * sigbus.c - same-thread resolution in the faulting thread's SIGBUS handler.
 */

int sigbus_add(struct faultd_region *r);
void sigbus_remove(struct faultd_region *r);
void sigbus_free(struct faultd_region *r);
void sigbus_discarded(struct faultd_region *r, uint64_t off, size_t len);

/* ------------------------------------------------------------------------
 * handler.c - handler groups and their threads: batched reads, events
 * before faults, parked faults, clean stop.
 */

/*
 * Every group's userfaultfd reports mremap (EVENT_REMAP): without it the
 * kernel drops the registration of a range that moves, and freezing a
 * memfd region for a clone moves a new view into place (clone.c).
 */
#define GROUP_FEATURES ((uint64_t)UFFD_FEATURE_EVENT_REMAP)

/* How a group's threads are made and placed. */
struct group_policy {
	unsigned int threads;
	unsigned int placement;	/* enum faultd_placement */
	unsigned int cpu;
	unsigned int busy_poll_us;
	int numa_node;		/* >= 0: run on that node's CPUs (ANY only) */
	size_t staging_len;
	uint64_t features;	/* UFFD_FEATURE_* for its userfaultfd */
	bool deferred;		/* threads start at group_start_deferred():
				   someone else reads the uffd until then */
};

struct handler;

struct faultd_group {
	struct faultd_ctx *ctx;
	int uffd;
	int stop_fd;		/* eventfd: wakes the threads to stop */
	atomic_bool stopping;
	uint64_t features;	/* UFFD_FEATURE_* enabled on uffd */
	bool implicit;		/* owned by one region */
	unsigned int nthreads;
	struct uport port;	/* how uffd is read (uloop.c) */
	size_t staging_len;	/* each handler's buffer: the largest page */
	struct group_policy pol;
	struct handler *handlers;
	unsigned int nregions;	/* under map_lock */
	struct faultd_group *next; /* ctx->groups, under map_lock */
	struct faultd_group **pprev; /* what points at it: O(1) unlink */
};

int group_create(struct faultd_ctx *ctx, const struct group_policy *pol,
		 bool implicit, struct faultd_group **gp);
void group_stop(struct faultd_group *g);
int group_start_deferred(struct faultd_group *g);
void group_free(struct faultd_group *g);
void group_link_locked(struct faultd_group *g);
void group_unlink_locked(struct faultd_group *g);
bool in_handler_of(const struct faultd_ctx *ctx);

/* ------------------------------------------------------------------------
 * fault.c - the fault path: one page-fault message, from the RCU lookup to
 * its resolution, in the manner of mm/memory.c.
 */

struct handler {
	struct faultd_group *group;
	pthread_t thread;
	unsigned int slot;	/* index into each region's stats */
	bool started;
	void *staging;		/* page-aligned buffer for pager fills */
	size_t staging_len;
	/* Faults of no region, events, and misses are counted here. */
	struct stat_block stats;
	/* The fault path's lock times, and which fault is timed next. */
	struct lock_stats locks;
	unsigned int lock_tick;
	_Atomic pid_t tid;	/* the thread's id, once it runs; for tools */
	struct ureader rd;	/* its parked faults and message buffer */
} __attribute__((aligned(CACHELINE)));

struct fault_ret fault_handle(struct handler *h, struct fault_req *req);

#endif /* FAULTD_INTERNAL_H */
