// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * space.c - one userfaultfd of a session and the address space behind it.
 *
 * A space maps the client's addresses onto its source through a range
 * table (sorted, apart; it grows as events split it: nothing limits how
 * many ranges a space may have but memory) and tracks the pages it must
 * push: source offsets in its segments, a bit each in two bitmaps. "done"
 * means nothing is left to do for the page (installed, removed, or unmapped);
 * "zero" means the page reads zeros from now on (the client removed it with
 * MADV_DONTNEED or the balloon). Bits are kept by source offset, so a range
 * that moves (mremap) keeps its pages' state.
 *
 * A fault is resolved in three steps: under space->lock held for reading,
 * the address is translated and the window around it planned; the lock is
 * dropped and the source read (it may be slow: a file, a network); the
 * lock is taken again and, if no event changed the ranges meanwhile (the
 * generation), the window is installed through the library's install layer
 * - else the fault starts over. What it installs:
 *   - a tracked page that reads zeros: zeros (UFFDIO_ZEROPAGE);
 *   - a tracked page with data: the source's content of the window around
 *     it (the fault-around window, aligned in source offsets, clipped to
 *     the range and the segment), without the window's pages that are done
 *     already (the faulting page itself is always installed: if it faults
 *     although done, the client dropped it without telling);
 *   - an untracked page: zeros, over the source's zero extent around it.
 * Content the source cannot give is poisoned (SIGBUS on access), page by
 * page, never replaced by zeros.
 *
 * Events are applied by whichever handler read them, under space->lock for
 * writing: REMAP moves ranges, REMOVE marks pages zero, UNMAP drops ranges,
 * FORK makes a new space for the child with a copy of the ranges and of the
 * pending set as of the fork.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bitmap.h"
#include "engine_int.h"

#define AROUND_DEFAULT (64ul << 10)
#define ZERO_AROUND (2ul << 20) /* most zeros one fault resolves */
#define FAULT_TRIES 8		/* re-plans before a fault is parked */
#define PUSH_BUF (1ul << 20)	/* what a re-check reads at once */

/* ------------------------------------------------------------------------
 * Bits and segments.
 */

/*
 * A page's bits (bitmap.h): read with acquire, to see what the install
 * that set it wrote; set with seq_cst, as whoever sets "done" first
 * counts the page and the push and the faults race for it.
 */
static bool bit_test(_Atomic uint64_t *bm, uint64_t i)
{
	return bitmap_test_atomic(bm, i, memory_order_acquire);
}

/* Set bit @i; returns whether it was clear. */
static bool bit_set(_Atomic uint64_t *bm, uint64_t i)
{
	return !bitmap_test_and_set(bm, i, memory_order_seq_cst);
}

/*
 * The segment that tracks source offset @off, or NULL. The one this
 * thread found last is tried first: runs and windows are walked page by
 * page, and a search per page was 3.6 % of the daemon's CPU (perf,
 * faultd-bench run criu, the program reading in order). The hint is only
 * an index, checked against this space's segments before it is used: it
 * may be another space's.
 */
static const struct sseg *seg_find(const struct space *sp, uint64_t off)
{
	static __thread size_t hint;
	size_t lo = 0, hi = sp->nseg;

	if (hint < sp->nseg && off >= sp->seg[hint].off &&
	    off - sp->seg[hint].off < sp->seg[hint].len)
		return &sp->seg[hint];
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		const struct sseg *g = &sp->seg[mid];

		if (off < g->off)
			hi = mid;
		else if (off - g->off >= g->len)
			lo = mid + 1;
		else
			return &sp->seg[hint = mid];
	}
	return NULL;
}

/*
 * The first source offset at or after @off that a segment tracks, or
 * UINT64_MAX: what a walk of pending pages skips to over what no segment
 * tracks (a CRIU task's address space is mostly such gaps).
 */
static uint64_t seg_after(const struct space *sp, uint64_t off)
{
	size_t lo = 0, hi = sp->nseg;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		const struct sseg *g = &sp->seg[mid];

		if (g->off + g->len <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == sp->nseg)
		return UINT64_MAX;
	return sp->seg[lo].off > off ? sp->seg[lo].off : off;
}

/* Where the segments from @g that follow each other back to back end
 * (a CRIU task's are its image's entries: 1 MiB each here). */
static uint64_t seg_run_end(const struct space *sp, const struct sseg *g)
{
	const struct sseg *last = sp->seg + sp->nseg;

	while (g + 1 < last && g[1].off == g->off + g->len)
		g++;
	return g->off + g->len;
}

/* The bit of source offset @off, if a segment tracks it. */
static bool seg_bit(const struct space *sp, uint64_t off, uint64_t *bit)
{
	const struct sseg *g = seg_find(sp, off);

	if (g)
		*bit = g->bit + (off - g->off) / sp->page_size;
	return g;
}

/* Nothing is left to do for tracked page @bit. */
static void page_done(struct space *sp, uint64_t bit)
{
	uint64_t left;

	if (!bit_set(sp->done, bit))
		return;
	/* space_mark_gone() may have taken the space's count already (an
	 * install that woke its process, which exited at once): each unit
	 * leaves the session's count once, here or there. */
	left = atomic_load(&sp->pending);
	do {
		if (!left)
			return;
	} while (!atomic_compare_exchange_weak(&sp->pending, &left, left - 1));
	if (atomic_fetch_sub(&sp->s->pending, 1) == 1)
		session_note_all_in(sp->s);
}

/*
 * Claims. A fault's window and the push's piece are installed by
 * different threads, and both take the pages still pending: without a
 * word between them, a handler filling a window ahead of a reader in
 * order and a pusher filling the same pages collide, page by page, on
 * the page table lock, and the loser of each page has allocated and
 * copied it for nothing (UFFDIO_COPY checks the entry last). Measured
 * (faultd-bench run criu --size 256, the program reading in order):
 * 8,700-9,700 pages of 66,000 found in already, 3.6 % of the daemon's
 * CPU in the page table lock's slow path. So an installer claims a
 * tracked page (sp->busy) before it installs it and gives it back after
 * it is done or failed; a page claimed by another is left to it, as a
 * done one is - but a fault's own page, which is always installed (a
 * waiting thread must be woken by someone, and a push does not wake).
 */

/* Claim tracked page @bit; false: another install has it. */
static bool page_claim(struct space *sp, uint64_t bit)
{
	return !bitmap_test_and_set(sp->busy, bit, memory_order_seq_cst);
}

static void page_unclaim(struct space *sp, uint64_t bit)
{
	bitmap_test_and_clear(sp->busy, bit, memory_order_release);
}

/* Take tracked page @bit for an install: claimed, and not done since
 * (a claim given back comes after its page is done). Context: sp->lock. */
static bool page_take(struct space *sp, uint64_t bit)
{
	if (!page_claim(sp, bit))
		return false;
	if (bit_test(sp->done, bit)) {
		page_unclaim(sp, bit);
		return false;
	}
	return true;
}

/* Every page of source [off, off + len) that is tracked is done. */
static void pages_done(struct space *sp, uint64_t off, uint64_t len)
{
	for (uint64_t o = off; o < off + len; o += sp->page_size) {
		uint64_t bit;

		if (seg_bit(sp, o, &bit))
			page_done(sp, bit);
	}
}

/* ------------------------------------------------------------------------
 * The range table.
 */

/* The range that holds client address @addr. Context: sp->lock. */
static struct srange *range_find_locked(struct space *sp, uint64_t addr)
{
	size_t lo = 0, hi = sp->nr;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		struct srange *r = &sp->r[mid];

		if (addr < r->start)
			hi = mid;
		else if (addr - r->start >= r->len)
			lo = mid + 1;
		else
			return r;
	}
	return NULL;
}

/* Room for @more ranges. Context: sp->lock (write). */
static int range_reserve_locked(struct space *sp, size_t more)
{
	size_t cap = sp->cap ? sp->cap : 16;
	struct srange *r;

	while (cap < sp->nr + more)
		cap *= 2;
	if (cap == sp->cap)
		return 0;
	r = realloc(sp->r, cap * sizeof(*r));
	if (!r)
		return -ENOMEM;
	sp->r = r;
	sp->cap = cap;
	return 0;
}

/* Split the range that holds @at, if @at is inside it (not its start). */
static int split_at_locked(struct space *sp, uint64_t at)
{
	struct srange *r = range_find_locked(sp, at);
	size_t i;
	int ret;

	if (!r || r->start == at)
		return 0;
	i = (size_t)(r - sp->r);
	ret = range_reserve_locked(sp, 1);
	if (ret)
		return ret;
	r = &sp->r[i];
	memmove(r + 2, r + 1, (sp->nr - i - 1) * sizeof(*r));
	r[1] = (struct srange){ at, r->start + r->len - at,
				r->src_off + (at - r->start) };
	r->len = at - r->start;
	sp->nr++;
	return 0;
}

/* The first range whose start is >= @addr (an index, may be nr). */
static size_t range_index_locked(const struct space *sp, uint64_t addr)
{
	size_t lo = 0, hi = sp->nr;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (sp->r[mid].start < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * Split the table at @start and @end: the ranges in [start, end) are then
 * [*a, *b). Returns 0 or -ENOMEM.
 */
static int range_bounds_locked(struct space *sp, uint64_t start,
			       uint64_t end, size_t *a, size_t *b)
{
	int ret = split_at_locked(sp, start);

	if (!ret)
		ret = split_at_locked(sp, end);
	if (ret)
		return ret;
	*a = range_index_locked(sp, start);
	*b = range_index_locked(sp, end);
	return 0;
}

/*
 * Cut [start, end) out of the table into @out (may be NULL: dropped).
 * Returns how many ranges were cut, or -ENOMEM.
 */
static ssize_t range_cut_locked(struct space *sp, uint64_t start,
				uint64_t end, struct srange *out)
{
	size_t a, b;
	int ret = range_bounds_locked(sp, start, end, &a, &b);

	if (ret)
		return ret;
	if (out)
		memcpy(out, &sp->r[a], (b - a) * sizeof(*out));
	memmove(&sp->r[a], &sp->r[b], (sp->nr - b) * sizeof(sp->r[0]));
	sp->nr -= b - a;
	return (ssize_t)(b - a);
}

/* Put @n ranges (sorted, apart, in a free part of the table) back in. */
static void range_insert_locked(struct space *sp, const struct srange *in,
				size_t n)
{
	size_t a;

	if (!n)
		return;
	a = range_index_locked(sp, in[0].start);
	memmove(&sp->r[a + n], &sp->r[a], (sp->nr - a) * sizeof(sp->r[0]));
	memcpy(&sp->r[a], in, n * sizeof(*in));
	sp->nr += n;
}

/* ------------------------------------------------------------------------
 * Events.
 */

/*
 * A failure to apply an event loses the space's map of the client: end the
 * session loudly rather than serve wrong data (the faultd protocol's client
 * then serves itself; CRIU's restore fails).
 */
static void event_failed(struct space *sp, const char *what, int err)
{
	dlog(LOG_WARNING, "%s: space %llu: cannot apply %s: %s: ending the session",
	     sp->s->o.name, (unsigned long long)sp->id, what, strerror(-err));
	session_stop(sp->s);
}

/* The range table changed: journal it for a restart (persist.c). */
static void ranges_changed_locked(struct space *sp)
{
	int ret = state_journal(sp);

	if (ret)
		dlog(LOG_WARNING, "%s: space %llu: cannot journal its ranges: %s: a "
			"restart would serve the old ones", sp->s->o.name,
		     (unsigned long long)sp->id, strerror(-ret));
}

/* [start, end) of the client is gone (UNMAP, or the target of a move). */
static int pages_unmapped_locked(struct space *sp, uint64_t start,
				 uint64_t end)
{
	size_t a, b;
	int ret = range_bounds_locked(sp, start, end, &a, &b);

	if (ret)
		return ret;
	for (size_t i = a; i < b; i++)
		pages_done(sp, sp->r[i].src_off, sp->r[i].len);
	return (int)range_cut_locked(sp, start, end, NULL);
}

static void ev_unmap(struct space *sp, uint64_t start, uint64_t end)
{
	int ret;

	pthread_rwlock_wrlock(&sp->lock);
	ret = pages_unmapped_locked(sp, start, end);
	sp->gen++;
	ranges_changed_locked(sp);
	pthread_rwlock_unlock(&sp->lock);
	if (ret < 0)
		event_failed(sp, "UNMAP", ret);
}

/* The first range that ends after @addr (an index, may be nr). */
static size_t range_first_after_locked(const struct space *sp, uint64_t addr)
{
	size_t i = range_index_locked(sp, addr);

	if (i > 0 && addr - sp->r[i - 1].start < sp->r[i - 1].len)
		i--;
	return i;
}

/*
 * [start, end) reads zeros from now on; its pages need no push. A fault
 * planned before (its source read under way) plans again: the page it
 * faults on is installed whatever its bits say.
 */
static void ev_remove(struct space *sp, uint64_t start, uint64_t end)
{
	pthread_rwlock_wrlock(&sp->lock);
	sp->gen++;
	for (size_t i = range_first_after_locked(sp, start);
	     i < sp->nr && sp->r[i].start < end; i++) {
		const struct srange *r = &sp->r[i];
		uint64_t a = start > r->start ? start : r->start;
		uint64_t e = end < r->start + r->len ? end : r->start + r->len;

		for (a &= ~(uint64_t)(sp->page_size - 1); a < e;
		     a += sp->page_size) {
			uint64_t bit;

			if (seg_bit(sp, r->src_off + (a - r->start), &bit)) {
				bit_set(sp->zero, bit);
				page_done(sp, bit);
			}
		}
	}
	pthread_rwlock_unlock(&sp->lock);
}

/* [from, from + len) moved to @to. */
static void ev_remap(struct space *sp, uint64_t from, uint64_t to,
		     uint64_t len)
{
	struct srange *moved = NULL;
	ssize_t n = -ENOMEM;
	int ret = 0;

	pthread_rwlock_wrlock(&sp->lock);
	ret = range_reserve_locked(sp, 4);
	if (!ret)
		moved = malloc((sp->nr + 2) * sizeof(*moved));
	if (moved)
		n = range_cut_locked(sp, from, from + len, moved);
	if (n >= 0) /* what was at the target is gone (MREMAP_FIXED) */
		ret = pages_unmapped_locked(sp, to, to + len);
	if (n >= 0 && ret >= 0) { /* ret: how many ranges were there */
		for (ssize_t i = 0; i < n; i++)
			moved[i].start = to + (moved[i].start - from);
		range_insert_locked(sp, moved, (size_t)n);
	}
	sp->gen++;
	ranges_changed_locked(sp);
	pthread_rwlock_unlock(&sp->lock);
	free(moved);
	if (n < 0 || ret < 0)
		event_failed(sp, "REMAP", n < 0 ? (int)n : ret);
}

static void ev_fork(struct space *sp, int ufd)
{
	struct space *child;
	int ret;

	pthread_rwlock_rdlock(&sp->lock);
	ret = space_fork_locked(sp, ufd, &child);
	pthread_rwlock_unlock(&sp->lock);
	if (ret < 0) {
		close(ufd);
		event_failed(sp, "FORK", ret);
		return;
	}
	ret = session_adopt_space(sp->s, child);
	if (ret < 0) {
		space_free(child);
		event_failed(sp, "FORK", ret);
	}
}

static void space_event(struct ureader *rd, struct uport *p,
			const struct uffd_msg *m)
{
	struct space *sp = p->owner;

	switch (m->event) {
	case UFFD_EVENT_FORK:
		atomic_fetch_add(&sp->st.forks, 1);
		ev_fork(sp, (int)m->arg.fork.ufd);
		break;
	case UFFD_EVENT_REMAP:
		atomic_fetch_add(&sp->st.remaps, 1);
		ev_remap(sp, m->arg.remap.from, m->arg.remap.to,
			 m->arg.remap.len);
		break;
	case UFFD_EVENT_REMOVE:
		atomic_fetch_add(&sp->st.removes, 1);
		ev_remove(sp, m->arg.remove.start, m->arg.remove.end);
		break;
	case UFFD_EVENT_UNMAP:
		atomic_fetch_add(&sp->st.removes, 1);
		ev_unmap(sp, m->arg.remove.start, m->arg.remove.end);
		break;
	}
	dlog(LOG_DEBUG, "%s: space %llu: event %#x %#llx %#llx %#llx", sp->s->o.name,
	     (unsigned long long)sp->id, m->event,
	     (unsigned long long)m->arg.reserved.reserved1,
	     (unsigned long long)m->arg.reserved.reserved2,
	     (unsigned long long)m->arg.reserved.reserved3);
}

/* ------------------------------------------------------------------------
 * Installs against reads of events (session.h, space->ev_lock).
 */

/* An install of @sp may start: no read of its events is under way. */
static void install_begin(struct space *sp)
{
	pthread_rwlock_rdlock(&sp->ev_lock);
	pthread_rwlock_rdlock(&sp->lock);
}

static void install_end(struct space *sp)
{
	pthread_rwlock_unlock(&sp->lock);
	pthread_rwlock_unlock(&sp->ev_lock);
}

static void space_read_begin(struct uport *p)
{
	struct space *sp = p->owner;

	pthread_rwlock_wrlock(&sp->ev_lock);
}

static void space_read_end(struct uport *p)
{
	struct space *sp = p->owner;

	pthread_rwlock_unlock(&sp->ev_lock);
}

/* ------------------------------------------------------------------------
 * Faults.
 */

/* What a fault will install, planned under the lock. */
struct plan {
	uint64_t page;		/* the faulting page */
	uint64_t start, len;	/* the window, client addresses */
	uint64_t src;		/* the source offset of start */
	bool zero;		/* install zeros (no source read) */
	bool page_theirs;	/* the faulting page is claimed by another */
	uint64_t gen;		/* sp->gen when planned */
};

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/*
 * Where the extents of @e's kind that follow @e back to back end, looked
 * for up to @limit: a source may cut one kind of content in pieces (a
 * CRIU image in entries of its dump's pipes, 1 MiB here), and a window
 * that stopped at each would never grow past one.
 */
static uint64_t kind_end(struct space *sp, const struct src_extent *e,
			 uint64_t limit)
{
	uint64_t end = e->off + e->len;
	struct src_extent n;

	while (end < limit && !source_extent(sp->src, end, &n) &&
	       n.off == end && n.len && n.kind == e->kind)
		end = n.off + n.len;
	return end;
}

/*
 * Clip the window [*a, *b) of source offsets (around @soff) to what range
 * @r maps and to the run of one kind of content that holds @soff.
 */
static void window_clip(struct space *sp, const struct srange *r,
			uint64_t soff, uint64_t *a, uint64_t *b)
{
	struct src_extent e;

	*a = max_u64(*a, r->src_off);
	*b = min_u64(*b, r->src_off + r->len);
	if (!source_extent(sp->src, soff, &e)) {
		*a = max_u64(*a, e.off);
		*b = min_u64(*b, kind_end(sp, &e, *b));
	}
}

/* The source says [@soff..] is zeros (or nothing: also zeros). */
static bool src_zero(struct space *sp, uint64_t soff)
{
	struct src_extent e;

	return !source_extent(sp->src, soff, &e) && e.kind != SRC_DATA;
}

/*
 * The fault-around window of a fault at source offset @soff: sp->around,
 * doubled for each fault that lands near the end of the last fault's
 * window (a reader in order), up to AROUND_SEQ_MAX; a fault elsewhere
 * starts again from sp->around. A reader in order catches up with the
 * push at once (a page in costs it nothing) and then faults at every
 * piece the push has not reached: each fault costs it a wake-up, and
 * the pages its window takes are those the push would install next.
 * Measured (faultd-bench run criu, 256 MiB, the program reading in order
 * from the start): 1500 faults and all in at 1.27x criu lazy-pages' time
 * with 64 KiB windows; up to 1 MiB (windows were cut at each 1 MiB entry
 * of the image then, as kind_end() and seg_run_end() no longer do) 250
 * faults and 900 context switches of the daemon; up to 2 MiB 127-152
 * faults and 400-490 switches; up to 4 MiB 67-85 and 180-280, a fault's
 * p99 2-8 ms. All in against criu lazy-pages', three runs of each side
 * by side: 1 MiB 0.92x, 2 MiB 0.80x, 4 MiB 0.83x, within this machine's
 * noise of each other; 2 MiB is kept, which a handler's buffer holds
 * (4 MiB took a session past its memory bound, tests/daemon.c). A
 * recording space (sp->around is a page) keeps its page. Context:
 * sp->lock (read); the hints race, harmlessly.
 */
static uint64_t around_now(struct space *sp, uint64_t soff)
{
	uint64_t end = atomic_load_explicit(&sp->seq_end, memory_order_relaxed);
	uint64_t win = atomic_load_explicit(&sp->seq_win, memory_order_relaxed);
	uint64_t w = sp->around;

	if (w > sp->page_size && win >= w && soff + win >= end &&
	    soff < end + 2 * win)
		w = min_u64(win * 2, max_u64(AROUND_SEQ_MAX, w));
	return w;
}

/* Note the window @pl planned for the next fault's around_now(); a
 * space whose window is a page (a recording) has nothing to note. */
static void around_note(struct space *sp, const struct plan *pl, uint64_t w)
{
	if (sp->around <= sp->page_size)
		return;
	atomic_store_explicit(&sp->seq_end, pl->src + pl->len,
			      memory_order_relaxed);
	atomic_store_explicit(&sp->seq_win, w, memory_order_relaxed);
}

/*
 * plan_locked() - what the fault on @page installs. Returns false when no
 * range holds it (not ours: the caller wakes it, and the access fails or
 * is the kernel's to handle). Context: sp->lock (read).
 */
static bool plan_locked(struct space *sp, uint64_t page, struct plan *pl)
{
	struct srange *r = range_find_locked(sp, page);
	const struct sseg *g;
	uint64_t soff, bit, a, b, w;

	if (!r)
		return false;
	soff = r->src_off + (page - r->start);
	g = seg_find(sp, soff);
	pl->page = page;
	pl->page_theirs = false;
	pl->gen = sp->gen;
	pl->zero = src_zero(sp, soff);
	w = pl->zero ? ZERO_AROUND : around_now(sp, soff);
	if (g && seg_bit(sp, soff, &bit) && bit_test(sp->zero, bit)) {
		pl->zero = true; /* removed: zeros, this page only */
		a = soff;
		b = soff + sp->page_size;
	} else {
		/* Aligned to the base window: a wider one reaches ahead. */
		a = soff - soff % (pl->zero ? w : sp->around);
		b = a + w;
		window_clip(sp, r, soff, &a, &b);
		if (g && !pl->zero) {
			a = max_u64(a, g->off);
			b = min_u64(b, seg_run_end(sp, g));
		} else if (!g && !pl->zero) { /* data nobody tracks */
			a = soff;
			b = soff + sp->page_size;
		}
	}
	pl->src = a;
	pl->start = r->start + (a - r->src_off);
	pl->len = b - a;
	if (!pl->zero)
		around_note(sp, pl, w);
	return true;
}

/*
 * space_read() - the source's content of [off, off + len) into @buf:
 * data read, zero and unknown extents cleared; @flags as the source's
 * read() (SRC_READ_URGENT: a fault waits). Returns 0 or the source's
 * -errno. Context: no lock (the source may take its time).
 */
int space_read(struct space *sp, uint64_t off, size_t len, char *buf,
	       unsigned int flags)
{
	size_t done = 0;

	while (done < len) {
		uint64_t o = off + done;
		struct src_extent e = { o, len - done, SRC_ZERO };
		size_t n;

		if (source_extent(sp->src, o, &e) < 0)
			e = (struct src_extent){ o, len - done, SRC_ZERO };
		n = (size_t)min_u64(e.off + e.len - o, len - done);
		if (e.kind == SRC_DATA) {
			ssize_t ret = source_read_flags(sp->src, o, buf + done, n,
							flags);

			if (ret < 0)
				return (int)ret;
		} else {
			memset(buf + done, 0, n);
		}
		done += n;
	}
	return 0;
}

/*
 * Is page @addr of the window one to install? A tracked one is then
 * claimed (given back by install_done()). The faulting page always is,
 * claimed by another or not. Context: sp->lock.
 */
static bool page_wanted(struct space *sp, struct plan *pl, uint64_t addr)
{
	uint64_t bit;

	if (!seg_bit(sp, pl->src + (addr - pl->start), &bit))
		return pl->zero || addr == pl->page;
	if (addr == pl->page) {
		pl->page_theirs = !page_claim(sp, bit);
		return true;
	}
	if (bit_test(sp->zero, bit))
		return false;
	return pl->zero ? page_claim(sp, bit) : page_take(sp, bit);
}

/* The process is gone: nothing of the space is pending any more. */
void space_mark_gone(struct space *sp)
{
	uint64_t left;

	if (atomic_exchange(&sp->dead, true))
		return;
	left = atomic_exchange(&sp->pending, 0);
	if (left && atomic_fetch_sub(&sp->s->pending, left) == left)
		session_note_all_in(sp->s);
	session_wake(sp->s);
}

/*
 * The install of [a, a + len) ended: count it, mark the tracked pages it
 * put in done, and give back the claims of all its pages but @keep (a
 * page not claimed by this install; UINT64_MAX: none), each after its
 * page is done. Returns 0 when it reached its end or its range is gone,
 * else the -errno it stopped at (the push's answer; a fault's is
 * install_fault_ret()). Context: sp->lock.
 */
static int install_done(struct space *sp, const struct plan *pl, uint64_t a,
			uint64_t len, const struct inst_res *res,
			bool background, uint64_t keep)
{
	uint64_t in = res->done + res->present + res->gone;

	/* Before the peer has registered everything, a page in no mapping
	 * may be one still to come: leave the pages pending. */
	if (res->gone && !atomic_load(&sp->s->settled))
		in = 0;

	/* Counted before they are done: the last page done makes the front
	 * end report (DONE), with every page in its counts. */
	if (res->done)
		atomic_fetch_add(pl->zero ? &sp->st.zero
				 : background ? &sp->st.background
					      : &sp->st.urgent,
				 res->done / sp->page_size);
	if (res->present)
		atomic_fetch_add(&sp->st.eexist, res->present / sp->page_size);
	for (uint64_t o = 0; o < len; o += sp->page_size) {
		uint64_t bit;

		if (!seg_bit(sp, pl->src + (a + o - pl->start), &bit))
			continue;
		if (o < in)
			page_done(sp, bit);
		if (a + o != keep)
			page_unclaim(sp, bit);
	}
	if (res->end == UFFD_GONE && res->err == -ESRCH)
		space_mark_gone(sp);
	/* Gone: the range or the process; nothing is left to do there. */
	return res->end == UFFD_DONE || res->end == UFFD_GONE ? 0 : res->err;
}

static void install_req(struct space *sp, struct inst_req *q, uint64_t dst,
			size_t len, const void *src, bool zero,
			unsigned int flags)
{
	*q = (struct inst_req){
		.uffd = sp->uffd,
		.op = zero ? INST_ZERO : INST_COPY,
		.flags = flags | (zero && sp->huge ? INST_ZERO_COPY : 0),
		.dst = dst,
		.len = len,
		.page_size = sp->page_size,
		.src = zero ? NULL : src,
	};
}

static struct fault_ret install_runs_locked(struct space *sp,
					    struct plan *pl, const char *buf);

/*
 * install_window_locked() - install the planned window from @buf (NULL:
 * zeros), in runs of wanted pages. Returns as install_fault_ret():
 * FR_DONE, FR_PARK (an event is pending) or FR_ERROR (a failed install).
 * Context: sp->lock (read), the plan still current.
 */
static struct fault_ret install_window_locked(struct space *sp,
					      struct plan *pl,
					      const char *buf,
					      unsigned int slot)
{
	struct fault_ret ret;

	state_inflight(sp, slot, pl->src, pl->len);
	ret = install_runs_locked(sp, pl, buf);
	state_inflight(sp, slot, 0, 0);
	return ret;
}

/*
 * The runs of wanted pages of the window. Each run's waiters are woken
 * once its pages are counted and its claims given back: the thread woken
 * may take this CPU at once (a reader in order, the moment it is woken),
 * and measured, faultd-bench run criu: the last window's count then came
 * 5.8 ms late, the push threads spinning meanwhile on its claimed pages
 * and all in waiting for it. Context: as the caller's.
 */
static struct fault_ret install_runs_locked(struct space *sp,
					    struct plan *pl, const char *buf)
{
	uint64_t end = pl->start + pl->len, a = pl->start;
	size_t ps = sp->page_size;

	while (a < end) {
		struct inst_req q;
		struct inst_res res;
		struct fault_ret ret;
		uint64_t b;

		if (!page_wanted(sp, pl, a)) {
			a += ps;
			continue;
		}
		for (b = a + ps; b < end && page_wanted(sp, pl, b); b += ps)
			;
		install_req(sp, &q, a, b - a, buf ? buf + (a - pl->start) : 0,
			    pl->zero, INST_DONTWAKE);
		install_range(&q, &res);
		install_done(sp, pl, a, b - a, &res, false,
			     pl->page_theirs ? pl->page : UINT64_MAX);
		install_wake(&q, &res);
		ret = install_fault_ret(&res);
		if (!fr_is(ret, FR_DONE))
			return ret;
		a = b;
	}
	return fr(FR_DONE);
}

/* Poison the faulting page: the source cannot give its content. */
static void poison_page_locked(struct space *sp, const struct plan *pl,
			       int err)
{
	struct inst_req q = {
		.uffd = sp->uffd, .op = INST_POISON, .dst = pl->page,
		.len = sp->page_size, .page_size = sp->page_size,
	};
	struct inst_res res;
	uint64_t bit;

	dlog(LOG_WARNING, "%s: space %llu: page %#llx (source offset %#llx): %s: "
		"poisoned", sp->s->o.name, (unsigned long long)sp->id,
	     (unsigned long long)pl->page,
	     (unsigned long long)(pl->src + (pl->page - pl->start)),
	     strerror(-err));
	/* Counted before the ioctl that wakes the thread, whose SIGBUS may
	 * end its process - and the session's report - at once; taken back
	 * if the poison did not go in. */
	atomic_fetch_add(&sp->st.poisoned, 1);
	install_range(&q, &res);
	if (!res.done)
		atomic_fetch_sub(&sp->st.poisoned, 1);
	if (res.end != UFFD_AGAIN &&
	    seg_bit(sp, pl->src + (pl->page - pl->start), &bit))
		page_done(sp, bit);
}

/*
 * Read the planned window; a window that fails is read again as the
 * faulting page alone, so that one bad block poisons only what is asked.
 * Returns 0, or the -errno of the faulting page's content.
 */
static int fill_plan(struct space *sp, struct plan *pl, char *buf)
{
	int ret = space_read(sp, pl->src, pl->len, buf, SRC_READ_URGENT);

	if (!ret || pl->len == sp->page_size)
		return ret;
	pl->src += pl->page - pl->start;
	pl->start = pl->page;
	pl->len = sp->page_size;
	return space_read(sp, pl->src, pl->len, buf, SRC_READ_URGENT);
}

/*
 * The planned window's content: the source's own mapping where it has
 * one (and @no_view is false), else read into @buf. *data points at it.
 * Returns 0 or the read's -errno.
 */
static int fault_content(struct space *sp, struct plan *pl, char *buf,
			 bool no_view, const char **data)
{
	*data = no_view ? NULL : source_view(sp->src, pl->src, pl->len);
	if (*data)
		return 0;
	*data = buf;
	return fill_plan(sp, pl, buf);
}

/*
 * settle_locked() - the one place where a fault that failed becomes a
 * poisoned page, as the library's fault_settle(). FR_ERROR on the @last
 * try is poisoned: its thread gets SIGBUS rather than sleep for ever (a
 * failed ioctl wakes no one); before it, the fault is planned again (an
 * install that failed for want of memory may go in). Anything else
 * passes. Context: sp->lock (read), the plan still current.
 */
static struct fault_ret settle_locked(struct space *sp, const struct plan *pl,
				      struct fault_ret ret, bool last)
{
	if (!fr_is(ret, FR_ERROR))
		return ret;
	if (last) {
		poison_page_locked(sp, pl, ret.err);
		return fr(FR_DONE);
	}
	dlog(LOG_INFO, "%s: space %llu: fault at %#llx: %s: again",
	     sp->s->o.name, (unsigned long long)sp->id,
	     (unsigned long long)pl->page, strerror(-ret.err));
	return fr(FR_REPLAN);
}

/*
 * One try of the fault on @page: FR_DONE, FR_PARK (an event is pending)
 * or FR_REPLAN (the ranges changed while the source was read, or the
 * install failed and may go in on another try). Content the source
 * cannot give is poisoned at once: no try gives it. @no_view: read the
 * content even where the source has a mapping (set when an install from
 * it failed with EFAULT: the file shrank underneath, and the read then
 * fails and poisons).
 */
static struct fault_ret fault_once(struct space *sp, uint64_t page,
				   char *buf, unsigned int slot,
				   bool *no_view, bool last)
{
	const char *data = NULL;
	struct fault_ret ret;
	struct plan pl;
	int err = 0;

	pthread_rwlock_rdlock(&sp->lock);
	if (!plan_locked(sp, page, &pl)) {
		pthread_rwlock_unlock(&sp->lock);
		uffd_wake(sp->uffd, page, sp->page_size);
		return fr(FR_DONE);
	}
	pthread_rwlock_unlock(&sp->lock);
	/* The push goes on after what this fault installs: where the next
	 * faults are likely to be if the client reads in order. */
	session_push_from(sp->s, sp, pl.start + pl.len);
	if (!pl.zero)
		err = fault_content(sp, &pl, buf, *no_view, &data);
	install_begin(sp);
	if (pl.gen != sp->gen) {
		ret = fr(FR_REPLAN);
	} else if (err) {
		ret = settle_locked(sp, &pl, fr_error(err), true);
	} else {
		ret = install_window_locked(sp, &pl, data, slot);
		if (fr_is(ret, FR_ERROR) && ret.err == -EFAULT && data &&
		    data != buf) {
			*no_view = true;
			ret = fr(FR_REPLAN);
		}
		ret = settle_locked(sp, &pl, ret, last);
	}
	install_end(sp);
	return ret;
}

/*
 * Recording: note @page if it is a tracked page still pending that never
 * faulted before (pushed pages do not fault; a page that faults again
 * after a REMOVE reads zeros and is not pending).
 */
static void record_touch(struct space *sp, uint64_t page)
{
	const struct srange *r;
	uint64_t soff = 0, bit;
	bool first = false;

	pthread_rwlock_rdlock(&sp->lock);
	r = range_find_locked(sp, page);
	if (r) {
		soff = r->src_off + (page - r->start);
		first = seg_bit(sp, soff, &bit) && !bit_test(sp->done, bit) &&
			bit_set(sp->seen, bit);
	}
	pthread_rwlock_unlock(&sp->lock);
	if (first && atomic_load(&sp->s->rec_open))
		wset_rec_add(sp->s->rec, sp->rec_space, soff / sp->page_size);
}

static void fault_latency(struct space *sp, const struct fault_req *req)
{
	uint64_t now = now_ns();

	stat_latency_shared(&sp->lat, now - req->t_read);
	atomic_store(&sp->s->last_fault_ns, now);
}

static struct fault_ret space_fault(struct ureader *rd, struct uport *p,
				    struct fault_req *req)
{
	struct space *sp = p->owner;
	struct worker *w = rd->owner;
	uint64_t page = req->addr & ~(uint64_t)(sp->page_size - 1);
	struct fault_ret ret = fr(FR_REPLAN);
	bool no_view = false;

	if (!req->counted) {
		req->counted = true;
		atomic_fetch_add(&sp->st.faults, 1);
		session_note_fault(sp->s);
		if (sp->seen)
			record_touch(sp, page);
	}
	for (int i = 0; i < FAULT_TRIES && fr_is(ret, FR_REPLAN); i++)
		ret = fault_once(sp, page, w->buf, w->slot, &no_view,
				 i == FAULT_TRIES - 1);
	if (fr_is(ret, FR_DONE)) {
		fault_latency(sp, req);
		return fr(FR_DONE);
	}
	atomic_fetch_add(&sp->st.eagain, 1);
	return fr(FR_PARK);
}

const struct uport_ops space_port_ops = {
	.event = space_event,
	.fault = space_fault,
	.read_begin = space_read_begin,
	.read_end = space_read_end,
};

/* ------------------------------------------------------------------------
 * The push's view: runs of pending pages.
 */

/*
 * Is page @a of range @r pending? Sets *bit. Context: sp->lock.
 */
static bool page_pending(struct space *sp, const struct srange *r,
			 uint64_t a, uint64_t *bit)
{
	return seg_bit(sp, r->src_off + (a - r->start), bit) &&
	       !bit_test(sp->done, *bit);
}

/* The kind of the source at @soff, and where that run of it ends. */
static enum src_kind src_kind_at(struct space *sp, uint64_t soff,
				 uint64_t *end)
{
	struct src_extent e;

	if (source_extent(sp->src, soff, &e) < 0) {
		*end = UINT64_MAX;
		return SRC_ZERO;
	}
	*end = e.off + e.len;
	return e.kind == SRC_DATA ? SRC_DATA : SRC_ZERO;
}

/* Extend the run that starts at @a in @r: pending, one kind, <= @max. */
static void run_extend(struct space *sp, const struct srange *r, uint64_t a,
		       size_t max, struct space_run *run)
{
	uint64_t end, soff = r->src_off + (a - r->start), b, bit;

	run->kind = src_kind_at(sp, soff, &end);
	end = min_u64(end - soff, max) + a;
	end = min_u64(end, r->start + r->len);
	for (b = a + sp->page_size; b < end && page_pending(sp, r, b, &bit);
	     b += sp->page_size)
		;
	run->start = a;
	run->len = b - a;
	run->src_off = soff;
}

/*
 * space_next_pending() - the first run of pending pages of @sp at or after
 * client address @from: tracked, not done, of one kind of source extent,
 * at most @max bytes, in one range. Returns false when there is none
 * after @from. *gen is for space_install_run().
 * Context: a push thread; takes sp->lock for reading.
 */
bool space_next_pending(struct space *sp, uint64_t from,
			struct space_run *run, size_t max, uint64_t *gen)
{
	bool found = false;
	uint64_t bit;

	pthread_rwlock_rdlock(&sp->lock);
	*gen = sp->gen;
	for (size_t i = range_first_after_locked(sp, from);
	     i < sp->nr && !found; i++) {
		const struct srange *r = &sp->r[i];
		uint64_t a = max_u64(from, r->start);

		a = (a + sp->page_size - 1) & ~(uint64_t)(sp->page_size - 1);
		for (; a < r->start + r->len; a += sp->page_size) {
			uint64_t soff = r->src_off + (a - r->start), next;

			if (!seg_bit(sp, soff, &bit)) {
				/* Untracked: on to the next segment. */
				next = seg_after(sp, soff);
				if (next == UINT64_MAX ||
				    next - r->src_off >= r->len)
					break;
				a = r->start + (next - r->src_off) -
				    sp->page_size;
				continue;
			}
			if (!page_pending(sp, r, a, &bit)) {
				/* A whole word of done pages: skip it. */
				if (bit % 64 == 0 &&
				    atomic_load(&sp->done[bit_word(bit)]) == ~0ull &&
				    a + 64 * sp->page_size <=
					    r->start + r->len &&
				    seg_find(sp, r->src_off + (a - r->start)) ==
					    seg_find(sp, r->src_off +
								 (a - r->start) +
								 63 * sp->page_size))
					a += 63 * sp->page_size;
				continue;
			}
			run_extend(sp, r, a, max, run);
			found = true;
			break;
		}
	}
	pthread_rwlock_unlock(&sp->lock);
	return found;
}

/* Does the push take page @a of its run: tracked, pending and not
 * claimed by another (claimed now; *theirs set if it was)? Context:
 * sp->lock. */
static bool run_page_takes(struct space *sp, const struct plan *pl,
			   uint64_t a, bool *theirs)
{
	uint64_t bit;

	if (!seg_bit(sp, pl->src + (a - pl->start), &bit) ||
	    bit_test(sp->done, bit))
		return false;
	if (page_take(sp, bit))
		return true;
	*theirs |= !bit_test(sp->done, bit); /* another's, under way */
	return false;
}

/*
 * space_install_run() - install @run from @buf (its content, or NULL for a
 * zero run), its pages that are still pending, without waking anyone.
 * Returns the pages installed, -ESTALE (an event changed the ranges since
 * the run was found: find it again), -EAGAIN (an event is pending),
 * -EBUSY (nothing installed: every pending page is another's install,
 * under way) or the -errno of a failed install. Context: a push thread.
 */
ssize_t space_install_run(struct space *sp, const struct space_run *run,
			  const void *buf, uint64_t gen, bool background,
			  unsigned int slot)
{
	struct plan pl = {
		.page = UINT64_MAX, .start = run->start, .len = run->len,
		.src = run->src_off, .zero = run->kind != SRC_DATA,
	};
	uint64_t end = run->start + run->len, a = run->start;
	size_t ps = sp->page_size;
	ssize_t pages = 0;
	bool theirs = false;
	int ret = 0;

	install_begin(sp);
	if (gen != sp->gen || atomic_load(&sp->dead))
		ret = -ESTALE;
	else
		state_inflight(sp, slot, run->src_off, run->len);
	while (!ret && a < end) {
		struct inst_req q;
		struct inst_res res;
		uint64_t b;

		if (!run_page_takes(sp, &pl, a, &theirs)) {
			a += ps;
			continue;
		}
		for (b = a + ps; b < end && run_page_takes(sp, &pl, b, &theirs);
		     b += ps)
			;
		install_req(sp, &q, a, b - a,
			    buf ? (const char *)buf + (a - pl.start) : NULL,
			    pl.zero, INST_DONTWAKE);
		install_range(&q, &res);
		pages += (ssize_t)(res.done / ps);
		ret = install_done(sp, &pl, a, b - a, &res, background,
				   UINT64_MAX);
		a = b;
	}
	if (ret != -ESTALE)
		state_inflight(sp, slot, 0, 0);
	install_end(sp);
	if (!ret && !pages && theirs)
		ret = -EBUSY;
	return ret ? ret : pages;
}

/*
 * space_poison_run() - the source cannot give the content of @run: its
 * pages that are still pending are poisoned (every access gets SIGBUS).
 */
void space_poison_run(struct space *sp, const struct space_run *run,
		      uint64_t gen, int err)
{
	install_begin(sp);
	for (uint64_t a = run->start;
	     gen == sp->gen && a < run->start + run->len; a += sp->page_size) {
		struct plan pl = { .page = a, .start = a, .len = sp->page_size,
				   .src = run->src_off + (a - run->start) };
		uint64_t bit;

		if (seg_bit(sp, pl.src, &bit) && !bit_test(sp->done, bit))
			poison_page_locked(sp, &pl, err);
	}
	install_end(sp);
}

/* A part of a replayed span that one range maps, and that range. */
struct piece {
	uint64_t start, len, src_off;
	struct srange r;
};

#define PIECES 16	/* ranges one span is installed into at once */

/*
 * The pieces of client memory that map source [off, off + len), at most
 * @max, after the first @skip. Context: sp->lock (read).
 */
static size_t pieces_locked(struct space *sp, uint64_t off, uint64_t len,
			    struct piece *out, size_t max, size_t skip)
{
	size_t n = 0;

	for (size_t i = 0; i < sp->nr && n < max; i++) {
		const struct srange *r = &sp->r[i];
		uint64_t a = max_u64(off, r->src_off);
		uint64_t e = min_u64(off + len, r->src_off + r->len);

		if (a >= e)
			continue;
		if (skip) {
			skip--;
			continue;
		}
		out[n++] = (struct piece){ r->start + (a - r->src_off), e - a,
					   a, *r };
	}
	return n;
}

/*
 * The run of piece @pc from source offset @a: up to the end of the extent
 * that holds @a. Data is the piece's own; where the source has zeros, the
 * run is the zero window a fault there installs (plan_locked(): aligned
 * ZERO_AROUND, clipped to the extent and the range), so that a page a
 * recorded fault zeroed around its own is in again, not faulted on.
 * Returns the end of the part of the piece it covers.
 */
static uint64_t replay_run_of(struct space *sp, const struct piece *pc,
			      uint64_t a, struct space_run *run)
{
	uint64_t end = pc->src_off + pc->len, w, b, ze;
	struct src_extent e;

	if (source_extent(sp->src, a, &e))
		e = (struct src_extent){ a, end - a, SRC_ZERO };
	b = min_u64(e.off + e.len, end);
	*run = (struct space_run){ 0, b - a, a, e.kind };
	if (e.kind != SRC_DATA) {
		w = max_u64(ZERO_AROUND, sp->page_size);
		run->src_off = max_u64(max_u64(a - a % w, e.off), pc->r.src_off);
		ze = min_u64(e.off + e.len, pc->r.src_off + pc->r.len);
		run->len = min_u64((b + w - 1) / w * w, ze) - run->src_off;
	}
	run->start = pc->r.start + (run->src_off - pc->r.src_off);
	return b;
}

/* Install piece @pc from @buf (the piece's content); the pages put in. */
static uint64_t replay_piece(struct space *sp, const struct piece *pc,
			     const char *buf, uint64_t gen, unsigned int slot)
{
	uint64_t pages = 0;

	for (uint64_t a = pc->src_off, b; a < pc->src_off + pc->len; a = b) {
		struct space_run run;
		ssize_t got;

		b = replay_run_of(sp, pc, a, &run);
		got = space_install_run(sp, &run, run.kind == SRC_DATA ?
					buf + (a - pc->src_off) : NULL,
					gen, true, slot);
		if (got > 0)
			pages += (uint64_t)got;
		uffd_wake(sp->uffd, run.start, run.len);
	}
	return pages;
}

/*
 * space_replay() - install source [off, off + len) of @sp from @buf (its
 * content): the pending pages of every range that maps part of it, without
 * waking anyone (data copied, known zeros over a fault's zero window:
 * replay_run_of()), then one wake over each part. A part whose ranges change
 * meanwhile, or that an event holds up, is left to the faults and the
 * push. Returns the pages installed. Context: a push thread.
 */
uint64_t space_replay(struct space *sp, uint64_t off, uint64_t len,
		      const char *buf, unsigned int slot)
{
	struct piece pc[PIECES];
	uint64_t pages = 0, gen;
	size_t n, skip = 0;

	do {
		pthread_rwlock_rdlock(&sp->lock);
		gen = sp->gen;
		n = pieces_locked(sp, off, len, pc, PIECES, skip);
		pthread_rwlock_unlock(&sp->lock);
		for (size_t i = 0; i < n; i++)
			pages += replay_piece(sp, &pc[i],
					      buf + (pc[i].src_off - off), gen,
					      slot);
		skip += n;
	} while (n == PIECES);
	atomic_fetch_add(&sp->st.replayed, pages);
	return pages;
}

/* The part of source [off, off + len) that range @r maps, installed. */
static void recheck_range(struct space *sp, const struct srange *r,
			  uint64_t off, uint64_t len, char *buf)
{
	uint64_t a = max_u64(off, r->src_off);
	uint64_t e = min_u64(off + len, r->src_off + r->len);

	while (a < e) {
		struct space_run run = { r->start + (a - r->src_off), 0, a,
					 SRC_DATA };
		uint64_t end;

		run.kind = src_kind_at(sp, a, &end);
		run.len = min_u64(min_u64(e, end) - a, PUSH_BUF);
		if (run.kind != SRC_DATA ||
		    source_read(sp->src, a, buf, run.len) == (ssize_t)run.len)
			space_install_run(sp, &run,
					  run.kind == SRC_DATA ? buf : NULL,
					  sp->gen, true, INFLIGHT_SLOTS);
		a += run.len;
	}
}

/* ------------------------------------------------------------------------
 * Creating, forking, freeing.
 */

static int cmp_start(const void *a, const void *b)
{
	const struct srange *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

static int cmp_seg(const void *a, const void *b)
{
	const struct sseg *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/* Sort the ranges and check them: aligned, non-empty, apart, in source. */
static int ranges_check(struct space *sp, const char **why)
{
	uint64_t mask = sp->page_size - 1;

	qsort(sp->r, sp->nr, sizeof(sp->r[0]), cmp_start);
	for (size_t i = 0; i < sp->nr; i++) {
		const struct srange *r = &sp->r[i];

		*why = "a range is empty or not aligned to the page size";
		if (!r->len || ((r->start | r->len | r->src_off) & mask) ||
		    r->start + r->len < r->start)
			return -EINVAL;
		*why = "a range reaches past the end of its source";
		if (r->src_off > sp->src->size ||
		    r->len > sp->src->size - r->src_off)
			return -ERANGE;
		*why = "ranges overlap";
		if (i && sp->r[i - 1].start + sp->r[i - 1].len > r->start)
			return -EINVAL;
	}
	return 0;
}

/* The fault-around window of a space of @page_size pages of @s. */
static size_t around_of(const struct session *s, size_t page_size)
{
	if (!s->o.around)
		return AROUND_DEFAULT > page_size ? AROUND_DEFAULT : page_size;
	return s->o.around > page_size ? s->o.around : page_size;
}

/* The segments: given, or each range's source part (which must be apart). */
static int segs_make(struct space *sp, const struct sseg *seg, size_t nseg,
		     const char **why)
{
	uint64_t bit = 0;

	sp->nseg = seg ? nseg : sp->nr;
	sp->seg = calloc(sp->nseg ? sp->nseg : 1, sizeof(*sp->seg));
	if (!sp->seg)
		return -ENOMEM;
	for (size_t i = 0; i < sp->nseg; i++)
		sp->seg[i] = seg ? seg[i]
				 : (struct sseg){ sp->r[i].src_off,
						  sp->r[i].len, 0 };
	qsort(sp->seg, sp->nseg, sizeof(sp->seg[0]), cmp_seg);
	for (size_t i = 0; i < sp->nseg; i++) {
		struct sseg *g = &sp->seg[i];

		*why = "two ranges map the same part of the source";
		if (i && g[-1].off + g[-1].len > g->off)
			return -EINVAL;
		*why = "a tracked part is not aligned to the page size";
		if (!g->len || ((g->off | g->len) & (sp->page_size - 1)))
			return -EINVAL;
		g->bit = bit;
		bit += g->len / sp->page_size;
	}
	sp->nr_pages = bit;
	return 0;
}

struct space *space_alloc(struct session *s, struct source *src,
			  size_t page_size)
{
	struct space *sp = calloc(1, sizeof(*sp));
	pthread_rwlockattr_t ev_attr;

	if (!sp)
		return NULL;
	sp->s = s;
	sp->src = src;
	sp->uffd = -1;
	sp->pidfd = -1;
	sp->state_fd = -1;
	sp->page_size = page_size;
	sp->huge = page_size > 4096;
	sp->around = around_of(s, page_size);
	/* A recording: every touched page faults, and is in the set. */
	if (s->rec && atomic_load(&s->rec_open))
		sp->around = page_size;
	pthread_rwlock_init(&sp->lock, NULL);
	pthread_rwlockattr_init(&ev_attr);
	/* The reader of events waits for installs under way, never for
	 * ones that start after it (a push would starve it). */
	pthread_rwlockattr_setkind_np(&ev_attr,
				      PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&sp->ev_lock, &ev_attr);
	pthread_rwlockattr_destroy(&ev_attr);
	return sp;
}

/*
 * space_create() - a space for @uffd (taken over on success) of process
 * @pid (0: unknown), whose client ranges @r map onto @src; @seg (NULL:
 * the ranges' own source parts) are the source offsets to push. Errors
 * say why in *why.
 */
int space_create(struct session *s, int uffd, pid_t pid, uint64_t id,
		 struct source *src, const struct srange *r, size_t nr,
		 const struct sseg *seg, size_t nseg, const char **why,
		 struct space **spp)
{
	struct space *sp = space_alloc(s, src, src->page_size);
	int ret = -ENOMEM;

	*why = "out of memory";
	if (!sp)
		return -ENOMEM;
	sp->id = id;
	sp->pid = pid;
	sp->src_index = session_source_index(s, src);
	sp->cap = nr ? nr : 1;
	sp->r = malloc(sp->cap * sizeof(*sp->r));
	if (!sp->r)
		goto err;
	memcpy(sp->r, r, nr * sizeof(*r));
	sp->nr = nr;
	ret = ranges_check(sp, why);
	if (!ret)
		ret = segs_make(sp, seg, nseg, why);
	if (!ret) {
		ret = state_create(sp);
		*why = "cannot make the session's state";
	}
	if (ret)
		goto err;
	sp->uffd = uffd;
	ret = space_restored(sp);
	*why = "out of memory";
	if (ret)
		goto err;
	*spp = sp;
	return 0;
err:
	sp->uffd = -1;
	space_free(sp);
	return ret;
}

/* Pages of the bitmap not done: the pending count. */
static uint64_t count_pending(const struct space *sp)
{
	uint64_t done = 0;

	for (uint64_t w = 0; w < bitmap_words(sp->nr_pages); w++)
		done += (uint64_t)__builtin_popcountll(
			atomic_load(&sp->done[w]));
	return sp->nr_pages - done;
}

/* What a working set of @sp is tied to (wset.h). */
void space_describe(const struct space *sp, struct wset_space *out)
{
	*out = (struct wset_space){ .space_id = sp->id,
				    .src_size = sp->src->size,
				    .page_size = (uint32_t)sp->page_size };
	memcpy(out->src_id, sp->src->id, sizeof(out->src_id));
}

/*
 * space_record_ended() - the session's record ended: @sp's faults get
 * their fault-around window again. Context: the control loop's thread.
 */
void space_record_ended(struct space *sp)
{
	pthread_rwlock_wrlock(&sp->lock);
	sp->around = around_of(sp->s, sp->page_size);
	pthread_rwlock_unlock(&sp->lock);
}

/*
 * The session records: @sp's first faults are noted from now on. Without
 * memory they are not (logged: the set will lack them).
 */
static void record_space(struct space *sp)
{
	struct wset_space d;

	if (!sp->s->rec || sp->seen)
		return;
	space_describe(sp, &d);
	sp->seen = calloc(bitmap_words(sp->nr_pages) + 1, sizeof(*sp->seen));
	if (!sp->seen || wset_rec_space(sp->s->rec, &d, &sp->rec_space)) {
		dlog(LOG_WARNING, "%s: space %llu: its faults cannot be recorded: out "
			"of memory", sp->s->o.name, (unsigned long long)sp->id);
		free(sp->seen);
		sp->seen = NULL;
	}
}

/*
 * space_restored() - @sp has its ranges, segments, bitmaps and uffd (new,
 * forked or adopted): count what is pending and make its port. Returns 0
 * or -ENOMEM (no claims bitmap; nothing else done).
 */
int space_restored(struct space *sp)
{
	sp->busy = calloc(bitmap_words(sp->nr_pages) + 1, sizeof(*sp->busy));
	if (!sp->busy)
		return -ENOMEM;
	record_space(sp);
	atomic_store(&sp->pending, count_pending(sp));
	uport_init(&sp->port, sp->uffd, &space_port_ops, sp, sp->page_size,
		   sp->s->nr_handlers);
	return 0;
}

/*
 * space_fork_locked() - the space of a child that @sp's process forked
 * (@ufd: the child's userfaultfd, taken over on success): the parent's
 * ranges and tracked pages as of now, which is as of the fork - the
 * child cannot run before its FORK event is read. Pages done in the
 * parent that the child lacks fault in it and are served again.
 * Context: sp->lock (read), from the FORK event.
 */
int space_fork_locked(struct space *sp, int ufd, struct space **childp)
{
	struct space *c = space_alloc(sp->s, sp->src, sp->page_size);
	size_t words = bitmap_words(sp->nr_pages) + 1;

	if (!c)
		return -ENOMEM;
	c->id = sp->id;
	c->src_index = sp->src_index;
	c->around = sp->around;
	c->forked = true;
	c->nr = c->cap = sp->nr;
	c->nseg = sp->nseg;
	c->nr_pages = sp->nr_pages;
	c->r = malloc((c->cap ? c->cap : 1) * sizeof(*c->r));
	c->seg = malloc((c->nseg ? c->nseg : 1) * sizeof(*c->seg));
	if (c->r && c->seg) {
		memcpy(c->r, sp->r, c->nr * sizeof(*c->r));
		memcpy(c->seg, sp->seg, c->nseg * sizeof(*c->seg));
	}
	if (!c->r || !c->seg || state_create(c) < 0) {
		space_free(c);
		return -ENOMEM;
	}
	for (size_t w = 0; w < words; w++) {
		atomic_store(&c->done[w], atomic_load(&sp->done[w]));
		atomic_store(&c->zero[w], atomic_load(&sp->zero[w]));
	}
	c->uffd = ufd;
	if (space_restored(c) < 0) {
		c->uffd = -1;
		space_free(c);
		return -ENOMEM;
	}
	*childp = c;
	return 0;
}

/* What a front end reads of a space it added (engine.h). */
uint64_t space_id(const struct space *sp)
{
	return sp->id;
}

uint64_t space_nr_pages(const struct space *sp)
{
	return sp->nr_pages;
}

size_t space_nr_ranges(const struct space *sp)
{
	return sp->nr;
}

size_t space_page_size(const struct space *sp)
{
	return sp->page_size;
}

/* Free a space no thread uses any more; closes its descriptors. */
void space_free(struct space *sp)
{
	if (!sp)
		return;
	if (sp->uffd >= 0) {
		uport_destroy(&sp->port);
		close(sp->uffd);
	}
	if (sp->pidfd >= 0)
		close(sp->pidfd);
	state_free(sp);
	pthread_rwlock_destroy(&sp->lock);
	free(sp->seen);
	free(sp->busy);
	pthread_rwlock_destroy(&sp->ev_lock);
	free(sp->r);
	free(sp->seg);
	free(sp);
}

/*
 * space_recheck_inflight() - install again what a daemon before this one
 * was installing when it died: its pages may be in without being marked
 * done (then the install finds them in, EEXIST, and marks them), or not in.
 * Context: an adopted space, before it is served.
 */
void space_recheck_inflight(struct space *sp)
{
	uint64_t off[INFLIGHT_SLOTS], len[INFLIGHT_SLOTS];
	size_t n = state_inflight_get(sp, off, len, INFLIGHT_SLOTS);
	char *buf = n ? malloc(PUSH_BUF) : NULL;

	for (size_t k = 0; buf && k < n; k++)
		for (size_t i = 0; i < sp->nr; i++)
			recheck_range(sp, &sp->r[i], off[k], len[k], buf);
	for (unsigned int k = 0; k < INFLIGHT_SLOTS; k++)
		state_inflight(sp, k, 0, 0);
	free(buf);
}
