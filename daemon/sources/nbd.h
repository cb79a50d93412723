/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd.h - a source (source.h) over a network block device: offsets are
 * the export's offsets; SRC_ZERO where the server's block status
 * (base:allocation) says the export reads as zeros, SRC_DATA elsewhere
 * (everywhere, for a server without block status).
 *
 * Fetched once per host: the opens of one URI with the same options
 * share one set of connections and one chunk cache. The export is read
 * in chunks (src_nbd_opts.chunk): a read asks for the chunks it covers,
 * each chunk is fetched by one NBD read - of the data in it only - and
 * kept while the cache's bound allows; a chunk being fetched for one
 * reader is waited for by the others, not fetched again. Reads are
 * asynchronous: every chunk a read (or willneed()) needs is queued at
 * once, and as many as `depth` per connection are in flight, over up to
 * `conns` connections when the server allows multi-conn. A read with
 * SRC_READ_URGENT goes into a queue served before every other: ahead of
 * every push, replay or read-ahead chunk queued before it (not of those
 * already sent).
 *
 * Failure without loss (retry.h): a lost connection is made again with
 * backoff while the reads on it wait; when the server has been
 * unreachable for `retry.deadline_ms` (default 30 s) the waiting reads
 * and every later one fail with -EIO until it is back. A read the server
 * fails is asked again `retry.read_retries` times (default 3), then
 * fails with -EIO. A connection with reads in flight that receives no
 * answer for `io_timeout_ms` is taken for lost. A server whose export
 * changed size when a connection is made again is not the one the source
 * was opened on: every read fails with -EIO from then on. Never zeros.
 *
 * Thread safety: as source.h. src_nbd_open(), src_nbd_reopen() and
 * destroy() of sources of one URI may run concurrently (the sharing is
 * under a lock of its own).
 */
#ifndef FAULTD_SRC_NBD_H
#define FAULTD_SRC_NBD_H

#include <stddef.h>
#include <stdint.h>

#include "retry.h"
#include "source.h"

/* 0 or NULL in a field: its default. */
struct src_nbd_opts {
	size_t size;			/* sizeof(struct src_nbd_opts) */
	uint32_t conns;			/* default 4; 1 without multi-conn */
	uint32_t depth;			/* reads in flight per connection; 16 */
	uint32_t chunk;			/* bytes a fetch, a power of 2; 256 KiB */
	uint64_t cache_bytes;		/* the cache's bound; 256 MiB */
	uint32_t io_timeout_ms;		/* no answer this long: lost; 10000 */
	uint32_t connect_timeout_ms;	/* one attempt to connect; 10000 */
	struct retry_policy retry;	/* backoff, deadline, retries */
	/* TLS: where the URI does not say (nbds:// requires TLS). */
	const char *tls_psk_file;	/* "user:hexkey" lines */
	const char *tls_username;	/* default: the URI's, or the login */
	const char *tls_certificates;	/* a directory, for X.509 */
	/* Let the URI itself name tls-psk-file= and tls-certificates=. */
	uint32_t allow_local_files;
	/* Connection losses, recoveries, reads given up; NULL: silent. */
	void (*log)(void *arg, const char *line);
	void *log_arg;
};

#define SRC_NBD_CHUNK (256u << 10)
#define SRC_NBD_CACHE (256ull << 20)
#define SRC_NBD_CONNS 4
#define SRC_NBD_DEPTH 16
#define SRC_NBD_IO_TIMEOUT_MS 10000
/* The extent table's bound is the file source's (extents.h): past
 * DATA_EXTS_MAX, the holes between later data are read. */

/*
 * src_nbd_open() - a source of [0, @size) of the export @uri names
 * (nbd_uri.h: nbd://, nbds://, nbd+unix://, nbd+vsock://), with pages of
 * @page_size bytes (4096 or 2 MiB); @size 0: the whole export. Connects,
 * checks the export against what is asked before any read, reads its
 * block status, and starts the connections' threads - or joins the set
 * of an earlier open of the same URI and options. @o may be NULL.
 * Returns 0 and the source in *out, or -errno with the reason in @why
 * (256 bytes are enough): -EINVAL a URI nbd_uri.h refuses, a page size
 * other than those, a size that is no whole number of pages, options out
 * of range; -ERANGE the export is smaller than @size, or its last bytes
 * cannot be read in the server's minimum block size; -ECONNREFUSED,
 * -ETIMEDOUT... what connecting said (one attempt, connect_timeout_ms);
 * -EPERM the URI names local files and allow_local_files is 0; -ENOMEM.
 * Context: any thread; blocks for the connections and the block status.
 */
extern const struct source_type src_nbd_type;

int src_nbd_open(const char *uri, uint64_t size, size_t page_size,
		 const struct src_nbd_opts *o, struct source **out, char *why,
		 size_t why_len);

/*
 * The source's identity (source.h id[32]): BLAKE2b-256 of the canonical
 * URI (nbd_uri.h: transport, server, port or socket, TLS user, export)
 * and the export's size. It tells apart other servers, exports, users
 * and sizes. It cannot tell a changed export of the same URI and size
 * (NBD has no content identity: name a new snapshot by a new export or
 * file name), and one export reached by two spellings of its server (a
 * name and an address) has two identities.
 */

/* Counters of the set of connections the source is in (host-wide). */
struct src_nbd_stats {
	uint64_t reads;		/* read() calls */
	uint64_t bytes_read;	/* bytes they returned */
	uint64_t fetches;	/* NBD reads that completed */
	uint64_t bytes_fetched;	/* bytes those brought */
	uint64_t hits;		/* chunks a read found in the cache */
	uint64_t joins;		/* chunks a read waited for another's fetch of */
	uint64_t urgent;	/* chunks queued or moved ahead as urgent */
	uint64_t evictions;	/* chunks dropped for the bound */
	uint64_t reconnects;	/* connections made again */
	uint64_t failed_reads;	/* read() calls that returned -EIO */
	struct retry_stats retry;
	/* Gauges. */
	uint64_t cached_bytes;	/* chunk memory held, spare buffers too */
	uint32_t queued;	/* chunks waiting for a connection */
	uint32_t queued_urgent;	/* of which urgent */
	uint32_t in_flight;	/* NBD reads sent, not answered */
	uint32_t conns_up;	/* connections up, of conns */
	uint32_t conns;
	uint32_t chunk;		/* the chunk size in use */
	uint32_t users;		/* sources sharing the set */
};

/* src_nbd_stats() - the counters of @s's set. Context: any thread. */
void src_nbd_stats(struct source *s, struct src_nbd_stats *out);

/* Is @s a source of this file? */
int src_nbd_is(const struct source *s);

/*
 * src_nbd_save() - what identifies @s (URI, size, page size, the
 * export's size, the options but log) into @blob, for a restarted daemon
 * to reopen it from. Returns the blob's length; when that is more than
 * @max, nothing was written: call again with room. No secret goes into
 * it: the TLS key stays in its file.
 * src_nbd_reopen() - the source again from such a blob, as
 * src_nbd_open() does; its lines go to src_nbd_set_log()'s function (a
 * blob cannot hold one). When the server's export no longer has the size
 * it had when the blob was saved, the source opens stale (source.h:
 * every read fails, its pages are poisoned). Unlike src_nbd_open() it
 * waits for an unreachable server up to the deadline of the options: a
 * daemon restarting is in no hurry for a clear error. Returns as
 * src_nbd_open(), and -EBADMSG for a blob that is not one.
 */
size_t src_nbd_save(struct source *s, void *blob, size_t max);
int src_nbd_reopen(const void *blob, size_t len, struct source **sp,
		   char *why, size_t why_len);

/*
 * src_nbd_set_log() - where the sources whose options name no log
 * function (reopened ones among them) write their lines; NULL: nowhere.
 * Applies to connection sets made after the call.
 */
void src_nbd_set_log(void (*fn)(void *arg, const char *line), void *arg);

#endif /* FAULTD_SRC_NBD_H */
