// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * keep.c - the daemon's side of keeping descriptors outside itself (see
 * keep.h): a connection to its keeper, started when there is none, or
 * systemd's file-descriptor store.
 *
 * The keeper's messages need no answer: once sendmsg() returns, a PUT and
 * its descriptors are queued on the keeper's socket and reach it even if
 * the daemon dies the next instant. A keeper that dies is noticed
 * (keep_lost()) and started again; the daemon then puts every session
 * again.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "engine_int.h"
#include "keep_proto.h"

#define KEEPER_START_MS 5000

/* systemd: how many descriptors each entry put, to remove as many. */
struct stored {
	char name[KEEP_NAME_MAX];
	unsigned int nfds;
	struct stored *next;
};

struct keep {
	struct keep_opts o;
	char path[108];
	int sock;		/* to the keeper; -1 with the fd store */
	pid_t keeper;		/* its pid, as it said */
	struct stored *stored;	/* with the fd store */
};

/* ------------------------------------------------------------------------
 * Messages.
 */

int keep_send(int sock, const struct keep_msg *m, const int *fds,
	      unsigned int nfds)
{
	union {
		char buf[CMSG_SPACE(KEEP_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} c;
	struct iovec iov = { (void *)m, sizeof(*m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (nfds > KEEP_MAX_FDS)
		return -E2BIG;
	if (nfds) {
		struct cmsghdr *cm;

		memset(&c, 0, sizeof(c));
		mh.msg_control = c.buf;
		mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)sizeof(*m)
		       ? 0
		       : -errno;
}

/* Close what a message brought that it should not have. */
static void close_fds(int *fds, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		close(fds[i]);
}

/*
 * keep_recv() - one message into @m, its descriptors into @fds (room for
 * KEEP_MAX_FDS; may be NULL: any are closed). Returns 0, -ECONNRESET at
 * the end of the connection, -EBADMSG for a message not of the protocol.
 */
int keep_recv(int sock, struct keep_msg *m, int *fds, unsigned int *nfds)
{
	union {
		char buf[CMSG_SPACE(KEEP_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} c;
	struct iovec iov = { m, sizeof(*m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = c.buf,
			     .msg_controllen = sizeof(c.buf) };
	int tmp[KEEP_MAX_FDS];
	unsigned int n = 0;
	ssize_t len = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);

	if (len < 0)
		return -errno;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm;
	     cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			n = (unsigned int)((cm->cmsg_len - CMSG_LEN(0)) /
					   sizeof(int));
			memcpy(tmp, CMSG_DATA(cm), n * sizeof(int));
		}
	if (nfds)
		*nfds = n;
	if (fds)
		memcpy(fds, tmp, n * sizeof(int));
	else
		close_fds(tmp, n);
	if (len == 0)
		return -ECONNRESET;
	if (len != sizeof(*m) || m->magic != KEEP_MAGIC ||
	    (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
	    m->nfds != n || m->name[KEEP_NAME_MAX - 1] ||
	    m->text[sizeof(m->text) - 1]) {
		if (fds)
			close_fds(fds, n);
		return -EBADMSG;
	}
	return 0;
}

static void keep_init(struct keep_msg *m, enum keep_type type)
{
	memset(m, 0, sizeof(*m));
	m->magic = KEEP_MAGIC;
	m->version = KEEP_VERSION;
	m->type = (uint16_t)type;
	m->pid = getpid();
}

/* ------------------------------------------------------------------------
 * The keeper: connect, or start one.
 */

/* Is the process at the other end of @sock of our own user? */
static bool peer_is_us(int sock)
{
	struct ucred c;
	socklen_t len = sizeof(c);

	return !getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &c, &len) &&
	       c.uid == geteuid();
}

static int keeper_connect(struct keep *k)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (s < 0)
		return -errno;
	memcpy(a.sun_path, k->path, sizeof(k->path));
	if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int err = -errno;

		close(s);
		return err;
	}
	if (!peer_is_us(s)) {
		close(s);
		dlog(LOG_WARNING, "%s: the keeper is not of this daemon's user", k->path);
		return -EPERM;
	}
	return s;
}

/*
 * Start `faultd keeper` (this program again) and wait until it listens:
 * it writes a byte on the pipe it gets as descriptor 3.
 */
static int keeper_spawn(struct keep *k)
{
	char grace[16], self[4096];
	int p[2], status;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	pid_t pid;
	char c;

	if (n < 0 || pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	self[n] = 0;
	snprintf(grace, sizeof(grace), "%u", k->o.grace_s);
	pid = fork();
	if (pid == 0) {
		/* The keeper is its own session, apart from the daemon's
		 * terminal and process group, and a grandchild, so that
		 * nobody waits for it. */
		if (fork())
			_exit(0);
		setsid();
		dup2(p[1], 3);
		execl(self, "faultd", "keeper", "--socket", k->o.socket,
		      "--grace", grace, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	if (pid > 0)
		waitpid(pid, &status, 0);
	n = pid > 0 ? read(p[0], &c, 1) : -1;
	close(p[0]);
	return n == 1 ? 0 : -ECHILD;
}

/* HELLO both ways; the keeper's refusal is logged as it said it. */
static int keeper_hello(struct keep *k)
{
	struct keep_msg m;
	int ret;

	keep_init(&m, K_HELLO);
	ret = keep_send(k->sock, &m, NULL, 0);
	if (!ret)
		ret = keep_recv(k->sock, &m, NULL, NULL);
	if (ret)
		return ret;
	if (m.type == K_ERROR) {
		dlog(LOG_WARNING, "%s: %s", k->path, m.text);
		return m.err < 0 ? m.err : -EPROTO;
	}
	if (m.type != K_HELLO || m.version != KEEP_VERSION) {
		dlog(LOG_WARNING, "%s: a keeper of another faultd (protocol %u, this is "
			"%u): stop it (kill %d) or use that faultd",
		     k->path, m.version, KEEP_VERSION, (int)m.pid);
		return -EPROTONOSUPPORT;
	}
	k->keeper = m.pid;
	dlog(LOG_INFO, "keeper %d at %s holds %llu entries", (int)m.pid, k->path,
	     (unsigned long long)m.entries);
	return 0;
}

/* Connect to the keeper of our socket, starting it if there is none. */
static int keeper_attach_once(struct keep *k)
{
	int ret;

	k->sock = keeper_connect(k);
	if (k->sock == -ENOENT || k->sock == -ECONNREFUSED) {
		/* One that died left its socket: the new one removes it. */
		ret = keeper_spawn(k);
		if (ret < 0)
			return ret;
		k->sock = keeper_connect(k);
	}
	if (k->sock < 0)
		return k->sock;
	ret = keeper_hello(k);
	if (ret) {
		close(k->sock);
		k->sock = -1;
	}
	return ret;
}

/*
 * keeper_attach_once(), again when the keeper hung up on the HELLO: one
 * told BYE by the daemon before this one exits at once, and resets a
 * connection it had not accepted yet; the next try finds nobody there and
 * starts another.
 */
static int keeper_attach(struct keep *k)
{
	int ret = -ECONNRESET;

	for (int tries = 0; tries < 3 && (ret == -ECONNRESET || ret == -EPIPE);
	     tries++)
		ret = keeper_attach_once(k);
	return ret;
}

/*
 * keep_open() - the place descriptors outlive this daemon: systemd's
 * store (o->fd_store), or the keeper of o->socket (started if none runs).
 * Returns 0, or -errno: -EBUSY (another daemon uses the keeper), -EPERM
 * (the keeper is another user's), -EPROTONOSUPPORT (another version).
 */
int keep_open(const struct keep_opts *o, struct keep **kp)
{
	struct keep *k = calloc(1, sizeof(*k));
	int ret = 0;

	if (!k)
		return -ENOMEM;
	k->o = *o;
	k->sock = -1;
	if (!o->fd_store) {
		if (snprintf(k->path, sizeof(k->path), "%s.keeper",
			     o->socket) >= (int)sizeof(k->path))
			ret = -ENAMETOOLONG;
		else
			ret = keeper_attach(k);
	} else if (!getenv("NOTIFY_SOCKET")) {
		dlog(LOG_WARNING, "--fd-store: NOTIFY_SOCKET is not set (not run by "
			"systemd with FileDescriptorStoreMax=)");
		ret = -EINVAL;
	}
	if (ret) {
		free(k);
		return ret;
	}
	*kp = k;
	return 0;
}

/* The keeper died: start one again. The caller puts its entries again. */
int keep_reopen(struct keep *k)
{
	if (k->o.fd_store)
		return 0;
	if (k->sock >= 0)
		close(k->sock);
	return keeper_attach(k);
}

/* Is the keeper gone (its connection hung up)? */
bool keep_lost(struct keep *k)
{
	struct pollfd p = { .fd = k->sock, .events = POLLIN };

	if (k->o.fd_store)
		return false;
	return k->sock < 0 ||
	       (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR)));
}

pid_t keep_pid(const struct keep *k)
{
	return k && !k->o.fd_store ? k->keeper : 0;
}

int keep_fd(const struct keep *k)
{
	return k ? k->sock : -1;
}

/* ------------------------------------------------------------------------
 * Entries.
 */

/* The entry @name of the fd store's table, made if @make. */
static struct stored *stored_find(struct keep *k, const char *name, bool make)
{
	struct stored *e;

	for (e = k->stored; e; e = e->next)
		if (!strcmp(e->name, name))
			return e;
	if (!make || !(e = calloc(1, sizeof(*e))))
		return NULL;
	strcpy(e->name, name);
	e->next = k->stored;
	k->stored = e;
	return e;
}

static int store_remove(const char *name, unsigned int from, unsigned int to)
{
	char msg[128];

	for (unsigned int i = from; i < to; i++) {
		snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s.%u",
			 name, i);
		if (sd_pid_notify(0, 0, msg) <= 0)
			return -ENOTCONN;
	}
	return 0;
}

/*
 * systemd: one descriptor per notification, named NAME.INDEX (an entry
 * that shrank loses its old tail), FDPOLL=0: systemd must not drop a
 * descriptor that polls as hung up (a userfaultfd whose owner cleared
 * O_NONBLOCK polls EPOLLERR).
 */
static int store_put(struct keep *k, const char *name, const int *fds,
		     unsigned int nfds)
{
	struct stored *e = stored_find(k, name, true);
	char msg[128];

	if (!e)
		return -ENOMEM;
	for (unsigned int i = 0; i < nfds; i++) {
		int ret;

		snprintf(msg, sizeof(msg),
			 "FDSTORE=1\nFDPOLL=0\nFDNAME=%s.%u", name, i);
		ret = sd_pid_notify_with_fds(0, 0, msg, &fds[i], 1);
		if (ret <= 0)
			return ret < 0 ? ret : -ENOTCONN;
	}
	if (e->nfds > nfds)
		store_remove(name, nfds, e->nfds);
	e->nfds = nfds;
	return 0;
}

static int store_drop(struct keep *k, const char *name)
{
	struct stored *e = stored_find(k, name, false);

	return e ? store_remove(name, 0, e->nfds) : 0;
}

/*
 * keep_put() - hold @fds (copies: the caller keeps its own) as entry
 * @name, replacing an entry of that name. @watch: which of them are
 * pidfds whose processes' end ends the entry. Context: any thread;
 * callers serialize (keep_lock in faultd.c).
 */
int keep_put(struct keep *k, const char *name, const int *fds,
	     unsigned int nfds, unsigned int flags, uint64_t watch)
{
	struct keep_msg m;

	if (strlen(name) >= KEEP_NAME_MAX || nfds > KEEP_MAX_FDS)
		return -E2BIG;
	if (k->o.fd_store)
		return store_put(k, name, fds, nfds);
	keep_init(&m, K_PUT);
	strcpy(m.name, name);
	m.nfds = nfds;
	m.flags = flags;
	m.watch = watch;
	return keep_send(k->sock, &m, fds, nfds);
}

int keep_drop(struct keep *k, const char *name)
{
	struct keep_msg m;

	if (strlen(name) >= KEEP_NAME_MAX)
		return -E2BIG;
	if (k->o.fd_store)
		return store_drop(k, name);
	keep_init(&m, K_DROP);
	strcpy(m.name, name);
	return keep_send(k->sock, &m, NULL, 0);
}

/* Every entry the keeper holds, to @fn, which owns its descriptors. */
static int keeper_fetch(struct keep *k, keep_fn fn, void *arg)
{
	struct keep_msg m;
	struct keep_entry *e = malloc(sizeof(*e));
	int ret;

	if (!e)
		return -ENOMEM;
	keep_init(&m, K_FETCH);
	ret = keep_send(k->sock, &m, NULL, 0);
	while (!ret && !(ret = keep_recv(k->sock, &m, e->fds, &e->nfds)) &&
	       m.type == K_ENTRY) {
		memcpy(e->name, m.name, sizeof(e->name));
		e->flags = m.flags;
		e->watch = m.watch;
		fn(arg, e);
	}
	if (!ret && m.type != K_END)
		ret = -EPROTO;
	free(e);
	return ret;
}

/* What the store holds of entry @e, to remove as many later. */
static void store_note(struct keep *k, const struct keep_entry *e)
{
	struct stored *st = stored_find(k, e->name, true);

	if (st && e->nfds > st->nfds)
		st->nfds = e->nfds;
}

/*
 * systemd: the descriptors it passed (LISTEN_FDS, named NAME.INDEX by
 * store_put()), grouped back into entries. Names without a dot are not
 * ours (the activated socket) and are left to the caller.
 */
static int store_fetch(struct keep *k, keep_fn fn, void *arg)
{
	char **names = NULL;
	int n = sd_listen_fds_with_names(0, &names);
	struct keep_entry *e = calloc(1, sizeof(*e));

	if (n < 0 || !e) {
		free(e);
		return n < 0 ? n : -ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		char *dot = names ? strrchr(names[i], '.') : NULL;
		unsigned int idx;

		if (!dot || sscanf(dot + 1, "%u", &idx) != 1 ||
		    idx >= KEEP_MAX_FDS || dot - names[i] >= KEEP_NAME_MAX)
			continue;
		if (e->nfds && (strlen(e->name) != (size_t)(dot - names[i]) ||
				strncmp(e->name, names[i],
					(size_t)(dot - names[i])))) {
			store_note(k, e);
			fn(arg, e);
			memset(e, 0, sizeof(*e));
		}
		memcpy(e->name, names[i], (size_t)(dot - names[i]));
		e->name[dot - names[i]] = 0;
		e->fds[idx] = SD_LISTEN_FDS_START + i;
		if (idx + 1 > e->nfds)
			e->nfds = idx + 1;
	}
	if (e->nfds) {
		store_note(k, e);
		fn(arg, e);
	}
	for (int i = 0; names && i < n; i++)
		free(names[i]);
	free(names);
	free(e);
	return 0;
}

/* keep_fetch() - every entry a daemon before this one left, to @fn. */
int keep_fetch(struct keep *k, keep_fn fn, void *arg)
{
	return k->o.fd_store ? store_fetch(k, fn, arg)
			     : keeper_fetch(k, fn, arg);
}

/*
 * keep_close() - let go of the keeper. With @bye the daemon stops
 * cleanly: the keeper drops what is left and exits. Without, it keeps
 * every entry for the next daemon.
 */
void keep_close(struct keep *k, bool bye)
{
	struct keep_msg m;

	if (!k)
		return;
	if (bye && k->sock >= 0) {
		keep_init(&m, K_BYE);
		keep_send(k->sock, &m, NULL, 0);
	}
	if (k->sock >= 0)
		close(k->sock);
	while (k->stored) {
		struct stored *e = k->stored;

		k->stored = e->next;
		free(e);
	}
	free(k);
}
