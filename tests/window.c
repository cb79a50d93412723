// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * window.c - suite "stress": no access reaches a region's memory before it
 * is registered with userfaultfd ("registered before accessible", mem.c).
 * An access in such a window is the kernel's to fill: with zeros, and for
 * good - the page is present from then on and the pager is never asked.
 *
 * Each test is a race between one thread that makes memory appear, round
 * after round, and toucher threads that read that memory all along: while
 * it is not there they get SIGSEGV and read again; once a read gets
 * through, the toucher checks every byte of the page against the pager's
 * content, then goes on to the next page.
 *   resize_*: grow a region (then shrink it back) while the touchers read
 *     beyond the old end;
 *   create_fixed_*: create a region at a fixed address (then destroy it)
 *     while the touchers read there;
 * for anonymous, memfd and same-thread regions, and for both hugetlb kinds
 * where huge pages can be had (skipped with the reason otherwise).
 *
 * FAULTD_STRESS_SECONDS sets the length of each test (default 0.5 s, for
 * CI; scripts/stress.sh gives it more), FAULTD_STRESS_ROUNDS a number of
 * rounds instead. Each test prints its rounds, the rounds in which a
 * toucher found a page without the pager's content, and how many such
 * pages it found: zeros, other content, reads that got SIGBUS, pages
 * that went away while checked - a toucher is never killed, so that a
 * failing test ends as a failure and gives its huge pages back.
 */
#include <criterion/criterion.h>
#include <setjmp.h>
#include <sys/mman.h>

#include "helpers.h"
#include "hugepool.h"

#define NTOUCHERS 2
#define DEFAULT_SECONDS 0.5
#define ROUND_TIMEOUT_MS 20000

TestSuite(window, .timeout = 600);

/* What a toucher found at a page. */
enum visit {
	VISIT_OK,	/* the pager's content */
	VISIT_WRONG,	/* other content */
	VISIT_ZEROS,	/* zeros in place of it */
	VISIT_SIGBUS,	/* a read got SIGBUS */
	VISIT_GONE,	/* the page went away while it was checked */
	VISIT_STOPPED,	/* the race was stopped first */
};

/* One race: where the touchers read, and what they must find there. */
struct race {
	char name[32];		/* the test: what, which kind */
	char *base;		/* the region's base: offsets are from here */
	uint64_t from, to;	/* the touchers read [from, to) */
	size_t ps;
	atomic_ulong tag;	/* the pager's content this round */
	atomic_int round;	/* the round the touchers are in; 0: none */
	atomic_int done;	/* touchers done, over all rounds */
	atomic_bool stop;
	const char *guard;	/* PROT_NONE: each toucher's first SIGSEGV */
	atomic_int warm;	/* touchers that took it */
	atomic_ulong round_bad;	/* pages without the content, this round */
	atomic_ulong bad;	/* ... over all rounds, of which: */
	atomic_ulong kinds[VISIT_STOPPED]; /* by enum visit */
	unsigned long rounds, bad_rounds;
};

/* ------------------------------------------------------------------------
 * Reading memory that may not be there yet.
 */

static __thread sigjmp_buf touch_jmp;
static __thread volatile sig_atomic_t touch_armed;

/*
 * A toucher's SIGSEGV goes back to its read: the memory is not there yet.
 * So does a SIGBUS that is not a same-thread region's fault (the library
 * resolves those), as a failure. Any other one is fatal.
 */
static void on_signal(int sig, siginfo_t *info, void *uc)
{
	struct sigaction dfl = { .sa_handler = SIG_DFL };

	if (sig == SIGBUS && faultd_sigbus(sig, info, uc))
		return;
	if (touch_armed)
		siglongjmp(touch_jmp, sig);
	sigaction(sig, &dfl, NULL); /* the access repeats and kills */
}

static void catch_signals(void)
{
	struct sigaction sa = { .sa_sigaction = on_signal,
				.sa_flags = SA_SIGINFO | SA_NODEFER };

	sigemptyset(&sa.sa_mask);
	cr_assert_eq(sigaction(SIGSEGV, &sa, NULL), 0);
	cr_assert_eq(sigaction(SIGBUS, &sa, NULL), 0);
}

static bool all_zero(const char *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i])
			return false;
	return true;
}

struct toucher {
	struct race *rc;
	unsigned int id;
	int round;		/* the round it is in */
	atomic_int spinning;	/* the last round in which it got SIGSEGV */
	pthread_t t;
};

/*
 * Read the page at @off until the read gets through (SIGSEGV: not there
 * yet), then check every byte of it against @tag's pattern.
 */
static enum visit visit_page(struct toucher *t, uint64_t off, uint64_t tag)
{
	struct race *rc = t->rc;
	/* Kept in memory across the jumps back (see setjmp(3)). */
	const char *volatile p = rc->base + off;
	volatile uint64_t at = off, want = tag;
	volatile bool there = false;
	enum visit v;

	touch_armed = 1;
	switch (sigsetjmp(touch_jmp, 1)) {
	case SIGBUS:
		touch_armed = 0;
		return VISIT_SIGBUS;
	case SIGSEGV:
		if (there) {
			touch_armed = 0;
			return VISIT_GONE;
		}
		atomic_store(&t->spinning, t->round);
		break;
	default:
		break;
	}
	if (atomic_load(&rc->stop)) {
		touch_armed = 0;
		return VISIT_STOPPED;
	}
	(void)*(const volatile char *)p;
	there = true;
	if (!pattern_check(want, at, p, rc->ps))
		v = VISIT_OK;
	else
		v = all_zero(p, rc->ps) ? VISIT_ZEROS : VISIT_WRONG;
	touch_armed = 0;
	return v;
}

/* Every page of [from, to) once, starting at this toucher's share. */
static void touch_round(struct toucher *t)
{
	struct race *rc = t->rc;
	uint64_t tag = atomic_load(&rc->tag);
	size_t n = (rc->to - rc->from) / rc->ps;

	for (size_t k = 0; k < n; k++) {
		size_t i = (k + t->id * n / NTOUCHERS) % n;
		enum visit v = visit_page(t, rc->from + i * rc->ps, tag);

		if (v == VISIT_STOPPED)
			return;
		if (v == VISIT_OK)
			continue;
		atomic_fetch_add(&rc->round_bad, 1);
		atomic_fetch_add(&rc->bad, 1);
		if (v != VISIT_WRONG)
			atomic_fetch_add(&rc->kinds[v], 1);
	}
}

/*
 * A sanitizer maps a thread's state for signals at the thread's first
 * signal (TSan: 72 KiB, its ThreadSignalContext; ASan, with
 * detect_stack_use_after_return, its fake stack, big and aligned) wherever
 * mmap() puts it. That was once into the hole create_race() had picked,
 * so the region could not be made there. Now hole() leaves room above the
 * hole for such maps, and each toucher also takes its first SIGSEGV here,
 * before the hole is picked.
 */
static void take_first_signal(struct toucher *t)
{
	touch_armed = 1;
	if (!sigsetjmp(touch_jmp, 1))
		(void)*(const volatile char *)t->rc->guard;
	touch_armed = 0;
	atomic_fetch_add(&t->rc->warm, 1);
}

static void *toucher_main(void *arg)
{
	struct toucher *t = arg;
	struct race *rc = t->rc;
	int seen = 0, k;

	take_first_signal(t);
	for (;;) {
		while ((k = atomic_load(&rc->round)) == seen &&
		       !atomic_load(&rc->stop))
			sched_yield();
		if (atomic_load(&rc->stop))
			return NULL;
		t->round = k;
		touch_round(t);
		seen = k;
		atomic_fetch_add(&rc->done, 1);
	}
}

/* ------------------------------------------------------------------------
 * Rounds.
 */

struct limit {
	unsigned long rounds; /* 0: until end_ns */
	uint64_t end_ns;
};

/* Taken once the race is set up: the huge page pool's lock can wait. */
static struct limit race_limit(void)
{
	const char *r = getenv("FAULTD_STRESS_ROUNDS");
	const char *s = getenv("FAULTD_STRESS_SECONDS");
	double secs = s ? atof(s) : 0;
	struct limit l = { .rounds = r ? strtoul(r, NULL, 10) : 0 };

	if (secs <= 0)
		secs = DEFAULT_SECONDS;
	l.end_ns = test_now_ns() + (uint64_t)(secs * 1e9);
	return l;
}

static bool more_rounds(const struct limit *l, unsigned long done)
{
	return l->rounds ? done < l->rounds : test_now_ns() < l->end_ns;
}

/* Returns once every toucher has taken its first signal. */
static void start_touchers(struct race *rc, struct toucher *t)
{
	void *guard = mmap(NULL, PAGE, PROT_NONE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(guard, MAP_FAILED);
	rc->guard = guard;
	catch_signals();
	for (unsigned int i = 0; i < NTOUCHERS; i++) {
		t[i] = (struct toucher){ .rc = rc, .id = i };
		cr_assert_eq(pthread_create(&t[i].t, NULL, toucher_main, &t[i]),
			     0);
	}
	while (atomic_load(&rc->warm) < NTOUCHERS)
		sched_yield();
	munmap(guard, PAGE);
}

static void stop_touchers(struct race *rc, struct toucher *t)
{
	atomic_store(&rc->stop, true);
	for (unsigned int i = 0; i < NTOUCHERS; i++)
		pthread_join(t[i].t, NULL);
}

/*
 * Round @k is on: the touchers read from now on. Returns once each of them
 * has been turned away (SIGSEGV) in this round: they are reading while the
 * caller makes the memory appear, not still on their way to it.
 */
static void round_begin(struct race *rc, struct toucher *t, int k,
			uint64_t tag)
{
	uint64_t end = test_now_ns() + ROUND_TIMEOUT_MS * 1000000ull;

	atomic_store(&rc->tag, tag);
	atomic_store(&rc->round, k);
	for (unsigned int i = 0; i < NTOUCHERS; i++)
		while (atomic_load(&t[i].spinning) != k) {
			if (test_now_ns() > end) {
				stop_touchers(rc, t);
				cr_assert_fail("%s: round %d: toucher %u does "
					       "not read", rc->name, k, i);
			}
			sched_yield();
		}
}

/* Wait until every toucher has read every page of round @k; count it. */
static void round_end(struct race *rc, struct toucher *t, int k)
{
	uint64_t end = test_now_ns() + ROUND_TIMEOUT_MS * 1000000ull;

	while (atomic_load(&rc->done) < k * NTOUCHERS) {
		if (test_now_ns() > end) {
			stop_touchers(rc, t);
			cr_assert_fail("%s: round %d: the touchers are stuck",
				       rc->name, k);
		}
		sched_yield();
	}
	rc->rounds++;
	if (atomic_exchange(&rc->round_bad, 0))
		rc->bad_rounds++;
}

static void race_report(struct race *rc)
{
	unsigned long bad = atomic_load(&rc->bad);
	unsigned long zeros = atomic_load(&rc->kinds[VISIT_ZEROS]);
	unsigned long sigbus = atomic_load(&rc->kinds[VISIT_SIGBUS]);
	unsigned long gone = atomic_load(&rc->kinds[VISIT_GONE]);

	fprintf(stderr,
		"window: %s: %lu rounds, %lu with pages not the pager's "
		"content, %lu such pages (%lu of zeros, %lu SIGBUS, %lu "
		"gone)\n",
		rc->name, rc->rounds, rc->bad_rounds, bad, zeros, sigbus, gone);
	cr_expect_gt(rc->rounds, 0);
	cr_expect_eq(bad, 0,
		     "%s: %lu pages in %lu of %lu rounds were not the pager's "
		     "content (%lu zero pages, %lu reads got SIGBUS, %lu "
		     "pages went away while checked)",
		     rc->name, bad, rc->bad_rounds, rc->rounds, zeros, sigbus,
		     gone);
}

/* ------------------------------------------------------------------------
 * The kinds of region.
 */

struct kind {
	const char *name;
	uint64_t flags;
	size_t ps;
	size_t pages;	  /* the touchers read this many pages ... */
	size_t keep;	  /* ... beyond the first @keep (resize) */
};

static const struct kind ANON = { "anon", 0, PAGE, 256, 64 };
static const struct kind MEMFD = { "memfd", FAULTD_REGION_MEMFD, PAGE, 256,
				   64 };
static const struct kind HUGETLB = { "hugetlb", FAULTD_REGION_HUGETLB, HPAGE,
				     6, 2 };
static const struct kind MEMFD_HUGETLB = {
	"memfd-hugetlb", FAULTD_REGION_MEMFD | FAULTD_REGION_HUGETLB, HPAGE, 6,
	2
};
static const struct kind SAME_THREAD = {
	"same-thread", FAULTD_REGION_SAME_THREAD, PAGE, 256, 64
};

/* Skip, saying why, what this kernel or machine cannot have. */
static void kind_or_skip(const struct kind *kd)
{
	if (kd->flags & FAULTD_REGION_SAME_THREAD)
		skip_without(FAULTD_HAVE_SIGBUS, "UFFD_FEATURE_SIGBUS");
	if (kd->flags & FAULTD_REGION_HUGETLB) {
		skip_without(FAULTD_HAVE_MISSING_HUGETLB,
			     "userfaultfd on hugetlb");
		if (kd->flags & FAULTD_REGION_MEMFD)
			skip_without(FAULTD_HAVE_MINOR_HUGETLB,
				     "minor faults on hugetlb");
		reserve_or_skip(HPAGE, kd->keep + kd->pages);
	}
}

/* ------------------------------------------------------------------------
 * Growing a region while threads touch beyond its old end.
 */

static void resize_race(const struct kind *kd)
{
	struct faultd_pager p =
		pattern_pager(0x5e12e, FAULTD_PAGER_CONCURRENT |
					       FAULTD_PAGER_SIGNAL_SAFE);
	size_t small = kd->keep * kd->ps, big = small + kd->pages * kd->ps;
	struct faultd_region_opts o = { .size = sizeof(o),
					.flags = kd->flags,
					.length = small,
					.max_length = big,
					.pager = &p };
	struct race rc = { .ps = kd->ps, .from = small, .to = big };
	struct toucher t[NTOUCHERS];
	struct limit l;
	struct faultd_region *r;
	struct faultd_ctx *ctx;
	int ret;

	snprintf(rc.name, sizeof(rc.name), "resize %s", kd->name);
	kind_or_skip(kd);
	ctx = make_ctx(FAULTD_LOCK_REGION, 2);
	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	rc.base = faultd_region_base(r);
	start_touchers(&rc, t);
	l = race_limit();
	for (int k = 1; more_rounds(&l, rc.rounds); k++) {
		round_begin(&rc, t, k, 0x5e12e);
		ret = faultd_region_resize(r, big);
		if (ret < 0)
			stop_touchers(&rc, t);
		cr_assert_eq(ret, 0, "grow: %s", strerror(-ret));
		round_end(&rc, t, k);
		cr_assert_eq(faultd_region_resize(r, small), 0);
	}
	stop_touchers(&rc, t);
	race_report(&rc);
	cr_expect_eq(pattern_check(0x5e12e, 0, rc.base, small), 0);
	faultd_ctx_destroy(ctx);
}

Test(window, resize_anon)
{
	resize_race(&ANON);
}

Test(window, resize_memfd)
{
	resize_race(&MEMFD);
}

Test(window, resize_hugetlb)
{
	resize_race(&HUGETLB);
}

Test(window, resize_memfd_hugetlb)
{
	resize_race(&MEMFD_HUGETLB);
}

/* ------------------------------------------------------------------------
 * Creating a region at a fixed address while threads touch it.
 */

/*
 * A free, aligned range of @len bytes: the bottom of a much larger range
 * just unmapped. mmap() fills free space from the top down, so whatever
 * is mapped meanwhile (a thread's stack, a sanitizer's own state) lands
 * at the top of that range, CUSHION bytes above the hole.
 */
#define CUSHION (1ul << 30)

static char *hole(size_t len, size_t align)
{
	size_t all = len + align + CUSHION;
	char *p = mmap(NULL, all, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	uintptr_t at;

	cr_assert_neq(p, MAP_FAILED);
	at = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
	munmap(p, all);
	return (char *)at;
}

/* The first mapping of this process in [@at, @at + @len), into @buf. */
static const char *mapped_at(const char *at, size_t len, char *buf, int n)
{
	FILE *f = fopen("/proc/self/maps", "r");
	unsigned long lo, hi;

	snprintf(buf, n, "nothing");
	while (f && fgets(buf, n, f))
		if (sscanf(buf, "%lx-%lx", &lo, &hi) == 2 &&
		    lo < (uintptr_t)at + len && hi > (uintptr_t)at) {
			buf[strcspn(buf, "\n")] = 0;
			fclose(f);
			return buf;
		}
	if (f)
		fclose(f);
	return "nothing";
}

static void create_race(const struct kind *kd)
{
	size_t len = kd->pages * kd->ps;
	struct faultd_region_opts o = { .size = sizeof(o),
					.flags = kd->flags | FAULTD_REGION_FIXED,
					.length = len };
	struct race rc = { .ps = kd->ps, .to = len };
	struct toucher t[NTOUCHERS];
	struct limit l;
	struct faultd_ctx *ctx;
	int ret;

	snprintf(rc.name, sizeof(rc.name), "create %s", kd->name);
	kind_or_skip(kd);
	ctx = make_ctx(FAULTD_LOCK_REGION, 2);
	/* The touchers' stacks first: they could take the hole. */
	start_touchers(&rc, t);
	rc.base = o.addr = hole(len, kd->ps);
	l = race_limit();
	for (int k = 1; more_rounds(&l, rc.rounds); k++) {
		/* Content of its own each round: no page may outlive one. */
		struct faultd_pager p = pattern_pager(
			(uint64_t)k, FAULTD_PAGER_CONCURRENT |
					     FAULTD_PAGER_SIGNAL_SAFE);
		struct faultd_region *r;

		o.pager = &p;
		round_begin(&rc, t, k, (uint64_t)k);
		ret = faultd_region_create(ctx, &o, &r);
		if (ret < 0) {
			char in[256];

			stop_touchers(&rc, t);
			cr_assert_fail("%s: round %d: at %p: %s (mapped there: "
				       "%s)", rc.name, k, o.addr, strerror(-ret),
				       mapped_at(o.addr, len, in, sizeof(in)));
		}
		cr_assert_eq(faultd_region_base(r), o.addr);
		round_end(&rc, t, k);
		cr_assert_eq(faultd_region_destroy(r), 0);
	}
	stop_touchers(&rc, t);
	race_report(&rc);
	faultd_ctx_destroy(ctx);
}

Test(window, create_fixed_anon)
{
	create_race(&ANON);
}

Test(window, create_fixed_memfd)
{
	create_race(&MEMFD);
}

Test(window, create_fixed_same_thread)
{
	create_race(&SAME_THREAD);
}

Test(window, create_fixed_hugetlb)
{
	create_race(&HUGETLB);
}

Test(window, create_fixed_memfd_hugetlb)
{
	create_race(&MEMFD_HUGETLB);
}
