// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * front_fc.c - `faultd firecracker`: the page-fault handler of Firecracker
 * snapshot restores with the Uffd memory backend (faultd(8), "Firecracker").
 *
 *   faultd firecracker --socket PATH --mem-file FILE [--prefetch]
 *                      [--working-set FILE | --record-working-set FILE]
 *                      [--allow-uid UID]... [--handshake-timeout MS]
 *                      [--keeper-grace S] [--no-keeper] [-v]...
 *
 * It listens on PATH, a Unix stream socket. Firecracker connects when it
 * loads a snapshot and sends, in one sendmsg(), its guest memory regions
 * as JSON (fc_json.h) with its userfaultfd attached; it says nothing more
 * and keeps the socket open while the VM lives. Each connection is one VM
 * and becomes one session with one space: its regions map guest addresses
 * onto the memory file (base_host_virt_addr -> offset), pages of the
 * regions' size (4 KiB, or 2 MiB hugetlb), the file as the source (its
 * holes are zeros). With --prefetch the session pushes the rest of the
 * memory after the first fault, at low priority. The session ends when
 * Firecracker goes: the socket's end of file, or its process's exit.
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
 * longer than FC_JSON_MAX or not whole within --handshake-timeout, or the
 * regions overlap, are misaligned, reach past the memory file, have a page
 * size the file or the memory does not have, or are not registered.
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
 * Threads: the main thread accepts on both sockets; each VM's connection
 * has a thread that reads the handshake (with a deadline) and then runs the
 * session's control loop; a STATUS connection has a thread of its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "front.h"
#include "server.h"
#include "fc_json.h"
#include "sockfile.h"
#include "file.h"

#define MAX_ALLOW 32		/* --allow-uid */
#define MAX_PENDING 64		/* handshakes and STATUS under way */
#define FC_MAX_FDS 4		/* room to see that more than one came */

struct fc_opts {
	const char *socket, *mem_file;
	const char *wset, *record;	/* --working-set, --record-... */
	bool prefetch;
	uid_t allow[MAX_ALLOW];
	unsigned int nr_allow;
};

static struct fc_opts fo;
static int mem_fd = -1;		/* the memory file; sessions dup it */
static uint64_t mem_size;
static uint8_t mem_id[32];	/* its identity (src_file_id()) */
static atomic_bool recording;	/* a VM's session records already */

/*
 * What the daemon has served, for its exit line; under vms_lock (a leaf).
 * A VM counts from its accept (or adoption) until its session is freed,
 * so that the daemon exits only once the last one is done.
 */
static pthread_mutex_t vms_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int vms_live, vms_served, pending;
static struct session_view total;
static int news_fd = -1;	/* eventfd: a VM ended */

/* One VM: its connection and what a restart needs to serve it again. */
struct fc_vm {
	int sock;
	size_t page_size;
	bool told_input;	/* logged that it wrote after the handshake */
};

/* A connection before its session: who, and what came. */
struct fc_conn {
	int sock;
	struct peer peer;
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

/* A VM's connection or session is over. */
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
	struct fc_vm *vm = s->fe_data;
	char buf[256];
	ssize_t n = recv(vm->sock, buf, sizeof(buf), MSG_DONTWAIT);

	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
		return false;
	if (n > 0 && !vm->told_input) {
		dlog(LOG_WARNING, "%s: the VM wrote to the socket after its handshake: "
			"ignored", s->o.name);
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
		PRIu64 " pages replayed", s->o.name, v.faults, v.pages_urgent,
	     v.pages_background, v.pages_zero, v.removes, v.pages_replayed);
}

static const struct session_fe_ops vm_ops = {
	.peer_input = vm_peer_input,
	.space_gone = vm_gone,
	.ended = vm_ended,
};

static void vm_free(void *arg)
{
	free(arg);
	vm_uncounted();
}

static void vm_name(struct session *s)
{
	snprintf(s->name_buf, sizeof(s->name_buf), "vm %llu (pid %d)",
		 (unsigned long long)s->id, (int)s->pid);
	s->o.name = s->name_buf;
}

/* What a restarted daemon needs of a VM's front end. */
struct fc_blob {
	uint64_t page_size;
	uint64_t file_size;
};

static size_t vm_save(struct session *s, void *blob, size_t max)
{
	struct fc_vm *vm = s->fe_data;
	struct fc_blob b = { .page_size = vm->page_size,
			     .file_size = s->srcs[0]->size };

	if (max < sizeof(b))
		return 0;
	memcpy(blob, &b, sizeof(b));
	return sizeof(b);
}

/*
 * A VM a daemon before this one served: its connection and its memory
 * file, kept open since (the file named now is not read for it).
 */
static int vm_adopt(struct session *s, const void *blob, size_t len,
		    int peer, int *srcfds, size_t nr_srcs)
{
	struct fc_vm *vm = calloc(1, sizeof(*vm));
	struct fc_blob b = { 0 };
	struct source *src = NULL;
	char why[FC_WHY_MAX] = "out of memory";
	int ret = vm ? 0 : -ENOMEM;

	memcpy(&b, blob, len < sizeof(b) ? len : sizeof(b));
	if (!ret && (nr_srcs != 1 || srcfds[0] < 0 || peer < 0)) {
		snprintf(why, sizeof(why), "its memory file or connection "
			 "was not kept");
		ret = -EBADMSG;
	}
	if (!ret) {
		ret = src_file_open_fd(srcfds[0], b.file_size,
				       (size_t)b.page_size, &src, why,
				       sizeof(why));
		srcfds[0] = -1; /* the source's, or closed */
	}
	if (!ret && (ret = session_own_source(s, src)))
		source_destroy(src);
	for (size_t i = 0; i < nr_srcs; i++)
		if (srcfds[i] >= 0)
			close(srcfds[i]);
	if (ret) {
		dlog(LOG_WARNING, "vm %llu: cannot adopt it: %s",
		     (unsigned long long)s->id, why);
		if (peer >= 0)
			close(peer);
		free(vm);
		return ret;
	}
	vm->sock = peer;
	vm->page_size = (size_t)b.page_size;
	s->fe = &vm_ops;
	s->fe_data = vm;
	s->fe_free = vm_free;
	s->peer_fd = peer;
	s->close_peer = true;
	vm_counted(true);
	vm_name(s);
	return 0;
}

const struct fe_kind fc_kind = {
	.id = FE_FC,
	.name = "firecracker",
	.takeover = false,
	.save = vm_save,
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
	ssize_t n = recvmsg(c->sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
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

/* The whole handshake, within the deadline. 0 or -errno with c->why. */
static int recv_handshake(struct fc_conn *c)
{
	uint64_t end = now_ms() + dopts.handshake_ms;
	int ret;

	for (;;) {
		struct pollfd p = { .fd = c->sock, .events = POLLIN };
		uint64_t now = now_ms();

		if (now >= end)
			return refuse(c, -ETIMEDOUT, c->len ? "the handshake "
				      "was not whole within %u ms" : "no "
				      "handshake within %u ms",
				      dopts.handshake_ms);
		if (poll(&p, 1, (int)(end - now)) <= 0)
			continue;
		ret = recv_some(c);
		if (ret == -EAGAIN)
			continue;
		if (ret)
			return ret;
		ret = fc_json_complete(c->json, c->len);
		if (ret < 0)
			return refuse(c, -EBADMSG, "the handshake is not a JSON "
				      "array of regions");
		if (ret)
			return 0;
	}
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
			"first \"%s\": ignored", (int)c->peer.pid,
		     c->hs.ignored, c->hs.ignored_key);
	ps = c->hs.r[0].page_size;
	if (mem_size % ps)
		return refuse(c, -EINVAL, "the regions have %zu-byte pages, "
			      "but the memory file's %" PRIu64 " bytes are no "
			      "whole number of them", ps, mem_size);
	regions_ranges(&c->hs, r);
	ret = check_mapped(&c->peer, r, c->hs.nr, ps, &why);
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

static int vm_session(struct fc_conn *c, const struct srange *r,
		      struct session **sp)
{
	struct session_opts o = { .push = fo.prefetch,
				  .push_after_first = fo.prefetch };
	bool rec;
	size_t ps = c->hs.r[0].page_size;
	struct fc_vm *vm = calloc(1, sizeof(*vm));
	struct source *src = NULL;
	struct session *s = NULL;
	const char *why = "out of memory";
	int fd = dup(mem_fd);
	int ret = vm && fd >= 0 ? 0 : refuse(c, -ENOMEM, "%s", why);

	vm_wset_opts(&o, &rec);
	if (!ret)
		ret = src_file_open_fd(fd, mem_size, ps, &src, c->why,
				       sizeof(c->why));
	else if (fd >= 0)
		close(fd);
	if (!ret && (ret = session_create(&o, &vm_ops, vm, &s)))
		why = "cannot start the session";
	if (!ret && (ret = session_own_source(s, src)) == 0)
		src = NULL;
	if (!ret)
		ret = session_add_space(s, c->uffd, c->peer.pid, c->peer.pidfd,
					0, s->srcs[0], r, c->hs.nr, NULL, 0,
					&why, NULL);
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
			"the first VM only", (int)c->peer.pid);
	c->uffd = c->peer.pidfd = -1; /* the space's now */
	vm->sock = c->sock;
	vm->page_size = ps;
	s->fe_free = vm_free;
	s->peer_fd = c->sock;
	s->close_peer = true;
	c->sock = -1;
	s->uid = c->peer.uid;
	s->pid = c->peer.pid;
	s->kind = &fc_kind;
	vm_name(s);
	*sp = s;
	return 0;
}

static void conn_free(struct fc_conn *c)
{
	if (c->uffd >= 0)
		close(c->uffd);
	if (c->sock >= 0)
		close(c->sock);
	peer_release(&c->peer);
	free(c);
}

static void *conn_main(void *arg)
{
	struct fc_conn *c = arg;
	struct srange r[FC_MAX_REGIONS];
	struct session *s;
	const char *why = NULL;
	int ret = peer_bind(c->sock, &c->peer, &why);

	if (ret)
		refuse(c, ret, "%s", why);
	if (!ret)
		ret = recv_handshake(c);
	if (!ret)
		ret = handshake_check(c, r);
	if (!ret)
		ret = vm_session(c, r, &s);
	pthread_mutex_lock(&vms_lock);
	pending--;
	vms_served += !ret;
	pthread_mutex_unlock(&vms_lock);
	if (ret) {
		dlog(LOG_WARNING, "VM pid %d (uid %u): handshake refused: %s; connection "
			"closed", (int)c->peer.pid, (unsigned int)c->peer.uid,
		     c->why);
		conn_free(c);
		vm_uncounted();
		return NULL;
	}
	conn_free(c);
	dlog(LOG_INFO, "%s: %zu regions, %" PRIu64 " pages of %zu bytes%s%s%s",
	     s->o.name, s->spaces->nr, s->spaces->nr_pages,
	     s->spaces->page_size, fo.prefetch ? ", prefetch" : "",
	     s->rec ? ", recorded" : "", s->o.wset_path ? ", replay" : "");
	session_run(s);
	session_free(s); /* vm_free() uncounts it */
	return NULL;
}

static bool uid_allowed(uid_t uid)
{
	for (unsigned int i = 0; i < fo.nr_allow; i++)
		if (fo.allow[i] == uid)
			return true;
	return uid == geteuid();
}

/* A thread for @fn(@c), if not too many are under way. */
static bool start_pending(void *(*fn)(void *), void *c, const char *name)
{
	bool ok;

	pthread_mutex_lock(&vms_lock);
	ok = pending < MAX_PENDING;
	pending += ok;
	pthread_mutex_unlock(&vms_lock);
	if (ok && daemon_thread_start(fn, c, name) < 0) {
		pthread_mutex_lock(&vms_lock);
		pending--;
		pthread_mutex_unlock(&vms_lock);
		ok = false;
	}
	return ok;
}

/* A connection on PATH: a VM, if its user may. */
static void accept_vm(int ls)
{
	int sock = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
	struct fc_conn *c;

	if (sock < 0)
		return;
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(sock);
		return;
	}
	c->sock = sock;
	c->uffd = -1;
	peer_init(&c->peer);
	if (peer_cred(sock, &c->peer)) {
		dlog(LOG_WARNING, "a VM's connection: cannot identify its process: %s; "
			"connection closed", strerror(errno));
		conn_free(c);
		return;
	}
	if (!uid_allowed(c->peer.uid)) {
		dlog(LOG_WARNING, "VM pid %d (uid %u): refused: its user is not allowed "
			"(--allow-uid); connection closed", (int)c->peer.pid,
		     (unsigned int)c->peer.uid);
		conn_free(c);
		return;
	}
	vm_counted(false);
	if (!start_pending(conn_main, c, "faultd-fc-conn")) {
		dlog(LOG_WARNING, "VM pid %d: refused: %d handshakes under way already; "
			"connection closed", (int)c->peer.pid, MAX_PENDING);
		conn_free(c);
		vm_uncounted();
	}
}

/* ------------------------------------------------------------------------
 * PATH.ctl: faultctl's HELLO and STATUS.
 */

struct ctl_conn {
	int sock;
	uid_t uid;
};

static int ctl_hello(int sock)
{
	struct proto_hello h, reply = { .min_version = PROTO_VERSION,
					.max_version = PROTO_VERSION };
	const char *why = "expected HELLO";
	ssize_t n = proto_recv_checked(sock, &h, sizeof(h), NULL, 0, NULL, &why);

	if (n < 0 || h.h.type != MSG_HELLO || h.min_version > PROTO_VERSION ||
	    h.max_version < PROTO_VERSION) {
		if (n != -ECONNRESET)
			proto_error_send(sock, -EPROTO, "%s", n < 0 && why ? why :
					 "expected HELLO of protocol version 2");
		return -EPROTO;
	}
	proto_init(&reply.h, MSG_HELLO, sizeof(reply));
	return proto_send(sock, &reply, NULL, 0);
}

static void *ctl_main(void *arg)
{
	struct ctl_conn *c = arg;
	struct timeval tv = { .tv_sec = dopts.handshake_ms / 1000,
			      .tv_usec = dopts.handshake_ms % 1000 * 1000 };
	struct proto_hdr h;
	const char *why = NULL;

	setsockopt(c->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(c->sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (!ctl_hello(c->sock)) {
		if (proto_recv_checked(c->sock, &h, sizeof(h), NULL, 0, NULL,
				       &why) == sizeof(h) &&
		    h.type == MSG_STATUS)
			fdp_status(c->sock, c->uid);
		else
			proto_error_send(c->sock, -EPROTO, "expected STATUS");
	}
	close(c->sock);
	free(c);
	pthread_mutex_lock(&vms_lock);
	pending--;
	pthread_mutex_unlock(&vms_lock);
	return NULL;
}

static void accept_ctl(int ls)
{
	struct ctl_conn *c = calloc(1, sizeof(*c));
	struct peer p;

	peer_init(&p);
	if (c)
		c->sock = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
	if (c && c->sock >= 0 && !peer_cred(c->sock, &p)) {
		c->uid = p.uid;
		if (start_pending(ctl_main, c, "faultd-fc-ctl"))
			return;
	}
	if (c && c->sock >= 0)
		close(c->sock);
	free(c);
}

/* ------------------------------------------------------------------------
 * The command.
 */

static void usage(FILE *f)
{
	fprintf(f, "usage: faultd firecracker --socket PATH --mem-file FILE "
		   "[--prefetch]\n"
		   "                          [--working-set FILE | "
		   "--record-working-set FILE]\n"
		   "                          [--allow-uid UID]... "
		   "[--handshake-timeout MS]\n"
		   "                          [--keeper-grace S] [--no-keeper] "
		   "[-v]...\n");
}

static int parse(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "mem-file", required_argument, NULL, 'm' },
		{ "prefetch", no_argument, NULL, 'p' },
		{ "working-set", required_argument, NULL, 'w' },
		{ "record-working-set", required_argument, NULL, 'r' },
		{ "allow-uid", required_argument, NULL, 'u' },
		{ "handshake-timeout", required_argument, NULL, 't' },
		{ "keeper-grace", required_argument, NULL, 'g' },
		{ "no-keeper", no_argument, NULL, 'K' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "s:vh", longopts, NULL)) != -1) {
		switch (c) {
		case 's': fo.socket = optarg; break;
		case 'm': fo.mem_file = optarg; break;
		case 'p': fo.prefetch = true; break;
		case 'w': fo.wset = optarg; break;
		case 'r': fo.record = optarg; break;
		case 'u':
			if (fo.nr_allow == MAX_ALLOW) {
				fprintf(stderr, "faultd: --allow-uid: at most "
					"%d\n", MAX_ALLOW);
				return -1;
			}
			fo.allow[fo.nr_allow++] = daemon_parse_uint(
				"allow-uid", optarg, 0, 0xfffffffe);
			break;
		case 't':
			dopts.handshake_ms = daemon_parse_uint(
				"handshake-timeout", optarg, 1, 3600000);
			break;
		case 'g':
			dopts.keeper_grace_s = daemon_parse_uint(
				"keeper-grace", optarg, 1, 86400);
			break;
		case 'K': dopts.no_keeper = true; break;
		case 'v': dopts.verbose++; break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
	}
	if (optind != argc || !fo.socket || !fo.mem_file) {
		usage(stderr);
		return -1;
	}
	if (fo.wset && fo.record) {
		fprintf(stderr, "faultd: --working-set and --record-working-"
			"set: not both (a replayed page never faults, so a "
			"set recorded with a replay would miss it)\n");
		return -1;
	}
	return 0;
}

/* The memory file, open for the sessions: a regular file, not empty. */
static int open_mem_file(void)
{
	struct stat st;

	mem_fd = open(fo.mem_file, O_RDONLY | O_CLOEXEC);
	if (mem_fd < 0 || fstat(mem_fd, &st)) {
		fprintf(stderr, "faultd: --mem-file %s: %s\n", fo.mem_file,
			strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode) || !st.st_size) {
		fprintf(stderr, "faultd: --mem-file %s: %s\n", fo.mem_file,
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
		snprintf(why, why_len, "recorded for another memory file of "
			 "this size (the set names a file by its device, "
			 "inode and modification time)");
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

/* The sockets' files, removed at the end by their directory (sockfile.h). */
static struct sockfile vm_sf = SOCKFILE_INIT, ctl_sf = SOCKFILE_INIT;

/* The keeper (VMs of a daemon before adopted) and the listening socket. */
static int listen_vms(void)
{
	struct keep_opts ko = { .socket = fo.socket,
				.grace_s = dopts.keeper_grace_s };
	int kept = -1, ls;

	fe_kind_register(&fc_kind);
	if (!dopts.no_keeper) {
		kept = restart_begin(&ko);
		if (kept < -1)
			return kept;
	}
	if (kept >= 0) {
		sockfile_adopt(&vm_sf, fo.socket);
		return kept;
	}
	ls = daemon_listen(&vm_sf, fo.socket, SOCK_STREAM);
	if (ls >= 0)
		restart_keep_listen(ls);
	return ls;
}

static int ctl_listen(void)
{
	char path[108];

	if ((size_t)snprintf(path, sizeof(path), "%s.ctl", fo.socket) >=
	    sizeof(path))
		return -ENAMETOOLONG;
	return daemon_listen(&ctl_sf, path, SOCK_SEQPACKET);
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

enum { T_VMS, T_CTL, T_SIG, T_NEWS, T_KEEPER };

/* SIGUSR1: the record is written now and ends (0); else the end (1). */
static int on_signal(int sfd)
{
	struct signalfd_siginfo si;

	if (read(sfd, &si, sizeof(si)) != sizeof(si) ||
	    si.ssi_signo != SIGUSR1)
		return 1;
	dlog(LOG_INFO, "SIGUSR1: the working set recorded so far is written");
	sessions_record_end_all();
	return 0;
}

static int ep_add(int ep, int fd, uint32_t events, uint64_t tag)
{
	struct epoll_event ev = { .events = events, .data.u64 = tag };

	return fd < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) ? -1 : 0;
}

/* Accept until the last VM is done or a signal. Returns 0 or -errno. */
static int serve(int ls, int ctl, int sfd)
{
	int ep = epoll_create1(EPOLL_CLOEXEC), ret = 0;

	if (ep < 0 || ep_add(ep, ls, EPOLLIN, T_VMS) ||
	    ep_add(ep, ctl, EPOLLIN, T_CTL) || ep_add(ep, sfd, EPOLLIN, T_SIG) ||
	    ep_add(ep, news_fd, EPOLLIN, T_NEWS))
		ret = -errno;
	ep_add(ep, restart_fd(), 0, T_KEEPER);
	while (!ret && !all_done()) {
		struct epoll_event ev[16];
		int n = epoll_wait(ep, ev, 16, -1);
		uint64_t v;

		for (int i = 0; i < n; i++) {
			switch (ev[i].data.u64) {
			case T_VMS: accept_vm(ls); break;
			case T_CTL: accept_ctl(ctl); break;
			case T_NEWS: (void)!read(news_fd, &v, sizeof(v)); break;
			case T_SIG: ret = on_signal(sfd); break;
			case T_KEEPER:
				epoll_ctl(ep, EPOLL_CTL_DEL, restart_fd(), NULL);
				restart_keeper_lost();
				ep_add(ep, restart_fd(), 0, T_KEEPER);
				break;
			}
		}
	}
	if (ep >= 0)
		close(ep);
	return ret < 0 ? ret : 0;
}

/* Signals to a descriptor: the threads never see them. */
static int signals(void)
{
	sigset_t stop;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	return signalfd(-1, &stop, SFD_CLOEXEC);
}

/*
 * fc_main() - `faultd firecracker ...` (@argv[0] is "firecracker").
 * Returns the exit status: 0 when the last VM's session ended or on
 * SIGTERM, 1 when it cannot serve, 2 for a usage error.
 */
int fc_main(int argc, char **argv)
{
	int ls, ctl, sfd, ret;

	if (parse(argc, argv) < 0)
		return 2;
	log_set_verbosity(dopts.verbose);
	daemon_std_fds();
	daemon_raise_nofile();
	daemon_started_ms = now_ms();
	dopts.socket = fo.socket;
	sfd = signals();
	news_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (open_mem_file() < 0 || sfd < 0 || news_fd < 0)
		return 1;
	check_wset();
	ls = listen_vms();
	ctl = ls >= 0 ? ctl_listen() : -1;
	if (ls < 0 || ctl < 0) {
		fprintf(stderr, "faultd: %s%s: %s\n", fo.socket,
			ls < 0 ? "" : ".ctl", strerror(ls < 0 ? -ls : -ctl));
		if (restart_end())
			sockfile_remove(&vm_sf);
		return 1;
	}
	dlog(LOG_INFO, "firecracker: listening on %s for VMs of %s (%" PRIu64
	     " bytes)%s", fo.socket, fo.mem_file, mem_size,
	     fo.prefetch ? ", prefetch" : "");
	sd_notify(0, "READY=1");
	ret = serve(ls, ctl, sfd);
	if (ret < 0)
		fprintf(stderr, "faultd: cannot serve: %s\n", strerror(-ret));
	sessions_stop_all();
	daemon_threads_wait(THREADS_WAIT_MS);
	if (restart_end())
		sockfile_remove(&vm_sf);
	sockfile_remove(&ctl_sf);
	sockfile_close(&vm_sf);
	sockfile_close(&ctl_sf);
	if (all_done())
		print_status();
	close(ctl);
	close(ls);
	return ret < 0 ? 1 : 0;
}
