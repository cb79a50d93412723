// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * ctx.c - contexts: their creation and destruction.
 *
 * A context owns the region map (map.c) and its lock (lock.c), its regions
 * and handler groups, the prefetch pool, a buffer of zeros and
 * /proc/self/pagemap; destroying it destroys its regions, then its groups.
 * Its statistics are summed by stats.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"


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
