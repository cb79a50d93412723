// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * sigbus.c - same-thread resolution: the faulting thread resolves its own
 * fault, in a SIGBUS handler, with no wake-up of anyone.
 *
 * A FAULTD_REGION_SAME_THREAD region is registered with a userfaultfd that
 * has UFFD_FEATURE_SIGBUS: instead of queuing a message and sleeping, the
 * faulting thread gets SIGBUS (si_code BUS_ADRERR). The library's handler
 * finds the region in a small table, fills the page (zeros, or a pager
 * marked FAULTD_PAGER_SIGNAL_SAFE) with the same ioctls a handler thread
 * would use, and returns; the access is retried and succeeds. A SIGBUS
 * that is not ours - another address, or a poisoned page (BUS_MCEERR_AR) -
 * goes to the handler that was installed before ours, or to the default
 * action. Programs that install their own SIGBUS handler later call
 * faultd_sigbus() from it first.
 *
 * Everything here runs in a signal handler: no allocation, only atomics
 * and system calls, and no lock but one: in FAULTD_LOCK_GLOBAL mode the
 * resolution holds the context lock for reading, as every fault held
 * mmap_lock before per-VMA locks (sig_lock()). A region is reached
 * through a slot of the table; destroy empties the slot and waits until
 * no handler uses it. Staging buffers for pager fills come from a small
 * per-region pool, claimed with an atomic exchange.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "internal.h"

#define SIGBUS_SLOTS 256
#define SIG_STAGING 4

struct sigbus_slot {
	struct faultd_region *_Atomic region;
	_Atomic uintptr_t start, end;
	atomic_int users;
};

static struct sigbus_slot slots[SIGBUS_SLOTS];
static atomic_int slots_used; /* high-water mark of slots ever used */
/* What on_sigbus() chains to; set (under slots_lock) while it is not
 * installed. */
static struct sigaction old_action;
static bool installed_once;	/* under slots_lock */
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;

struct sig_staging {
	void *buf[SIG_STAGING];
	atomic_bool busy[SIG_STAGING];
	size_t len;
	/*
	 * Pages poisoned here (a pager error). Since 6.x a poisoned page's
	 * access is a SIGBUS with BUS_ADRERR, like a userfault: without this
	 * the handler would try again forever.
	 */
	_Atomic uint64_t *poisoned;
};

/* ------------------------------------------------------------------------
 * Resolution, in the faulting thread's signal handler.
 */

static bool fault_was_write(void *ucontext)
{
#if defined(__x86_64__)
	const ucontext_t *uc = ucontext;

	return uc && (uc->uc_mcontext.gregs[REG_ERR] & 2); /* PF_WRITE */
#else
	(void)ucontext;
	return true;
#endif
}

static void *staging_get(struct sig_staging *st, unsigned int *slot)
{
	for (;;) {
		for (unsigned int i = 0; i < SIG_STAGING; i++)
			if (!atomic_exchange(&st->busy[i], true)) {
				*slot = i;
				return st->buf[i];
			}
		sched_yield();
	}
}

static void sig_count(struct faultd_region *r, enum stat_item i)
{
	stat_add_shared(r->bg_stats, i, 1);
}

/* Fill [start, start + len) with the pager's content; -errno on error. */
static ssize_t sig_fill(struct faultd_region *r, uintptr_t start, size_t len,
			void *buf)
{
	ssize_t n = r->pager->p.fill(r->pager->p.arg, r, start - r->base, buf,
				     len);

	if (n > (ssize_t)len)
		return -ERANGE;
	return install_fill_tail(buf, n, len);
}

/*
 * Map [start, start + len) from @src (NULL: zeros). A page already present
 * stops a window short; then the faulting page alone, unless it was among
 * those mapped, so that the access never keeps faulting on a window that
 * cannot be filled. Returns whether this call mapped the faulting page:
 * if not, another thread was first (EEXIST), or the access is retried
 * (EAGAIN).
 */
static bool sig_map(struct faultd_region *r, uintptr_t page, uintptr_t start,
		    size_t len, const char *src, bool write)
{
	size_t ps = r->page_size;
	/* No thread waits on a userfaultfd here: nobody to wake. */
	struct inst_req q = {
		.uffd = r->group->uffd, .op = src ? INST_COPY : INST_ZERO,
		.flags = INST_STOP_PRESENT | INST_DONTWAKE |
			 (write || r->kind == REGION_HUGETLB ? INST_ZERO_COPY
							     : 0),
		.dst = start, .len = len, .page_size = ps,
		.src = src ? src : r->ctx->zero_page,
		.zeros_len = ZERO_BUF_LEN,
	};
	struct inst_res res;
	uintptr_t done;

	install_range(&q, &res);
	done = start + res.done;
	if (!res.gone && page < done) { /* the others, as fault_around() */
		if (done - start > ps)
			stat_add_shared(r->bg_stats, ST_AROUND,
					(done - start) / ps - 1);
		return true;
	}
	if (done > start)
		stat_add_shared(r->bg_stats, ST_AROUND, (done - start) / ps);
	if (len > ps) {
		q.dst = page;
		q.len = ps;
		if (src)
			q.src = src + (page - start);
		install_range(&q, &res);
	}
	if (install_outcome(&res) == UFFD_EXISTS)
		sig_count(r, ST_EEXIST);
	else if (install_outcome(&res) == UFFD_AGAIN)
		sig_count(r, ST_EAGAIN);
	return res.done == ps;
}

/* The index of @addr's page in the poisoned bitmap. */
static size_t poison_index(const struct faultd_region *r, uintptr_t addr)
{
	return (addr - r->base) / r->page_size;
}

static void sig_mark_poisoned(struct faultd_region *r, uintptr_t page)
{
	bitmap_test_and_set(r->sig_staging->poisoned, poison_index(r, page),
			    memory_order_seq_cst);
}

/* Is this SIGBUS the access to a page we poisoned? Then it is final. */
static bool sig_poisoned(struct faultd_region *r, uintptr_t addr)
{
	return r->sig_staging &&
	       bitmap_test_atomic(r->sig_staging->poisoned,
				  poison_index(r, addr), memory_order_seq_cst);
}

/*
 * sigbus_discarded() - [off, off + len) was discarded: its next access
 * faults afresh (a poison marker is zapped with the page).
 */
void sigbus_discarded(struct faultd_region *r, uint64_t off, size_t len)
{
	if (!r->sig_staging)
		return;
	for (uint64_t o = off; o < off + len; o += r->page_size)
		bitmap_test_and_clear(r->sig_staging->poisoned,
				      o / r->page_size, memory_order_seq_cst);
}

/* Poison the page at @page (UFFDIO_POISON): whether it was. */
static bool sig_poison(struct faultd_region *r, uintptr_t page)
{
	struct inst_req q = { .uffd = r->group->uffd, .op = INST_POISON,
			      .flags = INST_DONTWAKE, .dst = page,
			      .len = r->page_size, .page_size = r->page_size };
	struct inst_res res;

	install_range(&q, &res);
	return res.done == r->page_size;
}

/* Resolve the fault at @addr of @r, counted as under the context lock
 * (ST_LOCKED) where the thread holds it. */
static void sig_resolve(struct faultd_region *r, uintptr_t addr, bool write)
{
	uintptr_t page = addr & ~((uintptr_t)r->page_size - 1), start;
	size_t len = fill_window(r, page, &start);
	unsigned int slot;
	void *buf;

	sig_count(r, ST_FAULTS);
	sig_count(r, map_lock_held(r->ctx, false) ? ST_LOCKED : ST_FAST);
	if (!r->pager) {
		if (sig_map(r, page, start, len, NULL, write))
			sig_count(r, ST_ZERO_FILLS);
		return;
	}
	buf = staging_get(r->sig_staging, &slot);
	if (sig_fill(r, start, len, buf) >= 0) {
		if (sig_map(r, page, start, len, buf, write))
			sig_count(r, ST_PAGER_FILLS);
	} else {
		/* Never zeros: the retried access finds a poisoned page (or,
		 * before UFFDIO_POISON, an inaccessible one: SIGSEGV). */
		sig_count(r, ST_PAGER_ERRORS);
		sig_count(r, ST_POISONED);
		sig_mark_poisoned(r, page);
		if (!sig_poison(r, page))
			mprotect((void *)page, r->page_size, PROT_NONE);
	}
	atomic_store(&r->sig_staging->busy[slot], false);
}

/*
 * slot_get() - the slot of the region that holds @addr, taken (its users
 * counted: the region cannot go until slot_put()), the region in *rp;
 * NULL if there is none, or it is being destroyed.
 */
static struct sigbus_slot *slot_get(uintptr_t addr, struct faultd_region **rp)
{
	int used = atomic_load(&slots_used);

	for (int i = 0; i < used; i++) {
		struct sigbus_slot *s = &slots[i];
		struct faultd_region *r = atomic_load(&s->region);

		if (!r || addr < atomic_load(&s->start) ||
		    addr >= atomic_load(&s->end))
			continue;
		atomic_fetch_add(&s->users, 1);
		if (atomic_load(&s->region) != r) { /* destroyed meanwhile */
			atomic_fetch_sub(&s->users, 1);
			return NULL;
		}
		*rp = r;
		return s;
	}
	return NULL;
}

static void slot_put(struct sigbus_slot *s)
{
	atomic_fetch_sub(&s->users, 1);
}

/*
 * sig_lock() - in FAULTD_LOCK_GLOBAL mode, the context lock for reading
 * around the resolution, as a handler thread's fault holds it; not taken
 * again by a thread that holds it (a pager or hook called under it that
 * touches a same-thread region). While the slot is taken the lock is only
 * tried: a destroyer holds it for writing while it waits for the slot's
 * users (sigbus_remove()). When the try fails, the slot is let go, the
 * lock waited for, and the region looked up again under it.
 * Returns the slot, taken, and in *locked the context to unlock (NULL:
 * none); NULL if the region went while the lock was awaited.
 */
static struct sigbus_slot *sig_lock(struct sigbus_slot *s, uintptr_t addr,
				    struct faultd_region **rp,
				    struct faultd_ctx **locked)
{
	struct faultd_ctx *ctx = (*rp)->ctx;

	*locked = NULL;
	if (!lock_global(ctx) || map_lock_held(ctx, false))
		return s;
	if (!map_read_trylock(ctx)) {
		slot_put(s);
		map_read_lock(ctx);
		s = slot_get(addr, rp);
		if (!s || (*rp)->ctx != ctx) {
			if (s)
				slot_put(s);
			map_read_unlock(ctx);
			return NULL;
		}
	}
	*locked = ctx;
	return s;
}

/*
 * faultd_sigbus() - resolve a SIGBUS if it is a fault in a same-thread
 * region. Returns 1 if it was (the access may be retried), 0 if not.
 */
FAULTD_EXPORT int faultd_sigbus(int sig, void *siginfo, void *ucontext)
{
	const siginfo_t *info = siginfo;
	struct faultd_ctx *locked = NULL;
	struct faultd_region *r = NULL;
	struct sigbus_slot *s;
	uintptr_t addr;
	bool ours;

	if (sig != SIGBUS || !info || info->si_code != BUS_ADRERR)
		return 0;
	addr = (uintptr_t)info->si_addr;
	s = slot_get(addr, &r);
	if (s)
		s = sig_lock(s, addr, &r, &locked);
	if (!s)
		return 0;
	ours = !sig_poisoned(r, addr); /* a page we poisoned: final */
	if (ours)
		sig_resolve(r, addr, fault_was_write(ucontext));
	if (locked)
		map_read_unlock(locked);
	slot_put(s);
	return ours;
}

/* Not ours: what was installed before us, or the default action. */
static void chain(int sig, siginfo_t *info, void *ucontext)
{
	if (old_action.sa_flags & SA_SIGINFO) {
		old_action.sa_sigaction(sig, info, ucontext);
	} else if (old_action.sa_handler != SIG_DFL &&
		   old_action.sa_handler != SIG_IGN) {
		old_action.sa_handler(sig);
	} else {
		/* The access repeats and the kernel's default ends it. */
		signal(SIGBUS, SIG_DFL);
	}
}

static void on_sigbus(int sig, siginfo_t *info, void *ucontext)
{
	int saved = errno;

	if (!faultd_sigbus(sig, info, ucontext))
		chain(sig, info, ucontext);
	errno = saved;
}

/* ------------------------------------------------------------------------
 * Registration (ordinary context).
 */

static bool action_is(const struct sigaction *a, const struct sigaction *b)
{
	return (a->sa_flags & SA_SIGINFO) == (b->sa_flags & SA_SIGINFO) &&
	       a->sa_handler == b->sa_handler; /* the union's pointer */
}

static bool action_is_default(const struct sigaction *a)
{
	return !(a->sa_flags & SA_SIGINFO) &&
	       (a->sa_handler == SIG_DFL || a->sa_handler == SIG_IGN);
}

/*
 * handler_check_locked() - make sure a SIGBUS of the region being added
 * reaches on_sigbus(), checked at every creation rather than once per
 * process. Ours is installed, chaining to the action it finds, when that
 * action is the default, "ignore", or what ours chained to before - what
 * the program had before the library, put back once its same-thread
 * regions were gone - and at the first creation. Any other handler was
 * installed by the program since ours: it stays (it calls faultd_sigbus()
 * first, faultd_sigbus(3); and it may chain to ours, which chaining back
 * to it would turn into a loop).
 * Context: slots_lock.
 */
static int handler_check_locked(const struct faultd_region *r)
{
	struct sigaction cur, sa = {
		.sa_sigaction = on_sigbus,
		.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK,
	};

	if (sigaction(SIGBUS, NULL, &cur) < 0)
		return -errno;
	if (action_is(&cur, &sa))
		return 0;
	if (installed_once && !action_is_default(&cur) &&
	    !action_is(&cur, &old_action)) {
		fd_dbg(r->ctx, "%s: SIGBUS goes to the program's handler, "
			       "which calls faultd_sigbus() first",
		       r->name);
		return 0;
	}
	old_action = cur;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, NULL) < 0)
		return -errno;
	if (installed_once)
		fd_dbg(r->ctx, "%s: SIGBUS handler installed again", r->name);
	installed_once = true;
	return 0;
}

static void staging_free(struct sig_staging *st)
{
	if (!st)
		return;
	for (unsigned int i = 0; i < SIG_STAGING; i++)
		if (st->buf[i])
			munmap(st->buf[i], st->len);
	free((void *)st->poisoned);
	free(st);
}

static int staging_alloc(struct faultd_region *r)
{
	struct sig_staging *st = fd_calloc(1, sizeof(*st));

	if (!st)
		return -ENOMEM;
	st->len = r->fault_around > r->page_size ? r->fault_around
						 : r->page_size;
	st->poisoned = fd_calloc(bitmap_words(r->max_len / r->page_size),
				 sizeof(uint64_t));
	if (!st->poisoned) {
		free(st);
		return -ENOMEM;
	}
	for (unsigned int i = 0; i < SIG_STAGING; i++) {
		st->buf[i] = mmap(NULL, st->len, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
				  -1, 0);
		if (st->buf[i] == MAP_FAILED) {
			st->buf[i] = NULL;
			staging_free(st);
			return -ENOMEM;
		}
	}
	r->sig_staging = st;
	return 0;
}

/* A free slot of the table for @r, or -ENOSPC. Context: slots_lock. */
static int slot_take_locked(struct faultd_region *r)
{
	assert_mutex_held(&slots_lock);

	for (int i = 0; i < SIGBUS_SLOTS; i++) {
		struct sigbus_slot *s = &slots[i];

		if (atomic_load(&s->region) || atomic_load(&s->users))
			continue;
		atomic_store(&s->start, r->base);
		atomic_store(&s->end, r->base + atomic_load(&r->len));
		atomic_store(&s->region, r);
		if (i >= atomic_load(&slots_used))
			atomic_store(&slots_used, i + 1);
		r->sig_slot = i;
		return 0;
	}
	return -ENOSPC;
}

/*
 * sigbus_add() - make @r reachable from the SIGBUS handler (installed
 * again if it must be, see handler_check_locked()).
 * Context: @r mapped and registered, not yet returned.
 */
int sigbus_add(struct faultd_region *r)
{
	int ret;

	clear_setup(); /* the handler clears short fills */
	if (r->pager && staging_alloc(r) < 0)
		return -ENOMEM;
	pthread_mutex_lock(&slots_lock);
	ret = handler_check_locked(r);
	if (!ret)
		ret = slot_take_locked(r);
	pthread_mutex_unlock(&slots_lock);
	return ret;
}

/*
 * sigbus_remove() - no SIGBUS handler can reach @r after this returns.
 * Context: before @r is unmapped; any thread but @r's faulting ones.
 */
void sigbus_remove(struct faultd_region *r)
{
	struct sigbus_slot *s;

	if (r->sig_slot < 0)
		return;
	s = &slots[r->sig_slot];
	atomic_store(&s->region, NULL);
	while (atomic_load(&s->users))
		sched_yield();
	r->sig_slot = -1;
}

void sigbus_free(struct faultd_region *r)
{
	staging_free(r->sig_staging);
	r->sig_staging = NULL;
}
