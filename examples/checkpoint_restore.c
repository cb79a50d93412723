// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * checkpoint_restore.c - checkpoint a region, restore it lazily in a fresh
 * process through the faultd daemon, and check every byte.
 *
 *   checkpoint_restore [--socket PATH] [--size MIB] [--image PATH]
 *
 * The program fills a region (256 MiB by default) with content, writes
 * its image with faultd_checkpoint(), then runs itself again as a new
 * process that restores the region from the image: through the daemon
 * listening on PATH (start it with `faultd --socket PATH`), or, without
 * --socket, by the library in the process. The new process touches the
 * region at once - the time to first access is how soon a restored
 * program can run - then reads every byte and checks it, and reports the
 * total restore time, the throughput, how many pages came in for faults
 * and how many in the background, and the fault latency.
 * `make demo` starts a daemon on a temporary socket and runs this.
 *
 * Build against an installed libfaultd with:
 *   cc checkpoint_restore.c $(pkg-config --cflags --libs libfaultd) \
 *      -o checkpoint_restore
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <faultd.h>

struct options {
	const char *socket;	/* NULL: restore in the process */
	size_t size;		/* bytes */
	const char *image;
	bool restore;		/* the second process */
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The content of the 8-byte word at offset @off. */
static uint64_t word(uint64_t off)
{
	uint64_t x = off * 0x9e3779b97f4a7c15ull;

	return x ^ (x >> 31);
}

static void die(const char *what, int err)
{
	fprintf(stderr, "checkpoint_restore: %s: %s\n", what, strerror(-err));
	exit(1);
}

/* ------------------------------------------------------------------------
 * The first process: fill, checkpoint, run the second, clean up.
 */

static void checkpoint(const struct options *o)
{
	struct faultd_region_opts ro = { .size = sizeof(ro),
					 .length = o->size,
					 .name = "demo" };
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	struct stat st;
	uint64_t *w;
	double t;
	int ret;

	ret = faultd_ctx_create(NULL, &ctx);
	if (!ret)
		ret = faultd_region_create(ctx, &ro, &r);
	if (ret)
		die("creating the region", ret);
	w = faultd_region_base(r);
	for (size_t i = 0; i < o->size / 8; i++)
		w[i] = word(i * 8);
	t = now();
	ret = faultd_checkpoint(r, o->image, NULL);
	if (ret)
		die(o->image, ret);
	t = now() - t;
	stat(o->image, &st);
	printf("checkpoint: %zu MiB region -> %s (%lld MiB) in %.0f ms\n",
	       o->size >> 20, o->image, (long long)st.st_size >> 20, t * 1e3);
	faultd_ctx_destroy(ctx);
}

static int run_restore(char *self, const struct options *o)
{
	char size[32];
	char *argv[] = { self, "--restore", "--size", size, "--image",
			 (char *)o->image, o->socket ? "--socket" : NULL,
			 (char *)o->socket, NULL };
	int status;
	pid_t pid;

	snprintf(size, sizeof(size), "%zu", o->size >> 20);
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return 1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* ------------------------------------------------------------------------
 * The second process: restore and check.
 */

/* faultd_restore(), retrying while the daemon is still starting up. */
static int restore(struct faultd_ctx *ctx, const struct options *o,
		   struct faultd_region **r)
{
	struct faultd_restore_opts ro = {
		.size = sizeof(ro),
		.flags = o->socket ? FAULTD_RESTORE_DAEMON : 0,
		.socket = o->socket,
		.name = "demo",
	};
	double deadline = now() + 5;
	int ret;

	do {
		ret = faultd_restore(ctx, o->image, &ro, r);
		if (ret != -ENOENT && ret != -ECONNREFUSED)
			break;
		usleep(20000);
	} while (now() < deadline);
	return ret;
}

static size_t check_all(const uint64_t *w, size_t size)
{
	size_t bad = 0;

	for (size_t i = 0; i < size / 8; i++)
		bad += w[i] != word(i * 8);
	return bad;
}

static int restored(const struct options *o)
{
	struct faultd_restore_progress p = { .size = sizeof(p) };
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	double t0, t_first, t_read, t_all;
	volatile uint64_t first;
	size_t bad;
	int ret;

	ret = faultd_ctx_create(NULL, &ctx);
	if (ret)
		die("faultd_ctx_create", ret);
	t0 = now();
	ret = restore(ctx, o, &r);
	if (ret)
		die(o->socket ? o->socket : o->image, ret);
	first = *(const uint64_t *)faultd_region_base(r);
	t_first = now() - t0;
	bad = check_all(faultd_region_base(r), o->size) + (first != word(0));
	t_read = now() - t0;
	faultd_restore_wait(r);
	t_all = now() - t0;
	faultd_restore_progress(r, &p);
	printf("restore (%s, fresh process):\n"
	       "  first access after %.2f ms\n"
	       "  every byte read and checked after %.0f ms (%.2f GB/s), "
	       "all in after %.0f ms\n"
	       "  pages: %llu for faults, %llu in the background; "
	       "%llu faults, latency p50 %.1f us, p99 %.1f us%s\n"
	       "  content: %s\n",
	       o->socket ? "through faultd" : "in the process",
	       t_first * 1e3, t_read * 1e3, (double)o->size / t_read / 1e9,
	       t_all * 1e3, (unsigned long long)p.pages_urgent,
	       (unsigned long long)p.pages_background,
	       (unsigned long long)p.faults, (double)p.p50_ns / 1e3,
	       (double)p.p99_ns / 1e3,
	       p.daemon_died ? " (the daemon died: finished here)" : "",
	       bad ? "WRONG" : "every byte right");
	faultd_ctx_destroy(ctx);
	return bad ? 1 : 0;
}

static int parse(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "size", required_argument, NULL, 'm' },
		{ "image", required_argument, NULL, 'i' },
		{ "restore", no_argument, NULL, 'r' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "s:m:i:", longopts, NULL)) != -1) {
		switch (c) {
		case 's': o->socket = optarg; break;
		case 'm': o->size = (size_t)strtoul(optarg, NULL, 0) << 20; break;
		case 'i': o->image = optarg; break;
		case 'r': o->restore = true; break;
		default: return -1;
		}
	}
	return o->size ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct options o = { .size = 256ul << 20 };
	char tmp[] = "/var/tmp/faultd-demo-XXXXXX";
	int fd, ret;

	if (parse(argc, argv, &o) < 0) {
		fprintf(stderr, "usage: checkpoint_restore [--socket PATH] "
				"[--size MIB] [--image PATH]\n");
		return 2;
	}
	if (o.restore)
		return restored(&o);
	if (!o.image) {
		fd = mkstemp(tmp);
		if (fd < 0)
			die(tmp, -errno);
		close(fd);
		o.image = tmp;
	}
	checkpoint(&o);
	ret = run_restore(argv[0], &o);
	if (o.image == tmp)
		unlink(tmp);
	return ret;
}
