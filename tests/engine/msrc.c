// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * msrc.c - the engine suite's source (harness.h): content that is a
 * function of the offset, known-zero extents, reads that fail or are held
 * at a gate until the test lets them go, and how many reads each page had;
 * or the same gates over another source, whose type and kept descriptor
 * it takes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

void content_fill(uint64_t tag, uint64_t off, void *buf, size_t len)
{
	uint64_t *w = buf;

	for (size_t i = 0; i < len / 8; i++)
		w[i] = content_word(tag, off + i * 8);
}

enum gate_state { G_OFF, G_ARMED, G_HELD, G_OPEN };

struct gate {
	uint64_t off;
	unsigned int kinds;
	int notify_fd;
	enum gate_state state;
	pid_t holder;		/* the thread it held */
	unsigned long after;	/* its reads since it was let go */
};

struct msrc {
	struct source s;
	struct source_ops ops;	/* its type is the inner source's */
	struct source *inner;
	uint64_t tag;
	struct msrc_zero *zeros;
	size_t nzeros;
	size_t pages;
	_Atomic int *fail;		/* per page: the -errno of its reads */
	atomic_uint delay_us;		/* each background read takes it */
	atomic_ulong *reads_urgent, *reads_bg; /* per page */
	pthread_mutex_t lock;		/* the gates */
	pthread_cond_t cond;
	struct gate gates[MSRC_GATES];
};

#define MSRC(s) ((struct msrc *)(s))

/* The known-zero extent that holds @off, or NULL. */
static const struct msrc_zero *zero_find(const struct msrc *m, uint64_t off)
{
	for (size_t i = 0; i < m->nzeros; i++)
		if (off >= m->zeros[i].off &&
		    off - m->zeros[i].off < m->zeros[i].len)
			return &m->zeros[i];
	return NULL;
}

bool msrc_zero_at(const struct msrc *m, uint64_t off)
{
	return zero_find(m, off) != NULL;
}

uint64_t msrc_tag(const struct msrc *m)
{
	return m->tag;
}

static int mem_extent(struct source *s, uint64_t off, struct src_extent *e)
{
	struct msrc *m = MSRC(s);
	const struct msrc_zero *z;
	uint64_t start = 0, end = s->size;

	if (m->inner)
		return m->inner->ops->extent(m->inner, off, e);
	if (off >= s->size)
		return -ERANGE;
	z = zero_find(m, off);
	if (z) {
		*e = (struct src_extent){ z->off, z->len, SRC_ZERO };
		return 0;
	}
	for (size_t i = 0; i < m->nzeros; i++) {
		if (m->zeros[i].off + m->zeros[i].len <= off)
			start = m->zeros[i].off + m->zeros[i].len;
		else if (m->zeros[i].off > off && m->zeros[i].off < end)
			end = m->zeros[i].off;
	}
	*e = (struct src_extent){ start, end - start, SRC_DATA };
	return 0;
}

/* Hold the read of [off, off + len) of @kind at an armed gate it covers. */
static void gates_pass(struct msrc *m, uint64_t off, size_t len,
		       unsigned int kind)
{
	pid_t tid = gettid();

	pthread_mutex_lock(&m->lock);
	for (unsigned int g = 0; g < MSRC_GATES; g++) {
		struct gate *gt = &m->gates[g];

		if (gt->state == G_OPEN && gt->holder == tid)
			gt->after++;
		if (gt->state != G_ARMED || !(gt->kinds & kind) ||
		    gt->off < off || gt->off - off >= len)
			continue;
		gt->state = G_HELD;
		gt->holder = tid;
		pthread_cond_broadcast(&m->cond);
		if (gt->notify_fd >= 0)
			(void)!write(gt->notify_fd, "h", 1);
		while (gt->state == G_HELD)
			pthread_cond_wait(&m->cond, &m->lock);
	}
	pthread_mutex_unlock(&m->lock);
}

/*
 * Count a read of [off, off + len) for each of its pages. Returns the
 * -errno set for the first page that fails, -ERANGE where a known-zero
 * extent is (the engine never reads zeros), or 0.
 */
static int reads_note(struct msrc *m, uint64_t off, size_t len,
		      unsigned int kind)
{
	int err = 0;

	for (uint64_t o = off; o < off + len; o += PG) {
		size_t p = o / PG;

		atomic_fetch_add(kind == GATE_URGENT ? &m->reads_urgent[p]
						     : &m->reads_bg[p], 1);
		if (!err)
			err = atomic_load(&m->fail[p]);
		if (!err && !m->inner && zero_find(m, o))
			err = -ERANGE;
	}
	return err;
}

/* A background read takes delay_us: a slow disk under the push. */
static void read_delay(struct msrc *m, unsigned int kind)
{
	unsigned int us = atomic_load(&m->delay_us);
	struct timespec t = { us / 1000000, (long)(us % 1000000) * 1000 };

	if (kind == GATE_BACKGROUND && us)
		nanosleep(&t, NULL);
}

static ssize_t mem_read(struct source *s, uint64_t off, void *buf, size_t len,
			unsigned int flags)
{
	struct msrc *m = MSRC(s);
	unsigned int kind = flags & SRC_READ_URGENT ? GATE_URGENT
						    : GATE_BACKGROUND;
	ssize_t ret;

	if ((off | len) % PG || !len || off >= s->size ||
	    len > s->size - off)
		return -EINVAL;
	ret = reads_note(m, off, len, kind);
	if (ret)
		return ret;
	read_delay(m, kind);
	if (m->inner)
		ret = m->inner->ops->read(m->inner, off, buf, len, flags);
	else
		content_fill(m->tag, off, buf, len);
	if (ret < 0)
		return ret;
	gates_pass(m, off, len, kind);
	return (ssize_t)len;
}

static void mem_destroy(struct source *s)
{
	struct msrc *m = MSRC(s);

	source_destroy(m->inner);
	pthread_mutex_destroy(&m->lock);
	pthread_cond_destroy(&m->cond);
	free(m->zeros);
	free(m->fail);
	free(m->reads_urgent);
	free(m->reads_bg);
	free(m);
}

static const struct source_ops msrc_ops = {
	.name = "memory",
	.read = mem_read,
	.extent = mem_extent,
	.destroy = mem_destroy,
};

int msrc_create(const struct msrc_opts *o, struct msrc **mp)
{
	struct msrc *m = calloc(1, sizeof(*m));
	uint64_t size = o->inner ? o->inner->size : o->size;

	if (!m)
		return -ENOMEM;
	m->ops = msrc_ops;
	m->inner = o->inner;
	m->tag = o->tag;
	m->pages = size / PG;
	m->s = (struct source){ .ops = &m->ops, .size = size, .page_size = PG };
	if (m->inner) {
		m->ops.type = m->inner->ops->type;
		m->s.keep_fd = m->inner->keep_fd;
		memcpy(m->s.id, m->inner->id, sizeof(m->s.id));
	}
	m->zeros = calloc(o->nzeros + 1, sizeof(*m->zeros));
	m->fail = calloc(m->pages + 1, sizeof(*m->fail));
	m->reads_urgent = calloc(m->pages + 1, sizeof(*m->reads_urgent));
	m->reads_bg = calloc(m->pages + 1, sizeof(*m->reads_bg));
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->cond, NULL);
	if (!m->zeros || !m->fail || !m->reads_urgent || !m->reads_bg) {
		m->inner = NULL; /* still the caller's */
		mem_destroy(&m->s);
		return -ENOMEM;
	}
	if (o->nzeros)
		memcpy(m->zeros, o->zeros, o->nzeros * sizeof(*m->zeros));
	m->nzeros = o->nzeros;
	for (unsigned int g = 0; g < MSRC_GATES; g++)
		m->gates[g].notify_fd = -1;
	*mp = m;
	return 0;
}

struct source *msrc_source(struct msrc *m)
{
	return &m->s;
}

void msrc_fail(struct msrc *m, uint64_t off, int err)
{
	atomic_store(&m->fail[off / PG], err);
}

void msrc_delay(struct msrc *m, unsigned int us)
{
	atomic_store(&m->delay_us, us);
}

void msrc_gate(struct msrc *m, unsigned int g, uint64_t off,
	       unsigned int kinds, int notify_fd)
{
	pthread_mutex_lock(&m->lock);
	m->gates[g] = (struct gate){ off, kinds, notify_fd, G_ARMED, 0, 0 };
	pthread_mutex_unlock(&m->lock);
}

bool msrc_gate_wait(struct msrc *m, unsigned int g, unsigned int ms)
{
	struct timespec t;
	bool held;

	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_sec += ms / 1000;
	t.tv_nsec += (long)(ms % 1000) * 1000000;
	if (t.tv_nsec >= 1000000000) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&m->lock);
	while (m->gates[g].state == G_ARMED &&
	       pthread_cond_timedwait(&m->cond, &m->lock, &t) == 0)
		;
	held = m->gates[g].state == G_HELD;
	pthread_mutex_unlock(&m->lock);
	return held;
}

void msrc_gate_open(struct msrc *m, unsigned int g)
{
	pthread_mutex_lock(&m->lock);
	m->gates[g].state = G_OPEN;
	pthread_cond_broadcast(&m->cond);
	pthread_mutex_unlock(&m->lock);
}

unsigned long msrc_gate_after(struct msrc *m, unsigned int g)
{
	unsigned long n;

	pthread_mutex_lock(&m->lock);
	n = m->gates[g].after;
	pthread_mutex_unlock(&m->lock);
	return n;
}

void msrc_gates_open(struct msrc *m)
{
	for (unsigned int g = 0; g < MSRC_GATES; g++)
		msrc_gate_open(m, g);
}

unsigned long msrc_reads(struct msrc *m, uint64_t off, unsigned int kinds)
{
	size_t p = off / PG;

	return (kinds & GATE_URGENT ? atomic_load(&m->reads_urgent[p]) : 0) +
	       (kinds & GATE_BACKGROUND ? atomic_load(&m->reads_bg[p]) : 0);
}

