// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * setting-hold.c - run a command (a test suite) while holding a machine-wide
 * setting it needs, shared with every other holder on the machine
 * (tests/setting.h): the first holder changes it, the last one to end puts
 * it back, a holder that died is undone by the next.
 *
 *   setting-hold --at-least N | --word W  FILE PREFIX -- COMMAND [ARG]...
 *
 * --at-least: FILE holds a number, at least N while the command runs;
 * --word: FILE holds the word W (the THP mode, say). PREFIX names the
 * lock files (/tmp/faultd-...). When the setting cannot be changed (not
 * root), that is said on stderr and the command runs anyway: its tests
 * check the setting and skip with the reason. SIGINT, SIGTERM and SIGHUP
 * go on to the command. Exits as the command did (128 + its signal).
 */
#include <signal.h>
#include <sys/wait.h>

#include "setting.h"

static pid_t child;

static void pass_on(int sig)
{
	if (child > 0)
		kill(child, sig);
}

static int usage(void)
{
	fprintf(stderr, "usage: setting-hold --at-least N | --word W FILE "
			"PREFIX -- COMMAND [ARG]...\n");
	return 2;
}

/* Run argv until it ends; its status as an exit code. */
static int run(char **argv)
{
	struct sigaction sa = { .sa_handler = pass_on };
	int st;

	child = fork();
	if (child < 0) {
		perror("setting-hold: fork");
		return 125;
	}
	if (child == 0) {
		execvp(argv[0], argv);
		fprintf(stderr, "setting-hold: %s: %s\n", argv[0],
			strerror(errno));
		_exit(127);
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	while (waitpid(child, &st, 0) < 0)
		if (errno != EINTR)
			return 125;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv)
{
	unsigned long n = 0;
	const char *why;
	bool word;
	struct setting s;
	int ret;

	if (argc < 7 || strcmp(argv[5], "--"))
		return usage();
	word = !strcmp(argv[1], "--word");
	if (!word && strcmp(argv[1], "--at-least"))
		return usage();
	if (!word) {
		char *end;

		n = strtoul(argv[2], &end, 10);
		if (*end || end == argv[2])
			return usage();
	}
	s = (struct setting)SETTING_INIT(argv[3], argv[4]);
	ret = setting_share(&s, word ? setting_word : setting_at_least,
			    word ? (void *)argv[2] : &n, &why);
	if (ret)
		fprintf(stderr, "setting-hold: %s: %s (%s): the tests that "
				"need it say so\n",
			argv[3], why, strerror(-ret));
	ret = run(argv + 6);
	setting_release(&s);
	return ret;
}
