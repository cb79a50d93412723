/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_set.h - what the NBD sources of one URI share on a host: the
 * connections to the server, the queues of chunks to fetch, the chunk
 * cache and the counters (nbd.h says what they promise). Internal to the
 * NBD source; nbd.c adds per-open checks, pages and extents on top.
 */
#ifndef FAULTD_SRC_NBD_SET_H
#define FAULTD_SRC_NBD_SET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nbd.h"
#include "nbd_conn.h"

struct nbd_set;

/* Fixed once the set is open: read without a lock. */
struct nbd_set_info {
	struct nbd_export ex;		/* as the first connection found it */
	uint32_t chunk;			/* bytes; a power of two */
	uint32_t align;			/* of reads: the minimum block, or 512 */
	struct data_exts data;		/* the export's data extents */
	const char *canon;		/* nbd_uri.h's canonical URI */
	const struct src_nbd_opts *o;	/* resolved: no field 0 but log */
};

/*
 * nset_get() - the set of @uri with options @o: an open one (another
 * reference), or a new one, connected (one attempt; with @wait, attempts
 * until the deadline), its export described. Returns 0 and the set in
 * *out, or -errno with @why as src_nbd_open().
 */
int nset_get(const char *uri, const struct src_nbd_opts *o, bool wait,
	     struct nbd_set **out, char *why, size_t why_len);

/* Drop a reference; the last stops the connections and frees it all. */
void nset_put(struct nbd_set *set);

const struct nbd_set_info *nset_info(const struct nbd_set *set);

/*
 * nset_read() - [off, off + len) of the export into @buf, through the
 * cache; @urgent: ahead of every queued read that is not. Returns 0 or
 * -EIO (never a part), -ENOMEM. Context: any thread; blocks until the
 * chunks came or were given up (retry.h).
 */
int nset_read(struct nbd_set *set, uint64_t off, void *buf, size_t len,
	      bool urgent);

/* Queue the chunks of [off, off + len) that hold data, while the cache
 * has room for them without dropping any that a read holds. */
void nset_willneed(struct nbd_set *set, uint64_t off, uint64_t len);

void nset_stats(struct nbd_set *set, struct src_nbd_stats *out);

/* Where sets whose options name no log write their lines. */
void nset_default_log(void (*fn)(void *arg, const char *line), void *arg);

#endif /* FAULTD_SRC_NBD_SET_H */
