// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * restore.c - faultd_restore(): a region served from an image, by the
 * library itself or by the faultd daemon.
 *
 * Locally, the region is an ordinary one whose pager reads the image
 * (image.c) a 64 KiB block per fault, and whose pages are prefetched in
 * the background by the context's prefetch workers.
 *
 * Through the daemon, the region is created with its handler threads not
 * started (a deferred group) and its userfaultfd and the image are sent to
 * the daemon, which serves the faults and pushes the rest. The library
 * keeps its own reference to the userfaultfd, so if the daemon dies the
 * region's registration survives and its faults wait. A watcher thread
 * reads the socket: on DONE (every page is in) or on the end of the
 * connection (the daemon died), it starts the region's own handler threads
 * - the image pager is still there - and wakes the whole range, since a
 * dead daemon may have read faults it never answered. From then on the
 * region is served like a local one. The pages the daemon poisoned (a
 * block whose checksum failed) are counted in the region's poisoned
 * counter and logged, as the library's own handlers do.
 *
 * An image that is an NBD export (a path that is an NBD URI) is read by
 * the daemon alone: the library connects, asks the daemon to OPEN it,
 * checks the header it answers (and the key, if any) and makes the
 * region of its length, then REGISTERs it without an image descriptor.
 * Its session is kept for a restarted daemon until the process exits;
 * should the connection end before DONE all the same, the pages not in
 * are poisoned on access (nothing here can read them), and after DONE a
 * page the program discarded reads zeros, as the daemon serves it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <urcu/futex.h>

#include "internal.h"
#include "proto.h"

#define RESTORE_KNOWN                                                          \
	(FAULTD_RESTORE_DAEMON | FAULTD_RESTORE_LAZY | FAULTD_RESTORE_WSET_FIRST)
#define RECORD_WAIT_S 5	/* how long a destroy waits for the daemon's record */

struct restore {
	struct image *img;	/* owned by the pager (release) */
	unsigned int flags;
	int sock;		/* daemon mode: the connection; else -1 */
	uint64_t features;	/* daemon mode: the daemon's (HELLO) */
	bool remote;		/* the image is an NBD export: daemon only */
	atomic_bool served;	/* remote: DONE came, pages missing now were
				   discarded since (zeros) */
	pthread_t watcher;
	bool watching;
	atomic_bool closing;	/* destroy: the watcher must not take over */
	int32_t done;		/* futex: every page is in, or the library
				   took over (then see taken_over) */
	bool taken_over;	/* after the daemon died: the rest is the
				   prefetch workers' (unless LAZY) */
	pthread_mutex_t lock;	/* progress */
	struct proto_progress progress;
	bool daemon_died;
	struct rwset *ws;	/* working sets (restore_ws.c); NULL: none */
	bool record_wait;	/* the daemon records: wait for its end */
};

/* ------------------------------------------------------------------------
 * The image pager.
 */

static ssize_t image_fill(void *arg, struct faultd_region *r, uint64_t off,
			  void *buf, size_t len)
{
	(void)r;
	return image_read(arg, off, buf, len);
}

static void image_release(void *arg)
{
	image_close(arg);
}

/*
 * The pager of a region whose image only the daemon reads: before the
 * daemon said every page is in, nothing here can produce a page (-EIO:
 * poisoned, never zeros); after, a page missing again was discarded by
 * the program since, and reads zeros, as the daemon serves one.
 */
static ssize_t remote_fill(void *arg, struct faultd_region *r, uint64_t off,
			   void *buf, size_t len)
{
	struct restore *rs = __atomic_load_n(&r->rs, __ATOMIC_ACQUIRE);

	if (!rs || !atomic_load(&rs->served))
		return -EIO;
	memset(buf, 0, len);
	return (ssize_t)len;
}

/* The image at @path, checked (with the key in @key_file, if not NULL);
 * a refusal is logged with its reason. */
static int restore_image(struct faultd_ctx *ctx, const char *path,
			 const char *key_file, struct image **imgp)
{
	const char *why = "the image cannot be opened";
	struct img_key key;
	int fd, ret = 0;

	if (key_file) {
		ret = img_key_load(key_file, &key);
		why = "the key file cannot be used (32 bytes, mode 0600 or "
		      "stricter)";
	}
	fd = ret ? ret : image_file_open(path);
	if (fd >= 0) {
		ret = image_open(fd, path, key_file ? &key : NULL, imgp, &why);
		close(fd);
	}
	explicit_bzero(&key, sizeof(key));
	if (fd < 0 || ret < 0)
		fd_err(ctx, "%s: %s: %s", path, why,
		       strerror(fd < 0 ? -fd : -ret));
	return fd < 0 ? fd : ret;
}

/* ------------------------------------------------------------------------
 * The daemon's side of a restore.
 */

static void restore_done(struct restore *rs)
{
	__atomic_store_n(&rs->done, 1, __ATOMIC_RELEASE);
	futex_noasync(&rs->done, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/*
 * Start the region's own handler threads. Nothing else serves its faults
 * now: they wait for these threads, so a failure (threads short for a
 * while: EAGAIN) is retried every 10 ms until they run or the region goes.
 */
static void restore_start_handlers(struct faultd_region *r)
{
	const struct timespec pause = { .tv_nsec = 10 * 1000 * 1000 };
	int ret;

	for (int tries = 0; (ret = group_start_deferred(r->group)) < 0;
	     tries++) {
		if (!tries)
			fd_err(r->ctx, "%s: cannot start handlers to take "
				       "over from the daemon: %s; retrying",
			       r->name, strerror(-ret));
		if (atomic_load(&r->rs->closing))
			return;
		nanosleep(&pause, NULL);
	}
}

/*
 * The daemon is gone or finished: serve the region here from now on, and
 * wake every thread asleep on it (the daemon may have read their faults).
 */
static void restore_take_over(struct faultd_region *r, bool died)
{
	struct restore *rs = r->rs;

	/* Before the handlers: a fault they read finds it set. */
	atomic_store(&rs->served, !died);
	restore_start_handlers(r);
	if (died && rs->remote)
		fd_err(r->ctx, "%s: the daemon went away before every page "
			       "was in: the image is an NBD export only the "
			       "daemon reads, so an access to a page not in "
			       "gets SIGBUS", r->name);
	else if (died)
		fd_warn(r->ctx, "%s: the daemon went away: serving the region "
				"in this process", r->name);
	pthread_mutex_lock(&rs->lock); /* faultd_restore_progress() reads it */
	rs->daemon_died = died;
	pthread_mutex_unlock(&rs->lock);
	uffd_wake(r->group->uffd, r->base, atomic_load(&r->len));
	/* What the daemon did not push yet, the library fills now. */
	if (died && !rs->remote && !(rs->flags & FAULTD_RESTORE_LAZY) &&
	    faultd_region_prefetch(r, 0, atomic_load(&r->len)) < 0)
		fd_warn(r->ctx, "%s: no background population after the "
				"daemon died: pages come in when touched",
			r->name);
	rs->taken_over = died;
	restore_done(rs);
}

/*
 * Pages the daemon poisoned since its last report (bad image blocks):
 * counted and logged here, as the region's own handlers would.
 * Context: the watcher, the only writer of rs->progress.
 */
static void restore_poisoned(struct faultd_region *r,
			     const struct proto_progress *p)
{
	uint64_t was = r->rs->progress.pages_poisoned;

	if (p->pages_poisoned <= was)
		return;
	fd_err(r->ctx, "%s: the daemon poisoned %llu pages (bad image "
		       "blocks): an access to them gets SIGBUS",
	       r->name, (unsigned long long)(p->pages_poisoned - was));
	stat_add_shared(r->bg_stats, ST_POISONED, p->pages_poisoned - was);
}

static void *restore_watch(void *arg)
{
	struct faultd_region *r = arg;
	struct restore *rs = r->rs;
	struct proto_progress p;
	ssize_t n;

	for (;;) {
		n = proto_recv_checked(rs->sock, &p, sizeof(p), NULL, 0, NULL,
				       NULL);
		/* Closing: done, unless the daemon still writes the record
		 * (it closes when it has). */
		if (atomic_load(&rs->closing) && (n < 0 || !rs->record_wait))
			return NULL;
		if (atomic_load(&rs->closing))
			continue;
		if (n < 0 ||
		    (p.h.type != MSG_PROGRESS && p.h.type != MSG_DONE))
			break;
		restore_poisoned(r, &p);
		pthread_mutex_lock(&rs->lock);
		rs->progress = p;
		pthread_mutex_unlock(&rs->lock);
		if (p.h.type == MSG_DONE) {
			/* The daemon serves until we close: then we do. */
			shutdown(rs->sock, SHUT_RDWR);
			restore_take_over(r, false);
			return NULL;
		}
	}
	restore_take_over(r, true);
	return NULL;
}

/*
 * REGISTER the region's range, with its uffd and the image; an
 * authenticated image's own key goes with them (PROTO_REG_MAC), for the
 * daemon to check every block as the library would.
 */
static int restore_register(struct faultd_region *r, int sock)
{
	union {
		struct proto_register reg;
		char buf[sizeof(struct proto_register) +
			 sizeof(struct proto_range) + PROTO_KEY_LEN];
	} m = { .reg = { .nr_ranges = 1 } };
	struct img_key key;
	union {
		struct proto_ack ack;
		struct proto_error err;
	} u;
	int fds[PROTO_REG_MAX_FDS] = { r->group->uffd, r->rs->img->fd };
	unsigned int nfds = r->rs->remote ? 1 : 2;
	int record_fd, set_fd;
	ssize_t n;

	rws_daemon_fds(r->rs->ws, &record_fd, &set_fd);
	if (record_fd >= 0) {
		m.reg.flags |= PROTO_REG_RECORD;
		fds[nfds++] = record_fd;
	}
	if (set_fd >= 0) {
		m.reg.flags |= PROTO_REG_WSET;
		fds[nfds++] = set_fd;
	}

	proto_init(&m.reg.h, MSG_REGISTER, sizeof(m) - PROTO_KEY_LEN);
	if (r->rs->remote)
		m.reg.flags |= PROTO_REG_OPEN;
	m.reg.uffd_features = r->group->features;
	m.reg.r[0] = (struct proto_range){ r->base, atomic_load(&r->len), 0 };
	if (r->rs->flags & FAULTD_RESTORE_LAZY)
		m.reg.flags |= PROTO_REG_LAZY;
	if (!image_key_of(r->rs->img, &key)) {
		m.reg.flags |= PROTO_REG_MAC;
		m.reg.h.len += PROTO_KEY_LEN;
		memcpy(proto_register_key(&m.reg), key.key, PROTO_KEY_LEN);
		explicit_bzero(&key, sizeof(key));
	}
	n = proto_call(sock, &m, fds, nfds, &u, sizeof(u));
	explicit_bzero(&m, sizeof(m));
	if (n < 0)
		return (int)n;
	if (u.ack.h.type == MSG_ERROR) {
		fd_err(r->ctx, "%s: the daemon refused the restore: %.*s",
		       r->name, (int)sizeof(u.err.msg), u.err.msg);
		return u.err.err < 0 ? u.err.err : -EPROTO;
	}
	r->rs->record_wait = record_fd >= 0;
	return u.ack.h.type == MSG_ACK ? 0 : -EPROTO;
}

/*
 * Connect to the daemon at @path (NULL: the default) and say HELLO; the
 * connection in *sockp, the daemon's features in *features. Refusals
 * are logged for @name.
 */
static int daemon_hello(struct faultd_ctx *ctx, const char *name,
			const char *path, int *sockp, uint64_t *features)
{
	struct proto_hello hello;
	char buf[108];
	const char *why;
	int sock, ret;

	if (!path && !(path = proto_default_socket(buf, sizeof(buf))))
		return -ENAMETOOLONG;
	sock = proto_connect_daemon(path, &why);
	if (sock < 0 && why)
		fd_err(ctx, "%s: not using the daemon at %s: %s", name, path,
		       why);
	if (sock < 0)
		return sock;
	ret = proto_hello(sock, PROTO_FEATURES, &hello);
	if (ret) {
		close(sock);
		return ret;
	}
	*sockp = sock;
	*features = hello.features;
	return 0;
}

/* Does the daemon do what the restore needs? */
static int daemon_can(struct faultd_region *r)
{
	struct restore *rs = r->rs;

	if ((rs->img->h.flags & IMG_MAC) && !(rs->features & PROTO_F_MAC)) {
		fd_err(r->ctx, "%s: the daemon cannot check the image's MACs",
		       r->name);
		return -EOPNOTSUPP;
	}
	if (rs->ws && !(rs->features & PROTO_F_WSET)) {
		fd_err(r->ctx, "%s: the daemon does not take working sets",
		       r->name);
		return -EOPNOTSUPP;
	}
	return 0;
}

/* Through the daemon: connected (a remote image's OPEN was already),
 * registered, watched. */
static int restore_connect(struct faultd_region *r, const char *path)
{
	struct restore *rs = r->rs;
	int ret = 0;

	if (rs->sock < 0)
		ret = daemon_hello(r->ctx, r->name, path, &rs->sock,
				   &rs->features);
	if (!ret)
		ret = daemon_can(r);
	if (!ret)
		ret = restore_register(r, rs->sock);
	if (!ret)
		ret = thread_start(&rs->watcher, restore_watch, r,
				   "faultd-restore");
	rs->watching = !ret;
	return ret;
}

/*
 * restore_stop() - before the region is destroyed: end the connection and
 * the watcher without a take-over.
 */
void restore_stop(struct faultd_region *r)
{
	struct restore *rs = r->rs;

	if (!rs)
		return;
	rws_stop(rs->ws);
	if (!rs->watching)
		return;
	atomic_store(&rs->closing, true);
	if (rs->record_wait) {
		/* Our end of the session: the daemon writes the record and
		 * closes, which the watcher waits for (so long at most). */
		struct timeval tv = { .tv_sec = RECORD_WAIT_S };

		setsockopt(rs->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		shutdown(rs->sock, SHUT_WR);
	} else {
		shutdown(rs->sock, SHUT_RDWR);
	}
	pthread_join(rs->watcher, NULL);
	rs->watching = false;
}

/* A missing fault of region @r (fault path): if it is a restore that
 * records its working set, the set notes it. */
void restore_note_fault(struct faultd_region *r, uint64_t off)
{
	struct restore *rs = __atomic_load_n(&r->rs, __ATOMIC_ACQUIRE);

	if (rs && rs->ws)
		rws_note_fault(rs->ws, off);
}

void restore_free(struct faultd_region *r)
{
	struct restore *rs = r->rs;

	if (!rs)
		return;
	restore_stop(r);
	if (!(rs->flags & FAULTD_RESTORE_DAEMON))
		rws_save(rs->ws);
	rws_free(rs->ws);
	if (rs->sock >= 0)
		close(rs->sock);
	pthread_mutex_destroy(&rs->lock);
	free(rs);
	r->rs = NULL;
}

/* ------------------------------------------------------------------------
 * An image the daemon reads from an NBD export.
 */

/* Is @path an NBD URI (a scheme nbd_uri.h's grammar names)? */
static bool is_nbd_uri(const char *path)
{
	static const char *const schemes[] = {
		"nbd://", "nbds://", "nbd+unix://", "nbds+unix://",
		"nbd+vsock://", "nbds+vsock://",
	};

	for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
		if (!strncmp(path, schemes[i], strlen(schemes[i])))
			return true;
	return false;
}

/* OPEN @uri on @sock: the header of its image, as the daemon read it. */
static int remote_header(struct faultd_ctx *ctx, const char *name, int sock,
			 const char *uri, struct img_header *h,
			 uint64_t *file_len)
{
	struct proto_open m = { .flags = 0 };
	union {
		struct proto_image img;
		struct proto_error err;
	} u;
	ssize_t n;

	proto_init(&m.h, MSG_OPEN, sizeof(m));
	strcpy(m.uri, uri);
	n = proto_call(sock, &m, NULL, 0, &u, sizeof(u));
	if (n < 0)
		return (int)n;
	if (u.img.h.type == MSG_ERROR) {
		fd_err(ctx, "%s: the daemon did not open %s: %.*s", name, uri,
		       (int)sizeof(u.err.msg), u.err.msg);
		return u.err.err < 0 ? u.err.err : -EPROTO;
	}
	if (u.img.h.type != MSG_IMAGE || u.img.header_len != sizeof(*h))
		return -EPROTO;
	memcpy(h, u.img.header, sizeof(*h));
	*file_len = u.img.file_len;
	return 0;
}

/*
 * The image of the NBD export @uri, through the daemon: a connection to
 * it in *sockp (the daemon's features in *features), the image's header
 * checked here - with the key in @o->key_file, if any - as an image of
 * which only the header is known (image_open_header()). A refusal is
 * logged with its reason.
 */
static int remote_open(struct faultd_ctx *ctx, const char *uri,
		       const struct faultd_restore_opts *o, int *sockp,
		       uint64_t *features, struct image **imgp)
{
	const char *name = o->name ? o->name : "restore";
	const char *why = NULL;
	struct img_header h;
	struct img_key key;
	uint64_t file_len = 0;
	int sock = -1, ret = 0;

	if (strlen(uri) >= PROTO_URI_MAX)
		return -ENAMETOOLONG;
	if (o->key_file && (ret = img_key_load(o->key_file, &key)))
		why = "the key file cannot be used (32 bytes, mode 0600 or "
		      "stricter)";
	if (!ret)
		ret = daemon_hello(ctx, name, o->socket, &sock, features);
	if (!ret && !(*features & PROTO_F_NBD)) {
		why = "the daemon does not read images from NBD exports";
		ret = -EOPNOTSUPP;
	}
	if (!ret)
		ret = remote_header(ctx, name, sock, uri, &h, &file_len);
	if (!ret)
		ret = image_open_header(&h, file_len, o->key_file ? &key : NULL,
					imgp, &why);
	explicit_bzero(&key, sizeof(key));
	if (ret && why)
		fd_err(ctx, "%s: %s: %s: %s", name, uri, why, strerror(-ret));
	if (ret && sock >= 0)
		close(sock);
	*sockp = ret ? -1 : sock;
	return ret;
}

/* ------------------------------------------------------------------------
 * The API.
 */

/* The region that serves @img: its pager reads it, a block per fault. */
static int restore_region(struct faultd_ctx *ctx, struct image *img,
			  const struct faultd_restore_opts *o, bool remote,
			  struct faultd_region **rp)
{
	struct faultd_pager p = { .size = sizeof(p),
				  .flags = FAULTD_PAGER_CONCURRENT,
				  .fill = remote ? remote_fill : image_fill,
				  .release = image_release,
				  .arg = img };
	struct faultd_region_opts ro = {
		.size = sizeof(ro),
		.length = (img->h.region_len + 4095) & ~4095ull,
		.handler_threads = o->handler_threads,
		.name = o->name ? o->name : "restore",
		/* A recording: every touched page faults (restore_ws.c). */
		.fault_around = o->record_working_set &&
					!(o->flags & FAULTD_RESTORE_DAEMON)
				? 0 : IMG_BLOCK,
		.readahead_max = FAULTD_READAHEAD_OFF,
	};
	struct region_init init = { .kind = REGION_ANON, .memfd = -1,
				    .deferred = o->flags & FAULTD_RESTORE_DAEMON };

	init.pager = pager_ref_new(&p);
	if (!init.pager) {
		image_close(img);
		return -ENOMEM;
	}
	ro.pager = &p;
	return region_create(ctx, &ro, &init, rp);
}

static int restore_start(struct faultd_region *r,
			 const struct faultd_restore_opts *o)
{
	bool lazy = o->flags & FAULTD_RESTORE_LAZY;

	if (o->flags & FAULTD_RESTORE_DAEMON)
		return restore_connect(r, o->socket);
	/* A working set first; the population after it, from its thread. */
	if (!rws_replay_start(r->rs->ws, !lazy,
			      o->flags & FAULTD_RESTORE_WSET_FIRST)) {
		if (o->flags & FAULTD_RESTORE_WSET_FIRST)
			rws_replay_wait(r->rs->ws);
		return 0;
	}
	if (lazy)
		return 0;
	/* Without it the region is still served, lazily: say so, go on. */
	if (faultd_region_prefetch(r, 0, atomic_load(&r->len)) < 0) {
		fd_warn(r->ctx, "%s: no background population: pages come "
				"in when touched", r->name);
		r->rs->flags |= FAULTD_RESTORE_LAZY;
	}
	return 0;
}

FAULTD_EXPORT int faultd_restore(struct faultd_ctx *ctx, const char *path,
				 const struct faultd_restore_opts *opts,
				 struct faultd_region **regionp)
{
	struct faultd_restore_opts o = { .size = sizeof(o) };
	struct faultd_region *r;
	struct restore *rs;
	struct image *img;
	uint64_t features = 0;
	bool remote;
	int ret = 0, sock = -1;

	if (!ctx || !path || !regionp)
		return -EINVAL;
	if (opts)
		ret = opts_copy(&o, sizeof(o), opts,
				offsetof(struct faultd_restore_opts, flags) +
					sizeof(o.flags));
	if (!ret && (o.flags & ~RESTORE_KNOWN))
		ret = -EINVAL;
	if (!ret && (o.flags & FAULTD_RESTORE_WSET_FIRST) &&
	    (o.flags & FAULTD_RESTORE_DAEMON))
		ret = -EOPNOTSUPP;
	if (!ret && in_handler_of(ctx))
		ret = -EDEADLK;
	remote = !ret && is_nbd_uri(path);
	if (remote && !(o.flags & FAULTD_RESTORE_DAEMON)) {
		fd_err(ctx, "%s: an NBD export is restored through the daemon "
			    "only (FAULTD_RESTORE_DAEMON): this process does "
			    "not read it", path);
		ret = -EOPNOTSUPP;
	}
	if (!ret && remote)
		ret = remote_open(ctx, path, &o, &sock, &features, &img);
	else if (!ret)
		ret = restore_image(ctx, path, o.key_file, &img);
	if (ret < 0)
		return ret;
	if (img->parent && (o.flags & FAULTD_RESTORE_DAEMON)) {
		image_close(img); /* the daemon serves full images only */
		return -EOPNOTSUPP;
	}
	/* The pager owns img now. */
	ret = restore_region(ctx, img, &o, remote, &r);
	rs = ret ? NULL : fd_calloc(1, sizeof(*rs));
	if (!ret && !rs) {
		faultd_region_destroy(r);
		ret = -ENOMEM;
	}
	if (ret < 0) {
		if (sock >= 0)
			close(sock);
		return ret;
	}
	rs->img = img;
	rs->flags = o.flags;
	rs->sock = sock;
	rs->features = features;
	rs->remote = remote;
	pthread_mutex_init(&rs->lock, NULL);
	ret = rws_create(r, img, &o, &rs->ws);
	/* Published whole: the region's faults read it (restore_note_fault()). */
	__atomic_store_n(&r->rs, rs, __ATOMIC_RELEASE);
	if (!ret)
		ret = restore_start(r, &o);
	if (ret < 0) {
		faultd_region_destroy(r);
		return ret;
	}
	*regionp = r;
	return 0;
}

FAULTD_EXPORT int faultd_restore_progress(struct faultd_region *r,
					 struct faultd_restore_progress *out)
{
	struct faultd_restore_progress p = { .size = sizeof(p) };
	struct restore *rs = r ? r->rs : NULL;
	struct faultd_stats s = { .size = sizeof(s) };

	if (!rs || !out || out->size < offsetof(struct faultd_restore_progress,
						pages_total) + 8)
		return -EINVAL;
	faultd_region_stats(r, &s);
	p.pages_total = atomic_load(&r->len) / r->page_size;
	p.pages_urgent = s.pager_fills + s.around;
	p.pages_background = s.readahead;
	p.faults = s.faults;
	p.p50_ns = faultd_stats_latency(&s, 50);
	p.p99_ns = faultd_stats_latency(&s, 99);
	p.daemon = !!(rs->flags & FAULTD_RESTORE_DAEMON);
	pthread_mutex_lock(&rs->lock);
	if (p.daemon) {
		p.pages_urgent += rs->progress.pages_urgent;
		p.pages_background += rs->progress.pages_background;
		p.faults += rs->progress.faults;
		if (!s.faults) {
			p.p50_ns = rs->progress.p50_ns;
			p.p99_ns = rs->progress.p99_ns;
		}
	}
	p.daemon_died = rs->daemon_died;
	pthread_mutex_unlock(&rs->lock);
	rws_progress(rs->ws, &p);
	p.done = p.daemon ? __atomic_load_n(&rs->done, __ATOMIC_ACQUIRE) &&
				    (!rs->taken_over ||
				     !atomic_load(&r->pf_pending))
			  : !atomic_load(&r->pf_pending) &&
				    !(rs->flags & FAULTD_RESTORE_LAZY);
	memcpy(out, &p, out->size < sizeof(p) ? out->size : sizeof(p));
	out->size = out->size < sizeof(p) ? out->size : sizeof(p);
	return 0;
}

FAULTD_EXPORT int faultd_restore_wait(struct faultd_region *r)
{
	struct restore *rs = r ? r->rs : NULL;

	if (!rs)
		return -EINVAL;
	if (in_handler_of(r->ctx))
		return -EDEADLK;
	if (rs->flags & FAULTD_RESTORE_LAZY)
		return -EAGAIN; /* nothing populates it */
	if (!(rs->flags & FAULTD_RESTORE_DAEMON)) {
		rws_replay_wait(rs->ws);
		return faultd_region_prefetch_wait(r);
	}
	while (!__atomic_load_n(&rs->done, __ATOMIC_ACQUIRE))
		futex_noasync(&rs->done, FUTEX_WAIT, 0, NULL, NULL, 0);
	return rs->taken_over ? faultd_region_prefetch_wait(r) : 0;
}
