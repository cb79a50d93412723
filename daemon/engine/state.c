// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * state.c - a space's state where a restarted daemon finds it.
 *
 * Every space keeps its tracked pages (the done and zero bitmaps) in a
 * memfd mapped shared, so a bit the daemon sets is in the memfd at once,
 * and journals its range table there after every change: the table is
 * written to the slot not in use, then one 64-bit store switches slots,
 * so a daemon killed at any instant leaves one whole table. The memfd is
 * part of its session's kept entry (record.c).
 *
 * What a crash can lose: an event read by the dead daemon but not yet
 * applied (a window of a few instructions after the read), and for a
 * FORK, the child's userfaultfd not yet put. faultd(8) says so.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine_int.h"
#include "persist.h"

#define KSTATE_VERSION 1
#define KSPACE_MAGIC "FDSPACE1"
#define SLOT_MIN 64

/* The head of a space's memfd. The fixed part (head, segments, bitmaps)
 * is mapped; the range slots after it are written with pwrite(). */
struct kspace {
	char magic[8];
	uint32_t version;
	uint32_t page_size;
	uint64_t id;
	int32_t pid;
	uint32_t src;		/* the session's source it reads */
	uint64_t nr_pages, nseg, words;
	uint64_t seg_off, done_off, zero_off, fixed_len;
	uint64_t slot_off[2], slot_cap[2];
	_Atomic uint64_t ranges; /* bit 63: the slot in use; below: count */
	/* Installs under way, by source offset: a daemon killed between an
	 * install and marking its pages done leaves them here, and the next
	 * one installs them again (what is in is found in: EEXIST). */
	struct {
		_Atomic uint64_t off, len;
	} inflight[INFLIGHT_SLOTS];
};

static size_t page_up(size_t n)
{
	return (n + 4095) & ~(size_t)4095;
}

/* ------------------------------------------------------------------------
 * A space's memfd.
 */

static int state_map(struct space *sp, size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED,
		       sp->state_fd, 0);

	if (p == MAP_FAILED)
		return -errno;
	sp->state = p;
	sp->state_len = len;
	sp->done = (_Atomic uint64_t *)((char *)p + sp->state->done_off);
	sp->zero = (_Atomic uint64_t *)((char *)p + sp->state->zero_off);
	return 0;
}

/*
 * state_create() - the memfd of @sp (its segments made): the bitmaps all
 * clear, the ranges journaled. Context: before the space is served.
 */
int state_create(struct space *sp)
{
	size_t words = bitmap_words(sp->nr_pages) + 1;
	struct kspace h = {
		.version = KSTATE_VERSION,
		.page_size = (uint32_t)sp->page_size,
		.id = sp->id,
		.pid = sp->pid,
		.src = sp->src_index,
		.nr_pages = sp->nr_pages,
		.nseg = sp->nseg,
		.words = words,
		.seg_off = page_up(sizeof(h)),
	};
	int ret;

	memcpy(h.magic, KSPACE_MAGIC, sizeof(h.magic));
	h.done_off = page_up(h.seg_off + sp->nseg * sizeof(sp->seg[0]));
	h.zero_off = h.done_off + page_up(words * 8);
	h.fixed_len = h.zero_off + page_up(words * 8);
	sp->state_fd = memfd_create("faultd-space", MFD_CLOEXEC);
	if (sp->state_fd < 0)
		return -errno;
	if (ftruncate(sp->state_fd, (off_t)h.fixed_len) < 0 ||
	    pwrite(sp->state_fd, &h, sizeof(h), 0) != sizeof(h) ||
	    pwrite(sp->state_fd, sp->seg, sp->nseg * sizeof(sp->seg[0]),
		   (off_t)h.seg_off) != (ssize_t)(sp->nseg * sizeof(sp->seg[0])))
		return -errno;
	ret = state_map(sp, h.fixed_len);
	return ret ? ret : state_journal(sp);
}

/*
 * state_journal() - write @sp's range table to the slot not in use and
 * switch to it. Returns 0 or -errno (the memfd could not grow: the old
 * table stays, and a restart would serve by it).
 * Context: sp->lock held for writing, or the space not served yet.
 */
int state_journal(struct space *sp)
{
	struct kspace *h = sp->state;
	unsigned int slot = !(atomic_load(&h->ranges) >> 63);
	size_t bytes = sp->nr * sizeof(sp->r[0]);

	if (h->slot_cap[slot] < sp->nr) {
		struct stat st;
		uint64_t cap = sp->nr * 2 > SLOT_MIN ? sp->nr * 2 : SLOT_MIN;

		if (fstat(sp->state_fd, &st) < 0 ||
		    ftruncate(sp->state_fd, st.st_size + (off_t)page_up(
				      cap * sizeof(sp->r[0]))) < 0)
			return -errno;
		h->slot_off[slot] = (uint64_t)st.st_size;
		h->slot_cap[slot] = cap;
	}
	if (pwrite(sp->state_fd, sp->r, bytes, (off_t)h->slot_off[slot]) !=
	    (ssize_t)bytes)
		return -EIO;
	atomic_store(&h->ranges, ((uint64_t)slot << 63) | sp->nr);
	return 0;
}

/* Is the head of a space's memfd of @len bytes sane? */
static bool head_ok(const struct kspace *h, uint64_t len)
{
	uint64_t n = atomic_load(&h->ranges) & ~(1ull << 63);
	unsigned int slot = (unsigned int)(atomic_load(&h->ranges) >> 63);

	return !memcmp(h->magic, KSPACE_MAGIC, sizeof(h->magic)) &&
	       h->version == KSTATE_VERSION && h->page_size >= 4096 &&
	       !(h->page_size & (h->page_size - 1)) &&
	       h->words == bitmap_words(h->nr_pages) + 1 &&
	       h->seg_off + h->nseg * sizeof(struct sseg) <= h->done_off &&
	       h->done_off + h->words * 8 <= h->zero_off &&
	       h->zero_off + h->words * 8 <= h->fixed_len &&
	       h->fixed_len <= len && n <= h->slot_cap[slot] &&
	       h->slot_off[slot] + n * sizeof(struct srange) <= len;
}

/* The segments and the table in use, read back. */
static int state_read(struct space *sp)
{
	struct kspace *h = sp->state;
	uint64_t r = atomic_load(&h->ranges);
	size_t n = (size_t)(r & ~(1ull << 63));

	sp->nseg = h->nseg;
	sp->nr_pages = h->nr_pages;
	sp->nr = n;
	sp->cap = n ? n : 1;
	sp->seg = malloc((sp->nseg ? sp->nseg : 1) * sizeof(*sp->seg));
	sp->r = malloc(sp->cap * sizeof(*sp->r));
	if (!sp->seg || !sp->r)
		return -ENOMEM;
	if (pread(sp->state_fd, sp->seg, sp->nseg * sizeof(*sp->seg),
		  (off_t)h->seg_off) != (ssize_t)(sp->nseg * sizeof(*sp->seg)) ||
	    pread(sp->state_fd, sp->r, n * sizeof(*sp->r),
		  (off_t)h->slot_off[r >> 63]) != (ssize_t)(n * sizeof(*sp->r)))
		return -EIO;
	return 0;
}

/*
 * state_restore() - the space whose memfd is @fd (taken over), as the
 * daemon before left it, for @uffd (taken over) of @s reading @src.
 */
int state_restore(struct session *s, int fd, int uffd,
		  struct source *const *srcs, size_t nr_srcs,
		  struct space **spp)
{
	struct kspace h;
	struct stat st;
	struct space *sp;
	int ret;

	if (fstat(fd, &st) < 0 || pread(fd, &h, sizeof(h), 0) != sizeof(h) ||
	    !head_ok(&h, (uint64_t)st.st_size) || h.src >= nr_srcs) {
		close(fd);
		close(uffd);
		return -EBADMSG;
	}
	sp = space_alloc(s, srcs[h.src], h.page_size);
	if (!sp) {
		close(fd);
		close(uffd);
		return -ENOMEM;
	}
	sp->state_fd = fd;
	sp->uffd = uffd;
	sp->id = h.id;
	sp->pid = h.pid;
	sp->src_index = h.src;
	ret = state_map(sp, h.fixed_len);
	if (!ret)
		ret = state_read(sp);
	if (ret) {
		space_free(sp);
		return ret;
	}
	ret = space_restored(sp);
	if (ret) {
		space_free(sp);
		return ret;
	}
	*spp = sp;
	return 0;
}

/*
 * state_inflight() - install slot @slot of @sp is about to install source
 * [off, off + len), or (len 0) is done with it.
 */
void state_inflight(struct space *sp, unsigned int slot, uint64_t off,
		    uint64_t len)
{
	if (!sp->state || slot >= INFLIGHT_SLOTS)
		return;
	if (len)
		atomic_store(&sp->state->inflight[slot].off, off);
	atomic_store(&sp->state->inflight[slot].len, len);
}

/* The installs a daemon before left under way: @max at most. */
size_t state_inflight_get(const struct space *sp, uint64_t *off,
			  uint64_t *len, size_t max)
{
	size_t n = 0;

	for (unsigned int i = 0; sp->state && i < INFLIGHT_SLOTS && n < max;
	     i++) {
		len[n] = atomic_load(&sp->state->inflight[i].len);
		off[n] = atomic_load(&sp->state->inflight[i].off);
		n += len[n] != 0;
	}
	return n;
}

void state_free(struct space *sp)
{
	if (sp->state)
		munmap(sp->state, sp->state_len);
	if (sp->state_fd >= 0)
		close(sp->state_fd);
	sp->state = NULL;
	sp->state_fd = -1;
}
