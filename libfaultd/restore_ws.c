// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * restore_ws.c - the working sets of faultd_restore() (wset.h,
 * faultd-working-set(5)): record the pages a restore's faults asked for,
 * replay a set before the background population.
 *
 * A set is checked here before it is used, in the process or through the
 * daemon (which checks it again): whole and uncorrupted, of this image
 * (its id and length), no page beyond it. One that is not is logged and
 * not used; the restore goes on without it.
 *
 * In the process, the first missing fault of each page is noted
 * (restore_note_fault(), from the fault path) and the set written when
 * the region is destroyed; a recording region has no fault-around (a page
 * put in around another's fault would never fault, and would be missing
 * from the set), so the set is the pages the restore touched.
 *
 * A replay follows wset_plan(), as the daemon's does: runs of
 * consecutive pages, fetched by reads in image order (runs less than
 * WSET_READ_GAP apart read at once, the blocks between read but not
 * installed, up to WSET_READ_MAX bytes; io_uring, 64 KiB chunks in
 * flight: image_read()). WS_THREADS threads of their own take the reads
 * in turn, so that two are in flight, and hint the one after those to
 * the kernel (POSIX_FADV_WILLNEED: the disk reads ahead). They run at
 * nice 19 - a handler thread preempts them: faults stay first - except
 * when the caller waits for the set (FAULTD_RESTORE_WSET_FIRST: the
 * replay is then what the program waits for). A run is installed with
 * UFFDIO_COPY and DONTWAKE (pages already in are stepped over) and woken
 * with one UFFDIO_WAKE. Then the background population, unless LAZY.
 *
 * UFFDIO_MOVE from the staging buffer instead of COPY was measured here
 * (this 2-vCPU machine, 256 MiB in 4 MiB reads from the page cache): COPY
 * 1.8-2.1 GB/s, MOVE 1.4-1.6 GB/s (every read faults fresh staging pages
 * in), MOVE after MADV_POPULATE_WRITE of the staging 1.8 GB/s: no gain,
 * so COPY it is. (The daemon cannot MOVE at all: the kernel moves pages
 * within the userfaultfd's own address space only, and the daemon's
 * staging is in its own.)
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <urcu/futex.h>

#include "internal.h"
#include "wset.h"

#define WS_NICE 19
#define WS_THREADS 2	/* reads in flight at once, as the daemon's pushers */

struct rwset {
	struct faultd_region *r;
	struct image *img;	/* the region's; its pager owns it */
	/* Recording in the process */
	struct wset_rec rec;
	bool recording;
	_Atomic uint64_t *seen;	/* pages whose first fault is noted */
	char *record_path;
	/* Through the daemon: the files for REGISTER; -1: none */
	int record_fd, set_fd;
	/* Replay in the process */
	struct wset_plan plan;
	atomic_size_t next;	/* the next read to take */
	bool then_prefetch;
	bool waited;		/* the caller waits for it: not niced */
	unsigned int started;	/* replay threads */
	pthread_t threads[WS_THREADS];
	atomic_uint running;
	atomic_bool stop;
	int32_t done;		/* futex: the replay is over (or none) */
	uint64_t t0;
	atomic_uint_fast64_t pages, bytes, ns, read_ns;
};

/* ------------------------------------------------------------------------
 * Loading and checking a set.
 */

/* A set of @arg's image only: one space, that image's. */
static enum wset_use set_use(const struct wset_space *s, void *arg)
{
	return wset_space_match(s, arg) ? WSET_KEEP : WSET_REFUSE;
}

/* The set at @path, of @img: 0, or -errno logged (the set is not used). */
static int set_load(struct faultd_region *r, struct image *img,
		    const char *path, struct wset *ws)
{
	struct wset_space mine;
	const struct wset_filter f = { set_use, &mine };
	const char *why;
	int ret;

	wset_image_space(img, &mine);
	ret = wset_load(path, &f, ws, &why);
	if (ret == -EXDEV || (!ret && ws->nr_spaces != 1)) {
		why = "a working set of another image";
		if (!ret)
			wset_free(ws);
		ret = -ESTALE;
	}
	if (ret)
		fd_err(r->ctx, "%s: working set %s: %s (%s): not used",
		       r->name, path, why, strerror(-ret));
	return ret;
}

/* Recording in the process: the recorder, tied to the image. */
static int rec_setup(struct rwset *w, const char *path)
{
	size_t pages = atomic_load(&w->r->len) / w->r->page_size;
	struct wset_space mine;
	uint32_t idx;

	w->record_path = strdup(path);
	w->seen = calloc(bitmap_words(pages) + 1, sizeof(*w->seen));
	if (!w->record_path || !w->seen)
		return -ENOMEM;
	wset_image_space(w->img, &mine);
	if (wset_rec_space(&w->rec, &mine, &idx))
		return -ENOMEM;
	w->recording = true;
	return 0;
}

/*
 * Through the daemon: the files REGISTER carries. The record is opened
 * for writing (created; the daemon writes it from offset 0 and cuts it),
 * the set only if it checks here.
 */
static int daemon_files(struct rwset *w, const struct faultd_restore_opts *o)
{
	struct wset ws;

	if (o->record_working_set) {
		w->record_fd = open(o->record_working_set,
				    O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		if (w->record_fd < 0) {
			fd_err(w->r->ctx, "%s: %s: %s", w->r->name,
			       o->record_working_set, strerror(errno));
			return -errno;
		}
	}
	if (o->working_set && !set_load(w->r, w->img, o->working_set, &ws)) {
		wset_free(&ws);
		w->set_fd = open(o->working_set, O_RDONLY | O_CLOEXEC);
	}
	return 0;
}

/*
 * rws_create() - the working-set state of restored region @r of @img, as
 * @o asks (NULL when it asks for none). Returns 0 or -errno (a record
 * file that cannot be opened, no memory); a set that cannot be used is
 * not an error (logged).
 */
int rws_create(struct faultd_region *r, struct image *img,
	       const struct faultd_restore_opts *o, struct rwset **wp)
{
	struct rwset *w;
	struct wset ws;
	int ret = 0;

	*wp = NULL;
	if (!o->record_working_set && !o->working_set)
		return 0;
	w = fd_calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	*w = (struct rwset){ .r = r, .img = img, .record_fd = -1,
			     .set_fd = -1, .done = 1 };
	wset_rec_init(&w->rec);
	if (o->flags & FAULTD_RESTORE_DAEMON)
		ret = daemon_files(w, o);
	else if (o->record_working_set)
		ret = rec_setup(w, o->record_working_set);
	if (!ret && !(o->flags & FAULTD_RESTORE_DAEMON) && o->working_set &&
	    !set_load(r, img, o->working_set, &ws)) {
		ret = wset_plan(&ws, 0, &w->plan);
		wset_free(&ws);
	}
	if (ret) {
		rws_free(w);
		return ret;
	}
	*wp = w;
	return 0;
}

/* The descriptors REGISTER carries (-1: none). */
void rws_daemon_fds(const struct rwset *w, int *record_fd, int *set_fd)
{
	*record_fd = w ? w->record_fd : -1;
	*set_fd = w ? w->set_fd : -1;
}

/* ------------------------------------------------------------------------
 * Recording.
 */

/*
 * rws_note_fault() - a missing fault at region offset @off: its page's
 * first is noted. Context: a handler thread (fault path); no I/O.
 */
void rws_note_fault(struct rwset *w, uint64_t off)
{
	uint64_t page = off / w->r->page_size;

	if (!w->recording)
		return;
	if (bitmap_test_and_set(w->seen, page, memory_order_seq_cst))
		return;
	wset_rec_add(&w->rec, 0, page);
}

/* rws_save() - write what was recorded in the process (logged if not). */
void rws_save(struct rwset *w)
{
	struct wset ws;
	int ret;

	if (!w || !w->recording)
		return;
	ret = wset_rec_copy(&w->rec, &ws);
	if (!ret) {
		ret = wset_save(w->record_path, &ws);
		wset_free(&ws);
	}
	if (ret)
		fd_err(w->r->ctx, "%s: cannot write the working set %s: %s",
		       w->r->name, w->record_path, strerror(-ret));
}

/* ------------------------------------------------------------------------
 * Replay in the process.
 */

/* Install @run from @buf (which holds source [@at, ..)). */
static void run_install(struct rwset *w, const struct wset_span *run,
			uint64_t at, const char *buf)
{
	struct faultd_region *r = w->r;
	struct inst_req q = {
		.uffd = r->group->uffd, .op = INST_COPY,
		.flags = INST_DONTWAKE |
			 (r->wp_mode != WP_NONE ? INST_WP : 0),
		.dst = r->base + run->off, .len = run->len,
		.page_size = r->page_size, .src = buf + (run->off - at),
	};
	struct inst_res res;

	install_range(&q, &res);
	uffd_wake(r->group->uffd, r->base + run->off, run->len);
	atomic_fetch_add(&w->pages, res.done / r->page_size);
	stat_add_shared(r->bg_stats, ST_READAHEAD, res.done / r->page_size);
}

/*
 * Read @k of the plan: read it and install its runs. Context: the replay
 * thread, r->lock held for reading.
 */
static void read_replay(struct rwset *w, size_t k, char *buf)
{
	struct wset_span rd = wset_plan_read(&w->plan, k);
	uint64_t t0 = now_ns();
	ssize_t n = image_read(w->img, rd.off, buf, rd.len);

	atomic_fetch_add(&w->read_ns, now_ns() - t0);
	if (n < 0) { /* a bad block: the fault that reads it poisons it */
		fd_warn(w->r->ctx, "%s: working set: image [%#llx, +%#llx): "
				   "%s: left to the faults", w->r->name,
			(unsigned long long)rd.off, (unsigned long long)rd.len,
			strerror((int)-n));
		return;
	}
	atomic_fetch_add(&w->bytes, rd.len);
	for (size_t i = w->plan.reads[k]; i < w->plan.reads[k + 1]; i++)
		run_install(w, &w->plan.runs[i], rd.off, buf);
}

/*
 * Take reads in turn with the other replay threads, in image order. Each
 * read and its installs hold the region's lock for reading, inside the
 * context lock in FAULTD_LOCK_GLOBAL mode, as a fault of the region would.
 */
static void replay_reads(struct rwset *w, char *buf)
{
	struct faultd_region *r = w->r;
	bool global = lock_global(r->ctx);
	size_t k;

	while (!atomic_load(&w->stop) &&
	       (k = atomic_fetch_add(&w->next, 1)) < w->plan.nr_reads) {
		struct wset_span rd = wset_plan_read(&w->plan, k);

		/* The disk reads the read after the next while we take
		 * this one (the other thread has the next). */
		if (k + WS_THREADS < w->plan.nr_reads) {
			struct wset_span ahead =
				wset_plan_read(&w->plan, k + WS_THREADS);

			image_willneed(w->img, ahead.off, ahead.len);
		}
		if (global)
			map_read_lock(r->ctx);
		pthread_rwlock_rdlock(&r->lock);
		if (!r->dead && rd.off + rd.len <= atomic_load(&r->len))
			read_replay(w, k, buf);
		pthread_rwlock_unlock(&r->lock);
		if (global)
			map_read_unlock(r->ctx);
	}
}

/* The last replay thread: the end, then the population if asked. */
static void replay_end(struct rwset *w)
{
	atomic_store(&w->ns, now_ns() - w->t0);
	fd_dbg(w->r->ctx, "%s: working set replayed: %llu pages, %llu KiB "
			  "read in %llu us", w->r->name,
	       (unsigned long long)atomic_load(&w->pages),
	       (unsigned long long)atomic_load(&w->bytes) >> 10,
	       (unsigned long long)atomic_load(&w->ns) / 1000);
	if (w->then_prefetch && !atomic_load(&w->stop) &&
	    faultd_region_prefetch(w->r, 0, atomic_load(&w->r->len)) < 0)
		fd_warn(w->r->ctx, "%s: no background population: pages come "
				   "in when touched", w->r->name);
	__atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
	futex_noasync(&w->done, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

static void *replay_main(void *arg)
{
	struct rwset *w = arg;
	char *buf = aligned_alloc(4096, WSET_READ_MAX);

	if (!w->waited)
		setpriority(PRIO_PROCESS, (id_t)gettid(), WS_NICE);
	if (buf)
		replay_reads(w, buf);
	else
		fd_warn(w->r->ctx, "%s: a replay thread has no memory: the "
				   "others go on", w->r->name);
	free(buf);
	if (atomic_fetch_sub(&w->running, 1) == 1)
		replay_end(w);
	return NULL;
}

/*
 * rws_replay_start() - replay the set in the process, then (@then_prefetch)
 * start the background population. @waited: the caller waits for the
 * replay (rws_replay_wait()), which is then on its critical path and runs
 * at its priority, not at WS_NICE. Returns 0 when the replay runs, or
 * -ENOENT (no set to replay) or -errno (no thread): then the caller
 * starts the population itself.
 */
int rws_replay_start(struct rwset *w, bool then_prefetch, bool waited)
{
	int ret = 0;

	if (!w || !w->plan.nr_runs)
		return -ENOENT;
	w->then_prefetch = then_prefetch;
	w->waited = waited;
	w->done = 0;
	w->t0 = now_ns();
	atomic_store(&w->running, WS_THREADS);
	for (; w->started < WS_THREADS; w->started++) {
		ret = thread_start(&w->threads[w->started], replay_main, w,
				   "faultd-replay");
		if (ret < 0)
			break;
	}
	if (!w->started) {
		w->done = 1;
		return ret;
	}
	/* Threads short: those that run do it all. */
	if (w->started < WS_THREADS &&
	    atomic_fetch_sub(&w->running, WS_THREADS - w->started) ==
		    WS_THREADS - w->started)
		replay_end(w);
	return 0;
}

/* rws_replay_wait() - until the replay (and its start of the population)
 * is over. Context: not a handler thread. */
void rws_replay_wait(struct rwset *w)
{
	while (w && !__atomic_load_n(&w->done, __ATOMIC_ACQUIRE))
		futex_noasync(&w->done, FUTEX_WAIT, 0, NULL, NULL, 0);
}

bool rws_replay_done(const struct rwset *w)
{
	return !w || __atomic_load_n(&w->done, __ATOMIC_ACQUIRE);
}

void rws_progress(const struct rwset *w, struct faultd_restore_progress *p)
{
	if (!w)
		return;
	p->pages_replayed = atomic_load(&w->pages);
	p->replay_bytes = atomic_load(&w->bytes);
	p->replay_ns = atomic_load(&w->ns);
	p->replay_read_ns = atomic_load(&w->read_ns);
}

/* rws_stop() - end a replay that runs (the region is being destroyed). */
void rws_stop(struct rwset *w)
{
	if (!w || !w->started)
		return;
	atomic_store(&w->stop, true);
	for (unsigned int i = 0; i < w->started; i++)
		pthread_join(w->threads[i], NULL);
	w->started = 0;
}

void rws_free(struct rwset *w)
{
	if (!w)
		return;
	rws_stop(w);
	if (w->record_fd >= 0)
		close(w->record_fd);
	if (w->set_fd >= 0)
		close(w->set_fd);
	wset_rec_free(&w->rec);
	free(w->seen);
	free(w->record_path);
	wset_plan_free(&w->plan);
	free(w);
}
