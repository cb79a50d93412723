/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fc-helpers.h - what the tests of `faultd firecracker` share: a directory
 * of the test's with a memory file (fc-memgen), the daemon started on a
 * socket there (ready when it says READY=1 on the notify socket it is
 * given, as systemd's Type=notify would hear it), Firecracker's side as
 * fc-client processes, and the daemon's STATUS on PATH.ctl. Every wait
 * has a deadline; a test that dies leaves no daemon (PR_SET_PDEATHSIG).
 * Include after <criterion/criterion.h>.
 */
#ifndef FAULTD_TEST_FC_HELPERS_H
#define FAULTD_TEST_FC_HELPERS_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto.h"

#define FC_DEADLINE_MS 120000	/* for anything a test waits for */
#define FC_MAX_ARGS 40

struct fcd {
	const char *source;	/* --mem SOURCE; NULL: --mem-file mem */
	char dir[64];
	char sock[128], ctl[128], mem[128], log[128], notify[128];
	int notify_fd;
	pid_t pid;		/* the daemon; 0: none runs */
	int out;		/* its standard output: the status line */
};

struct fcc {
	pid_t pid;
	int in, out;		/* its standard input and output */
	char line[8192];	/* the last line it printed */
};

static inline uint64_t fc_now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/*
 * A program of the build: from the variable meson test sets, else next
 * to this test's executable (tests/ of the build directory), so that the
 * program can also be run by hand or by scripts/stress.sh.
 */
static inline const char *fc_env(const char *name)
{
	static const char *const rel[][2] = {
		{ "FAULTD_DAEMON", "../daemon/faultd" },
		{ "FAULTCTL", "../daemon/faultctl" },
		{ "FC_CLIENT", "fc-client" },
		{ "FC_MEMGEN", "fc-memgen" },
		{ "FC_VMM", "../examples/vmm" },
	};
	static char paths[5][4096];
	const char *v = getenv(name);

	for (size_t i = 0; !v && i < sizeof(rel) / sizeof(rel[0]); i++) {
		char *slash;
		ssize_t n;

		if (strcmp(rel[i][0], name))
			continue;
		n = readlink("/proc/self/exe", paths[i], sizeof(paths[i]) - 64);
		slash = n > 0 ? (paths[i][n] = 0, strrchr(paths[i], '/')) : NULL;
		if (slash) {
			strcpy(slash + 1, rel[i][1]);
			v = paths[i];
		}
	}
	cr_assert(v && !access(v, X_OK), "%s: not set, and no %s here", name,
		  v ? v : "program");
	return v;
}

/* The number after "KEY": in @json. */
static inline uint64_t fc_json_u64(const char *json, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(json, pat);
	cr_assert(p, "no \"%s\" in %s", key, json);
	return strtoull(p + strlen(pat), NULL, 10);
}

/* Run @argv to its end; its exit status (or 128 + signal). */
static inline int fc_run(char *const *argv)
{
	int status;
	pid_t pid = fork();

	cr_assert(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execv(argv[0], argv);
		_exit(127);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status)
				 : 128 + WTERMSIG(status);
}

/*
 * A directory for the test (readable by others: a test may run a client
 * as another user), d->mem not written yet. A daemon is started by
 * fcd_start().
 */
static inline void fcd_dir(struct fcd *d)
{
	memset(d, 0, sizeof(*d));
	strcpy(d->dir, "/tmp/faultd-fc-XXXXXX");
	cr_assert(mkdtemp(d->dir));
	chmod(d->dir, 0755);
	snprintf(d->sock, sizeof(d->sock), "%s/sock", d->dir);
	snprintf(d->ctl, sizeof(d->ctl), "%s/sock.ctl", d->dir);
	snprintf(d->mem, sizeof(d->mem), "%s/mem", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/daemon.log", d->dir);
	snprintf(d->notify, sizeof(d->notify), "%s/notify", d->dir);
	d->notify_fd = -1;
	d->out = -1;
}

/* fcd_dir() and a memory file of @size ("64M") in @chunk runs ("4k"). */
static inline void fcd_init(struct fcd *d, const char *size, const char *chunk)
{
	char *argv[] = { (char *)fc_env("FC_MEMGEN"), d->mem, (char *)size,
			 "--seed", "7", "--chunk", (char *)chunk, NULL };

	fcd_dir(d);
	cr_assert_eq(fc_run(argv), 0, "fc-memgen failed");
	chmod(d->mem, 0644);
}

/* The notify socket the daemon says READY=1 on. */
static inline void fcd_notify_socket(struct fcd *d)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };

	if (d->notify_fd >= 0)
		return;
	strcpy(a.sun_path, d->notify);
	d->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	cr_assert(d->notify_fd >= 0);
	cr_assert_eq(bind(d->notify_fd, (struct sockaddr *)&a, sizeof(a)), 0,
		     "bind %s: %s", d->notify, strerror(errno));
}

/* Wait for READY=1 from the daemon, or its death. */
static inline void fcd_wait_ready(struct fcd *d)
{
	uint64_t end = fc_now_ms() + FC_DEADLINE_MS;
	char buf[256];

	for (;;) {
		struct pollfd p = { .fd = d->notify_fd, .events = POLLIN };
		int status;
		ssize_t n;

		cr_assert(fc_now_ms() < end, "the daemon did not get ready");
		if (waitpid(d->pid, &status, WNOHANG) == d->pid)
			cr_assert_fail("the daemon exited before it was ready "
				       "(status %#x); see %s", status, d->log);
		if (poll(&p, 1, 100) <= 0)
			continue;
		n = recv(d->notify_fd, buf, sizeof(buf) - 1, 0);
		if (n > 0) {
			buf[n] = 0;
			if (strstr(buf, "READY=1"))
				return;
		}
	}
}

/*
 * Start `faultd firecracker --socket S --mem-file M` (or --mem d->source)
 * with @extra (NULL-
 * terminated, may be NULL), its log appended to d->log; returns once it
 * is ready.
 */
static inline void fcd_start(struct fcd *d, const char *const *extra)
{
	char *argv[FC_MAX_ARGS];
	int n = 0, out[2];

	argv[n++] = (char *)fc_env("FAULTD_DAEMON");
	argv[n++] = "firecracker";
	argv[n++] = "--socket";
	argv[n++] = d->sock;
	argv[n++] = d->source ? "--mem" : "--mem-file";
	argv[n++] = d->source ? (char *)d->source : d->mem;
	argv[n++] = "-v";
	for (int i = 0; extra && extra[i] && n < FC_MAX_ARGS - 1; i++)
		argv[n++] = (char *)extra[i];
	argv[n] = NULL;
	fcd_notify_socket(d);
	cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
	d->pid = fork();
	cr_assert(d->pid >= 0);
	if (d->pid == 0) {
		int log = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(out[1], 1);
		dup2(log, 2);
		setenv("NOTIFY_SOCKET", d->notify, 1);
		execv(argv[0], argv);
		_exit(127);
	}
	close(out[1]);
	if (d->out >= 0)
		close(d->out);
	d->out = out[0];
	fcd_wait_ready(d);
}

/* Read @fd to its end (within the deadline) into @buf. */
static inline void fc_read_all(int fd, char *buf, size_t max)
{
	uint64_t end = fc_now_ms() + FC_DEADLINE_MS;
	size_t len = 0;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		cr_assert(fc_now_ms() < end, "no end of output in time");
		if (poll(&p, 1, 1000) <= 0)
			continue;
		n = read(fd, buf + len, max - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = 0;
}

/*
 * Wait for the daemon to exit by itself (the last VM ended); its status
 * line in @line. Returns its exit status.
 */
static inline int fcd_wait(struct fcd *d, char *line, size_t max)
{
	int status;

	fc_read_all(d->out, line, max);
	cr_assert_eq(waitpid(d->pid, &status, 0), d->pid);
	d->pid = 0;
	cr_assert(WIFEXITED(status), "the daemon died of signal %d",
		  WTERMSIG(status));
	return WEXITSTATUS(status);
}

/* kill -9 the daemon (its keeper keeps the VMs). */
static inline void fcd_kill9(struct fcd *d)
{
	int status;

	kill(d->pid, SIGKILL);
	cr_assert_eq(waitpid(d->pid, &status, 0), d->pid);
	d->pid = 0;
}

/* Does the daemon's log say @what? */
static inline bool fcd_logged(const struct fcd *d, const char *what)
{
	char buf[1 << 16];
	int fd = open(d->log, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

	if (fd >= 0)
		close(fd);
	if (n < 0)
		return false;
	buf[n] = 0;
	return strstr(buf, what) != NULL;
}

/* The test ends: whatever still runs is killed, the directory goes. */
static inline void fcd_fini(struct fcd *d)
{
	char cmd[160];

	if (d->pid > 0)
		fcd_kill9(d);
	if (d->out >= 0)
		close(d->out);
	if (d->notify_fd >= 0)
		close(d->notify_fd);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", d->dir);
	if (system(cmd))
		fprintf(stderr, "cannot remove %s\n", d->dir);
}

/*
 * Start fc-client on the daemon's socket and memory file with @args
 * (NULL-terminated): its standard input and output are pipes of ours,
 * its standard error goes to the test's.
 */
static inline void fcc_start(struct fcc *c, const struct fcd *d,
			     const char *const *args)
{
	char *argv[FC_MAX_ARGS];
	int n = 0, in[2], out[2];

	argv[n++] = (char *)fc_env("FC_CLIENT");
	argv[n++] = "--socket";
	argv[n++] = (char *)d->sock;
	argv[n++] = "--mem-file";
	argv[n++] = (char *)d->mem;
	argv[n++] = "--timeout";
	argv[n++] = "110";
	for (int i = 0; args && args[i] && n < FC_MAX_ARGS - 1; i++)
		argv[n++] = (char *)args[i];
	argv[n] = NULL;
	cr_assert_eq(pipe2(in, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
	c->pid = fork();
	cr_assert(c->pid >= 0);
	if (c->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(in[0], 0);
		dup2(out[1], 1);
		execv(argv[0], argv);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	c->in = in[1];
	c->out = out[0];
	c->line[0] = 0;
}

/* The client's next line of output, into c->line. */
static inline void fcc_line(struct fcc *c)
{
	uint64_t end = fc_now_ms() + FC_DEADLINE_MS;
	size_t len = 0;

	for (;;) {
		struct pollfd p = { .fd = c->out, .events = POLLIN };
		ssize_t n;

		cr_assert(fc_now_ms() < end, "fc-client said nothing in time");
		if (poll(&p, 1, 1000) <= 0)
			continue;
		n = read(c->out, c->line + len, 1);
		cr_assert(n == 1, "fc-client ended its output early");
		if (c->line[len] == '\n')
			break;
		cr_assert(++len < sizeof(c->line) - 1);
	}
	c->line[len] = 0;
}

/* Let a client waiting (--wait-start, --wait-end) go on. */
static inline void fcc_go(struct fcc *c)
{
	cr_assert_eq(write(c->in, "go\n", 3), 3);
}

/* Wait for the client's end: its exit status; its last line in c->line. */
static inline int fcc_wait(struct fcc *c)
{
	char buf[8192], *last;
	int status;

	close(c->in);
	fc_read_all(c->out, buf, sizeof(buf));
	close(c->out);
	cr_assert_eq(waitpid(c->pid, &status, 0), c->pid);
	while (*buf && buf[strlen(buf) - 1] == '\n')
		buf[strlen(buf) - 1] = 0;
	last = strrchr(buf, '\n');
	if (*buf)
		snprintf(c->line, sizeof(c->line), "%s", last ? last + 1 : buf);
	return WIFEXITED(status) ? WEXITSTATUS(status)
				 : 128 + WTERMSIG(status);
}

/* The daemon's STATUS on PATH.ctl, into @st (PROTO_MAX_MSG bytes). */
static inline void fcd_status(const struct fcd *d, struct proto_status *st)
{
	struct proto_hello hello;
	struct proto_hdr req;
	int s = proto_connect(d->ctl);
	ssize_t n;

	cr_assert(s >= 0, "cannot connect to %s: %s", d->ctl, strerror(-s));
	cr_assert_eq(proto_hello(s, 0, &hello), 0);
	proto_init(&req, MSG_STATUS, sizeof(req));
	n = proto_call(s, &req, NULL, 0, st, PROTO_MAX_MSG);
	close(s);
	cr_assert(n > 0 && st->h.type == MSG_STATUS, "no STATUS: %zd", n);
}

/*
 * Wait until the daemon has @n sessions, all kept, the first with a
 * counter @field of at least @min, polling its STATUS.
 */
#define fcd_wait_for(d, n, field, min)                                         \
	do {                                                                   \
		struct proto_status *st_ = calloc(1, PROTO_MAX_MSG);           \
		uint64_t end_ = fc_now_ms() + FC_DEADLINE_MS;                  \
		for (;;) {                                                     \
			bool kept_ = true;                                     \
			fcd_status(d, st_);                                    \
			for (uint32_t i_ = 0; i_ < st_->nr_sessions; i_++)     \
				kept_ = kept_ && st_->s[i_].kept;              \
			if (st_->nr_sessions == (n) && kept_ &&                \
			    st_->s[0].field >= (min))                          \
				break;                                         \
			cr_assert(fc_now_ms() < end_, "no %u kept sessions "   \
				  "with " #field " >= %llu", (unsigned)(n),    \
				  (unsigned long long)(min));                  \
			usleep(1000);                                          \
		}                                                              \
		free(st_);                                                     \
	} while (0)

#endif
