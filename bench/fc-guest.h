/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fc-guest.h - the Firecracker side of a snapshot restore, for the
 * scenarios that restore guests (firecracker.c, remote.c): a guest's
 * memory restored the way Firecracker restores it, and faultd firecracker
 * started as its page-fault handler.
 */
#ifndef FAULTD_BENCH_FC_GUEST_H
#define FAULTD_BENCH_FC_GUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct fc_guest {
	uint8_t *base;		/* 2 MiB-aligned */
	uint64_t size, pages;	/* pages of 4 KiB */
	int uffd, sock;
	uint64_t sent_ns;	/* the handshake's sendmsg() returned */
};

/*
 * fc_guest_restore() - what Firecracker does on a snapshot load with the
 * Uffd backend: anonymous private memory of @size bytes, 2 MiB-aligned,
 * a userfaultfd of its own with REMOVE events, every page registered for
 * missing faults, and one sendmsg() of the regions' JSON (one region, at
 * file offset 0) with the userfaultfd to the handler at @sock. 0 or
 * -errno; fc_guest_end() in either case.
 */
int fc_guest_restore(struct fc_guest *g, const char *sock, uint64_t size);

/* The guest goes: its socket, userfaultfd and memory (the handler sees
 * its peer go). */
void fc_guest_end(struct fc_guest *g);

/* faultd, next to faultd-bench or $FAULTD_DAEMON, into @exe. */
bool fc_faultd_exe(char *exe, size_t len);

/*
 * fc_faultd_start() - `faultd firecracker --socket @sock` with @args
 * (NULL-ended), its standard output into *@out (a pipe; NULL: none), its
 * standard error to @log (NULL: inherited), once it said READY=1 on the
 * socket @notify. Returns its pid, or -1 (*why says why: no faultd, or it
 * did not get ready).
 */
pid_t fc_faultd_start(const char *sock, const char *notify,
		      const char *const *args, int *out, const char *log,
		      const char **why);

/* Wait for a handler to exit: 0 when it exited 0. */
int fc_handler_wait(pid_t pid);

/* splitmix64 of @x: the memory files' words, and the benches' orders. */
uint64_t fc_mix(uint64_t x);

/* Write a guest's memory file of @size bytes at @path (made, mode 0600):
 * word i is fc_mix(i). 0 or -errno. */
int fc_mem_file_write(const char *path, uint64_t size);

#endif /* FAULTD_BENCH_FC_GUEST_H */
