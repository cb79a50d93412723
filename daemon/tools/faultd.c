// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * faultd.c - the faultd program: its commands that are tools (faultd
 * working-set), the keeper it starts (faultd keeper), and everything else
 * for the server (server/main.c): the daemon and the front ends' commands.
 * At the top of the daemon's layers, so that the server never calls up
 * into a tool.
 */
#include <string.h>

#include "server.h"
#include "tools.h"

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";

	if (!strcmp(cmd, "keeper"))
		return server_keeper(argc - 1, argv + 1);
	if (!strcmp(cmd, "working-set"))
		return wset_cmd(argc - 1, argv + 1);
	return server_main(argc, argv);
}
