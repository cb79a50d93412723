/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * tmpdir.h - a directory of the test's, and paths in it, for the programs
 * whose tests make files: tmpdir_make() in the suite's setup, path_of()
 * in a test, tmpdir_remove() in the teardown (the directory with what is
 * in it, and the paths). Criterion runs each test in a process of its
 * own: each test has a directory of its own.
 */
#ifndef FAULTD_TEST_TMPDIR_H
#define FAULTD_TEST_TMPDIR_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

static char test_dir[64];	/* made by tmpdir_make() */
static char *paths[32];		/* made by path_of(), freed by tmpdir_remove() */
static size_t nr_paths;

/* Make /var/tmp/faultd-@what-XXXXXX, the test's directory. */
static inline void tmpdir_make(const char *what)
{
	snprintf(test_dir, sizeof(test_dir), "/var/tmp/faultd-%s-XXXXXX",
		 what);
	cr_assert(mkdtemp(test_dir), "mkdtemp %s", test_dir);
}

/* A path in the test's directory; tmpdir_remove() frees it. */
static inline const char *path_of(const char *name)
{
	char *p;

	cr_assert(nr_paths < sizeof(paths) / sizeof(paths[0]));
	cr_assert(asprintf(&p, "%s/%s", test_dir, name) > 0);
	return paths[nr_paths++] = p;
}

/* Remove the directory, with what is in it, and free the paths. */
static inline void tmpdir_remove(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", test_dir);
	cr_assert_eq(system(cmd), 0);
	while (nr_paths)
		free(paths[--nr_paths]);
}

#endif /* FAULTD_TEST_TMPDIR_H */
