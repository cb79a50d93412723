// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * image.c - checkpoint images: the format, and reading a region's content
 * from one (faultd_checkpoint() in checkpoint.c writes them).
 *
 * An image stores a region in blocks of IMG_BLOCK (64 KiB, the default
 * fault-around window): the unit of storage, of checks and of reads. A
 * file is
 *
 *   [header, 4 KiB][padding to IMG_BLOCK][data blocks][extent table][checks]
 *
 * The extent table is sorted by region offset and says, for runs of
 * blocks, where their data is (IMG_DATA) or that they are zeros (IMG_ZERO,
 * no space taken). A block in no extent was never present: zeros in a full
 * image; in an incremental image, unchanged since the parent, whose file
 * is named in the header and found next to this one. Every data block has
 * a check (a CRC32C, or with IMG_MAC a MAC: imgcheck.c) in the
 * check table. Both tables are cut in chunks of IMG_CHUNK (4 KiB) that end
 * with their own check, so that a reader takes them a chunk at a time.
 *
 * Memory does not grow with the tables: every size in the header is
 * checked against the others and against the file's length before
 * anything is allocated; opening streams the tables once, a few chunks at
 * a time, through every check (anything inconsistent: -EBADMSG); and the
 * chunks in use then live in a cache of IMG_CACHE_SLOTS chunks (128 KiB)
 * per image, each checked again whenever it is read back - a table
 * changed on disk after the open is caught there, and the blocks that
 * needed it are errors. Each read of a data block checks it: a block that
 * does not match is an error (its pages are poisoned by the fault path),
 * never data. Reads go through io_uring (ring_rw(), ring.c); an image
 * that is no local file (a daemon's NBD export of one) is read through
 * its reader (struct img_reader) instead, with the same checks.
 *
 * Locks: img->lock (a mutex) protects the cache; it is a leaf, held to
 * find a chunk in the cache or put one in, never across a read or a check.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define IMG_HEADER_LEN 4096
#define SCAN_CHUNKS 16 /* chunks read at once when the tables are scanned */

/* Cache tags: which table, then the chunk's index. 0 is an empty slot. */
#define TAG_EXT (1ull << 62)
#define TAG_CHECKS (2ull << 62)
#define TAG_INDEX(t) ((t) & ~(3ull << 62))

/*
 * A region is at most IMG_MAX_REGION (no address space is larger): its
 * pages and blocks, and the offsets of its tables, are counted without
 * wrapping - here and by every user of the image.
 */
#define IMG_MAX_REGION (1ull << 57)

/* ------------------------------------------------------------------------
 * The header.
 */

static uint32_t header_crc(const struct img_header *h)
{
	struct img_header c = *h;

	c.header_crc = 0;
	return crc32c(0, &c, sizeof(c));
}

/* Read exactly @len bytes at @off; -EBADMSG if the file is shorter. */
static int read_full(int fd, void *buf, size_t len, uint64_t off)
{
	ssize_t n = ring_rw(fd, false, off, buf, len);

	if (n < 0)
		return (int)n;
	return (size_t)n == len ? 0 : -EBADMSG;
}

/*
 * Read exactly @len bytes of @img's file at @off, through its reader
 * (@flags: IMG_READ_URGENT) or its descriptor; -EBADMSG if the file is
 * shorter.
 */
static int img_pread(struct image *img, void *buf, size_t len, uint64_t off,
		     unsigned int flags)
{
	ssize_t n;

	if (img->fd >= 0)
		return read_full(img->fd, buf, len, off);
	if (off > img->rd.len || len > img->rd.len - off)
		return -EBADMSG;
	n = img->rd.read(img->rd.arg, off, buf, len, flags);
	if (n < 0)
		return (int)n;
	return (size_t)n == len ? 0 : -EBADMSG;
}

/* The length of the image file @fd, of which @st is the fstat(). */
static int file_length(int fd, const struct stat *st, uint64_t *len)
{
	if (S_ISREG(st->st_mode)) {
		*len = (uint64_t)st->st_size;
		return 0;
	}
	if (S_ISBLK(st->st_mode))
		return ioctl(fd, BLKGETSIZE64, len) < 0 ? -errno : 0;
	return -EINVAL; /* a pipe or socket would block the reader */
}

static uint64_t div_up(uint64_t a, uint64_t b)
{
	return a / b + !!(a % b);
}

/* The entries of a check-table chunk, for checks of @size bytes. */
static uint64_t checks_per_chunk(size_t size)
{
	return (IMG_CHUNK - IMG_TRAILER) / size;
}

/*
 * The sizes in @h, against each other and the file's @file_len. Each
 * bound is checked before the next product is formed, so that none wraps:
 * region_len <= 2^57 bounds the blocks by 2^41, and so the tables.
 */
static int header_sizes_check(const struct img_header *h, uint64_t file_len,
			      const char **why)
{
	uint64_t blocks = div_up(h->region_len, IMG_BLOCK), end;
	size_t cs = img_check_size_of(h); /* known: header_check() */

	*why = "the header's sizes do not agree with each other";
	if (!h->region_len || h->region_len > IMG_MAX_REGION ||
	    h->nr_blocks > blocks || h->nr_extents > blocks ||
	    h->data_off != IMG_BLOCK ||
	    h->extents_off != h->data_off + h->nr_blocks * IMG_BLOCK ||
	    h->checks_off != h->extents_off +
				     div_up(h->nr_extents, IMG_EXT_PER_CHUNK) *
					     IMG_CHUNK)
		return -EBADMSG;
	end = h->checks_off +
	      div_up(h->nr_blocks, checks_per_chunk(cs)) * IMG_CHUNK;
	*why = "the image is truncated: its tables end past the end of the file";
	return file_len < end ? -EBADMSG : 0;
}

static bool all_zero(const char *p, size_t len)
{
	return !len || (!p[0] && !memcmp(p, p + 1, len - 1));
}

/*
 * The checks' kind: mac_alg is 0 without IMG_MAC and in version 2 (which
 * has HMAC-SHA256 only), and one this build knows; header_mac holds the
 * MAC and zeros after it (all zeros without IMG_MAC).
 */
static int header_alg_check(const struct img_header *h, const char **why)
{
	size_t used;

	*why = "the header's MAC fields are wrong";
	if ((h->version == 2 || !(h->flags & IMG_MAC)) && h->mac_alg)
		return -EBADMSG;
	*why = "an image with a MAC this build does not know";
	if (!img_check_size_of(h))
		return -EPROTONOSUPPORT;
	used = h->flags & IMG_MAC ? img_check_size_of(h) : 0;
	*why = "the header's MAC fields are wrong";
	return all_zero((const char *)h->header_mac + used,
			sizeof(h->header_mac) - used)
		       ? 0
		       : -EBADMSG;
}

/*
 * image_header_check() - is @h the header of an image of @file_len bytes
 * that this build reads? 0, or -EINVAL (not an image), -EPROTONOSUPPORT
 * (another version, a newer flag or MAC), -EBADMSG (its checksum, its
 * fixed fields or its sizes are wrong, or the file is too short), with
 * *why. Its MAC is not checked: that needs the key (image_open()).
 */
int image_header_check(const struct img_header *h, uint64_t file_len,
		       const char **why)
{
	int ret;

	*why = "not a checkpoint image";
	if (memcmp(h->magic, IMG_MAGIC, sizeof(h->magic)))
		return -EINVAL;
	*why = "an image of another format version (this build reads versions "
	       "2 and 3: an image of version 1, from an older libfaultd, must "
	       "be taken again)";
	if (h->version < IMG_VERSION_MIN || h->version > IMG_VERSION)
		return -EPROTONOSUPPORT;
	*why = "the header's checksum does not match";
	if (h->header_crc != header_crc(h))
		return -EBADMSG;
	*why = "an image with a flag this build does not know";
	if (h->flags & ~(uint64_t)IMG_FLAGS)
		return -EPROTONOSUPPORT;
	ret = header_alg_check(h, why);
	if (ret)
		return ret;
	*why = "the header's fixed fields are wrong";
	if (h->header_size != sizeof(*h) || h->block_size != IMG_BLOCK ||
	    h->page_size != 4096 || h->chunk_size != IMG_CHUNK ||
	    memchr(h->parent, 0, sizeof(h->parent)) == NULL)
		return -EBADMSG;
	return header_sizes_check(h, file_len, why);
}

/* With IMG_MAC: does the header's MAC match the key? */
static int header_mac_check(struct image *img, const char **why)
{
	struct img_header c = img->h;
	int ret;

	if (!(img->h.flags & IMG_MAC))
		return 0;
	c.header_crc = 0;
	memset(c.header_mac, 0, sizeof(c.header_mac));
	ret = img_check_verify(img->chk, IMG_L_HEADER, 0, &c, sizeof(c),
			       img->h.header_mac);
	*why = "the image was not signed with this key (its header's MAC "
	       "does not match)";
	return ret == -EBADMSG ? -EKEYREJECTED : ret;
}

/* ------------------------------------------------------------------------
 * Table chunks: checked on every read, kept in a small cache.
 */

/* The entries of extent chunk @c. */
static uint64_t ext_in_chunk(const struct image *img, uint64_t c)
{
	uint64_t first = c * IMG_EXT_PER_CHUNK;

	return img->h.nr_extents - first < IMG_EXT_PER_CHUNK
		       ? img->h.nr_extents - first
		       : IMG_EXT_PER_CHUNK;
}

static uint64_t checks_in_chunk(const struct image *img, uint64_t c)
{
	uint64_t per = checks_per_chunk(img->check_size), first = c * per;

	return img->h.nr_blocks - first < per ? img->h.nr_blocks - first : per;
}

/*
 * Extents of one chunk: sorted, apart, inside the region (after @end, the
 * end of the previous chunk's last, when known), data inside the data
 * area; the unused entries of the last chunk are zeros.
 */
static int ext_chunk_check(const struct image *img, uint64_t c,
			   const struct img_extent *ext, uint64_t end)
{
	uint64_t blocks = div_up(img->h.region_len, IMG_BLOCK);
	uint64_t n = ext_in_chunk(img, c);

	for (uint64_t i = 0; i < n; i++) {
		const struct img_extent *e = &ext[i];
		uint64_t first = e->offset / IMG_BLOCK;

		if (e->offset % IMG_BLOCK || first < end || !e->blocks ||
		    first >= blocks || e->blocks > blocks - first ||
		    (e->kind != IMG_DATA && e->kind != IMG_ZERO) ||
		    (e->kind == IMG_DATA &&
		     (e->data_block > img->h.nr_blocks ||
		      e->blocks > img->h.nr_blocks - e->data_block)))
			return -EBADMSG;
		end = first + e->blocks;
	}
	return all_zero((const char *)&ext[n],
			(IMG_EXT_PER_CHUNK - n) * sizeof(*ext))
		       ? 0
		       : -EBADMSG;
}

/* Does chunk @buf (of the table @tag says) match its trailer? Its unused
 * entries, and the trailer after the check, are zeros. */
static int chunk_verify(struct image *img, uint64_t tag, const char *buf)
{
	uint64_t c = TAG_INDEX(tag);
	bool ext = tag & TAG_EXT;
	uint64_t used = ext ? ext_in_chunk(img, c) * sizeof(struct img_extent)
			    : checks_in_chunk(img, c) * img->check_size;
	const char *trailer = buf + IMG_CHUNK - IMG_TRAILER;
	int ret = img_check_verify(img->chk, ext ? IMG_L_EXTENTS : IMG_L_CHECKS,
				   c, buf, IMG_CHUNK - IMG_TRAILER,
				   (const uint8_t *)trailer);

	if (!ret && (!all_zero(buf + used, IMG_CHUNK - IMG_TRAILER - used) ||
		     !all_zero(trailer + img->check_size,
			       IMG_TRAILER - img->check_size)))
		ret = -EBADMSG;
	return ret;
}

static uint64_t chunk_off(const struct image *img, uint64_t tag)
{
	return (tag & TAG_EXT ? img->h.extents_off : img->h.checks_off) +
	       TAG_INDEX(tag) * IMG_CHUNK;
}

/* Read chunk @tag into @buf and check it. */
static int chunk_read(struct image *img, uint64_t tag, char *buf,
		      unsigned int flags)
{
	int ret = img_pread(img, buf, IMG_CHUNK, chunk_off(img, tag), flags);

	if (!ret)
		ret = chunk_verify(img, tag, buf);
	if (!ret && (tag & TAG_EXT))
		ret = ext_chunk_check(img, TAG_INDEX(tag),
				      (const struct img_extent *)buf, 0);
	return ret;
}

static struct img_slot *slot_find_locked(struct image *img, uint64_t tag)
{
	for (unsigned int i = 0; i < img->nr_slots; i++)
		if (img->slot[i].tag == tag) {
			img->slot[i].used = ++img->tick;
			return &img->slot[i];
		}
	return NULL;
}

/* A slot to put a chunk in: a new one while there is room, else the one
 * used longest ago. NULL only if none can be had (no memory). */
static struct img_slot *slot_take_locked(struct image *img)
{
	struct img_slot *s = NULL;

	if (img->nr_slots < IMG_CACHE_SLOTS) {
		img->slot[img->nr_slots].buf = fd_malloc(IMG_CHUNK);
		if (img->slot[img->nr_slots].buf)
			return &img->slot[img->nr_slots++];
	}
	for (unsigned int i = 0; i < img->nr_slots; i++)
		if (!s || img->slot[i].used < s->used)
			s = &img->slot[i];
	return s;
}

/* Put checked chunk @buf in the cache as @tag. Context: img->lock. */
static struct img_slot *slot_fill_locked(struct image *img, uint64_t tag,
					 const char *buf)
{
	struct img_slot *s = slot_find_locked(img, tag);

	if (s)
		return s;
	s = slot_take_locked(img);
	if (!s)
		return NULL;
	memcpy(s->buf, buf, IMG_CHUNK);
	s->tag = tag;
	s->used = ++img->tick;
	return s;
}

/*
 * chunk_get_locked() - the slot holding chunk @tag, read (with @flags)
 * and checked if it is not in the cache. Returns 0 with img->lock held
 * and *sp set, or -EBADMSG (it does not match its check), -ENOMEM or a
 * read error, without the lock.
 */
static int chunk_get_locked(struct image *img, uint64_t tag,
			    unsigned int flags, struct img_slot **sp)
{
	char buf[IMG_CHUNK] __attribute__((aligned(64)));
	int ret;

	pthread_mutex_lock(&img->lock);
	*sp = slot_find_locked(img, tag);
	if (*sp)
		return 0;
	pthread_mutex_unlock(&img->lock);
	ret = chunk_read(img, tag, buf, flags);
	if (ret)
		return ret;
	pthread_mutex_lock(&img->lock);
	*sp = slot_fill_locked(img, tag, buf);
	if (*sp)
		return 0;
	pthread_mutex_unlock(&img->lock);
	return -ENOMEM;
}

/* ------------------------------------------------------------------------
 * Opening and checking an image.
 */

/* Extent chunk @c of a scan: checked in order after the previous one's
 * last extent, which ended at block *end; *end moves to its own last. */
static int ext_chunk_scan(const struct image *img, uint64_t c, const char *p,
			  uint64_t *end)
{
	const struct img_extent *e = (const struct img_extent *)p;
	uint64_t k = ext_in_chunk(img, c);
	int ret = ext_chunk_check(img, c, e, *end);

	if (!ret)
		*end = e[k - 1].offset / IMG_BLOCK + e[k - 1].blocks;
	return ret;
}

/* Put a checked chunk of the scan in the cache. */
static int cache_prime(struct image *img, uint64_t tag, const char *p)
{
	struct img_slot *s;

	pthread_mutex_lock(&img->lock);
	s = slot_fill_locked(img, tag, p);
	pthread_mutex_unlock(&img->lock);
	return s ? 0 : -ENOMEM;
}

/*
 * Scan one table from the start, SCAN_CHUNKS chunks at a time: each chunk
 * checked (and, for extents, in order after the previous chunk's), the
 * first ones put in the cache while it has room.
 */
static int table_scan(struct image *img, uint64_t tag, uint64_t chunks,
		      char *buf)
{
	uint64_t end = 0; /* the end of the last extent seen, in blocks */

	for (uint64_t c = 0; c < chunks; c += SCAN_CHUNKS) {
		uint64_t n = chunks - c < SCAN_CHUNKS ? chunks - c : SCAN_CHUNKS;
		int ret = img_pread(img, buf, n * IMG_CHUNK,
				    chunk_off(img, tag | c), 0);

		for (uint64_t i = 0; !ret && i < n; i++) {
			const char *p = buf + i * IMG_CHUNK;

			ret = chunk_verify(img, tag | (c + i), p);
			if (!ret && (tag & TAG_EXT))
				ret = ext_chunk_scan(img, c + i, p, &end);
			if (!ret && img->nr_slots < IMG_CACHE_SLOTS)
				ret = cache_prime(img, tag | (c + i), p);
		}
		if (ret)
			return ret;
	}
	return 0;
}

/* Both tables, checked through; bounded memory, whatever their size. */
static int tables_scan(struct image *img, const char **why)
{
	char *buf = fd_aligned_alloc(4096, SCAN_CHUNKS * IMG_CHUNK);
	int ret;

	if (!buf)
		return -ENOMEM;
	ret = table_scan(img, TAG_EXT, img->ext_chunks, buf);
	*why = "the extent table is damaged";
	if (!ret) {
		ret = table_scan(img, TAG_CHECKS, img->check_chunks, buf);
		*why = "the check table is damaged";
	}
	free(buf);
	return ret;
}

#define MAX_CHAIN 64 /* incremental images on top of a full one */

static int image_open_chain(int fd, const char *path,
			    const struct img_key *key, unsigned int depth,
			    const uint8_t *want_id, struct image **imgp,
			    const char **why);

/*
 * Open the image file at @path for reading: a descriptor, or -errno, or
 * -EINVAL when it is not a regular file or a block device. A FIFO put where
 * an image (or a parent) should be must not block the opener: it is
 * opened non-blocking, and O_NONBLOCK is cleared once the file is known
 * to be one whose reads it would only break (io_uring would return
 * EAGAIN for cold pages instead of waiting for them).
 */
int image_file_open(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	int ret = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || fcntl(fd, F_SETFL, 0) < 0)
		ret = -errno;
	else if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
		ret = -EINVAL;
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

/* The parent of an incremental image: its file, next to @path's. */
static int parent_open(struct image *img, const char *path,
		       const struct img_key *key, unsigned int depth,
		       const char **why)
{
	char dir[PATH_MAX], full[PATH_MAX * 2];
	int fd, ret;

	*why = "an incremental image without a valid parent name";
	if (strchr(img->h.parent, '/') || !img->h.parent[0])
		return -EBADMSG;
	snprintf(dir, sizeof(dir), "%s", path);
	snprintf(full, sizeof(full), "%s/%s", dirname(dir), img->h.parent);
	fd = image_file_open(full);
	*why = "the parent image cannot be opened";
	if (fd < 0)
		return fd;
	ret = image_open_chain(fd, full, key, depth + 1, img->h.parent_id,
			       &img->parent, why);
	close(fd);
	return ret;
}

/*
 * image_open() - check the image in @fd (a duplicate is kept) and open it,
 * with @key (NULL: none) if it is authenticated. @path (may be NULL for a
 * full image) locates an incremental image's parent. Returns 0, or
 * -EINVAL (not an image), -EPROTONOSUPPORT (another version, or a newer
 * flag), -EBADMSG (corrupt or truncated), -ENOKEY (the image has MACs and
 * no key was given), -EKEYREJECTED (a key was given, and the image has no
 * MACs or they were made with another key), -ESTALE (the parent file is
 * not this image's parent), -ELOOP (a chain of more than MAX_CHAIN images,
 * or a cycle), -ENOMEM, or the error of reading it or opening the parent;
 * then *why (may be NULL) says what was wrong.
 */
int image_open(int fd, const char *path, const struct img_key *key,
	       struct image **imgp, const char **why)
{
	const char *w;
	int ret = image_open_chain(fd, path, key, 0, NULL, imgp,
				   why ? why : &w);

	/* A failure before the image was made leaves the ring its header
	 * read made: the caller keeps none (image_close()). */
	if (ret < 0)
		ring_thread_close();
	return ret;
}

/* The header of @fd, checked, into @h: before anything is allocated. */
static int header_read(int fd, struct img_header *h, const char **why)
{
	struct stat st;
	uint64_t len;
	int ret;

	*why = "the image is neither a regular file nor a block device";
	if (fstat(fd, &st) < 0)
		return -errno;
	ret = file_length(fd, &st, &len);
	if (ret)
		return ret;
	*why = "the image is shorter than a header";
	ret = len < sizeof(*h) ? -EINVAL : read_full(fd, h, sizeof(*h), 0);
	if (ret)
		return ret == -EBADMSG ? -EINVAL : ret;
	return image_header_check(h, len, why);
}

static struct image *image_new(int fd, const struct img_header *h)
{
	struct image *img = fd_calloc(1, sizeof(*img));

	if (!img)
		return NULL;
	img->h = *h;
	img->fd = fd;
	pthread_mutex_init(&img->lock, NULL);
	return img;
}

/* The checker and the header's MAC: what a checked header allows. */
static int image_checker(struct image *img, const struct img_key *key,
			 const char **why)
{
	int ret = img_checker_new(&img->h, key, &img->chk);

	if (ret == -ENOKEY)
		*why = "the image is authenticated (it has MACs): its key is "
		       "needed";
	else if (ret == -EKEYREJECTED)
		*why = "a key was given, and the image is not authenticated "
		       "(it has no MACs)";
	if (ret)
		return ret;
	img->check_size = img_check_size(img->chk);
	img->ext_chunks = div_up(img->h.nr_extents, IMG_EXT_PER_CHUNK);
	img->check_chunks = div_up(img->h.nr_blocks,
				   checks_per_chunk(img->check_size));
	return header_mac_check(img, why);
}

/* The checker, the header's MAC, the tables: what a checked header
 * allows to be allocated and read. */
static int image_load(struct image *img, const struct img_key *key,
		      const char **why)
{
	int ret = image_checker(img, key, why);

	return ret ? ret : tables_scan(img, why);
}

/* image_open() for the @depth-th image of a chain, which must be @want_id
 * (checked before its own parent is opened). */
static int image_open_chain(int fd, const char *path,
			    const struct img_key *key, unsigned int depth,
			    const uint8_t *want_id, struct image **imgp,
			    const char **why)
{
	struct img_header h;
	struct image *img;
	int dup, ret;

	dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dup < 0)
		return -errno;
	ret = header_read(dup, &h, why);
	if (!ret && want_id && memcmp(h.id, want_id, sizeof(h.id))) {
		*why = "the parent file is not the image's parent";
		ret = -ESTALE;
	}
	if (!ret && depth > MAX_CHAIN) {
		*why = "a chain of too many incremental images, or a cycle";
		ret = -ELOOP;
	}
	img = ret ? NULL : image_new(dup, &h);
	if (!ret && !img)
		ret = -ENOMEM;
	if (ret) {
		close(dup);
		return ret;
	}
	ret = image_load(img, key, why);
	if (!ret && (img->h.flags & IMG_INCREMENTAL) && !path) {
		*why = "an incremental image, whose parent cannot be found";
		ret = -EINVAL;
	} else if (!ret && (img->h.flags & IMG_INCREMENTAL)) {
		ret = parent_open(img, path, key, depth, why);
	}
	if (ret) {
		image_close(img);
		return ret;
	}
	*imgp = img;
	return 0;
}

/*
 * image_open_reader() - check and open the full image whose file @rd
 * reads (a copy of @rd is kept; what it points at must outlive the
 * image), with @key as image_open(). Returns as image_open(), and
 * -EINVAL for an incremental image (its parent is a file next to it:
 * there is no such place here).
 */
int image_open_reader(const struct img_reader *rd, const struct img_key *key,
		      struct image **imgp, const char **why)
{
	struct img_header h;
	struct image *img;
	ssize_t n;
	int ret;

	*why = "the image is shorter than a header";
	if (rd->len < sizeof(h))
		return -EINVAL;
	n = rd->read(rd->arg, 0, &h, sizeof(h), 0);
	*why = "the image's header cannot be read";
	if (n < 0)
		return (int)n;
	ret = image_header_check(&h, rd->len, why);
	if (ret)
		return ret;
	*why = "an incremental image: its parent is found next to its file, "
	       "which it has not";
	if (h.flags & IMG_INCREMENTAL)
		return -EINVAL;
	img = image_new(-1, &h);
	if (!img)
		return -ENOMEM;
	img->rd = *rd;
	ret = image_load(img, key, why);
	if (ret) {
		image_close(img);
		return ret;
	}
	*imgp = img;
	return 0;
}

static ssize_t header_only_read(void *arg, uint64_t off, void *buf,
				size_t len, unsigned int flags)
{
	return -EIO;
}

/*
 * image_open_header() - an image of which only header @h is known (a
 * file of @file_len bytes only a daemon reads): checked as
 * image_header_check() and, with @key, its MAC - so that its key is known
 * right, and image_key_of() gives the image's own key. Its tables and
 * blocks cannot be read: image_read() fails with -EIO. Returns as
 * image_open(), and -EOPNOTSUPP for an incremental image.
 */
int image_open_header(const struct img_header *h, uint64_t file_len,
		      const struct img_key *key, struct image **imgp,
		      const char **why)
{
	struct image *img;
	int ret = image_header_check(h, file_len, why);

	if (ret)
		return ret;
	*why = "an incremental image: the daemon serves full images only";
	if (h->flags & IMG_INCREMENTAL)
		return -EOPNOTSUPP;
	img = image_new(-1, h);
	if (!img)
		return -ENOMEM;
	img->rd = (struct img_reader){ .read = header_only_read,
				       .len = file_len };
	ret = image_checker(img, key, why);
	if (ret) {
		image_close(img);
		return ret;
	}
	*imgp = img;
	return 0;
}

/* image_close() - also the calling thread's ring: see ring_thread_close(). */
void image_close(struct image *img)
{
	if (!img)
		return;
	image_close(img->parent);
	if (img->fd >= 0)
		close(img->fd);
	for (unsigned int i = 0; i < img->nr_slots; i++)
		free(img->slot[i].buf);
	img_checker_free(img->chk);
	pthread_mutex_destroy(&img->lock);
	free(img);
	ring_thread_close();
}

/*
 * image_key_of() - the key of an authenticated image, for a daemon that
 * serves it: 0, or -ENOKEY (the image has no MACs).
 */
int image_key_of(const struct image *img, struct img_key *out)
{
	if (!(img->h.flags & IMG_MAC))
		return -ENOKEY;
	img_checker_key(img->chk, out);
	return 0;
}

/* ------------------------------------------------------------------------
 * Reading content.
 */

/* Where an offset is: in extent e, or in a gap that ends at next. */
struct ext_pos {
	bool found;
	struct img_extent e;
	uint64_t next;		/* the gap's end: the next extent's offset, or
				   UINT64_MAX */
};

enum { POS_BEFORE, POS_IN, POS_AFTER };

/*
 * Where @off is relative to extent chunk @s: before its first extent,
 * after its last one's end, or in it (in an extent, or in a gap between
 * two of its extents; *p says). Context: img->lock.
 */
static int chunk_where_locked(const struct image *img, const struct img_slot *s,
			      uint64_t off, struct ext_pos *p)
{
	const struct img_extent *e = (const struct img_extent *)s->buf;
	uint64_t lo = 0, hi = ext_in_chunk(img, TAG_INDEX(s->tag));

	if (off < e[0].offset)
		return POS_BEFORE;
	if (off >= e[hi - 1].offset + e[hi - 1].blocks * IMG_BLOCK)
		return POS_AFTER;
	while (lo < hi) { /* the first extent that ends after off */
		uint64_t mid = lo + (hi - lo) / 2;

		if (off >= e[mid].offset + e[mid].blocks * IMG_BLOCK)
			lo = mid + 1;
		else
			hi = mid;
	}
	p->found = off >= e[lo].offset;
	p->e = e[lo];
	p->next = e[lo].offset;
	return POS_IN;
}

/* Where @off is relative to extent chunk @c; -errno if it cannot be read. */
static int chunk_where(struct image *img, uint64_t c, uint64_t off,
		       struct ext_pos *p)
{
	struct img_slot *s;
	int ret = chunk_get_locked(img, TAG_EXT | c, 0, &s);

	if (ret)
		return ret;
	ret = chunk_where_locked(img, s, off, p);
	if (ret == POS_BEFORE)
		p->next = ((const struct img_extent *)s->buf)[0].offset;
	if (ret == POS_IN)
		img->hint = (unsigned int)(s - img->slot);
	pthread_mutex_unlock(&img->lock);
	return ret;
}

/* The chunk of the last extent found, if it holds @off: no search. */
static bool hint_where(struct image *img, uint64_t off, struct ext_pos *p)
{
	struct img_slot *s;
	bool hit = false;

	pthread_mutex_lock(&img->lock);
	s = img->hint < img->nr_slots ? &img->slot[img->hint] : NULL;
	if (s && (s->tag & TAG_EXT))
		hit = chunk_where_locked(img, s, off, p) == POS_IN;
	pthread_mutex_unlock(&img->lock);
	return hit;
}

/*
 * extent_find() - where block offset @off is: in which extent, or before
 * which one. A binary search over the chunks, each read through the
 * cache. Returns 0, or -EBADMSG (a chunk it needed does not match its
 * check any more), -ENOMEM or a read error.
 */
static int extent_find(struct image *img, uint64_t off, struct ext_pos *p)
{
	uint64_t lo = 0, hi = img->ext_chunks;

	p->found = false;
	p->next = UINT64_MAX;
	if (hint_where(img, off, p))
		return 0;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		struct ext_pos q;
		int ret = chunk_where(img, mid, off, &q);

		if (ret < 0)
			return ret;
		if (ret == POS_IN) {
			*p = q;
			return 0;
		}
		if (ret == POS_BEFORE) {
			p->next = q.next;
			hi = mid;
		} else {
			lo = mid + 1;
		}
	}
	return 0;
}

/*
 * image_extent() - the @i-th extent of the table into *e: 0, -ERANGE
 * (there are fewer), or what reading its chunk returned.
 */
int image_extent(struct image *img, uint64_t i, struct img_extent *e)
{
	struct img_slot *s;
	int ret;

	if (i >= img->h.nr_extents)
		return -ERANGE;
	ret = chunk_get_locked(img, TAG_EXT | (i / IMG_EXT_PER_CHUNK), 0, &s);
	if (ret)
		return ret;
	*e = ((const struct img_extent *)s->buf)[i % IMG_EXT_PER_CHUNK];
	pthread_mutex_unlock(&img->lock);
	return 0;
}

/* The check of data block @b, into @out. */
static int check_get(struct image *img, uint64_t b, unsigned int flags,
		     uint8_t *out)
{
	uint64_t per = checks_per_chunk(img->check_size);
	struct img_slot *s;
	int ret = chunk_get_locked(img, TAG_CHECKS | (b / per), flags, &s);

	if (ret)
		return ret;
	memcpy(out, s->buf + (b % per) * img->check_size, img->check_size);
	pthread_mutex_unlock(&img->lock);
	return 0;
}

/*
 * image_extent_at() - what the image holds at region offset @off: data
 * (returns 1) or zeros (0), over [*start, *start + *len) around @off (in a
 * gap between extents, from @off's block to the next extent); -ERANGE past
 * the region's end, or what reading a table chunk returned. A full image
 * has zeros wherever no extent is. Context: any thread.
 */
int image_extent_at(struct image *img, uint64_t off, uint64_t *start,
		    uint64_t *len)
{
	uint64_t end = img->h.region_len;
	struct ext_pos p;
	int ret;

	if (off >= end)
		return -ERANGE;
	ret = extent_find(img, off - off % IMG_BLOCK, &p);
	if (ret)
		return ret;
	if (p.found) {
		*start = p.e.offset;
		*len = p.e.blocks * IMG_BLOCK;
	} else {
		*start = off - off % IMG_BLOCK;
		*len = (p.next < end ? p.next : end) - *start;
	}
	if (*start + *len > end)
		*len = end - *start;
	return p.found && p.e.kind == IMG_DATA;
}

/* Read data blocks [first, first + n) into @buf and check each. */
static int blocks_read(struct image *img, uint64_t first, size_t n, void *buf,
		       unsigned int flags)
{
	int ret = img_pread(img, buf, n * IMG_BLOCK,
			    img->h.data_off + first * IMG_BLOCK, flags);

	for (size_t i = 0; !ret && i < n; i++) {
		uint8_t want[IMG_CHECK_MAX];

		ret = check_get(img, first + i, flags, want);
		if (!ret)
			ret = img_check_verify(img->chk, IMG_L_DATA, first + i,
					       (char *)buf + i * IMG_BLOCK,
					       IMG_BLOCK, want);
	}
	return ret;
}

/* Part [off, off + len) of one data block, through a bounce buffer. */
static int block_part(struct image *img, uint64_t block, uint64_t off,
		      void *buf, size_t len, unsigned int flags)
{
	char *tmp = aligned_alloc(4096, IMG_BLOCK);
	int ret;

	if (!tmp)
		return -ENOMEM;
	ret = blocks_read(img, block, 1, tmp, flags);
	if (!ret)
		memcpy(buf, tmp + off % IMG_BLOCK, len);
	free(tmp);
	return ret;
}

/*
 * image_read_run() - [off, off + len), inside one block or whole blocks
 * of one extent (or of no extent, @p says which): read, zeroed, or from
 * the parent.
 */
static int image_read_run(struct image *img, uint64_t off, void *buf,
			  size_t len, const struct ext_pos *p, unsigned int flags)
{
	const struct img_extent *e = &p->e;
	uint64_t block;

	if (!p->found) {
		if (img->parent && off < img->parent->h.region_len) {
			ssize_t n = image_read_flags(img->parent, off, buf,
						     len, flags);

			return n < 0 ? (int)n : 0;
		}
		memset(buf, 0, len);
		return 0;
	}
	if (e->kind == IMG_ZERO) {
		memset(buf, 0, len);
		return 0;
	}
	block = e->data_block + (off - e->offset) / IMG_BLOCK;
	if (off % IMG_BLOCK || len < IMG_BLOCK)
		return block_part(img, block, off, buf, len, flags);
	return blocks_read(img, block, len / IMG_BLOCK, buf, flags);
}

/*
 * How much of [off, off + len) one image_read_run() can take, given where
 * its block is (@p): the rest of a block, or whole blocks while they stay
 * in one extent (or in one gap).
 */
static size_t run_len(uint64_t off, size_t len, const struct ext_pos *p)
{
	uint64_t end;

	if (off % IMG_BLOCK || len < IMG_BLOCK) {
		end = off - off % IMG_BLOCK + IMG_BLOCK;
		return end - off < len ? end - off : len;
	}
	end = p->found ? p->e.offset + p->e.blocks * IMG_BLOCK : p->next;
	len -= len % IMG_BLOCK;
	return end - off < len ? end - off : len;
}

/* [off, off + len) of the file will be read soon. */
static void file_willneed(struct image *img, uint64_t off, uint64_t len)
{
	if (img->fd >= 0)
		posix_fadvise(img->fd, (off_t)off, (off_t)len,
			      POSIX_FADV_WILLNEED);
	else if (img->rd.willneed)
		img->rd.willneed(img->rd.arg, off, len);
}

/*
 * image_willneed() - the data blocks of [off, off + len) will be read
 * soon: the kernel starts reading them from the file now
 * (POSIX_FADV_WILLNEED), in large requests - or the reader, its own way.
 * A hint: errors are ignored, and a parent image is not advised.
 * Context: any thread; several at once.
 */
void image_willneed(struct image *img, uint64_t off, uint64_t len)
{
	uint64_t end = off + len;

	off -= off % IMG_BLOCK;
	while (off < end) {
		struct ext_pos p;
		uint64_t e, first;

		if (extent_find(img, off, &p) < 0)
			return;
		if (!p.found) {
			off = p.next;
			continue;
		}
		e = p.e.offset + p.e.blocks * IMG_BLOCK;
		if (p.e.kind == IMG_DATA) {
			first = p.e.data_block + (off - p.e.offset) / IMG_BLOCK;
			file_willneed(img, img->h.data_off + first * IMG_BLOCK,
				      (e < end ? e : end) - off);
		}
		off = e;
	}
}

/*
 * image_read_flags() - the region's content of [off, off + len)
 * (page-aligned) into @buf; @flags: IMG_READ_URGENT when a fault waits
 * for it (a reader puts it first). Returns len, or -EBADMSG (a block or a
 * table chunk does not match its check, or the file was cut short), or
 * another read error. Past the image's length it reads zeros.
 * Context: any thread; several at once.
 */
ssize_t image_read_flags(struct image *img, uint64_t off, void *buf,
			 size_t len, unsigned int flags)
{
	for (size_t done = 0; done < len;) {
		uint64_t at = off + done;
		struct ext_pos p;
		size_t l = 0;
		int ret = extent_find(img, at - at % IMG_BLOCK, &p);

		if (!ret) {
			l = run_len(at, len - done, &p);
			ret = image_read_run(img, at, (char *)buf + done, l, &p,
					     flags);
		}
		if (ret < 0)
			return ret;
		done += l;
	}
	return (ssize_t)len;
}

ssize_t image_read(struct image *img, uint64_t off, void *buf, size_t len)
{
	return image_read_flags(img, off, buf, len, 0);
}
