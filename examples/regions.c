// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * regions.c - the smallest complete use of libfaultd.
 *
 * Creates a context and two regions: one whose missing pages are zeros, and
 * one whose pages come from a pager (here, a function of the offset; in a
 * real program, a file, a network peer or a snapshot). Two threads read
 * both regions, checking what they see; then the program prints the
 * library's counters and fault latency for each region.
 *
 * Build against an installed libfaultd with:
 *   cc regions.c $(pkg-config --cflags --libs libfaultd) -o regions
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <faultd.h>

#define REGION_SIZE (64ul << 20)
#define NTHREADS 2

/*
 * The pager: fill [off, off + len) of the region. It is called from the
 * library's handler threads; FAULTD_PAGER_CONCURRENT promises it may run
 * in several of them at once.
 */
static ssize_t offset_pager(void *arg, struct faultd_region *region,
			    uint64_t off, void *buf, size_t len)
{
	uint64_t *words = buf;

	for (size_t i = 0; i < len / sizeof(*words); i++)
		words[i] = off + i * sizeof(*words);
	return (ssize_t)len; /* bytes produced; fewer would be zero-padded */
}

struct reader {
	const uint64_t *data; /* the pager region */
	const unsigned char *zeros;
	unsigned int idx;
	size_t wrong;
};

/* Touch every page of both regions; each first touch is a fault. */
static void *read_regions(void *arg)
{
	struct reader *rd = arg;
	const size_t words_per_page = 4096 / sizeof(uint64_t);

	for (size_t w = rd->idx * words_per_page; w < REGION_SIZE / 8;
	     w += NTHREADS * words_per_page)
		rd->wrong += rd->data[w] != w * 8;
	for (size_t b = rd->idx * 4096; b < REGION_SIZE; b += NTHREADS * 4096)
		rd->wrong += rd->zeros[b] != 0;
	return NULL;
}

static void print_stats(const char *what, struct faultd_region *r)
{
	struct faultd_stats s = { .size = sizeof(s) };

	if (faultd_region_stats(r, &s) < 0)
		return;
	printf("%-6s faults %7llu  zero %7llu  pager %7llu  fast-path %7llu"
	       "  latency p50 %6.1f us  p99 %6.1f us\n",
	       what, (unsigned long long)s.faults,
	       (unsigned long long)s.zero_fills,
	       (unsigned long long)s.pager_fills, (unsigned long long)s.fast,
	       faultd_stats_latency(&s, 50) / 1e3,
	       faultd_stats_latency(&s, 99) / 1e3);
}

int main(void)
{
	struct faultd_ctx_opts copts = { .size = sizeof(copts) };
	struct faultd_pager pager = {
		.size = sizeof(pager),
		.flags = FAULTD_PAGER_CONCURRENT,
		.fill = offset_pager,
	};
	struct faultd_region_opts zopts = { .size = sizeof(zopts),
					    .length = REGION_SIZE,
					    .name = "zeros" };
	struct faultd_region_opts popts = { .size = sizeof(popts),
					    .length = REGION_SIZE,
					    .pager = &pager,
					    .name = "pager" };
	struct faultd_region *zeros, *data;
	struct reader readers[NTHREADS];
	pthread_t threads[NTHREADS];
	struct faultd_ctx *ctx;
	size_t wrong = 0;
	int ret;

	ret = faultd_ctx_create(&copts, &ctx);
	if (ret < 0) {
		fprintf(stderr, "faultd_ctx_create: %s\n", strerror(-ret));
		return 1;
	}
	ret = faultd_region_create(ctx, &zopts, &zeros);
	if (!ret)
		ret = faultd_region_create(ctx, &popts, &data);
	if (ret < 0) {
		fprintf(stderr, "faultd_region_create: %s\n", strerror(-ret));
		faultd_ctx_destroy(ctx);
		return 1;
	}

	for (unsigned int i = 0; i < NTHREADS; i++) {
		readers[i] = (struct reader){ .data = faultd_region_base(data),
					      .zeros = faultd_region_base(zeros),
					      .idx = i };
		pthread_create(&threads[i], NULL, read_regions, &readers[i]);
	}
	for (unsigned int i = 0; i < NTHREADS; i++) {
		pthread_join(threads[i], NULL);
		wrong += readers[i].wrong;
	}

	printf("libfaultd %s: %lu MiB read through two regions by %d "
	       "threads, %zu wrong words\n",
	       faultd_version(), 2 * REGION_SIZE >> 20, NTHREADS, wrong);
	print_stats("zeros", zeros);
	print_stats("pager", data);
	faultd_ctx_destroy(ctx); /* destroys the regions too */
	return wrong ? 1 : 0;
}
