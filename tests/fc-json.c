// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * fc-json.c - suite "unit": the parser of Firecracker's handshake and the
 * checks of its regions (daemon/fc_json.h). The inputs that must parse
 * are the bytes serde_json writes for Firecracker's GuestRegionUffdMapping
 * (compact, fields in declaration order) in each of its versions; those
 * that must not are each refused with the exact -errno and a message.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_json.h"

/* What Firecracker 1.12 on sends for a 128 MiB guest of 4 KiB pages. */
static const char serde_one[] =
	"[{\"base_host_virt_addr\":140241613881344,\"size\":134217728,"
	"\"offset\":0,\"page_size\":4096,\"page_size_kib\":4096}]";

/* The two regions of Firecracker's own test_send_uffd_handshake. */
static const char serde_fc_test[] =
	"[{\"base_host_virt_addr\":0,\"size\":1048576,\"offset\":0,"
	"\"page_size\":4096,\"page_size_kib\":4096},"
	"{\"base_host_virt_addr\":1048576,\"size\":2097152,\"offset\":0,"
	"\"page_size\":2097152,\"page_size_kib\":2097152}]";

static struct fc_handshake h;
static char why[FC_WHY_MAX];

static int parse(const char *s)
{
	memset(why, 0, sizeof(why));
	return fc_json_parse(s, strlen(s), &h, why, sizeof(why));
}

/* @s must be refused with -EBADMSG and a message naming @words. */
static void refused(const char *s, const char *words)
{
	int ret = parse(s);

	cr_expect_eq(ret, -EBADMSG, "%s: %d (%s)", s, ret, why);
	cr_expect(strstr(why, words), "%s: the message \"%s\" lacks \"%s\"",
		  s, why, words);
	cr_expect_eq(h.nr, 0);
}

static void region_is(size_t i, uint64_t base, uint64_t size, uint64_t off,
		      size_t ps)
{
	cr_expect_eq(h.r[i].base, base, "region %zu base", i);
	cr_expect_eq(h.r[i].size, size, "region %zu size", i);
	cr_expect_eq(h.r[i].offset, off, "region %zu offset", i);
	cr_expect_eq(h.r[i].page_size, ps, "region %zu page size", i);
}

Test(fc_json, serde_bytes_of_firecracker_1_12)
{
	cr_assert_eq(parse(serde_one), 0, "%s", why);
	cr_assert_eq(h.nr, 1);
	region_is(0, 140241613881344ull, 128ul << 20, 0, 4096);
	cr_expect_eq(h.ignored, 0);
	cr_expect_str_empty(why);
}

Test(fc_json, serde_bytes_of_firecrackers_own_test)
{
	cr_assert_eq(parse(serde_fc_test), 0, "%s", why);
	cr_assert_eq(h.nr, 2);
	region_is(0, 0, 1ul << 20, 0, 4096);
	region_is(1, 1ul << 20, 2ul << 20, 0, 2ul << 20);
	/* It parses, but is nothing to serve: see the checks below. */
	cr_expect_eq(fc_regions_check(h.r, h.nr, 4ul << 20, 0, why,
				      sizeof(why)), -EINVAL);
	cr_expect(strstr(why, "region 1: base 0x100000, size 0x200000 and "
			  "offset 0 are not all multiples of its page size "
			  "2097152"), "%s", why);
}

/* 1.7 to 1.11 sent only page_size_kib (in bytes); 2.0 drops it. */
Test(fc_json, old_and_future_page_size_fields)
{
	cr_assert_eq(parse("[{\"base_host_virt_addr\":4096,\"size\":8192,"
			   "\"offset\":0,\"page_size_kib\":4096}]"), 0,
		     "%s", why);
	region_is(0, 4096, 8192, 0, 4096);
	cr_assert_eq(parse("[{\"base_host_virt_addr\":2097152,\"size\":"
			   "2097152,\"offset\":0,\"page_size\":2097152}]"),
		     0, "%s", why);
	region_is(0, 2ul << 20, 2ul << 20, 0, 2ul << 20);
	refused("[{\"base_host_virt_addr\":0,\"size\":4096,\"offset\":0}]",
		"neither \"page_size\" nor \"page_size_kib\"");
	refused("[{\"base_host_virt_addr\":0,\"size\":4096,\"offset\":0,"
		"\"page_size\":4096,\"page_size_kib\":2097152}]", "disagree");
}

Test(fc_json, keys_in_any_order_and_whitespace)
{
	cr_assert_eq(parse(" \n[ {\r\n\t\"page_size\" : 4096 , \"offset\":"
			   "8192,\"size\":\t4096,\"base_host_virt_addr\": "
			   "12288 } ,\n{\"size\":4096,\"base_host_virt_addr"
			   "\":0,\"offset\":0,\"page_size\":4096}\n] \n"),
		     0, "%s", why);
	cr_assert_eq(h.nr, 2);
	region_is(0, 12288, 4096, 8192, 4096);
	region_is(1, 0, 4096, 0, 4096);
	cr_assert_eq(parse("[]"), 0);
	cr_expect_eq(h.nr, 0);
	cr_assert_eq(parse(" [ ] "), 0);
}

Test(fc_json, unknown_keys_are_skipped_and_counted)
{
	cr_assert_eq(parse("[{\"base_host_virt_addr\":0,\"future\":{\"a\":"
			   "[1,-2.5e+3,true,false,null,\"\\u00e9\\n\"]},"
			   "\"size\":4096,\"offset\":0,\"page_size\":4096,"
			   "\"more\":\"x\"}]"), 0, "%s", why);
	region_is(0, 0, 4096, 0, 4096);
	cr_expect_eq(h.ignored, 2);
	cr_expect_str_eq(h.ignored_key, "future");
	/* Escapes in a key decode before the key is compared. */
	cr_assert_eq(parse("[{\"base_host_virt_addr\":0,\"\\u0073ize\":4096,"
			   "\"offset\":0,\"page_\\u0073ize\":4096}]"), 0,
		     "%s", why);
	cr_expect_eq(h.r[0].size, 4096);
	cr_expect_eq(h.ignored, 0);
	/* A NUL inside a key makes it another key, not "size". */
	cr_assert_eq(parse("[{\"base_host_virt_addr\":0,\"size\\u0000x\":1,"
			   "\"size\":4096,\"offset\":0,\"page_size\":4096}]"),
		     0, "%s", why);
	cr_expect_eq(h.ignored, 1);
	cr_expect_str_eq(h.ignored_key, "(a long or non-ASCII key)");
	/* A value of an unknown key is still checked. */
	refused("[{\"x\":[1,2,}]", "expected a value");
	refused("[{\"x\":01}]", "expected ',' or '}'");
	refused("[{\"x\":tru}]", "expected a value");
	refused("[{\"x\":1.}]", "expected a digit");
}

Test(fc_json, each_known_key_exactly_once)
{
	refused("[{\"base_host_virt_addr\":0,\"size\":4096,\"size\":4096,"
		"\"offset\":0,\"page_size\":4096}]",
		"region 0, byte 38: \"size\" a second time");
	refused("[{\"base_host_virt_addr\":0,\"offset\":0,"
		"\"page_size\":4096}]", "no \"size\"");
	refused("[{\"size\":4096,\"offset\":0,\"page_size\":4096}]",
		"no \"base_host_virt_addr\"");
	refused("[{\"base_host_virt_addr\":0,\"size\":4096,"
		"\"page_size\":4096}]", "no \"offset\"");
	refused("[{}]", "no \"base_host_virt_addr\"");
}

#define BASE_IS "[{\"base_host_virt_addr\":%s,\"size\":4096,\"offset\":0," \
		"\"page_size\":4096}]"

Test(fc_json, numbers_are_u64_integers)
{
	static const struct {
		const char *num, *words;
	} bad[] = {
		{ "18446744073709551616", "larger than 2^64 - 1" },
		{ "99999999999999999999", "larger than 2^64 - 1" },
		{ "-1", "a negative number" },
		{ "-0", "a negative number" },
		{ "1.0", "not an integer" },
		{ "1e3", "not an integer" },
		{ "1E3", "not an integer" },
		{ "007", "a leading zero" },
		{ "\"4096\"", "expected an unsigned integer, found '\"'" },
		{ "null", "expected an unsigned integer" },
		{ "+1", "expected an unsigned integer" },
		{ "0x10", "expected ',' or '}'" },
		{ "", "expected an unsigned integer, found ','" },
	};
	char buf[256];

	snprintf(buf, sizeof(buf), BASE_IS, "18446744073709551615");
	cr_assert_eq(parse(buf), 0, "%s", why);
	cr_expect_eq(h.r[0].base, UINT64_MAX);
	snprintf(buf, sizeof(buf), BASE_IS, "0");
	cr_assert_eq(parse(buf), 0, "%s", why);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(buf, sizeof(buf), BASE_IS, bad[i].num);
		refused(buf, bad[i].words);
	}
}

Test(fc_json, syntax_errors_say_where)
{
	refused("", "byte 0: expected '[' (the array of regions), found the "
		    "end of the input");
	refused("{}", "byte 0: expected '['");
	refused("[{\"base_host_virt_addr\":0,\"size\":4096,\"offset\":0,"
		"\"page_size\":4096}", "byte 66: expected ',' or ']', found the "
		"end of the input");
	refused("[{\"base_host_virt_addr\":0}]", "region 0, byte 26: no "
		"\"size\"");
	refused("[,]", "byte 1: expected '{' (a region)");
	refused("[" "{\"base_host_virt_addr\":0,\"size\":4096,\"offset\":0,"
		"\"page_size\":4096}" ",]", "region 1, byte 67: expected '{' (a region), found ']'");
	refused("[{\"size\" 4096}]", "expected ':'");
	refused("[{size:4096}]", "expected a key, found 's'");
	refused("[{\"size\":4096,}]", "expected a key, found '}'");
	refused("[] x", "byte 3: more after the array");
	refused("[][]", "more after the array");
	refused("[{\"size\":4096", "expected ',' or '}', found the end");
	refused("[{\"size", "a string does not end");
	refused("[{\"\x01\":1}]", "a control character in a string");
	refused("[{\"\\q\":1}]", "an invalid escape");
	refused("[{\"\\u12\":1}]", "an invalid \\u escape");
	refused("[{\"\\ud800\":1}]", "a lone high surrogate");
	refused("[{\"\\udc00\":1}]", "a lone low surrogate");
	refused("[{\"\xc3\":1}]", "invalid UTF-8");
	refused("[{\"\xc0\xaf\":1}]", "invalid UTF-8");	 /* overlong '/' */
	refused("[{\"\xed\xa0\x80\":1}]", "invalid UTF-8"); /* a surrogate */
	refused("[{\"\xf4\x90\x80\x80\":1}]", "invalid UTF-8"); /* > 10FFFF */
	refused("\xef\xbb\xbf[]", "byte 0: expected '[' (the array of regions), "
		"found byte 0xef");
	/* A pair is fine, and so is valid UTF-8, in a skipped value. */
	cr_expect_eq(parse("[{\"\\ud83d\\ude00\xc3\xa9\xe2\x82\xac\xf0\x9f\x98"
			   "\x80\":1,\"base_host_virt_addr\":0,\"size\":4096,"
			   "\"offset\":0,\"page_size\":4096}]"), 0, "%s", why);
}

Test(fc_json, nul_bytes_are_refused)
{
	static const char s[] = "[{\"base_host_virt_addr\":0,\"size\":4096,"
				"\"offset\":0,\"page_size\":4096}]";
	char buf[sizeof(s) + 1];

	memcpy(buf, s, sizeof(s)); /* with its NUL: one byte more than JSON */
	cr_expect_eq(fc_json_parse(buf, sizeof(s), &h, why, sizeof(why)),
		     -EBADMSG);
	cr_expect(strstr(why, "more after the array"), "%s", why);
	buf[10] = 0;
	cr_expect_eq(fc_json_parse(buf, sizeof(s) - 1, &h, why, sizeof(why)),
		     -EBADMSG);
}

/* Every proper prefix of a valid handshake is refused: nothing is read
 * past the length given (the copies have no terminator to stop at). */
Test(fc_json, every_prefix_is_refused)
{
	size_t n = strlen(serde_fc_test);

	for (size_t len = 0; len < n; len++) {
		char *p = malloc(len ? len : 1);

		memcpy(p, serde_fc_test, len);
		cr_expect_eq(fc_json_parse(p, len, &h, why, sizeof(why)),
			     -EBADMSG, "prefix of %zu bytes", len);
		cr_expect(why[0], "prefix of %zu bytes: no message", len);
		free(p);
	}
}

Test(fc_json, bounds)
{
	char *big = malloc(4 * FC_JSON_MAX);
	size_t len = 0;

	/* Too long, even when it is only whitespace. */
	memset(big, ' ', FC_JSON_MAX + 1);
	big[0] = '[';
	big[FC_JSON_MAX] = ']';
	cr_expect_eq(fc_json_parse(big, FC_JSON_MAX + 1, &h, why, sizeof(why)),
		     -EMSGSIZE);
	cr_expect(strstr(why, "more than 65536"), "%s", why);
	cr_expect_eq(fc_json_parse(big, FC_JSON_MAX, &h, why, sizeof(why)),
		     -EBADMSG); /* its last byte is a space, not ']' */
	big[FC_JSON_MAX - 1] = ']';
	cr_expect_eq(fc_json_parse(big, FC_JSON_MAX, &h, why, sizeof(why)), 0);
	/* One region more than fits. */
	big[len++] = '[';
	for (int i = 0; i <= FC_MAX_REGIONS; i++)
		len += (size_t)sprintf(big + len, "%s{\"base_host_virt_addr\":"
				       "%d,\"size\":4096,\"offset\":%d,"
				       "\"page_size\":4096}",
				       i ? "," : "", i * 4096, i * 4096);
	big[len++] = ']';
	cr_expect_eq(fc_json_parse(big, len, &h, why, sizeof(why)), -E2BIG);
	cr_expect(strstr(why, "more than 64 regions"), "%s", why);
	/* Values of unknown keys nest 16 deep at most. */
	len = (size_t)sprintf(big, "[{\"x\":");
	for (int i = 0; i < 15; i++)
		big[len++] = '[';
	for (int i = 0; i < 15; i++)
		big[len++] = ']';
	len += (size_t)sprintf(big + len, ",\"base_host_virt_addr\":0,\"size\""
			       ":4096,\"offset\":0,\"page_size\":4096}]");
	cr_expect_eq(fc_json_parse(big, len, &h, why, sizeof(why)), 0, "%s",
		     why);
	len = (size_t)sprintf(big, "[{\"x\":");
	for (int i = 0; i < 100000; i++)
		big[len++] = '[';
	cr_expect_eq(fc_json_parse(big, len, &h, why, sizeof(why)), -EMSGSIZE);
	cr_expect_eq(fc_json_parse(big, 6 + 16, &h, why, sizeof(why)),
		     -EBADMSG);
	cr_expect(strstr(why, "nested deeper than 16"), "%s", why);
	free(big);
}

Test(fc_json, a_short_message_buffer_is_enough)
{
	char tiny[8];

	cr_expect_eq(fc_json_parse("x", 1, &h, tiny, sizeof(tiny)), -EBADMSG);
	cr_expect_str_eq(tiny, "byte 0:");
	cr_expect_eq(fc_json_parse("[x]", 3, &h, tiny, sizeof(tiny)),
		     -EBADMSG);
	cr_expect_str_eq(tiny, "region ");
	cr_expect_eq(fc_json_parse("[x]", 3, &h, NULL, 0), -EBADMSG);
}

/* ------------------------------------------------------------------------
 * The checks of the regions.
 */

#define MIB (1ull << 20)

static int check(const struct fc_region *r, size_t nr, uint64_t file,
		 size_t ps)
{
	memset(why, 0, sizeof(why));
	return fc_regions_check(r, nr, file, ps, why, sizeof(why));
}

static void check_refused(const struct fc_region *r, size_t nr, uint64_t file,
			  size_t ps, int err, const char *words)
{
	int ret = check(r, nr, file, ps);

	cr_expect_eq(ret, err, "%d (%s), not %d", ret, why, err);
	cr_expect(strstr(why, words), "the message \"%s\" lacks \"%s\"", why,
		  words);
}

/* Firecracker on x86-64 with more than 3 GiB: two regions, back to back
 * in the file, apart in the address space. */
static const struct fc_region two[] = {
	{ 0x7f0000000000ull, 3072 * MIB, 0, 4096 },
	{ 0x7f0100000000ull, 1024 * MIB, 3072 * MIB, 4096 },
};

/*
 * fc_json_complete(): when a stream socket has delivered the handshake's
 * whole value - every proper prefix of one is not yet (0), the whole of
 * it is (1) - and what cannot begin an array is refused at once.
 */
Test(fc_json, complete_only_once_the_array_closes)
{
	size_t n = strlen(serde_fc_test);

	for (size_t len = 0; len < n; len++)
		cr_assert_eq(fc_json_complete(serde_fc_test, len), 0,
			     "a prefix of %zu bytes is complete", len);
	cr_assert_eq(fc_json_complete(serde_fc_test, n), 1);
	cr_assert_eq(fc_json_complete(" \n[]", 4), 1);
	cr_assert_eq(fc_json_complete("  ", 2), 0);
	/* Brackets inside strings, escaped quotes, do not count. */
	cr_assert_eq(fc_json_complete("[{\"a]\\\"]\":1}", 12), 0);
	cr_assert_eq(fc_json_complete("[{\"a]\\\"]\":1}]", 13), 1);
	cr_assert_eq(fc_json_complete("{\"a\":1}", 7), -EBADMSG);
	cr_assert_eq(fc_json_complete(" x", 2), -EBADMSG);
}

Test(fc_check, back_to_back_regions_pass)
{
	cr_expect_eq(check(two, 2, 4096 * MIB, 0), 0, "%s", why);
	cr_expect_str_empty(why);
	cr_expect_eq(check(two, 2, 4096 * MIB, 4096), 0, "%s", why);
	/* A longer file is fine; the regions need not be back to back. */
	cr_expect_eq(check(two, 1, 8192 * MIB, 0), 0, "%s", why);
	cr_expect_eq(check(&two[1], 1, 4096 * MIB, 0), 0, "%s", why);
}

Test(fc_check, a_memory_file_shorter_than_the_mappings)
{
	check_refused(two, 2, 4096 * MIB - 4096, 0, -ERANGE,
		      "region 1 needs 1073741824 bytes from offset 3221225472"
		      " of the memory file, which has 4294963200 bytes");
	check_refused(two, 2, 0, 0, -ERANGE, "region 0 needs");
	struct fc_region wrap = { 0, 4096, UINT64_MAX - 4095, 4096 };
	check_refused(&wrap, 1, UINT64_MAX, 0, -ERANGE, "region 0 needs");
}

Test(fc_check, overlapping_mappings)
{
	struct fc_region r[3] = { two[0], two[1], two[1] };

	r[2].offset = 4096 * MIB;
	check_refused(r, 3, 8192 * MIB, 0, -EINVAL, "regions 1 and 2 overlap "
		      "in the guest's address space");
	r[2].base = two[0].base + 3072 * MIB - 4096;
	check_refused(r, 3, 8192 * MIB, 0, -EINVAL, "regions 0 and 2 overlap "
		      "in the guest's address space");
	r[2].base = 0x10000;
	r[2].offset = 4096 * MIB - 4096;
	check_refused(r, 3, 8192 * MIB, 0, -EINVAL, "regions 1 and 2 overlap "
		      "in the memory file");
	r[2].offset = 4096 * MIB;
	cr_expect_eq(check(r, 3, 8192 * MIB, 0), 0, "%s", why);
}

Test(fc_check, misaligned_mappings)
{
	struct fc_region r = { 0x200000, 4 * MIB, 0, 2 * MIB };

	cr_expect_eq(check(&r, 1, 4 * MIB, 0), 0, "%s", why);
	r.base += 4096;
	check_refused(&r, 1, 4 * MIB, 0, -EINVAL, "region 0: base 0x201000, "
		      "size 0x400000 and offset 0 are not all multiples of its"
		      " page size 2097152");
	r.base -= 4096;
	r.size -= 4096;
	check_refused(&r, 1, 4 * MIB, 0, -EINVAL, "not all multiples");
	r.size += 4096;
	r.offset = 4096;
	check_refused(&r, 1, 8 * MIB, 0, -EINVAL, "not all multiples");
	r = (struct fc_region){ 0x1000, 4096, 0, 4096 };
	r.offset = 2048;
	check_refused(&r, 1, 8 * MIB, 0, -EINVAL, "not all multiples");
}

Test(fc_check, page_sizes)
{
	struct fc_region r = { 0x200000, 4 * MIB, 0, 8192 };

	check_refused(&r, 1, 4 * MIB, 0, -EINVAL, "region 0: page size 8192; "
		      "only 4096 and 2097152 (2 MiB) are served");
	r.page_size = 1ul << 30;
	check_refused(&r, 1, 4 * MIB, 0, -EINVAL, "page size 1073741824");
	r.page_size = 0;
	check_refused(&r, 1, 4 * MIB, 0, -EINVAL, "page size 0");
	r.page_size = 4096;
	check_refused(&r, 1, 4 * MIB, 2 * MIB, -EINVAL, "region 0: page size "
		      "4096, but the memory file is of 2097152-byte pages");
	r.page_size = 2 * MIB;
	cr_expect_eq(check(&r, 1, 4 * MIB, 2 * MIB), 0, "%s", why);
	check_refused(&r, 1, 4 * MIB, 4096, -EINVAL, "but the memory file is "
		      "of 4096-byte pages");
}

Test(fc_check, empty_and_out_of_address_space)
{
	struct fc_region r = { 0x200000, 0, 0, 4096 };

	check_refused(&r, 0, 4 * MIB, 0, -EINVAL, "lists no regions");
	check_refused(&r, 1, 4 * MIB, 0, -EINVAL, "region 0 is empty");
	check_refused(two, FC_MAX_REGIONS + 1, 4 * MIB, 0, -EINVAL,
		      "65 regions, more than 64");
	r = (struct fc_region){ 1ull << 56, 4096, 0, 4096 };
	check_refused(&r, 1, 4 * MIB, 0, -EINVAL, "not in a user address "
		      "space");
	r = (struct fc_region){ UINT64_MAX - 4095, 4096, 0, 4096 };
	check_refused(&r, 1, 4 * MIB, 0, -EINVAL, "not in a user address");
	r = (struct fc_region){ (1ull << 56) - 4096, 8192, 0, 4096 };
	check_refused(&r, 1, 4 * MIB, 0, -EINVAL, "not in a user address");
}

/* What the parser gives, the checks take: the whole path, as the front
 * end will run it. */
Test(fc_check, parsed_handshake_checked_against_the_file)
{
	cr_assert_eq(parse(serde_one), 0, "%s", why);
	cr_expect_eq(check(h.r, h.nr, 128ul << 20, 4096), 0, "%s", why);
	cr_expect_eq(check(h.r, h.nr, (128ul << 20) - 1, 4096), -ERANGE);
	cr_expect_eq(check(h.r, h.nr, 128ul << 20, 2ul << 20), -EINVAL);
}
