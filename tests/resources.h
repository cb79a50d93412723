/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * resources.h - what a process holds that a leak would show: its file
 * descriptors, mappings and threads, counted from /proc, for tests that
 * check a failure (or a run of work) leaves nothing behind.
 *
 * Counts are compared after a first, warm-up pass of the same kind of
 * work: glibc keeps the stacks of exited threads and its malloc arenas,
 * liburcu-bp its registry of reader threads, and each thread that calls a
 * file pager keeps its io_uring for the next use (until it exits, or
 * releases a file pager). (Tests can also run
 * with GLIBC_TUNABLES=glibc.pthread.stack_cache_size=0:glibc.malloc.
 * arena_max=1 so that glibc keeps none.)
 */
#ifndef FAULTD_TEST_RESOURCES_H
#define FAULTD_TEST_RESOURCES_H

#include <dirent.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

struct resources {
	long fds;	/* entries of /proc/PID/fd */
	long maps;	/* lines of /proc/PID/maps */
	long threads;	/* entries of /proc/PID/task */
};

/* Entries of a directory, "." and ".." aside; -1 if it cannot be read. */
static inline long resources_entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	long n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* Lines of a file; -1 if it cannot be read. */
static inline long resources_lines(const char *path)
{
	FILE *f = fopen(path, "re");
	long n = 0;
	int c;

	if (!f)
		return -1;
	while ((c = getc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

/* The counts of process @pid (0: this one). The directory and file being
 * read are open while they are counted, in every reading alike. */
static inline struct resources resources_of(pid_t pid)
{
	char path[64], self[16] = "self";
	struct resources r;

	if (pid)
		snprintf(self, sizeof(self), "%d", (int)pid);
	snprintf(path, sizeof(path), "/proc/%s/fd", self);
	r.fds = resources_entries(path);
	snprintf(path, sizeof(path), "/proc/%s/maps", self);
	r.maps = resources_lines(path);
	snprintf(path, sizeof(path), "/proc/%s/task", self);
	r.threads = resources_entries(path);
	return r;
}

static inline struct resources resources_now(void)
{
	return resources_of(0);
}

/*
 * AddressSanitizer's allocator maps memory as it goes: there mappings are
 * not compared (LeakSanitizer checks memory instead).
 */
#if defined(__SANITIZE_ADDRESS__)
#define RESOURCES_MAPS_EXACT 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RESOURCES_MAPS_EXACT 0
#endif
#endif
#ifndef RESOURCES_MAPS_EXACT
#define RESOURCES_MAPS_EXACT 1
#endif

static inline bool resources_equal(struct resources a, struct resources b)
{
	return a.fds == b.fds && a.threads == b.threads &&
	       (a.maps == b.maps || !RESOURCES_MAPS_EXACT);
}

/*
 * The counts once they equal @want, or after @timeout_ms (a deadline: the
 * caller compares the result). A joined thread's /proc entry can outlive
 * pthread_join() by a moment: the kernel clears the thread id the join
 * waits for before it removes the task.
 */
static inline struct resources resources_settle(struct resources want,
						int timeout_ms)
{
	struct timespec t;
	uint64_t now, end;
	struct resources r;

	clock_gettime(CLOCK_MONOTONIC, &t);
	end = (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000 +
	      (uint64_t)timeout_ms;
	for (;;) {
		r = resources_now();
		clock_gettime(CLOCK_MONOTONIC, &t);
		now = (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
		if (resources_equal(r, want) || now >= end)
			return r;
		sched_yield();
	}
}

#endif /* FAULTD_TEST_RESOURCES_H */
