// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * nbd.c - the NBD source (nbd.h): one per open, over the connection set
 * its URI shares with the other opens of the host (nbd_set.h). Here: the
 * checks of the export against what the front end expects, the export's
 * data extents widened to the open's pages (a table that never changes,
 * so extent() takes no lock, as the file source's), the identity, and
 * the blob a restarted daemon reopens the source from.
 */
#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "extents.h"
#include "nbd.h"
#include "nbd_set.h"

#define HUGE_PAGE (2ul << 20)

struct src_nbd {
	struct source s;
	struct nbd_set *set;
	char *uri;			/* as the front end gave it */
	/* The export's size when the session began: a stale source keeps
	 * the one it was saved with, so that saving it again keeps it
	 * stale. */
	uint64_t export_size;
	struct data_exts x;		/* data, widened to pages */
};

static const struct source_ops nbd_ops;

static struct src_nbd *to_nbd(const struct source *s)
{
	return (struct src_nbd *)((char *)s - offsetof(struct src_nbd, s));
}

/* ---- extents ---- */

/*
 * The set's data extents inside [0, size), widened to whole pages;
 * extents that come to touch merge. A stale source is all data: its
 * pages are read, and fail, rather than taken for zeros.
 */
static int ext_build(struct src_nbd *n, const struct nbd_set_info *info)
{
	uint64_t ps = n->s.page_size, size = n->s.size;
	int ret = 0;

	if (n->s.stale)
		return size ? exts_add(&n->x, 0, size) : 0;
	for (size_t i = 0; !ret && i < info->data.n &&
			   info->data.ext[i].start < size; i++) {
		uint64_t start = info->data.ext[i].start & ~(ps - 1);
		uint64_t end = (info->data.ext[i].end + ps - 1) & ~(ps - 1);

		ret = exts_add(&n->x, start, end > size ? size : end);
	}
	return ret;
}

static int nbd_extent(struct source *s, uint64_t off, struct src_extent *e)
{
	return exts_extent(&to_nbd(s)->x, s->size, off, e);
}

/* ---- the source ---- */

static ssize_t nbd_read(struct source *s, uint64_t off, void *buf, size_t len,
			unsigned int flags)
{
	struct src_nbd *n = to_nbd(s);
	int ret = s->stale ? -ESTALE :
		  exts_data_range(&n->x, s->size, s->page_size, off, len);

	if (!ret)
		ret = nset_read(n->set, off, buf, len,
				flags & SRC_READ_URGENT);
	if (ret == -ENOMEM)
		ret = -EIO;
	return ret ? ret : (ssize_t)len;
}

static void nbd_willneed(struct source *s, uint64_t off, uint64_t len)
{
	struct src_nbd *n = to_nbd(s);

	if (s->stale || off >= s->size)
		return;
	if (len > s->size - off)
		len = s->size - off;
	nset_willneed(n->set, off, len);
}

static void nbd_destroy(struct source *s)
{
	struct src_nbd *n = to_nbd(s);

	nset_put(n->set);
	exts_free(&n->x);
	free(n->uri);
	free(n);
}

static const struct source_ops nbd_ops = {
	.name = "nbd",
	.type = &src_nbd_type,
	.read = nbd_read,
	.extent = nbd_extent,
	.willneed = nbd_willneed,
	.destroy = nbd_destroy,
};

int src_nbd_is(const struct source *s)
{
	return s && s->ops == &nbd_ops;
}

void src_nbd_stats(struct source *s, struct src_nbd_stats *out)
{
	nset_stats(to_nbd(s)->set, out);
}

void src_nbd_set_log(void (*fn)(void *arg, const char *line), void *arg)
{
	nset_default_log(fn, arg);
}

/* ---- opening ---- */

/* nbd.h: BLAKE2b-256 of the canonical URI and the export's size. */
static int make_id(struct src_nbd *n, const struct nbd_set_info *info)
{
	char *msg;
	int len = asprintf(&msg, "faultd nbd source 1\n%s\n%llu",
			   info->canon, (unsigned long long)info->ex.size);

	if (len < 0 || sodium_init() < 0)
		return -ENOMEM;
	crypto_generichash(n->s.id, sizeof(n->s.id), (unsigned char *)msg,
			   (unsigned long long)len, NULL, 0);
	free(msg);
	return 0;
}

/* What the front end expects against what the server has. */
static int size_check(const struct nbd_set_info *info, uint64_t *size,
		      size_t ps, char *why, size_t why_len)
{
	uint64_t have = info->ex.size, a = info->align;

	if (!*size)
		*size = have;
	if (!*size || *size % ps)
		return why_set(why, why_len, -EINVAL, "%llu bytes are no whole "
			      "number of %zu-byte pages",
			      (unsigned long long)*size, ps);
	if (have < *size)
		return why_set(why, why_len, -ERANGE, "the export has %llu "
			      "bytes, fewer than the %llu it must hold",
			      (unsigned long long)have,
			      (unsigned long long)*size);
	if ((*size + a - 1) / a * a > have)
		return why_set(why, why_len, -ERANGE, "the export's last bytes "
			      "cannot be read in the server's %llu-byte blocks",
			      (unsigned long long)a);
	return 0;
}

/*
 * Open as src_nbd_open(); @wait: connect attempts until the deadline;
 * @saved: the export's size a saved blob recorded (0: none) - another
 * size now makes the source stale.
 */
static int nbd_open(const char *uri, uint64_t size, size_t page_size,
		    const struct src_nbd_opts *o, bool wait, uint64_t saved,
		    struct source **out, char *why, size_t why_len)
{
	const struct nbd_set_info *info;
	struct src_nbd *n;
	int ret;

	if (page_size != 4096 && page_size != HUGE_PAGE)
		return why_set(why, why_len, -EINVAL, "page size %zu: only "
			      "4096 and 2097152 (2 MiB)", page_size);
	n = calloc(1, sizeof(*n));
	if (!n || !(n->uri = strdup(uri))) {
		free(n);
		return why_set(why, why_len, -ENOMEM, "out of memory");
	}
	ret = nset_get(uri, o, wait, &n->set, why, why_len);
	if (ret)
		goto free_n;
	info = nset_info(n->set);
	n->export_size = saved ? saved : info->ex.size;
	n->s = (struct source){ .ops = &nbd_ops, .page_size = page_size,
				.remote = true,
				.stale = saved && saved != info->ex.size };
	ret = n->s.stale ? 0 : size_check(info, &size, page_size, why,
					  why_len);
	n->s.size = size;
	if (!ret)
		ret = ext_build(n, info);
	if (!ret)
		ret = make_id(n, info);
	if (ret == -ENOMEM)
		why_set(why, why_len, ret, "out of memory");
	if (ret)
		goto put_set;
	*out = &n->s;
	return 0;

put_set:
	nset_put(n->set);
free_n:
	exts_free(&n->x);
	free(n->uri);
	free(n);
	return ret;
}

int src_nbd_open(const char *uri, uint64_t size, size_t page_size,
		 const struct src_nbd_opts *o, struct source **out, char *why,
		 size_t why_len)
{
	return nbd_open(uri, size, page_size, o, false, 0, out, why, why_len);
}

/* ---- the blob ---- */

#define BLOB_MAGIC "FDNBDv1"	/* with its NUL: 8 bytes */
#define NO_STR UINT32_MAX

struct blob {
	uint8_t *p;		/* NULL: only measure */
	const uint8_t *in;
	size_t len, at;
	bool bad;
};

static void put(struct blob *b, const void *v, size_t n)
{
	if (b->p)
		memcpy(b->p + b->at, v, n);
	b->at += n;
}

static void put_u64(struct blob *b, uint64_t v)
{
	put(b, &v, sizeof(v));
}

static void put_str(struct blob *b, const char *s)
{
	uint32_t n = s ? (uint32_t)strlen(s) : NO_STR;

	put(b, &n, sizeof(n));
	if (s)
		put(b, s, n);
}

static void blob_write(struct blob *b, const struct src_nbd *n)
{
	const struct src_nbd_opts *o = nset_info(n->set)->o;
	const uint64_t v[] = {
		n->s.size, n->export_size, n->s.page_size, o->conns, o->depth,
		o->chunk, o->cache_bytes, o->io_timeout_ms,
		o->connect_timeout_ms, o->retry.backoff_min_ms,
		o->retry.backoff_max_ms, o->retry.deadline_ms,
		o->retry.read_retries, o->allow_local_files,
	};

	put(b, BLOB_MAGIC, sizeof(BLOB_MAGIC));
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		put_u64(b, v[i]);
	put_str(b, n->uri);
	put_str(b, o->tls_psk_file);
	put_str(b, o->tls_username);
	put_str(b, o->tls_certificates);
}

size_t src_nbd_save(struct source *s, void *blob, size_t max)
{
	struct blob b = { 0 };

	blob_write(&b, to_nbd(s));
	if (b.at <= max) {
		b = (struct blob){ .p = blob };
		blob_write(&b, to_nbd(s));
	}
	return b.at;
}

static void get(struct blob *b, void *v, size_t n)
{
	if (b->bad || n > b->len - b->at) {
		b->bad = true;
		memset(v, 0, n);
		return;
	}
	memcpy(v, b->in + b->at, n);
	b->at += n;
}

static uint32_t get_u32(struct blob *b, uint64_t max)
{
	uint64_t v;

	get(b, &v, sizeof(v));
	b->bad |= v > max;
	return (uint32_t)v;
}

/* A string, copied (NULL when the blob holds none); bad: no NUL inside. */
static char *get_str(struct blob *b)
{
	uint32_t n;
	char *s;

	get(b, &n, sizeof(n));
	if (b->bad || n == NO_STR)
		return NULL;
	if (n > b->len - b->at || memchr(b->in + b->at, '\0', n)) {
		b->bad = true;
		return NULL;
	}
	/* Not strndup(): the blob's bytes end with no NUL. */
	s = malloc((size_t)n + 1);
	if (!s) {
		b->bad = true;
		return NULL;
	}
	memcpy(s, b->in + b->at, n);
	s[n] = '\0';
	b->at += n;
	return s;
}

struct saved {
	uint64_t size, export_size, page_size;
	struct src_nbd_opts o;
	char *uri, *psk, *user, *certs;
};

static void blob_read(struct blob *b, struct saved *sv)
{
	char magic[sizeof(BLOB_MAGIC)];

	get(b, magic, sizeof(magic));
	b->bad |= memcmp(magic, BLOB_MAGIC, sizeof(magic)) != 0;
	get(b, &sv->size, sizeof(sv->size));
	get(b, &sv->export_size, sizeof(sv->export_size));
	get(b, &sv->page_size, sizeof(sv->page_size));
	sv->o = (struct src_nbd_opts){ .size = sizeof(sv->o) };
	sv->o.conns = get_u32(b, UINT32_MAX);
	sv->o.depth = get_u32(b, UINT32_MAX);
	sv->o.chunk = get_u32(b, UINT32_MAX);
	get(b, &sv->o.cache_bytes, sizeof(sv->o.cache_bytes));
	sv->o.io_timeout_ms = get_u32(b, UINT32_MAX);
	sv->o.connect_timeout_ms = get_u32(b, UINT32_MAX);
	sv->o.retry.backoff_min_ms = get_u32(b, UINT32_MAX);
	sv->o.retry.backoff_max_ms = get_u32(b, UINT32_MAX);
	sv->o.retry.deadline_ms = get_u32(b, UINT32_MAX);
	sv->o.retry.read_retries = get_u32(b, UINT32_MAX);
	sv->o.allow_local_files = get_u32(b, 1);
	sv->uri = get_str(b);
	sv->psk = get_str(b);
	sv->user = get_str(b);
	sv->certs = get_str(b);
	b->bad |= !sv->uri || b->at != b->len || !sv->export_size;
}

int src_nbd_reopen(const void *blob, size_t len, struct source **sp,
		   char *why, size_t why_len)
{
	struct blob b = { .in = blob, .len = len };
	struct saved sv = { 0 };
	int ret;

	blob_read(&b, &sv);
	if (b.bad) {
		ret = why_set(why, why_len, -EBADMSG, "not a saved NBD source");
		goto free_strs;
	}
	sv.o.tls_psk_file = sv.psk;
	sv.o.tls_username = sv.user;
	sv.o.tls_certificates = sv.certs;
	ret = nbd_open(sv.uri, sv.size, (size_t)sv.page_size, &sv.o, true,
		       sv.export_size, sp, why, why_len);
free_strs:
	free(sv.uri);
	free(sv.psk);
	free(sv.user);
	free(sv.certs);
	return ret;
}

/* The type's save(): a blob that does not fit is -E2BIG (source.h). */
static ssize_t nbd_type_save(struct source *s, void *blob, size_t max)
{
	size_t n = src_nbd_save(s, blob, max);

	return n > max ? -E2BIG : (ssize_t)n;
}

/* The type's reopen(): an NBD source keeps no descriptor. */
static int nbd_type_reopen(const void *blob, size_t len, int fd,
			   struct source **sp, char *why, size_t why_len)
{
	if (fd >= 0)
		close(fd);
	return src_nbd_reopen(blob, len, sp, why, why_len);
}

const struct source_type src_nbd_type = {
	.name = "nbd", .id = 6, .save = nbd_type_save,
	.reopen = nbd_type_reopen,
};
