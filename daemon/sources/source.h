/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * source.h - where a session's page content comes from.
 *
 * A source answers two questions about an offset space of its own: "what
 * is the content of [off, off + len)" and "what is known about the extent
 * around off" (data to fetch, known zeros, or nothing to serve). The
 * session engine maps a client's addresses to source offsets (its range
 * table) and never looks inside a source; a front end picks the source
 * and says how the client's memory maps onto it. Formats:
 *   - a faultd image: offsets are region offsets; extents come from the
 *     image's extent table; blocks checked by CRC32C (and a MAC);
 *   - a CRIU dump: one source per task; offsets are the task's dump-time
 *     virtual addresses; DATA where pagemap-PID.img has lazy pages, ZERO
 *     elsewhere; content from pages-N.img or a remote page server;
 *   - a Firecracker memory file: offsets are file offsets; ZERO over the
 *     file's holes (SEEK_HOLE/SEEK_DATA), DATA elsewhere.
 *
 * Thread safety: read() and extent() may be called concurrently from any
 * number of threads once the source is open; destroy() when no call runs.
 * A source never blocks indefinitely in read() (a network source has
 * time-outs) and never returns zeros in place of content it could not get:
 * it returns an error, and the engine poisons the pages.
 */
#ifndef FAULTD_SOURCE_H
#define FAULTD_SOURCE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum src_kind {
	SRC_DATA,	/* content to fetch with read() */
	SRC_ZERO,	/* known to be zeros: resolve without reading */
	SRC_NONE,	/* nothing to serve here (not part of the source) */
};

#define SRC_READ_URGENT (1u << 0) /* read(): a fault waits for it */

struct src_extent {
	uint64_t off;	/* start, a multiple of the source's page size */
	uint64_t len;	/* bytes, a multiple of the page size, > 0 */
	enum src_kind kind;
};

struct source;
struct source_type;

struct source_ops {
	const char *name;	/* "image", "criu", "criu-page-server", "file" */
	const struct source_type *type; /* its life cycle */
	/*
	 * Copy [off, off + len) into @buf (off and len multiples of the
	 * source's page size, inside one SRC_DATA extent or spanning
	 * several). Returns len, or -errno: -EBADMSG when content failed its
	 * integrity check, -EIO when it could not be read (the engine
	 * poisons the pages in both cases), -ERANGE when the range is not
	 * SRC_DATA. Never a short count. @flags: SRC_READ_URGENT when a
	 * faulting thread waits for it (a demand read): a source that
	 * queues reads (a network) puts it ahead of every read of the push
	 * or a replay queued before it; others may ignore it.
	 */
	ssize_t (*read)(struct source *s, uint64_t off, void *buf, size_t len,
			unsigned int flags);
	/*
	 * The extent that contains @off, in *e. Returns 0, or -ERANGE when
	 * @off is beyond every extent. Extents of one kind may be split
	 * arbitrarily (a caller must not assume they are maximal), but
	 * e->off <= off < e->off + e->len always holds.
	 */
	int (*extent)(struct source *s, uint64_t off, struct src_extent *e);
	/*
	 * [off, off + len) will be read soon: start reading it (a hint; a
	 * working-set replay gives it for the read after its next). NULL:
	 * the source has nothing to start.
	 */
	void (*willneed)(struct source *s, uint64_t off, uint64_t len);
	/*
	 * Where the content of [off, off + len) is, to install from without
	 * copying it first: a pointer into a read-only mapping of the
	 * source, valid until destroy(); or NULL (not offered for this
	 * range, or the content needs a check that read() does): read() it.
	 * The engine only hands the pointer to the kernel (UFFDIO_COPY),
	 * which fails with EFAULT, not a signal, should the file have
	 * shrunk underneath. NULL op: never.
	 */
	const void *(*view)(struct source *s, uint64_t off, size_t len);
	/* Free the source and close what it holds. */
	void (*destroy)(struct source *s);
};

struct source {
	const struct source_ops *ops;
	uint64_t size;		/* offsets are below this */
	size_t page_size;	/* 4096, or the huge page size */
	/*
	 * What a working set recorded against this source is tied to: the
	 * size and an identity of the content (an image's id, a digest of
	 * a CRIU dump's pagemaps, a memory file's device/inode/size/mtime).
	 */
	uint8_t id[32];
	/*
	 * A descriptor the source was opened from, which a restarted daemon
	 * can open it from again (kept with the session, keep.h); the source
	 * owns it. 0: none (the daemon's descriptors 0-2 are never a
	 * source's: faultd opens /dev/null there when they are closed).
	 */
	int keep_fd;
	/* Not what it was when the session began (a restart found it
	 * changed): every read fails, so its pages are poisoned. */
	bool stale;
	/* Reads wait for another host (NBD, a CRIU page server): a fault's
	 * handler sleeps meanwhile, using no CPU, and more handlers keep
	 * more reads in flight (the engine's default count, session.c). */
	bool remote;
};

/*
 * A source type: what a restarted daemon needs to open a source of its
 * kind again. The table of types (sources.c) is the only list of them:
 * adding a source is one file here, one line there, one in the build.
 * A kept session (engine/record.c) holds, for each of its sources, the
 * type's id, what save() wrote and the source's keep_fd; adoption
 * (server/adopt.c) calls reopen() with them, for every type the same way.
 */
struct source_type {
	const char *name;
	uint16_t id;		/* kept: never reused for another type */
	/*
	 * What identifies @s beside its keep_fd: at most @max bytes into
	 * @blob. Returns the length, or -E2BIG.
	 */
	ssize_t (*save)(struct source *s, void *blob, size_t max);
	/*
	 * The source again, from what save() wrote and the kept descriptor
	 * @fd (-1: none; taken over, closed on failure). Returns 0 or -errno
	 * with *why (@why_len bytes); the caller then serves a stale source
	 * of the same size in its place, whose pages are poisoned, never
	 * served wrong.
	 */
	int (*reopen)(const void *blob, size_t len, int fd, struct source **sp,
		      char *why, size_t why_len);
};

/* sources.c */
const struct source_type *source_type_by_id(uint16_t id);
int source_stale(uint64_t size, size_t page_size, struct source **sp);

static inline ssize_t source_read_flags(struct source *s, uint64_t off,
					void *buf, size_t len,
					unsigned int flags)
{
	return s->stale ? -ESTALE : s->ops->read(s, off, buf, len, flags);
}

/* A read nobody waits for yet (the push, a replay, a check). */
static inline ssize_t source_read(struct source *s, uint64_t off, void *buf,
				  size_t len)
{
	return source_read_flags(s, off, buf, len, 0);
}

static inline int source_extent(struct source *s, uint64_t off,
				struct src_extent *e)
{
	return s->ops->extent(s, off, e);
}

static inline void source_willneed(struct source *s, uint64_t off,
				   uint64_t len)
{
	if (s->ops->willneed)
		s->ops->willneed(s, off, len);
}

static inline const void *source_view(struct source *s, uint64_t off,
				      size_t len)
{
	return s->stale || !s->ops->view ? NULL : s->ops->view(s, off, len);
}

static inline void source_destroy(struct source *s)
{
	if (s)
		s->ops->destroy(s);
}

#endif /* FAULTD_SOURCE_H */
