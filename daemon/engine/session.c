// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * session.c - the session engine: the threads of a session and its life.
 *
 * A front end creates a session, adds its spaces (session_add_space(),
 * also while the session runs: CRIU's tasks arrive one by one, and forks
 * add children) and calls session_run(), which starts the handler threads
 * and the push threads and runs the control loop until the session ends:
 * the front end says so (its peer closed, or it is done), session_stop()
 * is called (the daemon stops), or an event cannot be applied.
 *
 * Handler threads wait on one epoll set of every space's userfaultfd and
 * read a ready one through the shared read loop (uloop.c), so a space is
 * read by any of them, events first. A userfaultfd whose owner cleared
 * O_NONBLOCK on it reports EPOLLERR to every poll: the handler sets the
 * flag again and reads with RWF_NOWAIT anyway, so no thread ever blocks
 * in a read (faultd(8), "Hostile clients"); a client that keeps clearing
 * it loses its session.
 *
 * The control loop (the caller of session_run()) waits on the front end's
 * connection, the processes' pidfds and the session's eventfd, and calls
 * the front end's tick every PROGRESS_MS and when every page is in.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "engine_int.h"

#define PROGRESS_MS 100
#define HANDLERS_MAX 4	/* + PUSHERS install slots <= INFLIGHT_SLOTS */
#define PARKED_TICK_MS 1
#define NONBLOCK_STRIKES 64	/* O_NONBLOCK cleared this often: hostile */

static pthread_mutex_t sessions_lock = PTHREAD_MUTEX_INITIALIZER;
static struct session *sessions;
static atomic_bool stopping;	/* the daemon stops */
/* Sessions that ended because the daemon stops, left for the next one. */
static atomic_uint kept_for_next;
static atomic_uint_fast64_t next_id = 1;

static void end_or_drain(struct session *s);

/* epoll tags of the control loop: a space's pidfd has the space itself. */
static char tag_peer, tag_wake;

/* ------------------------------------------------------------------------
 * Creating a session and adding spaces.
 */

_Static_assert(HANDLERS_MAX + PUSHERS <= INFLIGHT_SLOTS,
	       "every handler and pusher has an install slot");

/*
 * One handler per CPU but one, at most HANDLERS_MAX: the restored program
 * runs beside them, and handlers that outnumber the CPUs it leaves free
 * preempt it and each other. Measured on 2 CPUs (faultd-bench run criu,
 * 256 MiB, the program reading from the start), 1 handler against 2: all
 * in 0.84x criu lazy-pages' time against 0.92-1.0x in order, 0.38x against
 * 0.55x at random, the program's p99 read 1.07x criu's against 1.76x.
 * A session with a remote source gets HANDLERS_MAX instead (its handlers
 * sleep on the network: session_own_source()).
 */
static unsigned int default_handlers(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN) - 1;

	return n < 1 ? 1 : n > HANDLERS_MAX ? HANDLERS_MAX : (unsigned int)n;
}

static int epoll_add(int epfd, int fd, uint32_t events, void *ptr)
{
	struct epoll_event ev = { .events = events, .data.ptr = ptr };

	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

/* A recorder, if @s records: its spaces are noted as they are added. */
static int record_setup(struct session *s)
{
	if (!s->o.record_path && s->o.record_fd <= 0)
		return 0;
	s->rec = malloc(sizeof(*s->rec));
	if (!s->rec)
		return -ENOMEM;
	wset_rec_init(s->rec);
	atomic_init(&s->rec_open, true);
	return 0;
}

/* The working-set descriptors of @o, when no session takes them. */
static void opts_close(const struct session_opts *o)
{
	if (o->record_fd > 0)
		close(o->record_fd);
	if (o->wset_fd > 0)
		close(o->wset_fd);
}

/*
 * session_create() - a session served by the engine for a front end,
 * with no space yet. Returns 0 or -errno. The descriptors of @o are the
 * session's (closed on failure too).
 */
int session_create(const struct session_opts *o,
		   const struct session_ops *fe, void *fe_data,
		   struct session **sp)
{
	struct session *s = calloc(1, sizeof(*s));
	int ret = -ENOMEM;

	if (!s) {
		opts_close(o);
		return -ENOMEM;
	}
	s->o = *o;
	s->fe = fe;
	s->takeover = fe->takeover;
	s->fe_data = fe_data;
	s->peer_fd = -1;
	s->record_fd = -1;
	s->old_record_fd = -1;
	s->id = atomic_fetch_add(&next_id, 1);
	s->started_ns = now_ns();
	s->nr_handlers = o->handlers ? o->handlers : default_handlers();
	if (s->nr_handlers > HANDLERS_MAX)
		s->nr_handlers = HANDLERS_MAX;
	atomic_init(&s->settled, true);
	pthread_rwlock_init(&s->spaces_lock, NULL);
	pthread_mutex_init(&s->push_lock, NULL);
	pthread_cond_init(&s->push_cond, NULL);
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	s->ctl_epfd = epoll_create1(EPOLL_CLOEXEC);
	s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->workers = calloc(HANDLERS_MAX, sizeof(*s->workers));
	if (s->epfd < 0 || s->ctl_epfd < 0 || s->wake_fd < 0 ||
	    s->stop_fd < 0) {
		ret = -errno;
		goto err;
	}
	if (!s->workers || record_setup(s))
		goto err;
	ret = epoll_add(s->epfd, s->stop_fd, EPOLLIN, NULL);
	if (!ret)
		ret = epoll_add(s->ctl_epfd, s->wake_fd, EPOLLIN, &tag_wake);
	if (ret)
		goto err;
	*sp = s;
	return 0;
err:
	session_free(s);
	return ret;
}

/*
 * session_set_identity() - an adopted session keeps the id, the peer and
 * the start time it had; new sessions get ids after it.
 */
void session_set_identity(struct session *s, uint64_t id, uid_t uid,
			  pid_t pid, uint64_t started_ns)
{
	uint64_t next = atomic_load(&next_id);

	s->id = id;
	s->uid = uid;
	s->pid = pid;
	s->started_ns = started_ns;
	while (next <= id &&
	       !atomic_compare_exchange_weak(&next_id, &next, id + 1))
		;
}

/* The index of @src among the session's sources (0 if it is not one). */
uint32_t session_source_index(const struct session *s,
			      const struct source *src)
{
	for (size_t i = 0; i < s->nr_srcs; i++)
		if (s->srcs[i] == src)
			return (uint32_t)i;
	return 0;
}

/* The session frees @src with itself. Returns 0 or -ENOMEM (not taken). */
int session_own_source(struct session *s, struct source *src)
{
	struct source **v = realloc(s->srcs, (s->nr_srcs + 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	s->srcs = v;
	s->srcs[s->nr_srcs++] = src;
	/* Reads that wait on another host: each fault's handler sleeps,
	 * and one handler would fetch one fault at a time (measured,
	 * faultd-bench run remote, 1 ms per read: on demand 2.0x slower
	 * with 1 handler than with 2). Decided before the handlers start
	 * and before the first space, whose port is made for the handlers
	 * there are (a CRIU page server's tasks come later: they keep the
	 * default). */
	if (src->remote && !s->o.handlers && !s->spaces &&
	    !atomic_load(&s->running))
		s->nr_handlers = HANDLERS_MAX;
	return 0;
}

/*
 * session_adopt_space() - add a space made by space_create() or a fork to
 * the session; its faults are served from now on. Returns 0 or -errno
 * (then the space is not added and the caller frees it).
 * Context: any thread, also while the session runs.
 */
int session_adopt_space(struct session *s, struct space *sp)
{
	uint64_t pending = atomic_load(&sp->pending);
	int ret;

	pthread_rwlock_wrlock(&s->spaces_lock);
	/* Counted before its faults can be served (once its uffd is in the
	 * epoll set): a page done before would leave the count short, and
	 * the session would never see all in. */
	if (pending)
		atomic_store(&s->all_in_ns, 0);
	atomic_fetch_add(&s->pending, pending);
	ret = epoll_add(s->epfd, sp->uffd, EPOLLIN, sp);
	if (!ret && sp->pidfd >= 0) {
		ret = epoll_add(s->ctl_epfd, sp->pidfd, EPOLLIN, sp);
		if (ret)
			epoll_ctl(s->epfd, EPOLL_CTL_DEL, sp->uffd, NULL);
	}
	if (!ret) {
		sp->next = s->spaces;
		s->spaces = sp;
		s->nr_spaces++;
	} else { /* what its faults did not take meanwhile */
		atomic_fetch_sub(&s->pending, atomic_load(&sp->pending));
	}
	pthread_rwlock_unlock(&s->spaces_lock);
	/* Nothing pending (an adopted space whose pages are all in, or
	 * none added): all in now, as a last page going in would say. */
	if (!atomic_load(&s->pending))
		session_note_all_in(s);
	if (!ret) {
		pthread_cond_broadcast(&s->push_cond);
		session_wake(s);
		if (atomic_load(&s->running)) /* a fork: keep the child too */
			session_persist(s);
	}
	return ret;
}

/*
 * session_add_space() - serve @uffd (taken over on success) of process
 * @pid, whose pidfd is @pidfd (taken over on success; -1: opened here):
 * client ranges @r onto @src (which the session must own or outlive),
 * tracked parts @seg (NULL: the ranges' parts of the source). On failure
 * *why says what was wrong with the request. Context: as adopt.
 */
int session_add_space(struct session *s, int uffd, pid_t pid, int pidfd,
		      uint64_t id, struct source *src, const struct srange *r,
		      size_t nr, const struct sseg *seg, size_t nseg,
		      const char **why, struct space **spp)
{
	struct space *sp;
	int ret = space_create(s, uffd, pid, id, src, r, nr, seg, nseg, why,
			       &sp);

	if (ret)
		return ret;
	if (pidfd >= 0) {
		sp->pidfd = pidfd;
	} else if (pid > 0) {
		sp->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
		if (sp->pidfd < 0) {
			*why = "the process is gone";
			ret = -ESRCH;
		}
	}
	if (!ret) {
		ret = session_adopt_space(s, sp);
		*why = "cannot watch the process";
	}
	if (ret) {
		sp->uffd = -1; /* still the caller's, and so is @pidfd */
		if (sp->pidfd == pidfd)
			sp->pidfd = -1;
		space_free(sp);
		return ret;
	}
	if (spp)
		*spp = sp;
	return 0;
}

/*
 * session_settle() - the peer has registered every range it will (CRIU:
 * RSTF): a page in no mapping is gone from now on, and the push starts.
 * Context: any thread.
 */
void session_settle(struct session *s)
{
	atomic_store(&s->settled, true);
	pthread_cond_broadcast(&s->push_cond);
}

/*
 * session_peer_done() - the front end needs its connection no more (the
 * peer closed it and the session goes on without it): it leaves the
 * control loop, is closed if the session owns it, and leaves the kept
 * entry. Context: the control loop (the front end's peer_input).
 */
void session_peer_done(struct session *s)
{
	int fd;

	/* Taken out under spaces_lock, which a put of the entry holds (a
	 * fork's, from a handler thread): none can then send the number
	 * once it is closed, and perhaps another file's. */
	pthread_rwlock_wrlock(&s->spaces_lock);
	fd = s->peer_fd;
	s->peer_fd = -1;
	pthread_rwlock_unlock(&s->spaces_lock);
	if (fd < 0)
		return;
	epoll_ctl(s->ctl_epfd, EPOLL_CTL_DEL, fd, NULL);
	if (s->close_peer)
		close(fd);
	session_persist(s);
}

/* ------------------------------------------------------------------------
 * What a front end sets and reads (engine.h). Context: the front end's
 * thread, before session_run() for the setters but session_unsettle()
 * and session_push_from(), which any thread may call.
 */

void session_set_front(struct session *s, void *data,
		       void (*free_fn)(void *data))
{
	s->fe_data = data;
	s->fe_free = free_fn;
}

void *session_front(const struct session *s)
{
	return s->fe_data;
}

void session_set_takeover(struct session *s, bool takeover)
{
	s->takeover = takeover;
}

void session_set_peer(struct session *s, int fd, bool close)
{
	s->peer_fd = fd;
	s->close_peer = close;
}

void session_set_name(struct session *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->name_buf, sizeof(s->name_buf), fmt, ap);
	va_end(ap);
	s->o.name = s->name_buf;
}

const char *session_name(const struct session *s)
{
	return s->o.name ? s->o.name : "session";
}

void session_set_owner(struct session *s, uid_t uid, pid_t pid)
{
	s->uid = uid;
	s->pid = pid;
}

uint64_t session_id(const struct session *s)
{
	return s->id;
}

pid_t session_pid(const struct session *s)
{
	return s->pid;
}

unsigned int session_nr_spaces(const struct session *s)
{
	return atomic_load(&s->nr_spaces);
}

size_t session_nr_sources(const struct session *s)
{
	return s->nr_srcs;
}

struct source *session_source(const struct session *s, size_t i)
{
	return i < s->nr_srcs ? s->srcs[i] : NULL;
}

const struct session_opts *session_opts(const struct session *s)
{
	return &s->o;
}

unsigned int session_handlers(const struct session *s)
{
	return s->nr_handlers;
}

bool session_records(const struct session *s)
{
	return s->rec != NULL;
}

/*
 * session_unsettle() - the peer has not registered every range it will
 * yet (CRIU, until RSTF): a page in no registered mapping may be one
 * still to come, and nothing is pushed. session_settle() ends it.
 */
void session_unsettle(struct session *s)
{
	atomic_store(&s->settled, false);
}

/* session_push_from() - the push goes on at @addr of @sp (NULL: the
 * newest space): the peer wants it next. Context: any thread. */
void session_push_from(struct session *s, struct space *sp, uint64_t addr)
{
	atomic_store(&s->push_space, sp ? sp : s->spaces);
	atomic_store(&s->push_from, addr);
	atomic_fetch_add(&s->push_hint_seq, 1);
	pthread_cond_broadcast(&s->push_cond);
}

/* ------------------------------------------------------------------------
 * Notes from the fault path.
 */

void session_wake(struct session *s)
{
	uint64_t one = 1;

	(void)!write(s->wake_fd, &one, sizeof(one));
}

bool session_all_in(const struct session *s)
{
	return atomic_load(&s->all_in_ns) != 0;
}

/* The last pending page of the session went in. */
void session_note_all_in(struct session *s)
{
	uint64_t zero = 0;

	atomic_compare_exchange_strong(&s->all_in_ns, &zero, now_ns());
	session_wake(s);
}

/* A fault came: counted; the first one may start the push. */
void session_note_fault(struct session *s)
{
	uint64_t zero = 0, now = now_ns();

	atomic_fetch_add(&s->faults, 1);
	if (atomic_compare_exchange_strong(&s->first_fault_ns, &zero, now))
		pthread_cond_broadcast(&s->push_cond);
}

/*
 * session_record_save() - write what @s recorded (session_opts) now.
 * Returns 0, -ENOENT (it does not record) or -errno, which is logged.
 * Context: the control loop's thread (or after the session ran).
 */
int session_record_save(struct session *s)
{
	struct wset ws;
	uint64_t noted;
	int ret;

	if (!s->rec)
		return -ENOENT;
	ret = wset_rec_copy(s->rec, &ws);
	noted = ws.nr;
	if (!ret) /* a page both sides of a fork faulted on is listed once */
		ret = wset_dedupe(&ws);
	if (!ret)
		ret = s->o.record_path ? wset_save(s->o.record_path, &ws)
				       : wset_write_fd(s->o.record_fd, &ws);
	if (ret) {
		dlog(LOG_WARNING, "%s: cannot write the working set%s%s: %s",
		     s->o.name, s->o.record_path ? " " : "",
		     s->o.record_path ? s->o.record_path : "", strerror(-ret));
	} else {
		dlog(LOG_INFO, "%s: working set written: %llu pages", s->o.name,
		     (unsigned long long)ws.nr);
		s->rec->written = noted;
		s->rec_saved = true;
	}
	wset_free(&ws);
	return ret;
}

/*
 * The record ends: written now, no first fault noted from here on, the
 * spaces' fault-around back, and a push that waited for it goes.
 * Context: the control loop's thread.
 */
static void record_end(struct session *s)
{
	if (!s->rec || !atomic_load(&s->rec_open))
		return;
	atomic_store(&s->rec_open, false);
	session_record_save(s);
	pthread_rwlock_rdlock(&s->spaces_lock);
	for (struct space *sp = s->spaces; sp; sp = sp->next)
		space_record_ended(sp);
	pthread_rwlock_unlock(&s->spaces_lock);
	pthread_cond_broadcast(&s->push_cond);
}

/*
 * session_record_end() - ask @s to write its record now and to end it
 * (the control loop does it). Nothing when it does not record.
 * Context: any thread.
 */
void session_record_end(struct session *s)
{
	if (!s->rec)
		return;
	atomic_store(&s->rec_end_asked, true);
	session_wake(s);
}

/* session_record_end() of every running session. Context: any thread. */
void sessions_record_end_all(void)
{
	pthread_mutex_lock(&sessions_lock);
	for (struct session *s = sessions; s; s = s->next)
		session_record_end(s);
	pthread_mutex_unlock(&sessions_lock);
}

/* ------------------------------------------------------------------------
 * Handler threads.
 */

/*
 * The owner of @sp's userfaultfd cleared O_NONBLOCK on it (the flag is
 * the open file's, shared): set it again, so that poll works; a client
 * that keeps doing it loses its session.
 */
static void uffd_nonblock(struct space *sp, unsigned int *strikes)
{
	int fl = fcntl(sp->uffd, F_GETFL);

	if (fl < 0 || (fl & O_NONBLOCK))
		return;
	fcntl(sp->uffd, F_SETFL, fl | O_NONBLOCK);
	if (++*strikes == NONBLOCK_STRIKES) {
		dlog(LOG_WARNING, "%s: the client keeps clearing O_NONBLOCK on its "
			"userfaultfd: ending the session", sp->s->o.name);
		session_stop(sp->s);
	}
}

/* Serve what @sp's userfaultfd holds, up to a few batches. */
static void worker_serve(struct worker *w, struct space *sp)
{
	for (int i = 0; i < 4; i++) {
		ssize_t n = uloop_service(&w->rd, &sp->port);

		if (n <= 0 || (size_t)n < sp->port.batch)
			break;
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct session *s = w->s;
	unsigned int strikes = 0;

	while (!atomic_load(&s->stop)) {
		struct epoll_event ev[8];
		int n = epoll_wait(s->epfd, ev, 8,
				   w->rd.nr_parked ? PARKED_TICK_MS : -1);

		for (int i = 0; i < n && !atomic_load(&s->stop); i++) {
			struct space *sp = ev[i].data.ptr;

			if (!sp)
				continue; /* stop_fd */
			if (ev[i].events & EPOLLERR)
				uffd_nonblock(sp, &strikes);
			worker_serve(w, sp);
		}
		if (w->rd.nr_parked)
			uloop_retry_parked(&w->rd);
	}
	return NULL;
}

/* The largest window a fault of any space may read: a reader in
 * order's, a huge page too. */
static size_t worker_buf_len(const struct session *s)
{
	size_t len = s->o.around > AROUND_SEQ_MAX ? s->o.around
						  : AROUND_SEQ_MAX;

	return len > (2ul << 20) ? len : 2ul << 20;
}

static int workers_start(struct session *s)
{
	for (unsigned int i = 0; i < s->nr_handlers; i++) {
		struct worker *w = &s->workers[i];
		int ret;

		w->s = s;
		w->slot = i;
		w->rd.owner = w;
		w->buf_len = worker_buf_len(s);
		w->buf = malloc(w->buf_len);
		if (!w->buf)
			return -ENOMEM;
		ret = thread_start(&w->thread, worker_main, w, "faultd-h");
		if (ret < 0) {
			free(w->buf);
			w->buf = NULL;
			return ret;
		}
	}
	return 0;
}

static void workers_stop(struct session *s)
{
	uint64_t one = 1;

	(void)!write(s->stop_fd, &one, sizeof(one));
	for (unsigned int i = 0; i < s->nr_handlers; i++) {
		struct worker *w = &s->workers[i];

		if (w->buf)
			pthread_join(w->thread, NULL);
		free(w->buf);
		w->buf = NULL;
	}
}

/* ------------------------------------------------------------------------
 * The control loop.
 */

/* @sp's process exited: nothing of it is served any more. */
static bool space_exited(struct session *s, struct space *sp)
{
	epoll_ctl(s->ctl_epfd, EPOLL_CTL_DEL, sp->pidfd, NULL);
	space_mark_gone(sp);
	return !s->fe->space_gone || s->fe->space_gone(s, sp);
}

static bool control_event(struct session *s, const struct epoll_event *ev)
{
	uint64_t v;

	if (ev->data.ptr == &tag_wake) {
		(void)!read(s->wake_fd, &v, sizeof(v));
		return true;
	}
	if (ev->data.ptr == &tag_peer)
		return !s->fe->peer_input || s->fe->peer_input(s);
	return space_exited(s, ev->data.ptr);
}

static void control_loop(struct session *s)
{
	uint64_t last = 0;
	bool told_all_in = false;

	while (!atomic_load(&s->stop)) {
		struct epoll_event ev[8];
		int n = epoll_wait(s->ctl_epfd, ev, 8, PROGRESS_MS);
		uint64_t now = now_ns();
		bool all_in = session_all_in(s);

		for (int i = 0; i < n; i++)
			if (!control_event(s, &ev[i]))
				session_end(s);
		if (atomic_load(&s->end_asked))
			end_or_drain(s);
		/* Every page in: nothing can fault for the first time any
		 * more, and the record is whole before the peer hears of it
		 * (a recording session only). Or the front end ends it. */
		if ((all_in && !told_all_in) ||
		    atomic_exchange(&s->rec_end_asked, false))
			record_end(s);
		if (atomic_load(&s->stop) || !s->fe->tick) {
			told_all_in = all_in;
			continue;
		}
		if (all_in && !told_all_in) {
			s->fe->tick(s, true);
		} else if (now - last >= PROGRESS_MS * 1000000ull) {
			s->fe->tick(s, all_in);
			last = now;
		}
		told_all_in = all_in;
	}
}

/*
 * session_run() - serve @s until it ends. Returns 0, or -errno when its
 * threads could not be started. The caller then frees the session.
 * Context: the front end's thread, which runs the control loop.
 */
int session_run(struct session *s)
{
	int ret = 0;

	if (s->peer_fd >= 0)
		ret = epoll_add(s->ctl_epfd, s->peer_fd, EPOLLIN, &tag_peer);
	pthread_mutex_lock(&sessions_lock);
	s->next = sessions;
	sessions = s;
	/* Ordered with sessions_stop_all() by the lock: it sees @s, or @s
	 * sees it stopping. */
	if (atomic_load(&stopping))
		session_stop(s);
	pthread_mutex_unlock(&sessions_lock);
	atomic_store(&s->running, true);
	/* Kept before anything is served: a daemon killed from the first
	 * fault on leaves the session to the next. */
	if (!ret && !s->kept)
		session_persist(s);
	if (!ret)
		ret = workers_start(s);
	if (!ret)
		ret = push_start(s);
	if (!ret)
		control_loop(s);
	atomic_store(&s->stop, true);
	workers_stop(s);
	push_stop(s);
	/* Its threads are stopped: nothing is noted any more. */
	if (s->rec && (!s->rec_saved || s->rec->written != s->rec->set.nr))
		session_record_save(s);
	if (s->fe->ended)
		s->fe->ended(s);
	/* A daemon that stops leaves what nobody else can serve for the
	 * next one; everything else ended for good. */
	if (!daemon_stopping() || !s->fe->front_id || s->takeover)
		session_unpersist(s);
	else
		atomic_fetch_add(&kept_for_next, 1);
	pthread_mutex_lock(&sessions_lock);
	for (struct session **p = &sessions; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	pthread_mutex_unlock(&sessions_lock);
	return ret;
}

/* Do its forked children still need pages only the daemon can give? */
static bool forks_pending(struct session *s)
{
	bool any = false;

	pthread_rwlock_rdlock(&s->spaces_lock);
	for (struct space *sp = s->spaces; sp && !any; sp = sp->next)
		any = sp->forked && !atomic_load(&sp->dead) &&
		      atomic_load(&sp->pending);
	pthread_rwlock_unlock(&s->spaces_lock);
	return any;
}

/*
 * The peer's own spaces are its to serve from now on: the handlers stop
 * reading them, and nothing of them is pending. Context: the control
 * loop.
 */
static void drain_begin(struct session *s)
{
	pthread_rwlock_rdlock(&s->spaces_lock);
	for (struct space *sp = s->spaces; sp; sp = sp->next)
		if (!sp->forked) {
			epoll_ctl(s->epfd, EPOLL_CTL_DEL, sp->uffd, NULL);
			space_mark_gone(sp);
		}
	pthread_rwlock_unlock(&s->spaces_lock);
	atomic_store(&s->draining, true);
	dlog(LOG_INFO, "%s: its peer is gone: the pages its forked children "
	     "still lack are pushed before it ends", session_name(s));
	if (push_start(s))
		dlog(LOG_WARNING, "%s: no push thread: its forked children's "
		     "pages are served as they fault only", session_name(s));
	pthread_cond_broadcast(&s->push_cond);
}

/*
 * The session was asked to end: it stops, unless a forked child of its
 * peer still needs pages that only the daemon holds (the child's
 * userfaultfd came with the FORK event; closed, it would read zeros):
 * then it drains first. A session whose spaces are kept for the next
 * daemon does not drain: that daemon serves them. Context: the control
 * loop.
 */
static void end_or_drain(struct session *s)
{
	bool for_good = !daemon_stopping() || !s->fe->front_id ||
			s->fe->takeover;

	if (!for_good || !forks_pending(s)) {
		session_stop(s);
		return;
	}
	if (!atomic_load(&s->draining))
		drain_begin(s);
}

/*
 * session_end() - ask @s to end: once its peer's forked children have
 * every page, or at once (end_or_drain()). Context: any thread.
 */
void session_end(struct session *s)
{
	atomic_store(&s->end_asked, true);
	session_wake(s);
}

/* End @s now: its threads leave their loops. Context: any thread. */
void session_stop(struct session *s)
{
	uint64_t one = 1;

	atomic_store(&s->stop, true);
	(void)!write(s->stop_fd, &one, sizeof(one));
	pthread_cond_broadcast(&s->push_cond);
	session_wake(s);
}

/* Free a session that does not run (any more), its spaces and sources. */
void session_free(struct session *s)
{
	if (!s)
		return;
	while (s->spaces) {
		struct space *sp = s->spaces;

		s->spaces = sp->next;
		space_free(sp);
	}
	for (size_t i = 0; i < s->nr_srcs; i++)
		source_destroy(s->srcs[i]);
	free(s->srcs);
	free(s->workers);
	replay_free(s);
	if (s->rec) {
		wset_rec_free(s->rec);
		free(s->rec);
	}
	opts_close(&s->o);
	if (s->record_fd >= 0)
		close(s->record_fd);
	if (s->close_peer && s->peer_fd >= 0)
		close(s->peer_fd);
	if (s->fe_free)
		s->fe_free(s->fe_data);
	if (s->epfd >= 0)
		close(s->epfd);
	if (s->ctl_epfd >= 0)
		close(s->ctl_epfd);
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	if (s->stop_fd >= 0)
		close(s->stop_fd);
	pthread_rwlock_destroy(&s->spaces_lock);
	pthread_mutex_destroy(&s->push_lock);
	pthread_cond_destroy(&s->push_cond);
	free(s);
}


bool daemon_stopping(void)
{
	return atomic_load(&stopping);
}

/* Ask every session to end (the daemon is stopping); one that starts
 * after this is stopped as it starts (session_run()). */
void sessions_stop_all(void)
{
	atomic_store(&stopping, true);
	pthread_mutex_lock(&sessions_lock);
	for (struct session *s = sessions; s; s = s->next)
		session_end(s);
	pthread_mutex_unlock(&sessions_lock);
}

/* ------------------------------------------------------------------------
 * What a session reports.
 */

static uint64_t ms_since(uint64_t from_ns, uint64_t to_ns)
{
	return to_ns > from_ns ? (to_ns - from_ns) / 1000000 : 0;
}

static void view_add_space(struct session_view *v, struct space *sp,
			   struct stat_block *lat)
{
	v->pages_total += sp->nr_pages;
	v->pages_urgent += atomic_load(&sp->st.urgent);
	v->pages_background += atomic_load(&sp->st.background);
	v->pages_zero += atomic_load(&sp->st.zero);
	v->faults += atomic_load(&sp->st.faults);
	v->eexist += atomic_load(&sp->st.eexist);
	v->eagain += atomic_load(&sp->st.eagain);
	v->removes += atomic_load(&sp->st.removes);
	v->poisoned += atomic_load(&sp->st.poisoned);
	v->pages_replayed += atomic_load(&sp->st.replayed);
	stat_sum(lat, &sp->lat);
}

/* session_view() - the counters of @s, summed over its spaces. */
void session_view(struct session *s, struct session_view *v)
{
	struct faultd_stats st = { .size = sizeof(st) };
	struct stat_block lat = { 0 };
	uint64_t first = atomic_load(&s->first_fault_ns);
	uint64_t all_in = atomic_load(&s->all_in_ns);

	*v = (struct session_view){ .id = s->id, .pid = s->pid, .uid = s->uid,
				    .all_in = all_in != 0, .kept = s->kept };
	pthread_rwlock_rdlock(&s->spaces_lock);
	for (struct space *sp = s->spaces; sp; sp = sp->next, v->spaces++)
		view_add_space(v, sp, &lat);
	pthread_rwlock_unlock(&s->spaces_lock);
	stat_export(&st, &lat);
	v->p50_ns = faultd_stats_latency(&st, 50);
	v->p99_ns = faultd_stats_latency(&st, 99);
	v->first_fault_ms = first ? ms_since(s->started_ns, first) : 0;
	v->all_in_ms = all_in ? ms_since(s->started_ns, all_in) : 0;
	v->age_ms = ms_since(s->started_ns, now_ns());
	v->replay_bytes = atomic_load(&s->replay_bytes);
	if (atomic_load(&s->replay_end_ns))
		v->replay_ms = ms_since(atomic_load(&s->replay_start_ns),
					atomic_load(&s->replay_end_ns));
}

/*
 * sessions_list() - the running sessions, all of them (@all) or those of
 * user @uid only. Returns how many were written to @out.
 */
size_t sessions_list(struct session_view *out, size_t max, bool all,
		     uid_t uid)
{
	size_t n = 0;

	pthread_mutex_lock(&sessions_lock);
	for (struct session *s = sessions; s && n < max; s = s->next)
		if (all || s->uid == uid)
			session_view(s, &out[n++]);
	pthread_mutex_unlock(&sessions_lock);
	return n;
}

/* Put every running session again (a new keeper has none of them). */
void sessions_persist_all(void)
{
	pthread_mutex_lock(&sessions_lock);
	for (struct session *s = sessions; s; s = s->next)
		session_persist(s);
	pthread_mutex_unlock(&sessions_lock);
}

/* The sessions running now. */
size_t sessions_count(void)
{
	size_t n = 0;

	pthread_mutex_lock(&sessions_lock);
	for (struct session *s = sessions; s; s = s->next)
		n++;
	pthread_mutex_unlock(&sessions_lock);
	return n;
}

bool sessions_left_kept(void)
{
	return atomic_load(&kept_for_next) != 0;
}
