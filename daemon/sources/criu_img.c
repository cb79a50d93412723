/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * criu_img.c - CRIU dump directories: the image framing, the parsers of
 * the images faultd reads, and a task's memory as a source (criu.h).
 *
 * An image file is a u32 IMG_COMMON_MAGIC (not in inventory.img), a u32
 * magic of its type, then (u32 size, protobuf message of size bytes)*,
 * in the host's byte order. Every file is read whole at open and checked;
 * afterwards a dump is immutable, so its tasks' tables are read without
 * locks and a source's read() is one pread-like io_uring read per piece.
 */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "common.h"
#include "criu-mem.h"
#include "criu-images.pb-c.h"
#include "lib.h"

/* mmap flags and CRIU's VMA status bits of a VMA CRIU registers. */
#define VMA_AREA_VSYSCALL (1u << 2)
#define VMA_AREA_VDSO (1u << 3)
#define VMA_AREA_VVAR (1u << 12)
#define CRIU_TASK_ALIVE 1u
#define CRIU_TASK_DEAD 2u	/* a zombie */
#define CRIU_TASK_STOPPED 3u
#define CRIU_FILE_MAX (1ull << 32) /* a bound on one metadata image */

/* A whole image file in memory, and the reader's position in it. */
struct img_file {
	char name[64];
	uint8_t *data;
	size_t len, pos;
	unsigned int nr;	/* messages read so far */
};

struct criu_dump {
	int dfd;
	char *dir;		/* as opened: what a kept source names */
	struct criu_task *tasks;
	struct task_mem *mem;	/* per task; zombies have none */
	size_t nr_tasks;
	struct img_file inventory;
};

/* ---- framing ---- */

static int read_whole(int fd, uint8_t *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = read(fd, buf + done, len - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EBADMSG; /* shrank while we read it */
		done += (size_t)n;
	}
	return 0;
}

static uint32_t get_u32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* Check the head of @f: the common magic (but in inventory.img), the type's. */
static int img_check_magic(struct img_file *f, uint32_t magic, char *why,
			   size_t whylen)
{
	size_t need = magic == CRIU_INVENTORY_MAGIC ? 4 : 8;

	if (f->len < need)
		return why_set(why, whylen, -EBADMSG,
			       "%s: truncated in its magic (%zu bytes)",
			       f->name, f->len);
	if (need == 8 && get_u32(f->data) != CRIU_IMG_COMMON_MAGIC)
		return why_set(why, whylen, -EBADMSG,
			       "%s: not a CRIU image (head magic %#x)",
			       f->name, get_u32(f->data));
	if (get_u32(f->data + need - 4) != magic)
		return why_set(why, whylen, -EBADMSG,
			       "%s: magic %#x, expected %#x", f->name,
			       get_u32(f->data + need - 4), magic);
	f->pos = need;
	return 0;
}

/*
 * img_load() - read @name (in @dfd) whole and check its magics. Returns 0,
 * -ENOENT when the file is missing, -EBADMSG, or what open/read said.
 */
static int img_load(int dfd, const char *name, uint32_t magic,
		    struct img_file *f, char *why, size_t whylen)
{
	struct stat st;
	int fd, err;

	memset(f, 0, sizeof(*f));
	snprintf(f->name, sizeof(f->name), "%s", name);
	fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return why_set(why, whylen, -errno, "%s: %s", name,
			       strerror(errno));
	err = fstat(fd, &st) ? -errno : 0;
	if (!err && (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > CRIU_FILE_MAX))
		err = why_set(why, whylen, -EBADMSG,
			      "%s: not a regular file of at most 4 GiB", name);
	if (!err && !(f->data = malloc((size_t)st.st_size + 1)))
		err = -ENOMEM;
	if (!err && (err = read_whole(fd, f->data, (size_t)st.st_size)))
		why_set(why, whylen, err, "%s: %s", name, strerror(-err));
	close(fd);
	f->len = err ? 0 : (size_t)st.st_size;
	if (!err)
		err = img_check_magic(f, magic, why, whylen);
	if (err) {
		free(f->data);
		f->data = NULL;
	}
	return err;
}

static void img_free(struct img_file *f)
{
	free(f->data);
	f->data = NULL;
}

/*
 * img_next() - the next message of @f: 1 and the bytes in *msg and *len, 0 at
 * the end of the file, or -EBADMSG when it is cut or oversized.
 */
static int img_next(struct img_file *f, const uint8_t **msg, size_t *len,
		    char *why, size_t whylen)
{
	size_t left = f->len - f->pos;
	uint32_t size;

	if (!left)
		return 0;
	if (left < 4)
		return why_set(why, whylen, -EBADMSG,
			       "%s: truncated in the size of message %u",
			       f->name, f->nr);
	size = get_u32(f->data + f->pos);
	if (size > CRIU_MSG_MAX || size > left - 4)
		return why_set(why, whylen, -EBADMSG,
			       "%s: message %u of %u bytes, %zu left in the "
			       "file", f->name, f->nr, size, left - 4);
	*msg = f->data + f->pos + 4;
	*len = size;
	f->pos += 4 + (size_t)size;
	f->nr++;
	return 1;
}

/*
 * IMG_UNPACK() - the next message of @f unpacked as @type (a protobuf-c
 * message name, e.g. faultd_criu__pstree_entry): 1 and *out, 0 at the
 * end, -EBADMSG when the bytes are not such a message.
 */
#define IMG_UNPACK(type, f, out, why, whylen)                                  \
	({                                                                     \
		const uint8_t *m_;                                             \
		size_t l_;                                                     \
		int r_ = img_next((f), &m_, &l_, (why), (whylen));             \
		if (r_ > 0) {                                                  \
			*(out) = type##__unpack(NULL, l_, m_);                 \
			if (!*(out))                                           \
				r_ = why_set((why), (whylen), -EBADMSG,        \
					     "%s: message %u does not parse",  \
					     (f)->name, (f)->nr - 1);          \
		}                                                              \
		r_;                                                            \
	})

/*
 * img_first() - the first message of the image @name (in @dfd), checked
 * against @magic and unpacked as @desc says, in *out (to
 * protobuf_c_message_free_unpacked()). Returns 0 or -errno with @why;
 * an image with no message is -EBADMSG.
 */
static int img_first(int dfd, const char *name, uint32_t magic,
		     const ProtobufCMessageDescriptor *desc,
		     ProtobufCMessage **out, char *why, size_t whylen)
{
	struct img_file f;
	const uint8_t *m;
	size_t l;
	int err;

	err = img_load(dfd, name, magic, &f, why, whylen);
	if (err)
		return err;
	err = img_next(&f, &m, &l, why, whylen);
	if (err == 0)
		err = why_set(why, whylen, -EBADMSG, "%s: empty", name);
	if (err > 0 && !(*out = protobuf_c_message_unpack(desc, NULL, l, m)))
		err = why_set(why, whylen, -EBADMSG,
			      "%s: message 0 does not parse", name);
	img_free(&f);
	return err < 0 ? err : 0;
}

/* ---- inventory.img, pstree.img, core-PID.img ---- */

static int load_inventory(struct criu_dump *d, char *why, size_t whylen)
{
	FaultdCriu__InventoryEntry *e;
	int err;

	err = img_load(d->dfd, "inventory.img", CRIU_INVENTORY_MAGIC,
		       &d->inventory, why, whylen);
	if (err)
		return err;
	err = IMG_UNPACK(faultd_criu__inventory_entry, &d->inventory, &e, why,
			 whylen);
	if (err == 0)
		return why_set(why, whylen, -EBADMSG, "inventory.img: empty");
	if (err < 0)
		return err;
	if (e->img_version != CRIU_IMG_VERSION)
		err = why_set(why, whylen, -EOPNOTSUPP,
			      "inventory.img: images version %u (only %u is "
			      "served)", e->img_version, CRIU_IMG_VERSION);
	faultd_criu__inventory_entry__free_unpacked(e, NULL);
	return err < 0 ? err : 0;
}

static const struct criu_task *task_find(const struct criu_dump *d,
					 pid_t pid, size_t *idx)
{
	for (size_t i = 0; i < d->nr_tasks; i++)
		if (d->tasks[i].pid == pid) {
			if (idx)
				*idx = i;
			return &d->tasks[i];
		}
	return NULL;
}

/* One pstree entry: a pid not seen before, and a parent seen before. */
static int pstree_add(struct criu_dump *d, const FaultdCriu__PstreeEntry *e,
		      char *why, size_t whylen)
{
	struct criu_task *t = &d->tasks[d->nr_tasks];

	if (!e->pid || e->pid > INT32_MAX || e->ppid > INT32_MAX)
		return why_set(why, whylen, -EBADMSG,
			       "pstree.img: pid %u, ppid %u", e->pid, e->ppid);
	if (task_find(d, (pid_t)e->pid, NULL))
		return why_set(why, whylen, -EBADMSG,
			       "pstree.img: pid %u twice", e->pid);
	if (d->nr_tasks == 0 ? e->ppid != 0
			     : !e->ppid || !task_find(d, (pid_t)e->ppid, NULL))
		return why_set(why, whylen, -EBADMSG,
			       "pstree.img: task %u: parent %u is not an "
			       "earlier task", e->pid, e->ppid);
	/* A zombie's thread list holds no pid of use: only count it. */
	*t = (struct criu_task){ .pid = (pid_t)e->pid, .ppid = (pid_t)e->ppid,
				 .nr_threads = (unsigned int)e->n_threads };
	d->nr_tasks++;
	return 0;
}

static int load_pstree(struct criu_dump *d, char *why, size_t whylen)
{
	FaultdCriu__PstreeEntry *e;
	struct img_file f;
	size_t cap = 0;
	int err;

	err = img_load(d->dfd, "pstree.img", CRIU_PSTREE_MAGIC, &f, why,
		       whylen);
	while (!err &&
	       (err = IMG_UNPACK(faultd_criu__pstree_entry, &f, &e, why,
				 whylen)) > 0) {
		if (d->nr_tasks == cap) {
			struct criu_task *n;

			cap = cap ? cap * 2 : 8;
			n = realloc(d->tasks, cap * sizeof(*n));
			if (!n) {
				err = -ENOMEM;
				faultd_criu__pstree_entry__free_unpacked(e, NULL);
				break;
			}
			d->tasks = n;
		}
		err = pstree_add(d, e, why, whylen);
		faultd_criu__pstree_entry__free_unpacked(e, NULL);
	}
	img_free(&f);
	if (!err && !d->nr_tasks)
		err = why_set(why, whylen, -EBADMSG, "pstree.img: no tasks");
	return err;
}

/* Whether task @t is a zombie, from core-PID.img. */
static int load_core(struct criu_dump *d, struct criu_task *t, char *why,
		     size_t whylen)
{
	FaultdCriu__CoreEntry *c;
	char name[32];
	int err;

	snprintf(name, sizeof(name), "core-%d.img", (int)t->pid);
	err = img_first(d->dfd, name, CRIU_CORE_MAGIC,
			&faultd_criu__core_entry__descriptor,
			(ProtobufCMessage **)&c, why, whylen);
	if (err)
		return err;
	if (!c->tc)
		err = why_set(why, whylen, -EBADMSG, "%s: no task state", name);
	else if (c->tc->task_state == CRIU_TASK_DEAD)
		t->zombie = true;
	else if (c->tc->task_state != CRIU_TASK_ALIVE &&
		 c->tc->task_state != CRIU_TASK_STOPPED)
		err = why_set(why, whylen, -EBADMSG, "%s: task state %u",
			      name, c->tc->task_state);
	faultd_criu__core_entry__free_unpacked(c, NULL);
	return err;
}

/* ---- mm-PID.img, pagemap-PID.img: a task's pieces ---- */

/* A VMA of mm-PID.img, and whether criu restore registers it with uffd. */
struct vma {
	uint64_t start, end;
	bool lazy;
};

/* A pagemap entry, its flags made explicit as CRIU's reader does. */
struct pme {
	uint64_t start, end;
	uint32_t flags;
	uint64_t file_off;	/* CRIU_PE_PRESENT: where its data starts */
};

/* vma_entry_can_be_lazy() of CRIU's include/vma.h. */
static bool vma_can_be_lazy(const FaultdCriu__VmaEntry *v)
{
	return (v->flags & MAP_ANONYMOUS) && (v->flags & MAP_PRIVATE) &&
	       !(v->flags & MAP_LOCKED) && !(v->flags & MAP_HUGETLB) &&
	       !(v->status &
		 (VMA_AREA_VDSO | VMA_AREA_VVAR | VMA_AREA_VSYSCALL));
}

static int load_vmas(struct criu_dump *d, pid_t pid, struct vma **vp,
		     size_t *np, char *why, size_t whylen)
{
	FaultdCriu__MmEntry *mm;
	char name[32];
	int err;

	snprintf(name, sizeof(name), "mm-%d.img", (int)pid);
	err = img_first(d->dfd, name, CRIU_MM_MAGIC,
			&faultd_criu__mm_entry__descriptor,
			(ProtobufCMessage **)&mm, why, whylen);
	if (err)
		return err;
	*vp = calloc(mm->n_vmas ? mm->n_vmas : 1, sizeof(**vp));
	if (!*vp)
		err = -ENOMEM;
	for (size_t i = 0; !err && i < mm->n_vmas; i++) {
		const FaultdCriu__VmaEntry *v = mm->vmas[i];

		if (v->start >= v->end || (v->start | v->end) % CRIU_PAGE_SIZE ||
		    (i && v->start < (*vp)[i - 1].end))
			err = why_set(why, whylen, -EBADMSG,
				      "%s: VMA %zu [%#llx, %#llx) is empty, "
				      "unaligned or out of order", name, i,
				      (unsigned long long)v->start,
				      (unsigned long long)v->end);
		(*vp)[i] = (struct vma){ v->start, v->end, vma_can_be_lazy(v) };
	}
	*np = mm->n_vmas;
	faultd_criu__mm_entry__free_unpacked(mm, NULL);
	if (err) {
		free(*vp);
		*vp = NULL;
	}
	return err;
}

/*
 * One pagemap entry, checked and made explicit (CRIU's
 * init_compat_pagemap_entry(): in_parent means PE_PARENT, no flags means
 * PE_PRESENT, no nr_pages means compat_nr_pages).
 */
static int pme_make(const FaultdCriu__PagemapEntry *e, const char *name,
		    unsigned int n, uint64_t prev_end, struct pme *p,
		    char *why, size_t whylen)
{
	uint64_t nr = e->has_nr_pages ? e->nr_pages : e->compat_nr_pages;
	uint32_t flags = e->has_flags ? e->flags : CRIU_PE_PRESENT;

	if (e->has_in_parent && e->in_parent)
		flags = (e->has_flags ? e->flags : 0) | CRIU_PE_PARENT;
	if (flags & CRIU_PE_PARENT)
		return why_set(why, whylen, -EOPNOTSUPP,
			       "%s: entry %u: pages in a parent dump "
			       "(incremental dumps are not served)", name, n);
	if (flags & ~(CRIU_PE_LAZY | CRIU_PE_PRESENT) || !flags)
		return why_set(why, whylen, -EBADMSG,
			       "%s: entry %u: flags %#x", name, n, flags);
	if (!nr || e->vaddr % CRIU_PAGE_SIZE || e->vaddr < prev_end ||
	    nr > (UINT64_MAX - e->vaddr) / CRIU_PAGE_SIZE)
		return why_set(why, whylen, -EBADMSG,
			       "%s: entry %u: %llu pages at %#llx: empty, "
			       "unaligned, out of order or past the end",
			       name, n, (unsigned long long)nr,
			       (unsigned long long)e->vaddr);
	p->start = e->vaddr;
	p->end = e->vaddr + nr * CRIU_PAGE_SIZE;
	p->flags = flags;
	return 0;
}

struct pagemap {
	struct pme *e;
	size_t nr, cap;
	uint32_t pages_id;
	uint64_t present_bytes;
};

static int pagemap_push(struct pagemap *pm, const struct pme *p)
{
	if (pm->nr == pm->cap) {
		size_t cap = pm->cap ? pm->cap * 2 : 64;
		struct pme *n = realloc(pm->e, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		pm->e = n;
		pm->cap = cap;
	}
	pm->e[pm->nr] = *p;
	if (p->flags & CRIU_PE_PRESENT) {
		pm->e[pm->nr].file_off = pm->present_bytes;
		pm->present_bytes += p->end - p->start;
	}
	pm->nr++;
	return 0;
}

/* The head and the entries of @f, parsed into @pm. */
static int pagemap_parse(struct img_file *f, struct pagemap *pm, char *why,
			 size_t whylen)
{
	FaultdCriu__PagemapHead *h;
	FaultdCriu__PagemapEntry *e;
	int err;

	err = IMG_UNPACK(faultd_criu__pagemap_head, f, &h, why, whylen);
	if (err == 0)
		return why_set(why, whylen, -EBADMSG, "%s: no head", f->name);
	if (err < 0)
		return err;
	pm->pages_id = h->pages_id;
	faultd_criu__pagemap_head__free_unpacked(h, NULL);
	while ((err = IMG_UNPACK(faultd_criu__pagemap_entry, f, &e, why,
				 whylen)) > 0) {
		struct pme p;

		err = pme_make(e, f->name, f->nr - 1,
			       pm->nr ? pm->e[pm->nr - 1].end : 0, &p, why,
			       whylen);
		faultd_criu__pagemap_entry__free_unpacked(e, NULL);
		if (!err)
			err = pagemap_push(pm, &p);
		if (err)
			return err;
	}
	return err;
}

/* Append one piece to @m. */
static int piece_push(struct task_mem *m, size_t *cap, uint64_t start,
		      uint64_t end, enum src_kind kind, uint64_t file_off)
{
	if (m->nr == *cap) {
		size_t c = *cap ? *cap * 2 : 64;
		struct piece *n = realloc(m->p, c * sizeof(*n));

		if (!n)
			return -ENOMEM;
		m->p = n;
		*cap = c;
	}
	m->p[m->nr++] = (struct piece){ start, end - start, file_off, kind };
	return 0;
}

/*
 * The pieces of one VMA CRIU registers: DATA where lazy entries are (cut
 * at the VMA's ends), ZERO in between. *li walks the lazy entries.
 */
static int vma_pieces(struct task_mem *m, size_t *cap, const struct vma *v,
		      const struct pagemap *pm, size_t *li)
{
	uint64_t at = v->start;
	int err = 0;

	for (; !err && *li < pm->nr; (*li)++) {
		const struct pme *e = &pm->e[*li];
		uint64_t s = e->start > v->start ? e->start : v->start;
		uint64_t t = e->end < v->end ? e->end : v->end;

		if (!(e->flags & CRIU_PE_LAZY))
			continue;
		if (s >= v->end)
			break;
		if (s > at)
			err = piece_push(m, cap, at, s, SRC_ZERO, 0);
		if (!err)
			err = piece_push(m, cap, s, t, SRC_DATA,
					 e->file_off + (s - e->start));
		at = t;
		if (e->end > v->end)
			break; /* the rest lies in the next VMA */
	}
	if (!err && at < v->end)
		err = piece_push(m, cap, at, v->end, SRC_ZERO, 0);
	return err;
}

/* Is every page of every lazy entry inside a VMA CRIU registers? */
static int check_lazy_in_vmas(const struct pagemap *pm, const struct vma *v,
			      size_t nv, const char *name, char *why,
			      size_t whylen)
{
	size_t j = 0;

	for (size_t i = 0; i < pm->nr; i++) {
		uint64_t at = pm->e[i].start;

		if (!(pm->e[i].flags & CRIU_PE_LAZY))
			continue;
		while (at < pm->e[i].end) {
			while (j < nv && v[j].end <= at)
				j++;
			if (j == nv || v[j].start > at || !v[j].lazy)
				return why_set(why, whylen, -EBADMSG,
					       "%s: lazy pages at %#llx are "
					       "not in a private anonymous VMA",
					       name, (unsigned long long)at);
			at = v[j].end;
		}
	}
	return 0;
}

static int mem_pieces(struct task_mem *m, const struct pagemap *pm,
		      const struct vma *v, size_t nv)
{
	size_t cap = 0, li = 0, nl = 0;
	int err = 0;

	for (size_t i = 0; !err && i < nv; i++)
		if (v[i].lazy)
			err = vma_pieces(m, &cap, &v[i], pm, &li);
	if (err)
		return err;
	for (size_t i = 0; i < m->nr; i++)
		nl += m->p[i].kind == SRC_DATA;
	m->lazy = calloc(nl ? nl : 1, sizeof(*m->lazy));
	if (!m->lazy)
		return -ENOMEM;
	for (size_t i = 0; i < m->nr; i++)
		if (m->p[i].kind == SRC_DATA)
			m->lazy[m->nr_lazy++] =
				(struct criu_range){ m->p[i].start, m->p[i].len };
	m->size = nv ? v[nv - 1].end : 0;
	for (size_t i = 0; i < pm->nr; i++)
		if ((pm->e[i].flags & (CRIU_PE_LAZY | CRIU_PE_PRESENT)) ==
		    CRIU_PE_LAZY)
			m->remote = true;
	return 0;
}

/* pages-N.img: open it and check it holds what the pagemap says. */
static int open_pages(struct criu_dump *d, const struct pagemap *pm,
		      const char *pmname, struct task_mem *m, char *why,
		      size_t whylen)
{
	struct stat st;
	char name[32];

	snprintf(name, sizeof(name), "pages-%u.img", pm->pages_id);
	m->pages_fd = openat(d->dfd, name, O_RDONLY | O_CLOEXEC);
	if (m->pages_fd < 0)
		return why_set(why, whylen, -errno, "%s (of %s): %s", name,
			       pmname, strerror(errno));
	if (fstat(m->pages_fd, &st))
		return why_set(why, whylen, -errno, "%s: %s", name,
			       strerror(errno));
	if ((uint64_t)st.st_size < pm->present_bytes)
		return why_set(why, whylen, -EBADMSG,
			       "%s: truncated: %llu bytes, %s needs %llu",
			       name, (unsigned long long)st.st_size, pmname,
			       (unsigned long long)pm->present_bytes);
	return 0;
}

/* What a working set recorded against this task's source is tied to. */
static void mem_id(const struct criu_dump *d, pid_t pid,
		   const struct img_file *pmf, uint8_t id[32])
{
	crypto_generichash_state st;
	uint32_t p = (uint32_t)pid;

	crypto_generichash_init(&st, NULL, 0, 32);
	crypto_generichash_update(&st, (const uint8_t *)"faultd-criu-1", 13);
	crypto_generichash_update(&st, d->inventory.data, d->inventory.len);
	crypto_generichash_update(&st, (const uint8_t *)&p, sizeof(p));
	crypto_generichash_update(&st, pmf->data, pmf->len);
	crypto_generichash_final(&st, id, 32);
}

void criu_mem_free(struct task_mem *m)
{
	free(m->p);
	free(m->lazy);
	if (m->pages_fd >= 0)
		close(m->pages_fd);
	memset(m, 0, sizeof(*m));
	m->pages_fd = -1;
}

static int load_mem(struct criu_dump *d, pid_t pid, struct task_mem *m,
		    char *why, size_t whylen)
{
	struct pagemap pm = { 0 };
	struct img_file f;
	struct vma *v = NULL;
	size_t nv = 0;
	char name[32];
	int err;

	m->pages_fd = -1;
	err = load_vmas(d, pid, &v, &nv, why, whylen);
	if (err)
		return err;
	snprintf(name, sizeof(name), "pagemap-%d.img", (int)pid);
	err = img_load(d->dfd, name, CRIU_PAGEMAP_MAGIC, &f, why, whylen);
	if (err)
		goto out_vmas;
	err = pagemap_parse(&f, &pm, why, whylen);
	if (!err)
		err = check_lazy_in_vmas(&pm, v, nv, name, why, whylen);
	if (!err)
		err = open_pages(d, &pm, name, m, why, whylen);
	m->pages_id = pm.pages_id;
	if (!err)
		err = mem_pieces(m, &pm, v, nv);
	if (!err)
		mem_id(d, pid, &f, m->id);
	free(pm.e);
	img_free(&f);
out_vmas:
	free(v);
	return err;
}

/* ---- the dump ---- */

int criu_dump_open(const char *dir, struct criu_dump **dp, char *why,
		   size_t whylen)
{
	struct criu_dump *d;
	int err;

	if (why && whylen)
		why[0] = '\0';
	if (sodium_init() < 0)
		return why_set(why, whylen, -ENOMEM, "libsodium: no init");
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d->dfd < 0) {
		err = why_set(why, whylen, -errno, "%s: %s", dir,
			      strerror(errno));
		free(d);
		return err;
	}
	d->dir = strdup(dir);
	err = d->dir ? 0 : -ENOMEM;
	if (!err)
		err = load_inventory(d, why, whylen);
	if (!err)
		err = load_pstree(d, why, whylen);
	if (!err && !(d->mem = calloc(d->nr_tasks, sizeof(*d->mem))))
		err = -ENOMEM;
	for (size_t i = 0; !err && i < d->nr_tasks; i++) {
		d->mem[i].pages_fd = -1;
		err = load_core(d, &d->tasks[i], why, whylen);
		if (!err && !d->tasks[i].zombie)
			err = load_mem(d, d->tasks[i].pid, &d->mem[i], why,
				       whylen);
	}
	if (err) {
		criu_dump_close(d);
		return err;
	}
	*dp = d;
	return 0;
}

void criu_dump_close(struct criu_dump *d)
{
	if (!d)
		return;
	for (size_t i = 0; d->mem && i < d->nr_tasks; i++)
		criu_mem_free(&d->mem[i]);
	free(d->mem);
	free(d->tasks);
	img_free(&d->inventory);
	close(d->dfd);
	free(d->dir);
	free(d);
}

size_t criu_dump_tasks(const struct criu_dump *d,
		       const struct criu_task **tasks)
{
	*tasks = d->tasks;
	return d->nr_tasks;
}

/* The memory of live task @pid, or NULL. */
static const struct task_mem *dump_mem(const struct criu_dump *d, pid_t pid)
{
	size_t i;
	const struct criu_task *t = task_find(d, pid, &i);

	return t && !t->zombie ? &d->mem[i] : NULL;
}

ssize_t criu_task_lazy(const struct criu_dump *d, pid_t pid,
		       const struct criu_range **r)
{
	const struct task_mem *m = dump_mem(d, pid);

	if (!m)
		return -ESRCH;
	*r = m->lazy;
	return (ssize_t)m->nr_lazy;
}

/* ---- the tables, and the source ---- */

/* The index of the last piece that starts at or below @off, or -1. */
static ssize_t piece_at(const struct task_mem *m, uint64_t off)
{
	size_t lo = 0, hi = m->nr;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->p[mid].start <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (ssize_t)lo - 1;
}

int criu_mem_extent(const struct task_mem *m, uint64_t off,
		    struct src_extent *e)
{
	ssize_t i;
	uint64_t from, to;

	if (off >= m->size)
		return -ERANGE;
	i = piece_at(m, off);
	if (i >= 0 && off < m->p[i].start + m->p[i].len) {
		*e = (struct src_extent){ m->p[i].start, m->p[i].len,
					  m->p[i].kind };
		return 0;
	}
	from = i >= 0 ? m->p[i].start + m->p[i].len : 0;
	to = (size_t)(i + 1) < m->nr ? m->p[i + 1].start : m->size;
	*e = (struct src_extent){ from, to - from, SRC_NONE };
	return 0;
}

const struct piece *criu_mem_data(const struct task_mem *m, uint64_t off)
{
	ssize_t i = piece_at(m, off);

	if (i < 0 || m->p[i].kind != SRC_DATA ||
	    off >= m->p[i].start + m->p[i].len)
		return NULL;
	return &m->p[i];
}

int criu_mem_copy(const struct criu_dump *d, pid_t pid, bool with_fd,
		  struct task_mem *out)
{
	const struct task_mem *m = dump_mem(d, pid);

	if (!m)
		return -ESRCH;
	*out = (struct task_mem){ .nr = m->nr, .nr_lazy = m->nr_lazy,
				  .size = m->size, .pages_fd = -1,
				  .pages_id = m->pages_id,
				  .remote = m->remote };
	memcpy(out->id, m->id, sizeof(out->id));
	out->p = malloc((m->nr ? m->nr : 1) * sizeof(*m->p));
	out->lazy = malloc((m->nr_lazy ? m->nr_lazy : 1) * sizeof(*m->lazy));
	if (with_fd)
		out->pages_fd = fcntl(m->pages_fd, F_DUPFD_CLOEXEC, 0);
	if (!out->p || !out->lazy || (with_fd && out->pages_fd < 0)) {
		criu_mem_free(out);
		return -ENOMEM;
	}
	memcpy(out->p, m->p, m->nr * sizeof(*m->p));
	memcpy(out->lazy, m->lazy, m->nr_lazy * sizeof(*m->lazy));
	return 0;
}

/* A source over pages-N.img. */
struct criu_src {
	struct source s;
	struct task_mem m;
	pid_t pid;		/* the task's, in the dump */
	char *dir;		/* the dump's folder, for a reopen */
	char *sums_file;	/* the --sum sidecar it is checked against */
	struct criu_sums *own_sums; /* a reopened source's; else the
				       front end's, which outlive it */
	const uint32_t *sum;	/* per page of pages-N.img; NULL: unchecked */
	uint64_t nr_sum;
	const char *map;	/* pages-N.img mapped read-only; NULL: none */
	size_t map_len;
};

static struct criu_src *to_csrc(struct source *s)
{
	return (struct criu_src *)s;
}

static int csrc_extent(struct source *s, uint64_t off, struct src_extent *e)
{
	return criu_mem_extent(&to_csrc(s)->m, off, e);
}

/* Do the pages read from pages-N.img at @file_off match the sidecar? */
static bool csrc_sums_ok(const struct criu_src *c, uint64_t file_off,
			 const char *buf, size_t len)
{
	for (size_t o = 0; c->sum && o < len; o += CRIU_PAGE_SIZE) {
		uint64_t i = (file_off + o) / CRIU_PAGE_SIZE;

		if (i >= c->nr_sum ||
		    crc32c(0, buf + o, CRIU_PAGE_SIZE) != c->sum[i])
			return false;
	}
	return true;
}

static ssize_t csrc_read(struct source *s, uint64_t off, void *buf,
			 size_t len, unsigned int flags)
{
	const struct task_mem *m = &to_csrc(s)->m;
	size_t done = 0;

	if (!len || (off | len) % CRIU_PAGE_SIZE || len > SSIZE_MAX)
		return -EINVAL;
	while (done < len) {
		uint64_t at = off + done, n;
		const struct piece *p = criu_mem_data(m, at);
		ssize_t got;

		if (!p)
			return -ERANGE;
		n = p->start + p->len - at;
		if (n > len - done)
			n = len - done;
		got = ring_rw(m->pages_fd, false, p->file_off + (at - p->start),
			      (char *)buf + done, (size_t)n);
		if (got != (ssize_t)n)
			return -EIO; /* an error, or truncated underneath */
		if (!csrc_sums_ok(to_csrc(s), p->file_off + (at - p->start),
				  (const char *)buf + done, (size_t)n))
			return -EBADMSG;
		done += (size_t)n;
	}
	return (ssize_t)len;
}

/*
 * [off, off + len) in the mapping of pages-N.img, when its pieces lie
 * back to back there (lazy entries follow each other in the file unless
 * CRIU put other pages between them) and no sidecar checks them.
 */
static const void *csrc_view(struct source *s, uint64_t off, size_t len)
{
	const struct criu_src *c = to_csrc(s);
	uint64_t at = off, first = 0;

	if (!c->map || c->sum)
		return NULL;
	while (at < off + len) {
		const struct piece *p = criu_mem_data(&c->m, at);
		uint64_t f;

		if (!p)
			return NULL;
		f = p->file_off + (at - p->start);
		if (at == off)
			first = f;
		else if (f != first + (at - off))
			return NULL;
		at = p->start + p->len;
	}
	if (first > c->map_len || len > c->map_len - first)
		return NULL;
	return c->map + first;
}

static void csrc_destroy(struct source *s)
{
	struct criu_src *c = to_csrc(s);

	if (c->map)
		munmap((void *)c->map, c->map_len);
	criu_mem_free(&c->m);
	if (c->s.keep_fd > 0)
		close(c->s.keep_fd);
	criu_sums_free(c->own_sums);
	free(c->sums_file);
	free(c->dir);
	free(c);
}

/*
 * What a restarted daemon opens a task's source from: its pid, the dump's
 * folder, the --sum sidecar it is checked against (empty: none). The
 * pages file's own descriptor is kept beside: adoption compares it with
 * the file the folder holds then, so a dump changed since is poisoned.
 */
struct csrc_blob {
	int32_t pid;
	uint16_t dir_len, sums_len;	/* with their NULs */
	char paths[];		/* dir, then the sidecar */
};

static ssize_t csrc_save(struct source *s, void *blob, size_t max)
{
	struct criu_src *c = to_csrc(s);
	const char *sums = c->sums_file ? c->sums_file : "";
	size_t dl = strlen(c->dir) + 1, sl = strlen(sums) + 1;
	struct csrc_blob *b = blob;

	if (max < sizeof(*b) + dl + sl || dl > UINT16_MAX || sl > UINT16_MAX)
		return -E2BIG;
	*b = (struct csrc_blob){ c->pid, (uint16_t)dl, (uint16_t)sl };
	memcpy(b->paths, c->dir, dl);
	memcpy(b->paths + dl, sums, sl);
	return (ssize_t)(sizeof(*b) + dl + sl);
}

/* The blob's paths, checked: both NUL-terminated where they end. */
static bool csrc_blob_ok(const struct csrc_blob *b, size_t len)
{
	return len >= sizeof(*b) && b->dir_len && b->sums_len &&
	       len == sizeof(*b) + b->dir_len + b->sums_len &&
	       !b->paths[b->dir_len - 1] &&
	       !b->paths[b->dir_len + b->sums_len - 1];
}

/* Task @pid's source of the dump in @dir, checked against @sums_file. */
static int csrc_open_dir(const char *dir, const char *sums_file, pid_t pid,
			 struct source **sp, char *why, size_t why_len)
{
	struct criu_sums *sums = NULL;
	struct criu_dump *d = NULL;
	int ret = criu_dump_open(dir, &d, why, why_len);

	if (!ret && sums_file[0])
		ret = criu_sums_load(sums_file, &sums, why, why_len);
	if (!ret && sums)
		ret = criu_dump_sums_match(d, sums, why, why_len);
	if (!ret && (ret = criu_task_source_checked(d, pid, sums, sp)))
		why_set(why, why_len, ret, "task %d: %s", (int)pid,
			 strerror(-ret));
	if (!ret)
		to_csrc(*sp)->own_sums = sums;
	else
		criu_sums_free(sums);
	criu_dump_close(d);
	return ret;
}

static int csrc_reopen(const void *blob, size_t len, int fd,
		       struct source **sp, char *why, size_t why_len)
{
	const struct csrc_blob *b = blob;

	if (fd >= 0)
		close(fd); /* opened again from the folder */
	if (!csrc_blob_ok(b, len))
		return why_set(why, why_len, -EBADMSG, "a corrupt record");
	return csrc_open_dir(b->paths, b->paths + b->dir_len, b->pid, sp, why,
			     why_len);
}

const struct source_type src_criu_type = {
	.name = "criu", .id = 3, .save = csrc_save, .reopen = csrc_reopen,
};

static const struct source_ops criu_src_ops = {
	.name = "criu",
	.type = &src_criu_type,
	.read = csrc_read,
	.extent = csrc_extent,
	.view = csrc_view,
	.destroy = csrc_destroy,
};

/* pages-N.img mapped for csrc_view() (none if it cannot be: read()). */
static void csrc_map(struct criu_src *c)
{
	struct stat st;
	void *p;

	if (c->m.pages_fd < 0 || fstat(c->m.pages_fd, &st) || !st.st_size)
		return;
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED,
		 c->m.pages_fd, 0);
	if (p == MAP_FAILED)
		return;
	c->map = p;
	c->map_len = (size_t)st.st_size;
}

/* The sidecar's sums of the pages file @m reads (NULL: none of it). */
static const uint32_t *mem_sums(const struct task_mem *m,
				const struct criu_sums *sums, uint64_t *nr)
{
	struct stat st;

	if (m->pages_fd < 0 || fstat(m->pages_fd, &st))
		return NULL;
	return criu_sums_of(sums, m->pages_id, (uint64_t)st.st_size, nr);
}

int criu_dump_sums_match(const struct criu_dump *d,
			 const struct criu_sums *sums, char *why,
			 size_t whylen)
{
	uint64_t nr;

	for (size_t i = 0; i < d->nr_tasks; i++)
		if (!d->tasks[i].zombie && !d->mem[i].remote &&
		    !mem_sums(&d->mem[i], sums, &nr))
			return why_set(why, whylen, -EBADMSG,
				       "the sidecar has no sums of "
				       "pages-%u.img as it is now (task %d)",
				       d->mem[i].pages_id,
				       (int)d->tasks[i].pid);
	return 0;
}

int criu_task_source_checked(struct criu_dump *d, pid_t pid,
			     const struct criu_sums *sums, struct source **sp)
{
	const struct task_mem *m = dump_mem(d, pid);
	struct criu_src *c;
	int err;

	if (!m)
		return -ESRCH;
	if (m->remote)
		return -ENODATA;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	err = criu_mem_copy(d, pid, true, &c->m);
	if (!err && sums && !(c->sum = mem_sums(&c->m, sums, &c->nr_sum)))
		err = -EBADMSG;
	if (err) {
		criu_mem_free(&c->m);
		free(c);
		return err;
	}
	c->pid = pid;
	c->dir = strdup(d->dir);
	c->sums_file = sums ? strdup(criu_sums_file(sums)) : NULL;
	if (!c->dir || (sums && !c->sums_file)) {
		csrc_destroy(&c->s);
		return -ENOMEM;
	}
	c->s = (struct source){ .ops = &criu_src_ops, .size = c->m.size,
				.page_size = CRIU_PAGE_SIZE };
	if (!sums)
		csrc_map(c);
	/* What a restarted daemon checks the pages file by (persist.c). */
	c->s.keep_fd = fcntl(c->m.pages_fd, F_DUPFD_CLOEXEC, 3);
	if (c->s.keep_fd < 0)
		c->s.keep_fd = 0;
	memcpy(c->s.id, c->m.id, sizeof(c->s.id));
	*sp = &c->s;
	return 0;
}

int criu_task_source(struct criu_dump *d, pid_t pid, struct source **sp)
{
	return criu_task_source_checked(d, pid, NULL, sp);
}
