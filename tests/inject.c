// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * inject.c - suite "inject" (built with -Dfault-injection=true): every
 * failure point of libfaultd/inject.h, armed through FAULTD_INJECT.
 *
 * A failure on a setup path must come back as the call's error and leave
 * nothing behind: the process's descriptors, mappings and threads are
 * counted before and after (tests/resources.h), and every hit of a point
 * in a call is failed in turn until the call gets through (walk()). A
 * failure on the fault path must end as the library's contract says: the
 * fault retried (EAGAIN), the waiters woken (EEXIST, a range gone), the
 * page poisoned (anything else) - never a thread left asleep, which a
 * watchdog with a deadline catches, and never wrong content, which
 * checksums catch. Tests that expect a signal run in a child with an
 * alarm: SIGALRM means a thread was left asleep.
 *
 * The run sets GLIBC_TUNABLES (tests/meson.build) so that glibc keeps no
 * stacks of exited threads and no extra malloc arenas; a warm-up pass
 * makes what the library keeps per process or per thread (the test
 * thread's io_uring, liburcu's registry) before anything is counted.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <setjmp.h>
#include <sys/prctl.h>

#include "daemon-helpers.h"
#include "helpers.h"
#include "tmpdir.h"
#include "internal.h"
#include "proto.h"
#include "resources.h"

#define TAG 0x1e57
#define PAGES 64
#define LEN (PAGES * PAGE)
#define DEADLINE_MS 5000
/* What a region with a budget needs of the kernel. */
#define BUDGET_HAVE                                                            \
	(FAULTD_HAVE_MINOR_SHMEM | FAULTD_HAVE_CONTINUE_WP |                   \
	 FAULTD_HAVE_WP_SHMEM)

static char image_path[256];
static char file_path[256];

/* ------------------------------------------------------------------------
 * Arming points, counting resources, watching threads
 */

static void arm(const char *spec)
{
	cr_assert_eq(setenv("FAULTD_INJECT", spec, 1), 0);
	cr_assert_eq(inject_reset(), 0, "FAULTD_INJECT=%s", spec);
}

/* Arm "@point:@n:@err". */
static void arm_nth(const char *point, unsigned int n, const char *err)
{
	char spec[96];

	snprintf(spec, sizeof(spec), "%s:%u:%s", point, n, err);
	arm(spec);
}

static void disarm(void)
{
	unsetenv("FAULTD_INJECT");
	cr_assert_eq(inject_reset(), 0);
}

#define assert_no_leak(before, what)                                          \
	do {                                                                   \
		struct resources now_ = resources_settle(before, 2000);       \
		cr_assert(resources_equal(before, now_),                       \
			  "%s: fds %ld -> %ld, mappings %ld -> %ld, "          \
			  "threads %ld -> %ld",                                \
			  what, (before).fds, now_.fds, (before).maps,         \
			  now_.maps, (before).threads, now_.threads);          \
	} while (0)

/* What a toucher does: read and check, or write one word per page. */
struct touch {
	char *base;
	size_t off, len;
	bool zeros;	/* expect zeros, not the pattern */
	bool write;
	size_t bad;
	atomic_int done;
};

static void *touch_main(void *arg)
{
	struct touch *t = arg;

	for (size_t o = t->off; o < t->off + t->len; o += PAGE) {
		if (t->write)
			*(volatile uint64_t *)(t->base + o) = ~(uint64_t)o;
		else if (t->zeros) /* word 0 is 0, and each is the next */
			t->bad += *(volatile uint64_t *)(t->base + o) != 0 ||
				  memcmp(t->base + o, t->base + o + 8,
					 PAGE - 8) != 0;
		else
			t->bad += pattern_check(TAG, o, t->base + o, PAGE);
	}
	atomic_store(&t->done, 1);
	return NULL;
}

/*
 * Touch [off, off + len) from a thread of its own; it must be done within
 * the deadline, or the test fails (a faulting thread left asleep). Returns
 * the number of bad words (pages, for zeros).
 */
static size_t touch_within(struct touch t)
{
	pthread_t th;

	atomic_init(&t.done, 0);
	cr_assert_eq(pthread_create(&th, NULL, touch_main, &t), 0);
	cr_assert(wait_at_least(&t.done, 1, DEADLINE_MS),
		  "a faulting thread is still asleep after %d ms "
		  "(FAULTD_INJECT=%s)",
		  DEADLINE_MS, getenv("FAULTD_INJECT") ?: "");
	pthread_join(th, NULL);
	return t.bad;
}

static size_t read_pattern(struct faultd_region *r, size_t off, size_t len)
{
	return touch_within((struct touch){ .base = faultd_region_base(r),
					    .off = off, .len = len });
}

/*
 * Run @fn in a child with a watchdog: how it ended, as run_in_child()
 * says. SIGALRM: a faulting thread was left asleep.
 */
struct child {
	void (*fn)(void *);
	void *arg;
};

static void child_main(void *arg)
{
	struct child *c = arg;

	alarm(10);
	c->fn(c->arg);
}

static int in_child(void (*fn)(void *), void *arg)
{
	struct child c = { fn, arg };

	return run_in_child(child_main, &c);
}

/* ------------------------------------------------------------------------
 * Regions and their content
 */

static struct faultd_pager tag_pager(void)
{
	return pattern_pager(TAG, FAULTD_PAGER_CONCURRENT |
					  FAULTD_PAGER_SIGNAL_SAFE);
}

static int ok_writeback(void *arg, struct faultd_region *r, uint64_t off,
			const void *buf, size_t len)
{
	return 0;
}

static struct faultd_region *region_new(struct faultd_ctx *ctx,
					struct faultd_region_opts o)
{
	struct faultd_region *r;

	o.size = sizeof(o);
	o.length = o.length ? o.length : LEN;
	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	return r;
}

static struct faultd_stats stats_of(struct faultd_region *r)
{
	struct faultd_stats s = { .size = sizeof(s) };

	cr_assert_eq(faultd_region_stats(r, &s), 0);
	return s;
}

/* A region with a budget: its pages are mapped with UFFDIO_CONTINUE. */
static struct faultd_region_opts budget_opts(const struct faultd_pager *p)
{
	return (struct faultd_region_opts){ .flags = FAULTD_REGION_WP,
					    .pager = p,
					    .budget = LEN,
					    .length = LEN };
}

static struct faultd_pager budget_pager(void)
{
	struct faultd_pager p = tag_pager();

	p.writeback = ok_writeback;
	return p;
}

/* A file of LEN bytes of the pattern; its path in file_path. */
static void make_file(void)
{
	char *buf = malloc(LEN);
	int fd;

	snprintf(file_path, sizeof(file_path), "%s/file", test_dir);
	fd = open(file_path, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
	cr_assert(fd >= 0 && buf);
	pattern_fill(TAG, 0, buf, LEN);
	cr_assert_eq(pwrite(fd, buf, LEN, 0), (ssize_t)LEN);
	close(fd);
	free(buf);
}

static struct faultd_pager file_pager(int *fd)
{
	struct faultd_file_opts fo = { .size = sizeof(fo) };
	struct faultd_pager p;

	*fd = open(file_path, O_RDONLY | O_CLOEXEC);
	fo.fd = *fd;
	cr_assert_eq(faultd_file_pager(&fo, &p), 0);
	return p;
}

/* An image of a region of the pattern; its path in image_path. */
static void make_image(void)
{
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = region_new(ctx, (struct faultd_region_opts){
							  .length = LEN });

	pattern_fill(TAG, 0, faultd_region_base(r), LEN);
	snprintf(image_path, sizeof(image_path), "%s/image", test_dir);
	cr_assert_eq(faultd_checkpoint(r, image_path, NULL), 0);
	faultd_ctx_destroy(ctx);
}

/*
 * Make what the library keeps for the process or the test thread before
 * anything is counted: handler, prefetch and evictor threads come and go,
 * a file pager makes this thread's io_uring, a restore reads an image.
 */
static void warm_up(void)
{
	struct faultd_ctx_opts co = { .size = sizeof(co),
				      .handler_threads = 2 };
	struct faultd_pager p = tag_pager(), bp = budget_pager();
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	int fd;

	cr_assert_eq(faultd_ctx_create(&co, &ctx), 0);
	r = region_new(ctx, (struct faultd_region_opts){ .pager = &p });
	cr_assert_eq(read_pattern(r, 0, LEN), 0);
	p = file_pager(&fd);
	r = region_new(ctx, (struct faultd_region_opts){ .pager = &p });
	cr_assert_eq(read_pattern(r, 0, LEN), 0);
	close(fd);
	if ((probe_have() & BUDGET_HAVE) == BUDGET_HAVE) {
		r = region_new(ctx, budget_opts(&bp));
		cr_assert_eq(read_pattern(r, 0, LEN), 0);
	}
	cr_assert_eq(faultd_restore(ctx, image_path, NULL, &r), 0);
	cr_assert_eq(faultd_restore_wait(r), 0);
	faultd_ctx_destroy(ctx);
}

static void setup(void)
{
	tmpdir_make("inject");
	disarm();
	make_file();
	make_image();
	warm_up();
}

static void teardown(void)
{
	tmpdir_remove();
}

TestSuite(inject, .init = setup, .fini = teardown, .timeout = 60);

Test(inject, bad_specs_are_refused)
{
	static const char *const bad[] = {
		"nope", "copy:0", "copy:x", "copy:1:EWHAT", "copy:1+x",
		"copy:-1", "copy:1:0", ",copy,zeropage,alloc,thread,read,"
				       "send,recv,wake,poison,register,"
				       "continue,short-read,writeprotect,"
				       "copy,copy,copy,copy",
	};

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		cr_assert_eq(setenv("FAULTD_INJECT", bad[i], 1), 0);
		cr_expect_eq(inject_reset(), -EINVAL, "%s", bad[i]);
	}
}

/* nth fails once, nth+ from then on, no nth always; errno as given. */
Test(inject, specs_mean_what_they_say)
{
	static const struct {
		const char *spec;
		const char *fails;	/* of 5 hits of "copy", X: fails */
		int err[5];		/* of each hit that fails */
	} cases[] = {
		{ "copy", "XXXXX", { [0 ... 4] = -ENOMEM } },
		{ "copy:2", ".X...", { [1] = -ENOMEM } },
		{ "copy:2+:EAGAIN", ".XXXX", { [1 ... 4] = -EAGAIN } },
		{ "copy:4:5", "...X.", { [3] = -5 } },
		{ "wake,copy:1:EEXIST,copy:3:ENOENT", "X.X..",
		  { [0] = -EEXIST, [2] = -ENOENT } },
	};
	void *p;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		unsigned long want = 0;

		arm(cases[i].spec);
		for (int hit = 0; hit < 5; hit++) {
			bool fail = cases[i].fails[hit] == 'X';
			int err = 0;

			want += fail;
			cr_expect_eq(inject_fail(INJ_COPY, &err), fail,
				     "%s: hit %d", cases[i].spec, hit + 1);
			cr_expect_eq(err, cases[i].err[hit], "%s: hit %d",
				     cases[i].spec, hit + 1);
		}
		cr_expect_eq(inject_fired(INJ_COPY), want, "%s",
			     cases[i].spec);
		cr_expect_eq(inject_fail(INJ_ALLOC, NULL), false);
	}
	arm("alloc:2");
	p = fd_malloc(8);
	cr_expect_neq(p, NULL);
	cr_expect_eq(fd_calloc(1, 8), NULL);
	free(p);
	disarm();
}

/* ------------------------------------------------------------------------
 * Setup paths: every hit of a point failed in turn
 */

/* One kind of object a walk creates; @create undoes itself on failure. */
struct walk_case {
	const char *name;
	int (*create)(struct walk_case *w);
	struct faultd_ctx *ctx;
	struct faultd_region *r, *parent;
	char *base;	/* of what it made: r, or a heap */
	struct faultd_region_opts o;
	struct faultd_pager pager;
	int fd;
	bool zeros;	/* it serves zeros, not the pattern */
	uint64_t need;	/* FAULTD_HAVE_* it needs */
};

/* Start a creation: nothing made yet. */
static int walk_begin(struct walk_case *w)
{
	w->r = w->parent = NULL;
	w->base = NULL;
	w->ctx = NULL;
	return faultd_ctx_create(NULL, &w->ctx);
}

/* End a creation: on failure, undo what was made (the context holds it). */
static int walk_end(struct walk_case *w, int ret)
{
	if (ret < 0 && w->ctx)
		faultd_ctx_destroy(w->ctx);
	if (ret < 0)
		w->ctx = NULL;
	return ret;
}

/* The region serves its content within the deadline; then it all goes. */
static void check_content(struct walk_case *w)
{
	cr_assert_eq(touch_within((struct touch){
			     .base = w->r ? faultd_region_base(w->r) : w->base,
			     .len = LEN,
			     .zeros = w->zeros }),
		     0, "%s: wrong content", w->name);
	faultd_ctx_destroy(w->ctx);
	w->ctx = NULL;
}

/*
 * Fail the 1st, 2nd, ... hit of @point in @w's creation in turn, until it
 * gets through without one: each failure returns @err and leaves nothing
 * behind; each creation that gets through (some failures are absorbed:
 * a prefetch pool with one worker) serves the right content.
 */
static void walk(const char *point, int err, struct walk_case *w)
{
	for (unsigned int n = 1; n < 200; n++) {
		struct resources before = resources_now();
		unsigned long fired;
		char what[96];
		int ret;

		arm_nth(point, n, err == -EAGAIN ? "EAGAIN" : "ENOMEM");
		ret = w->create(w);
		fired = 0;
		for (int p = 0; p < INJ_NR; p++)
			fired += inject_fired((enum inject_point)p);
		disarm();
		snprintf(what, sizeof(what), "%s, %s %u", w->name, point, n);
		cr_assert(ret == 0 || ret == err, "%s: %d", what, ret);
		cr_assert(ret == 0 || fired, "%s: failed uninjected", what);
		if (!ret)
			check_content(w);
		assert_no_leak(before, what);
		if (!ret && !fired) {
			cr_log_info("%s: %u hits of %s", w->name, n - 1, point);
			return;
		}
	}
	cr_assert_fail("%s: %s: no end of hits", w->name, point);
}

/* A context and a region of w->o (plus w->pager, when it has a fill). */
static int create_region(struct walk_case *w)
{
	int ret = walk_begin(w);

	w->o.size = sizeof(w->o);
	w->o.length = LEN;
	w->o.handler_threads = w->o.flags & FAULTD_REGION_SAME_THREAD ? 0 : 2;
	if (w->pager.fill)
		w->o.pager = &w->pager;
	if (!ret)
		ret = faultd_region_create(w->ctx, &w->o, &w->r);
	return walk_end(w, ret);
}

/* A file pager for the region, made in the walk too; ours if it fails. */
static int create_file_region(struct walk_case *w)
{
	struct faultd_file_opts fo = { .size = sizeof(fo), .fd = w->fd };
	int ret = faultd_file_pager(&fo, &w->pager);

	if (ret < 0)
		return ret;
	ret = create_region(w);
	if (ret < 0)
		w->pager.release(w->pager.arg);
	return ret;
}

static int create_group_region(struct walk_case *w)
{
	struct faultd_group_opts go = { .size = sizeof(go), .threads = 2 };
	int ret = walk_begin(w);

	w->o.size = sizeof(w->o);
	w->o.length = LEN;
	if (!ret)
		ret = faultd_group_create(w->ctx, &go, &w->o.group);
	if (!ret)
		ret = faultd_region_create(w->ctx, &w->o, &w->r);
	w->o.group = NULL; /* it goes with the context */
	return walk_end(w, ret);
}

static int create_heap(struct walk_case *w)
{
	struct faultd_heap_opts ho = { .size = sizeof(ho), .max_size = LEN };
	struct faultd_heap *h;
	void *prev;
	int ret = walk_begin(w);

	if (!ret)
		ret = faultd_heap_create(w->ctx, &ho, &h);
	if (!ret) { /* below the break: zeros */
		cr_assert_eq(faultd_heap_sbrk(h, LEN, &prev), 0);
		w->base = faultd_heap_base(h);
	}
	return walk_end(w, ret);
}

static int create_restore(struct walk_case *w)
{
	struct faultd_restore_opts ro = { .size = sizeof(ro),
					  .flags = FAULTD_RESTORE_LAZY };
	int ret = walk_begin(w);

	if (!ret)
		ret = faultd_restore(w->ctx, image_path, &ro, &w->r);
	return walk_end(w, ret);
}

/* A parent with the pattern in it, and its clone. */
static int create_clone(struct walk_case *w)
{
	int ret = walk_begin(w);

	w->o.size = sizeof(w->o);
	w->o.length = LEN;
	if (!ret)
		ret = faultd_region_create(w->ctx, &w->o, &w->parent);
	if (!ret) {
		pattern_fill(TAG, 0, faultd_region_base(w->parent), LEN);
		ret = faultd_region_clone(w->parent, NULL, &w->r);
	}
	return walk_end(w, ret);
}

/* Every kind of creation, with what it needs of the kernel. */
static void walk_all(const char *point, int err)
{
	struct faultd_pager tp = tag_pager(), bp = budget_pager();
	int fd = open(file_path, O_RDONLY | O_CLOEXEC);
	struct walk_case cases[] = {
		{ .name = "zero-fill", .create = create_region, .zeros = true },
		{ .name = "pager+wp", .create = create_region, .pager = tp,
		  .o = { .flags = FAULTD_REGION_WP, .fault_around = 4 * PAGE },
		  .need = FAULTD_HAVE_WP },
		{ .name = "memfd", .create = create_region, .zeros = true,
		  .o = { .flags = FAULTD_REGION_MEMFD } },
		{ .name = "same-thread", .create = create_region, .pager = tp,
		  .o = { .flags = FAULTD_REGION_SAME_THREAD },
		  .need = FAULTD_HAVE_SIGBUS },
		{ .name = "file", .create = create_file_region, .fd = fd },
		{ .name = "budget", .create = create_region, .pager = bp,
		  .o = budget_opts(NULL), .need = BUDGET_HAVE },
		{ .name = "group", .create = create_group_region,
		  .zeros = true },
		{ .name = "heap", .create = create_heap, .zeros = true },
		{ .name = "restore", .create = create_restore },
		{ .name = "clone-copy", .create = create_clone,
		  .need = FAULTD_HAVE_WP },
		{ .name = "clone-memfd", .create = create_clone,
		  .o = { .flags = FAULTD_REGION_MEMFD },
		  .need = FAULTD_HAVE_MINOR_SHMEM | FAULTD_HAVE_CONTINUE_WP },
	};

	cr_assert(fd >= 0);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct walk_case *w = &cases[i];

		if ((probe_have() & w->need) != w->need)
			continue; /* the kernel lacks it: nothing to fail */
		walk(point, err, w);
	}
	close(fd);
}

Test(inject, alloc_failures_roll_back)
{
	walk_all("alloc", -ENOMEM);
}

Test(inject, thread_failures_roll_back)
{
	walk_all("thread", -EAGAIN);
}

Test(inject, register_failures_roll_back)
{
	walk_all("register", -ENOMEM);
}

/* Each errno UFFDIO_REGISTER may return comes back as it is. */
Test(inject, register_errno_is_returned)
{
	static const char *const names[] = { "EAGAIN", "EEXIST", "ENOENT",
					      "ENOMEM" };
	static const int errs[] = { EAGAIN, EEXIST, ENOENT, ENOMEM };
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region_opts o = { .size = sizeof(o), .length = LEN };
	struct resources before = resources_now();
	struct faultd_region *r;

	for (size_t i = 0; i < ARRAY_SIZE(errs); i++) {
		arm_nth("register", 1, names[i]);
		cr_expect_eq(faultd_region_create(ctx, &o, &r), -errs[i]);
		disarm();
		assert_no_leak(before, names[i]);
	}
	faultd_ctx_destroy(ctx);
}

/* A failed grow leaves the region as it was, content and all. */
Test(inject, failed_resize_keeps_the_region)
{
	struct faultd_pager p = tag_pager();
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = region_new(ctx, (struct faultd_region_opts){
		.pager = &p, .max_length = 2 * LEN });
	struct resources before;

	cr_assert_eq(read_pattern(r, 0, LEN / 2), 0);
	before = resources_now();
	arm("register:1:ENOMEM");
	cr_assert_eq(faultd_region_resize(r, 2 * LEN), -ENOMEM);
	disarm();
	assert_no_leak(before, "resize");
	cr_assert_eq(faultd_region_size(r), LEN);
	cr_assert_eq(read_pattern(r, 0, LEN), 0);
	cr_assert_eq(faultd_region_resize(r, 2 * LEN), 0);
	cr_assert_eq(read_pattern(r, 0, 2 * LEN), 0);
	faultd_ctx_destroy(ctx);
}

/*
 * A clone whose freeze fails leaves the parent half frozen (as the
 * contract allows); cloning it again must not leak the first attempt's
 * base, and the parent keeps its content throughout.
 */
Test(inject, failed_freeze_retried_without_leak)
{
	struct faultd_ctx *ctx;
	struct faultd_region *p, *c;
	struct resources once;

	skip_without(FAULTD_HAVE_MINOR_SHMEM | FAULTD_HAVE_CONTINUE_WP,
		     "minor faults on shmem with WP");
	ctx = ctx_new();
	p = region_new(ctx, (struct faultd_region_opts){
		.flags = FAULTD_REGION_MEMFD });
	pattern_fill(TAG, 0, faultd_region_base(p), LEN);
	for (int i = 0; i < 3; i++) {
		arm("register:1:ENOMEM");
		cr_assert_eq(faultd_region_clone(p, NULL, &c), -ENOMEM);
		disarm();
		if (i == 0)
			once = resources_now();
		else
			assert_no_leak(once, "clone retried");
		cr_assert_eq(read_pattern(p, 0, LEN), 0);
	}
	cr_assert_eq(faultd_region_clone(p, NULL, &c), 0);
	cr_assert_eq(read_pattern(c, 0, LEN), 0);
	cr_assert_eq(read_pattern(p, 0, LEN), 0);
	faultd_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------
 * The fault path: fills that fail
 */

/*
 * The outcomes the fault path gives an ioctl error it can recover from:
 * EAGAIN parks and retries the fault; EEXIST wakes the thread, which
 * faults again; ENOENT (the range is gone) wakes it too.
 */
static const char *const recoverable[] = { "EAGAIN", "EEXIST", "ENOENT" };

/* Fail the first @point of a read of page 1; the reader must finish. */
static void recover_once(const char *point, enum inject_point p,
			 struct faultd_region_opts o, bool zeros)
{
	for (size_t i = 0; i < ARRAY_SIZE(recoverable); i++) {
		struct faultd_ctx *ctx = ctx_new();
		struct faultd_region *r = region_new(ctx, o);
		struct resources before = resources_now();
		struct faultd_stats s;
		char what[64];

		snprintf(what, sizeof(what), "%s:1:%s", point,
			 recoverable[i]);
		arm(what);
		cr_assert_eq(touch_within((struct touch){
				     .base = faultd_region_base(r),
				     .off = PAGE, .len = 2 * PAGE,
				     .zeros = zeros }),
			     0, "%s: wrong content", what);
		cr_assert_eq(inject_fired(p), 1, "%s", what);
		disarm();
		s = stats_of(r);
		cr_expect_eq(s.poisoned, 0, "%s", what);
		/* A page a fault prepared in the page cache is its fill even
		 * when the map says EEXIST: the retried access maps it. */
		cr_expect_geq(s.eagain + s.eexist + s.gone + s.mapped, 1, "%s",
			      what);
		/* Each fault counted once, as how it finally ended. */
		cr_expect_eq(s.faults, s.zero_fills + s.pager_fills + s.mapped +
					       s.eexist + s.gone,
			     "%s: %llu faults, %llu zero, %llu pager, %llu "
			     "mapped, %llu eexist, %llu gone", what,
			     (unsigned long long)s.faults,
			     (unsigned long long)s.zero_fills,
			     (unsigned long long)s.pager_fills,
			     (unsigned long long)s.mapped,
			     (unsigned long long)s.eexist,
			     (unsigned long long)s.gone);
		assert_no_leak(before, what);
		faultd_ctx_destroy(ctx);
	}
}

/* In a child: read page 1 (unless NONE; it must be right), then page 0,
 * whose @spec fill fails: the access must kill the child. */
enum first_page { FIRST_PATTERN, FIRST_ZEROS, FIRST_NONE };

struct poison_case {
	const char *spec;
	struct faultd_region_opts o;
	enum first_page first;
};

static void poison_child(void *arg)
{
	struct poison_case *pc = arg;
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	char *base;

	pc->o.size = sizeof(pc->o);
	pc->o.length = LEN;
	if (faultd_ctx_create(NULL, &ctx) ||
	    faultd_region_create(ctx, &pc->o, &r))
		_exit(2);
	base = faultd_region_base(r);
	if (setenv("FAULTD_INJECT", pc->spec, 1) || inject_reset())
		_exit(3);
	if ((pc->first == FIRST_ZEROS && base[PAGE] != 0) ||
	    (pc->first == FIRST_PATTERN &&
	     pattern_check(TAG, PAGE, base + PAGE, PAGE) != 0))
		_exit(4);
	(void)*(volatile char *)base;
	_exit(5); /* it read something: zeros in place of content */
}

static void expect_poison(const char *spec, struct faultd_region_opts o,
			  enum first_page first, int sig)
{
	struct poison_case pc = { spec, o, first };
	int how = in_child(poison_child, &pc);

	cr_expect_eq(how, sig, "%s: the access ended with %d, not signal %d "
			       "(SIGALRM: left asleep; < 0: exit status)",
		     spec, how, sig);
}

Test(inject, copy_failures)
{
	struct faultd_pager p = tag_pager();
	struct faultd_region_opts o = { .pager = &p };

	recover_once("copy", INJ_COPY, o, false);
	expect_poison("copy:2:ENOMEM", o, FIRST_PATTERN, poison_signal());
}

Test(inject, zeropage_failures)
{
	struct faultd_region_opts o = { 0 };

	recover_once("zeropage", INJ_ZEROPAGE, o, true);
	expect_poison("zeropage:2:ENOMEM", o, FIRST_ZEROS, poison_signal());
}

Test(inject, continue_failures)
{
	struct faultd_pager p = budget_pager();

	skip_without(BUDGET_HAVE, "minor faults on shmem with WP");
	recover_once("continue", INJ_CONTINUE, budget_opts(&p), false);
	expect_poison("continue:2:ENOMEM", budget_opts(&p), FIRST_PATTERN,
		      poison_signal());
}

/* A fault in a same-thread region is resolved in the faulting thread's
 * SIGBUS handler; a fill that fails there is retried by the access. */
Test(inject, same_thread_fill_failures)
{
	struct faultd_pager p = tag_pager();
	struct faultd_region_opts o = { .pager = &p,
					.flags = FAULTD_REGION_SAME_THREAD };
	static const char *const specs[] = { "copy:1:ENOMEM", "copy:1:EAGAIN",
					     "copy:1:EEXIST" };

	skip_without(FAULTD_HAVE_SIGBUS, "UFFD_FEATURE_SIGBUS");
	for (size_t i = 0; i < ARRAY_SIZE(specs); i++) {
		struct faultd_ctx *ctx = ctx_new();
		struct faultd_region *r = region_new(ctx, o);

		arm(specs[i]);
		cr_assert_eq(read_pattern(r, 0, LEN), 0, "%s", specs[i]);
		cr_expect_eq(inject_fired(INJ_COPY), 1, "%s", specs[i]);
		disarm();
		faultd_ctx_destroy(ctx);
	}
}

/* ------------------------------------------------------------------------
 * The fault path: wakes, poisons and write-protection that fail
 */

/*
 * A wake that fails must not leave the thread asleep: after a fill that
 * found the page there (EEXIST) or the range gone (ENOENT), and after an
 * unprotect that failed.
 */
Test(inject, wake_failures)
{
	/* With every wake failing, the retried fill wakes the thread. */
	static const char *const specs[] = { "copy:1:EEXIST,wake:1:ENOMEM",
					     "copy:1:ENOENT,wake:1:EAGAIN",
					     "copy:1:EEXIST,wake:1+:ENOMEM" };
	struct faultd_pager p = tag_pager();

	for (size_t i = 0; i < ARRAY_SIZE(specs); i++) {
		struct faultd_ctx *ctx = ctx_new();
		struct faultd_region *r = region_new(
			ctx, (struct faultd_region_opts){ .pager = &p });

		arm(specs[i]);
		cr_assert_eq(read_pattern(r, 0, 2 * PAGE), 0, "%s", specs[i]);
		cr_expect_geq(inject_fired(INJ_WAKE), 1, "%s", specs[i]);
		disarm();
		faultd_ctx_destroy(ctx);
	}
}

/* Read every page (installed write-protected), then arm @spec and write
 * one word to page 3: the writer must finish and the page be dirty. */
static void write_after(const char *spec)
{
	struct faultd_pager p = tag_pager();
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = region_new(
		ctx, (struct faultd_region_opts){ .pager = &p,
						  .flags = FAULTD_REGION_WP });
	char *base = faultd_region_base(r);
	uint64_t bitmap[1];

	cr_assert_eq(read_pattern(r, 0, LEN), 0);
	cr_assert_eq(faultd_region_dirty(r, 0, LEN, bitmap), 0);
	arm(spec);
	touch_within((struct touch){ .base = base, .off = 3 * PAGE,
				     .len = PAGE, .write = true });
	cr_expect_geq(inject_fired(INJ_WRITEPROTECT), 1, "%s", spec);
	disarm();
	cr_assert_eq(*(uint64_t *)(base + 3 * PAGE), ~(uint64_t)(3 * PAGE));
	cr_assert_eq(pattern_check(TAG, 3 * PAGE + 8, base + 3 * PAGE + 8,
				   PAGE - 8),
		     0, "%s", spec);
	cr_assert_eq(faultd_region_dirty(r, 0, LEN, bitmap), 1, "%s", spec);
	cr_assert_eq(bitmap[0], 1u << 3, "%s", spec);
	faultd_ctx_destroy(ctx);
}

Test(inject, writeprotect_failures_on_the_fault_path)
{
	static const char *const specs[] = {
		"writeprotect:1:EAGAIN", "writeprotect:1:EEXIST",
		"writeprotect:1:ENOENT", "writeprotect:1:ENOMEM",
		"writeprotect:1:ENOMEM,wake:1:ENOMEM",
	};

	skip_without(FAULTD_HAVE_WP, "write-protect faults");
	for (size_t i = 0; i < ARRAY_SIZE(specs); i++)
		write_after(specs[i]);
}

/* A collection whose re-protection fails loses no dirty page. */
Test(inject, writeprotect_failure_in_collection)
{
	struct faultd_pager p = tag_pager();
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	uint64_t bitmap[1];
	char *base;

	skip_without(FAULTD_HAVE_WP, "write-protect faults");
	ctx = ctx_new();
	r = region_new(ctx, (struct faultd_region_opts){
		.pager = &p, .flags = FAULTD_REGION_WP });
	base = faultd_region_base(r);
	cr_assert_eq(read_pattern(r, 0, LEN), 0);
	cr_assert_eq(faultd_region_dirty(r, 0, LEN, bitmap), 0);
	touch_within((struct touch){ .base = base, .off = 5 * PAGE,
				     .len = 2 * PAGE, .write = true });
	arm("writeprotect:1+:ENOMEM");
	cr_assert_eq(faultd_region_dirty(r, 0, LEN, bitmap), -ENOMEM);
	cr_assert_eq(faultd_region_protect(r, 0, LEN), -ENOMEM);
	disarm();
	cr_assert_eq(faultd_region_dirty(r, 0, LEN, bitmap), 2);
	cr_assert_eq(bitmap[0], 3u << 5);
	faultd_ctx_destroy(ctx);
}

/*
 * A page whose content cannot be produced is poisoned even when
 * UFFDIO_POISON fails: made inaccessible (SIGSEGV) for a hard error,
 * poisoned on the retry for the others. Never zeros, never asleep.
 */
Test(inject, poison_failures)
{
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_CONCURRENT,
				  .fill = failing_fill };
	struct faultd_region_opts o = { .pager = &p };

	skip_without(FAULTD_HAVE_POISON, "UFFDIO_POISON");
	for (size_t i = 0; i <= ARRAY_SIZE(recoverable); i++) {
		bool hard = i == ARRAY_SIZE(recoverable);
		char spec[64];

		snprintf(spec, sizeof(spec), "poison:1:%s",
			 hard ? "ENOMEM" : recoverable[i]);
		expect_poison(spec, o, FIRST_NONE, hard ? SIGSEGV : SIGBUS);
	}
}

static __thread sigjmp_buf poison_jmp;

static void poison_jump(int sig)
{
	siglongjmp(poison_jmp, sig);
}

/* A poison that must be retried (EAGAIN) is one page poisoned, once. */
Test(inject, retried_poison_counted_once)
{
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_CONCURRENT,
				  .fill = failing_fill };
	struct faultd_region_opts o = { .pager = &p };
	struct sigaction sa = { .sa_handler = poison_jump }, old;
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	struct faultd_stats s;
	int sig;

	skip_without(FAULTD_HAVE_POISON, "UFFDIO_POISON");
	ctx = ctx_new();
	r = region_new(ctx, o);
	arm("poison:1:EAGAIN");
	cr_assert_eq(sigaction(SIGBUS, &sa, &old), 0);
	sig = sigsetjmp(poison_jmp, 1);
	if (!sig)
		(void)*(volatile char *)faultd_region_base(r);
	cr_assert_eq(sigaction(SIGBUS, &old, NULL), 0);
	cr_assert_eq(sig, SIGBUS);
	cr_assert_eq(inject_fired(INJ_POISON), 1);
	disarm();
	s = stats_of(r);
	/* One fault message, as a rule. Now and then (1 run in 300 under
	 * ASan) the kernel sends a second one for the same access while the
	 * first is parked; it is counted, and served like any fault: by the
	 * pager, or as a page that is in by then. */
	cr_expect(s.faults >= 1 && s.faults <= 2, "faults %llu",
		  (unsigned long long)s.faults);
	cr_expect_eq(s.eagain, 1);
	cr_expect_eq(s.poisoned, 1, "one page, poisoned %llu times",
		     (unsigned long long)s.poisoned);
	cr_expect(s.pager_errors >= 2 && s.pager_errors <= s.faults + 1,
		  "the retry calls the pager again: %llu errors, %llu faults",
		  (unsigned long long)s.pager_errors,
		  (unsigned long long)s.faults);
	faultd_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------
 * Reads: the file pager and images
 */

/* A file region without fault-around or read-ahead: one read a page. */
static struct faultd_region_opts file_opts(struct faultd_pager *p)
{
	return (struct faultd_region_opts){
		.pager = p,
		.fault_around = FAULTD_FAULT_AROUND_OFF,
		.readahead_max = FAULTD_READAHEAD_OFF,
	};
}

Test(inject, file_read_failures_poison)
{
	static const char *const specs[] = { "read:2:EIO", "read:2:EINTR",
					     "short-read:2" };
	int fd;
	struct faultd_pager p = file_pager(&fd);

	for (size_t i = 0; i < ARRAY_SIZE(specs); i++)
		expect_poison(specs[i], file_opts(&p), FIRST_PATTERN,
			      poison_signal());
	p.release(p.arg);
	close(fd);
}

/* A prefetch whose reads fail counts the errors; the faults read again. */
Test(inject, prefetch_read_failures_are_refilled)
{
	int fd;
	struct faultd_pager p = file_pager(&fd);
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r = region_new(ctx, file_opts(&p));

	arm("read:1+:EIO");
	cr_assert_eq(faultd_region_prefetch(r, 0, LEN), 0);
	cr_assert_eq(faultd_region_prefetch_wait(r), 0);
	cr_assert_geq(inject_fired(INJ_READ), 1);
	disarm();
	cr_expect_geq(stats_of(r).pager_errors, 1);
	cr_assert_eq(read_pattern(r, 0, LEN), 0);
	cr_expect_eq(stats_of(r).poisoned, 0);
	faultd_ctx_destroy(ctx);
	close(fd);
}

/* The reads of faultd_restore(): header, extent table, CRC table. */
Test(inject, image_read_failures)
{
	static const struct {
		const char *spec;
		int err;
	} cases[] = {
		{ "read:1:EIO", -EIO },		/* the header */
		{ "read:2:ENOMEM", -ENOMEM },	/* the extent table */
		{ "read:3:EIO", -EIO },		/* the CRCs */
		{ "short-read:1", -EINVAL },	/* shorter than a header */
		{ "short-read:2", -EBADMSG },	/* truncated tables */
		{ "short-read:3", -EBADMSG },
	};
	struct faultd_restore_opts ro = { .size = sizeof(ro),
					  .flags = FAULTD_RESTORE_LAZY };
	struct faultd_ctx *ctx = ctx_new();
	struct resources before = resources_now();
	struct faultd_region *r;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		arm(cases[i].spec);
		cr_expect_eq(faultd_restore(ctx, image_path, &ro, &r),
			     cases[i].err, "%s", cases[i].spec);
		disarm();
		assert_no_leak(before, cases[i].spec);
	}
	faultd_ctx_destroy(ctx);
}

static void image_fault_child(void *arg)
{
	struct faultd_restore_opts ro = { .size = sizeof(ro),
					  .flags = FAULTD_RESTORE_LAZY };
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	char *base;

	if (faultd_ctx_create(NULL, &ctx) ||
	    faultd_restore(ctx, image_path, &ro, &r))
		_exit(2);
	base = faultd_region_base(r);
	if (setenv("FAULTD_INJECT", arg, 1) || inject_reset())
		_exit(3);
	if (pattern_check(TAG, LEN / 2, base + LEN / 2, PAGE))
		_exit(4); /* the first read: another block */
	(void)*(volatile char *)base;
	_exit(5);
}

Test(inject, image_fault_read_failures_poison)
{
	/* From the second on: a failed fault-around read falls back to a
	 * read of the page alone, which must fail too. */
	static const char *const specs[] = { "read:2+:EIO", "short-read:2+" };

	for (size_t i = 0; i < ARRAY_SIZE(specs); i++)
		cr_expect_eq(in_child(image_fault_child, (void *)specs[i]),
			     poison_signal(), "%s", specs[i]);
}

/* ------------------------------------------------------------------------
 * The daemon protocol
 */

static char sock_path[256];

static pid_t daemon_start(void)
{
	snprintf(sock_path, sizeof(sock_path), "%s/faultd.sock", test_dir);
	/* The library's take-over is what these tests test: a daemon
	 * killed leaves its sessions to nobody. */
	return test_daemon_start_with(sock_path, "--no-keeper");
}

static void daemon_stop(pid_t pid)
{
	test_daemon_kill(pid, SIGTERM);
}

static int restore_daemon(struct faultd_ctx *ctx, struct faultd_region **r)
{
	struct faultd_restore_opts ro = { .size = sizeof(ro),
					  .flags = FAULTD_RESTORE_DAEMON,
					  .socket = sock_path };

	return faultd_restore(ctx, image_path, &ro, r);
}

/* A message that cannot be sent or received fails the restore cleanly. */
Test(inject, socket_failures_fail_the_restore)
{
	static const struct {
		const char *spec;
		int err;
	} cases[] = {
		{ "send:1", -EPIPE },		/* HELLO */
		{ "recv:1", -ECONNRESET },	/* the daemon's HELLO */
		{ "send:2:ENOMEM", -ENOMEM },	/* REGISTER */
		{ "recv:2:EINTR", -EINTR },	/* its ACK */
		{ "thread:1", -EAGAIN },	/* the watcher */
	};
	pid_t pid = daemon_start();
	struct faultd_ctx *ctx = ctx_new();
	struct resources before = resources_now();
	struct faultd_region *r;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		arm(cases[i].spec);
		cr_expect_eq(restore_daemon(ctx, &r), cases[i].err, "%s",
			     cases[i].spec);
		disarm();
		assert_no_leak(before, cases[i].spec);
	}
	faultd_ctx_destroy(ctx);
	daemon_stop(pid);
}

/* The watcher's receive fails: the library takes over from the daemon. */
Test(inject, watcher_recv_failure_takes_over)
{
	struct faultd_restore_progress pr = { .size = sizeof(pr) };
	pid_t pid = daemon_start();
	struct resources before = resources_now();
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r;

	arm("recv:3");
	cr_assert_eq(restore_daemon(ctx, &r), 0);
	cr_assert_eq(read_pattern(r, 0, LEN), 0);
	cr_assert_eq(faultd_restore_wait(r), 0);
	cr_assert_eq(inject_fired(INJ_RECV), 1);
	disarm();
	cr_assert_eq(faultd_restore_progress(r, &pr), 0);
	cr_expect(pr.done && pr.daemon_died);
	faultd_ctx_destroy(ctx);
	assert_no_leak(before, "take-over");
	daemon_stop(pid);
}

/*
 * The daemon dies and the first handler thread of the take-over cannot be
 * made: the faults wait for the library to serve them, so it must.
 */
Test(inject, takeover_thread_failure_is_retried)
{
	struct faultd_restore_opts ro = {
		.size = sizeof(ro),
		.flags = FAULTD_RESTORE_DAEMON | FAULTD_RESTORE_LAZY,
		.socket = sock_path,
	};
	struct faultd_restore_progress pr = { .size = sizeof(pr) };
	pid_t pid = daemon_start();
	struct resources before = resources_now();
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_region *r;
	int status;

	cr_assert_eq(faultd_restore(ctx, image_path, &ro, &r), 0);
	cr_assert_eq(read_pattern(r, 0, PAGE), 0);
	arm("thread:1");
	kill(pid, SIGKILL);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert_eq(read_pattern(r, 0, LEN), 0);
	cr_assert_eq(inject_fired(INJ_THREAD), 1);
	disarm();
	cr_assert_eq(faultd_restore_progress(r, &pr), 0);
	cr_expect(pr.daemon_died);
	faultd_ctx_destroy(ctx);
	assert_no_leak(before, "take-over");
}

/* A fault-around window whose fill fails falls back to the page alone. */
Test(inject, fault_around_failures_fall_back)
{
	static const char *const specs[] = { "copy:1:EAGAIN", "copy:1:EEXIST",
					     "copy:1:ENOENT", "copy:1:ENOMEM",
					     "zeropage:1:ENOMEM" };
	struct faultd_pager p = tag_pager();

	for (size_t i = 0; i < ARRAY_SIZE(specs); i++) {
		bool zeros = !strncmp(specs[i], "zeropage", 8);
		struct faultd_ctx *ctx = ctx_new();
		struct faultd_region *r = region_new(
			ctx, (struct faultd_region_opts){
				     .pager = zeros ? NULL : &p,
				     .fault_around = 16 * PAGE });

		arm(specs[i]);
		cr_assert_eq(touch_within((struct touch){
				     .base = faultd_region_base(r),
				     .len = LEN, .zeros = zeros }),
			     0, "%s", specs[i]);
		cr_assert_eq(inject_fired(zeros ? INJ_ZEROPAGE : INJ_COPY), 1,
			     "%s", specs[i]);
		disarm();
		cr_expect_eq(stats_of(r).poisoned, 0, "%s", specs[i]);
		faultd_ctx_destroy(ctx);
	}
}
