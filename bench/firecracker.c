// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * firecracker.c - scenario firecracker: a snapshot restore as Firecracker
 * makes it with the Uffd memory backend, served by each variant.
 *
 * Each round, for each variant: the handler starts and is ready (the
 * example has mapped its memory file, faultd firecracker has said
 * READY=1); then the guest is restored the way Firecracker restores it
 * (anonymous private memory, 2 MiB-aligned, a userfaultfd of its own with
 * REMOVE events, every page registered for missing faults, one sendmsg()
 * of the regions' JSON with the userfaultfd) and --threads threads
 * (default 2) touch every page once, one word each, in one random order
 * they share. The guest then closes its socket and userfaultfd and unmaps
 * its memory, and the handler must exit 0.
 *
 * The memory file: --size MiB (default 512) of pseudo-random data, no
 * holes (what a handler gains from holes is not measured here), page cache
 * warm.
 *
 * Variants:
 *   fc-example          Firecracker's example on-demand handler
 *                       (fc-example.c): one thread, one page per fault
 *   faultd-fc           faultd firecracker (next to faultd-bench, or
 *                       $FAULTD_DAEMON): handler threads, fault-around
 *   faultd-fc-prefetch  the same with --prefetch
 * Metrics (t0: the handshake's sendmsg() returned):
 *   first_fault_ms  t0 to the end of the first touch
 *   all_in_ms       t0 to the end of the last touch: every page is in
 *   gb_per_s        the memory's bytes / all_in_ms
 *   p99_ns          of the touches of pages that were not in just before
 *                   (mincore(), asked for one touch in 16: toucher_main()):
 *                   faults, during the push with --prefetch
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "compat.h"
#include "fc-example.h"
#include "fc-guest.h"

enum { V_EXAMPLE, V_FC, V_FC_PREFETCH };
enum { M_FIRST, M_ALL_IN, M_GBPS, M_P99 };

#define READY_MS 60000
#define MAX_GUEST_THREADS 64

static struct {
	char dir[64];		/* scratch: the memory file, the sockets */
	char mem[96], sock[96], notify[96];
	uint64_t size;		/* of the memory file made */
	uint64_t *order;	/* the touch order of its pages */
	const char *skipped;
} fb;

static void cleanup(void)
{
	if (fb.dir[0]) {
		unlink(fb.mem);
		unlink(fb.sock);
		unlink(fb.notify);
		rmdir(fb.dir);
	}
}

/* The memory file and the touch order, made once for the run. */
static int mem_file_get(uint64_t size)
{
	uint64_t pages = size / 4096;
	int ret;

	if (fb.size == size)
		return 0;
	if (fb.size)
		return -EINVAL;
	strcpy(fb.dir, "/tmp/faultd-bench-fc-XXXXXX");
	if (!mkdtemp(fb.dir))
		return -errno;
	atexit(cleanup);
	snprintf(fb.mem, sizeof(fb.mem), "%s/mem", fb.dir);
	snprintf(fb.sock, sizeof(fb.sock), "%s/sock", fb.dir);
	snprintf(fb.notify, sizeof(fb.notify), "%s/notify", fb.dir);
	ret = fc_mem_file_write(fb.mem, size);
	fb.order = malloc(pages * sizeof(*fb.order));
	if (ret || !fb.order)
		return ret ? ret : -ENOMEM;
	for (uint64_t i = 0; i < pages; i++)
		fb.order[i] = i;
	for (uint64_t i = 0; i + 1 < pages; i++) {
		uint64_t j = i + fc_mix(~i) % (pages - i), x = fb.order[i];

		fb.order[i] = fb.order[j];
		fb.order[j] = x;
	}
	fb.size = size;
	return 0;
}

/* ------------------------------------------------------------------------
 * The handlers.
 */

static int listen_stream(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	strcpy(a.sun_path, path);
	unlink(path);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(fd, 16)) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	return fd;
}

/* Wait up to READY_MS for @fd to be readable; read what is there. */
static int wait_readable(int fd, char *buf, size_t len)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t n;

	if (poll(&p, 1, READY_MS) != 1)
		return -ETIMEDOUT;
	n = read(fd, buf, len - 1);
	if (n <= 0)
		return -EIO;
	buf[n] = 0;
	return 0;
}

/* Firecracker's example handler in a child, ready once it mapped. */
static pid_t example_start(void)
{
	int ls = listen_stream(fb.sock), ready[2];
	char buf[8];
	pid_t pid;

	if (ls < 0 || pipe2(ready, O_CLOEXEC))
		return -1;
	pid = fork();
	if (pid == 0) {
		struct fc_example ex = { .listen_fd = ls, .mem_file = fb.mem,
					 .stop_fd = -1, .ready_fd = ready[1] };
		int ret = fc_example_serve(&ex);

		if (ret)
			fprintf(stderr, "fc-example: %s\n", ex.why);
		_exit(ret ? 1 : 0);
	}
	close(ls);
	close(ready[1]);
	if (pid > 0 && wait_readable(ready[0], buf, sizeof(buf))) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		pid = -1;
	}
	close(ready[0]);
	return pid;
}

/* faultd firecracker on the socket, ready once it said READY=1. */
static pid_t faultd_start(bool prefetch)
{
	const char *args[] = { "--mem-file", fb.mem,
			       prefetch ? "--prefetch" : NULL, NULL };
	const char *why;
	pid_t pid = fc_faultd_start(fb.sock, fb.notify, args, NULL, NULL,
				    &why);

	if (pid < 0 && strstr(why, "no faultd"))
		fb.skipped = why;
	return pid;
}

/* ------------------------------------------------------------------------
 * The guest, restored as Firecracker restores it.
 */

struct guest {
	struct fc_guest fc;
	atomic_uint_fast64_t next, first_done, last_done;
};

struct toucher {
	struct guest *g;
	struct lat_hist lat;
	uint64_t first_done, last_done; /* this thread's */
};

static void note_done(atomic_uint_fast64_t *v, uint64_t t, bool first)
{
	uint64_t cur = atomic_load(v);

	while ((first ? t < cur : t > cur) &&
	       !atomic_compare_exchange_weak(v, &cur, t))
		;
}

/*
 * Touch the pages of the shared order, one word each, taking TAKE of the
 * order at a time; time the faults. Whether a page was in before its
 * touch is asked (mincore()) for one touch in PROBE_EVERY, and p99_ns is
 * over those: asked before every touch, the probe was half of the guest
 * threads' CPU (perf, 512 MiB: mincore and the mmap lock it takes), and
 * all_in measured the probe as much as the handler. A guest touches its
 * memory without asking.
 */
#define TAKE 64
#define PROBE_EVERY 16

static void *toucher_main(void *arg)
{
	struct toucher *t = arg;
	struct guest *g = t->g;
	uint64_t from;

	t->first_done = UINT64_MAX;
	while ((from = atomic_fetch_add(&g->next, TAKE)) < g->fc.pages) {
		uint64_t to = from + TAKE < g->fc.pages ? from + TAKE
							: g->fc.pages;

		for (uint64_t k = from; k < to; k++) {
			volatile uint64_t *w =
				(volatile uint64_t *)(g->fc.base +
						      fb.order[k] * 4096);
			unsigned char in = 1;
			uint64_t t0, t1;

			if (k % PROBE_EVERY == 0)
				mincore((void *)w, 4096, &in);
			t0 = now_ns();
			(void)*w;
			t1 = now_ns();
			if (!(in & 1))
				lat_record(&t->lat, t1 - t0);
			if (t1 < t->first_done)
				t->first_done = t1;
			t->last_done = t1;
		}
	}
	note_done(&g->first_done, t->first_done, true);
	note_done(&g->last_done, t->last_done, false);
	return NULL;
}

static int guest_run(const struct bench_opts *o, struct guest *g,
		     struct sample *out)
{
	unsigned int n = o->threads < MAX_GUEST_THREADS ? o->threads
							: MAX_GUEST_THREADS;
	struct toucher *t = calloc(n, sizeof(*t));
	double p50, p99, all_in;
	int ret;

	if (!t)
		return -ENOMEM;
	for (unsigned int i = 0; i < n; i++)
		t[i].g = g;
	ret = run_threads(n, toucher_main, t, sizeof(*t));
	if (!ret) {
		all_in = (double)(atomic_load(&g->last_done) - g->fc.sent_ns) /
			 1e6;
		out->value[M_FIRST] = (double)(atomic_load(&g->first_done) -
					       g->fc.sent_ns) / 1e6;
		out->value[M_ALL_IN] = all_in;
		out->value[M_GBPS] = (double)g->fc.size / (all_in * 1e6);
		lat_percentiles(&t[0].lat, n, sizeof(*t), &p50, &p99);
		out->value[M_P99] = p99;
	}
	free(t);
	return ret;
}

static int fc_run(const struct bench_opts *o, unsigned int v,
		  struct sample *out)
{
	uint64_t size = (uint64_t)o->size_mib << 20;
	struct guest g = { .fc = { .uffd = -1, .sock = -1 },
			   .first_done = UINT64_MAX };
	pid_t h;
	int ret = mem_file_get(size);

	if (ret)
		return ret;
	h = v == V_EXAMPLE ? example_start() : faultd_start(v == V_FC_PREFETCH);
	if (h < 0) {
		if (fb.skipped) {
			out->skipped = fb.skipped;
			return 0;
		}
		return -EIO;
	}
	ret = fc_guest_restore(&g.fc, fb.sock, size);
	if (!ret)
		ret = guest_run(o, &g, out);
	fc_guest_end(&g.fc); /* the handler sees its peer go and exits */
	if (ret)
		kill(h, SIGKILL);
	if (fc_handler_wait(h) && !ret)
		ret = -EIO;
	return ret;
}

const struct scenario scenario_firecracker = {
	.name = "firecracker",
	.desc = "a snapshot restore as Firecracker makes it, guest threads "
		"touching every page at random: Firecracker's example handler "
		"against faultd firecracker",
	.metrics = { "first_fault_ms", "all_in_ms", "gb_per_s", "p99_ns" },
	.nmetrics = 4,
	.variants = { "fc-example", "faultd-fc", "faultd-fc-prefetch" },
	.nvariants = 3,
	.ratios = { { V_FC, V_EXAMPLE }, { V_FC_PREFETCH, V_EXAMPLE },
		    { V_FC_PREFETCH, V_FC } },
	.nratios = 3,
	.default_threads = 2,
	.default_size_mib = 512,
	.run = fc_run,
};
