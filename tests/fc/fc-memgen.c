// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * fc-memgen - writes a memory file for fc-client and the handlers it
 * tests: pseudo-random data with holes, as a guest's memory snapshot is
 * (a Firecracker memory file is sparse where the guest never wrote).
 *
 *   fc-memgen FILE SIZE [--seed S] [--holes PCT] [--zeros PCT]
 *             [--chunk SIZE]
 *
 * The file is made in runs of 1 to 16 chunks (--chunk, 4 KiB by default;
 * 2M for a file of 2 MiB pages): PCT % of the runs are holes (never
 * written; SEEK_HOLE finds them), --zeros PCT % are zeros written as
 * data (what only a content check finds), the rest pseudo-random bytes, a
 * function of the seed and the offset. The same arguments write the same
 * file. One JSON line says how much of each it wrote.
 * Exit status: 0 written, 2 usage or I/O error.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BATCH (1ul << 20)

static _Noreturn void die(const char *what, const char *why)
{
	fprintf(stderr, "fc-memgen: %s: %s\n", what, why);
	exit(2);
}

static uint64_t mix(uint64_t seed, uint64_t x)
{
	uint64_t z = seed * 0x9e3779b97f4a7c15ull + x + 0x632be59bd9b4e019ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 0);
	unsigned int shift = 0;

	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	}
	if (end == s || *end || (v << shift) >> shift != v)
		die("not a size", s);
	return (uint64_t)v << shift;
}

enum kind { DATA, HOLE, ZEROS };

struct gen {
	int fd;
	uint64_t seed, size, chunk;
	unsigned int holes, zeros;
	uint64_t bytes[3];
	uint8_t *buf;
};

/* [off, off + len) of data or zeros, in batches. */
static void put(struct gen *g, uint64_t off, uint64_t len, enum kind k)
{
	while (len) {
		size_t n = len < BATCH ? (size_t)len : BATCH;

		if (k == DATA)
			for (size_t i = 0; i < n; i += 8) {
				uint64_t w = mix(g->seed, (off + i) / 8);

				memcpy(g->buf + i, &w, 8);
			}
		else
			memset(g->buf, 0, n);
		if (pwrite(g->fd, g->buf, n, (off_t)off) != (ssize_t)n)
			die("write", strerror(errno));
		off += n;
		len -= n;
	}
}

static void generate(struct gen *g)
{
	uint64_t off = 0, run = 0;

	while (off < g->size) {
		uint64_t h = mix(g->seed ^ 0x5eed, run++), len;
		unsigned int pct = (unsigned int)(h % 100);
		enum kind k = pct < g->holes ? HOLE :
			      pct < g->holes + g->zeros ? ZEROS : DATA;

		len = ((h >> 8) % 16 + 1) * g->chunk;
		if (len > g->size - off)
			len = g->size - off;
		if (k != HOLE)
			put(g, off, len, k);
		g->bytes[k] += len;
		off += len;
	}
	if (ftruncate(g->fd, (off_t)g->size))
		die("ftruncate", strerror(errno));
}

int main(int argc, char **argv)
{
	struct gen g = { .seed = 1, .chunk = 4096, .holes = 25, .zeros = 5 };
	const char *path;

	if (argc < 3)
		die("usage", "fc-memgen FILE SIZE [--seed S] [--holes PCT] "
			     "[--zeros PCT] [--chunk SIZE]");
	path = argv[1];
	g.size = parse_size(argv[2]);
	for (int i = 3; i < argc; i += 2) {
		if (i + 1 >= argc)
			die(argv[i], "needs a value");
		if (!strcmp(argv[i], "--seed"))
			g.seed = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--holes"))
			g.holes = (unsigned int)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--zeros"))
			g.zeros = (unsigned int)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--chunk"))
			g.chunk = parse_size(argv[i + 1]);
		else
			die(argv[i], "unknown option");
	}
	if (!g.chunk || g.chunk % 8 || g.size % g.chunk ||
	    g.holes + g.zeros > 100)
		die("usage", "SIZE a multiple of --chunk (itself of 8 bytes), "
			     "--holes + --zeros at most 100");
	g.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	g.buf = malloc(BATCH);
	if (g.fd < 0 || !g.buf)
		die(path, strerror(errno));
	generate(&g);
	if (close(g.fd))
		die(path, strerror(errno));
	printf("{\"bytes\":%" PRIu64 ",\"data\":%" PRIu64 ",\"holes\":%" PRIu64
	       ",\"zeros\":%" PRIu64 "}\n", g.size, g.bytes[DATA],
	       g.bytes[HOLE], g.bytes[ZEROS]);
	free(g.buf);
	return 0;
}
