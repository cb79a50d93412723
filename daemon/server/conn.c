// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * conn.c - connections until they become sessions, and the limits.
 *
 * The main thread runs one epoll loop over the listening socket, the
 * signalfd and every connection that has not registered: those sockets
 * are non-blocking, and each message a connection owes has a deadline
 * (--handshake-timeout): its HELLO, then a STATUS (answered here) or a
 * REGISTER (handed to a thread of its own, which checks it and becomes
 * the session's fault thread). However many connections are open, the
 * threads are the loop's and three per session.
 *
 * Limits count the users other than root: root's connections and
 * sessions are never refused because of anyone's. A user has at most
 * --max-user-connections connections that have not registered and
 * --max-user-sessions sessions; all users together --max-connections and
 * --max-sessions. A connection refused (for a limit, or because a daemon
 * not run as root serves its own user only) is told so after its HELLO:
 * ERROR, then close, so that the client reads the error and not a reset.
 * At most REFUSING_MAX refusals wait for their HELLO; past that they are
 * closed at once.
 *
 * Out of descriptors (EMFILE, ENFILE), accept() would fail again at once
 * and the loop would spin: a reserve descriptor is closed to accept the
 * connection and close it, and the listening socket is left alone for
 * BACKOFF_MS. That is logged once per shortage, and its end.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "server.h"
#include "lazy_pages.h"

#define REFUSING_MAX 64
#define BACKOFF_MS 100
#define USERS_HASH 64

/* ------------------------------------------------------------------------
 * The limits. users_lock protects the table and the totals; the loop
 * takes connections, the session threads give sessions back.
 */

struct user {
	uid_t uid;
	unsigned int conns, sessions;
	struct user *next;
};

static pthread_mutex_t users_lock = PTHREAD_MUTEX_INITIALIZER;
static struct user *users[USERS_HASH];
static unsigned int nr_conns, nr_sessions; /* of users other than root */

/* @uid's entry, made if missing (NULL: out of memory). Context: users_lock. */
static struct user *user_get_locked(uid_t uid)
{
	struct user **p = &users[uid % USERS_HASH];

	for (; *p; p = &(*p)->next)
		if ((*p)->uid == uid)
			return *p;
	*p = calloc(1, sizeof(**p));
	if (*p)
		(*p)->uid = uid;
	return *p;
}

/* Forget @uid's entry if it counts nothing. Context: users_lock. */
static void user_put_locked(uid_t uid)
{
	for (struct user **p = &users[uid % USERS_HASH]; *p; p = &(*p)->next)
		if ((*p)->uid == uid) {
			struct user *u = *p;

			if (!u->conns && !u->sessions) {
				*p = u->next;
				free(u);
			}
			return;
		}
}

/*
 * Take a connection (@session false) or a session of @uid: 0, or -EBUSY
 * (-ENOMEM) with *why. Root takes nothing and is never refused.
 */
static int limit_take(uid_t uid, bool session, const char **why)
{
	unsigned int *total = session ? &nr_sessions : &nr_conns;
	unsigned int max = session ? dopts.max_sessions : dopts.max_conns;
	unsigned int max_user = session ? dopts.max_user_sessions
					: dopts.max_user_conns;
	struct user *u;
	int ret = 0;

	if (!uid)
		return 0;
	pthread_mutex_lock(&users_lock);
	u = user_get_locked(uid);
	if (!u) {
		ret = -ENOMEM;
		*why = "out of memory";
	} else if ((session ? u->sessions : u->conns) >= max_user) {
		ret = -EBUSY;
		*why = session ? "too many sessions of this user"
			       : "too many connections of this user";
	} else if (*total >= max) {
		ret = -EBUSY;
		*why = session ? "too many sessions" : "too many connections";
	} else {
		(*total)++;
		(*(session ? &u->sessions : &u->conns))++;
	}
	if (ret && u)
		user_put_locked(uid);
	pthread_mutex_unlock(&users_lock);
	return ret;
}

static void limit_give(uid_t uid, bool session)
{
	struct user *u;

	if (!uid)
		return;
	pthread_mutex_lock(&users_lock);
	u = user_get_locked(uid); /* there: it was taken */
	(*(session ? &nr_sessions : &nr_conns))--;
	(*(session ? &u->sessions : &u->conns))--;
	user_put_locked(uid);
	pthread_mutex_unlock(&users_lock);
}

/* ------------------------------------------------------------------------
 * Sessions: a thread per accepted REGISTER.
 */

struct registration {
	int sock;
	int fds[PROTO_REG_MAX_FDS]; /* uffd, image[, record][, set]; -1 */
	struct peer peer;
	struct proto_register *m; /* a copy of the message */
};

static void registration_free(struct registration *g)
{
	for (int i = 0; i < PROTO_REG_MAX_FDS; i++)
		if (g->fds[i] >= 0)
			close(g->fds[i]);
	if (g->sock >= 0)
		close(g->sock);
	peer_release(&g->peer);
	free(g->m);
	free(g);
}

/* Check the REGISTER, acknowledge it, serve until the session ends. */
static void *session_main(void *arg)
{
	struct registration *g = arg;
	uid_t uid = g->peer.uid;

	fdp_register(g->sock, g->m, g->fds, &g->peer);
	registration_free(g);
	limit_give(uid, true);
	return NULL;
}

/* ------------------------------------------------------------------------
 * Connections that have not registered.
 */

enum conn_state {
	CONN_HELLO,	/* waiting for HELLO */
	CONN_REQUEST,	/* waiting for REGISTER or STATUS */
	CONN_REFUSE,	/* waiting for HELLO, to answer it with err */
};

struct conn {
	int sock;
	enum conn_state state;
	int err;		/* CONN_REFUSE: the answer */
	const char *why;
	bool counted;		/* in limit_take()'s connections, as uid */
	uid_t uid;		/* whose connection it counts as */
	struct peer peer;
	uint64_t deadline_ms;	/* for the message it owes */
	struct conn *prev, *next; /* the loop's list, by deadline */
};

struct loop {
	int ep, ls, sfd;
	int kfd;		/* the keeper's connection (restart.c); -1 */
	int reserve;		/* /dev/null, given up to accept-and-close */
	bool short_of_fds;	/* since the last accept that worked */
	unsigned long dropped;	/* connections closed for want of fds */
	uint64_t backoff_until_ms; /* listening socket left alone until */
	unsigned int nr_refusing;
	struct conn list;	/* head: by deadline, the first expires first */
	char *buf;		/* PROTO_MAX_MSG: one message */
};

/* Every connection's deadline is now + the same time, so appending keeps
 * the list sorted. Rounded up to the next millisecond: a connection gets
 * at least its time, never up to a millisecond less. */
static void conn_queue(struct loop *l, struct conn *c, uint64_t ms)
{
	if (c->next) {
		c->prev->next = c->next;
		c->next->prev = c->prev;
	}
	c->deadline_ms = (now_ns() + 999999) / 1000000 + ms;
	c->prev = l->list.prev;
	c->next = &l->list;
	l->list.prev->next = c;
	l->list.prev = c;
}

/* Forget @c; its socket too, unless @keep_sock: then a session owns it,
 * out of the loop's epoll set already (conn_register()). */
static void conn_close(struct loop *l, struct conn *c, bool keep_sock)
{
	c->prev->next = c->next;
	c->next->prev = c->prev;
	if (!keep_sock) {
		epoll_ctl(l->ep, EPOLL_CTL_DEL, c->sock, NULL);
		close(c->sock);
	}
	if (c->state == CONN_REFUSE)
		l->nr_refusing--;
	if (c->counted)
		limit_give(c->uid, false);
	peer_release(&c->peer);
	free(c);
}

/* Answer the HELLO that comes with @err, then close; or close now if too
 * many refusals wait already. */
static void conn_refuse(struct loop *l, struct conn *c, int err,
			const char *why)
{
	dlog(LOG_DEBUG, "connection of pid %d, uid %u: refused: %s", (int)c->peer.pid,
	     (unsigned int)c->peer.uid, why);
	if (c->counted) {
		limit_give(c->uid, false);
		c->counted = false;
	}
	if (l->nr_refusing >= REFUSING_MAX) {
		conn_close(l, c, false);
		return;
	}
	peer_release(&c->peer);
	c->state = CONN_REFUSE;
	c->err = err;
	c->why = why;
	l->nr_refusing++;
	conn_queue(l, c, dopts.handshake_ms);
}

/* A new connection: who, whether it may, what it owes first. */
static void conn_new(struct loop *l, int sock)
{
	struct conn *c = calloc(1, sizeof(*c));
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
	const char *why = "not allowed";
	int ret;

	if (!c || epoll_ctl(l->ep, EPOLL_CTL_ADD, sock, &ev) < 0) {
		free(c);
		close(sock);
		return;
	}
	c->sock = sock;
	peer_init(&c->peer);
	c->prev = c->next = c;
	conn_queue(l, c, dopts.handshake_ms);
	ret = peer_cred(sock, &c->peer);
	if (ret)
		why = "cannot identify the client";
	else if (geteuid() != 0 && c->peer.uid != geteuid())
		ret = -EACCES;
	if (!ret)
		ret = limit_take(c->peer.uid, false, &why);
	c->uid = c->peer.uid;
	c->counted = !ret && c->uid;
	if (!ret)
		ret = peer_bind(sock, &c->peer, &why);
	if (ret)
		conn_refuse(l, c, ret, why);
}

static int hello_reply(int sock, const struct proto_hello *h)
{
	struct proto_hello reply = { .min_version = PROTO_VERSION,
				     .max_version = PROTO_VERSION,
				     .features = PROTO_FEATURES };

	if (h->h.type != MSG_HELLO) {
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

/*
 * A REGISTER with its descriptors (@nfds, as its flags say): take a
 * session, hand the connection to a thread of its own. The connection
 * leaves the loop either way.
 */
static void conn_register(struct loop *l, struct conn *c, size_t len,
			  int *fds, unsigned int nfds)
{
	struct registration *g = calloc(1, sizeof(*g));
	const char *why = "out of memory";
	int ret = g ? 0 : -ENOMEM;

	if (g) {
		*g = (struct registration){ .sock = c->sock,
					    .fds = { -1, -1, -1, -1 },
					    .peer = c->peer };
		memcpy(g->fds, fds, nfds * sizeof(*fds));
		peer_init(&c->peer); /* g has it now */
		g->m = malloc(len);
		ret = g->m ? 0 : -ENOMEM;
	}
	if (!ret) {
		memcpy(g->m, l->buf, len);
		ret = limit_take(g->peer.uid, true, &why);
	}
	if (!ret) {
		/* The session's code waits in poll(), then reads and sends
		 * on a blocking socket. */
		fcntl(g->sock, F_SETFL, fcntl(g->sock, F_GETFL) & ~O_NONBLOCK);
		/* Out of the loop before the session may close it. */
		epoll_ctl(l->ep, EPOLL_CTL_DEL, g->sock, NULL);
		ret = daemon_thread_start(session_main, g, "faultd-session");
		why = "cannot start a thread";
		if (ret)
			limit_give(g->peer.uid, true);
	}
	if (ret) {
		proto_error_send(c->sock, ret, "%s", why);
		if (g) {
			g->sock = -1; /* conn_close() closes it */
			registration_free(g);
		} else {
			for (unsigned int i = 0; i < nfds; i++)
				close(fds[i]);
		}
	}
	conn_close(l, c, !ret);
}

/* What the connection owes came (or its end, or garbage). */
static void conn_input(struct loop *l, struct conn *c)
{
	const struct proto_hdr *h = (const void *)l->buf;
	const char *why;
	unsigned int nfds = 0;
	int fds[PROTO_REG_MAX_FDS];
	ssize_t n = proto_recv_checked(c->sock, l->buf, PROTO_MAX_MSG, fds,
				       PROTO_REG_MAX_FDS, &nfds, &why);

	if (n == -EAGAIN)
		return;
	if (c->state == CONN_REFUSE || n < 0) {
		if (c->state == CONN_REFUSE)
			proto_error_send(c->sock, c->err, "%s", c->why);
		else if (why)
			proto_error_send(c->sock, (int)n, "%s", why);
		for (unsigned int i = 0; i < nfds; i++)
			close(fds[i]);
		conn_close(l, c, false);
		return;
	}
	if (h->type == MSG_REGISTER && dopts.status_only) {
		for (unsigned int i = 0; i < nfds; i++)
			close(fds[i]);
		proto_error_send(c->sock, -EOPNOTSUPP, "this socket answers "
				 "STATUS only (faultd lazy-pages)");
		conn_close(l, c, false);
		return;
	}
	if (h->type == MSG_REGISTER && c->state == CONN_REQUEST &&
	    nfds == proto_register_nfds(((const struct proto_register *)h)
						->flags)) {
		conn_register(l, c, (size_t)n, fds, nfds);
		return;
	}
	for (unsigned int i = 0; i < nfds; i++)
		close(fds[i]);
	if (c->state == CONN_HELLO) {
		if (hello_reply(c->sock, (const void *)h) < 0) {
			conn_close(l, c, false); /* c is freed */
			return;
		}
		c->state = CONN_REQUEST;
		conn_queue(l, c, dopts.handshake_ms);
		return;
	}
	if (h->type == MSG_STATUS)
		fdp_status(c->sock, c->peer.uid);
	else if (h->type == MSG_LAZY_PAGES && !dopts.status_only)
		lazy_daemon_asked(c->sock, &c->peer, (const void *)h);
	else
		proto_error_send(c->sock, -EPROTO, h->type == MSG_REGISTER
			? "REGISTER needs its descriptors: uffd, image, and "
			  "the working-set files its flags name"
			: h->type == MSG_LAZY_PAGES
			? "this socket answers STATUS only (faultd lazy-pages)"
			: "expected REGISTER, STATUS or LAZY_PAGES");
	conn_close(l, c, false);
}

/* Close the connections whose message is late; returns the ms until the
 * next deadline, or -1. */
static int conn_expire(struct loop *l)
{
	uint64_t now = now_ms();

	while (l->list.next != &l->list) {
		struct conn *c = l->list.next;

		if (c->deadline_ms > now)
			return (int)(c->deadline_ms - now);
		if (c->state == CONN_REFUSE)
			proto_error_send(c->sock, c->err, "%s", c->why);
		else
			proto_error_send(c->sock, -ETIMEDOUT,
					 "no %s within %u ms",
					 c->state == CONN_HELLO
						 ? "HELLO"
						 : "REGISTER or STATUS",
					 dopts.handshake_ms);
		conn_close(l, c, false);
	}
	return -1;
}

/* ------------------------------------------------------------------------
 * Accepting.
 */

static void listen_arm(struct loop *l, bool on)
{
	struct epoll_event ev = { .events = on ? EPOLLIN : 0,
				  .data.ptr = &l->ls };

	epoll_ctl(l->ep, EPOLL_CTL_MOD, l->ls, &ev);
}

/* Out of descriptors: accept the connection with the reserve's and close
 * it, then leave the listening socket alone for a while. */
static void fd_shortage(struct loop *l)
{
	int c;

	if (!l->short_of_fds)
		dlog(LOG_WARNING, "out of descriptors: new connections are closed at "
			"once until some are free");
	l->short_of_fds = true;
	if (l->reserve >= 0)
		close(l->reserve);
	c = accept4(l->ls, NULL, NULL, SOCK_CLOEXEC);
	if (c >= 0) {
		close(c);
		l->dropped++;
	}
	l->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
	listen_arm(l, false);
	l->backoff_until_ms = now_ms() + BACKOFF_MS;
}

/* One connection per readiness: a passed listening socket may block. */
static void accept_one(struct loop *l)
{
	int c = accept4(l->ls, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (c < 0) {
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
		    errno == ENOMEM)
			fd_shortage(l);
		return;
	}
	if (l->short_of_fds) {
		dlog(LOG_WARNING, "descriptors are free again: %lu connections were "
			"closed meanwhile", l->dropped);
		l->short_of_fds = false;
		l->dropped = 0;
	}
	conn_new(l, c);
}

/* The time epoll_wait() may sleep: until the next deadline, or the end of
 * a back-off. */
static int loop_timeout(struct loop *l)
{
	int t = conn_expire(l);

	if (l->backoff_until_ms) {
		uint64_t now = now_ms();

		if (now >= l->backoff_until_ms) {
			l->backoff_until_ms = 0;
			listen_arm(l, true);
		} else if (t < 0 || l->backoff_until_ms - now < (uint64_t)t) {
			t = (int)(l->backoff_until_ms - now);
		}
	}
	return t;
}

/* Its hang-up says the keeper died (restart.c starts another). */
static int watch_keeper(struct loop *l)
{
	struct epoll_event ev = { .events = 0, .data.ptr = &l->kfd };

	l->kfd = restart_fd();
	if (l->kfd < 0)
		return 0;
	return epoll_ctl(l->ep, EPOLL_CTL_ADD, l->kfd, &ev) < 0 ? -errno : 0;
}

/* The loop's own descriptors, made before the daemon listens: once its
 * socket exists, the daemon holds all it holds when idle. */
static struct loop the_loop = { .ep = -1, .reserve = -1, .kfd = -1 };

int conn_prepare(void)
{
	struct loop *l = &the_loop;

	if (l->buf)
		return 0;
	l->list.prev = l->list.next = &l->list;
	l->buf = malloc(PROTO_MAX_MSG);
	l->ep = epoll_create1(EPOLL_CLOEXEC);
	l->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
	return l->buf && l->ep >= 0 && l->reserve >= 0 ? 0 : -errno;
}

static int loop_init(struct loop *l, int ls, int sfd)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int ret = conn_prepare();

	if (ret)
		return ret;
	l->ls = ls;
	l->sfd = sfd;
	ev.data.ptr = &l->ls;
	if (epoll_ctl(l->ep, EPOLL_CTL_ADD, ls, &ev) < 0)
		return -errno;
	ev.data.ptr = &l->sfd;
	if (epoll_ctl(l->ep, EPOLL_CTL_ADD, sfd, &ev) < 0)
		return -errno;
	return watch_keeper(l);
}

static void loop_fini(struct loop *l)
{
	while (l->list.next && l->list.next != &l->list)
		conn_close(l, l->list.next, false);
	if (l->reserve >= 0)
		close(l->reserve);
	if (l->ep >= 0)
		close(l->ep);
	free(l->buf);
}

/*
 * conn_loop() - serve connections on @ls until @sfd (the signalfd of
 * SIGTERM and SIGINT) is readable. Returns 0, or -errno if it cannot
 * start.
 */
int conn_loop(int ls, int sfd)
{
	struct epoll_event ev[64];
	struct loop *l = &the_loop;
	int ret = loop_init(l, ls, sfd);

	while (!ret) {
		int n = epoll_wait(l->ep, ev, ARRAY_SIZE(ev), loop_timeout(l));
		bool stop = false;

		if (n < 0 && errno != EINTR)
			ret = -errno;
		for (int i = 0; i < n; i++) {
			if (ev[i].data.ptr == &l->sfd) {
				stop = true;
			} else if (ev[i].data.ptr == &l->kfd) {
				epoll_ctl(l->ep, EPOLL_CTL_DEL, l->kfd, NULL);
				restart_keeper_lost();
				watch_keeper(l);
			} else if (ev[i].data.ptr == &l->ls) {
				accept_one(l);
			} else {
				conn_input(l, ev[i].data.ptr);
			}
		}
		if (stop)
			break;
	}
	loop_fini(l);
	return ret;
}
