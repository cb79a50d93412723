/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_conn.h - one libnbd handle, connected from a parsed URI
 * (nbd_uri.h) with a time-out, and what the handshake said about the
 * export. Internal to the NBD source.
 */
#ifndef FAULTD_SRC_NBD_CONN_H
#define FAULTD_SRC_NBD_CONN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "extents.h"
#include "nbd_uri.h"

struct nbd_handle;

/* Where and how to connect: fixed for the life of a connection set. */
struct nbd_target {
	struct nbd_uri uri;
	const char *psk_file;	/* the URI's, or the options' */
	const char *username;
	const char *certificates;
};

/* What the handshake said. */
struct nbd_export {
	uint64_t size;
	uint32_t min_block, pref_block, max_block;	/* 0: not said */
	bool multi_conn;
	bool block_status;	/* base:allocation negotiated */
};

/*
 * nconn_connect() - a handle connected to @t and through the
 * handshake, in *hp, within @timeout_ms. @wake_fd (-1: none) is an
 * eventfd polled beside the socket: when it fires and *@stop is set the
 * attempt ends with -ECANCELED. Returns 0, or -errno with what libnbd
 * said in @why.
 */
int nconn_connect(const struct nbd_target *t, uint32_t timeout_ms,
		  int wake_fd, const atomic_bool *stop,
		  struct nbd_handle **hp, struct nbd_export *ex,
		  char *why, size_t why_len);

/*
 * nconn_extents() - the data extents of [0, ex->size) (what is not known
 * to be zeros), from block status, into the empty table @out (extents.h:
 * sorted, merged, bounded; exts_free() it). A server without block
 * status: one extent of all. Within @timeout_ms per request. Returns 0
 * or -errno with @why.
 */
int nconn_extents(struct nbd_handle *h, const struct nbd_export *ex,
		  uint32_t timeout_ms, struct data_exts *out,
		  char *why, size_t why_len);

#endif /* FAULTD_SRC_NBD_CONN_H */
