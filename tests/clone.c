// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * clone.c - suite "uffd": copy-on-write clones.
 *
 * Isolation both ways for both implementations (memfd parents that share
 * pages, anonymous parents copied before write), with threads reading and
 * writing the child while others write the parent; every byte checked.
 * Memory sharing of the memfd path read from /proc/self/smaps. The first
 * COW fault's retry under the context lock happens once per clone. Parents
 * destroyed before their clones, clones of clones, bad input.
 */
#include <criterion/criterion.h>

#include "helpers.h"

#define NP 512 /* pages */

static const struct faultd_pager tag_pager = {
	.size = sizeof(struct faultd_pager),
	.flags = FAULTD_PAGER_CONCURRENT,
	.fill = pattern_pager_fill,
	.arg = (void *)77,
};

static struct faultd_region *parent_region(struct faultd_ctx *ctx,
					   uint64_t flags)
{
	struct faultd_region_opts o = { .size = sizeof(o),
					.flags = flags,
					.length = NP * PAGE,
					.pager = &tag_pager };
	struct faultd_region *r;

	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	return r;
}

static struct faultd_region *clone_of(struct faultd_region *p)
{
	struct faultd_clone_opts o = { .size = sizeof(o) };
	struct faultd_region *c;
	int ret = faultd_region_clone(p, &o, &c);

	if (ret == -EOPNOTSUPP)
		cr_skip_test("clones of this region need a kernel feature "
			     "that is missing here");
	cr_assert_eq(ret, 0, "clone: %s", strerror(-ret));
	return c;
}

/* The first word of page @pg of a region, as each side should see it. */
static uint64_t *word(struct faultd_region *r, size_t pg)
{
	return (uint64_t *)((char *)faultd_region_base(r) + pg * PAGE) + 3;
}

#define BEFORE(pg) (0xb0000000ull + (pg))      /* parent, before the clone */
#define PARENT_AFTER(pg) (0xa0000000ull + (pg)) /* parent, after */
#define CHILD(pg) (0xc0000000ull + (pg))	/* written by the child */

static uint64_t original(size_t pg)
{
	/* Even pages were written before the clone; odd ones are the
	 * pager's, some never touched by the parent at all. */
	return pg % 2 ? pattern_word(77, pg * PAGE + 24) : BEFORE(pg);
}

struct side {
	struct faultd_region *r;
	unsigned int idx;
	size_t bad;
};

/* The parent rewrites pages 0, 3, 6, ... while the clone runs. */
static void *parent_writer(void *arg)
{
	struct side *s = arg;

	for (size_t pg = 0; pg < NP; pg += 3)
		*word(s->r, pg) = PARENT_AFTER(pg);
	return NULL;
}

/* The child reads everything, and writes pages 1, 5, 9, ... */
static void *child_worker(void *arg)
{
	struct side *s = arg;

	for (size_t i = 0; i < NP; i++) {
		size_t pg = (i + s->idx * NP / 2) % NP;

		if (pg % 4 == 1 && s->idx == 0)
			*word(s->r, pg) = CHILD(pg);
		else if (pg % 4 != 1)
			s->bad += *word(s->r, pg) != original(pg);
	}
	return NULL;
}

static void isolation(uint64_t parent_flags)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 2);
	struct faultd_region *p = parent_region(ctx, parent_flags), *c;
	struct side ps, cs[2];
	pthread_t tp, tc[2];
	size_t bad = 0;

	/* Before the clone: even pages written, pages 1 mod 4 read. */
	for (size_t pg = 0; pg < NP; pg += 2)
		*word(p, pg) = BEFORE(pg);
	for (size_t pg = 1; pg < NP; pg += 4)
		cr_assert_eq(*word(p, pg), original(pg));
	c = clone_of(p);
	ps = (struct side){ .r = p };
	pthread_create(&tp, NULL, parent_writer, &ps);
	for (unsigned int i = 0; i < 2; i++) {
		cs[i] = (struct side){ .r = c, .idx = i };
		pthread_create(&tc[i], NULL, child_worker, &cs[i]);
	}
	pthread_join(tp, NULL);
	for (unsigned int i = 0; i < 2; i++) {
		pthread_join(tc[i], NULL);
		bad += cs[i].bad;
	}
	cr_expect_eq(bad, 0, "the child saw %zu words it should not", bad);
	/* Every page, both sides, at the end. */
	for (size_t pg = 0; pg < NP; pg++) {
		uint64_t want_p = pg % 3 == 0 ? PARENT_AFTER(pg) : original(pg);
		uint64_t want_c = pg % 4 == 1 ? CHILD(pg) : original(pg);

		cr_expect_eq(*word(p, pg), want_p, "parent page %zu", pg);
		cr_expect_eq(*word(c, pg), want_c, "child page %zu", pg);
	}
	/* The rest of each page too: the pager's content, untouched. */
	cr_expect_eq(pattern_check(77, 5 * PAGE + 64,
				   (char *)faultd_region_base(c) + 5 * PAGE + 64,
				   PAGE - 64),
		     0);
	faultd_ctx_destroy(ctx);
}

Test(clone, isolation_copy_path, .timeout = 60)
{
	isolation(0);
}

Test(clone, isolation_memfd_path, .timeout = 60)
{
	skip_without(FAULTD_HAVE_CONTINUE_WP, "UFFDIO_CONTINUE_MODE_WP (6.2)");
	isolation(FAULTD_REGION_MEMFD);
}

/* Shared_* and Anonymous kB of the mapping that starts at @addr. */
static void smaps_of(void *addr, long *shared, long *anon)
{
	char line[256], want[32];
	bool in = false;
	FILE *f = fopen("/proc/self/smaps", "r");
	long v;

	*shared = *anon = 0;
	snprintf(want, sizeof(want), "%lx-", (unsigned long)addr);
	while (f && fgets(line, sizeof(line), f)) {
		/* A mapping's first line starts "start-end "; the others
		 * "Name: value". */
		if (strchr(line, '-') && strchr(line, '-') < strchr(line, ' '))
			in = !strncmp(line, want, strlen(want));
		if (!in)
			continue;
		if (sscanf(line, "Shared_Clean: %ld", &v) == 1 ||
		    sscanf(line, "Shared_Dirty: %ld", &v) == 1)
			*shared += v;
		if (sscanf(line, "Anonymous: %ld", &v) == 1)
			*anon += v;
	}
	if (f)
		fclose(f);
}

Test(clone, memfd_path_shares_pages, .timeout = 60)
{
	skip_without(FAULTD_HAVE_CONTINUE_WP, "UFFDIO_CONTINUE_MODE_WP (6.2)");
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 1);
	struct faultd_region *p = parent_region(ctx, FAULTD_REGION_MEMFD), *c;
	const long size_kb = NP * PAGE / 1024, written_kb = 64 * PAGE / 1024;
	long shared, anon;
	volatile char sink = 0;

	for (size_t pg = 0; pg < NP; pg++)
		*word(p, pg) = BEFORE(pg);
	c = clone_of(p);
	for (size_t pg = 0; pg < NP; pg++)
		sink ^= *(volatile char *)word(c, pg) ^
			*(volatile char *)word(p, pg);
	/* Both map the same page-cache pages: shared, none anonymous. */
	smaps_of(faultd_region_base(c), &shared, &anon);
	cr_expect_eq(shared, size_kb, "clone: %ld kB shared", shared);
	cr_expect_eq(anon, 0);
	smaps_of(faultd_region_base(p), &shared, &anon);
	cr_expect_eq(shared, size_kb, "parent: %ld kB shared", shared);
	/* The clone's writes make private copies of exactly those pages. */
	for (size_t pg = 0; pg < 64; pg++)
		*word(c, pg) = CHILD(pg);
	smaps_of(faultd_region_base(c), &shared, &anon);
	cr_expect_eq(anon, written_kb, "clone: %ld kB anonymous", anon);
	cr_expect_eq(shared, size_kb - written_kb);
	smaps_of(faultd_region_base(p), &shared, &anon);
	cr_expect_eq(anon, 0);
	cr_expect_eq(*word(p, 0), BEFORE(0));
	(void)sink;
	faultd_ctx_destroy(ctx);
}

Test(clone, first_cow_retry_once_then_fast_path, .timeout = 60)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 1);
	struct faultd_region *p = parent_region(ctx, 0), *c;
	struct faultd_stats s = { .size = sizeof(s) };

	for (size_t pg = 0; pg < NP; pg += 2)
		*word(p, pg) = BEFORE(pg);
	c = clone_of(p);
	for (size_t pg = 0; pg < NP; pg++) {
		if (pg % 2)
			*word(c, pg) = CHILD(pg); /* write faults */
		else
			cr_assert_eq(*word(c, pg), BEFORE(pg)); /* reads */
	}
	for (size_t pg = 0; pg < NP; pg += 2)
		*word(c, pg) = CHILD(pg); /* COW of read-installed pages */
	cr_assert_eq(faultd_region_stats(c, &s), 0);
	cr_expect_eq(s.cow_prepare, 1);
	cr_expect_eq(s.retry, 1, "the first COW fault retried %llu times",
		     (unsigned long long)s.retry);
	cr_expect_eq(s.locked, 1);
	cr_expect_eq(s.fast, s.faults - 1);
	cr_expect_eq(s.cow_reads, NP / 2);
	cr_expect_eq(s.cow_faults, NP); /* NP/2 write-missing + NP/2 WP */
	cr_expect_eq(s.wp_faults, NP / 2);
	faultd_ctx_destroy(ctx);
}

Test(clone, parent_destroyed_first_and_clone_of_clone, .timeout = 60)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 2);
	struct faultd_region *p = parent_region(ctx, 0), *c, *g;
	struct faultd_stats s = { .size = sizeof(s) };

	for (size_t pg = 0; pg < NP; pg += 2)
		*word(p, pg) = BEFORE(pg);
	c = clone_of(p);
	for (size_t pg = 0; pg < NP; pg += 8)
		*word(c, pg) = CHILD(pg);
	g = clone_of(c);
	for (size_t pg = 0; pg < NP; pg += 3)
		*word(p, pg) = PARENT_AFTER(pg);
	cr_assert_eq(faultd_region_destroy(p), 0);
	for (size_t pg = 0; pg < NP; pg++) {
		uint64_t want = pg % 8 == 0 ? CHILD(pg) : original(pg);

		cr_expect_eq(*word(c, pg), want, "clone page %zu", pg);
		cr_expect_eq(*word(g, pg), want, "grandclone page %zu", pg);
	}
	cr_assert_eq(faultd_ctx_stats(ctx, &s), 0);
	cr_expect_eq(s.poisoned, 0);
	faultd_ctx_destroy(ctx);
}

Test(clone, bad_input_exact_errors)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 1);
	struct faultd_ctx *other = make_ctx(FAULTD_LOCK_REGION, 1);
	struct faultd_region *p = parent_region(ctx, 0), *c, *x;
	struct faultd_region *m = parent_region(ctx, FAULTD_REGION_MEMFD);
	struct faultd_clone_opts o = { .size = sizeof(o) };
	struct faultd_region_opts ao = { .size = sizeof(ao),
					 .flags = FAULTD_REGION_WP_ASYNC,
					 .length = 16 * PAGE };

	cr_expect_eq(faultd_region_clone(NULL, &o, &c), -EINVAL);
	cr_expect_eq(faultd_region_clone(p, &o, NULL), -EINVAL);
	o.ctx = other;
	cr_expect_eq(faultd_region_clone(p, &o, &c), -EXDEV);
	o.ctx = NULL;
	o.flags = FAULTD_REGION_MEMFD;
	cr_expect_eq(faultd_region_clone(p, &o, &c), -EINVAL);
	o.flags = 0;
	if (faultd_region_create(ctx, &ao, &x) == 0)
		cr_expect_eq(faultd_region_clone(x, &o, &c), -EOPNOTSUPP);
	c = clone_of(p);
	cr_expect_eq(faultd_region_resize(p, 2 * NP * PAGE), -EBUSY);
	cr_expect_eq(faultd_region_discard(p, 0, PAGE), -EBUSY);
	cr_expect_eq(faultd_region_unprotect(p, 0, PAGE), -EOPNOTSUPP);
	/* A tracked parent's protection is what keeps its clones' view. */
	x = parent_region(ctx, FAULTD_REGION_WP);
	clone_of(x);
	cr_expect_eq(faultd_region_unprotect(x, 0, PAGE), -EBUSY);
	cr_expect_eq(faultd_region_protect(x, 0, PAGE), 0);
	cr_expect_eq(faultd_region_discard(c, 0, PAGE), -EOPNOTSUPP);
	cr_assert_eq(faultd_region_destroy(c), 0);
	cr_expect_eq(faultd_region_resize(p, 2 * NP * PAGE) == -EBUSY, 0);
	/* A frozen region with pages of its own cannot share its base. */
	if (!(probe_have() & FAULTD_HAVE_CONTINUE_WP)) {
		cr_expect_eq(faultd_region_clone(m, &o, &x), -EOPNOTSUPP);
		faultd_ctx_destroy(other);
		faultd_ctx_destroy(ctx);
		return;
	}
	c = clone_of(m);
	*word(m, 3) = 1;
	cr_expect_eq(faultd_region_clone(m, &o, &x), -EBUSY);
	cr_expect_eq(faultd_region_resize(m, 2 * NP * PAGE), -EOPNOTSUPP);
	faultd_ctx_destroy(other);
	faultd_ctx_destroy(ctx);
}
