// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * imgcheck.c - the checks of an image (image.c): of each data block, of
 * each table chunk and of the header. Three kinds, one per image:
 *
 *   CRC32C         catches accidents (a flipped bit, a block written at
 *                  the wrong place); anyone can recompute it.
 *   AES-256-GMAC   (IMG_MAC, IMG_ALG_GMAC_AES256; what is written) and
 *   HMAC-SHA256    (IMG_MAC, IMG_ALG_HMAC_SHA256; version 2's, still read
 *                  and written on request) catch tampering too: only a
 *                  holder of the key can make one that matches.
 *
 * Every check covers a label - what the bytes are (enum img_label) and
 * their index (the data block's number, the chunk's) - and the bytes: a
 * block or a chunk moved elsewhere in the image does not match. CRC32C
 * and HMAC hash the label before the bytes; GMAC takes it as its nonce.
 *
 * The MAC key of an image is not the user's key but one derived from it
 * for that image and its MAC: HMAC-SHA256(user key, label || id), the
 * label "libfaultd image key" for HMAC (as in version 2) and "libfaultd
 * image key/AES-256-GMAC" for GMAC, so that no key serves two
 * algorithms. HMAC-SHA256 as the derivation is a PRF keyed by the 32
 * bytes of the key file (HKDF's expand step with one block). The daemon
 * is given only the derived key: what it learns serves for one image,
 * and a block of one image does not verify in another.
 *
 * GMAC is AES-256-GCM with the bytes as additional data and nothing to
 * encrypt; its 16-byte tag is the check. Its nonce is the label: the
 * label's 4 bytes, then the index's 8 (96 bits, host byte order as every
 * field of the format). GMAC must never MAC two messages under one (key,
 * nonce): two tags of one nonce give away the hash key, and with it a
 * forgery of any message under any nonce whose tag one has seen. Here:
 *   - one image key per image: its id is 16 random bytes drawn for each
 *     image written (a full image written again under its name, and each
 *     incremental image, get ids of their own); two images share a key
 *     only if their ids collide, which takes some 2^64 images;
 *   - within an image, the writer checks each (label, index) once: the
 *     header once, chunk c of each table once, data block b once;
 *   - a reader only verifies: it computes the tag of what it read and
 *     compares it (CRYPTO_memcmp); a tag it computes is never shown.
 * Reusing an id on purpose takes writing an image with it, that is its
 * MACs, so the key: whoever can do that can MAC anything already.
 * GMAC was picked over HMAC-SHA256 by speed (this machine, one core,
 * 64 KiB blocks: 7.2 GB/s against 1.6 GB/s; faultd-bench run mac), and
 * needs AES and carry-less multiply instructions to be fast and to run in
 * constant time: where they are missing, HMAC-SHA256 is the choice
 * (FAULTD_CKPT_HMAC).
 *
 * Context: img_check() and img_check_verify() may run concurrently on one
 * checker from any number of threads; a checker is freed when none runs.
 */
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define KEY_LEN 32
#define GMAC_TAG 16
#define GMAC_NONCE 12

/* The label bound into a check. */
struct check_label {
	uint32_t label;		/* enum img_label */
	uint32_t zero;
	uint64_t index;
};

struct img_check_ops {
	size_t size;		/* bytes of a check */
	const char *key_label;	/* MACs: the image key's derivation */
	/* MACs: get ready to check under c->key, the image key. */
	int (*setup)(struct img_checker *c);
	int (*compute)(struct img_checker *c, const struct check_label *l,
		       const void *p, size_t len, uint8_t *out);
};

struct img_checker {
	const struct img_check_ops *ops;
	struct img_key key;	/* MACs: the image key */
	pthread_mutex_t lock;	/* protects keyed's copying and idle[]; a
				   leaf, never held across a check */
	EVP_MAC *mac;		/* HMAC: the algorithm, and */
	EVP_MAC_CTX *keyed;	/* a context keyed with the image key, which
				   is never used itself: each check runs on
				   its own copy */
	EVP_CIPHER *cipher;	/* GMAC: AES-256-GCM, and */
	EVP_CIPHER_CTX **idle;	/* contexts keyed with the image key that
				   no check uses: taken by one, given
				   back */
	unsigned int nr_idle, cap_idle;
};

/* ------------------------------------------------------------------------
 * The three kinds.
 */

static int crc_compute(struct img_checker *c, const struct check_label *l,
		       const void *p, size_t len, uint8_t *out)
{
	uint32_t crc = crc32c(0, l, sizeof(*l));

	(void)c;
	crc = crc32c(crc, p, len);
	memcpy(out, &crc, sizeof(crc));
	return 0;
}

static int hmac_setup(struct img_checker *c)
{
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
						 (char *)"SHA256", 0),
		OSSL_PARAM_construct_end(),
	};

	c->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	c->keyed = c->mac ? EVP_MAC_CTX_new(c->mac) : NULL;
	if (!c->keyed)
		return -ENOMEM;
	return EVP_MAC_init(c->keyed, c->key.key, KEY_LEN, params) ? 0 : -EIO;
}

static int hmac_compute(struct img_checker *c, const struct check_label *l,
			const void *p, size_t len, uint8_t *out)
{
	EVP_MAC_CTX *m;
	size_t n = 0;
	int ok;

	pthread_mutex_lock(&c->lock);
	m = EVP_MAC_CTX_dup(c->keyed);
	pthread_mutex_unlock(&c->lock);
	if (!m)
		return -ENOMEM;
	ok = EVP_MAC_update(m, (const void *)l, sizeof(*l)) &&
	     EVP_MAC_update(m, p, len) &&
	     EVP_MAC_final(m, out, &n, KEY_LEN) && n == KEY_LEN;
	EVP_MAC_CTX_free(m);
	return ok ? 0 : -EIO;
}

/*
 * A GMAC context keyed with the image key: an idle one, else a new one
 * (keying computes the AES key schedule and GHASH's tables, which a
 * 64 KiB check should not pay again). NULL: no memory, or OpenSSL failed.
 */
static EVP_CIPHER_CTX *gmac_get(struct img_checker *c)
{
	EVP_CIPHER_CTX *x = NULL;

	pthread_mutex_lock(&c->lock);
	if (c->nr_idle)
		x = c->idle[--c->nr_idle];
	pthread_mutex_unlock(&c->lock);
	if (x)
		return x;
	x = EVP_CIPHER_CTX_new();
	if (x && !EVP_EncryptInit_ex2(x, c->cipher, c->key.key, NULL, NULL)) {
		EVP_CIPHER_CTX_free(x);
		x = NULL;
	}
	return x;
}

/* Give @x back for the next check (freed if there is no room): there are
 * as many as checks ever ran at once. */
static void gmac_put(struct img_checker *c, EVP_CIPHER_CTX *x)
{
	pthread_mutex_lock(&c->lock);
	if (c->nr_idle == c->cap_idle) {
		unsigned int cap = c->cap_idle ? 2 * c->cap_idle : 4;
		void *p = fd_realloc(c->idle, cap * sizeof(*c->idle));

		if (p) {
			c->idle = p;
			c->cap_idle = cap;
		}
	}
	if (c->nr_idle < c->cap_idle) {
		c->idle[c->nr_idle++] = x;
		x = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	EVP_CIPHER_CTX_free(x);
}

/* One context made now: a checker that cannot check fails here. */
static int gmac_setup(struct img_checker *c)
{
	EVP_CIPHER_CTX *x;

	c->cipher = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
	if (!c->cipher)
		return -EIO;
	x = gmac_get(c);
	if (!x)
		return -ENOMEM;
	gmac_put(c, x);
	return 0;
}

static int gmac_compute(struct img_checker *c, const struct check_label *l,
			const void *p, size_t len, uint8_t *out)
{
	uint8_t nonce[GMAC_NONCE], none[16];
	EVP_CIPHER_CTX *x = gmac_get(c);
	int n, ok;

	if (!x)
		return -ENOMEM;
	memcpy(nonce, &l->label, sizeof(l->label));
	memcpy(nonce + sizeof(l->label), &l->index, sizeof(l->index));
	/* A new nonce on a keyed context starts a new message. */
	ok = EVP_EncryptInit_ex2(x, NULL, NULL, nonce, NULL) &&
	     EVP_EncryptUpdate(x, NULL, &n, p, (int)len) &&
	     EVP_EncryptFinal_ex(x, none, &n) &&
	     EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_GET_TAG, GMAC_TAG, out) > 0;
	if (ok)
		gmac_put(c, x);
	else
		EVP_CIPHER_CTX_free(x); /* in a state not to be reused */
	return ok ? 0 : -EIO;
}

static const struct img_check_ops crc_ops = {
	.size = sizeof(uint32_t),
	.compute = crc_compute,
};

static const struct img_check_ops hmac_ops = {
	.size = KEY_LEN,
	.key_label = "libfaultd image key",
	.setup = hmac_setup,
	.compute = hmac_compute,
};

static const struct img_check_ops gmac_ops = {
	.size = GMAC_TAG,
	.key_label = "libfaultd image key/AES-256-GMAC",
	.setup = gmac_setup,
	.compute = gmac_compute,
};

/* The kind of an image's checks; NULL: an algorithm this build lacks. */
static const struct img_check_ops *ops_of(const struct img_header *h)
{
	if (!(h->flags & IMG_MAC))
		return h->mac_alg ? NULL : &crc_ops;
	switch (h->mac_alg) {
	case IMG_ALG_HMAC_SHA256:
		return &hmac_ops;
	case IMG_ALG_GMAC_AES256:
		return &gmac_ops;
	}
	return NULL;
}

/* The bytes of one check of the image whose header is @h; 0 if this
 * build does not know its kind. */
size_t img_check_size_of(const struct img_header *h)
{
	const struct img_check_ops *ops = ops_of(h);

	return ops ? ops->size : 0;
}

/* ------------------------------------------------------------------------
 * Keys.
 */

/*
 * img_key_load() - the user key in the file at @path: a regular file of
 * exactly 32 bytes that neither its group nor others may read or write.
 * Returns 0, -EINVAL (not such a file), -EPERM (group or others have
 * access), or the error of opening or reading it.
 */
int img_key_load(const char *path, struct img_key *key)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct stat st;
	int ret = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		ret = -errno;
	else if (!S_ISREG(st.st_mode) || st.st_size != KEY_LEN)
		ret = -EINVAL;
	else if (st.st_mode & 077)
		ret = -EPERM;
	else if (pread(fd, key->key, KEY_LEN, 0) != KEY_LEN)
		ret = -EIO;
	close(fd);
	key->image_key = false;
	return ret;
}

/* The key of the image whose id is @id for the checks of @ops, from the
 * user key @user. */
static int key_derive(const struct img_check_ops *ops, const uint8_t *user,
		      const uint8_t *id, uint8_t *out)
{
	size_t l = strlen(ops->key_label);
	uint8_t msg[64];
	unsigned int n = 0;

	memcpy(msg, ops->key_label, l);
	memcpy(msg + l, id, 16);
	if (!HMAC(EVP_sha256(), user, KEY_LEN, msg, l + 16, out, &n) ||
	    n != KEY_LEN)
		return -EIO;
	return 0;
}

/* A MAC checker's image key (derived from a user's @key, or @key itself)
 * and its setup. */
static int mac_setup(struct img_checker *c, const struct img_header *h,
		     const struct img_key *key)
{
	int ret = 0;

	c->key = *key;
	if (!key->image_key)
		ret = key_derive(c->ops, key->key, h->id, c->key.key);
	c->key.image_key = true;
	return ret ? ret : c->ops->setup(c);
}

/*
 * img_checker_new() - the checker of the image whose header is @h, with
 * @key (NULL: none). Returns 0, -EPROTONOSUPPORT (a MAC this build does
 * not know), -ENOKEY (the image has MACs and no key was given),
 * -EKEYREJECTED (a key was given and the image has no MACs: it would go
 * unauthenticated), -ENOMEM or -EIO (OpenSSL failed).
 */
int img_checker_new(const struct img_header *h, const struct img_key *key,
		    struct img_checker **cp)
{
	const struct img_check_ops *ops = ops_of(h);
	bool mac = h->flags & IMG_MAC;
	struct img_checker *c;
	int ret = 0;

	if (!ops)
		return -EPROTONOSUPPORT;
	if (mac != !!key)
		return mac ? -ENOKEY : -EKEYREJECTED;
	c = fd_calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	c->ops = ops;
	if (mac)
		ret = mac_setup(c, h, key);
	if (ret) {
		img_checker_free(c);
		return ret;
	}
	*cp = c;
	return 0;
}

void img_checker_free(struct img_checker *c)
{
	if (!c)
		return;
	EVP_MAC_CTX_free(c->keyed);
	EVP_MAC_free(c->mac);
	while (c->nr_idle)
		EVP_CIPHER_CTX_free(c->idle[--c->nr_idle]);
	free(c->idle);
	EVP_CIPHER_free(c->cipher);
	OPENSSL_cleanse(&c->key, sizeof(c->key));
	pthread_mutex_destroy(&c->lock);
	free(c);
}

size_t img_check_size(const struct img_checker *c)
{
	return c->ops->size;
}

/* The image key of a MAC checker, for the daemon. */
void img_checker_key(const struct img_checker *c, struct img_key *out)
{
	*out = c->key;
}

/* ------------------------------------------------------------------------
 * Checks.
 */

/*
 * img_check() - the check of @len bytes (at most IMG_BLOCK) at @p, which
 * are @label number @index, into @out (img_check_size() bytes). Returns
 * 0, -ENOMEM or -EIO.
 */
int img_check(struct img_checker *c, enum img_label label, uint64_t index,
	      const void *p, size_t len, uint8_t *out)
{
	struct check_label l = { .label = label, .index = index };

	return c->ops->compute(c, &l, p, len, out);
}

/* Do @p's bytes match the check @want? 0, -EBADMSG, or img_check()'s. */
int img_check_verify(struct img_checker *c, enum img_label label,
		     uint64_t index, const void *p, size_t len,
		     const uint8_t *want)
{
	uint8_t got[IMG_CHECK_MAX];
	int ret = img_check(c, label, index, p, len, got);

	if (ret)
		return ret;
	return CRYPTO_memcmp(got, want, c->ops->size) ? -EBADMSG : 0;
}
