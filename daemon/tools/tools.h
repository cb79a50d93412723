/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * tools.h - the commands of faultd that talk to no daemon: faultd
 * working-set (wset_cmd.c).
 */
#ifndef FAULTD_TOOLS_H
#define FAULTD_TOOLS_H

int wset_cmd(int argc, char **argv);

#endif /* FAULTD_TOOLS_H */
