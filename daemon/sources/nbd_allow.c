// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * nbd_allow.c - the allow list of NBD servers per user (nbd_allow.h):
 * loaded once into a table of (user, server) pairs, checked against the
 * parts of a URI that nbd_uri.h parsed - the parts the source connects
 * to.
 */
#include <errno.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common.h"
#include "nbd_allow.h"
#include "nbd_uri.h"

struct allow_entry {
	unsigned int line;
	bool any_user, any_server, any_port, dir;
	uid_t uid;
	enum nbd_transport t;
	char *host;		/* TCP */
	uint32_t cid;		/* vsock */
	uint16_t port;		/* TCP, vsock; unless any_port */
	char *path;		/* Unix: a socket, or a directory ending in / */
};

struct nbd_allow {
	char *name;
	struct allow_entry *e;
	size_t n;
};

void nbd_allow_free(struct nbd_allow *a)
{
	if (!a)
		return;
	for (size_t i = 0; i < a->n; i++) {
		free(a->e[i].host);
		free(a->e[i].path);
	}
	free(a->e);
	free(a->name);
	free(a);
}

static int parse_user(const char *s, struct allow_entry *e)
{
	struct passwd pw, *res = NULL;
	char buf[1024], *end;
	unsigned long v;

	if (!strcmp(s, "*")) {
		e->any_user = true;
		return 0;
	}
	errno = 0;
	v = strtoul(s, &end, 10);
	if (*s >= '0' && *s <= '9' && !*end && !errno && v < (uid_t)-1) {
		e->uid = (uid_t)v;
		return 0;
	}
	if (getpwnam_r(s, &pw, buf, sizeof(buf), &res) || !res)
		return -EINVAL;
	e->uid = res->pw_uid;
	return 0;
}

/* HOST[:PORT], [V6][:PORT] or CID[:PORT], through the URI parser. */
static int parse_netloc(const char *s, enum nbd_transport t,
			struct allow_entry *e)
{
	const char *close = strchr(s, ']');
	struct nbd_uri u;
	char uri[600], why[128];
	int ret;

	if (strlen(s) > 512 || strpbrk(s, "@/?#%"))
		return -EINVAL;
	snprintf(uri, sizeof(uri), "%s://%s/", t == NBD_TCP ? "nbd"
						 : "nbd+vsock", s);
	ret = nbd_uri_parse(uri, &u, why, sizeof(why));
	if (!ret) {
		e->t = t;
		e->any_port = !strchr(close ? close : s, ':');
		e->port = u.port;
		e->cid = u.cid;
		e->host = u.host;
		u.host = NULL;
	}
	nbd_uri_free(&u);
	return ret;
}

/*
 * An absolute path without empty, "." or ".." components; a directory's
 * ends in '/'.
 */
static bool path_normal(const char *p, bool dir)
{
	const char *c = p;

	if (*c != '/')
		return false;
	while (*c == '/') {
		size_t k = strcspn(++c, "/");

		if (!k)
			return dir && !*c;
		if ((k == 1 && c[0] == '.') ||
		    (k == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		c += k;
	}
	return !dir;
}

static int parse_server(const char *s, struct allow_entry *e)
{
	if (!strcmp(s, "*")) {
		e->any_server = true;
		return 0;
	}
	if (!strncmp(s, "unix:", 5)) {
		e->t = NBD_UNIX;
		e->dir = s[strlen(s) - 1] == '/';
		if (!path_normal(s + 5, e->dir))
			return -EINVAL;
		e->path = strdup(s + 5);
		return e->path ? 0 : -ENOMEM;
	}
	if (!strncmp(s, "vsock:", 6))
		return parse_netloc(s + 6, NBD_VSOCK, e);
	return parse_netloc(s, NBD_TCP, e);
}

static int add_entry(struct nbd_allow *a, const struct allow_entry *e)
{
	struct allow_entry *n = realloc(a->e, (a->n + 1) * sizeof(*n));

	if (!n)
		return -ENOMEM;
	a->e = n;
	a->e[a->n++] = *e;
	return 0;
}

/* One line: blank, a comment, or USER SERVER [# comment]. */
static int parse_line(struct nbd_allow *a, char *line, unsigned int no,
		      char *why, size_t why_len)
{
	struct allow_entry e = { .line = no };
	char *save = NULL, *user, *server;
	int ret;

	line[strcspn(line, "#\n")] = '\0';
	user = strtok_r(line, " \t", &save);
	if (!user)
		return 0;
	server = strtok_r(NULL, " \t", &save);
	if (!server || strtok_r(NULL, " \t", &save))
		return why_set(why, why_len, -EINVAL, "%s:%u: not USER SERVER",
			   a->name, no);
	if (parse_user(user, &e))
		return why_set(why, why_len, -EINVAL, "%s:%u: no user \"%s\"",
			   a->name, no, user);
	ret = parse_server(server, &e);
	if (!ret)
		ret = add_entry(a, &e);
	if (ret) {
		free(e.host);
		free(e.path);
	}
	if (ret == -ENOMEM)
		return why_set(why, why_len, ret, "out of memory");
	return ret ? why_set(why, why_len, ret, "%s:%u: not a server: \"%s\" "
			 "(HOST, HOST:PORT, [V6]:PORT, unix:PATH, unix:DIR/, "
			 "vsock:CID[:PORT] or *)", a->name, no, server)
		   : 0;
}

int nbd_allow_parse(const char *text, const char *name,
		    struct nbd_allow **out, char *why, size_t why_len)
{
	struct nbd_allow *a = calloc(1, sizeof(*a));
	char *copy = strdup(text), *line, *save = NULL;
	unsigned int no = 0;
	int ret = 0;

	if (!a || !copy || !(a->name = strdup(name))) {
		ret = why_set(why, why_len, -ENOMEM, "out of memory");
		goto free_copy;
	}
	/* strtok_r would skip empty lines and so miscount: split by hand. */
	for (line = copy; !ret && line; line = save) {
		save = strchr(line, '\n');
		if (save)
			*save++ = '\0';
		ret = parse_line(a, line, ++no, why, why_len);
	}
	if (ret)
		goto free_copy;
	free(copy);
	*out = a;
	return 0;

free_copy:
	free(copy);
	nbd_allow_free(a);
	return ret;
}

int nbd_allow_load(const char *path, struct nbd_allow **out, char *why,
		   size_t why_len)
{
	FILE *f = fopen(path, "re");
	char *text = NULL;
	size_t cap = 0;
	ssize_t n;
	int ret;

	if (!f && errno == ENOENT)
		return nbd_allow_parse("", path, out, why, why_len);
	if (!f)
		return why_set(why, why_len, -errno, "%s: %s", path,
			   strerror(errno));
	n = getdelim(&text, &cap, '\0', f);
	fclose(f);
	ret = nbd_allow_parse(n > 0 ? text : "", path, out, why, why_len);
	free(text);
	return ret;
}

static bool server_matches(const struct allow_entry *e,
			   const struct nbd_uri *u)
{
	size_t n;

	if (e->any_server)
		return true;
	if (e->t != u->transport)
		return false;
	switch (e->t) {
	case NBD_TCP:
		return !strcasecmp(e->host, u->host) &&
		       (e->any_port || e->port == u->port);
	case NBD_VSOCK:
		return e->cid == u->cid && (e->any_port || e->port == u->port);
	case NBD_UNIX:
		break;
	}
	if (!e->dir)
		return !strcmp(e->path, u->socket);
	n = strlen(e->path);
	return !strncmp(e->path, u->socket, n) && u->socket[n] &&
	       !strchr(u->socket + n, '/');
}

/* Whether @u asks for anything only root may, before the list is read. */
static int root_only(const struct nbd_uri *u, char *why, size_t why_len)
{
	if (u->tls_psk_file || u->tls_certificates)
		return why_set(why, why_len, -EPERM, "the URI names a file of the "
			   "daemon's host (%s=): only root's URIs may",
			   u->tls_psk_file ? "tls-psk-file" : "tls-certificates");
	if (u->transport == NBD_UNIX && !path_normal(u->socket, false))
		return why_set(why, why_len, -EPERM, "the socket path \"%s\" is not "
			   "absolute or has empty, \".\" or \"..\" parts",
			   u->socket);
	return 0;
}

int nbd_allow_check(const struct nbd_allow *a, uid_t uid, const char *uri,
		    char *why, size_t why_len)
{
	struct nbd_uri u;
	char server[300];
	int ret = nbd_uri_parse(uri, &u, why, why_len);

	if (ret)
		goto free_uri;
	if (uid == 0) {
		ret = why_set(why, why_len, 0, "root's URIs are always allowed");
		goto free_uri;
	}
	ret = root_only(&u, why, why_len);
	for (size_t i = 0; !ret && a && i < a->n; i++) {
		const struct allow_entry *e = &a->e[i];

		if ((e->any_user || e->uid == uid) && server_matches(e, &u)) {
			ret = why_set(why, why_len, 0, "allowed by %s:%u", a->name,
				  e->line);
			goto free_uri;
		}
	}
	if (!ret) {
		nbd_uri_server(&u, server, sizeof(server));
		ret = why_set(why, why_len, -EPERM, "user %u may not make faultd "
			  "connect to %s: %s", (unsigned int)uid, server,
			  a ? "no line of the allow list allows it"
			    : "there is no allow list");
	}
free_uri:
	nbd_uri_free(&u);
	return ret;
}
