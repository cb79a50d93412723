// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * keeper.c - `faultd keeper`: a process that holds descriptors for faultd
 * and nothing else (keep.h says why and what the rules are).
 *
 * It listens on SOCKET.keeper (a SOCK_SEQPACKET socket made 0600 before
 * bind, so that no path is touched after), serves one daemon at a time
 * (a second daemon is refused while the first is connected), and waits on
 * the daemon's connection, the pidfds of its entries and a timer. It
 * starts no threads, allocates nothing per message beyond its entries, and
 * never reads what it holds.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "keep_proto.h"
#include "lib.h"
#include "server.h"
#include "sockfile.h"

#define ENTRIES_MAX 4096

struct entry {
	struct keep_entry e;
	bool used;
	uint64_t exited;	/* watched pidfds whose process ended */
};

static struct entry *entries;
static size_t nr_entries;
static int daemon_sock = -1;
static uint64_t grace_end_ms;	/* 0: a daemon is connected */
static bool said_bye;		/* the daemon stopped cleanly: we end */

static uint64_t mono_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static void entry_drop(struct entry *en)
{
	for (unsigned int i = 0; i < en->e.nfds; i++)
		close(en->e.fds[i]);
	memset(en, 0, sizeof(*en));
	nr_entries--;
}

static struct entry *entry_find(const char *name)
{
	for (size_t i = 0; i < ENTRIES_MAX; i++)
		if (entries[i].used && !strcmp(entries[i].e.name, name))
			return &entries[i];
	return NULL;
}

/* PUT: the entry of that name now holds these descriptors. */
static void entry_put(const struct keep_msg *m, const int *fds,
		      unsigned int nfds)
{
	struct entry *en = entry_find(m->name);

	if (en)
		entry_drop(en);
	for (size_t i = 0; !en && i < ENTRIES_MAX; i++)
		if (!entries[i].used)
			en = &entries[i];
	if (!en) {
		for (unsigned int i = 0; i < nfds; i++)
			close(fds[i]);
		fprintf(stderr, "faultd keeper: full (%d entries): %s not "
			"kept\n", ENTRIES_MAX, m->name);
		return;
	}
	en->used = true;
	memcpy(en->e.name, m->name, sizeof(en->e.name));
	en->e.flags = m->flags;
	en->e.watch = m->watch & (nfds < 64 ? (1ull << nfds) - 1 : ~0ull);
	en->e.nfds = nfds;
	memcpy(en->e.fds, fds, nfds * sizeof(int));
	nr_entries++;
}

static void reply_error(int sock, int err, const char *why)
{
	struct keep_msg m = { .magic = KEEP_MAGIC, .version = KEEP_VERSION,
			      .type = K_ERROR, .pid = getpid(), .err = err };

	snprintf(m.text, sizeof(m.text), "%s", why);
	keep_send(sock, &m, NULL, 0);
}

static void reply(int sock, enum keep_type type, const struct entry *en)
{
	struct keep_msg m = { .magic = KEEP_MAGIC, .version = KEEP_VERSION,
			      .type = (uint16_t)type, .pid = getpid(),
			      .entries = nr_entries };

	if (en) {
		memcpy(m.name, en->e.name, sizeof(m.name));
		m.flags = en->e.flags;
		m.watch = en->e.watch;
		m.nfds = en->e.nfds;
	}
	keep_send(sock, &m, en ? en->e.fds : NULL, en ? en->e.nfds : 0);
}

static void fetch(int sock)
{
	for (size_t i = 0; i < ENTRIES_MAX; i++)
		if (entries[i].used)
			reply(sock, K_ENTRY, &entries[i]);
	reply(sock, K_END, NULL);
}

/* One message of the daemon. Returns false when it is gone (or BYE). */
static bool daemon_msg(unsigned int grace_s)
{
	struct keep_msg m;
	int fds[KEEP_MAX_FDS];
	unsigned int n = 0;
	int ret = keep_recv(daemon_sock, &m, fds, &n);

	if (ret == -EAGAIN || ret == -EINTR)
		return true;
	if (ret || m.type == K_BYE) {
		said_bye = !ret; /* a clean stop: what is left goes */
		close(daemon_sock);
		daemon_sock = -1;
		grace_end_ms = mono_ms() + (uint64_t)grace_s * 1000;
		return false;
	}
	switch (m.type) {
	case K_HELLO:
		reply(daemon_sock, K_HELLO, NULL);
		break;
	case K_FETCH:
		fetch(daemon_sock);
		break;
	case K_PUT:
		entry_put(&m, fds, n);
		n = 0;
		break;
	case K_DROP: {
		struct entry *en = entry_find(m.name);

		if (en)
			entry_drop(en);
		break;
	}
	}
	for (unsigned int i = 0; i < n; i++)
		close(fds[i]);
	return true;
}

/*
 * Has the connected daemon gone, with its end of the connection not read
 * yet? A daemon killed just before the next one connects must not make
 * that one look like a second daemon.
 */
static bool daemon_gone(void)
{
	struct pollfd p = { .fd = daemon_sock, .events = POLLIN | POLLRDHUP };

	return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP));
}

/* A connection: the daemon, unless one is connected already. */
static void accept_daemon(int ls, unsigned int grace_s)
{
	struct ucred c;
	socklen_t len = sizeof(c);
	int s = accept4(ls, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	char why[128];

	if (s < 0)
		return;
	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &c, &len) ||
	    c.uid != geteuid()) {
		close(s);
		return;
	}
	/* What the dead daemon sent before it died is kept first. */
	if (daemon_sock >= 0 && daemon_gone())
		while (daemon_sock >= 0 && daemon_msg(grace_s))
			;
	if (daemon_sock >= 0) {
		snprintf(why, sizeof(why), "another faultd (pid %d's "
			 "connection) uses this keeper: two daemons on one "
			 "socket", (int)c.pid);
		reply_error(s, -EBUSY, why);
		close(s);
		return;
	}
	daemon_sock = s;
	grace_end_ms = 0;
}

/* Entries whose watched processes all ended, or whose grace is over. */
static void expire(const struct pollfd *p, const size_t *slot, size_t np)
{
	bool grace_over = grace_end_ms && mono_ms() >= grace_end_ms;

	for (size_t i = 0; i < np; i++)
		if (p[i].revents) {
			struct entry *en = &entries[slot[i] / KEEP_MAX_FDS];

			en->exited |= 1ull << (slot[i] % KEEP_MAX_FDS);
		}
	for (size_t i = 0; i < ENTRIES_MAX; i++) {
		struct entry *en = &entries[i];

		if (!en->used)
			continue;
		if ((en->e.watch && (en->exited & en->e.watch) == en->e.watch) ||
		    (grace_over && (en->e.flags & KEEP_F_TAKEOVER)))
			entry_drop(en);
	}
}

/* Nothing left to hold for anyone, and no daemon: the keeper ends. */
static bool idle(void)
{
	for (size_t i = 0; i < ENTRIES_MAX; i++)
		if (entries[i].used && !(entries[i].e.flags & KEEP_F_LISTEN))
			return false;
	return daemon_sock < 0 && grace_end_ms && mono_ms() >= grace_end_ms;
}

/* The socket file takes the socket's mode at bind: 0600 from the start,
 * and the path is never touched after (sockfile.h). A stale one a keeper
 * that died left goes first. */
static int keeper_listen(struct sockfile *f, const char *path)
{
	int ret = sockfile_open(f, path, false);

	return ret ? ret : sockfile_listen(f, SOCK_SEQPACKET, 0600, 4, 0);
}

static void keeper_loop(int ls, unsigned int grace_s)
{
	static struct pollfd p[2 + ENTRIES_MAX];
	static size_t slot[2 + ENTRIES_MAX];

	for (;;) {
		size_t np = 0;

		p[np++] = (struct pollfd){ .fd = ls, .events = POLLIN };
		p[np++] = (struct pollfd){ .fd = daemon_sock, .events = POLLIN };
		for (size_t i = 0; i < ENTRIES_MAX && np < ARRAY_SIZE(p); i++)
			for (unsigned int j = 0; entries[i].used &&
						 j < entries[i].e.nfds && j < 64;
			     j++)
				if ((entries[i].e.watch >> j) & 1) {
					slot[np] = i * KEEP_MAX_FDS + j;
					p[np++] = (struct pollfd){
						.fd = entries[i].e.fds[j],
						.events = POLLIN };
				}
		if (poll(p, np, 1000) < 0 && errno != EINTR)
			return;
		if (p[0].revents)
			accept_daemon(ls, grace_s);
		if (p[1].revents)
			daemon_msg(grace_s);
		expire(p + 2, slot + 2, np - 2);
		if (said_bye || idle())
			return;
	}
}

/*
 * keeper_main() - `faultd keeper --socket SOCKET --grace S`, started by
 * faultd with the write end of a pipe as descriptor 3: one byte on it
 * says the keeper listens.
 */
int keeper_main(const char *socket, unsigned int grace_s)
{
	struct sockfile sf = SOCKFILE_INIT;
	char path[108];
	int ls;

	signal(SIGPIPE, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	entries = calloc(ENTRIES_MAX, sizeof(*entries));
	if (!entries ||
	    snprintf(path, sizeof(path), "%s.keeper", socket) >= (int)sizeof(path))
		return 1;
	ls = keeper_listen(&sf, path);
	if (ls < 0) {
		fprintf(stderr, "faultd keeper: %s: %s\n", path, strerror(-ls));
		return 1;
	}
	(void)!write(3, "k", 1);
	close(3);
	grace_end_ms = mono_ms() + (uint64_t)grace_s * 1000;
	keeper_loop(ls, grace_s);
	sockfile_remove(&sf);
	sockfile_close(&sf);
	return 0;
}
