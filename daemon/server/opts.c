// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * opts.c - the one command-line parser of faultd: the options the server
 * shares with the front ends (struct front.shared says which a command
 * takes), then the front end's own, in one getopt_long() pass.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

#define MAX_LIMIT 1000000
#define OPTS_MAX 64

/* The server's options: ids below 256 that no front end uses as a letter
 * but 's', 'v' and 'h', which are the server's. */
enum {
	S_MAX_SESSIONS = 200, S_MAX_USER_SESSIONS, S_MAX_CONNS,
	S_MAX_USER_CONNS, S_HANDSHAKE, S_KEEPER_GRACE, S_NO_KEEPER, S_FD_STORE,
	S_NBD_ALLOW, S_NBD_DEADLINE,
};

struct shared_opt {
	struct option o;
	unsigned int mask;	/* the OPT_* it belongs to */
	unsigned int *limit;	/* a number: where it goes */
	unsigned int min, max;
};

static const struct shared_opt shared[] = {
	{ { "socket", required_argument, NULL, 's' }, OPT_SOCKET, NULL, 0, 0 },
	{ { "max-sessions", required_argument, NULL, S_MAX_SESSIONS },
	  OPT_SESSION_LIMITS, &dopts.max_sessions, 1, MAX_LIMIT },
	{ { "max-user-sessions", required_argument, NULL, S_MAX_USER_SESSIONS },
	  OPT_SESSION_LIMITS, &dopts.max_user_sessions, 1, MAX_LIMIT },
	{ { "max-connections", required_argument, NULL, S_MAX_CONNS },
	  OPT_CONN_LIMITS, &dopts.max_conns, 1, MAX_LIMIT },
	{ { "max-user-connections", required_argument, NULL, S_MAX_USER_CONNS },
	  OPT_CONN_LIMITS, &dopts.max_user_conns, 1, MAX_LIMIT },
	{ { "handshake-timeout", required_argument, NULL, S_HANDSHAKE },
	  OPT_HANDSHAKE, &dopts.handshake_ms, 1, 3600000 },
	{ { "keeper-grace", required_argument, NULL, S_KEEPER_GRACE },
	  OPT_KEEPER, &dopts.keeper_grace_s, 1, 86400 },
	{ { "no-keeper", no_argument, NULL, S_NO_KEEPER }, OPT_KEEPER, NULL,
	  0, 0 },
	{ { "fd-store", no_argument, NULL, S_FD_STORE }, OPT_FD_STORE, NULL,
	  0, 0 },
	{ { "nbd-allow", required_argument, NULL, S_NBD_ALLOW }, OPT_NBD_ALLOW,
	  NULL, 0, 0 },
	{ { "nbd-deadline", required_argument, NULL, S_NBD_DEADLINE }, OPT_NBD,
	  &dopts.nbd_deadline_ms, 1, 3600000 },
	{ { "verbose", no_argument, NULL, 'v' }, OPT_VERBOSE, NULL, 0, 0 },
};

/* Every command's usage: the daemon's, then each front end's. */
void server_usage(FILE *f)
{
	fprintf(f, "usage: faultd [--socket PATH] [--max-sessions N] "
		   "[--max-user-sessions N]\n"
		   "              [--max-connections N] "
		   "[--max-user-connections N]\n"
		   "              [--handshake-timeout MS] [--keeper-grace S] "
		   "[--no-keeper] [--fd-store]\n"
		   "              [--nbd-allow FILE] [--nbd-deadline MS] "
		   "[-v]...\n");
	for (const struct front *const *p = fronts; *p; p++)
		if ((*p)->usage)
			(*p)->usage(f);
	fprintf(f, "       faultd working-set show FILE | merge -o OUT "
		   "[--min-count K] A B ...\n"
		   "       faultd keeper --socket PATH --grace SECONDS\n");
}

/* The long options of @front's command: the shared ones it takes, its
 * own; and its letters. */
static void opts_table(const struct front *front, struct option *out,
		       char *letters, size_t len)
{
	size_t n = 0;

	snprintf(letters, len, "h%s%s%s",
		 front->shared & OPT_SOCKET ? "s:" : "",
		 front->shared & OPT_VERBOSE ? "v" : "",
		 front->shortopts ? front->shortopts : "");
	for (size_t i = 0; i < sizeof(shared) / sizeof(shared[0]); i++)
		if (front->shared & shared[i].mask)
			out[n++] = shared[i].o;
	out[n++] = (struct option){ "help", no_argument, NULL, 'h' };
	for (size_t i = 0; front->options && front->options[i].name &&
			   n < OPTS_MAX - 1;
	     i++)
		out[n++] = front->options[i];
	out[n] = (struct option){ NULL, 0, NULL, 0 };
}

/* A shared option @c came, with @arg: 1 (it was one), 0 (it was not). */
static int opts_shared(int c, const char *arg)
{
	for (size_t i = 0; i < sizeof(shared) / sizeof(shared[0]); i++) {
		const struct shared_opt *s = &shared[i];

		if (s->o.val != c)
			continue;
		dopts_given |= s->mask;
		if (s->limit)
			*s->limit = daemon_parse_uint(s->o.name, arg, s->min,
						      s->max);
		else if (c == 's')
			dopts.socket = arg;
		else if (c == 'v')
			dopts.verbose++;
		else if (c == S_NO_KEEPER)
			dopts.no_keeper = true;
		else if (c == S_FD_STORE)
			dopts.fd_store = true;
		else if (c == S_NBD_ALLOW)
			dopts.nbd_allow = arg;
		return 1;
	}
	return 0;
}

/*
 * server_opts() - parse @argv (argv[0] is the command's name) for
 * @front. Returns 0, or 2 (a usage error, said); --help exits 0.
 */
int server_opts(const struct front *front, int argc, char **argv)
{
	struct option lo[OPTS_MAX];
	char letters[64];
	int c;

	opts_table(front, lo, letters, sizeof(letters));
	optind = 1;
	while ((c = getopt_long(argc, argv, letters, lo, NULL)) != -1) {
		if (c == 'h') {
			server_usage(stdout);
			exit(0);
		}
		if (opts_shared(c, optarg))
			continue;
		if (c == '?' || !front->option || front->option(c, optarg)) {
			server_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		server_usage(stderr);
		return 2;
	}
	return 0;
}
