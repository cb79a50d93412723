/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * img.h - checkpoint images (faultd-image(5)): the format, reading
 * (image.c) and the checks of its blocks, table chunks and header
 * (imgcheck.c). Shared by the library's restores and the daemon's image
 * sources.
 */
#ifndef FAULTD_IMG_H
#define FAULTD_IMG_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ------------------------------------------------------------------------
 * image.c - checkpoint images: the format (shared with the daemon) and
 * reading. Fields are in the host's byte order: an image is read on the
 * kind of machine that wrote it. faultd-image(5) is the reference.
 */

#define IMG_MAGIC "FAULTDIM"
#define IMG_VERSION 3		/* written; version 2 is read too */
#define IMG_VERSION_MIN 2
#define IMG_BLOCK (64ul << 10) /* storage, checksum and read unit */
#define IMG_CHUNK 4096ul	/* table unit: entries, then their check */
#define IMG_TRAILER 32ul	/* the check at the end of a table chunk */
#define IMG_INCREMENTAL (1ull << 0)
#define IMG_MAC (1ull << 1)	/* checks are MACs (mac_alg), not CRC32Cs */
#define IMG_FLAGS (IMG_INCREMENTAL | IMG_MAC)

enum img_mac_alg {		/* with IMG_MAC: which MAC (0 without) */
	IMG_ALG_HMAC_SHA256 = 0, /* the only one of version 2 */
	IMG_ALG_GMAC_AES256 = 1, /* version 3 on; what is written */
};

struct img_header {
	char magic[8];		/* IMG_MAGIC */
	uint32_t version;	/* IMG_VERSION */
	uint32_t header_size;	/* sizeof(struct img_header) */
	uint32_t page_size;	/* 4096 */
	uint32_t block_size;	/* IMG_BLOCK */
	uint64_t region_len;	/* bytes of region the image covers */
	uint64_t flags;		/* IMG_INCREMENTAL, IMG_MAC */
	uint64_t nr_extents;
	uint64_t extents_off;	/* file offset of the extent table */
	uint64_t data_off;	/* file offset of data block 0 (IMG_BLOCK) */
	uint64_t nr_blocks;	/* data blocks */
	uint64_t checks_off;	/* file offset of the check table */
	uint64_t base_addr;	/* where the region was (information) */
	uint8_t id[16];		/* random: this image */
	uint8_t parent_id[16];	/* incremental: the parent's id */
	char parent[256];	/* incremental: the parent's file name, in the
				   same directory; NUL-terminated */
	uint32_t chunk_size;	/* IMG_CHUNK */
	uint32_t mac_alg;	/* enum img_mac_alg (version 2: reserved, 0) */
	uint8_t header_mac[32];	/* IMG_MAC: of this header, it and
				   header_crc 0; a shorter MAC's rest 0 */
	uint32_t header_crc;	/* CRC32C of this header, this field 0 */
	uint32_t reserved2;
};

enum img_kind {
	IMG_DATA = 1,	/* blocks stored at data_block.. */
	IMG_ZERO = 2,	/* blocks of zeros, not stored */
};

struct img_extent {
	uint64_t offset;	/* region offset, a multiple of IMG_BLOCK */
	uint64_t blocks;
	uint64_t data_block;	/* IMG_DATA: its first data block */
	uint32_t kind;		/* enum img_kind */
	uint32_t reserved;
};

/* Extents in a table chunk. */
#define IMG_EXT_PER_CHUNK ((IMG_CHUNK - IMG_TRAILER) / sizeof(struct img_extent))

struct img_checker;

struct img_slot {		/* a table chunk in the cache */
	uint64_t tag;		/* IMG_TAG_*: which table, and the chunk */
	uint64_t used;		/* the cache's tick at the last use */
	char *buf;		/* IMG_CHUNK bytes, checked */
};

#define IMG_CACHE_SLOTS 32	/* 128 KiB of table chunks per image */

/*
 * Where the bytes of an image that is no local file come from: a
 * daemon's source (an NBD export of the image file). read() copies any
 * [off, off + len) of the file, inside @len, and returns @len or -errno
 * (-EIO: not to be had; the image's reads are all inside the length its
 * open checked); IMG_READ_URGENT when a fault waits for it. willneed()
 * is a hint (NULL: none). Called from any thread, several at once.
 */
struct img_reader {
	ssize_t (*read)(void *arg, uint64_t off, void *buf, size_t len,
			unsigned int flags);
	void (*willneed)(void *arg, uint64_t off, uint64_t len);
	void *arg;
	uint64_t len;		/* of the image file */
};

#define IMG_READ_URGENT (1u << 0)

struct image {
	int fd;			/* -1: read through rd */
	struct img_reader rd;
	struct img_header h;
	struct img_checker *chk;	/* computes and compares the checks */
	uint64_t ext_chunks, check_chunks;
	size_t check_size;		/* bytes of one check: 4, 16 or 32 */
	/* The table chunks in use: lock protects the slots and the tick;
	 * held only to look a chunk up or put one in, never across I/O. */
	pthread_mutex_t lock;
	struct img_slot slot[IMG_CACHE_SLOTS];
	unsigned int nr_slots;
	unsigned int hint;		/* the slot of the last extent found */
	uint64_t tick;
	struct image *parent;		/* incremental images */
};

/* A key that authenticates images: the user's, or one image's own. */
struct img_key {
	uint8_t key[32];
	bool image_key;		/* key is the derived key of one image
				   (what the daemon is given), not a user's */
};

int image_open(int fd, const char *path, const struct img_key *key,
	       struct image **imgp, const char **why);
int image_open_reader(const struct img_reader *rd, const struct img_key *key,
		      struct image **imgp, const char **why);
int image_header_check(const struct img_header *h, uint64_t file_len,
		       const char **why);
int image_open_header(const struct img_header *h, uint64_t file_len,
		      const struct img_key *key, struct image **imgp,
		      const char **why);
int image_file_open(const char *path);
void image_close(struct image *img);
ssize_t image_read(struct image *img, uint64_t off, void *buf, size_t len);
ssize_t image_read_flags(struct image *img, uint64_t off, void *buf,
			 size_t len, unsigned int flags);
void image_willneed(struct image *img, uint64_t off, uint64_t len);
int image_extent(struct image *img, uint64_t i, struct img_extent *e);
int image_extent_at(struct image *img, uint64_t off, uint64_t *start,
		    uint64_t *len);
int image_key_of(const struct image *img, struct img_key *out);

/* ------------------------------------------------------------------------
 * imgcheck.c - the checks of an image's blocks, table chunks and header:
 * CRC32C, or a MAC (AES-256-GMAC, or HMAC-SHA256; OpenSSL) under a key
 * derived for the image.
 */

enum img_label {	/* what a check covers, bound into it with its index */
	IMG_L_HEADER = 1,
	IMG_L_EXTENTS = 2,
	IMG_L_CHECKS = 3,
	IMG_L_DATA = 4,
};

#define IMG_CHECK_MAX 32

int img_key_load(const char *path, struct img_key *key);
size_t img_check_size_of(const struct img_header *h);
int img_checker_new(const struct img_header *h, const struct img_key *key,
		    struct img_checker **cp);
void img_checker_free(struct img_checker *c);
size_t img_check_size(const struct img_checker *c);
int img_check(struct img_checker *c, enum img_label label, uint64_t index,
	      const void *p, size_t len, uint8_t *out);
int img_check_verify(struct img_checker *c, enum img_label label,
		     uint64_t index, const void *p, size_t len,
		     const uint8_t *want);
void img_checker_key(const struct img_checker *c, struct img_key *out);

#endif /* FAULTD_IMG_H */
