// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * fc-example.c - Firecracker's example on-demand page-fault handler,
 * written again in C (fc-example.h). What it keeps of the original: one
 * thread polling the connection and the userfaultfds; a receive buffer of
 * 1,024 bytes for the handshake; the whole-file check; one event per
 * read(); one page per fault, UFFDIO_COPY with wake from a MAP_POPULATE
 * mapping of the file; EEXIST taken as done; a fault that got EAGAIN kept
 * and served after the next reading of events, without waiting in
 * poll(); REMOVE answered by unregistering the range; any other event or
 * error fatal. What it does not: it returns where the example panics, and
 * it kills nobody (the example's panic hook SIGKILLs Firecracker). And
 * one fix: a fault read in the same round as, but after, the REMOVE of
 * its range gets ENOENT from UFFDIO_COPY once the range is unregistered
 * (the unregistering already woke the thread, which then got a zero page
 * from the kernel); the example panics there, on any guest that touches
 * ballooned memory soon after the inflation. Here it counts as done.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <linux/userfaultfd.h>

#include "fc-example.h"
#include "fc_json.h"

#define RECV_MAX 1024	/* the example's message_buf */
#define MAX_UFFDS 16
#define MAX_KEPT 4096	/* faults kept for the next round, per uffd */

struct handler {
	int uffd;
	struct fc_handshake hs;
	size_t page_size;	/* of the first region, as the example */
	struct uffd_msg kept[MAX_KEPT];
	size_t nkept;
	struct uffdio_range *gone;	/* the ranges unregistered */
	size_t ngone;
};

struct runtime {
	struct fc_example *ex;
	int stream;
	const uint8_t *backing;
	uint64_t backing_size;
	struct handler *h[MAX_UFFDS];
	unsigned int nh;
};

static int fail(struct fc_example *ex, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(struct fc_example *ex, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ex->why, sizeof(ex->why), fmt, ap);
	va_end(ap);
	return err;
}

/* UffdHandler::get_mappings_and_file(): one recvmsg, the fd with it. */
static int recv_handshake(struct runtime *rt, char *buf, size_t *len,
			  int *fd)
{
	char ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = buf, .iov_len = RECV_MAX };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	struct cmsghdr *c;
	ssize_t n = recvmsg(rt->stream, &m, MSG_CMSG_CLOEXEC);

	*fd = -1;
	if (n < 0)
		return fail(rt->ex, -errno, "recvmsg: %s", strerror(errno));
	c = CMSG_FIRSTHDR(&m);
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
	    c->cmsg_len == CMSG_LEN(sizeof(int)))
		memcpy(fd, CMSG_DATA(c), sizeof(*fd));
	*len = (size_t)n;
	if (!n && *fd < 0)
		return 1; /* the peer closed the connection */
	if (*fd < 0)
		return fail(rt->ex, -EBADMSG, "a handshake of %zd bytes without"
			    " a userfaultfd", n);
	return 0;
}

/* UffdHandler::from_unix_stream(): parse, check, keep the uffd. */
static int add_handler(struct runtime *rt)
{
	char buf[RECV_MAX], why[FC_WHY_MAX];
	struct handler *h;
	uint64_t memsize = 0;
	size_t len = 0;
	int fd, ret = recv_handshake(rt, buf, &len, &fd);

	if (ret)
		return ret;
	if (rt->nh == MAX_UFFDS) {
		close(fd);
		return fail(rt->ex, -EMFILE, "more than %d userfaultfds",
			    MAX_UFFDS);
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		close(fd);
		return fail(rt->ex, -ENOMEM, "out of memory");
	}
	h->uffd = fd;
	rt->h[rt->nh++] = h;
	ret = fc_json_parse(buf, len, &h->hs, why, sizeof(why));
	if (ret)
		return fail(rt->ex, ret, "cannot parse the handshake: %s", why);
	if (!h->hs.nr)
		return fail(rt->ex, -EINVAL, "a handshake without regions");
	for (size_t i = 0; i < h->hs.nr; i++)
		memsize += h->hs.r[i].size;
	h->page_size = h->hs.r[0].page_size;
	if (memsize != rt->backing_size)
		return fail(rt->ex, -EINVAL, "the regions have %llu bytes, the "
			    "memory file %llu", (unsigned long long)memsize,
			    (unsigned long long)rt->backing_size);
	if (!h->page_size || h->page_size & (h->page_size - 1))
		return fail(rt->ex, -EINVAL, "page size %zu", h->page_size);
	rt->ex->st.handshakes++;
	return 0;
}

/* UffdHandler::read_event(): one message, or none (-EAGAIN). */
static int read_event(struct runtime *rt, struct handler *h,
		      struct uffd_msg *msg)
{
	ssize_t n = read(h->uffd, msg, sizeof(*msg));

	if (n == (ssize_t)sizeof(*msg))
		return 0;
	if (n < 0 && errno == EAGAIN)
		return -EAGAIN;
	if (n < 0)
		return fail(rt->ex, -errno, "reading the userfaultfd: %s",
			    strerror(errno));
	return fail(rt->ex, -EIO, "read %zd bytes of a uffd_msg", n);
}

/* Was @addr in a range unregistered after a REMOVE? */
static bool unregistered(const struct handler *h, uint64_t addr)
{
	for (size_t i = 0; i < h->ngone; i++)
		if (addr - h->gone[i].start < h->gone[i].len)
			return true;
	return false;
}

/* UffdHandler::serve_pf(): true when done, false to keep the fault. */
static int serve_pf(struct runtime *rt, struct handler *h, uint64_t addr)
{
	uint64_t dst = addr & ~(uint64_t)(h->page_size - 1), src;
	struct uffdio_copy c = { .dst = dst, .len = h->page_size };
	const struct fc_region *r = NULL;

	for (size_t i = 0; i < h->hs.nr && !r; i++)
		if (dst >= h->hs.r[i].base &&
		    dst < h->hs.r[i].base + h->hs.r[i].size)
			r = &h->hs.r[i];
	if (!r)
		return fail(rt->ex, -EFAULT, "a fault at %#llx, in no region",
			    (unsigned long long)addr);
	src = r->offset + (dst - r->base);
	if (rt->ex->flags & FC_EXAMPLE_SKEW)
		src = (src + h->page_size) % rt->backing_size;
	c.src = (uintptr_t)(rt->backing + src);
	if (ioctl(h->uffd, UFFDIO_COPY, &c) == 0 && c.copy > 0) {
		rt->ex->st.copies++;
		return true;
	}
	if (errno == EAGAIN && (c.copy == 0 || c.copy == -EAGAIN)) {
		rt->ex->st.eagain++;
		return false;
	}
	if (errno == EEXIST) {
		rt->ex->st.eexist++;
		return true;
	}
	if (errno == ENOENT && unregistered(h, dst)) {
		rt->ex->st.enoent++;
		return true;
	}
	return fail(rt->ex, -errno, "UFFDIO_COPY at %#llx: %s",
		    (unsigned long long)dst, strerror(errno));
}

/* UffdHandler::unregister_range(). */
static int unregister_range(struct runtime *rt, struct handler *h,
			    const struct uffd_msg *msg)
{
	uint64_t start = msg->arg.remove.start, end = msg->arg.remove.end;
	struct uffdio_range range = { .start = start, .len = end - start };
	struct uffdio_range *gone;

	rt->ex->st.removes++;
	if (rt->ex->flags & FC_EXAMPLE_IGNORE_REMOVE)
		return 0;
	if ((start | end) & (h->page_size - 1) || end <= start)
		return fail(rt->ex, -EINVAL, "a REMOVE of [%#llx, %#llx)",
			    (unsigned long long)start,
			    (unsigned long long)end);
	if (ioctl(h->uffd, UFFDIO_UNREGISTER, &range))
		return fail(rt->ex, -errno, "UFFDIO_UNREGISTER: %s",
			    strerror(errno));
	gone = realloc(h->gone, (h->ngone + 1) * sizeof(*gone));
	if (!gone)
		return fail(rt->ex, -ENOMEM, "out of memory");
	h->gone = gone;
	h->gone[h->ngone++] = range;
	return 0;
}

static int handle_event(struct runtime *rt, struct handler *h,
			const struct uffd_msg *msg)
{
	int ret;

	switch (msg->event) {
	case UFFD_EVENT_PAGEFAULT:
		ret = serve_pf(rt, h, msg->arg.pagefault.address);
		if (ret == false) {
			if (h->nkept == MAX_KEPT)
				return fail(rt->ex, -ENOBUFS, "more than %d "
					    "faults kept", MAX_KEPT);
			h->kept[h->nkept++] = *msg;
		}
		return ret < 0 ? ret : 0;
	case UFFD_EVENT_REMOVE:
		return unregister_range(rt, h, msg);
	default:
		return fail(rt->ex, -EPROTO, "unexpected event %u on the "
			    "userfaultfd", msg->event);
	}
}

/*
 * The on_demand_handler closure: the kept faults, then every event there
 * is, in order; again while faults are kept (no poll in between: the
 * REMOVE that made them wait is read by the next round).
 */
static int dispatch(struct runtime *rt, struct handler *h)
{
	struct uffd_msg todo[MAX_KEPT + 64];
	size_t n;
	int ret = -EAGAIN;

	do {
		rt->ex->st.rounds++;
		memcpy(todo, h->kept, h->nkept * sizeof(todo[0]));
		n = h->nkept;
		h->nkept = 0;
		while (n < sizeof(todo) / sizeof(todo[0]) &&
		       !(ret = read_event(rt, h, &todo[n]))) {
			if (todo[n].event == UFFD_EVENT_PAGEFAULT)
				rt->ex->st.faults++;
			n++;
		}
		if (ret != -EAGAIN && ret)
			return ret;
		for (size_t i = 0; i < n; i++) {
			ret = handle_event(rt, h, &todo[i]);
			if (ret)
				return ret;
		}
	} while (h->nkept);
	return 0;
}

/* Runtime::run(): poll the stop fd, the connection and the uffds. */
static int run(struct runtime *rt)
{
	struct pollfd p[MAX_UFFDS + 2];
	unsigned int n;
	int ret;

	for (;;) {
		p[0] = (struct pollfd){ .fd = rt->ex->stop_fd, .events = POLLIN };
		p[1] = (struct pollfd){ .fd = rt->stream, .events = POLLIN };
		for (n = 0; n < rt->nh; n++)
			p[n + 2] = (struct pollfd){ .fd = rt->h[n]->uffd,
						    .events = POLLIN };
		if (poll(p, n + 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return fail(rt->ex, -errno, "poll: %s", strerror(errno));
		}
		if (p[0].revents)
			return 0;
		for (unsigned int i = 0; i < n; i++) {
			ret = p[i + 2].revents ? dispatch(rt, rt->h[i]) : 0;
			if (ret)
				return ret;
		}
		if (p[1].revents) {
			ret = add_handler(rt);
			if (ret)
				return ret < 0 ? ret : 0;
		}
	}
}

/* Runtime::new(): the whole file, mapped and read in. */
static int map_backing(struct runtime *rt)
{
	struct stat st;
	int fd = open(rt->ex->mem_file, O_RDONLY | O_CLOEXEC), ret;
	void *p;

	if (fd < 0 || fstat(fd, &st)) {
		ret = fail(rt->ex, -errno, "%s: %s", rt->ex->mem_file,
			   strerror(errno));
		if (fd >= 0)
			close(fd);
		return ret;
	}
	rt->backing_size = (uint64_t)st.st_size;
	p = st.st_size ? mmap(NULL, (size_t)st.st_size, PROT_READ,
			      MAP_PRIVATE | MAP_POPULATE, fd, 0)
		       : MAP_FAILED;
	close(fd);
	if (p == MAP_FAILED)
		return fail(rt->ex, -EINVAL, "mmap of the memory file failed");
	rt->backing = p;
	return 0;
}

int fc_example_serve(struct fc_example *ex)
{
	struct runtime rt = { .ex = ex };
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int ret;

	memset(&ex->st, 0, sizeof(ex->st));
	ex->why[0] = 0;
	ret = map_backing(&rt);
	if (ret)
		return ret;
	if (ex->ready_fd >= 0 && write(ex->ready_fd, "r", 1) != 1) {
		ret = fail(ex, -errno, "ready_fd: %s", strerror(errno));
		goto unmap;
	}
	rt.stream = accept4(ex->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	if (rt.stream < 0) {
		ret = fail(ex, -errno, "accept: %s", strerror(errno));
		goto unmap;
	}
	if (!getsockopt(rt.stream, SOL_SOCKET, SO_PEERCRED, &cred, &len))
		ex->st.peer = cred.pid;
	ret = run(&rt);
	for (unsigned int i = 0; i < rt.nh; i++) {
		close(rt.h[i]->uffd);
		free(rt.h[i]->gone);
		free(rt.h[i]);
	}
	close(rt.stream);
unmap:
	munmap((void *)rt.backing, rt.backing_size);
	return ret;
}

/* ------------------------------------------------------------------------
 * faultd-bench fc-example SOCKET MEMFILE
 */

/* Bound under another name, then renamed: SOCKET appears listening. */
static int listen_at(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || snprintf(a.sun_path, sizeof(a.sun_path), "%s.%d",
			       path, (int)getpid()) >=
			      (int)sizeof(a.sun_path)) {
		fprintf(stderr, "fc-example: socket %s: %s\n", path,
			fd < 0 ? strerror(errno) : "path too long");
		return -1;
	}
	unlink(a.sun_path);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 16) ||
	    rename(a.sun_path, path)) {
		fprintf(stderr, "fc-example: %s: %s\n", path, strerror(errno));
		unlink(a.sun_path);
		close(fd);
		return -1;
	}
	return fd;
}

int fc_example_main(int argc, char **argv)
{
	struct fc_example ex = { .stop_fd = -1, .ready_fd = -1 };
	int ret;

	for (int i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "--ignore-remove"))
			ex.flags |= FC_EXAMPLE_IGNORE_REMOVE;
		else if (!strcmp(argv[i], "--skew"))
			ex.flags |= FC_EXAMPLE_SKEW;
		else
			argc = 0;
	}
	if (argc < 3) {
		fprintf(stderr, "usage: faultd-bench fc-example SOCKET MEMFILE "
				"[--ignore-remove] [--skew]\n");
		return 2;
	}
	ex.mem_file = argv[2];
	ex.listen_fd = listen_at(argv[1]);
	if (ex.listen_fd < 0)
		return 2;
	printf("{\"listening\":\"%s\"}\n", argv[1]);
	fflush(stdout);
	ret = fc_example_serve(&ex);
	close(ex.listen_fd);
	unlink(argv[1]);
	printf("{\"handler\":\"fc-example\",\"handshakes\":%llu,\"faults\":%llu"
	       ",\"copies\":%llu,\"eexist\":%llu,\"eagain\":%llu,\"enoent\":"
	       "%llu,\"removes\":%llu,\"rounds\":%llu,\"peer\":%d,\"ok\":%s}\n",
	       (unsigned long long)ex.st.handshakes,
	       (unsigned long long)ex.st.faults,
	       (unsigned long long)ex.st.copies,
	       (unsigned long long)ex.st.eexist,
	       (unsigned long long)ex.st.eagain,
	       (unsigned long long)ex.st.enoent,
	       (unsigned long long)ex.st.removes,
	       (unsigned long long)ex.st.rounds, (int)ex.st.peer,
	       ret ? "false" : "true");
	if (ret)
		fprintf(stderr, "fc-example: %s\n", ex.why);
	return ret ? 1 : 0;
}
