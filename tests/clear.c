// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * clear.c - suite "unit": range clears. Every strategy, forced or chosen,
 * zeroes exactly the range it is given: over lengths from 1 byte to 4 MiB
 * at misaligned starts, with guard bytes on both sides that must survive.
 */
#include <criterion/criterion.h>
#include <sys/mman.h>

#include "helpers.h"
#include "internal.h"

#define GUARD 256
#define MAXLEN (4ul << 20)

static const size_t lengths[] = {
	1, 2, 7, 31, 63, 64, 65, 127, 128, 129, 255, 4095, 4096, 4097,
	65535, 65536, 262143, 262144, 262145, (2ul << 20) - 1, 2ul << 20,
	(2ul << 20) + 64, MAXLEN - 3 * 64 - 1,
};
static const size_t offsets[] = { 0, 1, 3, 8, 17, 63, 64 + 5 };

/* Fill the buffer with 0xa5, clear [start, start+len) with @fn, check. */
static size_t check_clear(void (*fn)(int, void *, size_t), int strategy,
			  unsigned char *buf, size_t start, size_t len)
{
	size_t bad = 0;

	memset(buf, 0xa5, MAXLEN + 2 * GUARD);
	fn(strategy, buf + GUARD + start, len);
	for (size_t i = 0; i < GUARD + start; i++)
		bad += buf[i] != 0xa5;
	for (size_t i = GUARD + start; i < GUARD + start + len; i++)
		bad += buf[i] != 0;
	for (size_t i = GUARD + start + len; i < MAXLEN + 2 * GUARD; i++)
		bad += buf[i] != 0xa5;
	return bad;
}

static void via_with(int s, void *p, size_t n)
{
	clear_with(s, p, n);
}

static void via_per4k(int s, void *p, size_t n)
{
	(void)s;
	clear_per_4k(p, n);
}

static void via_auto(int s, void *p, size_t n)
{
	(void)s;
	faultd_clear(p, n);
}

static unsigned char *guarded_buffer(void)
{
	unsigned char *b = mmap(NULL, MAXLEN + 2 * GUARD + 4096,
				PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(b, MAP_FAILED);
	return b;
}

static void check_all(void (*fn)(int, void *, size_t), int strategy,
		      const char *what)
{
	unsigned char *buf = guarded_buffer();

	for (size_t i = 0; i < ARRAY_SIZE(lengths); i++)
		for (size_t j = 0; j < ARRAY_SIZE(offsets); j++) {
			size_t bad = check_clear(fn, strategy, buf, offsets[j],
						 lengths[i]);

			cr_expect_eq(bad, 0, "%s: len %zu at +%zu: %zu bad bytes",
				     what, lengths[i], offsets[j], bad);
		}
	munmap(buf, MAXLEN + 2 * GUARD + 4096);
}

Test(clear, every_strategy_exact_range, .timeout = 120)
{
	struct faultd_clear_info info = { .size = sizeof(info) };

	cr_assert_eq(faultd_clear_info(&info), 0);
	check_all(via_per4k, 0, "per-4k");
	for (int s = FAULTD_CLEAR_MEMSET; s <= FAULTD_CLEAR_CLZERO; s++) {
		if (!(info.available & (1u << s))) {
			cr_log_info("%s: not on this CPU", faultd_clear_name(s));
			continue;
		}
		check_all(via_with, s, faultd_clear_name(s));
		/* The same strategy forced through the public call. */
		cr_assert_eq(faultd_clear_set(s), 0);
		check_all(via_auto, 0, faultd_clear_name(s));
	}
	cr_assert_eq(faultd_clear_set(FAULTD_CLEAR_AUTO), 0);
	check_all(via_auto, 0, "auto");
}

Test(clear, cold_and_hot_ranges_both_zeroed, .timeout = 60)
{
	/* Auto mode probes the cache: clear a hot and a flushed range. */
	size_t len = 2ul << 20;
	unsigned char *b = guarded_buffer();
	size_t bad = 0;

	memset(b, 1, len);
	faultd_clear(b, len); /* hot: just written */
	for (size_t i = 0; i < len; i++)
		bad += b[i];
	memset(b, 1, len);
	for (size_t i = 0; i < len; i += 64)
		__builtin_ia32_clflush(b + i);
	faultd_clear(b, len); /* cold: flushed */
	for (size_t i = 0; i < len; i++)
		bad += b[i];
	cr_expect_eq(bad, 0);
	munmap(b, MAXLEN + 2 * GUARD + 4096);
}

Test(clear, strategy_api)
{
	struct faultd_clear_info info = { .size = sizeof(info) };

	cr_expect_eq(faultd_clear_set(-1), -EINVAL);
	cr_expect_eq(faultd_clear_set(99), -EINVAL);
	cr_expect_null(faultd_clear_name(42));
	cr_expect_str_eq(faultd_clear_name(FAULTD_CLEAR_NT), "nt-store");
	cr_assert_eq(faultd_clear_info(&info), 0);
	cr_expect(info.available & (1u << FAULTD_CLEAR_MEMSET));
	cr_expect(info.hot >= FAULTD_CLEAR_MEMSET &&
		  info.hot <= FAULTD_CLEAR_REP_STOSB);
	cr_expect(info.available & (1u << info.cold));
	cr_expect_eq(info.forced, FAULTD_CLEAR_AUTO);
	for (int s = FAULTD_CLEAR_MEMSET; s <= FAULTD_CLEAR_CLZERO; s++)
		if (!(info.available & (1u << s)))
			cr_expect_eq(faultd_clear_set(s), -ENOTSUP);
	info.size = 4;
	cr_expect_eq(faultd_clear_info(&info), -EINVAL);
}

static void expect_forced_memset(void *arg)
{
	struct faultd_clear_info info = { .size = sizeof(info) };

	(void)arg;
	setenv("FAULTD_CLEAR", "memset", 1);
	if (faultd_clear_info(&info) || info.forced != FAULTD_CLEAR_MEMSET)
		_exit(1);
	_exit(0);
}

Test(clear, environment_forces_a_strategy)
{
	/* FAULTD_CLEAR is read once per process: check it in a fresh one. */
	cr_expect_eq(run_in_child(expect_forced_memset, NULL), -1);
}
