// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * load.c - suite "load": scale and limits.
 *
 * Thousands of small regions in one context, served by one shared handler
 * group (what a program with many regions should use) and, for
 * comparison, by a thread each (the default); a limit on descriptors hit
 * part-way, which must fail cleanly; 64 clients restoring through one
 * faultd daemon at once; and region create/destroy churn from several
 * threads for FAULTD_LOAD_SECONDS (default 5). Every byte is checked, and
 * the process's descriptors, mappings and threads (the daemon's, for the
 * restores) are counted before and after: the counts must be the same.
 *
 * Counts are compared after a first, warm-up pass of the same work: glibc
 * keeps the stacks of exited threads (up to 40 MiB) and its malloc arenas,
 * and liburcu-bp its registry of reader threads, for the next ones. A
 * leak grows with every pass, so the second pass shows it. Under ASan
 * the mappings are not compared: its allocator keeps what it maps.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <setjmp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "helpers.h"
#include "internal.h"
#include "proto.h"
#include "resources.h"

/* ------------------------------------------------------------------------
 * Resource counts (tests/resources.h)
 */

/* Lines of @path that contain @needle. */
static long count_matching(const char *path, const char *needle)
{
	FILE *f = fopen(path, "re");
	char line[512];
	long n = 0;

	cr_assert(f, "%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

#define assert_same_resources(before, after, what)                             \
	cr_assert(resources_equal(before, after),                              \
		  "%s: fds %ld -> %ld, maps %ld -> %ld, threads %ld -> %ld",   \
		  what, (before).fds, (after).fds, (before).maps,              \
		  (after).maps, (before).threads, (after).threads)

/* At least @want descriptors, raising the soft limit up to the hard one. */
static bool have_fds(rlim_t want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return false;
	if (rl.rlim_cur >= want)
		return true;
	if (rl.rlim_max < want)
		return false;
	rl.rlim_cur = want;
	return setrlimit(RLIMIT_NOFILE, &rl) == 0;
}

/* ------------------------------------------------------------------------
 * Many regions in one context
 */

#define NREGIONS_GROUP 4096
#define NREGIONS_THREADS 1200 /* UMap fails near 900 */
#define RPAGES 4 /* pages per region */
#define RTAG 0x10ad0000ull

/* The word a fault thread writes at the start of page @pg of region @i. */
static uint64_t mark_of(size_t i, size_t pg)
{
	return ~pattern_word(RTAG + i, pg * PAGE);
}

struct many {
	struct faultd_region **r;
	size_t n;
	unsigned int stride, first; /* this thread's regions */
	size_t bad;
};

/*
 * Fault every page of this thread's regions: check it (a read fault) and
 * mark its first word, which no other region's page may show.
 */
static void *fault_many(void *arg)
{
	struct many *m = arg;

	for (size_t i = m->first; i < m->n; i += m->stride) {
		char *base = faultd_region_base(m->r[i]);

		for (size_t pg = 0; pg < RPAGES; pg++) {
			char *p = base + pg * PAGE;

			m->bad += pattern_check(RTAG + i, pg * PAGE, p, PAGE);
			*(uint64_t *)p = mark_of(i, pg);
		}
	}
	return NULL;
}

/* Every byte of every region: the mark, then the pager's pattern. */
static size_t check_many(struct faultd_region **r, size_t n)
{
	size_t bad = 0;

	for (size_t i = 0; i < n; i++) {
		const char *base = faultd_region_base(r[i]);

		for (size_t pg = 0; pg < RPAGES; pg++) {
			const char *p = base + pg * PAGE;

			bad += *(const uint64_t *)p != mark_of(i, pg);
			bad += pattern_check(RTAG + i, pg * PAGE + 8, p + 8,
					     PAGE - 8);
		}
	}
	return bad;
}

/*
 * Destroy in an order that takes entries from all over the map: k * step
 * mod n visits every index once when n is not a multiple of the prime.
 */
static void destroy_many(struct faultd_region **r, size_t n)
{
	size_t step = n % 7919 ? 7919 : 1;

	for (size_t k = 0; k < n; k++)
		cr_assert_eq(faultd_region_destroy(r[k * step % n]), 0);
}

/*
 * One pass: @n regions of RPAGES pages, each with a pattern pager of its
 * own tag, in one group of @gthreads threads (@shared) or with a handler
 * thread each; two threads fault every page; the content and the fault
 * counters are exact.
 */
static void many_regions_pass(size_t n, bool shared, unsigned int gthreads)
{
	struct faultd_group_opts go = { .size = sizeof(go),
					.threads = gthreads };
	struct faultd_stats st = { .size = sizeof(st) };
	struct faultd_region **r = calloc(n, sizeof(*r));
	struct faultd_group *g = NULL;
	struct faultd_ctx *ctx;
	struct many m[2];
	pthread_t t[2];
	struct resources before = resources_now(), live;

	cr_assert(r);
	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	if (shared)
		cr_assert_eq(faultd_group_create(ctx, &go, &g), 0);
	for (size_t i = 0; i < n; i++) {
		struct faultd_pager p = pattern_pager(RTAG + i,
						      FAULTD_PAGER_CONCURRENT);
		struct faultd_region_opts o = { .size = sizeof(o),
						.length = RPAGES * PAGE,
						.pager = &p,
						.group = g };
		int ret = faultd_region_create(ctx, &o, &r[i]);

		cr_assert_eq(ret, 0, "region %zu of %zu: %s", i, n,
			     strerror(-ret));
	}
	for (unsigned int k = 0; k < 2; k++) {
		m[k] = (struct many){ .r = r, .n = n, .stride = 2, .first = k };
		cr_assert_eq(pthread_create(&t[k], NULL, fault_many, &m[k]), 0);
	}
	for (unsigned int k = 0; k < 2; k++) {
		pthread_join(t[k], NULL);
		cr_assert_eq(m[k].bad, 0, "thread %u: %zu words wrong", k,
			     m[k].bad);
	}
	cr_assert_eq(check_many(r, n), 0);
	/* One fault per page, each filled by its region's pager. */
	for (size_t i = 0; i < n; i++) {
		struct faultd_stats rs = { .size = sizeof(rs) };

		cr_assert_eq(faultd_region_stats(r[i], &rs), 0);
		cr_assert_eq(rs.faults, RPAGES, "region %zu: %llu faults", i,
			     (unsigned long long)rs.faults);
		cr_assert_eq(rs.pager_fills, RPAGES);
	}
	cr_assert_eq(faultd_ctx_stats(ctx, &st), 0);
	cr_assert_eq(st.faults, n * RPAGES);
	cr_assert_eq(st.pager_fills, n * RPAGES);
	/* The handler threads: the group's, or one per region. */
	live = resources_now();
	cr_assert_eq(live.threads - before.threads,
		     shared ? (long)gthreads : (long)n,
		     "%ld handler threads", live.threads - before.threads);
	cr_log_info("%zu regions, %s: +%ld fds, +%ld mappings, +%ld threads",
		    n, shared ? "one group" : "a thread each",
		    live.fds - before.fds, live.maps - before.maps,
		    live.threads - before.threads);
	destroy_many(r, n);
	cr_assert_eq(faultd_group_destroy(g), 0);
	faultd_ctx_destroy(ctx);
	free(r);
}

static void many_regions(size_t n, bool shared, unsigned int gthreads)
{
	struct resources before, after;
	uint64_t t0;

	many_regions_pass(n, shared, gthreads); /* warm-up */
	before = resources_now();
	t0 = test_now_ns();
	many_regions_pass(n, shared, gthreads);
	after = resources_now();
	cr_log_info("%zu regions: %.2f s", n, (test_now_ns() - t0) / 1e9);
	assert_same_resources(before, after, "after destroying every region");
}

/* FAULTD_LOAD_REGIONS: how many (default @def). */
static size_t nregions(size_t def)
{
	const char *s = getenv("FAULTD_LOAD_REGIONS");
	long v = s ? atol(s) : 0;

	return v > 0 ? (size_t)v : def;
}

Test(load, many_regions_one_group, .timeout = 300)
{
	many_regions(nregions(NREGIONS_GROUP), true, 2);
}

/* The default: a handler thread, a userfaultfd and an eventfd each. */
Test(load, many_regions_a_thread_each, .timeout = 300)
{
	size_t n = nregions(NREGIONS_THREADS);

	if (!have_fds(4 * n))
		cr_skip_test("RLIMIT_NOFILE's hard limit is below %zu", 4 * n);
	many_regions(n, false, 0);
}

/* ------------------------------------------------------------------------
 * Out of descriptors
 */

/* The soft limit that leaves exactly @spare descriptor numbers free. */
static rlim_t limit_with_spare(unsigned int spare)
{
	int fd = 0;

	for (;; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF && !spare--)
			return (rlim_t)fd;
}

static void set_nofile(rlim_t soft)
{
	struct rlimit rl;

	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	rl.rlim_cur = soft;
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0, "%s", strerror(errno));
}

/* Counting opens a descriptor: count with the limit lifted for it. */
static struct resources resources_under(rlim_t limit, rlim_t normal)
{
	struct resources r;

	set_nofile(normal);
	r = resources_now();
	set_nofile(limit);
	return r;
}

/*
 * A region with handlers of its own takes two descriptors (its
 * userfaultfd and the eventfd that stops its threads). With @spare free,
 * exactly spare / 2 regions are made; the next fails with -EMFILE and
 * leaves nothing behind - whether it failed at the userfaultfd or at the
 * eventfd (odd @spare) - and a region in a group, which takes none, is
 * still made and served.
 */
static void out_of_fds_pass(unsigned int spare)
{
	struct faultd_group_opts go = { .size = sizeof(go), .threads = 1 };
	struct faultd_pager p = pattern_pager(RTAG, FAULTD_PAGER_CONCURRENT);
	struct faultd_region_opts o = { .size = sizeof(o),
					.length = RPAGES * PAGE,
					.pager = &p };
	struct faultd_region *r[64], *in_group;
	struct faultd_group *g;
	struct faultd_ctx *ctx;
	struct resources before, after;
	struct rlimit normal;
	rlim_t limit;
	size_t n = 0;
	int ret;

	cr_assert_lt(spare / 2, ARRAY_SIZE(r));
	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &normal), 0);
	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	cr_assert_eq(faultd_group_create(ctx, &go, &g), 0);
	limit = limit_with_spare(spare);
	set_nofile(limit);
	while ((ret = faultd_region_create(ctx, &o, &r[n])) == 0) {
		cr_assert_lt(n, spare / 2, "more regions than descriptors");
		n++;
	}
	cr_assert_eq(ret, -EMFILE, "%s", strerror(-ret));
	cr_assert_eq(n, spare / 2);
	/* Served before counting: a handler thread's first steps (glibc
	 * gives its first malloc an arena: a mapping) are not a leak. */
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(pattern_check(RTAG, 0, faultd_region_base(r[i]),
					   RPAGES * PAGE), 0);
	before = resources_under(limit, normal.rlim_cur);
	cr_assert_eq(faultd_region_create(ctx, &o, &r[n]), -EMFILE);
	after = resources_under(limit, normal.rlim_cur);
	assert_same_resources(before, after, "a failed create");
	o.group = g;
	cr_assert_eq(faultd_region_create(ctx, &o, &in_group), 0);
	cr_assert_eq(pattern_check(RTAG, 0, faultd_region_base(in_group),
				   RPAGES * PAGE), 0);
	set_nofile(normal.rlim_cur);
	faultd_ctx_destroy(ctx);
}

Test(load, out_of_descriptors_fails_cleanly, .timeout = 60)
{
	struct resources before, after;

	out_of_fds_pass(21); /* warm-up */
	before = resources_now();
	out_of_fds_pass(20);
	out_of_fds_pass(21);
	after = resources_now();
	assert_same_resources(before, after, "after the context is gone");
}

/* ------------------------------------------------------------------------
 * Many restores through one daemon
 */

#define NCLIENTS 64
#define CTAG 0xc11e47ull

static char ddir[] = "/var/tmp/faultd-load-XXXXXX";
static char dsock[256];

/*
 * Start the daemon (from FAULTD_DAEMON) and wait until it has made its
 * socket, before any connection: what it holds then, *base, is what it
 * holds when idle. Then wait until it listens.
 */
static pid_t daemon_start(struct resources *base)
{
	const char *exe = getenv("FAULTD_DAEMON");
	uint64_t end = test_now_ns() + 5000000000ull;
	struct stat sb;
	pid_t pid;
	int s;

	cr_assert(exe, "FAULTD_DAEMON not set (run through meson test)");
	cr_assert(mkdtemp(ddir));
	snprintf(dsock, sizeof(dsock), "%s/faultd.sock", ddir);
	pid = fork();
	if (pid == 0) {
		/* A test that dies must not leave its daemon behind. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl(exe, exe, "--socket", dsock, (char *)NULL);
		_exit(127);
	}
	cr_assert(pid > 0);
	while (stat(dsock, &sb) < 0 || !S_ISSOCK(sb.st_mode)) {
		cr_assert(test_now_ns() < end, "the daemon did not come up");
		sched_yield();
	}
	*base = resources_of(pid);
	cr_assert_eq(base->threads, 1);
	while ((s = proto_connect(dsock)) < 0) /* bound, not listening yet */
		cr_assert(test_now_ns() < end, "connect: %s", strerror(-s));
	close(s);
	return pid;
}

static void daemon_stop(pid_t pid)
{
	int status;

	kill(pid, SIGTERM);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "daemon status %#x", status);
}

/* The images go, whether the test passed or not (a daemon dies with it). */
static void remove_images(void)
{
	char cmd[128];

	if (strstr(ddir, "XXXXXX"))
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", ddir);
	cr_assert_eq(system(cmd), 0);
}

TestSuite(load, .fini = remove_images);

/* The daemon's STATUS into @st (PROTO_MAX_MSG bytes), as faultctl asks. */
static void daemon_status(struct proto_status *st)
{
	struct proto_hello hello;
	struct proto_hdr req;
	const char *why;
	int s = proto_connect(dsock);
	ssize_t n;

	cr_assert(s >= 0, "connect: %s", strerror(-s));
	cr_assert_eq(proto_hello(s, 0, &hello), 0);
	proto_init(&req, MSG_STATUS, sizeof(req));
	cr_assert_eq(proto_send(s, &req, NULL, 0), 0);
	n = proto_recv(s, st, PROTO_MAX_MSG, NULL, 0, NULL);
	close(s);
	cr_assert_gt(n, 0);
	cr_assert_eq(proto_check(st, (size_t)n, &why), 0, "%s", why);
	cr_assert_eq(st->h.type, MSG_STATUS);
}

/* The io_uring rings (of its threads) mapped in the daemon. */
static long daemon_rings(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	return count_matching(path, "io_uring");
}

/*
 * Wait, with a deadline, until the daemon has no session and as many
 * descriptors and threads as at @base. The STATUS exchange itself runs
 * on a thread of the daemon, so the counts are polled after it.
 */
static struct resources daemon_settle(pid_t pid, struct resources base)
{
	struct proto_status *st = malloc(PROTO_MAX_MSG);
	uint64_t end = test_now_ns() + 30000000000ull;
	struct resources now;

	cr_assert(st);
	do {
		daemon_status(st);
		cr_assert(test_now_ns() < end, "%u sessions left",
			  st->nr_sessions);
	} while (st->nr_sessions);
	free(st);
	while (now = resources_of(pid), now.fds != base.fds ||
	       now.threads != base.threads || daemon_rings(pid)) {
		cr_assert(test_now_ns() < end,
			  "the daemon keeps %ld descriptors (%ld at the "
			  "start), %ld threads (%ld), %ld rings mapped",
			  now.fds, base.fds, now.threads, base.threads,
			  daemon_rings(pid));
		sched_yield();
	}
	return now;
}

static size_t client_len(unsigned int i)
{
	return 2 * MIB + (i % 8) * 256 * 1024; /* 2 to 3.75 MiB */
}

/* Image @i: client_len(i) bytes of pattern(CTAG + i). */
static void make_images(void)
{
	struct faultd_ctx *ctx;

	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	for (unsigned int i = 0; i < NCLIENTS; i++) {
		struct faultd_region_opts o = { .size = sizeof(o),
						.length = client_len(i) };
		struct faultd_region *r;
		char path[300];

		snprintf(path, sizeof(path), "%s/img%u", ddir, i);
		cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
		pattern_fill(CTAG + i, 0, faultd_region_base(r), o.length);
		cr_assert_eq(faultd_checkpoint(r, path, NULL), 0);
		cr_assert_eq(faultd_region_destroy(r), 0);
	}
	faultd_ctx_destroy(ctx);
}

struct rclient {
	unsigned int i;
	bool lazy;
	int ready, go; /* pipe ends: written once restored; EOF: go */
};

/*
 * A client: restore image i through the daemon, say so, wait for the
 * others, read every byte. Exit 0: all of it right, served by the daemon.
 */
static void rclient_main(const struct rclient *c)
{
	struct faultd_restore_opts o = { .size = sizeof(o),
					 .flags = FAULTD_RESTORE_DAEMON,
					 .socket = dsock };
	struct faultd_restore_progress p = { .size = sizeof(p) };
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	char path[300], b;

	snprintf(path, sizeof(path), "%s/img%u", ddir, c->i);
	if (c->lazy)
		o.flags |= FAULTD_RESTORE_LAZY;
	if (faultd_ctx_create(NULL, &ctx) || faultd_restore(ctx, path, &o, &r))
		_exit(10);
	if (write(c->ready, "r", 1) != 1 || read(c->go, &b, 1) != 0)
		_exit(11);
	if (pattern_check(CTAG + c->i, 0, faultd_region_base(r),
			  client_len(c->i)))
		_exit(12);
	if (c->lazy && faultd_restore_wait(r) != -EAGAIN)
		_exit(13);
	if (!c->lazy && faultd_restore_wait(r))
		_exit(14);
	if (faultd_restore_progress(r, &p) || !p.daemon || p.daemon_died ||
	    (!c->lazy && !p.done))
		_exit(15);
	faultd_ctx_destroy(ctx);
	_exit(0);
}

/* Read @n bytes from @fd within 60 s; returns how many came. */
static size_t read_n(int fd, size_t n)
{
	uint64_t end = test_now_ns() + 60000000000ull;
	size_t got = 0;
	char buf[NCLIENTS];

	while (got < n && test_now_ns() < end) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, 100) <= 0)
			continue;
		r = read(fd, buf, n - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

/*
 * Every client's session is in STATUS, with its pid and size. The daemon
 * lists a session once its thread has sent the ACK and goes on: wait for
 * the last ones with a deadline.
 */
static void check_sessions(const pid_t *pid)
{
	struct proto_status *st = malloc(PROTO_MAX_MSG);
	uint64_t end = test_now_ns() + 10000000000ull;

	cr_assert(st);
	do
		daemon_status(st);
	while (st->nr_sessions < NCLIENTS && test_now_ns() < end);
	cr_assert_eq(st->nr_sessions, NCLIENTS, "%u sessions",
		     st->nr_sessions);
	for (unsigned int i = 0; i < NCLIENTS; i++) {
		uint32_t k = 0;

		while (k < st->nr_sessions && st->s[k].pid != pid[i])
			k++;
		cr_assert_lt(k, st->nr_sessions, "no session of client %u", i);
		cr_assert_eq(st->s[k].pages_total, client_len(i) / PAGE);
	}
	free(st);
}

/*
 * One round: NCLIENTS processes restore at once - all registered before
 * any reads - and each checks every byte of its own image.
 */
static void restore_round(pid_t dpid, bool lazy)
{
	pid_t pid[NCLIENTS];
	int ready[2], go[2];

	cr_assert_eq(pipe2(ready, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(go, O_CLOEXEC), 0);
	for (unsigned int i = 0; i < NCLIENTS; i++) {
		struct rclient c = { i, lazy, ready[1], go[0] };

		pid[i] = fork();
		cr_assert(pid[i] >= 0);
		if (pid[i] == 0) {
			close(ready[0]);
			close(go[1]);
			rclient_main(&c);
		}
	}
	close(ready[1]);
	close(go[0]);
	cr_expect_eq(read_n(ready[0], NCLIENTS), NCLIENTS,
		     "not every client restored");
	/* A lazy session lasts until its client has read every page; one
	 * with a push may end as soon as the push is done. */
	if (lazy) {
		check_sessions(pid);
		/* Each connection thread read its image through a ring. */
		cr_assert_gt(daemon_rings(dpid), 0);
	}
	close(go[1]);
	for (unsigned int i = 0; i < NCLIENTS; i++) {
		int status;

		cr_assert_eq(waitpid(pid[i], &status, 0), pid[i]);
		cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "client %u: status %#x", i, status);
	}
	close(ready[0]);
}

/*
 * Two rounds: after each, the daemon is back to its descriptors and
 * threads at the start, with no io_uring ring left mapped. Its other
 * mappings are only logged: glibc makes malloc arenas as threads contend
 * (up to 8 per CPU) and keeps them, so their number is not a leak.
 */
static void many_restores(bool lazy)
{
	struct resources base, first, second;
	pid_t d = daemon_start(&base);

	make_images();
	restore_round(d, lazy);
	first = daemon_settle(d, base);
	restore_round(d, lazy);
	second = daemon_settle(d, base);
	cr_log_info("daemon: %ld descriptors, %ld thread; %ld mappings at "
		    "the start, %ld after a round, %ld after two", second.fds,
		    second.threads, base.maps, first.maps, second.maps);
	daemon_stop(d);
}

Test(load, sixty_four_lazy_restores_at_once, .timeout = 300)
{
	many_restores(true);
}

Test(load, sixty_four_restores_with_push, .timeout = 300)
{
	many_restores(false);
}

/* ------------------------------------------------------------------------
 * Create/destroy churn
 */

#define NCHURN 4 /* threads */

enum churn_kind {
	C_OWN,		/* handler thread of its own */
	C_GROUP,	/* in the shared group */
	C_WP,		/* write-protected, in the group: dirty sets */
	C_RESIZE,	/* grown, shrunk, grown again */
	C_PREFETCH,	/* filled by the prefetch workers while it faults */
	C_SAME_THREAD,	/* resolved in this thread's SIGBUS handler */
	C_NR,
};

static const char *const churn_names[C_NR] = {
	"own", "group", "wp", "resize", "prefetch", "same-thread",
};

struct churn {
	struct faultd_ctx *ctx;
	struct faultd_group *group;
	uint64_t end;		/* ns; 0: run @iters iterations */
	unsigned long iters;	/* per thread */
	bool have[C_NR];
	atomic_ulong done[C_NR];
	atomic_ulong pages;	/* pages checked, every byte */
	atomic_bool failed;
	pthread_mutex_t lock;
	char error[512];
	struct faultd_stats stats; /* the context's, at the end */
};

struct churner {
	struct churn *c;
	unsigned int idx;
	unsigned int seed;
};

/* The first error wins; every thread stops at its next iteration. */
__attribute__((format(printf, 2, 3))) static bool
churn_fail(struct churn *c, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&c->lock);
	if (!atomic_exchange(&c->failed, true)) {
		va_start(ap, fmt);
		vsnprintf(c->error, sizeof(c->error), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&c->lock);
	return false;
}

static uint64_t churn_mark(uint64_t tag, size_t pg)
{
	return ~pattern_word(tag, pg * PAGE);
}

/* Read pages [from, to) whole (faulting them in), then mark each. */
static size_t churn_touch(char *base, uint64_t tag, size_t from, size_t to)
{
	size_t bad = 0;

	for (size_t pg = from; pg < to; pg++) {
		bad += pattern_check(tag, pg * PAGE, base + pg * PAGE, PAGE);
		*(uint64_t *)(base + pg * PAGE) = churn_mark(tag, pg);
	}
	return bad;
}

/* Every byte of marked pages [from, to). */
static size_t churn_verify(struct churn *c, const char *base, uint64_t tag,
			   size_t from, size_t to)
{
	size_t bad = 0;

	for (size_t pg = from; pg < to; pg++) {
		const char *p = base + pg * PAGE;

		bad += *(const uint64_t *)p != churn_mark(tag, pg);
		bad += pattern_check(tag, pg * PAGE + 8, p + 8, PAGE - 8);
	}
	atomic_fetch_add(&c->pages, to - from);
	return bad;
}

static bool churn_destroy(struct churn *c, struct faultd_region *r,
			  const char *what)
{
	int ret = faultd_region_destroy(r);

	return ret ? churn_fail(c, "%s: destroy: %s", what, strerror(-ret))
		   : true;
}

static bool churn_stats(struct churn *c, struct faultd_region *r,
			const char *what, uint64_t faults, uint64_t fills,
			uint64_t wp)
{
	struct faultd_stats s = { .size = sizeof(s) };

	if (faultd_region_stats(r, &s))
		return churn_fail(c, "%s: stats", what);
	if (s.faults != faults || s.pager_fills != fills || s.wp_faults != wp)
		return churn_fail(c, "%s: %llu faults, %llu fills, %llu wp; "
				  "expected %llu, %llu, %llu (eexist %llu "
				  "eagain %llu fast %llu retry %llu abort %llu "
				  "miss %llu locked %llu)", what,
				  (unsigned long long)s.faults,
				  (unsigned long long)s.pager_fills,
				  (unsigned long long)s.wp_faults,
				  (unsigned long long)faults,
				  (unsigned long long)fills,
				  (unsigned long long)wp,
				  (unsigned long long)s.eexist,
				  (unsigned long long)s.eagain,
				  (unsigned long long)s.fast,
				  (unsigned long long)s.retry,
				  (unsigned long long)s.abort,
				  (unsigned long long)s.miss,
				  (unsigned long long)s.locked);
	return true;
}

/*
 * One fault per page, each filled by the pager: a region with its own
 * handler, one in the shared group, or a same-thread one.
 */
static bool churn_plain(struct churn *c, enum churn_kind k, uint64_t tag,
			size_t n)
{
	struct faultd_pager p = pattern_pager(
		tag, k == C_SAME_THREAD ? FAULTD_PAGER_SIGNAL_SAFE
					: FAULTD_PAGER_CONCURRENT);
	struct faultd_region_opts o = {
		.size = sizeof(o),
		.length = n * PAGE,
		.pager = &p,
		.group = k == C_GROUP ? c->group : NULL,
		.flags = k == C_SAME_THREAD ? FAULTD_REGION_SAME_THREAD : 0,
	};
	struct faultd_region *r;
	char *base;
	int ret = faultd_region_create(c->ctx, &o, &r);

	if (ret)
		return churn_fail(c, "%s: create: %s", churn_names[k],
				  strerror(-ret));
	base = faultd_region_base(r);
	if (churn_touch(base, tag, 0, n) || churn_verify(c, base, tag, 0, n))
		return churn_fail(c, "%s: wrong content", churn_names[k]);
	return churn_stats(c, r, churn_names[k], n, n, 0) &&
	       churn_destroy(c, r, churn_names[k]);
}

/* Exactly the pages of parity @odd in the bitmap of @n pages. */
static bool parity_set(const uint64_t *bm, size_t n, bool odd)
{
	for (size_t pg = 0; pg < n; pg++)
		if (!!(bm[pg / 64] & (1ull << (pg % 64))) != ((pg & 1) == odd))
			return false;
	return true;
}

/*
 * Write-protected: read faults install the pages clean; marking the odd
 * pages takes a WP fault each, and the dirty set is exactly them; after
 * protecting all again, the even ones.
 */
static bool churn_wp(struct churn *c, uint64_t tag, size_t n)
{
	struct faultd_pager p = pattern_pager(tag, FAULTD_PAGER_CONCURRENT);
	struct faultd_region_opts o = { .size = sizeof(o),
					.flags = FAULTD_REGION_WP,
					.length = n * PAGE,
					.pager = &p,
					.group = c->group };
	size_t odd = n / 2, even = n - n / 2;
	struct faultd_region *r;
	uint64_t bm[1];
	char *base;
	size_t bad = 0;

	if (faultd_region_create(c->ctx, &o, &r))
		return churn_fail(c, "wp: create");
	base = faultd_region_base(r);
	for (size_t pg = 0; pg < n; pg++)
		bad += pattern_check(tag, pg * PAGE, base + pg * PAGE, PAGE);
	for (size_t pg = 1; pg < n; pg += 2)
		*(uint64_t *)(base + pg * PAGE) = churn_mark(tag, pg);
	if (bad || faultd_region_dirty(r, 0, n * PAGE, bm) != (ssize_t)odd ||
	    !parity_set(bm, n, true))
		return churn_fail(c, "wp: odd pages: %zu bad words, dirty "
				  "%#llx", bad, (unsigned long long)bm[0]);
	if (faultd_region_protect(r, 0, n * PAGE))
		return churn_fail(c, "wp: protect");
	for (size_t pg = 0; pg < n; pg += 2)
		*(uint64_t *)(base + pg * PAGE) = churn_mark(tag, pg);
	if (faultd_region_dirty(r, 0, n * PAGE, bm) != (ssize_t)even ||
	    !parity_set(bm, n, false))
		return churn_fail(c, "wp: even pages: dirty %#llx",
				  (unsigned long long)bm[0]);
	if (churn_verify(c, base, tag, 0, n))
		return churn_fail(c, "wp: wrong content");
	return churn_stats(c, r, "wp", 2 * n, n, n) &&
	       churn_destroy(c, r, "wp");
}

/*
 * n pages, grown to 3n, shrunk to n/2 + 1, grown to 2n: the pages past
 * the shrink come back from the pager, not as they were marked.
 */
static bool churn_resize(struct churn *c, uint64_t tag, size_t n)
{
	struct faultd_pager p = pattern_pager(tag, FAULTD_PAGER_CONCURRENT);
	struct faultd_region_opts o = { .size = sizeof(o),
					.length = n * PAGE,
					.max_length = 4 * n * PAGE,
					.pager = &p };
	size_t half = n / 2 + 1, faults = 3 * n + (2 * n - half);
	struct faultd_region *r;
	char *base;
	size_t bad;

	if (faultd_region_create(c->ctx, &o, &r))
		return churn_fail(c, "resize: create");
	base = faultd_region_base(r);
	bad = churn_touch(base, tag, 0, n);
	if (faultd_region_resize(r, 3 * n * PAGE))
		return churn_fail(c, "resize: grow");
	bad += churn_touch(base, tag, n, 3 * n);
	bad += churn_verify(c, base, tag, 0, 3 * n);
	if (faultd_region_resize(r, half * PAGE) ||
	    faultd_region_resize(r, 2 * n * PAGE))
		return churn_fail(c, "resize: shrink and grow");
	bad += churn_touch(base, tag, half, 2 * n);
	bad += churn_verify(c, base, tag, 0, 2 * n);
	if (bad)
		return churn_fail(c, "resize: %zu words wrong", bad);
	return churn_stats(c, r, "resize", faults, faults, 0) &&
	       churn_destroy(c, r, "resize");
}

/*
 * The prefetch workers fill the region from the front while this thread
 * faults it from the back: every page is filled once, by one or the
 * other (the counters are not exact: a fault may race a worker's copy).
 */
static bool churn_prefetch(struct churn *c, uint64_t tag, size_t n)
{
	struct faultd_pager p = pattern_pager(tag, FAULTD_PAGER_CONCURRENT);
	struct faultd_region_opts o = { .size = sizeof(o),
					.length = n * PAGE,
					.pager = &p };
	struct faultd_region *r;
	char *base;
	size_t bad = 0;
	int ret;

	if (faultd_region_create(c->ctx, &o, &r))
		return churn_fail(c, "prefetch: create");
	base = faultd_region_base(r);
	ret = faultd_region_prefetch(r, 0, n * PAGE);
	if (ret && ret != -EAGAIN) /* a full queue is no error */
		return churn_fail(c, "prefetch: %s", strerror(-ret));
	for (size_t pg = n; pg-- > 0;)
		bad += churn_touch(base, tag, pg, pg + 1);
	if (faultd_region_prefetch_wait(r))
		return churn_fail(c, "prefetch: wait");
	if (bad || churn_verify(c, base, tag, 0, n))
		return churn_fail(c, "prefetch: wrong content");
	return churn_destroy(c, r, "prefetch");
}

static bool churn_once(struct churner *w, enum churn_kind k, uint64_t tag)
{
	size_t n = 1 + (size_t)rand_r(&w->seed) % 16;

	switch (k) {
	case C_WP:
		return churn_wp(w->c, tag, n);
	case C_RESIZE:
		return churn_resize(w->c, tag, n);
	case C_PREFETCH:
		return churn_prefetch(w->c, tag, 4 * n);
	default:
		return churn_plain(w->c, k, tag, n);
	}
}

static void *churn_main(void *arg)
{
	struct churner *w = arg;
	struct churn *c = w->c;

	for (unsigned long i = 0; !atomic_load(&c->failed); i++) {
		enum churn_kind k = (enum churn_kind)((i + w->idx) % C_NR);
		uint64_t tag = (uint64_t)w->idx << 48 | i;

		if (c->end ? test_now_ns() >= c->end : i >= c->iters)
			break;
		if (!c->have[k])
			continue;
		if (churn_once(w, k, tag))
			atomic_fetch_add(&c->done[k], 1);
	}
	return NULL;
}

/*
 * NCHURN threads create, fault, check and destroy regions of every kind,
 * for @seconds or (0) @iters iterations each, in a context and group made
 * for the run and gone after it.
 */
static void churn_run(struct churn *c, double seconds, unsigned long iters)
{
	struct faultd_group_opts go = { .size = sizeof(go), .threads = 2 };
	uint64_t have = probe_have();
	struct churner w[NCHURN];
	pthread_t t[NCHURN];

	memset(c, 0, sizeof(*c));
	pthread_mutex_init(&c->lock, NULL);
	for (int k = 0; k < C_NR; k++)
		c->have[k] = true;
	c->have[C_WP] = have & FAULTD_HAVE_WP;
	c->have[C_SAME_THREAD] = have & FAULTD_HAVE_SIGBUS;
	c->end = seconds > 0 ? test_now_ns() + (uint64_t)(seconds * 1e9) : 0;
	c->iters = iters;
	cr_assert_eq(faultd_ctx_create(NULL, &c->ctx), 0);
	cr_assert_eq(faultd_group_create(c->ctx, &go, &c->group), 0);
	for (unsigned int i = 0; i < NCHURN; i++) {
		w[i] = (struct churner){ c, i, i * 7 + 1 };
		cr_assert_eq(pthread_create(&t[i], NULL, churn_main, &w[i]), 0);
	}
	for (unsigned int i = 0; i < NCHURN; i++)
		pthread_join(t[i], NULL);
	cr_assert_not(atomic_load(&c->failed), "%s", c->error);
	c->stats.size = sizeof(c->stats);
	cr_assert_eq(faultd_ctx_stats(c->ctx, &c->stats), 0);
	cr_assert_eq(faultd_group_destroy(c->group), 0);
	faultd_ctx_destroy(c->ctx);
	pthread_mutex_destroy(&c->lock);
}

/* FAULTD_LOAD_SECONDS: the length of the churn (default 5). */
static double load_seconds(void)
{
	const char *s = getenv("FAULTD_LOAD_SECONDS");
	double v = s ? atof(s) : 0;

	return v > 0 ? v : 5.0;
}

/* The timeout leaves room for long runs (make stress). */
Test(load, create_destroy_churn, .timeout = 3600)
{
	static struct churn c;
	struct resources before, after;
	unsigned long total = 0;
	char line[256];
	int at = 0;

	churn_run(&c, 0, 4 * C_NR); /* warm-up */
	before = resources_now();
	churn_run(&c, load_seconds(), 0);
	after = resources_now();
	assert_same_resources(before, after, "after the churn");
	for (int k = 0; k < C_NR; k++) {
		total += atomic_load(&c.done[k]);
		at += snprintf(line + at, sizeof(line) - (size_t)at, " %s %lu",
			       churn_names[k], atomic_load(&c.done[k]));
	}
	cr_assert_gt(total, 0);
	cr_log_info("%lu regions in %.0f s:%s; %lu pages checked; %llu "
		    "faults (%llu write-protect, %llu already resolved, %llu "
		    "in no region)", total, load_seconds(), line,
		    atomic_load(&c.pages), (unsigned long long)c.stats.faults,
		    (unsigned long long)c.stats.wp_faults,
		    (unsigned long long)c.stats.eexist,
		    (unsigned long long)c.stats.no_region);
}

/* ------------------------------------------------------------------------
 * A message read before its region was destroyed, handled after another
 * region took the address: what the churn found. A handler reads up to a
 * batch of messages at once; one held in a batch behind a slow fill is
 * stale once its region is gone (its thread, woken, got SIGSEGV). The
 * region now at the address belongs to another group: the message is no
 * fault of it - not counted there, no page filled there - and the handler
 * must not use that region's counters, which it has one per thread of its
 * own group (a group of two threads would write past them).
 */

/* Fill number k (from 1) waits until @open >= k (30 s at most). */
struct gate {
	atomic_int entered;
	atomic_int open;
};

static ssize_t gate_fill(void *arg, struct faultd_region *r, uint64_t off,
			 void *buf, size_t len)
{
	struct gate *g = arg;
	int k = atomic_fetch_add(&g->entered, 1) + 1;

	(void)r;
	wait_at_least(&g->open, k, 30000);
	pattern_fill(RTAG, off, buf, len);
	return (ssize_t)len;
}

static __thread sigjmp_buf stale_jmp;

static void stale_segv(int sig)
{
	siglongjmp(stale_jmp, sig);
}

struct toucher {
	const char *addr;
	uint64_t tag, off;
	atomic_int tid;
	int outcome; /* 1: the pattern, 0: not, or the signal */
};

static void *touch_page(void *arg)
{
	struct toucher *t = arg;
	int sig = sigsetjmp(stale_jmp, 1);

	if (sig) {
		t->outcome = sig;
		return NULL;
	}
	atomic_store(&t->tid, (int)gettid());
	t->outcome = pattern_check(t->tag, t->off, t->addr, PAGE) == 0;
	return NULL;
}

/* Thread @tid of this process is asleep ('S': here, on its fault). */
static bool asleep(int tid)
{
	char path[64], buf[256], *p;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	f = fopen(path, "re");
	if (!f)
		return false;
	p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
	fclose(f);
	return p && p[1] == ' ' && p[2] == 'S';
}

static void wait_asleep(struct toucher *t)
{
	uint64_t end = test_now_ns() + 10000000000ull;

	while (!atomic_load(&t->tid) || !asleep(atomic_load(&t->tid)))
		cr_assert(test_now_ns() < end, "the thread does not fault");
}

/* Faults counted in @r, or faults in no region of @ctx (r NULL). */
static uint64_t stat_of(const struct faultd_region *r,
			const struct faultd_ctx *ctx)
{
	struct faultd_stats s = { .size = sizeof(s) };

	if (r)
		cr_assert_eq(faultd_region_stats(r, &s), 0);
	else
		cr_assert_eq(faultd_ctx_stats(ctx, &s), 0);
	return r ? s.faults : s.no_region;
}

Test(load, stale_message_after_address_reuse, .timeout = 60)
{
	struct faultd_group_opts go = { .size = sizeof(go), .threads = 1 };
	struct gate gate = { 0 };
	struct faultd_pager gp = { .size = sizeof(gp),
				   .flags = FAULTD_PAGER_CONCURRENT,
				   .fill = gate_fill,
				   .arg = &gate };
	const unsigned int cc = FAULTD_PAGER_CONCURRENT;
	struct faultd_pager p1 = pattern_pager(RTAG + 1, cc);
	struct faultd_pager p2 = pattern_pager(RTAG + 2, cc);
	struct faultd_region_opts o = { .size = sizeof(o),
					.length = RPAGES * PAGE };
	struct sigaction sa = { .sa_handler = stale_segv }, old_sa;
	struct faultd_region *r0, *r1, *r2;
	struct toucher a, b, c;
	struct faultd_group *g, *g2;
	struct faultd_ctx *ctx;
	pthread_t ta, tb, tc;
	uint64_t end;
	unsigned char vec;
	int ret;

	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	cr_assert_eq(faultd_group_create(ctx, &go, &g), 0);
	cr_assert_eq(faultd_group_create(ctx, &go, &g2), 0);
	o.group = g;
	o.pager = &gp;
	cr_assert_eq(faultd_region_create(ctx, &o, &r0), 0);
	o.pager = &p1;
	cr_assert_eq(faultd_region_create(ctx, &o, &r1), 0);
	a = (struct toucher){ faultd_region_base(r0), RTAG, 0 };
	c = (struct toucher){ a.addr + PAGE, RTAG, PAGE };
	b = (struct toucher){ faultd_region_base(r1), RTAG + 1, 0 };
	cr_assert_eq(sigaction(SIGSEGV, &sa, &old_sa), 0);
	/* The group's one handler waits in fill 1 while c and b fault... */
	pthread_create(&ta, NULL, touch_page, &a);
	cr_assert(wait_at_least(&gate.entered, 1, 10000));
	pthread_create(&tc, NULL, touch_page, &c);
	wait_asleep(&c);
	pthread_create(&tb, NULL, touch_page, &b);
	wait_asleep(&b);
	/* ... then reads both messages at once and waits in fill 2 (c's). */
	atomic_store(&gate.open, 1);
	cr_assert(wait_at_least(&gate.entered, 2, 10000));
	/* b's message is read, not handled: its region goes, b gets SIGSEGV. */
	cr_assert_eq(faultd_region_destroy(r1), 0);
	pthread_join(tb, NULL);
	cr_expect_eq(b.outcome, SIGSEGV);
	/* A region of the other group takes the address (made beforehand,
	 * so that no thread stack or buffer of its own can have taken it). */
	o.flags = FAULTD_REGION_FIXED;
	o.addr = (void *)b.addr;
	o.group = g2;
	o.pager = &p2;
	ret = faultd_region_create(ctx, &o, &r2);
	if (ret == -EEXIST)
		cr_skip_test("something else took the address meanwhile");
	cr_assert_eq(ret, 0, "%s", strerror(-ret));
	atomic_store(&gate.open, 2);
	end = test_now_ns() + 10000000000ull;
	while (!stat_of(NULL, ctx) && !stat_of(r2, ctx))
		cr_assert(test_now_ns() < end, "b's message is not handled");
	cr_expect_eq(stat_of(r2, ctx), 0, "a fault counted in r2");
	cr_expect_eq(stat_of(NULL, ctx), 1);
	cr_assert_eq(mincore((void *)b.addr, PAGE, &vec), 0);
	cr_expect_eq(vec & 1, 0, "r2's page filled by the other group");
	pthread_join(ta, NULL);
	pthread_join(tc, NULL);
	cr_expect_eq(a.outcome, 1);
	cr_expect_eq(c.outcome, 1);
	sigaction(SIGSEGV, &old_sa, NULL);
	faultd_ctx_destroy(ctx);
}
