// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * cmdline.c - what the command lines of faultd and faultctl share: strict
 * numbers. atoi() took "abc" as 0; an option's value is all digits, in
 * range, or the command exits with a usage error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

/*
 * cmdline_uint() - all of @arg a decimal number in [@min, @max], or
 * "@prog: --@opt: '@arg' is not a number from @min to @max" and exit(2).
 */
unsigned int cmdline_uint(const char *prog, const char *opt, const char *arg,
			  unsigned int min, unsigned int max)
{
	unsigned long v;
	char *end;

	errno = 0;
	v = strtoul(arg, &end, 10);
	if (*arg < '0' || *arg > '9' || *end || errno || v < min || v > max) {
		fprintf(stderr, "%s: --%s: '%s' is not a number from %u to "
			"%u\n", prog, opt, arg, min, max);
		exit(2);
	}
	return (unsigned int)v;
}
