// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * criu_sum.c - a sidecar of per-page CRC32C of a CRIU dump's pages files
 * (criu.h): CRIU writes pages-N.img with no checksum, so faultd computes
 * one from a dump it trusts (`faultd lazy-pages --sum -D DIR`) and checks
 * every page it serves against it (`--verify FILE`).
 *
 * The file, in the host's byte order:
 *   head     magic "FDCRCSUM", u32 version 1, u32 block size (4096),
 *            u32 number of files, u32 CRC32C of everything after the head
 *   files    per pages file: u32 N (of pages-N.img), u32 0, u64 its size
 *   sums     per file in that order, one u32 CRC32C per block
 * A sidecar that fails its own checksum, or does not describe the pages
 * files of the dump it is used with, is refused before anything is served.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "criu-mem.h"
#include "lib.h"

#define SUM_MAGIC "FDCRCSUM"
#define SUM_VERSION 1u
#define SUM_FILES_MAX 4096u
#define SUM_READ (1ul << 20)

struct sum_head {
	char magic[8];
	uint32_t version, block, nr_files, crc;
};

struct sum_file {
	uint32_t pages_id, reserved;
	uint64_t size;
};

struct criu_sums {
	char *file;		/* the sidecar it was loaded from */
	uint32_t nr;
	struct sum_file *f;
	uint32_t **crc;		/* per file: size / block sums */
};

void criu_sums_free(struct criu_sums *s)
{
	if (!s)
		return;
	for (uint32_t i = 0; s->crc && i < s->nr; i++)
		free(s->crc[i]);
	free(s->crc);
	free(s->f);
	free(s->file);
	free(s);
}

/* criu_sums_file() - the sidecar @s was loaded from. */
const char *criu_sums_file(const struct criu_sums *s)
{
	return s->file;
}

static struct criu_sums *sums_alloc(uint32_t nr)
{
	struct criu_sums *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->nr = nr;
	s->f = calloc(nr ? nr : 1, sizeof(*s->f));
	s->crc = calloc(nr ? nr : 1, sizeof(*s->crc));
	if (!s->f || !s->crc) {
		criu_sums_free(s);
		return NULL;
	}
	return s;
}

/* ---- writing ---- */

/* The sums of pages file @fd (@size bytes) into @crc. */
static int sum_file(int fd, uint64_t size, uint32_t *crc, char *buf)
{
	for (uint64_t at = 0; at < size;) {
		size_t n = size - at < SUM_READ ? (size_t)(size - at) : SUM_READ;
		ssize_t got = pread(fd, buf, n, (off_t)at);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0 || got % CRIU_SUM_BLOCK)
			return got < 0 ? -errno : -EBADMSG;
		for (ssize_t o = 0; o < got; o += CRIU_SUM_BLOCK)
			crc[(at + (uint64_t)o) / CRIU_SUM_BLOCK] =
				crc32c(0, buf + o, CRIU_SUM_BLOCK);
		at += (uint64_t)got;
	}
	return 0;
}

/* The N of every pages-N.img in @dfd, sorted. */
static int list_pages(int dfd, uint32_t **ids, uint32_t *nr)
{
	DIR *d = fdopendir(dfd);
	struct dirent *e;
	uint32_t cap = 0;

	if (!d)
		return -errno;
	*ids = NULL;
	*nr = 0;
	while ((e = readdir(d))) {
		unsigned int id;
		int end = 0;

		if (sscanf(e->d_name, "pages-%u.img%n", &id, &end) != 1 ||
		    e->d_name[end] || end == 0)
			continue;
		if (*nr == cap) {
			uint32_t *n = cap < SUM_FILES_MAX
					      ? realloc(*ids, (cap + 16) * 4)
					      : NULL;

			if (!n) {
				closedir(d);
				return -ENOMEM;
			}
			*ids = n;
			cap += 16;
		}
		(*ids)[(*nr)++] = id;
	}
	closedir(d);
	for (uint32_t i = 1; i < *nr; i++)
		for (uint32_t j = i; j > 0 && (*ids)[j - 1] > (*ids)[j]; j--) {
			uint32_t t = (*ids)[j];

			(*ids)[j] = (*ids)[j - 1];
			(*ids)[j - 1] = t;
		}
	return 0;
}

/* Every pages file of @dfd summed into @s (files listed in @ids). */
static int sums_compute(int dfd, const uint32_t *ids, struct criu_sums *s,
			char *why, size_t whylen)
{
	char *buf = malloc(SUM_READ), name[32];
	int err = buf ? 0 : -ENOMEM;

	for (uint32_t i = 0; !err && i < s->nr; i++) {
		struct stat st;
		int fd;

		snprintf(name, sizeof(name), "pages-%u.img", ids[i]);
		fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st)) {
			err = why_set(why, whylen, -errno, "%s: %s", name,
				      strerror(errno));
		} else if (st.st_size % CRIU_SUM_BLOCK) {
			err = why_set(why, whylen, -EBADMSG, "%s: %lld bytes, "
				      "not whole pages", name,
				      (long long)st.st_size);
		} else {
			s->f[i] = (struct sum_file){ ids[i], 0,
						     (uint64_t)st.st_size };
			s->crc[i] = malloc((size_t)(st.st_size / CRIU_SUM_BLOCK +
						    1) * 4);
			err = s->crc[i] ? sum_file(fd, s->f[i].size, s->crc[i],
						   buf)
					: -ENOMEM;
			if (err)
				why_set(why, whylen, err, "%s: %s", name,
					strerror(-err));
		}
		if (fd >= 0)
			close(fd);
	}
	free(buf);
	return err;
}

static int write_all(int fd, const void *p, size_t len)
{
	for (size_t done = 0; done < len;) {
		ssize_t n = write(fd, (const char *)p + done, len - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -errno;
		done += (size_t)n;
	}
	return 0;
}

/* The sidecar's body (files, then sums), and its checksum. */
static int sums_emit(int fd, const struct criu_sums *s)
{
	struct sum_head h = { .version = SUM_VERSION, .block = CRIU_SUM_BLOCK,
			      .nr_files = s->nr };
	uint32_t crc = crc32c(0, s->f, s->nr * sizeof(*s->f));
	int err;

	memcpy(h.magic, SUM_MAGIC, sizeof(h.magic));
	for (uint32_t i = 0; i < s->nr; i++)
		crc = crc32c(crc, s->crc[i], s->f[i].size / CRIU_SUM_BLOCK * 4);
	h.crc = crc;
	err = write_all(fd, &h, sizeof(h));
	if (!err)
		err = write_all(fd, s->f, s->nr * sizeof(*s->f));
	for (uint32_t i = 0; !err && i < s->nr; i++)
		err = write_all(fd, s->crc[i], s->f[i].size / CRIU_SUM_BLOCK * 4);
	return err;
}

/*
 * criu_sums_write() - the sidecar of dump folder @dir into @file (written
 * whole to FILE.tmp, then renamed). Returns 0 or -errno, with @why.
 */
int criu_sums_write(const char *dir, const char *file, char *why,
		    size_t whylen)
{
	char tmp[4096];
	struct criu_sums *s = NULL;
	uint32_t *ids = NULL, nr = 0;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), fd, err;

	if (dfd < 0)
		return why_set(why, whylen, -errno, "%s: %s", dir,
			       strerror(errno));
	err = list_pages(fcntl(dfd, F_DUPFD_CLOEXEC, 0), &ids, &nr);
	if (!err && !nr)
		err = why_set(why, whylen, -ENOENT, "%s: no pages-N.img", dir);
	if (!err && !(s = sums_alloc(nr)))
		err = -ENOMEM;
	if (!err)
		err = sums_compute(dfd, ids, s, why, whylen);
	close(dfd);
	free(ids);
	if (!err && snprintf(tmp, sizeof(tmp), "%s.tmp", file) >= (int)sizeof(tmp))
		err = -ENAMETOOLONG;
	fd = err ? -1 : open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (!err && fd < 0)
		err = why_set(why, whylen, -errno, "%s: %s", tmp,
			      strerror(errno));
	if (!err && !(err = sums_emit(fd, s)) && fsync(fd))
		err = -errno;
	if (fd >= 0 && close(fd) && !err)
		err = -errno;
	if (!err && rename(tmp, file))
		err = -errno;
	if (err && fd >= 0)
		unlink(tmp);
	if (err && why && !why[0])
		why_set(why, whylen, err, "%s: %s", file, strerror(-err));
	criu_sums_free(s);
	return err;
}

/* ---- reading ---- */

static int read_exact(int fd, void *p, size_t len)
{
	for (size_t done = 0; done < len;) {
		ssize_t n = read(fd, (char *)p + done, len - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EBADMSG;
		done += (size_t)n;
	}
	return 0;
}

static int sums_read_body(int fd, const struct sum_head *h,
			  struct criu_sums *s, struct stat *st)
{
	uint64_t want = sizeof(*h) + (uint64_t)h->nr_files * sizeof(*s->f);
	uint32_t crc;
	int err = read_exact(fd, s->f, h->nr_files * sizeof(*s->f));

	for (uint32_t i = 0; !err && i < s->nr; i++) {
		want += s->f[i].size / CRIU_SUM_BLOCK * 4;
		if (s->f[i].size % CRIU_SUM_BLOCK || want > (uint64_t)st->st_size)
			return -EBADMSG;
	}
	if (!err && want != (uint64_t)st->st_size)
		return -EBADMSG;
	crc = err ? 0 : crc32c(0, s->f, s->nr * sizeof(*s->f));
	for (uint32_t i = 0; !err && i < s->nr; i++) {
		size_t n = (size_t)(s->f[i].size / CRIU_SUM_BLOCK * 4);

		s->crc[i] = malloc(n ? n : 1);
		err = s->crc[i] ? read_exact(fd, s->crc[i], n) : -ENOMEM;
		if (!err)
			crc = crc32c(crc, s->crc[i], n);
	}
	return err ? err : crc == h->crc ? 0 : -EBADMSG;
}

/*
 * criu_sums_load() - read and check the sidecar @file. Returns 0, or
 * -errno with @why: -EBADMSG when it is not a sidecar or fails its own
 * checksum.
 */
int criu_sums_load(const char *file, struct criu_sums **sp, char *why,
		   size_t whylen)
{
	struct sum_head h;
	struct criu_sums *s = NULL;
	struct stat st;
	int fd = open(file, O_RDONLY | O_CLOEXEC), err;

	if (fd < 0)
		return why_set(why, whylen, -errno, "%s: %s", file,
			       strerror(errno));
	err = fstat(fd, &st) ? -errno : read_exact(fd, &h, sizeof(h));
	if (!err && (memcmp(h.magic, SUM_MAGIC, sizeof(h.magic)) ||
		     h.version != SUM_VERSION || h.block != CRIU_SUM_BLOCK ||
		     h.nr_files > SUM_FILES_MAX))
		err = -EBADMSG;
	if (!err && !(s = sums_alloc(h.nr_files)))
		err = -ENOMEM;
	if (!err)
		err = sums_read_body(fd, &h, s, &st);
	if (!err && !(s->file = strdup(file)))
		err = -ENOMEM;
	close(fd);
	if (err) {
		criu_sums_free(s);
		return why_set(why, whylen, err, "%s: %s", file,
			       err == -EBADMSG ? "not a sidecar of faultd "
					       "lazy-pages --sum, or corrupt"
					       : strerror(-err));
	}
	*sp = s;
	return 0;
}

/*
 * criu_sums_of() - the sums of pages-@id.img if it is @size bytes, and
 * how many; NULL when the sidecar has none for it, or for another size.
 */
const uint32_t *criu_sums_of(const struct criu_sums *s, uint32_t id,
			     uint64_t size, uint64_t *nr)
{
	for (uint32_t i = 0; i < s->nr; i++)
		if (s->f[i].pages_id == id && s->f[i].size == size) {
			*nr = size / CRIU_SUM_BLOCK;
			return s->crc[i];
		}
	return NULL;
}
