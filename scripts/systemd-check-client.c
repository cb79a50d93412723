// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * systemd-check-client.c - the client of scripts/systemd-check.sh: a
 * program that uses the installed libfaultd as users do, so that the
 * check can stop, kill and restart the daemon at a moment it chooses.
 *
 *   systemd-check-client checkpoint IMAGE MIB
 *	fill a region of MIB MiB with a pattern and write its image
 *   systemd-check-client restore SOCKET IMAGE MIB PAUSE_MIB
 *	restore the image lazily through the daemon on SOCKET
 *	(FAULTD_RESTORE_LAZY: pages come in only when touched, so the
 *	restore is exactly as far as this program has read); read and check
 *	the first PAUSE_MIB MiB, print "paused", wait for a line on standard
 *	input, read and check the rest, wait until the restore says done,
 *	and print one line: "result bad=N done=D daemon=A daemon_died=K
 *	urgent=U faults=F"
 *   systemd-check-client crowd SOCKET N
 *	open N connections to the daemon and send nothing; print what the
 *	last one gets (run as a user other than root, with N one more than
 *	--max-user-connections: the daemon refuses it, and answers it when
 *	its handshake time is up)
 *
 * Exit 0 when every byte read was right (restore) or the step worked, 1
 * otherwise; what the daemon did (adopted, taken over) is for the caller
 * to judge from the result line.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <faultd.h>

#define DONE_WAIT_S 120

/* The content of the 8-byte word at offset @off (checkpoint_restore's). */
static uint64_t word(uint64_t off)
{
	uint64_t x = off * 0x9e3779b97f4a7c15ull;

	return x ^ (x >> 31);
}

static int fail(const char *what, int err)
{
	fprintf(stderr, "systemd-check-client: %s: %s\n", what, strerror(-err));
	return 1;
}

static size_t mib(const char *arg)
{
	return (size_t)strtoul(arg, NULL, 10) << 20;
}

static int checkpoint(const char *image, size_t len)
{
	struct faultd_region_opts ro = { .size = sizeof(ro), .length = len,
					 .name = "systemd-check" };
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	uint64_t *w;
	int ret = faultd_ctx_create(NULL, &ctx);

	if (ret)
		return fail("faultd_ctx_create", ret);
	ret = faultd_region_create(ctx, &ro, &r);
	if (!ret) {
		w = faultd_region_base(r);
		for (size_t i = 0; i < len / 8; i++)
			w[i] = word(i * 8);
		ret = faultd_checkpoint(r, image, NULL);
	}
	faultd_ctx_destroy(ctx);
	return ret ? fail(image, ret) : 0;
}

/* Words of [@from, @to) that are not the image's. */
static size_t check(const uint64_t *w, size_t from, size_t to)
{
	size_t bad = 0;

	for (size_t i = from / 8; i < to / 8; i++)
		bad += w[i] != word(i * 8);
	return bad;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * Every page has been touched, so the restore is done as soon as the
 * daemon's next report says so (or the library's own count, after a
 * take-over); a restore that never says so is reported, not waited for.
 */
static void wait_done(struct faultd_region *r,
		      struct faultd_restore_progress *p)
{
	double end = now() + DONE_WAIT_S;

	for (;;) {
		faultd_restore_progress(r, p);
		if (p->done || now() > end)
			return;
		usleep(10000);
	}
}

static int restore(const char *sock, const char *image, size_t len,
		   size_t pause)
{
	struct faultd_restore_opts o = {
		.size = sizeof(o),
		.flags = FAULTD_RESTORE_DAEMON | FAULTD_RESTORE_LAZY,
		.socket = sock,
		.name = "systemd-check",
	};
	struct faultd_restore_progress p = { .size = sizeof(p) };
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	char line[16];
	size_t bad;
	int ret = faultd_ctx_create(NULL, &ctx);

	if (ret)
		return fail("faultd_ctx_create", ret);
	ret = faultd_restore(ctx, image, &o, &r);
	if (ret) {
		faultd_ctx_destroy(ctx);
		return fail(sock, ret);
	}
	bad = check(faultd_region_base(r), 0, pause);
	printf("paused\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin)) {
		faultd_ctx_destroy(ctx);
		return fail("standard input", -EPIPE);
	}
	bad += check(faultd_region_base(r), pause, len);
	wait_done(r, &p);
	printf("result bad=%zu done=%d daemon=%d daemon_died=%d urgent=%llu "
	       "faults=%llu\n", bad, p.done, p.daemon, p.daemon_died,
	       (unsigned long long)p.pages_urgent,
	       (unsigned long long)p.faults);
	faultd_ctx_destroy(ctx);
	return bad ? 1 : 0;
}

/* N connections of one user that say nothing; the last one's answer. */
static int crowd(const char *sock, int n)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char reply[512];
	ssize_t got;
	int s = -1;

	if (strlen(sock) >= sizeof(a.sun_path))
		return fail(sock, -ENAMETOOLONG);
	strcpy(a.sun_path, sock);
	for (int i = 0; i < n; i++) {
		s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0)
			return fail(sock, -errno);
	}
	got = recv(s, reply, sizeof(reply), 0);
	printf("crowd: the last of %d connections got %zd bytes\n", n, got);
	return got >= 0 ? 0 : fail(sock, -errno);
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "checkpoint"))
		return checkpoint(argv[2], mib(argv[3]));
	if (argc == 6 && !strcmp(argv[1], "restore") &&
	    mib(argv[5]) <= mib(argv[4]))
		return restore(argv[2], argv[3], mib(argv[4]), mib(argv[5]));
	if (argc == 4 && !strcmp(argv[1], "crowd"))
		return crowd(argv[2], atoi(argv[3]));
	fprintf(stderr, "usage: systemd-check-client checkpoint IMAGE MIB\n"
			"       systemd-check-client restore SOCKET IMAGE MIB "
			"PAUSE_MIB\n"
			"       systemd-check-client crowd SOCKET N\n");
	return 2;
}
