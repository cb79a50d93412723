// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * sockfile.c - the Unix sockets the daemon makes at a path, and removes.
 *
 * A path is looked up once: its directory is opened (O_PATH) when the
 * socket is made, and everything after goes through that descriptor -
 * bind() and connect() through /proc/self/fd/N/NAME, the stale socket a
 * dead daemon left and our own socket at the end with unlinkat(), and
 * only when the entry is still the inode bind() made. So a user who owns
 * the directory and swaps it (or a folder above it) for a symlink while
 * the daemon runs cannot make it remove anything elsewhere: at worst an
 * entry of that user's own directory. (Names in that directory the user
 * may change at will; protected_hardlinks keeps other users' files out
 * of it.)
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "sockfile.h"

/* @f's address for bind() and connect(): through the directory we hold. */
static int sockfile_addr(const struct sockfile *f, struct sockaddr_un *a)
{
	*a = (struct sockaddr_un){ .sun_family = AF_UNIX };
	if ((size_t)snprintf(a->sun_path, sizeof(a->sun_path),
			     "/proc/self/fd/%d/%s", f->dirfd, f->name) >=
	    sizeof(a->sun_path))
		return -ENAMETOOLONG;
	return 0;
}

/*
 * sockfile_open() - @f names @path: its directory opened (made first, mode
 * 0755, when @mkdir_parent and it is missing), the last component kept.
 * Returns 0, or -errno (-ENAMETOOLONG: the path or its name does not fit
 * a socket address). Nothing is made at @path.
 */
int sockfile_open(struct sockfile *f, const char *path, bool mkdir_parent)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char base[sizeof(dir)];
	const char *name, *parent;

	*f = (struct sockfile){ .dirfd = -1 };
	if (strlen(path) >= sizeof(dir))
		return -ENAMETOOLONG;
	strcpy(dir, path);
	strcpy(base, path);
	name = basename(base);
	parent = dirname(dir);
	if (!name[0] || !strcmp(name, "/") || !strcmp(name, ".") ||
	    !strcmp(name, ".."))
		return -EINVAL;
	if (strlen(name) >= sizeof(f->name))
		return -ENAMETOOLONG;
	strcpy(f->name, name);
	if (mkdir_parent)
		mkdir(parent, 0755);
	f->dirfd = open(parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
	return f->dirfd < 0 ? -errno : 0;
}

/* Does a socket of @type listen at @f? */
static bool sockfile_listened(const struct sockfile *f, int type)
{
	int s = sockfile_connect(f, type);

	if (s >= 0)
		close(s);
	return s >= 0;
}

/*
 * The entry at @f before we bind there: none, or a socket that nobody
 * listens on (one a daemon left when it died), which goes - when
 * @flags has SOCKFILE_ANY, any entry but a folder nobody listens on
 * goes (unlinkat() removes a symlink, never what it points to), else only
 * a socket of our user. -EADDRINUSE: somebody listens; -EEXIST: something
 * else is there.
 */
static int sockfile_clear(const struct sockfile *f, int type,
			  unsigned int flags)
{
	struct stat st;

	if (fstatat(f->dirfd, f->name, &st, AT_SYMLINK_NOFOLLOW))
		return errno == ENOENT ? 0 : -errno;
	if (S_ISDIR(st.st_mode) ||
	    (!(flags & SOCKFILE_ANY) &&
	     (!S_ISSOCK(st.st_mode) || st.st_uid != geteuid())))
		return -EEXIST;
	if (sockfile_listened(f, type))
		return -EADDRINUSE;
	return unlinkat(f->dirfd, f->name, 0) && errno != ENOENT ? -errno : 0;
}

/*
 * sockfile_listen() - a socket of @type listening at @f, with @backlog;
 * the file takes @mode (less the umask) from its bind() on, so that the
 * path is never touched for it after. @flags: SOCKFILE_ANY, see
 * sockfile_clear(). Returns the socket, or -errno: -EADDRINUSE (somebody
 * listens there), -EEXIST (something that may not go is there: refused,
 * not removed).
 */
int sockfile_listen(struct sockfile *f, int type, mode_t mode, int backlog,
		    unsigned int flags)
{
	struct sockaddr_un a;
	struct stat st;
	int s, ret = sockfile_addr(f, &a);

	if (!ret)
		ret = sockfile_clear(f, type, flags);
	if (ret)
		return ret;
	s = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	if (fchmod(s, mode) || bind(s, (struct sockaddr *)&a, sizeof(a)) ||
	    fstatat(f->dirfd, f->name, &st, AT_SYMLINK_NOFOLLOW) ||
	    listen(s, backlog)) {
		ret = -errno;
		close(s);
		return ret;
	}
	f->dev = st.st_dev;
	f->ino = st.st_ino;
	return s;
}

/*
 * sockfile_adopt() - @f names the socket at @path that a daemon before
 * this one made (its listening socket was kept for us): removed at the
 * end as ours, if it is a socket of our user now.
 */
int sockfile_adopt(struct sockfile *f, const char *path)
{
	struct stat st;
	int ret = sockfile_open(f, path, false);

	if (ret)
		return ret;
	if (!fstatat(f->dirfd, f->name, &st, AT_SYMLINK_NOFOLLOW) &&
	    S_ISSOCK(st.st_mode) && st.st_uid == geteuid()) {
		f->dev = st.st_dev;
		f->ino = st.st_ino;
	}
	return 0;
}

/* sockfile_connect() - connect to the socket of @type at @f, or -errno. */
int sockfile_connect(const struct sockfile *f, int type)
{
	struct sockaddr_un a;
	int s, ret = sockfile_addr(f, &a);

	if (ret)
		return ret;
	s = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	if (connect(s, (struct sockaddr *)&a, sizeof(a))) {
		ret = -errno;
		close(s);
		return ret;
	}
	return s;
}

/*
 * sockfile_remove() - remove the socket sockfile_listen() made at @f, if
 * the entry is still that socket (else leave whatever is there).
 */
void sockfile_remove(struct sockfile *f)
{
	struct stat st;

	if (f->dirfd < 0 || !f->ino)
		return;
	if (!fstatat(f->dirfd, f->name, &st, AT_SYMLINK_NOFOLLOW) &&
	    st.st_dev == f->dev && st.st_ino == f->ino)
		unlinkat(f->dirfd, f->name, 0);
	f->ino = 0;
}

/* sockfile_close() - forget @f (its socket file stays). */
void sockfile_close(struct sockfile *f)
{
	if (f->dirfd >= 0)
		close(f->dirfd);
	*f = (struct sockfile){ .dirfd = -1 };
}

/*
 * daemon_listen() - a Unix socket of @type (SOCK_SEQPACKET, SOCK_STREAM)
 * listening at @path, made through @f (sockfile.h: removed at the end by
 * the directory opened now), its mode set by the umask before bind(): the
 * path is not touched after. What is there and nobody listens on goes, as
 * it always did (a folder is refused). Returns it, or -errno (-EADDRINUSE:
 * someone listens there; -EEXIST: a folder is there).
 */
int daemon_listen(struct sockfile *f, const char *path, int type)
{
	mode_t mask;
	int ret = sockfile_open(f, path, true);

	if (ret)
		return ret;
	/*
	 * The file bind() makes takes the socket's mode less the umask, so
	 * the umask sets it: a chmod() of the path afterwards would follow
	 * whatever another user put there meanwhile. No other thread runs
	 * yet to see this umask.
	 */
	mask = umask(geteuid() == 0 ? 0111 : 0177);
	ret = sockfile_listen(f, type, 0777, 128, SOCKFILE_ANY);
	umask(mask);
	return ret;
}
