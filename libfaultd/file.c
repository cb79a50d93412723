// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * file.c - the file pager: a region served from a file at an offset.
 *
 * Reads and write-backs go through the calling thread's io_uring ring
 * (ring.c), so a fault-around window or a read-ahead chunk is several
 * device reads in parallel, and several threads read at the same time.
 * With FAULTD_FILE_DIRECT the file is read and written with O_DIRECT;
 * staging buffers and the page-cache alias are page-aligned.
 *
 * The file's size is taken when the pager is made: the part of a region
 * beyond it reads as zeros (the tail of the last page, or whole pages). A
 * read that comes back short before that size means the file was
 * truncated underneath: that is an error (the page is poisoned), never
 * zeros.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

struct file_pager {
	int fd;
	uint64_t offset;	/* file offset of region offset 0 */
	_Atomic uint64_t size;	/* the file's size, at creation or grown */
	unsigned int flags;
};

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
