/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * common.h - what every layer of the daemon may use, and that uses
 * nothing of them: its log (log.c), its clock, the setup of its process
 * and the threads it joins before it exits (common.c).
 *
 * The daemon's folders are layers, each using only those below it
 * (docs/HACKING.md, "The daemon's layers"; scripts/layers.sh checks it):
 *
 *   tools/    faultctl, faultd working-set        talk to the server
 *   server/   main, connections, the control server, adoption, keeper
 *   fronts/   one front end each (faultd protocol, CRIU, Firecracker)
 *   engine/   sessions, spaces, push, replay, the kept state
 *   sources/  one source type each (image, file, CRIU, NBD)
 *   common/   this
 */
#ifndef FAULTD_DAEMON_COMMON_H
#define FAULTD_DAEMON_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <syslog.h>

/*
 * log.c - lines to standard error, each written whole with one write(2),
 * so that the lines of concurrent threads never interleave. @level is a
 * syslog(3) priority: LOG_ERR, LOG_WARNING (always written), LOG_INFO
 * (from -v on), LOG_DEBUG (-v -v). When standard error is the journal's
 * stream (systemd's $JOURNAL_STREAM names it), a line starts with the
 * priority as sd-daemon(3) reads it ("<4>faultd: warning: "), so that
 * journalctl -p filters by it; elsewhere with "faultd: warning: ".
 */
void dlog(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_set_verbosity(int verbose);
bool log_enabled(int level);

/* common.c */
int why_set(char *why, size_t why_len, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
uint64_t now_ms(void);
void daemon_std_fds(void);
void daemon_raise_nofile(void);
unsigned int daemon_parse_uint(const char *opt, const char *arg,
			       unsigned int min, unsigned int max);

/*
 * The daemon's own threads that no one joins by name (a session's control
 * loop, a restore that waits for CRIU, an adopted session): each is
 * joined once it is done, or by daemon_threads_wait() at the end.
 */
#define THREADS_WAIT_MS 10000	/* how long a stopping daemon waits */
int daemon_thread_start(void *(*fn)(void *), void *arg, const char *name);
unsigned int daemon_threads_wait(unsigned int ms);

#endif /* FAULTD_DAEMON_COMMON_H */
