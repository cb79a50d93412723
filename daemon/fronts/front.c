// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * front.c - the options the server and the front ends share.
 */
#include "front.h"

struct daemon_opts dopts = {
	.max_sessions = 1024,
	.max_conns = 256,
	.max_user_conns = 16,
	.handshake_ms = 5000,
	.keeper_grace_s = 30,
};
uint64_t daemon_started_ms;
