// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * handler.c - handler groups: a userfaultfd and the threads that read it.
 *
 * A region has a group of its own by default (per-region handler threads);
 * many small regions may share one. Each thread reads messages in batches of
 * up to ULOOP_BATCH through the read loop every server of faults shares
 * (uloop.c): the batch's non-cooperative events before its faults, the
 * faults it parked (EAGAIN: the address space was changing), then the
 * new faults. Threads are RCU readers (liburcu bp) for their whole life.
 *
 * Stopping: the group's stop flag is set and its eventfd written; threads
 * leave their loop at the next wake-up. A group stops only when no region
 * uses it, so no application thread can still be waiting on its faults; any
 * that raced with a destroy was woken by it and finds the memory gone.
 */
#define _LGPL_SOURCE
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>
#include <urcu/urcu-bp.h>

#include "internal.h"

/* Every handler can stage a 2 MiB page; groups for 1 GiB pages, more. */
#define GROUP_STAGING (2ul << 20)
/* How long a thread with parked faults sleeps before retrying them. */
#define PARKED_POLL_MS 1

static __thread struct handler *tls_handler;

bool in_handler_of(const struct faultd_ctx *ctx)
{
	return tls_handler && tls_handler->group->ctx == ctx;
}

/*
 * Non-cooperative events. The library's own regions enable only REMAP
 * (clone.c moves a frozen view into place); the daemon's sessions have
 * their own port ops. Anything read here is counted and, for FORK, its new
 * userfaultfd closed: the child's copy of a region is not served (regions
 * are MADV_DONTFORK, so there is none).
 */
static void handler_event(struct ureader *rd, struct uport *p,
			  const struct uffd_msg *m)
{
	struct handler *h = rd->owner;

	stat_inc(&h->stats, ST_EVENTS);
	if (m->event == UFFD_EVENT_FORK)
		close((int)m->arg.fork.ufd);
	fd_dbg(h->group->ctx, "handler %u: event %#x", h->slot, m->event);
}

static struct fault_ret handler_fault(struct ureader *rd, struct uport *p,
				      struct fault_req *req)
{
	return fault_handle(rd->owner, req);
}

static const struct uport_ops handler_port_ops = {
	.event = handler_event,
	.fault = handler_fault,
};

/* Sleep until a message, a stop request, or (with parked faults) a tick. */
static void handler_wait(struct handler *h)
{
	struct pollfd pfd[2] = {
		{ .fd = h->group->uffd, .events = POLLIN },
		{ .fd = h->group->stop_fd, .events = POLLIN },
	};

	poll(pfd, 2, h->rd.nr_parked ? PARKED_POLL_MS : -1);
}

/*
 * Spin on the queue for the group's busy-poll time: a fault that comes
 * within it is read and handled without the handler being woken. Returns
 * the number of messages handled, or 0.
 */
static ssize_t handler_spin(struct handler *h)
{
	struct faultd_group *g = h->group;
	uint64_t end = now_ns() + (uint64_t)g->pol.busy_poll_us * 1000;
	ssize_t n;

	do {
		n = uloop_service(&h->rd, &g->port);
		if (n > 0)
			return n;
	} while (now_ns() < end &&
		 !atomic_load_explicit(&g->stopping, memory_order_relaxed));
	return 0;
}

/*
 * After a batch the loop reads again at once while that finds messages,
 * and polls first once it found the queue empty: a thread whose faults
 * come one at a time then pays poll+read per fault, not read+poll+read.
 * A full batch means the queue is busy again: back to reading first.
 * With busy polling the thread spins before it sleeps.
 */
static void handler_loop(struct handler *h)
{
	struct faultd_group *g = h->group;
	bool poll_first = false;

	while (!atomic_load_explicit(&g->stopping, memory_order_acquire)) {
		ssize_t n = 0;

		if (poll_first && g->pol.busy_poll_us)
			n = handler_spin(h);
		if (poll_first && n <= 0)
			handler_wait(h);
		if (n <= 0)
			n = uloop_service(&h->rd, &g->port);
		if (n > 0) {
			if ((size_t)n == g->port.batch && g->port.batch > 1)
				poll_first = false;
			continue;
		}
		poll_first = true;
		if (n != -EAGAIN && n != -EINTR && n != 0)
			fd_err(g->ctx, "handler %u: read: %s", h->slot,
			       strerror((int)-n));
	}
}

static void *handler_main(void *arg)
{
	struct handler *h = arg;

	tls_handler = h;
	atomic_store_explicit(&h->tid, gettid(), memory_order_relaxed);
	urcu_bp_register_thread();
	handler_loop(h);
	tls_handler = NULL;
	return NULL;
}

/* The CPU of handler @slot, or -1: the scheduler's choice. */
static int handler_cpu(const struct faultd_group *g, unsigned int slot)
{
	cpu_set_t allowed;
	unsigned int seen = 0;

	if (g->pol.placement == FAULTD_PLACE_CPU)
		return (int)g->pol.cpu;
	if (g->pol.placement != FAULTD_PLACE_PER_CPU ||
	    sched_getaffinity(0, sizeof(allowed), &allowed) < 0)
		return -1;
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
		if (CPU_ISSET(cpu, &allowed) && seen++ == slot)
			return cpu;
	return -1;
}

/* Pin @h where the group's placement says: a CPU, or its node's CPUs. */
static int handler_place(struct faultd_group *g, struct handler *h)
{
	int cpu = handler_cpu(g, h->slot);
	cpu_set_t set;

	if (cpu >= 0) {
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
	} else if (g->pol.placement != FAULTD_PLACE_ANY ||
		   g->pol.numa_node < 0 ||
		   numa_node_cpus((unsigned int)g->pol.numa_node, &set) < 0) {
		return 0;
	}
	return -pthread_setaffinity_np(h->thread, sizeof(set), &set);
}

static int handler_start(struct faultd_group *g, unsigned int slot)
{
	struct handler *h = &g->handlers[slot];
	char name[16];
	int ret;

	h->group = g;
	h->slot = slot;
	h->rd.owner = h;
	h->staging_len = g->staging_len;
	/* Address space only: pages are allocated as fills touch them. A
	 * start that failed before (group_start_deferred()) left it mapped. */
	if (!h->staging)
		h->staging = mmap(NULL, h->staging_len, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
				  -1, 0);
	if (h->staging == MAP_FAILED) {
		h->staging = NULL;
		return -errno;
	}
	if (!inject_fail(INJ_THREAD, &ret))
		ret = -pthread_create(&h->thread, NULL, handler_main, h);
	if (ret < 0)
		return ret;
	h->started = true;
	/* Named and placed before anyone can see it run. */
	snprintf(name, sizeof(name), "faultd-h%u", slot % 10000000);
	pthread_setname_np(h->thread, name);
	return handler_place(g, h);
}

/* The number of CPUs this process may run on. */
static unsigned int usable_cpus(void)
{
	cpu_set_t allowed;

	if (sched_getaffinity(0, sizeof(allowed), &allowed) < 0)
		return 1;
	return (unsigned int)CPU_COUNT(&allowed);
}

static struct faultd_group *group_alloc(struct faultd_ctx *ctx,
					unsigned int nthreads)
{
	struct faultd_group *g = fd_calloc(1, sizeof(*g));

	if (!g)
		return NULL;
	g->handlers = fd_aligned_alloc(CACHELINE, (nthreads ? nthreads : 1) *
							  sizeof(*g->handlers));
	if (!g->handlers) {
		free(g);
		return NULL;
	}
	memset(g->handlers, 0, (nthreads ? nthreads : 1) * sizeof(*g->handlers));
	g->ctx = ctx;
	g->nthreads = nthreads;
	g->uffd = -1;
	g->stop_fd = -1;
	atomic_init(&g->stopping, false);
	return g;
}

/*
 * group_create() - open the group's userfaultfd and start its threads.
 * On failure everything started is stopped and freed.
 */
int group_create(struct faultd_ctx *ctx, const struct group_policy *pol,
		 bool implicit, struct faultd_group **gp)
{
	unsigned int nthreads = pol->placement == FAULTD_PLACE_PER_CPU
					? usable_cpus()
					: pol->threads;
	struct faultd_group *g;
	int ret;

	/* Only a same-thread region's group has no threads: no messages. */
	if ((!nthreads && !(pol->features & UFFD_FEATURE_SIGBUS)) ||
	    pol->placement > FAULTD_PLACE_PER_CPU ||
	    (pol->placement == FAULTD_PLACE_CPU && pol->cpu >= CPU_SETSIZE))
		return -EINVAL;
	g = group_alloc(ctx, nthreads);
	if (!g)
		return -ENOMEM;
	g->implicit = implicit;
	g->pol = *pol;
	g->features = pol->features;
	g->staging_len = pol->staging_len > GROUP_STAGING ? pol->staging_len
							  : GROUP_STAGING;
	g->uffd = uffd_open(g->features, true);
	if (g->uffd < 0) {
		ret = g->uffd;
		goto err;
	}
	uport_init(&g->port, g->uffd, &handler_port_ops, g,
		   (size_t)ctx->page_size, nthreads);
	g->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (g->stop_fd < 0) {
		ret = -errno;
		goto err;
	}
	for (unsigned int i = 0; i < nthreads && !pol->deferred; i++) {
		ret = handler_start(g, i);
		if (ret < 0)
			goto err;
	}
	*gp = g;
	return 0;
err:
	group_stop(g);
	group_free(g);
	return ret;
}

/*
 * group_start_deferred() - start the threads of a group made with
 * pol.deferred. Returns 0 or -errno (the threads started stay; a later
 * call starts the others).
 */
int group_start_deferred(struct faultd_group *g)
{
	for (unsigned int i = 0; i < g->nthreads; i++) {
		int ret;

		if (g->handlers[i].started)
			continue;
		ret = handler_start(g, i);
		if (ret < 0)
			return ret;
	}
	return 0;
}

/* Stop and join the group's threads. Context: not under map_lock. */
void group_stop(struct faultd_group *g)
{
	uint64_t one = 1;

	atomic_store_explicit(&g->stopping, true, memory_order_release);
	if (g->stop_fd >= 0)
		(void)!write(g->stop_fd, &one, sizeof(one));
	for (unsigned int i = 0; i < g->nthreads; i++)
		if (g->handlers[i].started)
			pthread_join(g->handlers[i].thread, NULL);
}

/* Free a stopped group; its threads' counters go to the context. */
void group_free(struct faultd_group *g)
{
	for (unsigned int i = 0; i < g->nthreads; i++) {
		struct handler *h = &g->handlers[i];

		if (h->started)
			ctx_retire_handler(g->ctx, h);
		if (h->staging)
			munmap(h->staging, h->staging_len);
	}
	if (g->stop_fd >= 0)
		close(g->stop_fd);
	if (g->uffd >= 0) {
		uport_destroy(&g->port);
		close(g->uffd);
	}
	free(g->handlers);
	free(g);
}

/* Add @g to ctx->groups. Context: map_lock (write) and stats_lock. */
void group_link_locked(struct faultd_group *g)
{
	struct faultd_ctx *ctx = g->ctx;

	assert_map_write_held(ctx);
	assert_mutex_held(&ctx->stats_lock);
	g->next = ctx->groups;
	if (g->next)
		g->next->pprev = &g->next;
	g->pprev = &ctx->groups;
	ctx->groups = g;
}

/* Take @g out of ctx->groups. Context: as group_link_locked(). */
void group_unlink_locked(struct faultd_group *g)
{
	assert_map_write_held(g->ctx);
	assert_mutex_held(&g->ctx->stats_lock);
	*g->pprev = g->next;
	if (g->next)
		g->next->pprev = g->pprev;
}

FAULTD_EXPORT int faultd_group_create(struct faultd_ctx *ctx,
				      const struct faultd_group_opts *opts,
				      struct faultd_group **gp)
{
	struct faultd_group_opts o = { .size = sizeof(o) };
	struct faultd_group *g;
	int ret;

	if (!ctx || !gp)
		return -EINVAL;
	if (opts) {
		ret = opts_copy(&o, sizeof(o), opts,
				offsetof(struct faultd_group_opts, threads) +
					sizeof(o.threads));
		if (ret < 0)
			return ret;
	}
	if (in_handler_of(ctx))
		return -EDEADLK;
	struct group_policy pol = {
		.numa_node = -1,
		.threads = o.threads ? o.threads : ctx->handler_threads,
		.placement = o.placement,
		.cpu = o.cpu,
		.busy_poll_us = o.busy_poll_us,
		.staging_len = o.max_page_size,
		.features = GROUP_FEATURES,
	};

	ret = group_create(ctx, &pol, false, &g);
	if (ret < 0)
		return ret;
	map_write_lock(ctx);
	pthread_mutex_lock(&ctx->stats_lock);
	group_link_locked(g);
	pthread_mutex_unlock(&ctx->stats_lock);
	map_write_unlock(ctx);
	*gp = g;
	return 0;
}

FAULTD_EXPORT int faultd_group_destroy(struct faultd_group *g)
{
	struct faultd_ctx *ctx;

	if (!g)
		return 0;
	ctx = g->ctx;
	if (in_handler_of(ctx))
		return -EDEADLK;
	map_write_lock(ctx);
	if (g->nregions) {
		map_write_unlock(ctx);
		return -EBUSY;
	}
	pthread_mutex_lock(&ctx->stats_lock);
	group_unlink_locked(g);
	pthread_mutex_unlock(&ctx->stats_lock);
	map_write_unlock(ctx);
	group_stop(g);
	group_free(g);
	return 0;
}
