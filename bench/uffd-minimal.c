// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * uffd-minimal.c - the floor of userfaultfd cost: the smallest handler loop
 * a program could write for itself. One thread, a blocking read() of one
 * message at a time, and the same resolution libfaultd uses for zero-fill
 * (a copy of zeros for a write, UFFDIO_ZEROPAGE for a read). No lookup, no
 * locks, no counters. Stopped with pthread_cancel() in read().
 */
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "uffd-minimal.h"

static void *minimal_loop(void *arg)
{
	struct uffd_minimal *m = arg;
	struct uffd_msg msg;

	if (m->cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(m->cpu, &set);
		sched_setaffinity(0, sizeof(set), &set);
	}

	for (;;) {
		if (read(m->uffd, &msg, sizeof(msg)) != sizeof(msg))
			continue;
		if (msg.event != UFFD_EVENT_PAGEFAULT)
			continue;
		uintptr_t addr = msg.arg.pagefault.address & ~4095ul;

		if (msg.arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WRITE) {
			struct uffdio_copy c = { .dst = addr,
						 .src = (uintptr_t)m->zeros,
						 .len = 4096 };
			ioctl(m->uffd, UFFDIO_COPY, &c);
		} else {
			struct uffdio_zeropage z = {
				.range = { .start = addr, .len = 4096 } };
			ioctl(m->uffd, UFFDIO_ZEROPAGE, &z);
		}
	}
	return NULL;
}

int uffd_minimal_start(struct uffd_minimal *m, int cpu)
{
	struct uffdio_api api = { .api = UFFD_API };
	int ret;

	m->cpu = cpu;
	m->uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
	if (m->uffd < 0)
		return -errno;
	if (ioctl(m->uffd, UFFDIO_API, &api) < 0) {
		ret = -errno;
		close(m->uffd);
		return ret;
	}
	m->zeros = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS,
			-1, 0);
	ret = -pthread_create(&m->thread, NULL, minimal_loop, m);
	if (ret) {
		close(m->uffd);
		munmap(m->zeros, 4096);
	}
	return ret;
}

int uffd_minimal_register(struct uffd_minimal *m, void *p, size_t len)
{
	struct uffdio_register reg = {
		.range = { .start = (uintptr_t)p, .len = len },
		.mode = UFFDIO_REGISTER_MODE_MISSING,
	};

	return ioctl(m->uffd, UFFDIO_REGISTER, &reg) < 0 ? -errno : 0;
}

void uffd_minimal_stop(struct uffd_minimal *m)
{
	pthread_cancel(m->thread);
	pthread_join(m->thread, NULL);
	close(m->uffd);
	munmap(m->zeros, 4096);
}
