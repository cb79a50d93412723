// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * ctx.c - contexts: lifecycle and context-wide statistics.
 *
 * A context owns the region map (map.c) and its lock (lock.c), its regions
 * and handler groups, the prefetch pool, a buffer of zeros and
 * /proc/self/pagemap; destroying it destroys its regions, then its groups.
 * The counters of regions and handler threads that are gone are folded
 * into it (ctx->retired) under stats_lock alone, so that a pager or a
 * write hook may read the statistics while it holds a region.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

/*
 * Enough zeros for the largest page a region may have (1 GiB). Address
 * space only: it is never written, so reading it maps the zero page.
 */
#define ZERO_BUF_LEN (1ul << 30)

FAULTD_EXPORT const char *faultd_version(void)
{
	return FAULTD_VERSION_STRING;
}

static int lock_mode_from_env(unsigned int mode, int *changed)
{
	const char *env = getenv("FAULTD_LOCK_MODE");

	*changed = 0;
	if (!env || !*env)
		return (int)mode;
	*changed = 1;
	if (!strcmp(env, "global"))
		return FAULTD_LOCK_GLOBAL;
	if (!strcmp(env, "region"))
		return FAULTD_LOCK_REGION;
	return -EINVAL;
}

static int ctx_apply_opts(struct faultd_ctx *ctx,
			  const struct faultd_ctx_opts *o)
{
	int mode, from_env;

	if (o->lock_mode > FAULTD_LOCK_GLOBAL)
		return -EINVAL;
	mode = lock_mode_from_env(o->lock_mode, &from_env);
	if (mode < 0)
		return mode;
	ctx->lock_mode = (unsigned int)mode;
	ctx->handler_threads = o->handler_threads ? o->handler_threads : 1;
	ctx->log = o->log;
	ctx->log_arg = o->log_arg;
	ctx->log_level = o->log_level ? o->log_level : FAULTD_LOG_WARNING;
	if (from_env)
		fd_info(ctx, "lock mode %s from FAULTD_LOCK_MODE",
			mode == FAULTD_LOCK_GLOBAL ? "global" : "region");
	return 0;
}

FAULTD_EXPORT int faultd_ctx_create(const struct faultd_ctx_opts *opts,
				    struct faultd_ctx **ctxp)
{
	struct faultd_ctx_opts o = { .size = sizeof(o) };
	struct faultd_ctx *ctx;
	int ret;

	if (!ctxp)
		return -EINVAL;
	if (opts) {
		ret = opts_copy(&o, sizeof(o), opts,
				offsetof(struct faultd_ctx_opts, log_level) +
					sizeof(int));
		if (ret < 0)
			return ret;
	}
	ret = uffd_probe(NULL);
	if (ret < 0)
		return ret;
	ctx = fd_calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ret = ctx_apply_opts(ctx, &o);
	if (ret < 0)
		goto err_free;
	ctx->page_size = sysconf(_SC_PAGESIZE);
	ctx->zero_page = mmap(NULL, ZERO_BUF_LEN, PROT_READ,
			      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
			      0);
	if (ctx->zero_page == MAP_FAILED) {
		ret = -errno;
		goto err_free;
	}
	ret = rwlock_init_writer_pref(&ctx->map_lock);
	if (ret < 0)
		goto err_unmap;
	ret = map_init(ctx);
	if (ret < 0)
		goto err_lock;
	pthread_mutex_init(&ctx->pager_lock, NULL);
	pthread_mutex_init(&ctx->stats_lock, NULL);
	pthread_mutex_init(&ctx->pf_lock, NULL);
	ctx->pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	*ctxp = ctx;
	return 0;

err_lock:
	pthread_rwlock_destroy(&ctx->map_lock);
err_unmap:
	munmap(ctx->zero_page, ZERO_BUF_LEN);
err_free:
	free(ctx);
	return ret;
}

FAULTD_EXPORT void faultd_ctx_destroy(struct faultd_ctx *ctx)
{
	if (!ctx)
		return;
	if (in_handler_of(ctx)) {
		fd_err(ctx, "faultd_ctx_destroy() from a handler thread of the "
			    "context: not destroyed");
		return;
	}
	while (ctx->regions)
		faultd_region_destroy(ctx->regions);
	while (ctx->groups)
		faultd_group_destroy(ctx->groups);
	pf_pool_destroy(ctx);
	pthread_mutex_destroy(&ctx->pf_lock);
	map_destroy(ctx);
	if (ctx->pagemap_fd >= 0)
		close(ctx->pagemap_fd);
	pthread_mutex_destroy(&ctx->stats_lock);
	pthread_mutex_destroy(&ctx->pager_lock);
	pthread_rwlock_destroy(&ctx->map_lock);
	munmap(ctx->zero_page, ZERO_BUF_LEN);
	free(ctx);
}

/* Fold the counters of a destroyed region or an exiting group in. */
void ctx_retire_stats_locked(struct faultd_ctx *ctx,
			     const struct stat_block *s, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		stat_sum(&ctx->retired, &s[i]);
}

/* Fold the counters and lock times of an exited handler thread in. */
void ctx_retire_handler(struct faultd_ctx *ctx, const struct handler *h)
{
	pthread_mutex_lock(&ctx->stats_lock);
	ctx_retire_stats_locked(ctx, &h->stats, 1);
	lock_stats_sum(&ctx->locks_retired, &h->locks);
	pthread_mutex_unlock(&ctx->stats_lock);
}

static void ctx_sum_live_locked(const struct faultd_ctx *ctx,
				struct stat_block *acc)
{
	for (const struct faultd_region *r = ctx->regions; r; r = r->next) {
		for (unsigned int i = 0; i < r->nr_stats; i++)
			stat_sum(acc, &r->stats[i]);
		stat_sum(acc, r->bg_stats);
	}
	for (const struct faultd_group *g = ctx->groups; g; g = g->next)
		for (unsigned int i = 0; i < g->nthreads; i++)
			stat_sum(acc, &g->handlers[i].stats);
}

/*
 * ctx_lock_stats() - the lock times of @ctx so far (see struct
 * lock_stats) added to @acc: the fault path's of every handler thread,
 * live or exited, and the writers'.
 * Context: any thread; takes stats_lock (a leaf), as faultd_ctx_stats().
 */
void ctx_lock_stats(struct faultd_ctx *ctx, struct lock_stats *acc)
{
	pthread_mutex_lock(&ctx->stats_lock);
	lock_stats_sum(acc, &ctx->locks_retired);
	lock_stats_sum(acc, &ctx->wlocks);
	for (const struct faultd_group *g = ctx->groups; g; g = g->next)
		for (unsigned int i = 0; i < g->nthreads; i++)
			lock_stats_sum(acc, &g->handlers[i].locks);
	pthread_mutex_unlock(&ctx->stats_lock);
}

/*
 * Under stats_lock alone (a leaf lock), not the context lock: a pager or
 * write hook may call this while holding a region, with a writer waiting.
 */
FAULTD_EXPORT int faultd_ctx_stats(const struct faultd_ctx *cctx,
				   struct faultd_stats *stats)
{
	struct faultd_ctx *ctx = (struct faultd_ctx *)cctx;
	struct stat_block *acc;

	if (!ctx || !stats || stats->size < sizeof(stats->size))
		return -EINVAL;
	acc = calloc(1, sizeof(*acc));
	if (!acc)
		return -ENOMEM;
	pthread_mutex_lock(&ctx->stats_lock);
	stat_sum(acc, &ctx->retired);
	ctx_sum_live_locked(ctx, acc);
	pthread_mutex_unlock(&ctx->stats_lock);
	stat_export(stats, acc);
	free(acc);
	return 0;
}
