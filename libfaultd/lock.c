// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * lock.c - the context lock, and the writer-preferring rwlocks that it and
 * the region locks are.
 *
 * The context lock (ctx->map_lock) plays the part of mmap_lock: held for
 * writing by every change to the region map, for reading by the slow fault
 * path (internal.h has the lock order). The thread-local tls_locked_ctx
 * records which context's lock the calling thread holds, for
 * faultd_ctx_lock_held().
 *
 * Same-thread faults take the lock for reading in their SIGBUS handler in
 * FAULTD_LOCK_GLOBAL mode (sigbus.c): the thread-locals are initial-exec,
 * so that no access to them allocates, and the lock is a glibc rwlock,
 * atomics and a futex, which a handler may take as long as the code it
 * interrupted does not hold it.
 */
#include "internal.h"

#define TLS_IE __attribute__((tls_model("initial-exec")))

static __thread const struct faultd_ctx *tls_locked_ctx TLS_IE;
static __thread bool tls_locked_write TLS_IE; /* tls_locked_ctx's, written */

void map_read_lock(struct faultd_ctx *ctx)
{
	pthread_rwlock_rdlock(&ctx->map_lock);
	tls_locked_ctx = ctx;
	tls_locked_write = false;
}

/* map_read_lock() unless a writer holds or waits for the lock. */
bool map_read_trylock(struct faultd_ctx *ctx)
{
	if (pthread_rwlock_tryrdlock(&ctx->map_lock))
		return false;
	tls_locked_ctx = ctx;
	tls_locked_write = false;
	return true;
}

void map_read_unlock(struct faultd_ctx *ctx)
{
	tls_locked_ctx = NULL;
	pthread_rwlock_unlock(&ctx->map_lock);
}

/* Every write-lock is timed (struct lock_stats): writers change the map,
 * which costs system calls; two clock reads are nothing beside them. */
void map_write_lock(struct faultd_ctx *ctx)
{
	uint64_t asked = now_ns();

	pthread_rwlock_wrlock(&ctx->map_lock);
	ctx->write_since = now_ns();
	lock_record(&ctx->wlocks, LK_CTX_WRITE_WAIT, ctx->write_since - asked);
	tls_locked_ctx = ctx;
	tls_locked_write = true;
}

void map_write_unlock(struct faultd_ctx *ctx)
{
	lock_record(&ctx->wlocks, LK_CTX_WRITE_HOLD,
		    now_ns() - ctx->write_since);
	tls_locked_ctx = NULL;
	pthread_rwlock_unlock(&ctx->map_lock);
}

FAULTD_EXPORT int faultd_ctx_lock_held(const struct faultd_ctx *ctx)
{
	return ctx && tls_locked_ctx == ctx;
}

/* Does the calling thread hold @ctx's lock (@write: for writing)? */
bool map_lock_held(const struct faultd_ctx *ctx, bool write)
{
	return tls_locked_ctx == ctx && (tls_locked_write || !write);
}

/* A writer-preferring rwlock: a waiting writer makes try-locks fail. */
int rwlock_init_writer_pref(pthread_rwlock_t *lock)
{
	pthread_rwlockattr_t attr;
	int ret;

	pthread_rwlockattr_init(&attr);
	pthread_rwlockattr_setkind_np(
		&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	ret = pthread_rwlock_init(lock, &attr);
	pthread_rwlockattr_destroy(&attr);
	return -ret;
}
