// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * replay.c - a session's working-set replay (faultd-working-set(5)): the
 * pages a restore like this one faulted before, loaded before the push.
 *
 * The set is read and checked whole, then matched to the session's spaces
 * (the space's id, its source's id, size and page size): a space of the
 * set that the session does not have is left out, a set none of whose
 * spaces it has is not used - logged both, never applied to another
 * source. Each page brings its fault-around window (the install its fault
 * made when it was recorded), so that a restore that touches the same
 * pages faults on none of them. The windows of a space are sorted by
 * source offset, joined, and cut into spans of at most REPLAY_READ bytes,
 * joining runs less than REPLAY_GAP apart (reading the gap costs less
 * than another read; wset_spans()): the spans are read in source order with one large
 * read each (an image reads through io_uring, 64 KiB chunks in flight),
 * the push threads taking them in turn, so two spans are read at once.
 * A span is installed with UFFDIO_COPY and DONTWAKE, pending pages only,
 * and woken with one UFFDIO_WAKE per range it touches (space_replay()).
 *
 * Replay runs in the push threads (nice 19), so a fault's handler thread
 * preempts it at once, and faults stay first; the push proper starts
 * after a pusher's share of the replay. A span that the source cannot give
 * (a bad block) is skipped: its pages stay pending, and the fault or the
 * push that reads them again poisons what is bad.
 *
 * The replay state is not kept for a restart: a restarted daemon pushes
 * (or serves) the rest as any adopted session.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"

#define REPLAY_READ (4ul << 20)	/* one span's most */
#define REPLAY_GAP (128ul << 10)	/* runs this close: one read */

/* A span to read: source [off, off + len) of a space. */
struct span {
	struct space *sp;
	uint64_t off, len;
};

struct replay {
	struct span *spans;
	size_t nr, cap;
	uint64_t pages;		/* of the set that are used */
	atomic_size_t next;	/* the next span to take */
	atomic_uint running;	/* push threads still replaying */
	char *bufs[PUSHERS];	/* REPLAY_READ each */
};

static int span_add(struct replay *rp, struct space *sp, uint64_t off,
		    uint64_t len)
{
	if (rp->nr == rp->cap) {
		size_t cap = rp->cap ? 2 * rp->cap : 256;
		struct span *v = realloc(rp->spans, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		rp->spans = v;
		rp->cap = cap;
	}
	rp->spans[rp->nr++] = (struct span){ sp, off, len };
	return 0;
}

/* The spans of set space @k, read for @sp. */
static int space_windows(struct replay *rp, const struct wset *ws,
			 uint32_t k, struct space *sp)
{
	struct wset_span *w;
	ssize_t n = wset_spans(ws, k, sp->around, REPLAY_GAP, REPLAY_READ, &w);
	int ret = n < 0 ? (int)n : 0;

	for (ssize_t i = 0; i < n && !ret; i++)
		ret = span_add(rp, sp, w[i].off, w[i].len);
	for (uint64_t i = 0; i < ws->nr; i++)
		rp->pages += ws->e[i].space == k;
	if (n >= 0)
		free(w);
	return ret;
}

/* The session's live space that set space @d describes; NULL: none. */
static struct space *space_of(struct session *s, const struct wset_space *d)
{
	struct space *found = NULL;

	pthread_rwlock_rdlock(&s->spaces_lock);
	for (struct space *sp = s->spaces; sp && !found; sp = sp->next) {
		struct wset_space mine;

		space_describe(sp, &mine);
		if (!atomic_load(&sp->dead) && wset_space_match(&mine, d))
			found = sp;
	}
	pthread_rwlock_unlock(&s->spaces_lock);
	return found;
}

/* The set's spans for the session's spaces; *used: spaces matched. */
static int replay_match(struct session *s, struct replay *rp,
			const struct wset *ws, uint32_t *used)
{
	*used = 0;
	for (uint32_t k = 0; k < ws->nr_spaces; k++) {
		struct space *sp = space_of(s, &ws->spaces[k]);
		int ret;

		if (!sp) {
			dlog(0, "%s: working set: space %llu is not one of "
				"this session's sources: its pages are not "
				"replayed", s->o.name,
			     (unsigned long long)ws->spaces[k].space_id);
			continue;
		}
		ret = space_windows(rp, ws, k, sp);
		if (ret)
			return ret;
		++*used;
	}
	return 0;
}

static int replay_load(struct session *s, struct wset *ws, const char **why)
{
	if (s->o.wset_fd > 0)
		return wset_read_fd(s->o.wset_fd, ws, why);
	return wset_load(s->o.wset_path, ws, why);
}

static int replay_bufs(struct replay *rp)
{
	for (unsigned int k = 0; k < PUSHERS; k++) {
		rp->bufs[k] = aligned_alloc(4096, REPLAY_READ);
		if (!rp->bufs[k])
			return -ENOMEM;
	}
	return 0;
}

static void replay_destroy(struct replay *rp)
{
	for (unsigned int k = 0; k < PUSHERS; k++)
		free(rp->bufs[k]);
	free(rp->spans);
	free(rp);
}

/*
 * The session's set, loaded and matched: s->replay, or none when it has
 * no set or it cannot be used (logged: the restore goes on without it).
 */
static void replay_prepare(struct session *s)
{
	const char *name = s->o.wset_path ? s->o.wset_path : "(descriptor)";
	struct replay *rp;
	struct wset ws;
	const char *why = "out of memory";
	uint32_t used = 0;
	int ret = replay_load(s, &ws, &why);

	if (ret) {
		dlog(0, "%s: working set %s: %s (%s): not used", s->o.name,
		     name, why, strerror(-ret));
		return;
	}
	rp = calloc(1, sizeof(*rp));
	ret = rp ? replay_match(s, rp, &ws, &used) : -ENOMEM;
	wset_free(&ws);
	if (!ret && !used)
		dlog(0, "%s: working set %s: a set of another source: not "
			"used", s->o.name, name);
	if (!ret && used)
		ret = replay_bufs(rp);
	if (ret)
		dlog(0, "%s: working set %s: %s: not used", s->o.name, name,
		     strerror(-ret));
	if (ret || !used) {
		if (rp)
			replay_destroy(rp);
		return;
	}
	atomic_init(&rp->running, PUSHERS);
	atomic_store(&s->replay_start_ns, now_ns());
	dlog(1, "%s: working set %s: %llu pages, %zu reads", s->o.name, name,
	     (unsigned long long)rp->pages, rp->nr);
	s->replay = rp;
}

/*
 * replay_start() - the first push thread to come loads the set; every
 * one returns once it is loaded (or found unusable).
 * Context: a push thread, the session settled.
 */
void replay_start(struct session *s)
{
	if (!s->o.wset_path && s->o.wset_fd <= 0)
		return;
	pthread_mutex_lock(&s->push_lock);
	if (!s->replay_prepared)
		replay_prepare(s);
	s->replay_prepared = true;
	pthread_mutex_unlock(&s->push_lock);
}

/* Read and install one span. */
static void span_replay(struct session *s, const struct span *sp, char *buf,
			unsigned int slot)
{
	int ret = space_read(sp->sp, sp->off, sp->len, buf);

	if (ret) {
		dlog(1, "%s: working set: source [%#llx, +%#llx): %s: left to "
			"the faults", s->o.name, (unsigned long long)sp->off,
		     (unsigned long long)sp->len, strerror(-ret));
		return;
	}
	atomic_fetch_add(&s->replay_bytes, sp->len);
	atomic_fetch_add(&s->replay_pages,
			 space_replay(sp->sp, sp->off, sp->len, buf, slot));
}

/*
 * replay_run() - push thread @k's share of the replay: spans in source
 * order, taken in turn with the other push threads. The last to finish
 * notes the end. Context: push thread @k, install slot @slot.
 */
void replay_run(struct session *s, unsigned int k, unsigned int slot)
{
	struct replay *rp = s->replay;
	size_t i;

	if (!rp)
		return;
	while (!atomic_load(&s->stop) &&
	       (i = atomic_fetch_add(&rp->next, 1)) < rp->nr)
		if (!atomic_load(&rp->spans[i].sp->dead))
			span_replay(s, &rp->spans[i], rp->bufs[k], slot);
	if (atomic_fetch_sub(&rp->running, 1) != 1)
		return;
	atomic_store(&s->replay_end_ns, now_ns());
	dlog(1, "%s: working set replayed: %llu pages installed, %llu KiB "
		"read in %llu ms", s->o.name,
	     (unsigned long long)atomic_load(&s->replay_pages),
	     (unsigned long long)atomic_load(&s->replay_bytes) >> 10,
	     (unsigned long long)(atomic_load(&s->replay_end_ns) -
				  atomic_load(&s->replay_start_ns)) /
		     1000000);
}

void replay_free(struct session *s)
{
	if (s->replay)
		replay_destroy(s->replay);
	s->replay = NULL;
}
