// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * gen_seeds.c - writes the fuzz targets' seed corpora: fuzz-seeds DIR
 * fills DIR/proto with protocol messages, DIR/image with images and
 * DIR/fc_json with Firecracker handshakes.
 *
 * Messages are built as the library and the daemon build them
 * (proto_init()); images are written by faultd_checkpoint() from regions
 * of a few pages (a full image, an incremental chain), then squeezed as
 * image_fuzz.c reads them. A few edge cases of each are derived from the
 * valid ones. Handshakes are the bytes serde_json writes for each version
 * of Firecracker's region list, and variations a JSON writer could make.
 * The committed corpus is this program's output: run it again after a
 * change of any format.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "faultd.h"
#include "fuzz-key.h"
#include "internal.h"
#include "proto.h"

#define PAGE 4096ul
#define HEAD sizeof(struct img_header)

static const char *out_dir;
static char scratch[] = "/tmp/faultd-seeds-XXXXXX";

static void die(const char *what, int err)
{
	fprintf(stderr, "fuzz-seeds: %s: %s\n", what, strerror(err));
	exit(1);
}

static void out_write(const char *kind, const char *name, const void *p,
		      size_t len)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/%s", out_dir, kind, name);
	f = fopen(path, "we");
	if (!f || fwrite(p, 1, len, f) != len || fclose(f))
		die(path, errno);
}

/* ------------------------------------------------------------------------
 * Messages.
 */

static uint64_t mbuf[PROTO_MAX_MSG / 8];

static void *msg_new(void)
{
	memset(mbuf, 0, sizeof(mbuf));
	return mbuf;
}

static void msg_write(const char *name, enum proto_type type, size_t len)
{
	proto_init((struct proto_hdr *)mbuf, type, len);
	out_write("proto", name, mbuf, len);
}

static void hello_write(const char *name, uint32_t min, uint32_t max)
{
	struct proto_hello *h = msg_new();

	h->min_version = min;
	h->max_version = max;
	h->features = PROTO_FEATURES;
	msg_write(name, MSG_HELLO, sizeof(*h));
}

/* @n one-page ranges @step apart from @first, adjacent in the image;
 * with PROTO_REG_MAC, a key after them. */
static void register_write(const char *name, uint32_t n, uint64_t first,
			   uint64_t step, uint32_t flags)
{
	struct proto_register *r = msg_new();
	size_t len = sizeof(*r) + n * sizeof(r->r[0]);

	r->uffd_features = 1ull << 0;
	r->nr_ranges = n;
	r->flags = flags;
	for (uint32_t i = 0; i < n; i++)
		r->r[i] = (struct proto_range){ first + i * step, PAGE,
						i * PAGE };
	if (flags & PROTO_REG_MAC) {
		memset(proto_register_key(r), FUZZ_KEY_BYTE, PROTO_KEY_LEN);
		len += PROTO_KEY_LEN;
	}
	msg_write(name, MSG_REGISTER, len);
}

static void status_write(void)
{
	struct proto_status *st = msg_new();

	st->uptime_ms = 12345;
	st->nr_sessions = 2;
	for (uint32_t i = 0; i < 2; i++)
		st->s[i] = (struct proto_session){ .session = i + 1,
						   .pid = 100 + (int)i,
						   .done = i,
						   .pages_total = 4,
						   .pages_urgent = 1 + i,
						   .faults = 1 };
	msg_write("status-reply", MSG_STATUS,
		  sizeof(*st) + 2 * sizeof(st->s[0]));
}

static void replies_write(void)
{
	struct proto_ack *a = msg_new();
	struct proto_error *e;
	struct proto_progress *p;

	a->session = 1;
	a->pages_total = 4;
	msg_write("ack", MSG_ACK, sizeof(*a));
	e = msg_new();
	e->err = -EINVAL;
	snprintf(e->msg, sizeof(e->msg), "ranges overlap");
	msg_write("error", MSG_ERROR, sizeof(*e));
	p = msg_new();
	p->pages_total = 4;
	p->pages_urgent = 1;
	p->pages_background = 2;
	msg_write("progress", MSG_PROGRESS, sizeof(*p));
	p = msg_new();
	p->pages_total = p->pages_background = 4;
	msg_write("done", MSG_DONE, sizeof(*p));
	status_write();
}

static void proto_seeds(void)
{
	struct proto_range *pf = (struct proto_range *)
		((struct proto_hdr *)msg_new() + 1);

	hello_write("hello", PROTO_VERSION, PROTO_VERSION);
	hello_write("hello-range", 1, 3);
	register_write("register", 1, 0x7f0000000000, PAGE, 0);
	register_write("register-lazy-3", 3, 0x7f0000000000, 2 * PAGE,
		       PROTO_REG_LAZY);
	register_write("register-max", PROTO_MAX_RANGES, 0x7f0000000000,
		       PAGE, 0);
	register_write("register-mac", 2, 0x7f0000000000, PAGE,
		       PROTO_REG_MAC);
	pf->start = 0x7f0000001000;
	pf->len = PAGE;
	msg_write("prefetch", MSG_PREFETCH, sizeof(struct proto_hdr) + 24);
	msg_new();
	msg_write("stats", MSG_STATS, sizeof(struct proto_hdr));
	msg_new();
	msg_write("status", MSG_STATUS, sizeof(struct proto_hdr));
	replies_write();
	/* Edge cases. */
	register_write("register-none", 0, 0x7f0000000000, PAGE, 0);
	register_write("register-overlap", 2, 0x7f0000000000, 0, 0);
	register_write("register-wrap", 1, UINT64_MAX & ~(PAGE - 1), PAGE, 0);
	hello_write("hello-v3", 3, 3); /* a version nobody speaks */
	out_write("proto", "short", mbuf, 8);
}

/* ------------------------------------------------------------------------
 * Images.
 */

static char img[1 << 20];	/* the seed being put together */
static size_t img_len;

static struct faultd_region *region_new(struct faultd_ctx *ctx, size_t len,
					uint64_t flags)
{
	struct faultd_region_opts o = { .size = sizeof(o), .length = len,
					.flags = flags };
	struct faultd_region *r;
	int ret = faultd_region_create(ctx, &o, &r);

	if (ret < 0)
		die("faultd_region_create", -ret);
	return r;
}

/* A pattern without the image magic in it (image_fuzz.c splits there). */
static void pattern(char *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (char)(i * 7 % 251 + 1);
}

static const char *scratch_path(const char *name)
{
	static char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", scratch, name);
	return path;
}

/* The fuzz key's file, in the scratch directory. */
static const char *key_file(void)
{
	static char path[PATH_MAX];
	char k[32];
	int fd;

	if (path[0])
		return path;
	snprintf(path, sizeof(path), "%s/key", scratch);
	memset(k, FUZZ_KEY_BYTE, sizeof(k));
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, k, sizeof(k)) != sizeof(k) || close(fd))
		die(path, errno);
	return path;
}

/* Checkpoint @r as @name, incremental over @parent unless that is NULL,
 * authenticated with the fuzz key if @mac (GMACs; with FAULTD_CKPT_HMAC
 * in @flags, HMAC-SHA256s). */
static void ckpt_mac(struct faultd_region *r, const char *name,
		     const char *parent, bool mac, unsigned int flags)
{
	char pp[PATH_MAX];
	struct faultd_checkpoint_opts o = { .size = sizeof(o),
					    .flags = flags,
					    .key_file = mac ? key_file() : NULL };
	int ret;

	if (parent) {
		snprintf(pp, sizeof(pp), "%s", scratch_path(parent));
		o.flags |= FAULTD_CKPT_INCREMENTAL;
		o.parent = pp;
	}
	ret = faultd_checkpoint(r, scratch_path(name), &o);
	if (ret < 0)
		die(name, -ret);
}

static void ckpt(struct faultd_region *r, const char *name,
		 const char *parent)
{
	ckpt_mac(r, name, parent, false, 0);
}

/* Append image @name, squeezed: its header, then from IMG_BLOCK on. */
static void img_append(const char *name)
{
	static char file[1 << 20];
	int fd = open(scratch_path(name), O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, file, sizeof(file));

	if (n < (ssize_t)IMG_BLOCK || (size_t)n == sizeof(file))
		die(name, n < 0 ? errno : EFBIG);
	close(fd);
	for (size_t i = HEAD; i < IMG_BLOCK; i++)
		if (file[i])
			die(name, EBADMSG); /* not padding: do not drop it */
	memcpy(img + img_len, file, HEAD);
	memcpy(img + img_len + HEAD, file + IMG_BLOCK, (size_t)n - IMG_BLOCK);
	img_len += HEAD + (size_t)n - IMG_BLOCK;
}

static void img_flush(const char *seed)
{
	out_write("image", seed, img, img_len);
	img_len = 0;
}

/* The image in img[] with its header changed, under a valid header CRC
 * (without IMG_MAC, no MAC fields either). */
static void img_variant(const char *seed, uint64_t flags, const char *parent)
{
	static char copy[sizeof(img)];
	struct img_header h;

	memcpy(&h, img, sizeof(h));
	h.flags = flags;
	if (!(flags & IMG_MAC)) {
		h.mac_alg = 0;
		memset(h.header_mac, 0, sizeof(h.header_mac));
	}
	if (parent) {
		snprintf(h.parent, sizeof(h.parent), "%s", parent);
		memcpy(h.parent_id, h.id, sizeof(h.id)); /* itself */
	}
	h.header_crc = 0;
	h.header_crc = crc32c(0, &h, sizeof(h));
	memcpy(copy, img, img_len);
	memcpy(copy, &h, sizeof(h));
	out_write("image", seed, copy, img_len);
}

/* One block of four pages: untouched, zeros, data; and damaged. */
static void full_seeds(struct faultd_ctx *ctx)
{
	struct faultd_region *r = region_new(ctx, 4 * PAGE, 0);
	char *p = faultd_region_base(r);

	ckpt(r, "zeros", NULL);
	img_append("zeros");
	img_flush("zeros");
	memset(p, 0, 4 * PAGE);
	ckpt(r, "zero-extent", NULL);
	img_append("zero-extent");
	img_variant("self-parent", IMG_INCREMENTAL, "0");
	img_variant("newer-flag", 1ull << 2, NULL);
	img_flush("zero-extent");
	pattern(p, 4 * PAGE);
	ckpt(r, "data", NULL);
	img_append("data");
	out_write("image", "truncated", img, 100);
	img_flush("data");
	img_append("data");
	img[HEAD + 100] ^= 1;
	img_flush("bad-crc");
	ckpt_mac(r, "mac", NULL, true, 0);
	img_append("mac");
	img_variant("mac-stripped", 0, NULL);
	img_flush("mac");
	ckpt_mac(r, "mac-hmac", NULL, true, FAULTD_CKPT_HMAC);
	img_append("mac-hmac");
	img_flush("mac-hmac");
	faultd_region_destroy(r);
}

/* Two blocks and two pages: zeros, never touched, a short data block. */
static void mixed_seed(struct faultd_ctx *ctx)
{
	struct faultd_region *r = region_new(ctx, 2 * IMG_BLOCK + 2 * PAGE, 0);
	char *p = faultd_region_base(r);

	memset(p, 0, IMG_BLOCK);
	pattern(p + 2 * IMG_BLOCK, 2 * PAGE);
	ckpt(r, "mixed", NULL);
	img_append("mixed");
	img_flush("mixed");
	faultd_region_destroy(r);
}

/*
 * Chains named as image_fuzz.c lays them out: "2" full (block 0 data),
 * "1" and "0" incremental (block 1 zeroed), so block 0 comes from "2".
 */
static void chain_seeds(struct faultd_ctx *ctx)
{
	struct faultd_region *r = region_new(ctx, IMG_BLOCK + PAGE,
					     FAULTD_REGION_WP);
	char *p = faultd_region_base(r);

	pattern(p, PAGE);
	ckpt(r, "2", NULL);
	memset(p + IMG_BLOCK, 0, PAGE);
	ckpt(r, "1", "2");
	memset(p + IMG_BLOCK, 0, PAGE);
	ckpt(r, "0", "1");
	img_append("0");
	img_append("1");
	img_append("2");
	img_flush("chain3");
	ckpt(r, "1", NULL); /* a chain of two: "1" full */
	memset(p + IMG_BLOCK, 0, PAGE);
	ckpt(r, "0", "1");
	img_append("0");
	img_append("1");
	img_flush("chain2");
	ckpt_mac(r, "1", NULL, true, FAULTD_CKPT_HMAC); /* HMAC under GMAC */
	memset(p + IMG_BLOCK, 0, PAGE);
	ckpt_mac(r, "0", "1", true, 0);
	img_append("0");
	img_append("1");
	img_flush("chain2-mac");
	faultd_region_destroy(r);
}

static void image_seeds(void)
{
	struct faultd_ctx *ctx;
	int ret = faultd_ctx_create(NULL, &ctx);

	if (ret < 0)
		die("faultd_ctx_create", -ret);
	if (!mkdtemp(scratch))
		die(scratch, errno);
	full_seeds(ctx);
	mixed_seed(ctx);
	chain_seeds(ctx);
	faultd_ctx_destroy(ctx);
	snprintf(img, sizeof(img), "rm -rf %s", scratch);
	if (system(img))
		die(scratch, EIO);
}

/* ------------------------------------------------------------------------
 * Firecracker handshakes.
 */

#define FC_REGION(base, size, off, ps)                                        \
	"{\"base_host_virt_addr\":" #base ",\"size\":" #size ",\"offset\":"   \
	#off ",\"page_size\":" #ps ",\"page_size_kib\":" #ps "}"

static void fc_json_seeds(void)
{
	static const char *const seeds[][2] = {
		/* Firecracker 1.12 on: both page size fields. */
		{ "serde-4k", "[" FC_REGION(140241613881344, 134217728, 0,
					    4096) "]" },
		{ "serde-x86-gap", "[" FC_REGION(139637976727552, 3221225472,
						 0, 4096) ","
		  FC_REGION(139642271694848, 1073741824, 3221225472, 4096)
		  "]" },
		{ "serde-2m", "[" FC_REGION(140737486258176, 268435456, 0,
					    2097152) "]" },
		/* Firecracker's own test_send_uffd_handshake. */
		{ "serde-fc-test", "[" FC_REGION(0, 1048576, 0, 4096) ","
		  FC_REGION(1048576, 2097152, 0, 2097152) "]" },
		/* 1.7 to 1.11: page_size_kib only; 2.0: page_size only. */
		{ "fc-1.7", "[{\"base_host_virt_addr\":140241613881344,"
		  "\"size\":134217728,\"offset\":0,\"page_size_kib\":4096}]" },
		{ "fc-2.0", "[{\"base_host_virt_addr\":140241613881344,"
		  "\"size\":134217728,\"offset\":0,\"page_size\":4096}]" },
		{ "pretty", "[\n  {\n    \"offset\": 0,\n    \"size\": 4096,"
		  "\n    \"page_size\": 4096,\n    \"base_host_virt_addr\": "
		  "4096\n  }\n]\n" },
		{ "unknown-keys", "[{\"base_host_virt_addr\":4096,\"x\":{\"y\":"
		  "[1,-2.5e+3,true,false,null,\"\\u00e9\\ud83d\\ude00\"]},"
		  "\"size\":4096,\"offset\":0,\"page_size\":4096}]" },
		{ "escaped-key", "[{\"base_host_virt_addr\":4096,\"\\u0073ize"
		  "\":4096,\"offset\":0,\"page_size\":4096}]" },
		{ "empty", "[]" },
		{ "bad-twice", "[{\"base_host_virt_addr\":0,\"size\":4096,"
		  "\"size\":4096,\"offset\":0,\"page_size\":4096}]" },
		{ "bad-overflow", "[{\"base_host_virt_addr\":"
		  "18446744073709551616,\"size\":4096,\"offset\":0,"
		  "\"page_size\":4096}]" },
		{ "bad-float", "[{\"base_host_virt_addr\":0,\"size\":4096.0,"
		  "\"offset\":0,\"page_size\":4096}]" },
		{ "bad-truncated", "[{\"base_host_virt_addr\":0,\"size\":40" },
		{ "bad-utf8", "[{\"\xc0\xaf\":1}]" },
	};
	char dir[PATH_MAX];

	snprintf(dir, sizeof(dir), "%s/fc_json", out_dir);
	if (mkdir(dir, 0755) && errno != EEXIST)
		die(dir, errno);
	for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++)
		out_write("fc_json", seeds[i][0], seeds[i][1],
			  strlen(seeds[i][1]));
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: fuzz-seeds DIR\n");
		return 2;
	}
	out_dir = argv[1];
	proto_seeds();
	image_seeds();
	fc_json_seeds();
	return 0;
}
