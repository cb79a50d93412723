// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * fc_json.c - Firecracker's handshake (fc_json.h): a recursive-descent
 * reader of exactly the JSON that can mean an array of regions, bounded in
 * length (FC_JSON_MAX), in regions (FC_MAX_REGIONS) and in nesting (the
 * values of unknown keys, MAX_DEPTH), that never reads past its buffer and
 * says at which byte the input went wrong; then the checks of the regions
 * against each other, the page size and the memory file.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fc_json.h"

#define MAX_DEPTH 16	/* of a value skipped under an unknown key */
#define KEY_MAX 32	/* a longer key is none of ours */
/* Above every Linux user address space (x86-64 with 5-level paging ends
 * at 2^56 - 4 KiB, arm64 at 2^52). */
#define USER_VA_END (1ull << 56)

struct cursor {
	const char *start, *p, *end;
	long region;	/* the region being read; -1: none */
	char *why;
	size_t why_len;
};

static int fail(struct cursor *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* -EBADMSG, with "[region N, ]byte M: " and the message in c->why. */
static int fail(struct cursor *c, const char *fmt, ...)
{
	size_t at = (size_t)(c->p - c->start);
	va_list ap;
	int n;

	if (c->region >= 0)
		n = snprintf(c->why, c->why_len, "region %ld, byte %zu: ",
			     c->region, at);
	else
		n = snprintf(c->why, c->why_len, "byte %zu: ", at);
	if (n >= 0 && (size_t)n < c->why_len) {
		va_start(ap, fmt);
		vsnprintf(c->why + n, c->why_len - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return -EBADMSG;
}

static int fail_expected(struct cursor *c, const char *what)
{
	if (c->p >= c->end)
		return fail(c, "expected %s, found the end of the input", what);
	if (*c->p >= 0x20 && *c->p < 0x7f)
		return fail(c, "expected %s, found '%c'", what, *c->p);
	return fail(c, "expected %s, found byte 0x%02x", what,
		    (unsigned char)*c->p);
}

static void skip_ws(struct cursor *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' ||
				 *c->p == '\n' || *c->p == '\r'))
		c->p++;
}

/* After whitespace, @ch: consume it and say so. */
static bool eat(struct cursor *c, char ch)
{
	skip_ws(c);
	if (c->p < c->end && *c->p == ch) {
		c->p++;
		return true;
	}
	return false;
}

static bool at_digit(const struct cursor *c)
{
	return c->p < c->end && *c->p >= '0' && *c->p <= '9';
}

/*
 * The length of the UTF-8 sequence at @p, or 0 when it is not a valid one
 * (overlong forms, surrogates, code points past U+10FFFF, cut short).
 */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
	uint32_t cp, min;
	size_t n;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf) {
		n = 2, cp = p[0] & 0x1f, min = 0x80;
	} else if ((p[0] & 0xf0) == 0xe0) {
		n = 3, cp = p[0] & 0x0f, min = 0x800;
	} else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
		n = 4, cp = p[0] & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if ((size_t)(end - p) < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

/* The four hex digits at @s (inside c's input), into *v. */
static bool hex4(const struct cursor *c, const char *s, unsigned int *v)
{
	*v = 0;
	if (c->end - s < 4)
		return false;
	for (int i = 0; i < 4; i++) {
		char h = s[i];
		unsigned int d;

		if (h >= '0' && h <= '9')
			d = (unsigned int)(h - '0');
		else if ((h | 0x20) >= 'a' && (h | 0x20) <= 'f')
			d = (unsigned int)((h | 0x20) - 'a' + 10);
		else
			return false;
		*v = *v << 4 | d;
	}
	return true;
}

/* "\u" escapes: a surrogate comes in a pair, high then low, or not at all. */
static int scan_unicode(struct cursor *c, unsigned int *v)
{
	unsigned int lo;

	if (!hex4(c, c->p + 2, v))
		return fail(c, "an invalid \\u escape in a string");
	if (*v >= 0xdc00 && *v <= 0xdfff)
		return fail(c, "a lone low surrogate in a string");
	if (*v < 0xd800 || *v > 0xdbff) {
		c->p += 6;
		return 0;
	}
	if (c->end - c->p < 12 || c->p[6] != '\\' || c->p[7] != 'u' ||
	    !hex4(c, c->p + 8, &lo) || lo < 0xdc00 || lo > 0xdfff)
		return fail(c, "a lone high surrogate in a string");
	*v = 0x10000 + ((*v - 0xd800) << 10) + (lo - 0xdc00);
	c->p += 12;
	return 0;
}

/* The escape at c->p (a backslash): its code point in *v. */
static int scan_escape(struct cursor *c, unsigned int *v)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	const char *hit;

	if (c->end - c->p < 2)
		return fail(c, "a string does not end");
	if (c->p[1] == 'u')
		return scan_unicode(c, v);
	hit = c->p[1] ? strchr(from, c->p[1]) : NULL;
	if (!hit)
		return fail(c, "an invalid escape in a string");
	*v = (unsigned char)to[hit - from];
	c->p += 2;
	return 0;
}

/*
 * The string at c->p (its opening quote), checked: escapes, UTF-8, no raw
 * control characters. When @out is not NULL it receives the decoded value
 * if that is printable ASCII shorter than @cap, else "" (such a string is
 * no key of ours, and is not fit for a log line).
 */
static int scan_string(struct cursor *c, char *out, size_t cap)
{
	bool fits = out != NULL;
	size_t n = 0;
	int ret;

	c->p++;
	while (c->p < c->end && *c->p != '"') {
		const unsigned char *u = (const unsigned char *)c->p;
		unsigned int v = *u;
		size_t l;

		if (v < 0x20)
			return fail(c, "a control character in a string");
		if (v == '\\') {
			ret = scan_escape(c, &v);
			if (ret)
				return ret;
		} else {
			l = utf8_len(u, (const unsigned char *)c->end);
			if (!l)
				return fail(c, "invalid UTF-8 in a string");
			c->p += l;
		}
		if (fits && v >= 0x20 && v < 0x7f && n + 1 < cap)
			out[n++] = (char)v;
		else
			fits = false;
	}
	if (c->p >= c->end)
		return fail(c, "a string does not end");
	c->p++;
	if (out)
		out[fits ? n : 0] = 0;
	return 0;
}

/* An unsigned integer that fits 64 bits, written as JSON writes it. */
static int parse_u64(struct cursor *c, uint64_t *out)
{
	uint64_t v = 0;

	skip_ws(c);
	if (c->p < c->end && *c->p == '-')
		return fail(c, "a negative number");
	if (!at_digit(c))
		return fail_expected(c, "an unsigned integer");
	if (*c->p == '0' && c->end - c->p > 1 && c->p[1] >= '0' &&
	    c->p[1] <= '9')
		return fail(c, "a number with a leading zero");
	for (; at_digit(c); c->p++) {
		unsigned int d = (unsigned int)(*c->p - '0');

		if (v > (UINT64_MAX - d) / 10)
			return fail(c, "a number larger than 2^64 - 1");
		v = v * 10 + d;
	}
	if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E'))
		return fail(c, "a number that is not an integer");
	*out = v;
	return 0;
}

static bool skip_digits(struct cursor *c)
{
	const char *s = c->p;

	while (at_digit(c))
		c->p++;
	return c->p > s;
}

/* Any JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int skip_number(struct cursor *c)
{
	if (c->p < c->end && *c->p == '-')
		c->p++;
	if (c->p < c->end && *c->p == '0')
		c->p++;
	else if (!skip_digits(c))
		return fail_expected(c, "a value");
	if (c->p < c->end && *c->p == '.') {
		c->p++;
		if (!skip_digits(c))
			return fail_expected(c, "a digit");
	}
	if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
		c->p++;
		if (c->p < c->end && (*c->p == '+' || *c->p == '-'))
			c->p++;
		if (!skip_digits(c))
			return fail_expected(c, "a digit");
	}
	return 0;
}

static int skip_word(struct cursor *c, const char *w)
{
	size_t n = strlen(w);

	if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n))
		return fail_expected(c, "a value");
	c->p += n;
	return 0;
}

static int skip_value(struct cursor *c, int depth);

/* An object or array at c->p, @depth containers deep. */
static int skip_container(struct cursor *c, int depth)
{
	bool object = *c->p == '{';
	char close = object ? '}' : ']';
	int ret;

	if (depth >= MAX_DEPTH)
		return fail(c, "values nested deeper than %d", MAX_DEPTH);
	c->p++;
	if (eat(c, close))
		return 0;
	do {
		if (object) {
			skip_ws(c);
			if (c->p >= c->end || *c->p != '"')
				return fail_expected(c, "a key");
			ret = scan_string(c, NULL, 0);
			if (ret)
				return ret;
			if (!eat(c, ':'))
				return fail_expected(c, "':'");
		}
		ret = skip_value(c, depth + 1);
		if (ret)
			return ret;
	} while (eat(c, ','));
	if (!eat(c, close))
		return fail_expected(c, object ? "',' or '}'" : "',' or ']'");
	return 0;
}

/* Any JSON value (the value of a key we do not know), checked. */
static int skip_value(struct cursor *c, int depth)
{
	skip_ws(c);
	if (c->p >= c->end)
		return fail_expected(c, "a value");
	switch (*c->p) {
	case '"':
		return scan_string(c, NULL, 0);
	case '{':
	case '[':
		return skip_container(c, depth);
	case 't':
		return skip_word(c, "true");
	case 'f':
		return skip_word(c, "false");
	case 'n':
		return skip_word(c, "null");
	default:
		return skip_number(c);
	}
}

enum key { K_BASE, K_SIZE, K_OFFSET, K_PAGE_SIZE, K_PAGE_SIZE_KIB, K_NR };

static const char *const key_names[K_NR] = {
	"base_host_virt_addr", "size", "offset", "page_size", "page_size_kib",
};

static int key_index(const char *key)
{
	for (int k = 0; k < K_NR; k++)
		if (!strcmp(key, key_names[k]))
			return k;
	return -1;
}

static void note_ignored(struct fc_handshake *h, const char *key)
{
	if (!h->ignored++)
		snprintf(h->ignored_key, sizeof(h->ignored_key), "%s",
			 *key ? key : "(a long or non-ASCII key)");
}

/* One "key": value of a region; the values of known keys into @v. */
static int parse_member(struct cursor *c, uint64_t *v, unsigned int *seen,
			struct fc_handshake *h)
{
	char key[KEY_MAX];
	const char *at;
	int k, ret;

	skip_ws(c);
	if (c->p >= c->end || *c->p != '"')
		return fail_expected(c, "a key");
	at = c->p;
	ret = scan_string(c, key, sizeof(key));
	if (ret)
		return ret;
	if (!eat(c, ':'))
		return fail_expected(c, "':'");
	k = key_index(key);
	if (k < 0) {
		note_ignored(h, key);
		return skip_value(c, 1);
	}
	if (*seen & 1u << k) {
		c->p = at;
		return fail(c, "\"%s\" a second time", key_names[k]);
	}
	*seen |= 1u << k;
	return parse_u64(c, &v[k]);
}

/* The region's fields from what its object said. */
static int region_fill(struct cursor *c, struct fc_region *r,
		       const uint64_t *v, unsigned int seen)
{
	const unsigned int ps = 1u << K_PAGE_SIZE, kib = 1u << K_PAGE_SIZE_KIB;

	for (int k = K_BASE; k <= K_OFFSET; k++)
		if (!(seen & 1u << k))
			return fail(c, "no \"%s\"", key_names[k]);
	if (!(seen & (ps | kib)))
		return fail(c, "neither \"page_size\" nor \"page_size_kib\"");
	if ((seen & ps) && (seen & kib) &&
	    v[K_PAGE_SIZE] != v[K_PAGE_SIZE_KIB])
		return fail(c, "\"page_size\" %llu and \"page_size_kib\" %llu "
			       "disagree",
			    (unsigned long long)v[K_PAGE_SIZE],
			    (unsigned long long)v[K_PAGE_SIZE_KIB]);
	r->base = v[K_BASE];
	r->size = v[K_SIZE];
	r->offset = v[K_OFFSET];
	r->page_size = (size_t)(seen & ps ? v[K_PAGE_SIZE]
					  : v[K_PAGE_SIZE_KIB]);
	return 0;
}

static int parse_region(struct cursor *c, struct fc_region *r,
			struct fc_handshake *h)
{
	uint64_t v[K_NR] = { 0 };
	unsigned int seen = 0;
	int ret;

	if (!eat(c, '{'))
		return fail_expected(c, "'{' (a region)");
	if (!eat(c, '}')) {
		do {
			ret = parse_member(c, v, &seen, h);
			if (ret)
				return ret;
		} while (eat(c, ','));
		if (!eat(c, '}'))
			return fail_expected(c, "',' or '}'");
	}
	return region_fill(c, r, v, seen);
}

static int parse_array(struct cursor *c, struct fc_handshake *h)
{
	int ret;

	if (!eat(c, '['))
		return fail_expected(c, "'[' (the array of regions)");
	if (!eat(c, ']')) {
		do {
			if (h->nr == FC_MAX_REGIONS) {
				snprintf(c->why, c->why_len,
					 "more than %d regions",
					 FC_MAX_REGIONS);
				return -E2BIG;
			}
			c->region = (long)h->nr;
			ret = parse_region(c, &h->r[h->nr], h);
			if (ret)
				return ret;
			c->region = -1;
			h->nr++;
		} while (eat(c, ','));
		if (!eat(c, ']'))
			return fail_expected(c, "',' or ']'");
	}
	skip_ws(c);
	if (c->p != c->end)
		return fail(c, "more after the array");
	return 0;
}

int fc_json_parse(const char *buf, size_t len, struct fc_handshake *h,
		  char *why, size_t why_len)
{
	struct cursor c = { .start = buf, .p = buf, .end = buf + len,
			    .region = -1, .why = why, .why_len = why_len };
	int ret;

	memset(h, 0, sizeof(*h));
	if (len > FC_JSON_MAX) {
		snprintf(why, why_len, "the handshake is %zu bytes, more than "
			 "%u", len, FC_JSON_MAX);
		return -EMSGSIZE;
	}
	ret = parse_array(&c, h);
	if (ret) {
		h->nr = 0;
		return ret;
	}
	if (why_len)
		why[0] = 0;
	return 0;
}

int fc_json_complete(const char *buf, size_t len)
{
	struct cursor c = { .start = buf, .p = buf, .end = buf + len };
	bool in_string = false, escaped = false;
	size_t depth = 0;

	skip_ws(&c);
	if (c.p == c.end)
		return 0;
	if (*c.p != '[')
		return -EBADMSG;
	for (; c.p < c.end; c.p++) {
		char ch = *c.p;

		if (in_string) {
			if (escaped)
				escaped = false;
			else if (ch == '\\')
				escaped = true;
			else if (ch == '"')
				in_string = false;
		} else if (ch == '"') {
			in_string = true;
		} else if (ch == '[' || ch == '{') {
			depth++;
		} else if ((ch == ']' || ch == '}') && !--depth) {
			return 1;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------------
 * The checks of the regions.
 */

#define ULL(x) ((unsigned long long)(x))

/* Region @i on its own: page size, alignment, address space, the file. */
static int region_check(const struct fc_region *r, size_t i,
			uint64_t file_size, size_t page_size, char *why,
			size_t why_len)
{
	if (r->page_size != FC_PAGE_4K && r->page_size != FC_PAGE_2M)
		return why_set(why, why_len, -EINVAL, "region %zu: page size %zu"
			      "; only 4096 and 2097152 (2 MiB) are served", i,
			      r->page_size);
	if (page_size && r->page_size != page_size)
		return why_set(why, why_len, -EINVAL, "region %zu: page size %zu"
			      ", but the memory file is of %zu-byte pages", i,
			      r->page_size, page_size);
	if (!r->size)
		return why_set(why, why_len, -EINVAL, "region %zu is empty", i);
	if ((r->base | r->size | r->offset) & (r->page_size - 1))
		return why_set(why, why_len, -EINVAL, "region %zu: base %#llx, "
			      "size %#llx and offset %#llx are not all "
			      "multiples of its page size %zu", i, ULL(r->base),
			      ULL(r->size), ULL(r->offset), r->page_size);
	if (r->base >= USER_VA_END || r->size > USER_VA_END - r->base)
		return why_set(why, why_len, -EINVAL, "region %zu: %#llx bytes "
			      "at %#llx are not in a user address space", i,
			      ULL(r->size), ULL(r->base));
	if (r->offset > file_size || r->size > file_size - r->offset)
		return why_set(why, why_len, -ERANGE, "region %zu needs %llu "
			      "bytes from offset %llu of the memory file, "
			      "which has %llu bytes", i, ULL(r->size),
			      ULL(r->offset), ULL(file_size));
	return 0;
}

struct span {
	uint64_t start, len;
	size_t i;
};

static int span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/*
 * Sorted by start, does a span reach into the next? Its two regions in
 * *a and *b. The spans were checked not to wrap.
 */
static bool spans_overlap(struct span *s, size_t nr, size_t *a, size_t *b)
{
	qsort(s, nr, sizeof(*s), span_cmp);
	for (size_t k = 1; k < nr; k++) {
		if (s[k - 1].start + s[k - 1].len > s[k].start) {
			*a = s[k - 1].i < s[k].i ? s[k - 1].i : s[k].i;
			*b = s[k - 1].i < s[k].i ? s[k].i : s[k - 1].i;
			return true;
		}
	}
	return false;
}

int fc_regions_check(const struct fc_region *r, size_t nr, uint64_t file_size,
		     size_t page_size, char *why, size_t why_len)
{
	struct span va[FC_MAX_REGIONS], file[FC_MAX_REGIONS];
	size_t a, b;
	int ret;

	if (!nr)
		return why_set(why, why_len, -EINVAL, "the handshake lists no "
			      "regions");
	if (nr > FC_MAX_REGIONS)
		return why_set(why, why_len, -EINVAL, "%zu regions, more than "
			      "%d", nr, FC_MAX_REGIONS);
	for (size_t i = 0; i < nr; i++) {
		ret = region_check(&r[i], i, file_size, page_size, why,
				   why_len);
		if (ret)
			return ret;
		if (r[i].page_size != r[0].page_size)
			return why_set(why, why_len, -EINVAL, "regions 0 and %zu "
				      "have different page sizes (%zu and %zu)",
				      i, r[0].page_size, r[i].page_size);
		va[i] = (struct span){ r[i].base, r[i].size, i };
		file[i] = (struct span){ r[i].offset, r[i].size, i };
	}
	if (spans_overlap(va, nr, &a, &b))
		return why_set(why, why_len, -EINVAL, "regions %zu and %zu "
			      "overlap in the guest's address space", a, b);
	if (spans_overlap(file, nr, &a, &b))
		return why_set(why, why_len, -EINVAL, "regions %zu and %zu "
			      "overlap in the memory file", a, b);
	if (why_len)
		why[0] = 0;
	return 0;
}
