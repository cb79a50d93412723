// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * keep.c - the engine suite: a session's kept state (engine/record.c,
 * engine/state.c) through a kill and an adoption, as faultd lives through
 * kill -9.
 *
 * The test process is the client: its memory, registered with a
 * userfaultfd, read from a file (a memfd) whose content is the test
 * source's. A daemon - a child the test forks, with faultd's keeper (the
 * real one, `faultd keeper`, started by the test) - serves it: the file
 * source under the test source's gates, so that the test can hold one of
 * its reads. The test faults pages in, removes some (MADV_DONTNEED), moves
 * some (mremap), unmaps some, asks the daemon what its space is, makes a
 * fault at G that the daemon reads and never answers, and kills it
 * (SIGKILL: its threads stop where they are, and the session is never
 * ended). Then the test process adopts the entry from the keeper and
 * serves itself, as a restarted faultd does (server/restart.c):
 *
 *   the range table, the done and zero bitmaps and the pending count are
 *   the dead daemon's and the model's; the source is a file source again
 *   (reopened by its type from its kept descriptor), the front end's blob
 *   and its peer's connection are back; the thread asleep at G gets its
 *   page; pages that were in are still in and never installed again;
 *   removed pages read zeros; every other page is served.
 *
 * With the file changed while no daemon ran (it grew), the source is
 * stale: pages in stay as they are, removed pages read zeros, and every
 * page still to come is poisoned (SIGBUS), never served from the changed
 * file.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <faultd.h>

#include "file.h"
#include "harness.h"
#include "tmpdir.h"

#define PAGES 64	/* the file, and the registered pages */
#define WIN 128		/* the window: PAGES, then the test's own */
#define G 20		/* the fault the killed daemon never answered */
#define TAG 0x6b657074ull

/* What the daemon before the kill says its space is. */
struct dstate {
	uint64_t nr, pending, done, zero;
	struct srange r[32];
};

struct kept {
	const char *sock;
	pid_t keeper, daemon;
	int memfd, uffd;
	int peer[2];		/* [0]: the session's; [1]: the test's */
	int cmd[2], reply[2], held[2];
	struct msrc *shadow;	/* the model's view of the content */
	struct model m;
	struct dstate before;
	struct toucher t;
	struct front f;
	bool stale;
};

static struct kept kt;

/* ------------------------------------------------------------------------
 * The keeper, the file, the client's memory.
 */

/* `faultd keeper`, as faultd starts it: it says it listens on fd 3. */
static void keeper_start(void)
{
	const char *exe = getenv("FAULTD_DAEMON");
	struct pollfd p = { .events = POLLIN };
	int fd[2];
	char c;

	if (!exe)
		cr_skip_test("FAULTD_DAEMON is not set: the keeper is faultd's");
	tmpdir_make("engine-keep");
	kt.sock = path_of("sock");
	cr_assert_eq(pipe2(fd, O_CLOEXEC), 0);
	kt.keeper = fork();
	cr_assert_geq(kt.keeper, 0);
	if (!kt.keeper) {
		dup2(fd[1], 3);
		execl(exe, "faultd", "keeper", "--socket", kt.sock, "--grace",
		      "60", (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	p.fd = fd[0];
	cr_assert(poll(&p, 1, DEADLINE_MS) == 1 && read(fd[0], &c, 1) == 1,
		  "the keeper (%s keeper) did not start", exe);
	close(fd[0]);
}

static void file_make(void)
{
	char buf[PG];

	kt.memfd = memfd_create("engine-keep", MFD_CLOEXEC);
	cr_assert_geq(kt.memfd, 0);
	for (uint64_t p = 0; p < PAGES; p++) {
		content_fill(TAG, p * PG, buf, PG);
		cr_assert_eq(pwrite(kt.memfd, buf, PG, (off_t)(p * PG)),
			     (ssize_t)PG);
	}
}

/* While no daemon runs, the file grows and its pages change. */
static void file_change(void)
{
	char buf[PG];

	for (uint64_t p = 0; p < PAGES; p++) {
		content_fill(~TAG, p * PG, buf, PG);
		cr_assert_eq(pwrite(kt.memfd, buf, PG, (off_t)(p * PG)),
			     (ssize_t)PG);
	}
	cr_assert_eq(ftruncate(kt.memfd, (PAGES + 1) * PG), 0);
}

static void client_setup(void)
{
	struct msrc_opts so = { .size = PAGES * PG, .tag = TAG };

	kt.uffd = uffd_new(UFFD_FEATURE_EVENT_REMAP |
			   UFFD_FEATURE_EVENT_REMOVE |
			   UFFD_FEATURE_EVENT_UNMAP);
	if (kt.uffd == -EPERM || kt.uffd == -ENOSYS || kt.uffd == -EINVAL)
		cr_skip_test("no userfaultfd with REMAP, REMOVE and UNMAP "
			     "events here: %s", strerror(-kt.uffd));
	cr_assert_geq(kt.uffd, 0);
	cr_assert_eq(msrc_create(&so, &kt.shadow), 0);
	cr_assert_eq(model_init(&kt.m, WIN, kt.shadow), 0);
	cr_assert_eq(map_rw(kt.m.base, PAGES * PG), 0);
	cr_assert_eq(uffd_register_range(kt.uffd, kt.m.base, PAGES * PG), 0);
	model_map(&kt.m, 0, PAGES, 0);
}

/* ------------------------------------------------------------------------
 * The daemon before the kill: a child of the test. It never returns.
 */

/* Tell the test what the space is, each time it asks. */
static _Noreturn void daemon_serve(struct space *sp)
{
	char c;

	while (read(kt.cmd[0], &c, 1) == 1) {
		struct dstate st = { 0 };

		engine_sync(sp);
		pthread_rwlock_rdlock(&sp->lock);
		st.nr = sp->nr;
		memcpy(st.r, sp->r,
		       (sp->nr < 32 ? sp->nr : 32) * sizeof(st.r[0]));
		st.done = atomic_load(&sp->done[0]);
		st.zero = atomic_load(&sp->zero[0]);
		st.pending = atomic_load(&sp->pending);
		pthread_rwlock_unlock(&sp->lock);
		if (write(kt.reply[1], &st, sizeof(st)) != sizeof(st))
			_exit(20);
	}
	_exit(0);
}

/* The file source under the test source's gates: G's read is held. */
static struct msrc *daemon_source(void)
{
	struct source *file;
	struct msrc *src;
	char why[192];
	struct msrc_opts so = { .tag = TAG };
	int fd = dup(kt.memfd);

	if (fd < 0 || src_file_open_fd(fd, PAGES * PG, PG, &file, why,
				       sizeof(why)))
		_exit(11);
	so.inner = file;
	if (msrc_create(&so, &src))
		_exit(12);
	msrc_gate(src, 0, G * PG, GATE_URGENT, kt.held[1]);
	return src;
}

static _Noreturn void daemon_main(void)
{
	struct keep_opts ko = { .socket = kt.sock, .grace_s = 60 };
	struct session_opts o = { .name = "kept", .handlers = 2,
				  .around = PG };
	struct srange r = { (uintptr_t)kt.m.base, PAGES * PG, 0 };
	struct front f;
	struct msrc *src;
	struct space *sp;
	const char *why;

	if (keep_open(&ko, &daemon_keep))
		_exit(10);
	src = daemon_source();
	if (front_create_on(&f, &o, kt.peer[0], kt.peer[1]) ||
	    session_own_source(f.s, msrc_source(src)))
		_exit(13);
	if (session_add_space(f.s, kt.uffd, getppid(), -1, 1,
			      msrc_source(src), &r, 1, NULL, 0, &why, &sp))
		_exit(14);
	if (front_run(&f) || write(kt.reply[1], "R", 1) != 1)
		_exit(15);
	daemon_serve(sp);
}

static void daemon_start(void)
{
	struct pollfd p = { .events = POLLIN };
	int status;
	char c;

	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
				kt.peer), 0);
	cr_assert_eq(pipe2(kt.cmd, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(kt.reply, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(kt.held, O_CLOEXEC), 0);
	kt.daemon = fork();
	cr_assert_geq(kt.daemon, 0);
	if (!kt.daemon)
		daemon_main();
	/* The session's ends are the daemon's (and then the keeper's). */
	close(kt.peer[0]);
	close(kt.uffd);
	p.fd = kt.reply[0];
	if (poll(&p, 1, DEADLINE_MS) == 1 && read(kt.reply[0], &c, 1) == 1)
		return;
	waitpid(kt.daemon, &status, WNOHANG);
	cr_assert_fail("the daemon did not start (status %#x)", status);
}

/* What the daemon says its space is now. */
static void daemon_state(struct dstate *st)
{
	struct pollfd p = { .fd = kt.reply[0], .events = POLLIN };

	cr_assert_eq(write(kt.cmd[1], "S", 1), 1);
	cr_assert_eq(poll(&p, 1, DEADLINE_MS), 1, "the daemon did not answer");
	cr_assert_eq(read(kt.reply[0], st, sizeof(*st)), sizeof(*st));
}

/* ------------------------------------------------------------------------
 * Before the kill.
 */

static void check_page(size_t p)
{
	char why[256];

	cr_assert_eq(model_check_page(&kt.m, p, false, why, sizeof(why)), 0,
		     "%s", why);
}

/* The bits the model says the space has: by source page, one segment. */
static uint64_t model_bits(bool zero)
{
	uint64_t bits = 0;

	for (size_t p = 0; p < WIN; p++)
		if (kt.m.pg[p].kind == MP_DATA && kt.m.pg[p].zero)
			bits |= 1ull << (kt.m.pg[p].src / PG);
	if (zero)
		return bits;
	for (size_t i = 0; i < PAGES; i++)
		if (kt.m.src_done[i])
			bits |= 1ull << i;
	return bits;
}

/* Pages in, removed (in and never in), moved (one faulted in after),
 * unmapped; the daemon's space is then the model's. */
static void before_kill(void)
{
	static const size_t in[] = { 0, 1, 2, 3, 30, 31, 32, 33, 50 };
	struct dstate st;

	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++)
		check_page(in[i]);
	cr_assert_eq(ev_remove(&kt.m, 1, 2), 0);
	cr_assert_eq(ev_remove(&kt.m, 10, 2), 0);
	cr_assert_eq(ev_move(&kt.m, 40, 4, PAGES + 8), 0);
	cr_assert_eq(ev_cut(&kt.m, 60, 2, false), 0);
	check_page(PAGES + 9);
	daemon_state(&st);
	model_note_resident(&kt.m);
	cr_assert_eq(st.done, model_bits(false), "done %#llx, the model's "
		     "%#llx", (unsigned long long)st.done,
		     (unsigned long long)model_bits(false));
	cr_assert_eq(st.zero, model_bits(true), "zero %#llx, the model's "
		     "%#llx", (unsigned long long)st.zero,
		     (unsigned long long)model_bits(true));
	cr_assert_eq(st.pending, model_pending(&kt.m), "pending %llu, the "
		     "model's %llu", (unsigned long long)st.pending,
		     (unsigned long long)model_pending(&kt.m));
	cr_assert_leq(st.nr, 32);
	kt.before = st;
}

/* A fault the daemon reads and never answers, then SIGKILL. */
static void kill_daemon(void)
{
	struct pollfd p = { .fd = kt.held[0], .events = POLLIN };
	int status;
	char c;

	cr_assert_eq(toucher_start(&kt.t, model_addr(&kt.m, G), PG), 0);
	cr_assert(poll(&p, 1, DEADLINE_MS) == 1 && read(kt.held[0], &c, 1) == 1,
		  "the daemon did not read the fault at page %d", G);
	cr_assert_eq(kill(kt.daemon, SIGKILL), 0);
	cr_assert_eq(waitpid(kt.daemon, &status, 0), kt.daemon);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		  "the daemon ended before the kill (status %#x)", status);
	kt.daemon = 0;
}

/* ------------------------------------------------------------------------
 * The adoption.
 */

static const struct session_ops *front_lookup(uint16_t id)
{
	return id == FRONT_ID ? &front_ops : NULL;
}

struct fetched {
	int entries, ret;
	struct session *s;
};

static void on_entry(void *arg, struct keep_entry *e)
{
	struct fetched *fe = arg;

	fe->entries++;
	fe->ret = session_adopt_entry(e, front_lookup, &fe->s);
}

/* The adopted space is the dead daemon's, and the model's. */
static void check_adopted(struct space *sp)
{
	char why[256];

	cr_assert_eq(sp->nr, kt.before.nr, "%zu ranges, the dead daemon had "
		     "%llu", sp->nr, (unsigned long long)kt.before.nr);
	cr_assert_arr_eq(sp->r, kt.before.r, sp->nr * sizeof(sp->r[0]),
			 "the range table is not the dead daemon's");
	cr_assert_eq(model_check_table(&kt.m, sp, why, sizeof(why)), 0, "%s",
		     why);
	cr_assert_eq(atomic_load(&sp->done[0]), kt.before.done,
		     "done %#llx, the dead daemon's %#llx",
		     (unsigned long long)atomic_load(&sp->done[0]),
		     (unsigned long long)kt.before.done);
	cr_assert_eq(atomic_load(&sp->zero[0]), kt.before.zero,
		     "zero %#llx, the dead daemon's %#llx",
		     (unsigned long long)atomic_load(&sp->zero[0]),
		     (unsigned long long)kt.before.zero);
	cr_assert_eq(atomic_load(&sp->pending), kt.before.pending,
		     "pending %llu, the dead daemon's %llu",
		     (unsigned long long)atomic_load(&sp->pending),
		     (unsigned long long)kt.before.pending);
}

static void adopt(void)
{
	struct keep_opts ko = { .socket = kt.sock, .grace_s = 60 };
	struct fetched fe = { 0 };
	struct session *s;

	cr_assert_eq(keep_open(&ko, &daemon_keep), 0);
	cr_assert_eq(keep_fetch(daemon_keep, on_entry, &fe), 0);
	cr_assert_eq(fe.entries, 1, "the keeper held %d entries", fe.entries);
	cr_assert_eq(fe.ret, 0, "adoption: %s", strerror(-fe.ret));
	s = fe.s;
	front_adopted(&kt.f, s, kt.peer[1]);
	kt.peer[1] = -1;
	cr_assert(kt.f.adopted, "the front end's blob did not come back");
	cr_assert_eq(session_nr_spaces(s), 1);
	cr_assert_str_eq(session_source(s, 0)->ops->name,
			 kt.stale ? "stale" : "file");
	check_adopted(s->spaces);
	/* Its peer's connection is back: the handshake goes through it. */
	cr_assert_eq(front_run(&kt.f), 0);
}

/* ------------------------------------------------------------------------
 * After.
 */

/* The thread the dead daemon left asleep got its page, or poison. */
static void check_g(void)
{
	char buf[PG];

	cr_assert(toucher_wait(&kt.t, DEADLINE_MS, buf),
		  "the thread the dead daemon left asleep at page %d is "
		  "still asleep", G);
	if (kt.stale) {
		cr_assert(kt.t.ret < 0 && kt.t.err == EFAULT,
			  "page %d of a changed file was served", G);
		return;
	}
	cr_assert_eq(kt.t.ret, (ssize_t)PG, "%s", strerror(kt.t.err));
	cr_assert(model_page_matches(&kt.m, G, buf));
}

/* Every page: in (and still in), zeros, served, or poisoned. */
static unsigned int check_pages(void)
{
	unsigned int poisoned = 0;

	for (size_t p = 0; p < WIN; p++) {
		const struct mpage *pg = &kt.m.pg[p];

		if (pg->kind != MP_DATA)
			continue;
		cr_assert(!pg->seen || resident(model_addr(&kt.m, p)),
			  "page %zu was in before the kill, and is not now",
			  p);
		if (!kt.stale || pg->seen || pg->zero) {
			check_page(p);
		} else if (p != G) {
			cr_assert(load_sigbus(model_addr(&kt.m, p)),
				  "page %zu of a changed file was served", p);
			poisoned++;
		}
	}
	return poisoned;
}

static void after(void)
{
	struct session_view v;
	unsigned int poisoned;

	check_g();
	poisoned = check_pages();
	engine_sync(kt.f.s->spaces);
	session_view(kt.f.s, &v);
	cr_assert_eq(v.eexist, 0, "%llu pages were installed again over "
		     "pages that were in", (unsigned long long)v.eexist);
	cr_assert_eq(v.poisoned, kt.stale ? poisoned + 1 : 0);
	if (!kt.stale)
		cr_assert(front_wait_all_in(&kt.f, DEADLINE_MS),
			  "%llu pages still to come after every page was read",
			  (unsigned long long)atomic_load(&kt.f.s->pending));
}

/* The session ends for good: its entry goes, the keeper with BYE. */
static void end(void)
{
	int status = 0;

	front_free(&kt.f);
	keep_close(daemon_keep, true);
	daemon_keep = NULL;
	for (int i = 0; i < DEADLINE_MS && waitpid(kt.keeper, &status,
						      WNOHANG) == 0; i++)
		pause_ms();
	cr_assert(WIFEXITED(status) && !WEXITSTATUS(status),
		  "the keeper did not end after BYE (status %#x)", status);
	kt.keeper = 0;
	toucher_free(&kt.t);
	model_free(&kt.m);
	source_destroy(msrc_source(kt.shadow));
	close(kt.memfd);
	tmpdir_remove();
}

static void kill_left(void)
{
	if (kt.daemon > 0)
		kill(kt.daemon, SIGKILL);
	if (kt.keeper > 0)
		kill(kt.keeper, SIGKILL);
}

static void run(bool stale)
{
	memset(&kt, 0, sizeof(kt));
	kt.stale = stale;
	keeper_start();
	file_make();
	client_setup();
	daemon_start();
	before_kill();
	kill_daemon();
	if (stale)
		file_change();
	adopt();
	after();
	end();
}

TestSuite(keep, .timeout = 120, .fini = kill_left);

Test(keep, kill_and_adopt)
{
	run(false);
}

Test(keep, changed_source_is_poisoned)
{
	struct faultd_features f = { .size = sizeof(f) };

	if (faultd_probe(&f) || !(f.have & FAULTD_HAVE_POISON))
		cr_skip_test("no UFFDIO_POISON here: a stale page would be "
			     "made inaccessible (SIGSEGV), not poisoned");
	run(true);
}
