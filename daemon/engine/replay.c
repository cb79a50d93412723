// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * replay.c - a session's working-set replay (faultd-working-set(5)): the
 * pages a restore like this one faulted before, loaded before the push.
 *
 * The set is read and checked whole, then matched to the session's spaces
 * (the space's id, its source's id, size and page size): a space of the
 * set that the session does not have is left out, a set none of whose
 * spaces it has is not used - logged both, never applied to another
 * source. A recording session serves its faults a page at a time (no
 * fault-around: a page installed around another's fault would never fault,
 * and would not be in the set), so a set is the pages the restore touched;
 * a replay installs those, and a restore that touches the same pages
 * faults on none of them. A space's replay is wset_plan()'s, as the
 * library's: runs of consecutive pages in source order, runs less than
 * WSET_READ_GAP apart read with one read of at most WSET_READ_MAX bytes
 * (reading a gap costs less than another read; it is not installed): the
 * reads are made in source order, each one large (an image reads through
 * io_uring, 64 KiB chunks in flight), the push threads taking them in
 * turn, so two are read at once, and the one after those is hinted to the
 * source (source_willneed()): a disk reads ahead of the replay. A run is
 * installed with UFFDIO_COPY and DONTWAKE, pending pages only, and woken
 * with one UFFDIO_WAKE per range it touches (space_replay()); a page the
 * source says is zero gets what its fault got, the zero window around it
 * (UFFDIO_ZEROPAGE), since the pages in that window never faulted.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_int.h"

/* A read: source [off, off + len) of a space, spans [first, end) of it. */
struct span {
	struct space *sp;
	uint64_t off, len;
	size_t first, end;	/* in replay->runs */
};

struct replay {
	struct span *spans;	/* the reads, in source order per space */
	size_t nr, cap;
	struct wset_span *runs;	/* what the reads install */
	size_t nr_runs;
	uint64_t pages;		/* of the set that are used */
	atomic_size_t next;	/* the next span to take */
	atomic_uint running;	/* push threads still replaying */
	char *bufs[PUSHERS];	/* WSET_READ_MAX each */
};

/* Append read @k of plan @p, of space @sp, whose runs start at @base. */
static int span_add(struct replay *rp, struct space *sp,
		    const struct wset_plan *p, size_t k, size_t base)
{
	struct wset_span rd = wset_plan_read(p, k);

	if (rp->nr == rp->cap) {
		size_t cap = rp->cap ? 2 * rp->cap : 256;
		struct span *v = realloc(rp->spans, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		rp->spans = v;
		rp->cap = cap;
	}
	rp->spans[rp->nr++] = (struct span){ sp, rd.off, rd.len,
					     base + p->reads[k],
					     base + p->reads[k + 1] };
	return 0;
}

/* Append runs @w (n) to the replay's. */
static int runs_add(struct replay *rp, const struct wset_span *w, size_t n)
{
	struct wset_span *v = realloc(rp->runs,
				      (rp->nr_runs + n + 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	memcpy(v + rp->nr_runs, w, n * sizeof(*w));
	rp->runs = v;
	rp->nr_runs += n;
	return 0;
}

/* The runs and reads of set space @k (wset_plan()), for @sp. */
static int space_windows(struct replay *rp, const struct wset *ws,
			 uint32_t k, struct space *sp)
{
	struct wset_plan p;
	size_t base = rp->nr_runs;
	int ret = wset_plan(ws, k, &p);

	if (!ret)
		ret = runs_add(rp, p.runs, p.nr_runs);
	for (size_t i = 0; !ret && i < p.nr_reads; i++)
		ret = span_add(rp, sp, &p, i, base);
	for (uint64_t i = 0; i < ws->nr; i++)
		rp->pages += ws->e[i].space == k;
	wset_plan_free(&p);
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
			dlog(LOG_WARNING, "%s: working set: space %llu is not one of "
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

/* Keep the entries of a set space the session has, skip the others. */
static enum wset_use replay_use(const struct wset_space *d, void *arg)
{
	return space_of(arg, d) ? WSET_KEEP : WSET_SKIP;
}

/* The set, with the entries of the session's spaces only: bounded by
 * their sources, not by what the file claims. */
static int replay_load(struct session *s, struct wset *ws, const char **why)
{
	const struct wset_filter f = { replay_use, s };

	if (s->o.wset_fd > 0)
		return wset_read_fd(s->o.wset_fd, &f, ws, why);
	return wset_load(s->o.wset_path, &f, ws, why);
}

static int replay_bufs(struct replay *rp)
{
	for (unsigned int k = 0; k < PUSHERS; k++) {
		rp->bufs[k] = aligned_alloc(4096, WSET_READ_MAX);
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
	free(rp->runs);
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
		dlog(LOG_WARNING, "%s: working set %s: %s (%s): not used", s->o.name,
		     name, why, strerror(-ret));
		return;
	}
	rp = calloc(1, sizeof(*rp));
	ret = rp ? replay_match(s, rp, &ws, &used) : -ENOMEM;
	wset_free(&ws);
	if (!ret && !used)
		dlog(LOG_WARNING, "%s: working set %s: a set of another source: not "
			"used", s->o.name, name);
	if (!ret && used)
		ret = replay_bufs(rp);
	if (ret)
		dlog(LOG_WARNING, "%s: working set %s: %s: not used", s->o.name, name,
		     strerror(-ret));
	if (ret || !used) {
		if (rp)
			replay_destroy(rp);
		return;
	}
	atomic_init(&rp->running, PUSHERS);
	atomic_store(&s->replay_start_ns, now_ns());
	dlog(LOG_INFO, "%s: working set %s: %llu pages, %zu reads", s->o.name, name,
	     (unsigned long long)rp->pages, rp->nr);
	s->replay = rp;
}

/* replay_check()'s filter: a set space the front end does not know
 * refuses the set, and says why. */
struct known_filter {
	replay_known_fn known;
	void *arg;
	char *why;
	size_t why_len;
	bool refused;
};

static enum wset_use known_use(const struct wset_space *d, void *arg)
{
	struct known_filter *k = arg;

	if (k->known(d, k->arg, k->why, k->why_len))
		return WSET_KEEP;
	k->refused = true;
	return WSET_REFUSE;
}

/*
 * replay_check() - is the set at @path whole, and is every space of it
 * one the front end @known()s? A front end checks a set it is given
 * before it serves anything, so that a set of another source is refused
 * up front and said so (the sessions load it again, and match it again:
 * the file may change meanwhile). The spaces are checked before any
 * entry is read, and the entries bounded by the known sources' pages.
 * Returns 0, or -errno with *why: the set's fault (wset_load()), or
 * -EXDEV and what @known said. Context: any thread.
 */
int replay_check(const char *path, replay_known_fn known, void *arg,
		 char *why, size_t why_len)
{
	struct known_filter k = { known, arg, why, why_len, false };
	const struct wset_filter f = { known_use, &k };
	const char *bad = "out of memory";
	struct wset ws;
	int ret = wset_load(path, &f, &ws, &bad);

	if (ret && !k.refused)
		snprintf(why, why_len, "%s (%s)", bad, strerror(-ret));
	if (!ret)
		wset_free(&ws);
	return ret;
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

/* Read one span and install its runs. */
static void span_replay(struct session *s, struct replay *rp,
			const struct span *sp, char *buf, unsigned int slot)
{
	int ret = space_read(sp->sp, sp->off, sp->len, buf, 0);
	uint64_t pages = 0;

	if (ret) {
		dlog(LOG_INFO, "%s: working set: source [%#llx, +%#llx): %s: left to "
			"the faults", s->o.name, (unsigned long long)sp->off,
		     (unsigned long long)sp->len, strerror(-ret));
		return;
	}
	atomic_fetch_add(&s->replay_bytes, sp->len);
	for (size_t k = sp->first; k < sp->end; k++)
		pages += space_replay(sp->sp, rp->runs[k].off, rp->runs[k].len,
				      buf + (rp->runs[k].off - sp->off), slot);
	atomic_fetch_add(&s->replay_pages, pages);
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
	       (i = atomic_fetch_add(&rp->next, 1)) < rp->nr) {
		/* The source reads the read after the next while we take
		 * this one (the other push thread has the next). */
		if (i + PUSHERS < rp->nr)
			source_willneed(rp->spans[i + PUSHERS].sp->src,
					rp->spans[i + PUSHERS].off,
					rp->spans[i + PUSHERS].len);
		if (!atomic_load(&rp->spans[i].sp->dead))
			span_replay(s, rp, &rp->spans[i], rp->bufs[k], slot);
	}
	if (atomic_fetch_sub(&rp->running, 1) != 1)
		return;
	atomic_store(&s->replay_end_ns, now_ns());
	pthread_cond_broadcast(&s->push_cond); /* replay_busy() waiters */
	dlog(LOG_INFO, "%s: working set replayed: %llu pages installed, %llu KiB "
		"read in %llu ms", s->o.name,
	     (unsigned long long)atomic_load(&s->replay_pages),
	     (unsigned long long)atomic_load(&s->replay_bytes) >> 10,
	     (unsigned long long)(atomic_load(&s->replay_end_ns) -
				  atomic_load(&s->replay_start_ns)) /
		     1000000);
}

/*
 * replay_busy() - is a push thread still replaying @s's set? The push
 * waits for the whole set: a push thread done with its share would
 * otherwise push pages of the other's share before it replays them.
 */
bool replay_busy(const struct session *s)
{
	return s->replay && atomic_load(&s->replay->running);
}

void replay_free(struct session *s)
{
	if (s->replay)
		replay_destroy(s->replay);
	s->replay = NULL;
}
