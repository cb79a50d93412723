/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * sockfile.h - a Unix socket the daemon makes at a path and removes by
 * the directory it opened, never by the path looked up again
 * (sockfile.c).
 */
#ifndef FAULTD_SOCKFILE_H
#define FAULTD_SOCKFILE_H

#include <stdbool.h>
#include <sys/types.h>

struct sockfile {
	int dirfd;		/* its directory (O_PATH); -1: none */
	char name[64];		/* its entry there */
	dev_t dev;		/* of the socket file we made ... */
	ino_t ino;		/* ... 0: none made */
};

#define SOCKFILE_INIT { .dirfd = -1 }

int sockfile_open(struct sockfile *f, const char *path, bool mkdir_parent);
#define SOCKFILE_ANY (1u << 0) /* replace any entry nobody listens on */

int sockfile_listen(struct sockfile *f, int type, mode_t mode, int backlog,
		    unsigned int flags);
int sockfile_adopt(struct sockfile *f, const char *path);
int sockfile_connect(const struct sockfile *f, int type);
void sockfile_remove(struct sockfile *f);
void sockfile_close(struct sockfile *f);
int daemon_listen(struct sockfile *f, const char *path, int type);

#endif /* FAULTD_SOCKFILE_H */
