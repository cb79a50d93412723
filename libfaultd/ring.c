// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * ring.c - file I/O through io_uring (liburing), a ring per thread: what
 * the file pager (file.c), images (image.c) and the daemon's sources read
 * and write with.
 *
 * Each thread that does I/O - handler threads, prefetch workers, the
 * evictor - has a ring of its own, made on first use and kept until it
 * exits (or, for the thread that releases a file pager or closes an
 * image, until then: the application's threads get theirs from
 * faultd_region_sync() and faultd_restore()); a child made by fork()
 * makes its own (pthread_atfork() counts the forks, so that finding a
 * thread's ring takes no system call). A transfer is split into 64 KiB
 * chunks, up to RING_ENTRIES of them in flight at once.
 */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>

#include "internal.h"

#define RING_ENTRIES 64
#define CHUNK (64ul << 10)

static pthread_once_t ring_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t ring_key;
/* Bumped in the child of each fork(): rings made before it are the
 * parent's (their memory is shared with it). Read without a system call:
 * the lookup of a ring is on every fill. */
static atomic_uint ring_generation;

/* A thread's ring, and the generation of the process that made it. */
struct thread_ring {
	struct io_uring ring;
	unsigned int generation;
};

/*
 * In a child, a ring made before the fork is a copy: its mappings and its
 * descriptor are the child's own, and unmapping and closing them leaves
 * the parent's ring be - only submitting on it would not.
 */
static void ring_free(void *p)
{
	struct thread_ring *t = p;

	io_uring_queue_exit(&t->ring);
	free(t);
}

static void ring_forked(void)
{
	atomic_fetch_add_explicit(&ring_generation, 1, memory_order_relaxed);
}

static void ring_key_make(void)
{
	pthread_key_create(&ring_key, ring_free);
	pthread_atfork(NULL, NULL, ring_forked);
}

/*
 * This thread's ring, made on first use; freed when the thread exits.
 * Returns NULL and *err (e.g. -EPERM where io_uring is disabled).
 */
static struct io_uring *thread_ring(int *err)
{
	struct thread_ring *t;
	unsigned int gen;

	pthread_once(&ring_key_once, ring_key_make);
	gen = atomic_load_explicit(&ring_generation, memory_order_relaxed);
	t = pthread_getspecific(ring_key);
	if (t && t->generation == gen)
		return &t->ring;
	if (t) /* made before a fork: the parent's, shared with it */
		ring_free(t);
	t = fd_malloc(sizeof(*t));
	*err = t ? io_uring_queue_init(RING_ENTRIES, &t->ring, 0) : -ENOMEM;
	if (*err < 0) {
		free(t);
		pthread_setspecific(ring_key, NULL);
		return NULL;
	}
	t->generation = gen;
	pthread_setspecific(ring_key, t);
	return &t->ring;
}

/*
 * ring_thread_close() - the calling thread's ring, if it has one, is
 * closed; its next call makes a new one. For the threads that release
 * what uses rings (a file pager, an image): the application's threads get
 * one from faultd_region_sync() or faultd_restore(), and keep none after.
 */
void ring_thread_close(void)
{
	struct thread_ring *t;

	pthread_once(&ring_key_once, ring_key_make);
	t = pthread_getspecific(ring_key);
	if (!t)
		return;
	pthread_setspecific(ring_key, NULL);
	ring_free(t);
}

/* Can this process use io_uring? A ring is made and closed at once. */
int ring_probe(void)
{
	struct io_uring ring;
	int ret = io_uring_queue_init(1, &ring, 0);

	if (ret < 0)
		return ret;
	io_uring_queue_exit(&ring);
	return 0;
}

/* A ring whose state we no longer know: the next call makes a new one. */
static void ring_drop(struct io_uring *ring)
{
	pthread_setspecific(ring_key, NULL);
	ring_free(container_of(ring, struct thread_ring, ring));
}

/* Wait for a completion; a signal does not end the wait. */
static int ring_wait(struct io_uring *ring, struct io_uring_cqe **cqe)
{
	int ret;

	do
		ret = io_uring_wait_cqe(ring, cqe);
	while (ret == -EINTR);
	return ret;
}

/* One ring's worth (len <= RING_ENTRIES x CHUNK) of ring_rw(). */
static ssize_t ring_rw_once(int fd, bool write, uint64_t off, void *buf,
			    size_t len)
{
	unsigned int n = 0;
	size_t done = len;
	int err = 0, ret;
	struct io_uring *ring = thread_ring(&err);

	if (!ring)
		return err;
	for (size_t at = 0; at < len; at += CHUNK, n++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
		size_t l = len - at < CHUNK ? len - at : CHUNK;

		if (!sqe)
			return -EBUSY; /* cannot happen: see ring_rw() */
		if (write)
			io_uring_prep_write(sqe, fd, (char *)buf + at,
					    (unsigned int)l, off + at);
		else
			io_uring_prep_read(sqe, fd, (char *)buf + at,
					   (unsigned int)l, off + at);
		sqe->user_data = at;
	}
	ret = io_uring_submit(ring);
	if (ret != (int)n) { /* nothing in flight we could not wait for */
		ring_drop(ring);
		return ret < 0 ? ret : -EIO;
	}
	for (unsigned int i = 0; i < n; i++) {
		struct io_uring_cqe *cqe;
		size_t at, want;

		ret = ring_wait(ring, &cqe);
		if (ret < 0) {
			ring_drop(ring);
			return ret;
		}
		at = cqe->user_data;
		want = len - at < CHUNK ? len - at : CHUNK;
		if (cqe->res < 0 && !err)
			err = cqe->res;
		else if ((size_t)cqe->res < want && at + (size_t)cqe->res < done)
			done = at + (size_t)cqe->res;
		io_uring_cqe_seen(ring, cqe);
	}
	return err ? err : (ssize_t)done;
}

/*
 * ring_rw() - read or write [off, off + len) of @fd as 64 KiB chunks, up to
 * RING_ENTRIES of them in flight at once on this thread's ring.
 * Returns the bytes transferred from the start without a gap (a short
 * chunk ends it), or -errno.
 */
ssize_t ring_rw(int fd, bool write, uint64_t off, void *buf, size_t len)
{
	size_t done = 0, max = RING_ENTRIES * CHUNK;
	int err;

	if (!write && inject_fail(INJ_READ, &err))
		return err;
	if (!write && inject_fail(INJ_SHORT_READ, NULL))
		len = len / 2 & ~(size_t)4095; /* as if the file ended there */
	while (done < len) {
		size_t l = len - done < max ? len - done : max;
		ssize_t n = ring_rw_once(fd, write, off + done,
					 (char *)buf + done, l);

		if (n < 0)
			return done ? (ssize_t)done : n;
		done += (size_t)n;
		if ((size_t)n < l)
			break;
	}
	return (ssize_t)done;
}
