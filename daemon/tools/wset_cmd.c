// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * wset_cmd.c - faultd working-set: show and merge working-set files
 * (faultd-working-set(5)).
 *
 *   faultd working-set show FILE
 *   faultd working-set merge -o OUT [--min-count K] A B [C ...]
 *
 * show prints what a set holds and what it is of; merge keeps the pages
 * seen in at least K of the sets (default: all of them), in the order of
 * their mean position, and refuses sets of different sources. Exit
 * status 0, 1 when a file cannot be used (the reason on stderr), 2 for a
 * bad command line.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <libgen.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools.h"
#include "wset.h"

static void usage(void)
{
	fprintf(stderr,
		"usage: faultd working-set show FILE\n"
		"       faultd working-set merge -o OUT [--min-count K] A B "
		"[C ...]\n");
}

static void print_id(const uint8_t *id)
{
	for (int i = 0; i < 32; i++)
		printf("%02x", id[i]);
}

static int show(const char *path)
{
	struct wset ws;
	const char *why;
	uint64_t *pages;
	int ret = wset_load(path, NULL, &ws, &why);

	if (ret) {
		fprintf(stderr, "faultd: %s: %s (%s)\n", path, why,
			strerror(-ret));
		return 1;
	}
	pages = calloc(ws.nr_spaces, sizeof(*pages));
	if (!pages) {
		fprintf(stderr, "faultd: %s: %s\n", path, strerror(ENOMEM));
		wset_free(&ws);
		return 1;
	}
	for (uint64_t k = 0; k < ws.nr; k++)
		pages[ws.e[k].space]++;
	printf("pages %llu\nranges %llu\n", (unsigned long long)ws.nr,
	       (unsigned long long)wset_ranges(&ws));
	for (uint32_t i = 0; i < ws.nr_spaces; i++) {
		const struct wset_space *s = &ws.spaces[i];

		printf("space %llu: pages %llu, bytes %llu, source ",
		       (unsigned long long)s->space_id,
		       (unsigned long long)pages[i],
		       (unsigned long long)(pages[i] * s->page_size));
		print_id(s->src_id);
		printf(", source size %llu, page size %u\n",
		       (unsigned long long)s->src_size, s->page_size);
	}
	free(pages);
	wset_free(&ws);
	return 0;
}

/*
 * Where -o @out writes: the file a symlink points to (the link stays a
 * link, as cp(1) writes through it), followed as far as links go (40 at
 * most, as the kernel does), else @out. The target need not exist yet.
 * NULL with errno: a loop, or a name too long.
 */
static const char *out_target(const char *out, char *buf, size_t len)
{
	char link[PATH_MAX], dir[PATH_MAX];
	struct stat st;

	snprintf(buf, len, "%s", out);
	for (int i = 0; i < 40; i++) {
		ssize_t n;

		if (lstat(buf, &st) || !S_ISLNK(st.st_mode))
			return buf;
		n = readlink(buf, link, sizeof(link) - 1);
		if (n < 0)
			return NULL;
		link[n] = 0;
		snprintf(dir, sizeof(dir), "%s", buf);
		if (link[0] != '/' &&
		    (size_t)snprintf(buf, len, "%s/%s", dirname(dir), link) >=
			    len)
			return errno = ENAMETOOLONG, NULL;
		if (link[0] == '/')
			snprintf(buf, len, "%s", link);
	}
	errno = ELOOP;
	return NULL;
}

static int merge_files(const char *out, unsigned int min, char **in,
		       int n)
{
	struct wset *sets = calloc((size_t)n, sizeof(*sets)), m;
	char target[PATH_MAX];
	const char *why = "out of memory";
	int ret = sets ? 0 : -ENOMEM, loaded = 0;

	for (; !ret && loaded < n; loaded++) {
		ret = wset_load(in[loaded], NULL, &sets[loaded], &why);
		if (ret)
			fprintf(stderr, "faultd: %s: %s (%s)\n", in[loaded],
				why, strerror(-ret));
	}
	if (ret) {
		loaded--;
	} else {
		ret = wset_merge(sets, (size_t)n, min ? min : (unsigned int)n,
				 &m, &why);
		if (ret)
			fprintf(stderr, "faultd: cannot merge: %s\n", why);
	}
	if (!ret) {
		const char *to = out_target(out, target, sizeof(target));

		ret = to ? wset_save(to, &m) : -errno;
		if (ret)
			fprintf(stderr, "faultd: %s: %s\n", out,
				strerror(-ret));
		else
			printf("%s: %llu pages\n", out,
			       (unsigned long long)m.nr);
		wset_free(&m);
	}
	for (int i = 0; i < loaded; i++)
		wset_free(&sets[i]);
	free(sets);
	return ret ? 1 : 0;
}

static int merge(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "min-count", required_argument, NULL, 'k' },
		{ 0 },
	};
	const char *out = NULL;
	unsigned long min = 0;
	char *end;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "o:k:", opts, NULL)) != -1) {
		if (c == 'o') {
			out = optarg;
		} else if (c == 'k') {
			min = strtoul(optarg, &end, 10);
			if (*end || !min || min > 65536)
				return usage(), 2;
		} else {
			return usage(), 2;
		}
	}
	if (!out || argc - optind < 1 ||
	    (min && min > (unsigned long)(argc - optind)))
		return usage(), 2;
	return merge_files(out, (unsigned int)min, argv + optind,
			   argc - optind);
}

/* wset_cmd() - faultd working-set ...; argv[0] is "working-set". */
int wset_cmd(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "show"))
		return show(argv[2]);
	if (argc >= 2 && !strcmp(argv[1], "merge"))
		return merge(argc - 1, argv + 1);
	usage();
	return 2;
}
