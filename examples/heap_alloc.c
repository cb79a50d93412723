// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * heap_alloc.c - a tiny allocator on a faultd heap.
 *
 * The heap reserves its maximum once; the allocator takes memory from the
 * top with faultd_heap_sbrk() (no system call, no region-map change) and
 * gives the top back when the last block is freed. Freed blocks below the
 * top go on a first-fit free list. New memory reads as zeros; memory above
 * the break is off limits (SIGBUS).
 *
 *   cc heap_alloc.c $(pkg-config --cflags --libs libfaultd) -o heap_alloc
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <faultd.h>

struct block {
	size_t size;	    /* bytes after the header */
	struct block *next; /* on the free list */
};

struct allocator {
	struct faultd_heap *heap;
	struct block *free_list;
	char *top;	    /* the heap's break, as we last set it */
};

#define ALIGN 16

static size_t round_up(size_t n)
{
	return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

static void *alloc(struct allocator *a, size_t n)
{
	struct block **pp, *b;
	void *prev;

	n = round_up(n);
	for (pp = &a->free_list; *pp; pp = &(*pp)->next) {
		if ((*pp)->size >= n) { /* first fit */
			b = *pp;
			*pp = b->next;
			return b + 1;
		}
	}
	if (faultd_heap_sbrk(a->heap, (intptr_t)(sizeof(*b) + n), &prev) < 0)
		return NULL; /* -ENOMEM: the reservation is full */
	b = prev;
	b->size = n;
	a->top = (char *)(b + 1) + n;
	return b + 1;
}

static void release(struct allocator *a, void *p)
{
	struct block *b = (struct block *)p - 1;
	void *prev;

	if ((char *)(b + 1) + b->size == a->top &&
	    faultd_heap_sbrk(a->heap, -(intptr_t)(sizeof(*b) + b->size),
			     &prev) == 0) {
		a->top = (char *)b; /* the top block: give it back to the heap */
		return;
	}
	b->next = a->free_list;
	a->free_list = b;
}

int main(void)
{
	struct faultd_heap_opts ho = { .size = sizeof(ho),
				       .max_size = 256ul << 20 };
	struct faultd_heap_stats s = { .size = sizeof(s) };
	struct allocator a = { 0 };
	struct faultd_ctx *ctx;
	char *blocks[1000];
	size_t wrong = 0;
	int ret;

	ret = faultd_ctx_create(NULL, &ctx);
	if (!ret)
		ret = faultd_heap_create(ctx, &ho, &a.heap);
	if (ret < 0) {
		fprintf(stderr, "faultd: %s\n", strerror(-ret));
		return 1;
	}
	a.top = faultd_heap_base(a.heap);

	/* Allocate and write blocks; free every other one; reallocate into
	 * the holes; check the survivors; free everything. */
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 1000; i++) {
			size_t n = 64 + (size_t)(i * 37 % 4000);

			blocks[i] = alloc(&a, n);
			if (!blocks[i])
				return 1;
			memset(blocks[i], i & 0xff, n);
		}
		for (int i = 0; i < 1000; i += 2)
			release(&a, blocks[i]);
		for (int i = 0; i < 1000; i += 2)
			blocks[i] = alloc(&a, 64);
		for (int i = 1; i < 1000; i += 2)
			wrong += (unsigned char)blocks[i][0] != (i & 0xff);
		for (int i = 999; i >= 0; i--)
			release(&a, blocks[i]);
	}

	faultd_heap_stats(a.heap, &s);
	printf("20 rounds of 1000 blocks, %zu wrong bytes\n"
	       "heap: %llu growths, %llu shrinks, %llu trims, %llu KiB given "
	       "back, %llu KiB cleared for reuse, %llu faults\n",
	       wrong, (unsigned long long)s.growths,
	       (unsigned long long)s.shrinks, (unsigned long long)s.trims,
	       (unsigned long long)s.bytes_returned >> 10,
	       (unsigned long long)s.bytes_cleared >> 10,
	       (unsigned long long)s.faults);
	faultd_ctx_destroy(ctx);
	return wrong ? 1 : 0;
}
