// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * push.c - the background push: the pages nobody asked for, urgent faults
 * first.
 *
 * PUSHERS threads at nice PUSH_NICE share the session's pending pages in
 * stripes of PUSH_MAX bytes of client address (a huge page, if larger) (pusher k takes the stripes
 * whose index is k modulo PUSHERS). Each walks the spaces from a cursor,
 * reads a run of pending pages from the source with the session's locks
 * *not* held, and installs it without waking anyone (space_install_run());
 * runs double while no fault comes and halve when faults do, down to 256
 * KiB (adapt_chunk()); what a fault may wait behind is one install of at
 * most PUSH_PIECE. A fault moves the cursor to
 * just after its page: where the next faults are likely to be. A waking
 * handler thread (nice 0) preempts a pusher at once.
 *
 * A session with a working set replays it first (replay.c), in these
 * threads, then pushes if it pushes (once the whole set is in, not as
 * each thread is done with its share); one that records with
 * push_after_record pushes once the record ended.
 *
 * Measured for the first engine (faultd-bench run restore, 512 MiB, this
 * 2-vCPU machine): fault p99 during the push 0.36 ms against 0.43 ms
 * without a push, 1.97 GB/s; SCHED_BATCH (no wake-up preemption by it,
 * 3 ms slices) gave 3.4 ms; SCHED_IDLE gave 0.11 ms and 2.1 GB/s but stops
 * the push entirely while anything else runs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "engine_int.h"

#define PUSH_MAX (1ul << 20)	/* one run's most: the buffer stays in cache */
/* What the push tells its source it reads next (source_willneed()): a
 * network source has that much in flight while a run installs. */
#define PUSH_AHEAD (8ul << 20)
/* One install's most (a huge page, if larger): a handler that waits for
 * the push's install to end before it reads a fault waits for no more. */
#define PUSH_PIECE (64ul << 10)
#define PUSH_RUN_MIN (256ul << 10) /* the least a run shrinks to */
#define PUSH_NICE 19
#define IDLE_MS 20		/* a pass with nothing to do: wait this long */
/* Install slots (persist.h): the handlers' first, then the pushers'. */
#define PUSH_SLOT(p) (INFLIGHT_SLOTS - PUSHERS + (p)->k)

struct pusher {
	struct session *s;
	unsigned int k;
	char *buf;
	size_t buf_len;
	struct space *sp;	/* where the cursor is */
	uint64_t cursor;	/* a client address of sp */
	size_t chunk;		/* this run's most */
	/* Read ahead (source offsets of ahead_sp): the end of the last
	 * run, how many runs followed each other, up to where. */
	struct space *ahead_sp;
	uint64_t last_end, ahead;
	unsigned int streak;
	uint64_t faults;	/* the session's faults at the last run */
	uint64_t hint_seq;
};

/* Stripes are PUSH_MAX, or a huge page where pages are larger. */
static uint64_t stripe_len(const struct pusher *p)
{
	return p->sp->page_size > PUSH_MAX ? p->sp->page_size : PUSH_MAX;
}

static bool my_stripe(const struct pusher *p, uint64_t addr)
{
	return (addr / stripe_len(p)) % PUSHERS == p->k;
}

/* The start of pusher @p's next stripe after @addr. */
static uint64_t next_stripe(const struct pusher *p, uint64_t addr)
{
	uint64_t st = addr / stripe_len(p) + 1;

	while (st % PUSHERS != p->k)
		st++;
	return st * stripe_len(p);
}

/* Wait up to @ms for news (a fault, a space, the end). */
static void push_wait(struct session *s, unsigned int ms)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_nsec += (long)ms * 1000000;
	t.tv_sec += t.tv_nsec / 1000000000;
	t.tv_nsec %= 1000000000;
	pthread_mutex_lock(&s->push_lock);
	if (!atomic_load(&s->stop))
		pthread_cond_timedwait(&s->push_cond, &s->push_lock, &t);
	pthread_mutex_unlock(&s->push_lock);
}

/* The space after @sp in the session's list, wrapping; NULL: none. */
static struct space *space_after(struct session *s, struct space *sp)
{
	struct space *next;

	pthread_rwlock_rdlock(&s->spaces_lock);
	next = sp && sp->next ? sp->next : s->spaces;
	pthread_rwlock_unlock(&s->spaces_lock);
	return next;
}

/* A fault asked the push to go on after it. */
static void take_hint(struct pusher *p)
{
	uint64_t seq = atomic_load(&p->s->push_hint_seq);

	if (seq == p->hint_seq)
		return;
	p->hint_seq = seq;
	p->sp = atomic_load(&p->s->push_space);
	p->cursor = atomic_load(&p->s->push_from);
}

/*
 * Runs double while no fault comes and halve when faults do, down to
 * PUSH_RUN_MIN: what a fault waits behind is one install (PUSH_PIECE)
 * whatever the run, and each run costs a search for it, a read and two
 * priority changes. Measured side by side, three alternations of
 * faultd-bench run criu --size 256 --rounds 5 (program reading in order):
 * runs down to 64 KiB gave all in 0.78-0.83x criu lazy-pages' and CPU per
 * GiB 1.09-1.15x, down to 256 KiB 0.68-0.76x and 0.96-1.02x, down to
 * 1 MiB 0.74-0.94x and 1.10-1.16x; firecracker --prefetch 2.06-2.15 GB/s
 * and 2.29-2.38 GB/s (64 and 256 KiB), fault p99 during the push alike.
 */
static void adapt_chunk(struct pusher *p, size_t page_size)
{
	uint64_t f = atomic_load(&p->s->faults);
	size_t min = page_size > PUSH_RUN_MIN ? page_size : PUSH_RUN_MIN;

	if (f == p->faults)
		p->chunk = p->chunk * 2 > PUSH_MAX ? PUSH_MAX : p->chunk * 2;
	else
		p->chunk = p->chunk / 2 >= min ? p->chunk / 2 : min;
	p->faults = f;
}

/*
 * Find pusher @p's next run in its space from its cursor. Returns false
 * when the space has none left in @p's stripes.
 */
static bool find_run(struct pusher *p, struct space_run *run, uint64_t *gen)
{
	size_t max = p->chunk > p->sp->page_size ? p->chunk
						 : p->sp->page_size;

	while (space_next_pending(p->sp, p->cursor, run, max, gen)) {
		uint64_t end;

		if (!my_stripe(p, run->start)) {
			p->cursor = next_stripe(p, run->start);
			continue;
		}
		end = (run->start / stripe_len(p) + 1) * stripe_len(p);
		if (run->start + run->len > end)
			run->len = end - run->start;
		return true;
	}
	return false;
}

/* The source failed for @run: read it a page at a time, poison the bad. */
static void push_pagewise(struct pusher *p, const struct space_run *run,
			  uint64_t gen)
{
	struct space *sp = p->sp;
	size_t ps = sp->page_size;

	for (uint64_t o = 0; o < run->len; o += ps) {
		struct space_run one = { run->start + o, ps, run->src_off + o,
					 run->kind };
		ssize_t n = source_read(sp->src, one.src_off, p->buf, ps);

		if (n < 0)
			space_poison_run(sp, &one, gen, (int)n);
		else
			space_install_run(sp, &one, p->buf, gen, true,
					  PUSH_SLOT(p));
	}
}

/*
 * Install @run (read into p->buf) in pieces of PUSH_PIECE, at the
 * handlers' priority where this thread may take it: each piece holds
 * space->ev_lock for reading, which a handler waits for before it reads
 * the next fault, and a thread at nice 19 on a busy CPU would hold it for
 * milliseconds. Without the right to raise its priority it installs at
 * nice 19 (faults read later during the push). Raising it only once a
 * handler waits was measured worse (faultd-bench run firecracker, side by
 * side: fault p99 during the push 5.8 ms against 0.98 ms): the thread
 * must then get the CPU back first, a time slice on a busy CPU. A piece
 * that is another's install under way (-EBUSY) is stepped over. Returns
 * the pages installed, -EBUSY if every piece was another's, or the first
 * other error of a piece (space_install_run()).
 */
static ssize_t install_boosted(struct pusher *p, const struct space_run *run,
			       const char *data, uint64_t gen)
{
	size_t piece = p->sp->page_size > PUSH_PIECE ? p->sp->page_size
						     : PUSH_PIECE;
	id_t tid = (id_t)gettid();
	bool boosted = !setpriority(PRIO_PROCESS, tid, 0), all_busy = true;
	ssize_t n = 0, ret = 0;

	for (uint64_t o = 0; o < run->len && (ret >= 0 || ret == -EBUSY);
	     o += piece) {
		struct space_run part = *run;

		part.start += o;
		part.src_off += o;
		part.len = run->len - o < piece ? run->len - o : piece;
		ret = space_install_run(p->sp, &part, data ? data + o : NULL,
					gen, true, PUSH_SLOT(p));
		n += ret > 0 ? ret : 0;
		all_busy &= ret == -EBUSY;
	}
	if (boosted)
		setpriority(PRIO_PROCESS, tid, PUSH_NICE);
	if (ret == -EBUSY)
		return all_busy ? -EBUSY : n;
	return ret < 0 ? ret : n;
}

/*
 * The source reads ahead of the push while the push goes on in order:
 * once this pusher's runs have followed each other twice (a fault moves
 * the cursor anywhere, and what is read ahead there would be read for
 * nothing), the PUSH_AHEAD bytes after @run, asked for again when half
 * of them are read. A source that reads nothing ahead (a file in the
 * page cache) has no willneed(); the hint costs it nothing.
 */
static void push_ahead(struct pusher *p, const struct space_run *run)
{
	uint64_t from = run->src_off + run->len;
	bool in_order = p->ahead_sp == p->sp && run->src_off >= p->last_end &&
			run->src_off <= p->last_end + PUSHERS * stripe_len(p);

	p->streak = in_order ? p->streak + 1 : 0;
	p->ahead_sp = p->sp;
	p->last_end = from;
	if (run->kind != SRC_DATA || p->streak < 2 ||
	    (from <= p->ahead && p->ahead - from > PUSH_AHEAD / 2))
		return;
	if (from > p->ahead || p->ahead - from > PUSH_AHEAD)
		p->ahead = from;
	source_willneed(p->sp->src, p->ahead, from + PUSH_AHEAD - p->ahead);
	p->ahead = from + PUSH_AHEAD;
}

/*
 * Read and install one run (from the source's own mapping where it has
 * one: no copy into the buffer first). Returns false when it made no
 * progress.
 */
static bool push_run(struct pusher *p, const struct space_run *run,
		     uint64_t gen)
{
	struct space *sp = p->sp;
	const char *data = NULL;
	ssize_t n = 0;

	if (run->kind == SRC_DATA &&
	    !(data = source_view(sp->src, run->src_off, run->len))) {
		push_ahead(p, run);
		n = source_read(sp->src, run->src_off, p->buf, run->len);
		data = p->buf;
	}
	if (n < 0) {
		push_pagewise(p, run, gen);
		p->cursor = run->start + run->len;
		return true;
	}
	n = install_boosted(p, run, data, gen);
	if (n == -EFAULT && data != p->buf) { /* the file shrank: read it */
		push_pagewise(p, run, gen);
		n = 0;
	}
	if (n == -ESTALE)
		return true; /* the ranges changed: find it again */
	if (n == -EBUSY) { /* another's install under way: on after it */
		p->cursor = run->start + run->len;
		return false;
	}
	if (n == -EAGAIN) {
		push_wait(p->s, 1); /* an event is pending: let it be read */
		return true;
	}
	if (n < 0)
		dlog(LOG_INFO, "%s: push at %#llx: %s", p->s->o.name,
		     (unsigned long long)run->start, strerror((int)-n));
	p->cursor = run->start + run->len;
	return n > 0;
}

/*
 * One step: a run of the current space, or on to the next space. A run
 * whose pages are all another's installs under way (a fault's window)
 * does not count as work found: when a whole pass over the spaces finds
 * only such runs, the caller waits for news rather than walk them again
 * at once (measured, faultd-bench run criu: two push threads walking the
 * last window's claimed pages for 5.8 ms, on the CPU its handler waited
 * for).
 */
static bool push_step(struct pusher *p, unsigned int *idle_spaces)
{
	struct space_run run;
	uint64_t gen;
	bool moved;

	if (!p->sp || atomic_load(&p->sp->dead) || !find_run(p, &run, &gen)) {
		p->sp = space_after(p->s, p->sp);
		p->cursor = 0;
		++*idle_spaces;
		return false;
	}
	adapt_chunk(p, p->sp->page_size);
	moved = push_run(p, &run, gen);
	if (moved)
		*idle_spaces = 0;
	return moved;
}

static void *push_main(void *arg)
{
	struct pusher *p = arg;
	struct session *s = p->s;
	unsigned int idle = 0;

	if (!s->o.push_fair)
		setpriority(PRIO_PROCESS, (id_t)gettid(), PUSH_NICE);
	/* A working set first, once every space the peer will register is
	 * there; then the push, if the session pushes. */
	while (!atomic_load(&s->stop) && !atomic_load(&s->settled))
		push_wait(s, 10);
	replay_start(s);
	replay_run(s, p->k, PUSH_SLOT(p));
	while (!atomic_load(&s->stop) && replay_busy(s))
		push_wait(s, 10);
	while (!atomic_load(&s->stop) &&
	       (s->o.push || atomic_load(&s->draining))) {
		bool draining = atomic_load(&s->draining);

		if (!draining && s->o.push_after_first &&
		    !atomic_load(&s->first_fault_ns)) {
			push_wait(s, 1000);
			continue;
		}
		/* A record the push would leave pages out of. */
		if (!draining && s->o.push_after_record &&
		    atomic_load(&s->rec_open)) {
			push_wait(s, 1000);
			continue;
		}
		/* Before the peer has registered everything, a page in no
		 * mapping is one still to come: a push would find it gone
		 * and try it again at once, for as long as the peer takes. */
		if (!atomic_load(&s->settled)) {
			push_wait(s, 1000);
			continue;
		}
		if (!atomic_load(&s->pending)) {
			push_wait(s, 1000);
			continue;
		}
		take_hint(p);
		push_step(p, &idle);
		if (idle > atomic_load(&s->nr_spaces)) { /* a whole pass found nothing */
			idle = 0;
			push_wait(s, IDLE_MS);
		}
	}
	free(p->buf);
	free(p);
	return NULL;
}

/* Start the push threads, if the session pushes, replays a set, or
 * drains its forked children; none when they run already. */
int push_start(struct session *s)
{
	bool want = s->o.push || s->o.wset_path || s->o.wset_fd > 0 ||
		    atomic_load(&s->draining);

	if (s->nr_pushers)
		return 0;

	for (unsigned int k = 0; k < PUSHERS && want; k++) {
		struct pusher *p = calloc(1, sizeof(*p));
		int ret = -ENOMEM;

		if (p) {
			*p = (struct pusher){ .s = s, .k = k,
					      .chunk = PUSH_RUN_MIN,
					      .buf_len = PUSH_MAX };
			p->buf = malloc(p->buf_len > (2ul << 20) ? p->buf_len
								 : 2ul << 20);
		}
		if (p && p->buf)
			ret = thread_start(&s->pushers[k], push_main, p,
					   "faultd-push");
		if (ret < 0) {
			if (p)
				free(p->buf);
			free(p);
			return ret;
		}
		s->nr_pushers++;
	}
	return 0;
}

/* Join the push threads; the session's stop flag is set. */
void push_stop(struct session *s)
{
	pthread_cond_broadcast(&s->push_cond);
	for (unsigned int k = 0; k < s->nr_pushers; k++)
		pthread_join(s->pushers[k], NULL);
	s->nr_pushers = 0;
}
