// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * nbd_cache.c - the chunks of a connection set (nbd_int.h): the table
 * that finds them, the queues they wait in to be sent, the LRU list of
 * those nobody holds, their states, and the bound on their memory (what
 * nobody holds is dropped, least recently used first). Every function
 * here is called with set->lock held and never waits.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbd_int.h"

#define SPARE_MAX 64		/* chunk buffers kept for use again */

/* ---- lists ---- */

static void list_del(struct nbd_chunk *c)
{
	struct chunk_list *l = c->list;

	if (!l)
		return;
	*(c->prev ? &c->prev->next : &l->head) = c->next;
	*(c->next ? &c->next->prev : &l->tail) = c->prev;
	c->prev = c->next = NULL;
	c->list = NULL;
	l->n--;
}

static void list_add(struct chunk_list *l, struct nbd_chunk *c, bool front)
{
	list_del(c);
	c->list = l;
	c->prev = front ? NULL : l->tail;
	c->next = front ? l->head : NULL;
	*(c->prev ? &c->prev->next : &l->head) = c;
	*(c->next ? &c->next->prev : &l->tail) = c;
	l->n++;
}

/* ---- the chunk table ---- */

static uint64_t slot_of(const struct nbd_set *set, uint64_t idx)
{
	return (idx * 0x9e3779b97f4a7c15ull >> 17) & set->mask;
}

static struct nbd_chunk *table_find(struct nbd_set *set, uint64_t idx)
{
	struct nbd_chunk *c = set->table[slot_of(set, idx)];

	while (c && c->idx != idx)
		c = c->hnext;
	return c;
}

static void table_add(struct nbd_set *set, struct nbd_chunk *c)
{
	struct nbd_chunk **head = &set->table[slot_of(set, c->idx)];

	c->hnext = *head;
	*head = c;
}

static void table_del(struct nbd_set *set, struct nbd_chunk *c)
{
	struct nbd_chunk **p = &set->table[slot_of(set, c->idx)];

	while (*p && *p != c)
		p = &(*p)->hnext;
	if (*p)
		*p = c->hnext;
}

/* ---- chunks ---- */

/* The hull of the data in [start, end), cut to whole minimum blocks. */
void ncache_hull(const struct nbd_set *set, uint64_t start,
		 uint64_t end, uint64_t *lo, uint64_t *hi)
{
	const struct data_exts *x = &set->info.data;
	const struct data_ext *d = x->ext;
	uint64_t mb = set->info.align;
	size_t a = exts_find(x, start);

	*lo = *hi = start;
	if (a == x->n || d[a].start >= end)
		return;
	*lo = d[a].start > start ? d[a].start & ~(mb - 1) : start;
	while (a + 1 < x->n && d[a + 1].start < end)
		a++;
	*hi = min_u64((d[a].end < end ? d[a].end : end) + mb - 1, end);
	*hi = *hi == end ? end : *hi & ~(mb - 1);
}

/*
 * Chunk buffers are used again rather than given back: a fresh one costs
 * a page fault and a cleared page per 4 KiB, a fifth of the CPU time of a
 * sequential read. Spares count against the bound as chunks do.
 */
static char *buf_get_locked(struct nbd_set *set)
{
	return set->nspare ? set->spare[--set->nspare]
			   : malloc(set->info.chunk);
}

static void buf_put_locked(struct nbd_set *set, char *buf)
{
	uint64_t held = set->cached + (set->nspare + 1ull) * set->info.chunk;

	if (set->nspare < SPARE_MAX && held <= set->o.cache_bytes)
		set->spare[set->nspare++] = buf;
	else
		free(buf);
}

void ncache_free_locked(struct nbd_set *set, struct nbd_chunk *c)
{
	list_del(c);
	if (c->state != CH_FAILED)
		table_del(set, c);
	set->cached -= c->len;
	pthread_cond_destroy(&c->cv);
	buf_put_locked(set, c->buf);
	free(c);
}

/*
 * Make room for a chunk by dropping the least recently used that nobody
 * holds. Returns whether it fits the bound now.
 */
static bool room_locked(struct nbd_set *set)
{
	while (set->cached + set->info.chunk > set->o.cache_bytes &&
	       set->lru.tail) {
		ncache_free_locked(set, set->lru.tail);
		set->st.evictions++;
	}
	return set->cached + set->info.chunk <= set->o.cache_bytes;
}

static struct nbd_chunk *chunk_new_locked(struct nbd_set *set, uint64_t idx,
					  bool urgent)
{
	uint64_t start = idx << set->shift, lo, hi;
	struct nbd_chunk *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->len = (uint32_t)min_u64(set->info.chunk, set->info.ex.size - start);
	c->buf = buf_get_locked(set);
	if (!c->buf) {
		free(c);
		return NULL;
	}
	ncache_hull(set, start, start + c->len, &lo, &hi);
	c->lo = (uint32_t)(lo - start);
	c->hi = (uint32_t)(hi - start);
	/* Outside the hull the block status said zeros. */
	memset(c->buf, 0, c->lo);
	memset(c->buf + c->hi, 0, c->len - c->hi);
	c->idx = idx;
	c->urgent = urgent;
	c->seq = set->seq++;
	pthread_cond_init(&c->cv, NULL);
	set->cached += c->len;
	table_add(set, c);
	if (c->lo == c->hi)
		c->state = CH_READY;	/* all zeros: nothing to fetch */
	else
		list_add(urgent ? &set->urgent : &set->normal, c, false);
	return c;
}


/* A chunk found in the table, asked for again. */
static void chunk_touch_locked(struct nbd_set *set, struct nbd_chunk *c,
			       enum get_mode m)
{
	if (m == GET_URGENT && !c->urgent && c->state != CH_READY) {
		c->urgent = true;
		set->st.urgent++;
		if (c->state == CH_QUEUED)
			list_add(&set->urgent, c, false);
	}
	if (m == GET_AHEAD)
		return;
	if (c->state == CH_READY) {
		set->st.hits++;
		if (!c->refs)
			list_del(c);	/* out of the LRU while held */
	} else {
		set->st.joins++;
	}
	c->refs++;
}

/* The chunk @idx, made and queued if it is not in the table. NULL: no
 * memory, or (GET_AHEAD) no room. */
struct nbd_chunk *ncache_get_locked(struct nbd_set *set, uint64_t idx,
				    enum get_mode m)
{
	struct nbd_chunk *c = table_find(set, idx);

	if (c) {
		chunk_touch_locked(set, c, m);
		return c;
	}
	if (!room_locked(set) && m == GET_AHEAD)
		return NULL;
	c = chunk_new_locked(set, idx, m == GET_URGENT);
	if (!c)
		return NULL;
	if (m == GET_URGENT)
		set->st.urgent++;
	if (m != GET_AHEAD)
		c->refs++;
	else if (c->state == CH_READY)
		list_add(&set->lru, c, true);
	return c;
}

void ncache_ready_locked(struct nbd_set *set, struct nbd_chunk *c)
{
	c->state = CH_READY;
	set->st.fetches++;
	set->st.bytes_fetched += c->hi - c->lo;
	pthread_cond_broadcast(&c->cv);
	if (!c->refs)
		list_add(&set->lru, c, true);
}

static void chunk_fail_locked(struct nbd_set *set, struct nbd_chunk *c)
{
	list_del(c);
	table_del(set, c);
	c->state = CH_FAILED;
	pthread_cond_broadcast(&c->cv);
	if (!c->refs)
		ncache_free_locked(set, c);
}

/* The server answered @c with @err: ask again after the backoff, or give
 * it up (retry.h). */
void ncache_error_locked(struct nbd_set *set, struct nbd_chunk *c,
			 int err)
{
	uint64_t start = c->idx << set->shift;
	char what[64];

	snprintf(what, sizeof(what), "bytes %#llx-%#llx",
		 (unsigned long long)(start + c->lo),
		 (unsigned long long)(start + c->hi));
	if (!retry_read_failed(&set->rp, &set->st.retry, &set->log, ++c->tries,
			       err, what, retry_now_ns(), &c->due)) {
		chunk_fail_locked(set, c);
		return;
	}
	c->state = CH_DELAYED;
	list_add(&set->delayed, c, false);
}

/* Back in its queue, @front: ahead of what is there (a lost send). */
void ncache_requeue_locked(struct nbd_set *set, struct nbd_chunk *c,
			   bool front)
{
	c->state = CH_QUEUED;
	list_add(c->urgent ? &set->urgent : &set->normal, c, front);
}

/* A reader lets go of @c. */
void ncache_put_locked(struct nbd_set *set, struct nbd_chunk *c)
{
	if (--c->refs)
		return;
	if (c->state == CH_READY)
		list_add(&set->lru, c, true);
	else if (c->state == CH_FAILED)
		ncache_free_locked(set, c);
}

/* Fail everything that waits to be sent: the set is dead. */
void ncache_fail_queued_locked(struct nbd_set *set)
{
	struct chunk_list *l[] = { &set->urgent, &set->normal, &set->delayed };

	for (size_t i = 0; i < 3; i++)
		while (l[i]->head)
			chunk_fail_locked(set, l[i]->head);
}

/* Reads fail at once: the export changed, or the outage expired. */
bool ncache_dead_locked(const struct nbd_set *set)
{
	return set->changed || set->link.expired;
}

/*
 * What time does: delayed chunks that are due go back to the head of
 * their queue; an outage past the deadline fails what is queued.
 * Returns when to look again (UINT64_MAX: nothing pending).
 */
uint64_t ncache_tick_locked(struct nbd_set *set, uint64_t now)
{
	uint64_t wake = UINT64_MAX, until;
	struct nbd_chunk *c, *next;

	for (c = set->delayed.head; c; c = next) {
		next = c->next;
		if (c->due <= now)
			ncache_requeue_locked(set, c, true);
		else
			wake = min_u64(wake, c->due);
	}
	if (retry_link_check(&set->link, &set->rp, &set->st.retry, &set->log,
			     now, &until))
		ncache_fail_queued_locked(set);
	return min_u64(wake, until);
}

struct nbd_chunk *ncache_pop_locked(struct nbd_set *set)
{
	struct nbd_chunk *c = set->urgent.head ? set->urgent.head
					       : set->normal.head;

	if (c)
		list_del(c);
	return c;
}


/* The chunk table: twice the chunks the cache holds, a power of two. */
int ncache_init(struct nbd_set *set)
{
	uint64_t want = 2 * (set->o.cache_bytes / set->info.chunk), n = 1024;

	while (n < want && n < (1ull << 24))
		n *= 2;
	set->table = calloc(n, sizeof(*set->table));
	set->mask = n - 1;
	set->spare = calloc(SPARE_MAX, sizeof(*set->spare));
	return set->table && set->spare ? 0 : -ENOMEM;
}

/* Every chunk and spare buffer: no reader holds any, no read is sent. */
void ncache_destroy(struct nbd_set *set)
{
	for (uint64_t i = 0; set->table && i <= set->mask; i++)
		while (set->table[i])
			ncache_free_locked(set, set->table[i]);
	while (set->spare && set->nspare)
		free(set->spare[--set->nspare]);
	free(set->spare);
	free(set->table);
}
