// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * session.c - serving one client's registration: its faults first, the
 * rest of its pages in the background.
 *
 * The fault thread reads the client's userfaultfd, its socket and its
 * pidfd. A batch of messages is handled events first (REMAP moves a range,
 * REMOVE and UNMAP turn pages into zeros or nothing, FORK's new
 * userfaultfd is closed: regions are MADV_DONTFORK), then the faults
 * parked on EAGAIN, then the new faults: each is served with the 64 KiB
 * block around it (UFFDIO_COPY with DONTWAKE), and the batch's threads
 * are woken at the end. Two push threads (stripes of 1 MiB each) run at
 * nice 19 (PUSH_NICE): a waking fault thread preempts them. They copy the
 * blocks nobody asked for, from just after the last fault, in runs that
 * double while no fault comes and halve when faults do; copies hold the
 * session's lock for reading, so they run side by side, and only an event
 * that changes the ranges takes it for writing. All read the image
 * through io_uring (image.c).
 *
 * A block whose checksum fails is poisoned (UFFDIO_POISON): the accesses
 * get SIGBUS, never wrong data. When every block is in, DONE is sent, and
 * the daemon goes on serving the faults and events that still come (pages
 * the client dropped) until the client closes the connection - the
 * library does, and serves its region itself from then on - or exits, or
 * the daemon stops. The client keeps its userfaultfd in every case.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "daemon.h"

#define PAGE 4096ul
#define PUSH_MAX_BLOCKS 16	/* 1 MiB: the buffer stays in cache */
#define PROGRESS_MS 100
#define PARK_MAX 256
/*
 * The push threads' nice value. A waking fault thread (nice 0) preempts
 * them at once, and they still get a little CPU on a busy machine.
 * Measured (faultd-bench run restore, 512 MiB, this 2-vCPU machine): fault
 * p99 during the push 0.36 ms against 0.43 ms without a push, 1.97 GB/s;
 * SCHED_BATCH (no wake-up preemption by it, 3 ms slices) gave 3.4 ms;
 * SCHED_IDLE gave 0.11 ms and 2.1 GB/s but stops the push entirely while
 * anything else runs.
 */
#define PUSH_NICE 19

static pthread_mutex_t sessions_lock = PTHREAD_MUTEX_INITIALIZER;
static struct session *sessions;

/* ------------------------------------------------------------------------
 * Bitmaps and address translation.
 */

static bool bit_test(_Atomic uint64_t *bm, uint64_t i)
{
	return atomic_load_explicit(&bm[i / 64], memory_order_acquire) &
	       (1ull << (i % 64));
}

/* Set bit @i; returns whether it was clear. */
static bool bit_set(_Atomic uint64_t *bm, uint64_t i)
{
	uint64_t bit = 1ull << (i % 64);

	return !(atomic_fetch_or(&bm[i / 64], bit) & bit);
}

static void block_done(struct session *s, uint64_t b)
{
	if (bit_set(s->served, b))
		atomic_fetch_add(&s->blocks_done, 1);
}

/* The image offset of client address @addr. Context: s->lock. */
static int addr_to_image_locked(struct session *s, uint64_t addr,
				uint64_t *ioff)
{
	for (unsigned int i = 0; i < s->nr; i++)
		if (addr - s->r[i].start < s->r[i].len) {
			*ioff = s->r[i].image_off + (addr - s->r[i].start);
			return 0;
		}
	return -ENOENT;
}

/* ------------------------------------------------------------------------
 * Copying into the client.
 */

/*
 * Copy @n pages from @src to @dst with DONTWAKE, skipping pages that are
 * there already. Returns the pages copied, or -EAGAIN (an event is
 * pending: retry after reading it). A range the client unmapped, or a
 * client that exited, copies nothing.
 */
static ssize_t copy_pages(struct session *s, uint64_t dst, const char *src,
			  size_t n)
{
	size_t done = 0, copied = 0;

	while (done < n) {
		ssize_t c = uffd_copy(s->uffd, dst + done * PAGE,
				      src + done * PAGE, (n - done) * PAGE,
				      UFFDIO_COPY_MODE_DONTWAKE);

		if (c > 0) {
			done += (size_t)c / PAGE;
			copied += (size_t)c / PAGE;
			continue;
		}
		switch (uffd_classify(c)) {
		case UFFD_EXISTS:
			done++; /* that page is in: go on after it */
			continue;
		case UFFD_AGAIN:
			return -EAGAIN;
		default: /* gone, or failed: nothing more to do here */
			return (ssize_t)copied;
		}
	}
	return (ssize_t)copied;
}

/* Poison the client's pages of [ioff, ioff + len): bad image data. The
 * client learns how many from PROGRESS and DONE. */
static void poison_locked(struct session *s, uint64_t ioff, size_t len)
{
	for (unsigned int i = 0; i < s->nr; i++) {
		struct srange *r = &s->r[i];
		uint64_t a = ioff > r->image_off ? ioff : r->image_off;
		uint64_t e = ioff + len < r->image_off + r->len
				     ? ioff + len
				     : r->image_off + r->len;

		if (a < e) {
			uffd_poison(s->uffd, r->start + (a - r->image_off),
				    e - a, 0);
			atomic_fetch_add(&s->pages_poisoned, (e - a) / PAGE);
		}
	}
}

/*
 * Copy block @b's content (@buf) to wherever the client maps it, but not
 * its removed pages. Returns the pages copied, or -EAGAIN.
 * Context: s->lock.
 */
static ssize_t copy_block_locked(struct session *s, uint64_t b,
				 const char *buf)
{
	uint64_t off = b * IMG_BLOCK, end = off + IMG_BLOCK;
	ssize_t total = 0;

	for (unsigned int i = 0; i < s->nr; i++) {
		struct srange *r = &s->r[i];
		uint64_t a = off > r->image_off ? off : r->image_off;
		uint64_t e = end < r->image_off + r->len ? end
							 : r->image_off + r->len;

		while (a < e) {
			uint64_t p = a;
			ssize_t n;

			while (p < e && !bit_test(s->removed, p / PAGE))
				p += PAGE;
			n = p > a ? copy_pages(s, r->start + (a - r->image_off),
					       buf + (a - off), (p - a) / PAGE)
				  : 0;
			if (n < 0)
				return n;
			total += n;
			a = p + PAGE;
		}
	}
	return total;
}

/*
 * serve_block() - bring image block @b into the client (@buf: scratch of
 * IMG_BLOCK). Returns the pages copied, 0 if it was in already, or
 * -EAGAIN (the caller retries it later).
 */
static ssize_t serve_block(struct session *s, uint64_t b, char *buf)
{
	ssize_t n = image_read(s->img, b * IMG_BLOCK, buf, IMG_BLOCK);

	pthread_rwlock_rdlock(&s->lock);
	if (bit_test(s->served, b)) {
		n = 0;
	} else if (n < 0) {
		dlog(0, "session %llu: image block %llu: %s: poisoned",
		     (unsigned long long)s->id, (unsigned long long)b,
		     strerror((int)-n));
		poison_locked(s, b * IMG_BLOCK, IMG_BLOCK);
		block_done(s, b);
		n = 0;
	} else {
		n = copy_block_locked(s, b, buf);
		if (n >= 0)
			block_done(s, b);
	}
	pthread_rwlock_unlock(&s->lock);
	return n;
}

/* ------------------------------------------------------------------------
 * Non-cooperative events.
 */

/* Split the ranges at client address @at. Context: s->lock. */
static void split_at_locked(struct session *s, uint64_t at)
{
	for (unsigned int i = 0; i < s->nr; i++) {
		struct srange *r = &s->r[i];

		if (at > r->start && at < r->start + r->len &&
		    s->nr < ARRAY_SIZE(s->r)) {
			s->r[s->nr++] = (struct srange){
				at, r->start + r->len - at,
				r->image_off + (at - r->start) };
			r->len = at - r->start;
			return;
		}
	}
}

/* [start, end) of the client now reads zeros (REMOVE) or is gone. */
static void pages_removed(struct session *s, uint64_t start, uint64_t end,
			  bool unmapped)
{
	pthread_rwlock_wrlock(&s->lock);
	split_at_locked(s, start);
	split_at_locked(s, end);
	for (unsigned int i = 0; i < s->nr; i++) {
		struct srange *r = &s->r[i];

		if (r->start < start || r->start + r->len > end)
			continue;
		for (uint64_t o = r->image_off; o < r->image_off + r->len;
		     o += PAGE)
			bit_set(s->removed, o / PAGE);
		if (unmapped) /* nothing to serve there any more */
			*r = s->r[--s->nr], i--;
	}
	pthread_rwlock_unlock(&s->lock);
}

static void range_moved(struct session *s, uint64_t from, uint64_t to,
			uint64_t len)
{
	pthread_rwlock_wrlock(&s->lock);
	split_at_locked(s, from);
	split_at_locked(s, from + len);
	for (unsigned int i = 0; i < s->nr; i++)
		if (s->r[i].start >= from && s->r[i].start < from + len)
			s->r[i].start = to + (s->r[i].start - from);
	pthread_rwlock_unlock(&s->lock);
}

static void handle_event(struct session *s, const struct uffd_msg *m)
{
	switch (m->event) {
	case UFFD_EVENT_FORK:
		/* Regions are MADV_DONTFORK: the child has none of them. */
		close((int)m->arg.fork.ufd);
		break;
	case UFFD_EVENT_REMAP:
		range_moved(s, m->arg.remap.from, m->arg.remap.to,
			    m->arg.remap.len);
		break;
	case UFFD_EVENT_REMOVE:
		pages_removed(s, m->arg.remove.start, m->arg.remove.end, false);
		break;
	case UFFD_EVENT_UNMAP:
		pages_removed(s, m->arg.remove.start, m->arg.remove.end, true);
		break;
	}
	dlog(2, "session %llu: event %#x", (unsigned long long)s->id,
	     m->event);
}

/* ------------------------------------------------------------------------
 * The fault thread.
 */

struct fault_batch {
	uint64_t addr[PARK_MAX];
	uint64_t t_read[PARK_MAX];
	unsigned int n;
	uint64_t parked[PARK_MAX];
	uint64_t parked_t[PARK_MAX];
	unsigned int nr_parked;
	char *buf;
};

/* A page the client removed reads zeros from now on. */
static int serve_zero(struct session *s, uint64_t page)
{
	ssize_t n = uffd_zeropage(s->uffd, page, PAGE,
				  UFFDIO_ZEROPAGE_MODE_DONTWAKE);

	return uffd_classify(n) == UFFD_AGAIN ? -EAGAIN : 0;
}

/*
 * Serve one fault. Returns 0 (to be woken with its batch), or -EAGAIN
 * (park it). A fault in a block already served is a page the client
 * dropped since (MADV_DONTNEED without EVENT_REMOVE, e.g. the library's
 * discard): it gets the image's page again.
 */
static int serve_fault(struct session *s, uint64_t addr, char *buf)
{
	uint64_t page = addr & ~(PAGE - 1), ioff;
	ssize_t n;
	int ret;

	pthread_rwlock_rdlock(&s->lock);
	ret = addr_to_image_locked(s, page, &ioff);
	pthread_rwlock_unlock(&s->lock);
	if (ret < 0) /* not ours (any more): woken, it faults elsewhere */
		return 0;
	if (bit_test(s->removed, ioff / PAGE))
		return serve_zero(s, page);
	if (!bit_test(s->served, ioff / IMG_BLOCK)) {
		n = serve_block(s, ioff / IMG_BLOCK, buf);
		if (n > 0)
			atomic_fetch_add(&s->pages_urgent, (uint64_t)n);
		/* The push goes on after the fault: where the next ones are
		 * likely to be, if the client reads in order. */
		atomic_store(&s->push_from, ioff / IMG_BLOCK + 1);
		return n == -EAGAIN ? -EAGAIN : 0;
	}
	n = image_read(s->img, ioff, buf, PAGE);
	if (n < 0) {
		uffd_poison(s->uffd, page, PAGE, 0);
		atomic_fetch_add(&s->pages_poisoned, 1);
		return 0;
	}
	n = copy_pages(s, page, buf, 1);
	return n == -EAGAIN ? -EAGAIN : 0;
}

/* Wake the batch's faulting threads, one ioctl per run of pages. */
static void wake_batch(struct session *s, struct fault_batch *fb)
{
	uint64_t now = now_ns();

	for (unsigned int i = 0; i < fb->n; i++) {
		uffd_wake(s->uffd, fb->addr[i] & ~(PAGE - 1), PAGE);
		stat_latency(&s->lat, now - fb->t_read[i]);
	}
	fb->n = 0;
}

static void fault_or_park(struct session *s, struct fault_batch *fb,
			  uint64_t addr, uint64_t t_read)
{
	if (serve_fault(s, addr, fb->buf) == -EAGAIN &&
	    fb->nr_parked < PARK_MAX) {
		fb->parked[fb->nr_parked] = addr;
		fb->parked_t[fb->nr_parked++] = t_read;
		return;
	}
	fb->addr[fb->n] = addr;
	fb->t_read[fb->n++] = t_read;
	if (fb->n == PARK_MAX)
		wake_batch(s, fb);
}

/* Read and handle what the userfaultfd holds. Returns false at EOF. */
static bool read_faults(struct session *s, struct fault_batch *fb)
{
	struct uffd_msg m[64];
	ssize_t n = uffd_read_msgs(s->uffd, m, ARRAY_SIZE(m));
	uint64_t t = now_ns();
	unsigned int np = fb->nr_parked;

	if (n == -EAGAIN || n == -EINTR)
		n = 0;
	if (n < 0)
		return false;
	for (ssize_t i = 0; i < n; i++)
		if (m[i].event != UFFD_EVENT_PAGEFAULT)
			handle_event(s, &m[i]);
	fb->nr_parked = 0;
	for (unsigned int i = 0; i < np; i++)
		fault_or_park(s, fb, fb->parked[i], fb->parked_t[i]);
	for (ssize_t i = 0; i < n; i++)
		if (m[i].event == UFFD_EVENT_PAGEFAULT) {
			atomic_fetch_add(&s->faults, 1);
			fault_or_park(s, fb, m[i].arg.pagefault.address, t);
		}
	wake_batch(s, fb);
	return true;
}

void session_progress(struct session *s, struct proto_progress *p,
		      enum proto_type type)
{
	struct faultd_stats st = { .size = sizeof(st) };
	struct stat_block lat = { 0 };

	memset(p, 0, sizeof(*p));
	proto_init(&p->h, type, sizeof(*p));
	p->pages_total = s->nr_pages;
	p->pages_urgent = atomic_load(&s->pages_urgent);
	p->pages_background = atomic_load(&s->pages_background);
	p->faults = atomic_load(&s->faults);
	p->pages_poisoned = atomic_load(&s->pages_poisoned);
	stat_sum(&lat, &s->lat); /* relaxed loads: the fault thread writes */
	stat_export(&st, &lat);
	p->p50_ns = faultd_stats_latency(&st, 50);
	p->p99_ns = faultd_stats_latency(&st, 99);
}

/* A message from the client during the session. Returns false: end. */
static bool client_msg(struct session *s)
{
	union {
		struct proto_hdr h;
		struct {
			struct proto_hdr h;
			struct proto_range r;
		} pf;
	} u;
	struct proto_progress p;
	const char *why;
	uint64_t ioff;
	ssize_t n = proto_recv_checked(s->sock, &u, sizeof(u), NULL, 0, NULL,
				       &why);

	if (n < 0) { /* closed (its region is gone), or malformed */
		if (why)
			proto_error_send(s->sock, (int)n, "%s", why);
		return false;
	}
	if (u.h.type == MSG_STATS) {
		session_progress(s, &p, MSG_PROGRESS);
		return proto_send(s->sock, &p, NULL, 0) == 0;
	}
	if (u.h.type == MSG_PREFETCH) {
		pthread_rwlock_rdlock(&s->lock);
		if (!addr_to_image_locked(s, u.pf.r.start, &ioff))
			atomic_store(&s->prefetch_block, ioff / IMG_BLOCK);
		pthread_rwlock_unlock(&s->lock);
		return true;
	}
	proto_error_send(s->sock, -EPROTO, "unexpected message in a session");
	return false;
}

/* Is the client gone, or has it closed its end? */
static bool session_poll(struct session *s, struct fault_batch *fb)
{
	struct pollfd p[4] = {
		{ .fd = s->uffd, .events = POLLIN },
		{ .fd = s->sock, .events = POLLIN },
		{ .fd = s->pidfd, .events = POLLIN },
		{ .fd = s->wake_fd, .events = POLLIN },
	};
	uint64_t v;

	if (poll(p, 4, fb->nr_parked ? 1 : PROGRESS_MS) < 0 && errno != EINTR)
		return false;
	if (p[2].revents)
		return false; /* the client exited */
	if (p[1].revents && !client_msg(s))
		return false;
	if (p[3].revents)
		(void)!read(s->wake_fd, &v, sizeof(v));
	if ((p[0].revents & POLLIN) || fb->nr_parked)
		return read_faults(s, fb);
	return !(p[0].revents & (POLLERR | POLLHUP));
}

/* ------------------------------------------------------------------------
 * The push thread.
 */

/*
 * The push threads share the blocks in stripes of PUSH_MAX_BLOCKS (1 MiB):
 * pusher k takes the stripes whose index is k modulo PUSHERS.
 */
static bool my_block(uint64_t b, unsigned int k)
{
	return (b / PUSH_MAX_BLOCKS) % PUSHERS == k;
}

/* Pusher @k's first block not in yet from @from, wrapping; or nr_blocks. */
static uint64_t next_block(struct session *s, uint64_t from, unsigned int k)
{
	for (uint64_t i = 0; i < s->nr_blocks; i++) {
		uint64_t b = (from + i) % s->nr_blocks;

		if (my_block(b, k) && !bit_test(s->served, b))
			return b;
	}
	return s->nr_blocks;
}

/* Push up to @want blocks from @b, within its stripe; returns how many it
 * got to. */
static uint64_t push_run(struct session *s, uint64_t b, uint64_t want,
			 char *buf)
{
	uint64_t n = 0, stripe_end = (b / PUSH_MAX_BLOCKS + 1) * PUSH_MAX_BLOCKS;

	while (n < want && b + n < s->nr_blocks && b + n < stripe_end &&
	       !bit_test(s->served, b + n))
		n++;
	/* One read for the run; a bad block fails it: then one by one. */
	if (image_read(s->img, b * IMG_BLOCK, buf, n * IMG_BLOCK) < 0)
		return 0;
	for (uint64_t i = 0; i < n && !atomic_load(&s->stop); i++) {
		ssize_t c;

		pthread_rwlock_rdlock(&s->lock);
		c = bit_test(s->served, b + i)
			    ? 0
			    : copy_block_locked(s, b + i, buf + i * IMG_BLOCK);
		if (c >= 0)
			block_done(s, b + i);
		pthread_rwlock_unlock(&s->lock);
		if (c == -EAGAIN)
			return i;
		atomic_fetch_add(&s->pages_background, (uint64_t)c);
	}
	return n;
}

struct pusher {
	struct session *s;
	unsigned int k;
};

static void *push_main(void *arg)
{
	struct pusher *p = arg;
	struct session *s = p->s;
	unsigned int k = p->k;
	char *buf = malloc(PUSH_MAX_BLOCKS * IMG_BLOCK);
	uint64_t cursor = 0, chunk = 1, faults = 0, one = 1;

	free(p);
	setpriority(PRIO_PROCESS, (id_t)gettid(), PUSH_NICE);
	while (buf && !atomic_load(&s->stop) &&
	       atomic_load(&s->blocks_done) < s->nr_blocks) {
		uint64_t hint = atomic_load(&s->prefetch_block);
		uint64_t from = atomic_load(&s->push_from);
		uint64_t f = atomic_load(&s->faults), b, done;

		if (hint != UINT64_MAX)
			cursor = hint;
		else if (from != UINT64_MAX && from > cursor)
			cursor = from; /* jump ahead of the faults */
		b = next_block(s, cursor, k);
		if (b >= s->nr_blocks)
			break;
		if (b == hint)
			atomic_compare_exchange_strong(&s->prefetch_block, &hint,
						       UINT64_MAX);
		/* Runs double while no fault comes, and shrink when faults
		 * do, so that the block copies a fault may wait behind stay
		 * few. */
		chunk = f == faults ? (chunk * 2 > PUSH_MAX_BLOCKS
					       ? PUSH_MAX_BLOCKS
					       : chunk * 2)
				    : (chunk / 2 ? chunk / 2 : 1);
		faults = f;
		done = push_run(s, b, chunk, buf);
		if (!done && serve_block(s, b, buf) == -EAGAIN)
			usleep(1000); /* an event is pending: let it be read */
		cursor = b + (done ? done : 1);
	}
	free(buf);
	(void)!write(s->wake_fd, &one, sizeof(one));
	return NULL;
}

static int push_start(struct session *s)
{
	for (unsigned int k = 0; k < PUSHERS && !s->lazy; k++) {
		struct pusher *p = malloc(sizeof(*p));
		int ret = p ? 0 : -ENOMEM;

		if (p) {
			*p = (struct pusher){ s, k };
			ret = thread_start(&s->pushers[k], push_main, p,
					   "faultd-push");
		}
		if (ret < 0) {
			free(p);
			return ret;
		}
		s->nr_pushers++;
	}
	return 0;
}

/* ------------------------------------------------------------------------
 * Sessions.
 */

static void session_link(struct session *s)
{
	pthread_mutex_lock(&sessions_lock);
	s->next = sessions;
	sessions = s;
	pthread_mutex_unlock(&sessions_lock);
}

static void session_unlink(struct session *s)
{
	pthread_mutex_lock(&sessions_lock);
	for (struct session **p = &sessions; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	pthread_mutex_unlock(&sessions_lock);
}

/* Blocks no range maps have nothing to serve. */
static void mark_unmapped_blocks(struct session *s)
{
	for (uint64_t b = 0; b < s->nr_blocks; b++) {
		bool mapped = false;

		for (unsigned int i = 0; i < s->nr && !mapped; i++)
			mapped = b * IMG_BLOCK < s->r[i].image_off + s->r[i].len &&
				 (b + 1) * IMG_BLOCK > s->r[i].image_off;
		if (!mapped)
			block_done(s, b);
	}
}

/*
 * session_run() - serve @s until it ends; the caller frees it.
 * Context: the connection's thread, which becomes the fault thread.
 */
int session_run(struct session *s)
{
	struct fault_batch *fb = calloc(1, sizeof(*fb));
	struct proto_progress p;
	uint64_t last = now_ms();
	bool sent_done = false;
	int ret;

	if (!fb || !(fb->buf = malloc(IMG_BLOCK))) {
		free(fb);
		return -ENOMEM;
	}
	mark_unmapped_blocks(s);
	s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	atomic_store(&s->prefetch_block, UINT64_MAX);
	atomic_store(&s->push_from, UINT64_MAX);
	ret = push_start(s);
	session_link(s);
	while (!ret && !atomic_load(&s->stop) && session_poll(s, fb)) {
		bool done = atomic_load(&s->blocks_done) >= s->nr_blocks;

		if (sent_done || (!done && now_ms() - last < PROGRESS_MS))
			continue;
		session_progress(s, &p, done ? MSG_DONE : MSG_PROGRESS);
		proto_send(s->sock, &p, NULL, 0);
		last = now_ms();
		sent_done = done;
	}
	atomic_store(&s->stop, true);
	for (unsigned int k = 0; k < s->nr_pushers; k++)
		pthread_join(s->pushers[k], NULL);
	s->nr_pushers = 0;
	session_unlink(s);
	free(fb->buf);
	free(fb);
	return ret;
}

void session_free(struct session *s)
{
	if (!s)
		return;
	if (s->uffd >= 0)
		close(s->uffd);
	if (s->pidfd >= 0)
		close(s->pidfd);
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	if (s->sock >= 0)
		close(s->sock);
	image_close(s->img);
	free((void *)s->removed);
	free((void *)s->served);
	pthread_rwlock_destroy(&s->lock);
	free(s);
}

/* Ask every session to end (the daemon is stopping). */
void sessions_stop_all(void)
{
	uint64_t one = 1;

	pthread_mutex_lock(&sessions_lock);
	for (struct session *s = sessions; s; s = s->next) {
		atomic_store(&s->stop, true);
		(void)!write(s->wake_fd, &one, sizeof(one));
	}
	pthread_mutex_unlock(&sessions_lock);
}

/* The sessions of @uid's clients, or of everyone's for root (0). */
size_t sessions_status(struct proto_session *out, size_t max, uid_t uid)
{
	size_t n = 0;

	pthread_mutex_lock(&sessions_lock);
	for (struct session *s = sessions; s && n < max; s = s->next) {
		struct proto_progress p;

		if (uid && s->uid != uid)
			continue;
		session_progress(s, &p, MSG_PROGRESS);
		out[n] = (struct proto_session){
			.session = s->id,
			.pid = s->pid,
			.done = atomic_load(&s->blocks_done) >= s->nr_blocks,
			.pages_total = p.pages_total,
			.pages_urgent = p.pages_urgent,
			.pages_background = p.pages_background,
			.faults = p.faults,
			.p50_ns = p.p50_ns,
			.p99_ns = p.p99_ns,
			.age_ms = now_ms() - s->started_ms,
		};
		n++;
	}
	pthread_mutex_unlock(&sessions_lock);
	return n;
}
