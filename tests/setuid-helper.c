// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * setuid-helper.c - a program for tests/attacks.c to install set-user-ID
 * root: it does nothing but wait until its standard input ends, so that a
 * test can look at a process that exec'd it.
 */
#include <unistd.h>

int main(void)
{
	char c;

	while (read(0, &c, 1) > 0)
		;
	return 0;
}
