// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * nbd-sys.c - restores from network storage, end to end (issue 28):
 * faultd serving faultd images through the library (faultd_restore() of
 * an NBD URI) and Firecracker memory files through fc-client (faultd
 * firecracker --mem URI), from nbdkit - and nginx behind its curl plugin
 * - started by each test in a network namespace of its own, reached over
 * a veth pair of its own (nbd/netns.h: nothing else can be contacted).
 * Every byte a client reads is checked against what was written; a page
 * that cannot be had is poisoned and reported, never zeros.
 *
 * Each test runs in its own process (Criterion's), which moves into the
 * client's namespace: the daemon and the clients it starts are there too.
 */
#define NETNS_DEV "fdn28s"
#define NETNS_CLIENT "10.250.29.1"
#define NETNS_SERVER "10.250.29.2"

#include <criterion/criterion.h>
#include <grp.h>
#include <pwd.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "daemon-helpers.h"
#include "fc/fc-helpers.h"
#include "helpers.h"
#include "internal.h"
#include "nbd/servers.h"

#define MIB (1ul << 20)
#define TAG 0x28bd
#define PORT "10809"

static struct netns ns = { .fd = -1 };
static struct server srv, web;
static char dir[64];
static char sock[128], dlog_path[128];
static char uri[256];
static pid_t dpid, keeper;
static char why[256];

/* ------------------------------------------------------------------------
 * The fixture: a directory, the namespaces, and what runs is stopped.
 */

static const char *path_of(const char *name)
{
	static char paths[8][192];
	static unsigned int next;
	char *p = paths[next++ % 8];

	snprintf(p, sizeof(paths[0]), "%s/%s", dir, name);
	return p;
}

static void setup(void)
{
	strcpy(dir, "/var/tmp/faultd-nbd-XXXXXX");
	cr_assert(mkdtemp(dir));
	chmod(dir, 0755);
	snprintf(sock, sizeof(sock), "%s/faultd.sock", dir);
	snprintf(dlog_path, sizeof(dlog_path), "%s/faultd.log", dir);
	snprintf(uri, sizeof(uri), "nbd://%s:%s/", NETNS_SERVER, PORT);
}

static void teardown(void)
{
	char cmd[128];

	server_free(&srv);
	server_free(&web);
	if (dpid > 0)
		test_daemon_kill(dpid, SIGKILL);
	if (keeper > 0)
		kill(keeper, SIGKILL);
	netns_end(&ns);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd))
		fprintf(stderr, "cannot remove %s\n", dir);
}

TestSuite(nbd_sys, .init = setup, .fini = teardown, .timeout = 300);

/* The namespaces, or the test is skipped with the reason. */
static void need_net(void)
{
	if (access(NBDKIT, X_OK))
		cr_skip_test("no nbdkit (%s)", NBDKIT);
	if (netns_make(&ns, why, sizeof(why)))
		cr_skip_test("%s", why);
}

/* nbdkit in the server's namespace on NETNS_SERVER:PORT, with @args
 * (filters, the plugin and its parameters, NULL-ended). */
static void nbdkit_serve(const char *const *args)
{
	const char *a[40] = { "-i", NETNS_SERVER, "-p", PORT };
	size_t n = 4;

	for (size_t i = 0; args[i] && n < 39; i++)
		a[n++] = args[i];
	a[n] = NULL;
	cr_assert_eq(nbdkit_start(&srv, &ns, dir, "nbdkit", a, why,
				  sizeof(why)), 0, "%s", why);
}

static void nbdkit_again(void)
{
	cr_assert_eq(server_run(&srv, why, sizeof(why)), 0, "%s", why);
}

/* ------------------------------------------------------------------------
 * The faultd protocol's daemon, and library clients.
 */

/* `faultd --socket S -v` with @args (NULL-ended), its log in dlog_path;
 * returns once it answers a HELLO. */
static void daemon_start(const char *const *args)
{
	const char *exe = getenv("FAULTD_DAEMON");
	const char *argv[24] = { exe, "--socket", sock, "-v" };
	uint64_t end = test_now_ns() + 30000000000ull;
	int n = 4;

	cr_assert(exe, "FAULTD_DAEMON not set (run through meson test)");
	for (int i = 0; args && args[i] && n < 23; i++)
		argv[n++] = args[i];
	dpid = fork();
	cr_assert(dpid >= 0);
	if (dpid == 0) {
		int fd = open(dlog_path, O_WRONLY | O_CREAT | O_APPEND, 0644);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(fd, 2);
		unsetenv("FAULTD_INJECT");
		execv(exe, (char *const *)argv);
		_exit(127);
	}
	for (;;) {
		struct proto_hello h;
		int s = proto_connect(sock), ok;

		ok = s >= 0 && proto_hello(s, 0, &h) == 0;
		if (s >= 0)
			close(s);
		if (ok)
			return;
		cr_assert(test_now_ns() < end, "the daemon did not come up "
			  "(see %s)", dlog_path);
		cr_assert_eq(waitpid(dpid, NULL, WNOHANG), 0, "the daemon "
			     "exited (see %s)", dlog_path);
		usleep(1000);
	}
}

/* Does the daemon's log hold @what? */
static bool logged(const char *what)
{
	FILE *f = fopen(dlog_path, "r");
	char line[1024];
	bool found = false;

	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	if (f)
		fclose(f);
	return found;
}

/* Wait until the daemon's log holds @what. */
static void wait_logged(const char *what)
{
	uint64_t end = test_now_ns() + 120000000000ull;

	while (!logged(what)) {
		cr_assert(test_now_ns() < end, "the daemon never said \"%s\" "
			  "(see %s)", what, dlog_path);
		usleep(2000);
	}
}

/* The daemon's keeper, from its STATUS. */
static pid_t daemon_keeper(void)
{
	struct proto_status *st = calloc(1, PROTO_MAX_MSG);
	struct proto_hello h;
	struct proto_hdr req;
	int s = proto_connect(sock);
	pid_t pid;

	cr_assert(st && s >= 0);
	cr_assert_eq(proto_hello(s, 0, &h), 0);
	proto_init(&req, MSG_STATUS, sizeof(req));
	cr_assert_gt(proto_call(s, &req, NULL, 0, st, PROTO_MAX_MSG), 0);
	pid = st->keeper_pid;
	close(s);
	free(st);
	return pid;
}

/*
 * An image of @len bytes of pattern(TAG) in @name, with every fourth
 * 256 KiB of zeros (zero extents, holes of the file), authenticated
 * with @key (NULL: not).
 */
static const char *make_image(const char *name, size_t len, const char *key)
{
	struct faultd_checkpoint_opts co = { .size = sizeof(co),
					     .key_file = key };
	struct faultd_region_opts o = { .size = sizeof(o), .length = len };
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	const char *path = path_of(name);
	char *base;

	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	base = faultd_region_base(r);
	pattern_fill(TAG, 0, base, len);
	for (size_t off = 0; off < len; off += MIB)
		memset(base + off + 3 * MIB / 4, 0, MIB / 4);
	cr_assert_eq(faultd_checkpoint(r, path, &co), 0);
	faultd_ctx_destroy(ctx);
	chmod(path, 0644);
	return path;
}

static bool all_zero_page(const char *p)
{
	for (size_t i = 0; i < 4096; i++)
		if (p[i])
			return false;
	return true;
}

/* Is [off, off + len) of a restored image of make_image() right? */
static bool image_right(const char *base, size_t off, size_t len)
{
	for (size_t at = off; at < off + len; at += 4096) {
		bool zero = at % MIB >= 3 * MIB / 4;

		if (zero ? !all_zero_page(base + at)
			 : pattern_check(TAG, at, base + at, 4096))
			return false;
	}
	return true;
}

/* A key file for authenticated images. */
static const char *make_key(void)
{
	const char *path = path_of("key");
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	char k[32];

	for (int i = 0; i < 32; i++)
		k[i] = (char)(i * 7 + 3);
	cr_assert(fd >= 0 && write(fd, k, 32) == 32);
	close(fd);
	return path;
}

/* ---- a client: a process that restores and checks ---- */

struct client {
	const char *uri;
	size_t len;
	unsigned int flags;	/* FAULTD_RESTORE_* beside DAEMON */
	const char *key;
	int to_test, from_test;	/* pipes: steps told and waited for */
};

enum { STEP_RESTORED = 'r', STEP_GO = 'g' };

static void step_tell(int fd, char c)
{
	if (write(fd, &c, 1) != 1)
		_exit(90);
}

static void step_wait(int fd, char want)
{
	char c;

	if (read(fd, &c, 1) != 1 || c != want)
		_exit(91);
}

/* A client's library lines, on the test's standard error. */
static void client_log(void *arg, int level, const char *msg)
{
	(void)arg, (void)level;
	fprintf(stderr, "client %d: %s\n", (int)getpid(), msg);
}

static struct faultd_region *client_restore(struct client *c,
					    struct faultd_ctx **ctxp,
					    const struct faultd_ctx_opts *co)
{
	struct faultd_ctx_opts dflt = { .size = sizeof(dflt),
					.log = client_log };

	struct faultd_restore_opts o = { .size = sizeof(o),
					 .flags = FAULTD_RESTORE_DAEMON |
						  c->flags,
					 .socket = sock, .key_file = c->key };
	struct faultd_region *r;

	if (faultd_ctx_create(co ? co : &dflt, ctxp) ||
	    faultd_restore(*ctxp, c->uri, &o, &r))
		_exit(10);
	return r;
}

/* A client: restore, tell the test, wait for its go, read all, check. */
static pid_t client_start(struct client *c, bool paced)
{
	int a[2], b[2];
	pid_t pid;

	cr_assert_eq(pipe2(a, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(b, O_CLOEXEC), 0);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		struct faultd_restore_progress p = { .size = sizeof(p) };
		struct faultd_ctx *ctx;
		struct faultd_region *r;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		c->to_test = a[1];
		c->from_test = b[0];
		r = client_restore(c, &ctx, NULL);
		if (!image_right(faultd_region_base(r), 0, 4096))
			_exit(11);
		if (paced) {
			step_tell(c->to_test, STEP_RESTORED);
			step_wait(c->from_test, STEP_GO);
		}
		if (!image_right(faultd_region_base(r), 0, c->len))
			_exit(12);
		if (!(c->flags & FAULTD_RESTORE_LAZY) &&
		    (faultd_restore_wait(r) || faultd_restore_progress(r, &p) ||
		     !p.done || p.daemon_died))
			_exit(13);
		faultd_ctx_destroy(ctx);
		_exit(0);
	}
	close(a[1]);
	close(b[0]);
	c->to_test = b[1];
	c->from_test = a[0];
	return pid;
}

static int client_end(pid_t pid)
{
	int status;

	cr_assert_eq(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

/* The client's end, 0; else the daemon's log is shown. */
static void client_ok(int how)
{
	char cmd[400];

	if (!how)
		return;
	/* Without the lines of poisoned pages: thousands of them would
	 * hide the reason above them. */
	snprintf(cmd, sizeof(cmd), "grep -c ': poisoned$' %s >&2; "
		 "grep -v ': poisoned$' %s | tail -n 40 >&2", dlog_path,
		 dlog_path);
	if (system(cmd))
		fprintf(stderr, "no log in %s\n", dlog_path);
	cr_assert_fail("the client ended with %d (exit codes above 100: "
		       "a signal)", how);
}

/* The client @pid of @c reached step @want (it did not die before). */
static void test_wait_step(struct client *c, pid_t pid, char want)
{
	char got = 0;

	if (read(c->from_test, &got, 1) != 1)
		client_ok(client_end(pid));
	cr_assert_eq(got, want);
}

/* ------------------------------------------------------------------------
 * Restores of faultd images.
 */

/*
 * An authenticated image on a file served with 1 ms added to each read:
 * restored through the daemon, every byte right (zero extents too), every
 * page in, nothing poisoned.
 */
Test(nbd_sys, an_image_on_nbd_is_restored_through_the_daemon)
{
	const char *key, *img;
	struct client c = { .uri = uri, .len = 32 * MIB };

	need_net();
	key = make_key();
	img = make_image("img", c.len, key);
	c.key = key;
	nbdkit_serve((const char *[]){ "--filter=delay", "file", img,
				       "delay-read=1ms", NULL });
	daemon_start((const char *[]){ "--no-keeper", NULL });
	client_ok(client_end(client_start(&c, false)));
	cr_assert(logged("pid"), "see %s", dlog_path);
}

/* The same through a server whose rate is limited: slow, and right. */
Test(nbd_sys, a_rate_limited_server_serves_every_byte)
{
	struct client c = { .uri = uri, .len = 16 * MIB };
	const char *img;

	need_net();
	img = make_image("img", c.len, NULL);
	nbdkit_serve((const char *[]){ "--filter=rate", "file", img,
				       "rate=200M", NULL });
	daemon_start((const char *[]){ "--no-keeper", NULL });
	client_ok(client_end(client_start(&c, false)));
}

/* In the process, an NBD URI is refused with its reason. */
Test(nbd_sys, a_restore_in_the_process_of_a_uri_is_refused)
{
	struct log_capture lc = LOG_CAPTURE_INIT;
	struct faultd_ctx_opts co = { .size = sizeof(co),
				      .log = log_capture_fn, .log_arg = &lc };
	struct faultd_restore_opts o = { .size = sizeof(o) };
	struct faultd_ctx *ctx;
	struct faultd_region *r;

	cr_assert_eq(faultd_ctx_create(&co, &ctx), 0);
	cr_assert_eq(faultd_restore(ctx, "nbd://192.0.2.1/img", &o, &r),
		     -EOPNOTSUPP);
	cr_assert_eq(log_count(&lc, "through the daemon only", -1), 1);
	faultd_ctx_destroy(ctx);
}

/* ---- failures ---- */

static sigjmp_buf bus_jmp;

static void on_bus(int sig)
{
	(void)sig;
	siglongjmp(bus_jmp, 1);
}

/* Does a read of @p succeed (not poisoned)? */
static bool readable(const volatile char *p)
{
	struct sigaction sa = { .sa_handler = on_bus }, old;
	volatile bool ok = false;

	sigaction(poison_signal(), &sa, &old);
	if (!sigsetjmp(bus_jmp, 1)) {
		(void)*p;
		ok = true;
	}
	sigaction(poison_signal(), &old, NULL);
	return ok;
}

static atomic_int poison_lines;

static void count_poison(void *arg, int level, const char *msg)
{
	(void)arg, (void)level;
	if (strstr(msg, "the daemon poisoned "))
		atomic_fetch_add(&poison_lines, 1);
}

/*
 * A client of a lazy restore that reads page 0, lets the test break the
 * server, then reads @at: it must be poisoned (reported by the daemon,
 * counted and logged here), not zeros; then, the server mended, @again
 * reads right. Exit 0 when all of it held.
 */
static pid_t poisoned_client(struct client *c, size_t at, size_t again)
{
	int a[2], b[2];
	pid_t pid;

	cr_assert_eq(pipe2(a, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(b, O_CLOEXEC), 0);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		struct faultd_ctx_opts co = { .size = sizeof(co),
					      .log = count_poison };
		struct faultd_stats st = { .size = sizeof(st) };
		struct faultd_ctx *ctx;
		struct faultd_region *r;
		uint64_t end;
		char *base;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		c->flags |= FAULTD_RESTORE_LAZY;
		r = client_restore(c, &ctx, &co);
		base = faultd_region_base(r);
		if (!image_right(base, 0, 4096))
			_exit(11);
		step_tell(a[1], STEP_RESTORED);
		step_wait(b[0], STEP_GO);
		if (readable(base + at))
			_exit(12);
		end = test_now_ns() + 60000000000ull;
		do /* the report comes with the daemon's next PROGRESS */
			faultd_region_stats(r, &st);
		while ((!st.poisoned || !atomic_load(&poison_lines)) &&
		       test_now_ns() < end);
		if (!st.poisoned || !atomic_load(&poison_lines))
			_exit(13);
		step_tell(a[1], STEP_RESTORED);
		step_wait(b[0], STEP_GO);
		if (again && !image_right(base, again, 64 * 1024))
			_exit(14);
		faultd_ctx_destroy(ctx);
		_exit(0);
	}
	close(a[1]);
	close(b[0]);
	c->to_test = b[1];
	c->from_test = a[0];
	return pid;
}

/*
 * A server that fails reads (nbdkit's error filter, while its file is
 * there): asked again, then given up; the pages are poisoned and
 * reported, never zeros; once it serves again, other pages read right.
 */
Test(nbd_sys, a_server_that_fails_reads_poisons_and_reports)
{
	struct client c = { .uri = uri, .len = 16 * MIB };
	const char *img, *fail;
	char arg[256];
	pid_t pid;
	int fd;

	need_net();
	img = make_image("img", c.len, NULL);
	fail = path_of("fail");
	snprintf(arg, sizeof(arg), "error-file=%s", fail);
	nbdkit_serve((const char *[]){ "--filter=error", "file", img,
				       "error=EIO", "error-rate=100%", arg,
				       NULL });
	daemon_start((const char *[]){ "--no-keeper", NULL });
	pid = poisoned_client(&c, 8 * MIB, 12 * MIB);
	test_wait_step(&c, pid, STEP_RESTORED);
	fd = open(fail, O_WRONLY | O_CREAT, 0644);
	cr_assert(fd >= 0);
	close(fd);
	step_tell(c.to_test, STEP_GO);
	test_wait_step(&c, pid, STEP_RESTORED);
	cr_assert_eq(unlink(fail), 0);
	step_tell(c.to_test, STEP_GO);
	client_ok(client_end(pid));
	cr_assert(logged("given up"), "see %s", dlog_path);
}

/*
 * nbdkit killed in the middle of a restore - its reads held by its pause
 * filter, so that the push has reads in flight - and started again: the
 * reads wait, the connections are made again, every byte is right and
 * every page comes in.
 */
Test(nbd_sys, a_server_killed_and_started_again_loses_nothing)
{
	struct client c = { .uri = uri, .len = 32 * MIB };
	const char *img, *ctl;
	char arg[256];
	pid_t pid;

	need_net();
	img = make_image("img", c.len, NULL);
	ctl = path_of("pause.sock");
	snprintf(arg, sizeof(arg), "pause-control=%s", ctl);
	nbdkit_serve((const char *[]){ "--filter=pause", "file", img, arg,
				       NULL });
	daemon_start((const char *[]){ "--no-keeper", NULL });
	pid = client_start(&c, true);
	test_wait_step(&c, pid, STEP_RESTORED);
	cr_assert_eq(pause_ctl(ctl, 'p'), 0);
	step_tell(c.to_test, STEP_GO);
	server_stop(&srv, SIGKILL);
	wait_logged("server unreachable");
	unlink(ctl);
	nbdkit_again(); /* not paused */
	client_ok(client_end(pid));
	cr_assert(logged("server back"), "see %s", dlog_path);
}

/*
 * nbdkit killed for good: after the deadline (--nbd-deadline) the pages
 * not in are poisoned and reported; those in stay right.
 */
Test(nbd_sys, a_server_gone_for_good_poisons_after_the_deadline)
{
	struct client c = { .uri = uri, .len = 16 * MIB };
	const char *img;
	pid_t pid;

	need_net();
	img = make_image("img", c.len, NULL);
	nbdkit_serve((const char *[]){ "file", img, NULL });
	daemon_start((const char *[]){ "--no-keeper", "--nbd-deadline", "1000",
				       NULL });
	pid = poisoned_client(&c, 8 * MIB, 0);
	test_wait_step(&c, pid, STEP_RESTORED);
	server_stop(&srv, SIGKILL);
	step_tell(c.to_test, STEP_GO);
	test_wait_step(&c, pid, STEP_RESTORED);
	step_tell(c.to_test, STEP_GO);
	client_ok(client_end(pid));
	cr_assert(logged("the deadline"), "see %s", dlog_path);
}

/* An export shorter than its image file: OPEN refused, with the reason
 * (the image's tables end past the export's end). */
Test(nbd_sys, an_export_shorter_than_its_image_is_refused)
{
	struct log_capture lc = LOG_CAPTURE_INIT;
	struct faultd_ctx_opts co = { .size = sizeof(co),
				      .log = log_capture_fn, .log_arg = &lc };
	struct faultd_restore_opts o = { .size = sizeof(o),
					 .flags = FAULTD_RESTORE_DAEMON,
					 .socket = sock };
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	struct stat st;
	char arg[64];
	const char *img;

	need_net();
	img = make_image("img", 8 * MIB, NULL);
	cr_assert_eq(stat(img, &st), 0);
	snprintf(arg, sizeof(arg), "truncate=%lld",
		 (long long)(st.st_size - 8192));
	nbdkit_serve((const char *[]){ "--filter=truncate", "file", img, arg,
				       NULL });
	daemon_start((const char *[]){ "--no-keeper", NULL });
	cr_assert_eq(faultd_ctx_create(&co, &ctx), 0);
	cr_assert_eq(faultd_restore(ctx, uri, &o, &r), -EBADMSG);
	cr_assert_eq(log_count(&lc, "truncated", -1), 1);
	faultd_ctx_destroy(ctx);
}

/*
 * An export that changes size while it is served (the server started
 * again on a longer file): not the one the restore began with, so its
 * reads fail - the pages not in are poisoned and reported, never read
 * from another file.
 */
Test(nbd_sys, an_export_that_changes_size_is_not_served)
{
	struct client c = { .uri = uri, .len = 16 * MIB };
	const char *img;
	pid_t pid;

	need_net();
	img = make_image("img", c.len, NULL);
	nbdkit_serve((const char *[]){ "file", img, NULL });
	daemon_start((const char *[]){ "--no-keeper", NULL });
	pid = poisoned_client(&c, 8 * MIB, 0);
	test_wait_step(&c, pid, STEP_RESTORED);
	server_stop(&srv, SIGKILL);
	cr_assert_eq(truncate(img, 64 * MIB), 0);
	nbdkit_again();
	step_tell(c.to_test, STEP_GO);
	test_wait_step(&c, pid, STEP_RESTORED);
	step_tell(c.to_test, STEP_GO);
	client_ok(client_end(pid));
}

/*
 * kill -9 of the daemon in the middle of a restore from NBD, its reads
 * held by the server: the keeper keeps the session (the client cannot
 * serve it), a daemon started again adopts it, opens the export again,
 * and serves on - every byte right, every page in.
 */
Test(nbd_sys, a_daemon_killed_mid_restore_is_adopted_with_its_export)
{
	struct client c = { .uri = uri, .len = 32 * MIB };
	const char *img, *ctl;
	char arg[256];
	pid_t pid;

	need_net();
	img = make_image("img", c.len, NULL);
	ctl = path_of("pause.sock");
	snprintf(arg, sizeof(arg), "pause-control=%s", ctl);
	nbdkit_serve((const char *[]){ "--filter=pause", "file", img, arg,
				       NULL });
	daemon_start(NULL);
	keeper = daemon_keeper();
	cr_assert_gt(keeper, 0);
	pid = client_start(&c, true);
	test_wait_step(&c, pid, STEP_RESTORED);
	cr_assert_eq(pause_ctl(ctl, 'p'), 0);
	step_tell(c.to_test, STEP_GO);
	test_daemon_kill(dpid, SIGKILL);
	dpid = 0;
	/* Before the daemon: it opens the export again as it starts. */
	cr_assert_eq(pause_ctl(ctl, 'r'), 0);
	daemon_start(NULL);
	client_ok(client_end(pid));
	cr_assert(logged("adopted"), "see %s", dlog_path);
}

/* ---- who may make the daemon connect where ---- */

struct tuser {
	char name[32];
	uid_t uid;
	gid_t gid;
	bool made;
};

static struct tuser user;

static void user_del(void)
{
	char cmd[96];

	snprintf(cmd, sizeof(cmd), "userdel %s >/dev/null 2>&1", user.name);
	for (int i = 0; i < 20 && user.made; i++)
		user.made = system(cmd) != 0;
}

/* A user of the test's own (useradd), or the test is skipped. */
static void user_add(void)
{
	char cmd[256];
	struct passwd *pw;

	snprintf(user.name, sizeof(user.name), "fdn%d", (int)getpid());
	snprintf(cmd, sizeof(cmd), "useradd --system --no-create-home "
		 "--home-dir / --shell /usr/sbin/nologin --user-group %s "
		 ">/dev/null 2>&1", user.name);
	for (int i = 0; i < 20 && !user.made; i++)
		user.made = !system(cmd);
	pw = user.made ? getpwnam(user.name) : NULL;
	if (!pw) {
		user_del();
		cr_skip_test("cannot add a test user with useradd");
	}
	user.uid = pw->pw_uid;
	user.gid = pw->pw_gid;
}

/* The user's restore of @uri, in a child: its result, and its log. */
static int restore_as_user(const char *u, char *log, size_t len)
{
	int p[2], status, ret = 0;
	pid_t pid;

	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		struct log_capture lc = LOG_CAPTURE_INIT;
		struct faultd_ctx_opts co = { .size = sizeof(co),
					      .log = log_capture_fn,
					      .log_arg = &lc };
		struct faultd_restore_opts o = { .size = sizeof(o),
						 .flags = FAULTD_RESTORE_DAEMON,
						 .socket = sock };
		struct faultd_ctx *ctx = NULL;
		struct faultd_region *r;
		int res;

		/* The user for good, and dumpable again (a process that
		 * changed its IDs is not, and the daemon could not read its
		 * mappings with its rights); dying with the test. */
		if (setgroups(0, NULL) ||
		    setresgid(user.gid, user.gid, user.gid) ||
		    setresuid(user.uid, user.uid, user.uid) ||
		    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) ||
		    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0))
			_exit(120);
		res = faultd_ctx_create(&co, &ctx);
		if (!res)
			res = faultd_restore(ctx, u, &o, &r);
		if (!res && !image_right(faultd_region_base(r), 0, 4 * MIB))
			res = 1;
		dprintf(p[1], "%d %s", res, lc.n ? lc.line[0] : "");
		faultd_ctx_destroy(ctx);
		_exit(0);
	}
	close(p[1]);
	memset(log, 0, len);
	cr_assert_gt(read(p[0], log, len - 1), 0, "the user's client died");
	close(p[0]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	sscanf(log, "%d", &ret);
	return ret;
}

/*
 * A root daemon and an unprivileged client: a server the allow list does
 * not name for the user is refused, with the reason, before anything is
 * connected to; the server it names is served.
 */
Test(nbd_sys, a_user_names_only_the_servers_allowed)
{
	const char *allow = path_of("nbd.allow");
	char log[1024], other[128];
	FILE *f;

	need_net();
	user_add();
	f = fopen(allow, "w");
	cr_assert(f);
	fprintf(f, "%s %s:%s\n", user.name, NETNS_SERVER, PORT);
	fclose(f);
	nbdkit_serve((const char *[]){ "file", make_image("img", 4 * MIB,
							  NULL), NULL });
	daemon_start((const char *[]){ "--no-keeper", "--nbd-allow", allow,
				       NULL });
	snprintf(other, sizeof(other), "nbd://%s:10810/", NETNS_SERVER);
	cr_assert_eq(restore_as_user(other, log, sizeof(log)), -EPERM, "%s",
		     log);
	cr_assert(strstr(log, "may not make faultd connect to"),
		  "no reason: %s", log);
	cr_assert_eq(restore_as_user(uri, log, sizeof(log)), 0, "%s", log);
	user_del();
}

/* ------------------------------------------------------------------------
 * Firecracker memory files.
 */

/* A memory file of @size, its daemon's directory, the export's URI. */
static void fc_memory(struct fcd *d, const char *size)
{
	fcd_init(d, size, "4k");
}

/* Start fc-client --fraction @frac with @extra, wait for it: exit 0. */
static void fc_vm_ok(struct fcd *d, const char *frac)
{
	struct fcc c;
	const char *args[] = { "--threads", "2", "--fraction", frac,
			       "--seed", "5", NULL };

	fcc_start(&c, d, args);
	cr_assert_eq(fcc_wait(&c), 0, "fc-client: %s (see %s)", c.line,
		     d->log);
}

/*
 * faultd firecracker --mem nbd://...: a VM restored from the export, its
 * pages right (holes as zeros, the balloon's as zeros).
 */
Test(nbd_sys, a_vm_is_restored_from_an_export)
{
	struct fcd d;

	need_net();
	fc_memory(&d, "32M");
	nbdkit_serve((const char *[]){ "--filter=delay", "file", d.mem,
				       "delay-read=1ms", NULL });
	d.source = uri;
	fcd_start(&d, (const char *[]){ "--no-keeper", NULL });
	fc_vm_ok(&d, "1.0");
	fcd_fini(&d);
}

/* The curl plugin reads the memory file from nginx by range requests,
 * as an object store is read. */
Test(nbd_sys, the_curl_plugin_reads_the_memory_file_from_nginx)
{
	char url[256], log[160], line[512];
	bool ranges = false;
	struct fcd d;
	FILE *f;

	need_net();
	if (access(NGINX, X_OK))
		cr_skip_test("no nginx (%s)", NGINX);
	fc_memory(&d, "32M");
	cr_assert_eq(nginx_start(&web, &ns, dir, d.dir, 18028, why,
				 sizeof(why)), 0, "%s", why);
	snprintf(url, sizeof(url), "url=http://127.0.0.1:18028/mem");
	nbdkit_serve((const char *[]){ "curl", url, NULL });
	d.source = uri;
	fcd_start(&d, (const char *[]){ "--no-keeper", NULL });
	fc_vm_ok(&d, "0.2");
	fcd_fini(&d);
	snprintf(log, sizeof(log), "%s/access.log", dir);
	f = fopen(log, "r");
	cr_assert(f, "no %s", log);
	while (fgets(line, sizeof(line), f))
		ranges |= strstr(line, "\" 206 ") != NULL;
	fclose(f);
	cr_assert(ranges, "nginx answered no range request");
}

/* Regions longer than the export: the handshake is refused, said why. */
Test(nbd_sys, an_export_shorter_than_the_vm_is_refused)
{
	struct fcd d;
	struct fcc c;
	char arg[32];

	need_net();
	fc_memory(&d, "32M");
	snprintf(arg, sizeof(arg), "truncate=%lu", 16 * MIB);
	nbdkit_serve((const char *[]){ "--filter=truncate", "file", d.mem,
				       arg, NULL });
	d.source = uri;
	fcd_start(&d, (const char *[]){ "--no-keeper", NULL });
	fcc_start(&c, &d, (const char *[]){ "--handshake-only", NULL });
	cr_assert_eq(fcc_wait(&c), 3, "the handshake was not refused");
	cr_assert(fcd_logged(&d, "handshake refused"), "see %s", d.log);
	fcd_fini(&d);
}

/*
 * The bytes nbdkit (stats filter) read for @vms VMs restored at once,
 * each touching the same 25 % of the memory.
 */
static double vms_fetch(unsigned int vms)
{
	char stats[200], arg[256];
	struct fcc c[4];
	struct fcd d;
	const char *args[] = { "--threads", "2", "--fraction", "0.25",
			       "--seed", "9", "--wait-start",
			       "--first-pass-only", NULL };
	double bytes;

	fc_memory(&d, "64M");
	snprintf(stats, sizeof(stats), "%s/stats-%u", d.dir, vms);
	snprintf(arg, sizeof(arg), "statsfile=%s", stats);
	nbdkit_serve((const char *[]){ "--filter=stats", "file", d.mem, arg,
				       NULL });
	d.source = uri;
	fcd_start(&d, (const char *[]){ "--no-keeper", NULL });
	for (unsigned int i = 0; i < vms; i++) {
		fcc_start(&c[i], &d, args);
		fcc_line(&c[i]);
	}
	for (unsigned int i = 0; i < vms; i++)
		fcc_go(&c[i]);
	for (unsigned int i = 0; i < vms; i++)
		cr_assert_eq(fcc_wait(&c[i]), 0, "vm %u: %s", i, c[i].line);
	server_free(&srv);
	bytes = stats_read_bytes(stats);
	cr_assert_gt(bytes, 0, "no stats in %s", stats);
	fcd_fini(&d);
	return bytes;
}

/*
 * Four VMs restored from one snapshot at once fetch what one fetches,
 * give or take 10 %: the sessions share the connections and the chunk
 * cache, and a chunk one is fetching is waited for by the others.
 */
Test(nbd_sys, four_vms_from_one_export_fetch_it_once)
{
	double one, four;

	need_net();
	one = vms_fetch(1);
	four = vms_fetch(4);
	cr_log_info("bytes nbdkit read: one VM %.0f, four VMs %.0f (%.3fx)",
		    one, four, four / one);
	cr_assert_leq(four, 1.1 * one, "4 VMs fetched %.0f bytes, one %.0f",
		      four, one);
}

/*
 * kill -9 of faultd firecracker while a VM restores from the export:
 * started again with the same flags, it adopts the VM and opens the
 * export again; the VM's every page is right.
 */
Test(nbd_sys, a_vm_from_an_export_survives_a_restart)
{
	struct fcd d;
	struct fcc c;
	const char *args[] = { "--threads", "2", "--fraction", "0.5",
			       "--seed", "3", "--wait-mid", NULL };

	need_net();
	fc_memory(&d, "32M");
	nbdkit_serve((const char *[]){ "file", d.mem, NULL });
	d.source = uri;
	fcd_start(&d, NULL);
	fcc_start(&c, &d, args);
	fcc_line(&c);
	fcd_kill9(&d);
	fcd_start(&d, NULL);
	fcc_go(&c);
	cr_assert_eq(fcc_wait(&c), 0, "fc-client: %s (see %s)", c.line,
		     d.log);
	fcd_fini(&d);
}
