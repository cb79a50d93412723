// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * imgcheck.c - the checks of an image (image.c): of each data block, of
 * each table chunk and of the header. Two kinds, one per image:
 *
 *   CRC32C         catches accidents (a flipped bit, a block written at
 *                  the wrong place); anyone can recompute it.
 *   HMAC-SHA256    (IMG_MAC) catches tampering too: only a holder of the
 *                  key can make one that matches.
 *
 * Every check covers a label - what the bytes are (enum img_label) and
 * their index (the data block's number, the chunk's) - and then the
 * bytes: a block or a chunk moved elsewhere in the image does not match.
 *
 * The MAC key of an image is not the user's key but one derived from it
 * for that image: HMAC-SHA256(user key, "libfaultd image key" || id).
 * The daemon is given only that: what it learns serves for one image, and
 * a block of one image does not verify in another. HMAC-SHA256 was picked
 * over libsodium's keyed BLAKE2b by speed on the machines this runs on
 * (with SHA-NI: 1.7 GB/s against 1.0 GB/s on one core, 64 KiB blocks);
 * OpenSSL's libcrypto computes it.
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
#define KEY_LABEL "libfaultd image key"

struct img_check_ops {
	size_t size; /* bytes of a check */
	int (*compute)(struct img_checker *c, const void *label, const void *p,
		       size_t len, uint8_t *out);
};

struct img_checker {
	const struct img_check_ops *ops;
	EVP_MAC *mac;		/* HMAC: the algorithm, and */
	EVP_MAC_CTX *keyed;	/* a context keyed with the image key */
	pthread_mutex_t lock;	/* taken to copy keyed, which is never used
				   itself: each check runs on its own copy */
	struct img_key key;	/* HMAC: the image key */
};

/* The label bound into a check. */
struct check_label {
	uint32_t label;		/* enum img_label */
	uint32_t zero;
	uint64_t index;
};

/* ------------------------------------------------------------------------
 * The two kinds.
 */

static int crc_compute(struct img_checker *c, const void *label,
		       const void *p, size_t len, uint8_t *out)
{
	uint32_t crc = crc32c(0, label, sizeof(struct check_label));

	(void)c;
	crc = crc32c(crc, p, len);
	memcpy(out, &crc, sizeof(crc));
	return 0;
}

static int hmac_compute(struct img_checker *c, const void *label,
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
	ok = EVP_MAC_update(m, label, sizeof(struct check_label)) &&
	     EVP_MAC_update(m, p, len) &&
	     EVP_MAC_final(m, out, &n, KEY_LEN) && n == KEY_LEN;
	EVP_MAC_CTX_free(m);
	return ok ? 0 : -EIO;
}

static const struct img_check_ops crc_ops = {
	.size = sizeof(uint32_t),
	.compute = crc_compute,
};

static const struct img_check_ops hmac_ops = {
	.size = KEY_LEN,
	.compute = hmac_compute,
};

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

/* The key of the image whose id is @id, from the user key @user. */
static int key_derive(const uint8_t *user, const uint8_t *id, uint8_t *out)
{
	uint8_t msg[sizeof(KEY_LABEL) - 1 + 16];
	unsigned int n = 0;

	memcpy(msg, KEY_LABEL, sizeof(KEY_LABEL) - 1);
	memcpy(msg + sizeof(KEY_LABEL) - 1, id, 16);
	if (!HMAC(EVP_sha256(), user, KEY_LEN, msg, sizeof(msg), out, &n) ||
	    n != KEY_LEN)
		return -EIO;
	return 0;
}

static int hmac_setup(struct img_checker *c, const struct img_header *h,
		      const struct img_key *key)
{
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
						 (char *)"SHA256", 0),
		OSSL_PARAM_construct_end(),
	};
	int ret = 0;

	c->key = *key;
	if (!key->image_key)
		ret = key_derive(key->key, h->id, c->key.key);
	c->key.image_key = true;
	if (ret)
		return ret;
	c->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	c->keyed = c->mac ? EVP_MAC_CTX_new(c->mac) : NULL;
	if (!c->keyed)
		return -ENOMEM;
	return EVP_MAC_init(c->keyed, c->key.key, KEY_LEN, params) ? 0 : -EIO;
}

/*
 * img_checker_new() - the checker of the image whose header is @h, with
 * @key (NULL: none). Returns 0, -ENOKEY (the image has MACs and no key was
 * given), -EKEYREJECTED (a key was given and the image has no MACs: it
 * would go unauthenticated), -ENOMEM or -EIO.
 */
int img_checker_new(const struct img_header *h, const struct img_key *key,
		    struct img_checker **cp)
{
	bool mac = h->flags & IMG_MAC;
	struct img_checker *c;
	int ret = 0;

	if (mac != !!key)
		return mac ? -ENOKEY : -EKEYREJECTED;
	c = fd_calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	c->ops = mac ? &hmac_ops : &crc_ops;
	if (mac)
		ret = hmac_setup(c, h, key);
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
 * img_check() - the check of @len bytes at @p, which are @label number
 * @index, into @out (img_check_size() bytes). Returns 0, -ENOMEM or -EIO.
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
