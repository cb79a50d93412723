// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * nbd-bench.c - how fast the NBD source (daemon/sources/nbd.h) reads an
 * export sequentially over the veth pair of netns.h, against nbdcopy of
 * the same export to a null sink (nbdcopy URI null:), the limit: nbdkit's
 * file plugin over a fully allocated file, with 0 and 1 ms added to every
 * read (the delay filter). Readers as the engine's push reads: runs of
 * --run bytes, one after the other, by --threads threads taking
 * alternate runs, optionally with willneed() of the runs ahead.
 *
 *   flock /tmp/faultd-bench.lock nbd-bench [--size MiB] [--runs N]
 *
 * Prints one line per measurement: what, added latency, median MB/s of
 * the runs and their spread, and the client's CPU time per GB read (the
 * source's process, or nbdcopy's). The runs of the variants alternate,
 * so that a busy spell of the machine falls on all of them. Needs root
 * (network namespaces).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nbd.h"
#include "netns.h"
#include "servers.h"

#define MIB (1ull << 20)

static uint64_t size_mib = 512;
static int runs = 3;
static char dir[] = "/var/tmp/faultd-nbd-bench-XXXXXX";
static char img[128], uri[128];

/* One run: seconds (< 0: failed) and the client's CPU seconds. */
struct result {
	double s, cpu;
};

static double cpu_s(int who)
{
	struct rusage ru;

	getrusage(who, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int mkimage(void)
{
	char *b = malloc(MIB);
	int fd = open(img, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (!b || fd < 0)
		return -1;
	for (uint64_t i = 0; i < size_mib; i++) {
		for (size_t k = 0; k < MIB / 8; k++)
			((uint64_t *)b)[k] = (i * MIB / 8 + k) * 0x9e3779b97f4a7c15ull | 1;
		if (write(fd, b, MIB) != (ssize_t)MIB)
			return -1;
	}
	free(b);
	return close(fd);
}

/* nbdcopy of the export to null:. */
static struct result run_nbdcopy(void)
{
	double t0 = now_s(), c0 = cpu_s(RUSAGE_CHILDREN);
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		execlp("nbdcopy", "nbdcopy", uri, "null:", (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
	    WEXITSTATUS(st))
		return (struct result){ -1, 0 };
	return (struct result){ now_s() - t0, cpu_s(RUSAGE_CHILDREN) - c0 };
}

struct job {
	struct source *s;
	uint64_t run;
	unsigned int nthreads, me, ahead;
	int err;
	pthread_t t;
};

static void *job_main(void *arg)
{
	struct job *j = arg;
	char *b = malloc(j->run);

	for (uint64_t off = j->me * j->run; off < j->s->size && !j->err;
	     off += j->nthreads * j->run) {
		uint64_t len = j->s->size - off < j->run ? j->s->size - off
							 : j->run;

		if (j->ahead)
			source_willneed(j->s, off + j->nthreads * j->run,
					j->ahead * j->run);
		if (source_read(j->s, off, b, len) != (ssize_t)len)
			j->err = -EIO;
	}
	free(b);
	return NULL;
}

/* The source reading it all. */
static struct result run_source(const struct src_nbd_opts *o, uint64_t run,
				unsigned int threads, unsigned int ahead)
{
	double t0 = now_s(), c0 = cpu_s(RUSAGE_SELF), t;
	struct job j[8];
	struct source *s;
	char why[256];
	int err = 0;

	if (src_nbd_open(uri, 0, 4096, o, &s, why, sizeof(why))) {
		fprintf(stderr, "open: %s\n", why);
		return (struct result){ -1, 0 };
	}
	for (unsigned int i = 0; i < threads; i++) {
		j[i] = (struct job){ .s = s, .run = run, .nthreads = threads,
				     .me = i, .ahead = ahead };
		pthread_create(&j[i].t, NULL, job_main, &j[i]);
	}
	for (unsigned int i = 0; i < threads; i++) {
		pthread_join(j[i].t, NULL);
		err |= j[i].err;
	}
	t = now_s() - t0;
	source_destroy(s);
	return (struct result){ err ? -1 : t, cpu_s(RUSAGE_SELF) - c0 };
}

static int cmp_s(const void *a, const void *b)
{
	double x = ((const struct result *)a)->s;
	double y = ((const struct result *)b)->s;

	return x < y ? -1 : x > y;
}

static void report(const char *what, int delay, struct result *t)
{
	double gb = (double)size_mib * MIB / 1e9, cpu = 0;

	qsort(t, (size_t)runs, sizeof(*t), cmp_s);
	if (t[0].s < 0) {
		printf("%-46s %d ms  failed\n", what, delay);
		return;
	}
	for (int r = 0; r < runs; r++)
		cpu += t[r].cpu / runs;
	printf("%-46s %d ms  %7.1f MB/s  (%.1f-%.1f)  cpu %.2f s/GB\n",
	       what, delay, gb * 1e3 / t[runs / 2].s,
	       gb * 1e3 / t[runs - 1].s, gb * 1e3 / t[0].s, cpu / gb);
	fflush(stdout);
}

struct variant {
	const char *name;
	struct src_nbd_opts o;
	uint64_t run;
	unsigned int threads, ahead;
};

static const struct variant variants[] = {
	{ "source 1 thread, 4 MiB runs", { 0 }, 4 * MIB, 1, 0 },
	{ "source 1 thread, 4 MiB runs, willneed 8 ahead", { 0 }, 4 * MIB,
	  1, 8 },
	{ "source 2 threads, 4 MiB runs", { 0 }, 4 * MIB, 2, 0 },
	{ "source 2 threads, 16 MiB runs, 32 deep",
	  { .conns = 4, .depth = 32 }, 16 * MIB, 2, 0 },
	{ "source 2 threads, 4 MiB runs, 1 MiB chunks",
	  { .chunk = 1 << 20 }, 4 * MIB, 2, 4 },
};

#define NV (sizeof(variants) / sizeof(variants[0]))

static int measure(struct netns *ns, int delay)
{
	const char *args[12] = { "-i", NETNS_SERVER, "-p", "10809" };
	struct result copy[16], src[NV][16];
	char err[256], rd[32];
	struct server srv;
	size_t n = 4;

	if (delay) {
		snprintf(rd, sizeof(rd), "rdelay=%dms", delay);
		args[n++] = "--filter=delay";
	}
	args[n++] = "file";
	args[n++] = img;
	if (delay)
		args[n++] = rd;
	args[n] = NULL;
	if (nbdkit_start(&srv, ns, dir, "nbdkit", args, err, sizeof(err))) {
		fprintf(stderr, "nbdkit: %s\n", err);
		return -1;
	}
	for (int r = 0; r < runs; r++) {
		copy[r] = run_nbdcopy();
		for (size_t v = 0; v < NV; v++) {
			struct src_nbd_opts o = variants[v].o;

			o.size = sizeof(o);
			src[v][r] = run_source(&o, variants[v].run,
					       variants[v].threads,
					       variants[v].ahead);
		}
	}
	report("nbdcopy URI null:", delay, copy);
	for (size_t v = 0; v < NV; v++)
		report(variants[v].name, delay, src[v]);
	server_free(&srv);
	return 0;
}

int main(int argc, char **argv)
{
	struct netns ns;
	char err[256];
	int ret = 1;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--size"))
			size_mib = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--runs"))
			runs = atoi(argv[i + 1]);
	}
	if (runs < 1 || runs > 16 || !size_mib)
		return 2;
	if (!mkdtemp(dir))
		return 1;
	snprintf(img, sizeof(img), "%s/export.img", dir);
	snprintf(uri, sizeof(uri), "nbd://%s:10809/", NETNS_SERVER);
	if (netns_make(&ns, err, sizeof(err))) {
		fprintf(stderr, "nbd-bench: %s\n", err);
		goto rm_dir;
	}
	if (mkimage()) {
		fprintf(stderr, "nbd-bench: writing %s failed\n", img);
		goto end_ns;
	}
	printf("%llu MiB over a veth pair, %d runs each\n",
	       (unsigned long long)size_mib, runs);
	ret = measure(&ns, 0) || measure(&ns, 1);
end_ns:
	netns_end(&ns);
rm_dir:
	unlink(img);
	snprintf(err, sizeof(err), "rm -rf %s", dir);
	if (system(err))
		ret = 1;
	return ret;
}
