// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * abi-version.c - print the version the shared library reports and the one
 * faultd.h was compiled with, for tests/install/abi-check.sh to compare
 * with the meson project version.
 */
#include <stdio.h>

#include <faultd.h>

int main(void)
{
	printf("%s %s\n", faultd_version(), FAULTD_VERSION_STRING);
	return 0;
}
