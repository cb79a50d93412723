// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * kinds.c - the kinds of region and what each can do, in one table: the
 * struct region_ops of each (internal.h). A kind is where a region's
 * content comes from; the memory behind it (anonymous, memfd, hugetlb:
 * enum region_kind, mem.c) is another matter.
 *
 *   kind    content                     fault   discard resize prefetch sync
 *   missing zeros, or the pager's       missing dirty   yes    yes      yes
 *   heap    zeros below the break       heap    dirty   yes    -        yes
 *   pcache  a page cache: hugetlb memfd pcache  dirty   yes    -        yes
 *   budget  a page cache with a budget  pcache  evict   yes    yes      yes
 *   view    a clone's view of a frozen  pcache  dirty   -      -        -
 *           memfd (MEMFD_PRIVATE)
 *   cow     the clone's parent as it    cow     -       -      -        -
 *           was (copy on write)
 *
 * (fault: do_missing_fault(), fault.c; do_heap_fault(), heap.c;
 * do_pcache_fault(), pcache_fault.c; do_cow_fault(), clone.c. discard:
 * dirty_discard(), dirty.c; evict_discard(), evict.c.)
 *
 * What the state of a region adds at run time stays with the operation:
 * -EBUSY while it has clones or is one (resize), a page size prefetch
 * cannot fill, a same-thread region (resize), sync without a write-back
 * pager. "yes" for sync and prefetch means the kind allows them.
 */
#include "fault.h"

const struct region_ops missing_ops = {
	.name = "missing",
	.fault = do_missing_fault,
	.discard = dirty_discard,
	.resize = true,
	.prefetch = true,
	.sync = true,
};

const struct region_ops heap_ops = {
	.name = "heap",
	.fault = do_heap_fault,
	.discard = dirty_discard,
	.resize = true,
	.sync = true,
};

const struct region_ops pcache_ops = {
	.name = "pcache",
	.fault = do_pcache_fault,
	.discard = dirty_discard,
	.resize = true,
	.sync = true,
};

const struct region_ops budget_ops = {
	.name = "budget",
	.fault = do_pcache_fault,
	.discard = evict_discard,
	.resize = true,
	.prefetch = true,
	.sync = true,
};

const struct region_ops view_ops = {
	.name = "view",
	.fault = do_pcache_fault,
	.discard = dirty_discard,
};

const struct region_ops cow_ops = {
	.name = "cow",
	.fault = do_cow_fault,
};
