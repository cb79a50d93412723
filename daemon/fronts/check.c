// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * check.c - what the daemon checks before it serves a registration: that
 * the descriptor is a non-blocking userfaultfd, that the ranges are sane,
 * apart, inside the image, and registered with a userfaultfd in the client
 * for missing faults (its /proc/PID/smaps says "um"; for Firecracker's
 * handshake also with the page size it names), read with the client's own
 * rights from the process that connected (peer.c). Each
 * failure has its own reason, sent back to the client.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "img.h"
#include "peer.h"
#include "proto.h"

/*
 * Is @fd a userfaultfd opened with O_NONBLOCK? 0, -EBADF (not one) or
 * -EINVAL (blocking: the session engine reads it only after a poll, but a
 * read of a blocking one could still wait for good), with *why.
 */
int check_uffd(int fd, const char **why)
{
	char path[64], target[64];
	ssize_t n;

	*why = "the first descriptor is not a userfaultfd";
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, target, sizeof(target) - 1);
	if (n < 0)
		return -EBADF;
	target[n] = 0;
	if (strcmp(target, "anon_inode:[userfaultfd]"))
		return -EBADF;
	*why = "the userfaultfd was opened without O_NONBLOCK";
	return fcntl(fd, F_GETFL) & O_NONBLOCK ? 0 : -EINVAL;
}

static int cmp_start(const void *a, const void *b)
{
	const struct proto_range *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

static int cmp_image(const void *a, const void *b)
{
	const struct proto_range *x = a, *y = b;

	return x->image_off < y->image_off ? -1 : x->image_off > y->image_off;
}

/* Sorted by @cmp, do consecutive ranges overlap in that space? */
static bool overlaps(struct proto_range *r, uint32_t n,
		     int (*cmp)(const void *, const void *), bool image)
{
	qsort(r, n, sizeof(*r), cmp);
	for (uint32_t i = 1; i < n; i++) {
		uint64_t prev = image ? r[i - 1].image_off : r[i - 1].start;
		uint64_t cur = image ? r[i].image_off : r[i].start;

		if (prev + r[i - 1].len > cur)
			return true;
	}
	return false;
}

static int range_sane(const struct proto_range *r, uint64_t image_len)
{
	if (!r->len || (r->start | r->len | r->image_off) & 4095)
		return -EINVAL;
	if (r->start + r->len < r->start)
		return -EINVAL;
	if (r->image_off > image_len || r->len > image_len - r->image_off)
		return -ERANGE;
	return 0;
}

enum cover { COVERED, NOT_MAPPED, NOT_REGISTERED, OTHER_PAGE_SIZE };

/*
 * Is [start, end) covered by the client's mappings registered for missing
 * faults, with pages of @page_size bytes (0: any)? From /proc/PID/smaps:
 * each mapping's header line, its KernelPageSize line, then its VmFlags
 * line ("um": userfaultfd missing).
 */
static enum cover covered(FILE *f, uint64_t start, uint64_t end,
			  size_t page_size)
{
	char line[512];
	unsigned long lo = 0, hi = 0, kib = 0;
	uint64_t at = start;

	rewind(f);
	while (at < end && fgets(line, sizeof(line), f)) {
		unsigned long a, b;

		if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, ' ') &&
		    strchr(line, '-') < strchr(line, ' ')) {
			lo = a;
			hi = b;
			kib = 0;
			continue;
		}
		if (sscanf(line, "KernelPageSize: %lu kB", &a) == 1)
			kib = a;
		if (strncmp(line, "VmFlags:", 8) || lo > at || hi <= at)
			continue;
		if (!strstr(line, " um"))
			return NOT_REGISTERED;
		if (page_size && kib << 10 != page_size)
			return OTHER_PAGE_SIZE;
		at = hi;
	}
	return at >= end ? COVERED : NOT_MAPPED;
}

/* covered()'s answer as -errno and a reason. */
static int cover_err(enum cover c, const char **why)
{
	static const char *const whys[] = {
		[NOT_MAPPED] = "a range is not mapped in the client",
		[NOT_REGISTERED] = "a range is not registered for missing "
				   "faults",
		[OTHER_PAGE_SIZE] = "a range's memory has pages of another "
				    "size than the handshake says",
	};

	if (c == COVERED)
		return 0;
	*why = whys[c];
	return c == NOT_MAPPED ? -EFAULT : -EINVAL;
}

/*
 * The client's smaps, opened with its rights, once it is known to be the
 * process that connected. NULL, with *err and *why, if not.
 */
static FILE *open_smaps(const struct peer *peer, int *err, const char **why)
{
	int fd;
	FILE *f;

	*err = peer_unchanged(peer, why);
	if (*err)
		return NULL;
	fd = peer_open(peer, "smaps");
	*why = "cannot read the client's mappings";
	*err = fd == -EACCES || fd == -EPERM ? -EACCES : fd;
	if (fd < 0)
		return NULL;
	f = fdopen(fd, "r");
	*err = f ? 0 : -errno;
	if (!f)
		close(fd);
	return f;
}

/*
 * check_ranges() - the ranges of @m against the image and the client
 * @peer. Returns 0, or -EINVAL / -ERANGE / -EFAULT / -EACCES / -EPERM /
 * -ESRCH with *why.
 */
int check_ranges(const struct proto_register *m, const struct image *img,
		 const struct peer *peer, const char **why)
{
	uint64_t image_len = (img->h.region_len + 4095) & ~4095ull;
	struct proto_range r[PROTO_MAX_RANGES];
	FILE *f;
	int ret = 0;

	memcpy(r, m->r, m->nr_ranges * sizeof(r[0]));
	for (uint32_t i = 0; i < m->nr_ranges; i++) {
		ret = range_sane(&r[i], image_len);
		*why = ret == -ERANGE ? "a range reaches past the image's end"
				      : "a range is empty or not page-aligned";
		if (ret)
			return ret;
	}
	*why = "ranges overlap";
	if (overlaps(r, m->nr_ranges, cmp_start, false) ||
	    overlaps(r, m->nr_ranges, cmp_image, true))
		return -EINVAL;
	f = open_smaps(peer, &ret, why);
	if (!f)
		return ret;
	for (uint32_t i = 0; !ret && i < m->nr_ranges; i++)
		ret = cover_err(covered(f, r[i].start, r[i].start + r[i].len, 0),
				why);
	fclose(f);
	return ret;
}

/*
 * check_mapped() - are the client ranges @r mapped in @peer, registered
 * for missing faults, with pages of @page_size bytes? Returns 0, or
 * -EFAULT / -EINVAL / -EACCES / -EPERM / -ESRCH with *why.
 */
int check_mapped(const struct peer *peer, const struct srange *r, size_t nr,
		 size_t page_size, const char **why)
{
	FILE *f;
	int ret = 0;

	f = open_smaps(peer, &ret, why);
	if (!f)
		return ret;
	for (size_t i = 0; !ret && i < nr; i++)
		ret = cover_err(covered(f, r[i].start, r[i].start + r[i].len,
					page_size),
				why);
	fclose(f);
	return ret;
}
