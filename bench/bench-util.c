// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * bench-util.c - helpers for the scenarios: threads started together,
 * latency histograms, a context per variant, the library's counters; and
 * the options faultd-bench run and sweep share.
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "proto.h"

int bench_opts_parse(int c, const char *arg, struct bench_opts *o)
{
	switch (c) {
	case 's': o->seconds = atof(arg); return 0;
	case 'm': o->size_mib = (size_t)atol(arg); return 0;
	case 'r': o->rounds = (unsigned int)atoi(arg); return 0;
	case 'j': o->json = true; return 0;
	case 'p': return place_parse(arg, o);
	case 'H': return place_parse_handlers(arg, o);
	}
	return -ENOENT;
}

unsigned int bench_cpus(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return 1;
	return (unsigned int)CPU_COUNT(&set);
}

double bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int run_threads(unsigned int n, void *(*fn)(void *), void *args,
		size_t stride)
{
	pthread_t t[BENCH_MAX_THREADS];
	unsigned int started;
	int ret = 0;

	if (n > BENCH_MAX_THREADS)
		return -EINVAL;
	for (started = 0; started < n; started++) {
		ret = -pthread_create(&t[started], NULL, fn,
				      (char *)args + started * stride);
		if (ret)
			break;
	}
	for (unsigned int i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	return ret;
}

void lat_percentiles(const struct lat_hist *h, unsigned int n, size_t stride,
		     double *p50, double *p99)
{
	struct faultd_stats s = { .size = sizeof(s) };
	struct stat_block acc;

	memset(&acc, 0, sizeof(acc));
	for (unsigned int i = 0; i < n; i++)
		stat_sum(&acc, (const struct stat_block *)((const char *)h +
							    i * stride));
	stat_export(&s, &acc);
	*p50 = (double)faultd_stats_latency(&s, 50);
	*p99 = (double)faultd_stats_latency(&s, 99);
}

void sample_ctx_stats(struct faultd_ctx *ctx, struct sample *out)
{
	out->stats.size = sizeof(out->stats);
	if (faultd_ctx_stats(ctx, &out->stats) == 0)
		out->has_stats = true;
}

#define POOL "/sys/kernel/mm/hugepages/hugepages-2048kB/"

static unsigned long pool_read(const char *what)
{
	unsigned long v = 0;
	FILE *f = fopen(what, "r");

	if (f && fscanf(f, "%lu", &v) != 1)
		v = 0;
	if (f)
		fclose(f);
	return v;
}

static bool pool_set(unsigned long n)
{
	FILE *f = fopen(POOL "nr_hugepages", "w");

	if (!f)
		return false;
	fprintf(f, "%lu\n", n);
	return fclose(f) == 0;
}

static unsigned long pool_before;
static bool pool_changed;

static void pool_restore(void)
{
	if (pool_changed)
		pool_set(pool_before);
}

int bench_hugepages(unsigned long n)
{
	unsigned long free_pages = pool_read(POOL "free_hugepages");

	if (free_pages >= n)
		return 0;
	if (!pool_changed) {
		pool_before = pool_read(POOL "nr_hugepages");
		atexit(pool_restore);
		pool_changed = true;
	}
	pool_set(pool_read(POOL "nr_hugepages") + n - free_pages);
	return pool_read(POOL "free_hugepages") >= n ? 0 : -ENOMEM;
}

struct faultd_ctx *bench_ctx(unsigned int lock_mode, unsigned int handlers)
{
	struct faultd_ctx_opts o = {
		.size = sizeof(o),
		.lock_mode = lock_mode,
		.handler_threads = handlers,
	};
	struct faultd_ctx *ctx;
	int ret = faultd_ctx_create(&o, &ctx);

	if (ret < 0) {
		fprintf(stderr, "faultd_ctx_create: %s\n", strerror(-ret));
		return NULL;
	}
	return ctx;
}

/*
 * bench_daemon_start() - the faultd daemon of the daemon variants, started
 * once into @d (a second call finds it there): the one next to this
 * program (../daemon/faultd) or $FAULTD_DAEMON, listening on a socket of
 * its own named after @tag. It dies with its parent. Returns 0, -ENOENT
 * (no daemon there), -ETIMEDOUT (it did not listen within 5 s) or -errno.
 */
int bench_daemon_start(struct bench_daemon *d, const char *tag)
{
	char exe[PATH_MAX], *env = getenv("FAULTD_DAEMON");
	double deadline;
	ssize_t n;
	int s;

	if (d->pid > 0)
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
	snprintf(d->sock, sizeof(d->sock), "/tmp/faultd-bench-%s-%d.sock", tag,
		 getpid());
	d->pid = fork();
	if (d->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl(exe, exe, "--socket", d->sock, (char *)NULL);
		_exit(127);
	}
	for (deadline = bench_now() + 5; bench_now() < deadline;) {
		s = proto_connect(d->sock);
		if (s >= 0) {
			close(s);
			return 0;
		}
		usleep(10000);
	}
	return -ETIMEDOUT;
}

/* bench_daemon_stop() - the daemon of @d, if started, is told to stop. */
void bench_daemon_stop(struct bench_daemon *d)
{
	if (d->pid > 0)
		kill(d->pid, SIGTERM);
}

/* bench_tmp_file() - a new empty file in /var/tmp named after @what,
 * its name into @path (64 bytes, mode 0600). Returns 0 or -errno. */
int bench_tmp_file(char *path, const char *what)
{
	int fd;

	snprintf(path, 64, "/var/tmp/faultd-bench-%s-XXXXXX", what);
	fd = mkstemp(path);
	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}
