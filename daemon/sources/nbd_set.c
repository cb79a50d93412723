// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * nbd_set.c - the connection sets of the host (nbd_set.h, nbd_int.h):
 * reads and read-ahead through the chunk cache, counters, and the list
 * of sets that the opens of one URI and options share - making a set
 * (the first connection, the export's description, the threads) and
 * freeing it when its last source goes.
 */
#include <errno.h>
#include <libnbd.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "nbd_int.h"

#define READ_STACK 32		/* chunks a read holds without malloc() */
#define CONNS_MAX 64
#define DEPTH_MAX 1024
#define CHUNK_MIN 4096u
#define CHUNK_MAX (32u << 20)	/* more and some servers hang up */
#define CONNECT_TIMEOUT_MS 10000

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reg_cv = PTHREAD_COND_INITIALIZER;
static struct nbd_set *reg_sets;
static void (*reg_log)(void *arg, const char *line);
static void *reg_log_arg;

/* ---- reads ---- */

/* Wait for @c, then copy its part of [off, off + len) into @buf. */
static int chunk_copy_locked(struct nbd_set *set, struct nbd_chunk *c,
			     uint64_t off, char *buf, size_t len)
{
	uint64_t start = c->idx << set->shift;
	uint64_t from = off > start ? off : start;
	uint64_t to = min_u64(off + len, start + c->len);

	while (c->state != CH_READY && c->state != CH_FAILED)
		pthread_cond_wait(&c->cv, &set->lock);
	if (c->state == CH_FAILED)
		return -EIO;
	/* A held READY chunk neither changes nor goes. */
	pthread_mutex_unlock(&set->lock);
	memcpy(buf + (from - off), c->buf + (from - start), to - from);
	pthread_mutex_lock(&set->lock);
	return 0;
}

int nset_read(struct nbd_set *set, uint64_t off, void *buf, size_t len,
	      bool urgent)
{
	uint64_t first = off >> set->shift;
	size_t n = (size_t)(((off + len - 1) >> set->shift) - first + 1), got;
	struct nbd_chunk *one[READ_STACK];
	struct nbd_chunk **cs = n <= READ_STACK ? one : calloc(n, sizeof(*cs));
	int err = 0;

	if (!cs)
		return -ENOMEM;
	pthread_mutex_lock(&set->lock);
	set->st.reads++;
	if (ncache_dead_locked(set))
		err = -EIO;
	for (got = 0; !err && got < n; got++) {
		cs[got] = ncache_get_locked(set, first + got,
					    urgent ? GET_URGENT : GET_READ);
		if (!cs[got])
			err = -ENOMEM;
	}
	got -= err == -ENOMEM;
	if (!err)
		nio_dispatch_locked(set);
	for (size_t i = 0; !err && i < got; i++)
		err = chunk_copy_locked(set, cs[i], off, buf, len);
	for (size_t i = 0; i < got; i++)
		ncache_put_locked(set, cs[i]);
	if (err)
		set->st.failed_reads += err == -EIO;
	else
		set->st.bytes_read += len;
	pthread_mutex_unlock(&set->lock);
	if (cs != one)
		free(cs);
	return err;
}

void nset_willneed(struct nbd_set *set, uint64_t off, uint64_t len)
{
	uint64_t end = min_u64(off + len, set->info.ex.size), lo, hi;

	pthread_mutex_lock(&set->lock);
	for (uint64_t i = off >> set->shift; off < end && i << set->shift < end &&
	     !ncache_dead_locked(set); i++) {
		uint64_t start = i << set->shift;

		ncache_hull(set, start, min_u64(start + set->info.chunk,
						set->info.ex.size), &lo, &hi);
		if (lo < hi && !ncache_get_locked(set, i, GET_AHEAD))
			break;
	}
	nio_dispatch_locked(set);
	pthread_mutex_unlock(&set->lock);
}

void nset_stats(struct nbd_set *set, struct src_nbd_stats *out)
{
	uint32_t users, inflight = 0;

	pthread_mutex_lock(&reg_lock);
	users = set->users;
	pthread_mutex_unlock(&reg_lock);
	pthread_mutex_lock(&set->lock);
	for (uint32_t i = 0; i < set->nconns; i++)
		inflight += set->conns[i].inflight;
	*out = set->st;
	out->cached_bytes = set->cached + set->nspare * (uint64_t)set->info.chunk;
	out->queued = set->urgent.n + set->normal.n + set->delayed.n;
	out->queued_urgent = set->urgent.n;
	out->in_flight = inflight;
	out->conns_up = set->up;
	out->conns = set->nconns;
	out->chunk = set->info.chunk;
	out->users = users;
	pthread_mutex_unlock(&set->lock);
}

const struct nbd_set_info *nset_info(const struct nbd_set *set)
{
	return &set->info;
}

/* ---- making and freeing a set ---- */

static bool pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

/* @in with its defaults, checked; strings copied into @o (opts_free()
 * frees them, also after a failure). */
static int opts_resolve(const struct src_nbd_opts *in, struct src_nbd_opts *o,
			char *why, size_t why_len)
{
	*o = (struct src_nbd_opts){ 0 };
	if (in && in->size < sizeof(in->size))
		return why_set(why, why_len, -EINVAL, "options without their size");
	if (in)
		memcpy(o, in, in->size < sizeof(*o) ? in->size : sizeof(*o));
	o->size = sizeof(*o);
	o->tls_psk_file = o->tls_psk_file ? strdup(o->tls_psk_file) : NULL;
	o->tls_username = o->tls_username ? strdup(o->tls_username) : NULL;
	o->tls_certificates = o->tls_certificates ?
			      strdup(o->tls_certificates) : NULL;
	if (in && ((in->tls_psk_file && !o->tls_psk_file) ||
		   (in->tls_username && !o->tls_username) ||
		   (in->tls_certificates && !o->tls_certificates)))
		return why_set(why, why_len, -ENOMEM, "out of memory");
	o->conns = o->conns ? o->conns : SRC_NBD_CONNS;
	o->depth = o->depth ? o->depth : SRC_NBD_DEPTH;
	o->chunk = o->chunk ? o->chunk : SRC_NBD_CHUNK;
	o->cache_bytes = o->cache_bytes ? o->cache_bytes : SRC_NBD_CACHE;
	o->io_timeout_ms = o->io_timeout_ms ? o->io_timeout_ms
					    : SRC_NBD_IO_TIMEOUT_MS;
	o->connect_timeout_ms = o->connect_timeout_ms ? o->connect_timeout_ms
						      : CONNECT_TIMEOUT_MS;
	o->retry = retry_policy_resolve(&o->retry);
	if (o->conns > CONNS_MAX || o->depth > DEPTH_MAX ||
	    !pow2(o->chunk) || o->chunk < CHUNK_MIN || o->chunk > CHUNK_MAX ||
	    o->cache_bytes < o->chunk)
		return why_set(why, why_len, -EINVAL, "options out of range: at most "
			   "%u connections and %u reads in flight each, a "
			   "chunk a power of two from %u to %u bytes, a cache "
			   "of one chunk at least", CONNS_MAX, DEPTH_MAX,
			   CHUNK_MIN, CHUNK_MAX);
	return 0;
}

static void opts_free(struct src_nbd_opts *o)
{
	free((char *)o->tls_psk_file);
	free((char *)o->tls_username);
	free((char *)o->tls_certificates);
}

/* The TLS settings of the URI, or of the options. */
static int target_make(struct nbd_set *set, const char *uri, char *why,
		       size_t why_len)
{
	struct nbd_target *t = &set->target;
	const struct nbd_uri *u = &t->uri;
	int ret = nbd_uri_parse(uri, &t->uri, why, why_len);

	if (ret)
		return ret;
	if ((u->tls_psk_file || u->tls_certificates) &&
	    !set->o.allow_local_files)
		return why_set(why, why_len, -EPERM, "the URI names a local file "
			   "(%s=), which these options do not allow",
			   u->tls_psk_file ? "tls-psk-file" : "tls-certificates");
	t->psk_file = u->tls_psk_file ? u->tls_psk_file : set->o.tls_psk_file;
	t->username = u->user ? u->user : set->o.tls_username;
	t->certificates = u->tls_certificates ? u->tls_certificates
					      : set->o.tls_certificates;
	set->info.canon = u->canon;
	return 0;
}

static void set_free(struct nbd_set *set);

/* What sets are shared by: the server and every option but the log. */
static char *key_make(const struct nbd_set *set)
{
	const struct nbd_target *t = &set->target;
	const struct src_nbd_opts *o = &set->o;
	char *key;

	if (asprintf(&key, "%s\n%s\n%s\n%s\n%u %u %u %llu %u %u %u %u %u %u %u",
		     t->uri.canon, t->psk_file ? t->psk_file : "",
		     t->username ? t->username : "",
		     t->certificates ? t->certificates : "", o->conns, o->depth,
		     o->chunk, (unsigned long long)o->cache_bytes,
		     o->io_timeout_ms, o->connect_timeout_ms,
		     o->retry.backoff_min_ms, o->retry.backoff_max_ms,
		     o->retry.deadline_ms, o->retry.read_retries,
		     o->allow_local_files) < 0)
		return NULL;
	return key;
}

static int set_alloc(const char *uri, const struct src_nbd_opts *in,
		     struct nbd_set **out, char *why, size_t why_len)
{
	struct src_nbd_opts o;
	struct nbd_set *set;
	int ret = opts_resolve(in, &o, why, why_len);

	if (ret) {
		opts_free(&o);
		return ret;
	}
	set = calloc(1, sizeof(*set) + o.conns * sizeof(set->conns[0]));
	if (!set) {
		opts_free(&o);
		return why_set(why, why_len, -ENOMEM, "out of memory");
	}
	pthread_mutex_init(&set->lock, NULL);
	set->o = o;
	set->rp = o.retry;
	set->info.o = &set->o;
	ret = target_make(set, uri, why, why_len);
	if (!ret && !(set->key = key_make(set)))
		ret = why_set(why, why_len, -ENOMEM, "out of memory");
	if (ret) {
		set_free(set);
		return ret;
	}
	pthread_mutex_lock(&reg_lock);
	set->log = (struct retry_log){
		.fn = o.log ? o.log : reg_log,
		.arg = o.log ? o.log_arg : reg_log_arg,
		.who = set->info.canon,
	};
	pthread_mutex_unlock(&reg_lock);
	*out = set;
	return 0;
}

/* The first connection; with @wait, attempts until the deadline. */
static int connect_first(struct nbd_set *set, bool wait,
			 struct nbd_handle **h, struct nbd_export *ex,
			 char *why, size_t why_len)
{
	uint64_t end = retry_now_ns() + set->rp.deadline_ms * MS;
	uint32_t tries = 0;
	int ret;

	for (;;) {
		uint64_t next, now;
		struct timespec ts;

		ret = nconn_connect(&set->target, set->o.connect_timeout_ms,
				    -1, NULL, h, ex, why, why_len);
		now = retry_now_ns();
		if (!ret || !wait || now >= end)
			return ret;
		next = min_u64(now + retry_backoff_ns(&set->rp, tries++), end);
		ts.tv_sec = (time_t)((next - now) / 1000000000ull);
		ts.tv_nsec = (long)((next - now) % 1000000000ull);
		nanosleep(&ts, NULL);
	}
}

/* The chunk size: the options', within the server's block sizes. */
static int chunk_pick(struct nbd_set *set, char *why, size_t why_len)
{
	const struct nbd_export *ex = &set->info.ex;
	uint32_t c = set->o.chunk, maxb = CHUNK_MAX;

	if (ex->max_block && ex->max_block < maxb)
		maxb = ex->max_block;
	while (!pow2(maxb))
		maxb &= maxb - 1;	/* down to a power of two */
	if (ex->min_block > c)
		c = ex->min_block;
	if (ex->pref_block > c && pow2(ex->pref_block))
		c = ex->pref_block;
	if (c > maxb)
		c = maxb;
	if ((ex->min_block && !pow2(ex->min_block)) || c < ex->min_block ||
	    c < CHUNK_MIN)
		return why_set(why, why_len, -EINVAL, "the server's block sizes "
			   "(minimum %u, maximum %u) leave no chunk size from "
			   "%u bytes", ex->min_block, ex->max_block, CHUNK_MIN);
	set->info.chunk = c;
	set->info.align = ex->min_block ? ex->min_block : 512;
	set->shift = (uint32_t)__builtin_ctz(c);
	return 0;
}

static int conn_init(struct nbd_set *set, struct nbd_conn *c)
{
	*c = (struct nbd_conn){ .set = set, .state = C_DOWN, .efd = -1 };
	pthread_cond_init(&c->idle, NULL);
	c->slots = calloc(set->o.depth, sizeof(*c->slots));
	if (!c->slots)
		return -ENOMEM;
	for (uint32_t i = 0; i < set->o.depth; i++)
		c->slots[i].conn = c;
	c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return c->efd < 0 ? -errno : 0;
}

/* The connections, the first one on @h (taken on success), and their
 * threads, which block every signal: the daemon's threads take them. */
static int conns_start(struct nbd_set *set, struct nbd_handle *h)
{
	uint32_t n = set->info.ex.multi_conn ? set->o.conns : 1;
	sigset_t all, old;
	int ret = 0;

	/* set_free() undoes what conn_init() did, also half of it. */
	for (uint32_t i = 0; !ret && i < n; i++) {
		ret = conn_init(set, &set->conns[i]);
		set->nconns = i + 1;
	}
	if (ret)
		return ret;
	set->conns[0].h = h;
	set->conns[0].state = C_UP;
	set->conns[0].was_up = true;
	set->up = 1;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (uint32_t i = 0; !ret && i < set->nconns; i++) {
		ret = -pthread_create(&set->conns[i].thread, NULL, nio_main,
				      &set->conns[i]);
		set->conns[i].started = !ret;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return ret;
}

static void set_free(struct nbd_set *set)
{
	atomic_store(&set->stopping, true);
	for (uint32_t i = 0; i < set->nconns; i++)
		if (set->conns[i].started)
			(void)eventfd_write(set->conns[i].efd, 1);
	for (uint32_t i = 0; i < set->nconns; i++) {
		struct nbd_conn *c = &set->conns[i];

		if (c->started)
			pthread_join(c->thread, NULL);
		if (c->h)
			nio_close(c);
		if (c->efd >= 0)
			close(c->efd);
		free(c->slots);
		pthread_cond_destroy(&c->idle);
	}
	ncache_destroy(set);
	exts_free(&set->info.data);
	nbd_uri_free(&set->target.uri);
	opts_free(&set->o);
	free(set->key);
	pthread_mutex_destroy(&set->lock);
	free(set);
}

/* Connect, describe the export, start the connections. */
static int set_open(struct nbd_set *set, bool wait, char *why, size_t why_len)
{
	struct nbd_handle *h = NULL;
	int ret;

	ret = connect_first(set, wait, &h, &set->info.ex, why, why_len);
	if (ret)
		return ret;
	ret = chunk_pick(set, why, why_len);
	if (!ret)
		ret = nconn_extents(h, &set->info.ex, set->o.io_timeout_ms,
				    &set->info.data, why, why_len);
	if (!ret && ncache_init(set))
		ret = why_set(why, why_len, -ENOMEM, "out of memory");
	if (!ret && (ret = conns_start(set, h)))
		why_set(why, why_len, ret, "starting the connections: %s",
		    strerror(-ret));
	if (ret && !set->conns[0].h)
		nbd_close(h);
	return ret;
}

static struct nbd_set *reg_find_locked(const char *key)
{
	struct nbd_set *s = reg_sets;

	while (s && strcmp(s->key, key))
		s = s->next;
	return s;
}

static void reg_del_locked(struct nbd_set *set)
{
	struct nbd_set **p = &reg_sets;

	while (*p != set)
		p = &(*p)->next;
	*p = set->next;
}

int nset_get(const char *uri, const struct src_nbd_opts *o, bool wait,
	     struct nbd_set **out, char *why, size_t why_len)
{
	struct nbd_set *set = NULL, *s;
	int ret = set_alloc(uri, o, &set, why, why_len);

	if (ret)
		return ret;
	pthread_mutex_lock(&reg_lock);
	while ((s = reg_find_locked(set->key)) && s->opening)
		pthread_cond_wait(&reg_cv, &reg_lock);
	if (s) {
		s->users++;
		pthread_mutex_unlock(&reg_lock);
		*out = s;
		goto free_set;
	}
	set->opening = true;
	set->users = 1;
	set->next = reg_sets;
	reg_sets = set;
	pthread_mutex_unlock(&reg_lock);
	ret = set_open(set, wait, why, why_len);
	pthread_mutex_lock(&reg_lock);
	set->opening = false;
	if (ret)
		reg_del_locked(set);
	pthread_cond_broadcast(&reg_cv);
	pthread_mutex_unlock(&reg_lock);
	if (ret)
		goto free_set;
	*out = set;
	return 0;

free_set:
	set_free(set);
	return ret;
}

void nset_put(struct nbd_set *set)
{
	pthread_mutex_lock(&reg_lock);
	if (--set->users) {
		pthread_mutex_unlock(&reg_lock);
		return;
	}
	reg_del_locked(set);
	pthread_mutex_unlock(&reg_lock);
	set_free(set);
}

void nset_default_log(void (*fn)(void *arg, const char *line), void *arg)
{
	pthread_mutex_lock(&reg_lock);
	reg_log = fn;
	reg_log_arg = arg;
	pthread_mutex_unlock(&reg_lock);
}
