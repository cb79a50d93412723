// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * attacks.c - the faultd daemon and its clients against hostile local
 * users: each test runs an attack that worked once and checks that it
 * does not any more. The attackers are unprivileged users the fixture
 * creates (useradd) and removes (userdel); without useradd the tests
 * that need them are skipped. Rounds of the races: FAULTD_ATTACK_ROUNDS.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pwd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>

#include "daemon-helpers.h"
#include "helpers.h"
#include "internal.h"
#include "proto.h"

#define TAG 0xa77ac

static char dir[] = "/var/tmp/faultd-attacks-XXXXXX";
static char sock[256];
static char image[256];

/* ------------------------------------------------------------------------
 * Users
 */

struct tuser {
	char name[32];
	uid_t uid;
	gid_t gid;
	bool made;
};

static struct tuser ua, ub;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	int status;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	status = system(cmd);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/*
 * Another session may be adding or removing users at the same time:
 * useradd fails while it cannot lock /etc/passwd, so try a few times.
 */
static void user_add(struct tuser *u, char tag)
{
	const struct timespec pause = { .tv_nsec = 50 * 1000 * 1000 };
	struct passwd *pw;

	snprintf(u->name, sizeof(u->name), "fdt%c%d", tag, (int)getpid());
	for (int i = 0; i < 20 && !u->made; i++) {
		u->made = !sh("useradd --system --no-create-home --home-dir / "
			      "--shell /usr/sbin/nologin --user-group %s "
			      ">/dev/null 2>&1", u->name);
		if (!u->made)
			nanosleep(&pause, NULL);
	}
	pw = u->made ? getpwnam(u->name) : NULL;
	if (pw) {
		u->uid = pw->pw_uid;
		u->gid = pw->pw_gid;
	}
	u->made = pw != NULL;
}

static void user_del(struct tuser *u)
{
	const struct timespec pause = { .tv_nsec = 50 * 1000 * 1000 };

	for (int i = 0; i < 20 && u->made; i++) {
		u->made = !!sh("userdel %s >/dev/null 2>&1", u->name);
		if (u->made)
			nanosleep(&pause, NULL);
	}
}

static void need_users(void)
{
	if (!ua.made || !ub.made)
		cr_skip_test("cannot add test users with useradd");
}

/* In a child: become @u for good, and stay dumpable (a process that
 * changed its IDs is not, and no one but root could read its /proc);
 * die with the test (the change of IDs cleared that). */
static void become(const struct tuser *u)
{
	if (setgroups(0, NULL) || setresgid(u->gid, u->gid, u->gid) ||
	    setresuid(u->uid, u->uid, u->uid) ||
	    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) ||
	    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0))
		_exit(120);
}

/* ------------------------------------------------------------------------
 * The daemon
 */

/* What the daemon spawned last wrote on its stderr, for log_wait(). */
static char log_buf[65536];
static size_t log_have;

/*
 * Start the daemon on @path with @args (NULL-terminated), as @as (NULL:
 * root), with at most @nofile descriptors (0: as we have), its stderr
 * into *@err if @err. Returns its pid at once.
 */
static pid_t daemon_spawn(const char *path, const char *const *args,
			  const struct tuser *as, rlim_t nofile, int *err)
{
	const char *exe = getenv("FAULTD_DAEMON");
	const char *argv[16] = { exe, "--socket", path };
	int p[2] = { -1, -1 }, n = 3;
	pid_t pid;

	cr_assert(exe, "FAULTD_DAEMON not set (run through meson test)");
	for (int i = 0; args && args[i]; i++)
		argv[n++] = args[i];
	cr_assert(!err || !pipe2(p, O_CLOEXEC));
	pid = fork();
	if (pid == 0) {
		struct rlimit rl = { nofile, nofile };

		unsetenv("FAULTD_INJECT");
		if (nofile && setrlimit(RLIMIT_NOFILE, &rl))
			_exit(126);
		if (err && dup2(p[1], 2) < 0)
			_exit(126);
		if (as)
			become(as);
		/* After become(): a change of IDs clears it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execv(exe, (char **)argv);
		_exit(127);
	}
	cr_assert(pid > 0);
	if (err) {
		close(p[1]);
		*err = p[0];
		log_have = 0;
	}
	return pid;
}

/* daemon_spawn(), then wait until it listens: its pid, or 0 if it
 * exited first (*@status). */
static pid_t daemon_run(const char *path, const char *const *args,
			const struct tuser *as, rlim_t nofile, int *err,
			int *status)
{
	uint64_t end = test_now_ns() + 10000000000ull;
	pid_t pid = daemon_spawn(path, args, as, nofile, err);

	for (;;) {
		int s = proto_connect(path), st;

		if (s >= 0) {
			close(s);
			return pid;
		}
		if (waitpid(pid, &st, WNOHANG) == pid) {
			if (status)
				*status = st;
			return 0;
		}
		cr_assert(test_now_ns() < end, "the daemon did not come up");
		sched_yield();
	}
}

static pid_t daemon_up(const char *const *args)
{
	pid_t pid = daemon_run(sock, args, NULL, 0, NULL, NULL);

	cr_assert(pid > 0, "the daemon did not start");
	return pid;
}

/* Wait (10 s at most) until the stderr @fd of the daemon spawned last
 * has a line with @what; what it wrote so far goes to @log (@len bytes)
 * if not NULL. */
static bool log_wait(int fd, const char *what, char *log, size_t len)
{
	char *buf = log_buf;
	uint64_t end = test_now_ns() + 10000000000ull;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		buf[log_have] = 0;
		if (log)
			snprintf(log, len, "%.*s", (int)len - 1, buf);
		if (strstr(buf, what))
			return true;
		if (test_now_ns() >= end || poll(&p, 1, 100) < 0)
			return false;
		if (!p.revents)
			continue;
		n = read(fd, buf + log_have, sizeof(log_buf) - 1 - log_have);
		if (n <= 0)
			return false;
		log_have += (size_t)n;
	}
}

/* Threads of process @pid. */
static int threads_of(pid_t pid)
{
	char path[64], line[256];
	int n = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	cr_assert(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Threads: %d", &n) == 1)
			break;
	fclose(f);
	return n;
}

/* CPU time process @pid has used, in ns. */
static uint64_t cpu_of(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	cr_assert(f && fgets(buf, sizeof(buf), f));
	fclose(f);
	p = strrchr(buf, ')');
	cr_assert(p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u "
				     "%*u %*u %llu %llu", &ut, &st) == 2);
	return (ut + st) * (1000000000ull / (uint64_t)sysconf(_SC_CLK_TCK));
}

/* ------------------------------------------------------------------------
 * Clients by hand
 */

/* Connect and say HELLO: the daemon's error, or 0 and the socket. */
static int hello_on(const char *path, int *sp)
{
	struct proto_hello h;
	int s = proto_connect(path), ret;

	if (s < 0)
		return s;
	ret = proto_hello(s, PROTO_FEATURES, &h);
	if (ret || !sp)
		close(s);
	else
		*sp = s;
	return ret;
}

/* A userfaultfd made while still root (users may not: the sysctl
 * vm.unprivileged_userfaultfd is 0 here), with @len bytes registered. */
static int uffd_with_range(size_t len, char **base, int flags)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | flags);

	*base = mmap(NULL, len, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (fd < 0 || *base == MAP_FAILED || ioctl(fd, UFFDIO_API, &api))
		return -1;
	reg.range.start = (uintptr_t)*base;
	reg.range.len = len;
	return ioctl(fd, UFFDIO_REGISTER, &reg) ? -1 : fd;
}

/* REGISTER [start, start + len) of image offset 0 on @s, with @uffd and
 * @img; the daemon's answer (0: ACK). */
static int register_on(int s, uint64_t start, size_t len, int uffd, int img)
{
	union {
		char buf[sizeof(struct proto_register) +
			 sizeof(struct proto_range)];
		struct proto_register reg;
	} m = { .reg = { .nr_ranges = 1 } };
	union {
		struct proto_hdr h;
		struct proto_error err;
		char buf[256];
	} u;
	int fds[2] = { uffd, img };
	ssize_t n;

	proto_init(&m.reg.h, MSG_REGISTER, sizeof(m));
	m.reg.r[0] = (struct proto_range){ start, len, 0 };
	n = proto_call(s, &m, fds, 2, &u, sizeof(u));
	if (n < 0)
		return (int)n;
	if (u.h.type == MSG_ERROR)
		fprintf(stderr, "REGISTER: %.*s\n", (int)sizeof(u.err.msg),
			u.err.msg);
	return u.h.type == MSG_ACK ? 0 : u.h.type == MSG_ERROR ? u.err.err
							       : -EPROTO;
}

/*
 * A client that registers a session and keeps it until held_release()
 * kills it: a child process, as @as (NULL: root).
 */
struct held {
	pid_t pid;
};

static int held_start(struct held *h, const struct tuser *as)
{
	int res[2], ret = -EIO;

	cr_assert_eq(pipe2(res, O_CLOEXEC), 0);
	h->pid = fork();
	if (h->pid == 0) {
		char *base;
		int uffd = uffd_with_range(MIB, &base, O_NONBLOCK);
		int img = open(image, O_RDONLY | O_CLOEXEC), s = -1;

		close(res[0]);
		if (as)
			become(as);
		ret = uffd < 0 || img < 0 ? -EIO : hello_on(sock, &s);
		if (!ret)
			ret = register_on(s, (uintptr_t)base, MIB, uffd, img);
		(void)!write(res[1], &ret, sizeof(ret));
		for (;;)
			pause();
	}
	cr_assert(h->pid > 0);
	close(res[1]);
	cr_assert_eq(read(res[0], &ret, sizeof(ret)), (ssize_t)sizeof(ret));
	close(res[0]);
	return ret;
}

static void held_release(struct held *h)
{
	int status;

	kill(h->pid, SIGKILL);
	cr_assert_eq(waitpid(h->pid, &status, 0), h->pid);
}

/* ------------------------------------------------------------------------
 * The fixture
 */

/* Users of ours left by a test process that died before its teardown. */
static void users_stale_remove(void)
{
	struct passwd *pw;
	char names[64][32];
	int n = 0;

	setpwent();
	while ((pw = getpwent()) && n < 64) {
		int pid;
		char tag;

		if (sscanf(pw->pw_name, "fdt%c%d", &tag, &pid) == 2 &&
		    (tag == 'a' || tag == 'b') && kill(pid, 0) < 0 &&
		    errno == ESRCH)
			snprintf(names[n++], sizeof(names[0]), "%s", pw->pw_name);
	}
	endpwent();
	for (int i = 0; i < n; i++)
		sh("userdel %s >/dev/null 2>&1", names[i]);
}

static void setup(void)
{
	struct faultd_ctx *ctx;
	struct faultd_region_opts o = { .size = sizeof(o), .length = MIB };
	struct faultd_region *r;

	cr_assert(mkdtemp(dir));
	cr_assert_eq(chmod(dir, 0755), 0); /* the users go through it */
	snprintf(sock, sizeof(sock), "%s/faultd.sock", dir);
	snprintf(image, sizeof(image), "%s/image", dir);
	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	pattern_fill(TAG, 0, faultd_region_base(r), MIB);
	cr_assert_eq(faultd_checkpoint(r, image, NULL), 0);
	faultd_ctx_destroy(ctx);
	users_stale_remove();
	user_add(&ua, 'a');
	user_add(&ub, 'b');
}

static void teardown(void)
{
	user_del(&ua);
	user_del(&ub);
	cr_assert_eq(sh("rm -rf %s", dir), 0);
}

TestSuite(attacks, .init = setup, .fini = teardown, .timeout = 120);

static unsigned int rounds(unsigned int dflt)
{
	const char *e = getenv("FAULTD_ATTACK_ROUNDS");

	return e && atoi(e) > 0 ? (unsigned int)atoi(e) : dflt;
}

/* A restore through the daemon on @path, as root, every byte checked:
 * its exit code (0: right). */
static void restore_child(void *arg)
{
	struct faultd_restore_opts o = { .size = sizeof(o),
					 .flags = FAULTD_RESTORE_DAEMON,
					 .socket = arg };
	struct faultd_restore_progress p = { .size = sizeof(p) };
	struct faultd_ctx *ctx;
	struct faultd_region *r;

	if (faultd_ctx_create(NULL, &ctx) || faultd_restore(ctx, image, &o, &r))
		_exit(10);
	if (pattern_check(TAG, 0, faultd_region_base(r), MIB))
		_exit(11);
	if (faultd_restore_wait(r) || faultd_restore_progress(r, &p) ||
	    p.daemon_died)
		_exit(12);
	faultd_ctx_destroy(ctx);
	_exit(0);
}

/* 0: every byte right; else the child's exit code, or 100 + signal. */
static int restore_via(const char *path)
{
	int how = run_in_child(restore_child, (void *)path);

	return how < 0 ? -how - 1 : 100 + how;
}

/* ------------------------------------------------------------------------
 * Out of descriptors (EMFILE): the accept loop used to spin at 100% CPU.
 */

/*
 * How many shortages @log tells the end of, each told once and then its
 * end once: 0 if it says either twice in a row, or begins with an end.
 * There may be more than one: once the test's connections close, the
 * daemon accepts the dead ones left in the backlog faster than it reads
 * their EOF and closes them, and can run short again. The log may stop
 * inside the last one.
 */
static int shortages_said_once(const char *log)
{
	static const char *const said[] = { "out of descriptors",
					    "descriptors are free again" };
	int ended = 0, expect = 0;
	const char *p = log;

	while (*p) {
		const char *eol = strchrnul(p, '\n');
		int which = -1;

		for (int i = 0; i < 2; i++)
			if (memmem(p, (size_t)(eol - p), said[i],
				   strlen(said[i])))
				which = i;
		if (which >= 0 && which != expect)
			return 0;
		if (which >= 0) {
			ended += which;
			expect = !expect;
		}
		p = *eol ? eol + 1 : eol;
	}
	return ended;
}

Test(attacks, out_of_descriptors_does_not_spin)
{
	enum { CONNS = 80 };
	int err, s[CONNS], lines = 0, how;
	pid_t pid = daemon_run(sock, NULL, NULL, 40, &err, NULL);
	char log[4096];
	bool shortage;
	uint64_t t0, c0, c1, t1;

	cr_assert(pid > 0);
	for (int i = 0; i < CONNS; i++) {
		s[i] = proto_connect(sock);
		cr_assert(s[i] >= 0, "connect %d: %s", i, strerror(-s[i]));
	}
	/* Not asserted yet: the CPU it burns meanwhile is the point. */
	shortage = log_wait(err, "out of descriptors", NULL, 0);
	t0 = test_now_ns();
	c0 = cpu_of(pid);
	while (test_now_ns() - t0 < 1000000000ull)
		poll(NULL, 0, 100); /* a second of the daemon's life */
	c1 = cpu_of(pid);
	t1 = test_now_ns();
	cr_expect_lt(c1 - c0, (t1 - t0) / 10,
		     "the daemon used %llu ms of CPU in %llu ms",
		     (unsigned long long)(c1 - c0) / 1000000,
		     (unsigned long long)(t1 - t0) / 1000000);
	cr_log_info("out of descriptors: %llu ms of CPU in %llu ms",
		    (unsigned long long)(c1 - c0) / 1000000,
		    (unsigned long long)(t1 - t0) / 1000000);
	cr_assert(shortage, "no shortage logged");
	for (int i = 0; i < CONNS; i++)
		close(s[i]);
	/* The connections are gone: it serves again, and says so. */
	how = restore_via(sock);
	cr_assert_eq(how, 0, "the restore ended with %d", how);
	cr_assert(log_wait(err, "descriptors are free again", log,
			   sizeof(log)));
	lines = shortages_said_once(log);
	cr_assert_gt(lines, 0, "each shortage once, then its end once; "
		     "log:\n%s", log);
	test_daemon_kill(pid, SIGTERM);
	close(err);
}

/* How many lines of @log say @what. */
static int lines_saying(const char *log, const char *what)
{
	int n = 0;

	for (const char *p = log; (p = strstr(p, what)); p += strlen(what))
		n++;
	return n;
}

/*
 * A flood that keeps the daemon out of descriptors for seconds used to be
 * logged at every back-off (590 lines in 30 s): it is one shortage, said
 * once, and its end once.
 */
Test(attacks, out_of_descriptors_is_said_once_per_flood)
{
	enum { CONNS = 80 };
	int err, s[CONNS];
	pid_t pid = daemon_run(sock, NULL, NULL, 40, &err, NULL);
	uint64_t t0 = test_now_ns();
	char log[8192];

	cr_assert(pid > 0);
	/* Rounds of connections that fill the backlog and go, for 2 s:
	 * the daemon runs short again and again. */
	while (test_now_ns() - t0 < 2000000000ull) {
		for (int i = 0; i < CONNS; i++)
			s[i] = proto_connect(sock);
		poll(NULL, 0, 20);
		for (int i = 0; i < CONNS; i++)
			if (s[i] >= 0)
				close(s[i]);
	}
	cr_assert(log_wait(err, "descriptors are free again", log,
			   sizeof(log)), "no end of the shortage: %s", log);
	cr_assert_eq(lines_saying(log, "out of descriptors"), 1, "%s", log);
	cr_assert_eq(lines_saying(log, "descriptors are free again"), 1,
		     "%s", log);
	test_daemon_kill(pid, SIGTERM);
	close(err);
}

/* ------------------------------------------------------------------------
 * Idle connections: each used to get a thread, without a cap.
 */

/* In a child as @u: open @n connections (no HELLO) and hold them until
 * told; *@ready is written when they are open. */
static pid_t idle_start(const struct tuser *u, int n, int *go)
{
	int ready[2], rel[2];
	pid_t pid;
	char c;

	cr_assert_eq(pipe2(ready, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(rel, O_CLOEXEC), 0);
	pid = fork();
	if (pid == 0) {
		struct rlimit rl = { (rlim_t)n + 64, (rlim_t)n + 64 };

		close(ready[0]);
		close(rel[1]);
		if (setrlimit(RLIMIT_NOFILE, &rl))
			_exit(126);
		become(u);
		for (int i = 0; i < n; i++)
			if (proto_connect(sock) < 0)
				_exit(3);
		(void)!write(ready[1], "", 1);
		(void)!read(rel[0], &c, 1);
		_exit(0);
	}
	cr_assert(pid > 0);
	close(ready[1]);
	close(rel[0]);
	cr_assert_eq(read(ready[0], &c, 1), 1, "the attacker could not connect");
	close(ready[0]);
	*go = rel[1];
	return pid;
}

static int child_wait(pid_t pid)
{
	int status;

	cr_assert_eq(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

/* As @u: HELLO on a new connection; its result, through the exit code. */
static void hello_as_child(void *arg)
{
	become(arg);
	_exit(-hello_on(sock, NULL));
}

static int hello_as(const struct tuser *u)
{
	int how = run_in_child(hello_as_child, (void *)u);

	return how < 0 ? how + 1 : -1000 - how; /* -errno as sent */
}

Test(attacks, idle_connections_take_no_threads)
{
	unsigned int n = rounds(2000);
	pid_t pid, att;
	int go, threads;

	need_users();
	pid = daemon_up(NULL);
	att = idle_start(&ua, (int)n, &go);
	/* Once a later connection has its HELLO answered, the daemon has
	 * accepted every one before it. */
	cr_assert_eq(hello_on(sock, NULL), 0);
	threads = threads_of(pid);
	cr_log_info("%u idle connections: %d threads", n, threads);
	cr_expect_leq(threads, 2, "%u idle connections: %d threads", n,
		      threads);
	/* Neither another user nor root is locked out. */
	cr_expect_eq(hello_as(&ub), 0, "another user");
	cr_expect_eq(restore_via(sock), 0, "root");
	close(go);
	cr_assert_eq(child_wait(att), 0);
	test_daemon_kill(pid, SIGTERM);
}

/*
 * A user's connections that have not registered are capped, and past the
 * cap refused with EBUSY in answer to HELLO; another user's and root's
 * are not. Silent ones are closed after --handshake-timeout.
 */
Test(attacks, connection_limits_and_timeout)
{
	const char *const args[] = { "--max-user-connections", "2",
				     "--handshake-timeout", "1000", NULL };
	struct proto_hdr h;
	pid_t pid, att;
	uint64_t t0;
	int go, s;

	need_users();
	pid = daemon_up(args);
	att = idle_start(&ua, 2, &go);
	cr_assert_eq(hello_as(&ua), -EBUSY, "a third connection of a user");
	cr_assert_eq(hello_as(&ub), 0, "another user");
	cr_assert_eq(hello_on(sock, NULL), 0, "root");
	close(go);
	cr_assert_eq(child_wait(att), 0);
	cr_assert_eq(hello_as(&ua), 0, "the user, its connections closed");
	/* A silent connection hears ETIMEDOUT, then the end. */
	t0 = test_now_ns();
	s = proto_connect(sock);
	cr_assert(s >= 0);
	{
		union {
			struct proto_hdr h;
			struct proto_error err;
		} u;
		ssize_t n = proto_recv(s, &u, sizeof(u), NULL, 0, NULL);

		cr_assert_eq(n, (ssize_t)sizeof(u.err));
		cr_assert_eq(u.h.type, MSG_ERROR);
		cr_assert_eq(u.err.err, -ETIMEDOUT);
		cr_assert_eq(proto_recv(s, &h, sizeof(h), NULL, 0, NULL), 0);
	}
	cr_assert_geq(test_now_ns() - t0, 1000000000ull);
	close(s);
	test_daemon_kill(pid, SIGTERM);
}

/* ------------------------------------------------------------------------
 * Sessions: one user used to take every slot of --max-sessions.
 */

Test(attacks, one_user_cannot_take_every_session)
{
	const char *const args[] = { "--max-sessions", "4", NULL };
	struct held a[2], b, root[4];
	pid_t pid;

	need_users();
	pid = daemon_up(args);
	/* A user gets a quarter of them by default. */
	cr_assert_eq(held_start(&a[0], &ua), 0);
	cr_assert_eq(held_start(&a[1], &ua), -EBUSY, "its second session");
	cr_assert_eq(held_start(&b, &ub), 0, "another user");
	for (int i = 0; i < 4; i++)
		cr_assert_eq(held_start(&root[i], NULL), 0, "root's %d", i);
	for (int i = 0; i < 4; i++)
		held_release(&root[i]);
	held_release(&b);
	held_release(&a[1]);
	held_release(&a[0]);
	test_daemon_kill(pid, SIGTERM);
}

/* ------------------------------------------------------------------------
 * Slots that come back: a user's connections and sessions used to be
 * counted for good, so a plain user was refused from its 17th restore on
 * until the daemon restarted (and every user after 256).
 */

/* As the user @arg: REGISTERs of an unmapped range, each on a connection
 * of its own. Exit code: how many were not refused with EFAULT. */
static void unmapped_registers_child(void *arg)
{
	char *base;
	int uffd = uffd_with_range(MIB, &base, O_NONBLOCK);
	int img = open(image, O_RDONLY | O_CLOEXEC), wrong = 0;
	unsigned int n = rounds(40);

	if (uffd < 0 || img < 0)
		_exit(126);
	become(arg);
	for (unsigned int i = 0; i < n; i++) {
		int s = -1, ret = hello_on(sock, &s);

		if (!ret)
			ret = register_on(s, 0x10000, MIB, uffd, img);
		if (ret != -EFAULT && wrong++ < 3)
			fprintf(stderr, "REGISTER %u: %s\n", i, strerror(-ret));
		if (s >= 0)
			close(s);
	}
	_exit(wrong > 120 ? 120 : wrong);
}

/* Try @fn(@arg) until it gives 0 (10 s at most): a slot the daemon gives
 * back once it has seen a client go. Returns the last result. */
static int eventually(int (*fn)(const struct tuser *), const struct tuser *u)
{
	uint64_t end = test_now_ns() + 10000000000ull;
	int ret;

	while ((ret = fn(u)) && test_now_ns() < end)
		usleep(10000);
	return ret;
}

/* held_start(), again while refused (10 s at most): a user's slot comes
 * back once the daemon has seen that user's last client go. */
static int held_start_eventually(struct held *h, const struct tuser *u)
{
	uint64_t end = test_now_ns() + 10000000000ull;
	int ret;

	while ((ret = held_start(h, u)) && test_now_ns() < end) {
		held_release(h);
		usleep(10000);
	}
	return ret;
}

Test(attacks, refused_registers_give_their_slots_back)
{
	const char *const args[] = { "--max-user-connections", "3",
				     "--max-connections", "4", NULL };
	pid_t pid;

	need_users();
	pid = daemon_up(args);
	cr_assert_eq(run_in_child(unmapped_registers_child, &ua), -1,
		     "every REGISTER of an unmapped range refused with EFAULT, "
		     "none with EBUSY");
	cr_assert_eq(run_in_child(unmapped_registers_child, &ub), -1,
		     "another user's too, after the first's");
	test_daemon_kill(pid, SIGTERM);
}

/*
 * Every limit to its bound and back, many times: a user's sessions and
 * connections, all users' together; each slot comes back once its
 * client is gone.
 */
Test(attacks, limits_to_the_bound_and_back, .timeout = 240)
{
	const char *const args[] = { "--max-sessions", "3",
				     "--max-user-sessions", "2",
				     "--max-connections", "4",
				     "--max-user-connections", "3", NULL };
	unsigned int n = rounds(8);
	pid_t pid;

	need_users();
	pid = daemon_up(args);
	for (unsigned int i = 0; i < n; i++) {
		struct held a[2], b, c;
		int go;
		pid_t att;

		cr_assert_eq(held_start_eventually(&a[0], &ua), 0, "round %u", i);
		cr_assert_eq(held_start_eventually(&a[1], &ua), 0, "round %u", i);
		cr_assert_eq(held_start(&b, &ua), -EBUSY, "a user's third");
		held_release(&b);
		cr_assert_eq(held_start_eventually(&b, &ub), 0, "round %u", i);
		cr_assert_eq(held_start(&c, &ub), -EBUSY, "a fourth of all users");
		held_release(&c);
		held_release(&b);
		held_release(&a[1]);
		held_release(&a[0]);

		att = idle_start(&ua, 3, &go);
		cr_assert_eq(hello_as(&ua), -EBUSY, "a user's fourth connection");
		cr_assert_eq(eventually(hello_as, &ub), 0, "round %u", i);
		close(go);
		cr_assert_eq(child_wait(att), 0);
		cr_assert_eq(eventually(hello_as, &ua), 0, "round %u", i);
	}
	test_daemon_kill(pid, SIGTERM);
}

/* ------------------------------------------------------------------------
 * Paths swapped under the daemon: it used to remove its socket by its
 * path on stop, through whatever the directory had become.
 */

struct swap {
	const char *dir, *moved, *to;
};

/* As a user: move @dir away and put a symlink to @to in its place. */
static void swap_child(void *arg)
{
	const struct swap *w = arg;

	become(&ua);
	_exit(rename(w->dir, w->moved) || symlink(w->to, w->dir) ? 1 : 0);
}

/* A socket file of root's at @path, listened on by nobody once we close
 * it: what another daemon's socket looks like on disk. */
static void socket_file(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	cr_assert(s >= 0 && strlen(path) < sizeof(a.sun_path));
	strcpy(a.sun_path, path);
	cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	close(s);
}

static bool is_socket(const char *path)
{
	struct stat st;

	return !lstat(path, &st) && S_ISSOCK(st.st_mode);
}

Test(attacks, stop_removes_only_its_own_socket)
{
	char udir[200], moved[200], victim[200], vsock[300], mine[300];
	struct swap w = { udir, moved, victim };
	pid_t pid;

	need_users();
	/* The user's folder and, in it, the socket's: the user may rename
	 * what is in its own folder. */
	snprintf(udir, sizeof(udir), "%s/p", dir);
	cr_assert_eq(mkdir(udir, 0755), 0);
	cr_assert_eq(chown(udir, ua.uid, ua.gid), 0);
	snprintf(udir, sizeof(udir), "%s/p/u", dir);
	snprintf(moved, sizeof(moved), "%s/p/u.old", dir);
	snprintf(victim, sizeof(victim), "%s/v", dir);
	snprintf(vsock, sizeof(vsock), "%s/v/s.sock", dir);
	cr_assert_eq(mkdir(udir, 0755), 0);
	cr_assert_eq(chown(udir, ua.uid, ua.gid), 0);
	cr_assert_eq(mkdir(victim, 0755), 0);
	socket_file(vsock);
	snprintf(mine, sizeof(mine), "%s/s.sock", udir);
	pid = daemon_run(mine, NULL, NULL, 0, NULL, NULL);
	cr_assert(pid > 0, "the daemon did not start");
	cr_assert_eq(run_in_child(swap_child, &w), -1, "the user's swap");
	test_daemon_kill(pid, SIGTERM);
	cr_assert(is_socket(vsock), "the daemon removed %s, through the "
		  "symlink the user put in place of its directory", vsock);
	snprintf(mine, sizeof(mine), "%s/s.sock", moved);
	cr_assert(!is_socket(mine), "its own socket stayed at %s", mine);
}

/* ------------------------------------------------------------------------
 * STATUS used to list every user's sessions to every user.
 */

struct status_q {
	const struct tuser *as;
	pid_t pids[4];		/* out: the sessions' client pids */
	uint32_t n;
};

static void status_child(void *arg)
{
	struct status_q *q = arg;
	struct proto_status *st = calloc(1, PROTO_MAX_MSG);
	struct proto_hdr req;
	int s = -1, out = 100;

	if (q->as)
		become(q->as);
	proto_init(&req, MSG_STATUS, sizeof(req));
	if (st && !hello_on(sock, &s) &&
	    proto_call(s, &req, NULL, 0, st, PROTO_MAX_MSG) > 0 &&
	    st->h.type == MSG_STATUS) {
		out = (int)st->nr_sessions;
		for (uint32_t i = 0; i < st->nr_sessions && i < 4; i++)
			q->pids[i] = st->s[i].pid;
	}
	_exit(out);
}

/* The sessions @as sees (MAP_SHARED, so that the child can fill it). */
static struct status_q *status_as(const struct tuser *as)
{
	struct status_q *q = mmap(NULL, sizeof(*q), PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int how;

	cr_assert(q != MAP_FAILED);
	q->as = as;
	how = run_in_child(status_child, q);
	cr_assert(how < 0 && how != -101, "STATUS failed: %d", how);
	q->n = (uint32_t)(-how - 1);
	return q;
}

Test(attacks, status_lists_only_the_callers_sessions)
{
	struct held mine, roots;
	struct status_q *q;
	pid_t pid;

	need_users();
	pid = daemon_up(NULL);
	cr_assert_eq(held_start(&roots, NULL), 0);
	cr_assert_eq(held_start(&mine, &ua), 0);
	/* The ACK comes before the session is listed: wait for both. */
	for (uint64_t end = test_now_ns() + 10000000000ull;
	     status_as(NULL)->n < 2;)
		cr_assert(test_now_ns() < end, "the sessions are not listed");
	q = status_as(&ua);
	cr_expect_eq(q->n, 1, "the user sees %u sessions", q->n);
	cr_expect_eq(q->pids[0], mine.pid);
	q = status_as(&ub);
	cr_expect_eq(q->n, 0, "another user sees %u sessions", q->n);
	q = status_as(NULL);
	cr_expect_eq(q->n, 2, "root sees %u sessions", q->n);
	held_release(&mine);
	held_release(&roots);
	test_daemon_kill(pid, SIGTERM);
}

/* ------------------------------------------------------------------------
 * LAZY_PAGES: the daemon would read a dump with its own rights and serve
 * the restore on a socket of its own; another user may not ask.
 */

static void lazy_pages_child(void *arg)
{
	struct proto_lazy_pages *m = calloc(1, sizeof(*m));
	struct proto_error *e = calloc(1, PROTO_MAX_MSG);
	int s = -1, out = 100;

	become(arg);
	if (m && e && !hello_on(sock, &s)) {
		proto_init(&m->h, MSG_LAZY_PAGES, sizeof(*m));
		snprintf(m->dir, sizeof(m->dir), "%s", dir);
		if (proto_call(s, m, NULL, 0, e, PROTO_MAX_MSG) > 0)
			out = e->h.type == MSG_ERROR ? -e->err : 101;
	}
	_exit(out);
}

Test(attacks, lazy_pages_is_for_root_and_the_daemons_user)
{
	char path[512];
	struct stat st;
	pid_t pid;
	int how;

	need_users();
	pid = daemon_up(NULL);
	how = run_in_child(lazy_pages_child, &ua);
	cr_expect_eq(how, -(EPERM + 1), "another user's LAZY_PAGES: %d", how);
	snprintf(path, sizeof(path), "%s/lazy-pages.socket", dir);
	cr_expect_neq(stat(path, &st), 0, "a socket was made for it");
	test_daemon_kill(pid, SIGTERM);
}

/* LAZY_PAGES @m as root: the errno of the ERROR it gets (0: ACK). */
static int lazy_pages_send(struct proto_lazy_pages *m)
{
	struct proto_error *e = calloc(1, PROTO_MAX_MSG);
	int s = -1, ret;

	cr_assert(e);
	cr_assert_eq(hello_on(sock, &s), 0);
	proto_init(&m->h, MSG_LAZY_PAGES, sizeof(*m));
	cr_assert_gt(proto_call(s, m, NULL, 0, e, PROTO_MAX_MSG), 0);
	close(s);
	ret = e->h.type == MSG_ERROR ? e->err : e->h.type == MSG_ACK ? 0 : 1;
	free(e);
	return ret;
}

/*
 * Malformed LAZY_PAGES of a caller that may ask: each refused with
 * EINVAL before any dump is read or socket made; the daemon serves on.
 */
Test(attacks, lazy_pages_malformed)
{
	struct proto_lazy_pages *m = calloc(1, sizeof(*m));
	char path[512];
	struct stat st;
	pid_t pid;

	cr_assert(m);
	pid = daemon_up(NULL);
	for (int i = 0; i < 9; i++) {
		memset(m, 0, sizeof(*m));
		snprintf(m->dir, sizeof(m->dir), "%s", dir);
		switch (i) {
		case 0: m->flags = 1; break;
		case 1: m->reserved = 1; break;
		case 2: m->handlers = PROTO_LP_HANDLERS_MAX + 1; break;
		case 3: m->around_kib = PROTO_LP_AROUND_MAX + 1; break;
		case 4: memset(m->verify, 'v', sizeof(m->verify)); break;
		case 5: snprintf(m->verify, sizeof(m->verify), "rel/sums");
			break;
		case 6: snprintf(m->dir, sizeof(m->dir), "rel/dump"); break;
		case 7: snprintf(m->wset, sizeof(m->wset), "/a.ws");
			snprintf(m->record, sizeof(m->record), "/b.ws");
			break;
		case 8: snprintf(m->record, sizeof(m->record), "rel.ws");
			break;
		}
		cr_expect_eq(lazy_pages_send(m), -EINVAL, "case %d", i);
	}
	snprintf(path, sizeof(path), "%s/lazy-pages.socket", dir);
	cr_expect_neq(stat(path, &st), 0, "a socket was made");
	cr_expect_eq(status_as(NULL)->n, 0, "the daemon does not answer");
	free(m);
	test_daemon_kill(pid, SIGTERM);
}

/* ------------------------------------------------------------------------
 * Refusals used to be sent before HELLO was read: EPIPE or ECONNRESET.
 */

Test(attacks, refusal_arrives_as_its_errno)
{
	char udir[300], usock[320];
	pid_t pid;

	need_users();
	/* A daemon run by a user serves that user only: root is refused. */
	snprintf(udir, sizeof(udir), "%s/user", dir);
	cr_assert_eq(mkdir(udir, 0755), 0);
	cr_assert_eq(chown(udir, ua.uid, ua.gid), 0);
	snprintf(usock, sizeof(usock), "%s/faultd.sock", udir);
	pid = daemon_run(usock, NULL, &ua, 0, NULL, NULL);
	cr_assert(pid > 0);
	for (unsigned int i = 0; i < rounds(50); i++)
		cr_assert_eq(hello_on(usock, NULL), -EACCES, "round %u", i);
	test_daemon_kill(pid, SIGTERM);
}

/* ------------------------------------------------------------------------
 * Numeric options used to be read with atoi(): "abc" was 0.
 */

Test(attacks, numeric_options_are_strict)
{
	static const char *const opts[] = {
		"--max-sessions", "--max-user-sessions", "--max-connections",
		"--max-user-connections", "--handshake-timeout",
	};
	static const char *const bad[] = { "abc", "4x", "", "-1", "0",
					   "99999999999999999999" };

	for (size_t i = 0; i < ARRAY_SIZE(opts); i++)
		for (size_t j = 0; j < ARRAY_SIZE(bad); j++) {
			const char *const args[] = { opts[i], bad[j], NULL };
			char log[512];
			int err, status = 0;
			pid_t pid = daemon_run(sock, args, NULL, 0, &err,
					       &status);

			if (pid > 0)
				test_daemon_kill(pid, SIGTERM);
			cr_assert_eq(pid, 0, "%s '%s' was taken", opts[i],
				     bad[j]);
			cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2,
				  "%s '%s': status %#x", opts[i], bad[j],
				  status);
			cr_expect(log_wait(err, "is not a number", log,
					   sizeof(log)),
				  "%s '%s': %s", opts[i], bad[j], log);
			close(err);
		}
}

/* ------------------------------------------------------------------------
 * The layout oracle: the range check read /proc/PID/smaps, as root, of
 * whatever the process that connected had become.
 */

/* The set-user-ID root copy of tests/setuid-helper.c, in our directory. */
static const char *setuid_helper(void)
{
	static char path[300];
	const char *src = getenv("FAULTD_SETUID_HELPER");

	cr_assert(src, "FAULTD_SETUID_HELPER not set (run through meson test)");
	snprintf(path, sizeof(path), "%s/setuid-helper", dir);
	cr_assert_eq(sh("cp %s %s", src, path), 0);
	cr_assert_eq(chown(path, 0, 0), 0);
	cr_assert_eq(chmod(path, 04755), 0);
	return path;
}

/* A mapping of process @pid that is not registered with a userfaultfd
 * (its first one), and an address range nothing maps. */
static void layout_of(pid_t pid, uint64_t *mapped, uint64_t *unmapped)
{
	char path[64], line[512];
	unsigned long a, b, prev_end = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	cr_assert(f);
	*mapped = *unmapped = 0;
	while (fgets(line, sizeof(line), f) &&
	       sscanf(line, "%lx-%lx", &a, &b) == 2) {
		if (!*mapped)
			*mapped = a;
		if (prev_end && a - prev_end >= 2 * 4096 && !*unmapped)
			*unmapped = prev_end + 4096;
		prev_end = b;
	}
	fclose(f);
	cr_assert(*mapped && *unmapped);
}

/* Wait until @pid runs as @u with effective user ID 0: it exec'd the
 * helper (before it became @u, it was root all through). */
static void wait_setuid(pid_t pid, const struct tuser *u)
{
	uint64_t end = test_now_ns() + 10000000000ull;
	char path[64], line[256];

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	for (;;) {
		FILE *f = fopen(path, "re");
		unsigned int r = 0, e = 1;

		cr_assert(f);
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "Uid: %u %u", &r, &e) == 2)
				break;
		fclose(f);
		if (r == u->uid && e == 0)
			return;
		cr_assert(test_now_ns() < end, "the helper did not start");
		sched_yield();
	}
}

/*
 * The attacker: a user's process connects twice, forks, and exec's a
 * set-user-ID root program; its child, which holds both connections,
 * asks about a range the program maps and one it does not. The answers
 * used to differ (EINVAL: mapped but not registered; EFAULT: not mapped).
 */
Test(attacks, exec_of_setuid_program_is_no_layout_oracle)
{
	const char *helper;
	int cmd[2], ans[2], hold[2], res[2] = { 1, 1 };
	uint64_t where[2];
	pid_t pid, att;

	need_users();
	helper = setuid_helper();
	pid = daemon_up(NULL);
	cr_assert_eq(pipe2(cmd, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(ans, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(hold, O_CLOEXEC), 0);
	att = fork();
	if (att == 0) {
		char *base;
		int uffd = uffd_with_range(MIB, &base, O_NONBLOCK);
		int img = open(image, O_RDONLY), s[2];

		close(hold[1]); /* the helper runs until the test closes it */
		become(&ua);
		if (uffd < 0 || img < 0 || hello_on(sock, &s[0]) ||
		    hello_on(sock, &s[1]))
			_exit(3);
		if (fork() == 0) { /* the one that asks */
			int r[2];

			if (read(cmd[0], where, sizeof(where)) != sizeof(where))
				_exit(4);
			for (int i = 0; i < 2; i++)
				r[i] = register_on(s[i], where[i], 4096, uffd,
						   img);
			(void)!write(ans[1], r, sizeof(r));
			_exit(0);
		}
		/* The one that becomes the set-user-ID program. */
		dup2(hold[0], 0);
		execl(helper, helper, (char *)NULL);
		_exit(5);
	}
	cr_assert(att > 0);
	close(hold[0]);
	wait_setuid(att, &ua);
	layout_of(att, &where[0], &where[1]);
	cr_assert_eq(write(cmd[1], where, sizeof(where)), (ssize_t)sizeof(where));
	cr_assert_eq(read(ans[0], res, sizeof(res)), (ssize_t)sizeof(res));
	cr_expect_eq(res[0], res[1], "mapped: %d, unmapped: %d", res[0], res[1]);
	cr_expect_eq(res[0], -EPERM, "the process exec'd since it connected");
	close(hold[1]); /* the helper exits */
	cr_assert_eq(child_wait(att), 0);
	test_daemon_kill(pid, SIGTERM);
}

/* As @arg's user, not dumpable: register a range of our own. */
static void undumpable_child(void *arg)
{
	char *base;
	int uffd = uffd_with_range(MIB, &base, O_NONBLOCK);
	int img = open(image, O_RDONLY), s;

	become(arg);
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	if (uffd < 0 || img < 0 || hello_on(sock, &s))
		_exit(100);
	_exit(-register_on(s, (uintptr_t)base, MIB, uffd, img));
}

/*
 * The check reads the mappings with the client's own rights: a process
 * that is not dumpable cannot read its own /proc/PID/smaps, so the
 * daemon does not either (it used to, as root) and refuses with EACCES.
 */
Test(attacks, mappings_are_read_with_the_clients_rights)
{
	pid_t pid;
	int how;

	need_users();
	pid = daemon_up(NULL);
	how = run_in_child(undumpable_child, &ua);
	cr_assert_eq(how, -EACCES - 1, "the registration got %d", -how - 1);
	test_daemon_kill(pid, SIGTERM);
}

/* ------------------------------------------------------------------------
 * The library used to talk to whoever listened on the socket.
 */

/*
 * A fake daemon, run as @u: listens on @s (bound by root already: its
 * file is root's) or on a socket it binds at @path, answers HELLO like a
 * daemon, and reports through @report what reached it: 0 nothing,
 * 1 a connection, 2 a message, 3 descriptors.
 */
static pid_t fake_start(const struct tuser *u, int s, const char *path,
			int *report, int *stop)
{
	int rep[2], st[2];
	pid_t pid;

	cr_assert_eq(pipe2(rep, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(st, O_CLOEXEC), 0);
	pid = fork();
	if (pid == 0) {
		struct pollfd p[2];
		int got = 0, c = -1;

		close(rep[0]);
		close(st[1]);
		become(u);
		if (s < 0) {
			struct sockaddr_un a = { .sun_family = AF_UNIX };

			snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
			s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
			if (bind(s, (struct sockaddr *)&a, sizeof(a)))
				_exit(3);
		}
		if (listen(s, 8))
			_exit(4);
		(void)!write(rep[1], &got, 1); /* listening */
		p[0] = (struct pollfd){ .fd = s, .events = POLLIN };
		p[1] = (struct pollfd){ .fd = st[0], .events = POLLIN };
		while (poll(p, 2, -1) > 0 && !p[1].revents) {
			union {
				struct proto_hello h;
				char buf[PROTO_MAX_MSG];
			} m;
			int fds[2];
			unsigned int nfds = 0;

			if (p[0].fd == s) {
				c = accept(s, NULL, NULL);
				got = got < 1 ? 1 : got;
				p[0].fd = c;
				continue;
			}
			if (proto_recv(c, &m, sizeof(m), fds, 2, &nfds) <= 0) {
				p[0].fd = -1;
				continue;
			}
			got = nfds ? 3 : got < 2 ? 2 : got;
			if (m.h.h.type == MSG_HELLO) {
				m.h.min_version = m.h.max_version = PROTO_VERSION;
				(void)!proto_send(c, &m.h, NULL, 0);
			}
		}
		(void)!write(rep[1], &got, 1);
		_exit(0);
	}
	cr_assert(pid > 0);
	close(rep[1]);
	close(st[0]);
	{
		char c;

		cr_assert_eq(read(rep[0], &c, 1), 1, "the fake did not listen");
	}
	*report = rep[0];
	*stop = st[1];
	return pid;
}

/* Stop the fake: what reached it. */
static int fake_stop(pid_t pid, int report, int stop)
{
	char got = -1;

	close(stop);
	cr_assert_eq(read(report, &got, 1), 1);
	close(report);
	cr_assert_eq(child_wait(pid), 0);
	return got;
}

/* A restore as root through @path (NULL: the default): its result. */
static void restore_result_child(void *arg)
{
	struct faultd_restore_opts o = { .size = sizeof(o),
					 .flags = FAULTD_RESTORE_DAEMON,
					 .socket = arg };
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	int ret;

	if (faultd_ctx_create(NULL, &ctx))
		_exit(100);
	ret = faultd_restore(ctx, image, &o, &r);
	faultd_ctx_destroy(ctx); /* its threads too, joined */
	_exit(-ret);
}

static int restore_result(const char *path)
{
	int how = run_in_child(restore_result_child, (void *)path);

	return how < 0 ? how + 1 : -1000 - how;
}

/*
 * The socket file is root's, in root's directory, but the process that
 * listens on it is a user's: the client refuses it (EPERM) before it
 * sends anything. It used to send HELLO, then REGISTER with root's image
 * and userfaultfd.
 */
Test(attacks, client_refuses_a_listener_of_another_user)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	int report, stop, got, ret;
	pid_t fake;

	need_users();
	snprintf(a.sun_path, sizeof(a.sun_path), "%s/fake.sock", dir);
	cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	fake = fake_start(&ua, s, NULL, &report, &stop);
	close(s);
	ret = restore_result(a.sun_path);
	got = fake_stop(fake, report, stop);
	cr_expect_eq(ret, -EPERM, "the restore got %d", ret);
	cr_expect_leq(got, 1, "the fake daemon got %s",
		      got == 3 ? "descriptors" : "messages");
}

/*
 * Root with the runtime directory of a user (su without -) does not use
 * the socket there by default. It used to: the user's fake daemon got
 * root's image and userfaultfd.
 */
Test(attacks, root_ignores_another_users_runtime_dir)
{
	char xdg[300], path[320];
	int report, stop, got;
	pid_t fake;

	need_users();
	snprintf(xdg, sizeof(xdg), "%s/run-user", dir);
	cr_assert_eq(mkdir(xdg, 0700), 0);
	cr_assert_eq(chown(xdg, ua.uid, ua.gid), 0);
	snprintf(path, sizeof(path), "%s/faultd.sock", xdg);
	fake = fake_start(&ua, -1, path, &report, &stop);
	setenv("XDG_RUNTIME_DIR", xdg, 1);
	(void)restore_result(NULL); /* /run/faultd/faultd.sock, if any */
	got = fake_stop(fake, report, stop);
	cr_expect_eq(got, 0, "the fake daemon got %s",
		     got == 3 ? "descriptors" : got == 2 ? "messages"
							 : "a connection");
}

/*
 * A real daemon of root's, but its socket in a directory another user
 * can change: the client does not go there (EACCES).
 */
Test(attacks, client_refuses_sockets_others_can_replace)
{
	static const struct {
		const char *name;
		mode_t mode;
		bool users;	/* the directory is user a's */
		int want;
	} cases[] = {
		{ "world-writable", 0777, false, -EACCES },
		{ "group-writable", 0775, false, -EACCES },
		{ "a-users", 0755, true, -EACCES },
		{ "sticky", 01777, false, 0 },
	};

	need_users();
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		char d[300], path[320];
		pid_t pid;
		int ret;

		snprintf(d, sizeof(d), "%s/%s", dir, cases[i].name);
		cr_assert_eq(mkdir(d, 0700), 0);
		cr_assert_eq(chmod(d, cases[i].mode), 0);
		if (cases[i].users)
			cr_assert_eq(chown(d, ua.uid, ua.gid), 0);
		snprintf(path, sizeof(path), "%s/faultd.sock", d);
		pid = daemon_run(path, NULL, NULL, 0, NULL, NULL);
		cr_assert(pid > 0);
		ret = restore_result(path);
		cr_expect_eq(ret, cases[i].want, "%s: %d", cases[i].name, ret);
		test_daemon_kill(pid, SIGTERM);
	}
	/* In a sticky directory, a socket of another user's is refused:
	 * the fake binds it, so the file is the user's. */
	{
		char path[320];
		int report, stop, ret;
		pid_t fake;

		snprintf(path, sizeof(path), "%s/sticky/fake.sock", dir);
		fake = fake_start(&ua, -1, path, &report, &stop);
		ret = restore_result(path);
		cr_expect_leq(fake_stop(fake, report, stop), 0);
		cr_expect_eq(ret, -EACCES, "a user's socket in /tmp: %d", ret);
	}
}

/* ------------------------------------------------------------------------
 * The socket's mode used to be set with chmod() on its path after bind():
 * a user who can write the directory swapped in a symlink between the
 * two, and a file of root's became 0666.
 */

Test(attacks, socket_mode_is_not_set_through_the_path, .timeout = 300)
{
	char udir[300], path[320], tmp[320], secret[300], log[256];
	unsigned int n = rounds(400), bound = 0;
	struct stat st;
	pid_t swapper;
	int stop[2];

	need_users();
	snprintf(udir, sizeof(udir), "%s/user", dir);
	cr_assert_eq(mkdir(udir, 0755), 0);
	cr_assert_eq(chown(udir, ua.uid, ua.gid), 0);
	snprintf(path, sizeof(path), "%s/faultd.sock", udir);
	snprintf(tmp, sizeof(tmp), "%s/link", udir);
	snprintf(secret, sizeof(secret), "%s/secret", dir);
	cr_assert_eq(close(open(secret, O_CREAT | O_WRONLY, 0600)), 0);
	cr_assert_eq(pipe2(stop, O_CLOEXEC), 0);
	swapper = fork();
	if (swapper == 0) {
		close(stop[1]);
		become(&ua);
		for (unsigned long i = 0;; i++) {
			struct pollfd p = { .fd = stop[0], .events = POLLIN };

			if (!(i % 256) && poll(&p, 1, 0))
				_exit(0);
			unlink(tmp);
			if (!symlink(secret, tmp))
				rename(tmp, path); /* over the socket, if any */
		}
	}
	cr_assert(swapper > 0);
	close(stop[0]);
	for (unsigned int i = 0; i < n; i++) {
		const char *const args[] = { "-v", NULL };
		int err;
		pid_t pid = daemon_spawn(path, args, NULL, 0, &err);

		/* Listening (it says so), or gone because the symlink was
		 * back before its bind(): the end of its stderr. */
		bound += log_wait(err, "listening on", log, sizeof(log));
		test_daemon_kill(pid, SIGKILL);
		close(err);
		cr_assert_eq(stat(secret, &st), 0);
		if ((st.st_mode & 07777) != 0600)
			break;
	}
	close(stop[1]);
	cr_assert_eq(child_wait(swapper), 0);
	cr_expect_eq(st.st_mode & 07777, 0600,
		     "root's file became %#o after %u daemons had bound",
		     st.st_mode & 07777, bound);
	cr_expect_gt(bound, 0, "the daemon never bound: the race did not run");
	cr_log_info("%u of %u daemons bound", bound, n);
}
