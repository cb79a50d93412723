/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* uffd-minimal.h - a bare userfaultfd zero-fill loop, the bench's floor. */
#ifndef FAULTD_UFFD_MINIMAL_H
#define FAULTD_UFFD_MINIMAL_H

#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stddef.h>

struct uffd_minimal {
	int uffd;
	pthread_t thread;
	void *zeros;
	int cpu;
};

/* @cpu: pin the handler there (-1: anywhere). */
int uffd_minimal_start(struct uffd_minimal *m, int cpu);
int uffd_minimal_register(struct uffd_minimal *m, void *p, size_t len);
void uffd_minimal_stop(struct uffd_minimal *m);

#endif
