// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * static-clash.c - a program that has functions of its own with the names
 * of the library's internal ones (crc32c, now_ns, map_lookup,
 * thread_start), linked with the static library. It must link (no
 * "multiple definition"), its calls must reach its own functions, and the
 * library's must not: each of the program's functions counts its calls.
 * The library is then made to do some work that uses its internals: a
 * pager region faulted in page by page, checkpointed (which checksums
 * every block), restored from the image and read back, every word checked.
 *
 * usage: static-clash IMAGE_PATH
 * consumer.sh builds it against the installed libfaultd.a with
 * "pkg-config --static --libs libfaultd".
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <faultd.h>

#define REGION_SIZE (4ul << 20)

/* The program's own, with signatures unlike the library's. */
int crc32c(int x);
int now_ns(int x);
int map_lookup(int x);
int thread_start(int x);

static int own_calls;

int crc32c(int x)
{
	own_calls++;
	return x + 1;
}

int now_ns(int x)
{
	own_calls++;
	return x + 2;
}

int map_lookup(int x)
{
	own_calls++;
	return x + 3;
}

int thread_start(int x)
{
	own_calls++;
	return x + 4;
}

/* The content of the 8-byte word at offset @off. */
static uint64_t word(uint64_t off)
{
	return off * 0x9e3779b97f4a7c15ull ^ 0x5a5a;
}

static ssize_t fill(void *arg, struct faultd_region *region, uint64_t offset,
		    void *buf, size_t len)
{
	uint64_t *w = buf;

	for (size_t i = 0; i < len / 8; i++)
		w[i] = word(offset + i * 8);
	return (ssize_t)len;
}

/* The words of [base, base + REGION_SIZE) that are not word(offset). */
static size_t wrong_words(const uint64_t *base)
{
	size_t wrong = 0;

	for (size_t i = 0; i < REGION_SIZE / 8; i++)
		wrong += base[i] != word(i * 8);
	return wrong;
}

static int fail(const char *what, int err)
{
	fprintf(stderr, "%s: %s\n", what, strerror(-err));
	return 1;
}

int main(int argc, char **argv)
{
	struct faultd_pager pager = { .size = sizeof(pager), .fill = fill };
	struct faultd_region_opts ro = { .size = sizeof(ro),
					 .length = REGION_SIZE,
					 .pager = &pager,
					 .name = "clash" };
	struct faultd_restore_opts rso = { .size = sizeof(rso),
					   .flags = FAULTD_RESTORE_LAZY,
					   .name = "clash-restored" };
	struct faultd_region *r, *restored;
	struct faultd_ctx *ctx;
	size_t wrong;
	int ret;

	if (argc != 2) {
		fprintf(stderr, "usage: %s IMAGE_PATH\n", argv[0]);
		return 2;
	}
	if (crc32c(0) != 1 || now_ns(0) != 2 || map_lookup(0) != 3 ||
	    thread_start(0) != 4 || own_calls != 4) {
		fprintf(stderr, "the program's own functions are not its own\n");
		return 1;
	}

	ret = faultd_ctx_create(NULL, &ctx);
	if (ret < 0)
		return fail("faultd_ctx_create", ret);
	ret = faultd_region_create(ctx, &ro, &r);
	if (ret < 0)
		return fail("faultd_region_create", ret);
	wrong = wrong_words(faultd_region_base(r));
	if (wrong) {
		fprintf(stderr, "%zu words wrong in the pager region\n", wrong);
		return 1;
	}
	ret = faultd_checkpoint(r, argv[1], NULL);
	if (ret < 0)
		return fail("faultd_checkpoint", ret);
	ret = faultd_restore(ctx, argv[1], &rso, &restored);
	if (ret < 0)
		return fail("faultd_restore", ret);
	wrong = wrong_words(faultd_region_base(restored));
	if (wrong) {
		fprintf(stderr, "%zu words wrong in the restored region\n",
			wrong);
		return 1;
	}
	faultd_region_destroy(restored);
	faultd_region_destroy(r);
	faultd_ctx_destroy(ctx);
	unlink(argv[1]);

	if (own_calls != 4) {
		fprintf(stderr, "the library called the program's functions "
			"%d times\n", own_calls - 4);
		return 1;
	}
	return 0;
}
