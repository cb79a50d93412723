// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * client.c - the engine suite's client side (harness.h): the test process
 * registers its own memory with a userfaultfd, changes it with real
 * events, keeps a model of what each page must read, and touches pages
 * from threads whose progress has a deadline.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

uint64_t mono_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

void pause_ms(void)
{
	struct timespec t = { 0, 1000000 };

	nanosleep(&t, NULL);
}

uint64_t test_seed(void)
{
	const char *s = getenv("FAULTD_TEST_SEED");
	uint64_t seed = s ? strtoull(s, NULL, 0) : mono_ns() ^ (uint64_t)getpid();

	return seed ? seed : 1;
}

/* ------------------------------------------------------------------------
 * userfaultfd and memory.
 */

int uffd_new(uint64_t features)
{
	struct uffdio_api api = { .api = UFFD_API, .features = features };
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		return -errno;
	if (ioctl(fd, UFFDIO_API, &api)) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

int uffd_register_range(int uffd, void *addr, size_t len)
{
	struct uffdio_register reg = {
		.range = { (uintptr_t)addr, len },
		.mode = UFFDIO_REGISTER_MODE_MISSING,
	};

	return ioctl(uffd, UFFDIO_REGISTER, &reg) ? -errno : 0;
}

char *reserve_pages(size_t pages)
{
	size_t len = pages * PG;
	char *p = mmap(NULL, len + WINDOW_ALIGN, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	char *a;

	if (p == MAP_FAILED)
		return NULL;
	a = (char *)(((uintptr_t)p + WINDOW_ALIGN - 1) & ~(WINDOW_ALIGN - 1));
	if (a > p)
		munmap(p, (size_t)(a - p));
	munmap(a + len, (size_t)(p + WINDOW_ALIGN - a));
	return a;
}

int map_rw(char *addr, size_t len)
{
	void *p = mmap(addr, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
		       -1, 0);

	return p == MAP_FAILED ? -errno : 0;
}

bool resident(const char *addr)
{
	unsigned char v = 0;

	return !mincore((void *)addr, PG, &v) && (v & 1);
}

static sigjmp_buf bus_jmp;

static void on_sigbus(int sig)
{
	siglongjmp(bus_jmp, 1);
}

bool load_sigbus(const void *addr)
{
	struct sigaction sa = { .sa_handler = on_sigbus }, old;
	volatile bool bus = false;

	sigaction(SIGBUS, &sa, &old);
	if (sigsetjmp(bus_jmp, 1))
		bus = true;
	else
		(void)*(const volatile char *)addr;
	sigaction(SIGBUS, &old, NULL);
	return bus;
}

void engine_sync(struct space *sp)
{
	pthread_rwlock_rdlock(&sp->ev_lock);
	pthread_rwlock_unlock(&sp->ev_lock);
	pthread_rwlock_wrlock(&sp->lock);
	pthread_rwlock_unlock(&sp->lock);
}

/* ------------------------------------------------------------------------
 * model.
 */

int model_init(struct model *m, size_t pages, struct msrc *src)
{
	memset(m, 0, sizeof(*m));
	m->base = reserve_pages(pages);
	m->pg = calloc(pages, sizeof(*m->pg));
	m->src_pages = msrc_source(src)->size / PG;
	m->src_done = calloc(m->src_pages + 1, sizeof(*m->src_done));
	m->pages = pages;
	m->src = src;
	m->tag = msrc_tag(src);
	if (!m->base || !m->pg || !m->src_done) {
		model_free(m);
		return -ENOMEM;
	}
	return 0;
}

/* The window goes, but for pages someone else mapped in a hole of it
 * (a thread's stack that reaches into it from below, say). */
void model_free(struct model *m)
{
	for (size_t p = 0; m->base && p < m->pages;) {
		size_t n = 0;

		while (p + n < m->pages &&
		       (!m->pg || m->pg[p + n].kind != MP_HOLE))
			n++;
		if (n)
			munmap(model_addr(m, p), n * PG);
		p += n + 1;
	}
	free(m->pg);
	free(m->src_done);
	memset(m, 0, sizeof(*m));
}

char *model_addr(const struct model *m, size_t p)
{
	return m->base + p * PG;
}

void model_map(struct model *m, size_t first, size_t n, uint64_t src)
{
	for (size_t i = 0; i < n; i++)
		m->pg[first + i] = (struct mpage){ .kind = MP_DATA,
						   .src = src + i * PG };
}

/* The source page of @p is done: in, removed or gone. */
static void src_done(struct model *m, const struct mpage *pg)
{
	m->src_done[pg->src / PG] = true;
}

int ev_remove(struct model *m, size_t first, size_t n)
{
	bool any = false;

	if (madvise(model_addr(m, first), n * PG, MADV_DONTNEED))
		return -errno;
	for (size_t p = first; p < first + n; p++) {
		struct mpage *pg = &m->pg[p];

		if (pg->kind != MP_DATA)
			continue;
		pg->zero = true;
		pg->seen = false;
		src_done(m, pg);
		any = true;
	}
	m->removes += any;
	return 0;
}

/* [first, first + n) was unmapped: the test's own again, where it can. */
static void refill(struct model *m, size_t first, size_t n)
{
	for (size_t p = first; p < first + n; p++) {
		void *a = mmap(model_addr(m, p), PG, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
				       MAP_FIXED_NOREPLACE,
			       -1, 0);

		m->pg[p] = (struct mpage){
			.kind = a == model_addr(m, p) ? MP_FILL : MP_HOLE };
		if (a != MAP_FAILED && a != model_addr(m, p))
			munmap(a, PG); /* a kernel without NOREPLACE */
	}
}

/* Pages [first, first + n) go: their sources are done. */
static bool pages_gone(struct model *m, size_t first, size_t n)
{
	bool any = false;

	for (size_t p = first; p < first + n; p++)
		if (m->pg[p].kind == MP_DATA) {
			src_done(m, &m->pg[p]);
			any = true;
		}
	return any;
}

int ev_cut(struct model *m, size_t first, size_t n, bool over)
{
	char *a = model_addr(m, first);
	bool any;

	if (over) {
		if (mmap(a, n * PG, PROT_NONE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED |
				 MAP_NORESERVE,
			 -1, 0) == MAP_FAILED)
			return -errno;
	} else if (munmap(a, n * PG)) {
		return -errno;
	}
	any = pages_gone(m, first, n);
	if (over)
		for (size_t p = first; p < first + n; p++)
			m->pg[p] = (struct mpage){ .kind = MP_FILL };
	else
		refill(m, first, n);
	m->cuts += any;
	return 0;
}

int ev_move(struct model *m, size_t from, size_t n, size_t to)
{
	struct mpage *moved = malloc(n * sizeof(*moved));
	void *a;

	if (!moved)
		return -ENOMEM;
	a = mremap(model_addr(m, from), n * PG, n * PG,
		   MREMAP_MAYMOVE | MREMAP_FIXED, model_addr(m, to));
	if (a == MAP_FAILED) {
		int err = -errno;

		free(moved);
		return err;
	}
	memcpy(moved, &m->pg[from], n * sizeof(*moved));
	m->cuts += pages_gone(m, to, n);
	memcpy(&m->pg[to], moved, n * sizeof(*moved));
	refill(m, from, n);
	m->remaps++;
	free(moved);
	return 0;
}

/* What word @i of page @p must read. */
static uint64_t expect_word(const struct model *m, size_t p, size_t i)
{
	const struct mpage *pg = &m->pg[p];

	if (pg->zero || msrc_zero_at(m->src, pg->src))
		return 0;
	return content_word(m->tag, pg->src + i * 8);
}

bool model_page_matches(const struct model *m, size_t p, const void *data)
{
	const volatile uint64_t *w = data;

	for (size_t i = 0; i < PG / 8; i++)
		if (w[i] != expect_word(m, p, i))
			return false;
	return true;
}

int model_check_page(struct model *m, size_t p, bool quick, char *why,
		     size_t why_len)
{
	struct mpage *pg = &m->pg[p];
	const volatile uint64_t *w = (const uint64_t *)model_addr(m, p);
	size_t words = PG / 8;

	if (pg->kind != MP_DATA)
		return 0;
	if (!resident(model_addr(m, p))) {
		m->faults++;
		if (!pg->zero && !msrc_zero_at(m->src, pg->src))
			m->urgent++;
	}
	for (size_t i = 0; i < words; i += quick && i == 0 ? words - 1 : 1) {
		uint64_t v = w[i], want = expect_word(m, p, i);

		if (v == want)
			continue;
		snprintf(why, why_len, "page %zu (%p, source offset %#llx%s): "
			 "word %zu is %#llx, not %#llx", p,
			 (void *)model_addr(m, p), (unsigned long long)pg->src,
			 pg->zero ? ", removed" : "", i,
			 (unsigned long long)v, (unsigned long long)want);
		return -EBADMSG;
	}
	pg->seen = true;
	src_done(m, pg);
	return 0;
}

void model_note_resident(struct model *m)
{
	unsigned char *v = malloc(m->pages);

	for (size_t p = 0; v && p < m->pages;) {
		size_t n = 0;

		while (p + n < m->pages && m->pg[p + n].kind != MP_HOLE)
			n++;
		if (n && !mincore(model_addr(m, p), n * PG, v))
			for (size_t i = 0; i < n; i++)
				if (m->pg[p + i].kind == MP_DATA &&
				    (v[i] & 1)) {
					m->pg[p + i].seen = true;
					src_done(m, &m->pg[p + i]);
				}
		p += n + 1;
	}
	free(v);
}

/* Is range @r whole pages of the window that the model maps as it does? */
static int range_check(const struct model *m, const struct srange *r,
		       char *why, size_t why_len)
{
	uint64_t base = (uintptr_t)m->base;

	if (!r->len || (r->start | r->len | r->src_off) % PG ||
	    r->start < base || r->start + r->len > base + m->pages * PG) {
		snprintf(why, why_len, "range [%#llx, +%#llx) -> %#llx: not "
			 "whole pages of the window",
			 (unsigned long long)r->start,
			 (unsigned long long)r->len,
			 (unsigned long long)r->src_off);
		return -EBADMSG;
	}
	for (uint64_t a = r->start; a < r->start + r->len; a += PG) {
		const struct mpage *pg = &m->pg[(a - base) / PG];
		uint64_t src = r->src_off + (a - r->start);

		if (pg->kind == MP_DATA && pg->src == src)
			continue;
		snprintf(why, why_len, "range [%#llx, +%#llx) -> %#llx maps "
			 "page %llu to %#llx; the model: %s %#llx",
			 (unsigned long long)r->start,
			 (unsigned long long)r->len,
			 (unsigned long long)r->src_off,
			 (unsigned long long)((a - base) / PG),
			 (unsigned long long)src,
			 pg->kind == MP_DATA ? "source" : "not mapped",
			 (unsigned long long)pg->src);
		return -EBADMSG;
	}
	return 0;
}

int model_check_table(struct model *m, struct space *sp, char *why,
		      size_t why_len)
{
	struct srange *r;
	size_t nr, covered = 0, data = 0;
	int ret = 0;

	pthread_rwlock_rdlock(&sp->lock);
	nr = sp->nr;
	r = malloc((nr + 1) * sizeof(*r));
	if (r)
		memcpy(r, sp->r, nr * sizeof(*r));
	pthread_rwlock_unlock(&sp->lock);
	if (!r)
		return -ENOMEM;
	for (size_t i = 0; i < nr && !ret; i++) {
		ret = range_check(m, &r[i], why, why_len);
		covered += r[i].len / PG;
		if (!ret && i && r[i - 1].start + r[i - 1].len > r[i].start) {
			snprintf(why, why_len, "ranges %zu and %zu overlap or "
				 "are out of order", i - 1, i);
			ret = -EBADMSG;
		}
	}
	for (size_t p = 0; p < m->pages; p++)
		data += m->pg[p].kind == MP_DATA;
	if (!ret && covered != data) {
		snprintf(why, why_len, "the table maps %zu pages, the model "
			 "%zu", covered, data);
		ret = -EBADMSG;
	}
	free(r);
	return ret;
}

uint64_t model_pending(const struct model *m)
{
	uint64_t n = 0;

	for (size_t i = 0; i < m->src_pages; i++)
		n += !m->src_done[i];
	return n;
}

size_t model_find(const struct model *m, size_t from, enum mkind kind)
{
	for (size_t i = 0; i < m->pages; i++) {
		size_t p = (from + i) % m->pages;

		if (m->pg[p].kind == kind)
			return p;
	}
	return SIZE_MAX;
}

size_t model_run(const struct model *m, size_t p, enum mkind kind, size_t max)
{
	size_t n = 0;

	while (n < max && p + n < m->pages && m->pg[p + n].kind == kind)
		n++;
	return n;
}

/* ------------------------------------------------------------------------
 * toucher.
 */

static void *toucher_main(void *arg)
{
	struct toucher *t = arg;

	t->ret = write(t->pipe[1], t->addr, t->len);
	t->err = t->ret < 0 ? errno : 0;
	atomic_store(&t->done, true);
	return NULL;
}

int toucher_start(struct toucher *t, const void *addr, size_t len)
{
	int ret;

	memset(t, 0, sizeof(*t));
	t->addr = addr;
	t->len = len;
	if (pipe2(t->pipe, O_CLOEXEC) < 0)
		return -errno;
	ret = pthread_create(&t->thread, NULL, toucher_main, t);
	if (ret) {
		close(t->pipe[0]);
		close(t->pipe[1]);
		return -ret;
	}
	t->started = true;
	return 0;
}

bool toucher_wait(struct toucher *t, unsigned int ms, void *buf)
{
	uint64_t end = mono_ns() + ms * 1000000ull;

	while (!atomic_load(&t->done)) {
		if (mono_ns() > end)
			return false;
		pause_ms();
	}
	if (buf && t->ret == (ssize_t)t->len)
		return read(t->pipe[0], buf, t->len) == (ssize_t)t->len;
	return true;
}

/* A thread still asleep in its fault is left there (the test failed):
 * its pipe stays open, so that its write never gets SIGPIPE. */
void toucher_free(struct toucher *t)
{
	if (!t->started)
		return;
	if (!atomic_load(&t->done)) {
		pthread_detach(t->thread);
		return;
	}
	pthread_join(t->thread, NULL);
	close(t->pipe[0]);
	close(t->pipe[1]);
	t->started = false;
}
