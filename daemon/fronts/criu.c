// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * front_criu.c - CRIU's lazy-pages stream as a session (faultd(8),
 * "faultd lazy-pages"; the command is lazy_pages.c).
 *
 * `criu restore --lazy-pages` connects to WORKDIR/lazy-pages.socket and
 * sends, for every task of pstree.img, the task's pid in the dump (int32)
 * and then its userfaultfd (a 1-byte message with SCM_RIGHTS); a zombie
 * sends -pid and nothing more. At the end it sends u32 RSTF; it never
 * reads. EOF without RSTF: the restore failed.
 *
 * A task becomes a space as soon as its descriptor arrives, and its faults
 * are served at once, before the restore is over: the space maps the
 * task's address space onto itself (client address = dump-time address =
 * offset in the task's source, criu.h) and tracks the task's lazy pages.
 * Until RSTF the session is not settled (a page in no registered mapping
 * may be one still to come) and nothing is pushed. After RSTF the push
 * runs; when every task's lazy pages are in (or gone with the task, or
 * with an munmap), the session ends: one status line, and the command
 * exits 0, the only "all in" signal CRIU's callers know.
 *
 * Each message is handled before it is taken off the stream (read with
 * MSG_PEEK, which also hands over a copy of the descriptor) and the
 * session is kept (persist.c) before it is taken: a faultd lazy-pages
 * killed at any moment and started again with the same flags adopts the
 * session from its keeper, finds the message again at the head of the
 * stream and knows it (a task it has, RSTF it recorded) - nothing is lost
 * and nothing is answered with zeros.
 *
 * Working sets (faultd-working-set(5); the engine records and replays):
 * a set's space is a task, named by its pid in the dump, its source that
 * task's (whose identity is a digest of the dump's inventory and of the
 * task's pid and pagemap). A recording restore pushes nothing until the
 * record ends (every task's pages in or gone, or SIGUSR1 to the command):
 * every page a task touches faults, and is in the set. A set to replay
 * is checked against the dump before criu restore can connect
 * (criu_wset_check()) and replayed after RSTF, before the push.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "front.h"
#include "criu.h"
#include "lazy_pages.h"

#define RSTF 0x52535446u	/* "ReSTore Finished" (CRIU's uffd.c) */
#define BLOB_VERSION 2	/* 2: the dump's folder and --verify file */
#define TASKS_MAX 1400		/* as fits the record's blob */
#define ANCESTORS_MAX 64

struct criu_fe {
	struct lazy_pages *lp;
	int sock;
	bool rstf;		/* RSTF came: every task has its space */
	bool finished;		/* the status line is out */
	bool failed;		/* a failure was logged: exit non-zero */
	unsigned int zombies;
	unsigned int nr_pids;
	int32_t pid[TASKS_MAX];	/* the task of each of the session's sources */
};

/* What a restarted faultd needs of the front end (the record's blob). */
struct criu_blob {
	uint32_t version;
	uint32_t rstf;
	uint32_t zombies;
	uint32_t nr_pids;
	char dir[sizeof(((struct lazy_pages *)0)->dir)]; /* the dump's */
	char verify[sizeof(((struct lazy_pages *)0)->verify)]; /* "": none */
	int32_t pid[TASKS_MAX];
};

_Static_assert(sizeof(struct criu_blob) <= 8192, "fits the record");

/* The command's, for adopt(); NULL in the daemon, which opens the dump a
 * kept session names (lazy_daemon.c). */
static struct lazy_pages *lp_ctx;

/* ------------------------------------------------------------------------
 * Sources.
 */

/* The source of task @pid: its pages-N.img (checked against the sidecar,
 * if any) or the page server. */
static int task_source(struct lazy_pages *lp, pid_t pid, struct source **sp)
{
	if (lp->ps)
		return criu_page_server_source(lp->dump, pid, lp->ps, sp);
	return criu_task_source_checked(lp->dump, pid, lp->sums, sp);
}

/* Is set space @d a live task of the dump, with that task's source? */
static bool set_space_known(const struct wset_space *d, void *arg, char *why,
			    size_t why_len)
{
	struct lazy_pages *lp = arg;
	const struct criu_task *t;
	size_t n = criu_dump_tasks(lp->dump, &t), i;
	struct source *src = NULL;
	bool same;

	for (i = 0; i < n && (uint64_t)t[i].pid != d->space_id; i++)
		;
	if (i == n || t[i].zombie || task_source(lp, t[i].pid, &src)) {
		snprintf(why, why_len, "it names task %llu, which is no live "
			 "task of this dump", (unsigned long long)d->space_id);
		return false;
	}
	same = d->src_size == src->size && d->page_size == src->page_size &&
	       !memcmp(d->src_id, src->id, sizeof(src->id));
	source_destroy(src);
	if (!same)
		snprintf(why, why_len, "task %llu: recorded for another dump "
			 "(the set names a dump by its inventory and the "
			 "task's pagemap)", (unsigned long long)d->space_id);
	return same;
}

/*
 * criu_wset_check() - is the set at @path one of restores of @lp's dump?
 * Returns 0, or -errno with *why (replay_check()). Context: the command,
 * before it listens.
 */
int criu_wset_check(struct lazy_pages *lp, const char *path, char *why,
		    size_t why_len)
{
	return replay_check(path, set_space_known, lp, why, why_len);
}

/* ------------------------------------------------------------------------
 * Tasks.
 */

/* The parent of process @pid (from /proc), or -1. */
static pid_t proc_ppid(pid_t pid)
{
	char path[64], buf[512], *p;
	FILE *f;
	int ppid = -1;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')) &&
	    sscanf(p + 1, " %*c %d", &ppid) != 1)
		ppid = -1;
	fclose(f);
	return ppid;
}

/*
 * The pidfd of restored task @pid, or -1: a pid of the dump names the
 * task only where the restore did not make a new pid namespace, so the
 * process must be a descendant of the criu restore that connected
 * (@criu), which holds its tree until RSTF. A space without a pidfd sees
 * its task's end when an install finds the process gone (ESRCH).
 */
static int task_pidfd(pid_t criu, pid_t pid)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	pid_t p = pid;

	for (int i = 0; fd >= 0 && i < ANCESTORS_MAX && p > 1; i++) {
		p = proc_ppid(p);
		if (p == criu &&
		    !syscall(SYS_pidfd_send_signal, fd, 0, NULL, 0))
			return fd;
	}
	if (fd >= 0)
		close(fd);
	return -1;
}

static bool have_task(const struct criu_fe *f, pid_t pid)
{
	for (unsigned int i = 0; i < f->nr_pids; i++)
		if (f->pid[i] == pid)
			return true;
	return false;
}

/* The dump's task @pid, or NULL. */
static const struct criu_task *dump_task(const struct lazy_pages *lp,
					 pid_t pid)
{
	const struct criu_task *t;
	size_t n = criu_dump_tasks(lp->dump, &t);

	for (size_t i = 0; i < n; i++)
		if (t[i].pid == pid)
			return &t[i];
	return NULL;
}

/* The space of task @pid: the identity map of its address space. */
static int add_space(struct session *s, struct criu_fe *f, pid_t pid,
		     int uffd, struct source *src, const char **why)
{
	const struct criu_range *lazy;
	ssize_t n = criu_task_lazy(f->lp->dump, pid, &lazy);
	struct srange r = { 0, src->size, 0 };
	struct sseg *seg = calloc(n > 0 ? (size_t)n : 1, sizeof(*seg));
	int pidfd, ret;

	if (!seg)
		return -ENOMEM;
	for (ssize_t i = 0; i < n; i++)
		seg[i] = (struct sseg){ lazy[i].start, lazy[i].len, 0 };
	pidfd = task_pidfd(session_pid(s), pid);
	ret = session_add_space(s, uffd, pidfd >= 0 ? pid : 0, pidfd,
				(uint64_t)pid, src, &r, 1, seg,
				n > 0 ? (size_t)n : 0, why, NULL);
	if (ret && pidfd >= 0)
		close(pidfd);
	free(seg);
	return ret;
}

/*
 * A task's userfaultfd: its source, its space, served from now on and
 * kept (session_add_space() puts the session again) before the message
 * is taken off the stream. Returns 0 or -errno (logged).
 */
static int take_task(struct session *s, struct criu_fe *f, pid_t pid,
		     int uffd)
{
	const struct criu_task *t = dump_task(f->lp, pid);
	struct source *src = NULL;
	const char *why = "the dump has no such live task";
	int ret = t && !t->zombie ? check_uffd(uffd, &why) : -ESRCH;

	if (!ret && f->nr_pids == TASKS_MAX) {
		why = "too many tasks";
		ret = -E2BIG;
	}
	if (!ret) {
		why = "cannot make its source";
		ret = task_source(f->lp, pid, &src);
	}
	if (!ret && (ret = session_own_source(s, src)))
		source_destroy(src);
	if (!ret) {
		f->pid[f->nr_pids++] = pid;
		ret = add_space(s, f, pid, uffd, src, &why);
		if (ret)
			f->nr_pids--; /* its source stays, unused */
	}
	if (ret)
		dlog(LOG_WARNING, "%s: task %d: %s: %s", session_name(s), (int)pid, why,
		     strerror(-ret));
	else
		dlog(LOG_INFO, "%s: task %d: served", session_name(s), (int)pid);
	return ret;
}

/* ------------------------------------------------------------------------
 * The stream.
 */

/* recvmsg() of up to @len bytes and the descriptor they carry (*fd, -1:
 * none). Returns the bytes, 0 at EOF, or -errno. */
static ssize_t recv_fd(int sock, int flags, void *buf, size_t len, int *fd)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} c;
	struct iovec iov = { buf, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = c.buf,
			    .msg_controllen = sizeof(c.buf) };
	ssize_t n = recvmsg(sock, &m, flags | MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	*fd = -1;
	if (n < 0)
		return -errno;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm;
	     cm = CMSG_NXTHDR(&m, cm)) {
		int k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		for (int i = 0; i < k; i++) {
			int x;

			memcpy(&x, CMSG_DATA(cm) + i * sizeof(int), sizeof(x));
			if (*fd < 0)
				*fd = x;
			else
				close(x); /* one is all a message carries */
		}
	}
	return n;
}

/* Take @len bytes (and a descriptor copy) off the stream, seen already. */
static void consume(int sock, size_t len)
{
	char buf[8];
	int fd;

	if (recv_fd(sock, 0, buf, len, &fd) >= 0 && fd >= 0)
		close(fd);
}

static void criu_finish(struct session *s, struct criu_fe *f);

/* RSTF: kept as seen before it is taken, then the push starts. */
static bool on_rstf(struct session *s, struct criu_fe *f)
{
	const struct criu_task *t;
	size_t n = criu_dump_tasks(f->lp->dump, &t);

	if (!f->rstf) {
		f->rstf = true;
		session_settle(s);
		session_persist(s);
		dlog(LOG_INFO, "%s: restore finished (RSTF): %u tasks, %u zombies",
		     session_name(s), f->nr_pids, f->zombies);
		if (f->nr_pids + f->zombies < n)
			dlog(LOG_WARNING, "%s: RSTF before %zu of the dump's %zu tasks "
				"sent their userfaultfd", session_name(s),
			     n - f->nr_pids - f->zombies, n);
	}
	consume(f->sock, 4);
	if (session_all_in(s))
		criu_finish(s, f);
	return true;
}

/* The stream ended. */
static bool on_eof(struct session *s, struct criu_fe *f)
{
	if (f->rstf) {
		session_peer_done(s);
		return true;
	}
	dlog(LOG_WARNING, "%s: criu restore closed its connection before RSTF: the "
		"restore failed", session_name(s));
	f->failed = true;
	return false;
}

/* A task's pid and, with it, its descriptor (peeked: not taken yet). */
static bool on_task(struct session *s, struct criu_fe *f, int32_t pid)
{
	char buf[5];
	int fd;
	ssize_t n = recv_fd(f->sock, MSG_PEEK, buf, sizeof(buf), &fd);

	if (n == 4 && fd < 0) {
		sched_yield(); /* its descriptor follows: the sender is in
				  the middle of its two sends */
		return true;
	}
	if (n != 5 || fd < 0) {
		if (fd >= 0)
			close(fd);
		dlog(LOG_WARNING, "%s: task %d: no userfaultfd with its pid: not CRIU's "
			"stream", session_name(s), (int)pid);
		f->failed = true;
		return false;
	}
	if (have_task(f, pid)) { /* seen by a faultd before this one */
		close(fd);
		consume(f->sock, 5);
		return true;
	}
	if (take_task(s, f, pid, fd)) {
		close(fd);
		f->failed = true;
		return false;
	}
	consume(f->sock, 5);
	return true;
}

static bool on_zombie(struct session *s, struct criu_fe *f, int32_t pid)
{
	const struct criu_task *t = dump_task(f->lp, -pid);

	if (!t || !t->zombie) {
		dlog(LOG_WARNING, "%s: %d: not a zombie of the dump", session_name(s),
		     (int)-pid);
		f->failed = true;
		return false;
	}
	f->zombies++;
	session_persist(s);
	consume(f->sock, 4);
	return true;
}

/* The next message of criu restore. Returns false: end the session. */
static bool criu_peer_input(struct session *s)
{
	struct criu_fe *f = session_front(s);
	uint32_t v;
	int fd;
	ssize_t n = recv_fd(f->sock, MSG_PEEK, &v, sizeof(v), &fd);

	if (fd >= 0)
		close(fd);
	if (n == -EAGAIN || n == -EINTR)
		return true;
	if (n == 0 || n == -ECONNRESET)
		return on_eof(s, f);
	if (n != sizeof(v) || (f->rstf && v != RSTF)) {
		dlog(LOG_WARNING, "%s: %s", session_name(s),
		     n < 0 ? strerror((int)-n)
			   : "a message that is not of CRIU's stream");
		f->failed = true;
		return false;
	}
	if (v == RSTF)
		return on_rstf(s, f);
	if ((int32_t)v < 0 && (int32_t)v != INT32_MIN)
		return on_zombie(s, f, (int32_t)v);
	if (v != 0)
		return on_task(s, f, (int32_t)v);
	dlog(LOG_WARNING, "%s: pid 0: not CRIU's stream", session_name(s));
	f->failed = true;
	return false;
}

/* ------------------------------------------------------------------------
 * The session's end.
 */

/*
 * Every task's pages are in: the session ends. Its entry outside the
 * daemon goes first: a faultd killed after the status line must leave
 * no copy of the tasks' userfaultfds held, or their next faults on pages
 * that were never data (zeros, the kernel's to give once no userfaultfd is
 * open) would wait for a daemon that has nothing to adopt.
 */
static void criu_finish(struct session *s, struct criu_fe *f)
{
	struct session_view v;

	if (f->finished)
		return;
	f->finished = true;
	session_unpersist(s);
	session_view(s, &v);
	if (v.poisoned)
		f->failed = true;
	fprintf(stderr, "faultd lazy-pages: %s: %u tasks, %llu pages in "
		"(%llu for faults, %llu pushed, %llu zero; %llu replayed), "
		"%llu poisoned, %llu faults, fault p50 %llu us p99 %llu us, "
		"%llu ms; %llu pages were in already\n",
		v.poisoned ? "restore incomplete" : "all in", v.spaces,
		(unsigned long long)(v.pages_urgent + v.pages_background +
				     v.pages_zero),
		(unsigned long long)v.pages_urgent,
		(unsigned long long)v.pages_background,
		(unsigned long long)v.pages_zero,
		(unsigned long long)v.pages_replayed,
		(unsigned long long)v.poisoned, (unsigned long long)v.faults,
		(unsigned long long)(v.p50_ns / 1000),
		(unsigned long long)(v.p99_ns / 1000),
		(unsigned long long)v.age_ms,
		(unsigned long long)v.eexist);
	session_stop(s);
}

static void criu_tick(struct session *s, bool all_in)
{
	struct criu_fe *f = session_front(s);

	if (all_in && f->rstf)
		criu_finish(s, f);
}

/* A task exited: the others are served on. */
static bool criu_space_gone(struct session *s, struct space *sp)
{
	dlog(LOG_INFO, "%s: task %llu exited", session_name(s),
	     (unsigned long long)space_id(sp));
	return true;
}

/* The session is freed: the command learns how it ended. */
static void criu_fe_free(void *arg)
{
	struct criu_fe *f = arg;

	lazy_pages_ended(f->lp, f->finished && !f->failed);
	free(f);
}

/* ------------------------------------------------------------------------
 * Keeping and adopting.
 */

static size_t criu_save(struct session *s, void *blob, size_t max)
{
	struct criu_fe *f = session_front(s);
	struct criu_blob *b = blob;
	size_t len = offsetof(struct criu_blob, pid) +
		     f->nr_pids * sizeof(b->pid[0]);

	if (max < len)
		return 0;
	b->version = BLOB_VERSION;
	b->rstf = f->rstf;
	b->zombies = f->zombies;
	b->nr_pids = f->nr_pids;
	memcpy(b->dir, f->lp->dir, sizeof(b->dir));
	memcpy(b->verify, f->lp->verify, sizeof(b->verify));
	memcpy(b->pid, f->pid, f->nr_pids * sizeof(b->pid[0]));
	return len;
}

static void criu_name(struct session *s)
{
	session_set_name(s, "lazy-pages %llu",
			 (unsigned long long)session_id(s));
}

static struct criu_fe *fe_new(struct lazy_pages *lp, int sock)
{
	struct criu_fe *f = calloc(1, sizeof(*f));

	if (f) {
		f->lp = lp;
		f->sock = sock;
	}
	return f;
}

static void fe_attach(struct session *s, struct criu_fe *f, int sock)
{
	session_set_front(s, f, criu_fe_free);
	session_set_peer(s, sock, true);
	criu_name(s);
}

/*
 * What the adopted session is served from: the command's dump, or (in
 * the daemon) the dump the blob names, opened again for this session.
 */
static int adopt_lp(struct session *s, const struct criu_blob *b,
		    struct lazy_pages **lpp)
{
	char why[512];
	int ret;

	if (lp_ctx) {
		*lpp = lp_ctx;
		return 0;
	}
	if (!memchr(b->dir, '\0', sizeof(b->dir)) ||
	    !memchr(b->verify, '\0', sizeof(b->verify)))
		return -EBADMSG;
	ret = lazy_daemon_open(b->dir, b->verify, lpp, why, sizeof(why));
	if (ret)
		dlog(LOG_WARNING, "%s: %s", session_name(s), why);
	return ret;
}

/*
 * A session a faultd lazy-pages (or daemon) before this one served: the
 * tasks it had, and their sources, open again already (from the dump
 * they were served from: a restart with another -D does not change
 * what a restore that began is served from).
 */
static int criu_adopt(struct session *s, const void *blob, size_t len,
		      int peer)
{
	struct criu_blob *b = calloc(1, sizeof(*b));
	struct lazy_pages *lp = NULL;
	struct criu_fe *f = NULL;
	int ret = b ? 0 : -ENOMEM;

	if (b)
		memcpy(b, blob, len < sizeof(*b) ? len : sizeof(*b));
	if (!ret && (b->version != BLOB_VERSION || b->nr_pids != session_nr_sources(s) ||
		     b->nr_pids > TASKS_MAX || (!b->rstf && peer < 0)))
		ret = -EBADMSG;
	if (!ret)
		ret = adopt_lp(s, b, &lp);
	if (!ret && !(f = fe_new(lp, peer))) {
		if (lp->one_restore)
			lazy_daemon_free(lp);
		ret = -ENOMEM;
	}
	if (!ret) {
		f->rstf = b->rstf;
		f->zombies = b->zombies;
		f->nr_pids = b->nr_pids;
		memcpy(f->pid, b->pid, b->nr_pids * sizeof(b->pid[0]));
	}
	free(b);
	if (ret) {
		if (peer >= 0)
			close(peer);
		if (f && f->lp->one_restore)
			lazy_daemon_free(f->lp);
		free(f);
		return ret;
	}
	if (!f->rstf)
		session_unsettle(s);
	fe_attach(s, f, peer);
	lazy_pages_started(f->lp);
	return 0;
}

/* Nobody else serves a restored process: a session outlives a daemon
 * that stops, until its tasks end. */
const struct session_ops criu_session_ops = {
	.front_id = FRONT_CRIU,
	.takeover = false,
	.peer_input = criu_peer_input,
	.tick = criu_tick,
	.space_gone = criu_space_gone,
	.save = criu_save,
	.adopt = criu_adopt,
};

void criu_front_init(struct lazy_pages *lp)
{
	lp_ctx = lp;
}

/*
 * criu_serve() - serve the restore that connected on @sock (taken over),
 * of criu restore @pid running as @uid, until every page is in or the
 * restore fails. How it ended goes to lazy_pages_ended() (the caller
 * said lazy_pages_started()). Returns 0 when the session ran, or -errno.
 * Context: a thread of its own, which runs the session's control loop.
 */
int criu_serve(struct lazy_pages *lp, int sock, uid_t uid, pid_t pid)
{
	struct session_opts o = { .push = true, .push_fair = true,
				  .around = lp->around,
				  .handlers = lp->handlers,
				  .wset_path = lp->wset,
				  .record_path = lp->record,
				  .push_after_record = true };
	struct criu_fe *f = fe_new(lp, sock);
	struct session *s = NULL;
	int ret = f ? session_create(&o, &criu_session_ops, NULL, &s)
		    : -ENOMEM;
	char around[32] = "default";

	if (ret) {
		free(f);
		close(sock);
		lazy_pages_ended(lp, false);
		return ret;
	}
	session_unsettle(s);
	session_set_owner(s, uid, pid);
	fe_attach(s, f, sock);
	if (session_opts(s)->around)
		snprintf(around, sizeof(around), "%zu KiB",
			 session_opts(s)->around >> 10);
	dlog(LOG_INFO, "%s: criu restore %d (uid %u) connected: %u handlers, "
	     "fault-around %s, pages %schecked", session_name(s), (int)pid,
	     (unsigned int)uid, session_handlers(s), around,
	     lp->sums ? "" : "not ");
	ret = session_run(s);
	session_free(s);
	return ret;
}
