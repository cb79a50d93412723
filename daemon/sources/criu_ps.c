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
 * A GET changes nothing on the server: it may be asked again.
 *
 * Concurrency: any number of threads read at once over one connection
 * (struct ps_conn). A reader queues its requests on it and sends them
 * (send_lock keeps each batch's requests together and the queue in the
 * order of the wire); the request at the head of the queue owns the
 * receive side, reads its answer without a lock, then hands the head on.
 *
 * Failure (retry.h, the policy of every network source): a time-out, an
 * answer that does not match its request, a closed connection lose the
 * connection - it is shut down, every request queued on it fails, and it
 * is closed once no reader holds it. A reader whose requests failed asks
 * again what was not answered, after the policy's backoff, at most
 * read_retries times (each retry logged); the first reader to need the
 * connection makes it again, with a growing wait between attempts, while
 * the others wait for it. A server unreachable for the deadline fails the
 * reads that wait and every later one (the engine poisons their pages)
 * until a connection is made again. Lock order: send_lock > lock.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
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
#define NS_PER_MS 1000000ull

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
	struct ps_req *next;	/* the connection's queue, under ps->lock */
	pthread_cond_t turn;	/* it became the head, or the connection died */
	uint64_t vaddr, nr_pages, got;
	uint32_t pid;
	void *buf;
};

/* One connection to the server. Its socket is closed when the last
 * holder lets go of it, never under a reader still using it. */
struct ps_conn {
	int sk;
	uint32_t refs;		/* readers, and ps->cur; under ps->lock */
	bool dead;		/* lost: shut down, its queue failed */
	struct ps_req *head, **tail;
};

struct criu_ps {
	struct sockaddr_storage addr;
	socklen_t addr_len;
	char name[64];			/* "ADDR:PORT", for the log */
	int timeout_ms;
	struct retry_policy rp;
	struct retry_log log;
	pthread_mutex_t send_lock;	/* the send side; nests outside lock */
	/* lock: cur and every connection's refs, dead and queue; dialing,
	 * next_try, tries, the link and the counters. */
	pthread_mutex_t lock;
	pthread_cond_t changed;		/* a connection attempt ended */
	struct ps_conn *cur;		/* NULL: lost, not made again yet */
	bool dialing;			/* a reader makes it again */
	uint64_t next_try;		/* ns: the next attempt, not before */
	uint32_t tries;			/* attempts failed in a row */
	struct retry_link link;
	struct criu_ps_stats st;
};

struct ps_src {
	struct source s;
	struct task_mem m;
	struct criu_ps *ps;
	uint32_t pid;
};

static void ps_log(struct criu_ps *ps, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void ps_log(struct criu_ps *ps, const char *fmt, ...)
{
	char line[512];
	int n;
	va_list ap;

	if (!ps->log.fn)
		return;
	n = snprintf(line, sizeof(line), "%s: ", ps->log.who);
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	ps->log.fn(ps->log.arg, line);
}

/* Wait up to the time-out for @events on @sk: 0 or -errno. */
static int ps_wait(const struct criu_ps *ps, int sk, short events)
{
	struct pollfd p = { .fd = sk, .events = events };
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

/* Send or receive exactly @len bytes on @sk, each step under the
 * time-out. */
static int ps_io(const struct criu_ps *ps, int sk, bool out, void *buf,
		 size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = out ? send(sk, (char *)buf + done, len - done,
				       MSG_NOSIGNAL | MSG_DONTWAIT)
				: recv(sk, (char *)buf + done, len - done,
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
		err = ps_wait(ps, sk, out ? POLLOUT : POLLIN);
		if (err)
			return err;
	}
	return 0;
}

/* ---- connections ---- */

static void conn_put_locked(struct ps_conn *c)
{
	if (--c->refs)
		return;
	close(c->sk);
	free(c);
}

/*
 * Connection @c is lost (@err): shut down (a reader in recv() or send()
 * on it returns), its queued readers woken to fail, and if it is the
 * current one, an outage begins: the next reader makes it again.
 * Context: ps->lock.
 */
static void conn_lose_locked(struct criu_ps *ps, struct ps_conn *c, int err)
{
	if (c->dead)
		return;
	c->dead = true;
	shutdown(c->sk, SHUT_RDWR);
	for (struct ps_req *r = c->head; r; r = r->next)
		pthread_cond_signal(&r->turn);
	c->head = NULL;
	c->tail = &c->head;
	if (ps->cur != c)
		return;
	ps->cur = NULL;
	conn_put_locked(c);
	ps->st.lost++;
	ps->next_try = 0;
	ps->tries = 0;
	retry_link_down(&ps->link, &ps->st.retry, &ps->log, retry_now_ns(),
			strerror(-err));
}

static void conn_lose(struct criu_ps *ps, struct ps_conn *c, int err)
{
	pthread_mutex_lock(&ps->lock);
	conn_lose_locked(ps, c, err);
	pthread_mutex_unlock(&ps->lock);
}

/* A non-blocking connect, finished under the time-out: a socket, or
 * -errno. */
static int ps_dial(const struct criu_ps *ps)
{
	int one = 1, soerr = 0, err = 0;
	socklen_t sl = sizeof(soerr);
	int sk = socket(ps->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC |
					       SOCK_NONBLOCK, 0);

	if (sk < 0)
		return -errno;
	/* Requests are small and pipelined: never hold one back. */
	setsockopt(sk, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(sk, (const struct sockaddr *)&ps->addr, ps->addr_len)) {
		err = errno == EINPROGRESS ? ps_wait(ps, sk, POLLOUT) : -errno;
		if (!err && getsockopt(sk, SOL_SOCKET, SO_ERROR, &soerr, &sl))
			err = -errno;
		if (!err)
			err = -soerr;
	}
	if (err) {
		close(sk);
		return err;
	}
	return sk;
}

/* A new current connection over socket @sk (0), or -ENOMEM. Context:
 * ps->lock. */
static int conn_install_locked(struct criu_ps *ps, int sk)
{
	struct ps_conn *c = calloc(1, sizeof(*c));

	if (!c) {
		close(sk);
		return -ENOMEM;
	}
	c->sk = sk;
	c->refs = 1;
	c->tail = &c->head;
	ps->cur = c;
	ps->st.connects++;
	ps->tries = 0;
	retry_link_up(&ps->link, &ps->st.retry, &ps->log, retry_now_ns());
	return 0;
}

/* Sleep until @ns (CLOCK_MONOTONIC), without a lock. */
static void sleep_until(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull),
			       (long)(ns % 1000000000ull) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

/* Wait on ps->changed until @until at most. Context: ps->lock. */
static void wait_changed_locked(struct criu_ps *ps, uint64_t until)
{
	struct timespec ts = { (time_t)(until / 1000000000ull),
			       (long)(until % 1000000000ull) };

	if (until == UINT64_MAX)
		pthread_cond_wait(&ps->changed, &ps->lock);
	else
		pthread_cond_timedwait(&ps->changed, &ps->lock, &ts);
}

/*
 * One step towards a connection while there is none: attempt one when
 * its time has come, else wait for that time (or for the reader that
 * attempts one). Returns 0 (look again), or -EIO: the server has been
 * unreachable for the deadline, and no attempt is due now.
 * Context: ps->lock, dropped and taken again.
 */
static int conn_redial_locked(struct criu_ps *ps)
{
	uint64_t now = retry_now_ns(), until;
	bool expired = retry_link_check(&ps->link, &ps->rp, &ps->st.retry,
					&ps->log, now, &until);
	int sk;

	if (ps->dialing || now < ps->next_try) {
		if (expired)
			return -EIO;
		if (ps->dialing)
			wait_changed_locked(ps, until);
		else {
			ps->dialing = true;
			pthread_mutex_unlock(&ps->lock);
			sleep_until(ps->next_try < until ? ps->next_try : until);
			pthread_mutex_lock(&ps->lock);
			ps->dialing = false;
			pthread_cond_broadcast(&ps->changed);
		}
		return 0;
	}
	ps->dialing = true;
	pthread_mutex_unlock(&ps->lock);
	sk = ps_dial(ps);
	pthread_mutex_lock(&ps->lock);
	ps->dialing = false;
	if (sk < 0 || conn_install_locked(ps, sk)) {
		ps->st.failed_connects++;
		ps->next_try = retry_link_failed(&ps->link, &ps->rp,
						 retry_now_ns(), &ps->tries);
	}
	pthread_cond_broadcast(&ps->changed);
	return 0;
}

/* The current connection, held (conn_put() it), made again if it was
 * lost; -EIO past the deadline. */
static int conn_get(struct criu_ps *ps, struct ps_conn **cp)
{
	int err = 0;

	pthread_mutex_lock(&ps->lock);
	while (!ps->cur && !err)
		err = conn_redial_locked(ps);
	if (!err) {
		*cp = ps->cur;
		ps->cur->refs++;
	}
	pthread_mutex_unlock(&ps->lock);
	return err;
}

static void conn_put(struct criu_ps *ps, struct ps_conn *c)
{
	pthread_mutex_lock(&ps->lock);
	conn_put_locked(c);
	pthread_mutex_unlock(&ps->lock);
}

/* ---- requests ---- */

/* Queue and send @n requests on @c; on failure @c is lost. */
static int ps_send_batch(struct criu_ps *ps, struct ps_conn *c,
			 struct ps_req *r, size_t n)
{
	int err = 0;

	pthread_mutex_lock(&ps->send_lock);
	pthread_mutex_lock(&ps->lock);
	if (c->dead)
		err = -ECONNRESET;
	for (size_t i = 0; !err && i < n; i++) {
		r[i].next = NULL;
		*c->tail = &r[i];
		c->tail = &r[i].next;
	}
	pthread_mutex_unlock(&ps->lock);
	for (size_t i = 0; !err && i < n; i++) {
		struct ps_iov pi = { .cmd = PS_IOV_GET,
				     .nr_pages = r[i].nr_pages,
				     .vaddr = r[i].vaddr,
				     .dst_id = r[i].pid };

		err = ps_io(ps, c->sk, true, &pi, sizeof(pi));
		if (err)
			conn_lose(ps, c, err);
	}
	pthread_mutex_unlock(&ps->send_lock);
	return err;
}

/* The answer to @r: it matches the request, and carries 1..asked pages. */
static int ps_recv_one(struct criu_ps *ps, struct ps_conn *c,
		       struct ps_req *r)
{
	struct ps_iov pi;
	int err;

	err = ps_io(ps, c->sk, false, &pi, sizeof(pi));
	if (err)
		return err;
	if (pi.cmd != (CRIU_PE_PRESENT << PS_CMD_BITS | PS_IOV_ADD_F) ||
	    pi.vaddr != r->vaddr || pi.dst_id != r->pid || !pi.nr_pages ||
	    pi.nr_pages > r->nr_pages)
		return -EPROTO;
	err = ps_io(ps, c->sk, false, r->buf, pi.nr_pages * CRIU_PAGE_SIZE);
	if (err)
		return err;
	r->got = pi.nr_pages;
	return 0;
}

/* Wait for @r's turn on @c, read its answer, hand the head on. 0, or
 * -errno: @c is lost. */
static int ps_complete(struct criu_ps *ps, struct ps_conn *c,
		       struct ps_req *r)
{
	int err;

	pthread_mutex_lock(&ps->lock);
	while (!c->dead && c->head != r)
		pthread_cond_wait(&r->turn, &ps->lock);
	err = c->dead ? -ECONNRESET : 0;
	pthread_mutex_unlock(&ps->lock);
	if (err)
		return err;
	err = ps_recv_one(ps, c, r);
	pthread_mutex_lock(&ps->lock);
	if (!err && c->dead)
		err = -ECONNRESET;
	if (err) {
		conn_lose_locked(ps, c, err);
	} else {
		c->head = r->next;
		if (!c->head)
			c->tail = &c->head;
		else
			pthread_cond_signal(&c->head->turn);
	}
	pthread_mutex_unlock(&ps->lock);
	return err;
}

/* What one read() still has to get: [at, end), inside one request. */
struct ps_gap {
	uint64_t at, end;
};

/* A read's progress: gaps left by short or failed answers, then the
 * fresh part. */
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
 * One batch on connection @c: plan, send, receive in order. The server
 * cuts an answer where its run of pages ends; what an answer lacked, and
 * every request of a batch whose connection was lost that got no answer,
 * become gaps that the next batch asks for. 0, or what lost @c.
 */
static int ps_round(struct ps_src *p, struct ps_conn *c, struct ps_todo *t)
{
	struct ps_req r[PS_BATCH];
	size_t n = ps_plan(p, t, r), done = 0;
	int err;

	err = ps_send_batch(p->ps, c, r, n);
	for (; !err && done < n; done++)
		err = ps_complete(p->ps, c, &r[done]);
	for (size_t i = 0; i < n; i++) {
		uint64_t got = i < done ? r[i].got : 0;

		if (got < r[i].nr_pages)
			t->gap[t->nr_gaps++] = (struct ps_gap){
				r[i].vaddr + got * CRIU_PAGE_SIZE,
				r[i].vaddr + r[i].nr_pages * CRIU_PAGE_SIZE };
		pthread_cond_destroy(&r[i].turn);
	}
	return err;
}

/*
 * The @tries-th failure (@err) of the read of [off, off + len): true when
 * it is asked again (logged, after the backoff), false when given up.
 */
static bool ps_retry(struct criu_ps *ps, uint64_t off, size_t len,
		     uint32_t tries, int err)
{
	char what[80];
	uint64_t when;
	bool again;

	snprintf(what, sizeof(what), "pages %#llx-%#llx",
		 (unsigned long long)off, (unsigned long long)(off + len));
	pthread_mutex_lock(&ps->lock);
	again = retry_read_failed(&ps->rp, &ps->st.retry, &ps->log, tries,
				  -err, what, retry_now_ns(), &when);
	pthread_mutex_unlock(&ps->lock);
	if (!again)
		return false;
	ps_log(ps, "%s: asked again (retry %u of %u) after: %s", what, tries,
	       ps->rp.read_retries, strerror(-err));
	sleep_until(when);
	return true;
}

/* A read given up because the server stays unreachable. */
static void ps_gave_up(struct criu_ps *ps, uint64_t off, size_t len)
{
	pthread_mutex_lock(&ps->lock);
	ps->st.retry.gave_up++;
	pthread_mutex_unlock(&ps->lock);
	ps_log(ps, "pages %#llx-%#llx: given up: the server is unreachable "
	       "past the deadline", (unsigned long long)off,
	       (unsigned long long)(off + len));
}

static ssize_t ps_read(struct source *s, uint64_t off, void *buf, size_t len,
		       unsigned int flags)
{
	struct ps_src *p = (struct ps_src *)s;
	struct ps_todo t = { .at = off, .end = off + len, .buf = buf,
			     .off = off };
	uint32_t tries = 0;
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
		struct ps_conn *c;

		if (conn_get(p->ps, &c)) {
			ps_gave_up(p->ps, off, len);
			return -EIO;
		}
		err = ps_round(p, c, &t);
		conn_put(p->ps, c);
		if (err && !ps_retry(p->ps, off, len, ++tries, err))
			return -EIO;
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
				.page_size = CRIU_PAGE_SIZE, .remote = true };
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

/* @o's settings, where its size holds them. */
static void ps_opts(struct criu_ps *ps, const struct criu_ps_opts *o)
{
	size_t have = o ? o->size : 0;

	ps->timeout_ms = PS_TIMEOUT_MS;
	if (have >= offsetof(struct criu_ps_opts, timeout_ms) + sizeof(int) &&
	    o->timeout_ms > 0)
		ps->timeout_ms = o->timeout_ms;
	ps->rp = retry_policy_resolve(
		have >= offsetof(struct criu_ps_opts, retry) + sizeof(o->retry)
			? &o->retry : NULL);
	if (have >= offsetof(struct criu_ps_opts, log_arg) + sizeof(void *))
		ps->log = (struct retry_log){ o->log, o->log_arg, ps->name };
	else
		ps->log = (struct retry_log){ .who = ps->name };
}

static void ps_free(struct criu_ps *ps)
{
	pthread_cond_destroy(&ps->changed);
	pthread_mutex_destroy(&ps->lock);
	pthread_mutex_destroy(&ps->send_lock);
	free(ps);
}

int criu_ps_connect(const char *addr, uint16_t port,
		    const struct criu_ps_opts *opts, struct criu_ps **psp)
{
	struct criu_ps *ps = calloc(1, sizeof(*ps));
	int err, sk;

	if (!ps)
		return -ENOMEM;
	err = ps_addr(addr, port, &ps->addr, &ps->addr_len);
	if (err) {
		free(ps);
		return err;
	}
	snprintf(ps->name, sizeof(ps->name), "page server %s%s%s:%u",
		 strchr(addr, ':') ? "[" : "", addr,
		 strchr(addr, ':') ? "]" : "", port);
	ps_opts(ps, opts);
	pthread_mutex_init(&ps->send_lock, NULL);
	pthread_mutex_init(&ps->lock, NULL);
	pthread_cond_init(&ps->changed, NULL);
	sk = ps_dial(ps);
	pthread_mutex_lock(&ps->lock);
	err = sk < 0 ? sk : conn_install_locked(ps, sk);
	pthread_mutex_unlock(&ps->lock);
	if (err) {
		ps_free(ps);
		return err;
	}
	*psp = ps;
	return 0;
}

void criu_ps_stats(struct criu_ps *ps, struct criu_ps_stats *out)
{
	pthread_mutex_lock(&ps->lock);
	*out = ps->st;
	pthread_mutex_unlock(&ps->lock);
}

/* No reader runs: the current connection, if any, is ours alone. */
int criu_ps_close(struct criu_ps *ps)
{
	struct ps_iov pi = { .cmd = PS_IOV_CLOSE };
	struct ps_conn *c = ps->cur;
	int32_t status = -1;
	int err = c ? 0 : -EIO;

	if (!err)
		err = ps_io(ps, c->sk, true, &pi, sizeof(pi));
	if (!err)
		err = ps_io(ps, c->sk, false, &status, sizeof(status));
	if (err)
		err = -EIO;
	else if (status)
		err = -EPROTO;
	if (c)
		conn_put_locked(c);
	ps_free(ps);
	return err;
}
