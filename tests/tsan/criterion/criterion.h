/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * criterion.h - the part of Criterion's API the test programs use, on a
 * runner of its own, for ThreadSanitizer builds only: tests/meson.build
 * puts this directory before the real header when b_sanitize is "thread".
 *
 * Why: Criterion 2.4 (Debian 12) cannot start under TSan. Its BoxFort arena
 * probes ten random 16 MiB slots of [0x2000'0000'0000, 0x6000'0000'0000)
 * with mincore() for one that is unmapped; TSan (clang 14 and gcc 12 alike)
 * has mapped all of that range as shadow, meta or PROT_NONE except the PIE
 * window [0x5500'0000'0000, 0x5680'0000'0000). bxf_arena_init() then fails
 * ("Could not initialize inheritable arena"), and when it does succeed the
 * next arena's failure crashes libcriterion.
 *
 * What the tests rely on is kept: every test runs in a process of its own
 * (fork, no exec; the runner itself never starts a thread), with the
 * test's or else its suite's .init, .fini and .timeout; .signal and
 * .exit_code say how it must end; assertions end the test (from the test's
 * thread; from another thread they end the process), expectations do not;
 * a skip gives its reason. One line a test, as Criterion prints them, and
 * exit status 1 if any test failed. --filter=SUITE/NAME (an fnmatch
 * pattern) selects tests; --jobs and --verbose are accepted and ignored.
 */
#ifndef FAULTD_TEST_CRITERION_SHIM_H
#define FAULTD_TEST_CRITERION_SHIM_H

/* As for the real header: no warnings from what the macros expand to. */
#pragma GCC system_header

#include <fnmatch.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct shim_opts {
	double timeout; /* seconds; 0: none */
	void (*init)(void);
	void (*fini)(void);
	int signal;	/* the test must die of this signal */
	int exit_code;	/* ... or exit with this status */
	bool disabled;
	const char *description;
};

struct shim_test {
	const char *suite, *name;
	void (*fn)(void);
	struct shim_opts opts;
	struct shim_test *next;
};

struct shim_suite {
	const char *name;
	struct shim_opts opts;
	struct shim_suite *next;
};

#define SHIM_EXIT_SKIP 77

static struct shim_test *shim_tests;
static struct shim_suite *shim_suites;

/* State of the test process. */
static jmp_buf shim_jmp;
static pthread_t shim_test_thread;
static atomic_bool shim_failed;
static atomic_bool shim_skipped;

/* Keeps the list sorted by suite, then name: Criterion's order. */
__attribute__((unused)) static void shim_add_test(struct shim_test *t)
{
	struct shim_test **p = &shim_tests;

	while (*p && (strcmp((*p)->suite, t->suite) < 0 ||
		      (!strcmp((*p)->suite, t->suite) &&
		       strcmp((*p)->name, t->name) < 0)))
		p = &(*p)->next;
	t->next = *p;
	*p = t;
}

__attribute__((unused)) static void shim_add_suite(struct shim_suite *s)
{
	s->next = shim_suites;
	shim_suites = s;
}

#define Test(suite, name, ...)                                                 \
	static void shim_fn_##suite##_##name(void);                            \
	static struct shim_test shim_test_##suite##_##name = {                 \
		#suite, #name, shim_fn_##suite##_##name, { __VA_ARGS__ },      \
		NULL                                                           \
	};                                                                     \
	__attribute__((constructor)) static void shim_reg_##suite##_##name(   \
		void)                                                          \
	{                                                                      \
		shim_add_test(&shim_test_##suite##_##name);                    \
	}                                                                      \
	static void shim_fn_##suite##_##name(void)

#define TestSuite(suite, ...)                                                  \
	static struct shim_suite shim_suite_##suite = { #suite,                \
							{ __VA_ARGS__ }, NULL }; \
	__attribute__((constructor)) static void shim_regsuite_##suite(void)   \
	{                                                                      \
		shim_add_suite(&shim_suite_##suite);                           \
	}                                                                      \
	struct shim_suite

/* Ends the test: from its own thread, through fini; else the process. */
__attribute__((unused, noreturn)) static void shim_end(void)
{
	if (pthread_equal(pthread_self(), shim_test_thread))
		longjmp(shim_jmp, 1);
	exit(EXIT_FAILURE);
}

/*
 * Report a failed check; the caller ends the test after a fatal one, with
 * shim_end() in the macro itself, where the compiler sees that an
 * assertion does not return (else clang, under -Werror, takes a value an
 * assertion checked for maybe uninitialized after it).
 */
__attribute__((unused, format(printf, 5, 6))) static void
shim_fail(bool fatal, const char *file, int line, const char *what,
	  const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	bool has_msg;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	has_msg = msg[strspn(msg, " ")] != '\0';
	fprintf(stderr, "[----] %s:%d: %s failed: %s%s%s\n", file, line,
		fatal ? "Assertion" : "Expectation", what,
		has_msg ? "\n[----] " : "", has_msg ? msg : "");
	atomic_store(&shim_failed, true);
}

__attribute__((unused, noreturn, format(printf, 1, 2))) static void
shim_skip(const char *fmt, ...)
{
	va_list ap;

	flockfile(stderr);
	fputs("[----] skipped:", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	funlockfile(stderr);
	atomic_store(&shim_skipped, true);
	shim_end();
}

__attribute__((unused, format(printf, 1, 2))) static void
shim_log(const char *fmt, ...)
{
	va_list ap;

	flockfile(stderr);
	fputs("[----] ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	funlockfile(stderr);
}

/* The "  " keeps the format non-empty when the caller gives no message. */
#define shim_check_(fatal, cond, what, ...)                                    \
	do {                                                                   \
		if (!(cond)) {                                                 \
			shim_fail(fatal, __FILE__, __LINE__, what,             \
				  "  " __VA_ARGS__);                           \
			if (fatal)                                             \
				shim_end();                                    \
		}                                                              \
	} while (0)
#define shim_cmp_(fatal, a, op, b, ...)                                        \
	shim_check_(fatal, (a)op(b), #a " " #op " " #b, __VA_ARGS__)

#define cr_assert(cond, ...) shim_check_(true, cond, #cond, __VA_ARGS__)
#define cr_expect(cond, ...) shim_check_(false, cond, #cond, __VA_ARGS__)
#define cr_assert_not(cond, ...)                                               \
	shim_check_(true, !(cond), "!(" #cond ")", __VA_ARGS__)
#define cr_expect_not(cond, ...)                                               \
	shim_check_(false, !(cond), "!(" #cond ")", __VA_ARGS__)
#define cr_assert_eq(a, b, ...) shim_cmp_(true, a, ==, b, __VA_ARGS__)
#define cr_expect_eq(a, b, ...) shim_cmp_(false, a, ==, b, __VA_ARGS__)
#define cr_assert_neq(a, b, ...) shim_cmp_(true, a, !=, b, __VA_ARGS__)
#define cr_expect_neq(a, b, ...) shim_cmp_(false, a, !=, b, __VA_ARGS__)
#define cr_assert_lt(a, b, ...) shim_cmp_(true, a, <, b, __VA_ARGS__)
#define cr_expect_lt(a, b, ...) shim_cmp_(false, a, <, b, __VA_ARGS__)
#define cr_assert_leq(a, b, ...) shim_cmp_(true, a, <=, b, __VA_ARGS__)
#define cr_expect_leq(a, b, ...) shim_cmp_(false, a, <=, b, __VA_ARGS__)
#define cr_assert_gt(a, b, ...) shim_cmp_(true, a, >, b, __VA_ARGS__)
#define cr_expect_gt(a, b, ...) shim_cmp_(false, a, >, b, __VA_ARGS__)
#define cr_assert_geq(a, b, ...) shim_cmp_(true, a, >=, b, __VA_ARGS__)
#define cr_expect_geq(a, b, ...) shim_cmp_(false, a, >=, b, __VA_ARGS__)
#define cr_assert_null(p, ...)                                                 \
	shim_check_(true, (p) == NULL, #p " == NULL", __VA_ARGS__)
#define cr_expect_null(p, ...)                                                 \
	shim_check_(false, (p) == NULL, #p " == NULL", __VA_ARGS__)
#define cr_assert_not_null(p, ...)                                             \
	shim_check_(true, (p) != NULL, #p " != NULL", __VA_ARGS__)
#define cr_expect_not_null(p, ...)                                             \
	shim_check_(false, (p) != NULL, #p " != NULL", __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...)                                            \
	shim_check_(true, !strcmp(a, b), #a " == " #b, __VA_ARGS__)
#define cr_expect_str_eq(a, b, ...)                                            \
	shim_check_(false, !strcmp(a, b), #a " == " #b, __VA_ARGS__)
#define cr_expect_str_empty(a, ...)                                            \
	shim_check_(false, !*(a), #a " is empty", __VA_ARGS__)
#define cr_assert_arr_eq(a, b, n, ...)                                         \
	shim_check_(true, !memcmp(a, b, n), #a " == " #b, __VA_ARGS__)
#define cr_expect_arr_eq(a, b, n, ...)                                         \
	shim_check_(false, !memcmp(a, b, n), #a " == " #b, __VA_ARGS__)
#define cr_expect_arr_neq(a, b, n, ...)                                        \
	shim_check_(false, memcmp(a, b, n), #a " != " #b, __VA_ARGS__)
#define cr_assert_fail(...)                                                    \
	do {                                                                   \
		shim_fail(true, __FILE__, __LINE__, "cr_assert_fail",          \
			  "  " __VA_ARGS__);                                   \
		shim_end();                                                    \
	} while (0)
#define cr_skip_test(...) shim_skip(" " __VA_ARGS__)
#define cr_log_info(...) shim_log(__VA_ARGS__)
#define cr_log_warn(...) shim_log(__VA_ARGS__)
#define cr_log_error(...) shim_log(__VA_ARGS__)

/* The test's options: its own, else its suite's. */
__attribute__((unused)) static struct shim_opts
shim_opts_of(const struct shim_test *t)
{
	struct shim_opts o = t->opts;

	for (const struct shim_suite *s = shim_suites; s; s = s->next) {
		if (strcmp(s->name, t->suite))
			continue;
		if (!o.timeout)
			o.timeout = s->opts.timeout;
		if (!o.init)
			o.init = s->opts.init;
		if (!o.fini)
			o.fini = s->opts.fini;
		o.disabled |= s->opts.disabled;
	}
	return o;
}

/* In the test's process: init, the test, fini (also after a failure). */
__attribute__((unused, noreturn)) static void
shim_run_child(const struct shim_test *t, const struct shim_opts *o)
{
	enum { INIT, BODY, FINI, IN_FINI, DONE };
	static volatile int phase = INIT;

	shim_test_thread = pthread_self();
	if (o->timeout > 0)
		alarm((unsigned int)o->timeout + 1);
	if (setjmp(shim_jmp))
		phase = phase < FINI ? FINI : DONE;
	if (phase == INIT) {
		if (o->init)
			o->init();
		phase = BODY;
	}
	if (phase == BODY) {
		t->fn();
		phase = FINI;
	}
	if (phase == FINI) {
		phase = IN_FINI;
		if (o->fini)
			o->fini();
	}
	/* exit(), not _exit(): sanitizers set the status of a finding here. */
	fflush(NULL);
	exit(atomic_load(&shim_skipped) ? SHIM_EXIT_SKIP
		: atomic_load(&shim_failed) ? EXIT_FAILURE : o->exit_code);
}

/* Runs @t in a child; 0 passed, 1 failed, 2 skipped. */
__attribute__((unused)) static int shim_run(const struct shim_test *t)
{
	struct shim_opts o = shim_opts_of(t);
	struct timespec t0, t1;
	int status, ret;
	pid_t pid;

	if (o.disabled)
		return 2;
	fprintf(stderr, "[RUN ] %s::%s\n", t->suite, t->name);
	fflush(NULL);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid = fork();
	if (pid == 0)
		shim_run_child(t, &o);
	if (pid < 0 || waitpid(pid, &status, 0) != pid) {
		perror("criterion shim: fork/waitpid");
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (WIFSIGNALED(status) && WTERMSIG(status) == o.signal)
		ret = 0;
	else if (WIFSIGNALED(status))
		ret = 1;
	else if (WEXITSTATUS(status) == SHIM_EXIT_SKIP)
		ret = 2;
	else
		ret = o.signal || WEXITSTATUS(status) != o.exit_code;
	if (ret == 1 && WIFSIGNALED(status))
		fprintf(stderr, "[----] %s::%s: %s (signal %d)\n", t->suite,
			t->name, WTERMSIG(status) == SIGALRM ? "timed out"
							     : "crashed",
			WTERMSIG(status));
	else if (ret == 1)
		fprintf(stderr, "[----] %s::%s: exit status %d\n", t->suite,
			t->name, WEXITSTATUS(status));
	fprintf(stderr, "[%s] %s::%s: (%.2fs)\n",
		ret == 0 ? "PASS" : ret == 1 ? "FAIL" : "SKIP", t->suite,
		t->name, (double)(t1.tv_sec - t0.tv_sec) +
				 (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	return ret;
}

int main(int argc, char **argv)
{
	const char *filter = NULL;
	int counts[3] = { 0 };
	char id[256];

	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--filter=", 9))
			filter = argv[i] + 9;
		else if (!strcmp(argv[i], "--filter") && i + 1 < argc)
			filter = argv[++i];
		else if (!strcmp(argv[i], "--jobs") && i + 1 < argc)
			i++;
	}
	for (const struct shim_test *t = shim_tests; t; t = t->next) {
		snprintf(id, sizeof(id), "%s/%s", t->suite, t->name);
		if (filter && fnmatch(filter, id, 0))
			continue;
		counts[shim_run(t)]++;
	}
	fprintf(stderr, "[====] Synthesis: Tested: %d | Passing: %d | "
		"Failing: %d | Skipped: %d\n", counts[0] + counts[1],
		counts[0], counts[1], counts[2]);
	return counts[1] ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif /* FAULTD_TEST_CRITERION_SHIM_H */
