// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * front_fdp.c - the faultd protocol front end (faultd-protocol(7)): a
 * library client's REGISTER becomes a session with one space, served from
 * a faultd image.
 *
 * The client sends its userfaultfd and the image by SCM_RIGHTS, and the
 * ranges of its region with their image offsets; with RECORD and WSET,
 * a file to record the working set in and one to replay (session.h). The session pushes every
 * block unless the client asked for LAZY, sends PROGRESS every 100 ms and
 * DONE when every page is in, answers STATS and takes PREFETCH hints, and
 * ends when the client closes the connection (it serves its region itself
 * from then on) or exits. The client keeps its own userfaultfd in every
 * case, so the end of a session never leaves a fault to the kernel.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "front.h"
#include "image.h"

struct fdp {
	int sock;
	struct space *sp;
	atomic_bool sent_done; /* control loop; read by fdp_save() anywhere */
	bool has_key;		/* the image is authenticated with key */
	struct img_key key;	/* the image's own key (PROTO_REG_MAC) */
};

static void fdp_progress(struct session *s, struct proto_progress *p,
			 enum proto_type type)
{
	struct session_view v;

	session_view(s, &v);
	memset(p, 0, sizeof(*p));
	proto_init(&p->h, type, sizeof(*p));
	p->pages_total = v.pages_total;
	p->pages_urgent = v.pages_urgent;
	p->pages_background = v.pages_background + v.pages_zero;
	p->faults = v.faults;
	p->p50_ns = v.p50_ns;
	p->p99_ns = v.p99_ns;
	p->pages_poisoned = v.poisoned;
}

/* PREFETCH: the client wants [start, ..) next; the push goes there. */
static void fdp_prefetch(struct session *s, struct fdp *f, uint64_t start)
{
	atomic_store(&s->push_space, f->sp ? f->sp : s->spaces);
	atomic_store(&s->push_from, start);
	atomic_fetch_add(&s->push_hint_seq, 1);
	pthread_cond_broadcast(&s->push_cond);
}

/* A message from the client during the session. Returns false: end. */
static bool fdp_peer_input(struct session *s)
{
	struct fdp *f = s->fe_data;
	union {
		struct proto_hdr h;
		struct {
			struct proto_hdr h;
			struct proto_range r;
		} pf;
	} u;
	struct proto_progress p;
	const char *why;
	ssize_t n = proto_recv_checked(f->sock, &u, sizeof(u), NULL, 0, NULL,
				       &why);

	if (n < 0) { /* closed (its region is gone), or malformed */
		if (why)
			proto_error_send(f->sock, (int)n, "%s", why);
		return false;
	}
	if (u.h.type == MSG_STATS) {
		fdp_progress(s, &p, MSG_PROGRESS);
		return proto_send(f->sock, &p, NULL, 0) == 0;
	}
	if (u.h.type == MSG_PREFETCH) {
		fdp_prefetch(s, f, u.pf.r.start);
		return true;
	}
	proto_error_send(f->sock, -EPROTO, "unexpected message in a session");
	return false;
}

/* PROGRESS every tick until every page is in, then DONE once. */
static void fdp_tick(struct session *s, bool all_in)
{
	struct fdp *f = s->fe_data;
	struct proto_progress p;

	if (atomic_load(&f->sent_done))
		return;
	fdp_progress(s, &p, all_in ? MSG_DONE : MSG_PROGRESS);
	proto_send(f->sock, &p, NULL, 0);
	atomic_store(&f->sent_done, all_in);
}

/* The client exited: its session is over. */
static bool fdp_space_gone(struct session *s, struct space *sp)
{
	return false;
}

static const struct session_fe_ops fdp_ops = {
	.peer_input = fdp_peer_input,
	.tick = fdp_tick,
	.space_gone = fdp_space_gone,
};

static void fdp_free(void *arg)
{
	struct fdp *f = arg;

	explicit_bzero(&f->key, sizeof(f->key));
	free(f);
}

/* What a restarted daemon needs of the front end: DONE sent, the key. */
struct fdp_blob {
	uint32_t sent_done;
	uint32_t has_key;
	uint8_t key[32];	/* the image's own key: the keeper is root's */
};

static size_t fdp_save(struct session *s, void *blob, size_t max)
{
	struct fdp *f = s->fe_data;
	struct fdp_blob b = { .sent_done = atomic_load(&f->sent_done),
			      .has_key = f->has_key };

	memcpy(b.key, f->key.key, sizeof(b.key));
	if (max < sizeof(b))
		return 0;
	memcpy(blob, &b, sizeof(b));
	return sizeof(b);
}

static void fdp_name(struct session *s)
{
	snprintf(s->name_buf, sizeof(s->name_buf), "session %llu",
		 (unsigned long long)s->id);
	s->o.name = s->name_buf;
}

/* A session a daemon before this one served: its client and image. */
static int fdp_adopt(struct session *s, const void *blob, size_t len,
		     int peer, int *srcfds, size_t nr_srcs)
{
	struct fdp *f = calloc(1, sizeof(*f));
	struct fdp_blob b = { 0 };
	struct source *src = NULL;
	int ret = f ? 0 : -ENOMEM;

	const char *why;

	memcpy(&b, blob, len < sizeof(b) ? len : sizeof(b));
	if (!ret && (nr_srcs != 1 || srcfds[0] < 0 || peer < 0))
		ret = -EBADMSG;
	if (!ret && b.has_key) {
		f->has_key = true;
		f->key = (struct img_key){ .image_key = true };
		memcpy(f->key.key, b.key, sizeof(b.key));
	}
	explicit_bzero(&b, sizeof(b));
	if (!ret)
		ret = src_image_open(srcfds[0], f->has_key ? &f->key : NULL,
				     &src, &why);
	if (!ret && (ret = session_own_source(s, src)))
		source_destroy(src);
	for (size_t i = 0; i < nr_srcs; i++)
		if (srcfds[i] >= 0)
			close(srcfds[i]); /* the image keeps its own */
	if (ret) {
		if (peer >= 0)
			close(peer);
		free(f);
		return ret;
	}
	f->sock = peer;
	atomic_store(&f->sent_done, b.sent_done);
	s->fe = &fdp_ops;
	s->fe_data = f;
	s->fe_free = fdp_free;
	s->peer_fd = peer;
	s->close_peer = true;
	fdp_name(s);
	return 0;
}

const struct fe_kind fdp_kind = {
	.id = FE_FDP,
	.name = "faultd protocol",
	.takeover = true,
	.save = fdp_save,
	.adopt = fdp_adopt,
};

/* The REGISTER's ranges as the engine's. */
static struct srange *fdp_ranges(const struct proto_register *m)
{
	struct srange *r = calloc(m->nr_ranges, sizeof(*r));

	for (uint32_t i = 0; r && i < m->nr_ranges; i++)
		r[i] = (struct srange){ m->r[i].start, m->r[i].len,
					m->r[i].image_off };
	return r;
}

/*
 * The image of a REGISTER, a source checked with the key it carries, if
 * any: the image's own key (the client holds the user's key and derives
 * it), so that the daemon checks every block as the client would and
 * learns nothing that serves for another image. Whatever key a client
 * sends only decides what is served into its own memory.
 */
static int fdp_image(const struct proto_register *m, int fd,
		     struct fdp *f, struct source **srcp, const char **why)
{
	struct img_key *key = NULL;
	int ret;

	if (m->flags & PROTO_REG_MAC) {
		f->key = (struct img_key){ .image_key = true };
		memcpy(f->key.key, proto_register_key(m), PROTO_KEY_LEN);
		f->has_key = true;
		key = &f->key;
	}
	*why = "the image cannot be used";
	ret = src_image_open(fd, key, srcp, why);
	if (ret == -EINVAL || ret == -EOPNOTSUPP) {
		*why = "the second descriptor is not a full checkpoint image";
		ret = -EINVAL;
	}
	return ret;
}

/* Descriptor @fd is a regular file open for writing (@write) or reading. */
static bool wset_fd_ok(int fd, bool write, uint64_t max)
{
	int fl = fcntl(fd, F_GETFL);
	struct stat st;

	if (fl < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return false;
	if (write)
		return (fl & O_ACCMODE) != O_RDONLY;
	return (fl & O_ACCMODE) != O_WRONLY && (uint64_t)st.st_size <= max;
}

/*
 * The working-set descriptors of @m (after the uffd and the image) into
 * @o, checked: a record file open for writing, a set open for reading
 * and no larger than a set of @src can be.
 */
static int fdp_wset_fds(const struct proto_register *m, const int *fds,
			const struct source *src, struct session_opts *o,
			const char **why)
{
	uint64_t max = sizeof(struct wset_header) + sizeof(struct wset_space) +
		       src->size / src->page_size * sizeof(struct wset_entry);
	unsigned int i = 2;

	if (m->flags & PROTO_REG_RECORD) {
		*why = "the record descriptor is not a file open for writing";
		if (!wset_fd_ok(fds[i], true, 0))
			return -EINVAL;
		o->record_fd = fds[i++];
	}
	if (m->flags & PROTO_REG_WSET) {
		*why = "the working-set descriptor is not a file open for "
		       "reading, or is larger than a set of the image";
		if (!wset_fd_ok(fds[i], false, max))
			return -EINVAL;
		o->wset_fd = fds[i];
	}
	return 0;
}

/* Check @m and its descriptors; a source for its image. */
static int fdp_check(const struct proto_register *m, const int *fds,
		     const struct peer *peer, struct fdp *f,
		     struct source **srcp, const char **why)
{
	int ret = check_uffd(fds[0], why);

	if (!ret && (m->flags & ~PROTO_REG_FLAGS)) {
		*why = "unknown REGISTER flags";
		ret = -EINVAL;
	}
	if (!ret)
		ret = fdp_image(m, fds[1], f, srcp, why);
	if (ret)
		return ret;
	ret = check_ranges(m, src_image_of(*srcp), peer, why);
	if (ret) {
		source_destroy(*srcp);
		*srcp = NULL;
	}
	return ret;
}

/*
 * fdp_session() - the session of an accepted REGISTER, its space added.
 * On failure the error has been sent to the client; @fds stay the
 * caller's.
 */
static int fdp_session(int sock, const struct proto_register *m, int *fds,
		       struct peer *peer, struct fdp *f, struct session **sp)
{
	struct session_opts o = { .push = !(m->flags & PROTO_REG_LAZY) };
	struct source *src = NULL;
	struct srange *r = NULL;
	struct session *s = NULL;
	const char *why;
	int ret = fdp_check(m, fds, peer, f, &src, &why);

	if (!ret)
		ret = fdp_wset_fds(m, fds, src, &o, &why);
	if (!ret) {
		why = "cannot start the session";
		ret = session_create(&o, &fdp_ops, f, &s);
		fds[2] = fds[3] = -1; /* the session's, or closed */
	}
	if (!ret && session_own_source(s, src) < 0)
		ret = -ENOMEM;
	else if (!ret)
		src = NULL;
	if (!ret && !(r = fdp_ranges(m)))
		ret = -ENOMEM;
	if (!ret)
		ret = session_add_space(s, fds[0], peer->pid, peer->pidfd, 0,
					s->srcs[0], r, m->nr_ranges, NULL, 0,
					&why, &f->sp);
	free(r);
	if (ret) {
		proto_error_send(sock, ret, "%s", why);
		source_destroy(src);
		session_free(s);
		return ret;
	}
	peer->pidfd = -1; /* the space's now */
	s->uid = peer->uid;
	s->pid = peer->pid;
	*sp = s;
	return 0;
}

/*
 * fdp_register() - serve one REGISTER (@m, with the descriptors @fds, of
 * which the uffd is taken over on success and the image closed) until
 * the session ends. Returns 0 when the session ran, or -errno (the
 * client got the error). Context: the connection's thread.
 */
int fdp_register(int sock, const struct proto_register *m, int *fds,
		 struct peer *peer)
{
	struct fdp f = { .sock = sock };
	struct proto_ack ack;
	struct session *s;
	int ret = fdp_session(sock, m, fds, peer, &f, &s);

	if (ret)
		return ret;
	close(fds[1]); /* the image keeps its own duplicate */
	fds[0] = fds[1] = -1;
	fdp_name(s);
	s->kind = &fdp_kind;
	s->peer_fd = sock;
	/* Kept before the client hears of it: from then on it may fault. */
	session_persist(s);
	proto_init(&ack.h, MSG_ACK, sizeof(ack));
	ack.session = s->id;
	ack.pages_total = f.sp->nr_pages;
	dlog(LOG_INFO, "%s: pid %d, %llu pages", s->o.name, (int)peer->pid,
	     (unsigned long long)f.sp->nr_pages);
	if (!proto_send(sock, &ack, NULL, 0))
		ret = session_run(s);
	dlog(LOG_INFO, "%s ends", s->o.name);
	session_free(s);
	return ret;
}

/* STATUS: the sessions the asking user may see (root: all). */
void fdp_status(int sock, uid_t uid)
{
	struct proto_status *st = calloc(1, PROTO_MAX_MSG);
	struct session_view *v = calloc(PROTO_MAX_SESSIONS, sizeof(*v));
	size_t n;

	if (!st || !v)
		goto out;
	n = sessions_list(v, PROTO_MAX_SESSIONS, uid == 0, uid);
	for (size_t i = 0; i < n; i++)
		st->s[i] = (struct proto_session){
			.session = v[i].id,
			.pid = v[i].pid,
			.done = v[i].all_in,
			.pages_total = v[i].pages_total,
			.pages_urgent = v[i].pages_urgent,
			.pages_background = v[i].pages_background,
			.faults = v[i].faults,
			.p50_ns = v[i].p50_ns,
			.p99_ns = v[i].p99_ns,
			.age_ms = v[i].age_ms,
			.pages_zero = v[i].pages_zero,
			.eexist = v[i].eexist,
			.eagain = v[i].eagain,
			.removes = v[i].removes,
			.poisoned = v[i].poisoned,
			.first_fault_ms = v[i].first_fault_ms,
			.all_in_ms = v[i].all_in_ms,
			.kept = v[i].kept,
		};
	proto_init(&st->h, MSG_STATUS, sizeof(*st) + n * sizeof(st->s[0]));
	st->nr_sessions = (uint32_t)n;
	st->uptime_ms = now_ms() - daemon_started_ms;
	st->keeper_pid = uid == 0 || uid == geteuid() ? keep_pid(daemon_keep) : 0;
	proto_send(sock, st, NULL, 0);
out:
	free(v);
	free(st);
}
