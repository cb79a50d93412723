// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * persist.c - a session's state where a restarted daemon finds it.
 *
 * Every space keeps its tracked pages (the done and zero bitmaps) in a
 * memfd mapped shared, so a bit the daemon sets is in the memfd at once,
 * and journals its range table there after every change: the table is
 * written to the slot not in use, then one 64-bit store switches slots,
 * so a daemon killed at any instant leaves one whole table. Every session
 * has a record (another memfd): its front end, its sources' identities,
 * what each of its descriptors is, and the front end's own state. The
 * record, the spaces' memfds, their userfaultfds and pidfds, the sources'
 * descriptors and the peer's connection form the session's entry in the
 * keeper or the fd store (keep.h), put again whenever a space is added.
 *
 * A restarted daemon fetches the entries, rebuilds each session from its
 * record (the front end re-makes its side), maps the spaces' memfds as
 * they are, wakes every range (a dead daemon may have read faults it never
 * answered: woken, their threads fault again) and serves on: pages in stay
 * in, pending faults are served first.
 *
 * What a crash can lose: an event read by the dead daemon but not yet
 * applied (a window of a few instructions after the read), and for a
 * FORK, the child's userfaultfd not yet put. faultd(8) says so.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"
#include "persist.h"

#define KSTATE_VERSION 1
#define KSPACE_MAGIC "FDSPACE1"
#define KSESS_MAGIC "FDSESSN1"
#define SLOT_MIN 64

struct keep *daemon_keep;
static pthread_mutex_t keep_lock = PTHREAD_MUTEX_INITIALIZER;

/* The head of a space's memfd. The fixed part (head, segments, bitmaps)
 * is mapped; the range slots after it are written with pwrite(). */
struct kspace {
	char magic[8];
	uint32_t version;
	uint32_t page_size;
	uint64_t id;
	int32_t pid;
	uint32_t src;		/* the session's source it reads */
	uint64_t nr_pages, nseg, words;
	uint64_t seg_off, done_off, zero_off, fixed_len;
	uint64_t slot_off[2], slot_cap[2];
	_Atomic uint64_t ranges; /* bit 63: the slot in use; below: count */
	/* Installs under way, by source offset: a daemon killed between an
	 * install and marking its pages done leaves them here, and the next
	 * one installs them again (what is in is found in: EEXIST). */
	struct {
		_Atomic uint64_t off, len;
	} inflight[INFLIGHT_SLOTS];
};

static size_t page_up(size_t n)
{
	return (n + 4095) & ~(size_t)4095;
}

/* ------------------------------------------------------------------------
 * A space's memfd.
 */

static int state_map(struct space *sp, size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED,
		       sp->state_fd, 0);

	if (p == MAP_FAILED)
		return -errno;
	sp->state = p;
	sp->state_len = len;
	sp->done = (_Atomic uint64_t *)((char *)p + sp->state->done_off);
	sp->zero = (_Atomic uint64_t *)((char *)p + sp->state->zero_off);
	return 0;
}

/*
 * state_create() - the memfd of @sp (its segments made): the bitmaps all
 * clear, the ranges journaled. Context: before the space is served.
 */
int state_create(struct space *sp)
{
	size_t words = bitmap_words(sp->nr_pages) + 1;
	struct kspace h = {
		.version = KSTATE_VERSION,
		.page_size = (uint32_t)sp->page_size,
		.id = sp->id,
		.pid = sp->pid,
		.src = sp->src_index,
		.nr_pages = sp->nr_pages,
		.nseg = sp->nseg,
		.words = words,
		.seg_off = page_up(sizeof(h)),
	};
	int ret;

	memcpy(h.magic, KSPACE_MAGIC, sizeof(h.magic));
	h.done_off = page_up(h.seg_off + sp->nseg * sizeof(sp->seg[0]));
	h.zero_off = h.done_off + page_up(words * 8);
	h.fixed_len = h.zero_off + page_up(words * 8);
	sp->state_fd = memfd_create("faultd-space", MFD_CLOEXEC);
	if (sp->state_fd < 0)
		return -errno;
	if (ftruncate(sp->state_fd, (off_t)h.fixed_len) < 0 ||
	    pwrite(sp->state_fd, &h, sizeof(h), 0) != sizeof(h) ||
	    pwrite(sp->state_fd, sp->seg, sp->nseg * sizeof(sp->seg[0]),
		   (off_t)h.seg_off) != (ssize_t)(sp->nseg * sizeof(sp->seg[0])))
		return -errno;
	ret = state_map(sp, h.fixed_len);
	return ret ? ret : state_journal(sp);
}

/*
 * state_journal() - write @sp's range table to the slot not in use and
 * switch to it. Returns 0 or -errno (the memfd could not grow: the old
 * table stays, and a restart would serve by it).
 * Context: sp->lock held for writing, or the space not served yet.
 */
int state_journal(struct space *sp)
{
	struct kspace *h = sp->state;
	unsigned int slot = !(atomic_load(&h->ranges) >> 63);
	size_t bytes = sp->nr * sizeof(sp->r[0]);

	if (h->slot_cap[slot] < sp->nr) {
		struct stat st;
		uint64_t cap = sp->nr * 2 > SLOT_MIN ? sp->nr * 2 : SLOT_MIN;

		if (fstat(sp->state_fd, &st) < 0 ||
		    ftruncate(sp->state_fd, st.st_size + (off_t)page_up(
				      cap * sizeof(sp->r[0]))) < 0)
			return -errno;
		h->slot_off[slot] = (uint64_t)st.st_size;
		h->slot_cap[slot] = cap;
	}
	if (pwrite(sp->state_fd, sp->r, bytes, (off_t)h->slot_off[slot]) !=
	    (ssize_t)bytes)
		return -EIO;
	atomic_store(&h->ranges, ((uint64_t)slot << 63) | sp->nr);
	return 0;
}

/* Is the head of a space's memfd of @len bytes sane? */
static bool head_ok(const struct kspace *h, uint64_t len)
{
	uint64_t n = atomic_load(&h->ranges) & ~(1ull << 63);
	unsigned int slot = (unsigned int)(atomic_load(&h->ranges) >> 63);

	return !memcmp(h->magic, KSPACE_MAGIC, sizeof(h->magic)) &&
	       h->version == KSTATE_VERSION && h->page_size >= 4096 &&
	       !(h->page_size & (h->page_size - 1)) &&
	       h->words == bitmap_words(h->nr_pages) + 1 &&
	       h->seg_off + h->nseg * sizeof(struct sseg) <= h->done_off &&
	       h->done_off + h->words * 8 <= h->zero_off &&
	       h->zero_off + h->words * 8 <= h->fixed_len &&
	       h->fixed_len <= len && n <= h->slot_cap[slot] &&
	       h->slot_off[slot] + n * sizeof(struct srange) <= len;
}

/* The segments and the table in use, read back. */
static int state_read(struct space *sp)
{
	struct kspace *h = sp->state;
	uint64_t r = atomic_load(&h->ranges);
	size_t n = (size_t)(r & ~(1ull << 63));

	sp->nseg = h->nseg;
	sp->nr_pages = h->nr_pages;
	sp->nr = n;
	sp->cap = n ? n : 1;
	sp->seg = malloc((sp->nseg ? sp->nseg : 1) * sizeof(*sp->seg));
	sp->r = malloc(sp->cap * sizeof(*sp->r));
	if (!sp->seg || !sp->r)
		return -ENOMEM;
	if (pread(sp->state_fd, sp->seg, sp->nseg * sizeof(*sp->seg),
		  (off_t)h->seg_off) != (ssize_t)(sp->nseg * sizeof(*sp->seg)) ||
	    pread(sp->state_fd, sp->r, n * sizeof(*sp->r),
		  (off_t)h->slot_off[r >> 63]) != (ssize_t)(n * sizeof(*sp->r)))
		return -EIO;
	return 0;
}

/*
 * state_restore() - the space whose memfd is @fd (taken over), as the
 * daemon before left it, for @uffd (taken over) of @s reading @src.
 */
int state_restore(struct session *s, int fd, int uffd,
		  struct source *const *srcs, size_t nr_srcs,
		  struct space **spp)
{
	struct kspace h;
	struct stat st;
	struct space *sp;
	int ret;

	if (fstat(fd, &st) < 0 || pread(fd, &h, sizeof(h), 0) != sizeof(h) ||
	    !head_ok(&h, (uint64_t)st.st_size) || h.src >= nr_srcs) {
		close(fd);
		close(uffd);
		return -EBADMSG;
	}
	sp = space_alloc(s, srcs[h.src], h.page_size);
	if (!sp) {
		close(fd);
		close(uffd);
		return -ENOMEM;
	}
	sp->state_fd = fd;
	sp->uffd = uffd;
	sp->id = h.id;
	sp->pid = h.pid;
	sp->src_index = h.src;
	ret = state_map(sp, h.fixed_len);
	if (!ret)
		ret = state_read(sp);
	if (ret) {
		space_free(sp);
		return ret;
	}
	space_restored(sp);
	*spp = sp;
	return 0;
}

/*
 * state_inflight() - install slot @slot of @sp is about to install source
 * [off, off + len), or (len 0) is done with it.
 */
void state_inflight(struct space *sp, unsigned int slot, uint64_t off,
		    uint64_t len)
{
	if (!sp->state || slot >= INFLIGHT_SLOTS)
		return;
	if (len)
		atomic_store(&sp->state->inflight[slot].off, off);
	atomic_store(&sp->state->inflight[slot].len, len);
}

/* The installs a daemon before left under way: @max at most. */
size_t state_inflight_get(const struct space *sp, uint64_t *off,
			  uint64_t *len, size_t max)
{
	size_t n = 0;

	for (unsigned int i = 0; sp->state && i < INFLIGHT_SLOTS && n < max;
	     i++) {
		len[n] = atomic_load(&sp->state->inflight[i].len);
		off[n] = atomic_load(&sp->state->inflight[i].off);
		n += len[n] != 0;
	}
	return n;
}

void state_free(struct space *sp)
{
	if (sp->state)
		munmap(sp->state, sp->state_len);
	if (sp->state_fd >= 0)
		close(sp->state_fd);
	sp->state = NULL;
	sp->state_fd = -1;
}

/* ------------------------------------------------------------------------
 * A session's record and entry.
 */

enum kfd_role {
	R_RECORD = 1,	/* the record itself: always descriptor 0 */
	R_PEER,		/* the front end's connection */
	R_SOURCE,	/* index: the session's source */
	R_SPACE,	/* index: the space's memfd */
	R_UFFD,		/* index: the space's userfaultfd */
	R_PIDFD,	/* index: the space's process */
};

struct kfd {
	uint16_t role;
	uint16_t index;
};

/* What a source was when the session began: a restart checks it. */
struct ksrc {
	uint64_t dev, ino, size, mtime_ns;
};

#define KSRC_MAX 64
#define KBLOB_MAX 8192

struct ksession {
	char magic[8];
	uint32_t version;
	uint32_t fe;		/* enum fe_kind_id */
	uint64_t id;
	uint32_t uid;
	int32_t pid;
	uint64_t started_ns;	/* CLOCK_MONOTONIC: the machine's, not ours */
	struct session_opts_rec o;
	uint32_t nr_fds, nr_srcs, blob_len, reserved;
	struct kfd fd[KEEP_MAX_FDS];
	struct ksrc src[KSRC_MAX];
	uint8_t blob[KBLOB_MAX];
};

static const struct fe_kind *fe_kinds[FE_NR];

/* A front end says how its sessions are kept and adopted. */
void fe_kind_register(const struct fe_kind *k)
{
	fe_kinds[k->id] = k;
}

static void src_identity(int fd, struct ksrc *k)
{
	struct stat st;

	memset(k, 0, sizeof(*k));
	if (fd > 0 && !fstat(fd, &st))
		*k = (struct ksrc){ (uint64_t)st.st_dev, (uint64_t)st.st_ino,
				    (uint64_t)st.st_size,
				    (uint64_t)st.st_mtim.tv_sec * 1000000000ull +
					    (uint64_t)st.st_mtim.tv_nsec };
}

static void add_fd(struct ksession *r, int *fds, int fd, enum kfd_role role,
		   unsigned int index)
{
	if (fd <= 0 || r->nr_fds >= KEEP_MAX_FDS)
		return;
	r->fd[r->nr_fds] = (struct kfd){ (uint16_t)role, (uint16_t)index };
	fds[r->nr_fds++] = fd;
}

/* The record of @s and the descriptors of its entry. Context: spaces_lock. */
static int record_make(struct session *s, struct ksession *r, int *fds,
		       uint64_t *watch)
{
	unsigned int i = 0;

	memset(r, 0, sizeof(*r));
	memcpy(r->magic, KSESS_MAGIC, sizeof(r->magic));
	r->version = KSTATE_VERSION;
	r->fe = s->kind->id;
	r->id = s->id;
	r->uid = s->uid;
	r->pid = s->pid;
	r->started_ns = s->started_ns;
	r->o = (struct session_opts_rec){ s->o.push, s->o.push_after_first,
					  s->nr_handlers, s->o.push_fair,
					  s->o.around };
	if (s->nr_srcs > KSRC_MAX)
		return -E2BIG;
	add_fd(r, fds, s->record_fd, R_RECORD, 0);
	add_fd(r, fds, s->peer_fd, R_PEER, 0);
	r->nr_srcs = (uint32_t)s->nr_srcs;
	for (size_t k = 0; k < s->nr_srcs; k++) {
		add_fd(r, fds, s->srcs[k]->keep_fd, R_SOURCE, (unsigned int)k);
		src_identity(s->srcs[k]->keep_fd, &r->src[k]);
	}
	for (struct space *sp = s->spaces; sp; sp = sp->next, i++) {
		add_fd(r, fds, sp->state_fd, R_SPACE, i);
		add_fd(r, fds, sp->uffd, R_UFFD, i);
		if (sp->pidfd > 0 && r->nr_fds < 64)
			*watch |= 1ull << r->nr_fds;
		add_fd(r, fds, sp->pidfd, R_PIDFD, i);
	}
	if (r->nr_fds == KEEP_MAX_FDS)
		return -E2BIG;
	r->blob_len = s->kind->save
			      ? (uint32_t)s->kind->save(s, r->blob, KBLOB_MAX)
			      : 0;
	return 0;
}

/* The put ended with @ret: keep the new record, or go back to the old. */
static void record_settle(struct session *s, int ret)
{
	int drop = ret ? s->record_fd : s->old_record_fd;

	if (ret)
		s->record_fd = s->old_record_fd;
	s->old_record_fd = -1;
	if (drop >= 0)
		close(drop);
}

/*
 * A new record of @s, in a memfd of its own: the entry the keeper holds
 * keeps its record as it was until the new entry replaces it, so that a
 * daemon killed in between leaves an entry whose record matches its
 * descriptors. (One record rewritten in place, as it was, could say a
 * descriptor more or less than the old entry had: the restore it held
 * was lost, "cannot adopt it: Bad message".) record_settle() ends it,
 * whatever the result. Context: spaces_lock (read), keep_lock.
 */
static int record_swap(struct session *s, struct ksession *r, int *fds,
		       uint64_t *watch)
{
	int fd = memfd_create("faultd-session", MFD_CLOEXEC), ret;

	s->old_record_fd = s->record_fd;
	s->record_fd = fd;
	if (fd < 0)
		return -errno;
	ret = record_make(s, r, fds, watch);
	if (!ret && pwrite(fd, r, sizeof(*r), 0) != sizeof(*r))
		ret = -errno;
	return ret;
}

/*
 * session_persist() - put @s's entry (again) where it outlives the daemon.
 * Returns 0, or -errno (logged: a restart would lose the session; it is
 * served on all the same). Context: any thread but a handler's.
 */
int session_persist(struct session *s)
{
	struct ksession *r;
	int *fds;
	uint64_t watch = 0;
	char name[KEEP_NAME_MAX];
	int ret;

	if (!daemon_keep || !s->kind)
		return 0;
	r = malloc(sizeof(*r));
	fds = malloc(KEEP_MAX_FDS * sizeof(int));
	ret = r && fds ? 0 : -ENOMEM;
	snprintf(name, sizeof(name), "s%llu", (unsigned long long)s->id);
	pthread_rwlock_rdlock(&s->spaces_lock);
	pthread_mutex_lock(&keep_lock);
	if (!ret)
		ret = record_swap(s, r, fds, &watch);
	if (!ret)
		ret = keep_put(daemon_keep, name, fds, r->nr_fds,
			       s->kind->takeover ? KEEP_F_TAKEOVER : 0, watch);
	record_settle(s, ret);
	pthread_mutex_unlock(&keep_lock);
	pthread_rwlock_unlock(&s->spaces_lock);
	if (ret)
		dlog(LOG_WARNING, "%s: cannot keep it outside the daemon: %s: a restart "
			"would lose it", s->o.name, strerror(-ret));
	else
		s->kept = true;
	free(fds);
	free(r);
	return ret;
}

/*
 * session_unpersist() - the session ended for good: its entry goes (once;
 * a second call does nothing). The keeper reads the drop even when the
 * daemon dies right after sending it, so a session that is dropped before
 * it says it ended leaves nothing held when the daemon is killed after.
 */
void session_unpersist(struct session *s)
{
	char name[KEEP_NAME_MAX];

	if (!daemon_keep || !s->kind || atomic_exchange(&s->unkept, true))
		return;
	snprintf(name, sizeof(name), "s%llu", (unsigned long long)s->id);
	pthread_mutex_lock(&keep_lock);
	keep_drop(daemon_keep, name);
	pthread_mutex_unlock(&keep_lock);
}

/* ------------------------------------------------------------------------
 * Adopting what a daemon before left.
 */

static int role_fd(const struct keep_entry *e, const struct ksession *r,
		   enum kfd_role role, unsigned int index)
{
	for (unsigned int i = 0; i < r->nr_fds && i < e->nfds; i++)
		if (r->fd[i].role == role && r->fd[i].index == index)
			return e->fds[i];
	return -1;
}

/* Take @fd out of @e, so that closing what is left spares it. */
static int take_fd(struct keep_entry *e, int fd)
{
	for (unsigned int i = 0; i < e->nfds; i++)
		if (e->fds[i] == fd)
			e->fds[i] = -1;
	return fd;
}

static int record_read(const struct keep_entry *e, struct ksession *r)
{
	if (!e->nfds || pread(e->fds[0], r, sizeof(*r), 0) != sizeof(*r) ||
	    memcmp(r->magic, KSESS_MAGIC, sizeof(r->magic)))
		return -EBADMSG;
	if (r->version != KSTATE_VERSION)
		return -EPROTONOSUPPORT;
	if (r->fe >= FE_NR || !fe_kinds[r->fe] || r->nr_fds != e->nfds ||
	    r->nr_srcs > KSRC_MAX || r->blob_len > KBLOB_MAX)
		return -EBADMSG;
	return 0;
}

/* A source that is not what it was: every read fails, never old data. */
static void sources_check(struct session *s, const struct ksession *r)
{
	for (size_t k = 0; k < s->nr_srcs && k < r->nr_srcs; k++) {
		struct ksrc now;

		src_identity(s->srcs[k]->keep_fd, &now);
		if (!memcmp(&now, &r->src[k], sizeof(now)))
			continue;
		dlog(LOG_WARNING, "%s: its source %zu changed since the session began "
			"(size or time): its pages left are poisoned, not "
			"served", s->o.name, k);
		s->srcs[k]->stale = true;
	}
}

/* The spaces of the record, restored and added. */
static int spaces_adopt(struct session *s, const struct ksession *r,
			struct keep_entry *e)
{
	for (unsigned int i = 0;; i++) {
		int st = role_fd(e, r, R_SPACE, i), uffd = role_fd(e, r, R_UFFD, i);
		int pidfd = role_fd(e, r, R_PIDFD, i);
		struct space *sp;
		int ret;

		if (st < 0)
			return 0;
		if (uffd < 0)
			return -EBADMSG;
		ret = state_restore(s, take_fd(e, st), take_fd(e, uffd),
				    s->srcs, s->nr_srcs, &sp);
		if (ret)
			return ret;
		if (pidfd >= 0)
			sp->pidfd = take_fd(e, pidfd);
		ret = session_adopt_space(s, sp);
		if (ret) {
			space_free(sp);
			return ret;
		}
	}
}

/* Wake every range: a dead daemon may have read faults it left asleep. */
static void spaces_wake(struct session *s)
{
	for (struct space *sp = s->spaces; sp; sp = sp->next) {
		space_recheck_inflight(sp);
		for (size_t i = 0; i < sp->nr; i++)
			uffd_wake(sp->uffd, sp->r[i].start, sp->r[i].len);
	}
}

static int adopt(struct session **sp, struct keep_entry *e,
		 const struct ksession *r)
{
	const struct fe_kind *k = fe_kinds[r->fe];
	struct session_opts o = { .push = r->o.push,
				  .push_after_first = r->o.push_after_first,
				  .push_fair = r->o.push_fair,
				  .handlers = r->o.handlers,
				  .around = r->o.around };
	int srcs[KSRC_MAX];
	int peer = role_fd(e, r, R_PEER, 0), ret;
	struct session *s;

	for (unsigned int i = 0; i < r->nr_srcs; i++) {
		srcs[i] = role_fd(e, r, R_SOURCE, i);
		if (srcs[i] >= 0)
			take_fd(e, srcs[i]);
	}
	ret = session_create(&o, NULL, NULL, &s);
	if (ret)
		goto close_srcs;
	session_set_identity(s, r->id, r->uid, r->pid, r->started_ns);
	s->kind = k;
	s->record_fd = take_fd(e, e->fds[0]);
	ret = k->adopt(s, r->blob, r->blob_len, peer >= 0 ? take_fd(e, peer)
							  : -1,
		       srcs, r->nr_srcs);
	if (!ret)
		sources_check(s, r);
	if (!ret)
		ret = spaces_adopt(s, r, e);
	if (ret) {
		session_free(s);
		return ret;
	}
	spaces_wake(s);
	*sp = s;
	return 0;
close_srcs:
	for (unsigned int i = 0; i < r->nr_srcs; i++)
		if (srcs[i] >= 0)
			close(srcs[i]);
	return ret;
}

/*
 * session_adopt_entry() - the session a daemon before this one left in
 * entry @e, ready to run; its descriptors are taken or closed. Returns
 * 0 or -errno (the entry is not a session this daemon can serve; it is
 * logged).
 */
int session_adopt_entry(struct keep_entry *e, struct session **sp)
{
	struct ksession *r = malloc(sizeof(*r));
	int ret = r ? record_read(e, r) : -ENOMEM;

	if (!ret)
		ret = adopt(sp, e, r);
	if (ret)
		dlog(LOG_WARNING, "kept entry %s: cannot adopt it: %s", e->name,
		     ret == -EPROTONOSUPPORT
			     ? "kept by another version of faultd"
			     : strerror(-ret));
	for (unsigned int i = 0; i < e->nfds; i++)
		if (e->fds[i] >= 0)
			close(e->fds[i]);
	free(r);
	return ret;
}
