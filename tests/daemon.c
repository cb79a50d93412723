// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * daemon.c - the faultd daemon end to end: several clients restoring at
 * once, the daemon killed mid-restore (the client finishes alone), a
 * client killed mid-restore (the others go on), events from a client that
 * forks, mremaps, MADV_DONTNEEDs and munmaps during its restore, and every
 * kind of malformed registration refused with its own error while the
 * daemon stays up. Every byte a client reads is checked. Authenticated
 * images: served with their key, a changed block poisoned, every refusal
 * with its errno; hostile images refused, and a table of any size
 * served, while the daemon's peak resident memory stays bounded. Working
 * sets sent to the daemon by hand: recorded exactly, replayed, and bad ones
 * (or descriptors that are not what their flags say) refused by the daemon
 * itself.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>

#include "daemon-helpers.h"
#include "helpers.h"
#include "image-helpers.h"
#include "tmpdir.h"
#include "internal.h"
#include "proto.h"
#include "resources.h"
#include "wset.h"

#define TAG 0xdae

static char sock[256];
static pid_t daemon_pid;
static pid_t keeper_pid; /* killed with the daemon by kill_daemon clients */

static pid_t daemon_start(void)
{
	return test_daemon_start(sock);
}

static void daemon_kill(pid_t pid, int sig)
{
	test_daemon_kill(pid, sig);
}

static bool daemon_alive(void)
{
	struct proto_hello h;
	int s = proto_connect(sock);
	int ret = s < 0 ? s : proto_hello(s, 0, &h);

	if (s >= 0)
		close(s);
	return ret == 0;
}

static void setup(void)
{
	tmpdir_make("daemon");
	snprintf(sock, sizeof(sock), "%s/faultd.sock", test_dir);
	daemon_pid = daemon_start();
}

static void teardown(void)
{
	if (daemon_pid > 0)
		daemon_kill(daemon_pid, SIGTERM);
	tmpdir_remove();
}

TestSuite(daemon, .init = setup, .fini = teardown, .timeout = 240);

/* An image of @len bytes of pattern(@tag), authenticated with the key
 * file @key (NULL: not), written with @flags (FAULTD_CKPT_*). */
static const char *make_image_flags(const char *name, size_t len,
				    uint64_t tag, const char *key,
				    unsigned int flags)
{
	struct faultd_checkpoint_opts co = { .size = sizeof(co),
					     .flags = flags,
					     .key_file = key };
	struct faultd_ctx *ctx;
	struct faultd_region_opts o = { .size = sizeof(o), .length = len };
	struct faultd_region *r;
	const char *path = path_of(name);

	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	pattern_fill(tag, 0, faultd_region_base(r), len);
	cr_assert_eq(faultd_checkpoint(r, path, &co), 0);
	faultd_ctx_destroy(ctx);
	return path;
}

static const char *make_image_key(const char *name, size_t len, uint64_t tag,
				  const char *key)
{
	return make_image_flags(name, len, tag, key, 0);
}

static const char *make_image(const char *name, size_t len, uint64_t tag)
{
	return make_image_key(name, len, tag, NULL);
}

/* What the daemon reports to faultctl: its sessions, and its keeper. */
static uint32_t daemon_status(pid_t *keeper)
{
	union {
		struct proto_status st;
		char buf[PROTO_MAX_MSG];
	} *u = malloc(sizeof(*u));
	struct proto_hdr req;
	struct proto_hello h;
	int s = proto_connect(sock);
	uint32_t n;

	cr_assert(u && s >= 0);
	cr_assert_eq(proto_hello(s, 0, &h), 0);
	proto_init(&req, MSG_STATUS, sizeof(req));
	cr_assert_gt(proto_call(s, &req, NULL, 0, u, sizeof(*u)), 0);
	cr_assert_eq(u->st.h.type, MSG_STATUS);
	n = u->st.nr_sessions;
	if (keeper)
		*keeper = u->st.keeper_pid;
	close(s);
	free(u);
	return n;
}

static uint32_t daemon_sessions(void)
{
	return daemon_status(NULL);
}

/* ------------------------------------------------------------------------
 * Clients that use the library
 */

struct client {
	const char *image;
	size_t len;
	uint64_t tag;
	bool kill_daemon;	/* kill -9 it after the first access */
	bool stop_half_way;	/* exit after reading half */
	bool lazy;		/* FAULTD_RESTORE_LAZY: faults only */
	const char *socket;	/* the daemon's, when not the usual one */
	const char *key;	/* the image's key file */
};

/* Exit 0: every byte right. */
static void client_main(void *arg)
{
	const struct client *c = arg;
	struct faultd_restore_opts o = { .size = sizeof(o),
					 .flags = FAULTD_RESTORE_DAEMON,
					 .socket = sock,
					 .key_file = c->key };
	struct faultd_restore_progress p = { .size = sizeof(p) };
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	char *base;

	if (c->lazy)
		o.flags |= FAULTD_RESTORE_LAZY;
	if (c->socket)
		o.socket = c->socket;
	if (faultd_ctx_create(NULL, &ctx) || faultd_restore(ctx, c->image, &o, &r))
		_exit(10);
	base = faultd_region_base(r);
	if (pattern_check(c->tag, 0, base, 4096))
		_exit(11);
	if (c->kill_daemon) {
		faultd_restore_progress(r, &p);
		if (p.done)
			_exit(12); /* too late to test anything */
		kill(daemon_pid, SIGKILL);
		if (keeper_pid > 0)
			kill(keeper_pid, SIGKILL);
	}
	if (c->stop_half_way) {
		(void)pattern_check(c->tag, 0, base, c->len / 2);
		_exit(0);
	}
	if (pattern_check(c->tag, 0, base, c->len))
		_exit(13);
	if (c->lazy) { /* nothing was pushed: every page came for a fault */
		uint64_t end = test_now_ns() + 5000000000ull;

		do /* the daemon reports every 100 ms: wait for the last */
			faultd_restore_progress(r, &p);
		while (p.pages_urgent < c->len / 4096 && test_now_ns() < end);
		_exit(faultd_restore_wait(r) != -EAGAIN ||
		      p.pages_background || p.pages_urgent != c->len / 4096
			      ? 16 : 0);
	}
	if (faultd_restore_wait(r) || faultd_restore_progress(r, &p))
		_exit(14);
	if (!p.done || p.daemon_died != c->kill_daemon)
		_exit(15);
	faultd_ctx_destroy(ctx);
	_exit(0);
}

static pid_t client_start(struct client *c)
{
	pid_t pid = fork();

	if (pid == 0)
		client_main(c);
	cr_assert(pid > 0);
	return pid;
}

static int client_wait(pid_t pid)
{
	int status;

	cr_assert_eq(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

Test(daemon, several_clients_at_once)
{
	struct client c[4];
	pid_t pid[4];

	for (int i = 0; i < 4; i++) {
		char name[16];

		snprintf(name, sizeof(name), "img%d", i);
		c[i] = (struct client){ make_image(name, (16 + 8 * i) * MIB,
						   TAG + i),
					(16 + 8 * i) * MIB, TAG + i };
	}
	for (int i = 0; i < 4; i++)
		pid[i] = client_start(&c[i]);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(client_wait(pid[i]), 0, "client %d", i);
	cr_assert(daemon_alive());
}

Test(daemon, lazy_restore_serves_faults_only)
{
	struct client c = { make_image("lazy", 32 * MIB, TAG), 32 * MIB, TAG,
			    .lazy = true };

	int how = client_wait(client_start(&c));

	cr_assert_eq(how, 0, "client exit %d", how);
}

/*
 * Start the daemon the way systemd does for faultd.socket: the listening
 * socket of @type bound at @path as descriptor 3, LISTEN_PID and
 * LISTEN_FDS saying so, and no --socket.
 */
static pid_t daemon_start_activated(const char *path, int type)
{
	const char *exe = getenv("FAULTD_DAEMON");
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int s = socket(AF_UNIX, type, 0);
	pid_t pid;

	cr_assert(exe && s >= 0);
	strcpy(a.sun_path, path);
	cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(s, 16), 0);
	pid = fork();
	if (pid == 0) {
		char me[16];

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (dup2(s, 3) < 0)
			_exit(127);
		snprintf(me, sizeof(me), "%d", getpid());
		setenv("LISTEN_PID", me, 1);
		setenv("LISTEN_FDS", "1", 1);
		execl(exe, exe, (char *)NULL);
		_exit(127);
	}
	close(s); /* the daemon holds the socket now */
	cr_assert(pid > 0);
	return pid;
}

Test(daemon, socket_activation_the_systemd_way)
{
	struct client c = { make_image("act", 16 * MIB, TAG), 16 * MIB, TAG,
			    .socket = path_of("activated.sock") };
	pid_t pid = daemon_start_activated(c.socket, SOCK_SEQPACKET);
	int status;

	cr_assert_eq(client_wait(client_start(&c)), 0);
	daemon_kill(pid, SIGTERM);

	/* A passed socket of the wrong kind is refused at start. */
	pid = daemon_start_activated(path_of("stream.sock"), SOCK_STREAM);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1,
		  "status %#x", status);
}

/*
 * The daemon and its keeper both killed mid-restore: nothing holds the
 * session any more, and the client finishes its restore alone.
 */
Test(daemon, daemon_killed_mid_restore)
{
	struct client c = { make_image("big", 512 * MIB, TAG), 512 * MIB, TAG,
			    .kill_daemon = true };

	daemon_status(&keeper_pid);
	cr_assert_gt(keeper_pid, 0, "the daemon has no keeper");
	cr_assert_eq(client_wait(client_start(&c)), 0);
	daemon_pid = daemon_start(); /* for teardown */
}

Test(daemon, client_killed_mid_restore)
{
	struct client dying = { make_image("a", 256 * MIB, TAG), 256 * MIB,
				TAG, .stop_half_way = true };
	struct client other = { make_image("b", 64 * MIB, TAG + 1), 64 * MIB,
				TAG + 1 };
	pid_t a = client_start(&dying), b = client_start(&other);

	cr_assert_eq(client_wait(a), 0);
	cr_assert_eq(client_wait(b), 0);
	cr_assert(daemon_alive());
	/* And a new client is served after both. */
	cr_assert_eq(client_wait(client_start(&other)), 0);
}

/* ------------------------------------------------------------------------
 * A raw client: its own mapping and userfaultfd, the protocol by hand
 */

struct raw {
	int uffd, sock, image;
	char *base;
	size_t len;
};

static int raw_uffd(uint64_t features)
{
	struct uffdio_api api = { .api = UFFD_API, .features = features };
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);

	cr_assert(fd >= 0);
	cr_assert_eq(ioctl(fd, UFFDIO_API, &api), 0);
	return fd;
}

static struct raw raw_client(const char *image, size_t len, uint64_t features)
{
	struct raw c = { .len = len };
	struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
	struct proto_hello h;

	c.base = mmap(NULL, len, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	cr_assert(c.base != MAP_FAILED);
	c.uffd = raw_uffd(features);
	reg.range.start = (uintptr_t)c.base;
	reg.range.len = len;
	cr_assert_eq(ioctl(c.uffd, UFFDIO_REGISTER, &reg), 0);
	c.image = open(image, O_RDONLY | O_CLOEXEC);
	cr_assert(c.image >= 0);
	c.sock = proto_connect(sock);
	cr_assert(c.sock >= 0);
	cr_assert_eq(proto_hello(c.sock, PROTO_FEATURES, &h), 0);
	return c;
}

/* REGISTER with room for two ranges and a key; buf first, so "= { 0 }"
 * zeroes all. */
union reg_msg {
	char buf[sizeof(struct proto_register) + 2 * sizeof(struct proto_range) +
		 PROTO_KEY_LEN];
	struct proto_register reg;
};

/* Send REGISTER with @n ranges, @flags (PROTO_REG_*) and @fds, and with
 * PROTO_REG_MAC the image key @key; the reply's error (0: ACK). */
static int raw_register_with(struct raw *c, const struct proto_range *r,
			     unsigned int n, const int *fds, unsigned int nfds,
			     uint32_t flags, const struct img_key *key)
{
	union reg_msg m = { 0 };
	union {
		struct proto_hdr h;
		struct proto_ack ack;
		struct proto_error err;
	} u;
	const char *why;
	ssize_t len;

	proto_init(&m.reg.h, MSG_REGISTER,
		   sizeof(m.reg) + n * sizeof(m.reg.r[0]) +
			   (flags & PROTO_REG_MAC ? PROTO_KEY_LEN : 0));
	m.reg.nr_ranges = n;
	m.reg.flags = flags;
	memcpy(m.reg.r, r, n * sizeof(*r));
	if (flags & PROTO_REG_MAC)
		memcpy(proto_register_key(&m.reg), key->key, PROTO_KEY_LEN);
	cr_assert_eq(proto_send(c->sock, &m, fds, nfds), 0);
	len = proto_recv(c->sock, &u, sizeof(u), NULL, 0, NULL);
	cr_assert_gt(len, 0);
	cr_assert_eq(proto_check(&u, (size_t)len, &why), 0);
	return u.h.type == MSG_ACK ? 0 : u.err.err;
}

/* sendmsg() of @msg with @nfds descriptors, up to 8: more than
 * proto_send() sends, as a hostile client would. 0 or -errno. */
static int send_fds(int s, const void *msg, size_t len, const int *fds,
		    unsigned int nfds)
{
	union {
		char buf[CMSG_SPACE(8 * sizeof(int))];
		struct cmsghdr align;
	} ctl = { { 0 } };
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = ctl.buf,
			    .msg_controllen = CMSG_SPACE(nfds * sizeof(int)) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
	memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	return sendmsg(s, &m, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -errno;
}

/* REGISTER of one range with @flags and @nfds (up to 8) descriptors; the
 * reply's error (0: ACK). */
static int raw_register_fds(struct raw *c, const struct proto_range *r,
			    const int *fds, unsigned int nfds, uint32_t flags)
{
	union reg_msg m = { 0 };
	union {
		struct proto_hdr h;
		struct proto_error err;
	} u;
	ssize_t len;

	proto_init(&m.reg.h, MSG_REGISTER,
		   sizeof(m.reg) + sizeof(m.reg.r[0]));
	m.reg.nr_ranges = 1;
	m.reg.flags = flags;
	m.reg.r[0] = *r;
	cr_assert_eq(send_fds(c->sock, &m, m.reg.h.len, fds, nfds), 0);
	len = proto_recv(c->sock, &u, sizeof(u), NULL, 0, NULL);
	cr_assert_gt(len, 0);
	return u.h.type == MSG_ACK ? 0 : u.err.err;
}

static int raw_register(struct raw *c, const struct proto_range *r,
			unsigned int n, const int *fds, unsigned int nfds)
{
	return raw_register_with(c, r, n, fds, nfds, 0, NULL);
}

static void raw_close(struct raw *c)
{
	close(c->sock);
	close(c->uffd);
	close(c->image);
	munmap(c->base, c->len);
}

/* The error the daemon answers a raw message @m (of @n bytes) with. */
static int reply_to(const void *m, size_t n)
{
	struct raw c = raw_client(make_image("tiny", MIB, TAG), MIB, 0);
	union {
		struct proto_hdr h;
		struct proto_error err;
	} u;
	const char *why;
	ssize_t len;

	cr_assert_eq(send(c.sock, m, n, MSG_NOSIGNAL), (ssize_t)n);
	len = proto_recv(c.sock, &u, sizeof(u), NULL, 0, NULL);
	cr_assert_gt(len, 0);
	cr_assert_eq(proto_check(&u, (size_t)len, &why), 0);
	cr_assert_eq(u.h.type, MSG_ERROR);
	/* ... and the connection is closed after it. */
	cr_assert_eq(proto_recv(c.sock, &u, sizeof(u), NULL, 0, NULL), 0);
	raw_close(&c);
	return u.err.err;
}

Test(daemon, malformed_messages_get_precise_errors)
{
	struct proto_hdr h;
	union reg_msg m = { 0 };

	proto_init(&h, 77, sizeof(h));
	cr_expect_eq(reply_to(&h, sizeof(h)), -EPROTO, "unknown type");
	proto_init(&h, MSG_STATS, sizeof(h) + 40);
	cr_expect_eq(reply_to(&h, sizeof(h)), -EBADMSG, "cut short");
	proto_init(&h, MSG_STATS, sizeof(h));
	h.magic ^= 1;
	cr_expect_eq(reply_to(&h, sizeof(h)), -EBADMSG, "bad magic");
	proto_init(&h, MSG_STATS, sizeof(h));
	h.version = 9;
	cr_expect_eq(reply_to(&h, sizeof(h)), -EPROTONOSUPPORT, "version");
	cr_expect_eq(reply_to(&h, 5), -EBADMSG, "shorter than a header");
	proto_init(&m.reg.h, MSG_REGISTER, sizeof(m.reg));
	cr_expect_eq(reply_to(&m, sizeof(m.reg)), -EBADMSG, "no ranges");
	proto_init(&m.reg.h, MSG_REGISTER, sizeof(m) - PROTO_KEY_LEN);
	m.reg.nr_ranges = 2;
	cr_expect_eq(reply_to(&m, sizeof(m) - PROTO_KEY_LEN), -EPROTO,
		     "no descriptors");
	proto_init(&m.reg.h, MSG_REGISTER, sizeof(m) - PROTO_KEY_LEN);
	m.reg.flags = PROTO_REG_MAC;
	cr_expect_eq(reply_to(&m, sizeof(m) - PROTO_KEY_LEN), -EBADMSG,
		     "PROTO_REG_MAC without its key");
	cr_assert(daemon_alive());
}

Test(daemon, bad_registrations_get_precise_errors)
{
	const char *img = make_image("img", 4 * MIB, TAG);
	struct raw c = raw_client(img, 4 * MIB, 0);
	uint64_t b = (uintptr_t)c.base;
	struct proto_range whole = { b, 4 * MIB, 0 };
	struct proto_range over[2] = { { b, 2 * MIB, 0 },
				       { b + MIB, 2 * MIB, 2 * MIB } };
	struct proto_range past = { b, 4 * MIB, 4096 };
	struct proto_range odd = { b + 100, 4096, 0 };
	int pipefd[2], fds[2] = { c.uffd, c.image };
	char *plain = mmap(NULL, MIB, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct proto_range unreg = { (uintptr_t)plain, MIB, 0 };
	const char *bad_ext, *cut;
	struct img_header hdr;
	int fd;

	cr_assert_eq(pipe(pipefd), 0);
#define AGAIN(call)                                                            \
	do {                                                                   \
		raw_close(&c);                                                 \
		c = raw_client(img, 4 * MIB, 0);                               \
		fds[0] = c.uffd;                                               \
		fds[1] = c.image;                                              \
		b = (uintptr_t)c.base;                                         \
		call;                                                          \
	} while (0)
	cr_expect_eq(raw_register(&c, over, 2, fds, 2), -EINVAL, "overlap");
	AGAIN(past.start = b;
	      cr_expect_eq(raw_register(&c, &past, 1, fds, 2), -ERANGE));
	AGAIN(odd.start = b + 100;
	      cr_expect_eq(raw_register(&c, &odd, 1, fds, 2), -EINVAL));
	AGAIN(cr_expect_eq(raw_register(&c, &unreg, 1, fds, 2), -EINVAL,
			   "not registered with a userfaultfd"));
	AGAIN(munmap(c.base + 2 * MIB, MIB); whole.start = b;
	      cr_expect_eq(raw_register(&c, &whole, 1, fds, 2), -EFAULT,
			   "not mapped"));
	AGAIN(whole.start = b; fds[0] = pipefd[0];
	      cr_expect_eq(raw_register(&c, &whole, 1, fds, 2), -EBADF,
			   "not a userfaultfd"));
	fd = open(img, O_RDONLY);
	cr_assert_eq(pread(fd, &hdr, sizeof(hdr), 0), (ssize_t)sizeof(hdr));
	close(fd);
	bad_ext = path_of("bad-ext");
	cut = path_of("cut");
	{
		char cmd[600];

		snprintf(cmd, sizeof(cmd),
			 "cp %s %s && printf '\\377' | dd of=%s bs=1 seek=%llu "
			 "conv=notrunc 2>/dev/null && cp %s %s && "
			 "truncate -s %llu %s",
			 img, bad_ext, bad_ext,
			 (unsigned long long)hdr.extents_off + 2, img, cut,
			 (unsigned long long)hdr.extents_off, cut);
		cr_assert_eq(system(cmd), 0);
	}
	AGAIN(whole.start = b; close(c.image); c.image = open(bad_ext, O_RDONLY);
	      fds[1] = c.image;
	      cr_expect_eq(raw_register(&c, &whole, 1, fds, 2), -EBADMSG,
			   "flipped byte in the extent table"));
	AGAIN(whole.start = b; close(c.image); c.image = open(cut, O_RDONLY);
	      fds[1] = c.image;
	      cr_expect_eq(raw_register(&c, &whole, 1, fds, 2), -EBADMSG,
			   "truncated image"));
	AGAIN(whole.start = b; fds[1] = pipefd[1];
	      cr_expect_eq(raw_register(&c, &whole, 1, fds, 2), -EINVAL,
			   "not an image"));
	/* After all of it, a good registration is served. */
	AGAIN(whole.start = b;
	      cr_expect_eq(raw_register(&c, &whole, 1, fds, 2), 0));
	cr_assert_eq(pattern_check(TAG, 0, c.base, 4 * MIB), 0);
	raw_close(&c);
	cr_assert(daemon_alive());
#undef AGAIN
}

/* Read messages until DONE (the daemon filled everything). */
static bool raw_wait_done(struct raw *c)
{
	struct proto_progress p;
	const char *why;
	ssize_t n;

	while ((n = proto_recv(c->sock, &p, sizeof(p), NULL, 0, NULL)) > 0)
		if (!proto_check(&p, (size_t)n, &why) && p.h.type == MSG_DONE)
			return true;
	return false;
}

static void fork_child(void *arg)
{
	(void)arg;
	_exit(0);
}

/*
 * Events during a restore: the client forks, moves 1 MiB of the range
 * with mremap, drops 1 MiB with MADV_DONTNEED and unmaps 1 MiB. Moved
 * pages keep their image content at the new address, dropped ones read
 * zeros, the rest reads the image.
 */
Test(daemon, events_during_restore)
{
	size_t len = 8 * MIB;
	const char *img = make_image("ev", len, TAG);
	uint64_t features = UFFD_FEATURE_EVENT_FORK | UFFD_FEATURE_EVENT_REMAP |
			    UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_UNMAP;
	struct raw c = raw_client(img, len, features);
	struct proto_range whole = { (uintptr_t)c.base, len, 0 };
	int fds[2] = { c.uffd, c.image };
	char *moved, *to;

	cr_assert_eq(raw_register(&c, &whole, 1, fds, 2), 0);
	cr_assert_eq(pattern_check(TAG, 0, c.base, 4096), 0);
	cr_assert_eq(run_in_child(fork_child, NULL), -1);
	to = mmap(NULL, MIB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	moved = mremap(c.base + 2 * MIB, MIB, MIB, MREMAP_MAYMOVE | MREMAP_FIXED,
		       to);
	cr_assert(moved == to);
	cr_assert_eq(madvise(c.base + 4 * MIB, MIB, MADV_DONTNEED), 0);
	cr_assert_eq(munmap(c.base + 6 * MIB, MIB), 0);
	cr_assert_eq(pattern_check(TAG, 2 * MIB, moved, MIB), 0, "moved");
	for (size_t i = 0; i < MIB; i += 8)
		cr_assert_eq(*(uint64_t *)(c.base + 4 * MIB + i), 0, "dropped");
	cr_assert_eq(pattern_check(TAG, 0, c.base, 2 * MIB), 0);
	cr_assert_eq(pattern_check(TAG, 3 * MIB, c.base + 3 * MIB, MIB), 0);
	cr_assert_eq(pattern_check(TAG, 5 * MIB, c.base + 5 * MIB, MIB), 0);
	cr_assert_eq(pattern_check(TAG, 7 * MIB, c.base + 7 * MIB, MIB), 0);
	cr_assert(raw_wait_done(&c));
	munmap(moved, MIB);
	raw_close(&c);
	cr_assert(daemon_alive());
}

/*
 * A child the client forked has a userfaultfd only the daemon holds (it
 * came with the FORK event): when the client ended its session, the
 * daemon closed it, and every page the child had not read yet read as
 * zeros. The session now pushes the child's pages before it ends.
 */
Test(daemon, forked_child_is_served_after_its_parent_goes)
{
	size_t len = 8 * MIB;
	const char *img = make_image("forkgo", len, TAG);
	struct raw c = raw_client(img, len, UFFD_FEATURE_EVENT_FORK);
	struct proto_range whole = { (uintptr_t)c.base, len, 0 };
	int fds[2] = { c.uffd, c.image }, read1[2], go[2], status;
	pid_t pid;
	char k;

	cr_assert_eq(raw_register_with(&c, &whole, 1, fds, 2, PROTO_REG_LAZY,
				       NULL), 0);
	cr_assert_eq(pipe(read1), 0);
	cr_assert_eq(pipe(go), 0);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		/* Its first page served: its space is the daemon's now. The
		 * parent's connection and userfaultfd are the parent's. */
		int bad = pattern_check(TAG, 0, c.base, 4096);

		close(c.sock);
		close(c.uffd);

		(void)!write(read1[1], "", 1);
		if (read(go[0], &k, 1) != 1)
			_exit(3);
		bad += pattern_check(TAG, 0, c.base, len) != 0;
		_exit(bad ? 1 : 0);
	}
	cr_assert_eq(read(read1[0], &k, 1), 1);
	raw_close(&c); /* the session ends: its peer is gone */
	/* Gone from the daemon's list only once it has ended, its threads
	 * stopped and its descriptors (the child's userfaultfd too) closed
	 * - then the child reads the rest. */
	for (uint64_t end = test_now_ns() + 30000000000ull;
	     daemon_sessions(); usleep(1000))
		cr_assert(test_now_ns() < end, "the session did not end");
	cr_assert_eq(write(go[1], "", 1), 1);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && !WEXITSTATUS(status),
		  "the child read %s (status %#x)",
		  WIFEXITED(status) && WEXITSTATUS(status) == 1
			  ? "wrong content, zeros" : "nothing", status);
	cr_assert(daemon_alive());
}

/* ------------------------------------------------------------------------
 * Authenticated images
 */

/* GMAC images (the default) and HMAC-SHA256 ones, each checked by the
 * daemon under the key derived for it. */
Test(daemon, authenticated_image_is_served_with_its_key)
{
	const char *key = path_of("key");
	struct client c = { .len = 64 * MIB, .tag = TAG, .key = key };

	key_write(key, 0, 0600);
	c.image = make_image_key("mac", c.len, TAG, key);
	cr_assert_eq(header_read_of(c.image).mac_alg, IMG_ALG_GMAC_AES256);
	cr_assert_eq(client_wait(client_start(&c)), 0);
	c.lazy = true;
	cr_assert_eq(client_wait(client_start(&c)), 0);
	c.image = make_image_flags("hmac", 16 * MIB, TAG, key,
				   FAULTD_CKPT_HMAC);
	c.len = 16 * MIB;
	cr_assert_eq(header_read_of(c.image).mac_alg, IMG_ALG_HMAC_SHA256);
	cr_assert_eq(client_wait(client_start(&c)), 0);
	c.lazy = false;
	cr_assert_eq(client_wait(client_start(&c)), 0);
	cr_assert(daemon_alive());
}

/* Block 3 was changed: blocks 0 and 6 come in right, block 3 is
 * poisoned by the daemon (SIGBUS), whose MAC check caught it. */
static void changed_block_client(void *arg)
{
	const struct client *c = arg;
	struct faultd_restore_opts o = { .size = sizeof(o),
					 .flags = FAULTD_RESTORE_DAEMON |
						  FAULTD_RESTORE_LAZY,
					 .socket = sock,
					 .key_file = c->key };
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	char *p;

	if (faultd_ctx_create(NULL, &ctx) || faultd_restore(ctx, c->image, &o, &r))
		_exit(3);
	p = faultd_region_base(r);
	if (pattern_check(c->tag, 0, p, IMG_BLOCK) ||
	    pattern_check(c->tag, 6 * IMG_BLOCK, p + 6 * IMG_BLOCK, IMG_BLOCK))
		_exit(4);
	(void)*(volatile char *)(p + 3 * IMG_BLOCK + 5 * PAGE);
	_exit(5);
}

Test(daemon, changed_block_of_authenticated_image_is_poisoned)
{
	const char *key = path_of("key");
	const char *img, *bad = path_of("mac-bad");
	struct client c = { .len = 4 * MIB, .tag = TAG, .key = key };
	struct img_header h;
	char cmd[600];
	int how;

	key_write(key, 0, 0600);
	img = make_image_key("mac", c.len, TAG, key);
	h = header_read_of(img);
	snprintf(cmd, sizeof(cmd),
		 "cp %s %s && printf '\\125' | dd of=%s bs=1 seek=%llu "
		 "conv=notrunc 2>/dev/null",
		 img, bad, bad,
		 (unsigned long long)(h.data_off + 3 * IMG_BLOCK + 77));
	cr_assert_eq(system(cmd), 0);
	c.image = bad;
	how = run_in_child(changed_block_client, &c);
	cr_assert_eq(how, poison_signal(), "the client ended with %d", how);
	cr_assert(daemon_alive());
}

/* REGISTER 4 MiB of @image with @flags and @key: the reply's error; the
 * content checked when it is served. */
static int key_register(const char *image, uint32_t flags,
			const struct img_key *key)
{
	struct raw c = raw_client(image, 4 * MIB, 0);
	struct proto_range whole = { (uintptr_t)c.base, 4 * MIB, 0 };
	int fds[2] = { c.uffd, c.image };
	int ret = raw_register_with(&c, &whole, 1, fds, 2, flags, key);

	if (!ret)
		cr_assert_eq(pattern_check(TAG, 0, c.base, 4 * MIB), 0);
	raw_close(&c);
	return ret;
}

Test(daemon, authentication_refusals_get_precise_errors)
{
	const char *key = path_of("key"), *other = path_of("other");
	const char *mac, *crc, *mac2;
	struct img_key k, wrong;

	key_write(key, 0, 0600);
	key_write(other, 0, 0600);
	mac = make_image_key("mac", 4 * MIB, TAG, key);
	mac2 = make_image_key("mac2", 4 * MIB, TAG, key);
	crc = make_image("crc", 4 * MIB, TAG);
	/* What the library sends: the image's own key, derived from k. */
	{
		struct image *img;
		struct img_key user = key_read(key);
		int fd = open(mac, O_RDONLY | O_CLOEXEC);

		cr_assert_eq(image_open(fd, mac, &user, &img, NULL), 0);
		cr_assert_eq(image_key_of(img, &k), 0);
		image_close(img);
		close(fd);
	}
	wrong = key_read(other); /* the user key itself is not the image's */
	wrong.image_key = true;
	cr_expect_eq(key_register(mac, 0, NULL), -ENOKEY,
		     "an authenticated image without a key");
	cr_expect_eq(key_register(mac, PROTO_REG_MAC, &wrong), -EKEYREJECTED,
		     "another key");
	cr_expect_eq(key_register(crc, PROTO_REG_MAC, &k), -EKEYREJECTED,
		     "a key, and no MACs");
	cr_expect_eq(key_register(mac2, PROTO_REG_MAC, &k), -EKEYREJECTED,
		     "the key of another image of the same key file");
	cr_expect_eq(key_register(mac, PROTO_REG_MAC, &k), 0, "its key");
	cr_assert(daemon_alive());
}

/* ------------------------------------------------------------------------
 * Hostile images and big tables: the daemon's peak memory
 */

/*
 * What one session may add to the daemon's peak resident memory (VmHWM)
 * here: its image's chunk cache and scan buffer, its bitmaps (1 bit per
 * page and per block: 2 MiB of address space for 64 GiB, touched only as
 * blocks come in), its thread's stack and buffers. A daemon that loads
 * tables whole adds their size: 2 GiB and 16 MiB below.
 */
#define SESSION_BOUND_KIB (8 * 1024)

/* The error the daemon gives a REGISTER of @image for a 1 MiB range, and
 * by how much its VmHWM grew meanwhile. */
static int register_peak(const char *image, long *grew_kib)
{
	struct raw c = raw_client(image, MIB, 0);
	struct proto_range whole = { (uintptr_t)c.base, MIB, 0 };
	int fds[2] = { c.uffd, c.image }, ret;
	long before;

	hwm_reset(daemon_pid);
	before = proc_status_kib(daemon_pid, "VmHWM");
	ret = raw_register(&c, &whole, 1, fds, 2);
	*grew_kib = proc_status_kib(daemon_pid, "VmHWM") - before;
	raw_close(&c);
	return ret;
}

Test(daemon, hostile_images_are_refused_in_bounded_memory)
{
	struct img_header ext = test_header(1ull << 45, 1ull << 26, 0, 0);
	struct img_header chk = test_header(1ull << 45, 0, 1ull << 24, 0);
	struct img_header wrap = test_header(1ull << 40, (1ull << 59) + 1, 0, 0);
	struct img_header cut = test_header(1ull << 30, 1000, 10, 0);
	const char *p = path_of("hostile");
	long grew;

	wrap.checks_off = wrap.extents_off + 32;
	header_file(p, ext, test_end(&ext));
	cr_expect_eq(register_peak(p, &grew), -EBADMSG, "2 GiB extent table");
	cr_expect_lt(grew, SESSION_BOUND_KIB, "VmHWM +%ld KiB", grew);
	header_file(p, chk, test_end(&chk));
	cr_expect_eq(register_peak(p, &grew), -EBADMSG, "64 MiB check table");
	cr_expect_lt(grew, SESSION_BOUND_KIB, "VmHWM +%ld KiB", grew);
	header_file(p, wrap, 4 * IMG_BLOCK);
	cr_expect_eq(register_peak(p, &grew), -EBADMSG, "a wrapping length");
	cr_expect_lt(grew, SESSION_BOUND_KIB, "VmHWM +%ld KiB", grew);
	header_file(p, cut, test_end(&cut) - 1);
	cr_expect_eq(register_peak(p, &grew), -EBADMSG, "tables past EOF");
	cr_expect_lt(grew, SESSION_BOUND_KIB, "VmHWM +%ld KiB", grew);
	cr_assert(daemon_alive());
}

Test(daemon, big_table_is_served_in_bounded_memory)
{
	uint64_t len = 2 * BIG_EXTENTS * IMG_BLOCK;
	const char *p = path_of("big");
	struct img_header h;
	struct raw c;
	struct proto_range whole;
	int fds[2];
	long before, grew;

	test_image_write(p, len, BIG_EXTENTS, big_extent, NULL, TAG, NULL, &h);
	cr_assert_geq(h.checks_off - h.extents_off, 16 * MIB);
	c = raw_client(p, len, 0);
	whole = (struct proto_range){ (uintptr_t)c.base, len, 0 };
	fds[0] = c.uffd;
	fds[1] = c.image;
	hwm_reset(daemon_pid);
	before = proc_status_kib(daemon_pid, "VmHWM");
	cr_assert_eq(raw_register_with(&c, &whole, 1, fds, 2, PROTO_REG_LAZY,
				       NULL), 0);
	/* Every data block, and the zero and missing blocks after each. */
	for (uint64_t i = 0; i < BIG_EXTENTS; i += BIG_DATA_EVERY) {
		uint64_t off = 2 * i * IMG_BLOCK;
		const char *q = c.base + off;

		cr_assert_eq(pattern_check(TAG, off, q, IMG_BLOCK), 0,
			     "data at %#llx", (unsigned long long)off);
		for (uint64_t b = 1; b <= 3; b++)
			cr_assert(q[b * IMG_BLOCK] == 0 &&
				  !memcmp(q + b * IMG_BLOCK,
					  q + b * IMG_BLOCK + 1, PAGE - 1));
	}
	grew = proc_status_kib(daemon_pid, "VmHWM") - before;
	assert_kib_bound(grew, SESSION_BOUND_KIB, "VmHWM grew by %ld KiB",
			 grew);
	raw_close(&c);
	cr_assert(daemon_alive());
}

/*
 * A userfaultfd opened without O_NONBLOCK is refused at REGISTER with
 * EINVAL (it used to be acknowledged, then dropped without a word).
 */
Test(daemon, blocking_uffd_refused)
{
	const char *img = make_image("blk", MIB, TAG);
	struct raw c = raw_client(img, MIB, 0);
	struct proto_range whole = { (uintptr_t)c.base, MIB, 0 };
	int fds[2] = { c.uffd, c.image };

	cr_assert_eq(fcntl(c.uffd, F_SETFL,
			   fcntl(c.uffd, F_GETFL) & ~O_NONBLOCK), 0);
	cr_assert_eq(raw_register(&c, &whole, 1, fds, 2), -EINVAL);
	raw_close(&c);
	cr_assert(daemon_alive());
}

/* The pages the client's log says the daemon poisoned, over its lines:
 * one report may hold a block's pages, or several reports share them. */
static atomic_int poison_pages;

static void count_poison_lines(void *arg, int level, const char *msg)
{
	const char *at = strstr(msg, "the daemon poisoned ");
	int n;

	(void)arg;
	if (level <= FAULTD_LOG_ERR && at &&
	    sscanf(at, "the daemon poisoned %d ", &n) == 1)
		atomic_fetch_add(&poison_pages, n);
}

/* Exit 0: the daemon's poisoned block is in the region's counter and the
 * log, and every other byte is right. */
static void poisoned_client(void *arg)
{
	const char *img = arg;
	struct faultd_ctx_opts co = { .size = sizeof(co),
				      .log = count_poison_lines };
	struct faultd_restore_opts o = { .size = sizeof(o),
					 .flags = FAULTD_RESTORE_DAEMON,
					 .socket = sock };
	struct faultd_stats st = { .size = sizeof(st) };
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	uint64_t end;
	char *base;

	if (faultd_ctx_create(&co, &ctx) || faultd_restore(ctx, img, &o, &r))
		_exit(10);
	if (faultd_restore_wait(r))
		_exit(11);
	base = faultd_region_base(r);
	if (pattern_check(TAG, 0, base, IMG_BLOCK) ||
	    pattern_check(TAG, 2 * IMG_BLOCK, base + 2 * IMG_BLOCK,
			  4 * MIB - 2 * IMG_BLOCK))
		_exit(12);
	faultd_region_stats(r, &st);
	if (st.poisoned != IMG_BLOCK / 4096)
		_exit(13);
	/* The lines come with the daemon's PROGRESS, on the watcher thread:
	 * waited for (a deadline, not a sleep); they must say the block. */
	end = test_now_ns() + 10000000000ull;
	while (atomic_load(&poison_pages) < (int)(IMG_BLOCK / 4096) &&
	       test_now_ns() < end)
		sched_yield();
	if (atomic_load(&poison_pages) != (int)(IMG_BLOCK / 4096))
		_exit(14);
	(void)*(volatile char *)(base + IMG_BLOCK); /* SIGBUS */
	_exit(15);
}

/*
 * A block whose checksum fails, in a restore the daemon serves: the
 * client's library counts the daemon's poisoned pages (PROGRESS and DONE
 * carry them) and logs them, as an in-process restore does; the pages
 * get SIGBUS.
 */
Test(daemon, poisoned_block_reported_to_client)
{
	const char *img = make_image("poison", 4 * MIB, TAG);
	struct img_header h;
	unsigned char c;
	int fd = open(img, O_RDWR), how;

	cr_assert(fd >= 0);
	cr_assert_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	cr_assert_eq(pread(fd, &c, 1, (off_t)(h.data_off + IMG_BLOCK + 77)), 1);
	c ^= 0x5a;
	cr_assert_eq(pwrite(fd, &c, 1, (off_t)(h.data_off + IMG_BLOCK + 77)), 1);
	close(fd);
	how = run_in_child(poisoned_client, (void *)img);
	cr_assert_eq(how, poison_signal(), "the client ended with %d", how);
	cr_assert(daemon_alive());
}

/*
 * Many mremaps during a lazy restore: page 2k of a 20,000-page region
 * moves, one page at a time, to page k of another mapping - 10,000 moves,
 * each splitting the daemon's range table. Every moved and unmoved page
 * then reads its own image content (the daemon once stopped splitting
 * past 514 ranges and served other pages' content from there on).
 */
Test(daemon, ten_thousand_remaps_keep_every_page)
{
	size_t pages = 20000, len = pages * 4096, moves = pages / 2;
	const char *img = make_image("remaps", len, TAG);
	struct raw c = raw_client(img, len, UFFD_FEATURE_EVENT_REMAP);
	struct proto_range whole = { (uintptr_t)c.base, len, 0 };
	int fds[2] = { c.uffd, c.image };
	char *to = mmap(NULL, moves * 4096, PROT_NONE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	cr_assert(to != MAP_FAILED);
	cr_assert_eq(raw_register_with(&c, &whole, 1, fds, 2, PROTO_REG_LAZY, NULL),
		     0);
	for (size_t k = 0; k < moves; k++)
		cr_assert(mremap(c.base + 2 * k * 4096, 4096, 4096,
				 MREMAP_MAYMOVE | MREMAP_FIXED,
				 to + k * 4096) == to + k * 4096);
	for (size_t k = 0; k < moves; k++) {
		cr_assert_eq(pattern_check(TAG, 2 * k * 4096, to + k * 4096,
					   4096), 0, "moved page %zu", k);
		cr_assert_eq(pattern_check(TAG, (2 * k + 1) * 4096,
					   c.base + (2 * k + 1) * 4096, 4096),
			     0, "unmoved page %zu", 2 * k + 1);
	}
	munmap(to, moves * 4096);
	raw_close(&c);
	cr_assert(daemon_alive());
}

/* Touch every page of [base, base + len) for ever. */
static void *toucher(void *arg)
{
	struct raw *c = arg;

	for (;;)
		for (size_t i = 0; i < c->len; i += 4096)
			(void)*(volatile char *)(c->base + i);
	return NULL;
}

/*
 * A hostile client: while its faults are being served and parked (it
 * keeps dropping pages with MADV_DONTNEED, so REMOVE events are pending
 * when installs run), it clears O_NONBLOCK on its userfaultfd - a flag
 * of the open file, which it shares with the daemon - then exits. The
 * daemon must free the session and everything it held: once a session
 * stayed for good, its thread blocked in read().
 */
static void hostile_main(void *arg)
{
	const char *img = arg;
	struct raw c = raw_client(img, 4 * MIB, UFFD_FEATURE_EVENT_REMOVE);
	struct proto_range whole = { (uintptr_t)c.base, 4 * MIB, 0 };
	int fds[2] = { c.uffd, c.image };
	pthread_t t;

	if (raw_register_with(&c, &whole, 1, fds, 2, PROTO_REG_LAZY, NULL))
		_exit(1);
	pthread_create(&t, NULL, toucher, &c);
	for (int round = 0; round < 2000; round++) {
		madvise(c.base, 4 * MIB, MADV_DONTNEED);
		if (round == 1000)
			fcntl(c.uffd, F_SETFL,
			      fcntl(c.uffd, F_GETFL) & ~O_NONBLOCK);
	}
	_exit(0);
}

Test(daemon, client_clearing_o_nonblock_loses_nothing_of_the_daemon)
{
	const char *img = make_image("hostile", 4 * MIB, TAG);
	struct resources before, after;
	uint64_t end;

	before = resources_of(daemon_pid);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(run_in_child(hostile_main, (void *)img), -1);
	/* A deadline, not a wait: generous where TSan slows the daemon. */
	end = test_now_ns() + (UNDER_TSAN ? 120 : 20) * 1000000000ull;
	while (daemon_sessions() && test_now_ns() < end)
		sched_yield();
	cr_assert_eq(daemon_sessions(), 0, "a session outlived its client");
	/* Under TSan the daemon's first pthread_create() also starts the
	 * runtime's own background thread, which stays. */
	if (UNDER_TSAN && before.threads == 1)
		before.threads++;
	do
		after = resources_of(daemon_pid);
	while ((after.fds != before.fds || after.threads != before.threads) &&
	       test_now_ns() < end);
	cr_assert_eq(after.fds, before.fds);
	cr_assert_eq(after.threads, before.threads, "threads %ld -> %ld",
		     before.threads, after.threads);
	cr_assert(daemon_alive());
}

/* ------------------------------------------------------------------------
 * Restarts: the daemon killed, a new one adopts the session
 */

#define AFTER_KILL 4096 /* page completions kept after the kill point */

struct restarted {
	const char *image;
	size_t len;
	size_t kill_at;	/* page: tell the test when it is reached */
	bool lazy;
	int to_test;	/* the client writes: the kill point, its figure */
	int from_test;	/* the test writes: when the new daemon started */
};

/*
 * A client that reads and checks every page of its restore, in order,
 * tells the test when it reaches page kill_at, and keeps the time each of
 * the next pages came. Then it reads when the new daemon started and
 * answers the time from there to its first page served after it. Exit 0:
 * every byte right, and the daemon - the new one - finished the restore:
 * the library never took over.
 */
static void restarted_main(void *arg)
{
	const struct restarted *c = arg;
	struct faultd_restore_opts o = { .size = sizeof(o),
					 .flags = FAULTD_RESTORE_DAEMON |
						  (c->lazy ? FAULTD_RESTORE_LAZY
							   : 0),
					 .socket = sock };
	struct faultd_restore_progress p = { .size = sizeof(p) };
	uint64_t *t = calloc(AFTER_KILL, sizeof(*t)), t0, first = 0;
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	char *base;

	if (!t || faultd_ctx_create(NULL, &ctx) ||
	    faultd_restore(ctx, c->image, &o, &r))
		_exit(10);
	base = faultd_region_base(r);
	for (size_t i = 0; i < c->len / 4096; i++) {
		if (i == c->kill_at && write(c->to_test, "k", 1) != 1)
			_exit(11);
		if (pattern_check(TAG, i * 4096, base + i * 4096, 4096))
			_exit(12);
		if (i >= c->kill_at && i - c->kill_at < AFTER_KILL)
			t[i - c->kill_at] = test_now_ns();
	}
	if (read(c->from_test, &t0, sizeof(t0)) != sizeof(t0))
		_exit(13);
	for (size_t i = 0; i < AFTER_KILL && !first; i++)
		if (t[i] >= t0)
			first = t[i] - t0;
	if (c->lazy) { /* no wait: DONE comes once every page faulted */
		uint64_t end = test_now_ns() + 10000000000ull;

		do
			faultd_restore_progress(r, &p);
		while (!p.done && test_now_ns() < end);
	} else if (faultd_restore_wait(r) || faultd_restore_progress(r, &p)) {
		_exit(14);
	}
	if (!p.done || p.daemon_died)
		_exit(16);
	if (write(c->to_test, &first, sizeof(first)) != sizeof(first))
		_exit(15);
	faultd_ctx_destroy(ctx);
	_exit(0);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * One restore of @c with the daemon killed (kill -9) when the client
 * reaches c->kill_at, and a new daemon started at once. Returns the time
 * from the new daemon's start to the client's first page after it, ns.
 */
static uint64_t restart_once(struct restarted *c)
{
	int to_test[2], from_test[2];
	uint64_t t0, first;
	pid_t pid;
	char k;

	cr_assert_eq(pipe(to_test), 0);
	cr_assert_eq(pipe(from_test), 0);
	c->to_test = to_test[1];
	c->from_test = from_test[0];
	pid = fork();
	if (pid == 0)
		restarted_main(c);
	close(to_test[1]);
	close(from_test[0]);
	cr_assert_eq(read(to_test[0], &k, 1), 1, "client: %d", client_wait(pid));
	daemon_kill(daemon_pid, SIGKILL);
	t0 = test_now_ns();
	daemon_pid = daemon_start();
	cr_assert_eq(write(from_test[1], &t0, sizeof(t0)), sizeof(t0));
	if (read(to_test[0], &first, sizeof(first)) != sizeof(first))
		cr_assert_fail("the client ended with %d", client_wait(pid));
	cr_assert_eq(client_wait(pid), 0);
	close(to_test[0]);
	close(from_test[1]);
	return first;
}

/*
 * kill -9 of the daemon at FAULTD_RESTART_ROUNDS (20) moments of a
 * 512 MiB lazy restore, from its first page to its last, a new daemon
 * started each time: every byte right, the library never takes over, and
 * the time from the new start to the first page served is reported.
 */
Test(daemon, restarted_daemon_adopts_the_session, .timeout = 600)
{
	const char *env = getenv("FAULTD_RESTART_ROUNDS");
	unsigned int rounds = env ? (unsigned int)atoi(env) : 20;
	struct restarted c = { make_image("restart", 512 * MIB, TAG),
			       512 * MIB, .lazy = true };
	uint64_t *ms = calloc(rounds, sizeof(*ms));

	cr_assert(rounds > 0 && ms);
	for (unsigned int k = 0; k < rounds; k++) {
		c.kill_at = (c.len / 4096 - 1) * k / (rounds > 1 ? rounds - 1
								 : 1);
		ms[k] = restart_once(&c);
	}
	qsort(ms, rounds, sizeof(*ms), cmp_u64);
	cr_log_info("restart to first page served: median %.2f ms, max "
		    "%.2f ms (%u restarts)", (double)ms[rounds / 2] / 1e6,
		    (double)ms[rounds - 1] / 1e6, rounds);
	free(ms);
}

/* The same with the push running: pages in before the kill stay in. */
Test(daemon, restarted_daemon_adopts_a_pushing_session)
{
	struct restarted c = { make_image("restart-push", 256 * MIB, TAG),
			       256 * MIB };

	for (unsigned int k = 0; k < 4; k++) {
		c.kill_at = (c.len / 4096) * k / 4;
		restart_once(&c);
	}
}

/*
 * The keeper killed instead of the daemon: the daemon starts another and
 * gives it the session again; then the daemon is killed, and a new one
 * adopts the session from the new keeper.
 */
Test(daemon, keeper_killed_then_daemon_restarted)
{
	struct restarted c = { make_image("keeper", 64 * MIB, TAG), 64 * MIB,
			       .lazy = true, .kill_at = 4096 };
	pid_t old, now = 0;
	uint64_t end;

	daemon_status(&old);
	cr_assert_gt(old, 0);
	kill(old, SIGKILL);
	end = test_now_ns() + 20000000000ull;
	do
		daemon_status(&now);
	while ((now == old || now <= 0) && test_now_ns() < end);
	cr_assert(now > 0 && now != old, "no new keeper");
	restart_once(&c);
}

/* ------------------------------------------------------------------------
 * Working sets sent by hand: the daemon's own checks
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

/* A set of pages 0, 5, 10, ... (@n of them) of space @sp, at @name. */
static const char *set_write(const char *name, const struct wset_space *sp,
			     uint64_t n, uint64_t last)
{
	struct wset_space s = *sp;
	struct wset ws = { &s, 1, calloc(n, sizeof(struct wset_entry)), n };
	const char *path = path_of(name);

	cr_assert(ws.e);
	for (uint64_t i = 0; i < n; i++)
		ws.e[i] = (struct wset_entry){ 0, 0, i * 5 };
	if (last)
		ws.e[n - 1].page = last;
	cr_assert_eq(wset_save(path, &ws), 0);
	free(ws.e);
	return path;
}

/* The last PROGRESS's background pages, after @ms of them. */
static uint64_t raw_background_after(struct raw *c, unsigned int ms)
{
	uint64_t end = test_now_ns() + ms * 1000000ull, bg = UINT64_MAX;
	struct proto_progress p;
	const char *why;
	ssize_t n;

	while (test_now_ns() < end &&
	       (n = proto_recv(c->sock, &p, sizeof(p), NULL, 0, NULL)) > 0)
		if (!proto_check(&p, (size_t)n, &why) &&
		    (p.h.type == MSG_PROGRESS || p.h.type == MSG_DONE))
			bg = p.pages_background;
	cr_assert_neq(bg, UINT64_MAX, "no PROGRESS");
	return bg;
}

/* A lazy raw session replaying @set: what it put in before any fault. */
static uint64_t raw_replay(const char *img, size_t len, const char *set)
{
	struct raw c = raw_client(img, len, 0);
	struct proto_range whole = { (uintptr_t)c.base, len, 0 };
	int fd = open(set, O_RDONLY | O_CLOEXEC);
	int fds[3] = { c.uffd, c.image, fd };
	uint64_t bg;

	cr_assert(fd >= 0);
	cr_assert_eq(raw_register_with(&c, &whole, 1, fds, 3,
				       PROTO_REG_LAZY | PROTO_REG_WSET, NULL),
		     0, "the session goes on, with the set or without it");
	close(fd);
	bg = raw_background_after(&c, 500);
	cr_assert_eq(pattern_check(TAG, 0, c.base, len), 0);
	raw_close(&c);
	return bg;
}

Test(daemon, working_sets_are_checked_by_the_daemon)
{
	size_t len = 4 * MIB;
	const char *img = make_image("ws", len, TAG);
	const char *other = make_image("ws-other", len, TAG);
	struct wset_space mine, theirs;
	const char *good, *trunc, *beyond;
	struct stat st;

	image_space(img, &mine);
	image_space(other, &theirs);
	good = set_write("good.ws", &mine, 64, 0);
	trunc = set_write("trunc.ws", &mine, 64, 0);
	beyond = set_write("beyond.ws", &mine, 64, len / 4096);
	cr_assert_eq(stat(trunc, &st), 0);
	cr_assert_eq(truncate(trunc, st.st_size - 8), 0);
	cr_assert_eq(raw_replay(img, len, good), 64, "the set is replayed");
	cr_assert_eq(raw_replay(img, len, set_write("other.ws", &theirs, 64, 0)),
		     0, "a set of another image is not used");
	cr_assert_eq(raw_replay(img, len, trunc), 0);
	cr_assert_eq(raw_replay(img, len, beyond), 0);
	cr_assert(daemon_alive());
}

Test(daemon, working_set_descriptors_are_checked)
{
	size_t len = MIB;
	const char *img = make_image("wsd", len, TAG);
	struct raw c = raw_client(img, len, 0);
	struct proto_range whole = { (uintptr_t)c.base, len, 0 };
	int ro = open(img, O_RDONLY | O_CLOEXEC), p[2];
	int fds[4] = { c.uffd, c.image, ro, ro };

	cr_assert(ro >= 0);
	cr_assert_eq(pipe(p), 0);
	cr_assert_eq(raw_register_with(&c, &whole, 1, fds, 3,
				       PROTO_REG_RECORD, NULL),
		     -EINVAL, "a record file open for reading only");
	raw_close(&c);
	c = raw_client(img, len, 0);
	fds[0] = c.uffd;
	fds[1] = c.image;
	fds[2] = p[0];
	cr_assert_eq(raw_register_with(&c, &whole, 1, fds, 3, PROTO_REG_WSET,
				       NULL),
		     -EINVAL, "a set that is not a regular file");
	raw_close(&c);
	c = raw_client(img, len, 0);
	fds[0] = c.uffd;
	fds[1] = c.image;
	cr_assert_eq(raw_register_with(&c, &whole, 1, fds, 2,
				       PROTO_REG_RECORD | PROTO_REG_WSET, NULL),
		     -EPROTO, "fewer descriptors than the flags say");
	raw_close(&c);
	/* More than the flags say, even within the eight a packet may
	 * carry: the daemon used to serve it with the first four. */
	for (unsigned int extra = 1; extra <= 4; extra++) {
		int more[8];
		int wr = open(path_of("rec.ws"), O_RDWR | O_CREAT | O_CLOEXEC,
			      0600);
		int set = open(path_of("empty.ws"),
			       O_RDWR | O_CREAT | O_CLOEXEC, 0600);

		cr_assert(wr >= 0 && set >= 0);
		c = raw_client(img, len, 0);
		more[0] = c.uffd;
		more[1] = c.image;
		more[2] = wr;
		more[3] = set;
		for (unsigned int i = 0; i < extra; i++)
			more[4 + i] = ro;
		cr_assert_eq(raw_register_fds(&c, &whole, more, 4 + extra,
					      PROTO_REG_LAZY | PROTO_REG_RECORD |
						      PROTO_REG_WSET),
			     -EPROTO, "%u descriptors more than the flags say",
			     extra);
		raw_close(&c);
		close(wr);
		close(set);
	}
	close(ro);
	close(p[0]);
	close(p[1]);
	cr_assert(daemon_alive());
}

/*
 * A raw lazy session with a record file: the client touches 10 pages and
 * closes; the daemon writes exactly those pages, in the order touched.
 */
Test(daemon, the_daemon_records_the_pages_touched)
{
	size_t len = 4 * MIB;
	const char *img = make_image("wsr", len, TAG);
	const char *rec = path_of("rec.ws");
	struct raw c = raw_client(img, len, 0);
	struct proto_range whole = { (uintptr_t)c.base, len, 0 };
	int fd = open(rec, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	int fds[3] = { c.uffd, c.image, fd };
	const uint64_t pages[10] = { 7, 3, 900, 1, 2, 512, 513, 4, 1000, 9 };
	uint64_t end;
	struct wset ws;
	const char *why;
	struct stat st;

	cr_assert(fd >= 0);
	cr_assert_eq(raw_register_with(&c, &whole, 1, fds, 3,
				       PROTO_REG_LAZY | PROTO_REG_RECORD, NULL),
		     0);
	close(fd);
	for (int i = 0; i < 10; i++)
		cr_assert_eq(pattern_check(TAG, pages[i] * 4096,
					   c.base + pages[i] * 4096, 4096), 0);
	close(c.sock);
	c.sock = -1;
	end = test_now_ns() + 10000000000ull;
	while ((stat(rec, &st) || !st.st_size) && test_now_ns() < end)
		usleep(10000);
	cr_assert_eq(wset_load(rec, NULL, &ws, &why), 0, "%s", why);
	cr_assert_eq(ws.nr, 10);
	for (int i = 0; i < 10; i++)
		cr_assert_eq(ws.e[i].page, pages[i], "entry %d", i);
	wset_free(&ws);
	raw_close(&c);
}

/*
 * The faults a reader in order takes over @len bytes of data: the first
 * window is 64 KiB (fault-around), each next one twice the last, up to
 * 2 MiB (engine_int.h AROUND_SEQ_MAX, space.c around_now()).
 */
static uint64_t in_order_faults(uint64_t len)
{
	uint64_t n = 0, win = 64 << 10;

	for (uint64_t at = 0; at < len; at += win, n++)
		win = n ? (win * 2 > 2 * MIB ? 2 * MIB : win * 2) : win;
	return n;
}

/*
 * Pages known to be zero are never read and come in as ranges: a 64 MiB
 * image of 4 MiB of data and 60 MiB of zeros (no extent), touched page by
 * page through a lazy raw session: the data part takes a fault per window
 * (64 KiB, then doubling for a reader in order: in_order_faults()), the
 * zeros one per 2 MiB (one UFFDIO_ZEROPAGE over the zero extent around
 * the fault, space.c ZERO_AROUND), and read zeros. The counts are the
 * daemon's, in its DONE.
 */
Test(daemon, zero_extents_come_in_as_ranges)
{
	size_t len = 64 * MIB, data = 4 * MIB;
	struct faultd_region_opts o = { .size = sizeof(o), .length = len };
	const char *img = path_of("sparse");
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	struct raw c;
	struct proto_range whole;
	struct proto_progress p = { 0 };
	const char *why;
	uint64_t t0, t1, t2;
	ssize_t n;
	size_t bad = 0;

	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	pattern_fill(TAG, 0, faultd_region_base(r), data);
	cr_assert_eq(faultd_checkpoint(r, img, NULL), 0);
	faultd_ctx_destroy(ctx);
	c = raw_client(img, len, 0);
	whole = (struct proto_range){ (uintptr_t)c.base, len, 0 };
	cr_assert_eq(raw_register_with(&c, &whole, 1, (int[]){ c.uffd, c.image },
				       2, PROTO_REG_LAZY, NULL),
		     0);
	t0 = test_now_ns();
	cr_assert_eq(pattern_check(TAG, 0, c.base, data), 0);
	t1 = test_now_ns();
	for (size_t at = data; at < len; at += 4096)
		bad += *(volatile char *)(c.base + at) != 0;
	t2 = test_now_ns();
	cr_assert_eq(bad, 0);
	do /* every page was touched: DONE comes, with the last counts */
		n = proto_recv(c.sock, &p, sizeof(p), NULL, 0, NULL);
	while (n > 0 && !proto_check(&p, (size_t)n, &why) &&
	       p.h.type != MSG_DONE);
	cr_assert_eq(p.h.type, MSG_DONE, "no DONE (%zd)", n);
	cr_assert_eq(p.faults, in_order_faults(data) + (len - data) / (2 * MIB),
		     "%llu faults", (unsigned long long)p.faults);
	cr_log_info("touch: data %.2f GB/s (%llu faults), zeros %.2f "
		    "GB/s (a fault per 2 MiB)",
		    (double)data / (double)(t1 - t0),
		    (unsigned long long)in_order_faults(data),
		    (double)(len - data) / (double)(t2 - t1));
	raw_close(&c);
}

/* ------------------------------------------------------------------------
 * systemd's file-descriptor store, with the test as systemd
 */

#define STORE_MAX 128

/* What a service manager keeps for the daemon: its FDSTORE= fds. */
struct fdstore {
	pthread_mutex_t lock;	/* the drainer adds, the test reads */
	int ns;			/* NOTIFY_SOCKET */
	atomic_bool stop;
	int n;
	int fds[STORE_MAX];
	char names[STORE_MAX][64];
};

static void store_remove(struct fdstore *st, const char *name)
{
	for (int i = 0; i < st->n; i++)
		if (!strcmp(st->names[i], name)) {
			close(st->fds[i]);
			st->fds[i] = st->fds[--st->n];
			if (i != st->n) /* the last one moves into its place */
				memcpy(st->names[i], st->names[st->n],
				       sizeof(st->names[i]));
			i--;
		}
}

/*
 * Read every notification waiting on @ns, as systemd would. Each is
 * received and recorded under st->lock: the drainer thread and the test
 * both drain, and a notification one of them has received but not yet
 * recorded would be missing from what the other sees as drained (and
 * two could be recorded out of their order).
 */
static void store_drain(int ns, struct fdstore *st)
{
	for (;;) {
		char buf[512], *name;
		union {
			char c[CMSG_SPACE(16 * sizeof(int))];
			struct cmsghdr align;
		} u;
		struct iovec iov = { buf, sizeof(buf) - 1 };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
				     .msg_control = u.c,
				     .msg_controllen = sizeof(u.c) };
		struct cmsghdr *cm;
		ssize_t n;
		int fd = -1;

		pthread_mutex_lock(&st->lock);
		n = recvmsg(ns, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0) {
			pthread_mutex_unlock(&st->lock);
			return;
		}
		buf[n] = 0;
		for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
			if (cm->cmsg_type == SCM_RIGHTS)
				memcpy(&fd, CMSG_DATA(cm), sizeof(fd));
		name = strstr(buf, "FDNAME=");
		cr_assert(name, "a notification without FDNAME: %s", buf);
		name += 7;
		name[strcspn(name, "\n")] = 0;
		store_remove(st, name); /* a name is kept once */
		if (!strstr(buf, "FDSTOREREMOVE=1")) {
			cr_assert(strstr(buf, "FDSTORE=1") && fd >= 0 &&
				  st->n < STORE_MAX);
			st->fds[st->n] = fd;
			snprintf(st->names[st->n++], 64, "%s", name);
		}
		pthread_mutex_unlock(&st->lock);
	}
}

/* Drain NOTIFY_SOCKET all the time, as systemd does: a full queue of a
 * datagram socket blocks the sender. */
static void *store_drainer(void *arg)
{
	struct fdstore *st = arg;

	while (!atomic_load(&st->stop)) {
		struct pollfd p = { .fd = st->ns, .events = POLLIN };

		if (poll(&p, 1, 50) > 0)
			store_drain(st->ns, st);
	}
	return NULL;
}

static int store_count(struct fdstore *st)
{
	int n;

	pthread_mutex_lock(&st->lock);
	n = st->n;
	pthread_mutex_unlock(&st->lock);
	return n;
}

/*
 * Start the daemon the way systemd starts a unit with
 * FileDescriptorStoreMax= and socket activation: the listening socket
 * @ls and what the store holds as LISTEN_FDS, with LISTEN_FDNAMES, and
 * NOTIFY_SOCKET.
 */
static pid_t daemon_start_stored(int ls, const char *notify,
				 const struct fdstore *st)
{
	const char *exe = getenv("FAULTD_DAEMON");
	pid_t pid = fork();

	cr_assert(exe && pid >= 0);
	if (pid == 0) {
		char me[16], n[16], names[STORE_MAX * 64 + 32];
		int tmp[STORE_MAX + 1];

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		tmp[0] = fcntl(ls, F_DUPFD_CLOEXEC, 100);
		for (int i = 0; i < st->n; i++)
			tmp[i + 1] = fcntl(st->fds[i], F_DUPFD_CLOEXEC, 100);
		strcpy(names, "faultd.socket");
		for (int i = 0; i <= st->n; i++) {
			if (dup2(tmp[i], 3 + i) < 0)
				_exit(127);
			if (i) {
				strcat(names, ":");
				strcat(names, st->names[i - 1]);
			}
		}
		snprintf(me, sizeof(me), "%d", getpid());
		snprintf(n, sizeof(n), "%d", st->n + 1);
		setenv("LISTEN_PID", me, 1);
		setenv("LISTEN_FDS", n, 1);
		setenv("LISTEN_FDNAMES", names, 1);
		setenv("NOTIFY_SOCKET", notify, 1);
		execl(exe, exe, "--fd-store", (char *)NULL);
		_exit(127);
	}
	return pid;
}

/*
 * Under systemd the descriptors live in the service's fd store: kill -9
 * of the daemon mid-restore, and the daemon systemd starts again adopts
 * the session from what the store gives it back.
 */
Test(daemon, fd_store_keeps_sessions_the_systemd_way)
{
	struct restarted c = { make_image("store", 64 * MIB, TAG), 64 * MIB,
			       .lazy = true, .kill_at = 8192 };
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	const char *notify = path_of("notify.sock");
	int ns = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int ls = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct fdstore *st = calloc(1, sizeof(*st));
	int to_test[2], from_test[2], status;
	uint64_t t0, first;
	pthread_t drainer;
	pid_t pid;
	char k;

	cr_assert(st && ns >= 0 && ls >= 0);
	pthread_mutex_init(&st->lock, NULL);
	st->ns = ns;
	daemon_kill(daemon_pid, SIGTERM); /* the suite's: this one is ours */
	daemon_pid = 0;
	unlink(sock);
	strcpy(a.sun_path, sock);
	cr_assert_eq(bind(ls, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(ls, 16), 0);
	strcpy(a.sun_path, notify);
	cr_assert_eq(bind(ns, (struct sockaddr *)&a, sizeof(a)), 0);
	daemon_pid = daemon_start_stored(ls, notify, st);
	cr_assert_eq(pipe(to_test), 0);
	cr_assert_eq(pipe(from_test), 0);
	c.to_test = to_test[1];
	c.from_test = from_test[0];
	/* The client is forked before the drainer starts: a fork while
	 * another thread is inside the allocator (as a thread starting
	 * under ASan is) leaves the allocator's lock held in the child,
	 * whose first thread then waits for it for ever (seen: its
	 * library's watcher never read DONE). The daemon waits on the
	 * notification socket meanwhile, at most until the drainer runs. */
	pid = fork();
	if (pid == 0)
		restarted_main(&c);
	cr_assert_eq(pthread_create(&drainer, NULL, store_drainer, st), 0);
	close(to_test[1]);
	close(from_test[0]);
	cr_assert_eq(read(to_test[0], &k, 1), 1);
	daemon_kill(daemon_pid, SIGKILL);
	/* What was sent before the kill has all arrived: the socket is
	 * empty once drained after the daemon's death. */
	store_drain(ns, st);
	cr_assert_gt(store_count(st), 0, "nothing was put in the fd store");
	t0 = test_now_ns();
	pthread_mutex_lock(&st->lock); /* the child starts with a copy */
	daemon_pid = daemon_start_stored(ls, notify, st);
	pthread_mutex_unlock(&st->lock);
	cr_assert_eq(write(from_test[1], &t0, sizeof(t0)), sizeof(t0));
	if (read(to_test[0], &first, sizeof(first)) != sizeof(first))
		cr_assert_fail("the client ended with %d", client_wait(pid));
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && !WEXITSTATUS(status),
		  "the client ended with %#x", status);
	cr_log_info("fd store: restart to first page served %.2f ms",
		    (double)first / 1e6);
	daemon_kill(daemon_pid, SIGTERM);
	daemon_pid = 0;
	atomic_store(&st->stop, true);
	pthread_join(drainer, NULL);
	store_drain(ns, st);
	cr_assert_eq(store_count(st), 0,
		     "the session's descriptors stayed in the store");
	close(ls);
	close(ns);
	free(st);
}
