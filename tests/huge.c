// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * huge.c - suite "hugetlb": huge-page regions against the real kernel.
 *
 * Each test reserves the huge pages it needs through sysfs
 * (nr_hugepages), gives them back when it ends, and is skipped with the
 * reason when the system cannot provide them. Content is verified byte for
 * byte under concurrent faults, for anonymous hugetlb (UFFDIO_COPY) and
 * memfd-hugetlb (alias + UFFDIO_CONTINUE) regions.
 */
#include <criterion/criterion.h>
#include <sys/mman.h>

#include "helpers.h"
#include "hugepool.h"

TestSuite(hugetlb, .timeout = 120);

static const struct faultd_pager tag_pager = {
	.size = sizeof(struct faultd_pager),
	.flags = FAULTD_PAGER_CONCURRENT,
	.fill = region_pattern_fill,
};

static struct faultd_region *huge_region(struct faultd_ctx *ctx, bool memfd,
					 size_t ps, size_t len,
					 const struct faultd_pager *p)
{
	struct faultd_region_opts o = {
		.size = sizeof(o),
		.flags = FAULTD_REGION_HUGETLB | (memfd ? FAULTD_REGION_MEMFD : 0),
		.length = len,
		.pager = p,
		.page_size = ps,
	};
	struct faultd_region *r;
	int ret = faultd_region_create(ctx, &o, &r);

	cr_assert_eq(ret, 0, "create: %s", strerror(-ret));
	return r;
}

struct job {
	struct faultd_region *r;
	unsigned int idx, n;
	bool pager;
	size_t bad;
};

/* Threads read every 4 KiB of every huge page, starting apart. */
static void *read_all(void *arg)
{
	struct job *j = arg;
	const char *b = faultd_region_base(j->r);
	size_t len = faultd_region_size(j->r), pages = len / PAGE;

	for (size_t i = 0; i < pages; i++) {
		size_t pg = (i + j->idx * pages / j->n) % pages;
		const uint64_t *w = (const uint64_t *)(b + pg * PAGE);

		if (j->pager)
			j->bad += pattern_check((uintptr_t)j->r, pg * PAGE, w,
						PAGE);
		else
			for (size_t k = 0; k < PAGE / 8; k++)
				j->bad += w[k] != 0;
	}
	return NULL;
}

static void concurrent_read(struct faultd_region *r, bool pager)
{
	struct job j[3];
	pthread_t t[3];

	for (unsigned int i = 0; i < 3; i++) {
		j[i] = (struct job){ .r = r, .idx = i, .n = 3, .pager = pager };
		pthread_create(&t[i], NULL, read_all, &j[i]);
	}
	for (unsigned int i = 0; i < 3; i++) {
		pthread_join(t[i], NULL);
		cr_expect_eq(j[i].bad, 0, "thread %u: %zu bad words", i,
			     j[i].bad);
	}
}

static void content_test(bool memfd)
{
	struct faultd_ctx *ctx;
	struct faultd_region *z, *p;
	struct faultd_stats s = { .size = sizeof(s) };
	struct faultd_region *both[2];

	reserve_or_skip(HPAGE, 16);
	ctx = make_ctx(FAULTD_LOCK_REGION, 2);
	z = huge_region(ctx, memfd, 0, 8 * HPAGE, NULL);
	p = huge_region(ctx, memfd, HPAGE, 8 * HPAGE, &tag_pager);
	cr_expect_eq(faultd_region_page_size(z), HPAGE);
	concurrent_read(z, false);
	concurrent_read(p, true);
	both[0] = z;
	both[1] = p;
	for (int i = 0; i < 2; i++)
		cr_assert_eq(faultd_region_destroy(both[i]), 0);
	cr_assert_eq(faultd_ctx_stats(ctx, &s), 0);
	/*
	 * Each fault is counted once, as what it did. Anonymous: each huge
	 * page is filled exactly once; a racing fault sees EEXIST. memfd:
	 * each page is prepared once, by the handler that claimed it (its
	 * fill, even if another fault mapped the page first); the other
	 * faults on it map what it prepared, or see EEXIST.
	 */
	cr_expect_eq(s.zero_fills + s.pager_fills + s.mapped,
		     s.faults - s.no_region - s.eexist,
		     "faults %llu eexist %llu mapped %llu",
		     (unsigned long long)s.faults,
		     (unsigned long long)s.eexist,
		     (unsigned long long)s.mapped);
	cr_expect_eq(s.zero_fills, 8);
	cr_expect_eq(s.pager_fills, 8);
	if (!memfd)
		cr_expect_eq(s.mapped, 0);
	cr_expect_eq(s.poisoned, 0);
	faultd_ctx_destroy(ctx);
}

Test(hugetlb, anon_zero_and_pager_concurrent)
{
	content_test(false);
}

Test(hugetlb, memfd_minor_zero_and_pager_concurrent)
{
	content_test(true);
}

Test(hugetlb, memfd_discard_clears_in_place)
{
	struct faultd_ctx *ctx;
	struct faultd_region *z, *p;
	unsigned char *zb;
	size_t nonzero = 0;
	unsigned long free_before;

	reserve_or_skip(HPAGE, 8);
	ctx = make_ctx(FAULTD_LOCK_REGION, 1);
	z = huge_region(ctx, true, 0, 4 * HPAGE, NULL);
	p = huge_region(ctx, true, 0, 4 * HPAGE, &tag_pager);
	zb = faultd_region_base(z);
	memset(zb, 0x5a, 4 * HPAGE);
	memset(faultd_region_base(p), 0x5a, 4 * HPAGE);
	free_before = pool_read(HPAGE, "free_hugepages");
	cr_assert_eq(faultd_region_discard(z, HPAGE, 2 * HPAGE), 0);
	cr_assert_eq(faultd_region_discard(p, 0, 4 * HPAGE), 0);
	/* The pages stay in the page cache: none went back to the pool. */
	cr_expect_eq(pool_read(HPAGE, "free_hugepages"), free_before);
	for (size_t i = 0; i < 4 * HPAGE; i++)
		nonzero += zb[i] != (i >= HPAGE && i < 3 * HPAGE ? 0 : 0x5a);
	cr_expect_eq(nonzero, 0, "%zu bytes wrong after discard", nonzero);
	cr_expect_eq(pattern_check((uintptr_t)p, 0, faultd_region_base(p),
				   4 * HPAGE),
		     0);
	faultd_ctx_destroy(ctx);
}

Test(hugetlb, anon_discard_refaults)
{
	struct faultd_ctx *ctx;
	struct faultd_region *p;
	char *b;

	reserve_or_skip(HPAGE, 4);
	ctx = make_ctx(FAULTD_LOCK_REGION, 1);
	p = huge_region(ctx, false, 0, 2 * HPAGE, &tag_pager);
	b = faultd_region_base(p);
	memset(b, 0x5a, 2 * HPAGE);
	cr_assert_eq(faultd_region_discard(p, HPAGE, HPAGE), 0);
	cr_expect_eq(pattern_check((uintptr_t)p, HPAGE, b + HPAGE, HPAGE), 0);
	cr_expect_eq((unsigned char)b[17], 0x5a);
	faultd_ctx_destroy(ctx);
}

Test(hugetlb, no_free_pages_enomem_and_bad_sizes)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 1);
	struct faultd_region_opts o = { .size = sizeof(o),
					.flags = FAULTD_REGION_HUGETLB,
					.length = 4 * HPAGE };
	struct faultd_region *r;
	unsigned long total, free_pages;

	lock_pool();
	total = pool_read(HPAGE, "nr_hugepages");
	free_pages = pool_read(HPAGE, "free_hugepages");

	/* Unaligned lengths and unknown page sizes. */
	o.length = HPAGE + PAGE;
	cr_expect_eq(faultd_region_create(ctx, &o, &r), -EINVAL);
	o.length = 4 * HPAGE;
	o.page_size = 3 * HPAGE;
	cr_expect_eq(faultd_region_create(ctx, &o, &r), -EINVAL);
	o.page_size = 0;
	o.flags |= FAULTD_REGION_THP;
	cr_expect_eq(faultd_region_create(ctx, &o, &r), -EINVAL);
	o.flags &= ~FAULTD_REGION_THP;
	/* More pages than the pool has free: a clear -ENOMEM, both kinds. */
	o.length = (free_pages + 1) * HPAGE;
	cr_expect_eq(faultd_region_create(ctx, &o, &r), -ENOMEM);
	o.flags |= FAULTD_REGION_MEMFD;
	cr_expect_eq(faultd_region_create(ctx, &o, &r), -ENOMEM);
	cr_expect_eq(pool_read(HPAGE, "nr_hugepages"), total);
	faultd_ctx_destroy(ctx);
}

/*
 * With no huge page free (the pool emptied for the test, given back
 * after), a region of either kind fails with -ENOMEM and says, at error
 * level, how to reserve the pages it needs.
 */
Test(hugetlb, no_free_pages_logs_how_to_reserve)
{
	static struct log_capture log = LOG_CAPTURE_INIT;
	struct faultd_ctx_opts co = { .size = sizeof(co),
				      .log = log_capture_fn,
				      .log_arg = &log };
	struct faultd_region_opts o = { .size = sizeof(o),
					.flags = FAULTD_REGION_HUGETLB,
					.length = 2 * HPAGE };
	const char *hint = "reserve more with: echo 2 > "
			   "/sys/kernel/mm/hugepages/hugepages-2048kB/"
			   "nr_hugepages";
	struct faultd_region *r;
	struct faultd_ctx *ctx;

	lock_pool();
	if (!pool_change(HPAGE, 0))
		cr_skip_test("cannot write nr_hugepages (not root?)");
	if (pool_read(HPAGE, "free_hugepages") ||
	    pool_read(HPAGE, "resv_hugepages"))
		cr_skip_test("huge pages of 2048 kB are in use: cannot empty "
			     "the pool");
	cr_assert_eq(faultd_ctx_create(&co, &ctx), 0);
	cr_expect_eq(faultd_region_create(ctx, &o, &r), -ENOMEM);
	cr_expect_eq(log_count(&log, hint, FAULTD_LOG_ERR), 1,
		     "anonymous: %d lines, first: %s", log.n, log.line[0]);
	o.flags |= FAULTD_REGION_MEMFD;
	cr_expect_eq(faultd_region_create(ctx, &o, &r), -ENOMEM);
	cr_expect_eq(log_count(&log, hint, FAULTD_LOG_ERR), 2,
		     "memfd: %d lines in all", log.n);
	cr_expect_eq(log.n, 2);
	faultd_ctx_destroy(ctx);
}

/*
 * A memfd region of one 1 GiB page, the page reserved: creating it fails
 * the test only while the pool still has the page free (the pool is the
 * machine's; a process outside the tests may take what we reserved).
 * The pool's counters go with the failure.
 */
static struct faultd_region *gigantic_region(struct faultd_ctx *ctx)
{
	struct faultd_region_opts o = {
		.size = sizeof(o),
		.flags = FAULTD_REGION_HUGETLB | FAULTD_REGION_MEMFD,
		.length = GPAGE,
		.pager = &tag_pager,
		.page_size = GPAGE,
	};
	struct faultd_region *r;
	int ret = faultd_region_create(ctx, &o, &r);

	if (ret == -ENOMEM && !pool_read(GPAGE, "free_hugepages"))
		cr_skip_test("the 1 GiB page reserved was taken");
	cr_assert_eq(ret, 0, "create: %s (pool: %lu pages, %lu free, %lu "
		     "reserved, %lu surplus)", strerror(-ret),
		     pool_read(GPAGE, "nr_hugepages"),
		     pool_read(GPAGE, "free_hugepages"),
		     pool_read(GPAGE, "resv_hugepages"),
		     pool_read(GPAGE, "surplus_hugepages"));
	return r;
}

Test(hugetlb, gigantic_pages_where_available)
{
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	char *b;

	if (access("/sys/kernel/mm/hugepages/hugepages-1048576kB", F_OK))
		cr_skip_test("no 1 GiB huge pages on this system");
	reserve_or_skip(GPAGE, 1);
	ctx = make_ctx(FAULTD_LOCK_REGION, 1);
	r = gigantic_region(ctx);
	b = faultd_region_base(r);
	cr_expect_eq(pattern_check((uintptr_t)r, 123 * PAGE, b + 123 * PAGE,
				   PAGE),
		     0);
	cr_expect_eq(pattern_check((uintptr_t)r, GPAGE - PAGE,
				   b + GPAGE - PAGE, PAGE),
		     0);
	faultd_ctx_destroy(ctx);
}

Test(hugetlb, thp_region_fills_4k)
{
	struct faultd_ctx *ctx = make_ctx(FAULTD_LOCK_REGION, 1);
	struct faultd_region_opts o = { .size = sizeof(o),
					.flags = FAULTD_REGION_THP,
					.length = 4 * HPAGE,
					.pager = &tag_pager };
	struct faultd_region *r;
	struct faultd_stats s = { .size = sizeof(s) };

	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	cr_expect_eq(pattern_check((uintptr_t)r, 0, faultd_region_base(r),
				   4 * HPAGE),
		     0);
	cr_assert_eq(faultd_region_stats(r, &s), 0);
	/* userfaultfd fills THP-enabled memory 4 KiB at a time. */
	cr_expect_eq(s.pager_fills, 4 * HPAGE / PAGE);
	faultd_ctx_destroy(ctx);
}
