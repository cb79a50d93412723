// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * nbd_conn.c - connecting one libnbd handle (nbd_conn.h): the settings
 * from the parsed URI, the handshake driven by poll() under a time-out
 * (libnbd's own connect calls would wait for ever on a server that
 * accepts and never answers), and the export's block status read once.
 */
#include <errno.h>
#include <libnbd.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#include "nbd_conn.h"
#include "retry.h"

#define MS 1000000ull
#define BS_REQ_MAX (1ull << 30)	/* bytes one block status request asks */
#define LIBNBD_FAILED 1

static int fail(char *why, size_t why_len, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail(char *why, size_t why_len, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, why_len, fmt, ap);
	va_end(ap);
	return err;
}

/* libnbd's last error of this thread as -errno and @why. */
static int nbd_fail(char *why, size_t why_len, const char *what)
{
	int err = nbd_get_errno();
	const char *msg = nbd_get_error();

	return fail(why, why_len, err > 0 ? -err : -EIO, "%s: %s", what,
		    msg ? msg : "unknown libnbd error");
}

/* The handle's settings, before it connects. */
static int conn_setup(struct nbd_handle *h, const struct nbd_target *t,
		      char *why, size_t why_len)
{
	if (nbd_set_export_name(h, t->uri.export) ||
	    nbd_add_meta_context(h, LIBNBD_CONTEXT_BASE_ALLOCATION) ||
	    /* A failed read's buffer is never used: no need to clear it. */
	    nbd_set_pread_initialize(h, false))
		return nbd_fail(why, why_len, "setting up the connection");
	if (!t->uri.tls)
		return nbd_set_tls(h, LIBNBD_TLS_DISABLE) ?
		       nbd_fail(why, why_len, "TLS") : 0;
	if (!nbd_supports_tls(h))
		return fail(why, why_len, -ENOTSUP, "this libnbd was built "
			    "without TLS");
	if (nbd_set_tls(h, LIBNBD_TLS_REQUIRE) ||
	    (t->psk_file && nbd_set_tls_psk_file(h, t->psk_file)) ||
	    (t->certificates && nbd_set_tls_certificates(h, t->certificates)) ||
	    (t->username && nbd_set_tls_username(h, t->username)))
		return nbd_fail(why, why_len, "TLS settings");
	return 0;
}

static int conn_start(struct nbd_handle *h, const struct nbd_uri *u)
{
	char port[8];

	switch (u->transport) {
	case NBD_UNIX:
		return nbd_aio_connect_unix(h, u->socket);
	case NBD_VSOCK:
		return nbd_aio_connect_vsock(h, u->cid, u->port);
	case NBD_TCP:
		break;
	}
	snprintf(port, sizeof(port), "%u", u->port);
	return nbd_aio_connect_tcp(h, u->host, port);
}

/*
 * One round of the handle's state machine: wait for its socket (or
 * @wake_fd) up to @deadline, then let libnbd read or write. Returns 0,
 * -ETIMEDOUT, -ECANCELED (woken with *stop set), or -1 for a libnbd
 * error (nbd_get_error() says which).
 */
static int conn_step(struct nbd_handle *h, uint64_t deadline, int wake_fd,
		     const atomic_bool *stop)
{
	unsigned int dir = (unsigned int)nbd_aio_get_direction(h);
	short ev = (short)((dir & LIBNBD_AIO_DIRECTION_READ ? POLLIN : 0) |
			   (dir & LIBNBD_AIO_DIRECTION_WRITE ? POLLOUT : 0));
	struct pollfd p[2] = {
		{ .fd = nbd_aio_get_fd(h), .events = ev },
		{ .fd = wake_fd, .events = POLLIN },
	};
	uint64_t now = retry_now_ns();
	eventfd_t v;
	int n;

	if (now >= deadline)
		return -ETIMEDOUT;
	n = poll(p, wake_fd >= 0 ? 2 : 1,
		 (int)((deadline - now + MS - 1) / MS));
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	if (wake_fd >= 0 && p[1].revents) {
		(void)eventfd_read(wake_fd, &v);
		if (atomic_load(stop))
			return -ECANCELED;
	}
	if (p[0].revents & (POLLIN | POLLHUP | POLLERR) &&
	    dir & LIBNBD_AIO_DIRECTION_READ && nbd_aio_notify_read(h))
		return LIBNBD_FAILED;
	if (p[0].revents & (POLLOUT | POLLERR) &&
	    dir & LIBNBD_AIO_DIRECTION_WRITE && nbd_aio_notify_write(h))
		return LIBNBD_FAILED;
	return 0;
}

static void export_info(struct nbd_handle *h, struct nbd_export *ex)
{
	int64_t size = nbd_get_size(h);

	*ex = (struct nbd_export){
		.size = size > 0 ? (uint64_t)size : 0,
		.min_block = (uint32_t)nbd_get_block_size(h, LIBNBD_SIZE_MINIMUM),
		.pref_block = (uint32_t)nbd_get_block_size(h,
						LIBNBD_SIZE_PREFERRED),
		.max_block = (uint32_t)nbd_get_block_size(h, LIBNBD_SIZE_MAXIMUM),
		.multi_conn = nbd_can_multi_conn(h) == 1,
		.block_status = nbd_can_meta_context(h,
				LIBNBD_CONTEXT_BASE_ALLOCATION) == 1,
	};
}

int nconn_connect(const struct nbd_target *t, uint32_t timeout_ms,
		  int wake_fd, const atomic_bool *stop,
		  struct nbd_handle **hp, struct nbd_export *ex,
		  char *why, size_t why_len)
{
	uint64_t deadline = retry_now_ns() + timeout_ms * MS;
	struct nbd_handle *h = nbd_create();
	int ret;

	if (!h)
		return nbd_fail(why, why_len, "libnbd");
	ret = conn_setup(h, t, why, why_len);
	if (!ret && conn_start(h, &t->uri))
		ret = nbd_fail(why, why_len, "connecting");
	while (!ret && !nbd_aio_is_ready(h)) {
		if (nbd_aio_is_dead(h) || nbd_aio_is_closed(h))
			ret = nbd_fail(why, why_len, "connecting");
		else
			ret = conn_step(h, deadline, wake_fd, stop);
		if (ret == LIBNBD_FAILED)
			ret = nbd_fail(why, why_len, "connecting");
		else if (ret == -ETIMEDOUT)
			fail(why, why_len, ret, "connecting: no answer in %u ms",
			     timeout_ms);
		else if (ret == -ECANCELED)
			fail(why, why_len, ret, "connecting: stopped");
	}
	if (ret) {
		nbd_close(h);
		return ret;
	}
	export_info(h, ex);
	*hp = h;
	return 0;
}

/* The table being built by the block status replies. */
struct ext_scan {
	struct data_exts *x;
	uint64_t at;		/* the replies cover [0, at) */
	uint64_t end;		/* of the request */
	int err;
};

/* Entries are (length, flags) pairs from @offset on; a reply may stop
 * short of the request, never go past it but by its last entry. */
static int scan_cb(void *arg, const char *ctx, uint64_t offset,
		   uint32_t *entries, size_t nr, int *error)
{
	struct ext_scan *s = arg;
	uint64_t at = offset;

	if (strcmp(ctx, LIBNBD_CONTEXT_BASE_ALLOCATION) || *error)
		return 0;
	for (size_t i = 0; i + 1 < nr && at < s->end && !s->err; i += 2) {
		uint64_t end = at + entries[i];

		if (!entries[i])
			break;
		if (end > s->end)
			end = s->end;
		if (!(entries[i + 1] & LIBNBD_STATE_ZERO))
			s->err = exts_add(s->x, at, end);
		at = end;
	}
	if (at > s->at)
		s->at = at;
	return 0;
}

/* Wait for command @cookie to complete: 0, or -errno with @why. */
static int conn_wait(struct nbd_handle *h, int64_t cookie,
		     uint32_t timeout_ms, char *why, size_t why_len)
{
	uint64_t deadline = retry_now_ns() + timeout_ms * MS;
	int done, ret = 0;

	while (!ret && !(done = nbd_aio_command_completed(h, (uint64_t)cookie)))
		ret = conn_step(h, deadline, -1, NULL);
	if (ret == -ETIMEDOUT)
		return fail(why, why_len, ret, "block status: no answer in "
			    "%u ms", timeout_ms);
	if (ret == LIBNBD_FAILED || (!ret && done < 0))
		return nbd_fail(why, why_len, "block status");
	if (ret)
		return fail(why, why_len, ret, "block status: %s",
			    strerror(-ret));
	return 0;
}

int nconn_extents(struct nbd_handle *h, const struct nbd_export *ex,
		  uint32_t timeout_ms, struct data_exts *out,
		  char *why, size_t why_len)
{
	struct ext_scan s = { .x = out };
	/* Requests in whole minimum blocks; a tail past the last is data. */
	uint64_t a = ex->min_block ? ex->min_block : 1;
	uint64_t top = ex->block_status ? ex->size / a * a : 0;
	int ret = 0;

	while (!ret && s.at < top) {
		uint64_t len = top - s.at, from = s.at;
		int64_t cookie;

		s.end = s.at + (len < BS_REQ_MAX ? len : BS_REQ_MAX / a * a);
		cookie = nbd_aio_block_status(h, s.end - s.at, s.at,
			(nbd_extent_callback){ .callback = scan_cb,
					       .user_data = &s },
			NBD_NULL_COMPLETION, 0);
		ret = cookie < 0 ? nbd_fail(why, why_len, "block status")
				 : conn_wait(h, cookie, timeout_ms, why, why_len);
		if (!ret && s.err)
			ret = fail(why, why_len, s.err, "out of memory");
		if (!ret && s.at == from)
			ret = fail(why, why_len, -EPROTO, "block status: the "
				   "server described nothing at %llu",
				   (unsigned long long)from);
	}
	if (!ret && top < ex->size)
		ret = exts_add(out, top, ex->size) ?
		      fail(why, why_len, -ENOMEM, "out of memory") : 0;
	if (ret)
		exts_free(out);
	return ret;
}
