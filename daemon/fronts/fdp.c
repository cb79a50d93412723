// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * fdp.c - the faultd protocol front end (faultd-protocol(7)): a
 * library client's REGISTER becomes a session with one space, served from
 * a faultd image.
 *
 * The client sends its userfaultfd and the image by SCM_RIGHTS, and the
 * ranges of its region with their image offsets; with RECORD and WSET,
 * a file to record the working set in and one to replay (session.h). Or
 * the image is an NBD export the client names (OPEN): the daemon opens it
 * on the connection's thread - for root, its own user, and the users and
 * servers of the administrator's allow list (nbd_allow.h, --nbd-allow) -
 * answers its header (IMAGE), and the REGISTER that follows serves it
 * (PROTO_REG_OPEN). Such a session is kept for a restarted daemon until
 * its client exits: the client cannot serve the image itself.
 *
 * The session pushes every block unless the client asked for LAZY, sends
 * PROGRESS every 100 ms and DONE when every page is in, answers STATS and
 * takes PREFETCH hints, and ends when the client closes the connection (it
 * serves its region itself from then on) or exits. The client keeps its
 * own userfaultfd in every case, so the end of a session never leaves a
 * fault to the kernel.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "front.h"
#include "image.h"
#include "img.h"
#include "nbd.h"
#include "nbd_allow.h"

struct fdp {
	int sock;
	struct space *sp;
	atomic_bool sent_done; /* control loop; read by fdp_save() anywhere */
	bool remote;		/* its image is an NBD export (OPEN) */
};

/* The administrator's allow list (--nbd-allow), loaded at the start. */
static struct nbd_allow *nbd_allow;

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
	session_push_from(s, f->sp, start);
}

/* A message from the client during the session. Returns false: end. */
static bool fdp_peer_input(struct session *s)
{
	struct fdp *f = session_front(s);
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
	struct fdp *f = session_front(s);
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

static void fdp_free(void *arg)
{
	free(arg);
}

/* What a restarted daemon needs of the front end: whether DONE was sent,
 * whether the image is remote (the image's key is its source's to
 * keep). */
struct fdp_blob {
	uint32_t sent_done;
	uint32_t remote;
};

static size_t fdp_save(struct session *s, void *blob, size_t max)
{
	struct fdp *f = session_front(s);
	struct fdp_blob b = { .sent_done = atomic_load(&f->sent_done),
			      .remote = f->remote };

	if (max < sizeof(b))
		return 0;
	memcpy(blob, &b, sizeof(b));
	return sizeof(b);
}

static void fdp_name(struct session *s)
{
	session_set_name(s, "session %llu", (unsigned long long)session_id(s));
}

/* A session a daemon before this one served: its client (its image is
 * open again already). */
static int fdp_adopt(struct session *s, const void *blob, size_t len,
		     int peer)
{
	struct fdp *f = calloc(1, sizeof(*f));
	struct fdp_blob b = { 0 };

	memcpy(&b, blob, len < sizeof(b) ? len : sizeof(b));
	if (!f || session_nr_sources(s) != 1 || peer < 0) {
		if (peer >= 0)
			close(peer);
		free(f);
		return f ? -EBADMSG : -ENOMEM;
	}
	f->sock = peer;
	atomic_store(&f->sent_done, b.sent_done);
	f->remote = b.remote;
	session_set_takeover(s, !f->remote);
	session_set_front(s, f, fdp_free);
	session_set_peer(s, peer, true);
	fdp_name(s);
	return 0;
}

const struct session_ops fdp_session_ops = {
	.front_id = FRONT_FDP,
	.takeover = true,
	.peer_input = fdp_peer_input,
	.tick = fdp_tick,
	.space_gone = fdp_space_gone,
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
		     struct source *under, struct source **srcp,
		     const char **why)
{
	struct img_key key = { .image_key = true };
	const struct img_key *k = m->flags & PROTO_REG_MAC ? &key : NULL;
	int ret;

	if (k)
		memcpy(key.key, proto_register_key(m), PROTO_KEY_LEN);
	*why = "the image cannot be used";
	ret = under ? src_image_open_over(under, k, srcp, why)
		    : src_image_open(fd, k, srcp, why);
	explicit_bzero(&key, sizeof(key));
	if (!under && (ret == -EINVAL || ret == -EOPNOTSUPP)) {
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

/*
 * Check @m and its descriptors; a source for its image: the file of
 * fds[1], or the one an OPEN opened, @under (taken over, also on
 * failure; NULL: none).
 */
static int fdp_check(const struct proto_register *m, const int *fds,
		     struct source *under, const struct peer *peer,
		     struct source **srcp, const char **why)
{
	int ret = check_uffd(fds[0], why);

	if (!ret && (m->flags & ~PROTO_REG_FLAGS)) {
		*why = "unknown REGISTER flags";
		ret = -EINVAL;
	}
	if (!ret && !(m->flags & PROTO_REG_OPEN) != !under) {
		*why = "a REGISTER of an opened image (OPEN flag) must follow "
		       "an OPEN on its connection";
		ret = -EPROTO;
	}
	if (!ret)
		ret = fdp_image(m, fds[1], under, srcp, why);
	else
		source_destroy(under);
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
 * fdp_session() - the session of an accepted REGISTER, its space added
 * (its image: @under's, taken over, or fds[1]'s). On failure the error
 * has been sent to the client; @fds stay the caller's.
 */
static int fdp_session(int sock, const struct proto_register *m, int *fds,
		       struct source *under, struct peer *peer, struct fdp *f,
		       struct session **sp)
{
	/* An image on NBD: a fault installs the chunk its fetch brought. */
	struct session_opts o = { .push = !(m->flags & PROTO_REG_LAZY),
				  .around = under ? nbd_chunk(under) : 0 };
	struct source *src = NULL;
	struct srange *r = NULL;
	struct session *s = NULL;
	const char *why;
	int ret = fdp_check(m, fds, under, peer, &src, &why);

	if (!ret)
		ret = fdp_wset_fds(m, fds, src, &o, &why);
	if (!ret) {
		why = "cannot start the session";
		ret = session_create(&o, &fdp_session_ops, f, &s);
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
					session_source(s, 0), r, m->nr_ranges,
					NULL, 0,
					&why, &f->sp);
	free(r);
	if (ret) {
		proto_error_send(sock, ret, "%s", why);
		source_destroy(src);
		session_free(s);
		return ret;
	}
	peer->pidfd = -1; /* the space's now */
	session_set_owner(s, peer->uid, peer->pid);
	/* Only the daemon reaches the image: kept until its client exits. */
	f->remote = under != NULL;
	session_set_takeover(s, !f->remote);
	*sp = s;
	return 0;
}

/*
 * fdp_register() - serve one REGISTER (@m, with the descriptors @fds, of
 * which the uffd is taken over on success and the image closed; or the
 * image an OPEN opened, @under, taken over) until the session ends.
 * Returns 0 when the session ran, or -errno (the client got the error).
 * Context: the connection's thread.
 */
static int fdp_register(int sock, const struct proto_register *m, int *fds,
			struct source *under, struct peer *peer)
{
	struct fdp f = { .sock = sock };
	struct proto_ack ack;
	struct session *s;
	int ret = fdp_session(sock, m, fds, under, peer, &f, &s);

	if (ret)
		return ret;
	if (fds[1] >= 0)
		close(fds[1]); /* the image keeps its own duplicate */
	fds[0] = fds[1] = -1;
	fdp_name(s);
	session_set_peer(s, sock, false);
	/* Kept before the client hears of it: from then on it may fault. */
	session_persist(s);
	proto_init(&ack.h, MSG_ACK, sizeof(ack));
	ack.session = session_id(s);
	ack.pages_total = space_nr_pages(f.sp);
	dlog(LOG_INFO, "%s: pid %d, %llu pages", session_name(s), (int)peer->pid,
	     (unsigned long long)space_nr_pages(f.sp));
	if (!proto_send(sock, &ack, NULL, 0))
		ret = session_run(s);
	dlog(LOG_INFO, "%s ends", session_name(s));
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

/* ------------------------------------------------------------------------
 * Connections, until they are sessions (the server's loop, front.h): the
 * HELLO, then a REGISTER (a session, on a thread of its own), an OPEN
 * (its image opened on a thread of its own, then its REGISTER there), a
 * STATUS (answered here), or another front end's request (its answer()).
 * On a control socket (LISTEN_STATUS), HELLO and STATUS only.
 */

enum fdp_state {
	FDP_HELLO,	/* waiting for HELLO */
	FDP_REQUEST,	/* waiting for REGISTER, OPEN, STATUS or a request */
	FDP_REFUSE,	/* waiting for HELLO, to answer it with err */
	FDP_REGISTER,	/* a REGISTER came: its session is next */
	FDP_OPEN,	/* an OPEN came: its image is opened next */
};

struct fdp_conn {
	enum fdp_state state;
	int err;		/* FDP_REFUSE: the answer */
	const char *why;
	void *m;		/* FDP_REGISTER, FDP_OPEN: a copy */
	int fds[PROTO_REG_MAX_FDS]; /* its descriptors; -1 */
};

/* One message at a time is read, by the server's loop only. */
static char msg_buf[PROTO_MAX_MSG];

/*
 * proto_answer_hello() - answer the HELLO @msg of @len bytes: ours, or
 * the error a client of another version or one that sent no HELLO gets.
 * Returns 0 or -errno. The only HELLO every socket of faultd answers.
 */
int proto_answer_hello(int sock, const void *msg, size_t len)
{
	const struct proto_hello *h = msg;
	struct proto_hello reply = { .min_version = PROTO_VERSION,
				     .max_version = PROTO_VERSION,
				     .features = PROTO_FEATURES };

	if (len < sizeof(*h) || h->h.type != MSG_HELLO) {
		proto_error_send(sock, -EPROTO, "expected HELLO first");
		return -EPROTO;
	}
	if (h->min_version > PROTO_VERSION || h->max_version < PROTO_VERSION) {
		proto_error_send(sock, -EPROTONOSUPPORT,
				 "this daemon speaks protocol version %u only",
				 PROTO_VERSION);
		return -EPROTONOSUPPORT;
	}
	proto_init(&reply.h, MSG_HELLO, sizeof(reply));
	return proto_send(sock, &reply, NULL, 0);
}

/* @c's state, made on its first use (admit(), or a refusal before). */
static struct fdp_conn *fdp_state(struct conn *c)
{
	struct fdp_conn *fc = c->state;

	if (!fc && (fc = calloc(1, sizeof(*fc)))) {
		memset(fc->fds, -1, sizeof(fc->fds));
		c->state = fc;
	}
	return fc;
}

static int fdp_admit(struct conn *c, const char **why)
{
	*why = "out of memory";
	if (!fdp_state(c))
		return -ENOMEM;
	*why = "not allowed";
	if (geteuid() != 0 && c->uid != geteuid())
		return -EACCES;
	return c->status_only ? 0 : peer_bind(c->sock, &c->peer, why);
}

static void close_fds(int *fds, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* A REGISTER with its descriptors, or an OPEN: kept for its thread. */
static enum conn_next fdp_take(struct conn *c, size_t len, int *fds,
			       unsigned int nfds, enum fdp_state state)
{
	struct fdp_conn *fc = c->state;

	fc->m = malloc(len);
	if (!fc->m) {
		close_fds(fds, nfds);
		proto_error_send(c->sock, -ENOMEM, "out of memory");
		return CONN_CLOSE;
	}
	memcpy(fc->m, msg_buf, len);
	memcpy(fc->fds, fds, nfds * sizeof(*fds));
	fc->state = state;
	return CONN_SERVE;
}

/* A request other than REGISTER, after HELLO: answered, then closed. */
static enum conn_next fdp_request(struct conn *c, size_t len)
{
	const struct proto_hdr *h = (const void *)msg_buf;
	const struct front *f = front_for_request(h->type);

	if (h->type == MSG_STATUS)
		fdp_status(c->sock, c->uid);
	else if (f && !c->status_only)
		f->answer(c->sock, &c->peer, msg_buf, len, &c->add);
	else
		proto_error_send(c->sock, -EPROTO,
				 h->type == MSG_REGISTER
					 ? "REGISTER needs its descriptors: "
					   "uffd, image (none with the OPEN "
					   "flag), and the working-set files "
					   "its flags name"
				 : c->status_only
					 ? "this socket answers HELLO and "
					   "STATUS only"
				 : h->type == MSG_OPEN
					 ? "OPEN carries no descriptor"
					 : "expected REGISTER, OPEN, STATUS or "
					   "LAZY_PAGES");
	return CONN_CLOSE;
}

static enum conn_next fdp_input(struct conn *c)
{
	struct fdp_conn *fc = c->state;
	const struct proto_hdr *h = (const void *)msg_buf;
	const char *why;
	unsigned int nfds = 0;
	/* One more than a REGISTER may carry: one too many is seen. */
	int fds[PROTO_REG_MAX_FDS + 1];
	ssize_t n = proto_recv_checked(c->sock, msg_buf, sizeof(msg_buf), fds,
				       PROTO_REG_MAX_FDS + 1, &nfds, &why);

	if (n == -EAGAIN)
		return CONN_WAIT;
	if (fc->state == FDP_REFUSE || n < 0) {
		if (fc->state == FDP_REFUSE)
			proto_error_send(c->sock, fc->err, "%s", fc->why);
		else if (why)
			proto_error_send(c->sock, (int)n, "%s", why);
		close_fds(fds, nfds);
		return CONN_CLOSE;
	}
	if (h->type == MSG_REGISTER && fc->state == FDP_REQUEST &&
	    !c->status_only &&
	    nfds == proto_register_nfds(((const struct proto_register *)h)
						->flags))
		return fdp_take(c, (size_t)n, fds, nfds, FDP_REGISTER);
	if (h->type == MSG_OPEN && fc->state == FDP_REQUEST &&
	    !c->status_only && !nfds)
		return fdp_take(c, (size_t)n, fds, 0, FDP_OPEN);
	close_fds(fds, nfds);
	if (fc->state == FDP_HELLO) {
		if (proto_answer_hello(c->sock, msg_buf, (size_t)n) < 0)
			return CONN_CLOSE;
		fc->state = FDP_REQUEST;
		return CONN_NEXT;
	}
	return fdp_request(c, (size_t)n);
}

static enum conn_next fdp_late(struct conn *c)
{
	struct fdp_conn *fc = c->state;

	if (fc->state == FDP_REFUSE)
		proto_error_send(c->sock, fc->err, "%s", fc->why);
	else
		proto_error_send(c->sock, -ETIMEDOUT, "no %s within %u ms",
				 fc->state == FDP_HELLO
					 ? "HELLO"
					 : "REGISTER, OPEN or STATUS",
				 dopts.handshake_ms);
	return CONN_CLOSE;
}

/* Refused: after its HELLO, told at once; before, when its HELLO comes
 * (so that it reads the error, not a reset). */
static enum conn_next fdp_refuse(struct conn *c, int err, const char *why)
{
	struct fdp_conn *fc = fdp_state(c);

	if (fc && fc->state == FDP_HELLO) {
		fc->state = FDP_REFUSE;
		fc->err = err;
		fc->why = why;
		return CONN_WAIT;
	}
	proto_error_send(c->sock, err, "%s", why);
	return CONN_CLOSE;
}

/* ---- OPEN: an image the daemon reads from an NBD export ---- */

/*
 * May the client of uid @uid make the daemon open @uri? A daemon that is
 * not root serves its own user only (fdp_admit()), who may reach what it
 * reaches; a root daemon opens what root's clients name, and what the
 * allow list lets other users name (nbd_allow.h). 0, or -EPERM / -EINVAL
 * with @why.
 */
static int fdp_nbd_allowed(uid_t uid, const char *uri, char *why,
			   size_t why_len)
{
	if (geteuid() != 0 || uid == 0)
		return 0;
	return nbd_allow_check(nbd_allow, uid, uri, why, why_len);
}

/* The export @m names, opened for @uid, its image's header into @img.
 * 0, or -errno with @why. */
static int fdp_open_export(const struct proto_open *m, uid_t uid,
			   struct source **srcp, struct proto_image *img,
			   char *why, size_t why_len)
{
	struct src_nbd_opts o = front_nbd_opts(geteuid() != 0 || uid == 0);
	struct img_header h;
	const char *w;
	int ret = -EINVAL;

	snprintf(why, why_len, "OPEN: flags and reserved must be 0, the URI "
		 "NUL-terminated");
	if (!m->flags && !m->reserved && memchr(m->uri, 0, sizeof(m->uri)))
		ret = fdp_nbd_allowed(uid, m->uri, why, why_len);
	if (!ret)
		ret = src_nbd_open(m->uri, 0, 4096, &o, srcp, why, why_len);
	if (ret)
		return ret;
	ret = src_image_header(*srcp, &h, &w);
	if (ret) {
		snprintf(why, why_len, "the export's image: %s", w);
		source_destroy(*srcp);
		return ret;
	}
	memset(img, 0, sizeof(*img));
	proto_init(&img->h, MSG_IMAGE, sizeof(*img));
	img->file_len = (*srcp)->size;
	img->header_len = sizeof(h);
	memcpy(img->header, &h, sizeof(h));
	return 0;
}

/*
 * The REGISTER that follows an OPEN, within the handshake's time, in
 * *mp (to free()), its descriptors in @fds where a REGISTER of an image
 * file has them (the image's -1). 0, or -errno (the client was told).
 */
static int fdp_open_register(int sock, void **mp, int *fds)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };
	int got[PROTO_REG_MAX_FDS];
	const struct proto_register *m;
	unsigned int n = 0;
	const char *why = "out of memory";
	char *buf = malloc(PROTO_MAX_MSG);
	ssize_t len = buf ? 0 : -ENOMEM;

	if (!len && poll(&p, 1, (int)dopts.handshake_ms) != 1) {
		why = "no REGISTER in time after the OPEN";
		len = -ETIMEDOUT;
	}
	if (!len)
		len = proto_recv_checked(sock, buf, PROTO_MAX_MSG, got,
					 PROTO_REG_MAX_FDS, &n, &why);
	m = (const void *)buf;
	if (len > 0 && (m->h.type != MSG_REGISTER ||
			!(m->flags & PROTO_REG_OPEN) ||
			n != proto_register_nfds(m->flags))) {
		why = "after OPEN: a REGISTER with the OPEN flag and its "
		      "descriptors (the uffd, then the working-set files "
		      "its flags name)";
		len = -EPROTO;
	}
	if (len < 0) {
		if (why)
			proto_error_send(sock, (int)len, "%s", why);
		close_fds(got, n);
		free(buf);
		return (int)len;
	}
	fds[0] = got[0];
	memcpy(fds + 2, got + 1, (n - 1) * sizeof(*got));
	*mp = buf;
	return 0;
}

/* An OPEN: the export opened, its header answered, then its REGISTER
 * served until the session ends. */
static void fdp_open(struct conn *c)
{
	struct fdp_conn *fc = c->state;
	struct proto_image img;
	struct source *src;
	char why[256];
	void *reg = NULL;
	int ret = fdp_open_export(fc->m, c->uid, &src, &img, why,
				  sizeof(why));

	if (ret) {
		dlog(LOG_INFO, "pid %d (uid %u): OPEN refused: %s",
		     (int)c->peer.pid, (unsigned int)c->uid, why);
		proto_error_send(c->sock, ret, "%s", why);
		return;
	}
	if (proto_send(c->sock, &img, NULL, 0) ||
	    fdp_open_register(c->sock, &reg, fc->fds)) {
		source_destroy(src);
		return;
	}
	free(fc->m);
	fc->m = reg;
	fdp_register(c->sock, fc->m, fc->fds, src, &c->peer);
}

/* The REGISTER (or OPEN), checked and served until its session ends. */
static void fdp_serve(struct conn *c)
{
	struct fdp_conn *fc = c->state;

	if (fc->state == FDP_OPEN)
		fdp_open(c);
	else
		fdp_register(c->sock, fc->m, fc->fds, NULL, &c->peer);
}

static void fdp_release(struct conn *c)
{
	struct fdp_conn *fc = c->state;

	if (!fc)
		return;
	close_fds(fc->fds, PROTO_REG_MAX_FDS);
	free(fc->m);
	free(fc);
}

const struct conn_ops fdp_conn_ops = {
	.name = "faultd protocol",
	.admit = fdp_admit,
	.input = fdp_input,
	.late = fdp_late,
	.refuse = fdp_refuse,
	.serve = fdp_serve,
	.release = fdp_release,
	.session = true,
};

/* ------------------------------------------------------------------------
 * faultd alone: the daemon of the faultd protocol.
 */

/*
 * The allow list of NBD servers (--nbd-allow, or NBD_ALLOW_FILE where it
 * exists), read once: a daemon with a list it cannot read does not
 * start.
 */
static int fdp_load_allow(void)
{
	const char *path = dopts.nbd_allow ? dopts.nbd_allow : NBD_ALLOW_FILE;
	char why[256];
	int ret;

	src_nbd_set_log(front_nbd_log, NULL);
	if (dopts.nbd_allow && access(path, R_OK)) {
		fprintf(stderr, "faultd: --nbd-allow %s: %s\n", path,
			strerror(errno));
		return -1;
	}
	ret = nbd_allow_load(path, &nbd_allow, why, sizeof(why));
	if (ret)
		fprintf(stderr, "faultd: %s\n", why);
	return ret ? -1 : 0;
}

/* Its socket: --socket, or systemd's, or the default (the server). By
 * default one user may take a quarter of the sessions. */
static int fdp_start(struct front_start *st)
{
	struct front_listen *l = &st->listen[0];

	*l = (struct front_listen){ .type = SOCK_SEQPACKET,
				    .ops = &fdp_conn_ops,
				    .flags = LISTEN_KEEP, .fd = -1 };
	st->nr = 1;
	st->activated = true;
	if (dopts.socket &&
	    (size_t)snprintf(l->path, sizeof(l->path), "%s", dopts.socket) >=
		    sizeof(l->path)) {
		fprintf(stderr, "faultd: %s: %s\n", dopts.socket,
			strerror(ENAMETOOLONG));
		return -1;
	}
	if (!dopts.max_user_sessions)
		dopts.max_user_sessions = dopts.max_sessions / 4
						  ? dopts.max_sessions / 4
						  : 1;
	return fdp_load_allow();
}

const struct front fdp_front = {
	.name = "faultd protocol",
	.session = &fdp_session_ops,
	.shared = OPT_SOCKET | OPT_SESSION_LIMITS | OPT_CONN_LIMITS |
		  OPT_HANDSHAKE | OPT_KEEPER | OPT_FD_STORE | OPT_VERBOSE |
		  OPT_NBD_ALLOW | OPT_NBD,
	.start = fdp_start,
};
