// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * peer.c - who is at the other end of a connection, bound at accept, and
 * reading its mappings with its own rights.
 *
 * A session belongs to the process that connected and to the credentials
 * it had then: SO_PEERCRED and SO_PEERGROUPS say which, SO_PEERPIDFD gives
 * a pidfd of exactly that process (no pid reuse), and the daemon opens its
 * /proc/PID/maps at once, which holds on to the address space the process
 * had then. At REGISTER the process must still be that one: alive (the
 * pidfd), with the same address space (an exec replaces it, and the old
 * one then reads as empty) and the same credentials (/proc/PID/status). A
 * registration that fails gets EPERM: nothing about what the process runs
 * now is ever checked.
 *
 * The range check reads /proc/PID/smaps. A root daemon opens it in a child
 * that has dropped to the peer's user, groups and no capabilities, and
 * hands the descriptor back: the kernel checks the access when the file
 * is opened (ptrace read access, as the peer), so the answer can only be
 * about memory the peer may read itself. Opening it as root with the
 * filesystem IDs changed (setfsuid) would not do: root keeps
 * CAP_SYS_PTRACE, which passes that check for any process.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "lib.h"
#include "peer.h"
#include "uffd.h"

/* The lines of /proc/PID/status that are the process's credentials. */
static const char *const cred_lines[] = { "Uid:", "Gid:", "Groups:",
					  "CapPrm:", "CapEff:" };

/* The whole of /proc/@pid/status, NUL-terminated; NULL and errno. */
static char *read_status(pid_t pid)
{
	char path[64], *buf = NULL;
	size_t len = 0, cap = 0;
	ssize_t n = 1;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	while (n > 0) {
		if (cap - len < 4096) {
			char *more = realloc(buf, cap + 8192);

			if (!more)
				break;
			buf = more;
			cap += 8192;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n > 0)
			len += (size_t)n;
	}
	close(fd);
	if (n) { /* out of memory, or a read error */
		free(buf);
		return NULL;
	}
	buf[len] = 0;
	return buf;
}

/* The credential lines of @pid's status, concatenated; NULL: gone. */
static char *read_creds(pid_t pid)
{
	char *st = read_status(pid), *out, *o;

	if (!st)
		return NULL;
	out = malloc(strlen(st) + 1);
	o = out;
	for (char *l = st; out && *l;) {
		char *nl = strchrnul(l, '\n');

		for (size_t i = 0; i < ARRAY_SIZE(cred_lines); i++)
			if (!strncmp(l, cred_lines[i], strlen(cred_lines[i]))) {
				memcpy(o, l, (size_t)(nl - l));
				o += nl - l;
				*o++ = '\n';
			}
		l = *nl ? nl + 1 : nl;
	}
	if (out)
		*o = 0;
	free(st);
	return out;
}

/* The effective ID (second field) of a "Uid:" or "Gid:" line of @creds. */
static long effective_id(const char *creds, const char *line)
{
	const char *l = strstr(creds, line);
	unsigned long real, eff;

	if (!l || sscanf(l + strlen(line), "%lu %lu", &real, &eff) != 2)
		return -1;
	return (long)eff;
}

static bool pidfd_exited(int pidfd)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };

	return poll(&p, 1, 0) != 0; /* readable: it exited; or an error */
}

void peer_init(struct peer *p)
{
	*p = (struct peer){ .pid = -1, .pidfd = -1, .mm_fd = -1 };
}

/* SO_PEERCRED of @sock into @p: what the limits need. 0 or -errno. */
int peer_cred(int sock, struct peer *p)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -errno;
	p->pid = cred.pid;
	p->uid = cred.uid;
	p->gid = cred.gid;
	return 0;
}

static int peer_groups(int sock, struct peer *p)
{
	socklen_t len = 64 * sizeof(gid_t);

	for (;;) {
		gid_t *g = realloc(p->groups, len ? len : sizeof(gid_t));

		if (!g)
			return -ENOMEM;
		p->groups = g;
		if (!getsockopt(sock, SOL_SOCKET, SO_PEERGROUPS, g, &len))
			break;
		if (errno != ERANGE)
			return -errno;
	}
	p->nr_groups = len / sizeof(gid_t);
	return 0;
}

static int peer_pidfd(int sock, const struct peer *p)
{
	int fd = -1;
	socklen_t len = sizeof(fd);

	if (!getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &fd, &len))
		return fd;
	if (errno != ENOPROTOOPT)
		return -errno;
	/* Before Linux 6.5: by pid, checked against the process below. */
	fd = (int)syscall(SYS_pidfd_open, p->pid, 0);
	return fd < 0 ? -errno : fd;
}

/*
 * peer_bind() - after peer_cred(): the rest of @p, which binds the
 * connection to the process that connected and its credentials. Returns
 * 0, -ESRCH (it exited), -EPERM (its credentials changed since it
 * connected: it exec'd a set-user-ID program before we got here), or
 * -errno (out of descriptors or memory), with *why.
 */
int peer_bind(int sock, struct peer *p, const char **why)
{
	char path[64];
	int ret;

	*why = "cannot identify the client";
	ret = peer_groups(sock, p);
	if (ret)
		return ret;
	p->pidfd = peer_pidfd(sock, p);
	if (p->pidfd < 0)
		return p->pidfd;
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)p->pid);
	/* Not openable (a non-dumpable client of a daemon that is not
	 * root): the REGISTER will be refused, a STATUS is still fine. */
	p->mm_fd = open(path, O_RDONLY | O_CLOEXEC);
	p->creds = read_creds(p->pid);
	*why = "the client exited";
	if (!p->creds || pidfd_exited(p->pidfd))
		return -ESRCH;
	*why = "the client changed its credentials since it connected";
	if (effective_id(p->creds, "Uid:") != (long)p->uid ||
	    effective_id(p->creds, "Gid:") != (long)p->gid)
		return -EPERM;
	*why = NULL;
	return 0;
}

/*
 * peer_unchanged() - is the process that connected still there, with the
 * address space and the credentials it had then? 0, -ESRCH (it exited),
 * -EPERM (it exec'd, or changed credentials), with *why.
 */
int peer_unchanged(const struct peer *p, const char **why)
{
	char c, *now;
	bool same;

	*why = "the client exited";
	if (pidfd_exited(p->pidfd))
		return -ESRCH;
	*why = "cannot read the client's mappings";
	if (p->mm_fd < 0)
		return -EACCES;
	*why = "the client executed a program since it connected";
	if (pread(p->mm_fd, &c, 1, 0) != 1)
		return pidfd_exited(p->pidfd) ? -ESRCH : -EPERM;
	now = read_creds(p->pid);
	same = now && !strcmp(now, p->creds);
	free(now);
	*why = "the client exited";
	if (pidfd_exited(p->pidfd)) /* then @now may be another's */
		return -ESRCH;
	*why = "the client changed its credentials since it connected";
	return same ? 0 : -EPERM;
}

/* Send @fd (or, if negative, that error) over @sock: the child's reply. */
static void send_fd(int sock, int fd)
{
	char ctl[CMSG_SPACE(sizeof(int))] = { 0 };
	int err = fd < 0 ? fd : 0;
	struct iovec iov = { .iov_base = &err, .iov_len = sizeof(err) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (fd >= 0) {
		struct cmsghdr *c;

		m.msg_control = ctl;
		m.msg_controllen = sizeof(ctl);
		c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(fd));
	}
	(void)!sendmsg(sock, &m, MSG_NOSIGNAL);
}

/* The child's reply: a descriptor, or a negative errno. */
static int recv_fd(int sock)
{
	char ctl[CMSG_SPACE(sizeof(int))];
	int err = -EIO, fd = -1;
	struct iovec iov = { .iov_base = &err, .iov_len = sizeof(err) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	struct cmsghdr *c;

	if (recvmsg(sock, &m, MSG_CMSG_CLOEXEC) != sizeof(err))
		return -EIO;
	c = CMSG_FIRSTHDR(&m);
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
	    c->cmsg_len == CMSG_LEN(sizeof(int)))
		memcpy(&fd, CMSG_DATA(c), sizeof(fd));
	if (fd >= 0 && err)
		close(fd);
	return err ? err : fd >= 0 ? fd : -EIO;
}

/*
 * The child: become the peer (groups, then group, then user: after that
 * no capability is left) and open @path. Only system calls here: the
 * parent has other threads.
 */
static void __attribute__((noreturn))
open_as_child(const struct peer *p, const char *path, int sock)
{
	int fd = -EPERM;

	if (!setgroups(p->nr_groups, p->groups) &&
	    !setresgid(p->gid, p->gid, p->gid) &&
	    !setresuid(p->uid, p->uid, p->uid)) {
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			fd = -errno;
	}
	send_fd(sock, fd);
	_exit(0);
}

static int open_as(const struct peer *p, const char *path)
{
	int sv[2], ret, status;
	pid_t child;

	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	child = fork();
	if (child == 0) {
		close(sv[0]);
		open_as_child(p, path, sv[1]);
	}
	close(sv[1]);
	ret = child < 0 ? -errno : recv_fd(sv[0]);
	close(sv[0]);
	if (child > 0)
		while (waitpid(child, &status, 0) < 0 && errno == EINTR)
			;
	return ret;
}

/*
 * peer_open() - open @file of /proc/PID/ with the peer's rights (see the
 * top of this file). Returns the descriptor, or -errno (-EACCES: the peer
 * may not read it).
 */
int peer_open(const struct peer *p, const char *file)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)p->pid, file);
	if (geteuid() == 0 && p->uid != 0)
		return open_as(p, path);
	/* A root peer may read it anyway; a daemon that is not root serves
	 * its own user only, and has no more rights than the peer. */
	fd = open(path, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

void peer_release(struct peer *p)
{
	if (p->pidfd >= 0)
		close(p->pidfd);
	if (p->mm_fd >= 0)
		close(p->mm_fd);
	free(p->groups);
	free(p->creds);
	peer_init(p);
}
