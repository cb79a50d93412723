/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * criu.c - CRIU dumps as sources (daemon/criu.h), checked against real
 * dumps of tests/criu/workload.c made by an unmodified CRIU, and the
 * baseline the faultd front end will replace: `criu restore --lazy-pages`
 * served by `criu lazy-pages`, every byte checked by the process itself;
 * and `faultd lazy-pages`, with working sets recorded and replayed.
 *
 * FAULTD_CRIU_MIB sets the workload's size for the restores (default 64).
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>

#include <sys/un.h>

#include "criu.h"
#include "criu-images.pb-c.h"
#include "criu/harness.h"
#include "proto.h"
#include "wset.h"

TestSuite(criu, .init = h_setup, .fini = h_fini, .timeout = 600);

static size_t restore_mib(void)
{
	const char *s = getenv("FAULTD_CRIU_MIB");

	return s && atoi(s) > 0 ? (size_t)atoi(s) : 64;
}

static struct criu_dump *open_ok(const char *name)
{
	struct criu_dump *d;
	char why[256];
	int err = criu_dump_open(h_path(name), &d, why, sizeof(why));

	cr_assert_eq(err, 0, "criu_dump_open: %d: %s", err, why);
	return d;
}

/* The extent at @off must be @kind and contain [off, off + len). */
static void expect_extent(struct source *s, uint64_t off, uint64_t len,
			  enum src_kind kind)
{
	for (uint64_t at = off; at < off + len;) {
		struct src_extent e;

		cr_assert_eq(source_extent(s, at, &e), 0, "extent %#lx",
			     (unsigned long)at);
		cr_assert(e.off <= at && at < e.off + e.len);
		cr_assert_eq(e.kind, kind, "extent at %#lx: kind %d, not %d",
			     (unsigned long)at, e.kind, kind);
		at = e.off + e.len;
	}
}

/* Read [off, off + len) of region @region through @s and compare. */
static void expect_content(struct source *s, const struct h_task *t,
			   unsigned int region, uint64_t off, size_t len)
{
	uint64_t base = region ? t->r1 : t->r0, first = 0;
	char *buf = malloc(len);
	size_t bad;

	cr_assert(buf);
	cr_assert_eq(source_read(s, base + off, buf, len), (ssize_t)len);
	bad = wl_check(t->seed, region, off, buf, len, &first);
	cr_assert_eq(bad, 0, "%zu words wrong, the first at region %u + %#lx",
		     bad, region, (unsigned long)first);
	free(buf);
}

/* Region 0 DATA; region 1 DATA where written and ZERO elsewhere. */
static void check_task_source(struct source *s, const struct h_task *t)
{
	expect_extent(s, t->r0, t->r0_len, SRC_DATA);
	for (uint64_t off = 0; off < t->r1_len; off += WL_SPARSE_CHUNK) {
		expect_extent(s, t->r1 + off, WL_SPARSE_CHUNK / 2, SRC_DATA);
		expect_extent(s, t->r1 + off + WL_SPARSE_CHUNK / 2,
			      WL_SPARSE_CHUNK / 2, SRC_ZERO);
		expect_content(s, t, 1, off, WL_SPARSE_CHUNK / 2);
	}
	/* Across every DATA piece of region 0 at once, and page by page. */
	expect_content(s, t, 0, 0, t->r0_len);
	for (uint64_t off = 0; off < t->r0_len; off += 37 * WL_PAGE)
		expect_content(s, t, 0, off, WL_PAGE);
}

Test(criu, dump_parsed)
{
	const struct criu_task *tasks;
	const struct criu_range *lazy;
	struct criu_dump *d;
	struct source *s, *s2;
	struct src_extent e;
	struct h_task t;
	char page[WL_PAGE];
	uint64_t covered = 0;
	ssize_t n;

	h_workload(&t, NULL, 32, 11, "basic");
	h_dump(&t, NULL, "d");
	d = open_ok("d");
	cr_assert_eq(criu_dump_tasks(d, &tasks), 1);
	cr_assert_eq(tasks[0].pid, t.pid);
	cr_assert(!tasks[0].zombie);
	cr_assert_eq(tasks[0].nr_threads, 1);
	cr_assert_eq(criu_task_source(d, t.pid, &s), 0);
	cr_assert_str_eq(s->ops->name, "criu");
	cr_assert_eq(s->page_size, 4096);
	check_task_source(s, &t);

	/* What the engine must push covers both regions' data. */
	n = criu_task_lazy(d, t.pid, &lazy);
	cr_assert(n > 0);
	for (ssize_t i = 0; i < n; i++) {
		uint64_t a = lazy[i].start, b = a + lazy[i].len;

		cr_assert(i == 0 || a >= lazy[i - 1].start + lazy[i - 1].len);
		if (a < t.r0 + t.r0_len && b > t.r0)
			covered += (b < t.r0 + t.r0_len ? b : t.r0 + t.r0_len) -
				   (a > t.r0 ? a : t.r0);
	}
	cr_assert_eq(covered, t.r0_len);

	/* Outside: NONE below the first VMA, -ERANGE past the last. */
	cr_assert_eq(source_extent(s, 0, &e), 0);
	cr_assert_eq(e.kind, SRC_NONE);
	cr_assert_eq(e.off, 0);
	cr_assert_eq(source_extent(s, s->size, &e), -ERANGE);
	cr_assert_eq(source_read(s, 0, page, sizeof(page)), -ERANGE);
	cr_assert_eq(source_read(s, t.r1 + WL_SPARSE_CHUNK / 2, page,
				 sizeof(page)), -ERANGE);
	cr_assert_eq(source_read(s, t.r0 + 1, page, sizeof(page)), -EINVAL);
	cr_assert_eq(criu_task_source(d, t.pid + 100000, &s2), -ESRCH);

	/* The id: stable for this dump, not all zeros. */
	cr_assert_eq(criu_task_source(d, t.pid, &s2), 0);
	cr_assert_eq(memcmp(s->id, s2->id, sizeof(s->id)), 0);
	memset(page, 0, sizeof(s->id));
	cr_assert_neq(memcmp(s->id, page, sizeof(s->id)), 0);
	source_destroy(s2);
	source_destroy(s);
	criu_dump_close(d);
}

Test(criu, id_differs_between_dumps)
{
	struct criu_dump *d1, *d2;
	struct source *s1, *s2;
	struct h_task a, b;

	h_workload(&a, NULL, 4, 1, "basic");
	h_dump(&a, NULL, "a");
	h_workload(&b, NULL, 4, 1, "basic");
	h_dump(&b, NULL, "b");
	d1 = open_ok("a");
	d2 = open_ok("b");
	cr_assert_eq(criu_task_source(d1, a.pid, &s1), 0);
	cr_assert_eq(criu_task_source(d2, b.pid, &s2), 0);
	cr_assert_neq(memcmp(s1->id, s2->id, sizeof(s1->id)), 0);
	source_destroy(s1);
	source_destroy(s2);
	criu_dump_close(d1);
	criu_dump_close(d2);
}

/* Concurrent readers of one source, each at its own random pages. */
struct reader {
	struct source *s;
	const struct h_task *t;
	unsigned int seed;
	atomic_size_t *bad;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	size_t pages = r->t->r0_len / WL_PAGE;
	char buf[16 * WL_PAGE];

	for (int i = 0; i < 2000; i++) {
		size_t pg = (size_t)rand_r(&r->seed) % pages;
		size_t n = 1 + (size_t)rand_r(&r->seed) % 16;

		if (pg + n > pages)
			n = pages - pg;
		if (source_read(r->s, r->t->r0 + pg * WL_PAGE, buf,
				n * WL_PAGE) != (ssize_t)(n * WL_PAGE) ||
		    wl_check(r->t->seed, 0, pg * WL_PAGE, buf, n * WL_PAGE,
			     NULL))
			atomic_fetch_add(r->bad, 1);
	}
	return NULL;
}

static void concurrent_reads(struct source *s, const struct h_task *t)
{
	struct reader r[4];
	pthread_t th[4];
	atomic_size_t bad = 0;

	for (unsigned int i = 0; i < 4; i++) {
		r[i] = (struct reader){ s, t, i + 1, &bad };
		cr_assert_eq(pthread_create(&th[i], NULL, reader_main, &r[i]),
			     0);
	}
	for (unsigned int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(atomic_load(&bad), 0, "%zu reads wrong or failed",
		     atomic_load(&bad));
}

Test(criu, concurrent_readers)
{
	struct criu_dump *d;
	struct source *s;
	struct h_task t;

	h_workload(&t, NULL, 16, 5, "basic");
	h_dump(&t, NULL, "d");
	d = open_ok("d");
	cr_assert_eq(criu_task_source(d, t.pid, &s), 0);
	concurrent_reads(s, &t);
	source_destroy(s);
	criu_dump_close(d);
}

Test(criu, zombie_and_threads)
{
	const struct criu_task *tasks;
	const struct criu_range *lazy;
	struct criu_dump *d;
	struct source *s;
	struct h_task t;

	h_workload(&t, NULL, 4, 3, "zombie");
	cr_assert(t.zombie > 0);
	h_dump(&t, NULL, "z");
	d = open_ok("z");
	cr_assert_eq(criu_dump_tasks(d, &tasks), 2);
	cr_assert_eq(tasks[0].pid, t.pid);
	cr_assert(!tasks[0].zombie);
	cr_assert_eq(tasks[1].pid, t.zombie);
	cr_assert_eq(tasks[1].ppid, t.pid);
	cr_assert(tasks[1].zombie);
	cr_assert_eq(criu_task_source(d, t.zombie, &s), -ESRCH);
	cr_assert_eq(criu_task_lazy(d, t.zombie, &lazy), -ESRCH);
	criu_dump_close(d);

	h_workload(&t, NULL, 4, 3, "threads");
	h_dump(&t, NULL, "t");
	d = open_ok("t");
	cr_assert_eq(criu_dump_tasks(d, &tasks), 1);
	cr_assert_eq(tasks[0].nr_threads, 5);
	cr_assert_eq(criu_task_source(d, t.pid, &s), 0);
	check_task_source(s, &t);
	source_destroy(s);
	criu_dump_close(d);
}

/* ---- bad images ---- */

static void copy_file(const char *from, const char *to)
{
	char buf[1 << 16];
	int in = open(from, O_RDONLY | O_CLOEXEC), out;
	ssize_t n;

	cr_assert(in >= 0, "%s", from);
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	cr_assert(out >= 0, "%s", to);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		cr_assert_eq(write(out, buf, (size_t)n), n);
	close(in);
	close(out);
}

/* A copy of dump folder @from as @to. */
static void copy_dump(const char *from, const char *to)
{
	char src[600], dst[600];
	struct dirent *e;
	DIR *dir = opendir(h_path(from));

	cr_assert(dir);
	cr_assert_eq(mkdir(h_path(to), 0755), 0);
	while ((e = readdir(dir))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(src, sizeof(src), "%s/%s", h_path(from), e->d_name);
		snprintf(dst, sizeof(dst), "%s/%s", h_path(to), e->d_name);
		copy_file(src, dst);
	}
	closedir(dir);
}

static void expect_refused(const char *name, int err, const char *words)
{
	struct criu_dump *d = NULL;
	char why[256] = "";
	int got = criu_dump_open(h_path(name), &d, why, sizeof(why));

	cr_assert_eq(got, err, "%s: %d (%s), expected %d", name, got, why,
		     err);
	cr_assert_null(d);
	cr_assert(strstr(why, words), "%s: \"%s\" does not say \"%s\"", name,
		  why, words);
}

#define LAST_ENTRY (~0u)

/*
 * Rewrite pagemap-PID.img of folder @name, @edit changing entry @n (or
 * the last one).
 */
static void edit_pagemap(const char *name, pid_t pid, unsigned int n,
			 void (*edit)(FaultdCriu__PagemapEntry *e))
{
	char p[256];
	uint8_t *in, *out;
	size_t len, at = 8, o = 8;
	unsigned int i = 0;
	FILE *f;

	snprintf(p, sizeof(p), "%s/pagemap-%d.img", h_path(name), (int)pid);
	f = fopen(p, "r");
	cr_assert(f);
	in = malloc(1 << 20);
	out = malloc(1 << 20);
	len = fread(in, 1, 1 << 20, f);
	fclose(f);
	memcpy(out, in, 8);
	/* The head, as it is. */
	{
		uint32_t sz;

		memcpy(&sz, in + at, 4);
		memcpy(out + o, in + at, 4 + sz);
		at += 4 + sz, o += 4 + sz;
	}
	for (; at < len; i++) {
		FaultdCriu__PagemapEntry *e;
		uint32_t sz;

		memcpy(&sz, in + at, 4);
		e = faultd_criu__pagemap_entry__unpack(NULL, sz, in + at + 4);
		cr_assert(e);
		if (i == n || (n == LAST_ENTRY && at + 4 + sz >= len))
			edit(e);
		sz = (uint32_t)faultd_criu__pagemap_entry__pack(e, out + o + 4);
		memcpy(out + o, &sz, 4);
		o += 4 + sz;
		memcpy(&sz, in + at, 4);
		at += 4 + sz;
		faultd_criu__pagemap_entry__free_unpacked(e, NULL);
	}
	cr_assert(n == LAST_ENTRY || i > n, "only %u entries", i);
	f = fopen(p, "w");
	cr_assert(f);
	cr_assert_eq(fwrite(out, 1, o, f), o);
	fclose(f);
	free(in);
	free(out);
}

static void e_unaligned(FaultdCriu__PagemapEntry *e)
{
	e->vaddr += 512;
}

static void e_parent(FaultdCriu__PagemapEntry *e)
{
	e->has_in_parent = 1;
	e->in_parent = 1;
}

static void e_overlap(FaultdCriu__PagemapEntry *e)
{
	e->vaddr = 4096;
}

static void e_flags(FaultdCriu__PagemapEntry *e)
{
	e->has_flags = 1;
	e->flags |= 0x40;
}

static void e_outside(FaultdCriu__PagemapEntry *e)
{
	/* Lazy pages past the end of every VMA. */
	e->vaddr = 0x7ffffffff000ull - 4096 * 8;
	e->nr_pages = 1;
	e->has_flags = 1;
	e->flags = CRIU_PE_LAZY | CRIU_PE_PRESENT;
}

/*
 * The ways a dump is damaged for the tests that must refuse it: each makes
 * its copy @name of "good" and damages it. err and says are what
 * criu_dump_open() returns and says (NULL: "mm-PID.img"); the daemon ones
 * are also run against faultd lazy-pages.
 */
struct damage {
	const char *name;
	void (*make)(const char *name, pid_t pid);
	int err;
	const char *says;
	bool daemon;
};

static void file_pwrite(const char *name, const char *file, const void *b,
			size_t n, off_t at)
{
	char p[256];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", h_path(name), file);
	fd = open(p, O_WRONLY);
	cr_assert(fd >= 0, "%s", p);
	cr_assert_eq(pwrite(fd, b, n, at), (ssize_t)n);
	close(fd);
}

/* pages-1.img one page short. */
static void d_short(const char *name, pid_t pid)
{
	char p[256];

	struct stat st;

	(void)pid;
	snprintf(p, sizeof(p), "%s/pages-1.img", h_path(name));
	cr_assert_eq(stat(p, &st), 0);
	cr_assert_eq(truncate(p, st.st_size - 4096), 0);
}

/* No mm-PID.img. */
static void d_nomm(const char *name, pid_t pid)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/mm-%d.img", h_path(name), (int)pid);
	cr_assert_eq(unlink(p), 0);
}

/* Bytes in the pagemap that do not parse. */
static void d_garbage(const char *name, pid_t pid)
{
	char f[64];

	snprintf(f, sizeof(f), "pagemap-%d.img", (int)pid);
	file_pwrite(name, f, "\xff\xff\xff\xff\xff\xff", 6, 20);
}

/* A pagemap cut short. */
static void d_cut(const char *name, pid_t pid)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/pagemap-%d.img", h_path(name), (int)pid);
	cr_assert_eq(truncate(p, 30), 0);
}

/* Entries that parse but cannot be served. */
static void d_unaligned(const char *name, pid_t pid)
{
	edit_pagemap(name, pid, 2, e_unaligned);
}

static void d_overlap(const char *name, pid_t pid)
{
	edit_pagemap(name, pid, 2, e_overlap);
}

static void d_parent(const char *name, pid_t pid)
{
	edit_pagemap(name, pid, 1, e_parent);
}

static void d_flags(const char *name, pid_t pid)
{
	edit_pagemap(name, pid, 1, e_flags);
}

static void d_outside(const char *name, pid_t pid)
{
	edit_pagemap(name, pid, LAST_ENTRY, e_outside);
}

/* Not a CRIU image at all. */
static void d_magic(const char *name, pid_t pid)
{
	(void)pid;
	file_pwrite(name, "pstree.img", "FAUL", 4, 0);
}

static const struct damage damages[] = {
	{ "short", d_short, -EBADMSG, "pages-1.img: truncated", true },
	{ "nomm", d_nomm, -ENOENT, NULL, true },
	{ "garbage", d_garbage, -EBADMSG, "does not parse", false },
	{ "cut", d_cut, -EBADMSG, "pagemap", false },
	{ "unaligned", d_unaligned, -EBADMSG, "unaligned", true },
	{ "overlap", d_overlap, -EBADMSG, "out of order", false },
	{ "parent", d_parent, -EOPNOTSUPP, "incremental", false },
	{ "flags", d_flags, -EBADMSG, "flags", false },
	{ "outside", d_outside, -EBADMSG, "not in a private anonymous VMA",
	  false },
	{ "magic", d_magic, -EBADMSG, "pstree.img: not a CRIU image", false },
};

/* Make @dm's damaged copy of "good"; what its refusal says into @says. */
/*
 * Dump a workload (@seed) as "good", then make each damage of the table
 * (those that a daemon must refuse, if @daemon) and hand it to @check with
 * the words the refusal must say. Returns the dumped workload's pid.
 */
static pid_t each_damage(uint64_t seed, bool daemon,
			 void (*check)(const struct damage *dm,
				       const char *says))
{
	struct h_task t;
	char says[64];

	h_workload(&t, NULL, 4, seed, "basic");
	h_dump(&t, NULL, "good");
	for (size_t i = 0; i < sizeof(damages) / sizeof(damages[0]); i++) {
		const struct damage *dm = &damages[i];

		if (daemon && !dm->daemon)
			continue;
		copy_dump("good", dm->name);
		dm->make(dm->name, t.pid);
		if (dm->says)
			snprintf(says, sizeof(says), "%s", dm->says);
		else
			snprintf(says, sizeof(says), "mm-%d.img", (int)t.pid);
		check(dm, says);
	}
	return t.pid;
}

static void parse_refuses(const struct damage *dm, const char *says)
{
	expect_refused(dm->name, dm->err, says);
}

Test(criu, bad_images_refused)
{
	each_damage(9, false, parse_refuses);
}

/* ---- the baseline: criu lazy-pages serving criu restore --lazy-pages ---- */

/*
 * Dump a workload of @mode, restore it lazily with `criu lazy-pages`, let
 * it check itself. Returns its parent result line in @line.
 */
static void criu_lazy_restore(const char *mode, size_t mib, char *line,
			      size_t len)
{
	struct h_task t;
	pid_t lp;
	int st;

	h_workload(&t, NULL, mib, 21, mode);
	h_dump(&t, NULL, "d");
	lp = h_criu_bg(NULL, "lazy-pages -D %s -o lazy.log", h_path("d"));
	cr_assert_eq(h_criu(NULL, "restore -D %s --lazy-pages -d -o rst.log",
			    h_path("d")), 0,
		     "criu restore failed (see %s/rst.log)", h_path("d"));
	h_go_and_check(&t, line, len);
	st = h_wait(lp, H_DEADLINE_MS);
	cr_assert(st != -ETIMEDOUT, "criu lazy-pages did not finish");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "criu lazy-pages failed (%#x, see %s/lazy.log)", st,
		  h_path("d"));
}

#define BASELINE(mode)                                                         \
	Test(criu, lazy_pages_baseline_##mode)                                 \
	{                                                                      \
		char line[512];                                                \
		criu_lazy_restore(#mode, restore_mib(), line, sizeof(line));   \
	}

BASELINE(basic)
BASELINE(threads)
BASELINE(mremap)
BASELINE(dontneed)
BASELINE(mprotect)
BASELINE(seq)
BASELINE(random)

Test(criu, lazy_pages_baseline_zombie)
{
	char line[512];

	criu_lazy_restore("zombie", restore_mib(), line, sizeof(line));
	cr_assert(strstr(line, "zombie_ok=1"), "%s", line);
}

Test(criu, lazy_pages_baseline_fork)
{
	char buf[4096];
	char line[512];
	int fd;
	ssize_t n;

	criu_lazy_restore("fork", restore_mib(), line, sizeof(line));
	fd = open(h_path("result"), O_RDONLY);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	cr_assert(n > 0);
	buf[n] = '\0';
	cr_assert(strstr(buf, "role=child") && strstr(buf, "role=parent"),
		  "%s", buf);
}

/* ---- the page-server source, across two network namespaces ---- */

#define PS_PORT 27013

static struct h_net net;

static void net_fini(void)
{
	h_join_ns(NULL);
	h_net_down(&net);
	h_fini();
}

/*
 * Connect from namespace B to the page server at A; a lost connection is
 * made again for @deadline_ms, a read asked again @retries times. The
 * test goes on in B, as a daemon would: a reader makes a lost connection
 * again from its own network namespace (criu.h), and must not reach out
 * from any other.
 */
static struct criu_ps *ps_connect_b(int timeout_ms, uint32_t deadline_ms,
				    uint32_t retries)
{
	struct criu_ps_opts o = { .size = sizeof(o), .timeout_ms = timeout_ms,
				  .retry = { .deadline_ms = deadline_ms,
					     .read_retries = retries } };
	struct criu_ps *ps;
	int err;

	h_join_ns(net.b);
	err = criu_ps_connect(net.a_ip, PS_PORT, &o, &ps);
	cr_assert_eq(err, 0, "criu_ps_connect %s:%d: %d", net.a_ip, PS_PORT,
		     err);
	return ps;
}

/* Every lazy range of the task reads whole through @s. */
static void read_all_lazy(struct criu_dump *d, pid_t pid, struct source *s)
{
	const struct criu_range *r;
	ssize_t n = criu_task_lazy(d, pid, &r);
	char *buf = malloc(1 << 20);

	cr_assert(n > 0 && buf);
	for (ssize_t i = 0; i < n; i++)
		for (uint64_t at = 0; at < r[i].len; at += 1 << 20) {
			size_t l = r[i].len - at < (1 << 20) ? r[i].len - at
							     : (1 << 20);

			cr_assert_eq(source_read(s, r[i].start + at, buf, l),
				     (ssize_t)l, "lazy range %#lx",
				     (unsigned long)(r[i].start + at));
		}
	free(buf);
}

/* A full dump of a workload, served by `criu page-server` in A. */
static pid_t page_server_of_dump(struct h_task *t, struct criu_dump **d)
{
	pid_t ps;

	h_net_up(&net);
	h_workload(t, NULL, 16, 31, "basic");
	h_dump(t, NULL, "d");
	*d = open_ok("d");
	ps = h_criu_bg(net.a, "page-server --lazy-pages -D %s --address %s "
		       "--port %d -o ps.log", h_path("d"), net.a_ip, PS_PORT);
	return ps;
}

Test(criu, page_server_criu_page_server, .fini = net_fini)
{
	struct criu_dump *d;
	struct criu_ps *ps;
	struct source *s;
	struct h_task t;
	pid_t server = page_server_of_dump(&t, &d);
	int st;

	ps = ps_connect_b(10000, 0, 0);
	cr_assert_eq(criu_page_server_source(d, t.pid, ps, &s), 0);
	cr_assert_str_eq(s->ops->name, "criu-page-server");
	check_task_source(s, &t);
	concurrent_reads(s, &t);
	read_all_lazy(d, t.pid, s);
	source_destroy(s);
	cr_assert_eq(criu_ps_close(ps), 0);
	st = h_wait(server, H_DEADLINE_MS);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "criu page-server: %#x (see %s/ps.log)", st, h_path("d"));
	criu_dump_close(d);
}

Test(criu, page_server_dump_lazy_port, .fini = net_fini)
{
	struct criu_dump *d;
	struct criu_ps *ps;
	struct source *s;
	struct h_task t;
	pid_t dump;
	int st;

	h_net_up(&net);
	h_workload(&t, net.a, 16, 33, "basic");
	cr_assert_eq(mkdir(h_path("d"), 0755), 0);
	dump = h_criu_bg(net.a, "dump -t %d -D %s --lazy-pages --address %s "
			 "--port %d -o dump.log", (int)t.pid, h_path("d"),
			 net.a_ip, PS_PORT);
	d = open_ok("d");
	/* The lazy pages are not in the folder: only a page server has them. */
	cr_assert_eq(criu_task_source(d, t.pid, &s), -ENODATA);
	ps = ps_connect_b(10000, 0, 0);
	cr_assert_eq(criu_page_server_source(d, t.pid, ps, &s), 0);
	concurrent_reads(s, &t);
	check_task_source(s, &t);
	read_all_lazy(d, t.pid, s);
	source_destroy(s);
	cr_assert_eq(criu_ps_close(ps), 0);
	st = h_wait(dump, H_DEADLINE_MS);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "criu dump: %#x (see %s/dump.log)", st, h_path("d"));
	st = h_wait(t.pid, H_DEADLINE_MS);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	criu_dump_close(d);
}

/*
 * A read after the server died, or while it does not answer, once the
 * retries or the deadline are spent: -EIO; and every read after it while
 * the server stays away.
 */
static void expect_eio(struct source *s, const struct h_task *t)
{
	char *buf = malloc(64 * WL_PAGE);

	cr_assert(buf);
	memset(buf, 0x5a, 64 * WL_PAGE);
	cr_assert_eq(source_read(s, t->r0 + 64 * WL_PAGE, buf, 64 * WL_PAGE),
		     -EIO);
	cr_assert_eq(source_read(s, t->r0, buf, WL_PAGE), -EIO);
	free(buf);
}

/* A CRIU page server killed serves no other connection: the reads wait
 * for it the deadline long, then fail, and are counted so. */
Test(criu, page_server_dies, .fini = net_fini)
{
	struct criu_ps_stats st;
	struct criu_dump *d;
	struct criu_ps *ps;
	struct source *s;
	struct h_task t;
	pid_t server = page_server_of_dump(&t, &d);
	uint64_t t0;

	ps = ps_connect_b(10000, 500, 0);
	cr_assert_eq(criu_page_server_source(d, t.pid, ps, &s), 0);
	expect_content(s, &t, 0, 0, 16 * WL_PAGE);
	cr_assert_eq(kill(server, SIGKILL), 0);
	cr_assert(WIFSIGNALED(h_wait(server, H_DEADLINE_MS)));
	t0 = h_now_ns();
	expect_eio(s, &t);
	cr_assert(h_now_ns() - t0 >= 500000000ull, "the deadline was not "
		  "waited for");
	criu_ps_stats(ps, &st);
	cr_assert_eq(st.lost, 1);
	cr_assert_eq(st.retry.outages, 1);
	cr_assert_eq(st.retry.expired, 1);
	cr_assert_eq(st.retry.recovered, 0);
	cr_assert(st.failed_connects >= 1 && st.retry.gave_up >= 2);
	source_destroy(s);
	cr_assert_eq(criu_ps_close(ps), -EIO);
	criu_dump_close(d);
}

/* A server that stops answering: each try times out, the read is asked
 * again once, then fails; well before the time-outs add up to much. */
Test(criu, page_server_times_out, .fini = net_fini)
{
	struct criu_dump *d;
	struct criu_ps *ps;
	struct source *s;
	struct h_task t;
	pid_t server = page_server_of_dump(&t, &d);
	uint64_t t0;

	ps = ps_connect_b(300, 1000, 1);
	cr_assert_eq(criu_page_server_source(d, t.pid, ps, &s), 0);
	expect_content(s, &t, 0, 0, 16 * WL_PAGE);
	cr_assert_eq(kill(server, SIGSTOP), 0);
	t0 = h_now_ns();
	expect_eio(s, &t);
	cr_assert(h_now_ns() - t0 >= 600000000ull, "no time-out waited");
	cr_assert(h_now_ns() - t0 < 10000000000ull, "the time-outs took %llu "
		  "ns", (unsigned long long)(h_now_ns() - t0));
	source_destroy(s);
	criu_ps_close(ps);
	kill(server, SIGKILL);
	kill(server, SIGCONT);
	h_wait(server, H_DEADLINE_MS);
	criu_dump_close(d);
}

/* CRIU on both ends: criu page-server in A, criu lazy-pages in B. */
Test(criu, lazy_pages_baseline_page_server, .fini = net_fini)
{
	char line[512];
	struct h_task t;
	pid_t server, lp;
	int st;

	h_net_up(&net);
	h_workload(&t, NULL, 16, 35, "basic");
	h_dump(&t, NULL, "d");
	server = h_criu_bg(net.a, "page-server --lazy-pages -D %s --address "
			   "%s --port %d -o ps.log", h_path("d"), net.a_ip,
			   PS_PORT);
	lp = h_criu_bg(net.b, "lazy-pages --page-server --address %s --port %d "
		       "-D %s -o lazy.log", net.a_ip, PS_PORT, h_path("d"));
	cr_assert_eq(h_criu(net.b, "restore -D %s --lazy-pages -d -o rst.log",
			    h_path("d")), 0,
		     "criu restore failed (see %s/rst.log)", h_path("d"));
	h_go_and_check(&t, line, sizeof(line));
	st = h_wait(lp, H_DEADLINE_MS);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "criu lazy-pages: %#x (see %s/lazy.log)", st, h_path("d"));
	st = h_wait(server, H_DEADLINE_MS);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "criu page-server: %#x (see %s/ps.log)", st, h_path("d"));
}

/*
 * The protocol's edges that CRIU's server shows only with some page-pipe
 * layouts: answers cut short (page_pipe_read() stops at the end of the
 * run of pages that holds the address) and an answer that does not match
 * its request. A server of the test speaks the protocol over loopback,
 * with the content of the dump's own pages.
 */
#define PS_MAX_ANSWER (4ul << 20) /* the client asks for at most this */

struct stub {
	int lsk;
	uint16_t port;
	struct source *pages;	/* the local source of the same task */
	uint64_t cut;		/* answer at most this many pages */
	bool bad_vaddr;		/* answer the 3rd request with another vaddr */
	/* Die after this many answers (0: never): the connection and the
	 * listening socket closed, until stub_restart(). */
	unsigned int die_after;
	unsigned int answers;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool dead, restart;
	pthread_t th;
};

struct stub_iov {
	uint32_t cmd, pad;
	uint64_t nr_pages, vaddr, dst_id;
};

static bool stub_io(int sk, bool out, void *buf, size_t len)
{
	for (size_t done = 0; done < len;) {
		ssize_t n = out ? send(sk, (char *)buf + done, len - done,
				       MSG_NOSIGNAL)
				: recv(sk, (char *)buf + done, len - done, 0);

		if (n <= 0)
			return false;
		done += (size_t)n;
	}
	return true;
}

/* Listen on 127.0.0.1:st->port (0: any port, then st->port is it). */
static void stub_listen(struct stub *st)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons(st->port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int one = 1;

	st->lsk = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert(st->lsk >= 0);
	setsockopt(st->lsk, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	cr_assert_eq(bind(st->lsk, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(st->lsk, 1), 0);
	cr_assert_eq(getsockname(st->lsk, (struct sockaddr *)&a, &len), 0);
	st->port = ntohs(a.sin_port);
}

/* Its death (its listening socket is closed already): nothing listens
 * until the test restarts it. */
static void stub_die(struct stub *st)
{
	pthread_mutex_lock(&st->lock);
	st->dead = true;
	pthread_cond_broadcast(&st->cond);
	while (!st->restart)
		pthread_cond_wait(&st->cond, &st->lock);
	pthread_mutex_unlock(&st->lock);
	stub_listen(st);
}

/* Serve one connection: true when the client closed the session. */
static bool stub_serve(struct stub *st, int sk, char *buf)
{
	struct stub_iov pi;
	int one = 1;

	/* Header and pages go in two sends: no Nagle wait between them. */
	setsockopt(sk, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	while (stub_io(sk, false, &pi, sizeof(pi))) {
		int32_t zero = 0;

		if (pi.cmd == 0x1023) {
			stub_io(sk, true, &zero, sizeof(zero));
			return true;
		}
		if (pi.nr_pages > st->cut)
			pi.nr_pages = st->cut;
		if (source_read(st->pages, pi.vaddr, buf,
				pi.nr_pages * WL_PAGE) < 0)
			return false;
		pi.cmd = 4u << 16 | 6;
		if (st->bad_vaddr && ++st->answers == 3)
			pi.vaddr += WL_PAGE;
		if (!stub_io(sk, true, &pi, sizeof(pi)) ||
		    !stub_io(sk, true, buf, pi.nr_pages * WL_PAGE))
			return false;
		if (st->die_after && ++st->answers == st->die_after)
			return false;
	}
	return false;
}

/* Connections one after the other, until one ends with PS_IOV_CLOSE. */
static void *stub_main(void *arg)
{
	struct stub *st = arg;
	char *buf = malloc(PS_MAX_ANSWER);
	bool closed = false, dying;

	while (buf && !closed) {
		int sk = accept(st->lsk, NULL, NULL);

		if (sk < 0)
			break;
		closed = stub_serve(st, sk, buf);
		dying = !closed && st->die_after &&
			st->answers == st->die_after;
		/* Before the connection: no new one may come in between. */
		if (dying)
			close(st->lsk);
		close(sk);
		if (dying)
			stub_die(st);
	}
	free(buf);
	return NULL;
}

static void stub_start(struct stub *st)
{
	pthread_mutex_init(&st->lock, NULL);
	pthread_cond_init(&st->cond, NULL);
	stub_listen(st);
	cr_assert_eq(pthread_create(&st->th, NULL, stub_main, st), 0);
}

/* The stub is dead, and the client tried @tries times to reach it. */
static void stub_wait_dead(struct stub *st, struct criu_ps *ps,
			   uint64_t tries)
{
	uint64_t end = h_now_ns() + 60000000000ull;
	struct criu_ps_stats cs;

	for (;;) {
		bool dead;

		pthread_mutex_lock(&st->lock);
		dead = st->dead;
		pthread_mutex_unlock(&st->lock);
		criu_ps_stats(ps, &cs);
		if (dead && cs.failed_connects >= tries)
			return;
		cr_assert(h_now_ns() < end, "the stub did not die, or the "
			  "client did not try to reach it again");
		usleep(1000);
	}
}

static void stub_restart(struct stub *st)
{
	pthread_mutex_lock(&st->lock);
	st->restart = true;
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
}

static void stub_stop(struct stub *st)
{
	pthread_join(st->th, NULL);
	close(st->lsk);
	pthread_cond_destroy(&st->cond);
	pthread_mutex_destroy(&st->lock);
}

/* A client of the stub: a read asked again up to 3 times, a server
 * away up to 30 s (retry.h's defaults); its retries logged, and counted
 * in ps_retry_lines. */
static atomic_uint ps_retry_lines;

static void count_ps_line(void *arg, const char *line)
{
	(void)arg;
	if (strstr(line, "asked again"))
		atomic_fetch_add(&ps_retry_lines, 1);
}

static struct criu_ps *stub_connect(const struct stub *st)
{
	struct criu_ps_opts o = { .size = sizeof(o), .timeout_ms = 5000,
				  .log = count_ps_line };
	struct criu_ps *ps;

	cr_assert_eq(criu_ps_connect("127.0.0.1", st->port, &o, &ps), 0);
	return ps;
}

Test(criu, page_server_short_answers)
{
	struct stub st = { .cut = 3 };
	struct criu_dump *d;
	struct criu_ps *ps;
	struct source *s;
	struct h_task t;

	h_workload(&t, NULL, 4, 41, "basic");
	h_dump(&t, NULL, "d");
	d = open_ok("d");
	cr_assert_eq(criu_task_source(d, t.pid, &st.pages), 0);
	stub_start(&st);
	ps = stub_connect(&st);
	cr_assert_eq(criu_page_server_source(d, t.pid, ps, &s), 0);
	/* Every read asks for more than 3 pages: each answer is cut. */
	check_task_source(s, &t);
	concurrent_reads(s, &t);
	source_destroy(s);
	cr_assert_eq(criu_ps_close(ps), 0);
	stub_stop(&st);
	source_destroy(st.pages);
	criu_dump_close(d);
}

/* An answer that does not match its request loses the connection; what
 * was asked is asked again on a new one, and read right. */
Test(criu, page_server_mismatched_answer)
{
	struct stub st = { .cut = 64, .bad_vaddr = true };
	struct criu_ps_stats cs;
	struct criu_dump *d;
	struct criu_ps *ps;
	struct source *s;
	struct h_task t;

	h_workload(&t, NULL, 4, 43, "basic");
	h_dump(&t, NULL, "d");
	d = open_ok("d");
	cr_assert_eq(criu_task_source(d, t.pid, &st.pages), 0);
	stub_start(&st);
	atomic_store(&ps_retry_lines, 0);
	ps = stub_connect(&st);
	cr_assert_eq(criu_page_server_source(d, t.pid, ps, &s), 0);
	for (unsigned int i = 0; i < 4; i++)
		expect_content(s, &t, 0, i * 16 * WL_PAGE, 16 * WL_PAGE);
	criu_ps_stats(ps, &cs);
	cr_assert_eq(cs.lost, 1);
	cr_assert_eq(cs.connects, 2);
	cr_assert_eq(cs.retry.retries, 1);
	cr_assert_eq(cs.retry.recovered, 1);
	cr_assert_eq(cs.retry.gave_up, 0);
	cr_assert_eq(atomic_load(&ps_retry_lines), 1, "each retry is logged");
	source_destroy(s);
	cr_assert_eq(criu_ps_close(ps), 0);
	stub_stop(&st);
	source_destroy(st.pages);
	criu_dump_close(d);
}

/*
 * issue 25, item 8: a page server that fails once loses no page. The
 * stub dies in the middle of four readers' work (its connection and its
 * listening socket closed); the readers wait while the client tries to
 * reach it; it is started again on its port; every page read is right,
 * none failed, and each read asked again was logged.
 */
Test(criu, page_server_fails_once_loses_nothing)
{
	struct stub st = { .cut = 64, .die_after = 200 };
	struct reader r[4];
	pthread_t th[4];
	atomic_size_t bad = 0;
	struct criu_ps_stats cs;
	struct criu_dump *d;
	struct criu_ps *ps;
	struct source *s;
	struct h_task t;

	h_workload(&t, NULL, 16, 47, "basic");
	h_dump(&t, NULL, "d");
	d = open_ok("d");
	cr_assert_eq(criu_task_source(d, t.pid, &st.pages), 0);
	stub_start(&st);
	atomic_store(&ps_retry_lines, 0);
	ps = stub_connect(&st);
	cr_assert_eq(criu_page_server_source(d, t.pid, ps, &s), 0);
	for (unsigned int i = 0; i < 4; i++) {
		r[i] = (struct reader){ s, &t, i + 11, &bad };
		cr_assert_eq(pthread_create(&th[i], NULL, reader_main, &r[i]),
			     0);
	}
	stub_wait_dead(&st, ps, 3);
	stub_restart(&st);
	for (unsigned int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(atomic_load(&bad), 0, "%zu reads wrong or failed",
		     atomic_load(&bad));
	criu_ps_stats(ps, &cs);
	cr_assert_eq(cs.lost, 1);
	cr_assert_eq(cs.connects, 2);
	cr_assert_eq(cs.retry.outages, 1);
	cr_assert_eq(cs.retry.recovered, 1);
	cr_assert_eq(cs.retry.expired, 0);
	cr_assert_eq(cs.retry.gave_up, 0);
	cr_assert(cs.retry.retries >= 1 && cs.failed_connects >= 3);
	cr_assert_eq(atomic_load(&ps_retry_lines), cs.retry.retries,
		     "each retry is logged");
	source_destroy(s);
	cr_assert_eq(criu_ps_close(ps), 0);
	stub_stop(&st);
	source_destroy(st.pages);
	criu_dump_close(d);
}

/* ---- faultd lazy-pages: the drop-in for criu lazy-pages ---- */

/* Wait for faultd @lp; it must exit with @code. */
static void faultd_exits(pid_t lp, int code)
{
	int st = h_wait(lp, H_DEADLINE_MS);

	cr_assert(st != -ETIMEDOUT, "faultd lazy-pages did not finish");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == code,
		  "faultd lazy-pages: status %#x, expected exit %d (see %s)",
		  st, code, h_path("faultd.out"));
}

/* criu restore --lazy-pages of dump folder @d; its exit code. */
static int restore(const char *ns, const char *d)
{
	return h_criu(ns, "restore -D %s --lazy-pages -d -o rst.log",
		      h_path(d));
}

/*
 * Dump a workload of @mode (@mib MiB), restore it served by faultd
 * lazy-pages, let it check itself; faultd must exit 0, all in. Returns
 * the parent's result line in @line.
 */
static void faultd_restore(const char *mode, size_t mib, char *line,
			   size_t len)
{
	struct h_task t;
	pid_t lp;

	h_workload(&t, NULL, mib, 51, mode);
	h_dump(&t, NULL, "d");
	lp = h_faultd_bg(NULL, "-D %s", h_path("d"));
	cr_assert(lp > 0, "faultd lazy-pages did not start (see %s)",
		  h_path("faultd.out"));
	cr_assert_eq(restore(NULL, "d"), 0, "criu restore failed (see %s)",
		     h_path("d/rst.log"));
	h_go_and_check(&t, line, len);
	faultd_exits(lp, 0);
	cr_assert(h_faultd_said("faultd lazy-pages: all in: "));
}

#define FAULTD_MODE(mode)                                                      \
	Test(criu, faultd_##mode)                                              \
	{                                                                      \
		char line[512];                                                \
		faultd_restore(#mode, restore_mib(), line, sizeof(line));      \
	}

FAULTD_MODE(basic)
FAULTD_MODE(threads)
FAULTD_MODE(mremap)
FAULTD_MODE(dontneed)
FAULTD_MODE(mprotect)
FAULTD_MODE(random)

/* 512 MiB of pseudo-random memory (FAULTD_CRIU_BIG=0: the default size). */
Test(criu, faultd_512m)
{
	const char *big = getenv("FAULTD_CRIU_BIG");
	char line[512];

	faultd_restore("basic", big && !strcmp(big, "0") ? restore_mib() : 512,
		       line, sizeof(line));
}

Test(criu, faultd_zombie)
{
	char line[512];

	faultd_restore("zombie", restore_mib(), line, sizeof(line));
	cr_assert(strstr(line, "zombie_ok=1"), "%s", line);
}

/* The workload forks at once after the restore: both check every byte. */
Test(criu, faultd_fork)
{
	char buf[4096], line[512];
	int fd;
	ssize_t n;

	faultd_restore("fork", restore_mib(), line, sizeof(line));
	fd = open(h_path("result"), O_RDONLY);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	cr_assert(n > 0);
	buf[n] = '\0';
	cr_assert(strstr(buf, "role=child") && strstr(buf, "role=parent"),
		  "%s", buf);
}

/*
 * The process is left idle: the push alone brings every page in, and
 * faultd exits before the process reads anything.
 */
Test(criu, faultd_all_in_idle)
{
	char line[512];
	struct h_task t;
	pid_t lp;

	h_workload(&t, NULL, restore_mib(), 53, "basic");
	h_dump(&t, NULL, "d");
	lp = h_faultd_bg(NULL, "-D %s", h_path("d"));
	cr_assert(lp > 0);
	cr_assert_eq(restore(NULL, "d"), 0);
	faultd_exits(lp, 0);
	h_go_and_check(&t, line, sizeof(line));
}

/* Is there a read-only VMA in region 0 of @pid (the mprotect split)? */
static bool split_seen(pid_t pid, const struct h_task *t)
{
	char path[64], l[512];
	bool seen = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	while (f && !seen && fgets(l, sizeof(l), f)) {
		unsigned long a, b;
		char prot[8];

		seen = sscanf(l, "%lx-%lx %7s", &a, &b, prot) == 3 &&
		       a > t->r0 && b < t->r0 + t->r0_len &&
		       !strcmp(prot, "r--p");
	}
	if (f)
		fclose(f);
	return seen;
}

/*
 * An mprotect() inside a lazy range while the background copy is still
 * to cross it, and nobody faults there: CRIU retries the same copy over
 * the split for ever; faultd must take the copy apart and bring every
 * page in by itself.
 */
Test(criu, faultd_mprotect_split_push)
{
	char line[512];
	struct h_task t;
	pid_t lp;

	h_workload(&t, NULL, restore_mib(), 55, "mprotect-wait");
	h_dump(&t, NULL, "d");
	lp = h_faultd_bg(NULL, "-D %s", h_path("d"));
	cr_assert(lp > 0);
	cr_assert_eq(restore(NULL, "d"), 0);
	cr_assert_eq(kill(t.pid, SIGUSR1), 0);
	while (!split_seen(t.pid, &t))
		cr_assert_eq(kill(t.pid, 0), 0, "the workload died");
	faultd_exits(lp, 0);
	h_go_and_check(&t, line, sizeof(line));
}

/* ---- bad images: a clear error, and the restore fails ---- */

static void faultd_refuses(const char *d, const char *words)
{
	pid_t lp = h_faultd_bg(NULL, "-D %s", h_path(d));

	cr_assert(lp < 0, "faultd lazy-pages started on a bad dump");
	faultd_exits(-lp, 1);
	cr_assert(h_faultd_said(words), "faultd did not say \"%s\" (see %s)",
		  words, h_path("faultd.out"));
	/* Nobody listens: criu restore fails, nothing is served as zeros. */
	cr_assert_neq(restore(NULL, d), 0);
}

static void faultd_refuses_damage(const struct damage *dm, const char *says)
{
	faultd_refuses(dm->name, says);
}

Test(criu, faultd_bad_images)
{
	pid_t pid = each_damage(57, true, faultd_refuses_damage);

	/* The workload was never restored: it is not running. */
	cr_assert_eq(kill(pid, 0), -1);
}

/* ---- --verify: pages checked against the --sum sidecar ---- */

/*
 * The --sum sidecar of dump @d, made (a usage error first: no -D); then
 * one page of pages-1.img goes bad, as if after the sidecar was made.
 */
static void sum_then_spoil(const char *d)
{
	char p[256], page[4096];
	int fd;

	snprintf(p, sizeof(p), "lazy-pages --sum");
	cr_assert_eq(h_run(NULL, h_path("sum.out"),
			   h_words(getenv("FAULTD"), p)), 2,
		     "--sum without -D is a usage error");
	snprintf(p, sizeof(p), "lazy-pages --sum -D %s", h_path(d));
	cr_assert_eq(h_run(NULL, h_path("sum.out"),
			   h_words(getenv("FAULTD"), p)), 0);
	snprintf(p, sizeof(p), "%s/pages-1.img", h_path(d));
	fd = open(p, O_RDWR);
	cr_assert(fd >= 0);
	cr_assert_eq(pread(fd, page, sizeof(page), 4096 * 100), 4096);
	page[17] ^= 0x40;
	cr_assert_eq(pwrite(fd, page, sizeof(page), 4096 * 100), 4096);
	close(fd);
}

/* The bad page is poisoned: reading it kills the workload with SIGBUS,
 * never with a wrong byte seen. */
static void dies_of_the_bad_page(const struct h_task *t)
{
	int st;

	cr_assert_eq(kill(t->pid, SIGUSR1), 0);
	st = h_wait(t->pid, H_DEADLINE_MS);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS,
		  "the workload: status %#x, not SIGBUS", st);
}

Test(criu, faultd_verify_poisons)
{
	struct h_task t;
	pid_t lp;

	h_workload(&t, NULL, 8, 59, "basic");
	h_dump(&t, NULL, "d");
	sum_then_spoil("d");
	lp = h_faultd_bg(NULL, "-D %s --verify %s/faultd-pages.crc32c",
			 h_path("d"), h_path("d"));
	cr_assert(lp > 0, "see %s", h_path("faultd.out"));
	cr_assert_eq(restore(NULL, "d"), 0);
	dies_of_the_bad_page(&t);
	faultd_exits(lp, 1);
	cr_assert(h_faultd_said("poisoned"), "see %s", h_path("faultd.out"));
	cr_assert(h_faultd_said("restore incomplete"));
}

/*
 * pages-N.img cut short under a running restore: faultd installs from its
 * mapping of the file, and an install from a page past the new end fails
 * (EFAULT); the page is then read, the read fails, and it is poisoned -
 * the process dies of SIGBUS, never reads zeros, never waits for ever.
 * Recording a working set, nothing is pushed: every page comes by a fault.
 */
Test(criu, faultd_pages_cut_under_it)
{
	struct h_task t;
	pid_t lp;
	int st;

	h_workload(&t, NULL, 16, 60, "basic");
	h_dump(&t, NULL, "d");
	lp = h_faultd_bg(NULL, "-D %s --record-working-set %s", h_path("d"),
			 h_path("ws"));
	cr_assert(lp > 0, "see %s", h_path("faultd.out"));
	cr_assert_eq(restore(NULL, "d"), 0, "see %s", h_path("d/rst.log"));
	cr_assert_eq(truncate(h_path("d/pages-1.img"), 4096 * 64), 0);
	cr_assert_eq(kill(t.pid, SIGUSR1), 0);
	st = h_wait(t.pid, H_DEADLINE_MS);
	cr_assert(st != -ETIMEDOUT, "the workload waits for ever");
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS,
		  "the workload: status %#x, not SIGBUS", st);
	faultd_exits(lp, 1);
	cr_assert(h_faultd_said("poisoned"), "see %s", h_path("faultd.out"));
}

/*
 * An install that fails (an injected ENOMEM of UFFDIO_COPY, in a build
 * with -Dfault-injection=true) is tried again; one that keeps failing
 * poisons its page. Either way no faulting thread is left asleep (a failed
 * ioctl wakes no one). Nothing is pushed while recording: every copy is a
 * fault's.
 */
static __attribute__((unused)) int inject_restore(const char *rule)
{
	struct h_task t;
	pid_t lp;
	int st;

	h_workload(&t, NULL, 16, 62, "basic");
	h_dump(&t, NULL, "d");
	setenv("FAULTD_INJECT", rule, 1);
	lp = h_faultd_bg(NULL, "-D %s -v --record-working-set %s",
			 h_path("d"), h_path("ws"));
	unsetenv("FAULTD_INJECT");
	cr_assert(lp > 0, "see %s", h_path("faultd.out"));
	cr_assert_eq(restore(NULL, "d"), 0, "see %s", h_path("d/rst.log"));
	cr_assert_eq(kill(t.pid, SIGUSR1), 0);
	st = h_wait(t.pid, H_DEADLINE_MS);
	cr_assert(st != -ETIMEDOUT, "the workload waits for ever");
	faultd_exits(lp, WIFEXITED(st) && !WEXITSTATUS(st) ? 0 : 1);
	return st;
}

Test(criu, faultd_install_fails_once)
{
#ifndef FAULTD_FAULT_INJECTION
	cr_skip_test("needs -Dfault-injection=true (scripts/sanitize.sh asan)");
#else
	int st = inject_restore("copy:3:ENOMEM");

	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "the workload: status %#x (see %s)", st,
		  h_path("faultd.out"));
	cr_assert(h_faultd_said("Cannot allocate memory: again"));
#endif
}

Test(criu, faultd_install_keeps_failing)
{
#ifndef FAULTD_FAULT_INJECTION
	cr_skip_test("needs -Dfault-injection=true (scripts/sanitize.sh asan)");
#else
	int st = inject_restore("copy:3+:ENOMEM");

	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS,
		  "the workload: status %#x, not SIGBUS", st);
	cr_assert(h_faultd_said("Cannot allocate memory: poisoned"),
		  "see %s", h_path("faultd.out"));
#endif
}

/* ---- the socket: only root and the daemon's user ---- */

Test(criu, faultd_socket_refused)
{
	char p[256];
	struct h_task t;
	struct stat st;
	pid_t lp, child;
	int fd, s;

	h_workload(&t, NULL, 4, 61, "basic");
	h_dump(&t, NULL, "d");
	/* A path that is there and not a socket of ours: refused. */
	snprintf(p, sizeof(p), "%s/lazy-pages.socket", h_path("d"));
	fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	cr_assert(fd >= 0);
	close(fd);
	lp = h_faultd_bg(NULL, "-D %s", h_path("d"));
	cr_assert(lp < 0);
	faultd_exits(-lp, 1);
	cr_assert(h_faultd_said("is not a socket of this user"));
	cr_assert_eq(unlink(p), 0);

	/* A socket 0600 from its bind on: another user cannot connect. */
	lp = h_faultd_bg(NULL, "-D %s", h_path("d"));
	cr_assert(lp > 0);
	cr_assert_eq(stat(p, &st), 0);
	cr_assert(S_ISSOCK(st.st_mode));
	cr_assert_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
	child = fork();
	if (child == 0) {
		struct sockaddr_un a = { .sun_family = AF_UNIX };

		strcpy(a.sun_path, p);
		if (setgid(65534) || setuid(65534))
			_exit(3);
		s = socket(AF_UNIX, SOCK_STREAM, 0);
		_exit(connect(s, (struct sockaddr *)&a, sizeof(a)) == 0 ? 1
			      : errno == EACCES		      ? 0
								      : 2);
	}
	st.st_mode = (mode_t)h_wait(child, H_DEADLINE_MS);
	cr_assert(WIFEXITED(st.st_mode) && WEXITSTATUS(st.st_mode) == 0,
		  "user nobody: %#x (1: it connected)", st.st_mode);
	/* The daemon still serves the restore of root. */
	cr_assert_eq(restore(NULL, "d"), 0);
	{
		char line[512];

		h_go_and_check(&t, line, sizeof(line));
	}
	faultd_exits(lp, 0);
}

/*
 * A work folder swapped for a symlink while faultd lazy-pages runs (the
 * default one is the dump's, which may be the restored user's): on its
 * way out it used to remove lazy-pages.socket and .ctl through the
 * symlink, whatever files of those names its target held. It removes its
 * own sockets only, the keeper's too, from the folder it made them in.
 */
Test(criu, faultd_workdir_swapped)
{
	static const char *const names[] = { "lazy-pages.socket",
					     "lazy-pages.socket.ctl",
					     "lazy-pages.socket.keeper" };
	char w[256], old[256], v[256], p[300];
	struct h_task t;
	pid_t lp;
	int fd;

	h_workload(&t, NULL, 4, 61, "basic");
	h_dump(&t, NULL, "d");
	snprintf(w, sizeof(w), "%s", h_path("w"));
	snprintf(old, sizeof(old), "%s", h_path("w.old"));
	snprintf(v, sizeof(v), "%s", h_path("v"));
	cr_assert_eq(mkdir(w, 0755), 0);
	cr_assert_eq(mkdir(v, 0755), 0);
	for (size_t i = 0; i < 2; i++) {
		snprintf(p, sizeof(p), "%s/%s", v, names[i]);
		fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		cr_assert(fd >= 0);
		close(fd);
	}
	lp = h_faultd_bg(NULL, "-D %s -W %s", h_path("d"), w);
	cr_assert(lp > 0);
	cr_assert_eq(rename(w, old), 0);
	cr_assert_eq(symlink(v, w), 0);
	kill(lp, SIGTERM);
	cr_assert(h_wait(lp, H_DEADLINE_MS) != -ETIMEDOUT);
	for (size_t i = 0; i < 2; i++) {
		snprintf(p, sizeof(p), "%s/%s", v, names[i]);
		cr_assert_eq(access(p, F_OK), 0, "%s was removed", p);
	}
	/* Its own: gone (the keeper's once the keeper has read BYE). */
	for (size_t i = 0; i < 3; i++) {
		uint64_t end = h_now_ns() + H_DEADLINE_MS * 1000000ull;

		snprintf(p, sizeof(p), "%s/%s", old, names[i]);
		while (!access(p, F_OK) && h_now_ns() < end)
			usleep(10000);
		cr_assert_neq(access(p, F_OK), 0, "%s stayed", p);
	}
}

/* ---- kill -9 after RSTF, and a restart that adopts the restore ---- */

/* Pages in and total of the session faultd reports on its control
 * socket; false when it does not answer (it exited). */
static bool faultd_progress(const char *d, uint64_t *in, uint64_t *total)
{
	static char buf[PROTO_MAX_MSG];
	struct proto_status *st = (void *)buf;
	struct proto_hello hello;
	struct proto_hdr req;
	char path[256];
	ssize_t n;
	int s;

	snprintf(path, sizeof(path), "%s/lazy-pages.socket.ctl", h_path(d));
	s = proto_connect(path);
	if (s < 0)
		return false;
	proto_init(&req, MSG_STATUS, sizeof(req));
	n = proto_hello(s, 0, &hello);
	if (!n)
		n = proto_call(s, &req, NULL, 0, st, sizeof(buf));
	close(s);
	if (n <= 0 || st->h.type != MSG_STATUS || st->nr_sessions != 1)
		return false;
	*in = st->s[0].pages_urgent + st->s[0].pages_background;
	*total = st->s[0].pages_total;
	return true;
}

static unsigned int kill_rounds(void)
{
	const char *s = getenv("FAULTD_CRIU_KILLS");

	return s && atoi(s) > 0 ? (unsigned int)atoi(s) : 10;
}

/*
 * Kill faultd once at least @tenth tenths of the pages are in (0: right
 * after criu restore returned); the workload runs already (@go_first) or
 * is told to go after the restart. The restarted faultd adopts the
 * restore from the keeper and finishes it; every byte must be right.
 */
static void kill_once(struct h_task *t, unsigned int tenth, bool go_first)
{
	uint64_t in = 0, total = 1;
	bool adopted = false;
	pid_t lp, lp2;
	int st;

	unlink(h_path("faultd.out")); /* this round's lines only */
	lp = h_faultd_bg(NULL, "-D %s", h_path("d"));
	cr_assert(lp > 0);
	unlink(h_path("result"));
	cr_assert_eq(restore(NULL, "d"), 0, "see %s", h_path("d/rst.log"));
	if (go_first)
		cr_assert_eq(kill(t->pid, SIGUSR1), 0);
	while (tenth && faultd_progress("d", &in, &total) &&
	       in * 10 < total * tenth)
		;
	kill(lp, SIGKILL);
	st = h_wait(lp, H_DEADLINE_MS);
	cr_assert(st != -ETIMEDOUT);
	/* Killed after it said every page was in, it was as done as one
	 * that exited: a new faultd would have nothing to adopt. */
	if (WIFSIGNALED(st) && h_faultd_said("all in")) {
		lp2 = 0;
	} else if (WIFSIGNALED(st)) {
		lp2 = h_faultd_bg(NULL, "-D %s", h_path("d"));
		cr_assert(lp2 > 0, "the restarted faultd did not start (see "
			  "%s)", h_path("faultd.out"));
		/* Not adopted: it was killed after its session had ended
		 * (the kept copies dropped), before the status line. The
		 * workload must then finish right with no faultd at all:
		 * a session still kept would leave its faults waiting. */
		adopted = h_faultd_said("adopted the restore");
	} else {
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%#x", st);
		lp2 = 0;
	}
	if (!go_first)
		cr_assert_eq(kill(t->pid, SIGUSR1), 0);
	st = h_wait(t->pid, H_DEADLINE_MS);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "kill at %u/10 (go %s): the workload: %#x", tenth,
		  go_first ? "first" : "after", st);
	if (lp2 && adopted) {
		faultd_exits(lp2, 0);
	} else if (lp2) { /* it waits for a restore that will not come */
		kill(lp2, SIGTERM);
		cr_assert_neq(h_wait(lp2, H_DEADLINE_MS), -ETIMEDOUT);
	}
	cr_log_info("kill at >= %u/10 (%llu of %llu pages in)%s", tenth,
		    (unsigned long long)in, (unsigned long long)total,
		    lp2 && !adopted ? ", after the session ended" : "");
}

Test(criu, faultd_kill_restart)
{
	struct h_task t;
	unsigned int n = kill_rounds();

	h_workload(&t, NULL, restore_mib(), 63, "basic");
	h_dump(&t, NULL, "d");
	/* One dump, restored n times: each restore's process exits after
	 * its check, and its pid is free again. */
	for (unsigned int i = 0; i < n; i++)
		kill_once(&t, i % 10, i % 2);
}

/* ---- one long-running daemon, restores asked for with faultctl ---- */

/* STATUS of the daemon on @sock: its sessions, or -1 if it does not answer. */
static int daemon_sessions(const char *sock)
{
	static char buf[PROTO_MAX_MSG];
	struct proto_status *st = (void *)buf;
	struct proto_hello hello;
	struct proto_hdr req;
	ssize_t n;
	int s = proto_connect(sock);

	if (s < 0)
		return -1;
	proto_init(&req, MSG_STATUS, sizeof(req));
	n = proto_hello(s, 0, &hello);
	if (!n)
		n = proto_call(s, &req, NULL, 0, st, sizeof(buf));
	close(s);
	return n > 0 && st->h.type == MSG_STATUS ? (int)st->nr_sessions : -1;
}

static bool exited(pid_t pid)
{
	int st;

	return waitpid(pid, &st, WNOHANG) == pid;
}

static pid_t running_daemon; /* killed by daemon_fini() if a test failed */

static void daemon_fini(void)
{
	if (running_daemon > 0)
		kill(running_daemon, SIGKILL);
	h_fini();
}

/* The daemon ($FAULTD, no subcommand) on h_path("fd.sock"), answering. */
static pid_t daemon_start(void)
{
	static char line[256];
	uint64_t end = h_now_ns() + H_DEADLINE_MS * 1000000ull;
	pid_t pid;

	snprintf(line, sizeof(line), "--socket %s -v", h_path("fd.sock"));
	pid = h_spawn(NULL, h_path("daemon.out"), -1,
		      h_words(getenv("FAULTD"), line));
	while (daemon_sessions(h_path("fd.sock")) < 0) {
		cr_assert(h_now_ns() < end && !exited(pid),
			  "the daemon does not answer (see %s)",
			  h_path("daemon.out"));
		usleep(1000);
	}
	running_daemon = pid;
	return pid;
}

/* faultctl lazy-pages -D @d (a folder of the scratch one) and the words
 * @more; its exit code. */
static int faultctl_lazy_with(const char *d, const char *more)
{
	static char line[1024];

	cr_assert(getenv("FAULTCTL"), "FAULTCTL not set (run through meson)");
	snprintf(line, sizeof(line), "--socket %s lazy-pages -D %s %s",
		 h_path("fd.sock"), h_path(d), more);
	return h_run(NULL, h_path("faultctl.out"),
		     h_words(getenv("FAULTCTL"), line));
}

static int faultctl_lazy(const char *d)
{
	return faultctl_lazy_with(d, "");
}

/* Tell @t to go; its exit must be 0 (every byte right). */
static void go_and_wait(const struct h_task *t)
{
	int st;

	cr_assert_eq(kill(t->pid, SIGUSR1), 0);
	st = h_wait(t->pid, H_DEADLINE_MS);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "workload %d: status %#x (see %s)", (int)t->pid, st,
		  h_path("result"));
}

/* Until the daemon serves no session (every restore all in). */
static void daemon_idle(void)
{
	uint64_t end = h_now_ns() + H_DEADLINE_MS * 1000000ull;

	while (daemon_sessions(h_path("fd.sock")) != 0) {
		cr_assert(h_now_ns() < end, "the daemon's sessions do not end");
		usleep(1000);
	}
}

static void daemon_stop(pid_t d)
{
	int st;

	kill(d, SIGTERM);
	st = h_wait(d, H_DEADLINE_MS);
	running_daemon = 0;
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "the daemon: status %#x (see %s)", st, h_path("daemon.out"));
}

/*
 * Two dumps restored at once through one daemon, each asked for with
 * faultctl; bad requests get a clear error and leave it serving.
 */
Test(criu, daemon_two_restores, .fini = daemon_fini)
{
	struct h_task a, b;
	pid_t d;

	h_workload(&a, NULL, restore_mib(), 71, "basic");
	h_dump(&a, NULL, "da");
	h_workload(&b, NULL, restore_mib(), 72, "threads");
	h_dump(&b, NULL, "db");
	cr_assert_eq(mkdir(h_path("empty"), 0755), 0);
	d = daemon_start();
	cr_assert_eq(faultctl_lazy("da"), 0, "see %s", h_path("faultctl.out"));
	cr_assert_eq(faultctl_lazy("db"), 0, "see %s", h_path("faultctl.out"));
	cr_assert(h_file_says("faultctl.out", "lazy-pages.socket ("));
	/* Refused, with the reason, before any restore: no dump there, and
	 * a socket somebody (the daemon) listens on already. */
	cr_assert_eq(faultctl_lazy("empty"), 1);
	cr_assert(h_file_says("faultctl.out", "inventory.img"), "see %s",
		  h_path("faultctl.out"));
	cr_assert_eq(faultctl_lazy("da"), 1);
	cr_assert(h_file_says("faultctl.out", "Address already in use"),
		  "see %s", h_path("faultctl.out"));
	cr_assert_eq(restore(NULL, "da"), 0, "see %s", h_path("da/rst.log"));
	cr_assert_eq(restore(NULL, "db"), 0, "see %s", h_path("db/rst.log"));
	/* Both check themselves at once, both served by the one daemon. */
	cr_assert_eq(kill(a.pid, SIGUSR1), 0);
	go_and_wait(&b);
	cr_assert_eq(h_wait(a.pid, H_DEADLINE_MS), 0, "see %s",
		     h_path("result"));
	daemon_idle();
	cr_assert(h_file_says("result", "role=parent"));
	daemon_stop(d);
}

/* The entries the keeper held when the last daemon started (its -v line),
 * or -1 if no daemon said. */
static int kept_entries(void)
{
	const char *buf = h_file_read("daemon.out"), *key = " entries", *p;
	const char *last = NULL;

	for (p = buf; (p = strstr(p, key)); p++)
		last = p;
	if (!last)
		return -1;
	while (last > buf && last[-1] != ' ')
		last--;
	return atoi(last);
}

/*
 * kill -9 of the daemon while it serves a restore it was asked for: the
 * restarted daemon adopts it from the keeper, opens its dump again from
 * the folder the session's record names, and finishes it.
 */
Test(criu, daemon_kill_restart, .fini = daemon_fini)
{
	struct h_task t;
	int kept;
	pid_t d;

	h_workload(&t, NULL, restore_mib(), 73, "basic");
	h_dump(&t, NULL, "d");
	d = daemon_start();
	cr_assert_eq(faultctl_lazy("d"), 0, "see %s", h_path("faultctl.out"));
	cr_assert_eq(restore(NULL, "d"), 0, "see %s", h_path("d/rst.log"));
	/* Killed with the restore's pages not pushed yet, or some: the
	 * workload has not run, and its process holds nothing but what
	 * the push put in. */
	kill(d, SIGKILL);
	cr_assert_neq(h_wait(d, H_DEADLINE_MS), -ETIMEDOUT);
	running_daemon = 0;
	d = daemon_start();
	/* The keeper holds the listening socket, and the session unless
	 * every page was in before the kill (its entry goes first, then
	 * the status line: the line cannot tell). A kept one is adopted:
	 * its thread says so once it runs. With its task's space, or with
	 * none when the kill came before criu restore sent the task's
	 * userfaultfd: the adopted session reads it from criu then. */
	kept = kept_entries() - 1;
	cr_assert(kept == 0 || kept == 1, "%d sessions kept (see %s)", kept,
		  h_path("daemon.out"));
	for (uint64_t end = h_now_ns() + H_DEADLINE_MS * 1000000ull;
	     kept && !h_file_says("daemon.out", ": adopted, 1 spaces") &&
	     !h_file_says("daemon.out", ": adopted, 0 spaces");
	     usleep(1000))
		cr_assert(h_now_ns() < end, "not adopted (see %s)",
			  h_path("daemon.out"));
	go_and_wait(&t);
	daemon_idle();
	daemon_stop(d);
}

/*
 * The options of faultd lazy-pages, asked of the daemon: --verify poisons
 * the page that went bad after the sidecar was made, --handlers and
 * --fault-around reach the session; bad values and a missing sidecar are
 * refused with their reasons, before any restore.
 */
Test(criu, daemon_verify_and_options, .fini = daemon_fini)
{
	char more[512];
	struct h_task t;
	pid_t d;

	h_workload(&t, NULL, 8, 74, "basic");
	h_dump(&t, NULL, "d");
	sum_then_spoil("d");
	d = daemon_start();
	cr_assert_eq(faultctl_lazy_with("d", "--handlers 5"), 2);
	cr_assert(h_file_says("faultctl.out", "'5' is not a number from 0 "
			      "to 4"), "see %s", h_path("faultctl.out"));
	cr_assert_eq(faultctl_lazy_with("d", "--fault-around 4096"), 2);
	snprintf(more, sizeof(more), "--verify %s", h_path("d/inventory.img"));
	cr_assert_eq(faultctl_lazy_with("d", more), 1);
	cr_assert(h_file_says("faultctl.out", "inventory.img"), "see %s",
		  h_path("faultctl.out"));
	snprintf(more, sizeof(more), "--verify %s/faultd-pages.crc32c "
		 "--handlers 3 --fault-around 128", h_path("d"));
	cr_assert_eq(faultctl_lazy_with("d", more), 0, "see %s",
		     h_path("faultctl.out"));
	cr_assert_eq(restore(NULL, "d"), 0, "see %s", h_path("d/rst.log"));
	dies_of_the_bad_page(&t);
	daemon_idle();
	cr_assert(h_file_says("daemon.out", "connected: 3 handlers, "
			      "fault-around 128 KiB, pages checked"),
		  "see %s", h_path("daemon.out"));
	cr_assert(h_file_says("daemon.out", "restore incomplete"), "see %s",
		  h_path("daemon.out"));
	daemon_stop(d);
}

/* ---- working sets: a restore recorded, then one replayed ---- */

/* faultd.out, whole (the runs of a test append to it). */
static char *faultd_out(void)
{
	return h_file_read("faultd.out");
}

/* The counters of the last run's status line ("all in: ..."). */
struct ws_counts {
	uint64_t urgent, pushed, zero, replayed, faults;
};

static void ws_counts_of(const char *file, struct ws_counts *c)
{
	const char *out = h_file_read(file), *l = NULL, *p;

	for (p = out; (p = strstr(p, "faultd lazy-pages: all in: ")); p++)
		l = p;
	cr_assert(l, "no status line in %s", h_path(file));
	cr_assert_eq(sscanf(strstr(l, "pages in ("), "pages in (%" SCNu64
			    " for faults, %" SCNu64 " pushed, %" SCNu64
			    " zero; %" SCNu64 " replayed)", &c->urgent,
			    &c->pushed, &c->zero, &c->replayed), 4, "%.200s",
		     l);
	cr_assert_eq(sscanf(strstr(l, "poisoned, "), "poisoned, %" SCNu64
			    " faults", &c->faults), 1, "%.200s", l);
}

/* Wait until @file of the scratch folder says @what. */
static void wait_said_in(const char *file, const char *what)
{
	uint64_t end = h_now_ns() + H_DEADLINE_MS * 1000000ull;

	while (!h_file_says(file, what)) {
		cr_assert(h_now_ns() < end, "%s does not say \"%s\"",
			  h_path(file), what);
		usleep(1000);
	}
}

/* The pages of region 0 the workload's mode part checks. */
static bool part_page(const struct h_task *t, uint64_t k)
{
	return wl_word(t->seed, 2, k * 8) % 10 == 0;
}

/* A restore of dump "d" served by faultd with @flags; the workload runs
 * after @wait (if any) was said. Returns the run's counters. */
static void ws_restore(struct h_task *t, const char *flags, const char *wait,
		       struct ws_counts *c)
{
	char line[512];
	pid_t lp = h_faultd_bg(NULL, "-D %s -v %s", h_path("d"), flags);

	cr_assert(lp > 0, "see %s", h_path("faultd.out"));
	unlink(h_path("result"));
	cr_assert_eq(restore(NULL, "d"), 0, "see %s", h_path("d/rst.log"));
	if (wait)
		wait_said_in("faultd.out", wait);
	h_go_and_check(t, line, sizeof(line));
	faultd_exits(lp, 0);
	ws_counts_of("faultd.out", c);
}

/* ws_restore(), the restore asked of the daemon (daemon_start()). */
static void ws_restore_daemon(struct h_task *t, const char *flags,
			      const char *wait, struct ws_counts *c)
{
	char line[512];

	cr_assert_eq(faultctl_lazy_with("d", flags), 0, "see %s",
		     h_path("faultctl.out"));
	unlink(h_path("result"));
	cr_assert_eq(restore(NULL, "d"), 0, "see %s", h_path("d/rst.log"));
	if (wait)
		wait_said_in("daemon.out", wait);
	h_go_and_check(t, line, sizeof(line));
	daemon_idle();
	ws_counts_of("daemon.out", c);
}

/*
 * The recorded set: the task's space, and every page the workload checked
 * in it (nothing is pushed while recording, a page per fault).
 */
static uint64_t ws_check_set(const struct h_task *t, const char *path)
{
	uint64_t part = 0, found = 0;
	const char *why = NULL;
	struct wset ws;

	cr_assert_eq(wset_load(path, NULL, &ws, &why), 0, "%s: %s", path, why);
	cr_assert_eq(ws.nr_spaces, 1);
	cr_assert_eq(ws.spaces[0].space_id, (uint64_t)t->pid);
	cr_assert_eq(ws.spaces[0].page_size, 4096);
	for (uint64_t k = 0; k < t->r0_len / WL_PAGE; k++)
		part += part_page(t, k);
	for (uint64_t i = 0; i < ws.nr; i++) {
		uint64_t a = ws.e[i].page * WL_PAGE;

		found += a >= t->r0 && a < t->r0 + t->r0_len &&
			 part_page(t, (a - t->r0) / WL_PAGE);
	}
	cr_assert_eq(found, part, "%llu of the %llu pages the workload "
		     "checked are in the set", (unsigned long long)found,
		     (unsigned long long)part);
	wset_free(&ws);
	return part;
}

typedef void ws_restore_fn(struct h_task *t, const char *flags,
			   const char *wait, struct ws_counts *c);

/*
 * Dump "d" of @t restored twice by @run: a set recorded, then the
 * set replayed after RSTF (the workload goes once it is in). The set
 * holds every page the workload checked; the replay brings them in before
 * the workload runs, and it faults on few of them.
 */
static void ws_record_then_replay(struct h_task *t, ws_restore_fn *run)
{
	struct ws_counts rec, rep;
	char flags[1024];
	uint64_t part;

	snprintf(flags, sizeof(flags), "--record-working-set %s",
		 h_path("d.ws"));
	run(t, flags, NULL, &rec);
	cr_assert_eq(rec.pushed, 0, "nothing pushed while recording");
	part = ws_check_set(t, h_path("d.ws"));
	cr_assert_geq(rec.faults, part);
	snprintf(flags, sizeof(flags), "--working-set %s", h_path("d.ws"));
	run(t, flags, "working set replayed", &rep);
	cr_assert_geq(rep.replayed, part);
	cr_assert_leq(rep.faults, rec.faults - part,
		      "the replayed restore faulted %llu times, the recorded "
		      "one %llu (%llu on the pages the workload checked)",
		      (unsigned long long)rep.faults,
		      (unsigned long long)rec.faults,
		      (unsigned long long)part);
	cr_assert_leq(rep.faults * 20, part, "more than 5 %% of the set's "
		      "pages faulted");
	cr_log_info("recorded: %llu faults (%llu checked pages); replayed: "
		    "%llu pages, %llu faults", (unsigned long long)rec.faults,
		    (unsigned long long)part, (unsigned long long)rep.replayed,
		    (unsigned long long)rep.faults);
}

Test(criu, faultd_working_set)
{
	struct h_task t;

	h_workload(&t, NULL, restore_mib(), 67, "part");
	h_dump(&t, NULL, "d");
	ws_record_then_replay(&t, ws_restore);
}

/*
 * The same, each restore asked of one daemon with faultctl; a request
 * that names a set to replay and one to record is a usage error, and a
 * set that is not there is refused by faultctl.
 */
Test(criu, daemon_working_set, .fini = daemon_fini)
{
	char flags[1024];
	struct h_task t;
	pid_t d;

	h_workload(&t, NULL, restore_mib(), 75, "part");
	h_dump(&t, NULL, "d");
	d = daemon_start();
	snprintf(flags, sizeof(flags), "--working-set %s "
		 "--record-working-set %s", h_path("d.ws"), h_path("d.ws"));
	cr_assert_eq(faultctl_lazy_with("d", flags), 2);
	snprintf(flags, sizeof(flags), "--working-set %s", h_path("d.ws"));
	cr_assert_eq(faultctl_lazy_with("d", flags), 1);
	cr_assert(h_file_says("faultctl.out", "No such file"), "see %s",
		  h_path("faultctl.out"));
	ws_record_then_replay(&t, ws_restore_daemon);
	daemon_stop(d);
}

/* Sets of another dump: refused before criu restore connects. */
Test(criu, faultd_working_set_of_another_dump)
{
	char flags[512], line[512];
	struct ws_counts c;
	struct h_task a, b;
	const char *why = NULL;
	struct wset ws;
	pid_t lp;

	h_workload(&a, NULL, 16, 68, "part");
	h_dump(&a, NULL, "a");
	h_workload(&b, NULL, 16, 69, "part");
	h_dump(&b, NULL, "d");
	/* A set of a's task, recorded. */
	lp = h_faultd_bg(NULL, "-D %s --record-working-set %s", h_path("a"),
			 h_path("a.ws"));
	cr_assert(lp > 0);
	cr_assert_eq(restore(NULL, "a"), 0);
	h_go_and_check(&a, line, sizeof(line));
	faultd_exits(lp, 0);
	/* The same set said to be of b's task: of another dump still. */
	cr_assert_eq(wset_load(h_path("a.ws"), NULL, &ws, &why), 0, "%s", why);
	ws.spaces[0].space_id = (uint64_t)b.pid;
	cr_assert_eq(wset_save(h_path("b.ws"), &ws), 0);
	wset_free(&ws);

	snprintf(flags, sizeof(flags), "--working-set %s", h_path("a.ws"));
	ws_restore(&b, flags, NULL, &c);
	cr_assert(h_faultd_said("--working-set"));
	cr_assert(strstr(faultd_out(), "which is no live task of this dump: "
			 "not used, the restore is served without it"),
		  "see %s", h_path("faultd.out"));
	cr_assert_eq(c.replayed, 0);
	snprintf(flags, sizeof(flags), "--working-set %s", h_path("b.ws"));
	ws_restore(&b, flags, NULL, &c);
	cr_assert(strstr(faultd_out(), "recorded for another dump"),
		  "see %s", h_path("faultd.out"));
	cr_assert_eq(c.replayed, 0);
}

/* ---- --page-server: criu page-server in A, faultd and restore in B ---- */

Test(criu, faultd_page_server, .fini = net_fini)
{
	char line[512];
	struct h_task t;
	pid_t server, lp;
	int st;

	h_net_up(&net);
	h_workload(&t, NULL, 16, 65, "basic");
	h_dump(&t, NULL, "d");
	server = h_criu_bg(net.a, "page-server --lazy-pages -D %s --address "
			   "%s --port %d -o ps.log", h_path("d"), net.a_ip,
			   PS_PORT);
	lp = h_faultd_bg(net.b, "--page-server --address %s --port %d -D %s",
			 net.a_ip, PS_PORT, h_path("d"));
	cr_assert(lp > 0, "see %s", h_path("faultd.out"));
	cr_assert_eq(restore(net.b, "d"), 0, "see %s", h_path("d/rst.log"));
	h_go_and_check(&t, line, sizeof(line));
	faultd_exits(lp, 0);
	st = h_wait(server, H_DEADLINE_MS);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "criu page-server: %#x (see %s/ps.log)", st, h_path("d"));
}
