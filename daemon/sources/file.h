/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * src_file.h - a source (source.h) over a plain file, such as a
 * Firecracker memory file: offsets are file offsets; SRC_ZERO over the
 * file's holes, SRC_DATA elsewhere.
 */
#ifndef FAULTD_SRC_FILE_H
#define FAULTD_SRC_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "extents.h"
#include "source.h"

/* The data extent table's bound (extents.h): past it, holes are read. */
#define SRC_FILE_MAX_EXTENTS DATA_EXTS_MAX

/*
 * src_file_open() - a source of [0, @size) of the file at @path, with
 * pages of @page_size bytes (4096 or 2 MiB: what the memory it fills
 * uses). @size 0 means the whole file. The file's holes are found once,
 * here (SEEK_DATA / SEEK_HOLE): a page that holds any data is DATA.
 * Returns 0 and the source in *out, or -errno with a message in @why
 * (192 bytes are enough): -ERANGE the file is shorter than @size,
 * -EINVAL a page size other than those, a size that is no whole number
 * of pages or 0, a path that is not a regular file; what open(), fstat()
 * and lseek() said; -ENOMEM.
 * A read() that finds less than was there at open (the file was
 * truncated underneath) fails with -EIO; every read error is -EIO.
 * Context: any thread. The source's read() and extent() as source.h.
 */
extern const struct source_type src_file_type;

int src_file_open(const char *path, uint64_t size, size_t page_size,
		  struct source **out, char *why, size_t why_len);
int src_file_open_fd(int fd, uint64_t size, size_t page_size,
		     struct source **out, char *why, size_t why_len);

struct stat;
/*
 * src_file_id() - the identity (source.h) a source of the file @st
 * describes has: its device, inode, size and modification time, four
 * u64 in this order. A copy of the file is another file.
 */
void src_file_id(const struct stat *st, uint8_t out[32]);

#endif /* FAULTD_SRC_FILE_H */
