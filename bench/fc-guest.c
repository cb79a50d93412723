// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * fc-guest.c - a guest restored as Firecracker restores it, and faultd
 * firecracker as its handler (fc-guest.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "compat.h"
#include "fc-guest.h"

#define ALIGN_2M (2ul << 20)
#define READY_MS 60000

static int guest_uffd(void)
{
	struct uffdio_api api = { .api = UFFD_API,
				  .features = UFFD_FEATURE_EVENT_REMOVE };
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);

	if (fd >= 0 && ioctl(fd, UFFDIO_API, &api)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* One region of the whole memory, and the userfaultfd with it. */
static int send_handshake(struct fc_guest *g, const char *sock)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char json[256], ctl[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { json, 0 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);

	iov.iov_len = (size_t)snprintf(json, sizeof(json),
		"[{\"base_host_virt_addr\":%" PRIuPTR ",\"size\":%" PRIu64
		",\"offset\":0,\"page_size\":4096,\"page_size_kib\":4096}]",
		(uintptr_t)g->base, g->size);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &g->uffd, sizeof(int));
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
	g->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (g->sock < 0 || connect(g->sock, (struct sockaddr *)&a, sizeof(a)) ||
	    sendmsg(g->sock, &m, MSG_NOSIGNAL) != (ssize_t)iov.iov_len)
		return -errno;
	g->sent_ns = now_ns();
	return 0;
}

int fc_guest_restore(struct fc_guest *g, const char *sock, uint64_t size)
{
	struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
	uint8_t *p = mmap(NULL, size + ALIGN_2M, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	*g = (struct fc_guest){ .size = size, .pages = size / 4096,
				.uffd = -1, .sock = -1 };
	if (p == MAP_FAILED)
		return -ENOMEM;
	g->base = (uint8_t *)(((uintptr_t)p + ALIGN_2M - 1) & ~(ALIGN_2M - 1));
	if (g->base > p)
		munmap(p, (size_t)(g->base - p));
	munmap(g->base + size, (size_t)(p + size + ALIGN_2M - g->base - size));
	g->uffd = guest_uffd();
	reg.range = (struct uffdio_range){ (uintptr_t)g->base, size };
	if (g->uffd < 0 || ioctl(g->uffd, UFFDIO_REGISTER, &reg))
		return -errno;
	return send_handshake(g, sock);
}

void fc_guest_end(struct fc_guest *g)
{
	if (g->sock >= 0)
		close(g->sock);
	if (g->uffd >= 0)
		close(g->uffd);
	if (g->base)
		munmap(g->base, g->size);
	g->sock = g->uffd = -1;
	g->base = NULL;
}

bool fc_faultd_exe(char *exe, size_t len)
{
	const char *env = getenv("FAULTD_DAEMON");
	ssize_t n = readlink("/proc/self/exe", exe, len - 32);

	if (env) {
		snprintf(exe, len, "%s", env);
	} else if (n > 0) {
		exe[n] = 0;
		strcat(dirname(exe), "/../daemon/faultd");
	}
	return (env || n > 0) && !access(exe, X_OK);
}

/* Wait up to READY_MS for READY=1 on @nfd. */
static int wait_ready(int nfd)
{
	struct pollfd p = { .fd = nfd, .events = POLLIN };
	char buf[64];
	ssize_t n;

	for (;;) {
		if (poll(&p, 1, READY_MS) != 1)
			return -ETIMEDOUT;
		n = read(nfd, buf, sizeof(buf) - 1);
		if (n <= 0)
			return -EIO;
		buf[n] = 0;
		if (strstr(buf, "READY=1"))
			return 0;
	}
}

static void faultd_child(const char *exe, const char *const *argv,
			 const char *notify, int out, const char *log)
{
	int null = open("/dev/null", O_WRONLY | O_CLOEXEC);

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	dup2(out >= 0 ? out : null, 1);
	if (log) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		dup2(fd >= 0 ? fd : null, 2);
	}
	setenv("NOTIFY_SOCKET", notify, 1);
	execv(exe, (char *const *)argv);
	_exit(127);
}

pid_t fc_faultd_start(const char *sock, const char *notify,
		      const char *const *args, int *out, const char *log,
		      const char **why)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	const char *argv[32] = { NULL, "firecracker", "--socket", sock };
	int nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0), p[2] = { -1, -1 };
	char exe[PATH_MAX];
	unsigned int n = 4;
	pid_t pid = -1;

	*why = "no faultd next to faultd-bench (set FAULTD_DAEMON)";
	if (!fc_faultd_exe(exe, sizeof(exe)) || nfd < 0)
		goto out;
	argv[0] = exe;
	for (unsigned int i = 0; args && args[i] && n < 31; i++)
		argv[n++] = args[i];
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", notify);
	unlink(notify);
	*why = "cannot bind the notify socket, or make a pipe";
	if (bind(nfd, (struct sockaddr *)&a, sizeof(a)) ||
	    (out && pipe2(p, O_CLOEXEC)))
		goto out;
	pid = fork();
	if (pid == 0)
		faultd_child(exe, argv, notify, p[1], log);
	*why = "faultd firecracker did not get ready";
	if (pid > 0 && wait_ready(nfd)) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		pid = -1;
	}
	if (out)
		*out = pid > 0 ? p[0] : -1;
	if (p[1] >= 0)
		close(p[1]);
	if (pid < 0 && p[0] >= 0)
		close(p[0]);
out:
	if (nfd >= 0)
		close(nfd);
	return pid;
}

int fc_handler_wait(pid_t pid)
{
	int status;

	if (waitpid(pid, &status, 0) != pid)
		return -errno;
	return WIFEXITED(status) && !WEXITSTATUS(status) ? 0 : -EIO;
}

uint64_t fc_mix(uint64_t x)
{
	uint64_t z = x * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

int fc_mem_file_write(const char *path, uint64_t size)
{
	uint64_t *buf = malloc(1 << 20);
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600), ret = 0;

	if (fd < 0 || !buf) {
		ret = fd < 0 ? -errno : -ENOMEM;
		if (fd >= 0)
			close(fd);
		free(buf);
		return ret;
	}
	for (uint64_t at = 0; !ret && at < size; at += 1 << 20) {
		for (size_t i = 0; i < (1 << 20) / 8; i++)
			buf[i] = fc_mix(at / 8 + i);
		if (pwrite(fd, buf, 1 << 20, (off_t)at) != 1 << 20)
			ret = -EIO;
	}
	close(fd);
	free(buf);
	return ret;
}
