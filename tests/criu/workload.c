/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * workload.c - a process for CRIU to dump and restore, which checks its
 * own memory after the restore.
 *
 *   workload --size MIB --seed S --ready FD --result FILE [--mode M]
 *            [--threads N]
 *
 * It maps region 0 (MIB MiB, every word from workload.h's generator) and
 * region 1 (4 MiB, the first half of every 128 KiB written, the rest
 * never touched: MADV_NOHUGEPAGE, so that with transparent huge pages
 * "always" no huge page makes the untouched halves zero data in a dump,
 * which the tests read as holes), writes its layout to the pipe FD ("region N ADDR LEN",
 * "zombie PID", then "ready") and closes it, so that nothing ties it to
 * the test when CRIU dumps it. Then it waits for SIGUSR1 - sent by the
 * test once `criu restore` has returned; never a timer - and runs mode M:
 *
 *   basic     check every byte
 *   threads   N threads (made before the dump) check slices at once
 *   fork      fork at once; parent and child both check every byte
 *   mremap    move the second half of region 0, check it at its new place
 *   dontneed  MADV_DONTNEED a quarter of region 0 first: it must read zeros
 *   mprotect  make 8 pages in the middle read-only first (splits the VMA)
 *   mprotect-wait  the same, then wait for a second SIGUSR1 before the
 *             check: the background copy alone must cross the split
 *   zombie    a child that exited with 42 before the dump stays a zombie
 *             in the tree; after the check it is reaped and its status
 *             checked
 *   seq       read one word per page in order (timed), then check
 *   random    read one word per page in a random order (timed), then check
 *   part      check a seeded tenth of region 0's pages, nothing else: a
 *             working set (a restore that records it, then one that
 *             replays it)
 *
 * A SIGUSR1 sent with sigqueue() and a value of 1, 2 or 3 runs seq,
 * random or basic instead of the mode the process was dumped with (one
 * dump then serves every measurement of faultd-bench's criu scenario).
 *
 * Each process appends one line to FILE ("role=parent ok=1 bad=0 ...",
 * with CLOCK_REALTIME times in ns: t_go when SIGUSR1 came, t_first after
 * the first read, t_end after the timed pass, t_done after the check; and
 * lat_p50, lat_p99: the median and 99th percentile ns of one read of the
 * timed pass, 0 without one) and
 * exits 0 when every byte was right, 1 when not, 2 on a usage or setup
 * error.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "workload.h"

#define MAX_THREADS 64

struct wl {
	uint64_t seed;
	size_t len;		/* region 0 */
	char *r0, *r1;
	char *moved;		/* mremap: where the second half went */
	const char *mode;
	const char *result;
	unsigned int nthreads;
	pid_t zombie;
	pthread_barrier_t go;
	size_t bad[MAX_THREADS];
	uint64_t first_bad;
	uint64_t t_go, t_first, t_end, t_done;
	uint64_t lat_p50, lat_p99;	/* ns of one read of the timed pass */
};

/*
 * CLOCK_REALTIME: criu restore puts the process in a time namespace whose
 * CLOCK_MONOTONIC continues the dumped one, so only the real-time clock
 * compares with the test's.
 */
static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
	fprintf(stderr, "workload: %s: %s\n", what, strerror(errno));
	exit(2);
}

static char *map_anon(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap");
	return p;
}

/* Where byte @off of region 0 is now (mremap moves the second half). */
static char *r0_at(const struct wl *w, size_t off)
{
	if (w->moved && off >= w->len / 2)
		return w->moved + (off - w->len / 2);
	return w->r0 + off;
}

/* Check [from, to) of region 0 (dontneed: the removed quarter is zeros). */
static size_t check_r0(struct wl *w, size_t from, size_t to, uint64_t *first)
{
	size_t bad = 0, step = WL_PAGE;

	for (size_t off = from; off < to; off += step) {
		const uint64_t *p = (const uint64_t *)r0_at(w, off);
		bool zero = !strcmp(w->mode, "dontneed") &&
			    off >= w->len / 4 && off < w->len / 2;

		if (zero) {
			for (size_t i = 0; i < step / 8; i++)
				if (p[i] && !bad++)
					*first = off + i * 8;
		} else {
			bad += wl_check(w->seed, 0, off, p, step,
					bad ? NULL : first);
		}
	}
	return bad;
}

static size_t check_all(struct wl *w)
{
	size_t bad = check_r0(w, 0, w->len, &w->first_bad);

	bad += wl_check(w->seed, 1, 0, w->r1, WL_SPARSE_LEN,
			bad ? NULL : &w->first_bad);
	return bad;
}

/* part: the pages k of region 0 with wl_word(seed, 2, k * 8) % 10 == 0. */
static size_t check_part(struct wl *w)
{
	size_t bad = 0;

	for (size_t k = 0; k < w->len / WL_PAGE; k++)
		if (wl_word(w->seed, 2, k * 8) % 10 == 0)
			bad += check_r0(w, k * WL_PAGE, (k + 1) * WL_PAGE,
					&w->first_bad);
	return bad;
}

struct slice {
	struct wl *w;
	unsigned int i;
};

static void *slice_main(void *arg)
{
	struct slice *s = arg;
	struct wl *w = s->w;
	size_t per = w->len / w->nthreads / WL_PAGE * WL_PAGE;
	size_t from = per * s->i;
	size_t to = s->i + 1 == w->nthreads ? w->len : from + per;
	uint64_t first = 0;

	pthread_barrier_wait(&w->go);
	w->bad[s->i] = check_r0(w, from, to, &first);
	if (s->i == 0)
		w->bad[s->i] += wl_check(w->seed, 1, 0, w->r1, WL_SPARSE_LEN,
					 &first);
	return NULL;
}

static void fill(struct wl *w)
{
	w->r0 = map_anon(w->len);
	w->r1 = map_anon(WL_SPARSE_LEN);
	if (madvise(w->r1, WL_SPARSE_LEN, MADV_NOHUGEPAGE))
		die("madvise");
	wl_fill(w->seed, 0, 0, w->r0, w->len);
	for (size_t off = 0; off < WL_SPARSE_LEN; off += WL_SPARSE_CHUNK)
		wl_fill(w->seed, 1, off, w->r1 + off, WL_SPARSE_CHUNK / 2);
}

/* The zombie: exits with 42 and is not reaped until after the check. */
static void make_zombie(struct wl *w)
{
	siginfo_t si;

	w->zombie = fork();
	if (w->zombie < 0)
		die("fork");
	if (w->zombie == 0)
		_exit(42);
	if (waitid(P_PID, (id_t)w->zombie, &si, WEXITED | WNOWAIT))
		die("waitid");
}

static void tell_ready(const struct wl *w, int fd)
{
	char buf[256];
	int n;

	n = snprintf(buf, sizeof(buf),
		     "region 0 %#lx %#zx\nregion 1 %#lx %#lx\nzombie %d\n"
		     "ready\n", (unsigned long)w->r0, w->len,
		     (unsigned long)w->r1, WL_SPARSE_LEN, (int)w->zombie);
	if (write(fd, buf, (size_t)n) != n)
		die("write ready");
	close(fd);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* A fresh, populated anonymous array: after the restore, so that neither
 * its pages nor the heap's come from the lazy-pages daemon. */
static uint32_t *fresh_array(size_t n)
{
	void *p = mmap(NULL, n * sizeof(uint32_t), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	if (p == MAP_FAILED)
		die("mmap");
	return p;
}

/* @order: 0, 1, ... @pages - 1, shuffled when @random. */
static uint32_t *pass_order(const struct wl *w, size_t pages, bool random)
{
	uint32_t *order = fresh_array(pages);
	uint64_t x = w->seed | 1;

	for (size_t i = 0; i < pages; i++)
		order[i] = (uint32_t)i;
	for (size_t i = pages - 1; random && i > 0; i--) {
		size_t j;
		uint32_t t;

		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		j = x % (i + 1);
		t = order[i], order[i] = order[j], order[j] = t;
	}
	return order;
}

/*
 * One word per page of region 0, in order or in a random order, each read
 * timed: its p50 and p99 are what a restored program feels of the fault
 * service (a page already in costs ~0).
 */
static void timed_pass(struct wl *w, bool random)
{
	size_t pages = w->len / WL_PAGE;
	uint32_t *order = pass_order(w, pages, random);
	uint32_t *lat = fresh_array(pages);
	volatile uint64_t sink = 0;

	for (size_t i = 0; i < pages; i++) {
		size_t pg = order[i];
		uint64_t t = mono_ns();

		sink += *(volatile uint64_t *)r0_at(w, pg * WL_PAGE);
		lat[i] = (uint32_t)(mono_ns() - t);
		if (i == 0)
			w->t_first = now_ns();
	}
	w->t_end = now_ns();
	(void)sink;
	qsort(lat, pages, sizeof(*lat), cmp_u32);
	w->lat_p50 = lat[pages / 2];
	w->lat_p99 = lat[pages - 1 - pages / 100];
	munmap(order, pages * sizeof(*order));
	munmap(lat, pages * sizeof(*lat));
}

/* Wait for SIGUSR1 (blocked since the start). */
static siginfo_t wait_go(void)
{
	siginfo_t si;
	sigset_t set;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	do
		sig = sigwaitinfo(&set, &si);
	while (sig < 0 && errno == EINTR);
	if (sig != SIGUSR1)
		die("sigwaitinfo");
	return si;
}

/* What the mode does before the check. */
static void prepare_mode(struct wl *w)
{
	if (!strcmp(w->mode, "dontneed") &&
	    madvise(w->r0 + w->len / 4, w->len / 4, MADV_DONTNEED))
		die("madvise");
	if (!strncmp(w->mode, "mprotect", 8) &&
	    mprotect(w->r0 + w->len / 2 + 3 * WL_PAGE, 8 * WL_PAGE, PROT_READ))
		die("mprotect");
	if (!strcmp(w->mode, "mremap")) {
		char *to = mmap(NULL, w->len / 2, PROT_NONE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (to == MAP_FAILED ||
		    mremap(w->r0 + w->len / 2, w->len / 2, w->len / 2,
			   MREMAP_MAYMOVE | MREMAP_FIXED, to) != to)
			die("mremap");
		w->moved = to;
	}
	if (!strcmp(w->mode, "seq") || !strcmp(w->mode, "random"))
		timed_pass(w, !strcmp(w->mode, "random"));
	if (!strcmp(w->mode, "mprotect-wait"))
		wait_go();
}

static int report(struct wl *w, const char *role, size_t bad,
		  const char *extra)
{
	char line[512];
	int fd, n;

	n = snprintf(line, sizeof(line),
		     "role=%s pid=%d mode=%s ok=%d bad=%zu first_bad=%#llx "
		     "pages=%zu t_go=%llu t_first=%llu t_end=%llu t_done=%llu "
		     "lat_p50=%llu lat_p99=%llu%s\n", role, (int)getpid(), w->mode, !bad, bad,
		     (unsigned long long)w->first_bad,
		     (w->len + WL_SPARSE_LEN) / WL_PAGE,
		     (unsigned long long)w->t_go,
		     (unsigned long long)w->t_first,
		     (unsigned long long)w->t_end,
		     (unsigned long long)w->t_done,
		     (unsigned long long)w->lat_p50,
		     (unsigned long long)w->lat_p99, extra);
	fd = open(w->result, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, line, (size_t)n) != n)
		die("write result");
	close(fd);
	return bad ? 1 : 0;
}

static size_t run_threads(struct wl *w, pthread_t *t)
{
	size_t bad = 0;

	pthread_barrier_wait(&w->go);
	for (unsigned int i = 0; i < w->nthreads; i++) {
		pthread_join(t[i], NULL);
		bad += w->bad[i];
	}
	return bad;
}

/* After SIGUSR1: the mode, the check, the report. Returns the exit code. */
static int after_go(struct wl *w, pthread_t *t)
{
	char extra[64] = "";
	size_t bad;
	pid_t child = -1;
	int st;

	w->t_go = now_ns();
	if (!strcmp(w->mode, "fork") && (child = fork()) < 0)
		die("fork");
	prepare_mode(w);
	if (!strcmp(w->mode, "threads"))
		bad = run_threads(w, t);
	else
		bad = !strcmp(w->mode, "part") ? check_part(w) : check_all(w);
	w->t_done = now_ns();
	if (child == 0)
		_exit(report(w, "child", bad, ""));
	if (child > 0 && (waitpid(child, &st, 0) != child ||
			  !WIFEXITED(st) || WEXITSTATUS(st)))
		bad++, snprintf(extra, sizeof(extra), " child_failed=1");
	if (w->zombie > 0) {
		bool ok = waitpid(w->zombie, &st, 0) == w->zombie &&
			  WIFEXITED(st) && WEXITSTATUS(st) == 42;

		bad += !ok;
		snprintf(extra, sizeof(extra), " zombie_ok=%d", ok);
	}
	return report(w, "parent", bad, extra);
}

int main(int argc, char **argv)
{
	static const struct option o[] = {
		{ "size", required_argument, NULL, 's' },
		{ "seed", required_argument, NULL, 'S' },
		{ "ready", required_argument, NULL, 'r' },
		{ "result", required_argument, NULL, 'R' },
		{ "mode", required_argument, NULL, 'm' },
		{ "threads", required_argument, NULL, 't' },
		{ 0 },
	};
	static struct wl w = { .mode = "basic", .nthreads = 4, .zombie = -1 };
	static struct slice sl[MAX_THREADS];
	pthread_t t[MAX_THREADS];
	static const char *const go_modes[] = { NULL, "seq", "random",
						"basic" };
	int ready = -1, c;
	siginfo_t si;
	sigset_t set;

	while ((c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		switch (c) {
		case 's': w.len = strtoul(optarg, NULL, 0) << 20; break;
		case 'S': w.seed = strtoull(optarg, NULL, 0); break;
		case 'r': ready = atoi(optarg); break;
		case 'R': w.result = optarg; break;
		case 'm': w.mode = optarg; break;
		case 't': w.nthreads = (unsigned int)atoi(optarg); break;
		default: return 2;
		}
	}
	if (!w.len || ready < 0 || !w.result || !w.nthreads ||
	    w.nthreads > MAX_THREADS) {
		fprintf(stderr, "usage: workload --size MIB --seed S --ready FD "
				"--result FILE [--mode M] [--threads N]\n");
		return 2;
	}
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	fill(&w);
	if (!strcmp(w.mode, "zombie"))
		make_zombie(&w);
	if (!strcmp(w.mode, "threads")) {
		pthread_barrier_init(&w.go, NULL, w.nthreads + 1);
		for (unsigned int i = 0; i < w.nthreads; i++) {
			sl[i] = (struct slice){ &w, i };
			if (pthread_create(&t[i], NULL, slice_main, &sl[i]))
				die("pthread_create");
		}
	}
	tell_ready(&w, ready);
	si = wait_go();
	if (si.si_code == SI_QUEUE && si.si_value.sival_int > 0 &&
	    si.si_value.sival_int < 4)
		w.mode = go_modes[si.si_value.sival_int];
	return after_go(&w, t);
}
