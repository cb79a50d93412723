// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * criu.c - scenario criu: an unmodified CRIU (scripts/criu.sh, or $CRIU)
 * dumps the test workload (tests/criu/workload.c: --size MiB of
 * pseudo-random memory, default 512) once; every round restores that dump
 * three times with `criu restore --lazy-pages -d`, served by the variant,
 * and the process checks every byte itself after each.
 *
 * Variants (the same dump; the driver interleaves them round by round):
 *   criu-lazy-pages   `criu lazy-pages -D DIR`
 *   faultd-lazy-pages `faultd lazy-pages -D DIR` (this build's faultd)
 *
 * Three restores a round. In two, the restored program runs at once, as a
 * restored service warming up does: when criu restore returns it reads one
 * word of every page of region 0 (its memory but 4 MiB) in order ("seq")
 * or in a random order ("random"), each read timed, while the daemon's
 * background copy runs; then it checks every byte. In the third it is
 * idle until the daemon exited. Metrics (t0: just before `criu restore`
 * starts; the workload stamps its accesses itself, in CLOCK_REALTIME, the
 * one clock that a restored process - in CRIU's time namespace - shares
 * with us):
 *   busy_all_in_ms    t0 to the exit of the lazy-pages daemon, the
 *                     program reading in order from the start
 *   busy_pass_ms      t0 to the end of that first full pass
 *   random_all_in_ms  the same two with the program reading at random
 *   random_pass_ms
 *   random_p50_us     median and 99th percentile of one read of the
 *   random_p99_us     random pass: the fault service as the program
 *                     feels it during the background copy
 *   seq_p99_us        the same for the reader in order
 *   cpu_ms_per_gib    CPU time (user + system) of the lazy-pages daemon
 *                     and its threads in the restore read in order, per
 *                     GiB of the task's lazy memory
 *   idle_all_in_ms    t0 to the exit of the daemon, the program idle
 *   first_access_ms   t0 to the end of the program's first read (in the
 *                     restore read in order)
 * FAULTD_BENCH_CRIU_TRACE=FILE appends a line per restore to FILE: the
 * lazy-pages daemon's CPU and context switches, and faultd's summary.
 * FAULTD_BENCH_LP_ARGS adds its words to faultd lazy-pages' arguments
 * (--fault-around KIB, --handlers N: settings measured side by side).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "criu.h"

enum { V_CRIU, V_FAULTD };
enum {
	M_BUSY_ALL_IN, M_BUSY_PASS, M_RANDOM_ALL_IN, M_RANDOM_PASS,
	M_RANDOM_P50, M_RANDOM_P99, M_SEQ_P99, M_CPU, M_IDLE_ALL_IN, M_FIRST,
};
enum { GO_SEQ = 1, GO_RANDOM = 2, GO_CHECK = 3 };
/* workload.c */

#define DEADLINE_MS 300000

static struct {
	const char *skipped;	/* set once: the scenario cannot run */
	char criu[PATH_MAX];
	char dir[64];		/* scratch: the dump and the logs */
	char dump[96];
	pid_t pid;		/* the workload's pid, in every restore */
	uint64_t lazy_bytes;	/* of the task, from our reader */
} cs;

static uint64_t real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int rm_one(const char *p, const struct stat *st, int flag,
		  struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	return remove(p);
}

static void scratch_remove(void)
{
	if (cs.dir[0])
		nftw(cs.dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Start argv with its output appended to DIR/log; @keep stays open. */
static pid_t spawn(char *const argv[], int keep)
{
	char log[128];
	pid_t pid;

	snprintf(log, sizeof(log), "%s/log", cs.dir);
	pid = fork();
	if (pid == 0) {
		int out = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		int in = open("/dev/null", O_RDONLY);

		if (out < 0 || in < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 ||
		    dup2(out, 2) < 0)
			_exit(126);
		if (keep >= 0)
			fcntl(keep, F_SETFD, 0);
		setsid();
		execv(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/*
 * Wait for child @pid at most DEADLINE_MS: its status, or -ETIMEDOUT;
 * @ru (if set): what it and its threads used.
 */
static int wait_child_ru(pid_t pid, struct rusage *ru)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0), st = -1;
	struct pollfd p = { .fd = fd, .events = POLLIN };

	if (fd < 0)
		return -errno;
	if (poll(&p, 1, DEADLINE_MS) != 1) {
		close(fd);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -ETIMEDOUT;
	}
	close(fd);
	if (wait4(pid, &st, 0, ru) != pid)
		return -errno;
	return st;
}

static int wait_child(pid_t pid)
{
	return wait_child_ru(pid, NULL);
}

static double tv_ms(struct timeval tv)
{
	return (double)tv.tv_sec * 1e3 + (double)tv.tv_usec / 1e3;
}

static bool exited_0(int st)
{
	return st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* Read from @fd until EOF (or DEADLINE_MS) into @buf. */
static ssize_t read_all(int fd, char *buf, size_t len)
{
	size_t got = 0;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, DEADLINE_MS) != 1)
			return -ETIMEDOUT;
		n = read(fd, buf + got, len - 1 - got);
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	buf[got] = '\0';
	return (ssize_t)got;
}

/* @bin with @args (space-separated) and, if @status, --status-fd. */
static pid_t run_start(const char *bin, const char *args, int *status)
{
	static char line[1024];
	char *argv[48];
	int n = 0, p[2] = { -1, -1 };
	pid_t pid;

	snprintf(line, sizeof(line), "%s", args);
	argv[n++] = (char *)bin;
	for (char *s = strtok(line, " "); s && n < 44; s = strtok(NULL, " "))
		argv[n++] = s;
	if (status) {
		static char fd[16];

		if (pipe2(p, O_CLOEXEC))
			return -errno;
		snprintf(fd, sizeof(fd), "%d", p[1]);
		argv[n++] = "--status-fd";
		argv[n++] = fd;
	}
	argv[n] = NULL;
	pid = spawn(argv, p[1]);
	if (status) {
		close(p[1]);
		*status = p[0];
	}
	return pid;
}

static pid_t criu_start(const char *args, int *status)
{
	return run_start(cs.criu, args, status);
}

/* Start variant @v's lazy-pages daemon and wait until it listens. */
static pid_t lazy_pages_start(unsigned int v)
{
	const char *faultd = getenv("FAULTD");
	const char *extra = getenv("FAULTD_BENCH_LP_ARGS");
	char args[512], c;
	int status;
	pid_t pid;

	snprintf(args, sizeof(args), "lazy-pages -D %s -o lazy.log%s%s", cs.dump,
		 v == V_FAULTD && extra ? " " : "",
		 v == V_FAULTD && extra ? extra : "");
	pid = run_start(v == V_CRIU ? cs.criu : faultd ? faultd : FAULTD_PATH,
			args, &status);
	if (pid < 0 || read_all(status, &c, 2) != 1) {
		close(status);
		if (pid > 0)
			wait_child(pid);
		return -1;
	}
	close(status);
	return pid;
}

/* The workload: start it, read its layout, dump it. */
static int dump_workload(const struct bench_opts *o)
{
	char size[32], fd[16], result[128], buf[512], args[256];
	const char *wl = getenv("FAULTD_CRIU_WORKLOAD");
	char *argv[] = { (char *)(wl ? wl : FAULTD_CRIU_WORKLOAD), "--size",
			 size, "--seed", "77", "--ready", fd, "--result",
			 result, NULL };
	unsigned long a, len;
	int p[2], st;

	if (pipe2(p, O_CLOEXEC))
		return -errno;
	snprintf(size, sizeof(size), "%zu", o->size_mib);
	snprintf(fd, sizeof(fd), "%d", p[1]);
	snprintf(result, sizeof(result), "%s/result", cs.dir);
	cs.pid = spawn(argv, p[1]);
	close(p[1]);
	if (read_all(p[0], buf, sizeof(buf)) <= 0 || !strstr(buf, "ready") ||
	    sscanf(buf, "region 0 %lx %lx", &a, &len) != 2) {
		close(p[0]);
		return -EIO;
	}
	close(p[0]);
	snprintf(args, sizeof(args), "dump -t %d -D %s -o dump.log",
		 (int)cs.pid, cs.dump);
	st = wait_child(criu_start(args, NULL));
	if (!exited_0(st))
		return -EIO;
	wait_child(cs.pid);
	return 0;
}

/* The task's lazy bytes, from faultd's own reader of the dump. */
static int count_lazy(void)
{
	const struct criu_range *r;
	struct criu_dump *d;
	char why[256];
	ssize_t n;

	if (criu_dump_open(cs.dump, &d, why, sizeof(why))) {
		fprintf(stderr, "criu: %s\n", why);
		return -EIO;
	}
	n = criu_task_lazy(d, cs.pid, &r);
	for (ssize_t i = 0; i < n; i++)
		cs.lazy_bytes += r[i].len;
	criu_dump_close(d);
	return n > 0 ? 0 : -EIO;
}

/* The criu binary: $CRIU, else what scripts/criu.sh prints. */
static int find_criu(void)
{
	const char *sh = getenv("FAULTD_CRIU_SH");
	char cmd[PATH_MAX + 16];
	FILE *f;
	int st;

	snprintf(cmd, sizeof(cmd), "sh %s", sh ? sh : FAULTD_CRIU_SH);
	f = popen(cmd, "r");
	if (!f || !fgets(cs.criu, sizeof(cs.criu), f)) {
		if (f)
			pclose(f);
		return -ENOENT;
	}
	st = pclose(f);
	cs.criu[strcspn(cs.criu, "\n")] = '\0';
	return exited_0(st) ? 0 : -ENOENT;
}

/* Once per run: CRIU, the scratch folder, the dump. */
static const char *setup(const struct bench_opts *o)
{
	static bool done;

	if (done)
		return cs.skipped;
	done = true;
	if (find_criu())
		return cs.skipped = "no working CRIU (scripts/criu.sh says why)";
	snprintf(cs.dir, sizeof(cs.dir), "/tmp/faultd-bench-criu-XXXXXX");
	if (!mkdtemp(cs.dir)) {
		cs.dir[0] = '\0';
		return cs.skipped = "mkdtemp failed";
	}
	atexit(scratch_remove);
	snprintf(cs.dump, sizeof(cs.dump), "%s/dump", cs.dir);
	if (mkdir(cs.dump, 0755) || prctl(PR_SET_CHILD_SUBREAPER, 1))
		return cs.skipped = "cannot prepare the scratch folder";
	if (dump_workload(o))
		return cs.skipped = "criu dump of the workload failed";
	if (count_lazy())
		return cs.skipped = "the dump has no lazy pages";
	return NULL;
}

/* A field of the workload's result line. */
static uint64_t field(const char *line, const char *name)
{
	char key[32];
	const char *p;

	snprintf(key, sizeof(key), " %s=", name);
	p = strstr(line, key);
	return p ? strtoull(p + strlen(key), NULL, 0) : 0;
}

static double ms_from(uint64_t t0, uint64_t t)
{
	return (double)(t - t0) / 1e6;
}

struct one {
	uint64_t t0, t_restored, t_all_in;
	struct rusage ru;		/* of the lazy-pages daemon */
	char line[512];
};

/* The last line of @path that starts with @prefix, into @line. */
static void last_line(const char *path, const char *prefix, char *line,
		      size_t len)
{
	FILE *f = fopen(path, "r");
	char buf[1024];

	line[0] = '\0';
	while (f && fgets(buf, sizeof(buf), f))
		if (!strncmp(buf, prefix, strlen(prefix)))
			snprintf(line, len, "%s", buf);
	if (f)
		fclose(f);
	line[strcspn(line, "\n")] = '\0';
}

/*
 * With FAULTD_BENCH_CRIU_TRACE=FILE, a line per restore appended to FILE:
 * where the lazy-pages daemon's time went (its rusage: CPU, voluntary and
 * involuntary context switches) and faultd's own summary line.
 */
static void trace(unsigned int v, int go, const struct one *r)
{
	const char *path = getenv("FAULTD_BENCH_CRIU_TRACE");
	static const char *const mode[] = { "idle", "seq", "random" };
	char log[128], summary[1024];
	FILE *f;

	if (!path || !(f = fopen(path, "a")))
		return;
	snprintf(log, sizeof(log), "%s/lazy.log", cs.dump);
	last_line(log, "faultd lazy-pages: ", summary, sizeof(summary));
	fprintf(f, "%s %s all_in_ms=%.1f pass_ms=%.1f user_ms=%.1f "
		"sys_ms=%.1f vcsw=%ld ivcsw=%ld p50_us=%.1f p99_us=%.1f%s%s\n",
		v == V_CRIU ? "criu" : "faultd", mode[go < 3 ? go : 0],
		ms_from(r->t0, r->t_all_in),
		go ? ms_from(r->t0, field(r->line, "t_end")) : 0.0,
		tv_ms(r->ru.ru_utime), tv_ms(r->ru.ru_stime), r->ru.ru_nvcsw,
		r->ru.ru_nivcsw, (double)field(r->line, "lat_p50") / 1e3,
		(double)field(r->line, "lat_p99") / 1e3,
		v == V_FAULTD ? " | " : "", v == V_FAULTD ? summary : "");
	fclose(f);
}

/*
 * One restore served by variant @v's lazy-pages daemon. @go: sent as soon as criu
 * restore returned, or (0) GO_CHECK once the daemon exited.
 */
static int restore_once(unsigned int v, int go, struct one *r)
{
	char args[256], path[128];
	pid_t lp;
	int st, fd;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/result", cs.dir);
	unlink(path);
	lp = lazy_pages_start(v);
	if (lp < 0)
		return -EIO;
	snprintf(args, sizeof(args), "restore -D %s --lazy-pages -d -o rst.log",
		 cs.dump);
	r->t0 = real_ns();
	st = wait_child(criu_start(args, NULL));
	r->t_restored = real_ns();
	if (!exited_0(st)) {
		kill(lp, SIGKILL);
		wait_child(lp);
		return -EIO;
	}
	if (go && sigqueue(cs.pid, SIGUSR1, (union sigval){ .sival_int = go }))
		return -errno;
	st = wait_child_ru(lp, &r->ru);
	r->t_all_in = real_ns();
	if (!go && sigqueue(cs.pid, SIGUSR1,
			    (union sigval){ .sival_int = GO_CHECK }))
		return -errno;
	if (!exited_0(wait_child(cs.pid)) || !exited_0(st))
		return -EIO;
	fd = open(path, O_RDONLY);
	n = fd >= 0 ? read(fd, r->line, sizeof(r->line) - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return -EIO;
	r->line[n] = '\0';
	trace(v, go, r);
	return strstr(r->line, " ok=1 ") ? 0 : -EBADMSG;
}

static int criu_run(const struct bench_opts *o, unsigned int v,
		    struct sample *out)
{
	struct one idle, seq, rnd;
	double *m = out->value;

	out->skipped = setup(o);
	if (out->skipped)
		return 0;
	if (restore_once(v, GO_SEQ, &seq) || restore_once(v, GO_RANDOM, &rnd) ||
	    restore_once(v, 0, &idle)) {
		fprintf(stderr, "criu: a restore failed or a byte was wrong "
				"(logs in %s)\n", cs.dir);
		cs.dir[0] = '\0'; /* keep them */
		return -EIO;
	}
	m[M_BUSY_ALL_IN] = ms_from(seq.t0, seq.t_all_in);
	m[M_BUSY_PASS] = ms_from(seq.t0, field(seq.line, "t_end"));
	m[M_RANDOM_ALL_IN] = ms_from(rnd.t0, rnd.t_all_in);
	m[M_RANDOM_PASS] = ms_from(rnd.t0, field(rnd.line, "t_end"));
	m[M_RANDOM_P50] = (double)field(rnd.line, "lat_p50") / 1e3;
	m[M_RANDOM_P99] = (double)field(rnd.line, "lat_p99") / 1e3;
	m[M_SEQ_P99] = (double)field(seq.line, "lat_p99") / 1e3;
	m[M_CPU] = (tv_ms(seq.ru.ru_utime) + tv_ms(seq.ru.ru_stime)) /
		   ((double)cs.lazy_bytes / (double)(1ull << 30));
	m[M_IDLE_ALL_IN] = ms_from(idle.t0, idle.t_all_in);
	m[M_FIRST] = ms_from(seq.t0, field(seq.line, "t_first"));
	return 0;
}

const struct scenario scenario_criu = {
	.name = "criu",
	.desc = "CRIU dumps a process; criu restore --lazy-pages served by "
		"each variant, the program reading its memory from the start "
		"(in order, at random) or idle",
	.metrics = { "busy_all_in_ms", "busy_pass_ms", "random_all_in_ms",
		     "random_pass_ms", "random_p50_us", "random_p99_us",
		     "seq_p99_us", "cpu_ms_per_gib", "idle_all_in_ms",
		     "first_access_ms" },
	.nmetrics = 10,
	.variants = { "criu-lazy-pages", "faultd-lazy-pages" },
	.nvariants = 2,
	.ratios = { { V_FAULTD, V_CRIU } },
	.nratios = 1,
	.default_threads = 1,
	.default_size_mib = 512,
	.run = criu_run,
};
