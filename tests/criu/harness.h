/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * harness.h - running CRIU and the workload for a test: a scratch folder
 * (kept, with what tells why, when the test fails), the workload started
 * and its layout read, criu commands with deadlines (in a network
 * namespace when asked), and the workload's result lines.
 *
 * CRIU is the binary named by $CRIU (tests/criu/run.sh sets it from
 * scripts/criu.sh, or the suite is skipped); the workload is
 * $FAULTD_CRIU_WORKLOAD. The test process is a child subreaper, so that a
 * task `criu restore -d` leaves behind is its child and can be waited for.
 */
#ifndef FAULTD_TEST_CRIU_HARNESS_H
#define FAULTD_TEST_CRIU_HARNESS_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/close_range.h>

#include <criterion/criterion.h>

#include "criu/workload.h"
#include "setting.h"

#define H_DEADLINE_MS 120000	/* any one criu command or workload run */

struct h_task {
	pid_t pid;
	uint64_t r0, r0_len, r1, r1_len;
	pid_t zombie;
	uint64_t seed;
};

/* The scratch folder of the running test. */
static char h_dir[128];

static inline const char *h_path(const char *name)
{
	static char p[4][256];
	static unsigned int i;
	char *s = p[i++ % 4];

	snprintf(s, sizeof(p[0]), "%s/%s", h_dir, name);
	return s;
}

static inline int h_rm_one(const char *p, const struct stat *st, int flag,
			   struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	return remove(p);
}

/* The holders of lock file @path, from /proc/locks, into @f. */
static inline void h_diag_holders(FILE *f, const char *path)
{
	char line[256], p[64], cmd[256];
	struct stat st;
	FILE *locks;

	if (stat(path, &st) || !(locks = fopen("/proc/locks", "re")))
		return;
	while (fgets(line, sizeof(line), locks)) {
		unsigned long ino;
		char mode[16];
		int pid, n;
		FILE *c;

		if (sscanf(line, "%*d: FLOCK %*s %15s %d %*x:%*x:%lu", mode,
			   &pid, &ino) != 3 || ino != st.st_ino)
			continue;
		snprintf(p, sizeof(p), "/proc/%d/cmdline", pid);
		c = fopen(p, "re");
		n = c ? (int)fread(cmd, 1, sizeof(cmd) - 1, c) : 0;
		if (c)
			fclose(c);
		for (int i = 0; i < n; i++)
			cmd[i] = cmd[i] ? cmd[i] : ' ';
		cmd[n] = '\0';
		fprintf(f, "  %s %s: pid %d %s\n", path, mode, pid, cmd);
	}
	fclose(locks);
}

/*
 * Which other runs hold the machine-wide settings the tests share
 * (setting.h: /tmp/faultd-*.lock), and which test programs run besides
 * this one: into @f.
 */
static inline void h_diag_others(FILE *f)
{
	char line[256];
	glob_t g = { 0 };
	FILE *ps;

	fprintf(f, "holders of the tests' machine-wide settings "
		   "(/tmp/faultd-*.lock):\n");
	if (!glob("/tmp/faultd-*.lock", 0, NULL, &g))
		for (size_t i = 0; i < g.gl_pathc; i++)
			h_diag_holders(f, g.gl_pathv[i]);
	globfree(&g);
	fprintf(f, "test programs, setting-hold and faultd running:\n");
	ps = popen("ps -eo pid,etime,args | grep -E '/test-[a-z]|"
		   "setting-hold|faultd ' | grep -v grep", "re");
	while (ps && fgets(line, sizeof(line), ps))
		fprintf(f, "  %s", line);
	if (ps)
		pclose(ps);
}

/* The machine as the test left it, into @f: THP, pipes, load, others. */
static inline void h_diag(FILE *f)
{
	static const char *const files[] = {
		"/sys/kernel/mm/transparent_hugepage/enabled",
		"/sys/kernel/mm/transparent_hugepage/defrag",
		"/sys/kernel/mm/transparent_hugepage/khugepaged/scan_sleep_millisecs",
		"/proc/sys/fs/pipe-max-size",
		"/proc/loadavg",
	};
	char v[256];

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		FILE *g = fopen(files[i], "re");

		if (g && fgets(v, sizeof(v), g))
			fprintf(f, "%s: %s", files[i], v);
		if (g)
			fclose(g);
	}
	h_diag_others(f);
}

/*
 * A test that failed, crashed or timed out: keep its folder @dir (the
 * dumps with their pagemap-*.img, CRIU's logs, faultd.out, criu.out),
 * add diag.txt (h_diag() and the kernel's last messages), and say where
 * on stderr - which meson test --print-errorlogs shows, in CI too - with
 * diag.txt and the tail of every log: a CI machine's folder is gone after
 * the run.
 */
static inline void h_keep_failed(const char *name, const char *dir,
				 const char *how)
{
	char diag[288], cmd[1024];
	FILE *f;

	snprintf(diag, sizeof(diag), "%s/diag.txt", dir);
	f = fopen(diag, "we");
	if (f) {
		fprintf(f, "criu::%s %s\n", name, how);
		h_diag(f);
		fprintf(f, "dmesg, the last 40 lines:\n");
		fclose(f);
	}
	snprintf(cmd, sizeof(cmd), "dmesg 2>&1 | tail -n 40 >> %s", diag);
	(void)!system(cmd);
	fprintf(stderr, "criu: %s %s: its scratch folder is kept: %s\n", name,
		how, dir);
	snprintf(cmd, sizeof(cmd),
		 "cd %s && { echo '--- %s/diag.txt:'; cat diag.txt; for f in "
		 "$(find . -name '*.log' -o -name '*.out' | sort); do echo "
		 "\"--- %s/${f#./}, the last 25 lines:\"; tail -n 25 \"$f\"; "
		 "done; } >&2", dir, dir, dir);
	(void)!system(cmd);
}

static inline void h_remove(const char *dir)
{
	if (!getenv("FAULTD_CRIU_KEEP"))
		nftw(dir, h_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/*
 * The scratch folders. Criterion runs each test in a process of its own
 * and runs .fini after a failure as after a pass, so a test cannot tell
 * how it ended: the runner does. It makes a folder for the run
 * (FAULTD_CRIU_RUN, in PRE_ALL), each test makes its own in it, named
 * after the test, and at the test's end (POST_FINI, or TEST_CRASH) the
 * runner removes it or keeps it (h_keep_failed()); the run's goes at the
 * end if nothing is kept in it. FAULTD_CRIU_KEEP=1 keeps every folder.
 * Under the TSan runner (tests/tsan/), which has no report hooks and
 * records failures in shim_failed, a test's .fini decides itself.
 */
#ifndef FAULTD_TEST_CRITERION_SHIM_H
#include <criterion/hooks.h>

static char h_run_dir[64];

static inline void h_test_dir(const struct criterion_test *t, char *buf,
			      size_t len)
{
	snprintf(buf, len, "%s/%s", h_run_dir, t->name);
}

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
	const char *tmp = getenv("TMPDIR");

	(void)set;
	/* Short: socket paths in a test's folder must fit sun_path. */
	if (!tmp || !*tmp || strlen(tmp) > 24)
		tmp = "/tmp";
	snprintf(h_run_dir, sizeof(h_run_dir), "%s/faultd-criu-XXXXXX", tmp);
	if (mkdtemp(h_run_dir))
		setenv("FAULTD_CRIU_RUN", h_run_dir, 1);
	else
		h_run_dir[0] = '\0';
}

ReportHook(POST_FINI)(struct criterion_test_stats *st)
{
	char dir[256];

	if (!h_run_dir[0])
		return;
	h_test_dir(st->test, dir, sizeof(dir));
	if (access(dir, F_OK))
		return;
	if (st->test_status == CR_STATUS_FAILED)
		h_keep_failed(st->test->name, dir,
			      st->timed_out ? "timed out" : "failed");
	else
		h_remove(dir);
}

ReportHook(TEST_CRASH)(struct criterion_test_stats *st)
{
	char dir[256];

	if (!h_run_dir[0])
		return;
	h_test_dir(st->test, dir, sizeof(dir));
	if (!access(dir, F_OK))
		h_keep_failed(st->test->name, dir, "crashed");
}

ReportHook(POST_ALL)(struct criterion_global_stats *st)
{
	(void)st;
	if (h_run_dir[0] && !getenv("FAULTD_CRIU_KEEP"))
		rmdir(h_run_dir); /* only if nothing was kept in it */
}

/* The runner removes or keeps the folder (POST_FINI). */
static inline void h_fini(void)
{
}
#else
static inline void h_fini(void)
{
	if (!h_dir[0])
		return;
	if (atomic_load(&shim_failed))
		h_keep_failed("test", h_dir, "failed");
	else
		h_remove(h_dir);
	h_dir[0] = '\0';
}
#endif

static inline void h_setup(void)
{
#ifndef FAULTD_TEST_CRITERION_SHIM_H
	const char *run = getenv("FAULTD_CRIU_RUN");

	cr_assert(run, "the runner made no folder for the run (in TMPDIR)");
	snprintf(h_dir, sizeof(h_dir), "%s/%s", run,
		 criterion_current_test->name);
	cr_assert_eq(mkdir(h_dir, 0755), 0, "mkdir %s", h_dir);
#else
	snprintf(h_dir, sizeof(h_dir), "/tmp/faultd-criu-XXXXXX");
	cr_assert(mkdtemp(h_dir), "mkdtemp %s", h_dir);
#endif
	cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	cr_assert(getenv("CRIU"), "CRIU not set (run through meson test)");
	cr_assert(getenv("FAULTD_CRIU_WORKLOAD"), "FAULTD_CRIU_WORKLOAD not set");
}

static inline uint64_t h_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Wait for @pid (a child) for at most @ms: its status, or -ETIMEDOUT. */
static inline int h_wait(pid_t pid, int ms)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0), st;
	struct pollfd p = { .fd = fd, .events = POLLIN };

	cr_assert(fd >= 0, "pidfd_open %d", (int)pid);
	if (poll(&p, 1, ms) != 1) {
		close(fd);
		return -ETIMEDOUT;
	}
	close(fd);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	return st;
}

/* Enter the network namespace named @ns (ip netns), or stay if NULL. */
static inline void h_enter_ns(const char *ns)
{
	char p[128];
	int fd;

	if (!ns)
		return;
	snprintf(p, sizeof(p), "/run/netns/%s", ns);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET))
		_exit(126);
	close(fd);
}

/*
 * Start argv (NULL-terminated) in @ns with its output in @log; @status_fd,
 * when >= 0, stays open in the child under the same number. Nothing else
 * of ours is passed on: an inherited descriptor of the test runner (its
 * shared-memory arena, say) would be dumped by CRIU with the workload.
 */
static inline pid_t h_spawn(const char *ns, const char *log, int keep_fd,
			    char *const argv[])
{
	pid_t pid = fork();

	cr_assert(pid >= 0);
	if (pid == 0) {
		int out = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
			       0644);
		int in = open("/dev/null", O_RDONLY | O_CLOEXEC);

		h_enter_ns(ns);
		if (out < 0 || in < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 ||
		    dup2(out, 2) < 0)
			_exit(126);
		if (close_range(3, ~0u, CLOSE_RANGE_CLOEXEC))
			_exit(126);
		if (keep_fd >= 0)
			fcntl(keep_fd, F_SETFD, 0);
		setsid();
		execvp(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* Run argv to its end; returns its exit code (or 128 + signal). */
static inline int h_run(const char *ns, const char *log, char *const argv[])
{
	pid_t pid = h_spawn(ns, log, -1, argv);
	int st = h_wait(pid, H_DEADLINE_MS);

	if (st == -ETIMEDOUT) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		cr_assert_fail("%s %s: no end within %d ms", argv[0], argv[1],
			       H_DEADLINE_MS);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* @argv: @first, then the words of @line split at spaces (in place). */
static inline char **h_words(const char *first, char *line)
{
	static char *argv[64];
	int n = 0;

	if (first)
		argv[n++] = (char *)first;
	for (char *s = strtok(line, " "); s && n < 63; s = strtok(NULL, " "))
		argv[n++] = s;
	argv[n] = NULL;
	return argv;
}

/* Run criu with the words of @fmt, in @ns; returns its exit code. */
__attribute__((format(printf, 2, 3))) static inline int
h_criu(const char *ns, const char *fmt, ...)
{
	static char line[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	return h_run(ns, h_path("criu.out"), h_words(getenv("CRIU"), line));
}

/*
 * Start criu with the words of @fmt and "--status-fd N" in @ns, and wait
 * until it says it is ready (it wrote its status byte). Returns its pid.
 */
__attribute__((format(printf, 2, 3))) static inline pid_t
h_criu_bg(const char *ns, const char *fmt, ...)
{
	static char line[1024];
	char c, **argv;
	int p[2];
	size_t n;
	va_list ap;
	pid_t pid;
	struct pollfd pf;

	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	n = strlen(line);
	snprintf(line + n, sizeof(line) - n, " --status-fd %d", p[1]);
	argv = h_words(getenv("CRIU"), line);
	pid = h_spawn(ns, h_path("criu.out"), p[1], argv);
	close(p[1]);
	pf = (struct pollfd){ .fd = p[0], .events = POLLIN };
	cr_assert_eq(poll(&pf, 1, H_DEADLINE_MS), 1, "criu %s: not ready",
		     argv[1]);
	cr_assert_eq(read(p[0], &c, 1), 1, "criu %s failed before ready "
		     "(see %s)", argv[1], h_path("criu.out"));
	close(p[0]);
	return pid;
}

/* Run the words of @fmt (a command found in PATH); its exit code. */
__attribute__((format(printf, 1, 2))) static inline int
h_cmd(const char *fmt, ...)
{
	static char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	return h_run(NULL, h_path("cmd.out"), h_words(NULL, line));
}

/*
 * Two network namespaces joined by a veth pair, A (a_ip) and B (b_ip),
 * named after the test's pid; removed by h_net_down().
 */
struct h_net {
	char a[32], b[32], a_ip[32], b_ip[32];
};

/*
 * CRIU's page server sizes its pipes with F_SETPIPE_SZ, and CRIU 4.2 goes
 * on after a failure with a pipe it does not have (page-xfer.c ignores
 * pipe_read_dest_init()'s error): faultd would read EIO. The suite holds
 * fs.pipe-max-size at FAULTD_CRIU_PIPE_MAX at least (tests/meson.build,
 * through tests/setting-hold, shared with any other run on the machine);
 * a test never changes it, and skips when it finds less.
 */
static inline void h_pipe_max_check(void)
{
	const char *need = getenv("FAULTD_CRIU_PIPE_MAX");
	unsigned long have = setting_number("/proc/sys/fs/pipe-max-size");

	cr_assert(need, "FAULTD_CRIU_PIPE_MAX not set (run through meson "
		  "test)");
	if (have < strtoul(need, NULL, 10))
		cr_skip_test("fs.pipe-max-size is %lu, CRIU's page server "
			     "needs %s: meson test holds it for the suite as "
			     "root (tests/setting-hold)", have, need);
}

static inline void h_net_up(struct h_net *n)
{
	unsigned int id = (unsigned int)getpid();

	h_pipe_max_check();
	memset(n, 0, sizeof(*n));
	snprintf(n->a, sizeof(n->a), "fdcA%u", id);
	snprintf(n->b, sizeof(n->b), "fdcB%u", id);
	snprintf(n->a_ip, sizeof(n->a_ip), "10.%u.%u.1", 100 + id % 100,
		 id / 100 % 250);
	snprintf(n->b_ip, sizeof(n->b_ip), "10.%u.%u.2", 100 + id % 100,
		 id / 100 % 250);
	if (h_cmd("ip netns add %s", n->a))
		cr_skip_test("cannot create a network namespace (ip netns "
			     "add, see %s)", h_path("cmd.out"));
	cr_assert_eq(h_cmd("ip netns add %s", n->b), 0);
	cr_assert_eq(h_cmd("ip link add fdva%u type veth peer name fdvb%u",
			   id, id), 0, "veth (see %s)", h_path("cmd.out"));
	cr_assert_eq(h_cmd("ip link set fdva%u netns %s", id, n->a), 0);
	cr_assert_eq(h_cmd("ip link set fdvb%u netns %s", id, n->b), 0);
	cr_assert_eq(h_cmd("ip -n %s addr add %s/30 dev fdva%u", n->a,
			   n->a_ip, id), 0);
	cr_assert_eq(h_cmd("ip -n %s addr add %s/30 dev fdvb%u", n->b,
			   n->b_ip, id), 0);
	cr_assert_eq(h_cmd("ip -n %s link set fdva%u up", n->a, id), 0);
	cr_assert_eq(h_cmd("ip -n %s link set fdvb%u up", n->b, id), 0);
	cr_assert_eq(h_cmd("ip -n %s link set lo up", n->a), 0);
	cr_assert_eq(h_cmd("ip -n %s link set lo up", n->b), 0);
}

static inline void h_net_down(struct h_net *n)
{
	if (n->a[0])
		h_cmd("ip netns del %s", n->a);
	if (n->b[0])
		h_cmd("ip netns del %s", n->b);
}

/* Switch this process to namespace @ns (NULL: back to where it began). */
static inline void h_join_ns(const char *ns)
{
	static int home = -1;
	char p[128];
	int fd;

	if (home < 0)
		home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	cr_assert(home >= 0);
	if (!ns) {
		cr_assert_eq(setns(home, CLONE_NEWNET), 0);
		return;
	}
	snprintf(p, sizeof(p), "/run/netns/%s", ns);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	cr_assert(fd >= 0, "%s", p);
	cr_assert_eq(setns(fd, CLONE_NEWNET), 0);
	close(fd);
}

/* Parse the workload's layout lines. */
static inline void h_parse_layout(struct h_task *t, char *buf)
{
	for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n")) {
		unsigned long a, b;
		int n, z;

		if (sscanf(l, "region %d %lx %lx", &n, &a, &b) == 3) {
			if (n == 0)
				t->r0 = a, t->r0_len = b;
			else
				t->r1 = a, t->r1_len = b;
		} else if (sscanf(l, "zombie %d", &z) == 1) {
			t->zombie = z;
		}
	}
}

/* Start the workload and wait until it has written its memory and layout. */
static inline void h_workload_once(struct h_task *t, const char *ns,
				   size_t mib, uint64_t seed, const char *mode)
{
	char size[32], sd[32], fd[16], buf[512];
	char *argv[] = { getenv("FAULTD_CRIU_WORKLOAD"), "--size", size,
			 "--seed", sd, "--ready", fd, "--result",
			 (char *)h_path("result"), "--mode", (char *)mode,
			 NULL };
	size_t got = 0;
	int p[2];

	memset(t, 0, sizeof(*t));
	t->seed = seed;
	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	snprintf(size, sizeof(size), "%zu", mib);
	snprintf(sd, sizeof(sd), "%llu", (unsigned long long)seed);
	snprintf(fd, sizeof(fd), "%d", p[1]);
	t->pid = h_spawn(ns, h_path("workload.log"), p[1], argv);
	close(p[1]);
	for (;;) {
		struct pollfd pf = { .fd = p[0], .events = POLLIN };
		ssize_t n;

		cr_assert_eq(poll(&pf, 1, H_DEADLINE_MS), 1,
			     "the workload did not get ready");
		n = read(p[0], buf + got, sizeof(buf) - 1 - got);
		cr_assert(n >= 0);
		if (n == 0)
			break;
		got += (size_t)n;
	}
	close(p[0]);
	buf[got] = '\0';
	cr_assert(strstr(buf, "ready\n"), "workload: %s (see %s)", buf,
		  h_path("workload.log"));
	h_parse_layout(t, buf);
}

/*
 * The user stack pointer of thread @tid of @pid once it waits in
 * rt_sigtimedwait() or futex() (where the workload waits for the dump), or
 * 0 when it is gone or does not get there in time.
 */
static inline unsigned long h_waiting_sp(pid_t pid, int tid)
{
	char p[96], line[256];
	long nr = -1;
	unsigned long sp = 0;

	snprintf(p, sizeof(p), "/proc/%d/task/%d/syscall", (int)pid, tid);
	for (int ms = 0; ms < H_DEADLINE_MS; ms++) {
		FILE *f = fopen(p, "re");
		bool got = f && fgets(line, sizeof(line), f);

		if (f)
			fclose(f);
		if (!got)
			return 0;
		if (sscanf(line, "%ld %*s %*s %*s %*s %*s %*s %lx", &nr,
			   &sp) == 2 &&
		    (nr == SYS_rt_sigtimedwait || nr == SYS_futex))
			return sp;
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	return 0;
}

/*
 * Does CRIU's dump of @pid mark its pages lazy? CRIU's is_stack() takes
 * every page for a stack page when a thread's stack pointer is page
 * aligned ((sp ^ vaddr) & ~PAGE_MASK is the offset in the page), and then
 * no page of the dump is lazy: `criu restore` copies all of them itself.
 * That is 1 dump in 256 per thread, and tests of what faultd serves need
 * lazy pages.
 */
static inline bool h_dump_is_lazy(pid_t pid)
{
	char p[64];
	struct dirent *de;
	bool lazy = true;
	DIR *d;

	snprintf(p, sizeof(p), "/proc/%d/task", (int)pid);
	d = opendir(p);
	cr_assert(d, "%s", p);
	while (lazy && (de = readdir(d)))
		if (de->d_name[0] != '.') {
			unsigned long sp = h_waiting_sp(pid, atoi(de->d_name));

			cr_assert(sp, "thread %s of the workload does not "
				  "wait (see %s)", de->d_name,
				  h_path("workload.log"));
			lazy = sp % WL_PAGE != 0;
		}
	closedir(d);
	return lazy;
}

/*
 * Start the workload (in @ns) with @mib MiB, @seed and @mode, and wait
 * until it has written its memory and layout and waits for the dump, with
 * no stack pointer that makes CRIU's dump of it eager (h_dump_is_lazy()):
 * it is started again then, at another random stack address.
 */
static inline void h_workload(struct h_task *t, const char *ns, size_t mib,
			      uint64_t seed, const char *mode)
{
	for (int tries = 0;; tries++) {
		h_workload_once(t, ns, mib, seed, mode);
		if (h_dump_is_lazy(t->pid))
			return;
		cr_assert(tries < 8, "the workload's stack stays page aligned");
		kill(t->pid, SIGKILL);
		cr_assert_neq(h_wait(t->pid, H_DEADLINE_MS), -ETIMEDOUT);
		if (t->zombie > 0)
			cr_assert_eq(waitpid(t->zombie, NULL, 0), t->zombie);
	}
}

/* criu dump of @t into folder @name (created), in @ns. */
static inline void h_dump(struct h_task *t, const char *ns, const char *name)
{
	const char *d = h_path(name);
	int st;

	cr_assert_eq(mkdir(d, 0755), 0);
	cr_assert_eq(h_criu(ns, "dump -t %d -D %s -o dump.log", (int)t->pid,
			    d), 0, "criu dump failed (see %s/dump.log)", d);
	st = h_wait(t->pid, H_DEADLINE_MS);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
		  "the dumped workload did not die of SIGKILL (%#x)", st);
	/* Its zombie came to us, the subreaper: its pid must be free. */
	if (t->zombie > 0)
		cr_assert_eq(waitpid(t->zombie, NULL, 0), t->zombie);
}

/*
 * After the restore: tell the workload to go, wait for it, and check its
 * exit code and result lines. Returns the parent's result line in @line.
 */
static inline void h_go_and_check(struct h_task *t, char *line, size_t len)
{
	char buf[4096];
	int st, fd;
	ssize_t n;

	cr_assert_eq(kill(t->pid, SIGUSR1), 0);
	st = h_wait(t->pid, H_DEADLINE_MS);
	cr_assert(st != -ETIMEDOUT, "the restored workload did not finish");
	fd = open(h_path("result"), O_RDONLY | O_CLOEXEC);
	cr_assert(fd >= 0, "no result file: the workload %s %d",
		  WIFSIGNALED(st) ? "died of signal" : "exited with",
		  WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	cr_assert(n > 0);
	buf[n] = '\0';
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "the workload found wrong bytes (status %#x): %s", st, buf);
	for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n")) {
		cr_assert(strstr(l, " ok=1 "), "%s", l);
		if (strstr(l, "role=parent"))
			snprintf(line, len, "%s", l);
	}
}

/* A field "name=value" of a result line. */
static inline uint64_t h_field(const char *line, const char *name)
{
	char key[64];
	const char *p;

	snprintf(key, sizeof(key), " %s=", name);
	p = strstr(line, key);
	cr_assert(p, "no %s in %s", name, line);
	return strtoull(p + strlen(key), NULL, 0);
}

/*
 * Start `faultd lazy-pages` ($FAULTD) with the words of @fmt and
 * "--status-fd N" in @ns, and wait until it says it listens. Returns its
 * pid, or -pid when it exited without saying so (its output is in
 * faultd.out).
 */
__attribute__((format(printf, 2, 3))) static inline pid_t
h_faultd_bg(const char *ns, const char *fmt, ...)
{
	static char line[1024];
	char c, **argv;
	int p[2];
	size_t n;
	va_list ap;
	pid_t pid;
	struct pollfd pf;
	ssize_t got;

	cr_assert(getenv("FAULTD"), "FAULTD not set (run through meson test)");
	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	n = (size_t)snprintf(line, sizeof(line), "lazy-pages ");
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	n = strlen(line);
	snprintf(line + n, sizeof(line) - n, " --status-fd %d", p[1]);
	argv = h_words(getenv("FAULTD"), line);
	pid = h_spawn(ns, h_path("faultd.out"), p[1], argv);
	close(p[1]);
	pf = (struct pollfd){ .fd = p[0], .events = POLLIN };
	cr_assert_eq(poll(&pf, 1, H_DEADLINE_MS), 1, "faultd: not ready");
	got = read(p[0], &c, 1);
	/* Then the end of the pipe, as criu lazy-pages gives it: nothing it
	 * started (its keeper) holds the pipe open. */
	if (got == 1) {
		cr_assert_eq(poll(&pf, 1, H_DEADLINE_MS), 1);
		cr_assert_eq(read(p[0], &c, 1), 0, "the status pipe stays "
			     "open after its byte");
	}
	close(p[0]);
	return got == 1 ? pid : -pid;
}

/* File @file of the scratch folder, whole (up to 1 MiB); "" if none.
 * The buffer is the next call's. */
static inline char *h_file_read(const char *file)
{
	static char buf[1 << 20];
	int fd = open(h_path(file), O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

/* Does file @file of the scratch folder hold @words? */
static inline bool h_file_says(const char *file, const char *words)
{
	return strstr(h_file_read(file), words) != NULL;
}

/* Does faultd.out hold @words? */
static inline bool h_faultd_said(const char *words)
{
	return h_file_says("faultd.out", words);
}

#endif
