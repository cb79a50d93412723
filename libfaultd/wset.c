// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * wset.c - working-set files (faultd-working-set(5)): parse and check,
 * write, merge, and the recorder a restore notes its first touches in.
 *
 * A file is checked whole before any of it is used: its length against its
 * counts, its CRC32C, and every entry against the space table (a page
 * beyond its source's size refuses the file). What it is a set *of* is the
 * caller's to check (wset_space_match() against its own sources): a set
 * of another source is refused there, never applied.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "wset.h"

/* ------------------------------------------------------------------------
 * The file.
 */

static uint64_t file_len(uint32_t nr_spaces, uint64_t nr_entries)
{
	return sizeof(struct wset_header) +
	       (uint64_t)nr_spaces * sizeof(struct wset_space) +
	       nr_entries * sizeof(struct wset_entry);
}

static uint32_t file_crc(const void *buf, size_t len)
{
	struct wset_header h;

	memcpy(&h, buf, sizeof(h));
	h.crc = 0;
	return crc32c(crc32c(0, &h, sizeof(h)), (const char *)buf + sizeof(h),
		      len - sizeof(h));
}

/*
 * Reading a set: the header and the space table first, each space shown
 * to the caller's filter before any entry is read, then the entries in
 * chunks, kept (bounded by the pages of the kept spaces' sources) or
 * skipped, the CRC summed as they come. Nothing is allocated from what
 * the file claims: a file that says it has 2^28 entries of a space whose
 * source has 512 pages is refused at the 513th.
 */

static int cmp_entry(const void *a, const void *b)
{
	const struct wset_entry *x = a, *y = b;

	if (x->space != y->space)
		return x->space < y->space ? -1 : 1;
	return x->page < y->page ? -1 : x->page > y->page;
}

#define READ_CHUNK 4096		/* entries per read */

struct reader {
	int fd;
	uint64_t off;		/* next byte of the file */
	uint32_t crc;
	uint64_t *left;		/* per space: 0 skipped, else 1 + the
				   entries it may still have kept */
};

/* @len bytes at the reader's offset, summed into its CRC. */
static int read_part(struct reader *rd, void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(rd->fd, (char *)buf + done, len - done,
				  (off_t)(rd->off + done));

		if (n < 0)
			return -errno;
		if (!n)
			return -EBADMSG; /* shorter than fstat() said */
		done += (size_t)n;
	}
	rd->crc = crc32c(rd->crc, buf, len);
	rd->off += len;
	return 0;
}

/* The header, checked against the file's length @len. */
static int read_header(struct reader *rd, uint64_t len,
		       struct wset_header *h, const char **why)
{
	struct wset_header zeroed;
	int ret;

	*why = "not a working-set file";
	if (len < sizeof(*h))
		return -EINVAL;
	ret = read_part(rd, h, sizeof(*h));
	if (ret)
		return ret;
	zeroed = *h;
	zeroed.crc = 0;
	rd->crc = crc32c(0, &zeroed, sizeof(zeroed));
	if (h->magic != WSET_MAGIC)
		return -EINVAL;
	*why = "a working-set version this build does not read";
	if (h->version != WSET_VERSION)
		return -EPROTONOSUPPORT;
	*why = "a corrupt working-set header";
	if (h->header_size != sizeof(*h) || h->flags || h->reserved ||
	    !h->nr_spaces || h->nr_spaces > WSET_MAX_SPACES ||
	    h->nr_entries > WSET_MAX_BYTES / sizeof(struct wset_entry))
		return -EBADMSG;
	*why = "the working-set file is truncated or has trailing bytes";
	return file_len(h->nr_spaces, h->nr_entries) == len ? 0 : -EBADMSG;
}

static bool space_ok(const struct wset_space *s)
{
	return s->page_size >= 4096 && !(s->page_size & (s->page_size - 1)) &&
	       !(s->src_size % s->page_size) && !s->reserved;
}

/* The space table: each space sane, and kept, skipped or refused. */
static int read_spaces(struct reader *rd, struct wset *ws,
		       const struct wset_filter *f, const char **why)
{
	int ret = read_part(rd, ws->spaces,
			    ws->nr_spaces * sizeof(*ws->spaces));

	for (uint32_t i = 0; !ret && i < ws->nr_spaces; i++) {
		const struct wset_space *s = &ws->spaces[i];
		enum wset_use use = f ? f->use(s, f->arg) : WSET_KEEP;

		*why = "a corrupt space in the working set";
		if (!space_ok(s))
			return -EBADMSG;
		*why = "a space of the working set is not one of the sources";
		if (use == WSET_REFUSE)
			return -EXDEV;
		rd->left[i] = use == WSET_KEEP ? s->src_size / s->page_size + 1
					       : 0;
	}
	return ret;
}

/* Room for one more entry in @ws (capacity *cap, doubled as needed). */
static int entries_grow(struct wset *ws, uint64_t *cap)
{
	uint64_t n = *cap ? *cap * 2 : READ_CHUNK;
	struct wset_entry *e;

	if (ws->nr < *cap)
		return 0;
	e = realloc(ws->e, n * sizeof(*e));
	if (!e)
		return -ENOMEM;
	ws->e = e;
	*cap = n;
	return 0;
}

/* One entry read: checked, and kept if its space is (within its bound). */
static int entry_take(struct reader *rd, struct wset *ws, uint64_t *cap,
		      const struct wset_entry *e, const char **why)
{
	const struct wset_space *s;
	int ret;

	*why = "a working-set entry names no space of the set";
	if (e->space >= ws->nr_spaces || e->reserved)
		return -EBADMSG;
	s = &ws->spaces[e->space];
	*why = "the working set lists pages beyond its source";
	if (e->page >= s->src_size / s->page_size)
		return -ERANGE;
	if (!rd->left[e->space])
		return 0; /* a space the caller skips */
	*why = "the working set lists more pages than its sources have "
	       "(a page twice)";
	if (rd->left[e->space] == 1)
		return -EBADMSG;
	/* The cheap half of entries_unique(), at once: a hole of a sparse
	 * file reads as one entry again and again. */
	*why = "the working set lists a page twice";
	if (ws->nr && !cmp_entry(e, &ws->e[ws->nr - 1]))
		return -EBADMSG;
	rd->left[e->space]--;
	*why = "out of memory";
	ret = entries_grow(ws, cap);
	if (!ret)
		ws->e[ws->nr++] = *e;
	return ret;
}

/*
 * The entries, in chunks. A page beyond its source does not stop the
 * read: the checksum of the whole file then says whether the file is
 * corrupt (-EBADMSG) or of another source (-ERANGE, returned here).
 */
static int read_entries(struct reader *rd, struct wset *ws, uint64_t nr,
			const char **why)
{
	struct wset_entry *buf = malloc(READ_CHUNK * sizeof(*buf));
	const char *beyond = NULL;
	uint64_t cap = 0;
	int ret = 0;

	*why = "out of memory";
	if (!buf)
		return -ENOMEM;
	for (uint64_t i = 0; i < nr && !ret; i += READ_CHUNK) {
		size_t n = nr - i < READ_CHUNK ? (size_t)(nr - i) : READ_CHUNK;

		*why = "cannot read the working-set file";
		ret = read_part(rd, buf, n * sizeof(*buf));
		for (size_t k = 0; k < n && !ret; k++) {
			ret = entry_take(rd, ws, &cap, &buf[k], why);
			if (ret == -ERANGE) {
				beyond = *why;
				ret = 0;
			}
		}
	}
	free(buf);
	if (!ret && beyond)
		*why = beyond;
	return ret ? ret : beyond ? -ERANGE : 0;
}

/* A page listed twice (a set lists a page once). Sorts a copy. */
static int entries_unique(const struct wset *ws, const char **why)
{
	struct wset_entry *e;
	int ret = 0;

	/* A set the filter emptied has no entry array to copy. */
	if (ws->nr < 2)
		return 0;
	e = malloc(ws->nr * sizeof(*e));
	*why = "out of memory";
	if (!e)
		return -ENOMEM;
	memcpy(e, ws->e, ws->nr * sizeof(*e));
	qsort(e, ws->nr, sizeof(*e), cmp_entry);
	*why = "the working set lists a page twice";
	for (uint64_t i = 1; i < ws->nr && !ret; i++)
		if (!cmp_entry(&e[i], &e[i - 1]))
			ret = -EBADMSG;
	free(e);
	return ret;
}

/* The whole set from @rd, the file @len bytes long. */
static int read_set(struct reader *rd, uint64_t len,
		    const struct wset_filter *f, struct wset *ws,
		    const char **why)
{
	struct wset_header h;
	int ret = read_header(rd, len, &h, why);

	if (ret)
		return ret;
	*why = "out of memory";
	ws->nr_spaces = h.nr_spaces;
	ws->spaces = malloc(h.nr_spaces * sizeof(*ws->spaces));
	rd->left = calloc(h.nr_spaces, sizeof(*rd->left));
	if (!ws->spaces || !rd->left)
		return -ENOMEM;
	ret = read_spaces(rd, ws, f, why);
	if (!ret)
		ret = read_entries(rd, ws, h.nr_entries, why);
	if (ret && ret != -ERANGE)
		return ret;
	/* A page beyond its source in a file whose checksum fails is a
	 * corrupt file, not a set of another source. */
	if (rd->crc != h.crc) {
		*why = "the working-set file's checksum does not match";
		return -EBADMSG;
	}
	return ret ? ret : entries_unique(ws, why);
}

/*
 * wset_read_fd() - the set in the file open on @fd, checked (see the
 * file's comment), with only the spaces filter @f keeps (NULL: all).
 * Returns 0, or -EINVAL (not a set), -EPROTONOSUPPORT (another version),
 * -EBADMSG (truncated, corrupt, a page listed twice, more pages than the
 * kept spaces' sources have), -ERANGE (pages beyond their source),
 * -EXDEV (@f refused a space), -ENOMEM, or read()'s error; *why says
 * which. Memory: 16 bytes per entry kept, twice while it is checked.
 */
int wset_read_fd(int fd, const struct wset_filter *f, struct wset *ws,
		 const char **why)
{
	struct reader rd = { .fd = fd };
	struct stat st;
	int ret;

	*ws = (struct wset){ 0 };
	*why = "cannot read the working-set file";
	if (fstat(fd, &st) < 0)
		return -errno;
	*why = "the working-set file is not a regular file, or too large";
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > WSET_MAX_BYTES)
		return -EINVAL;
	ret = read_set(&rd, (uint64_t)st.st_size, f, ws, why);
	free(rd.left);
	if (ret)
		wset_free(ws);
	return ret;
}

/* wset_load() - the set in the file at @path. As read_fd, or open's error. */
int wset_load(const char *path, const struct wset_filter *f, struct wset *ws,
	      const char **why)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret;

	*why = "cannot open the working-set file";
	if (fd < 0)
		return -errno;
	ret = wset_read_fd(fd, f, ws, why);
	close(fd);
	return ret;
}

/* The file's bytes of @ws, its CRC in. NULL: out of memory. */
static char *wset_encode(const struct wset *ws, size_t *lenp)
{
	struct wset_header h = {
		.magic = WSET_MAGIC, .version = WSET_VERSION,
		.header_size = sizeof(h), .nr_spaces = ws->nr_spaces,
		.nr_entries = ws->nr,
	};
	size_t len = file_len(ws->nr_spaces, ws->nr);
	char *buf = malloc(len), *p;

	if (!buf)
		return NULL;
	memcpy(buf, &h, sizeof(h));
	p = buf + sizeof(h);
	memcpy(p, ws->spaces, ws->nr_spaces * sizeof(*ws->spaces));
	memcpy(p + ws->nr_spaces * sizeof(*ws->spaces), ws->e,
	       ws->nr * sizeof(*ws->e));
	h.crc = file_crc(buf, len);
	memcpy(buf, &h, sizeof(h));
	*lenp = len;
	return buf;
}

/*
 * wset_write_fd() - @ws into the file open on @fd, from offset 0, which
 * is then cut to its length. Returns 0 or -errno.
 */
int wset_write_fd(int fd, const struct wset *ws)
{
	size_t len, done = 0;
	char *buf = wset_encode(ws, &len);
	int ret = 0;

	if (!buf)
		return -ENOMEM;
	while (done < len) {
		ssize_t n = pwrite(fd, buf + done, len - done, (off_t)done);

		if (n < 0) {
			ret = -errno;
			break;
		}
		done += (size_t)n;
	}
	if (!ret && ftruncate(fd, (off_t)len) < 0)
		ret = -errno;
	free(buf);
	return ret;
}

/*
 * wset_save() - @ws to @path, through a temporary file renamed over it:
 * a reader finds the old file or the new one. Returns 0 or -errno.
 */
int wset_save(const char *path, const struct wset *ws)
{
	char tmp[4096];
	int fd, ret;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >=
	    (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	ret = wset_write_fd(fd, ws);
	if (close(fd) < 0 && !ret)
		ret = -errno;
	if (!ret && rename(tmp, path) < 0)
		ret = -errno;
	if (ret)
		unlink(tmp);
	return ret;
}

void wset_free(struct wset *ws)
{
	free(ws->spaces);
	free(ws->e);
	*ws = (struct wset){ 0 };
}

/* Do @a and @b describe the same space of the same source? */
bool wset_space_match(const struct wset_space *a, const struct wset_space *b)
{
	return a->space_id == b->space_id && a->src_size == b->src_size &&
	       a->page_size == b->page_size &&
	       !memcmp(a->src_id, b->src_id, sizeof(a->src_id));
}

/*
 * wset_image_space() - the space a set of @img's region describes: the
 * image's id and region length (what a source of it is tied to, as the
 * daemon's src_image.c says too), the region's pages of 4 KiB.
 */
void wset_image_space(const struct image *img, struct wset_space *s)
{
	*s = (struct wset_space){
		.src_size = (img->h.region_len + 4095) & ~4095ull,
		.page_size = 4096,
	};
	memcpy(s->src_id, img->h.id, sizeof(img->h.id));
	memcpy(s->src_id + 16, &img->h.region_len, 8);
}

/* ------------------------------------------------------------------------
 * Merging and summing up.
 */

/* One entry of one set, where it stood in it (0 first, 1 last). */
struct mentry {
	uint32_t space;
	uint64_t page;
	uint32_t set;
	double pos;
};

static int cmp_mentry(const void *a, const void *b)
{
	const struct mentry *x = a, *y = b;

	if (x->space != y->space)
		return x->space < y->space ? -1 : 1;
	if (x->page != y->page)
		return x->page < y->page ? -1 : 1;
	return x->set < y->set ? -1 : x->set > y->set;
}

static int cmp_pos(const void *a, const void *b)
{
	const struct mentry *x = a, *y = b;

	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int merge_check(const struct wset *in, size_t n, const char **why)
{
	*why = "the working sets are of different sources";
	for (size_t i = 1; i < n; i++) {
		if (in[i].nr_spaces != in[0].nr_spaces)
			return -EINVAL;
		for (uint32_t k = 0; k < in[0].nr_spaces; k++)
			if (!wset_space_match(&in[i].spaces[k],
					      &in[0].spaces[k]))
				return -EINVAL;
	}
	return 0;
}

/*
 * Keep of @all's groups (one per page, sorted) those seen in at least
 * @min sets, each at its mean position; returns how many, in @all.
 */
static uint64_t merge_keep(struct mentry *all, uint64_t n, unsigned int min)
{
	uint64_t out = 0;

	for (uint64_t i = 0; i < n;) {
		uint64_t j = i;
		unsigned int sets = 0;
		double sum = 0;

		for (; j < n && all[j].space == all[i].space &&
		       all[j].page == all[i].page;
		     j++)
			if (j == i || all[j].set != all[j - 1].set) {
				sets++;
				sum += all[j].pos;
			}
		if (sets >= min) {
			all[out] = all[i];
			all[out++].pos = sum / sets;
		}
		i = j;
	}
	return out;
}

/*
 * wset_merge() - the pages seen in at least @min_count of the @n sets
 * @in (1 <= min_count <= n), in the order of their mean position in the
 * sets they are in. Returns 0, -EINVAL (sets of different sources, a bad
 * count; *why), -ENOMEM.
 */
int wset_merge(const struct wset *in, size_t n, unsigned int min_count,
	       struct wset *out, const char **why)
{
	uint64_t total = 0, k = 0;
	struct mentry *all;
	int ret;

	*why = "the count must be between 1 and the number of sets";
	if (!n || !min_count || min_count > n)
		return -EINVAL;
	ret = merge_check(in, n, why);
	if (ret)
		return ret;
	for (size_t i = 0; i < n; i++)
		total += in[i].nr;
	*why = "out of memory";
	all = malloc((total ? total : 1) * sizeof(*all));
	*out = (struct wset){ .nr_spaces = in[0].nr_spaces };
	out->spaces = malloc(out->nr_spaces * sizeof(*out->spaces));
	if (!all || !out->spaces)
		goto nomem;
	memcpy(out->spaces, in[0].spaces, out->nr_spaces * sizeof(*out->spaces));
	for (size_t i = 0; i < n; i++)
		for (uint64_t j = 0; j < in[i].nr; j++)
			all[k++] = (struct mentry){
				in[i].e[j].space, in[i].e[j].page, (uint32_t)i,
				(double)j / (double)in[i].nr };
	qsort(all, total, sizeof(*all), cmp_mentry);
	out->nr = merge_keep(all, total, min_count);
	qsort(all, out->nr, sizeof(*all), cmp_pos);
	out->e = malloc((out->nr ? out->nr : 1) * sizeof(*out->e));
	if (!out->e)
		goto nomem;
	for (uint64_t i = 0; i < out->nr; i++)
		out->e[i] = (struct wset_entry){ all[i].space, 0, all[i].page };
	free(all);
	return 0;
nomem:
	free(all);
	wset_free(out);
	return -ENOMEM;
}


/* Entry @i of the set being deduplicated, for cmp_at(). */
static const struct wset_entry *dedupe_e;

static int cmp_at(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	int c = cmp_entry(&dedupe_e[x], &dedupe_e[y]);

	return c ? c : x < y ? -1 : x > y;
}

/*
 * wset_dedupe() - keep the first of the entries of @ws that name the same
 * page (the processes of a fork share a space of the set, and may both
 * fault on a page), in order. Returns 0 or -ENOMEM (@ws unchanged).
 * Context: any thread (the sort's key is under a lock of its own).
 */
int wset_dedupe(struct wset *ws)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	uint64_t *at = malloc((ws->nr ? ws->nr : 1) * sizeof(*at)), out = 0;
	uint8_t *dup = calloc(ws->nr ? ws->nr : 1, 1);

	if (!at || !dup) {
		free(at);
		free(dup);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < ws->nr; i++)
		at[i] = i;
	pthread_mutex_lock(&lock);
	dedupe_e = ws->e;
	qsort(at, ws->nr, sizeof(*at), cmp_at);
	pthread_mutex_unlock(&lock);
	for (uint64_t i = 1; i < ws->nr; i++)
		dup[at[i]] = !cmp_entry(&ws->e[at[i]], &ws->e[at[i - 1]]);
	for (uint64_t i = 0; i < ws->nr; i++)
		if (!dup[i])
			ws->e[out++] = ws->e[i];
	ws->nr = out;
	free(at);
	free(dup);
	return 0;
}

/*
 * wset_ranges() - runs of consecutive pages of one space in @ws, and so
 * the reads a replay makes at most. Sorts a copy; 0 on no memory.
 */
uint64_t wset_ranges(const struct wset *ws)
{
	struct wset_entry *e = malloc((ws->nr ? ws->nr : 1) * sizeof(*e));
	uint64_t runs = 0;

	if (!e)
		return 0;
	memcpy(e, ws->e, ws->nr * sizeof(*e));
	qsort(e, ws->nr, sizeof(*e), cmp_entry);
	for (uint64_t i = 0; i < ws->nr; i++)
		if (!i || e[i].space != e[i - 1].space ||
		    e[i].page > e[i - 1].page + 1)
			runs++;
	free(e);
	return runs;
}

/* ------------------------------------------------------------------------
 * What a replay reads.
 */

static int cmp_span(const void *a, const void *b)
{
	const struct wset_span *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/* Join sorted windows @w (n) in place where they overlap or touch, into
 * spans of at most @max bytes; returns how many. */
static size_t spans_join(struct wset_span *w, size_t n, uint64_t max)
{
	size_t out = 0;

	for (size_t i = 0; i < n;) {
		uint64_t a = w[i].off, b = w[i].off + w[i].len;

		for (i++; i < n && w[i].off <= b; i++) {
			uint64_t e = w[i].off + w[i].len;

			if ((e > b ? e : b) - a > max)
				break;
			b = e > b ? e : b;
		}
		w[out++] = (struct wset_span){ a, b - a };
	}
	return out;
}

/*
 * The runs of set space @k: its pages (clipped to the source), sorted by
 * source offset, joined where they touch into runs of at most @max bytes.
 * Returns how many are in *out (the caller frees it), or -ENOMEM.
 */
static ssize_t plan_runs(const struct wset *ws, uint32_t k, uint64_t max,
			 struct wset_span **out)
{
	const struct wset_space *s = &ws->spaces[k];
	struct wset_span *w = malloc((ws->nr ? ws->nr : 1) * sizeof(*w));
	size_t n = 0;

	if (!w)
		return -ENOMEM;
	for (uint64_t i = 0; i < ws->nr; i++) {
		uint64_t off = ws->e[i].page * s->page_size;

		if (ws->e[i].space != k)
			continue;
		w[n++] = (struct wset_span){
			off, (off + s->page_size < s->src_size
				      ? off + s->page_size
				      : s->src_size) - off };
	}
	qsort(w, n, sizeof(*w), cmp_span);
	*out = w;
	return (ssize_t)spans_join(w, n, max);
}

/*
 * The runs @s[i..return) that one read covers: the next ones while they
 * start less than @gap after the previous one's end and the read stays
 * within @max bytes (reading a gap costs less than another read). At
 * least one.
 */
static size_t plan_read_end(const struct wset_span *s, size_t i, size_t n,
			    uint64_t gap, uint64_t max)
{
	size_t j = i + 1;

	while (j < n && s[j].off <= s[j - 1].off + s[j - 1].len + gap &&
	       s[j].off + s[j].len - s[i].off <= max)
		j++;
	return j;
}

/*
 * wset_plan() - the replay of set space @k, for the library's restores
 * and the daemon's sessions alike: the runs of consecutive pages it
 * installs, and the reads, in source order, that fetch them - runs less
 * than WSET_READ_GAP apart read at once, up to WSET_READ_MAX bytes (the
 * gaps are read, not installed). Returns 0 or -ENOMEM; wset_plan_free()
 * it either way.
 */
int wset_plan(const struct wset *ws, uint32_t k, struct wset_plan *p)
{
	struct wset_span *runs;
	ssize_t n = plan_runs(ws, k, WSET_READ_MAX, &runs);

	*p = (struct wset_plan){ 0 };
	if (n < 0)
		return (int)n;
	p->runs = runs;
	p->nr_runs = (size_t)n;
	p->reads = malloc((p->nr_runs + 1) * sizeof(*p->reads));
	if (!p->reads)
		return -ENOMEM;
	for (size_t i = 0; i < p->nr_runs;
	     i = plan_read_end(p->runs, i, p->nr_runs, WSET_READ_GAP,
			       WSET_READ_MAX))
		p->reads[p->nr_reads++] = i;
	p->reads[p->nr_reads] = p->nr_runs;
	return 0;
}

/* Source [off, off + len) of read @k of @p: its first run to its last. */
struct wset_span wset_plan_read(const struct wset_plan *p, size_t k)
{
	const struct wset_span *a = &p->runs[p->reads[k]];
	const struct wset_span *z = &p->runs[p->reads[k + 1] - 1];

	return (struct wset_span){ a->off, z->off + z->len - a->off };
}

void wset_plan_free(struct wset_plan *p)
{
	free(p->runs);
	free(p->reads);
	*p = (struct wset_plan){ 0 };
}

/* ------------------------------------------------------------------------
 * The recorder.
 */

void wset_rec_init(struct wset_rec *r)
{
	*r = (struct wset_rec){ 0 };
	pthread_mutex_init(&r->lock, NULL);
}

/*
 * wset_rec_space() - the index of space @sp in @r's table (added if new).
 * Returns 0, or -ENOMEM / -E2BIG (then nothing of it is recorded).
 */
int wset_rec_space(struct wset_rec *r, const struct wset_space *sp,
		   uint32_t *index)
{
	struct wset_space *v;
	int ret = 0;

	pthread_mutex_lock(&r->lock);
	for (uint32_t i = 0; i < r->set.nr_spaces; i++)
		if (wset_space_match(&r->set.spaces[i], sp)) {
			*index = i;
			goto out;
		}
	ret = -E2BIG;
	if (r->set.nr_spaces == WSET_MAX_SPACES)
		goto out;
	ret = -ENOMEM;
	v = realloc(r->set.spaces, (r->set.nr_spaces + 1) * sizeof(*v));
	if (!v)
		goto out;
	r->set.spaces = v;
	v[r->set.nr_spaces] = *sp;
	*index = r->set.nr_spaces++;
	ret = 0;
out:
	pthread_mutex_unlock(&r->lock);
	return ret;
}

/*
 * wset_rec_add() - page @page of space @space was touched first now. The
 * caller notes each page once. Context: any thread; no I/O.
 */
void wset_rec_add(struct wset_rec *r, uint32_t space, uint64_t page)
{
	pthread_mutex_lock(&r->lock);
	if (r->set.nr == r->cap) {
		uint64_t cap = r->cap ? 2 * r->cap : 4096;
		struct wset_entry *e = realloc(r->set.e, cap * sizeof(*e));

		if (!e) {
			r->err = -ENOMEM;
			goto out;
		}
		r->set.e = e;
		r->cap = cap;
	}
	r->set.e[r->set.nr++] = (struct wset_entry){ space, 0, page };
out:
	pthread_mutex_unlock(&r->lock);
}

/*
 * wset_rec_copy() - what @r holds now, as a set of its own (for
 * wset_write_fd() or wset_save(), outside the recorder's lock). A
 * recorder that lost an entry gives nothing: a set is complete or not
 * written. Returns 0, -ENOMEM (an entry lost, or no memory now), or
 * -ENODATA (no space was ever noted: nothing to tie a set to).
 */
int wset_rec_copy(struct wset_rec *r, struct wset *out)
{
	int ret = -ENOMEM;

	*out = (struct wset){ 0 };
	pthread_mutex_lock(&r->lock);
	out->nr_spaces = r->set.nr_spaces;
	out->nr = r->set.nr;
	out->spaces = malloc((out->nr_spaces ? out->nr_spaces : 1) *
			     sizeof(*out->spaces));
	out->e = malloc((out->nr ? out->nr : 1) * sizeof(*out->e));
	if (out->spaces && out->e) {
		memcpy(out->spaces, r->set.spaces,
		       out->nr_spaces * sizeof(*out->spaces));
		memcpy(out->e, r->set.e, out->nr * sizeof(*out->e));
		ret = r->err;
	}
	pthread_mutex_unlock(&r->lock);
	if (!ret && !out->nr_spaces)
		ret = -ENODATA;
	if (ret)
		wset_free(out);
	return ret;
}

void wset_rec_free(struct wset_rec *r)
{
	wset_free(&r->set);
	pthread_mutex_destroy(&r->lock);
}
