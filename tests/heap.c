// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * heap.c - suite "uffd": brk-like heaps.
 *
 * The same sequences of sbrk/brk calls run against the kernel's own brk (in
 * a child process that does nothing else, so malloc does not move the
 * break) and against a faultd heap, and must give the same results relative
 * to the start. Then: zeros after shrink-then-grow at every size around the
 * trim threshold, SIGBUS above the break, growth over poisoned pages,
 * concurrent sbrk with no lost or overlapping allocation, growth past the
 * reservation.
 */
#include <criterion/criterion.h>
#include <setjmp.h>
#include <sys/mman.h>

#include "helpers.h"

#define HEAP_MAX (64 * MIB)

static struct faultd_heap *make_heap(struct faultd_ctx *ctx, size_t max,
				     size_t trim)
{
	struct faultd_heap_opts o = { .size = sizeof(o),
				      .max_size = max,
				      .trim_threshold = trim };
	struct faultd_heap *h;

	cr_assert_eq(faultd_heap_create(ctx, &o, &h), 0);
	return h;
}

/* ------------------------------------------------------------------------
 * The same call sequence against the kernel's brk and a faultd heap.
 */

enum { OP_SBRK, OP_BRK };

struct op {
	int kind;
	long arg; /* increment, or the new break relative to the start */
};

#define MAXOPS 40000

/* What a sequence returned: previous breaks (relative) or -1 on error. */
struct trace {
	long n;
	long v[MAXOPS];
};

static size_t make_sequence(struct op *ops)
{
	size_t n = 0;

	ops[n++] = (struct op){ OP_SBRK, 0 };
	ops[n++] = (struct op){ OP_SBRK, 4096 };
	ops[n++] = (struct op){ OP_SBRK, 100 };
	ops[n++] = (struct op){ OP_SBRK, -50 };
	ops[n++] = (struct op){ OP_SBRK, 1 << 20 };
	ops[n++] = (struct op){ OP_BRK, 12345 };
	ops[n++] = (struct op){ OP_SBRK, 0 };
	ops[n++] = (struct op){ OP_BRK, 3 * 4096 };
	ops[n++] = (struct op){ OP_SBRK, 0 };
	/* aim9 brk_test: +1 MiB, then 1000 x { -64 KiB, 16 x +4 KiB } */
	ops[n++] = (struct op){ OP_SBRK, 1 << 20 };
	for (int i = 0; i < 1000; i++) {
		ops[n++] = (struct op){ OP_SBRK, -(64 << 10) };
		for (int k = 0; k < 16; k++)
			ops[n++] = (struct op){ OP_SBRK, 4096 };
	}
	/* will-it-scale brk1: +4 KiB, -4 KiB */
	for (int i = 0; i < 1000; i++) {
		ops[n++] = (struct op){ OP_SBRK, 4096 };
		ops[n++] = (struct op){ OP_SBRK, -4096 };
	}
	ops[n++] = (struct op){ OP_BRK, 0 };
	ops[n++] = (struct op){ OP_SBRK, 0 };
	return n;
}

static void kernel_trace(void *arg)
{
	static struct op ops[MAXOPS];
	struct trace *t = arg;
	size_t n = make_sequence(ops);
	char *start = sbrk(0);

	/* No malloc from here on: nothing else moves the break. */
	for (size_t i = 0; i < n; i++) {
		char *prev = sbrk(0);

		if (ops[i].kind == OP_SBRK) {
			char *r = sbrk(ops[i].arg);

			t->v[i] = r == (void *)-1 ? -1 : r - start;
		} else {
			t->v[i] = brk(start + ops[i].arg) ? -1 : prev - start;
		}
	}
	t->n = (long)n;
	_exit(0);
}

Test(heap, same_results_as_kernel_brk, .timeout = 60)
{
	static struct op ops[MAXOPS];
	struct trace *kt = mmap(NULL, sizeof(*kt), PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_heap *h = make_heap(ctx, HEAP_MAX, 0);
	char *start = faultd_heap_base(h);
	size_t n = make_sequence(ops);

	cr_assert_eq(run_in_child(kernel_trace, kt), -1);
	cr_assert_eq(kt->n, (long)n);
	for (size_t i = 0; i < n; i++) {
		void *prev;
		long v;

		if (ops[i].kind == OP_SBRK) {
			v = faultd_heap_sbrk(h, ops[i].arg, &prev)
				    ? -1
				    : (char *)prev - start;
		} else {
			cr_assert_eq(faultd_heap_sbrk(h, 0, &prev), 0);
			v = faultd_heap_brk(h, start + ops[i].arg)
				    ? -1
				    : (char *)prev - start;
		}
		cr_assert_eq(v, kt->v[i], "op %zu (%s %ld): faultd %ld, kernel %ld",
			     i, ops[i].kind == OP_SBRK ? "sbrk" : "brk",
			     ops[i].arg, v, kt->v[i]);
	}
	faultd_ctx_destroy(ctx);
}

Test(heap, errors_leave_the_break_unchanged)
{
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_heap *h = make_heap(ctx, 16 * PAGE, 0);
	struct faultd_heap_opts bad = { .size = sizeof(bad), .max_size = 100 };
	struct faultd_heap *x;
	char *base = faultd_heap_base(h);
	void *prev;

	cr_assert_eq(faultd_heap_sbrk(h, 5 * PAGE, &prev), 0);
	/* Past the reservation: -ENOMEM, nothing moves. */
	cr_expect_eq(faultd_heap_sbrk(h, 12 * PAGE, &prev), -ENOMEM);
	cr_expect_eq(faultd_heap_brk(h, base + 16 * PAGE + 1), -ENOMEM);
	cr_expect_eq(faultd_heap_sbrk(h, INTPTR_MAX, &prev), -ENOMEM);
	/* Below the base: -EINVAL (the kernel would ignore it silently). */
	cr_expect_eq(faultd_heap_sbrk(h, -6 * (intptr_t)PAGE, &prev), -EINVAL);
	cr_expect_eq(faultd_heap_brk(h, base - 1), -EINVAL);
	cr_expect_eq(faultd_heap_sbrk(h, INTPTR_MIN, &prev), -EINVAL);
	cr_assert_eq(faultd_heap_sbrk(h, 0, &prev), 0);
	cr_expect_eq(prev, base + 5 * PAGE);
	/* Exactly at the end is fine. */
	cr_expect_eq(faultd_heap_brk(h, base + 16 * PAGE), 0);
	/* Bad arguments. */
	cr_expect_eq(faultd_heap_sbrk(NULL, 0, &prev), -EINVAL);
	cr_expect_eq(faultd_heap_sbrk(h, 0, NULL), -EINVAL);
	cr_expect_eq(faultd_heap_create(ctx, &bad, &x), -EINVAL);
	bad.max_size = 0;
	cr_expect_eq(faultd_heap_create(ctx, &bad, &x), -EINVAL);
	cr_expect_eq(faultd_heap_create(ctx, NULL, &x), -EINVAL);
	faultd_heap_destroy(NULL);
	faultd_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------
 * No old data ever reappears.
 */

Test(heap, zeros_after_shrink_then_grow_around_trim_threshold, .timeout = 60)
{
	const size_t trim = 16 * PAGE;
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_heap *h = make_heap(ctx, HEAP_MAX, trim);
	struct faultd_heap_stats s = { .size = sizeof(s) };
	uint64_t trims_before, expect_trims = 0;
	void *prev;

	for (size_t x = trim - 2 * PAGE - 1; x <= trim + 2 * PAGE + 1;
	     x += PAGE / 2 + 1) {
		unsigned char *p;
		size_t bad = 0;

		cr_assert_eq(faultd_heap_sbrk(h, PAGE, &prev), 0);
		cr_assert_eq(faultd_heap_sbrk(h, (intptr_t)x, &prev), 0);
		p = prev;
		memset(p, 0xff, x);
		faultd_heap_stats(h, &s);
		trims_before = s.trims;
		cr_assert_eq(faultd_heap_sbrk(h, -(intptr_t)x, &prev), 0);
		faultd_heap_stats(h, &s);
		/* Trimmed exactly when the freed present tail passes it. */
		uintptr_t keep = ((uintptr_t)p + PAGE - 1) & ~(PAGE - 1);
		uintptr_t end = ((uintptr_t)p + x + PAGE - 1) & ~(PAGE - 1);
		expect_trims = trims_before + (end - keep > trim);
		cr_expect_eq(s.trims, expect_trims, "x=%zu", x);
		cr_assert_eq(faultd_heap_sbrk(h, (intptr_t)x, &prev), 0);
		cr_assert_eq(prev, p);
		for (size_t i = 0; i < x; i++)
			bad += p[i] != 0;
		cr_expect_eq(bad, 0, "x=%zu: %zu old bytes reappeared", x, bad);
		cr_assert_eq(faultd_heap_sbrk(h, -(intptr_t)x - (intptr_t)PAGE,
					      &prev),
			     0);
	}
	faultd_heap_stats(h, &s);
	cr_expect_gt(s.trims, 0);
	cr_expect_gt(s.bytes_cleared, 0);
	faultd_ctx_destroy(ctx);
}

static void touch_above_break(void *arg)
{
	struct faultd_ctx *ctx;
	struct faultd_heap_opts o = { .size = sizeof(o), .max_size = HEAP_MAX };
	struct faultd_heap *h;
	volatile char *p;
	void *prev;

	(void)arg;
	if (faultd_ctx_create(NULL, &ctx) || faultd_heap_create(ctx, &o, &h) ||
	    faultd_heap_sbrk(h, 3 * PAGE, &prev))
		_exit(10);
	p = (volatile char *)prev;
	p[0] = 1;		/* below the break: fine */
	if (p[3 * PAGE - 1])	/* last byte below: zero */
		_exit(11);
	(void)p[5 * PAGE];	/* above: poisoned */
	_exit(12);
}

Test(heap, sigbus_above_the_break_in_child)
{
	int how = run_in_child(touch_above_break, NULL);

	cr_expect_eq(how, poison_signal(), "child ended with %d, expected %d",
		     how, poison_signal());
}

static __thread sigjmp_buf bus_jmp;

static void on_sigbus(int sig)
{
	siglongjmp(bus_jmp, sig);
}

Test(heap, growth_over_poisoned_pages_gives_zeros)
{
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_heap *h = make_heap(ctx, HEAP_MAX, 0);
	struct sigaction sa = { .sa_handler = on_sigbus };
	struct faultd_heap_stats s = { .size = sizeof(s) };
	volatile char *base = faultd_heap_base(h);
	void *prev;
	int sig;

	sigaction(poison_signal(), &sa, NULL);
	for (int k = 0; k < 3; k++) {
		sig = sigsetjmp(bus_jmp, 1);
		if (!sig)
			(void)base[(10 + k) * PAGE];
		cr_expect_eq(sig, poison_signal(), "access above the break %d",
			     k);
	}
	cr_assert_eq(faultd_heap_sbrk(h, 20 * PAGE, &prev), 0);
	sig = sigsetjmp(bus_jmp, 1);
	if (!sig) {
		for (int k = 0; k < 3; k++)
			cr_expect_eq(base[(10 + k) * PAGE], 0);
		base[11 * PAGE] = 7;
		cr_expect_eq(base[11 * PAGE], 7);
	}
	cr_expect_eq(sig, 0, "signal %d below the break after growth", sig);
	faultd_heap_stats(h, &s);
	cr_expect_eq(s.poisoned, 3);
	faultd_ctx_destroy(ctx);
}

/*
 * An access above the break is the heap's documented contract (SIGBUS),
 * not a failure of the library: it is logged at debug level, never as an
 * error or a warning.
 */
Test(heap, access_above_the_break_logged_at_debug_level)
{
	static struct log_capture log = LOG_CAPTURE_INIT;
	struct faultd_ctx_opts co = { .size = sizeof(co),
				      .log = log_capture_fn,
				      .log_arg = &log,
				      .log_level = FAULTD_LOG_DEBUG };
	struct sigaction sa = { .sa_handler = on_sigbus };
	struct faultd_ctx *ctx;
	struct faultd_heap *h;
	volatile char *base;
	int sig;

	cr_assert_eq(faultd_ctx_create(&co, &ctx), 0);
	h = make_heap(ctx, HEAP_MAX, 0);
	base = faultd_heap_base(h);
	sigaction(poison_signal(), &sa, NULL);
	sig = sigsetjmp(bus_jmp, 1);
	if (!sig)
		(void)base[7 * PAGE];
	cr_assert_eq(sig, poison_signal());
	faultd_ctx_destroy(ctx);
	cr_expect_eq(log_count(&log, "above the break", FAULTD_LOG_DEBUG), 1,
		     "%d lines", log.n);
	cr_expect_eq(log_count(&log, "", FAULTD_LOG_WARNING), 0,
		     "first line: level %d: %s", log.level[0], log.line[0]);
}

/* ------------------------------------------------------------------------
 * Concurrent sbrk: every allocation distinct, nothing lost.
 */

#define NALLOC 20000

struct allocator {
	struct faultd_heap *h;
	unsigned int id;
	uintptr_t start[NALLOC];
	size_t len[NALLOC];
	size_t n;
	int err;
};

static void *alloc_loop(void *arg)
{
	struct allocator *a = arg;
	unsigned int seed = a->id;

	for (size_t i = 0; i < NALLOC; i++) {
		size_t len = 8 + (size_t)rand_r(&seed) % 200;
		void *p;

		a->err = faultd_heap_sbrk(a->h, (intptr_t)len, &p);
		if (a->err)
			return NULL;
		memset(p, (int)a->id, len); /* touch: faults race too */
		a->start[i] = (uintptr_t)p;
		a->len[i] = len;
		a->n++;
	}
	return NULL;
}

static int cmp_start(const void *x, const void *y)
{
	const uintptr_t *a = x, *b = y;

	return (*a > *b) - (*a < *b);
}

Test(heap, concurrent_sbrk_no_lost_or_overlapping_allocation, .timeout = 60)
{
	static struct allocator al[4];
	static uintptr_t all[4 * NALLOC][2];
	struct faultd_ctx *ctx = ctx_new();
	struct faultd_heap *h = make_heap(ctx, HEAP_MAX, 0);
	pthread_t t[4];
	size_t n = 0, total = 0, bad = 0;
	void *end;

	for (unsigned int i = 0; i < 4; i++) {
		al[i] = (struct allocator){ .h = h, .id = i + 1 };
		pthread_create(&t[i], NULL, alloc_loop, &al[i]);
	}
	for (unsigned int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(al[i].err, 0);
		for (size_t k = 0; k < al[i].n; k++) {
			const unsigned char *p = (void *)al[i].start[k];

			all[n][0] = al[i].start[k];
			all[n++][1] = al[i].len[k];
			total += al[i].len[k];
			for (size_t b = 0; b < al[i].len[k]; b++)
				bad += p[b] != i + 1;
		}
	}
	qsort(all, n, sizeof(all[0]), cmp_start);
	/* Back to back from the base, no gap and no overlap. */
	cr_expect_eq(all[0][0], (uintptr_t)faultd_heap_base(h));
	for (size_t k = 1; k < n; k++)
		cr_assert_eq(all[k][0], all[k - 1][0] + all[k - 1][1],
			     "allocation %zu", k);
	cr_assert_eq(faultd_heap_sbrk(h, 0, &end), 0);
	cr_expect_eq((char *)end - (char *)faultd_heap_base(h), (long)total);
	cr_expect_eq(bad, 0, "%zu bytes overwritten by another thread", bad);
	faultd_ctx_destroy(ctx);
}
