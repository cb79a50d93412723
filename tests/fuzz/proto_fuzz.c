// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * proto_fuzz.c - libFuzzer target for the daemon protocol (proto.h): the
 * input is one message as it comes off the socket.
 *
 * Covers proto_check() (the daemon's and the clients' only gate), the
 * daemon's pure REGISTER checks (check_ranges() against images of several
 * lengths; with pid 0 its /proc/PID/smaps part fails at fopen(), so that
 * part, which parses the kernel's text, is not fuzzed), and the client's
 * handshake (proto_hello() reading the input as the daemon's reply through
 * proto_recv(), with input-length % 10 descriptors attached, checking that
 * none leaks).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "internal.h"
#include "peer.h"
#include "proto.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FDS 9 /* one more than proto_recv() has room for */

static int sp[2] = { -1, -1 };	/* [0] the client's end, [1] the daemon's */
static int null_fd = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct timeval tv = { .tv_sec = 2 }; /* a lost reply fails, not hangs */

	(void)argc;
	(void)argv;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0 ||
	    setsockopt(sp[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		abort();
	null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null_fd < 0)
		abort();
	return 0;
}

/* The daemon's REGISTER checks, against full images of several lengths. */
static void register_check(const struct proto_register *m)
{
	static const uint64_t lens[] = { 1, 4096, 3 * IMG_BLOCK + 8192,
					 1ull << 47, UINT64_MAX - 4095,
					 UINT64_MAX };
	struct image img = { .fd = -1 };
	const char *why = NULL;
	struct peer peer;

	peer_init(&peer);
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		img.h.region_len = lens[i];
		if (check_ranges(m, &img, &peer, &why) == 0 || !why || !*why)
			abort(); /* a peer without a process: never accepted */
	}
}

/* The lowest free descriptor number (then free again). */
static int lowest_free_fd(void)
{
	int fd = dup(null_fd);

	if (fd < 0)
		abort();
	close(fd);
	return fd;
}

/* Send the input as the daemon's HELLO reply, with @nfds descriptors. */
static int reply_send(const uint8_t *data, size_t size, unsigned int nfds)
{
	int fds[MAX_FDS];
	char ctl[CMSG_SPACE(sizeof(fds))] = { 0 };
	struct iovec iov = { .iov_base = (void *)data, .iov_len = size };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;

	if (nfds) {
		for (unsigned int i = 0; i < nfds; i++)
			fds[i] = null_fd;
		m.msg_control = ctl;
		m.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	return sendmsg(sp[1], &m, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 ? -errno
								    : 0;
}

/* The client's handshake, with the input as the daemon's reply. */
static void hello_reply(const uint8_t *data, size_t size)
{
	struct proto_hello reply, hi;
	int before = lowest_free_fd(), ret;

	if (reply_send(data, size, (unsigned int)(size % (MAX_FDS + 1))) < 0)
		return; /* too long for the socket: nothing to read */
	memset(&reply, 0xa5, sizeof(reply));
	ret = proto_hello(sp[0], PROTO_FEATURES, &reply);
	if (recv(sp[1], &hi, sizeof(hi), MSG_DONTWAIT) != (ssize_t)sizeof(hi))
		abort(); /* proto_hello() sends before it reads */
	if (ret == 0 && (reply.h.type != MSG_HELLO ||
			 reply.min_version > PROTO_VERSION ||
			 reply.max_version < PROTO_VERSION))
		abort();
	if (lowest_free_fd() != before)
		abort(); /* a received descriptor was not closed */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *why = NULL;
	int ret = proto_check(data, size, &why);

	if (ret != 0 && ret != -EBADMSG && ret != -EPROTONOSUPPORT &&
	    ret != -EPROTO)
		abort();
	if (ret ? !why || !*why : why != NULL)
		abort(); /* every refusal says why; a success does not */
	if (!ret && ((const struct proto_hdr *)data)->type == MSG_REGISTER)
		register_check((const struct proto_register *)data);
	hello_reply(data, size);
	return 0;
}
