/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fc-example.h - the page-fault handler Firecracker ships as its example
 * (src/firecracker/examples/uffd/on_demand_handler.rs with uffd_utils.rs),
 * written again in C as the baseline of the firecracker scenario: what
 * Firecracker users start from.
 */
#ifndef FAULTD_FC_EXAMPLE_H
#define FAULTD_FC_EXAMPLE_H

#include <stdint.h>
#include <sys/types.h>

/* Breakage on purpose, for the tests of the client that must catch it. */
#define FC_EXAMPLE_IGNORE_REMOVE 1u /* read REMOVE events, do nothing */
#define FC_EXAMPLE_SKEW 2u	    /* serve each page from the next one */

struct fc_example_stats {
	uint64_t handshakes;	/* userfaultfds received */
	uint64_t faults;	/* page-fault events read */
	uint64_t copies;	/* pages UFFDIO_COPY installed */
	uint64_t eexist;	/* UFFDIO_COPY: the page was there */
	uint64_t eagain;	/* UFFDIO_COPY: a REMOVE was unread; retried */
	uint64_t enoent;	/* UFFDIO_COPY: its range was unregistered */
	uint64_t removes;	/* REMOVE events (ranges unregistered) */
	uint64_t rounds;	/* passes of the read-all-then-serve loop */
	pid_t peer;		/* SO_PEERCRED of the connection */
};

struct fc_example {
	int listen_fd;		/* a listening Unix stream socket */
	const char *mem_file;
	int stop_fd;		/* readable: stop serving (-1: never) */
	int ready_fd;		/* a byte is written to it once the file is
				   mapped, before accept (-1: none) */
	unsigned int flags;	/* FC_EXAMPLE_* */
	struct fc_example_stats st;	/* out */
	char why[256];		/* out: what went wrong */
};

/*
 * fc_example_serve() - behave as Firecracker's on-demand example handler:
 * map the memory file PROT_READ, MAP_PRIVATE|MAP_POPULATE; accept one
 * connection on ex->listen_fd; for each handshake on it (JSON and the
 * userfaultfd), serve that userfaultfd from one thread, this one: when it
 * is readable, read every event there is, one message a read(); for a
 * page fault, UFFDIO_COPY the one page from the mapping (EEXIST: done;
 * EAGAIN: keep the fault for the next round); for a REMOVE, unregister the
 * range, so that the kernel gives the guest zero pages there; then read
 * and serve again while faults are kept. The handshake must cover the
 * whole file, as the example asserts. One fix, in fc-example.c: ENOENT
 * for a fault in a range it unregistered is done, not fatal.
 * It returns when the peer closes the connection (0; the example itself
 * panics then) or ex->stop_fd is readable (0), else -errno with ex->why
 * (where the example panics). The counts are in ex->st either way.
 * Context: any thread or a child process; blocks until then.
 */
int fc_example_serve(struct fc_example *ex);

/*
 * faultd-bench fc-example SOCKET MEMFILE [--ignore-remove] [--skew]:
 * listen on SOCKET (it appears when it listens), print one JSON line
 * {"listening":SOCKET}, serve one connection, print the counts as one
 * JSON line. Returns the exit status.
 */
int fc_example_main(int argc, char **argv);

#endif /* FAULTD_FC_EXAMPLE_H */
