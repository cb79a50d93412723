/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * wset.h - working sets: which pages of a source a restore touched, in
 * the order of first touch, recorded by one restore and replayed by the
 * next (faultd-working-set(5) is the reference of the file).
 *
 * Shared by the library's in-process restores (restore.c) and the daemon's
 * session engine, which include nothing else of each other for it.
 *
 *   a file      a header (magic, version, counts, a CRC32C of the whole
 *               file), a table of the spaces it describes (the id of the
 *               space in its session - a CRIU task's pid, 0 for a region -
 *               and the 32-byte id, size and page size of its source),
 *               then its entries: (space index, source page), in the order
 *               the pages were first touched
 *   a recorder  the entries of a restore as they come (first touches
 *               only: the caller keeps which pages it has seen)
 *
 * Nothing here reads a source or installs a page: a caller matches a set
 * to its own sources (wset_space_match()) and reads and installs itself.
 * Fields are in the host's byte order, as images are.
 */
#ifndef FAULTD_WSET_H
#define FAULTD_WSET_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define WSET_MAGIC 0x54455357u	/* "WSET" */
#define WSET_VERSION 1
#define WSET_MAX_SPACES 65536
#define WSET_MAX_BYTES (1ull << 32) /* a file larger is not a set */

struct wset_header {
	uint32_t magic;		/* WSET_MAGIC */
	uint16_t version;	/* WSET_VERSION */
	uint16_t header_size;	/* sizeof(struct wset_header) */
	uint32_t flags;		/* 0 */
	uint32_t nr_spaces;	/* 1..WSET_MAX_SPACES */
	uint64_t nr_entries;
	uint32_t crc;		/* CRC32C of the file, this field 0 */
	uint32_t reserved;	/* 0 */
};

/* What a set's pages belong to: a space and the source behind it. */
struct wset_space {
	uint64_t space_id;	/* its session's name for the space */
	uint8_t src_id[32];	/* the source's identity (source.h) */
	uint64_t src_size;	/* bytes */
	uint32_t page_size;
	uint32_t reserved;	/* 0 */
};

struct wset_entry {
	uint32_t space;		/* index in the space table */
	uint32_t reserved;	/* 0 */
	uint64_t page;		/* source offset / page size */
};

/* A set in memory: its spaces and entries, first touch first. */
struct wset {
	struct wset_space *spaces;
	uint32_t nr_spaces;
	struct wset_entry *e;
	uint64_t nr;
};

/* Source [off, off + len): a run of a replay, or what one read covers. */
struct wset_span {
	uint64_t off, len;
};

/* A replay's reads: one's most, and how close two runs must be to be
 * read at once (reading a gap costs less than another read). */
#define WSET_READ_MAX (4ul << 20)
#define WSET_READ_GAP (256ul << 10)

/* The replay of one set space (wset_plan()). */
struct wset_plan {
	struct wset_span *runs;	/* consecutive pages, in source order */
	size_t nr_runs;
	size_t *reads;		/* read k: runs [reads[k], reads[k + 1]) */
	size_t nr_reads;
};

/* A recorder: entries as they come, from any thread. */
struct wset_rec {
	pthread_mutex_t lock;	/* spaces, e, nr: held briefly, no I/O */
	struct wset set;
	uint64_t cap;
	uint64_t written;	/* entries in the file: the caller's */
	int err;		/* an entry was lost (out of memory) */
};

/*
 * What a reader of a set does with each of its spaces, before it reads
 * an entry: keeps the space's entries, skips them (a space the caller
 * does not serve: read, checked and left out) or refuses the whole set.
 * A caller that keeps a space has checked it against its own source
 * (size, page size, identity): the entries it keeps are then bounded by
 * that source's pages, never by what the file claims.
 */
enum wset_use { WSET_KEEP, WSET_SKIP, WSET_REFUSE };

struct wset_filter {
	enum wset_use (*use)(const struct wset_space *s, void *arg);
	void *arg;
};

int wset_read_fd(int fd, const struct wset_filter *f, struct wset *ws,
		 const char **why);
int wset_load(const char *path, const struct wset_filter *f, struct wset *ws,
	      const char **why);
int wset_write_fd(int fd, const struct wset *ws);
int wset_save(const char *path, const struct wset *ws);
void wset_free(struct wset *ws);
bool wset_space_match(const struct wset_space *a, const struct wset_space *b);
int wset_merge(const struct wset *in, size_t n, unsigned int min_count,
	       struct wset *out, const char **why);
uint64_t wset_ranges(const struct wset *ws);
int wset_dedupe(struct wset *ws);
int wset_plan(const struct wset *ws, uint32_t k, struct wset_plan *p);
struct wset_span wset_plan_read(const struct wset_plan *p, size_t k);
void wset_plan_free(struct wset_plan *p);
struct image;
void wset_image_space(const struct image *img, struct wset_space *s);

void wset_rec_init(struct wset_rec *r);
int wset_rec_space(struct wset_rec *r, const struct wset_space *sp,
		   uint32_t *index);
void wset_rec_add(struct wset_rec *r, uint32_t space, uint64_t page);
int wset_rec_copy(struct wset_rec *r, struct wset *out);
void wset_rec_free(struct wset_rec *r);

#endif /* FAULTD_WSET_H */
