// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * nbd_io.c - the reads on the wire (nbd_int.h): sending queued chunks on
 * the free slots of the connections that are up, and each connection's
 * thread, which polls its socket, runs libnbd's state machine, collects
 * the answers, notices a lost or silent connection and makes it again
 * (retry.h).
 */
#include <errno.h>
#include <libnbd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#include "nbd_int.h"

#define DISPATCH_BATCH 32	/* reads sent per unlocked round */

/* The connection whose thread this is; NULL in other threads. */
static __thread struct nbd_conn *io_self;

/* ---- sending ---- */

static int slot_cb(void *arg, int *error)
{
	struct nbd_slot *sl = arg;

	sl->err = *error;
	atomic_store_explicit(&sl->done, true, memory_order_release);
	if (io_self != sl->conn)
		(void)eventfd_write(sl->conn->efd, 1);
	return 1;
}

static struct nbd_slot *slot_take_locked(struct nbd_conn *c,
					 struct nbd_chunk *ch)
{
	struct nbd_slot *sl = c->slots;

	while (sl->c)
		sl++;
	sl->c = ch;
	atomic_store_explicit(&sl->done, false, memory_order_relaxed);
	ch->state = CH_SENT;
	sl->first = !c->inflight++;
	if (sl->first)
		c->progress = retry_now_ns();
	c->submitting++;
	return sl;
}

/* Up to @max queued chunks onto free slots, spread over the connections
 * that are up, urgent ones first. */
static size_t dispatch_pick_locked(struct nbd_set *set, struct nbd_slot **job,
				   size_t max)
{
	uint32_t idle = 0;
	size_t n = 0;

	while (n < max && idle < set->nconns) {
		struct nbd_conn *c = &set->conns[set->rr++ % set->nconns];
		struct nbd_chunk *ch;

		if (c->state != C_UP || c->inflight == set->o.depth ||
		    !(ch = ncache_pop_locked(set))) {
			idle++;
			continue;
		}
		idle = 0;
		job[n++] = slot_take_locked(c, ch);
	}
	return n;
}

/* Send one read, without the set's lock. 0, or the errno of a refusal;
 * *dead: the handle is dead (the connection is lost, not the read). */
static int job_send(struct nbd_slot *sl, bool *dead)
{
	struct nbd_conn *c = sl->conn;
	struct nbd_chunk *ch = sl->c;
	bool first = sl->first;
	int64_t cookie = nbd_aio_pread(c->h, ch->buf + ch->lo, ch->hi - ch->lo,
		(ch->idx << c->set->shift) + ch->lo,
		(nbd_completion_callback){ .callback = slot_cb,
					   .user_data = sl }, 0);
	int err;

	/* Its thread must poll for writing, or time the answer. */
	if (cookie >= 0) {
		if ((first && io_self != c) ||
		    nbd_aio_get_direction(c->h) & LIBNBD_AIO_DIRECTION_WRITE)
			(void)eventfd_write(c->efd, 1);
		return 0;
	}
	err = nbd_get_errno();
	*dead = nbd_aio_is_dead(c->h) || nbd_aio_is_closed(c->h);
	return err > 0 ? err : EIO;
}

/* After job_send() of @sl on @c failed with @err. */
static void job_failed_locked(struct nbd_conn *c, struct nbd_slot *sl,
			      int err, bool dead)
{
	struct nbd_chunk *ch = sl->c;

	sl->c = NULL;
	c->inflight--;
	if (dead)
		ncache_requeue_locked(c->set, ch, true);
	else
		ncache_error_locked(c->set, ch, err);
	/* Its thread notices the dead handle, or times the retry. */
	(void)eventfd_write(c->efd, 1);
}

/*
 * Send what is queued, as far as the connections have free slots. Drops
 * and takes set->lock again while it sends.
 */
void nio_dispatch_locked(struct nbd_set *set)
{
	struct nbd_slot *job[DISPATCH_BATCH];
	int err[DISPATCH_BATCH];
	bool dead[DISPATCH_BATCH];
	size_t n;

	do {
		n = dispatch_pick_locked(set, job, DISPATCH_BATCH);
		if (!n)
			return;
		pthread_mutex_unlock(&set->lock);
		for (size_t i = 0; i < n; i++)
			err[i] = job_send(job[i], &dead[i]);
		pthread_mutex_lock(&set->lock);
		for (size_t i = 0; i < n; i++) {
			struct nbd_conn *c = job[i]->conn;

			/* A sent slot may be answered and reused by now. */
			if (err[i])
				job_failed_locked(c, job[i], err[i], dead[i]);
			if (!--c->submitting)
				pthread_cond_broadcast(&c->idle);
		}
	} while (n == DISPATCH_BATCH);
}

/* ---- a connection's thread ---- */

/* Wait on the connection's eventfd until @until (ns; UINT64_MAX: no
 * time-out), or also for @fd's @events when fd >= 0. Returns the fd's
 * revents. */
static short conn_wait(struct nbd_conn *c, int fd, short events,
		       uint64_t until)
{
	struct pollfd p[2] = { { .fd = c->efd, .events = POLLIN },
			       { .fd = fd, .events = events } };
	uint64_t now = retry_now_ns();
	int ms = until == UINT64_MAX ? -1 :
		 until <= now ? 0 : (int)min_u64((until - now + MS - 1) / MS,
						 60000);
	eventfd_t v;

	if (poll(p, fd >= 0 ? 2 : 1, ms) > 0 && p[0].revents)
		(void)eventfd_read(c->efd, &v);
	return fd >= 0 ? p[1].revents : 0;
}

/* Poll the handle until @until and run libnbd's state machine: false
 * when the handle is dead. */
static bool conn_poll(struct nbd_conn *c, uint64_t until)
{
	unsigned int dir = (unsigned int)nbd_aio_get_direction(c->h);
	short ev = (short)((dir & LIBNBD_AIO_DIRECTION_READ ? POLLIN : 0) |
			   (dir & LIBNBD_AIO_DIRECTION_WRITE ? POLLOUT : 0));
	short rev = conn_wait(c, nbd_aio_get_fd(c->h), ev, until);

	if (rev & (POLLIN | POLLHUP | POLLERR) &&
	    dir & LIBNBD_AIO_DIRECTION_READ && nbd_aio_notify_read(c->h))
		return false;
	if (rev & (POLLOUT | POLLERR) && dir & LIBNBD_AIO_DIRECTION_WRITE &&
	    nbd_aio_notify_write(c->h))
		return false;
	return !nbd_aio_is_dead(c->h) && !nbd_aio_is_closed(c->h);
}

/* The answers that came: chunks ready, or server errors. */
static void conn_reap_locked(struct nbd_conn *c)
{
	struct nbd_set *set = c->set;

	for (uint32_t i = 0; i < set->o.depth; i++) {
		struct nbd_slot *sl = &c->slots[i];
		struct nbd_chunk *ch = sl->c;

		if (!ch || !atomic_load_explicit(&sl->done,
						 memory_order_acquire))
			continue;
		sl->c = NULL;
		c->inflight--;
		c->progress = retry_now_ns();
		if (sl->err)
			ncache_error_locked(set, ch, sl->err);
		else
			ncache_ready_locked(set, ch);
	}
}

static int by_seq_desc(const void *a, const void *b)
{
	const struct nbd_chunk *x = *(struct nbd_chunk *const *)a;
	const struct nbd_chunk *y = *(struct nbd_chunk *const *)b;

	return x->seq < y->seq ? 1 : x->seq > y->seq ? -1 : 0;
}

/* A lost connection's slots: answered ones are ready, the others go back
 * to the head of their queue in the order they were first queued. */
static void conn_requeue_locked(struct nbd_conn *c)
{
	struct nbd_set *set = c->set;
	struct nbd_chunk **lost = calloc(set->o.depth, sizeof(*lost));
	size_t n = 0;

	for (uint32_t i = 0; i < set->o.depth; i++) {
		struct nbd_slot *sl = &c->slots[i];
		struct nbd_chunk *ch = sl->c;

		if (!ch)
			continue;
		sl->c = NULL;
		if (atomic_load_explicit(&sl->done, memory_order_acquire) &&
		    !sl->err)
			ncache_ready_locked(set, ch);
		else if (lost)
			lost[n++] = ch;
		else
			ncache_requeue_locked(set, ch, true);
	}
	c->inflight = 0;
	qsort(lost, n, sizeof(*lost), by_seq_desc);
	for (size_t i = 0; i < n; i++)
		ncache_requeue_locked(set, lost[i], true);
	free(lost);
}

static void conn_lost_locked(struct nbd_conn *c, const char *why)
{
	struct nbd_set *set = c->set;
	struct nbd_handle *h = c->h;
	uint64_t now = retry_now_ns();

	c->state = C_DOWN;
	if (!--set->up)
		retry_link_down(&set->link, &set->st.retry, &set->log, now,
				why);
	while (c->submitting)
		pthread_cond_wait(&c->idle, &set->lock);
	c->h = NULL;
	pthread_mutex_unlock(&set->lock);
	nbd_close(h);
	pthread_mutex_lock(&set->lock);
	conn_requeue_locked(c);
	c->tries = 0;
	c->next_try = now;
	ncache_tick_locked(set, now);
	nio_dispatch_locked(set);
}

/* One round of an up connection: wait, read or write, reap, send. */
static void conn_serve_locked(struct nbd_conn *c)
{
	struct nbd_set *set = c->set;
	uint64_t io_to = set->o.io_timeout_ms * MS;
	uint64_t wake = ncache_tick_locked(set, retry_now_ns());
	char why[160];
	bool alive;

	if (c->inflight)
		wake = min_u64(wake, c->progress + io_to);
	pthread_mutex_unlock(&set->lock);
	alive = conn_poll(c, wake);
	if (!alive)
		snprintf(why, sizeof(why), "%s", nbd_get_error() ?
			 nbd_get_error() : "connection closed");
	pthread_mutex_lock(&set->lock);
	if (alive)
		conn_reap_locked(c);
	if (alive && c->inflight && retry_now_ns() >= c->progress + io_to) {
		snprintf(why, sizeof(why), "no answer for %u ms",
			 set->o.io_timeout_ms);
		alive = false;
	}
	if (!alive) {
		conn_lost_locked(c, why);
		return;
	}
	ncache_tick_locked(set, retry_now_ns());
	nio_dispatch_locked(set);
}

/* The export a connection found is the one the set was opened on. */
static bool export_same(const struct nbd_export *a, const struct nbd_export *b)
{
	return a->size == b->size && a->min_block == b->min_block;
}

/* A connection made: up, unless the export is not the same. */
static void conn_made_locked(struct nbd_conn *c, struct nbd_handle *h,
			     const struct nbd_export *ex)
{
	struct nbd_set *set = c->set;
	char line[160];

	if (!export_same(&set->info.ex, ex)) {
		set->changed = true;
		c->state = C_GONE;
		snprintf(line, sizeof(line), "%s: the export is no longer the "
			 "one opened (%llu bytes, not %llu): every read fails",
			 set->info.canon, (unsigned long long)ex->size,
			 (unsigned long long)set->info.ex.size);
		if (set->log.fn)
			set->log.fn(set->log.arg, line);
		ncache_fail_queued_locked(set);
		pthread_mutex_unlock(&set->lock);
		nbd_close(h);
		pthread_mutex_lock(&set->lock);
		return;
	}
	c->h = h;
	c->state = C_UP;
	c->tries = 0;
	set->st.reconnects += c->was_up;
	c->was_up = true;
	if (!set->up++)
		retry_link_up(&set->link, &set->st.retry, &set->log,
			      retry_now_ns());
	nio_dispatch_locked(set);
}

/* One round of a connection that is down: wait for its time, try. */
static void conn_reconnect_locked(struct nbd_conn *c)
{
	struct nbd_set *set = c->set;
	uint64_t now = retry_now_ns(), wake = ncache_tick_locked(set, now);
	uint64_t until = set->link.down_since_ns + set->rp.deadline_ms * MS;
	uint32_t timeout = set->o.connect_timeout_ms;
	struct nbd_handle *h = NULL;
	struct nbd_export ex;
	char why[256];
	int ret;

	if (c->state == C_GONE || now < c->next_try) {
		pthread_mutex_unlock(&set->lock);
		conn_wait(c, -1, 0, c->state == C_GONE ? UINT64_MAX :
			  min_u64(c->next_try, wake));
		pthread_mutex_lock(&set->lock);
		return;
	}
	/* An attempt ends when the outage expires: the reads must fail. */
	if (set->link.down_since_ns && !set->link.expired && until > now)
		timeout = (uint32_t)min_u64(timeout, (until - now) / MS + 1);
	pthread_mutex_unlock(&set->lock);
	ret = nconn_connect(&set->target, timeout, c->efd, &set->stopping,
			    &h, &ex, why, sizeof(why));
	pthread_mutex_lock(&set->lock);
	if (!ret)
		conn_made_locked(c, h, &ex);
	else
		c->next_try = retry_link_failed(&set->link, &set->rp,
						retry_now_ns(), &c->tries);
}

void *nio_main(void *arg)
{
	struct nbd_conn *c = arg;
	struct nbd_set *set = c->set;

	io_self = c;
	pthread_mutex_lock(&set->lock);
	while (!atomic_load(&set->stopping)) {
		if (c->state == C_UP)
			conn_serve_locked(c);
		else
			conn_reconnect_locked(c);
	}
	pthread_mutex_unlock(&set->lock);
	return NULL;
}

/*
 * Close a connection politely: wait (up to io_timeout_ms) for the reads
 * in flight, then tell the server (NBD_CMD_DISC). A server must cope with
 * a client that hangs up with replies queued, but nbdkit before 1.33.10
 * aborts on it when it serves a connection with several threads (nbdkit
 * commit 9d82aa4f), which would end it for every other client.
 */
void nio_close(struct nbd_conn *c)
{
	uint64_t end = retry_now_ns() + c->set->o.io_timeout_ms * MS;

	while (nbd_aio_in_flight(c->h) > 0 && retry_now_ns() < end &&
	       conn_poll(c, end))
		;
	if (!nbd_aio_disconnect(c->h, 0))
		while (retry_now_ns() < end && conn_poll(c, end))
			;
	nbd_close(c->h);
	c->h = NULL;
}

