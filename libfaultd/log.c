// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * log.c - the library's log sink: fd_err(), fd_warn(), fd_info() and
 * fd_dbg() (internal.h) format a line and hand it to the context's log
 * callback.
 *
 * The library never prints by default: without a callback, or above the
 * context's level, a message is dropped before it is formatted. A line is
 * cut at 511 bytes. Any thread may log, holding any of the library's
 * locks: the callback is thread-safe and does not call back into the
 * library (faultd.h).
 */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

void fd_log(const struct faultd_ctx *ctx, int level, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (!ctx || !ctx->log || level > ctx->log_level)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	ctx->log(ctx->log_arg, level, line);
}
