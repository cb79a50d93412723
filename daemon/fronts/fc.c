// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * fc.c - `faultd firecracker`: the page-fault handler of Firecracker
 * snapshot restores with the Uffd memory backend (faultd(8), "Firecracker").
 *
 *   faultd firecracker --socket PATH --mem SOURCE | --mem-file FILE
 *                      [--prefetch]
 *                      [--working-set FILE | --record-working-set FILE]
 *                      [--allow-uid UID]... [--handshake-timeout MS]
 *                      [--max-connections N] [--max-user-connections N]
 *                      [--nbd-deadline MS]
 *                      [--keeper-grace S] [--no-keeper] [-v]...
 *
 * It listens on PATH, a Unix stream socket. Firecracker connects when it
 * loads a snapshot and sends, in one sendmsg(), its guest memory regions
 * as JSON (fc_json.h) with its userfaultfd attached; it says nothing more
 * and keeps the socket open while the VM lives. Each connection is one VM
 * and becomes one session with one space: its regions map guest addresses
 * onto the memory file (base_host_virt_addr -> offset), pages of the
 * regions' size (4 KiB, or 2 MiB hugetlb), the file as the source (its
 * holes are zeros). SOURCE is a path, or an NBD URI (nbd_uri.h: nbd://,
 * nbds://, nbd+unix://, nbd+vsock://) of an export of the memory file:
 * it is opened at the start - its size is the memory's, checked as a
 * file's, and its block sizes against the pages - and every VM's session
 * opens it again, so that the VMs share one set of connections and each
 * chunk is fetched once for them all (nbd.h); a fault installs the whole
 * chunk its page is in (the fault-around window: the bytes are here, and a
 * chunk evicted and fetched again for the next fault in it would cost a
 * round trip and its bytes again); --nbd-deadline sets how
 * long a server that went away is waited for before its pages are
 * poisoned. The command line is the administrator's: any server it names
 * is allowed. --mem-file takes a path only. With --prefetch the session
 * pushes the rest of the memory after the first fault, at low priority.
 * The session ends when Firecracker goes: the socket's end of file, or its
 * process's exit.
 *
 * Working sets (faultd-working-set(5); the engine records and replays):
 * --record-working-set records the first VM served - its space 0, the
 * memory file its source - the pages it faults on in the order of first
 * touch, served a page at a time and with nothing pushed until the
 * record ends: when the VM ends, every page is in, or SIGUSR1 asks; then
 * the file is written (and --prefetch pushes). Later VMs are served as
 * usual, not recorded: one file holds one VM's set. --working-set is
 * checked against the memory file (its size and identity, src_file_id())
 * before the socket listens; a set of another file is refused, logged
 * and not used, and the VMs are served without it. Every VM then replays
 * it before its push (and without --prefetch too), faults first.
 *
 * A handshake is refused - logged, the connection closed, nothing served,
 * the others served on - when the peer's uid is not allowed (the daemon's
 * own, and those of --allow-uid), no descriptor or more than one comes,
 * the descriptor is no non-blocking userfaultfd, the JSON is malformed,
 * longer than FC_JSON_MAX or not whole within --handshake-timeout (2 s
 * by default: Firecracker sends it as it connects), or the regions
 * overlap, are misaligned, reach past the memory file, have a page size
 * the file or the memory does not have, or are not registered. The
 * server's loop reads every handshake (no thread waits for one), and a
 * user's handshakes under way count in its per-user limit
 * (--max-user-connections, 16; --max-connections, 256, for all users but
 * root together): one user's idle connections keep nobody else out.
 *
 * Sessions are kept (a keeper at PATH.keeper, keep.h): a faultd
 * firecracker killed and started again with the same flags adopts every VM
 * and serves on; what was in stays in, and nothing is answered with zeros
 * that has content. Firecracker cannot serve its memory itself, so a
 * session outlives a daemon that stops too (takeover false): only the VM's
 * end drops it.
 *
 * PATH.ctl (SOCK_SEQPACKET) answers faultctl's STATUS: one entry per VM.
 * The command exits 0 with one status line on standard output when the
 * last VM's session ends; SIGTERM ends it at once, leaving the VMs to the
 * keeper for the next one.
 *
 * Threads: the server's loop (server/conn.c) accepts on both sockets and
 * reads the handshakes and STATUS requests; each VM whose handshake is
 * whole gets a thread that checks it and runs the session's control loop.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "fc_json.h"
#include "file.h"
#include "front.h"

#define MAX_ALLOW 32		/* --allow-uid */
#define FC_HANDSHAKE_MS 2000	/* Firecracker sends it as it connects */
#define FC_MAX_FDS 4		/* room to see that more than one came */

struct fc_opts {
	const char *mem;		/* --mem or --mem-file */
	const char *mem_opt;		/* which of them, for messages */
	const char *wset, *record;	/* --working-set, --record-... */
	bool prefetch;
	uid_t allow[MAX_ALLOW];
	unsigned int nr_allow;
};

static struct fc_opts fo;
static int mem_fd = -1;		/* the memory file; sessions dup it */
/* An NBD export instead: open from the start to the end, so that the
 * VMs' sessions share its connections and cache even one after another. */
static struct source *mem_nbd;
static size_t mem_around;	/* its chunk: a fault installs all of it */
static uint64_t mem_size;
static uint8_t mem_id[32];	/* its identity (the source's id) */
static atomic_bool recording;	/* a VM's session records already */

/*
 * What the daemon has served, for its exit line; under vms_lock (a leaf).
 * A VM counts from its accept (or adoption) until its session is freed,
 * so that the daemon exits only once the last one is done.
 */
static pthread_mutex_t vms_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int vms_live, vms_served;
static struct session_view total;
static int news_fd = -1;	/* eventfd: a VM ended */

/* One VM: its connection and what a restart needs to serve it again. */
struct fc_vm {
	int sock;
	size_t page_size;
	bool told_input;	/* logged that it wrote after the handshake */
};

/* A connection before its session: what came (the server's loop reads
 * it, struct conn says who). */
struct fc_conn {
	struct conn *conn;
	bool counted;		/* a live VM (vm_counted()) until its session */
	bool admitted;		/* its user may: a refusal is its handshake's */
	int uffd;
	char json[FC_JSON_MAX + 1];
	size_t len;
	struct fc_handshake hs;
	char why[FC_WHY_MAX];
};

static void vm_counted(bool served)
{
	pthread_mutex_lock(&vms_lock);
	vms_live++;
	vms_served += served;
	pthread_mutex_unlock(&vms_lock);
}

/* A VM's connection or session is over: the server's loop, woken by
 * news_fd, asks done() again. */
static void vm_uncounted(void)
{
	uint64_t one = 1;

	pthread_mutex_lock(&vms_lock);
	vms_live--;
	pthread_mutex_unlock(&vms_lock);
	(void)!write(news_fd, &one, sizeof(one));
}

/* ------------------------------------------------------------------------
 * The session of a VM.
 */

/* Firecracker says nothing after the handshake: only its end matters. */
static bool vm_peer_input(struct session *s)
{
	struct fc_vm *vm = session_front(s);
	char buf[256];
	ssize_t n = recv(vm->sock, buf, sizeof(buf), MSG_DONTWAIT);

	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
		return false;
	if (n > 0 && !vm->told_input) {
		dlog(LOG_WARNING, "%s: the VM wrote to the socket after its handshake: "
			"ignored", session_name(s));
		vm->told_input = true;
	}
	return true;
}

/* Firecracker exited: its VM's session is over. */
static bool vm_gone(struct session *s, struct space *sp)
{
	return false;
}

static void view_add(struct session_view *t, const struct session_view *v)
{
	t->pages_total += v->pages_total;
	t->pages_urgent += v->pages_urgent;
	t->pages_background += v->pages_background;
	t->pages_zero += v->pages_zero;
	t->faults += v->faults;
	t->eexist += v->eexist;
	t->eagain += v->eagain;
	t->removes += v->removes;
	t->poisoned += v->poisoned;
	t->pages_replayed += v->pages_replayed;
}

/* Its counters are final: into the daemon's totals. */
static void vm_ended(struct session *s)
{
	struct session_view v;

	session_view(s, &v);
	pthread_mutex_lock(&vms_lock);
	view_add(&total, &v);
	pthread_mutex_unlock(&vms_lock);
	dlog(LOG_INFO, "%s: %" PRIu64 " faults, %" PRIu64 " pages in for them, %"
		PRIu64 " pushed, %" PRIu64 " zero, %" PRIu64 " REMOVE events, %"
		PRIu64 " pages replayed", session_name(s), v.faults, v.pages_urgent,
	     v.pages_background, v.pages_zero, v.removes, v.pages_replayed);
}

static void vm_free(void *arg)
{
	free(arg);
	vm_uncounted();
}

static void vm_name(struct session *s)
{
	session_set_name(s, "vm %llu (pid %d)",
			 (unsigned long long)session_id(s), (int)session_pid(s));
}

/*
 * A VM a daemon before this one served: its connection (its memory file
 * is open again already, from the descriptor kept since: the file named
 * now is not read for it).
 */
static int vm_adopt(struct session *s, const void *blob, size_t len,
		    int peer)
{
	struct fc_vm *vm = calloc(1, sizeof(*vm));

	(void)blob, (void)len;
	if (!vm || session_nr_sources(s) != 1 || peer < 0) {
		dlog(LOG_WARNING, "vm %llu: cannot adopt it: %s",
		     (unsigned long long)session_id(s),
		     vm ? "its connection was not kept" : "out of memory");
		if (peer >= 0)
			close(peer);
		free(vm);
		return vm ? -EBADMSG : -ENOMEM;
	}
	vm->sock = peer;
	vm->page_size = session_source(s, 0)->page_size;
	session_set_front(s, vm, vm_free);
	session_set_peer(s, peer, true);
	vm_counted(true);
	vm_name(s);
	return 0;
}

/* Firecracker cannot serve its memory itself: a session outlives a
 * daemon that stops, until the VM ends. */
const struct session_ops fc_session_ops = {
	.front_id = FRONT_FC,
	.takeover = false,
	.peer_input = vm_peer_input,
	.space_gone = vm_gone,
	.ended = vm_ended,
	.adopt = vm_adopt,
};

/* ------------------------------------------------------------------------
 * The handshake.
 */

static int refuse(struct fc_conn *c, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int refuse(struct fc_conn *c, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->why, sizeof(c->why), fmt, ap);
	va_end(ap);
	return err;
}

/* The descriptors of @m: the first into c->uffd, the rest closed. */
static int take_fds(struct fc_conn *c, struct msghdr *m)
{
	unsigned int n = 0;

	for (struct cmsghdr *cm = CMSG_FIRSTHDR(m); cm;
	     cm = CMSG_NXTHDR(m, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		     i++, n++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
			if (c->uffd < 0 && !n)
				c->uffd = fd;
			else
				close(fd);
		}
	}
	if (m->msg_flags & MSG_CTRUNC || n > 1)
		return refuse(c, -EBADMSG, "more than one descriptor came "
			      "with the handshake");
	return (int)n;
}

/* One read of the handshake's bytes. 0, -EAGAIN, or -errno with c->why. */
static int recv_some(struct fc_conn *c)
{
	union {
		char buf[CMSG_SPACE(FC_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { c->json + c->len, sizeof(c->json) - c->len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = ctl.buf,
			    .msg_controllen = sizeof(ctl.buf) };
	bool first = c->len == 0;
	ssize_t n = recvmsg(c->conn->sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	int fds;

	if (n < 0)
		return errno == EAGAIN || errno == EINTR
			       ? -EAGAIN
			       : refuse(c, -errno, "reading the handshake: %s",
					strerror(errno));
	fds = take_fds(c, &m);
	if (fds < 0)
		return fds;
	if (!n)
		return refuse(c, -ECONNRESET, first ? "the connection closed "
			      "before a handshake" : "the connection closed "
			      "in the middle of the handshake");
	if (fds && !first)
		return refuse(c, -EBADMSG, "a descriptor came after the "
			      "handshake's first bytes");
	if (!fds && first)
		return refuse(c, -EBADMSG, "no descriptor came with the "
			      "handshake (Firecracker sends its userfaultfd "
			      "with it)");
	c->len += (size_t)n;
	if (c->len > FC_JSON_MAX)
		return refuse(c, -EMSGSIZE, "the handshake is longer than %u "
			      "bytes", FC_JSON_MAX);
	return 0;
}

/* The handshake's regions as the engine's ranges. */
static void regions_ranges(const struct fc_handshake *h, struct srange *r)
{
	for (size_t i = 0; i < h->nr; i++)
		r[i] = (struct srange){ h->r[i].base, h->r[i].size,
					h->r[i].offset };
}

/* Everything a handshake must be before a session serves it. */
static int handshake_check(struct fc_conn *c, struct srange *r)
{
	const char *why;
	size_t ps;
	int ret = check_uffd(c->uffd, &why);

	if (ret)
		return refuse(c, ret, "the descriptor: %s",
			      strstr(why, "first descriptor") ?
			      "not a userfaultfd" : why);
	ret = fc_json_parse(c->json, c->len, &c->hs, c->why, sizeof(c->why));
	if (!ret)
		ret = fc_regions_check(c->hs.r, c->hs.nr, mem_size, 0, c->why,
				       sizeof(c->why));
	if (ret)
		return ret;
	if (c->hs.ignored)
		dlog(LOG_INFO, "VM pid %d: %u unknown keys in its handshake, the "
			"first \"%s\": ignored", (int)c->conn->peer.pid,
		     c->hs.ignored, c->hs.ignored_key);
	ps = c->hs.r[0].page_size;
	if (mem_size % ps)
		return refuse(c, -EINVAL, "the regions have %zu-byte pages, "
			      "but the memory file's %" PRIu64 " bytes are no "
			      "whole number of them", ps, mem_size);
	regions_ranges(&c->hs, r);
	ret = check_mapped(&c->conn->peer, r, c->hs.nr, ps, &why);
	return ret ? refuse(c, ret, "%s", why) : 0;
}

/* ------------------------------------------------------------------------
 * A VM's connection: handshake, then its session until it ends.
 */

/* The session of a checked handshake, its space added. */
/*
 * The working sets of a new VM's session: the set to replay, if any;
 * the record, if asked and no VM has it yet (*rec: this one has).
 */
static void vm_wset_opts(struct session_opts *o, bool *rec)
{
	bool no = false;

	o->wset_path = fo.wset;
	*rec = fo.record && atomic_compare_exchange_strong(&recording, &no,
							   true);
	if (*rec) {
		o->record_path = fo.record;
		o->push_after_record = true;
	}
}

/* A VM's source of the memory, in pages of @ps bytes. */
static int vm_source(size_t ps, struct source **sp, char *why, size_t len)
{
	struct src_nbd_opts no = front_nbd_opts(true);
	int fd;

	if (mem_nbd)
		return src_nbd_open(fo.mem, mem_size, ps, &no, sp, why, len);
	fd = dup(mem_fd);
	if (fd < 0) {
		snprintf(why, len, "out of descriptors");
		return -errno;
	}
	return src_file_open_fd(fd, mem_size, ps, sp, why, len);
}

static int vm_session(struct fc_conn *c, const struct srange *r,
		      struct session **sp, struct space **spacep)
{
	struct session_opts o = { .push = fo.prefetch,
				  .push_after_first = fo.prefetch,
				  .around = mem_around };
	bool rec;
	size_t ps = c->hs.r[0].page_size;
	struct fc_vm *vm = calloc(1, sizeof(*vm));
	struct source *src = NULL;
	struct session *s = NULL;
	const char *why = "out of memory";
	int ret = vm ? vm_source(ps, &src, c->why, sizeof(c->why))
		     : refuse(c, -ENOMEM, "%s", why);

	vm_wset_opts(&o, &rec);
	if (!ret && (ret = session_create(&o, &fc_session_ops, vm, &s)))
		why = "cannot start the session";
	if (!ret && (ret = session_own_source(s, src)) == 0)
		src = NULL;
	if (!ret)
		ret = session_add_space(s, c->uffd, c->conn->peer.pid, c->conn->peer.pidfd,
					0, session_source(s, 0), r, c->hs.nr,
					NULL, 0, &why, spacep);
	if (ret) {
		if (src || s) /* else c->why says it already */
			refuse(c, ret, "%s", why);
		source_destroy(src);
		session_free(s);
		free(vm);
		if (rec) /* the next VM is recorded instead */
			atomic_store(&recording, false);
		return ret;
	}
	if (fo.record && !rec)
		dlog(LOG_WARNING, "VM pid %d: not recorded: --record-working-set records "
			"the first VM only", (int)c->conn->peer.pid);
	c->uffd = c->conn->peer.pidfd = -1; /* the space's now */
	vm->sock = c->conn->sock;
	vm->page_size = ps;
	session_set_front(s, vm, vm_free);
	session_set_peer(s, c->conn->sock, true);
	c->conn->sock = -1;
	c->counted = false; /* the session's now: vm_free() uncounts it */
	session_set_owner(s, c->conn->peer.uid, c->conn->peer.pid);
	vm_name(s);
	*sp = s;
	return 0;
}

/* ------------------------------------------------------------------------
 * Connections on PATH, read by the server's loop (front.h): the
 * handshake arrives at once from Firecracker, so its deadline is short
 * (FC_HANDSHAKE_MS, or --handshake-timeout); a user's handshakes count in
 * the server's per-user limits, and no thread waits for any of them.
 */

static bool uid_allowed(uid_t uid)
{
	for (unsigned int i = 0; i < fo.nr_allow; i++)
		if (fo.allow[i] == uid)
			return true;
	return uid == geteuid();
}

static unsigned int fc_deadline_ms(void)
{
	return dopts_given & OPT_HANDSHAKE ? dopts.handshake_ms
					   : FC_HANDSHAKE_MS;
}

/* A VM, if its user may. It counts as live from now on. */
static int fc_admit(struct conn *conn, const char **why)
{
	struct fc_conn *c = calloc(1, sizeof(*c));

	*why = "out of memory";
	if (!c)
		return -ENOMEM;
	c->conn = conn;
	c->uffd = -1;
	conn->state = c;
	c->counted = true;
	vm_counted(false);
	*why = "its user is not allowed (--allow-uid)";
	if (!uid_allowed(conn->uid))
		return -EPERM;
	c->admitted = true;
	return peer_bind(conn->sock, &conn->peer, why);
}

static enum conn_next fc_input(struct conn *conn)
{
	struct fc_conn *c = conn->state;
	int ret = recv_some(c);

	if (ret == -EAGAIN)
		return CONN_WAIT;
	if (!ret)
		ret = fc_json_complete(c->json, c->len);
	if (ret < 0) {
		if (ret == -EBADMSG && !c->why[0])
			refuse(c, ret, "the handshake is not a JSON array of "
			       "regions");
		return conn->ops->refuse(conn, ret, c->why);
	}
	return ret ? CONN_SERVE : CONN_WAIT;
}

static enum conn_next fc_late(struct conn *conn)
{
	struct fc_conn *c = conn->state;
	char why[64];

	snprintf(why, sizeof(why), "%s within %u ms",
		 c->len ? "the handshake was not whole" : "no handshake",
		 fc_deadline_ms());
	return conn->ops->refuse(conn, -ETIMEDOUT, why);
}

/* Firecracker reads nothing back: logged, and the connection closed. */
static enum conn_next fc_refuse(struct conn *conn, int err, const char *why)
{
	struct fc_conn *c = conn->state;

	dlog(LOG_WARNING, "VM pid %d (uid %u): %s: %s; connection closed",
	     (int)conn->peer.pid, (unsigned int)conn->uid,
	     c && c->admitted ? "handshake refused" : "refused", why);
	(void)err;
	return CONN_CLOSE;
}

/* The whole handshake: checked, then the VM's session to its end. */
static void fc_serve(struct conn *conn)
{
	struct fc_conn *c = conn->state;
	struct srange r[FC_MAX_REGIONS];
	struct session *s;
	struct space *sp;
	int ret = handshake_check(c, r);

	if (!ret)
		ret = vm_session(c, r, &s, &sp);
	pthread_mutex_lock(&vms_lock);
	vms_served += !ret;
	pthread_mutex_unlock(&vms_lock);
	if (ret) {
		fc_refuse(conn, ret, c->why);
		return;
	}
	dlog(LOG_INFO, "%s: %zu regions, %" PRIu64 " pages of %zu bytes%s%s%s",
	     session_name(s), space_nr_ranges(sp), space_nr_pages(sp),
	     space_page_size(sp), fo.prefetch ? ", prefetch" : "",
	     session_records(s) ? ", recorded" : "",
	     session_opts(s)->wset_path ? ", replay" : "");
	session_run(s);
	session_free(s); /* vm_free() uncounts it */
}

static void fc_release(struct conn *conn)
{
	struct fc_conn *c = conn->state;

	if (!c)
		return;
	if (c->uffd >= 0)
		close(c->uffd);
	if (c->counted)
		vm_uncounted();
	free(c);
}

static const struct conn_ops fc_conn_ops = {
	.name = "Firecracker",
	.deadline_ms = fc_deadline_ms,
	.admit = fc_admit,
	.input = fc_input,
	.late = fc_late,
	.refuse = fc_refuse,
	.serve = fc_serve,
	.release = fc_release,
};

/* ------------------------------------------------------------------------
 * The command.
 */

static void fc_usage(FILE *f)
{
	fprintf(f, "       faultd firecracker --socket PATH "
		   "--mem SOURCE | --mem-file FILE [--prefetch]\n"
		   "                          [--working-set FILE | "
		   "--record-working-set FILE]\n"
		   "                          [--allow-uid UID]... "
		   "[--handshake-timeout MS]\n"
		   "                          [--max-connections N] "
		   "[--max-user-connections N]\n"
		   "                          [--nbd-deadline MS]\n"
		   "                          [--keeper-grace S] [--no-keeper] "
		   "[-v]...\n");
}

enum { O_MEM = 256, O_MEM_FILE, O_PREFETCH, O_WSET, O_RECORD, O_ALLOW };

static const struct option fc_options[] = {
	{ "mem", required_argument, NULL, O_MEM },
	{ "mem-file", required_argument, NULL, O_MEM_FILE },
	{ "prefetch", no_argument, NULL, O_PREFETCH },
	{ "working-set", required_argument, NULL, O_WSET },
	{ "record-working-set", required_argument, NULL, O_RECORD },
	{ "allow-uid", required_argument, NULL, O_ALLOW },
	{ NULL, 0, NULL, 0 },
};

static int fc_option(int id, const char *arg)
{
	switch (id) {
	case O_MEM:
	case O_MEM_FILE:
		if (fo.mem) {
			fprintf(stderr, "faultd: --mem and --mem-file: one "
				"memory, once\n");
			return -1;
		}
		fo.mem = arg;
		fo.mem_opt = id == O_MEM ? "--mem" : "--mem-file";
		return 0;
	case O_PREFETCH: fo.prefetch = true; return 0;
	case O_WSET: fo.wset = arg; return 0;
	case O_RECORD: fo.record = arg; return 0;
	case O_ALLOW:
		if (fo.nr_allow == MAX_ALLOW) {
			fprintf(stderr, "faultd: --allow-uid: at most %d\n",
				MAX_ALLOW);
			return -1;
		}
		fo.allow[fo.nr_allow++] = daemon_parse_uint("allow-uid", arg,
							    0, 0xfffffffe);
		return 0;
	}
	return -1;
}

/* Does --mem (not --mem-file) name an NBD export (a scheme nbd_uri.h's
 * grammar names)? */
static bool mem_is_uri(void)
{
	static const char *const schemes[] = {
		"nbd://", "nbds://", "nbd+unix://", "nbds+unix://",
		"nbd+vsock://", "nbds+vsock://",
	};

	for (size_t i = 0; !strcmp(fo.mem_opt, "--mem") &&
			   i < sizeof(schemes) / sizeof(schemes[0]); i++)
		if (!strncmp(fo.mem, schemes[i], strlen(schemes[i])))
			return true;
	return false;
}

/* The export, open for the daemon's life: its size is the memory's. */
static int open_mem_export(void)
{
	struct src_nbd_opts no = front_nbd_opts(true);
	char why[256];
	int ret;

	src_nbd_set_log(front_nbd_log, NULL);
	ret = src_nbd_open(fo.mem, 0, 4096, &no, &mem_nbd, why, sizeof(why));
	if (ret) {
		fprintf(stderr, "faultd: --mem %s: %s\n", fo.mem, why);
		return -1;
	}
	mem_size = mem_nbd->size;
	memcpy(mem_id, mem_nbd->id, sizeof(mem_id));
	mem_around = nbd_chunk(mem_nbd);
	return 0;
}

/* The memory, open for the sessions: a regular file, not empty, or an
 * NBD export. */
static int open_mem(void)
{
	struct stat st;

	if (mem_is_uri())
		return open_mem_export();
	mem_fd = open(fo.mem, O_RDONLY | O_CLOEXEC);
	if (mem_fd < 0 || fstat(mem_fd, &st)) {
		fprintf(stderr, "faultd: %s %s: %s\n", fo.mem_opt, fo.mem,
			strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode) || !st.st_size) {
		fprintf(stderr, "faultd: %s %s: %s\n", fo.mem_opt, fo.mem,
			S_ISREG(st.st_mode) ? "empty" : "not a regular file");
		return -1;
	}
	mem_size = (uint64_t)st.st_size;
	src_file_id(&st, mem_id);
	return 0;
}

/* Is set space @d one of a VM of the memory file (replay_check())? */
static bool set_space_known(const struct wset_space *d, void *arg, char *why,
			    size_t why_len)
{
	(void)arg;
	if (d->space_id)
		snprintf(why, why_len, "it has space %" PRIu64 ": not a set "
			 "of a Firecracker VM (its space is 0)", d->space_id);
	else if (d->src_size != mem_size)
		snprintf(why, why_len, "recorded for a memory file of %" PRIu64
			 " bytes, not for this one of %" PRIu64, d->src_size,
			 mem_size);
	else if (memcmp(d->src_id, mem_id, sizeof(mem_id)))
		snprintf(why, why_len, "recorded for another memory of this "
			 "size (the set names a file by its device, inode and "
			 "modification time, an NBD export by its URI)");
	else if (d->page_size != 4096 && d->page_size != 2ul << 20)
		snprintf(why, why_len, "its pages of %u bytes are neither 4 "
			 "KiB nor 2 MiB", d->page_size);
	else
		return true;
	return false;
}

/* --working-set, checked before any VM is served: used, or not at all. */
static void check_wset(void)
{
	char why[256];

	if (!fo.wset || !replay_check(fo.wset, set_space_known, NULL, why,
				      sizeof(why)))
		return;
	fprintf(stderr, "faultd: --working-set %s: %s: not used, the VMs are "
		"served without it\n", fo.wset, why);
	fo.wset = NULL;
}

/* The options checked, the memory file open; PATH (kept across a
 * restart with the VMs) and PATH.ctl (faultctl's STATUS). */
static int fc_start(struct front_start *st)
{
	if (!dopts.socket || !fo.mem) {
		fprintf(stderr, "faultd firecracker: --socket and --mem (or "
			"--mem-file) are needed\n");
		return -2;
	}
	if (fo.wset && fo.record) {
		fprintf(stderr, "faultd: --working-set and --record-working-"
			"set: not both (a replayed page never faults, so a "
			"set recorded with a replay would miss it)\n");
		return -2;
	}
	news_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (news_fd < 0 || open_mem() < 0)
		return -1;
	check_wset();
	st->nr = 2;
	st->listen[0] = (struct front_listen){ .type = SOCK_STREAM,
					       .ops = &fc_conn_ops,
					       .flags = LISTEN_KEEP, .fd = -1 };
	st->listen[1] = (struct front_listen){ .type = SOCK_SEQPACKET,
					       .ops = &fdp_conn_ops,
					       .flags = LISTEN_STATUS, .fd = -1 };
	if ((size_t)snprintf(st->listen[0].path, sizeof(st->listen[0].path),
			     "%s", dopts.socket) >= sizeof(st->listen[0].path) ||
	    (size_t)snprintf(st->listen[1].path, sizeof(st->listen[1].path),
			     "%s.ctl", dopts.socket) >=
		    sizeof(st->listen[1].path)) {
		fprintf(stderr, "faultd: %s: %s\n", dopts.socket,
			strerror(ENAMETOOLONG));
		return -1;
	}
	return 0;
}

/* Listening: said, and to a service manager that waits for it. */
static void fc_ready(void)
{
	dlog(LOG_INFO, "firecracker: listening on %s for VMs of %s (%" PRIu64
	     " bytes)%s", dopts.socket, fo.mem, mem_size,
	     fo.prefetch ? ", prefetch" : "");
	sd_notify(0, "READY=1");
}

/* Every VM served has ended (and at least one was). */
static bool all_done(void)
{
	bool done;

	pthread_mutex_lock(&vms_lock);
	done = vms_served && !vms_live;
	pthread_mutex_unlock(&vms_lock);
	return done;
}

static void print_status(void)
{
	pthread_mutex_lock(&vms_lock);
	printf("{\"faultd\":\"firecracker\",\"vms\":%u,\"pages\":%" PRIu64
	       ",\"faults\":%" PRIu64 ",\"pages_urgent\":%" PRIu64
	       ",\"pages_pushed\":%" PRIu64 ",\"pages_zero\":%" PRIu64
	       ",\"eexist\":%" PRIu64 ",\"eagain\":%" PRIu64 ",\"removes\":%"
	       PRIu64 ",\"poisoned\":%" PRIu64 ",\"pages_replayed\":%" PRIu64
	       "}\n", vms_served, total.pages_total, total.faults,
	       total.pages_urgent, total.pages_background, total.pages_zero,
	       total.eexist, total.eagain, total.removes, total.poisoned,
	       total.pages_replayed);
	pthread_mutex_unlock(&vms_lock);
	fflush(stdout);
}

static int fc_news(void)
{
	return news_fd;
}

/* The last VM's session ended (a status line), or a signal stopped it. */
static int fc_finish(bool stopped)
{
	(void)stopped;
	if (all_done())
		print_status();
	return 0;
}

const struct front fc_front = {
	.name = "Firecracker",
	.command = "firecracker",
	.session = &fc_session_ops,
	.shared = OPT_SOCKET | OPT_CONN_LIMITS | OPT_HANDSHAKE | OPT_KEEPER |
		  OPT_VERBOSE | OPT_NBD,
	.options = fc_options,
	.option = fc_option,
	.usage = fc_usage,
	.start = fc_start,
	.ready = fc_ready,
	.done = all_done,
	.news = fc_news,
	.finish = fc_finish,
};
