// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * threads.c - the engine suite: how many handler threads a session gets
 * (session.c, default_handlers() and session_own_source()). By default
 * one per CPU but one, at least 1 and at most 4: the restored program
 * runs beside them. A session whose source is remote (its reads wait on
 * another host) gets 4, whose handlers sleep on the network, so that
 * more faults are fetched at once - decided before its first space, whose
 * port is made for the handlers there are. A count asked for is kept.
 * The threads counted are those running, by name, in /proc/self/task.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

#define HANDLERS_MAX 4	/* session.c */
#define PAGES 16

/* The threads of this process named faultd-h (the handlers). */
static unsigned int handler_threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	unsigned int n = 0;

	cr_assert(d);
	while ((e = readdir(d))) {
		char path[300], comm[32] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm",
			 e->d_name);
		f = fopen(path, "r");
		if (f && fgets(comm, sizeof(comm), f) &&
		    !strncmp(comm, "faultd-h", 8))
			n++;
		if (f)
			fclose(f);
	}
	closedir(d);
	return n;
}

static unsigned int per_cpu_but_one(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN) - 1;

	return n < 1 ? 1 : n > HANDLERS_MAX ? HANDLERS_MAX : (unsigned int)n;
}

/*
 * A session of @handlers (0: the default) owning two sources, remote or
 * not, then a space on the first; or (@space_first) a local source, its
 * space, then a remote source. Returns the handler threads it runs.
 */
static unsigned int session_threads(unsigned int handlers, bool remote,
				    bool space_first)
{
	struct session_opts o = { .name = "threads", .handlers = handlers };
	struct msrc_opts so = { .size = PAGES * PG, .tag = 0x7d };
	struct msrc *m, *m2;
	struct front f;
	struct srange r;
	const char *why = "";
	char *base;
	unsigned int n;
	int uffd = uffd_new(0);

	cr_assert_geq(uffd, 0);
	cr_assert_eq(msrc_create(&so, &m), 0);
	cr_assert_eq(msrc_create(&so, &m2), 0);
	msrc_source(m)->remote = remote;
	msrc_source(m2)->remote = remote && !space_first;
	base = mmap(NULL, PAGES * PG, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert(base != MAP_FAILED);
	cr_assert_eq(uffd_register_range(uffd, base, PAGES * PG), 0);
	r = (struct srange){ (uintptr_t)base, PAGES * PG, 0 };
	cr_assert_eq(front_create(&f, &o), 0);
	cr_assert_eq(session_own_source(f.s, msrc_source(space_first ? m2 : m)),
		     0);
	cr_assert_eq(session_add_space(f.s, uffd, 0, -1, 1,
				       msrc_source(space_first ? m2 : m), &r,
				       1, NULL, 0, &why, NULL),
		     0, "%s", why);
	if (space_first)
		cr_assert_eq(session_own_source(f.s, msrc_source(m)), 0);
	else
		cr_assert_eq(session_own_source(f.s, msrc_source(m2)), 0);
	cr_assert_eq(front_run(&f), 0);
	n = handler_threads();
	cr_assert_eq(n, session_handlers(f.s), "%u threads run, the session "
		     "says %u", n, session_handlers(f.s));
	front_free(&f);
	munmap(base, PAGES * PG);
	return n;
}

TestSuite(threads, .timeout = 60);

Test(threads, local_sources_leave_a_cpu_to_the_program)
{
	cr_assert_eq(session_threads(0, false, false), per_cpu_but_one());
}

Test(threads, remote_sources_get_more_handlers)
{
	cr_assert_eq(session_threads(0, true, false), HANDLERS_MAX);
}

Test(threads, a_count_asked_for_is_kept)
{
	cr_assert_eq(session_threads(2, true, false), 2);
	cr_assert_eq(session_threads(3, false, false), 3);
}

/* A remote source owned after the first space: that space's port was
 * made for the default count, which stays. */
Test(threads, the_count_is_decided_before_the_first_space)
{
	cr_assert_eq(session_threads(0, true, true), per_cpu_but_one());
}
