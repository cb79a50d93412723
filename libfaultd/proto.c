// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * proto.c - sending, receiving and checking the daemon protocol's messages
 * (proto.h): for the library's client side, the daemon and faultctl.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

/* The daemon's default socket path, into @buf; NULL if it is too long. */
const char *proto_default_socket(char *buf, size_t len)
{
	const char *dir = getenv("XDG_RUNTIME_DIR");
	int n;

	if (dir && *dir)
		n = snprintf(buf, len, "%s/faultd.sock", dir);
	else
		n = snprintf(buf, len, "/run/faultd/faultd.sock");
	return n < (int)len ? buf : NULL;
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
