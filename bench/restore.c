// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * restore.c - scenario restore: a checkpointed region of --size MiB
 * (default 512) brought back, and how soon and how fast.
 *
 * Variants:
 *   eager         read the whole image into memory, then run (what a
 *                 restore without lazy paging does)
 *   faultd-local  faultd_restore() in the process: faults first, the rest
 *                 by the prefetch workers
 *   faultd-daemon the same through the faultd daemon (started by the
 *                 bench from ../daemon/faultd next to it, or $FAULTD_DAEMON)
 * Metrics:
 *   first_access_ms  from the start of the restore to the first byte read
 *   gb_per_s         size / time until every page is in
 *   p99_ns           latency of accesses that fault while the background
 *                    population runs (pages chosen at random among those
 *                    not in yet, by mincore(); eager: all are in)
 *   p99_ns_idle      the same without background population
 *                    (FAULTD_RESTORE_LAZY): the fault latency of a quiet
 *                    restore
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "proto.h"

enum { V_EAGER, V_LOCAL, V_DAEMON };
enum { M_FIRST, M_GBPS, M_P99, M_P99_IDLE };

#define SAMPLES 2000

static char image[64];
static uint32_t crc_sink; /* keeps eager's checksums from being elided */
static size_t image_len;
static char sock[108];
static pid_t daemon_pid;

static void image_remove(void)
{
	if (image[0])
		unlink(image);
	if (daemon_pid > 0)
		kill(daemon_pid, SIGTERM);
}

/* The image, written once per process. */
static int image_get(size_t len)
{
	struct faultd_region_opts o = { .size = sizeof(o), .length = len };
	struct faultd_ctx *ctx = bench_ctx(FAULTD_LOCK_REGION, 1);
	struct faultd_region *r;
	uint64_t *w;
	int fd, ret;

	if (image_len == len)
		return 0;
	if (!image[0]) {
		strcpy(image, "/var/tmp/faultd-bench-image-XXXXXX");
		fd = mkstemp(image);
		if (fd < 0)
			return -errno;
		close(fd);
		atexit(image_remove);
	}
	ret = ctx ? faultd_region_create(ctx, &o, &r) : -ENOMEM;
	if (ret)
		goto out;
	w = faultd_region_base(r);
	for (size_t i = 0; i < len / 8; i++)
		w[i] = i * 0x9e3779b97f4a7c15ull;
	ret = faultd_checkpoint(r, image, NULL);
	image_len = ret ? 0 : len;
out:
	faultd_ctx_destroy(ctx);
	return ret;
}

/* The daemon, started once, next to this program or $FAULTD_DAEMON. */
static int daemon_get(void)
{
	char exe[PATH_MAX], *env = getenv("FAULTD_DAEMON");
	double deadline;
	ssize_t n;
	int s;

	if (daemon_pid > 0)
		return 0;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 32);
	if (n < 0)
		return -errno;
	exe[n] = 0;
	strcat(dirname(exe), "/../daemon/faultd");
	if (env)
		snprintf(exe, sizeof(exe), "%s", env);
	if (access(exe, X_OK))
		return -ENOENT;
	snprintf(sock, sizeof(sock), "/tmp/faultd-bench-%d.sock", getpid());
	daemon_pid = fork();
	if (daemon_pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl(exe, exe, "--socket", sock, (char *)NULL);
		_exit(127);
	}
	for (deadline = bench_now() + 5; bench_now() < deadline;) {
		s = proto_connect(sock);
		if (s >= 0) {
			close(s);
			return 0;
		}
		usleep(10000);
	}
	return -ETIMEDOUT;
}

/* Touch random pages that are not in yet; their latency into @h. */
static void sample_faults(const char *base, size_t len, struct lat_hist *h,
			  unsigned int samples)
{
	uint64_t x = 88172645463325252ull;
	unsigned char in;

	for (unsigned int i = 0; i < samples * 50 && samples; i++) {
		size_t pg;
		uint64_t t0;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		pg = x % (len / 4096);
		if (mincore((void *)(base + pg * 4096), 4096, &in) || (in & 1))
			continue;
		t0 = now_ns();
		(void)*(const volatile char *)(base + pg * 4096);
		lat_record(h, now_ns() - t0);
		samples--;
	}
}

static int restore_once(unsigned int v, size_t len, unsigned int flags,
			struct sample *out, bool timed)
{
	struct faultd_restore_opts o = { .size = sizeof(o), .flags = flags,
					 .socket = sock };
	struct lat_hist *h = calloc(1, sizeof(*h));
	struct faultd_ctx *ctx = bench_ctx(FAULTD_LOCK_REGION, 1);
	struct faultd_region *r;
	double t0 = bench_now(), p50, p99;
	const char *base;
	int ret;

	if (v == V_DAEMON)
		o.flags |= FAULTD_RESTORE_DAEMON;
	ret = h && ctx ? faultd_restore(ctx, image, &o, &r) : -ENOMEM;
	if (ret)
		goto out;
	base = faultd_region_base(r);
	(void)*(const volatile char *)base;
	if (timed)
		out->value[M_FIRST] = (bench_now() - t0) * 1e3;
	sample_faults(base, len, h, SAMPLES);
	lat_percentiles(h, 1, sizeof(*h), &p50, &p99);
	out->value[timed ? M_P99 : M_P99_IDLE] = p99;
	if (timed) {
		faultd_restore_wait(r);
		out->value[M_GBPS] = (double)len / (bench_now() - t0) / 1e9;
		sample_ctx_stats(ctx, out);
	}
out:
	faultd_ctx_destroy(ctx);
	free(h);
	return ret;
}

/* Read the whole image, then run: everything is in before anything. */
static int eager(size_t len, struct sample *out)
{
	struct lat_hist *h = calloc(1, sizeof(*h));
	double t0 = bench_now(), p50, p99;
	char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int fd = open(image, O_RDONLY | O_CLOEXEC);
	ssize_t n = -1;

	/* The image's data starts at IMG_BLOCK; every block is data here.
	 * Checked as the library checks it, a CRC per block. */
	if (buf != MAP_FAILED && fd >= 0 && h)
		for (size_t at = 0; at < len; at += (size_t)n) {
			n = pread(fd, buf + at, len - at,
				  (off_t)(IMG_BLOCK + at));
			if (n <= 0)
				break;
		}
	for (size_t at = 0; n > 0 && at < len; at += IMG_BLOCK)
		crc_sink ^= crc32c(0, buf + at, IMG_BLOCK);
	if (fd >= 0)
		close(fd);
	if (n <= 0 || !h) {
		free(h);
		return -EIO;
	}
	out->value[M_FIRST] = (bench_now() - t0) * 1e3;
	out->value[M_GBPS] = (double)len / (bench_now() - t0) / 1e9;
	for (unsigned int i = 0; i < SAMPLES; i++) {
		uint64_t t = now_ns();

		(void)*(volatile char *)(buf + (i * 7919ul % (len / 4096)) * 4096);
		lat_record(h, now_ns() - t);
	}
	lat_percentiles(h, 1, sizeof(*h), &p50, &p99);
	out->value[M_P99] = out->value[M_P99_IDLE] = p99;
	munmap(buf, len);
	free(h);
	return 0;
}

static int restore_run(const struct bench_opts *o, unsigned int v,
		       struct sample *out)
{
	size_t len = o->size_mib << 20;
	int ret = image_get(len);

	if (ret)
		return ret;
	if (v == V_EAGER)
		return eager(len, out);
	if (v == V_DAEMON && daemon_get() < 0) {
		out->skipped = "no faultd daemon next to faultd-bench "
			       "(set FAULTD_DAEMON)";
		return 0;
	}
	ret = restore_once(v, len, FAULTD_RESTORE_LAZY, out, false);
	return ret ? ret : restore_once(v, len, 0, out, true);
}

const struct scenario scenario_restore = {
	.name = "restore",
	.desc = "checkpoint a region, restore it: time to first access, "
		"population GB/s, fault p99 during and without the push",
	.metrics = { "first_access_ms", "gb_per_s", "p99_ns", "p99_ns_idle" },
	.nmetrics = 4,
	.variants = { "eager", "faultd-local", "faultd-daemon" },
	.nvariants = 3,
	.ratios = { { V_LOCAL, V_EAGER }, { V_DAEMON, V_EAGER },
		    { V_DAEMON, V_LOCAL } },
	.nratios = 3,
	.default_threads = 1,
	.default_size_mib = 512,
	.run = restore_run,
};
