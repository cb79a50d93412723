// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * wset.c - working sets (faultd-working-set(5)): the file's checks and
 * merge; a restore recorded, then replayed, in the process and through
 * the daemon, memory byte-identical to a plain restore's and no fault on
 * the set's pages; sets of another image, truncated, corrupt or beyond
 * the image refused with their reason while the restore goes on; a replay
 * racing demand faults on the same pages; a replay interrupted by kill -9
 * of the daemon and a restart.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "daemon-helpers.h"
#include "helpers.h"
#include "tmpdir.h"
#include "internal.h"
#include "wset.h"

#define TAG 0x3e7
#define PAGE 4096ul

static char sock[256];
static pid_t daemon_pid;

static void setup(void)
{
	tmpdir_make("wset");
	snprintf(sock, sizeof(sock), "%s/faultd.sock", test_dir);
	daemon_pid = test_daemon_start(sock);
}

static void teardown(void)
{
	if (daemon_pid > 0)
		test_daemon_kill(daemon_pid, SIGTERM);
	tmpdir_remove();
}

TestSuite(wset, .init = setup, .fini = teardown, .timeout = 300);

/* An image of @len bytes of pattern(@tag). */
static const char *make_image(const char *name, size_t len, uint64_t tag)
{
	struct faultd_ctx *ctx;
	struct faultd_region_opts o = { .size = sizeof(o), .length = len };
	struct faultd_region *r;
	const char *path = path_of(name);

	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	pattern_fill(tag, 0, faultd_region_base(r), len);
	cr_assert_eq(faultd_checkpoint(r, path, NULL), 0);
	faultd_ctx_destroy(ctx);
	return path;
}

/* A fixed pseudo-random choice of about 1 page in @every of @pages. */
static bool chosen(uint64_t page, unsigned int every, uint64_t seed)
{
	uint64_t x = (page + 1) * 0x9e3779b97f4a7c15ull ^ seed;

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 32;
	return x % every == 0;
}

/* Read and check every chosen page of @base; returns the bad ones. */
static size_t touch_chosen(const char *base, size_t len, unsigned int every,
			   uint64_t seed)
{
	size_t bad = 0;

	for (uint64_t p = 0; p < len / PAGE; p++)
		if (chosen(p, every, seed))
			bad += pattern_check(TAG, p * PAGE, base + p * PAGE,
					     PAGE) != 0;
	return bad;
}

/* ------------------------------------------------------------------------
 * The file.
 */

static struct wset_space space_of(uint8_t idbyte, uint64_t size)
{
	struct wset_space s = { .space_id = 0, .src_size = size,
				.page_size = 4096 };

	memset(s.src_id, idbyte, sizeof(s.src_id));
	return s;
}

static void set_of(struct wset *ws, struct wset_space *sp,
		   struct wset_entry *e, const uint64_t *pages, size_t n)
{
	for (size_t i = 0; i < n; i++)
		e[i] = (struct wset_entry){ 0, 0, pages[i] };
	*ws = (struct wset){ sp, 1, e, n };
}

/*
 * The replay plan the library and the daemon share: pages joined into
 * runs (at most WSET_READ_MAX each, the last clipped to the source), runs
 * less than WSET_READ_GAP apart fetched by one read.
 */
Test(wset, plan_joins_pages_into_runs_and_runs_into_reads)
{
	const uint64_t P = 4096, size = 5000 * P + 2048;
	uint64_t pages[3 + 1 + 1 + 1 + 1100 + 1] = { 12, 10, 11, 20, 85, 1000 };
	const struct wset_span runs[] = {
		{ 10 * P, 3 * P }, { 20 * P, P }, { 85 * P, P },
		{ 1000 * P, P }, { 2000 * P, WSET_READ_MAX },
		{ 3024 * P, 76 * P }, { 5000 * P, 2048 },
	};
	const size_t reads[] = { 0, 3, 4, 5, 6, 7 };
	struct wset_space sp = space_of(1, size);
	struct wset_entry e[sizeof(pages) / sizeof(pages[0])];
	struct wset_plan p;
	struct wset_span rd;
	struct wset ws;

	/* 85 is exactly WSET_READ_GAP after 20's run: read with it. */
	cr_assert_eq((85 - 21) * P, WSET_READ_GAP);
	for (size_t i = 0; i < 1100; i++)
		pages[6 + i] = 3099 - i;	/* in no order */
	pages[6 + 1100] = 5000;
	set_of(&ws, &sp, e, pages, sizeof(pages) / sizeof(pages[0]));
	cr_assert_eq(wset_plan(&ws, 0, &p), 0);
	cr_assert_eq(p.nr_runs, sizeof(runs) / sizeof(runs[0]));
	for (size_t i = 0; i < p.nr_runs; i++)
		cr_expect(p.runs[i].off == runs[i].off &&
			  p.runs[i].len == runs[i].len,
			  "run %zu: [%#lx, +%#lx)", i, p.runs[i].off,
			  p.runs[i].len);
	cr_assert_eq(p.nr_reads, sizeof(reads) / sizeof(reads[0]) - 1);
	for (size_t k = 0; k <= p.nr_reads; k++)
		cr_expect_eq(p.reads[k], reads[k], "read %zu", k);
	rd = wset_plan_read(&p, 0);
	cr_expect(rd.off == 10 * P && rd.len == 76 * P, "read 0: [%#lx, +%#lx)",
		  rd.off, rd.len);
	rd = wset_plan_read(&p, 4);
	cr_expect(rd.off == 5000 * P && rd.len == 2048);
	wset_plan_free(&p);
	cr_expect_null(p.runs);
}

static int load(const char *path, struct wset *ws)
{
	const char *why;

	return wset_load(path, NULL, ws, &why);
}

/* Write @len bytes of @path at @off. */
static void poke(const char *path, off_t off, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY);

	cr_assert(fd >= 0);
	cr_assert_eq(pwrite(fd, buf, len, off), (ssize_t)len);
	close(fd);
}

Test(wset, file_is_checked_whole_and_merged_by_count)
{
	struct wset_space sp = space_of(7, 64 * PAGE), other = space_of(8, 64 * PAGE);
	struct wset_entry e[3][8];
	const uint64_t a[] = { 5, 1, 9, 3 }, b[] = { 1, 5, 7 }, c[] = { 9, 1, 2 };
	struct wset in[3], m, back;
	const char *p = path_of("a.ws"), *why;
	struct stat st;
	uint8_t byte = 0xff;

	set_of(&in[0], &sp, e[0], a, 4);
	set_of(&in[1], &sp, e[1], b, 3);
	set_of(&in[2], &sp, e[2], c, 3);
	cr_assert_eq(wset_save(p, &in[0]), 0);
	cr_assert_eq(load(p, &back), 0);
	cr_assert_eq(back.nr, 4);
	for (size_t i = 0; i < 4; i++)
		cr_assert_eq(back.e[i].page, a[i], "first-touch order kept");
	cr_assert(wset_space_match(&back.spaces[0], &sp));
	cr_assert_eq(wset_ranges(&back), 4);
	wset_free(&back);

	/* Pages seen in at least 2 of 3 runs: 1 (3 runs), 5 and 9 (2). */
	cr_assert_eq(wset_merge(in, 3, 2, &m, &why), 0);
	cr_assert_eq(m.nr, 3);
	/* Mean positions: 5 (0, 1/3), 1 (1/4, 0, 1/3), 9 (1/2, 0). */
	cr_assert(m.e[0].page == 5 && m.e[1].page == 1 && m.e[2].page == 9,
		  "in the order of their mean position");
	wset_free(&m);
	cr_assert_eq(wset_merge(in, 3, 1, &m, &why), 0);
	cr_assert_eq(m.nr, 6); /* 1 2 3 5 7 9 */
	wset_free(&m);
	cr_assert_eq(wset_merge(in, 3, 4, &m, &why), -EINVAL);
	in[2].spaces = &other;
	cr_assert_eq(wset_merge(in, 3, 2, &m, &why), -EINVAL,
		     "sets of different sources are refused");

	/* Truncated, a flipped byte, trailing bytes, another version. */
	cr_assert_eq(stat(p, &st), 0);
	cr_assert_eq(truncate(p, st.st_size - 1), 0);
	cr_assert_eq(load(p, &back), -EBADMSG);
	cr_assert_eq(wset_save(p, &in[0]), 0);
	poke(p, st.st_size - 3, &byte, 1);
	cr_assert_eq(load(p, &back), -EBADMSG);
	cr_assert_eq(wset_save(p, &in[0]), 0);
	poke(p, st.st_size, &byte, 1);
	cr_assert_eq(load(p, &back), -EBADMSG);
	cr_assert_eq(wset_save(p, &in[0]), 0);
	byte = 2;
	poke(p, 4, &byte, 1);
	cr_assert_eq(load(p, &back), -EPROTONOSUPPORT);
	/* A page beyond its source, with a right checksum. */
	e[0][2].page = 64;
	cr_assert_eq(wset_save(p, &in[0]), 0);
	cr_assert_eq(load(p, &back), -ERANGE);
	cr_assert_eq(load(path_of("none.ws"), &back), -ENOENT);
}

/* ------------------------------------------------------------------------
 * Record, then replay.
 */

struct run {
	const char *image;
	size_t len;
	bool daemon;
	bool lazy;
	const char *record;	/* record into this */
	const char *set;	/* replay this */
	unsigned int every;	/* touch 1 page in every */
	uint64_t seed;
	bool all;		/* then check every byte */
};

struct result {
	uint64_t faults;	/* during the touch */
	uint64_t replayed;	/* in the process: pages the replay put in */
	size_t bad;		/* pages with wrong content */
	unsigned int log_refused; /* "not used" lines */
};

static atomic_uint refused_lines;

static void count_refusals(void *arg, int level, const char *msg)
{
	(void)arg;
	if (level <= FAULTD_LOG_ERR && strstr(msg, "working set") &&
	    strstr(msg, "not used"))
		atomic_fetch_add(&refused_lines, 1);
}

/* The faults so far: the region's own, and the daemon's last report. */
static uint64_t faults_of(struct faultd_region *r)
{
	struct faultd_restore_progress p = { .size = sizeof(p) };

	cr_assert_eq(faultd_restore_progress(r, &p), 0);
	return p.faults;
}

/*
 * Wait for the replay: in the process, until it says it is over; through
 * the daemon, until its report stops growing for 300 ms. The deadline is
 * for a replay that hangs, not for a slow one: the replay threads run at
 * nice 19, and a machine busy with other tests starves them (a 20 s bound
 * ran out once, with meson test running other suites beside this one).
 */
static void replay_wait(struct faultd_region *r, bool daemon)
{
	struct faultd_restore_progress p = { .size = sizeof(p) };
	uint64_t end = test_now_ns() + 240000000000ull, last = UINT64_MAX;

	for (;;) {
		cr_assert(test_now_ns() < end, "the replay never ended");
		cr_assert_eq(faultd_restore_progress(r, &p), 0);
		if (!daemon && p.replay_ns)
			return;
		if (daemon && p.pages_background && p.pages_background == last)
			return;
		last = p.pages_background;
		usleep(daemon ? 300000 : 1000);
	}
}

static void run_restore(const struct run *c, struct result *res)
{
	struct faultd_ctx_opts co = { .size = sizeof(co),
				      .log = count_refusals };
	struct faultd_restore_opts o = {
		.size = sizeof(o),
		.flags = (c->daemon ? FAULTD_RESTORE_DAEMON : 0) |
			 (c->lazy ? FAULTD_RESTORE_LAZY : 0),
		.socket = sock, .record_working_set = c->record,
		.working_set = c->set,
	};
	struct faultd_restore_progress p = { .size = sizeof(p) };
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	uint64_t f0;

	atomic_store(&refused_lines, 0);
	cr_assert_eq(faultd_ctx_create(&co, &ctx), 0);
	cr_assert_eq(faultd_restore(ctx, c->image, &o, &r), 0);
	if (c->set)
		replay_wait(r, c->daemon);
	f0 = faults_of(r);
	res->bad = touch_chosen(faultd_region_base(r), c->len, c->every,
				c->seed);
	if (c->daemon) /* the daemon reports every 100 ms */
		usleep(300000);
	res->faults = faults_of(r) - f0;
	if (c->all) {
		if (!c->lazy)
			cr_assert_eq(faultd_restore_wait(r), 0);
		res->bad += pattern_check(TAG, 0, faultd_region_base(r),
					  c->len) != 0;
	}
	cr_assert_eq(faultd_restore_progress(r, &p), 0);
	res->replayed = p.pages_replayed;
	res->log_refused = atomic_load(&refused_lines);
	faultd_ctx_destroy(ctx);
}

/* Which pages of the region the set at @path holds, as a bitmap. */
static uint8_t *set_pages(const char *path, size_t len, uint64_t *nr)
{
	uint8_t *bm = calloc(len / PAGE, 1);
	struct wset ws;

	cr_assert(bm);
	cr_assert_eq(load(path, &ws), 0, "%s", path);
	for (uint64_t i = 0; i < ws.nr; i++) {
		cr_assert_lt(ws.e[i].page, len / PAGE);
		cr_assert_eq(bm[ws.e[i].page], 0, "page listed twice");
		bm[ws.e[i].page] = 1;
	}
	*nr = ws.nr;
	wset_free(&ws);
	return bm;
}

/*
 * The recorded set holds only pages that were touched and, without the
 * push, every one of them (a recording serves its faults a page at a
 * time), as many as the recording's faults. Returns the touched pages
 * missing from it (the push put them in first).
 */
static uint64_t check_recorded(const struct run *c, const struct result *rec)
{
	uint64_t nr, touched = 0, missing = 0;
	uint8_t *bm = set_pages(c->record, c->len, &nr);

	for (uint64_t p = 0; p < c->len / PAGE; p++) {
		bool t = chosen(p, c->every, c->seed);

		cr_assert(!bm[p] || t, "page %llu was not touched",
			  (unsigned long long)p);
		touched += t;
		missing += t && !bm[p];
	}
	cr_assert(!c->lazy || !missing, "%llu touched pages not in the set",
		  (unsigned long long)missing);
	cr_assert_eq(nr + missing, touched);
	if (c->lazy)
		cr_assert_eq(rec->faults, nr, "one fault per page touched");
	else
		cr_assert_leq(nr, rec->faults);
	free(bm);
	return missing;
}

static void record_then_replay(bool daemon, bool lazy)
{
	size_t len = 32 * MIB;
	struct run c = { make_image("img", len, TAG), len, daemon, lazy,
			 .record = path_of("rec.ws"), .every = 37, .seed = 1 };
	struct result rec, rep;
	uint64_t pushed;

	run_restore(&c, &rec);
	cr_assert_eq(rec.bad, 0);
	pushed = check_recorded(&c, &rec);
	c.record = NULL;
	c.set = paths[nr_paths - 1];
	c.all = true;
	run_restore(&c, &rep);
	cr_assert_eq(rep.bad, 0, "every byte as a plain restore's");
	cr_assert_eq(rep.log_refused, 0);
	/* The pages the push put in first in the recording may fault. */
	cr_assert_leq(rep.faults, pushed, "no fault on the set's pages (%llu)",
		      (unsigned long long)rep.faults);
	if (!daemon && lazy)
		cr_assert_eq(rep.replayed, rec.faults, "the set's pages: %llu",
			     (unsigned long long)rep.replayed);
}

Test(wset, record_then_replay_in_the_process)
{
	record_then_replay(false, true);
}

Test(wset, record_then_replay_in_the_process_with_the_push)
{
	record_then_replay(false, false);
}

Test(wset, record_then_replay_through_the_daemon)
{
	record_then_replay(true, true);
}

Test(wset, record_then_replay_through_the_daemon_with_the_push)
{
	record_then_replay(true, false);
}

/* ------------------------------------------------------------------------
 * Sets that must not be used.
 */

/* What a set of the image at @path is tied to. */
static void image_space(const char *path, struct wset_space *out)
{
	int fd = image_file_open(path);
	struct image *im;
	const char *why;

	cr_assert(fd >= 0);
	cr_assert_eq(image_open(fd, path, NULL, &im, &why), 0);
	close(fd);
	wset_image_space(im, out);
	image_close(im);
}

/* A set of every page of the image at @path, in a shuffled order. */
static const char *set_of_all(const char *path, size_t len, const char *name)
{
	struct wset_space sp;
	struct wset ws = { &sp, 1, calloc(len / PAGE, sizeof(*ws.e)),
			   len / PAGE };
	const char *out = path_of(name);

	cr_assert(ws.e);
	image_space(path, &sp);
	for (uint64_t i = 0; i < ws.nr; i++)
		ws.e[i] = (struct wset_entry){ 0, 0, i };
	for (uint64_t i = ws.nr - 1; i > 0; i--) {
		uint64_t j = (i * 0x9e3779b97f4a7c15ull >> 17) % (i + 1);
		struct wset_entry t = ws.e[i];

		ws.e[i] = ws.e[j];
		ws.e[j] = t;
	}
	cr_assert_eq(wset_save(out, &ws), 0);
	free(ws.e);
	return out;
}

/* The set at @set refused with a logged reason; every byte right. */
static void refused(const char *image, size_t len, const char *set,
		    bool daemon)
{
	struct run c = { image, len, daemon, true, .set = NULL, .every = 1,
			 .all = true };
	struct faultd_ctx_opts co = { .size = sizeof(co),
				      .log = count_refusals };
	struct faultd_restore_opts o = {
		.size = sizeof(o),
		.flags = FAULTD_RESTORE_LAZY |
			 (daemon ? FAULTD_RESTORE_DAEMON : 0),
		.socket = sock, .working_set = set,
	};
	struct faultd_restore_progress p = { .size = sizeof(p) };
	struct faultd_ctx *ctx;
	struct faultd_region *r;

	atomic_store(&refused_lines, 0);
	cr_assert_eq(faultd_ctx_create(&co, &ctx), 0);
	cr_assert_eq(faultd_restore(ctx, c.image, &o, &r), 0,
		     "the restore goes on without the set");
	cr_assert_eq(atomic_load(&refused_lines), 1, "%s: one reason", set);
	cr_assert_eq(pattern_check(TAG, 0, faultd_region_base(r), len), 0);
	cr_assert_eq(faultd_restore_progress(r, &p), 0);
	cr_assert_eq(p.pages_replayed, 0);
	cr_assert_eq(p.pages_background, 0, "nothing replayed");
	faultd_ctx_destroy(ctx);
}

Test(wset, sets_that_do_not_fit_are_refused_and_the_restore_goes_on)
{
	size_t len = 8 * MIB;
	const char *img = make_image("img", len, TAG);
	const char *other = make_image("other", len, TAG);
	struct run c = { other, len, false, true,
			 .record = path_of("other.ws"), .every = 5 };
	const char *trunc = path_of("trunc.ws"), *bad = path_of("bad.ws");
	const char *beyond = path_of("beyond.ws");
	struct wset ws;
	struct result res;
	uint8_t byte;
	char cmd[1024];
	struct stat st;

	run_restore(&c, &res);
	snprintf(cmd, sizeof(cmd), "cp %s %s && cp %s %s && cp %s %s",
		 c.record, trunc, c.record, bad, c.record, beyond);
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(stat(trunc, &st), 0);
	cr_assert_eq(truncate(trunc, st.st_size - 16), 0);
	byte = 0x5a;
	poke(bad, st.st_size - 5, &byte, 1);
	/* A set of the right image, one page beyond it, resealed. */
	cr_assert_eq(load(c.record, &ws), 0);
	image_space(img, &ws.spaces[0]);
	ws.e[0].page = len / PAGE;
	cr_assert_eq(wset_save(beyond, &ws), 0);
	wset_free(&ws);
	for (int d = 0; d < 2; d++) {
		refused(img, len, c.record, d);	/* another image's */
		refused(img, len, trunc, d);
		refused(img, len, bad, d);
		refused(img, len, beyond, d);
		refused(img, len, path_of("missing.ws"), d);
	}
}

/* ------------------------------------------------------------------------
 * Races and restarts.
 */

struct toucher {
	const char *base;
	size_t len;
	uint64_t seed;
	size_t bad;
};

/* Read and check every page, in an order of its own. */
static void *touch_all(void *arg)
{
	struct toucher *t = arg;
	uint64_t n = t->len / PAGE, step = 1 + 2 * (t->seed % (n / 4));

	while (n % step == 0 || step % 2 == 0)
		step++;
	for (uint64_t i = 0, p = t->seed % n; i < n; i++, p = (p + step) % n)
		t->bad += pattern_check(TAG, p * PAGE, t->base + p * PAGE,
					PAGE) != 0;
	return NULL;
}

/*
 * Two threads read every page, in orders of their own, while a replay of
 * every page runs (through the daemon or in the process): every byte
 * right, nothing asleep (the test ends), and in the process no page put
 * in twice by the replay (a page a fault put in first is stepped over).
 */
static void race_once(const char *img, const char *set, size_t len,
		      bool daemon, unsigned int round)
{
	struct faultd_restore_opts o = {
		.size = sizeof(o),
		.flags = FAULTD_RESTORE_LAZY |
			 (daemon ? FAULTD_RESTORE_DAEMON : 0),
		.socket = sock, .working_set = set,
	};
	struct faultd_restore_progress p = { .size = sizeof(p) };
	struct faultd_stats st = { .size = sizeof(st) };
	struct toucher t[2];
	pthread_t th[2];
	struct faultd_ctx *ctx;
	struct faultd_region *r;

	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	cr_assert_eq(faultd_restore(ctx, img, &o, &r), 0);
	for (int i = 0; i < 2; i++) {
		t[i] = (struct toucher){ faultd_region_base(r), len,
					 round * 7919 + i * 104729 + 1 };
		cr_assert_eq(pthread_create(&th[i], NULL, touch_all, &t[i]), 0);
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(t[i].bad, 0, "round %u thread %d", round, i);
	}
	if (!daemon) {
		replay_wait(r, false);
		cr_assert_eq(faultd_restore_progress(r, &p), 0);
		faultd_region_stats(r, &st);
		cr_assert_leq(p.pages_replayed, len / PAGE,
			      "round %u: a page put in twice", round);
		cr_log_info("round %u: %llu replayed, %llu faults, %llu "
			    "eexist", round,
			    (unsigned long long)p.pages_replayed,
			    (unsigned long long)st.faults,
			    (unsigned long long)st.eexist);
	}
	faultd_ctx_destroy(ctx);
}

Test(wset, replay_racing_demand_faults_on_the_same_pages)
{
	const char *env = getenv("FAULTD_WSET_RACE_ROUNDS");
	unsigned int rounds = env ? (unsigned int)atoi(env) : 4;
	size_t len = 64 * MIB;
	const char *img = make_image("img", len, TAG);
	const char *set = set_of_all(img, len, "all.ws");

	for (unsigned int k = 0; k < rounds; k++) {
		race_once(img, set, len, false, k);
		race_once(img, set, len, true, k);
	}
}

/*
 * A client replays a set of every page of a 256 MiB image through the
 * daemon, which is killed (kill -9) as soon as the restore is registered
 * - in the replay - and started again: the new daemon adopts the session
 * (the library never takes over), and every byte is right.
 */
Test(wset, replay_interrupted_by_kill_of_the_daemon)
{
	size_t len = 256 * MIB;
	const char *img = make_image("img", len, TAG);
	const char *set = set_of_all(img, len, "all.ws");
	int to_test[2], from_test[2], status;
	char k;
	pid_t pid;

	cr_assert_eq(pipe(to_test), 0);
	cr_assert_eq(pipe(from_test), 0);
	pid = fork();
	if (pid == 0) {
		struct faultd_restore_opts o = {
			.size = sizeof(o),
			.flags = FAULTD_RESTORE_DAEMON | FAULTD_RESTORE_LAZY,
			.socket = sock, .working_set = set,
		};
		struct faultd_restore_progress p = { .size = sizeof(p) };
		struct faultd_ctx *ctx;
		struct faultd_region *r;
		uint64_t end;

		if (faultd_ctx_create(NULL, &ctx) ||
		    faultd_restore(ctx, img, &o, &r))
			_exit(10);
		if (write(to_test[1], "k", 1) != 1 ||
		    read(from_test[0], &k, 1) != 1)
			_exit(11);
		if (pattern_check(TAG, 0, faultd_region_base(r), len))
			_exit(12);
		end = test_now_ns() + 20000000000ull;
		do
			faultd_restore_progress(r, &p);
		while (!p.done && test_now_ns() < end);
		faultd_ctx_destroy(ctx); /* its threads too, joined */
		_exit(!p.done ? 13 : p.daemon_died ? 14 : 0);
	}
	cr_assert_eq(read(to_test[0], &k, 1), 1);
	test_daemon_kill(daemon_pid, SIGKILL);
	daemon_pid = test_daemon_start(sock);
	cr_assert_eq(write(from_test[1], "g", 1), 1);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "client: %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* ------------------------------------------------------------------------
 * faultd working-set show and merge.
 */

/* Run "faultd working-set @args", its output into @out; the exit code. */
static int cli(const char *args, char *out, size_t max)
{
	char cmd[2048];
	FILE *f;
	size_t n;
	int st;

	snprintf(cmd, sizeof(cmd), "%s working-set %s 2>&1",
		 getenv("FAULTD_DAEMON"), args);
	f = popen(cmd, "r");
	cr_assert(f);
	n = fread(out, 1, max - 1, f);
	out[n] = 0;
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(wset, show_and_merge_from_the_command_line)
{
	struct wset_space sp = space_of(7, 64 * PAGE), other = space_of(9, 64 * PAGE);
	struct wset_entry e[3][8];
	const uint64_t a[] = { 5, 1, 9, 3 }, b[] = { 1, 5, 7 }, c[] = { 9, 1, 2 };
	const char *pa = path_of("a.ws"), *pb = path_of("b.ws");
	const char *pc = path_of("c.ws"), *po = path_of("o.ws");
	const char *pm = path_of("m.ws");
	struct wset in[3], m;
	char args[1024], out[4096];

	set_of(&in[0], &sp, e[0], a, 4);
	set_of(&in[1], &sp, e[1], b, 3);
	set_of(&in[2], &sp, e[2], c, 3);
	cr_assert_eq(wset_save(pa, &in[0]), 0);
	cr_assert_eq(wset_save(pb, &in[1]), 0);
	cr_assert_eq(wset_save(pc, &in[2]), 0);
	snprintf(args, sizeof(args), "show %s", pa);
	cr_assert_eq(cli(args, out, sizeof(out)), 0, "%s", out);
	cr_assert(strstr(out, "pages 4\nranges 4\n"), "%s", out);
	cr_assert(strstr(out, "space 0: pages 4, bytes 16384, source "
			      "0707070707070707070707070707070707070707070707"
			      "070707070707070707, source size 262144, page "
			      "size 4096"), "%s", out);
	snprintf(args, sizeof(args), "merge -o %s --min-count 2 %s %s %s", pm,
		 pa, pb, pc);
	cr_assert_eq(cli(args, out, sizeof(out)), 0, "%s", out);
	cr_assert_eq(load(pm, &m), 0);
	cr_assert(m.nr == 3 && m.e[0].page == 5 && m.e[1].page == 1 &&
		  m.e[2].page == 9);
	wset_free(&m);
	in[2].spaces = &other;
	cr_assert_eq(wset_save(po, &in[2]), 0);
	snprintf(args, sizeof(args), "merge -o %s %s %s", pm, pa, po);
	cr_assert_eq(cli(args, out, sizeof(out)), 1, "%s", out);
	cr_assert(strstr(out, "different sources"), "%s", out);
	snprintf(args, sizeof(args), "merge -o %s --min-count 3 %s %s", pm, pa,
		 pb);
	cr_assert_eq(cli(args, out, sizeof(out)), 2, "more runs than sets");
	cr_assert_eq(truncate(pa, 40), 0);
	snprintf(args, sizeof(args), "show %s", pa);
	cr_assert_eq(cli(args, out, sizeof(out)), 1);
	cr_assert(strstr(out, "truncated"), "%s", out);
}

Test(wset, a_page_listed_twice_is_kept_once_in_its_first_place)
{
	struct wset_space sp[2] = { space_of(7, 64 * PAGE),
				    space_of(8, 64 * PAGE) };
	struct wset_entry e[] = { { 0, 0, 4 }, { 1, 0, 4 }, { 0, 0, 2 },
				  { 0, 0, 4 }, { 1, 0, 4 }, { 0, 0, 9 } };
	struct wset ws = { sp, 2, e, 6 };

	sp[1].space_id = 1;
	cr_assert_eq(wset_dedupe(&ws), 0);
	cr_assert_eq(ws.nr, 4);
	cr_assert(e[0].space == 0 && e[0].page == 4);
	cr_assert(e[1].space == 1 && e[1].page == 4);
	cr_assert(e[2].space == 0 && e[2].page == 2);
	cr_assert(e[3].space == 0 && e[3].page == 9);
}

/* ------------------------------------------------------------------------
 * Sets that claim more than they are: read in bounded memory, refused.
 */

/* A set file of @nr entries of one space of @src_size bytes, the entries
 * left a hole: what a sparse file of a few KiB on disk claims. */
static const char *sparse_set(const char *name, uint64_t src_size,
			      uint64_t nr)
{
	struct wset_header h = { .magic = WSET_MAGIC, .version = WSET_VERSION,
				 .header_size = sizeof(h), .nr_spaces = 1,
				 .nr_entries = nr };
	struct wset_space sp = space_of(7, src_size);
	const char *p = path_of(name);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, &h, sizeof(h)), (ssize_t)sizeof(h));
	cr_assert_eq(write(fd, &sp, sizeof(sp)), (ssize_t)sizeof(sp));
	cr_assert_eq(ftruncate(fd, (off_t)(sizeof(h) + sizeof(sp) +
					   nr * sizeof(struct wset_entry))), 0);
	close(fd);
	return p;
}

/* In a child: load @arg; exit 0 when refused as a page listed twice with
 * at most 64 MiB resident at the peak, else what went wrong. */
static void load_bounded_child(void *arg)
{
	struct rusage ru;
	struct wset ws;
	const char *why;
	int ret = wset_load(arg, NULL, &ws, &why);

	getrusage(RUSAGE_SELF, &ru);
	if (ret != -EBADMSG || !strstr(why, "twice"))
		_exit(2);
	_exit(ru.ru_maxrss > 64 * 1024 ? 3 : 0);
}

/* Keep a space of a source of 64 pages, as a daemon checks its sources. */
static enum wset_use use_64_pages(const struct wset_space *s, void *arg)
{
	(void)arg;
	return s->src_size == 64 * PAGE ? WSET_KEEP : WSET_REFUSE;
}

Test(wset, sets_are_read_in_bounded_memory_and_list_a_page_once)
{
	struct wset_space sp = space_of(7, 64 * PAGE);
	struct wset_entry e[8];
	const uint64_t twice[] = { 5, 1, 9, 1 };
	const struct wset_filter f = { use_64_pages, NULL };
	const char *p = path_of("twice.ws"), *big, *why;
	char args[1024], out[4096];
	struct wset ws;

	/* A page listed twice, apart: refused (faultd-working-set(5)). */
	set_of(&ws, &sp, e, twice, 4);
	cr_assert_eq(wset_save(p, &ws), 0);
	cr_assert_eq(wset_load(p, NULL, &ws, &why), -EBADMSG);
	cr_assert(strstr(why, "twice"), "%s", why);

	/* 2 GiB of entries that are a hole: refused at the second, with
	 * the memory of a small set (it used to cost 2.1 GB). */
	big = sparse_set("sparse.ws", 1ull << 40, (2ull << 30) / 16);
	cr_assert_eq(run_in_child(load_bounded_child, (void *)big), -1,
		     "loaded whole, or not refused as a page listed twice");
	snprintf(args, sizeof(args), "show %s", big);
	cr_assert_eq(cli(args, out, sizeof(out)), 1, "%s", out);
	cr_assert(strstr(out, "twice"), "%s", out);

	/* A reader that knows its sources refuses a set of another size
	 * before it reads an entry. */
	cr_assert_eq(wset_load(big, &f, &ws, &why), -EXDEV);
	set_of(&ws, &sp, e, twice, 3);
	cr_assert_eq(wset_save(p, &ws), 0);
	cr_assert_eq(wset_load(p, &f, &ws, &why), 0, "%s", why);
	cr_assert_eq(ws.nr, 3);
	wset_free(&ws);
}

Test(wset, merge_writes_through_a_symlink)
{
	struct wset_space sp = space_of(7, 64 * PAGE);
	struct wset_entry e[8];
	const uint64_t a[] = { 5, 1, 9, 3 };
	const char *pa = path_of("a.ws"), *target = path_of("target.ws");
	const char *link = path_of("link.ws");
	char args[1024], out[4096], to[256];
	struct wset ws;
	struct stat st;

	set_of(&ws, &sp, e, a, 4);
	cr_assert_eq(wset_save(pa, &ws), 0);
	cr_assert_eq(symlink("target.ws", link), 0);
	snprintf(args, sizeof(args), "merge -o %s %s", link, pa);
	cr_assert_eq(cli(args, out, sizeof(out)), 0, "%s", out);
	cr_assert_eq(lstat(link, &st), 0);
	cr_assert(S_ISLNK(st.st_mode), "the link was replaced");
	cr_assert_eq(readlink(link, to, sizeof(to)), 9);
	cr_assert_eq(load(target, &ws), 0, "the set is at the link's target");
	cr_assert_eq(ws.nr, 4);
	wset_free(&ws);
}
