// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * src-nbd.c - suite "nbd": the network block device source
 * (daemon/sources/nbd.h) against real servers started here - Debian's
 * nbdkit with its file and curl plugins and its log, stats, pause, delay
 * and error filters, and nginx - over Unix sockets where the network is
 * not the point and over a veth pair between two network namespaces of
 * the test's own (tests/nbd/netns.h) where it is. What each test asserts
 * is said by the server (every request its log filter saw, the counts of
 * its stats filter) or by the bytes read against the file, never by how
 * fast anything ran. Also the parts that need no server: the URI parser,
 * the allow list, the retry policy.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nbd.h"
#include "nbd_allow.h"
#include "nbd_uri.h"
#include "retry.h"
#include "tmpdir.h"
#include "nbd/netns.h"
#include "nbd/servers.h"

#define PAGE 4096ul
#define KIB 1024ul
#define MIB (1ul << 20)
#define HUGE (2ul << 20)

static char why[256], err[256];
static struct server srv = { 0 }, web = { 0 };
static struct netns ns = { .fd = -1 };
static const char *data_path, *sock_path, *log_path, *ctl_path;
static char uri[512];

/* The sources' lines, among the test's. */
static void test_log(void *arg, const char *line)
{
	cr_log_info("source: %s", line);
}

static void setup(void)
{
	src_nbd_set_log(test_log, NULL);
	tmpdir_make("nbd");
	data_path = path_of("export.img");
	sock_path = path_of("nbd.sock");
	log_path = path_of("nbd.log");
	ctl_path = path_of("pause.sock");
	snprintf(uri, sizeof(uri), "nbd+unix:///?socket=%s", sock_path);
}

static void teardown(void)
{
	server_free(&srv);
	server_free(&web);
	netns_end(&ns);
	tmpdir_remove();
}

TestSuite(nbd, .init = setup, .fini = teardown, .timeout = 120);

static uint64_t now_ms(void)
{
	return retry_now_ns() / 1000000;
}

/* Wait for @cond (re-evaluated) up to 30 s; a deadline, not a sleep used
 * as synchronisation: the test asserts that the condition came. */
#define WAIT_FOR(cond)                                                        \
	do {                                                                  \
		uint64_t end_ = now_ms() + 30000;                             \
		struct timespec ts_ = { 0, 1000000 };                         \
		while (!(cond) && now_ms() < end_)                            \
			nanosleep(&ts_, NULL);                                \
		cr_assert(cond, "waited 30 s for " #cond);                    \
	} while (0)

/* ---- content ---- */

/* The word at @off of the data: no byte of it is zero, so a hole or a
 * zero-filled page can never pass for it. */
static uint64_t word_at(uint64_t off)
{
	uint64_t x = (off / 8 + 1) * 0x9e3779b97f4a7c15ull;

	x ^= x >> 31;
	return x | 0x0101010101010101ull;
}

/* A file of @size bytes: holes, but data at the [off, off + len) of @d. */
static void mkdata(const char *path, uint64_t size, const uint64_t (*d)[2],
		   size_t n)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);

	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	for (size_t i = 0; i < n; i++) {
		uint64_t *b = malloc(d[i][1]);

		for (uint64_t k = 0; k < d[i][1] / 8; k++)
			b[k] = word_at(d[i][0] + 8 * k);
		cr_assert_eq(pwrite(fd, b, d[i][1], (off_t)d[i][0]),
			     (ssize_t)d[i][1]);
		free(b);
	}
	cr_assert_eq(ftruncate(fd, (off_t)size), 0);
	close(fd);
}

/* A file all data. */
static void mkfull(const char *path, uint64_t size)
{
	const uint64_t d[][2] = { { 0, size } };

	mkdata(path, size, d, 1);
}

/* [off, off + len) of @buf is what @path holds there. */
static bool same_as_file(const char *path, const void *buf, uint64_t off,
			 size_t len)
{
	char *want = malloc(len);
	int fd = open(path, O_RDONLY);
	bool same;

	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, want, len, (off_t)off), (ssize_t)len);
	same = !memcmp(buf, want, len);
	close(fd);
	free(want);
	return same;
}

static void read_ok(struct source *s, uint64_t off, size_t len,
		    unsigned int flags)
{
	char *b = malloc(len);
	ssize_t n;

	memset(b, 0xaa, len);
	n = source_read_flags(s, off, b, len, flags);
	cr_assert_eq(n, (ssize_t)len, "read [%#lx, +%#zx): %zd", off, len, n);
	cr_assert(same_as_file(data_path, b, off, len),
		  "[%#lx, +%#zx) differs from the file", off, len);
	free(b);
}

/* ---- servers and sources ---- */

static void need_nbdkit(void)
{
	if (access(NBDKIT, X_OK))
		cr_skip_test("no nbdkit here (sh scripts/deps.sh installs it)");
}

static void need_netns(void)
{
	need_nbdkit();
	if (netns_make(&ns, err, sizeof(err)))
		cr_skip_test("no network namespaces of our own: %s", err);
}

/* nbdkit on the test's Unix socket: @args after the listening options. */
static void serve_unix(const char *const *args)
{
	const char *a[40] = { "-U", sock_path };
	size_t n = 2;

	need_nbdkit();
	for (size_t i = 0; args[i]; i++)
		a[n++] = args[i];
	a[n] = NULL;
	cr_assert_eq(nbdkit_start(&srv, NULL, test_dir, "nbdkit", a, err,
				  sizeof(err)), 0, "nbdkit: %s", err);
}

/* The same nbdkit again, after it was killed (which left its socket). */
static void restart(void)
{
	unlink(sock_path);
	cr_assert_eq(server_run(&srv, err, sizeof(err)), 0, "restart: %s",
		     err);
}

/* nbdkit in the server's namespace on 10.250.28.2:10809. */
static void serve_tcp(const char *const *args)
{
	const char *a[40] = { "-i", NETNS_SERVER, "-p", "10809" };
	size_t n = 4;

	for (size_t i = 0; args[i]; i++)
		a[n++] = args[i];
	a[n] = NULL;
	cr_assert_eq(nbdkit_start(&srv, &ns, test_dir, "nbdkit", a, err,
				  sizeof(err)), 0, "nbdkit: %s", err);
	snprintf(uri, sizeof(uri), "nbd://%s:10809/", NETNS_SERVER);
}

static struct source *open_ok(const char *u, uint64_t size, size_t ps,
			      const struct src_nbd_opts *o)
{
	struct source *s = NULL;
	int ret = src_nbd_open(u, size, ps, o, &s, why, sizeof(why));

	cr_assert_eq(ret, 0, "src_nbd_open %s: %d (%s)", u, ret, why);
	cr_assert_not_null(s);
	cr_expect_str_eq(s->ops->name, "nbd");
	cr_expect(src_nbd_is(s));
	cr_expect_eq(s->page_size, ps);
	return s;
}

static struct src_nbd_stats stats_of(struct source *s)
{
	struct src_nbd_stats st;

	src_nbd_stats(s, &st);
	return st;
}

/* A thread that reads [off, off + len) of a source and keeps the result. */
struct reader {
	struct source *s;
	uint64_t off;
	size_t len;
	unsigned int flags;
	char *buf;
	ssize_t ret;
	uint64_t done_ms;
	atomic_bool done;
	pthread_t t;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;

	r->ret = source_read_flags(r->s, r->off, r->buf, r->len, r->flags);
	r->done_ms = now_ms();
	atomic_store(&r->done, true);
	return NULL;
}

static void reader_start(struct reader *r, struct source *s, uint64_t off,
			 size_t len, unsigned int flags)
{
	*r = (struct reader){ .s = s, .off = off, .len = len, .flags = flags };
	r->buf = malloc(len);
	memset(r->buf, 0xaa, len);
	cr_assert_eq(pthread_create(&r->t, NULL, reader_main, r), 0);
}

/* Join @r; its bytes are the file's. */
static void reader_ok(struct reader *r)
{
	pthread_join(r->t, NULL);
	cr_assert_eq(r->ret, (ssize_t)r->len, "read [%#lx, +%#zx): %zd",
		     r->off, r->len, r->ret);
	cr_assert(same_as_file(data_path, r->buf, r->off, r->len),
		  "[%#lx, +%#zx) differs from the file", r->off, r->len);
	free(r->buf);
}

/* ------------------------------------------------------------------------
 * Every byte right, from several threads at once.
 */

#define THREADS 4

struct rnd_reader {
	struct source *s;
	unsigned int seed;
	size_t wrong, reads;
};

static void *rnd_main(void *arg)
{
	struct rnd_reader *r = arg;
	char *b = malloc(256 * KIB);

	for (int i = 0; i < 300; i++) {
		uint64_t pages = r->s->size / PAGE;
		uint64_t off = (uint64_t)rand_r(&r->seed) % pages * PAGE;
		size_t len = ((size_t)rand_r(&r->seed) % 64 + 1) * PAGE;

		if (len > r->s->size - off)
			len = r->s->size - off;
		r->reads++;
		if (source_read(r->s, off, b, len) != (ssize_t)len ||
		    !same_as_file(data_path, b, off, len))
			r->wrong++;
	}
	free(b);
	return NULL;
}

Test(nbd, every_byte_right_from_threads)
{
	struct src_nbd_opts o = { .size = sizeof(o), .chunk = 64 * KIB };
	struct rnd_reader r[THREADS];
	pthread_t t[THREADS];
	struct src_nbd_stats st;
	struct source *s;

	mkfull(data_path, 16 * MIB);
	serve_unix((const char *[]){ "file", data_path, NULL });
	s = open_ok(uri, 0, PAGE, &o);
	cr_expect_eq(s->size, 16 * MIB);
	for (int i = 0; i < THREADS; i++) {
		r[i] = (struct rnd_reader){ .s = s, .seed = (unsigned)i + 7 };
		cr_assert_eq(pthread_create(&t[i], NULL, rnd_main, &r[i]), 0);
	}
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		cr_expect_eq(r[i].wrong, 0, "thread %d: %zu of %zu reads wrong",
			     i, r[i].wrong, r[i].reads);
	}
	read_ok(s, 0, 16 * MIB, 0);
	st = stats_of(s);
	cr_expect_eq(st.reads, THREADS * 300 + 1);
	cr_expect_eq(st.failed_reads, 0);
	cr_expect_eq(st.chunk, 64 * KIB);
	/* The whole file fits the cache: each chunk came once. */
	cr_expect_eq(st.bytes_fetched, 16 * MIB);
	cr_expect_eq(st.fetches, 16 * MIB / (64 * KIB));
	source_destroy(s);
}

/* ------------------------------------------------------------------------
 * Holes: zero extents from block status, never read.
 */

Test(nbd, holes_are_zero_extents_and_never_read)
{
	static const uint64_t d[][2] = {
		{ 68 * KIB, 8 * KIB },		/* inside chunk 1 */
		{ 256 * KIB, 256 * KIB },	/* chunks 4-7, whole */
		{ MIB - PAGE, 2 * PAGE },	/* across chunks 15 and 16 */
		{ 4 * MIB - PAGE, PAGE },	/* the last page */
	};
	static const struct { uint64_t off, len; enum src_kind kind; } w[] = {
		{ 0, 68 * KIB, SRC_ZERO },
		{ 68 * KIB, 8 * KIB, SRC_DATA },
		{ 76 * KIB, 180 * KIB, SRC_ZERO },
		{ 256 * KIB, 256 * KIB, SRC_DATA },
		{ 512 * KIB, 508 * KIB, SRC_ZERO },
		{ MIB - PAGE, 2 * PAGE, SRC_DATA },
		{ MIB + PAGE, 3 * MIB - 2 * PAGE, SRC_ZERO },
		{ 4 * MIB - PAGE, PAGE, SRC_DATA },
	};
	/* What each chunk of 64 KiB fetches: only its data. */
	static const uint64_t fetch[][2] = {
		{ 68 * KIB, 8 * KIB },
		{ 256 * KIB, 64 * KIB }, { 320 * KIB, 64 * KIB },
		{ 384 * KIB, 64 * KIB }, { 448 * KIB, 64 * KIB },
		{ MIB - PAGE, PAGE }, { MIB, PAGE },
		{ 4 * MIB - PAGE, PAGE },
	};
	struct src_nbd_opts o = { .size = sizeof(o), .chunk = 64 * KIB };
	const char *stats_path = path_of("stats");
	char buf[PAGE], lf[300], sf[300];
	struct nbd_req *rq;
	struct src_extent e;
	struct source *s;
	uint64_t at = 0, total = 0;
	size_t i = 0;
	long n;

	mkdata(data_path, 4 * MIB, d, 4);
	snprintf(lf, sizeof(lf), "logfile=%s", log_path);
	snprintf(sf, sizeof(sf), "statsfile=%s", stats_path);
	serve_unix((const char *[]){ "--filter=log", "--filter=stats", "file",
				     data_path, lf, sf, NULL });
	s = open_ok(uri, 0, PAGE, &o);
	for (at = 0; at < s->size; at = e.off + e.len, i++) {
		cr_assert_eq(source_extent(s, at, &e), 0);
		cr_assert_lt(i, sizeof(w) / sizeof(w[0]));
		cr_expect(e.off == w[i].off && e.len == w[i].len &&
			  e.kind == w[i].kind, "extent %zu: [%#lx, +%#lx) %d",
			  i, e.off, e.len, e.kind);
	}
	cr_expect_eq(i, sizeof(w) / sizeof(w[0]));
	for (i = 0; i < sizeof(w) / sizeof(w[0]); i++)
		if (w[i].kind == SRC_DATA)
			read_ok(s, w[i].off, w[i].len, 0);
	cr_expect_eq(source_read(s, 0, buf, PAGE), -ERANGE, "a hole read");
	cr_expect_eq(source_read(s, 64 * KIB, buf, PAGE), -ERANGE);
	source_destroy(s);
	server_stop(&srv, SIGTERM);
	/* The server saw exactly the data, each piece once. */
	n = log_reads(log_path, &rq);
	cr_assert_eq(n, sizeof(fetch) / sizeof(fetch[0]), "%ld reads", n);
	for (long k = 0; k < n; k++) {
		bool found = false;

		for (size_t j = 0; j < sizeof(fetch) / sizeof(fetch[0]); j++)
			found |= rq[k].off == fetch[j][0] &&
				 rq[k].count == fetch[j][1];
		cr_expect(found, "read [%#lx, +%#lx) is not of the data",
			  rq[k].off, rq[k].count);
		total += rq[k].count;
	}
	cr_expect_eq(total, 276 * KIB);
	cr_expect_eq(stats_read_ops(stats_path), n, "the stats filter counts");
	free(rq);
}

/* Pages of 2 MiB: a page with any data is data, its holes read as the
 * zeros they are (filled here, not fetched). */
Test(nbd, huge_pages_widen_data_and_fill_the_holes)
{
	static const uint64_t d[][2] = { { HUGE + 8 * KIB, 4 * KIB },
					 { 5 * HUGE - PAGE, PAGE } };
	struct src_nbd_opts o = { .size = sizeof(o), .chunk = 256 * KIB };
	struct src_extent e;
	struct source *s;

	mkdata(data_path, 6 * HUGE, d, 2);
	serve_unix((const char *[]){ "file", data_path, NULL });
	s = open_ok(uri, 0, HUGE, &o);
	cr_assert_eq(source_extent(s, 0, &e), 0);
	cr_expect(e.kind == SRC_ZERO && e.len == HUGE);
	cr_assert_eq(source_extent(s, HUGE, &e), 0);
	cr_expect(e.kind == SRC_DATA && e.off == HUGE && e.len == HUGE);
	cr_assert_eq(source_extent(s, 4 * HUGE, &e), 0);
	cr_expect(e.kind == SRC_DATA && e.off == 4 * HUGE && e.len == HUGE);
	read_ok(s, HUGE, HUGE, SRC_READ_URGENT);
	read_ok(s, 4 * HUGE, HUGE, 0);
	/* Two chunks hold data: 4 KiB and 4 KiB fetched, no more. */
	cr_expect_eq(stats_of(s).bytes_fetched, 8 * KIB);
	source_destroy(s);
}

/* A server without block status (no structured replies): all data. */
Test(nbd, without_block_status_all_is_data)
{
	static const uint64_t d[][2] = { { MIB, PAGE } };
	struct src_extent e;
	struct source *s;

	mkdata(data_path, 2 * MIB, d, 1);
	serve_unix((const char *[]){ "--no-sr", "file", data_path, NULL });
	s = open_ok(uri, 0, PAGE, NULL);
	cr_assert_eq(source_extent(s, 0, &e), 0);
	cr_expect(e.kind == SRC_DATA && e.off == 0 && e.len == 2 * MIB);
	read_ok(s, 0, 2 * MIB, 0);
	source_destroy(s);
}

/* ------------------------------------------------------------------------
 * Refusals at open, before any read.
 */

static void open_refused(const char *u, uint64_t size, size_t ps,
			 const struct src_nbd_opts *o, int want,
			 const char *words)
{
	struct source *s = (struct source *)0x1;
	int ret = src_nbd_open(u, size, ps, o, &s, why, sizeof(why));

	cr_expect_eq(ret, want, "%d (%s), not %d", ret, why, want);
	cr_expect(strstr(why, words), "\"%s\" lacks \"%s\"", why, words);
	cr_expect_eq(s, (struct source *)0x1, "*out written on failure");
}

Test(nbd, an_export_smaller_than_expected_is_refused)
{
	struct src_nbd_opts bad = { .size = sizeof(bad), .chunk = 3000 };

	mkfull(data_path, 4 * MIB);
	serve_unix((const char *[]){ "file", data_path, NULL });
	open_refused(uri, 4 * MIB + PAGE, PAGE, NULL, -ERANGE,
		     "the export has 4194304 bytes, fewer than the 4198400");
	open_refused(uri, 0, 8192, NULL, -EINVAL, "page size 8192");
	open_refused(uri, PAGE + 1, PAGE, NULL, -EINVAL,
		     "4097 bytes are no whole number of 4096-byte pages");
	open_refused(uri, 3 * MIB, HUGE, NULL, -EINVAL,
		     "no whole number of 2097152-byte pages");
	open_refused(uri, 0, PAGE, &bad, -EINVAL, "options out of range");
	open_refused("nbd://[::1", 0, PAGE, NULL, -EINVAL, "without ']'");
	/* A smaller prefix of the export is fine. */
	source_destroy(open_ok(uri, 2 * MIB, PAGE, NULL));
	/* Nobody there: a socket left behind, or none. */
	server_stop(&srv, SIGKILL);
	open_refused(uri, 0, PAGE, NULL, -ECONNREFUSED, "connecting");
	unlink(sock_path);
	open_refused(uri, 0, PAGE, NULL, -ENOENT, "connecting");
}

/* The server's block sizes: the chunk follows the preferred size, reads
 * the minimum, and a size whose last page needs bytes past the export's
 * end in the minimum block is refused. */
Test(nbd, block_sizes_are_obeyed_or_refused)
{
	struct nbd_req *rq;
	struct source *s;
	long n;
	char lf[300];

	mkfull(data_path, 4 * MIB + 4 * KIB);
	snprintf(lf, sizeof(lf), "logfile=%s", log_path);
	serve_unix((const char *[]){ "--filter=log",
				     "--filter=blocksize-policy", "file",
				     data_path, lf, "blocksize-minimum=64K",
				     "blocksize-preferred=1M",
				     "blocksize-maximum=8M", NULL });
	open_refused(uri, 4 * MIB + 4 * KIB, PAGE, NULL, -ERANGE,
		     "cannot be read in the server's 65536-byte blocks");
	s = open_ok(uri, 4 * MIB, PAGE, NULL);
	cr_expect_eq(stats_of(s).chunk, MIB);
	read_ok(s, 3 * MIB + 8 * KIB, 3 * PAGE, SRC_READ_URGENT);
	read_ok(s, 0, 4 * MIB, 0);
	source_destroy(s);
	server_stop(&srv, SIGTERM);
	n = log_reads(log_path, &rq);
	cr_assert_eq(n, 4, "one read per 1 MiB chunk, not %ld", n);
	for (long k = 0; k < n; k++)
		cr_expect(rq[k].off % MIB == 0 && rq[k].count == MIB,
			  "read [%#lx, +%#lx)", rq[k].off, rq[k].count);
	free(rq);
}

/* ------------------------------------------------------------------------
 * Many reads in flight, over several connections.
 */

Test(nbd, many_reads_in_flight_over_multi_conn)
{
	struct src_nbd_opts o = { .size = sizeof(o), .conns = 4, .depth = 8,
				  .chunk = 64 * KIB, .io_timeout_ms = 120000 };
	char lf[300], pc[300];
	struct nbd_req *rq;
	struct reader r;
	struct source *s;
	uint64_t t0, ms;
	unsigned int seen = 0;
	long n;

	mkfull(data_path, 8 * MIB);
	snprintf(lf, sizeof(lf), "logfile=%s", log_path);
	snprintf(pc, sizeof(pc), "pause-control=%s", ctl_path);
	serve_unix((const char *[]){ "--filter=log", "--filter=pause",
				     "--filter=delay", "file", data_path, lf,
				     pc, "rdelay=1ms", NULL });
	s = open_ok(uri, 0, PAGE, &o);
	WAIT_FOR(stats_of(s).conns_up == 4);
	cr_assert_eq(pause_ctl(ctl_path, 'p'), 0);
	reader_start(&r, s, 0, 8 * MIB, 0);
	/* Held by the server: every slot of every connection, no more. */
	WAIT_FOR(log_reads_open(log_path) == 32);
	cr_expect_eq(stats_of(s).in_flight, 32);
	cr_expect_eq(stats_of(s).queued, 128 - 32);
	n = log_reads(log_path, &rq);
	for (long k = 0; k < n; k++)
		seen |= 1u << (rq[k].conn % 32);
	cr_expect_eq(__builtin_popcount(seen), 4, "reads on %d connections",
		     __builtin_popcount(seen));
	free(rq);
	t0 = now_ms();
	cr_assert_eq(pause_ctl(ctl_path, 'r'), 0);
	reader_ok(&r);
	ms = now_ms() - t0;
	cr_log_info("128 reads with 1 ms each at the server: %llu ms, %.1f "
		    "reads/ms", (unsigned long long)ms, 128.0 / (ms ? ms : 1));
	cr_expect_eq(stats_of(s).fetches, 128);
	source_destroy(s);
}

/* ------------------------------------------------------------------------
 * Demand reads go ahead of the queue.
 */

Test(nbd, an_urgent_read_overtakes_queued_reads)
{
	/* One connection, one server thread: the server sees the reads in
	 * the order they were sent. */
	struct src_nbd_opts o = { .size = sizeof(o), .conns = 1, .depth = 4,
				  .chunk = 64 * KIB, .io_timeout_ms = 120000 };
	char lf[300], pc[300];
	struct nbd_req *rq;
	struct reader r;
	struct source *s;
	long n;

	mkfull(data_path, 4 * MIB);
	snprintf(lf, sizeof(lf), "logfile=%s", log_path);
	snprintf(pc, sizeof(pc), "pause-control=%s", ctl_path);
	serve_unix((const char *[]){ "-t", "1", "--filter=log",
				     "--filter=pause", "file", data_path, lf,
				     pc, NULL });
	s = open_ok(uri, 0, PAGE, &o);
	cr_assert_eq(pause_ctl(ctl_path, 'p'), 0);
	source_willneed(s, 0, 4 * MIB);	/* 64 chunks: 4 sent, 60 queued */
	WAIT_FOR(stats_of(s).in_flight == 4);
	cr_expect_eq(stats_of(s).queued, 60);
	reader_start(&r, s, 50 * 64 * KIB + 3 * PAGE, PAGE, SRC_READ_URGENT);
	WAIT_FOR(stats_of(s).queued_urgent == 1);
	cr_assert_eq(pause_ctl(ctl_path, 'r'), 0);
	reader_ok(&r);
	WAIT_FOR(stats_of(s).fetches == 64);
	source_destroy(s);
	server_stop(&srv, SIGTERM);
	n = log_reads(log_path, &rq);
	cr_assert_eq(n, 64);
	for (long k = 0; k < 4; k++)
		cr_expect_eq(rq[k].off, (uint64_t)k * 64 * KIB);
	cr_expect_eq(rq[4].off, 50 * 64 * KIB, "the 5th read the server saw "
		     "is at %#lx, not the urgent one", rq[4].off);
	for (long k = 5; k < n; k++)
		cr_expect_neq(rq[k].off, 50 * 64 * KIB, "fetched twice");
	free(rq);
}

/* ------------------------------------------------------------------------
 * Server errors: retried, then -EIO; never zeros.
 */

Test(nbd, a_failing_read_is_retried_then_eio)
{
	struct src_nbd_opts o = {
		.size = sizeof(o), .chunk = 64 * KIB,
		.retry = { .backoff_min_ms = 1, .backoff_max_ms = 4,
			   .read_retries = 2 },
	};
	const char *inject = path_of("inject");
	char lf[300], ef[300], b[PAGE];
	struct src_nbd_stats st;
	struct nbd_req *rq;
	struct source *s;
	long n, at_chunk = 0;

	mkfull(data_path, MIB);
	close(open(inject, O_CREAT | O_WRONLY, 0600));
	snprintf(lf, sizeof(lf), "logfile=%s", log_path);
	snprintf(ef, sizeof(ef), "error-pread-file=%s", inject);
	serve_unix((const char *[]){ "--filter=log", "--filter=error", "file",
				     data_path, lf, "error-pread-rate=100%",
				     ef, NULL });
	s = open_ok(uri, 0, PAGE, &o);
	memset(b, 0xaa, sizeof(b));
	cr_expect_eq(source_read_flags(s, 3 * 64 * KIB, b, PAGE,
				       SRC_READ_URGENT), -EIO);
	for (size_t i = 0; i < sizeof(b); i++)
		cr_assert_eq((unsigned char)b[i], 0xaa, "the buffer changed");
	st = stats_of(s);
	cr_expect_eq(st.retry.retries, 2);
	cr_expect_eq(st.retry.gave_up, 1);
	cr_expect_eq(st.failed_reads, 1);
	n = log_reads(log_path, &rq);
	for (long k = 0; k < n; k++)
		at_chunk += rq[k].off == 3 * 64 * KIB;
	cr_expect_eq(at_chunk, 3, "asked %ld times, not 1 + 2 retries",
		     at_chunk);
	free(rq);
	/* The server heals: the chunk is asked for anew. */
	cr_assert_eq(unlink(inject), 0);
	read_ok(s, 3 * 64 * KIB, PAGE, 0);
	source_destroy(s);
}

/* ------------------------------------------------------------------------
 * The server killed in the middle of reads, over the network.
 */

/* Server and source on the veth pair, reads held at the server. */
static struct source *held_reads(const struct src_nbd_opts *o,
				 struct reader *r, size_t nr, long held)
{
	char lf[300], pc[300];
	struct source *s;

	need_netns();
	mkfull(data_path, 8 * MIB);
	snprintf(lf, sizeof(lf), "logfile=%s", log_path);
	snprintf(pc, sizeof(pc), "pause-control=%s", ctl_path);
	serve_tcp((const char *[]){ "--filter=log", "--filter=pause", "file",
				    data_path, lf, pc, NULL });
	s = open_ok(uri, 0, PAGE, o);
	WAIT_FOR(stats_of(s).conns_up == o->conns);
	cr_assert_eq(pause_ctl(ctl_path, 'p'), 0);
	for (size_t i = 0; i < nr; i++)
		reader_start(&r[i], s, i * (8 * MIB / nr), 8 * MIB / nr,
			     i ? 0 : SRC_READ_URGENT);
	WAIT_FOR(log_reads_open(log_path) == held);
	return s;
}

Test(nbd, a_server_killed_and_restarted_loses_nothing)
{
	struct src_nbd_opts o = {
		.size = sizeof(o), .conns = 2, .depth = 4, .chunk = 64 * KIB,
		.io_timeout_ms = 120000,
		.retry = { .backoff_min_ms = 5, .backoff_max_ms = 100,
			   .deadline_ms = 120000 },
	};
	struct reader r[2];
	struct src_nbd_stats st;
	struct source *s = held_reads(&o, r, 2, 8);

	server_stop(&srv, SIGKILL);
	WAIT_FOR(stats_of(s).conns_up == 0);
	/* Nothing to read from: they wait, whatever time passes. */
	cr_expect(!atomic_load(&r[0].done) && !atomic_load(&r[1].done));
	restart();
	reader_ok(&r[0]);
	reader_ok(&r[1]);
	/* Both connections come back, not only the one that served. */
	WAIT_FOR(stats_of(s).reconnects == 2);
	st = stats_of(s);
	cr_expect_eq(st.retry.outages, 1);
	cr_expect_eq(st.retry.recovered, 1);
	cr_expect_eq(st.retry.expired, 0);
	cr_expect_eq(st.failed_reads, 0);
	source_destroy(s);
}

Test(nbd, a_server_gone_for_good_fails_reads_after_the_deadline)
{
	const uint32_t deadline = 1500;
	struct src_nbd_opts o = {
		.size = sizeof(o), .conns = 1, .depth = 4, .chunk = 64 * KIB,
		.io_timeout_ms = 120000,
		.retry = { .backoff_min_ms = 5, .backoff_max_ms = 50,
			   .deadline_ms = deadline },
	};
	struct reader r[2];
	struct src_nbd_stats st;
	struct source *s = held_reads(&o, r, 2, 4);
	uint64_t killed;
	char b[PAGE];

	killed = now_ms();
	server_stop(&srv, SIGKILL);
	for (int i = 0; i < 2; i++) {
		pthread_join(r[i].t, NULL);
		cr_expect_eq(r[i].ret, -EIO, "reader %d: %zd", i, r[i].ret);
		/* Not before the deadline. */
		cr_expect_geq(r[i].done_ms - killed, deadline,
			      "failed %llu ms after the kill",
			      (unsigned long long)(r[i].done_ms - killed));
		cr_expect_eq((unsigned char)r[i].buf[0], 0xaa);
		free(r[i].buf);
	}
	/* While it stays gone, a read fails at once. */
	cr_expect_eq(source_read(s, 0, b, PAGE), -EIO);
	st = stats_of(s);
	cr_expect_eq(st.retry.outages, 1);
	cr_expect_eq(st.retry.expired, 1);
	cr_expect_eq(st.failed_reads, 3);
	source_destroy(s);
}

/*
 * A connection that answers nothing for io_timeout_ms is made again. The
 * server serves a connection with one thread (-t 1): Debian's nbdkit
 * 1.32 aborts when a client hangs up on several queued replies, which is
 * what giving up on a silent connection is (fixed in nbdkit 1.33.10).
 */
Test(nbd, a_silent_connection_is_made_again)
{
	struct src_nbd_opts o = { .size = sizeof(o), .conns = 1,
				  .chunk = 64 * KIB, .io_timeout_ms = 300 };
	char lf[300], pc[300];
	struct reader r;
	struct source *s;

	mkfull(data_path, MIB);
	snprintf(lf, sizeof(lf), "logfile=%s", log_path);
	snprintf(pc, sizeof(pc), "pause-control=%s", ctl_path);
	serve_unix((const char *[]){ "-t", "1", "--filter=log",
				     "--filter=pause", "file", data_path, lf,
				     pc, NULL });
	s = open_ok(uri, 0, PAGE, &o);
	cr_assert_eq(pause_ctl(ctl_path, 'p'), 0);
	reader_start(&r, s, 0, 256 * KIB, SRC_READ_URGENT);
	WAIT_FOR(stats_of(s).reconnects >= 1);
	cr_assert_eq(pause_ctl(ctl_path, 'r'), 0);
	reader_ok(&r);
	cr_expect_eq(stats_of(s).failed_reads, 0);
	source_destroy(s);
}

/* An export that comes back with another size is not the one opened. */
Test(nbd, an_export_that_changed_size_fails_reads)
{
	struct src_nbd_opts o = { .size = sizeof(o), .chunk = 64 * KIB,
				  .retry = { .backoff_min_ms = 5,
					     .backoff_max_ms = 20 } };
	struct source *s;
	char b[PAGE];

	mkfull(data_path, 2 * MIB);
	serve_unix((const char *[]){ "file", data_path, NULL });
	s = open_ok(uri, 0, PAGE, &o);
	read_ok(s, 0, PAGE, 0);
	server_stop(&srv, SIGKILL);
	mkfull(data_path, 3 * MIB);
	restart();
	WAIT_FOR(source_read(s, 64 * KIB, b, PAGE) == -EIO);
	cr_expect_eq(source_read(s, 0, b, PAGE), -EIO, "cached, but stale");
	source_destroy(s);
}

/* ------------------------------------------------------------------------
 * Fetched once per host.
 */

struct all_reader {
	struct source *s;
	unsigned int seed;
	size_t wrong;
};

/* Read the whole source in pieces of 64 KiB or a page, shuffled. */
static void *all_main(void *arg)
{
	struct all_reader *r = arg;
	size_t piece = r->s->page_size > 64 * KIB ? r->s->page_size : 64 * KIB;
	size_t n = r->s->size / piece;
	uint32_t *order = malloc(n * sizeof(*order));
	char *b = malloc(piece);

	for (size_t i = 0; i < n; i++)
		order[i] = (uint32_t)i;
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = (size_t)rand_r(&r->seed) % (i + 1);
		uint32_t t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t off = (uint64_t)order[i] * piece;

		if (source_read(r->s, off, b, piece) != (ssize_t)piece ||
		    !same_as_file(data_path, b, off, piece))
			r->wrong++;
	}
	free(b);
	free(order);
	return NULL;
}

Test(nbd, four_opens_of_one_uri_fetch_each_chunk_once)
{
	const char *stats_path = path_of("stats");
	struct all_reader r[4];
	struct source *s[4];
	pthread_t t[4];
	struct src_nbd_stats st;
	struct nbd_req *rq;
	char lf[300], sf[300];
	bool seen[32] = { false };
	long n;

	mkfull(data_path, 8 * MIB);
	snprintf(lf, sizeof(lf), "logfile=%s", log_path);
	snprintf(sf, sizeof(sf), "statsfile=%s", stats_path);
	serve_unix((const char *[]){ "--filter=log", "--filter=stats", "file",
				     data_path, lf, sf, NULL });
	for (int i = 0; i < 4; i++)
		s[i] = open_ok(uri, 0, i % 2 ? HUGE : PAGE, NULL);
	cr_expect_eq(stats_of(s[0]).users, 4);
	for (int i = 0; i < 4; i++) {
		r[i] = (struct all_reader){ .s = s[i], .seed = (unsigned)i + 1 };
		cr_assert_eq(pthread_create(&t[i], NULL, all_main, &r[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		cr_expect_eq(r[i].wrong, 0, "reader %d: %zu wrong", i,
			     r[i].wrong);
	}
	st = stats_of(s[3]);
	cr_expect_eq(st.bytes_fetched, 8 * MIB);
	cr_expect_eq(st.fetches, 32);
	/* Two readers asked for each chunk 4 times, two 2 MiB pages once:
	 * 320 asks, 32 of which fetched. */
	cr_expect_eq(st.hits + st.joins, 2 * 128 + 2 * 32 - 32,
		     "%llu hits, %llu joins", (unsigned long long)st.hits,
		     (unsigned long long)st.joins);
	for (int i = 0; i < 4; i++)
		source_destroy(s[i]);
	server_stop(&srv, SIGTERM);
	/* The server's side: 32 reads of 256 KiB, each chunk once. */
	n = log_reads(log_path, &rq);
	cr_assert_eq(n, 32, "%ld reads", n);
	for (long k = 0; k < n; k++) {
		uint64_t c = rq[k].off / (256 * KIB);

		cr_expect(rq[k].count == 256 * KIB && c < 32 && !seen[c],
			  "read [%#lx, +%#lx)", rq[k].off, rq[k].count);
		seen[c < 32 ? c : 0] = true;
	}
	cr_expect_eq(stats_read_ops(stats_path), 32);
	free(rq);
}

/* Within the bound: what nobody holds is dropped, and fetched again. */
Test(nbd, the_cache_stays_within_its_bound)
{
	struct src_nbd_opts o = { .size = sizeof(o), .chunk = 64 * KIB,
				  .cache_bytes = MIB };
	struct src_nbd_stats st;
	struct source *s;

	mkfull(data_path, 4 * MIB);
	serve_unix((const char *[]){ "file", data_path, NULL });
	s = open_ok(uri, 0, PAGE, &o);
	for (int pass = 0; pass < 2; pass++)
		for (uint64_t off = 0; off < 4 * MIB; off += 128 * KIB) {
			read_ok(s, off, 128 * KIB, 0);
			cr_assert_leq(stats_of(s).cached_bytes, MIB);
		}
	st = stats_of(s);
	cr_expect_eq(st.bytes_fetched, 8 * MIB, "each pass fetches it all");
	cr_expect_eq(st.evictions, 128 - 16);
	/* A read larger than the bound still reads. */
	read_ok(s, 0, 2 * MIB, 0);
	source_destroy(s);
}

/* ------------------------------------------------------------------------
 * An object store: nbdkit's curl plugin over nginx, by range requests.
 */

Test(nbd, the_curl_plugin_reads_from_nginx_by_ranges)
{
	const char *www = path_of("www"), *img;
	char url[128], line[512];
	long ranges = 0;
	struct source *s;
	FILE *f;

	need_netns();
	if (access(NGINX, X_OK))
		cr_skip_test("no nginx here (sh scripts/deps.sh installs it)");
	cr_assert_eq(mkdir(www, 0755), 0);
	img = path_of("www/mem.img");
	data_path = img;
	mkfull(img, 4 * MIB);
	cr_assert_eq(nginx_start(&web, &ns, test_dir, www, 8028, err,
				 sizeof(err)), 0, "nginx: %s", err);
	snprintf(url, sizeof(url), "url=http://127.0.0.1:8028/mem.img");
	cr_assert_eq(nbdkit_start(&srv, &ns, test_dir, "nbdkit",
				  (const char *[]){ "-U", sock_path, "curl",
						    url, NULL },
				  err, sizeof(err)), 0, "nbdkit: %s", err);
	s = open_ok(uri, 0, PAGE, NULL);
	read_ok(s, MIB, PAGE, SRC_READ_URGENT);
	read_ok(s, 0, 4 * MIB, 0);
	source_destroy(s);
	server_free(&web);
	snprintf(line, sizeof(line), "%s/access.log", test_dir);
	f = fopen(line, "r");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		ranges += strstr(line, "\"GET /mem.img") && strstr(line, " 206 ");
	fclose(f);
	cr_expect_geq(ranges, 4, "%ld partial GETs in nginx's log", ranges);
}

/* ------------------------------------------------------------------------
 * TLS with a pre-shared key.
 */

static void psk_file(const char *path, const char *user, char key)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	fprintf(f, "%s:", user);
	for (int i = 0; i < 32; i++)
		fprintf(f, "%c%c", key, '0' + i % 10);
	fputc('\n', f);
	fclose(f);
}

Test(nbd, tls_with_a_psk)
{
	const char *psk = path_of("psk"), *wrong = path_of("wrong");
	char tls_uri[600], psk_arg[300];
	struct src_nbd_opts o = { .size = sizeof(o), .tls_psk_file = psk };
	struct src_nbd_opts bad = { .size = sizeof(bad),
				    .tls_psk_file = wrong };
	struct src_nbd_opts local = { .size = sizeof(local),
				      .allow_local_files = 1 };
	struct source *s = (struct source *)0x1;

	psk_file(psk, "alice", 'a');
	psk_file(wrong, "alice", 'b');
	mkfull(data_path, 2 * MIB);
	snprintf(psk_arg, sizeof(psk_arg), "--tls-psk=%s", psk);
	serve_unix((const char *[]){ "--tls=require", psk_arg, "file",
				     data_path, NULL });
	snprintf(tls_uri, sizeof(tls_uri), "nbds+unix://alice@/?socket=%s",
		 sock_path);
	s = open_ok(tls_uri, 0, PAGE, &o);
	read_ok(s, 0, 2 * MIB, 0);
	source_destroy(s);
	/* The wrong key, or no TLS: refused at open. */
	s = (struct source *)0x1;
	cr_expect_lt(src_nbd_open(tls_uri, 0, PAGE, &bad, &s, why, sizeof(why)),
		     0, "a wrong key opened");
	cr_expect_eq(s, (struct source *)0x1);
	cr_expect_lt(src_nbd_open(uri, 0, PAGE, NULL, &s, why, sizeof(why)),
		     0, "no TLS opened");
	/* The key named in the URI: only where the options allow files. */
	snprintf(tls_uri, sizeof(tls_uri),
		 "nbds+unix://alice@/?socket=%s&tls-psk-file=%s", sock_path,
		 psk);
	open_refused(tls_uri, 0, PAGE, NULL, -EPERM, "names a local file");
	s = open_ok(tls_uri, 0, PAGE, &local);
	read_ok(s, MIB, PAGE, 0);
	source_destroy(s);
}

/* ------------------------------------------------------------------------
 * Save and reopen; the identity.
 */

struct reopen_arg {
	const uint8_t *blob;
	size_t len;
	struct source **r;
	int ret;
};

static void *reopen_main(void *arg)
{
	struct reopen_arg *a = arg;

	a->ret = src_nbd_reopen(a->blob, a->len, a->r, why, sizeof(why));
	return NULL;
}

Test(nbd, save_and_reopen)
{
	struct src_nbd_opts o = { .size = sizeof(o), .chunk = 128 * KIB,
				  .depth = 7 };
	struct source *s, *r;
	struct src_extent e;
	uint8_t id[32], *blob;
	size_t len;
	char *b = malloc(HUGE);

	mkfull(data_path, 4 * MIB);
	serve_unix((const char *[]){ "file", data_path, NULL });
	s = open_ok(uri, 2 * MIB, HUGE, &o);
	len = src_nbd_save(s, NULL, 0);
	cr_assert_gt(len, 0);
	blob = malloc(len);
	cr_assert_eq(src_nbd_save(s, blob, len), len);
	memcpy(id, s->id, sizeof(id));
	source_destroy(s);
	cr_assert_eq(src_nbd_reopen(blob, len, &r, why, sizeof(why)), 0, "%s",
		     why);
	cr_expect_eq(r->size, 2 * MIB);
	cr_expect_eq(r->page_size, HUGE);
	cr_expect(!r->stale);
	cr_expect_arr_eq(r->id, id, sizeof(id));
	cr_expect_eq(stats_of(r).chunk, 128 * KIB);
	read_ok(r, 0, 2 * MIB, 0);
	source_destroy(r);
	/* Not a blob. */
	blob[0] ^= 1;
	cr_expect_eq(src_nbd_reopen(blob, len, &r, why, sizeof(why)), -EBADMSG);
	blob[0] ^= 1;
	cr_expect_eq(src_nbd_reopen(blob, len - 1, &r, why, sizeof(why)),
		     -EBADMSG);
	/* The export changed size since: stale, its reads fail. */
	server_stop(&srv, SIGTERM);
	mkfull(data_path, 6 * MIB);
	restart();
	cr_assert_eq(src_nbd_reopen(blob, len, &r, why, sizeof(why)), 0, "%s",
		     why);
	cr_expect(r->stale);
	cr_expect_arr_neq(r->id, id, sizeof(id));
	/* Data everywhere, and every read fails: nothing taken for zeros. */
	cr_assert_eq(source_extent(r, 0, &e), 0);
	cr_expect(e.kind == SRC_DATA && e.len == 2 * MIB);
	cr_expect_lt(source_read(r, 0, b, HUGE), 0);
	/* Saved again, it is still the export of the first blob: stale. */
	free(blob);
	len = src_nbd_save(r, NULL, 0);
	blob = malloc(len);
	cr_assert_eq(src_nbd_save(r, blob, len), len);
	source_destroy(r);
	cr_assert_eq(src_nbd_reopen(blob, len, &r, why, sizeof(why)), 0, "%s",
		     why);
	cr_expect(r->stale);
	source_destroy(r);
	free(blob);
	free(b);
}

/* A restarted daemon reopens while the server is away: it waits for it
 * (up to the deadline saved), and fails after the deadline. */
Test(nbd, reopen_waits_for_the_server)
{
	struct src_nbd_opts o = { .size = sizeof(o),
				  .retry = { .backoff_min_ms = 5,
					     .backoff_max_ms = 50,
					     .deadline_ms = 60000 } };
	struct src_nbd_opts brief = { .size = sizeof(brief),
				      .retry = { .deadline_ms = 300 } };
	struct source *s, *r = NULL;
	uint8_t blob[4096], blob2[4096];
	size_t len, len2;
	struct reopen_arg a;
	pthread_t t;

	mkfull(data_path, 2 * MIB);
	serve_unix((const char *[]){ "file", data_path, NULL });
	s = open_ok(uri, 0, PAGE, &o);
	len = src_nbd_save(s, blob, sizeof(blob));
	source_destroy(s);
	s = open_ok(uri, 0, PAGE, &brief);
	len2 = src_nbd_save(s, blob2, sizeof(blob2));
	source_destroy(s);
	cr_assert(len <= sizeof(blob) && len2 <= sizeof(blob2));
	server_stop(&srv, SIGKILL);
	unlink(sock_path);
	/* Gone for good: fails, after its deadline. */
	cr_expect_lt(src_nbd_reopen(blob2, len2, &r, why, sizeof(why)), 0);
	/* Back while it waits: opens. */
	a = (struct reopen_arg){ blob, len, &r, 1 };
	cr_assert_eq(pthread_create(&t, NULL, reopen_main, &a), 0);
	restart();
	pthread_join(t, NULL);
	cr_assert_eq(a.ret, 0, "reopen: %d (%s)", a.ret, why);
	read_ok(r, 0, 2 * MIB, 0);
	source_destroy(r);
}

Test(nbd, id_is_the_canonical_uri_and_the_export_size)
{
	char u2[600], u3[600];
	struct source *a, *b, *c;

	mkfull(data_path, 2 * MIB);
	serve_unix((const char *[]){ "file", data_path, NULL });
	/* Another spelling of the same: the same id. */
	snprintf(u2, sizeof(u2), "nbd+unix://?socket=%s", sock_path);
	a = open_ok(uri, 0, PAGE, NULL);
	b = open_ok(u2, 0, HUGE, NULL);
	cr_expect_arr_eq(a->id, b->id, sizeof(a->id));
	/* Another export name: another id. */
	snprintf(u3, sizeof(u3), "nbd+unix:///other?socket=%s", sock_path);
	c = open_ok(u3, 0, PAGE, NULL);
	cr_expect_arr_neq(a->id, c->id, sizeof(a->id));
	source_destroy(a);
	source_destroy(b);
	source_destroy(c);
}

/* ------------------------------------------------------------------------
 * The URI parser, the allow list and the retry policy: no server.
 */

Test(nbd_uri, accepted_and_canonical)
{
	static const char *const ok[][2] = {
		{ "nbd://example.com", "nbd://example.com:10809/" },
		{ "nbd://Example.com:1234/exp", "nbd://Example.com:1234/exp" },
		{ "nbds://10.0.0.1/a%20b/c", "nbds://10.0.0.1:10809/a%20b/c" },
		{ "nbd://[fd00::1]:99/", "nbd://[fd00::1]:99/" },
		{ "nbd+unix:///?socket=/run/x.sock",
		  "nbd+unix:///?socket=/run/x.sock" },
		{ "nbds+unix://alice@/e?socket=/s&tls-psk-file=/k",
		  "nbds+unix://alice@/e?socket=/s" },
		{ "nbd+vsock://2:7000/", "nbd+vsock://2:7000/" },
		{ "nbd+vsock://2", "nbd+vsock://2:10809/" },
	};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct nbd_uri u;
		int ret = nbd_uri_parse(ok[i][0], &u, why, sizeof(why));

		cr_expect_eq(ret, 0, "%s: %s", ok[i][0], why);
		if (!ret)
			cr_expect_str_eq(u.canon, ok[i][1]);
		nbd_uri_free(&u);
	}
}

Test(nbd_uri, refused_with_the_reason)
{
	static const char *const bad[][2] = {
		{ "http://x/", "not an NBD URI" },
		{ "nbd:/x", "not an NBD URI" },
		{ "nbd://", "a server must be" },
		{ "nbd://a b/", "a server must be" },
		{ "nbd://x:70000/", "a port" },
		{ "nbd://x:/", "a port" },
		{ "nbd://[::1/", "without ']'" },
		{ "nbd://h/%zz", "%-escape" },
		{ "nbd://h/a%00b", "%-escape" },
		{ "nbd://h/#frag", "fragment" },
		{ "nbd://h/?socket=/x", "nbd+unix URIs only" },
		{ "nbd+unix:///", "needs ?socket=" },
		{ "nbd+unix://host/?socket=/x", "not a host" },
		{ "nbd://h/?user=x", "unknown in the query" },
		{ "nbd+unix:///?socket=/a&socket=/b", "given twice" },
		{ "nbd+vsock://host/", "numeric CID" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct nbd_uri u;
		int ret = nbd_uri_parse(bad[i][0], &u, why, sizeof(why));

		cr_expect_eq(ret, -EINVAL, "%s accepted", bad[i][0]);
		cr_expect(strstr(why, bad[i][1]), "%s: \"%s\" lacks \"%s\"",
			  bad[i][0], why, bad[i][1]);
		nbd_uri_free(&u);
	}
}

static const char allow_text[] =
	"# who may make faultd connect where\n"
	"\n"
	"1001   10.0.0.5:10809      # one server, one port\n"
	"1001   store.example       # any port\n"
	"*      [fd00::5]:10809\n"
	"1002   unix:/run/nbd/\n"
	"1003   unix:/run/one.sock\n"
	"1003   vsock:2\n";

Test(nbd_allow, decisions_with_their_reasons)
{
	static const struct {
		uid_t uid;
		const char *uri;
		int want;
		const char *words;
	} c[] = {
		{ 0, "nbd://anywhere:1/", 0, "root" },
		{ 0, "nbd+unix:///?socket=/x&tls-psk-file=/k", 0, "root" },
		{ 1001, "nbd://10.0.0.5/", 0, "test:3" },
		{ 1001, "nbd://10.0.0.5:10810/", -EPERM,
		  "user 1001 may not make faultd connect to 10.0.0.5:10810" },
		{ 1001, "nbds://STORE.example:77/x", 0, "test:4" },
		{ 1001, "nbd://10.0.0.6/", -EPERM, "no line" },
		{ 4242, "nbd://[fd00::5]/", 0, "test:5" },
		{ 4242, "nbd://[fd00::5]:1/", -EPERM, "[fd00::5]:1" },
		{ 1002, "nbd+unix:///?socket=/run/nbd/a.sock", 0, "test:6" },
		{ 1002, "nbd+unix:///?socket=/run/nbd/sub/a.sock", -EPERM,
		  "unix:/run/nbd/sub/a.sock" },
		{ 1002, "nbd+unix:///?socket=/run/nbd/../x", -EPERM,
		  "\"..\" parts" },
		{ 1002, "nbd+unix:///?socket=/run/nbd/", -EPERM,
		  "is not absolute" },
		{ 1003, "nbd+unix:///?socket=/run/one.sock", 0, "test:7" },
		{ 1003, "nbd+vsock://2:555/", 0, "test:8" },
		{ 1003, "nbd+unix:///?socket=/run/one.sock&tls-psk-file=/k",
		  -EPERM, "names a file of the daemon's host" },
		{ 1003, "nbd:/x", -EINVAL, "not an NBD URI" },
	};
	struct nbd_allow *a;

	cr_assert_eq(nbd_allow_parse(allow_text, "test", &a, why,
				     sizeof(why)), 0, "%s", why);
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		int ret = nbd_allow_check(a, c[i].uid, c[i].uri, why,
					  sizeof(why));

		cr_expect_eq(ret, c[i].want, "%u %s: %d (%s)", c[i].uid,
			     c[i].uri, ret, why);
		cr_expect(strstr(why, c[i].words), "%u %s: \"%s\" lacks \"%s\"",
			  c[i].uid, c[i].uri, why, c[i].words);
	}
	nbd_allow_free(a);
	/* No list: root alone. */
	cr_expect_eq(nbd_allow_check(NULL, 1001, "nbd://10.0.0.5/", why,
				     sizeof(why)), -EPERM);
	cr_expect(strstr(why, "there is no allow list"));
	cr_expect_eq(nbd_allow_check(NULL, 0, "nbd://10.0.0.5/", why,
				     sizeof(why)), 0);
}

Test(nbd_allow, bad_lines_are_refused_with_their_number)
{
	static const char *const bad[][2] = {
		{ "alice\n", "x:1: not USER SERVER" },
		{ "\n1 a b c\n", "x:2: not USER SERVER" },
		{ "no-such-user-here 10.0.0.1\n", "x:1: no user" },
		{ "1 unix:relative\n", "x:1: not a server" },
		{ "1 unix:/a/../b\n", "not a server" },
		{ "1 10.0.0.1:99999\n", "not a server" },
		{ "1 h@st\n", "not a server" },
	};
	struct nbd_allow *a;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_expect_eq(nbd_allow_parse(bad[i][0], "x", &a, why,
					     sizeof(why)), -EINVAL, "%s",
			     bad[i][0]);
		cr_expect(strstr(why, bad[i][1]), "\"%s\" lacks \"%s\"", why,
			  bad[i][1]);
	}
	/* A list that is not there: empty, root alone. */
	cr_assert_eq(nbd_allow_load("/nonexistent/nbd.allow", &a, why,
				    sizeof(why)), 0);
	cr_expect_eq(nbd_allow_check(a, 1, "nbd://h/", why, sizeof(why)),
		     -EPERM);
	nbd_allow_free(a);
	cr_assert_eq(nbd_allow_parse("root *\n", "x", &a, why, sizeof(why)),
		     0);
	cr_expect_eq(nbd_allow_check(a, 0, "nbd://h/", why, sizeof(why)), 0);
	nbd_allow_free(a);
}

static void count_line(void *arg, const char *line)
{
	(*(int *)arg)++;
	cr_log_info("%s", line);
}

Test(nbd_retry, backoff_deadline_and_what_is_counted)
{
	struct retry_policy p = retry_policy_resolve(&(struct retry_policy){
		.backoff_min_ms = 10, .backoff_max_ms = 70, .deadline_ms = 500,
		.read_retries = 2 });
	struct retry_stats st = { 0 };
	struct retry_link l = { 0 };
	int lines = 0;
	struct retry_log log = { count_line, &lines, "test" };
	const uint64_t ms = 1000000;
	uint64_t until, when;
	uint32_t tries = 0;

	cr_expect_eq(retry_backoff_ns(&p, 0), 10 * ms);
	cr_expect_eq(retry_backoff_ns(&p, 1), 20 * ms);
	cr_expect_eq(retry_backoff_ns(&p, 2), 40 * ms);
	cr_expect_eq(retry_backoff_ns(&p, 3), 70 * ms);
	cr_expect_eq(retry_backoff_ns(&p, 30), 70 * ms);
	retry_link_down(&l, &st, &log, 1000 * ms, "refused");
	retry_link_down(&l, &st, &log, 1100 * ms, "again");
	cr_expect_eq(st.outages, 1);
	cr_expect_eq(retry_link_failed(&l, &p, 1000 * ms, &tries), 1010 * ms);
	cr_expect_eq(retry_link_failed(&l, &p, 1010 * ms, &tries), 1030 * ms);
	cr_expect(!retry_link_check(&l, &p, &st, &log, 1499 * ms, &until));
	cr_expect_eq(until, 1500 * ms);
	cr_expect(retry_link_check(&l, &p, &st, &log, 1500 * ms, &until));
	cr_expect(retry_link_check(&l, &p, &st, &log, 1600 * ms, &until));
	cr_expect_eq(st.expired, 1);
	retry_link_up(&l, &st, &log, 2000 * ms);
	cr_expect_eq(st.recovered, 1);
	cr_expect(!retry_link_check(&l, &p, &st, &log, 9000 * ms, &until));
	cr_expect_eq(until, UINT64_MAX);
	cr_expect(retry_read_failed(&p, &st, &log, 1, EIO, "x", 0, &when));
	cr_expect_eq(when, 10 * ms);
	cr_expect(retry_read_failed(&p, &st, &log, 2, EIO, "x", 0, &when));
	cr_expect_eq(when, 20 * ms);
	cr_expect(!retry_read_failed(&p, &st, &log, 3, EIO, "x", 0, &when));
	cr_expect_eq(st.retries, 2);
	cr_expect_eq(st.gave_up, 1);
	/* Down, expired, up, given up: four lines; retries are not logged. */
	cr_expect_eq(lines, 4);
	p = retry_policy_resolve(NULL);
	cr_expect(p.backoff_min_ms == RETRY_BACKOFF_MIN_MS &&
		  p.backoff_max_ms == RETRY_BACKOFF_MAX_MS &&
		  p.deadline_ms == RETRY_DEADLINE_MS &&
		  p.read_retries == RETRY_READ_RETRIES);
}
