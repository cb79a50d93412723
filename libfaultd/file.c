// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * file.c - the file pager: a region served from a file at an offset.
 *
 * Reads and write-backs go through io_uring (liburing). Each thread that
 * calls the pager - handler threads, prefetch workers, the evictor - has
 * a ring of its own, made on first use and kept until it exits (or, for
 * the thread that releases the pager or closes an image, until then: the
 * application's threads get theirs from faultd_region_sync() and
 * faultd_restore()); a child made by fork()
 * makes its own (pthread_atfork() counts the forks, so that finding a
 * thread's ring takes no system call); a fill is split into chunks that
 * are all in flight at once, so a fault-around window or a read-ahead
 * chunk is several device reads in parallel, and several threads read at
 * the same time. With FAULTD_FILE_DIRECT the file is read and written
 * with O_DIRECT; staging buffers and the page-cache alias are page-aligned.
 *
 * The file's size is taken when the pager is made: the part of a region
 * beyond it reads as zeros (the tail of the last page, or whole pages). A
 * read that comes back short before that size means the file was
 * truncated underneath: that is an error (the page is poisoned), never
 * zeros.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define RING_ENTRIES 64
#define CHUNK (64ul << 10)

struct file_pager {
	int fd;
	uint64_t offset;	/* file offset of region offset 0 */
	_Atomic uint64_t size;	/* the file's size, at creation or grown */
	unsigned int flags;
};

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
static int ring_probe(void)
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

/*
 * file_fill() - [off, off + len) of the region from the file. Bytes past
 * the file's size are left to the library to zero (a short return).
 */
static ssize_t file_fill(void *arg, struct faultd_region *r, uint64_t off,
			 void *buf, size_t len)
{
	struct file_pager *fp = arg;
	uint64_t size = atomic_load(&fp->size), at = fp->offset + off;
	size_t want = len;
	ssize_t n;

	(void)r;
	if (at >= size)
		return 0;
	if (size - at < want)
		want = size - at;
	/* O_DIRECT reads whole blocks; the short read at EOF is fine. */
	n = ring_rw(fp->fd, false, at, buf,
		    (fp->flags & FAULTD_FILE_DIRECT) ? len : want);
	if (n < 0)
		return n;
	if ((size_t)n < want)
		return -EIO; /* truncated underneath: never serve zeros */
	return (ssize_t)want;
}

static int file_writeback(void *arg, struct faultd_region *r, uint64_t off,
			  const void *buf, size_t len)
{
	struct file_pager *fp = arg;
	uint64_t end = fp->offset + off + len, size;
	ssize_t n;

	(void)r;
	n = ring_rw(fp->fd, true, fp->offset + off, (void *)buf, len);
	if (n < 0)
		return (int)n;
	if ((size_t)n < len)
		return -EIO;
	size = atomic_load(&fp->size);
	while (size < end && !atomic_compare_exchange_weak(&fp->size, &size,
							    end))
		;
	return 0;
}

/* The thread that releases the pager - the one destroying its region -
 * keeps no ring (see ring_thread_close()). */
static void file_release(void *arg)
{
	struct file_pager *fp = arg;

	close(fp->fd);
	free(fp);
	ring_thread_close();
}

/* A descriptor of our own for the file, with O_DIRECT if asked. */
static int file_reopen(int fd, unsigned int flags)
{
	char path[64];
	int mode = fcntl(fd, F_GETFL);

	if (mode < 0)
		return -errno;
	if (!(flags & FAULTD_FILE_DIRECT)) {
		fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		return fd < 0 ? -errno : fd;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	fd = open(path, (mode & O_ACCMODE) | O_DIRECT | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

FAULTD_EXPORT int faultd_file_pager(const struct faultd_file_opts *opts,
				    struct faultd_pager *pager)
{
	struct faultd_file_opts o;
	struct file_pager *fp;
	struct stat st;
	int ret;

	if (!opts || !pager)
		return -EINVAL;
	ret = opts_copy(&o, sizeof(o), opts,
			offsetof(struct faultd_file_opts, offset) +
				sizeof(o.offset));
	if (ret < 0)
		return ret;
	if (o.fd < 0 || (o.flags & ~FAULTD_FILE_DIRECT) ||
	    (o.offset & 4095))
		return -EINVAL;
	if (fstat(o.fd, &st) < 0)
		return -errno;
	if (S_ISBLK(st.st_mode) &&
	    ioctl(o.fd, BLKGETSIZE64, &st.st_size) < 0) /* fstat says 0 */
		return -errno;
	if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
		return -EINVAL;
	ret = ring_probe(); /* io_uring disabled, or no memory */
	if (ret < 0)
		return ret;
	fp = fd_calloc(1, sizeof(*fp));
	if (!fp)
		return -ENOMEM;
	fp->fd = file_reopen(o.fd, o.flags);
	if (fp->fd < 0) {
		ret = fp->fd;
		free(fp);
		return ret;
	}
	fp->offset = o.offset;
	fp->flags = o.flags;
	atomic_init(&fp->size, (uint64_t)st.st_size);
	*pager = (struct faultd_pager){
		.size = sizeof(*pager),
		.flags = FAULTD_PAGER_CONCURRENT,
		.fill = file_fill,
		.writeback = file_writeback,
		.release = file_release,
		.arg = fp,
	};
	return 0;
}

/* Is @p a file pager (for the defaults of its regions)? */
bool pager_is_file(const struct faultd_pager *p)
{
	return p->fill == file_fill;
}
