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
 * Metrics (t0: just before `criu restore` starts; the workload stamps its
 * accesses itself, in CLOCK_REALTIME, the one clock that a restored
 * process - in CRIU's time namespace - shares with us):
 *   first_access_ms   t0 to the end of the process's first read (one word
 *                     of the first page the sequential reader below
 *                     reads, right after criu restore returned)
 *   all_in_ms         t0 to the exit of the lazy-pages daemon, the process
 *                     idle (it checks its memory afterwards)
 *   seq_us_per_page   the cost of fault service for a sequential reader:
 *                     one word per page, in order, over the last eighth of
 *                     region 0, started when criu restore returned; its
 *                     time / its pages. Both daemons start their background
 *                     copy at the lowest address, and region 0 is the
 *                     workload's highest memory after its libraries, so
 *                     the copy is behind the reader for the whole pass:
 *                     every page the reader touches comes by a fault (or,
 *                     for faultd, by the fault-around of one and by the
 *                     push it sends on ahead of the reader)
 *   random_gb_per_s   the task's lazy bytes / (the exit of the daemon - the
 *                     start of a reader touching every page once in a
 *                     random order): how fast memory arrives while a
 *                     process faults at random
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
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "criu.h"

enum { V_CRIU, V_FAULTD };
enum { M_FIRST, M_ALL_IN, M_SEQ, M_RANDOM };
enum { GO_SEQ = 1, GO_RANDOM = 2, GO_CHECK = 3, GO_SEQ_TOP = 4 };
/* workload.c */

#define DEADLINE_MS 300000

static struct {
	const char *skipped;	/* set once: the scenario cannot run */
	char criu[PATH_MAX];
	char dir[64];		/* scratch: the dump and the logs */
	char dump[96];
	pid_t pid;		/* the workload's pid, in every restore */
	uint64_t lazy_bytes;	/* of the task, from our reader */
	uint64_t pages;		/* region 0 */
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

/* Wait for child @pid at most DEADLINE_MS: its status, or -ETIMEDOUT. */
static int wait_child(pid_t pid)
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
	waitpid(pid, &st, 0);
	return st;
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
	char args[256], c;
	int status;
	pid_t pid;

	snprintf(args, sizeof(args), "lazy-pages -D %s -o lazy.log", cs.dump);
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
	cs.pages = len / 4096;
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

struct one {
	uint64_t t0, t_restored, t_all_in;
	char line[512];
};

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
	st = wait_child(lp);
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
	return strstr(r->line, " ok=1 ") ? 0 : -EBADMSG;
}

static int criu_run(const struct bench_opts *o, unsigned int v,
		    struct sample *out)
{
	struct one idle, seq, rnd;
	uint64_t go;

	out->skipped = setup(o);
	if (out->skipped)
		return 0;
	if (restore_once(v, 0, &idle) || restore_once(v, GO_SEQ_TOP, &seq) ||
	    restore_once(v, GO_RANDOM, &rnd)) {
		fprintf(stderr, "criu: a restore failed or a byte was wrong "
				"(logs in %s)\n", cs.dir);
		cs.dir[0] = '\0'; /* keep them */
		return -EIO;
	}
	out->value[M_FIRST] = (double)(field(seq.line, "t_first") - seq.t0) / 1e6;
	out->value[M_ALL_IN] = (double)(idle.t_all_in - idle.t0) / 1e6;
	out->value[M_SEQ] = (double)(field(seq.line, "t_end") -
				     field(seq.line, "t_go")) /
			    1e3 / (double)(cs.pages - cs.pages / 8 * 7);
	go = field(rnd.line, "t_go");
	out->value[M_RANDOM] = (double)cs.lazy_bytes /
			       (double)(rnd.t_all_in - go);
	return 0;
}

const struct scenario scenario_criu = {
	.name = "criu",
	.desc = "CRIU dumps a process; criu restore --lazy-pages served by "
		"each variant: first access, all in, sequential and random "
		"readers",
	.metrics = { "first_access_ms", "all_in_ms", "seq_us_per_page",
		     "random_gb_per_s" },
	.nmetrics = 4,
	.variants = { "criu-lazy-pages", "faultd-lazy-pages" },
	.nvariants = 2,
	.ratios = { { V_FAULTD, V_CRIU } },
	.nratios = 1,
	.default_threads = 1,
	.default_size_mib = 512,
	.run = criu_run,
};
