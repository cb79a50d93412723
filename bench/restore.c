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
 *   faultd-daemon-mac  the same from an authenticated image: every block's
 *                 AES-256-GMAC checked (by the daemon) instead of its CRC32C
 * Metrics:
 *   first_access_ms  from the start of the restore to the first byte read
 *   gb_per_s         size / time until every page is in (its own thread
 *                    waits for that: the fault sampling below goes on)
 *   p99_ns           latency of accesses that fault while the background
 *                    population runs (pages chosen at random among those
 *                    not in yet, by mincore(); eager: all are in)
 *   p99_ns_idle      the same without background population
 *                    (FAULTD_RESTORE_LAZY): the fault latency of a quiet
 *                    restore
 *   cpu_ms           CPU time (user and system, every thread) of the
 *                    timed restore: this process's, and the daemon's for
 *                    the daemon variants (to 10 ms): what the restore
 *                    costs whatever else the machine runs, where gb_per_s
 *                    depends on the share of the CPUs it gets
 *   reader_gb_per_s  size / time until every page is in, in a third
 *                    restore whose program reads one word of every page
 *                    in order from the moment faultd_restore() returns
 *                    (a restored service warming up; eager: read after)
 *   reader_pass_ms   from the start of that restore to the end of the
 *                    program's first full pass
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "proto.h"

enum { V_EAGER, V_LOCAL, V_DAEMON, V_DAEMON_MAC };
enum { M_FIRST, M_GBPS, M_P99, M_P99_IDLE, M_CPU, M_READ_GBPS, M_READ_PASS };
/* What the program does while the restore goes on (restore_once()). */
enum mode { R_IDLE, R_TIMED, R_READER };

#define SAMPLES 2000

static char image[64], image_mac[64], key[64];
static uint32_t crc_sink; /* keeps eager's checksums from being elided */
static size_t image_len;
static struct bench_daemon daemon_;

static void image_remove(void)
{
	if (image[0])
		unlink(image);
	if (image_mac[0])
		unlink(image_mac);
	if (key[0])
		unlink(key);
	bench_daemon_stop(&daemon_);
}

/* The key of the authenticated image: 32 random bytes. */
static int key_make(void)
{
	unsigned char k[32];
	int fd, ret = bench_tmp_file(key, "key");

	if (ret)
		return ret;
	fd = open(key, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (getrandom(k, sizeof(k), 0) != sizeof(k) ||
	    write(fd, k, sizeof(k)) != sizeof(k))
		ret = -EIO;
	close(fd);
	return ret;
}

static int files_make(void)
{
	int ret = bench_tmp_file(image, "image");

	atexit(image_remove);
	if (!ret)
		ret = bench_tmp_file(image_mac, "image-mac");
	return ret ? ret : key_make();
}

/* The images (plain and authenticated), written once per process. */
static int image_get(size_t len)
{
	struct faultd_region_opts o = { .size = sizeof(o), .length = len };
	struct faultd_checkpoint_opts co = { .size = sizeof(co) };
	struct faultd_ctx *ctx = bench_ctx(FAULTD_LOCK_REGION, 1);
	struct faultd_region *r;
	uint64_t *w;
	int ret;

	if (image_len == len)
		return 0;
	if (!image[0] && (ret = files_make()) < 0)
		return ret;
	ret = ctx ? faultd_region_create(ctx, &o, &r) : -ENOMEM;
	if (ret)
		goto out;
	w = faultd_region_base(r);
	for (size_t i = 0; i < len / 8; i++)
		w[i] = i * 0x9e3779b97f4a7c15ull;
	ret = faultd_checkpoint(r, image, NULL);
	co.key_file = key;
	if (!ret)
		ret = faultd_checkpoint(r, image_mac, &co);
	image_len = ret ? 0 : len;
out:
	faultd_ctx_destroy(ctx);
	return ret;
}

/* CPU time in ms of this process and, with @daemon, of the daemon: user
 * and system, all threads, those gone included. */
static double cpu_ms(bool daemon)
{
	unsigned long long ut = 0, st = 0;
	char path[64], buf[1024], *p;
	struct rusage ru;
	double ms;
	ssize_t n;
	int fd;

	getrusage(RUSAGE_SELF, &ru);
	ms = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
	     (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
	if (!daemon)
		return ms;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)daemon_.pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = 0;
	/* After the name: state and 10 fields, then utime and stime. */
	p = strrchr(buf, ')');
	if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
			       "%llu %llu", &ut, &st) == 2)
		ms += (double)(ut + st) * 1e3 / (double)sysconf(_SC_CLK_TCK);
	return ms;
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

/* faultd_restore_wait() in a thread of its own: when every page was in,
 * whatever the program's sampling of faults still does. */
struct all_in {
	struct faultd_region *r;
	pthread_t t;
	double at;
	int ret;
};

static void *wait_all_in(void *arg)
{
	struct all_in *a = arg;

	a->ret = faultd_restore_wait(a->r);
	a->at = bench_now();
	return NULL;
}

/* Read one word of every page of [base, base + len), in order. */
static void read_in_order(const char *base, size_t len)
{
	for (size_t at = 0; at < len; at += 4096)
		(void)*(const volatile char *)(base + at);
}

static int restore_once(unsigned int v, size_t len, enum mode mode,
			struct sample *out)
{
	unsigned int flags = mode == R_IDLE ? FAULTD_RESTORE_LAZY : 0;
	bool timed = mode == R_TIMED;
	struct faultd_restore_opts o = { .size = sizeof(o), .flags = flags,
					 .socket = daemon_.sock };
	const char *path = v == V_DAEMON_MAC ? image_mac : image;
	struct lat_hist *h = calloc(1, sizeof(*h));
	struct faultd_ctx *ctx = bench_ctx(FAULTD_LOCK_REGION, 1);
	struct faultd_region *r;
	bool daemon = v == V_DAEMON || v == V_DAEMON_MAC;
	double t0 = bench_now(), c0 = cpu_ms(daemon), p50, p99;
	struct all_in all = { 0 };
	const char *base;
	int ret;

	if (daemon)
		o.flags |= FAULTD_RESTORE_DAEMON;
	if (v == V_DAEMON_MAC)
		o.key_file = key;
	ret = h && ctx ? faultd_restore(ctx, path, &o, &r) : -ENOMEM;
	if (ret)
		goto out;
	base = faultd_region_base(r);
	if (mode == R_READER) {
		read_in_order(base, len);
		out->value[M_READ_PASS] = (bench_now() - t0) * 1e3;
		ret = faultd_restore_wait(r);
		out->value[M_READ_GBPS] = (double)len / (bench_now() - t0) / 1e9;
		goto out;
	}
	(void)*(const volatile char *)base;
	if (timed) {
		out->value[M_FIRST] = (bench_now() - t0) * 1e3;
		all.r = r;
		ret = -pthread_create(&all.t, NULL, wait_all_in, &all);
		if (ret)
			goto out;
	}
	sample_faults(base, len, h, SAMPLES);
	lat_percentiles(h, 1, sizeof(*h), &p50, &p99);
	out->value[timed ? M_P99 : M_P99_IDLE] = p99;
	if (timed) {
		pthread_join(all.t, NULL);
		ret = all.ret;
		out->value[M_GBPS] = (double)len / (all.at - t0) / 1e9;
		out->value[M_CPU] = cpu_ms(daemon) - c0;
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
	double t0 = bench_now(), c0 = cpu_ms(false), p50, p99;
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
	out->value[M_CPU] = cpu_ms(false) - c0;
	for (unsigned int i = 0; i < SAMPLES; i++) {
		uint64_t t = now_ns();

		(void)*(volatile char *)(buf + (i * 7919ul % (len / 4096)) * 4096);
		lat_record(h, now_ns() - t);
	}
	lat_percentiles(h, 1, sizeof(*h), &p50, &p99);
	out->value[M_P99] = out->value[M_P99_IDLE] = p99;
	read_in_order(buf, len);
	out->value[M_READ_PASS] = (bench_now() - t0) * 1e3;
	out->value[M_READ_GBPS] = out->value[M_GBPS];
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
	if ((v == V_DAEMON || v == V_DAEMON_MAC) && bench_daemon_start(&daemon_, "restore") < 0) {
		out->skipped = "no faultd daemon next to faultd-bench "
			       "(set FAULTD_DAEMON)";
		return 0;
	}
	ret = restore_once(v, len, R_IDLE, out);
	if (!ret)
		ret = restore_once(v, len, R_TIMED, out);
	return ret ? ret : restore_once(v, len, R_READER, out);
}

const struct scenario scenario_restore = {
	.name = "restore",
	.desc = "checkpoint a region, restore it: time to first access, "
		"population GB/s, fault p99 during and without the push, "
		"all in with a program reading in order",
	.metrics = { "first_access_ms", "gb_per_s", "p99_ns", "p99_ns_idle",
		     "cpu_ms", "reader_gb_per_s", "reader_pass_ms" },
	.nmetrics = 7,
	.variants = { "eager", "faultd-local", "faultd-daemon",
		      "faultd-daemon-mac" },
	.nvariants = 4,
	.ratios = { { V_LOCAL, V_EAGER }, { V_DAEMON, V_EAGER },
		    { V_DAEMON, V_LOCAL }, { V_DAEMON_MAC, V_DAEMON } },
	.nratios = 4,
	.default_threads = 1,
	.default_size_mib = 512,
	.run = restore_run,
};
