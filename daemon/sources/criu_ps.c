/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * criu_ps.c - a task's lazy pages from a CRIU page server (criu.h).
 *
 * The protocol, as CRIU v4.2 speaks it (criu/page-xfer.c): every message
 * is a 32-byte struct page_server_iov in the host's byte order. The client
 * asks PS_IOV_GET {nr_pages, vaddr = the dump-time address, dst_id = the
 * dump's pid}; the server answers each request in the order it came with
 * PS_IOV_ADD_F | PE_PRESENT << 16 and the same vaddr and dst_id, nr_pages
 * cut to the end of the run of pages it holds there (never 0: for pages
 * it does not hold it drops the connection instead, and for pages that
 * are not lazy it stalls - so only SRC_DATA ranges are ever asked), then
 * the raw pages. PS_IOV_CLOSE ends the session; the server answers int32 0.
 *
 * Concurrency: any number of threads read at once over the one connection.
 * A reader queues its requests and sends them (send_lock keeps each
 * batch's requests together and the queue in the order of the wire); the
 * request at the head of the queue owns the receive side, reads its answer
 * without a lock, then hands the head on. Lock order: send_lock > lock.
 * Any failure - a time-out, an answer that does not match its request, a
 * closed connection - kills the connection: every queued and later read
 * gets -EIO.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "criu-mem.h"

#define PS_IOV_ADD_F 6
#define PS_IOV_GET 7
#define PS_IOV_CLOSE 0x1023
#define PS_CMD_BITS 16
#define PS_TIMEOUT_MS 10000
#define PS_BATCH 64			/* requests a read sends at once */
#define PS_REQ_MAX (4ul << 20)		/* bytes one request asks for */

struct ps_iov {
	uint32_t cmd;
	uint32_t pad;
	uint64_t nr_pages;
	uint64_t vaddr;
	uint64_t dst_id;
};

_Static_assert(sizeof(struct ps_iov) == 32, "CRIU's page_server_iov");

/* One request on the wire, owned by the reader that sent it. */
struct ps_req {
	struct ps_req *next;	/* the queue, under ps->lock */
	pthread_cond_t turn;	/* it became the head, or the connection died */
	uint64_t vaddr, nr_pages, got;
	uint32_t pid;
	void *buf;
};

struct criu_ps {
	int sk;
	int timeout_ms;
	pthread_mutex_t send_lock;	/* the send side; nests outside lock */
	pthread_mutex_t lock;		/* head, tail, dead */
	struct ps_req *head, **tail;
	bool dead;
};

struct ps_src {
	struct source s;
	struct task_mem m;
	struct criu_ps *ps;
	uint32_t pid;
};

/* Wait up to the time-out for @events on the socket: 0 or -errno. */
static int ps_wait(struct criu_ps *ps, short events)
{
	struct pollfd p = { .fd = ps->sk, .events = events };
	int n;

	do
		n = poll(&p, 1, ps->timeout_ms);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -ETIMEDOUT;
	if (p.revents & POLLNVAL)
		return -EBADF;
	return 0;
}

/* Send or receive exactly @len bytes, each step under the time-out. */
static int ps_io(struct criu_ps *ps, bool out, void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = out ? send(ps->sk, (char *)buf + done, len - done,
				       MSG_NOSIGNAL | MSG_DONTWAIT)
				: recv(ps->sk, (char *)buf + done, len - done,
				       MSG_DONTWAIT);
		int err;

		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n == 0)
			return -ECONNRESET; /* the server closed */
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		err = ps_wait(ps, out ? POLLOUT : POLLIN);
		if (err)
			return err;
	}
	return 0;
}

/* Kill the connection: wake every queued reader. Caller holds ps->lock. */
static void ps_kill_locked(struct criu_ps *ps)
{
	ps->dead = true;
	for (struct ps_req *r = ps->head; r; r = r->next)
		pthread_cond_signal(&r->turn);
	ps->head = NULL;
	ps->tail = &ps->head;
}

static void ps_kill(struct criu_ps *ps)
{
	pthread_mutex_lock(&ps->lock);
	ps_kill_locked(ps);
	pthread_mutex_unlock(&ps->lock);
}

/* Queue and send @n requests; on failure the connection is dead. */
static int ps_send_batch(struct criu_ps *ps, struct ps_req *r, size_t n)
{
	int err = 0;

	pthread_mutex_lock(&ps->send_lock);
	pthread_mutex_lock(&ps->lock);
	if (ps->dead)
		err = -EIO;
	for (size_t i = 0; !err && i < n; i++) {
		r[i].next = NULL;
		*ps->tail = &r[i];
		ps->tail = &r[i].next;
	}
	pthread_mutex_unlock(&ps->lock);
	for (size_t i = 0; !err && i < n; i++) {
		struct ps_iov pi = { .cmd = PS_IOV_GET,
				     .nr_pages = r[i].nr_pages,
				     .vaddr = r[i].vaddr,
				     .dst_id = r[i].pid };

		err = ps_io(ps, true, &pi, sizeof(pi));
		if (err) {
			ps_kill(ps);
			err = -EIO;
		}
	}
	pthread_mutex_unlock(&ps->send_lock);
	return err;
}

/* The answer to @r: it matches the request, and carries 1..asked pages. */
static int ps_recv_one(struct criu_ps *ps, struct ps_req *r)
{
	struct ps_iov pi;
	int err;

	err = ps_io(ps, false, &pi, sizeof(pi));
	if (err)
		return err;
	if (pi.cmd != (CRIU_PE_PRESENT << PS_CMD_BITS | PS_IOV_ADD_F) ||
	    pi.vaddr != r->vaddr || pi.dst_id != r->pid || !pi.nr_pages ||
	    pi.nr_pages > r->nr_pages)
		return -EPROTO;
	err = ps_io(ps, false, r->buf, pi.nr_pages * CRIU_PAGE_SIZE);
	if (err)
		return err;
	r->got = pi.nr_pages;
	return 0;
}

/* Wait for @r's turn, read its answer, hand the head on. 0 or -EIO. */
static int ps_complete(struct criu_ps *ps, struct ps_req *r)
{
	int err;

	pthread_mutex_lock(&ps->lock);
	while (!ps->dead && ps->head != r)
		pthread_cond_wait(&r->turn, &ps->lock);
	err = ps->dead ? -EIO : 0;
	pthread_mutex_unlock(&ps->lock);
	if (err)
		return err;
	err = ps_recv_one(ps, r);
	pthread_mutex_lock(&ps->lock);
	if (err || ps->dead) {
		ps_kill_locked(ps);
		err = -EIO;
	} else {
		ps->head = r->next;
		if (!ps->head)
			ps->tail = &ps->head;
		else
			pthread_cond_signal(&ps->head->turn);
	}
	pthread_mutex_unlock(&ps->lock);
	return err;
}

/* What one read() still has to get: [at, end), inside one request. */
struct ps_gap {
	uint64_t at, end;
};

/* A read's progress: gaps left by short answers, then the fresh part. */
struct ps_todo {
	struct ps_gap gap[PS_BATCH];
	size_t nr_gaps;
	uint64_t at, end;	/* [at, end) not asked yet */
	char *buf;
	uint64_t off;		/* the address of buf[0] */
};

static void ps_req_init(struct ps_req *r, const struct ps_src *p,
			const struct ps_todo *t, uint64_t at, uint64_t len)
{
	*r = (struct ps_req){ .vaddr = at, .nr_pages = len / CRIU_PAGE_SIZE,
			      .pid = p->pid, .buf = t->buf + (at - t->off) };
	pthread_cond_init(&r->turn, NULL);
}

/*
 * Up to PS_BATCH requests: the gaps first (each fits one request), then
 * the fresh part, cut at SRC_DATA pieces (ps_read() checked it is all
 * DATA) and at PS_REQ_MAX. Returns the count.
 */
static size_t ps_plan(const struct ps_src *p, struct ps_todo *t,
		      struct ps_req *r)
{
	size_t n = 0;

	for (; n < t->nr_gaps; n++)
		ps_req_init(&r[n], p, t, t->gap[n].at,
			    t->gap[n].end - t->gap[n].at);
	t->nr_gaps = 0;
	while (t->at < t->end && n < PS_BATCH) {
		const struct piece *pc = criu_mem_data(&p->m, t->at);
		uint64_t len = pc->start + pc->len - t->at;

		if (len > t->end - t->at)
			len = t->end - t->at;
		if (len > PS_REQ_MAX)
			len = PS_REQ_MAX;
		ps_req_init(&r[n++], p, t, t->at, len);
		t->at += len;
	}
	return n;
}

/*
 * One batch: plan, send, receive in order. The server cuts an answer
 * where its run of pages ends; what an answer lacked becomes a gap that
 * the next batch asks for.
 */
static int ps_round(struct ps_src *p, struct ps_todo *t)
{
	struct ps_req r[PS_BATCH];
	size_t n = ps_plan(p, t, r);
	int err;

	err = ps_send_batch(p->ps, r, n);
	for (size_t i = 0; !err && i < n; i++)
		err = ps_complete(p->ps, &r[i]);
	for (size_t i = 0; !err && i < n; i++)
		if (r[i].got < r[i].nr_pages)
			t->gap[t->nr_gaps++] = (struct ps_gap){
				r[i].vaddr + r[i].got * CRIU_PAGE_SIZE,
				r[i].vaddr + r[i].nr_pages * CRIU_PAGE_SIZE };
	for (size_t i = 0; i < n; i++)
		pthread_cond_destroy(&r[i].turn);
	return err;
}

static ssize_t ps_read(struct source *s, uint64_t off, void *buf, size_t len,
		       unsigned int flags)
{
	struct ps_src *p = (struct ps_src *)s;
	struct ps_todo t = { .at = off, .end = off + len, .buf = buf,
			     .off = off };
	int err;

	if (!len || (off | len) % CRIU_PAGE_SIZE || len > SSIZE_MAX ||
	    off + len < off)
		return -EINVAL;
	/* Refuse a range that is not all DATA before asking anything. */
	for (uint64_t a = off; a < off + len;) {
		const struct piece *pc = criu_mem_data(&p->m, a);

		if (!pc)
			return -ERANGE;
		a = pc->start + pc->len;
	}
	while (t.at < t.end || t.nr_gaps) {
		err = ps_round(p, &t);
		if (err)
			return err;
	}
	return (ssize_t)len;
}

static int ps_extent(struct source *s, uint64_t off, struct src_extent *e)
{
	return criu_mem_extent(&((struct ps_src *)s)->m, off, e);
}

static void ps_destroy(struct source *s)
{
	struct ps_src *p = (struct ps_src *)s;

	criu_mem_free(&p->m);
	free(p);
}

/* A page server serves one connection, for every task of its dump; one
 * that lost it to a daemon that died serves no other: a restarted daemon
 * cannot get these pages (faultd(8), "faultd lazy-pages"). */
static ssize_t ps_save(struct source *s, void *blob, size_t max)
{
	struct ps_src *p = (struct ps_src *)s;

	if (max < sizeof(p->pid))
		return -E2BIG;
	memcpy(blob, &p->pid, sizeof(p->pid));
	return sizeof(p->pid);
}

static int ps_reopen(const void *blob, size_t len, int fd,
		     struct source **sp, char *why, size_t why_len)
{
	(void)blob, (void)len, (void)sp;
	if (fd >= 0)
		close(fd);
	return why_set(why, why_len, -ENOTCONN, "a CRIU page server serves "
			"one connection: the one of the daemon before is gone");
}

const struct source_type src_criu_ps_type = {
	.name = "criu-page-server", .id = 4, .save = ps_save,
	.reopen = ps_reopen,
};

static const struct source_ops ps_src_ops = {
	.name = "criu-page-server",
	.type = &src_criu_ps_type,
	.read = ps_read,
	.extent = ps_extent,
	.destroy = ps_destroy,
};

int criu_page_server_source(struct criu_dump *d, pid_t pid,
			    struct criu_ps *ps, struct source **sp)
{
	struct ps_src *p = calloc(1, sizeof(*p));
	int err;

	if (!p)
		return -ENOMEM;
	err = criu_mem_copy(d, pid, false, &p->m);
	if (err) {
		free(p);
		return err;
	}
	p->ps = ps;
	p->pid = (uint32_t)pid;
	p->s = (struct source){ .ops = &ps_src_ops, .size = p->m.size,
				.page_size = CRIU_PAGE_SIZE };
	memcpy(p->s.id, p->m.id, sizeof(p->s.id));
	*sp = &p->s;
	return 0;
}

/* ---- the connection ---- */

static int ps_addr(const char *addr, uint16_t port,
		   struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in *in = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, addr, &in->sin_addr) == 1) {
		in->sin_family = AF_INET;
		in->sin_port = htons(port);
		*len = sizeof(*in);
		return 0;
	}
	if (inet_pton(AF_INET6, addr, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(port);
		*len = sizeof(*in6);
		return 0;
	}
	return -EINVAL;
}

/* A non-blocking connect, finished under the time-out. */
static int ps_dial(struct criu_ps *ps, const struct sockaddr_storage *ss,
		   socklen_t len)
{
	int one = 1, soerr = 0, err;
	socklen_t sl = sizeof(soerr);

	ps->sk = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC |
					       SOCK_NONBLOCK, 0);
	if (ps->sk < 0)
		return -errno;
	/* Requests are small and pipelined: never hold one back. */
	setsockopt(ps->sk, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(ps->sk, (const struct sockaddr *)ss, len) == 0)
		return 0;
	if (errno != EINPROGRESS)
		return -errno;
	err = ps_wait(ps, POLLOUT);
	if (err)
		return err;
	if (getsockopt(ps->sk, SOL_SOCKET, SO_ERROR, &soerr, &sl))
		return -errno;
	return -soerr;
}

int criu_ps_connect(const char *addr, uint16_t port,
		    const struct criu_ps_opts *opts, struct criu_ps **psp)
{
	struct sockaddr_storage ss;
	struct criu_ps *ps;
	socklen_t len;
	int err;

	err = ps_addr(addr, port, &ss, &len);
	if (err)
		return err;
	ps = calloc(1, sizeof(*ps));
	if (!ps)
		return -ENOMEM;
	ps->timeout_ms = PS_TIMEOUT_MS;
	if (opts && opts->size >= sizeof(*opts) && opts->timeout_ms > 0)
		ps->timeout_ms = opts->timeout_ms;
	ps->tail = &ps->head;
	pthread_mutex_init(&ps->send_lock, NULL);
	pthread_mutex_init(&ps->lock, NULL);
	err = ps_dial(ps, &ss, len);
	if (err) {
		if (ps->sk >= 0)
			close(ps->sk);
		pthread_mutex_destroy(&ps->lock);
		pthread_mutex_destroy(&ps->send_lock);
		free(ps);
		return err;
	}
	*psp = ps;
	return 0;
}

int criu_ps_close(struct criu_ps *ps)
{
	struct ps_iov pi = { .cmd = PS_IOV_CLOSE };
	int32_t status = -1;
	int err = ps->dead ? -EIO : 0;

	if (!err)
		err = ps_io(ps, true, &pi, sizeof(pi));
	if (!err)
		err = ps_io(ps, false, &status, sizeof(status));
	if (err)
		err = -EIO;
	else if (status)
		err = -EPROTO;
	close(ps->sk);
	pthread_mutex_destroy(&ps->lock);
	pthread_mutex_destroy(&ps->send_lock);
	free(ps);
	return err;
}
