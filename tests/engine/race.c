// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * race.c - the engine suite: every event kind against an install, in the
 * two orders the kernel allows, made deterministic.
 *
 * An install is planned under space->lock, its content read with no lock
 * held, and installed if no event changed the ranges meanwhile (the
 * generation); an event the kernel has queued but nobody has read yet
 * makes the install fail with EAGAIN instead (mmap_changing), and the
 * fault is parked, the push tries again. The test source (harness.h)
 * holds the read of page X - a demand fault's, or the push's - between
 * reading the content and returning it, and the test makes the event:
 *
 *   consumed  another handler reads and applies it while the read is
 *             held: the install must see the new generation, plan again
 *             and install what the page is now;
 *   pending   every handler is held too (a fault at Z holds the only one
 *             when the push is the one held at X), so the event waits in
 *             the kernel: the install must get EAGAIN, the fault park (a
 *             parked fault is counted) or the push go on reading without
 *             having put X's old content in, and all of it go on once the
 *             event is read.
 *
 * The window is one of the push's stripes (harness.h, reserve_pages()):
 * one push thread pushes it, and none does while that one is held.
 *
 * The events, on pages X..X+K of a registered window of DATA pages:
 *   remove  MADV_DONTNEED of X: zeros from then on
 *   remap   mremap of X to B (pages of the test's own): X is gone, its
 *           pages are at B and still to come
 *   onto    mremap of Y to X, MREMAP_FIXED: X is unmapped (UNMAP) and Y's
 *           pages are there (REMAP)
 *   unmap   munmap of X
 *   fork    fork(): the child reads every page (its own space) while the
 *           parent's read is held or the event waits
 * Checked after each: the faulting thread returned within DEADLINE_MS (a
 * thread left asleep fails the test) with what the page is now (content,
 * zeros, or EFAULT where nothing is mapped: it touches the page with
 * write(2), so a page that went away is no signal); every page reads
 * what the model says; the engine's table is the model's; its pending
 * count is the model's (a page marked done that is still to come would
 * never be pushed), or the push brought every page in.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define WIN 128		/* pages of the window */
#define DATA 64		/* of them registered: the source, in order */
#define X 8		/* the page whose install is held */
#define K 4		/* pages an event changes */
#define Y 40		/* what moves onto X */
#define B 80		/* where X moves to: the test's own pages */
#define Z 56		/* the fault that holds the only handler */

enum ev { EV_REMOVE, EV_REMAP, EV_ONTO, EV_UNMAP, EV_FORK };

static const char *const ev_names[] = { "REMOVE", "REMAP", "UNMAP and REMAP",
					"UNMAP", "FORK" };

struct race {
	enum ev ev;
	bool push;		/* the push's read is held, not a fault's */
	bool pending;		/* the event waits in the kernel */
	struct model m;
	struct msrc *src;
	struct front f;
	struct space *sp;
	int uffd;
	struct toucher t;
	pthread_t evt;		/* makes a pending event (it blocks) */
	atomic_bool ev_done;
	int ev_ret;
	pid_t child;		/* EV_FORK */
	int report[2];		/* the child's verdict */
};

static void race_setup(struct race *rc)
{
	uint64_t features = UFFD_FEATURE_EVENT_REMAP |
			    UFFD_FEATURE_EVENT_REMOVE |
			    UFFD_FEATURE_EVENT_UNMAP |
			    (rc->ev == EV_FORK ? UFFD_FEATURE_EVENT_FORK : 0);
	struct session_opts o = { .name = "race",
				  .handlers = rc->pending ? 1 : 2,
				  .push = rc->push,
				  .push_after_first = rc->push && rc->pending };
	struct msrc_opts so = { .size = DATA * PG, .tag = 0x5eed + rc->ev };
	const char *why = "";
	struct srange r;

	rc->uffd = uffd_new(features);
	if (rc->uffd == -EPERM || rc->uffd == -ENOSYS || rc->uffd == -EINVAL)
		cr_skip_test("no userfaultfd with %s events here: %s",
			     ev_names[rc->ev], strerror(-rc->uffd));
	cr_assert_geq(rc->uffd, 0, "userfaultfd: %s", strerror(-rc->uffd));
	cr_assert_eq(msrc_create(&so, &rc->src), 0);
	cr_assert_eq(model_init(&rc->m, WIN, rc->src), 0);
	cr_assert_eq(map_rw(rc->m.base, DATA * PG), 0);
	cr_assert_eq(uffd_register_range(rc->uffd, rc->m.base, DATA * PG), 0);
	model_map(&rc->m, 0, DATA, 0);
	r = (struct srange){ (uintptr_t)rc->m.base, DATA * PG, 0 };
	cr_assert_eq(front_create(&rc->f, &o), 0);
	cr_assert_eq(session_own_source(rc->f.s, msrc_source(rc->src)), 0);
	cr_assert_eq(session_add_space(rc->f.s, rc->uffd, 0, -1, 1,
				       msrc_source(rc->src), &r, 1, NULL, 0,
				       &why, &rc->sp),
		     0, "%s", why);
	msrc_gate(rc->src, 0, X * PG,
		  rc->push ? GATE_BACKGROUND : GATE_URGENT, -1);
	if (rc->push && rc->pending)
		msrc_gate(rc->src, 1, Z * PG, GATE_URGENT, -1);
	cr_assert_eq(pipe2(rc->report, O_CLOEXEC), 0);
	cr_assert_eq(front_run(&rc->f), 0);
}

/* The forked child: every page it has reads what the model says. No
 * allocation, no lock: the parent had threads. */
static void child_check(struct race *rc)
{
	uint32_t msg[2] = { 0, UINT32_MAX };

	for (size_t p = 0; p < WIN; p++)
		if (rc->m.pg[p].kind == MP_DATA &&
		    !model_page_matches(&rc->m, p, model_addr(&rc->m, p)) &&
		    !msg[0]++)
			msg[1] = (uint32_t)p;
	_exit(write(rc->report[1], msg, sizeof(msg)) == sizeof(msg) ? 0 : 1);
}

/*
 * fork(2) itself, not glibc's fork() (nor TSan's, around it): those take
 * the allocator's locks (TSan its own too) until clone() returns, which
 * it does once the FORK event is read - here by a thread of this same
 * process, which may need them. A client and its daemon are two
 * processes; in this test they are one. The child allocates nothing.
 */
static pid_t raw_fork(void)
{
	return (pid_t)syscall(SYS_clone, SIGCHLD, 0, NULL, NULL, 0);
}

static int do_event(struct race *rc)
{
	switch (rc->ev) {
	case EV_REMOVE:
		return ev_remove(&rc->m, X, K);
	case EV_REMAP:
		return ev_move(&rc->m, X, K, B);
	case EV_ONTO:
		return ev_move(&rc->m, Y, K, X);
	case EV_UNMAP:
		return ev_cut(&rc->m, X, K, false);
	case EV_FORK:
		rc->child = raw_fork();
		if (rc->child == 0)
			child_check(rc);
		return rc->child < 0 ? -errno : 0;
	}
	return -EINVAL;
}

static void *event_main(void *arg)
{
	struct race *rc = arg;

	rc->ev_ret = do_event(rc);
	atomic_store(&rc->ev_done, true);
	return NULL;
}

static bool wait_true(atomic_bool *b, unsigned int ms)
{
	uint64_t end = mono_ns() + ms * 1000000ull;

	while (!atomic_load(b) && mono_ns() < end)
		pause_ms();
	return atomic_load(b);
}

/* The forked child read every page, and said they were right. */
static void child_report(struct race *rc)
{
	struct pollfd p = { rc->report[0], POLLIN, 0 };
	uint32_t msg[2];
	int status;

	cr_assert_eq(poll(&p, 1, DEADLINE_MS), 1,
		     "the forked child did not read its pages within %d ms",
		     DEADLINE_MS);
	cr_assert_eq(read(rc->report[0], msg, sizeof(msg)), sizeof(msg),
		     "the forked child said nothing");
	cr_assert_eq(waitpid(rc->child, &status, 0), rc->child);
	cr_assert(WIFEXITED(status) && !WEXITSTATUS(status));
	cr_assert_eq(msg[0], 0, "the forked child read %u wrong pages, the "
		     "first page %u", msg[0], msg[1]);
}

/* The event, while the read at X is held: read by another handler. */
static void race_consumed(struct race *rc)
{
	int ret = do_event(rc);

	cr_assert_eq(ret, 0, "%s: %s", ev_names[rc->ev], strerror(-ret));
	engine_sync(rc->sp);
	if (rc->ev == EV_FORK)
		child_report(rc);
	msrc_gate_open(rc->src, 0);
}

static bool wait_after(struct race *rc, unsigned int g, unsigned int ms)
{
	uint64_t end = mono_ns() + ms * 1000000ull;

	while (!msrc_gate_after(rc->src, g) && mono_ns() < end)
		pause_ms();
	return msrc_gate_after(rc->src, g) != 0;
}

/*
 * Page X holds what it held before the event: the push installed it from
 * its read. Read only if it is in (else the read would fault, and wait).
 * The event may have put other pages there already (mremap moves pages
 * before its event is queued).
 */
static bool stale_at_x(struct race *rc)
{
	const volatile uint64_t *w = (const uint64_t *)model_addr(&rc->m, X);

	if (!resident(model_addr(&rc->m, X)))
		return false;
	for (size_t i = 0; i < PG / 8; i++)
		if (w[i] != content_word(rc->m.tag, X * PG + i * 8))
			return false;
	return true;
}

/*
 * The event, while every handler is held: it waits in the kernel. The
 * push let go installs, fails (EAGAIN) and reads on, X not in. Nothing
 * is asserted before the event is read: a failure would leave the event
 * thread waiting in the kernel.
 */
static void race_pending(struct race *rc)
{
	struct pollfd p = { rc->uffd, POLLIN, 0 };
	bool queued, early, retried = true, landed = false, read;

	cr_assert_eq(pthread_create(&rc->evt, NULL, event_main, rc), 0);
	queued = poll(&p, 1, DEADLINE_MS) == 1;
	early = atomic_load(&rc->ev_done);
	msrc_gate_open(rc->src, 0);
	if (rc->push && queued && !early) {
		retried = wait_after(rc, 0, DEADLINE_MS);
		landed = stale_at_x(rc);
	}
	msrc_gates_open(rc->src);
	read = wait_true(&rc->ev_done, DEADLINE_MS);
	cr_assert(queued, "%s never reached the userfaultfd",
		  ev_names[rc->ev]);
	cr_assert_not(early, "%s was read while every handler was held",
		      ev_names[rc->ev]);
	cr_assert(retried, "the push's install of page X never returned "
		  "while %s was pending", ev_names[rc->ev]);
	cr_assert_not(landed, "the push installed page X's old content "
		      "while %s was pending", ev_names[rc->ev]);
	cr_assert(read, "%s was never read: its thread is still waiting",
		  ev_names[rc->ev]);
	pthread_join(rc->evt, NULL);
	cr_assert_eq(rc->ev_ret, 0, "%s: %s", ev_names[rc->ev],
		     strerror(-rc->ev_ret));
	if (rc->ev == EV_FORK)
		child_report(rc);
}

/* The faulting thread came back, with what its page is now. */
static void check_toucher(struct race *rc, size_t p)
{
	char buf[PG];

	cr_assert(toucher_wait(&rc->t, DEADLINE_MS, buf),
		  "the thread faulting at page %zu was left asleep (%s, %s "
		  "read held)", p, ev_names[rc->ev],
		  rc->push ? "the push's" : "its");
	if (rc->m.pg[p].kind != MP_DATA) {
		cr_assert(rc->t.ret < 0 && rc->t.err == EFAULT,
			  "page %zu is gone, yet the faulting thread read it "
			  "(%zd)", p, rc->t.ret);
		return;
	}
	cr_assert_eq(rc->t.ret, (ssize_t)PG, "page %zu: %s", p,
		     strerror(rc->t.err));
	cr_assert(model_page_matches(&rc->m, p, buf),
		  "the thread faulting at page %zu read the wrong content "
		  "(%s%s)", p, ev_names[rc->ev],
		  rc->m.pg[p].zero ? ": zeros expected" : "");
}

/* Without a push: the pages still to come are the model's. */
static void check_pending(struct race *rc)
{
	engine_sync(rc->sp);
	model_note_resident(&rc->m);
	cr_assert_eq(atomic_load(&rc->sp->pending), model_pending(&rc->m),
		     "pending pages: %llu, the model's %llu (%s)",
		     (unsigned long long)atomic_load(&rc->sp->pending),
		     (unsigned long long)model_pending(&rc->m),
		     ev_names[rc->ev]);
}

/* With the push: it brought every page in that is not zeros. */
static void check_pushed(struct race *rc)
{
	cr_assert(front_wait_all_in(&rc->f, DEADLINE_MS),
		  "the push never brought every page in: %llu pending",
		  (unsigned long long)atomic_load(&rc->sp->pending));
	for (size_t p = 0; p < WIN; p++)
		cr_assert(rc->m.pg[p].kind != MP_DATA || rc->m.pg[p].zero ||
				  resident(model_addr(&rc->m, p)),
			  "page %zu is not in, yet every page is said to be "
			  "(%s)", p, ev_names[rc->ev]);
}

static void check_all(struct race *rc)
{
	struct session_view v;
	char why[256];

	for (size_t p = 0; p < WIN; p++)
		cr_assert_eq(model_check_page(&rc->m, p, false, why,
					      sizeof(why)),
			     0, "%s (%s)", why, ev_names[rc->ev]);
	engine_sync(rc->sp);
	cr_assert_eq(model_check_table(&rc->m, rc->sp, why, sizeof(why)), 0,
		     "%s (%s)", why, ev_names[rc->ev]);
	session_view(rc->f.s, &v);
	cr_assert_eq(v.poisoned, 0);
	if (!rc->push && !rc->pending)
		cr_assert_eq(v.eagain, 0, "a fault was parked, yet the event "
			     "had been read before its install");
	if (rc->pending)
		cr_assert_geq(v.eagain, 1, "no fault was parked, yet its "
			      "install ran while %s was pending",
			      ev_names[rc->ev]);
}

static void race_run(struct race *rc)
{
	size_t touched = rc->push && rc->pending ? Z : X;

	race_setup(rc);
	if (!rc->push || rc->pending)
		cr_assert_eq(toucher_start(&rc->t, model_addr(&rc->m, touched),
					   PG), 0);
	if (rc->push && rc->pending)
		cr_assert(msrc_gate_wait(rc->src, 1, DEADLINE_MS),
			  "the fault at page Z was never read");
	cr_assert(msrc_gate_wait(rc->src, 0, DEADLINE_MS),
		  "the %s read of page X was never held",
		  rc->push ? "push's" : "fault's");
	if (rc->pending)
		race_pending(rc);
	else
		race_consumed(rc);
	if (!rc->push || rc->pending)
		check_toucher(rc, touched);
	if (rc->push)
		check_pushed(rc);
	else
		check_pending(rc);
	check_all(rc);
	msrc_gates_open(rc->src);
	front_free(&rc->f);
	toucher_free(&rc->t);
	model_free(&rc->m);
	close(rc->report[0]);
	close(rc->report[1]);
}

TestSuite(race, .timeout = 90);

#define RACE(name, e, by_push, is_pending)                                    \
	Test(race, name)                                                       \
	{                                                                      \
		struct race rc = { .ev = e, .push = by_push,                   \
				   .pending = is_pending, .uffd = -1 };        \
		race_run(&rc);                                                 \
	}

RACE(fault_remove, EV_REMOVE, false, false)
RACE(fault_remove_pending, EV_REMOVE, false, true)
RACE(fault_remap, EV_REMAP, false, false)
RACE(fault_remap_pending, EV_REMAP, false, true)
RACE(fault_onto, EV_ONTO, false, false)
RACE(fault_onto_pending, EV_ONTO, false, true)
RACE(fault_unmap, EV_UNMAP, false, false)
RACE(fault_unmap_pending, EV_UNMAP, false, true)
RACE(fault_fork, EV_FORK, false, false)
RACE(fault_fork_pending, EV_FORK, false, true)
RACE(push_remove, EV_REMOVE, true, false)
RACE(push_remove_pending, EV_REMOVE, true, true)
RACE(push_remap, EV_REMAP, true, false)
RACE(push_remap_pending, EV_REMAP, true, true)
RACE(push_onto, EV_ONTO, true, false)
RACE(push_onto_pending, EV_ONTO, true, true)
RACE(push_unmap, EV_UNMAP, true, false)
RACE(push_unmap_pending, EV_UNMAP, true, true)
RACE(push_fork, EV_FORK, true, false)
RACE(push_fork_pending, EV_FORK, true, true)
