/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * setting.h - a machine-wide setting a test needs (a sysctl, the huge page
 * pool, the THP mode), changed so that test runs on one machine - CI and a
 * developer's, or two checkouts - never change it under each other. Plain
 * C: the huge page pool (hugepool.h), tests/setting-hold.c (which holds
 * one for a whole suite) and the tests that check one use it.
 *
 * A setting has a lock, PREFIX.lock (one prefix may cover several files:
 * the huge page pools), a guard, PREFIX.guard, and a record of its value
 * before the changes, PREFIX.FILE.state (FILE: its path, "/" made "-").
 * It is held in one of two ways:
 *
 *   shared     (setting_share()) by any number of holders at once, each
 *              with a shared flock on PREFIX.lock for as long as it holds:
 *              the kernel's count of users. Each may change the value (to
 *              at least a number, by a number more, to a word); the first
 *              change records the value before it, and the last holder to
 *              let go writes that back.
 *   exclusive  (setting_exclusive()) by one holder alone, an exclusive
 *              flock on PREFIX.lock, waited for; it may set any value
 *              (setting_set()), and its release writes the value before
 *              back. For tests that count what the setting gives (the
 *              free huge pages, say).
 *
 * Joining and leaving take PREFIX.guard, so that "am I the last one?" and
 * the restore are one step. A holder that dies (a crash, a test killed for
 * its timeout) loses its flocks with its last descriptor; whoever takes
 * the setting next with no one holding it finds the record and writes
 * that value back first. A record is trusted only if this user wrote it,
 * and only for the file the caller names. Functions return 0 or -errno,
 * with *why.
 */
#ifndef FAULTD_TEST_SETTING_H
#define FAULTD_TEST_SETTING_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define SETTING_LEN 64		/* a value, as text */

struct setting {
	const char *path;	/* the file of the setting */
	const char *prefix;	/* of its lock and state files, in /tmp */
	int guard, lock;	/* while held, else -1 */
	bool exclusive;
};

#define SETTING_INIT(path_, prefix_)                                           \
	{ .path = (path_), .prefix = (prefix_), .guard = -1, .lock = -1 }

/*
 * The value in @path: its first word, or the word in brackets where the
 * file lists the choices ("always [madvise] never").
 */
static inline int setting_read(const char *path, char *v, size_t len)
{
	char line[256], *b, *e;
	FILE *f = fopen(path, "re");
	int err = f ? 0 : -errno;

	if (f && !fgets(line, sizeof(line), f))
		err = -EIO;
	if (f)
		fclose(f);
	if (err)
		return err;
	b = strchr(line, '[');
	e = b ? strchr(b, ']') : NULL;
	if (b && e) {
		*e = '\0';
		b++;
	} else {
		b = line + strspn(line, " \t");
		b[strcspn(b, " \t\n")] = '\0';
	}
	return (size_t)snprintf(v, len, "%s", b) < len ? 0 : -ENAMETOOLONG;
}

static inline int setting_write(const char *path, const char *v)
{
	FILE *f = fopen(path, "we");
	int err;

	if (!f)
		return -errno;
	err = fprintf(f, "%s\n", v) < 0 ? -EIO : 0;
	if (fclose(f) && !err)
		err = -errno;
	return err;
}

/* The number in @path, 0 if it cannot be read. */
static inline unsigned long setting_number(const char *path)
{
	char v[SETTING_LEN];

	return setting_read(path, v, sizeof(v)) ? 0 : strtoul(v, NULL, 10);
}

static inline int setting_open(const struct setting *s, const char *ext)
{
	char p[256];
	int fd;

	snprintf(p, sizeof(p), "%s.%s", s->prefix, ext);
	/* Any user's test may take it: not the umask's mode. */
	fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
	if (fd >= 0)
		fchmod(fd, 0666);
	return fd < 0 ? -errno : fd;
}

static inline void setting_state_file(const struct setting *s, char *buf,
				      size_t len)
{
	size_t n = (size_t)snprintf(buf, len, "%s.", s->prefix);

	for (const char *c = s->path; *c && n + 7 < len; c++)
		buf[n++] = *c == '/' ? '-' : *c;
	snprintf(buf + n, len - n, ".state");
}

/* The value recorded before the first change ("PATH VALUE"), if any. */
static inline bool setting_recorded(const struct setting *s, char *v,
				    size_t len)
{
	char p[256], path[256], val[SETTING_LEN];
	struct stat st;
	FILE *f;
	bool got;

	setting_state_file(s, p, sizeof(p));
	f = fopen(p, "re");
	got = f && !fstat(fileno(f), &st) && st.st_uid == geteuid() &&
	      fscanf(f, "%255s %63s", path, val) == 2 &&
	      !strcmp(path, s->path);
	if (f)
		fclose(f);
	if (got)
		snprintf(v, len, "%s", val);
	return got;
}

/* Record @v as the value before the changes: written whole, then renamed. */
static inline int setting_record(const struct setting *s, const char *v)
{
	char p[256], tmp[280];
	FILE *f;
	int err = 0;

	setting_state_file(s, p, sizeof(p));
	snprintf(tmp, sizeof(tmp), "%s.%d", p, (int)getpid());
	f = fopen(tmp, "we");
	if (!f)
		return -errno;
	if (fprintf(f, "%s %s\n", s->path, v) < 0)
		err = -EIO;
	if (fclose(f) && !err)
		err = -errno;
	if (!err && rename(tmp, p))
		err = -errno;
	if (err)
		unlink(tmp);
	return err;
}

/* Write back the value recorded, if any, and forget it. Context: the
 * guard, and no one else holds the setting. */
static inline void setting_restore_locked(const struct setting *s)
{
	char v[SETTING_LEN], p[256];

	setting_state_file(s, p, sizeof(p));
	if (setting_recorded(s, v, sizeof(v)) && !setting_write(s->path, v))
		unlink(p);
}

static inline void setting_close(struct setting *s)
{
	if (s->lock >= 0)
		close(s->lock);
	if (s->guard >= 0)
		close(s->guard);
	s->lock = s->guard = -1;
}

/*
 * setting_set() - set @s to @v, recording the value before if no change
 * is recorded yet. Context: held exclusive, or shared with the guard
 * (setting_share() calls it).
 */
static inline int setting_set(struct setting *s, const char *v,
			      const char **why)
{
	char cur[SETTING_LEN], p[256];
	bool recorded = setting_recorded(s, cur, sizeof(cur));
	int err;

	if (!recorded) {
		*why = "cannot read the setting";
		err = setting_read(s->path, cur, sizeof(cur));
		if (err || !strcmp(cur, v))
			return err;
		*why = "cannot record its value (in /tmp)";
		err = setting_record(s, cur);
		if (err)
			return err;
	}
	*why = "cannot write the setting (not root?)";
	err = setting_write(s->path, v);
	if (err && !recorded) { /* nothing changed: nothing to undo */
		setting_state_file(s, p, sizeof(p));
		unlink(p);
	}
	return err;
}

/*
 * How a shared holder changes the value: @cur into @next (@len bytes),
 * with @arg. setting_at_least() (arg: unsigned long *), setting_more()
 * (the same, added) and setting_word() (arg: the word).
 */
typedef void setting_fn(const char *cur, char *next, size_t len, void *arg);

static inline void setting_at_least(const char *cur, char *next, size_t len,
				    void *arg)
{
	unsigned long c = strtoul(cur, NULL, 10), want = *(unsigned long *)arg;

	snprintf(next, len, "%lu", c > want ? c : want);
}

static inline void setting_more(const char *cur, char *next, size_t len,
				void *arg)
{
	snprintf(next, len, "%lu",
		 strtoul(cur, NULL, 10) + *(unsigned long *)arg);
}

static inline void setting_word(const char *cur, char *next, size_t len,
				void *arg)
{
	(void)cur;
	snprintf(next, len, "%s", (const char *)arg);
}

static inline int setting_open_both(struct setting *s, const char **why)
{
	int g = setting_open(s, "guard"), l = g < 0 ? g : setting_open(s, "lock");

	*why = "cannot open its lock files in /tmp";
	if (g < 0 || l < 0) {
		if (g >= 0)
			close(g);
		return g < 0 ? g : l;
	}
	s->guard = g;
	s->lock = l;
	return 0;
}

/* Join the holders, under the guard: undo a dead holder's change if no
 * one holds it, and wait out an exclusive holder (not with the guard
 * held: one that waits for the lock takes the guard next). */
static inline void setting_join_locked(struct setting *s)
{
	for (;;) {
		flock(s->guard, LOCK_EX);
		if (!flock(s->lock, LOCK_EX | LOCK_NB))
			setting_restore_locked(s);
		if (!flock(s->lock, LOCK_SH | LOCK_NB))
			return;
		flock(s->guard, LOCK_UN);
		flock(s->lock, LOCK_SH);
		flock(s->lock, LOCK_UN);
	}
}

/*
 * setting_share() - hold @s shared, and change it with @fn (NULL: leave
 * it). Until setting_release(), also when the change failed (-errno, with
 * *why): a caller may go on without it.
 */
static inline int setting_share(struct setting *s, setting_fn *fn, void *arg,
				const char **why)
{
	char cur[SETTING_LEN], next[SETTING_LEN];
	int err = setting_open_both(s, why);

	if (err)
		return err;
	s->exclusive = false;
	setting_join_locked(s);
	if (fn) {
		*why = "cannot read the setting";
		err = setting_read(s->path, cur, sizeof(cur));
		if (!err) {
			fn(cur, next, sizeof(next), arg);
			if (strcmp(cur, next))
				err = setting_set(s, next, why);
		}
	}
	flock(s->guard, LOCK_UN);
	return err;
}

/*
 * setting_exclusive() - hold @s alone: wait until no one else does, undo
 * what a holder that died left, and keep the guard until the release.
 */
static inline int setting_exclusive(struct setting *s, const char **why)
{
	int err = setting_open_both(s, why);

	if (err)
		return err;
	s->exclusive = true;
	*why = "cannot lock it";
	if (flock(s->lock, LOCK_EX) || flock(s->guard, LOCK_EX)) {
		err = -errno;
		setting_close(s);
		return err;
	}
	setting_restore_locked(s);
	return 0;
}

/*
 * setting_release() - let go of @s; the last holder (or the exclusive
 * one) writes back the value before the changes. Harmless when not held.
 */
static inline void setting_release(struct setting *s)
{
	if (s->lock < 0)
		return;
	if (!s->exclusive)
		flock(s->guard, LOCK_EX);
	/* Fails while another holder shares it: then this one is not the
	 * last (the conversion gives up its shared lock either way). */
	if (s->exclusive || !flock(s->lock, LOCK_EX | LOCK_NB))
		setting_restore_locked(s);
	setting_close(s);
}

#endif /* FAULTD_TEST_SETTING_H */
