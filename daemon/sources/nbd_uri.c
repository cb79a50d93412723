// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * nbd_uri.c - the strict NBD URI parser and its canonical spelling
 * (nbd_uri.h). Every piece is checked before it is used; anything the
 * grammar does not name is refused with the reason.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbd_uri.h"

#define EXPORT_MAX 4096		/* the NBD protocol's limit on a name */

static int bad(char *why, size_t why_len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int bad(char *why, size_t why_len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, why_len, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * [s, s + n) percent-decoded into a new string in *out. -EINVAL for a
 * broken escape or an encoded NUL, -ENOMEM.
 */
static int pct_decode(const char *s, size_t n, char **out)
{
	char *d = malloc(n + 1), *p = d;

	if (!d)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int hi, lo;

		if (s[i] != '%') {
			*p++ = s[i];
			continue;
		}
		hi = i + 2 < n ? hexval(s[i + 1]) : -1;
		lo = hi >= 0 ? hexval(s[i + 2]) : -1;
		if (lo < 0 || (hi | lo) == 0) {
			free(d);
			return -EINVAL;
		}
		*p++ = (char)(hi << 4 | lo);
		i += 2;
	}
	*p = '\0';
	*out = d;
	return 0;
}

static bool unreserved(unsigned char c, bool slash)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
	       c == '~' || (slash && c == '/');
}

/* Append @s to @f, percent-encoded but for unreserved bytes (and '/'). */
static void pct_put(FILE *f, const char *s, bool slash)
{
	for (; *s; s++) {
		if (unreserved((unsigned char)*s, slash))
			fputc(*s, f);
		else
			fprintf(f, "%%%02X", (unsigned char)*s);
	}
}

static const struct scheme {
	const char *name;
	enum nbd_transport t;
	bool tls;
} schemes[] = {
	{ "nbd", NBD_TCP, false },
	{ "nbds", NBD_TCP, true },
	{ "nbd+unix", NBD_UNIX, false },
	{ "nbds+unix", NBD_UNIX, true },
	{ "nbd+vsock", NBD_VSOCK, false },
	{ "nbds+vsock", NBD_VSOCK, true },
};

static int parse_scheme(const char **p, struct nbd_uri *u, char *why,
			size_t why_len)
{
	const char *sep = strstr(*p, "://");

	for (size_t i = 0; sep && i < sizeof(schemes) / sizeof(*schemes); i++) {
		if (strlen(schemes[i].name) != (size_t)(sep - *p) ||
		    strncmp(*p, schemes[i].name, (size_t)(sep - *p)))
			continue;
		u->transport = schemes[i].t;
		u->tls = schemes[i].tls;
		*p = sep + 3;
		return 0;
	}
	return bad(why, why_len, "not an NBD URI: the scheme must be nbd, "
		   "nbds, nbd+unix, nbds+unix, nbd+vsock or nbds+vsock, "
		   "followed by ://");
}

/* A port or a CID: decimal, no sign, at most @max. */
static int parse_num(const char *s, size_t n, unsigned long max,
		     unsigned long *v)
{
	unsigned long x = 0;

	if (!n || n > 10)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		x = x * 10 + (unsigned long)(s[i] - '0');
	}
	if (x > max)
		return -EINVAL;
	*v = x;
	return 0;
}

static bool host_ok(const char *h, size_t n, bool v6)
{
	if (!n || n > 253)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = h[i];
		bool ok = v6 ? hexval(c) >= 0 || c == ':' || c == '.'
			     : (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
				       (c >= '0' && c <= '9') || c == '-' ||
				       c == '.';

		if (!ok)
			return false;
	}
	return true;
}

/* HOST[:PORT] or [V6][:PORT] of a TCP URI, or CID[:PORT] of vsock. */
static int parse_server(const char *s, size_t n, struct nbd_uri *u,
			char *why, size_t why_len)
{
	const char *h = s, *port = NULL;
	size_t hn = n;
	bool v6 = n && s[0] == '[';
	unsigned long v = NBD_URI_PORT;

	if (v6) {
		const char *close = memchr(s, ']', n);

		if (!close)
			return bad(why, why_len, "an IPv6 address without ']'");
		h = s + 1;
		hn = (size_t)(close - h);
		if (close + 1 < s + n) {
			if (close[1] != ':')
				return bad(why, why_len, "junk after ']'");
			port = close + 2;
		}
	} else if ((port = memchr(s, ':', n))) {
		hn = (size_t)(port++ - s);
	}
	if (port && parse_num(port, (size_t)(s + n - port), 65535, &v))
		return bad(why, why_len, "a port must be a number up to 65535");
	u->port = (uint16_t)v;
	if (u->transport == NBD_VSOCK) {
		if (v6 || parse_num(h, hn, UINT32_MAX, &v))
			return bad(why, why_len, "an nbd+vsock URI needs a "
				   "numeric CID");
		u->cid = (uint32_t)v;
		return 0;
	}
	if (!host_ok(h, hn, v6))
		return bad(why, why_len, "a server must be a DNS name, an IPv4 "
			   "address or a bracketed IPv6 address");
	u->host = strndup(h, hn);
	return u->host ? 0 : -ENOMEM;
}

/* The authority, [USER@]SERVER: up to the first '/', '?' or the end. */
static int parse_authority(const char **p, struct nbd_uri *u, char *why,
			   size_t why_len)
{
	const char *s = *p, *end = s + strcspn(s, "/?#"), *at;
	int ret;

	*p = end;
	at = memchr(s, '@', (size_t)(end - s));
	if (at) {
		ret = pct_decode(s, (size_t)(at - s), &u->user);
		if (ret || !u->user[0])
			return ret == -ENOMEM ? ret : bad(why, why_len,
				"a bad user name before '@'");
		s = at + 1;
	}
	if (u->transport == NBD_UNIX)
		return s == end ? 0 : bad(why, why_len, "an nbd+unix URI names "
					  "its server with ?socket=, not a host");
	return parse_server(s, (size_t)(end - s), u, why, why_len);
}

static int parse_export(const char **p, struct nbd_uri *u, char *why,
			size_t why_len)
{
	const char *s = *p, *end;
	int ret;

	if (*s == '/')
		s++;
	end = s + strcspn(s, "?#");
	*p = end;
	ret = pct_decode(s, (size_t)(end - s), &u->export);
	if (ret == -EINVAL)
		return bad(why, why_len, "a bad %%-escape in the export name");
	if (!ret && strlen(u->export) > EXPORT_MAX)
		return bad(why, why_len, "an export name longer than %d bytes",
			   EXPORT_MAX);
	return ret;
}

/* One KEY=VALUE of the query. */
static int parse_param(const char *s, size_t n, struct nbd_uri *u,
		       char *why, size_t why_len)
{
	static const char *const keys[] = { "socket", "tls-psk-file",
					    "tls-certificates" };
	char **slot[] = { &u->socket, &u->tls_psk_file, &u->tls_certificates };
	const char *eq = memchr(s, '=', n);
	size_t kn = eq ? (size_t)(eq - s) : n;
	int ret;

	for (size_t i = 0; eq && i < 3; i++) {
		if (strlen(keys[i]) != kn || strncmp(s, keys[i], kn))
			continue;
		if (*slot[i])
			return bad(why, why_len, "%s= given twice", keys[i]);
		ret = pct_decode(eq + 1, n - kn - 1, slot[i]);
		if (ret == -EINVAL || (!ret && !**slot[i]))
			return bad(why, why_len, "a bad value of %s=", keys[i]);
		return ret;
	}
	return bad(why, why_len, "unknown in the query: \"%.*s\" (only "
		   "socket=, tls-psk-file=, tls-certificates=)", (int)kn, s);
}

static int parse_query(const char *s, struct nbd_uri *u, char *why,
		       size_t why_len)
{
	int ret = 0;

	if (*s == '#')
		return bad(why, why_len, "a fragment (#) in an NBD URI");
	if (*s++ != '?')
		return 0;
	while (!ret && *s) {
		size_t n = strcspn(s, "&#");

		if (s[n] == '#')
			return bad(why, why_len, "a fragment (#) in an NBD URI");
		ret = parse_param(s, n, u, why, why_len);
		s += n + (s[n] == '&');
	}
	return ret;
}

static int make_canon(struct nbd_uri *u)
{
	size_t len = 0;
	FILE *f = open_memstream(&u->canon, &len);

	if (!f)
		return -ENOMEM;
	fprintf(f, "%s%s://", u->tls ? "nbds" : "nbd",
		u->transport == NBD_UNIX ? "+unix" :
		u->transport == NBD_VSOCK ? "+vsock" : "");
	if (u->user) {
		pct_put(f, u->user, false);
		fputc('@', f);
	}
	if (u->transport == NBD_TCP)
		fprintf(f, strchr(u->host, ':') ? "[%s]:%u" : "%s:%u",
			u->host, u->port);
	else if (u->transport == NBD_VSOCK)
		fprintf(f, "%u:%u", u->cid, u->port);
	fputc('/', f);
	pct_put(f, u->export, true);
	if (u->socket) {
		fputs("?socket=", f);
		pct_put(f, u->socket, true);
	}
	return fclose(f) ? -ENOMEM : 0;
}

int nbd_uri_parse(const char *uri, struct nbd_uri *u, char *why,
		  size_t why_len)
{
	const char *p = uri;
	int ret;

	*u = (struct nbd_uri){ 0 };
	ret = parse_scheme(&p, u, why, why_len);
	if (!ret)
		ret = parse_authority(&p, u, why, why_len);
	if (!ret)
		ret = parse_export(&p, u, why, why_len);
	if (!ret)
		ret = parse_query(p, u, why, why_len);
	if (!ret && (u->transport == NBD_UNIX) != !!u->socket)
		ret = bad(why, why_len, u->socket ? "socket= belongs to "
			  "nbd+unix URIs only" : "an nbd+unix URI needs "
			  "?socket=PATH");
	if (!ret)
		ret = make_canon(u);
	if (ret == -ENOMEM)
		snprintf(why, why_len, "out of memory");
	return ret;
}

void nbd_uri_free(struct nbd_uri *u)
{
	free(u->host);
	free(u->socket);
	free(u->export);
	free(u->user);
	free(u->tls_psk_file);
	free(u->tls_certificates);
	free(u->canon);
	*u = (struct nbd_uri){ 0 };
}

int nbd_uri_server(const struct nbd_uri *u, char *buf, size_t len)
{
	switch (u->transport) {
	case NBD_UNIX:
		return snprintf(buf, len, "unix:%s", u->socket);
	case NBD_VSOCK:
		return snprintf(buf, len, "vsock:%u:%u", u->cid, u->port);
	case NBD_TCP:
		break;
	}
	return snprintf(buf, len, strchr(u->host, ':') ? "[%s]:%u" : "%s:%u",
			u->host, u->port);
}
