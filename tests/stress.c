// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * stress.c - suite "stress", in the manner of the kernel's uffd-stress.
 *
 * Every page of a region holds a mutex and a counter. Worker threads lock
 * random (or sequential) pages and increment their counter, and a shadow
 * array records the expected value. Each round runs in a new region whose
 * pager copies every page from the previous round's region, so a lost or
 * misplaced page shows up as a wrong counter; the regions are swapped
 * between rounds. A background thread has the prefetch workers copy pages
 * in and touches pages ahead of the workers (racing faults on the same
 * pages), and a churn thread creates, resizes and destroys other regions
 * all along. After each round every counter is checked against its shadow.
 *
 * In regions with write tracking (FAULTD_REGION_WP) the handlers resolve
 * write-protect faults too: pages read in come in clean, and a tracker
 * thread write-protects random ranges and collects the dirty set all
 * round long; the union of the sets it collected must be exactly the
 * pages whose counter changed.
 *
 * The rounds run under each way the library's handlers wait for faults:
 * poll then read (one thread reading batches, or several reading one
 * message each), busy polling, one thread per CPU, a shared handler
 * group, and none at all - same-thread resolution in SIGBUS handlers.
 *
 * FAULTD_STRESS_SECONDS sets the length of each configuration (default 3),
 * in rounds of a quarter of it, or of ROUND_MAX_S in long runs: more
 * rounds, more swaps and checks.
 */
#include <criterion/criterion.h>

#include "helpers.h"

#define SPAGES 2048 /* pages per region: 8 MiB */
#define NWORKERS 3
#define BG_CHUNK 64 /* pages per prefetch request of the background */
#define ROUND_MAX_S 0.75

struct spage {
	pthread_mutex_t lock; /* all-zero is an unlocked mutex in glibc */
	uint64_t count;
	uint64_t index;	      /* page number, written on first use */
};

/* A configuration: how faults are resolved. */
struct sconfig {
	unsigned int lock_mode;	 /* enum faultd_lock_mode */
	unsigned int handlers;	 /* per region, or the group's */
	bool sequential;
	uint64_t flags;		 /* FAULTD_REGION_WP or _SAME_THREAD */
	unsigned int placement;	 /* enum faultd_placement */
	unsigned int busy_poll_us;
	bool group;		 /* regions share one handler group */
};

struct stress {
	struct sconfig cfg;
	struct faultd_ctx *ctx;
	struct faultd_group *group;
	struct faultd_region *src, *dst;
	uint64_t shadow[SPAGES];
	uint64_t shadow_start[SPAGES]; /* the shadow when the round began */
	pthread_mutex_t shadow_lock[SPAGES];
	uint64_t dirty[SPAGES / 64];   /* union of the round's dirty sets */
	atomic_bool stop;
	atomic_ulong increments;
	atomic_ulong churn_rounds;
	atomic_ulong collections;
	atomic_ulong prefetches;
	atomic_int errors;
};

static double stress_seconds(void)
{
	const char *s = getenv("FAULTD_STRESS_SECONDS");
	double v = s ? atof(s) : 0;

	return v > 0 ? v : 3.0;
}

static bool tracked(const struct stress *st)
{
	return st->cfg.flags & FAULTD_REGION_WP;
}

/*
 * The pager of round k+1: the page as round k left it. Every page of
 * round k was read by its check, so this never faults: it is safe in a
 * same-thread region's SIGBUS handler.
 */
static ssize_t copy_from_src(void *arg, struct faultd_region *r, uint64_t off,
			     void *buf, size_t len)
{
	struct stress *st = arg;

	(void)r;
	memcpy(buf, (char *)faultd_region_base(st->src) + off, len);
	return (ssize_t)len;
}

/*
 * Options of a region in this configuration. Churn regions are resized,
 * which same-thread regions cannot be: they get handlers of their own.
 */
static struct faultd_region_opts region_opts(struct stress *st, size_t len,
					     bool churn)
{
	struct faultd_region_opts o = {
		.size = sizeof(o),
		.length = len,
		.flags = st->cfg.flags,
		.placement = st->cfg.placement,
		.busy_poll_us = st->cfg.busy_poll_us,
		.group = st->group,
	};

	if (churn)
		o.flags &= ~FAULTD_REGION_SAME_THREAD;
	return o;
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
		size_t i = (st->cfg.sequential ? w->next++
					       : (size_t)rand_r(&w->seed)) %
			   SPAGES;
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

/*
 * Have the prefetch workers copy pages in, a chunk at a time, and touch
 * pages ahead of the workers: faults race on the same pages, and with
 * the workers' copies. A full prefetch queue is no error.
 */
static void *background_main(void *arg)
{
	struct stress *st = arg;

	for (size_t i = 0; i < SPAGES && !atomic_load(&st->stop);
	     i += BG_CHUNK) {
		int ret = faultd_region_prefetch(st->dst, i * PAGE,
						 BG_CHUNK * PAGE);

		if (ret && ret != -EAGAIN)
			atomic_fetch_add(&st->errors, 1);
		else if (!ret)
			atomic_fetch_add(&st->prefetches, 1);
		/* Touch pages by their last byte: the workers never write it. */
		for (size_t k = i + 1; k < i + BG_CHUNK; k += 3)
			(void)((volatile char *)spage_at(st->dst, k))[PAGE - 1];
	}
	return NULL;
}

/* Add the dirty set of the whole region to the round's union. */
static void collect_dirty(struct stress *st)
{
	uint64_t bm[SPAGES / 64];

	if (faultd_region_dirty(st->dst, 0, SPAGES * PAGE, bm) < 0) {
		atomic_fetch_add(&st->errors, 1);
		return;
	}
	for (size_t k = 0; k < SPAGES / 64; k++)
		st->dirty[k] |= bm[k];
	atomic_fetch_add(&st->collections, 1);
}

/*
 * Write-protect a random range, then collect: writers keep faulting on
 * write-protected pages all round long.
 */
static void *tracker_main(void *arg)
{
	struct stress *st = arg;
	unsigned int seed = 77;

	while (!atomic_load(&st->stop)) {
		size_t first = (size_t)rand_r(&seed) % SPAGES;
		size_t n = 1 + (size_t)rand_r(&seed) % (SPAGES - first);

		if (faultd_region_protect(st->dst, first * PAGE, n * PAGE))
			atomic_fetch_add(&st->errors, 1);
		collect_dirty(st);
	}
	return NULL;
}

static void *churn_main(void *arg)
{
	struct stress *st = arg;
	struct faultd_region_opts o = region_opts(st, 64 * PAGE, true);

	o.max_length = 128 * PAGE;
	while (!atomic_load(&st->stop)) {
		struct faultd_region *r;

		if (faultd_region_create(st->ctx, &o, &r)) {
			atomic_fetch_add(&st->errors, 1);
			return NULL;
		}
		((volatile char *)faultd_region_base(r))[5 * PAGE] = 1;
		if (faultd_region_resize(r, 128 * PAGE))
			atomic_fetch_add(&st->errors, 1);
		((volatile char *)faultd_region_base(r))[100 * PAGE] = 1;
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

/*
 * The pages reported dirty are exactly those written: a page is written
 * (its mutex taken) only to change its counter, and no write goes
 * unreported. Called after the last collection of the round.
 */
static size_t verify_dirty(struct stress *st)
{
	size_t bad = 0;

	for (size_t i = 0; i < SPAGES; i++) {
		bool written = st->shadow[i] != st->shadow_start[i];
		bool reported = st->dirty[i / 64] & (1ull << (i % 64));

		bad += written != reported;
	}
	return bad;
}

static void start_round(struct stress *st)
{
	memcpy(st->shadow_start, st->shadow, sizeof(st->shadow));
	memset(st->dirty, 0, sizeof(st->dirty));
	atomic_store(&st->stop, false);
}

static void run_round(struct stress *st, double seconds, size_t round)
{
	struct worker w[NWORKERS];
	pthread_t t[NWORKERS], bg, churn, tracker;
	uint64_t end = test_now_ns() + (uint64_t)(seconds * 1e9);
	size_t bad;

	start_round(st);
	for (int i = 0; i < NWORKERS; i++) {
		w[i] = (struct worker){ .st = st,
					.seed = (unsigned int)(round * 31 + i),
					.next = (size_t)i * SPAGES / NWORKERS };
		pthread_create(&t[i], NULL, worker_main, &w[i]);
	}
	pthread_create(&bg, NULL, background_main, st);
	pthread_create(&churn, NULL, churn_main, st);
	if (tracked(st))
		pthread_create(&tracker, NULL, tracker_main, st);
	while (test_now_ns() < end && !atomic_load(&st->errors))
		usleep(10000); /* the round's length, not a synchronization */
	atomic_store(&st->stop, true);
	for (int i = 0; i < NWORKERS; i++)
		pthread_join(t[i], NULL);
	pthread_join(bg, NULL);
	pthread_join(churn, NULL);
	if (tracked(st))
		pthread_join(tracker, NULL);
	/* The next round's pager reads this region: no copy may be left. */
	cr_assert_eq(faultd_region_prefetch_wait(st->dst), 0);
	cr_assert_eq(atomic_load(&st->errors), 0, "round %zu", round);
	bad = verify_round(st);
	cr_assert_eq(bad, 0, "round %zu: %zu pages with a wrong counter",
		     round, bad);
	if (tracked(st)) {
		collect_dirty(st);
		bad = verify_dirty(st);
		cr_assert_eq(bad, 0, "round %zu: %zu pages whose dirty bit "
			     "is wrong", round, bad);
	}
}

/* The next round's region is served from this round's. */
static void swap_regions(struct stress *st, const struct faultd_pager *p)
{
	struct faultd_region_opts o = region_opts(st, SPAGES * PAGE, false);

	o.pager = p;
	faultd_region_destroy(st->src);
	st->src = st->dst;
	cr_assert_eq(faultd_region_create(st->ctx, &o, &st->dst), 0);
}

static void skip_unsupported(const struct sconfig *cfg)
{
	if (cfg->flags & FAULTD_REGION_WP)
		skip_without(FAULTD_HAVE_WP, "write-protection");
	if (cfg->flags & FAULTD_REGION_SAME_THREAD)
		skip_without(FAULTD_HAVE_SIGBUS, "UFFD_FEATURE_SIGBUS");
}

static void stress_setup(struct stress *st, const struct sconfig *cfg)
{
	struct faultd_ctx_opts co = { .size = sizeof(co),
				      .lock_mode = cfg->lock_mode,
				      .handler_threads = cfg->handlers };
	struct faultd_group_opts go = { .size = sizeof(go),
					.threads = cfg->handlers,
					.placement = cfg->placement,
					.busy_poll_us = cfg->busy_poll_us };
	struct faultd_region_opts first;

	memset(st, 0, sizeof(*st));
	st->cfg = *cfg;
	for (size_t i = 0; i < SPAGES; i++)
		pthread_mutex_init(&st->shadow_lock[i], NULL);
	cr_assert_eq(faultd_ctx_create(&co, &st->ctx), 0);
	if (cfg->group)
		cr_assert_eq(faultd_group_create(st->ctx, &go, &st->group), 0);
	/* Round 0: zero-filled pages are unlocked mutexes with count 0. */
	first = region_opts(st, SPAGES * PAGE, false);
	cr_assert_eq(faultd_region_create(st->ctx, &first, &st->dst), 0);
}

static void stress(const struct sconfig *cfg)
{
	static struct stress st;
	struct faultd_pager p = {
		.size = sizeof(p),
		.flags = (cfg->flags & FAULTD_REGION_SAME_THREAD)
				 ? FAULTD_PAGER_SIGNAL_SAFE
				 : FAULTD_PAGER_CONCURRENT,
		.fill = copy_from_src,
		.arg = &st,
	};
	struct faultd_stats s = { .size = sizeof(s) };
	double seconds = stress_seconds();
	double round_s = seconds / 4 < ROUND_MAX_S ? seconds / 4 : ROUND_MAX_S;
	size_t rounds = 0;
	uint64_t end;

	skip_unsupported(cfg);
	stress_setup(&st, cfg);
	end = test_now_ns() + (uint64_t)(seconds * 1e9);
	do {
		run_round(&st, round_s, rounds++);
		swap_regions(&st, &p);
	} while (test_now_ns() < end);
	cr_expect_gt(atomic_load(&st.churn_rounds), 0);
	cr_assert_eq(faultd_ctx_stats(st.ctx, &s), 0);
	if (tracked(&st))
		cr_expect_gt(s.wp_faults, 0, "no write-protect fault");
	cr_log_info("%zu rounds, %zu counters checked, %lu increments, %lu "
		    "churn rounds; %llu faults (%llu write-protect, %llu "
		    "already resolved), %llu pages prefetched; %lu dirty sets "
		    "collected",
		    rounds, rounds * SPAGES, atomic_load(&st.increments),
		    atomic_load(&st.churn_rounds),
		    (unsigned long long)s.faults,
		    (unsigned long long)s.wp_faults,
		    (unsigned long long)s.eexist,
		    (unsigned long long)s.readahead,
		    atomic_load(&st.collections));
	faultd_region_destroy(st.dst);
	faultd_region_destroy(st.src);
	cr_assert_eq(faultd_group_destroy(st.group), 0);
	faultd_ctx_destroy(st.ctx);
}

/* Several handler threads, each reading one message at a time. */
Test(stress, random_region_lock, .timeout = 600)
{
	stress(&(struct sconfig){ .lock_mode = FAULTD_LOCK_REGION,
				  .handlers = 2 });
}

/* One handler thread reading batches. */
Test(stress, sequential_region_lock, .timeout = 600)
{
	stress(&(struct sconfig){ .lock_mode = FAULTD_LOCK_REGION,
				  .handlers = 1, .sequential = true });
}

Test(stress, random_global_lock, .timeout = 600)
{
	stress(&(struct sconfig){ .lock_mode = FAULTD_LOCK_GLOBAL,
				  .handlers = 2 });
}

Test(stress, wp_random_region_lock, .timeout = 600)
{
	stress(&(struct sconfig){ .lock_mode = FAULTD_LOCK_REGION,
				  .handlers = 2, .flags = FAULTD_REGION_WP });
}

Test(stress, wp_sequential_global_lock, .timeout = 600)
{
	stress(&(struct sconfig){ .lock_mode = FAULTD_LOCK_GLOBAL,
				  .handlers = 1, .sequential = true,
				  .flags = FAULTD_REGION_WP });
}

Test(stress, wp_busy_poll, .timeout = 600)
{
	stress(&(struct sconfig){ .lock_mode = FAULTD_LOCK_REGION,
				  .handlers = 2, .flags = FAULTD_REGION_WP,
				  .busy_poll_us = 50 });
}

Test(stress, wp_a_handler_per_cpu, .timeout = 600)
{
	stress(&(struct sconfig){ .lock_mode = FAULTD_LOCK_REGION,
				  .flags = FAULTD_REGION_WP,
				  .placement = FAULTD_PLACE_PER_CPU });
}

/* The rounds' regions and the churn's share two handler threads. */
Test(stress, wp_shared_group, .timeout = 600)
{
	stress(&(struct sconfig){ .lock_mode = FAULTD_LOCK_REGION,
				  .handlers = 2, .flags = FAULTD_REGION_WP,
				  .group = true });
}

/* No handler thread: each worker resolves its faults in SIGBUS. */
Test(stress, same_thread_sigbus, .timeout = 600)
{
	stress(&(struct sconfig){ .lock_mode = FAULTD_LOCK_REGION,
				  .handlers = 1,
				  .flags = FAULTD_REGION_SAME_THREAD });
}
