// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * restart.c - what the daemon does at its start and its end so that a
 * restart loses no session: attach to its keeper (or systemd's store),
 * adopt the sessions a daemon before it left there, keep its listening
 * socket there, start a keeper again if the keeper dies, and at the end
 * leave to the keeper only what nobody else can serve.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "server.h"

#define STOP_WAIT_MS 5000

static int kept_listen = -1;
static unsigned int nr_adopted;	/* sessions adopted at the start */

static void *adopted_main(void *arg)
{
	struct session *s = arg;

	dlog(LOG_INFO, "%s: adopted, %u spaces", session_name(s),
	     session_nr_spaces(s));
	session_run(s);
	dlog(LOG_INFO, "%s ends", session_name(s));
	session_free(s);
	return NULL;
}

/* An entry of the keeper: the listening socket, or a session. */
static void on_entry(void *arg, struct keep_entry *e)
{
	struct session *s;

	if (e->flags & KEEP_F_LISTEN) {
		if (e->nfds == 1 && kept_listen < 0)
			kept_listen = e->fds[0];
		else
			for (unsigned int i = 0; i < e->nfds; i++)
				close(e->fds[i]);
		return;
	}
	if (session_adopt_entry(e, front_session_ops, &s))
		return;
	nr_adopted++;
	if (daemon_thread_start(adopted_main, s, "faultd-adopt") < 0) {
		dlog(LOG_WARNING, "%s: cannot start a thread for it", session_name(s));
		session_free(s);
	}
}

/*
 * restart_begin() - attach to the keeper of @o->socket (starting one if
 * none runs) or to systemd's store, and adopt what it holds. Returns the
 * listening socket it held (or -1: bind one and restart_keep_listen()
 * it), or -errno: another daemon uses it, or it is another's.
 */
int restart_begin(const struct keep_opts *o)
{
	int ret = keep_open(o, &daemon_keep);

	if (ret == -EBUSY)
		dlog(LOG_WARNING, "%s: another faultd serves this socket", o->socket);
	if (ret)
		return ret;
	ret = keep_fetch(daemon_keep, on_entry, NULL);
	if (ret)
		dlog(LOG_WARNING, "cannot fetch what the keeper holds: %s",
		     strerror(-ret));
	return kept_listen;
}

/* Keep the listening socket too: the path stays served across a restart. */
void restart_keep_listen(int ls)
{
	if (daemon_keep && !keep_put(daemon_keep, "listen", &ls, 1,
				     KEEP_F_LISTEN, 0))
		kept_listen = ls;
}

/* The keeper's descriptor to poll (-1: none). */
int restart_fd(void)
{
	return keep_fd(daemon_keep);
}

/* The keeper died: start another and give it everything again. */
void restart_keeper_lost(void)
{
	int ret;

	if (!daemon_keep || !keep_lost(daemon_keep))
		return;
	dlog(LOG_WARNING, "the keeper is gone: starting another");
	ret = keep_reopen(daemon_keep);
	if (ret) {
		dlog(LOG_WARNING, "cannot start a keeper: %s: a restart would lose the "
			"sessions", strerror(-ret));
		keep_close(daemon_keep, false);
		daemon_keep = NULL;
		return;
	}
	if (kept_listen >= 0)
		keep_put(daemon_keep, "listen", &kept_listen, 1, KEEP_F_LISTEN,
			 0);
	sessions_persist_all();
}

/*
 * restart_end() - the daemon stops: every session has been asked to end.
 * Returns true when nothing was left to the keeper (it was told BYE and
 * the socket path may go), false when sessions wait there for the next
 * daemon.
 */
bool restart_end(void)
{
	uint64_t end = now_ms() + STOP_WAIT_MS;
	size_t left;

	while (sessions_count() && now_ms() < end)
		usleep(1000);
	left = sessions_count();
	if (!daemon_keep)
		return true;
	if (sessions_left_kept() || left) {
		dlog(LOG_WARNING, "stopping: %zu sessions stay kept (%s) for the next "
			"faultd", left, keep_pid(daemon_keep)
					     ? "by the keeper"
					     : "in the fd store");
		keep_close(daemon_keep, false);
		return false;
	}
	keep_close(daemon_keep, true);
	return true;
}

/* restart_adopted() - how many sessions restart_begin() adopted. */
unsigned int restart_adopted(void)
{
	return nr_adopted;
}
