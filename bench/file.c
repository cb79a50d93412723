// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * file.c - scenario file: reading a file through a region, against the
 * kernel's mmap of the same file.
 *
 * One file of --size MiB (default 256) on the file system of /var/tmp.
 * Each round maps it afresh and reads it sequentially (every cache line of
 * every page, summed) and at random (one word of each of as many random
 * pages as half the file has, at least 16384: more pages than the budget
 * variant may keep), first with the file in the page cache (warm) and then
 * after posix_fadvise(DONTNEED) dropped it (cold). Variants:
 *   mmap          the kernel: mmap(MAP_SHARED) of the file
 *   faultd        file pager, 64 KiB fault-around, read-ahead to 2 MiB
 *   faultd-nofa   file pager, fault-around and read-ahead off
 *   faultd-budget file pager with a budget of a quarter of the file
 *                 (read-ahead on; a budget has no fault-around)
 * Metrics: GB/s of the sequential reads, thousands of random page reads
 * per second, the faults taken per MiB of the warm sequential read (the
 * kernel's minor+major faults from getrusage for mmap), and for the faultd
 * variants read_amplification: the bytes the pager read in the warm
 * sequential pass over the bytes mapped (the file's length).
 * peak_resident_over_budget, for the budget variant: the most memory its
 * region held at any sample of all four passes over the budget. It is
 * sampled from another thread every 100 us as the pages its memfd has
 * allocated (fstat's st_blocks), outside the library's own accounting;
 * RSS would count each page twice (the region and the library's alias).
 * A metric a variant does not measure is NaN, and not reported.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

enum { V_MMAP, V_FAULTD, V_NOFA, V_BUDGET };
enum { M_SEQ_WARM, M_SEQ_COLD, M_RAND_WARM, M_RAND_COLD, M_FAULTS,
       M_AMPLIFICATION, M_PEAK };

#define RAND_READS_MIN 16384

/* Random reads per pass: half the file's pages, at least RAND_READS_MIN. */
static unsigned int rand_reads(size_t len)
{
	size_t n = len / 4096 / 2;

	return n > RAND_READS_MIN ? (unsigned int)n : RAND_READS_MIN;
}

static int bench_fd = -1;
static size_t bench_len;

/* The file, made once per process (same size for every round). */
static int file_get(size_t len)
{
	char path[] = "/var/tmp/faultd-bench-file-XXXXXX";
	char *buf;

	if (bench_fd >= 0 && bench_len == len)
		return bench_fd;
	if (bench_fd >= 0)
		close(bench_fd);
	bench_fd = mkstemp(path);
	buf = malloc(1 << 20);
	if (bench_fd < 0 || !buf) {
		free(buf);
		return -errno;
	}
	unlink(path);
	for (size_t off = 0; off < len; off += 1 << 20) {
		for (size_t i = 0; i < (1 << 20) / 8; i++)
			((uint64_t *)buf)[i] = off + i * 8;
		if (pwrite(bench_fd, buf, 1 << 20, (off_t)off) != 1 << 20) {
			free(buf);
			return -EIO;
		}
	}
	free(buf);
	fsync(bench_fd);
	bench_len = len;
	return bench_fd;
}

/* Warm: every page in the page cache. Cold: none of them. */
static void cache_set(int fd, size_t len, bool warm)
{
	static char buf[1 << 20];

	if (!warm) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		return;
	}
	for (size_t off = 0; off < len; off += sizeof(buf))
		if (pread(fd, buf, sizeof(buf), (off_t)off) <= 0)
			break;
}

/* A view of the file: an mmap, or a region of the variant's kind. */
struct view {
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	const char *base;
};

static int view_open(unsigned int v, int fd, size_t len, struct view *w)
{
	struct faultd_file_opts fo = { .size = sizeof(fo), .fd = fd };
	struct faultd_region_opts ro = { .size = sizeof(ro), .length = len };
	struct faultd_pager p;
	int ret;

	memset(w, 0, sizeof(*w));
	if (v == V_MMAP) {
		w->base = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
		return w->base == MAP_FAILED ? -errno : 0;
	}
	w->ctx = bench_ctx(FAULTD_LOCK_REGION, 1);
	if (!w->ctx)
		return -ENOMEM;
	ret = faultd_file_pager(&fo, &p);
	if (ret < 0)
		return ret;
	ro.pager = &p;
	if (v == V_NOFA) {
		ro.fault_around = FAULTD_FAULT_AROUND_OFF;
		ro.readahead_max = FAULTD_READAHEAD_OFF;
	} else if (v == V_BUDGET) {
		ro.flags = FAULTD_REGION_WP;
		ro.budget = len / 4; /* the peak's denominator: file_run() */
	}
	ret = faultd_region_create(w->ctx, &ro, &w->r);
	if (ret < 0) {
		p.release(p.arg);
		return ret;
	}
	w->base = faultd_region_base(w->r);
	return 0;
}

static void view_close(struct view *w, size_t len, struct sample *out)
{
	if (!w->ctx) {
		munmap((void *)w->base, len);
		return;
	}
	faultd_region_destroy(w->r);
	if (out)
		sample_ctx_stats(w->ctx, out);
	faultd_ctx_destroy(w->ctx);
}

static uint64_t seq_read(const char *p, size_t len)
{
	uint64_t sum = 0;

	for (size_t off = 0; off < len; off += 64)
		sum += *(const volatile uint64_t *)(p + off);
	return sum;
}

static uint64_t rand_read(const char *p, size_t len)
{
	uint64_t sum = 0, x = 88172645463325252ull;

	for (unsigned int i = 0; i < rand_reads(len); i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		sum += *(const volatile uint64_t *)(p + (x % (len / 4096)) * 4096);
	}
	return sum;
}

/* The resident memory of a budget variant's region: see the header. */
struct resident_sampler {
	pthread_t thread;
	int fd;
	atomic_bool stop;
	uint64_t peak; /* bytes */
};

static void *sampler_main(void *arg)
{
	struct resident_sampler *s = arg;
	const struct timespec period = { 0, 100 * 1000 };
	struct stat st;

	while (!atomic_load(&s->stop)) {
		if (fstat(s->fd, &st) == 0 &&
		    (uint64_t)st.st_blocks * 512 > s->peak)
			s->peak = (uint64_t)st.st_blocks * 512;
		nanosleep(&period, NULL);
	}
	return NULL;
}

static int sampler_start(struct resident_sampler *s, struct faultd_region *r)
{
	memset(s, 0, sizeof(*s));
	s->fd = faultd_region_memfd(r);
	if (s->fd < 0)
		return s->fd;
	return -pthread_create(&s->thread, NULL, sampler_main, s);
}

static uint64_t sampler_stop(struct resident_sampler *s)
{
	atomic_store(&s->stop, true);
	pthread_join(s->thread, NULL);
	return s->peak;
}

static long faults_now(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt + ru.ru_majflt;
}

/*
 * One timed pass over a fresh view. Returns the seconds it took, or a
 * negative errno; the sum checks that every sequential read saw the file.
 * The budget variant's peak resident memory goes to *peak (bytes).
 */
static double pass(unsigned int v, int fd, size_t len, bool seq, bool warm,
		   double *faults, struct sample *out, uint64_t *peak)
{
	struct resident_sampler smp;
	struct view w;
	uint64_t sum, want = 0;
	long f0;
	double t0, t;
	int ret;

	cache_set(fd, len, warm);
	ret = view_open(v, fd, len, &w);
	if (ret < 0)
		return ret;
	if (v == V_BUDGET && (ret = sampler_start(&smp, w.r)) < 0) {
		view_close(&w, len, NULL);
		return ret;
	}
	f0 = faults_now();
	t0 = bench_now();
	sum = seq ? seq_read(w.base, len) : rand_read(w.base, len);
	t = bench_now() - t0;
	if (faults)
		*faults = (double)(faults_now() - f0);
	if (v == V_BUDGET) {
		uint64_t p = sampler_stop(&smp);

		*peak = p > *peak ? p : *peak;
	}
	view_close(&w, len, out);
	/* The word at byte X of the file holds X (file_get()). */
	for (size_t off = 0; off < len; off += 64)
		want += off;
	if (seq && sum != want)
		return -EIO;
	return t;
}

static int file_run(const struct bench_opts *o, unsigned int v,
		    struct sample *out)
{
	size_t len = o->size_mib << 20;
	double t[4], kfaults = 0;
	uint64_t peak = 0;
	int fd = file_get(len);

	if (fd < 0)
		return fd;
	t[M_SEQ_WARM] = pass(v, fd, len, true, true, &kfaults,
			     v == V_MMAP ? NULL : out, &peak);
	t[M_SEQ_COLD] = pass(v, fd, len, true, false, NULL, NULL, &peak);
	t[M_RAND_WARM] = pass(v, fd, len, false, true, NULL, NULL, &peak);
	t[M_RAND_COLD] = pass(v, fd, len, false, false, NULL, NULL, &peak);
	for (int i = 0; i < 4; i++)
		if (t[i] < 0)
			return (int)t[i];
	out->value[M_SEQ_WARM] = (double)len / t[M_SEQ_WARM] / 1e9;
	out->value[M_SEQ_COLD] = (double)len / t[M_SEQ_COLD] / 1e9;
	out->value[M_RAND_WARM] = rand_reads(len) / t[M_RAND_WARM] / 1e3;
	out->value[M_RAND_COLD] = rand_reads(len) / t[M_RAND_COLD] / 1e3;
	out->value[M_FAULTS] = (v == V_MMAP ? kfaults
					    : (double)out->stats.faults) /
			       (double)o->size_mib;
	out->value[M_AMPLIFICATION] =
		v == V_MMAP ? NAN : (double)out->stats.bytes_read / (double)len;
	out->value[M_PEAK] = v == V_BUDGET ? (double)peak / (double)(len / 4)
					   : NAN;
	return 0;
}

const struct scenario scenario_file = {
	.name = "file",
	.desc = "read a file region sequentially and at random, page cache "
		"warm and cold, against mmap",
	.metrics = { "seq_warm_gb_per_s", "seq_cold_gb_per_s",
		     "rand_warm_kreads_per_s", "rand_cold_kreads_per_s",
		     "faults_per_mib_seq", "read_amplification",
		     "peak_resident_over_budget" },
	.nmetrics = 7,
	.variants = { "mmap", "faultd", "faultd-nofa", "faultd-budget" },
	.nvariants = 4,
	.ratios = { { V_FAULTD, V_MMAP }, { V_NOFA, V_MMAP },
		    { V_BUDGET, V_MMAP }, { V_NOFA, V_FAULTD } },
	.nratios = 4,
	.default_threads = 1,
	.default_size_mib = 256,
	.run = file_run,
};
