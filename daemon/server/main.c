// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * main.c - faultd, the daemon: serves the page faults of restored processes from
 * their checkpoint images.
 *
 *   faultd [--socket PATH] [--max-sessions N] [--max-user-sessions N]
 *          [--max-connections N] [--max-user-connections N]
 *          [--handshake-timeout MS] [-v] [-v]
 *   faultd working-set show FILE | merge -o OUT [--min-count K] A B ...
 *
 * It listens on a SOCK_SEQPACKET Unix socket (PATH, or the one systemd
 * passes with socket activation, or $XDG_RUNTIME_DIR/faultd.sock, else
 * /run/faultd/faultd.sock). One loop reads every connection's HELLO and
 * REGISTER (a session, see session.c) or STATUS (for faultctl), within
 * the limits (conn.c). A client is identified by SO_PEERCRED; a daemon
 * not run as root serves only its own user. Anything malformed gets an
 * ERROR saying what, and the connection is closed; the daemon carries
 * on. SIGTERM or SIGINT ends the sessions (their clients serve themselves
 * from then on) and the daemon.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "lazy_pages.h"
#include "server.h"
#include "sockfile.h"
#include "tools.h"




/* ------------------------------------------------------------------------
 * Listening.
 */

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




static void usage(FILE *f)
{
	fprintf(f, "usage: faultd [--socket PATH] [--max-sessions N] "
		   "[--max-user-sessions N]\n"
		   "              [--max-connections N] "
		   "[--max-user-connections N]\n"
		   "              [--handshake-timeout MS] [--keeper-grace S] "
		   "[--no-keeper] [--fd-store] [-v]...\n"
		   "       faultd lazy-pages -D DIR [-W WORKDIR] ... "
		   "(faultd lazy-pages --help)\n"
		   "       faultd firecracker --socket PATH --mem-file FILE "
		   "[--prefetch] [--allow-uid UID]...\n"
		   "       faultd keeper --socket PATH --grace SECONDS\n");
}

/* `faultd keeper`: started by faultd itself (keep.c). */
static int keeper_cmd(int argc, char **argv)
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
		usage(stderr);
		return 2;
	}
	return keeper_main(sock, grace);
}

#define MAX_LIMIT 1000000

static int parse(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "max-sessions", required_argument, NULL, 'm' },
		{ "max-user-sessions", required_argument, NULL, 'u' },
		{ "max-connections", required_argument, NULL, 'c' },
		{ "max-user-connections", required_argument, NULL, 'C' },
		{ "handshake-timeout", required_argument, NULL, 't' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "keeper-grace", required_argument, NULL, 'g' },
		{ "no-keeper", no_argument, NULL, 'K' },
		{ "fd-store", no_argument, NULL, 'F' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct daemon_opts *o = &dopts;
	int c;

	while ((c = getopt_long(argc, argv, "s:m:vh", longopts, NULL)) != -1) {
		unsigned int *limit = NULL, max = MAX_LIMIT;
		int i;

		switch (c) {
		case 's': o->socket = optarg; continue;
		case 'm': limit = &o->max_sessions; break;
		case 'u': limit = &o->max_user_sessions; break;
		case 'c': limit = &o->max_conns; break;
		case 'C': limit = &o->max_user_conns; break;
		case 't': limit = &o->handshake_ms; max = 3600000; break;
		case 'g': limit = &o->keeper_grace_s; max = 86400; break;
		case 'v': o->verbose++; continue;
		case 'K': o->no_keeper = true; continue;
		case 'F': o->fd_store = true; continue;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
		for (i = 0; longopts[i].val != c; i++)
			;
		*limit = daemon_parse_uint(longopts[i].name, optarg, 1, max);
	}
	/* By default one user may take a quarter of the sessions. */
	if (!o->max_user_sessions)
		o->max_user_sessions = o->max_sessions / 4 ? o->max_sessions / 4 : 1;
	return optind == argc ? 0 : -1;
}

/* Attach to the keeper (or store): sessions adopted, socket perhaps. */
static int keep_begin(void)
{
	struct keep_opts ko = { .socket = dopts.socket,
				.grace_s = dopts.keeper_grace_s,
				.fd_store = dopts.fd_store };

	if (dopts.no_keeper)
		return -1;
	fe_kind_register(&fdp_kind);
	criu_front_init(NULL); /* restores asked for with faultctl */
	return restart_begin(&ko);
}


int main(int argc, char **argv)
{
	char def[108];
	sigset_t stop;
	struct sockfile sf = SOCKFILE_INIT;
	int ls, sfd, ret;
	bool own;

	if (argc > 1 && !strcmp(argv[1], "keeper"))
		return keeper_cmd(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "lazy-pages")) {
		daemon_std_fds();
		daemon_raise_nofile();
		return lazy_pages_main(argc - 1, argv + 1);
	}
	if (argc > 1 && !strcmp(argv[1], "working-set"))
		return wset_cmd(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "firecracker"))
		return fc_main(argc - 1, argv + 1);
	if (parse(argc, argv) < 0)
		return 2;
	log_set_verbosity(dopts.verbose);
	daemon_std_fds();
	daemon_raise_nofile();
	daemon_started_ms = now_ms();
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	sfd = signalfd(-1, &stop, SFD_CLOEXEC);
	if (sfd < 0 || conn_prepare() < 0) {
		fprintf(stderr, "faultd: cannot start: %s\n", strerror(errno));
		return 1;
	}
	ls = activated_socket();
	if (ls < 0) {
		fprintf(stderr, "faultd: the passed socket (LISTEN_FDS) must be "
			"one listening SOCK_SEQPACKET socket\n");
		return 1;
	}
	own = ls == 0;
	if (!own && !dopts.socket)
		dopts.socket = socket_path(ls, def, sizeof(def));
	if (!dopts.socket)
		dopts.socket = proto_default_socket(def, sizeof(def));
	if (!dopts.socket) {
		fprintf(stderr, "faultd: no socket path: %s\n",
			strerror(ENAMETOOLONG));
		return 1;
	}
	if (own) {
		int kept = keep_begin();

		if (kept < -1)
			return 1;
		if (kept >= 0)
			sockfile_adopt(&sf, dopts.socket);
		ls = kept >= 0 ? kept
			       : daemon_listen(&sf, dopts.socket, SOCK_SEQPACKET);
		if (ls >= 0 && kept < 0)
			restart_keep_listen(ls);
	} else if (keep_begin() < -1) {
		return 1;
	}
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (ls < 0) {
		fprintf(stderr, "faultd: %s: %s\n", dopts.socket, strerror(-ls));
		return 1;
	}
	dlog(LOG_INFO, "listening on %s", own ? dopts.socket : "an activated socket");
	ret = conn_loop(ls, sfd);
	if (ret < 0)
		fprintf(stderr, "faultd: cannot serve: %s\n", strerror(-ret));
	dlog(LOG_INFO, "stopping");
	lazy_daemon_stop();
	sessions_stop_all();
	daemon_threads_wait(THREADS_WAIT_MS);
	if (restart_end())
		sockfile_remove(&sf);
	sockfile_close(&sf);
	close(ls);
	return ret < 0 ? 1 : 0;
}
