// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * src_file.c - the file source (src_file.h). At open, the file's data
 * extents are found with SEEK_DATA / SEEK_HOLE, widened to whole pages and
 * kept in a sorted table that never changes afterwards: extent() is a
 * binary search and read() an io_uring read (ring_rw(), the library's
 * per-thread rings), both without a lock, from any number of threads.
 * The file is also mapped read-only, for view(): the engine installs
 * from the mapping without copying the data into a buffer first.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "extents.h"
#include "file.h"
#include "lib.h"

struct src_file {
	struct source s;
	int fd;
	const char *map;	/* [0, size) mapped read-only; NULL: none */
	struct data_exts x;	/* where the file holds data */
};

/* The data extents of [0, size): each widened to whole pages. */
static int ext_scan(struct src_file *f, char *why, size_t why_len)
{
	uint64_t ps = f->s.page_size, size = f->s.size, at = 0;
	off_t d, h = -1;
	int ret;

	while (at < size) {
		d = lseek(f->fd, (off_t)at, SEEK_DATA);
		if (d < 0 && errno == ENXIO)
			return 0; /* a hole to the end */
		if (d >= 0)
			h = lseek(f->fd, d, SEEK_HOLE);
		if (d < 0 || h < 0)
			return why_set(why, why_len, -errno, "finding the "
				      "holes of the file: %s", strerror(errno));
		if ((uint64_t)d >= size)
			return 0;
		at = ((uint64_t)h + ps - 1) & ~(ps - 1);
		if (at > size)
			at = size;
		ret = exts_add(&f->x, (uint64_t)d & ~(ps - 1), at);
		if (ret)
			return why_set(why, why_len, ret, "no memory for the "
				      "extent table");
	}
	return 0;
}

static int file_extent(struct source *s, uint64_t off, struct src_extent *e)
{
	const struct src_file *f = (const struct src_file *)s;

	return exts_extent(&f->x, s->size, off, e);
}

/* Is [off, off + len) whole pages of one DATA extent? 0 or -errno. */
static int data_range(const struct src_file *f, uint64_t off, size_t len)
{
	return exts_data_range(&f->x, f->s.size, f->s.page_size, off, len);
}

static ssize_t file_read(struct source *s, uint64_t off, void *buf,
			 size_t len, unsigned int flags)
{
	const struct src_file *f = container_of(s, struct src_file, s);
	int ret = data_range(f, off, len);
	ssize_t n;

	if (ret)
		return ret;
	n = ring_rw(f->fd, false, off, buf, len);
	return n == (ssize_t)len ? n : -EIO;
}

static const void *file_view(struct source *s, uint64_t off, size_t len)
{
	const struct src_file *f = container_of(s, struct src_file, s);

	return f->map && !data_range(f, off, len) ? f->map + off : NULL;
}

static void file_destroy(struct source *s)
{
	struct src_file *f = container_of(s, struct src_file, s);

	if (f->map)
		munmap((void *)f->map, f->s.size);
	close(f->fd);
	exts_free(&f->x);
	free(f);
}

struct file_blob {
	uint64_t size, page_size;
};

static ssize_t file_save(struct source *s, void *blob, size_t max)
{
	struct file_blob b = { s->size, s->page_size };

	if (max < sizeof(b))
		return -E2BIG;
	memcpy(blob, &b, sizeof(b));
	return sizeof(b);
}

/* The file of a kept session, by its kept descriptor (the path named now
 * is not read for it). */
static int file_reopen(const void *blob, size_t len, int fd,
		       struct source **sp, char *why, size_t why_len)
{
	struct file_blob b;

	if (len != sizeof(b) || fd < 0) {
		if (fd >= 0)
			close(fd);
		return why_set(why, why_len, -EBADMSG, "its file was not kept");
	}
	memcpy(&b, blob, sizeof(b));
	return src_file_open_fd(fd, b.size, (size_t)b.page_size, sp, why,
				why_len);
}

const struct source_type src_file_type = {
	.name = "file", .id = 2, .save = file_save, .reopen = file_reopen,
};

static const struct source_ops file_ops = {
	.name = "file",
	.type = &src_file_type,
	.read = file_read,
	.extent = file_extent,
	.view = file_view,
	.destroy = file_destroy,
};

/* What a working set is tied to: device, inode, size, mtime. */
void src_file_id(const struct stat *st, uint8_t out[32])
{
	uint64_t id[4] = {
		(uint64_t)st->st_dev,
		(uint64_t)st->st_ino,
		(uint64_t)st->st_size,
		(uint64_t)st->st_mtim.tv_sec * 1000000000ull +
			(uint64_t)st->st_mtim.tv_nsec,
	};

	_Static_assert(sizeof(id) == sizeof(((struct source *)0)->id),
		       "the id is 32 bytes");
	memcpy(out, id, sizeof(id));
}

/* The size of the source, from what the caller asked and the file has. */
static int size_check(const struct stat *st, uint64_t *size, size_t ps,
		      char *why, size_t why_len)
{
	if (!S_ISREG(st->st_mode))
		return why_set(why, why_len, -EINVAL, "not a regular file");
	if (!*size)
		*size = (uint64_t)st->st_size;
	if (!*size || *size % ps)
		return why_set(why, why_len, -EINVAL, "%llu bytes are no whole "
			      "number of %zu-byte pages",
			      (unsigned long long)*size, ps);
	if ((uint64_t)st->st_size < *size)
		return why_set(why, why_len, -ERANGE, "the file has %llu bytes"
			      ", fewer than the %llu it must hold",
			      (unsigned long long)st->st_size,
			      (unsigned long long)*size);
	return 0;
}

/*
 * src_file_open_fd() - as src_file_open(), of the file open on @fd, which
 * the source takes over (closed on failure too).
 */
int src_file_open_fd(int fd, uint64_t size, size_t page_size,
		     struct source **out, char *why, size_t why_len)
{
	struct src_file *f;
	struct stat st;
	int ret;

	if (page_size != 4096 && page_size != (2ul << 20)) {
		close(fd);
		return why_set(why, why_len, -EINVAL, "page size %zu: only "
			      "4096 and 2097152 (2 MiB)", page_size);
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		close(fd);
		return why_set(why, why_len, -ENOMEM, "out of memory");
	}
	f->fd = fd;
	ret = fstat(f->fd, &st) ? why_set(why, why_len, -errno, "%s",
					 strerror(errno))
				: size_check(&st, &size, page_size, why,
					     why_len);
	if (ret)
		goto close_fd;
	f->s = (struct source){ .ops = &file_ops, .size = size,
				.page_size = page_size, .keep_fd = f->fd };
	src_file_id(&st, f->s.id);
	ret = ext_scan(f, why, why_len);
	if (ret)
		goto close_fd;
	/* Without the mapping (no address space left), reads serve. */
	f->map = mmap(NULL, size, PROT_READ, MAP_SHARED, f->fd, 0);
	if (f->map == MAP_FAILED)
		f->map = NULL;
	*out = &f->s;
	return 0;

close_fd:
	close(f->fd);
	exts_free(&f->x);
	free(f);
	return ret;
}

int src_file_open(const char *path, uint64_t size, size_t page_size,
		  struct source **out, char *why, size_t why_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return why_set(why, why_len, -errno, "%s", strerror(errno));
	return src_file_open_fd(fd, size, page_size, out, why, why_len);
}
