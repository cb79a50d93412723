// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * conn.c - the server's one loop: the listening sockets the front end asks
 * for, the connections until their handshake is whole, and the limits.
 *
 * The main thread runs one epoll loop over the listening sockets, the
 * signalfd, the keeper's connection and every connection in its
 * handshake: those sockets are non-blocking, and each message a
 * connection owes has a deadline. What a handshake is, is the front
 * end's (struct conn_ops); once it is whole the connection leaves the
 * loop for a thread of its own, which runs its session. However many
 * connections are open, the threads are the loop's and those of the
 * sessions.
 *
 * Limits count the users other than root: root's connections and
 * sessions are never refused because of anyone's. A user has at most
 * --max-user-connections connections in their handshake and
 * --max-user-sessions sessions; all users together --max-connections and
 * --max-sessions. So no user's connections keep another's out. A
 * connection refused is told so as its protocol does (the faultd
 * protocol answers the HELLO that comes, so that the client reads the
 * error and not a reset); at most REFUSING_MAX refusals wait for their
 * peer; past that they are closed at once.
 *
 * Out of descriptors (EMFILE, ENFILE), accept() would fail again at once
 * and the loop would spin: a reserve descriptor is closed to accept the
 * connection and close it, and the listening sockets are left alone for
 * BACKOFF_MS. A shortage is logged once, and its end once it has been
 * over for SHORTAGE_QUIET_MS, with how many connections it cost: a flood
 * that keeps the daemon short makes two lines, not two every back-off.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib.h"
#include "server.h"
#include "sockfile.h"

#define REFUSING_MAX 64
#define BACKOFF_MS 100
#define SHORTAGE_QUIET_MS 1000
#define USERS_HASH 64
#define LISTEN_MAX 80		/* the front end's, and requests' once */

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
 * The loop's state.
 */

struct listener {
	struct front_listen l;
	struct sockfile sf;
	int fd;
};

struct loop {
	int ep, sfd;
	int kfd;		/* the keeper's connection (restart.c); -1 */
	int reserve;		/* /dev/null, given up to accept-and-close */
	const struct front *front;
	struct listener *ls[LISTEN_MAX];
	unsigned int nr_ls;
	bool short_of_fds;	/* a shortage is under way (logged) */
	unsigned long dropped;	/* connections it closed at once */
	uint64_t last_short_ms;	/* its last failed accept() */
	uint64_t backoff_until_ms; /* listening sockets left alone until */
	unsigned int nr_refusing;
	struct conn list;	/* head: by deadline, the first expires first */
};

/* epoll tags of the loop's own descriptors; a listener has itself. */
static char tag_sig, tag_keeper, tag_news;

static struct loop the_loop = { .ep = -1, .reserve = -1, .kfd = -1,
				.sfd = -1 };

static unsigned int conn_deadline(const struct conn *c)
{
	unsigned int ms = c->ops->deadline_ms ? c->ops->deadline_ms() : 0;

	return ms ? ms : dopts.handshake_ms;
}

/* (Re)queue @c with its deadline: now + its kind's time, rounded up to
 * the next millisecond (it gets at least its time). Kinds differ in
 * time, so it is inserted sorted, from the end. */
static void conn_queue(struct loop *l, struct conn *c)
{
	struct conn *at;

	if (c->next) {
		c->prev->next = c->next;
		c->next->prev = c->prev;
	}
	c->deadline_ms = (now_ns() + 999999) / 1000000 + conn_deadline(c);
	for (at = l->list.prev;
	     at != &l->list && at->deadline_ms > c->deadline_ms; at = at->prev)
		;
	c->prev = at;
	c->next = at->next;
	at->next->prev = c;
	at->next = c;
}

static void conn_free(struct conn *c)
{
	if (c->ops->release)
		c->ops->release(c);
	if (c->sock >= 0)
		close(c->sock);
	peer_release(&c->peer);
	free(c);
}

/* Take @c off the loop: its socket out of the epoll set, its counts. */
static void conn_unlink(struct loop *l, struct conn *c)
{
	c->prev->next = c->next;
	c->next->prev = c->prev;
	c->prev = c->next = NULL;
	epoll_ctl(l->ep, EPOLL_CTL_DEL, c->sock, NULL);
	if (c->refusing)
		l->nr_refusing--;
	if (c->counted)
		limit_give(c->uid, false);
	c->refusing = c->counted = false;
}

static void conn_close(struct loop *l, struct conn *c)
{
	conn_unlink(l, c);
	conn_free(c);
}

/*
 * Refuse @c as its protocol does: it waits for its peer (at most
 * REFUSING_MAX such), or goes at once.
 */
static void conn_refuse(struct loop *l, struct conn *c, int err,
			const char *why)
{
	dlog(LOG_DEBUG, "%s connection of pid %d, uid %u: refused: %s",
	     c->ops->name, (int)c->peer.pid, (unsigned int)c->uid, why);
	if (c->counted) {
		limit_give(c->uid, false);
		c->counted = false;
	}
	if (c->refusing || l->nr_refusing >= REFUSING_MAX ||
	    c->ops->refuse(c, err, why) != CONN_WAIT) {
		conn_close(l, c);
		return;
	}
	c->refusing = true;
	l->nr_refusing++;
	conn_queue(l, c);
}

/* ------------------------------------------------------------------------
 * Serving a connection whose handshake is whole.
 */

static void *serve_main(void *arg)
{
	struct conn *c = arg;
	uid_t uid = c->uid;
	bool session = c->ops->session;

	c->ops->serve(c);
	conn_free(c);
	if (session)
		limit_give(uid, true);
	return NULL;
}

/* Hand @c to a thread of its own, if its user may have another session;
 * a LISTEN_ONCE listener @li then goes. */
static void conn_serve(struct loop *l, struct conn *c)
{
	const char *why = "cannot start a thread";
	int ret = c->ops->session ? limit_take(c->uid, true, &why) : 0;

	conn_unlink(l, c);
	if (!ret) {
		/* The session waits in poll(), then reads and sends on a
		 * blocking socket. */
		fcntl(c->sock, F_SETFL, fcntl(c->sock, F_GETFL) & ~O_NONBLOCK);
		ret = daemon_thread_start(serve_main, c, "faultd-session");
		if (!ret)
			return;
		why = "cannot start a thread";
		if (c->ops->session)
			limit_give(c->uid, true);
	}
	c->ops->refuse(c, ret, why);
	conn_free(c);
}

static void listener_close(struct loop *l, unsigned int i, bool served,
			   bool keep_kept);

/* What the front end says of @c, done. */
static void conn_next(struct loop *l, struct conn *c, enum conn_next next,
		      struct listener *once)
{
	switch (next) {
	case CONN_WAIT:
		return;
	case CONN_NEXT:
		conn_queue(l, c);
		return;
	case CONN_SERVE:
		conn_serve(l, c);
		break;
	case CONN_CLOSE:
		conn_close(l, c);
		return;
	}
	for (unsigned int i = 0; once && i < l->nr_ls; i++)
		if (l->ls[i] == once)
			listener_close(l, i, true, false);
}

/* The LISTEN_ONCE listener @c came through, if any (still open). */
static struct listener *conn_once(struct loop *l, const struct conn *c)
{
	for (unsigned int i = 0; i < l->nr_ls; i++)
		if ((l->ls[i]->l.flags & LISTEN_ONCE) &&
		    l->ls[i]->l.arg == c->listen_arg &&
		    l->ls[i]->l.ops == c->ops)
			return l->ls[i];
	return NULL;
}

/* A new connection on listener @li: who, whether it may, what it owes. */
static void conn_new(struct loop *l, struct listener *li, int sock)
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
	*c = (struct conn){ .sock = sock, .ops = li->l.ops,
			    .listen_arg = li->l.arg,
			    .status_only = li->l.flags & LISTEN_STATUS };
	peer_init(&c->peer);
	conn_queue(l, c);
	ret = peer_cred(sock, &c->peer);
	c->uid = c->peer.uid;
	if (ret)
		why = "cannot identify the client";
	if (!ret)
		ret = limit_take(c->uid, false, &why);
	c->counted = !ret && c->uid;
	if (!ret && c->ops->admit)
		ret = c->ops->admit(c, &why);
	if (ret)
		conn_refuse(l, c, ret, why);
}

static int listener_take(struct loop *l, struct front_listen *fl);

/* @c is readable, or hung up. */
static void conn_input(struct loop *l, struct conn *c)
{
	struct listener *once = conn_once(l, c);
	enum conn_next next = c->ops->input(c);
	struct front_listen *add = c->add;

	c->add = NULL;
	conn_next(l, c, next, once);
	if (add)
		listener_take(l, add);
}

/* Close the connections whose time is up; returns the ms until the next
 * deadline, or -1. */
static int conn_expire(struct loop *l)
{
	uint64_t now = now_ms();

	while (l->list.next != &l->list) {
		struct conn *c = l->list.next;
		struct listener *once;

		if (c->deadline_ms > now)
			return (int)(c->deadline_ms - now);
		once = conn_once(l, c);
		if (c->ops->late)
			conn_next(l, c, c->ops->late(c), once);
		else if (c->refusing)
			conn_close(l, c);
		else
			conn_refuse(l, c, -ETIMEDOUT, "no handshake in time");
	}
	return -1;
}

/* ------------------------------------------------------------------------
 * Listening and accepting.
 */

static void listen_arm(struct loop *l, bool on)
{
	for (unsigned int i = 0; i < l->nr_ls; i++) {
		struct epoll_event ev = { .events = on ? EPOLLIN : 0,
					  .data.ptr = l->ls[i] };

		epoll_ctl(l->ep, EPOLL_CTL_MOD, l->ls[i]->fd, &ev);
	}
}

/* Out of descriptors: accept the connection with the reserve's and close
 * it, then leave the listening sockets alone for a while. */
static void fd_shortage(struct loop *l, struct listener *li)
{
	int c;

	if (!l->short_of_fds)
		dlog(LOG_WARNING, "out of descriptors: new connections are "
		     "closed at once until some are free");
	l->short_of_fds = true;
	l->last_short_ms = now_ms();
	if (l->reserve >= 0)
		close(l->reserve);
	c = accept4(li->fd, NULL, NULL, SOCK_CLOEXEC);
	if (c >= 0) {
		close(c);
		l->dropped++;
	}
	l->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
	listen_arm(l, false);
	l->backoff_until_ms = now_ms() + BACKOFF_MS;
}

/* A shortage with no failed accept() for SHORTAGE_QUIET_MS is over. */
static void fd_shortage_end(struct loop *l)
{
	if (!l->short_of_fds || now_ms() < l->last_short_ms + SHORTAGE_QUIET_MS)
		return;
	dlog(LOG_WARNING, "descriptors are free again: %lu connections were "
	     "closed meanwhile", l->dropped);
	l->short_of_fds = false;
	l->dropped = 0;
}

/* One connection per readiness: a passed listening socket may block. */
static void accept_one(struct loop *l, struct listener *li)
{
	int c = accept4(li->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (c < 0) {
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
		    errno == ENOMEM)
			fd_shortage(l, li);
		return;
	}
	conn_new(l, li, c);
}

/* The time epoll_wait() may sleep: until the next deadline, the end of a
 * back-off, or the time a shortage is over. */
static int loop_timeout(struct loop *l)
{
	int t = conn_expire(l);
	uint64_t now = now_ms(), until = 0;

	fd_shortage_end(l);
	if (l->backoff_until_ms && now >= l->backoff_until_ms) {
		l->backoff_until_ms = 0;
		listen_arm(l, true);
	}
	if (l->backoff_until_ms)
		until = l->backoff_until_ms;
	else if (l->short_of_fds)
		until = l->last_short_ms + SHORTAGE_QUIET_MS;
	if (until && (t < 0 || until - now < (uint64_t)t))
		t = (int)(until > now ? until - now : 0);
	return t;
}

/*
 * Listener @li (filled but for fd and sf) listening: on its own socket,
 * or on @fd (>= 0: the keeper's, whose file is ours to remove; or
 * systemd's, @ours false, whose file is not). Returns 0 or -errno.
 */
static int listener_add(struct loop *l, struct listener *li, int fd,
			bool ours)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = li };
	unsigned int strict = li->l.flags & LISTEN_STRICT;
	int ret;

	if (l->nr_ls == LISTEN_MAX)
		return -EBUSY;
	if (li->l.fd >= 0) {
		li->fd = li->l.fd; /* its sockfile came with it */
		li->sf = li->l.sf;
	} else if (fd >= 0) {
		li->sf = (struct sockfile)SOCKFILE_INIT;
		li->fd = fd;
		if (ours)
			sockfile_adopt(&li->sf, li->l.path);
	} else if (strict) {
		li->sf = (struct sockfile)SOCKFILE_INIT;
		ret = sockfile_open(&li->sf, li->l.path, false);
		li->fd = ret ? ret : sockfile_listen(&li->sf, li->l.type,
						     0600, 16, 0);
	} else {
		li->sf = (struct sockfile)SOCKFILE_INIT;
		li->fd = daemon_listen(&li->sf, li->l.path, li->l.type);
	}
	if (li->fd < 0)
		return li->fd;
	if (epoll_ctl(l->ep, EPOLL_CTL_ADD, li->fd, &ev) < 0)
		return -errno;
	l->ls[l->nr_ls++] = li;
	return 0;
}

/* Close listener @i and remove its file, unless it is a LISTEN_KEEP one
 * and @keep_kept (the keeper holds it for the next daemon). */
static void listener_close(struct loop *l, unsigned int i, bool served,
			   bool keep_kept)
{
	struct listener *li = l->ls[i];

	epoll_ctl(l->ep, EPOLL_CTL_DEL, li->fd, NULL);
	close(li->fd);
	if (!(li->l.flags & LISTEN_KEEP) || !keep_kept)
		sockfile_remove(&li->sf);
	sockfile_close(&li->sf);
	if (!served && li->l.drop)
		li->l.drop(li->l.arg);
	l->ls[i] = l->ls[--l->nr_ls];
	free(li);
}

/* ------------------------------------------------------------------------
 * The loop.
 */

/* Its hang-up says the keeper died (restart.c starts another). */
static int watch_keeper(struct loop *l)
{
	struct epoll_event ev = { .events = 0, .data.ptr = &tag_keeper };

	l->kfd = restart_fd();
	if (l->kfd < 0)
		return 0;
	return epoll_ctl(l->ep, EPOLL_CTL_ADD, l->kfd, &ev) < 0 ? -errno : 0;
}

/*
 * conn_prepare() - the loop's own descriptors, made before the daemon
 * listens: once its socket exists, the daemon holds all it holds when
 * idle. @sfd: the signalfd of the signals the loop answers.
 */
int conn_prepare(const struct front *front, int sfd)
{
	struct loop *l = &the_loop;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &tag_sig };

	struct epoll_event news = { .events = EPOLLIN, .data.ptr = &tag_news };

	l->front = front;
	l->sfd = sfd;
	l->list.prev = l->list.next = &l->list;
	l->ep = epoll_create1(EPOLL_CLOEXEC);
	l->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (l->ep < 0 || l->reserve < 0 ||
	    epoll_ctl(l->ep, EPOLL_CTL_ADD, sfd, &ev) < 0 ||
	    (front->news &&
	     epoll_ctl(l->ep, EPOLL_CTL_ADD, front->news(), &news) < 0))
		return -errno;
	return 0;
}

/*
 * conn_listen() - listen as @fl asks, on @fd if >= 0 (a socket the keeper
 * passed, whose file is @ours, or systemd's). Context: the loop's
 * thread. Returns the socket, or -errno (said by the caller).
 */
int conn_listen(const struct front_listen *fl, int fd, bool ours)
{
	struct listener *li = calloc(1, sizeof(*li));
	int ret;

	if (!li)
		return -ENOMEM;
	li->l = *fl;
	li->l.fd = -1;
	ret = listener_add(&the_loop, li, fd, ours);
	if (ret) {
		sockfile_close(&li->sf);
		free(li);
		return ret;
	}
	return li->fd;
}

/* A signal: SIGUSR1 ends the records under way (false); any other stops
 * the loop (true). */
static bool on_signal(struct loop *l)
{
	struct signalfd_siginfo si;

	if (read(l->sfd, &si, sizeof(si)) != sizeof(si) ||
	    si.ssi_signo != SIGUSR1)
		return true;
	dlog(LOG_INFO, "SIGUSR1: the working sets recorded so far are written");
	sessions_record_end_all();
	return false;
}

static bool loop_event(struct loop *l, const struct epoll_event *ev)
{
	void *p = ev->data.ptr;

	if (p == &tag_sig)
		return on_signal(l);
	if (p == &tag_news) {
		uint64_t v;

		(void)!read(l->front->news(), &v, sizeof(v));
		return false;
	}
	if (p == &tag_keeper) {
		epoll_ctl(l->ep, EPOLL_CTL_DEL, l->kfd, NULL);
		restart_keeper_lost();
		watch_keeper(l);
		return false;
	}
	for (unsigned int i = 0; i < l->nr_ls; i++)
		if (p == l->ls[i]) {
			accept_one(l, p);
			return false;
		}
	conn_input(l, p);
	return false;
}

/*
 * conn_loop() - serve until a signal stops it (true) or the front end's
 * work is done (false), or -errno if epoll fails.
 */
int conn_loop(void)
{
	struct loop *l = &the_loop;
	struct epoll_event ev[64];
	int ret = watch_keeper(l);

	while (!ret) {
		int n = epoll_wait(l->ep, ev, 64, loop_timeout(l));
		bool stop = false;

		if (n < 0 && errno != EINTR)
			return -errno;
		for (int i = 0; i < n && !stop; i++)
			stop = loop_event(l, &ev[i]);
		if (stop)
			return 1;
		if (l->front->done && l->front->done())
			return 0;
	}
	return ret;
}

/*
 * A socket a front end's answer listens on (LISTEN_ONCE): into the loop,
 * or, when the loop has no room, closed, its file removed and its arg
 * dropped. Returns 0 or -errno.
 */
static int listener_take(struct loop *l, struct front_listen *fl)
{
	struct listener *li = calloc(1, sizeof(*li));
	int ret = li ? 0 : -ENOMEM;

	if (li) {
		li->l = *fl;
		ret = listener_add(l, li, -1, true);
	}
	if (ret) {
		dlog(LOG_WARNING, "%s: cannot listen there too: %s", fl->path,
		     strerror(-ret));
		if (fl->fd >= 0)
			close(fl->fd);
		sockfile_remove(&fl->sf);
		sockfile_close(&fl->sf);
		if (fl->drop)
			fl->drop(fl->arg);
		free(li);
	}
	free(fl);
	return ret;
}

/*
 * conn_fini() - the loop ends: its connections and listeners go, and
 * their files, but the LISTEN_KEEP ones' when @keep_kept (the keeper
 * holds them for the next daemon).
 */
void conn_fini(bool keep_kept)
{
	struct loop *l = &the_loop;

	while (l->list.next && l->list.next != &l->list)
		conn_close(l, l->list.next);
	while (l->nr_ls)
		listener_close(l, l->nr_ls - 1, false, keep_kept);
	if (l->reserve >= 0)
		close(l->reserve);
	if (l->ep >= 0)
		close(l->ep);
}
