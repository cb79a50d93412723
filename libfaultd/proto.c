// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * proto.c - sending, receiving and checking the daemon protocol's messages
 * (proto.h): for the library's client side, the daemon and faultctl.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"
#include "proto.h"

void proto_init(struct proto_hdr *h, enum proto_type type, size_t len)
{
	memset(h, 0, sizeof(*h));
	h->magic = PROTO_MAGIC;
	h->version = PROTO_VERSION;
	h->type = (uint16_t)type;
	h->len = (uint32_t)len;
}

/* Send one message, with @nfds descriptors. Returns 0 or -errno. */
int proto_send(int sock, const void *msg, const int *fds, unsigned int nfds)
{
	const struct proto_hdr *h = msg;
	char ctl[CMSG_SPACE(4 * sizeof(int))] = { 0 };
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = h->len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;
	int err;

	if (nfds > 4)
		return -EINVAL;
	if (inject_fail(INJ_SEND, &err))
		return err;
	if (nfds) {
		struct cmsghdr *c;

		m.msg_control = ctl;
		m.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	do
		n = sendmsg(sock, &m, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return (size_t)n == h->len ? 0 : -EMSGSIZE;
}

/* Take the descriptors of @m: up to @max into @fds, the rest closed. */
static unsigned int take_fds(struct msghdr *m, int *fds, unsigned int max)
{
	unsigned int got = 0;

	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		size_t n;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
			if (got < max)
				fds[got++] = fd;
			else
				close(fd);
		}
	}
	return got;
}

/*
 * proto_recv() - receive one message into @buf (at most @max bytes) and up
 * to @max_fds descriptors (close-on-exec; any more are closed).
 * Returns its length, 0 at end of file, -EMSGSIZE (longer than @max: the
 * rest is lost, its descriptors closed), or -errno.
 */
ssize_t proto_recv(int sock, void *buf, size_t max, int *fds,
		   unsigned int max_fds, unsigned int *nfds)
{
	char ctl[CMSG_SPACE(8 * sizeof(int))];
	struct iovec iov = { .iov_base = buf, .iov_len = max };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	unsigned int got;
	ssize_t n;
	int err;

	if (inject_fail(INJ_RECV, &err))
		return err;
	do
		n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	got = take_fds(&m, fds, max_fds);
	if (nfds)
		*nfds = got;
	if (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		for (unsigned int i = 0; i < got; i++)
			close(fds[i]);
		if (nfds)
			*nfds = 0;
		return -EMSGSIZE;
	}
	return n;
}

/* The exact length of a message of @type with @buf's content, or 0. */
static size_t expected_len(const void *buf, size_t n)
{
	const struct proto_hdr *h = buf;
	const struct proto_register *r = buf;
	const struct proto_status *st = buf;

	switch (h->type) {
	case MSG_HELLO:
		return sizeof(struct proto_hello);
	case MSG_REGISTER:
		if (n < sizeof(*r) || !r->nr_ranges ||
		    r->nr_ranges > PROTO_MAX_RANGES)
			return 0;
		return sizeof(*r) + r->nr_ranges * sizeof(r->r[0]) +
		       (r->flags & PROTO_REG_MAC ? PROTO_KEY_LEN : 0);
	case MSG_ACK:
		return sizeof(struct proto_ack);
	case MSG_ERROR:
		return sizeof(struct proto_error);
	case MSG_PREFETCH:
		return sizeof(struct proto_hdr) + sizeof(struct proto_range);
	case MSG_STATS:
		return sizeof(struct proto_hdr);
	case MSG_PROGRESS:
	case MSG_DONE:
		return sizeof(struct proto_progress);
	case MSG_STATUS:
		if (n == sizeof(struct proto_hdr))
			return n; /* the request */
		if (n < sizeof(*st) || st->nr_sessions > PROTO_MAX_SESSIONS)
			return 0;
		return sizeof(*st) + st->nr_sessions * sizeof(st->s[0]);
	case MSG_LAZY_PAGES:
		return sizeof(struct proto_lazy_pages);
	case MSG_OPEN:
		return sizeof(struct proto_open);
	case MSG_IMAGE:
		return sizeof(struct proto_image);
	default:
		return 0;
	}
}

/*
 * proto_check() - is [buf, buf + n) a well-formed message? Returns 0, or
 * -EBADMSG (cut short, wrong magic or length), -EPROTONOSUPPORT (another
 * protocol version), -EPROTO (unknown type), with *why saying which.
 */
int proto_check(const void *buf, size_t n, const char **why)
{
	const struct proto_hdr *h = buf;

	*why = "message shorter than its header";
	if (n < sizeof(*h))
		return -EBADMSG;
	*why = "bad magic";
	if (h->magic != PROTO_MAGIC)
		return -EBADMSG;
	*why = "unsupported protocol version";
	if (h->version != PROTO_VERSION)
		return -EPROTONOSUPPORT;
	*why = "unknown message type";
	if (!h->type || h->type >= MSG_TYPE_MAX)
		return -EPROTO;
	*why = "length field does not match the message";
	if (h->len != n)
		return -EBADMSG;
	*why = "wrong length for its type";
	if (expected_len(buf, n) != n)
		return -EBADMSG;
	*why = NULL;
	return 0;
}

/* A directory no other user can change: ours or root's, and writable by
 * no one else unless sticky (then see entry_trusted()). */
static bool dir_trusted(const struct stat *st)
{
	return S_ISDIR(st->st_mode) &&
	       (st->st_uid == 0 || st->st_uid == geteuid()) &&
	       (!(st->st_mode & (S_IWGRP | S_IWOTH)) ||
		(st->st_mode & S_ISVTX));
}

/* In a sticky directory others may write, only entries of root's or
 * ours cannot be replaced by another user. */
static bool entry_trusted(const struct stat *dir, const struct stat *st)
{
	return !(dir->st_mode & (S_IWGRP | S_IWOTH)) || st->st_uid == 0 ||
	       st->st_uid == geteuid();
}

/*
 * The daemon's default socket path, into @buf; NULL if it is too long.
 * $XDG_RUNTIME_DIR only if it is ours and no one else's to write (root
 * with the runtime directory of the user it came from, after su without
 * -, must not talk to that user's daemon); else /run/faultd/faultd.sock.
 */
const char *proto_default_socket(char *buf, size_t len)
{
	const char *dir = getenv("XDG_RUNTIME_DIR");
	struct stat st;
	int n;

	if (dir && *dir == '/' && !stat(dir, &st) && dir_trusted(&st) &&
	    st.st_uid == geteuid() && !(st.st_mode & (S_IWGRP | S_IWOTH)))
		n = snprintf(buf, len, "%s/faultd.sock", dir);
	else
		n = snprintf(buf, len, "/run/faultd/faultd.sock");
	return n < (int)len ? buf : NULL;
}

/*
 * Walk the directory @dir (absolute, without symlinks or dots) from the
 * root, each step by descriptor and without following a symlink: every
 * directory must be trusted. Returns its descriptor and its stat, or
 * -EACCES (a directory another user can change), or -errno.
 */
static int dir_walk(const char *dir, struct stat *st)
{
	char *copy = strdup(dir), *save = NULL;
	int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC), ret = 0;

	if (!copy || fd < 0)
		ret = fd < 0 ? -errno : -ENOMEM;
	if (!ret && (fstat(fd, st) < 0 || !dir_trusted(st)))
		ret = -EACCES;
	for (char *c = copy ? strtok_r(copy, "/", &save) : NULL; !ret && c;
	     c = strtok_r(NULL, "/", &save)) {
		struct stat parent = *st;
		int next = openat(fd, c, O_PATH | O_DIRECTORY | O_NOFOLLOW |
					 O_CLOEXEC);

		if (next < 0) {
			ret = -errno;
			break;
		}
		close(fd);
		fd = next;
		if (fstat(fd, st) < 0 || !dir_trusted(st) ||
		    !entry_trusted(&parent, st))
			ret = -EACCES;
	}
	free(copy);
	if (ret && fd >= 0)
		close(fd);
	return ret ? ret : fd;
}

/*
 * The socket @path as a path no other user can redirect: its directory,
 * resolved (symlinks and dots), into @out, then its name. Returns 0, or
 * -EACCES (a directory on the way, or a socket in a sticky directory,
 * that another user can change), -ENOTSOCK, -ENAMETOOLONG, -errno, with
 * *why.
 */
static int socket_path_trusted(const char *path, char *out, size_t len,
			       const char **why)
{
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	char *parent = slash ? strndup(path, (size_t)(slash - path)) : NULL;
	char *dir = NULL;
	struct stat dst, st;
	int fd = -1, ret;

	if (!slash || !*parent) /* "name", or "/name" */
		dir = realpath(slash ? "/" : ".", NULL);
	else if (parent)
		dir = realpath(parent, NULL);
	*why = "cannot resolve the socket's directory";
	ret = dir ? 0 : -errno;
	if (!ret) {
		fd = dir_walk(dir, &dst);
		*why = "a directory on the way to the socket can be changed "
		       "by another user";
		ret = fd < 0 ? fd : 0;
	}
	if (!ret) {
		*why = "the socket's path is not a socket";
		if (fstatat(fd, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
			ret = -errno;
		else if (!S_ISSOCK(st.st_mode))
			ret = -ENOTSOCK;
	}
	if (!ret && !entry_trusted(&dst, &st)) {
		*why = "the socket belongs to another user, in a directory "
		       "everyone can write";
		ret = -EACCES;
	}
	if (!ret && (size_t)snprintf(out, len, "%s/%s",
				     strcmp(dir, "/") ? dir : "", base) >= len) {
		*why = "the socket's path is too long";
		ret = -ENAMETOOLONG;
	}
	if (fd >= 0)
		close(fd);
	free(dir);
	free(parent);
	return ret;
}

/* A connected socket to the daemon at @path, or -errno. */
int proto_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int s;

	if (strlen(path) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	strcpy(a.sun_path, path);
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int err = -errno;

		close(s);
		return err;
	}
	return s;
}

/*
 * proto_connect_daemon() - connect to the daemon at @path, as a client
 * that hands it memory and files: through no directory another user can
 * change, and only to a listener of root's or of this user's
 * (SO_PEERCRED). Returns the socket, or -EACCES (the path), -EPERM (the
 * listener), the errors of proto_connect(), with *why (NULL from
 * proto_connect()'s).
 */
int proto_connect_daemon(const char *path, const char **why)
{
	struct sockaddr_un a;
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int s = socket_path_trusted(path, a.sun_path, sizeof(a.sun_path), why);

	if (s < 0)
		return s;
	*why = NULL;
	s = proto_connect(a.sun_path);
	if (s < 0)
		return s;
	*why = "the process listening on the socket is neither root nor "
	       "this user";
	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
	    (cred.uid != 0 && cred.uid != geteuid())) {
		close(s);
		return -EPERM;
	}
	*why = NULL;
	return s;
}

/*
 * proto_recv_checked() - proto_recv() of one well-formed message.
 * Returns its length, or -ECONNRESET (end of file), the error of
 * proto_recv() or of proto_check(); *why (may be NULL) says what was
 * wrong with a message that came (NULL for a socket error), and the
 * descriptors a malformed one brought are closed.
 */
ssize_t proto_recv_checked(int sock, void *buf, size_t max, int *fds,
			   unsigned int max_fds, unsigned int *nfds,
			   const char **why)
{
	ssize_t n = proto_recv(sock, buf, max, fds, max_fds, nfds);
	const char *w = n == -EMSGSIZE ? "message too long" : NULL;
	int ret;

	if (n > 0 && (ret = proto_check(buf, (size_t)n, &w)) < 0) {
		for (unsigned int i = 0; nfds && i < *nfds; i++)
			close(fds[i]);
		n = ret;
	}
	if (why)
		*why = w;
	return n ? n : -ECONNRESET;
}

/*
 * proto_call() - send @msg (with @nfds descriptors) and receive the
 * well-formed reply into @reply (at most @max bytes). Returns the reply's
 * length or an error of proto_send() or proto_recv_checked().
 */
ssize_t proto_call(int sock, const void *msg, const int *fds,
		   unsigned int nfds, void *reply, size_t max)
{
	int ret = proto_send(sock, msg, fds, nfds);

	return ret < 0 ? ret
		       : proto_recv_checked(sock, reply, max, NULL, 0, NULL,
					    NULL);
}

/*
 * proto_hello() - the opening exchange. Returns 0 and the daemon's HELLO,
 * or the error the daemon sent, -EPROTONOSUPPORT (no common version),
 * -ECONNRESET (it closed), -EBADMSG (a malformed reply).
 */
int proto_hello(int sock, uint64_t features, struct proto_hello *reply)
{
	struct proto_hello hi = { .min_version = PROTO_VERSION,
				  .max_version = PROTO_VERSION,
				  .features = features };
	union {
		struct proto_hello hello;
		struct proto_error err;
	} u;
	ssize_t n;

	proto_init(&hi.h, MSG_HELLO, sizeof(hi));
	n = proto_call(sock, &hi, NULL, 0, &u, sizeof(u));
	if (n < 0)
		return (int)n;
	if (u.hello.h.type == MSG_ERROR)
		return u.err.err < 0 ? u.err.err : -EPROTO;
	if (u.hello.h.type != MSG_HELLO ||
	    u.hello.max_version < PROTO_VERSION ||
	    u.hello.min_version > PROTO_VERSION)
		return -EPROTONOSUPPORT;
	*reply = u.hello;
	return 0;
}

/* Send an ERROR with a message (best effort: the peer may be gone). */
void proto_error_send(int sock, int err, const char *fmt, ...)
{
	struct proto_error e = { .err = err };
	va_list ap;

	proto_init(&e.h, MSG_ERROR, sizeof(e));
	va_start(ap, fmt);
	vsnprintf(e.msg, sizeof(e.msg), fmt, ap);
	va_end(ap);
	proto_send(sock, &e, NULL, 0);
}
