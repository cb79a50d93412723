// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * record.c - a session's kept entry: put where a restarted daemon finds
 * it (keep.h), and adopted from there.
 *
 * Every session has a record, a memfd of its own written whole at every
 * put: its front end's id, the session's options, what each descriptor of
 * the entry is, each source's type with what identifies it (its type's
 * save()) and the identity of its kept file, then the front end's own
 * state. The record, the spaces' memfds (state.c), their userfaultfds and
 * pidfds, the sources' descriptors and the peer's connection form the
 * session's entry in the keeper or the fd store, put again whenever a
 * space is added.
 *
 * A restarted daemon fetches the entries (server/restart.c) and rebuilds
 * each session from its record: every source is opened again by its
 * type, the same way for every front end - one that cannot be, or whose
 * kept file changed since (size or time), is served stale, its pages
 * poisoned, never served wrong; the front end re-makes its side; the
 * spaces' memfds are mapped as they are; every range is woken (a dead
 * daemon may have read faults it never answered: woken, their threads
 * fault again) and the session is served on.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine_int.h"
#include "persist.h"

#define KREC_VERSION 2
#define KSESS_MAGIC "FDSESSN2"
#define KSRC_BLOB_MAX 4096	/* what one source's save() may write */
#define KFE_BLOB_MAX 65536	/* what the front end's save() may write */
#define KREC_MAX (64u << 20)	/* a record read back is no larger */

struct keep *daemon_keep;
static pthread_mutex_t keep_lock = PTHREAD_MUTEX_INITIALIZER;

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

/* The record's head; the sources (struct ksrc each, then its blob padded
 * to 8 bytes) and the front end's blob follow it. */
struct khead {
	char magic[8];
	uint32_t version;
	uint16_t front;		/* session_ops.front_id */
	uint16_t reserved;
	uint64_t id;
	uint32_t uid;
	int32_t pid;
	uint64_t started_ns;	/* CLOCK_MONOTONIC: the machine's, not ours */
	struct session_opts_rec o;
	uint32_t nr_fds, nr_srcs;
	uint32_t srcs_len, blob_len; /* bytes of each part after the head */
	struct kfd fd[KEEP_MAX_FDS];
};

/* One source of the record. */
struct ksrc {
	uint16_t type;		/* source_type.id */
	uint16_t blob_len;	/* what its save() wrote, after this */
	uint32_t reserved;
	uint64_t size, page_size;
	/* Its kept file when the session began: a restart checks it. */
	uint64_t dev, ino, fsize, mtime_ns;
};

/* A record as it is built, or as it was read back. */
struct krec {
	struct khead h;
	char *body;		/* sources, then the front end's blob */
	size_t len, cap;
};

static size_t pad8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

/* ------------------------------------------------------------------------
 * Putting the entry.
 */

/* Room for @n more bytes of body, zeroed. */
static void *rec_grow(struct krec *r, size_t n)
{
	char *p;

	if (r->len + n > r->cap) {
		size_t cap = r->cap ? r->cap : 4096;

		while (cap < r->len + n)
			cap *= 2;
		p = realloc(r->body, cap);
		if (!p)
			return NULL;
		r->body = p;
		r->cap = cap;
	}
	p = r->body + r->len;
	memset(p, 0, n);
	r->len += n;
	return p;
}

static void file_identity(int fd, struct ksrc *k)
{
	struct stat st;

	k->dev = k->ino = k->fsize = k->mtime_ns = 0;
	if (fd > 0 && !fstat(fd, &st)) {
		k->dev = (uint64_t)st.st_dev;
		k->ino = (uint64_t)st.st_ino;
		k->fsize = (uint64_t)st.st_size;
		k->mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull +
			      (uint64_t)st.st_mtim.tv_nsec;
	}
}

/* Source @src into the record: its type, identity, what save() says. */
static int rec_source(struct krec *r, struct source *src)
{
	char blob[KSRC_BLOB_MAX];
	const struct source_type *t = src->ops->type;
	ssize_t n = t ? t->save(src, blob, sizeof(blob)) : -EOPNOTSUPP;
	struct ksrc *k;

	if (n < 0)
		return (int)n;
	k = rec_grow(r, sizeof(*k) + pad8((size_t)n));
	if (!k)
		return -ENOMEM;
	*k = (struct ksrc){ .type = t->id, .blob_len = (uint16_t)n,
			    .size = src->size, .page_size = src->page_size };
	file_identity(src->keep_fd, k);
	memcpy(k + 1, blob, (size_t)n);
	return 0;
}

static void add_fd(struct khead *h, int *fds, int fd, enum kfd_role role,
		   unsigned int index)
{
	if (fd <= 0 || h->nr_fds >= KEEP_MAX_FDS)
		return;
	h->fd[h->nr_fds] = (struct kfd){ (uint16_t)role, (uint16_t)index };
	fds[h->nr_fds++] = fd;
}

/* The spaces' descriptors, and which of them the keeper watches. */
static void rec_spaces(struct session *s, struct khead *h, int *fds,
		       uint64_t *watch)
{
	unsigned int i = 0;

	for (struct space *sp = s->spaces; sp; sp = sp->next, i++) {
		add_fd(h, fds, sp->state_fd, R_SPACE, i);
		add_fd(h, fds, sp->uffd, R_UFFD, i);
		if (sp->pidfd > 0 && h->nr_fds < 64)
			*watch |= 1ull << h->nr_fds;
		add_fd(h, fds, sp->pidfd, R_PIDFD, i);
	}
}

/* The front end's own state, at the end of the record. */
static int rec_front(struct krec *r, struct session *s)
{
	char *blob = s->fe->save ? rec_grow(r, KFE_BLOB_MAX) : NULL;
	size_t n;

	if (!s->fe->save)
		return 0;
	if (!blob)
		return -ENOMEM;
	n = s->fe->save(s, blob, KFE_BLOB_MAX);
	r->len -= KFE_BLOB_MAX - n;
	r->h.blob_len = (uint32_t)n;
	return 0;
}

/* The record of @s and the descriptors of its entry. Context: spaces_lock. */
static int rec_make(struct session *s, struct krec *r, int *fds,
		    uint64_t *watch)
{
	struct khead *h = &r->h;
	int ret = 0;

	*h = (struct khead){ .version = KREC_VERSION, .front = s->fe->front_id,
			     .id = s->id, .uid = s->uid, .pid = s->pid,
			     .started_ns = s->started_ns };
	memcpy(h->magic, KSESS_MAGIC, sizeof(h->magic));
	h->o = (struct session_opts_rec){ s->o.push, s->o.push_after_first,
					  s->nr_handlers, s->o.push_fair,
					  s->o.around };
	add_fd(h, fds, s->record_fd, R_RECORD, 0);
	add_fd(h, fds, s->peer_fd, R_PEER, 0);
	h->nr_srcs = (uint32_t)s->nr_srcs;
	for (size_t k = 0; k < s->nr_srcs && !ret; k++) {
		add_fd(h, fds, s->srcs[k]->keep_fd, R_SOURCE, (unsigned int)k);
		ret = rec_source(r, s->srcs[k]);
	}
	h->srcs_len = (uint32_t)r->len;
	rec_spaces(s, h, fds, watch);
	if (!ret && h->nr_fds == KEEP_MAX_FDS)
		ret = -E2BIG;
	return ret ? ret : rec_front(r, s);
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

static int write_all(int fd, const void *buf, size_t len, off_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pwrite(fd, (const char *)buf + done, len - done,
				   off + (off_t)done);

		if (n < 0)
			return -errno;
		done += (size_t)n;
	}
	return 0;
}

/*
 * A new record of @s, in a memfd of its own: the entry the keeper holds
 * keeps its record as it was until the new entry replaces it, so that a
 * daemon killed in between leaves an entry whose record matches its
 * descriptors. record_settle() ends it, whatever the result.
 * Context: spaces_lock (read), keep_lock.
 */
static int record_swap(struct session *s, struct krec *r, int *fds,
		       uint64_t *watch)
{
	int fd = memfd_create("faultd-session", MFD_CLOEXEC), ret;

	s->old_record_fd = s->record_fd;
	s->record_fd = fd;
	if (fd < 0)
		return -errno;
	ret = rec_make(s, r, fds, watch);
	if (!ret)
		ret = write_all(fd, &r->h, sizeof(r->h), 0);
	if (!ret)
		ret = write_all(fd, r->body, r->len, sizeof(r->h));
	return ret;
}

static void entry_name(const struct session *s, char *name)
{
	snprintf(name, KEEP_NAME_MAX, "s%llu", (unsigned long long)s->id);
}

/*
 * session_persist() - put @s's entry (again) where it outlives the daemon.
 * Returns 0, or -errno (logged: a restart would lose the session; it is
 * served on all the same). Context: any thread but a handler's.
 */
int session_persist(struct session *s)
{
	struct krec r = { .body = NULL };
	int *fds;
	uint64_t watch = 0;
	char name[KEEP_NAME_MAX];
	int ret;

	if (!daemon_keep || !s->fe || !s->fe->front_id)
		return 0;
	fds = malloc(KEEP_MAX_FDS * sizeof(int));
	ret = fds ? 0 : -ENOMEM;
	entry_name(s, name);
	pthread_rwlock_rdlock(&s->spaces_lock);
	pthread_mutex_lock(&keep_lock);
	if (!ret)
		ret = record_swap(s, &r, fds, &watch);
	if (!ret)
		ret = keep_put(daemon_keep, name, fds, r.h.nr_fds,
			       s->takeover ? KEEP_F_TAKEOVER : 0, watch);
	record_settle(s, ret);
	pthread_mutex_unlock(&keep_lock);
	pthread_rwlock_unlock(&s->spaces_lock);
	if (ret)
		dlog(LOG_WARNING, "%s: cannot keep it outside the daemon: %s: a "
			"restart would lose it", s->o.name, strerror(-ret));
	else
		s->kept = true;
	free(fds);
	free(r.body);
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

	if (!daemon_keep || !s->fe || !s->fe->front_id ||
	    atomic_exchange(&s->unkept, true))
		return;
	entry_name(s, name);
	pthread_mutex_lock(&keep_lock);
	keep_drop(daemon_keep, name);
	pthread_mutex_unlock(&keep_lock);
}

/* ------------------------------------------------------------------------
 * Adopting what a daemon before left.
 */

static int role_fd(const struct keep_entry *e, const struct khead *h,
		   enum kfd_role role, unsigned int index)
{
	for (unsigned int i = 0; i < h->nr_fds && i < e->nfds; i++)
		if (h->fd[i].role == role && h->fd[i].index == index)
			return e->fds[i];
	return -1;
}

/* Take @fd out of @e, so that closing what is left spares it. */
static int take_fd(struct keep_entry *e, int fd)
{
	for (unsigned int i = 0; fd >= 0 && i < e->nfds; i++)
		if (e->fds[i] == fd)
			e->fds[i] = -1;
	return fd;
}

/* The record of entry @e, read back and checked as far as its frame. */
static int rec_read(const struct keep_entry *e, struct krec *r)
{
	struct khead *h = &r->h;
	struct stat st;
	size_t body;

	if (!e->nfds || fstat(e->fds[0], &st) ||
	    pread(e->fds[0], h, sizeof(*h), 0) != sizeof(*h) ||
	    memcmp(h->magic, KSESS_MAGIC, sizeof(h->magic)))
		return -EBADMSG;
	if (h->version != KREC_VERSION)
		return -EPROTONOSUPPORT;
	body = (size_t)h->srcs_len + h->blob_len;
	if (h->nr_fds != e->nfds || h->srcs_len > KREC_MAX ||
	    h->blob_len > KFE_BLOB_MAX ||
	    (uint64_t)st.st_size != sizeof(*h) + body)
		return -EBADMSG;
	r->body = malloc(body ? body : 1);
	r->len = body;
	if (!r->body)
		return -ENOMEM;
	return pread(e->fds[0], r->body, body, sizeof(*h)) == (ssize_t)body
		       ? 0
		       : -EBADMSG;
}

/* Is the file of @src what it was when its session began? */
static bool same_file(const struct source *src, const struct ksrc *k)
{
	struct ksrc now;

	file_identity(src->keep_fd, &now);
	return now.dev == k->dev && now.ino == k->ino &&
	       now.fsize == k->fsize && now.mtime_ns == k->mtime_ns;
}

/*
 * Kept source @i of @s, opened again by its type; a stale one in its
 * place if it cannot be, or changed since (logged either way).
 */
static int source_again(struct session *s, const struct ksrc *k,
			int fd, size_t i)
{
	const struct source_type *t = source_type_by_id(k->type);
	struct source *src = NULL;
	char why[256] = "no such source type in this faultd";
	int ret = t ? t->reopen(k + 1, k->blob_len, fd, &src, why,
				sizeof(why))
		    : -EPROTONOSUPPORT;

	if (!t && fd >= 0)
		close(fd);
	if (!ret && !same_file(src, k)) {
		snprintf(why, sizeof(why), "it changed since the session "
			 "began (size or time)");
		ret = -ESTALE;
		source_destroy(src);
	}
	if (ret) {
		dlog(LOG_WARNING, "%s: source %zu (%s): %s: its pages left are "
		     "poisoned, not served", s->o.name, i,
		     t ? t->name : "unknown", why);
		ret = source_stale(k->size, (size_t)k->page_size, &src);
	}
	if (!ret && (ret = session_own_source(s, src)))
		source_destroy(src);
	return ret;
}

/* Every source of the record, in its order. */
static int sources_adopt(struct session *s, const struct krec *r,
			 struct keep_entry *e)
{
	size_t off = 0;

	for (uint32_t i = 0; i < r->h.nr_srcs; i++) {
		const struct ksrc *k = (const void *)(r->body + off);
		int ret;

		if (off + sizeof(*k) > r->h.srcs_len ||
		    pad8(k->blob_len) > r->h.srcs_len - off - sizeof(*k))
			return -EBADMSG;
		off += sizeof(*k) + pad8(k->blob_len);
		ret = source_again(s, k, take_fd(e, role_fd(e, &r->h,
							     R_SOURCE, i)),
				   i);
		if (ret)
			return ret;
	}
	return 0;
}

/* The spaces of the record, restored and added. */
static int spaces_adopt(struct session *s, const struct khead *h,
			struct keep_entry *e)
{
	for (unsigned int i = 0;; i++) {
		int st = role_fd(e, h, R_SPACE, i), uffd = role_fd(e, h, R_UFFD, i);
		int pidfd = role_fd(e, h, R_PIDFD, i);
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
		 const struct krec *r, const struct session_ops *fe)
{
	const struct khead *h = &r->h;
	struct session_opts o = { .push = h->o.push,
				  .push_after_first = h->o.push_after_first,
				  .push_fair = h->o.push_fair,
				  .handlers = h->o.handlers,
				  .around = h->o.around };
	int peer = take_fd(e, role_fd(e, h, R_PEER, 0));
	struct session *s;
	int ret = session_create(&o, fe, NULL, &s);

	if (ret) {
		if (peer >= 0)
			close(peer);
		return ret;
	}
	session_set_identity(s, h->id, h->uid, h->pid, h->started_ns);
	s->record_fd = take_fd(e, e->fds[0]);
	ret = sources_adopt(s, r, e);
	if (!ret)
		ret = fe->adopt(s, r->body + h->srcs_len, h->blob_len, peer);
	else if (peer >= 0)
		close(peer);
	if (!ret)
		ret = spaces_adopt(s, h, e);
	if (ret) {
		session_free(s);
		return ret;
	}
	spaces_wake(s);
	*sp = s;
	return 0;
}

/*
 * session_adopt_entry() - the session a daemon before this one left in
 * entry @e, ready to run, its front end found by @front_of; @e's
 * descriptors are taken or closed. Returns 0 or -errno (the entry is not
 * a session this daemon can serve; it is logged).
 */
int session_adopt_entry(struct keep_entry *e, session_front_fn front_of,
			struct session **sp)
{
	struct krec r = { .body = NULL };
	const struct session_ops *fe = NULL;
	int ret = rec_read(e, &r);

	if (!ret && (!(fe = front_of(r.h.front)) || !fe->adopt))
		ret = -EBADMSG;
	if (!ret)
		ret = adopt(sp, e, &r, fe);
	if (ret)
		dlog(LOG_WARNING, "kept entry %s: cannot adopt it: %s", e->name,
		     ret == -EPROTONOSUPPORT ? "kept by another version of faultd"
		     : !fe ? "not a session of a front end this faultd serves"
			   : strerror(-ret));
	for (unsigned int i = 0; i < e->nfds; i++)
		if (e->fds[i] >= 0)
			close(e->fds[i]);
	free(r.body);
	return ret;
}
