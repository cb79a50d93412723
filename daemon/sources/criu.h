/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * criu.h - CRIU dumps as sources (source.h): the image reader
 * (criu_img.c) and the page-server client (criu_ps.c).
 *
 * A dump directory is opened once, checked whole, and then read only:
 * inventory.img (images version 2), pstree.img (the tasks), core-PID.img
 * (alive or zombie), and for every live task mm-PID.img (its VMAs) and
 * pagemap-PID.img (its pages; the data of the PE_PRESENT entries lies
 * back to back in pages-N.img). Whatever faultd cannot serve - a
 * PE_PARENT entry (an incremental dump), entries out of order, overlapping
 * or outside the task's VMAs, a pages file shorter than its pagemap - is
 * refused at open, with a negative errno and a sentence in @why, before
 * anything is served.
 *
 * A task's source (criu_task_source()) has the task's dump-time virtual
 * addresses as offsets: SRC_DATA over the pages of its PE_LAZY entries
 * (split at VMA boundaries: an extent never crosses a VMA), SRC_ZERO over
 * the rest of the VMAs CRIU registers for lazy restore (private
 * anonymous, not locked, not hugetlb, not vDSO/vvar/vsyscall), SRC_NONE
 * elsewhere. Data comes from pages-N.img (criu_task_source()) or from a
 * CRIU page server over TCP (criu_page_server_source()).
 *
 * Thread safety: after criu_dump_open() returns, every function here may
 * be called from any thread at the same time, except criu_dump_close()
 * and criu_ps_close(), which need every source made from that dump or
 * connection destroyed first.
 */
#ifndef FAULTD_CRIU_H
#define FAULTD_CRIU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "retry.h"
#include "source.h"

/* Pagemap entry flags (CRIU's include/pagemap.h). */
#define CRIU_PE_PARENT	(1u << 0)	/* the pages are in the parent dump */
#define CRIU_PE_LAZY	(1u << 1)	/* may be restored lazily */
#define CRIU_PE_PRESENT (1u << 2)	/* the data is in pages-N.img */

#define CRIU_PAGE_SIZE 4096u

/* Image file framing (CRIU's include/magic.h). */
#define CRIU_IMG_COMMON_MAGIC 0x54564319u
#define CRIU_INVENTORY_MAGIC 0x58313116u
#define CRIU_PSTREE_MAGIC 0x50273030u
#define CRIU_CORE_MAGIC 0x55053847u
#define CRIU_MM_MAGIC 0x57492820u
#define CRIU_PAGEMAP_MAGIC 0x56084025u
#define CRIU_IMG_VERSION 2u	/* CRTOOLS_IMAGES_V1_1 */
#define CRIU_MSG_MAX (64u << 20) /* a bound on one message's size */

struct criu_dump;

/* One task of pstree.img. */
struct criu_task {
	pid_t pid;		/* the dump's pid: the key of its images */
	pid_t ppid;		/* 0 for the root */
	unsigned int nr_threads;
	bool zombie;		/* no memory; criu restore sends -pid */
};

/* A range of a task's dump-time addresses. */
struct criu_range {
	uint64_t start, len;
};

/*
 * criu_dump_open() - read and check the dump in @dir. Returns 0 and the
 * dump in *dp, or -errno with the reason in @why (NUL-terminated, cut to
 * @whylen): -ENOENT a file is missing, -EBADMSG an image is truncated or
 * corrupt, -EOPNOTSUPP the dump uses what faultd does not serve (PE_PARENT
 * entries, another images version), -ENOMEM, or what open/read returned.
 */
int criu_dump_open(const char *dir, struct criu_dump **dp, char *why,
		   size_t whylen);
void criu_dump_close(struct criu_dump *d);

/* The tasks in pstree.img order (parents before children). */
size_t criu_dump_tasks(const struct criu_dump *d,
		       const struct criu_task **tasks);

/*
 * criu_task_lazy() - the task's SRC_DATA ranges, sorted, each inside one
 * VMA: what the engine pushes after the restore. Returns the count and
 * the array in *r (owned by the dump), or -ESRCH for a pid that is not a
 * live task of the dump.
 */
ssize_t criu_task_lazy(const struct criu_dump *d, pid_t pid,
		       const struct criu_range **r);

/*
 * criu_task_source() - the task's source, with data from pages-N.img
 * (read with io_uring; any number of concurrent readers). Returns 0, or
 * -ESRCH (not a live task of the dump), -ENODATA (its lazy pages are not
 * in the dump: it was made by `criu dump --lazy-pages`; use a page
 * server), -ENOMEM. The source holds what it needs from @d but not @d
 * itself; destroy it before criu_dump_close().
 */
int criu_task_source(struct criu_dump *d, pid_t pid, struct source **sp);
extern const struct source_type src_criu_type;

/* ---- criu_sum.c: per-page CRC32C of pages-N.img (CRIU has none) ---- */

#define CRIU_SUM_BLOCK CRIU_PAGE_SIZE

struct criu_sums;

int criu_sums_write(const char *dir, const char *file, char *why,
		    size_t whylen);
int criu_sums_load(const char *file, struct criu_sums **sp, char *why,
		   size_t whylen);
void criu_sums_free(struct criu_sums *s);
const char *criu_sums_file(const struct criu_sums *s);
const uint32_t *criu_sums_of(const struct criu_sums *s, uint32_t id,
			     uint64_t size, uint64_t *nr);

/*
 * criu_dump_sums_match() - does @sums describe every pages file the live
 * tasks of @d read, at its present size? 0, or -EBADMSG with @why.
 */
int criu_dump_sums_match(const struct criu_dump *d,
			 const struct criu_sums *sums, char *why,
			 size_t whylen);

/*
 * criu_task_source_checked() - criu_task_source(), with every page read
 * checked against @sums (which must outlive the source; NULL: none): a
 * read that holds a page whose CRC32C differs returns -EBADMSG, so the
 * engine poisons that page and serves none of it.
 */
int criu_task_source_checked(struct criu_dump *d, pid_t pid,
			     const struct criu_sums *sums, struct source **sp);

/* ---- criu_ps.c: a CRIU page server ---- */

struct criu_ps;

struct criu_ps_opts {
	size_t size;		/* sizeof(struct criu_ps_opts) */
	int timeout_ms;		/* every socket operation; 0: 10 s */
	/* What a lost connection and a failed read get (retry.h): the
	 * connection made again with backoff while the reads wait, a read
	 * asked again; 0 fields: retry.h's defaults (a 30 s deadline). */
	struct retry_policy retry;
	/* Losses, reconnections, each read asked again, reads given up;
	 * NULL: silent. */
	void (*log)(void *arg, const char *line);
	void *log_arg;
};

/*
 * criu_ps_connect() - connect to the page server of `criu dump
 * --lazy-pages --port P` or `criu page-server --lazy-pages` at @addr
 * (IPv4 or IPv6 literal) and @port. Such a server accepts one connection
 * and serves every task of its dump on it. Returns 0, or -errno
 * (-ETIMEDOUT, -ECONNREFUSED, -EINVAL for a bad address, ...): the first
 * connection is tried once.
 */
int criu_ps_connect(const char *addr, uint16_t port,
		    const struct criu_ps_opts *opts, struct criu_ps **psp);

/*
 * criu_ps_close() - end the session (PS_IOV_CLOSE, and wait for the
 * server's int32 0) and free @ps. Returns 0, the server's non-zero status
 * as -EPROTO, or -EIO when there is no connection to close (it was lost
 * and not made again) or it failed during the close. @ps is freed in
 * every case.
 */
int criu_ps_close(struct criu_ps *ps);

/* What the connection went through (retry.h's counters, and more). */
struct criu_ps_stats {
	struct retry_stats retry;
	uint64_t connects;	/* connections made, the first one too */
	uint64_t failed_connects; /* attempts to make one again that failed */
	uint64_t lost;		/* connections lost under a read */
};

void criu_ps_stats(struct criu_ps *ps, struct criu_ps_stats *out);

/*
 * criu_page_server_source() - the task's source, with the data of its
 * lazy pages asked from @ps (PS_IOV_GET, pipelined: concurrent reads share
 * the connection and are answered in order). A read never returns zeros
 * for data it did not get. A time-out, a closed or misbehaving server
 * lose the connection: it is made again with backoff while the reads wait
 * (GETs can be asked again), and what was not answered is asked again;
 * a read that lost its connection more than retry.read_retries times, or
 * that waits for a server unreachable for retry.deadline_ms, gives -EIO
 * (the engine poisons its pages), and so does every read while the server
 * stays unreachable past the deadline. The reader that finds the
 * connection lost makes it again from its own network namespace: read
 * from the one it was connected from. Returns 0, -ESRCH, -ENOMEM.
 * Destroy the source before criu_ps_close().
 */
int criu_page_server_source(struct criu_dump *d, pid_t pid,
			    struct criu_ps *ps, struct source **sp);
extern const struct source_type src_criu_ps_type;

#endif /* FAULTD_CRIU_H */
