/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * tmpdir.h - a directory of the test's, and paths in it, for the programs
 * whose tests make files: tmpdir_make() in the suite's setup, path_of()
 * in a test, tmpdir_remove() in the teardown (the directory with what is
 * in it, and the paths). Criterion runs each test in a process of its
 * own: each test has a directory of its own. Criterion runs the teardown
 * only after a test that ran to its end, not after cr_skip_test(): the
 * directory also goes as the test process exits, if it is still there.
 */
#ifndef FAULTD_TEST_TMPDIR_H
#define FAULTD_TEST_TMPDIR_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

static char test_dir[64];	/* made by tmpdir_make() */
static char *paths[32];		/* made by path_of(), freed by tmpdir_remove() */
static size_t nr_paths;

/* Remove the directory, if there is one; system()'s status. */
static inline int tmpdir_rm(void)
{
	char cmd[128];
	int ret = 0;

	if (test_dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf %s", test_dir);
		ret = system(cmd);
		test_dir[0] = '\0';
	}
	return ret;
}

/* At exit nothing may assert: the test has been reported. */
static inline void tmpdir_at_exit(void)
{
	(void)tmpdir_rm();
}

/* Make /var/tmp/faultd-@what-XXXXXX, the test's directory. */
static inline void tmpdir_make(const char *what)
{
	snprintf(test_dir, sizeof(test_dir), "/var/tmp/faultd-%s-XXXXXX",
		 what);
	cr_assert(mkdtemp(test_dir), "mkdtemp %s", test_dir);
	cr_assert_eq(atexit(tmpdir_at_exit), 0);
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
	cr_assert_eq(tmpdir_rm(), 0);
	while (nr_paths)
		free(paths[--nr_paths]);
}

#endif /* FAULTD_TEST_TMPDIR_H */
