// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * modes.c - suite "uffd": the fault-path modes of the speed work.
 *
 * Every mode - handler placement (one CPU, one per CPU, busy polling),
 * same-thread resolution in SIGBUS handlers, fault-around - passes the
 * content test: several threads fault every page of zero-fill and pager
 * regions, every byte is checked. Same-thread regions coexist with the
 * application's SIGBUS handler, also when it puts back the default action
 * or its own handler between regions; the handler never does faultd_clear()'s
 * set-up. Fault-around stays inside its region and
 * never replaces a present page.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <setjmp.h>
#include <sys/mman.h>

#include "helpers.h"

#define LEN (8 * MIB)

static const struct faultd_pager safe_pager = {
	.size = sizeof(struct faultd_pager),
	.flags = FAULTD_PAGER_SIGNAL_SAFE,
	.fill = pattern_pager_fill,
	.arg = (void *)9,
};

struct reader {
	const char *base;
	unsigned int idx;
	bool pager;
	size_t bad;
};

/* Read every page from a different start; writes to half of them. */
static void *read_all(void *arg)
{
	struct reader *rd = arg;
	size_t pages = LEN / PAGE;

	for (size_t i = 0; i < pages; i++) {
		size_t pg = (i + rd->idx * pages / 3) % pages;
		const char *p = rd->base + pg * PAGE;

		if (rd->pager) {
			rd->bad += pattern_check(9, pg * PAGE, p, PAGE);
		} else {
			for (size_t k = 0; k < PAGE; k += 512)
				rd->bad += p[k] != 0;
		}
	}
	return NULL;
}

static void content_in_mode(struct faultd_region_opts o)
{
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	struct faultd_stats s = { .size = sizeof(s) };
	struct reader rd[3];
	pthread_t t[3];
	int ret;

	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	o.size = sizeof(o);
	o.length = LEN;
	ret = faultd_region_create(ctx, &o, &r);
	if (ret == -EOPNOTSUPP)
		cr_skip_test("this kernel lacks what the mode needs");
	cr_assert_eq(ret, 0, "create: %s", strerror(-ret));
	for (unsigned int i = 0; i < 3; i++) {
		rd[i] = (struct reader){ .base = faultd_region_base(r),
					 .idx = i,
					 .pager = o.pager != NULL };
		pthread_create(&t[i], NULL, read_all, &rd[i]);
	}
	for (unsigned int i = 0; i < 3; i++) {
		pthread_join(t[i], NULL);
		cr_expect_eq(rd[i].bad, 0, "thread %u: %zu bad", i, rd[i].bad);
	}
	cr_assert_eq(faultd_region_destroy(r), 0);
	cr_assert_eq(faultd_ctx_stats(ctx, &s), 0);
	/*
	 * Every page mapped once: by its own fault or a fault-around. (A
	 * fault read twice may be handled after the region is gone.)
	 */
	cr_expect_eq(s.faults - s.eexist - s.no_region + s.around, LEN / PAGE,
		     "faults %llu eexist %llu around %llu gone %llu zero %llu "
		     "pager %llu noregion %llu eagain %llu",
		     (unsigned long long)s.faults,
		     (unsigned long long)s.eexist,
		     (unsigned long long)s.around, (unsigned long long)s.gone,
		     (unsigned long long)s.zero_fills,
		     (unsigned long long)s.pager_fills,
		     (unsigned long long)s.no_region,
		     (unsigned long long)s.eagain);
	/* Every page installed once, by its fault or a fault-around. */
	cr_expect_eq(s.zero_fills + s.pager_fills + s.around, LEN / PAGE,
		     "zero %llu pager %llu around %llu eexist %llu",
		     (unsigned long long)s.zero_fills,
		     (unsigned long long)s.pager_fills,
		     (unsigned long long)s.around,
		     (unsigned long long)s.eexist);
	cr_expect_eq(s.poisoned, 0);
	faultd_ctx_destroy(ctx);
}

static void both_contents(struct faultd_region_opts o)
{
	content_in_mode(o);
	o.pager = &safe_pager;
	content_in_mode(o);
}

Test(modes, placement_one_cpu, .timeout = 60)
{
	both_contents((struct faultd_region_opts){
		.placement = FAULTD_PLACE_CPU, .cpu = 0, .handler_threads = 2 });
}

Test(modes, placement_per_cpu, .timeout = 60)
{
	both_contents((struct faultd_region_opts){
		.placement = FAULTD_PLACE_PER_CPU });
}

Test(modes, busy_poll, .timeout = 60)
{
	both_contents((struct faultd_region_opts){ .busy_poll_us = 50 });
}

Test(modes, same_thread_sigbus, .timeout = 60)
{
	both_contents((struct faultd_region_opts){
		.flags = FAULTD_REGION_SAME_THREAD });
}

Test(modes, fault_around, .timeout = 60)
{
	both_contents((struct faultd_region_opts){
		.fault_around = 64 << 10 });
}

Test(modes, same_thread_fault_around, .timeout = 60)
{
	both_contents((struct faultd_region_opts){
		.flags = FAULTD_REGION_SAME_THREAD, .fault_around = 64 << 10 });
}

/* ------------------------------------------------------------------------
 * Same-thread regions and the application's own SIGBUS handler.
 */

static __thread sigjmp_buf app_jmp;
static volatile int app_sigbus_calls;

static void app_handler(int sig, siginfo_t *info, void *uc)
{
	app_sigbus_calls++;
	siglongjmp(app_jmp, 1);
}

/* A SIGBUS that is not a userfault: a page of a file beyond its end. */
static volatile char *beyond_eof(void)
{
	char path[] = "/tmp/faultd-sigbus-XXXXXX";
	int fd = mkstemp(path);
	char *p;

	cr_assert_geq(fd, 0);
	unlink(path);
	cr_assert_eq(ftruncate(fd, PAGE), 0);
	p = mmap(NULL, 2 * PAGE, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	cr_assert_neq(p, MAP_FAILED);
	return p + PAGE;
}

static struct faultd_region *same_thread_region(struct faultd_ctx *ctx)
{
	struct faultd_region_opts o = { .size = sizeof(o),
					.flags = FAULTD_REGION_SAME_THREAD,
					.length = 64 * PAGE,
					.pager = &safe_pager };
	struct faultd_region *r;
	int ret = faultd_region_create(ctx, &o, &r);

	if (ret == -EOPNOTSUPP)
		cr_skip_test("no UFFD_FEATURE_SIGBUS on this kernel");
	cr_assert_eq(ret, 0);
	return r;
}

Test(modes, sigbus_reaches_handler_installed_before, .timeout = 30)
{
	struct sigaction sa = { .sa_sigaction = app_handler,
				.sa_flags = SA_SIGINFO };
	volatile char *outside = beyond_eof();
	struct faultd_ctx *ctx;
	struct faultd_region *r;

	sigaction(SIGBUS, &sa, NULL);
	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	r = same_thread_region(ctx);
	/* Ours: resolved, the application's handler never sees it. */
	cr_expect_eq(pattern_check(9, 7 * PAGE,
				   (char *)faultd_region_base(r) + 7 * PAGE,
				   PAGE),
		     0);
	cr_expect_eq(app_sigbus_calls, 0);
	/* Not ours: the application's handler gets it. */
	if (!sigsetjmp(app_jmp, 1))
		(void)*outside;
	cr_expect_eq(app_sigbus_calls, 1);
	faultd_ctx_destroy(ctx);
}

static void app_handler_first(int sig, siginfo_t *info, void *uc)
{
	if (faultd_sigbus(sig, info, uc))
		return;
	app_sigbus_calls++;
	siglongjmp(app_jmp, 1);
}

Test(modes, sigbus_from_handler_installed_after, .timeout = 30)
{
	struct sigaction sa = { .sa_sigaction = app_handler_first,
				.sa_flags = SA_SIGINFO | SA_NODEFER };
	volatile char *outside = beyond_eof();
	struct faultd_ctx *ctx;
	struct faultd_region *r;

	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	r = same_thread_region(ctx);
	sigaction(SIGBUS, &sa, NULL); /* replaces the library's */
	cr_expect_eq(pattern_check(9, 3 * PAGE,
				   (char *)faultd_region_base(r) + 3 * PAGE,
				   PAGE),
		     0);
	cr_expect_eq(app_sigbus_calls, 0);
	if (!sigsetjmp(app_jmp, 1))
		(void)*outside;
	cr_expect_eq(app_sigbus_calls, 1);
	faultd_ctx_destroy(ctx);
}

static void same_thread_pager_error(void *arg)
{
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_SIGNAL_SAFE,
				  .fill = failing_fill };
	struct faultd_region_opts o = { .size = sizeof(o),
					.flags = FAULTD_REGION_SAME_THREAD,
					.length = 16 * PAGE,
					.pager = &p };
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	volatile char *b;

	if (faultd_ctx_create(NULL, &ctx) || faultd_region_create(ctx, &o, &r))
		_exit(10);
	b = faultd_region_base(r);
	if (b[PAGE] == 0)
		_exit(11); /* zeros: the bug */
	_exit(12);
}

Test(modes, same_thread_pager_error_is_fatal_sigbus_not_zeros, .timeout = 30)
{
	int how = run_in_child(same_thread_pager_error, NULL);

	cr_expect_eq(how, poison_signal(), "child ended with %d", how);
}

/*
 * Two threads fault each page of a same-thread region at once; the pager
 * holds the first fill of a page until the second arrives, so both
 * SIGBUS handlers fill it and one loses (EEXIST). The counters say what
 * was installed: one pager fill a page, one EEXIST a page.
 */
struct st_race {
	atomic_int entered[64];
	struct faultd_region *r;
	pthread_barrier_t bar;
	size_t bad[2];
};

static ssize_t st_race_fill(void *arg, struct faultd_region *r, uint64_t off,
			    void *buf, size_t len)
{
	struct st_race *sr = arg;
	atomic_int *e = &sr->entered[off / PAGE % 64];

	atomic_fetch_add(e, 1);
	wait_at_least(e, 2, 10000);
	pattern_fill(9, off, buf, len);
	return (ssize_t)len;
}

struct st_racer {
	struct st_race *sr;
	unsigned int idx;
};

static void *st_race_touch(void *arg)
{
	struct st_racer *t = arg;
	const char *base = faultd_region_base(t->sr->r);

	for (size_t pg = 0; pg < 64; pg++) {
		pthread_barrier_wait(&t->sr->bar);
		t->sr->bad[t->idx] +=
			pattern_check(9, pg * PAGE, base + pg * PAGE, PAGE);
	}
	return NULL;
}

Test(modes, same_thread_race_counts_installed_pages, .timeout = 60)
{
	static struct st_race sr;
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_SIGNAL_SAFE,
				  .fill = st_race_fill,
				  .arg = &sr };
	struct faultd_region_opts o = { .size = sizeof(o),
					.flags = FAULTD_REGION_SAME_THREAD,
					.length = 64 * PAGE,
					.pager = &p };
	struct faultd_stats s = { .size = sizeof(s) };
	struct st_racer t[2];
	struct faultd_ctx *ctx;
	pthread_t th[2];
	int ret;

	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	ret = faultd_region_create(ctx, &o, &sr.r);
	if (ret == -EOPNOTSUPP)
		cr_skip_test("no UFFD_FEATURE_SIGBUS on this kernel");
	cr_assert_eq(ret, 0);
	pthread_barrier_init(&sr.bar, NULL, 2);
	for (unsigned int i = 0; i < 2; i++) {
		t[i] = (struct st_racer){ .sr = &sr, .idx = i };
		cr_assert_eq(pthread_create(&th[i], NULL, st_race_touch, &t[i]),
			     0);
	}
	for (unsigned int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		cr_expect_eq(sr.bad[i], 0);
	}
	/* Counted in the faulting threads, which have returned. */
	cr_assert_eq(faultd_region_stats(sr.r, &s), 0);
	for (int i = 0; i < 64; i++)
		cr_expect_eq(atomic_load(&sr.entered[i]), 2, "page %d", i);
	cr_expect_eq(s.faults, 128);
	cr_expect_eq(s.pager_fills, 64, "%llu pager fills for 64 pages",
		     (unsigned long long)s.pager_fills);
	cr_expect_eq(s.eexist, 64);
	pthread_barrier_destroy(&sr.bar);
	faultd_ctx_destroy(ctx);
}

/*
 * Each same-thread region checks the SIGBUS handler when it is created. A
 * program that put back the default action (or the handler it had before
 * the library's) once its same-thread regions were gone gets the
 * library's handler again with its next one; a handler the program
 * installed after the library's (which calls faultd_sigbus() first) stays.
 */
static struct faultd_region *same_thread_or_exit(struct faultd_ctx *ctx)
{
	struct faultd_region_opts o = { .size = sizeof(o),
					.flags = FAULTD_REGION_SAME_THREAD,
					.length = 64 * PAGE,
					.pager = &safe_pager };
	struct faultd_region *r;
	int ret = faultd_region_create(ctx, &o, &r);

	if (ret == -EOPNOTSUPP)
		_exit(77);
	if (ret)
		_exit(10);
	return r;
}

/* 0 if page @pg of @r reads as the pager's, 1 if not, 2 if the program's
 * handler got the fault. */
static int read_checked(struct faultd_region *r, size_t pg)
{
	if (sigsetjmp(app_jmp, 1))
		return 2;
	return pattern_check(9, pg * PAGE,
			     (char *)faultd_region_base(r) + pg * PAGE,
			     PAGE) != 0;
}

static void default_put_back(void *arg)
{
	struct faultd_ctx *ctx;
	struct faultd_region *r;

	(void)arg;
	if (faultd_ctx_create(NULL, &ctx))
		_exit(10);
	r = same_thread_or_exit(ctx);
	if (read_checked(r, 1))
		_exit(11);
	faultd_region_destroy(r);
	signal(SIGBUS, SIG_DFL);
	r = same_thread_or_exit(ctx);
	_exit(read_checked(r, 2) ? 12 : 0); /* old: killed by SIGBUS */
}

Test(modes, sigbus_handler_back_after_default_restored, .timeout = 30)
{
	int how = run_in_child(default_put_back, NULL);

	if (how == -78)
		cr_skip_test("no UFFD_FEATURE_SIGBUS on this kernel");
	cr_expect_eq(how, -1, "child ended with %d (> 0: that signal; "
			      "-1 - n: exit status n)", how);
}

static void previous_put_back(void *arg)
{
	struct sigaction sa = { .sa_sigaction = app_handler,
				.sa_flags = SA_SIGINFO | SA_NODEFER };
	volatile char *outside = arg;
	struct faultd_ctx *ctx;
	struct faultd_region *r;

	sigaction(SIGBUS, &sa, NULL);
	if (faultd_ctx_create(NULL, &ctx))
		_exit(10);
	r = same_thread_or_exit(ctx);
	if (read_checked(r, 1))
		_exit(11);
	faultd_region_destroy(r);
	sigaction(SIGBUS, &sa, NULL); /* what it had before the library */
	r = same_thread_or_exit(ctx);
	if (read_checked(r, 2))
		_exit(12); /* old: the program's handler got the fault */
	if (app_sigbus_calls)
		_exit(13);
	if (!sigsetjmp(app_jmp, 1))
		(void)*outside;
	_exit(app_sigbus_calls == 1 ? 0 : 14);
}

Test(modes, sigbus_handler_back_after_previous_restored, .timeout = 30)
{
	int how = run_in_child(previous_put_back, (void *)beyond_eof());

	if (how == -78)
		cr_skip_test("no UFFD_FEATURE_SIGBUS on this kernel");
	cr_expect_eq(how, -1, "child ended with %d (> 0: that signal; "
			      "-1 - n: exit status n)", how);
}

Test(modes, sigbus_handler_installed_after_stays, .timeout = 30)
{
	struct sigaction sa = { .sa_sigaction = app_handler_first,
				.sa_flags = SA_SIGINFO | SA_NODEFER }, cur;
	struct faultd_ctx *ctx;
	struct faultd_region *r1, *r2;

	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	r1 = same_thread_region(ctx);
	sigaction(SIGBUS, &sa, NULL);
	r2 = same_thread_region(ctx);
	cr_assert_eq(sigaction(SIGBUS, NULL, &cur), 0);
	cr_expect(cur.sa_sigaction == app_handler_first,
		  "the program's handler was replaced");
	cr_expect_eq(read_checked(r1, 4), 0);
	cr_expect_eq(read_checked(r2, 5), 0);
	cr_expect_eq(app_sigbus_calls, 0);
	faultd_ctx_destroy(ctx);
}

/*
 * faultd_clear()'s one-time set-up (calibration, FAULTD_CLEAR) is done
 * when a same-thread region is created, never in the SIGBUS handler of a
 * fault that clears the tail of a short fill: FAULTD_CLEAR, which the
 * set-up reads, says rep-stosb at the creation and memset at the fault.
 */
static ssize_t half_fill(void *arg, struct faultd_region *r, uint64_t off,
			 void *buf, size_t len)
{
	pattern_fill(9, off, buf, len / 2);
	return (ssize_t)(len / 2);
}

static void clear_set_up_child(void *arg)
{
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_SIGNAL_SAFE,
				  .fill = half_fill };
	struct faultd_region_opts o = { .size = sizeof(o),
					.flags = FAULTD_REGION_SAME_THREAD,
					.length = 16 * PAGE,
					.pager = &p };
	struct faultd_clear_info info = { .size = sizeof(info) };
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	const char *b;
	int ret;

	(void)arg;
	setenv("FAULTD_CLEAR", "rep-stosb", 1);
	if (faultd_ctx_create(NULL, &ctx))
		_exit(10);
	ret = faultd_region_create(ctx, &o, &r);
	if (ret == -EOPNOTSUPP)
		_exit(77);
	if (ret)
		_exit(10);
	setenv("FAULTD_CLEAR", "memset", 1);
	b = faultd_region_base(r);
	if (pattern_check(9, 0, b, PAGE / 2))
		_exit(11);
	for (size_t i = PAGE / 2; i < PAGE; i++)
		if (b[i])
			_exit(12);
	if (faultd_clear_info(&info))
		_exit(10);
	_exit(info.forced == FAULTD_CLEAR_REP_STOSB ? 0 : 13);
}

Test(modes, clear_set_up_at_creation_not_in_handler, .timeout = 30)
{
	int how;

#ifndef __x86_64__
	cr_skip_test("rep stosb is an x86 strategy");
#endif
	how = run_in_child(clear_set_up_child, NULL);
	if (how == -78)
		cr_skip_test("no UFFD_FEATURE_SIGBUS on this kernel");
	cr_expect_eq(how, -1, "child ended with %d (-14: set up in the "
			      "signal handler)", how);
}

/* ------------------------------------------------------------------------
 * Fault-around stays inside the region and keeps present pages.
 */

static size_t resident(void *p, size_t len)
{
	unsigned char vec[64];
	size_t n = 0;

	cr_assert_leq(len / PAGE, sizeof(vec));
	cr_assert_eq(mincore(p, len, vec), 0);
	for (size_t i = 0; i < len / PAGE; i++)
		n += vec[i] & 1;
	return n;
}

Test(modes, fault_around_bounds_and_present_pages, .timeout = 30)
{
	struct faultd_ctx *ctx;
	struct faultd_pager p = pattern_pager(9, FAULTD_PAGER_CONCURRENT);
	struct faultd_region_opts o = {
		.size = sizeof(o),
		.length = 20 * PAGE,	 /* 64 KiB windows: 16 + 4 pages */
		.max_length = 32 * PAGE, /* reserved, unmapped after */
		.fault_around = 64 << 10,
		.pager = &p,
	};
	struct faultd_region *r;
	char *b;

	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	b = faultd_region_base(r);
	/* Windows are aligned within the region. */
	cr_assert_eq((uintptr_t)b % (64 << 10), 0);
	/* One fault maps its whole window. */
	cr_expect_eq(pattern_check(9, 3 * PAGE, b + 3 * PAGE, PAGE), 0);
	cr_expect_eq(resident(b, 16 * PAGE), 16);
	/* Page 5 written and kept, the others of the window dropped: the
	 * next window around page 3 must stop at page 5, not replace it. */
	memset(b + 5 * PAGE, 0x77, PAGE);
	cr_assert_eq(faultd_region_discard(r, 0, 5 * PAGE), 0);
	cr_assert_eq(faultd_region_discard(r, 6 * PAGE, 10 * PAGE), 0);
	cr_expect_eq(resident(b, 16 * PAGE), 1);
	cr_expect_eq(pattern_check(9, 3 * PAGE, b + 3 * PAGE, PAGE), 0);
	for (size_t i = 0; i < PAGE; i++)
		cr_assert_eq((unsigned char)b[5 * PAGE + i], 0x77);
	/* The last window is clipped at the region's end. */
	cr_expect_eq(pattern_check(9, 17 * PAGE, b + 17 * PAGE, PAGE), 0);
	cr_expect_eq(resident(b + 16 * PAGE, 4 * PAGE), 4);
	cr_expect_eq(resident(b + 20 * PAGE, 12 * PAGE), 0);
	for (size_t pg = 0; pg < 20; pg++)
		if (pg != 5)
			cr_expect_eq(pattern_check(9, pg * PAGE, b + pg * PAGE,
						   PAGE),
				     0, "page %zu", pg);
	faultd_ctx_destroy(ctx);
}

Test(modes, bad_mode_options)
{
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	struct faultd_pager unsafe = pattern_pager(9, FAULTD_PAGER_CONCURRENT);
	struct faultd_region_opts o = { .size = sizeof(o), .length = 16 * PAGE };

	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	o.fault_around = 3 * PAGE;
	cr_expect_eq(faultd_region_create(ctx, &o, &r), -EINVAL);
	o.fault_around = 4 * MIB;
	cr_expect_eq(faultd_region_create(ctx, &o, &r), -EINVAL);
	o.fault_around = 0;
	o.flags = FAULTD_REGION_SAME_THREAD;
	o.pager = &unsafe;
	cr_expect_eq(faultd_region_create(ctx, &o, &r), -EINVAL);
	o.pager = NULL;
	o.flags |= FAULTD_REGION_WP;
	cr_expect_eq(faultd_region_create(ctx, &o, &r), -EINVAL);
	o.flags = FAULTD_REGION_SAME_THREAD;
	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	cr_expect_eq(faultd_region_resize(r, 32 * PAGE), -EOPNOTSUPP);
	o.flags = 0;
	o.placement = 9;
	cr_expect_eq(faultd_region_create(ctx, &o, &r), -EINVAL);
	faultd_ctx_destroy(ctx);
}
