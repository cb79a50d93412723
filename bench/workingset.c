// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * workingset.c - scenario workingset: a restore whose program touches a
 * fixed random 10 % of the image's pages, in random order, from 2
 * threads, and then stops; how much sooner a recorded working set
 * (faultd-working-set(5)) gets it there.
 *
 * The image: --size MiB (default 1024) of pseudo-random content. Restores
 * are in the process (faultd_restore(), FAULTD_RESTORE_LAZY: nothing but
 * the faults and the set come in). Each variant runs with the image's
 * page cache warm and cold (written back and dropped with
 * posix_fadvise(DONTNEED) first).
 *
 * Variants:
 *   on-demand      today's lazy restore (64 KiB fault-around)
 *   replay         the set a first run recorded (once: a recording serves
 *                  its faults a page at a time, so that the set is the
 *                  pages touched), loaded before the program runs
 *                  (FAULTD_RESTORE_WSET_FIRST, as REAP does)
 *   replay-merged  the same with a set merged (--min-count 2) from 3
 *                  recordings of 3 slightly different sets (5 % of the
 *                  pages of each changed), made once; the program touches
 *                  the base set
 *   replay-concurrent  the recorded set replayed while the program runs
 *                  (faults first)
 *   daemon-on-demand, daemon-replay  the same through the faultd daemon
 *                  (started by the bench, as scenario restore does), the
 *                  set replayed by its push threads while the program
 *                  runs (the set recorded in the process: one format, one
 *                  image identity); warm only. Faults are the daemon's
 *                  report, read 300 ms after the touch; no read rates.
 *   seq-read       one sequential read (pread, 4 MiB at a time) of as
 *                  many bytes of the image's data as replay read, each
 *                  64 KiB checked by its CRC32C as the replay's: the limit
 *                  of replay's reading
 * Metrics:
 *   faults         faults while the program touches its set
 *   ws_ms          from the call of faultd_restore() to every page of the
 *                  set touched (seq-read: its read's time)
 *   read_gb_per_s  replay: bytes it read / its time, installs included;
 *                  seq-read: bytes / its time
 *   io_gb_per_s    replay: bytes / the time in its reads (per thread, of
 *                  its 2); seq-read: as read_gb_per_s
 *   p99_ns         demand-fault latency of pages outside the set: during
 *                  the replay (replay-concurrent), idle after the touch
 *                  (on-demand)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench.h"
#include "proto.h"
#include "wset.h"

enum { V_OD, V_REP, V_MERGED, V_CONC, V_SEQ, V_COLD };
#define KINDS V_COLD	/* each kind warm, then cold */
/* Then, warm only, through the daemon. */
enum { V_D_OD = 2 * KINDS, V_D_REP, V_NR };
enum { M_FAULTS, M_WS, M_READ, M_IO, M_P99 };

#define PAGE 4096ul
#define EVERY 10	/* 1 page in EVERY is in the set */
#define PROBES 300	/* fault-latency samples */
#define SEQ_READ (4ul << 20)

static char image[64], rec[64], merged[64], scratch[64];
static size_t image_len;
static uint64_t *set;		/* the base set's pages, shuffled */
static size_t set_n;
static uint64_t *probes;	/* pages in blocks with no page of the set */
static size_t probes_n;
static bool have_merged, have_rec;
static uint64_t replay_bytes[2]; /* what the last replay read: warm, cold */
static uint32_t crc_sink;	/* keeps seq-read's checks from being elided */
static struct bench_daemon daemon_;

static void files_remove(void)
{
	const char *f[] = { image, rec, merged, scratch };

	for (size_t i = 0; i < 4; i++)
		if (f[i][0])
			unlink(f[i]);
	bench_daemon_stop(&daemon_);
}

static uint64_t xorshift(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* 1 page in EVERY, chosen by @seed, into @out (shuffled). */
static size_t pick(size_t pages, uint64_t seed, uint64_t *out)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	size_t n = 0;

	for (size_t p = 0; p < pages; p++)
		if (xorshift(&x) % EVERY == 0)
			out[n++] = p;
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = xorshift(&x) % (i + 1);
		uint64_t t = out[i];

		out[i] = out[j];
		out[j] = t;
	}
	return n;
}

/* Probes: one page of each block that holds no page of the set. */
static int probes_make(size_t pages)
{
	uint8_t *hit = calloc(pages / 16 + 1, 1);

	probes = calloc(pages / 16 + 1, sizeof(*probes));
	if (!hit || !probes) {
		free(hit);
		return -ENOMEM;
	}
	for (size_t i = 0; i < set_n; i++)
		hit[set[i] / 16] = 1;
	for (size_t b = 0; b < pages / 16 && probes_n < PROBES; b += 7)
		if (!hit[b])
			probes[probes_n++] = b * 16 + 3;
	free(hit);
	return 0;
}

static int image_get(size_t len)
{
	struct faultd_region_opts o = { .size = sizeof(o), .length = len };
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	uint64_t *w, x = 0x2545f4914f6cdd1dull;
	int ret;

	if (image_len == len)
		return 0;
	atexit(files_remove);
	ret = bench_tmp_file(image, "ws-image");
	if (!ret)
		ret = bench_tmp_file(rec, "ws-rec");
	if (!ret)
		ret = bench_tmp_file(merged, "ws-merged");
	if (!ret)
		ret = bench_tmp_file(scratch, "ws-scratch");
	set = calloc(len / PAGE / EVERY * 2 + 16, sizeof(*set));
	ctx = bench_ctx(FAULTD_LOCK_REGION, 1);
	if (ret || !set || !ctx) {
		faultd_ctx_destroy(ctx);
		return ret ? ret : -ENOMEM;
	}
	set_n = pick(len / PAGE, 1, set);
	ret = probes_make(len / PAGE);
	if (!ret)
		ret = faultd_region_create(ctx, &o, &r);
	if (!ret) {
		w = faultd_region_base(r);
		for (size_t i = 0; i < len / 8; i++)
			w[i] = xorshift(&x);
		ret = faultd_checkpoint(r, image, NULL);
	}
	faultd_ctx_destroy(ctx);
	image_len = ret ? 0 : len;
	return ret;
}

/* Cold: the image written back and out of the page cache. */
static void cache_drop(void)
{
	int fd = open(image, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	fdatasync(fd);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
}

/* ------------------------------------------------------------------------
 * The program: 2 threads touch the set; a probe samples fault latency.
 */

struct toucher {
	const char *base;
	const uint64_t *pages;
	size_t n;
	unsigned long sum;
};

static void *touch(void *arg)
{
	struct toucher *t = arg;

	for (size_t i = 0; i < t->n; i++)
		t->sum += *(const volatile char *)(t->base + t->pages[i] * PAGE);
	return NULL;
}

struct prober {
	const char *base;
	struct faultd_region *r;
	bool during_replay;	/* stop when the replay is over */
	size_t n;		/* samples (each a fault) */
	struct lat_hist h;
};

static bool replay_over(struct faultd_region *r)
{
	struct faultd_restore_progress p = { .size = sizeof(p) };

	return !faultd_restore_progress(r, &p) && p.replay_ns;
}

static void *probe(void *arg)
{
	struct prober *pr = arg;

	for (size_t i = 0; i < probes_n; i++) {
		uint64_t t0;

		if (pr->during_replay && replay_over(pr->r))
			break;
		t0 = now_ns();
		(void)*(const volatile char *)(pr->base + probes[i] * PAGE);
		lat_record(&pr->h, now_ns() - t0);
		pr->n++;
	}
	return NULL;
}

/* The faults of @r so far: the library's, and the daemon's last report. */
static uint64_t region_faults(struct faultd_region *r)
{
	struct faultd_restore_progress p = { .size = sizeof(p) };

	faultd_restore_progress(r, &p);
	return p.faults;
}

/*
 * Touch the base set from 2 threads, and probe the fault latency: during
 * the replay alongside (@replay), else after the touch (not while
 * @recording: the probes would be in the set).
 */
static void program(struct faultd_region *r, bool replay, bool daemon,
		    bool recording, struct sample *out, double t0)
{
	const char *base = faultd_region_base(r);
	struct toucher t[2] = {
		{ base, set, set_n / 2 },
		{ base, set + set_n / 2, set_n - set_n / 2 },
	};
	struct prober *pr = calloc(1, sizeof(*pr));
	double p50, p99 = 0;
	pthread_t th[2], pt;
	uint64_t f0;

	if (!pr)
		return;
	*pr = (struct prober){ base, r, replay };
	f0 = region_faults(r);
	if (replay)
		pthread_create(&pt, NULL, probe, pr);
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, touch, &t[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	out->value[M_WS] = (bench_now() - t0) * 1e3;
	if (replay)
		pthread_join(pt, NULL);
	if (daemon) /* its report comes every 100 ms */
		usleep(300000);
	out->value[M_FAULTS] = (double)(region_faults(r) - f0);
	if (replay) /* the probe's faults are not the program's */
		out->value[M_FAULTS] -= (double)pr->n;
	else if (!recording) /* idle: the latency of a quiet restore */
		probe(pr);	/* (not in a recording: not the program's) */
	lat_percentiles(&pr->h, 1, sizeof(*pr), &p50, &p99);
	out->value[M_P99] = p99;
	free(pr);
}

/*
 * One lazy restore: record into @record, replay @set_path (either NULL),
 * before the program runs (@first) or while it runs.
 */
static int restore_once(const char *record, const char *set_path, bool first,
			bool daemon, struct sample *out, uint64_t *bytes)
{
	struct faultd_restore_opts o = {
		.size = sizeof(o),
		.flags = FAULTD_RESTORE_LAZY |
			 (first ? FAULTD_RESTORE_WSET_FIRST : 0) |
			 (daemon ? FAULTD_RESTORE_DAEMON : 0),
		.socket = daemon_.sock, .record_working_set = record,
		.working_set = set_path };
	struct faultd_restore_progress p = { .size = sizeof(p) };
	struct faultd_ctx *ctx = bench_ctx(FAULTD_LOCK_REGION, 2);
	struct faultd_region *r;
	double t0 = bench_now();
	int ret = ctx ? faultd_restore(ctx, image, &o, &r) : -ENOMEM;

	if (!ret) {
		program(r, set_path && !first && !daemon, daemon, record,
			out, t0);
		while (set_path && !daemon && !replay_over(r))
			usleep(1000);
		faultd_restore_progress(r, &p);
		if (set_path && p.replay_ns)
			out->value[M_READ] = (double)p.replay_bytes /
					     (double)p.replay_ns;
		if (set_path && p.replay_read_ns)
			out->value[M_IO] = (double)p.replay_bytes /
					   ((double)p.replay_read_ns / 2);
		if (bytes)
			*bytes = p.replay_bytes;
		sample_ctx_stats(ctx, out);
	}
	faultd_ctx_destroy(ctx);
	return ret;
}

/* ------------------------------------------------------------------------
 * The merged set: 3 recordings of 3 sets that differ by 5 % each.
 */

/* The base set with 1 page in 20 swapped for another, by @seed. */
static void perturb(uint64_t *out, uint64_t seed)
{
	uint64_t x = seed * 0xbf58476d1ce4e5b9ull + 7;

	memcpy(out, set, set_n * sizeof(*out));
	for (size_t i = 0; i < set_n; i++)
		if (xorshift(&x) % 20 == 0)
			out[i] = xorshift(&x) % (image_len / PAGE);
}

static int record_perturbed(uint64_t seed, const char *path)
{
	uint64_t *save = set, *mine = malloc(set_n * sizeof(*mine));
	struct sample junk = { 0 };
	int ret;

	if (!mine)
		return -ENOMEM;
	perturb(mine, seed);
	set = mine;
	ret = restore_once(path, NULL, false, false, &junk, NULL);
	set = save;
	free(mine);
	return ret;
}

/* The set of the base set, recorded by a first run, once. */
static int rec_get(void)
{
	struct sample junk = { 0 };
	int ret;

	if (have_rec)
		return 0;
	ret = restore_once(rec, NULL, false, false, &junk, NULL);
	have_rec = !ret;
	return ret;
}

static int merged_get(void)
{
	struct wset in[3], m;
	const char *why;
	char path[3][80];
	int ret = 0, got = 0;

	if (have_merged)
		return 0;
	for (int k = 0; k < 3 && !ret; k++) {
		snprintf(path[k], sizeof(path[k]), "%s.%d", scratch, k);
		ret = record_perturbed((uint64_t)k + 2, path[k]);
		if (!ret)
			ret = wset_load(path[k], NULL, &in[k], &why);
		got += !ret;
		unlink(path[k]);
	}
	if (!ret)
		ret = wset_merge(in, 3, 2, &m, &why);
	if (!ret) {
		ret = wset_save(merged, &m);
		wset_free(&m);
	}
	while (got)
		wset_free(&in[--got]);
	have_merged = !ret;
	return ret;
}

/* ------------------------------------------------------------------------
 * The limit: one sequential read of the same bytes.
 */

static int seq_read(uint64_t bytes, struct sample *out)
{
	char *buf = aligned_alloc(4096, SEQ_READ);
	int fd = open(image, O_RDONLY | O_CLOEXEC);
	double t0 = bench_now(), t;
	uint64_t done = 0;
	int ret = 0;

	if (!buf || fd < 0 || !bytes) {
		ret = !bytes ? -ENODATA : -ENOMEM;
		goto out;
	}
	while (done < bytes) {
		size_t l = bytes - done < SEQ_READ ? bytes - done : SEQ_READ;
		ssize_t n = pread(fd, buf, l, (off_t)(IMG_BLOCK + done));

		if (n <= 0) {
			ret = -EIO;
			break;
		}
		for (ssize_t at = 0; at + (ssize_t)IMG_BLOCK <= n;
		     at += (ssize_t)IMG_BLOCK)
			crc_sink ^= crc32c(0, buf + at, IMG_BLOCK);
		done += (uint64_t)n;
	}
	t = bench_now() - t0;
	out->value[M_WS] = t * 1e3;
	out->value[M_READ] = out->value[M_IO] = (double)done / t / 1e9;
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	return ret;
}

static int daemon_run(unsigned int v, struct sample *out)
{
	int ret = rec_get();

	if (ret)
		return ret;
	if (bench_daemon_start(&daemon_, "ws") < 0) {
		out->skipped = "no faultd daemon next to faultd-bench "
			       "(set FAULTD_DAEMON)";
		return 0;
	}
	return restore_once(NULL, v == V_D_REP ? rec : NULL, false, true, out,
			    NULL);
}

static int workingset_run(const struct bench_opts *o, unsigned int v,
			  struct sample *out)
{
	bool cold = v >= KINDS && v < V_D_OD;
	unsigned int kind = cold ? v - KINDS : v;
	int ret = image_get(o->size_mib << 20);

	if (!ret && v >= V_D_OD)
		return daemon_run(v, out);
	if (!ret && kind == V_MERGED)
		ret = merged_get();
	if (!ret && (kind == V_REP || kind == V_CONC))
		ret = rec_get();
	if (ret)
		return ret;
	if (cold)
		cache_drop();
	switch (kind) {
	case V_OD:
		return restore_once(NULL, NULL, false, false, out, NULL);
	case V_REP:
		return restore_once(NULL, rec, true, false, out,
				    &replay_bytes[cold]);
	case V_MERGED:
		return restore_once(NULL, merged, true, false, out, NULL);
	case V_CONC:
		return restore_once(NULL, rec, false, false, out, NULL);
	default:
		return seq_read(replay_bytes[cold], out);
	}
}

#define COLD(v) ((v) + KINDS)

const struct scenario scenario_workingset = {
	.name = "workingset",
	.desc = "2 threads touch a random 10 % of a restored image: on "
		"demand, with a recorded working set (first, or while they "
		"run), with a merged one, and a sequential read of the same "
		"bytes",
	.metrics = { "faults", "ws_ms", "read_gb_per_s", "io_gb_per_s",
		     "p99_ns" },
	.nmetrics = 5,
	.variants = { "on-demand", "replay", "replay-merged",
		      "replay-concurrent", "seq-read", "on-demand-cold",
		      "replay-cold", "replay-merged-cold",
		      "replay-concurrent-cold", "seq-read-cold",
		      "daemon-on-demand", "daemon-replay" },
	.nvariants = V_NR,
	.ratios = { { V_REP, V_OD }, { V_MERGED, V_OD }, { V_CONC, V_OD },
		    { V_REP, V_SEQ }, { COLD(V_REP), COLD(V_OD) },
		    { COLD(V_MERGED), COLD(V_OD) },
		    { COLD(V_CONC), COLD(V_OD) },
		    { COLD(V_REP), COLD(V_SEQ) }, { V_D_REP, V_D_OD } },
	.nratios = 9,
	.default_threads = 2,
	.default_size_mib = 1024,
	.run = workingset_run,
};
