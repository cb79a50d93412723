/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * daemon.h - what the parts of the faultd daemon share: options, logging,
 * sessions, and the checks of a registration.
 *
 * Threads: the main thread accepts connections (faultd.c); each
 * connection gets a thread that reads its HELLO and REGISTER and, once the
 * registration is accepted, becomes the session's fault thread; each
 * session also has two push threads, at nice 19, that fill the rest in
 * the background (session.c). Lock order: sessions_lock > session->lock
 * (an rwlock).
 */
#ifndef FAULTD_DAEMON_H
#define FAULTD_DAEMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "internal.h"
#include "proto.h"

/* faultd.c - options, logging */
struct daemon_opts {
	const char *socket;
	int verbose;		/* 0: warnings, 1: info, 2: debug */
	unsigned int max_sessions;
};

extern struct daemon_opts dopts;
extern uint64_t daemon_started_ms;

void dlog(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t now_ms(void);

/* A range of the client, mapped to the image (proto_range, in use). */
struct srange {
	uint64_t start, len, image_off;
};

#define PUSHERS 2	/* push threads per session */

struct session {
	uint64_t id;
	int sock, uffd, pidfd, wake_fd;
	pid_t pid;
	uint64_t features;	/* UFFD_FEATURE_* of the client's uffd */
	bool lazy;		/* PROTO_REG_LAZY: no push threads */
	struct image *img;
	uint64_t started_ms;

	/* Read: copying into the client, translating addresses. Write:
	 * an event changes the ranges or removes pages. */
	pthread_rwlock_t lock;
	struct srange r[PROTO_MAX_RANGES * 2 + 2];
	unsigned int nr;
	_Atomic uint64_t *removed; /* image pages: zeros from now on */
	_Atomic uint64_t *served;  /* image blocks: in (or nothing to do) */
	uint64_t nr_pages, nr_blocks;
	atomic_uint_fast64_t blocks_done;

	atomic_bool stop;	/* end: client gone, daemon stopping, done */
	atomic_uint_fast64_t faults, pages_urgent, pages_background;
	atomic_uint_fast64_t prefetch_block; /* hint; UINT64_MAX: none */
	atomic_uint_fast64_t push_from;	/* after the last fault's block */
	pthread_t pushers[PUSHERS];
	unsigned int nr_pushers;
	struct stat_block lat;	/* fault latency; the fault thread writes */
	struct session *next;	/* sessions, under sessions_lock */
};

/* session.c */
int session_run(struct session *s);
void session_progress(struct session *s, struct proto_progress *p,
		      enum proto_type type);
void session_free(struct session *s);
void sessions_stop_all(void);
size_t sessions_status(struct proto_session *out, size_t max);

/* check.c - the checks of a registration */
int check_uffd(int fd);
int check_ranges(const struct proto_register *m, const struct image *img,
		 pid_t pid, const char **why);

#endif /* FAULTD_DAEMON_H */
