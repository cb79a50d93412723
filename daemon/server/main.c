// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * main.c - faultd: serves the page faults of restored processes and guests
 * (faultd(8)).
 *
 *   faultd [OPTIONS]                  the faultd protocol's daemon
 *   faultd lazy-pages ...             CRIU's lazy-pages daemon
 *   faultd firecracker ...            Firecracker's page-fault handler
 *   faultd working-set show|merge ... working-set files (tools/)
 *   faultd keeper ...                 what keeps sessions across restarts
 *
 * Every command but the last two is one front end (fronts/front.h) run by
 * the same server: its options and the server's (opts.c), what it serves
 * opened (its start()), the keeper attached and what it held adopted
 * (restart.c), its sockets listening (the main one may be systemd's, or
 * the one the keeper kept), the one loop (conn.c) until the front end's
 * work is done or SIGTERM/SIGINT stops it; then every session stopped -
 * those nobody else can serve left kept for the next faultd - and their
 * threads joined. SIGUSR1 ends the working-set records under way.
  */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "server.h"

/*
 * The socket systemd passed (LISTEN_PID and LISTEN_FDS, as sd_listen_fds(3)
 * reads them): its descriptor when one listening SOCK_SEQPACKET socket was
 * passed to this process, 0 when none was, -EINVAL when what was passed is
 * not that (more than one, or the wrong kind: the unit file is wrong).
 * Descriptors of the fd store (named NAME.N, keep.c) are not sockets to
 * listen on and are left to keep_fetch(). The variables are removed once
 * all is read, so that nothing the daemon starts inherits them.
 */
static int activated_socket(void)
{
	int n = sd_listen_fds(0), found = 0;

	for (int fd = SD_LISTEN_FDS_START; n > 0 && fd < SD_LISTEN_FDS_START + n;
	     fd++) {
		if (sd_is_socket(fd, AF_UNIX, SOCK_SEQPACKET, 1) <= 0)
			continue;
		if (found)
			return -EINVAL;
		found = fd;
		fcntl(fd, F_SETFD, FD_CLOEXEC);
	}
	return n < 0 || (n > 0 && !found && !dopts.fd_store) ? -EINVAL : found;
}

/* The path a passed socket is bound to (the keeper's is next to it). */
static const char *socket_path(int ls, char *buf, size_t len)
{
	struct sockaddr_un a;
	socklen_t alen = sizeof(a);

	if (getsockname(ls, (struct sockaddr *)&a, &alen) < 0 ||
	    alen <= offsetof(struct sockaddr_un, sun_path) || !a.sun_path[0] ||
	    strlen(a.sun_path) >= len)
		return NULL;
	strcpy(buf, a.sun_path);
	return buf;
}

/* server_keeper() - `faultd keeper`: started by faultd itself (keep.c). */
int server_keeper(int argc, char **argv)
{
	const char *sock = NULL;
	unsigned int grace = 0;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--socket"))
			sock = argv[i + 1];
		else if (!strcmp(argv[i], "--grace"))
			grace = daemon_parse_uint("grace", argv[i + 1], 0, 86400);
	}
	if (!sock) {
		server_usage(stderr);
		return 2;
	}
	return keeper_main(sock, grace);
}

/* The signals the loop answers, to a descriptor: threads never see them. */
static int signals(void)
{
	sigset_t set;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	return signalfd(-1, &set, SFD_CLOEXEC);
}

/*
 * The main socket's path and descriptor: systemd's (LISTEN_FDS), whose
 * path it is bound to is the keeper's name, when the front end may take
 * one; else its own path, or the default one. *fd: systemd's, or -1.
 * Returns 0, or -1 (said). $LISTEN_FDS stays for the fd store.
 */
static int main_socket(struct front_start *st, int *fd)
{
	struct front_listen *l = &st->listen[0];
	int ls = st->activated ? activated_socket() : 0;

	*fd = -1;
	if (ls < 0) {
		fprintf(stderr, "faultd: the passed socket (LISTEN_FDS) must be "
			"one listening SOCK_SEQPACKET socket\n");
		return -1;
	}
	if (ls > 0)
		*fd = ls;
	if (!l->path[0] && ls > 0)
		socket_path(ls, l->path, sizeof(l->path));
	if (!l->path[0] && !proto_default_socket(l->path, sizeof(l->path))) {
		fprintf(stderr, "faultd: no socket path: %s\n",
			strerror(ENAMETOOLONG));
		return -1;
	}
	return 0;
}

/* Why the front end's socket @l cannot listen (@err). */
static void listen_failed(const struct front_listen *l, int err)
{
	if (err == -EADDRINUSE)
		dlog(LOG_WARNING, "%s: somebody listens there already: "
		     "refused", l->path);
	else if (err == -EEXIST && (l->flags & LISTEN_STRICT))
		dlog(LOG_WARNING, "%s exists and is not a socket of this "
		     "user: refused", l->path);
	else if (err == -EEXIST)
		dlog(LOG_WARNING, "%s is a folder: refused", l->path);
	fprintf(stderr, "faultd: %s: %s\n", l->path, strerror(-err));
}

/*
 * The keeper (or systemd's store) attached, the sessions it held adopted,
 * and the front end's sockets listening: the main one on systemd's
 * socket (@fd), the keeper's, or its own. Returns 0, or -1 (said).
 */
static int serve_start(struct front_start *st, int fd)
{
	struct keep_opts ko = { .socket = st->listen[0].path,
				.grace_s = dopts.keeper_grace_s,
				.fd_store = dopts.fd_store };
	int kept = dopts.no_keeper ? -1 : restart_begin(&ko);
	bool adopted;

	/* Read by activated_socket() and the fd store: nothing the daemon
	 * starts inherits them. */
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (kept < -1)
		return -1;
	adopted = restart_adopted() > 0;
	for (unsigned int i = 0; i < st->nr; i++) {
		const struct front_listen *l = &st->listen[i];
		bool mine = fd < 0 || i;
		int use = i ? -1 : fd >= 0 ? fd : kept;
		int ls;

		if ((l->flags & LISTEN_UNLESS_ADOPTED) && adopted)
			continue;
		ls = conn_listen(l, use, mine);
		if (ls < 0) {
			listen_failed(l, ls);
			return -1;
		}
		if (!i && (l->flags & LISTEN_KEEP) && use < 0)
			restart_keep_listen(ls);
		dlog(LOG_INFO, "listening on %s", mine ? l->path
						      : "an activated socket");
	}
	return 0;
}

/*
 * faultd's main, for the front end @front: its options, what it serves,
 * the keeper, its sockets, the loop until it is done or a signal stops
 * it, then its sessions stopped (left kept for the next daemon where
 * nobody else serves them) and their threads joined.
 */
static int serve(const struct front *front, int argc, char **argv)
{
	struct front_start st = { .exit_now = -1 };
	int sfd, fd = -1, ret = server_opts(front, argc, argv);

	if (ret)
		return ret;
	log_set_verbosity(dopts.verbose);
	daemon_std_fds();
	daemon_raise_nofile();
	daemon_started_ms = now_ms();
	sfd = signals();
	ret = front->start(&st);
	if (ret || st.exit_now >= 0)
		return ret == -2 ? 2 : ret ? 1 : st.exit_now;
	if (sfd < 0 || conn_prepare(front, sfd) < 0) {
		fprintf(stderr, "faultd: cannot start: %s\n", strerror(errno));
		return 1;
	}
	if (main_socket(&st, &fd) || serve_start(&st, fd))
		return 1;
	if (front->ready)
		front->ready();
	ret = conn_loop();
	if (ret < 0)
		fprintf(stderr, "faultd: cannot serve: %s\n", strerror(-ret));
	dlog(LOG_INFO, "stopping");
	if (ret == 1 && front->stop)
		front->stop();
	sessions_stop_all();
	daemon_threads_wait(THREADS_WAIT_MS);
	conn_fini(!restart_end());
	return front->finish ? front->finish(ret == 1) : ret < 0 ? 1 : 0;
}

/*
 * server_main() - `faultd [COMMAND] ...` for a front end's command (none:
 * the faultd protocol's daemon). Returns the exit status.
 */
int server_main(int argc, char **argv)
{
	const char *cmd = argc > 1 && argv[1][0] != '-' ? argv[1] : NULL;
	const struct front *front = front_by_command(cmd);

	if (!front) {
		server_usage(stderr);
		return 2;
	}
	return cmd ? serve(front, argc - 1, argv + 1) : serve(front, argc, argv);
}
