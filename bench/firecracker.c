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
 *                   (mincore()): faults, during the push with --prefetch
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

enum { V_EXAMPLE, V_FC, V_FC_PREFETCH };
enum { M_FIRST, M_ALL_IN, M_GBPS, M_P99 };

#define ALIGN_2M (2ul << 20)
#define READY_MS 60000
#define MAX_GUEST_THREADS 64

static struct {
	char dir[64];		/* scratch: the memory file, the sockets */
	char mem[96], sock[96], notify[96];
	uint64_t size;		/* of the memory file made */
	uint64_t *order;	/* the touch order of its pages */
	const char *skipped;
} fb;

static uint64_t mix(uint64_t x)
{
	uint64_t z = x * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

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
	uint64_t *buf, pages = size / 4096;
	int fd, ret = 0;

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
	fd = open(fb.mem, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	buf = malloc(1 << 20);
	if (fd < 0 || !buf) {
		free(buf);
		return fd < 0 ? -errno : -ENOMEM;
	}
	for (uint64_t at = 0; !ret && at < size; at += 1 << 20) {
		for (size_t i = 0; i < (1 << 20) / 8; i++)
			buf[i] = mix(at / 8 + i);
		if (pwrite(fd, buf, 1 << 20, (off_t)at) != 1 << 20)
			ret = -EIO;
	}
	close(fd);
	free(buf);
	fb.order = malloc(pages * sizeof(*fb.order));
	if (ret || !fb.order)
		return ret ? ret : -ENOMEM;
	for (uint64_t i = 0; i < pages; i++)
		fb.order[i] = i;
	for (uint64_t i = 0; i + 1 < pages; i++) {
		uint64_t j = i + mix(~i) % (pages - i), x = fb.order[i];

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

static bool faultd_exe(char *exe, size_t len)
{
	const char *env = getenv("FAULTD_DAEMON");
	ssize_t n = readlink("/proc/self/exe", exe, len - 32);

	if (env) {
		snprintf(exe, len, "%s", env);
	} else if (n > 0) {
		exe[n] = 0;
		strcat(dirname(exe), "/../daemon/faultd");
	}
	return (env || n > 0) && !access(exe, X_OK);
}

/* faultd firecracker on the socket, ready once it said READY=1. */
static pid_t faultd_start(bool prefetch)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char exe[PATH_MAX], buf[64];
	int nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	pid_t pid = -1;

	if (!faultd_exe(exe, sizeof(exe))) {
		fb.skipped = "no faultd next to faultd-bench (set "
			     "FAULTD_DAEMON)";
		return -1;
	}
	strcpy(a.sun_path, fb.notify);
	unlink(fb.notify);
	if (nfd >= 0 && !bind(nfd, (struct sockaddr *)&a, sizeof(a)))
		pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(null, 1);
		setenv("NOTIFY_SOCKET", fb.notify, 1);
		execl(exe, exe, "firecracker", "--socket", fb.sock,
		      "--mem-file", fb.mem, prefetch ? "--prefetch" : NULL,
		      (char *)NULL);
		_exit(127);
	}
	while (pid > 0) {
		if (wait_readable(nfd, buf, sizeof(buf))) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			pid = -1;
		} else if (strstr(buf, "READY=1")) {
			break;
		}
	}
	if (nfd >= 0)
		close(nfd);
	return pid;
}

static int handler_wait(pid_t pid)
{
	int status;

	if (waitpid(pid, &status, 0) != pid)
		return -errno;
	return WIFEXITED(status) && !WEXITSTATUS(status) ? 0 : -EIO;
}

/* ------------------------------------------------------------------------
 * The guest, restored as Firecracker restores it.
 */

struct guest {
	uint8_t *base;
	uint64_t size, pages;
	int uffd, sock;
	uint64_t sent_ns;
	atomic_uint_fast64_t next, first_done, last_done;
};

struct toucher {
	struct guest *g;
	struct lat_hist lat;
};

static int guest_uffd(void)
{
	struct uffdio_api api = { .api = UFFD_API,
				  .features = UFFD_FEATURE_EVENT_REMOVE };
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);

	if (fd >= 0 && ioctl(fd, UFFDIO_API, &api)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Memory, its userfaultfd, the handshake: Firecracker's snapshot load. */
static int guest_restore(struct guest *g, uint64_t size)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char json[256], ctl[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { json, 0 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
	uint8_t *p = mmap(NULL, size + ALIGN_2M, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	*g = (struct guest){ .size = size, .pages = size / 4096, .uffd = -1,
			     .sock = -1, .first_done = UINT64_MAX };
	if (p == MAP_FAILED)
		return -ENOMEM;
	g->base = (uint8_t *)(((uintptr_t)p + ALIGN_2M - 1) & ~(ALIGN_2M - 1));
	if (g->base > p)
		munmap(p, (size_t)(g->base - p));
	munmap(g->base + size, (size_t)(p + size + ALIGN_2M - g->base - size));
	g->uffd = guest_uffd();
	reg.range = (struct uffdio_range){ (uintptr_t)g->base, size };
	if (g->uffd < 0 || ioctl(g->uffd, UFFDIO_REGISTER, &reg))
		return -errno;
	iov.iov_len = (size_t)snprintf(json, sizeof(json),
		"[{\"base_host_virt_addr\":%" PRIuPTR ",\"size\":%" PRIu64
		",\"offset\":0,\"page_size\":4096,\"page_size_kib\":4096}]",
		(uintptr_t)g->base, size);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &g->uffd, sizeof(int));
	strcpy(a.sun_path, fb.sock);
	g->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (g->sock < 0 || connect(g->sock, (struct sockaddr *)&a, sizeof(a)) ||
	    sendmsg(g->sock, &m, MSG_NOSIGNAL) != (ssize_t)iov.iov_len)
		return -errno;
	g->sent_ns = now_ns();
	return 0;
}

static void guest_end(struct guest *g)
{
	if (g->sock >= 0)
		close(g->sock);
	if (g->uffd >= 0)
		close(g->uffd);
	if (g->base)
		munmap(g->base, g->size);
}

static void note_done(atomic_uint_fast64_t *v, uint64_t t, bool first)
{
	uint64_t cur = atomic_load(v);

	while ((first ? t < cur : t > cur) &&
	       !atomic_compare_exchange_weak(v, &cur, t))
		;
}

/* Touch the pages of the shared order, one word each; time the faults. */
static void *toucher_main(void *arg)
{
	struct toucher *t = arg;
	struct guest *g = t->g;
	uint64_t k;

	while ((k = atomic_fetch_add(&g->next, 1)) < g->pages) {
		volatile uint64_t *w = (volatile uint64_t *)(g->base +
							      fb.order[k] * 4096);
		unsigned char in = 0;
		uint64_t t0, t1;

		mincore((void *)w, 4096, &in);
		t0 = now_ns();
		(void)*w;
		t1 = now_ns();
		if (!(in & 1))
			lat_record(&t->lat, t1 - t0);
		note_done(&g->first_done, t1, true);
		note_done(&g->last_done, t1, false);
	}
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
		all_in = (double)(atomic_load(&g->last_done) - g->sent_ns) / 1e6;
		out->value[M_FIRST] =
			(double)(atomic_load(&g->first_done) - g->sent_ns) / 1e6;
		out->value[M_ALL_IN] = all_in;
		out->value[M_GBPS] = (double)g->size / (all_in * 1e6);
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
	struct guest g = { .uffd = -1, .sock = -1 };
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
	ret = guest_restore(&g, size);
	if (!ret)
		ret = guest_run(o, &g, out);
	guest_end(&g); /* the handler sees its peer go and exits */
	if (ret)
		kill(h, SIGKILL);
	if (handler_wait(h) && !ret)
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
