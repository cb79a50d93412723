/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * criu-mem.h - a task's memory tables, shared by the two CRIU sources:
 * the dump's own pages (criu_img.c) and a page server's (criu_ps.c).
 * Built at criu_dump_open() and never changed; a source keeps a copy.
 */
#ifndef FAULTD_CRIU_MEM_H
#define FAULTD_CRIU_MEM_H

#include "criu.h"

/* One piece of a task's address space: DATA or ZERO (gaps are NONE). */
struct piece {
	uint64_t start, len;
	uint64_t file_off;	/* SRC_DATA, local data: offset in pages-N */
	enum src_kind kind;
};

struct task_mem {
	struct piece *p;	/* sorted, disjoint */
	size_t nr;
	struct criu_range *lazy; /* the DATA pieces, for criu_task_lazy() */
	size_t nr_lazy;
	uint64_t size;		/* end of the last VMA */
	int pages_fd;		/* pages-N.img, or -1 */
	uint32_t pages_id;	/* its N */
	bool remote;		/* some lazy pages are not in pages-N.img */
	uint8_t id[32];
};

/* A copy of live task @pid's tables in @out (with pages-N.img's fd if
 * @with_fd). Returns 0, -ESRCH, -ENOMEM. */
int criu_mem_copy(const struct criu_dump *d, pid_t pid, bool with_fd,
		  struct task_mem *out);
void criu_mem_free(struct task_mem *m);
/* source_ops.extent() over @m. */
int criu_mem_extent(const struct task_mem *m, uint64_t off,
		    struct src_extent *e);
/* The DATA piece that holds @off, or NULL. */
const struct piece *criu_mem_data(const struct task_mem *m, uint64_t off);

#endif /* FAULTD_CRIU_MEM_H */
