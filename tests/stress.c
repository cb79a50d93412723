// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * stress.c - suite "stress", in the manner of the kernel's uffd-stress.
 *
 * Every page of a region holds a mutex and a counter. Worker threads lock
 * random (or sequential) pages and increment their counter, and a shadow
 * array records the expected value. Each round runs in a new region whose
 * pager copies every page from the previous round's region, so a lost or
 * misplaced page shows up as a wrong counter; the regions are swapped
 * between rounds. A background thread touches pages ahead of the workers
 * (racing faults on the same pages) and a churn thread creates and destroys
 * other regions all along. After each round every counter is checked
 * against its shadow.
 *
 * FAULTD_STRESS_SECONDS sets the length of each configuration (default 3).
 */
#include <criterion/criterion.h>

#include "helpers.h"

#define SPAGES 2048 /* pages per region: 8 MiB */
#define NWORKERS 3

struct spage {
	pthread_mutex_t lock; /* all-zero is an unlocked mutex in glibc */
	uint64_t count;
	uint64_t index;	      /* page number, written on first use */
};

struct stress {
	struct faultd_ctx *ctx;
	struct faultd_region *src, *dst;
	uint64_t shadow[SPAGES];
	pthread_mutex_t shadow_lock[SPAGES];
	bool sequential;
	atomic_bool stop;
	atomic_ulong increments;
	atomic_ulong churn_rounds;
	atomic_int errors;
};

static double stress_seconds(void)
{
	const char *s = getenv("FAULTD_STRESS_SECONDS");
	double v = s ? atof(s) : 0;

	return v > 0 ? v : 3.0;
}

/* The pager of round k+1: the page as round k left it. */
static ssize_t copy_from_src(void *arg, struct faultd_region *r, uint64_t off,
			     void *buf, size_t len)
{
	struct stress *st = arg;

	memcpy(buf, (char *)faultd_region_base(st->src) + off, len);
	return (ssize_t)len;
}

static struct spage *spage_at(struct faultd_region *r, size_t i)
{
	return (struct spage *)((char *)faultd_region_base(r) + i * PAGE);
}

struct worker {
	struct stress *st;
	unsigned int seed;
	size_t next;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct stress *st = w->st;

	while (!atomic_load(&st->stop)) {
		size_t i = st->sequential ? w->next++ % SPAGES
					  : (size_t)rand_r(&w->seed) % SPAGES;
		struct spage *p = spage_at(st->dst, i);

		pthread_mutex_lock(&p->lock);
		if (p->index != i && p->count)
			atomic_fetch_add(&st->errors, 1);
		p->index = i;
		p->count++;
		pthread_mutex_unlock(&p->lock);
		pthread_mutex_lock(&st->shadow_lock[i]);
		st->shadow[i]++;
		pthread_mutex_unlock(&st->shadow_lock[i]);
		atomic_fetch_add(&st->increments, 1);
	}
	return NULL;
}

/* Touch pages ahead of the workers: faults race on the same pages. */
static void *background_main(void *arg)
{
	struct stress *st = arg;
	volatile char sink = 0;

	for (size_t i = 0; i < SPAGES && !atomic_load(&st->stop); i += 3)
		sink ^= *(volatile char *)((char *)spage_at(st->dst, i) + 64);
	(void)sink;
	return NULL;
}

static void *churn_main(void *arg)
{
	struct stress *st = arg;
	struct faultd_region_opts o = { .size = sizeof(o),
					.length = 64 * PAGE,
					.max_length = 128 * PAGE };

	while (!atomic_load(&st->stop)) {
		struct faultd_region *r;

		if (faultd_region_create(st->ctx, &o, &r)) {
			atomic_fetch_add(&st->errors, 1);
			return NULL;
		}
		((volatile char *)faultd_region_base(r))[5 * PAGE] = 1;
		if (faultd_region_resize(r, 128 * PAGE))
			atomic_fetch_add(&st->errors, 1);
		faultd_region_destroy(r);
		atomic_fetch_add(&st->churn_rounds, 1);
	}
	return NULL;
}

static size_t verify_round(struct stress *st)
{
	size_t bad = 0;

	for (size_t i = 0; i < SPAGES; i++) {
		struct spage *p = spage_at(st->dst, i);

		bad += p->count != st->shadow[i];
		bad += p->count && p->index != i;
	}
	return bad;
}

static void run_round(struct stress *st, double seconds, size_t round)
{
	struct worker w[NWORKERS];
	pthread_t t[NWORKERS], bg, churn;
	uint64_t end = test_now_ns() + (uint64_t)(seconds * 1e9);
	size_t bad;

	atomic_store(&st->stop, false);
	for (int i = 0; i < NWORKERS; i++) {
		w[i] = (struct worker){ .st = st,
					.seed = (unsigned int)(round * 31 + i),
					.next = (size_t)i * SPAGES / NWORKERS };
		pthread_create(&t[i], NULL, worker_main, &w[i]);
	}
	pthread_create(&bg, NULL, background_main, st);
	pthread_create(&churn, NULL, churn_main, st);
	while (test_now_ns() < end && !atomic_load(&st->errors))
		usleep(10000); /* the round's length, not a synchronization */
	atomic_store(&st->stop, true);
	for (int i = 0; i < NWORKERS; i++)
		pthread_join(t[i], NULL);
	pthread_join(bg, NULL);
	pthread_join(churn, NULL);
	bad = verify_round(st);
	cr_assert_eq(bad, 0, "round %zu: %zu pages with a wrong counter",
		     round, bad);
}

/* The next round's region is served from this round's. */
static void swap_regions(struct stress *st, const struct faultd_pager *p)
{
	struct faultd_region_opts o = { .size = sizeof(o),
					.length = SPAGES * PAGE,
					.pager = p };

	faultd_region_destroy(st->src);
	st->src = st->dst;
	cr_assert_eq(faultd_region_create(st->ctx, &o, &st->dst), 0);
}

static void stress(unsigned int lock_mode, unsigned int handlers,
		   bool sequential)
{
	static struct stress st;
	struct faultd_ctx_opts co = { .size = sizeof(co),
				      .lock_mode = lock_mode,
				      .handler_threads = handlers };
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_CONCURRENT,
				  .fill = copy_from_src,
				  .arg = &st };
	struct faultd_region_opts first = { .size = sizeof(first),
					    .length = SPAGES * PAGE };
	double seconds = stress_seconds();
	size_t rounds = 0;
	uint64_t end;

	memset(&st, 0, sizeof(st));
	st.sequential = sequential;
	for (size_t i = 0; i < SPAGES; i++)
		pthread_mutex_init(&st.shadow_lock[i], NULL);
	cr_assert_eq(faultd_ctx_create(&co, &st.ctx), 0);
	/* Round 0: zero-filled pages are unlocked mutexes with count 0. */
	cr_assert_eq(faultd_region_create(st.ctx, &first, &st.dst), 0);
	end = test_now_ns() + (uint64_t)(seconds * 1e9);
	do {
		run_round(&st, seconds / 4, rounds++);
		swap_regions(&st, &p);
	} while (test_now_ns() < end);
	cr_expect_eq(atomic_load(&st.errors), 0);
	cr_expect_gt(atomic_load(&st.churn_rounds), 0);
	cr_log_info("%zu rounds, %lu increments, %lu churn rounds", rounds,
		    atomic_load(&st.increments), atomic_load(&st.churn_rounds));
	faultd_ctx_destroy(st.ctx);
}

Test(stress, random_region_lock, .timeout = 600)
{
	stress(FAULTD_LOCK_REGION, 2, false);
}

Test(stress, sequential_region_lock, .timeout = 600)
{
	stress(FAULTD_LOCK_REGION, 1, true);
}

Test(stress, random_global_lock, .timeout = 600)
{
	stress(FAULTD_LOCK_GLOBAL, 2, false);
}
