// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * mem.c - the OS layer of regions: address space, backing memory and
 * userfaultfd registration for each kind of region.
 *
 * Address space is reserved first (PROT_NONE, no memory) for max_len bytes,
 * aligned to the region's page size, before anything else the creation of
 * a region maps - a handler thread's stack or a staging buffer would
 * otherwise land in the free range a FAULTD_REGION_FIXED caller asked for
 * (region_create()). The region's pages are then mapped over the start of
 * the reservation with MAP_FIXED and registered. Growth maps more of the
 * reservation and shrinking maps the tail back to PROT_NONE: both in
 * place, with no window in which another mmap() could take the range.
 * Callers hold the context lock for writing (map, unmap, grow, shrink) or
 * the region's lock (discard).
 *
 * Registered before accessible. An access to memory that is mapped but
 * not registered with the region's userfaultfd is the kernel's to fill:
 * with zeros (a memfd: with a new page of zeros in its page cache), and
 * for good - the page is present from then on, so no fault ever reaches
 * the pager for it. So no range of a region is ever accessible before it
 * is registered. Memory is mapped PROT_NONE (map_inaccessible()),
 * registered, write-protected for async tracking, and only then opened
 * with mprotect() (make_accessible()); a thread that touches it meanwhile
 * gets SIGSEGV, as before the range existed. mprotect() changes neither
 * the backing nor the registration, and the PROT_NONE mmap() already
 * takes the huge-page reservation (its -ENOMEM is the one reported), so
 * the same steps serve anonymous, memfd, hugetlb and memfd-hugetlb
 * regions. Each path that makes memory accessible:
 *  - creation: mem_map() maps and registers, mem_expose() opens once the
 *    region can serve faults (in the SIGBUS table if it is same-thread);
 *    a fault before the region is in the map waits for the context lock.
 *    Clones, restored regions and heaps are created this way.
 *  - growth (mem_grow()): the same steps for [old_len, len); a fault
 *    there finds the old length, misses, and waits for the context lock,
 *    held until the new length is in.
 *  - shrinking (mem_shrink()) and failures: one mmap() puts the reserved
 *    PROT_NONE mapping in place of the range, registration and all.
 *  - discard (mem_discard()) and eviction: memory is dropped, the range
 *    stays mapped and registered; the next access faults to a handler.
 *    The fallback poison (PROT_NONE) is undone on the registered range.
 *  - a heap's break moves inside memory registered since creation.
 *  - freezing a memfd region for clones (mem_freeze()): the private view
 *    is mapped inaccessible elsewhere, registered, opened and moved into
 *    place by mremap(), which keeps the registration (EVENT_REMAP) and
 *    replaces the shared mapping in one step.
 *  - destruction and failed creation unmap before the group's
 *    userfaultfd is closed (region.c): closing it drops the registration
 *    of what is still mapped.
 *  - fork: MADV_DONTFORK is set while the range is still inaccessible,
 *    so no child has it accessible and unregistered.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define FAULTD_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FAULTD_ASAN 1
#endif
#endif
#ifdef FAULTD_ASAN
#include <sanitizer/asan_interface.h>
/*
 * AddressSanitizer keeps the shadow of memory that went away without it
 * (a thread's stack, its fake stack): a region reserved at that address
 * would read as the dead stack's redzones. A reservation is new memory.
 */
#define mem_asan_new(p, len) ASAN_UNPOISON_MEMORY_REGION((void *)(p), (len))
#else
#define mem_asan_new(p, len) ((void)0)
#endif

/*
 * mem_reserve() - reserve @len bytes aligned to @align at @addr (NULL:
 * anywhere): address space only, PROT_NONE, no memory. -EEXIST if @addr
 * is taken.
 */
int mem_reserve(void *addr, size_t len, size_t align, uintptr_t *base)
{
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
	size_t extra = addr ? 0 : align - 1;
	uintptr_t p, start;

	if (addr)
		flags |= MAP_FIXED_NOREPLACE;
	p = (uintptr_t)mmap(addr, len + extra, PROT_NONE, flags, -1, 0);
	if ((void *)p == MAP_FAILED)
		return -errno;
	if (addr && (void *)p != addr) { /* a kernel that ignores NOREPLACE */
		munmap((void *)p, len);
		return -EEXIST;
	}
	start = (p + align - 1) & ~(uintptr_t)(align - 1);
	if (start > p)
		munmap((void *)p, start - p);
	if (p + extra > start)
		munmap((void *)(start + len), p + extra - start);
	mem_asan_new(start, len);
	*base = start;
	return 0;
}

/* mem_release() - give back a reservation no region took over. */
void mem_release(uintptr_t base, size_t len)
{
	munmap((void *)base, len);
}

static int memfd_open(struct faultd_region *r, size_t len)
{
	unsigned int flags = MFD_CLOEXEC;
	char name[48];
	int fd;

	if (r->kind == REGION_MEMFD_HUGETLB)
		flags |= huge_memfd_flags(r->page_size);
	snprintf(name, sizeof(name), "faultd:%s", r->name);
	fd = memfd_create(name, flags);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	r->memfd = fd;
	return 0;
}

static int mmap_flags(const struct faultd_region *r)
{
	switch (r->kind) {
	case REGION_HUGETLB:
		return MAP_PRIVATE | MAP_ANONYMOUS |
		       huge_mmap_flags(r->page_size);
	case REGION_MEMFD:
	case REGION_MEMFD_HUGETLB:
		return MAP_SHARED;
	case REGION_MEMFD_PRIVATE:
		return MAP_PRIVATE;
	default:
		return MAP_PRIVATE | MAP_ANONYMOUS;
	}
}

/* Regions with a page cache also take minor faults. */
static uint64_t register_mode(const struct faultd_region *r, bool base)
{
	uint64_t mode = UFFDIO_REGISTER_MODE_MISSING;

	if (base)
		mode |= UFFDIO_REGISTER_MODE_MINOR;
	if (r->wp_registered)
		mode |= UFFDIO_REGISTER_MODE_WP;
	return mode;
}

static bool has_pcache(const struct faultd_region *r)
{
	return r->kind == REGION_MEMFD_HUGETLB ||
	       r->kind == REGION_MEMFD_PRIVATE || r->ev;
}

/* Give [off, off + len) back to the reservation: memory freed, unmapped. */
static void unpopulate(struct faultd_region *r, size_t off, size_t len)
{
	mmap((char *)r->base + off, len, PROT_NONE,
	     MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
}

/*
 * Map @len bytes of backing at @at (over a reservation), inaccessible:
 * nothing can touch them before they are registered. Backing that may be
 * refused for want of memory (@elsewhere: huge pages, which are reserved
 * when mapped) is mapped at an address of the kernel's choosing and moved
 * into place: a MAP_FIXED mapping that fails may leave a hole where the
 * reservation was, which another thread's mmap() can take - and putting
 * the reservation back, or unmapping the region, would then destroy that
 * mapping (seen: a handler thread's stack under ASan).
 */
static int map_inaccessible(void *at, size_t len, int flags, int fd,
			    off_t off, bool elsewhere)
{
	void *p = mmap(elsewhere ? NULL : at, len, PROT_NONE,
		       (elsewhere ? 0 : MAP_FIXED) | flags, fd, off);

	if (p == MAP_FAILED)
		return -errno;
	if (elsewhere &&
	    mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, at) ==
		    MAP_FAILED) {
		int err = -errno;

		munmap(p, len);
		return err;
	}
	/* A forked child must not see unfilled pages as zeros: keep it out. */
	madvise(at, len, MADV_DONTFORK);
	return 0;
}

/* Open registered memory to access: the last step of making it. */
static int make_accessible(void *at, size_t len)
{
	return mprotect(at, len, PROT_READ | PROT_WRITE) < 0 ? -errno : 0;
}

/*
 * Map [off, off + len) over the reservation and register it, still
 * inaccessible (see make_accessible()). On failure the range is reserved
 * again.
 */
static int populate(struct faultd_region *r, size_t off, size_t len)
{
	char *at = (char *)r->base + off;
	int ret;

	ret = map_inaccessible(at, len, mmap_flags(r), r->memfd,
			       r->memfd >= 0 ? (off_t)off : 0,
			       r->page_size > (size_t)r->ctx->page_size);
	if (ret < 0) {
		if (ret == -ENOMEM && r->page_size > (size_t)r->ctx->page_size)
			huge_log_enomem(r, len);
		goto err;
	}
	if (r->flags & FAULTD_REGION_THP)
		madvise(at, len, MADV_HUGEPAGE);
	ret = numa_apply(r, at, len);
	if (ret < 0)
		goto err;
	ret = uffd_register(r->group->uffd, (uintptr_t)at, len,
			    register_mode(r, has_pcache(r)), NULL);
	/* Async tracking starts protected: the kernel marks first writes. */
	if (!ret && r->wp_mode == WP_ASYNC)
		ret = uffd_writeprotect(r->group->uffd, (uintptr_t)at, len,
					true);
	if (ret < 0)
		goto err;
	return 0;
err:
	unpopulate(r, off, len);
	return ret;
}

/*
 * mem_map() - back and register the region over its reservation, not yet
 * accessible: mem_expose() opens it once the region can serve its faults.
 * The memfd and page cache it creates belong to the region (released
 * with it, also on failure here); on failure the reservation is as it was.
 */
int mem_map(struct faultd_region *r)
{
	size_t len = atomic_load(&r->len);
	int ret = 0;

	if ((r->kind == REGION_MEMFD || r->kind == REGION_MEMFD_HUGETLB) &&
	    r->memfd < 0)
		ret = memfd_open(r, len);
	if (!ret && (r->kind == REGION_MEMFD_HUGETLB || r->ev) && !r->cache)
		ret = pcache_create(r);
	if (!ret)
		ret = populate(r, 0, len);
	return ret;
}

/*
 * mem_expose() - make the region mapped by mem_map() accessible. On
 * failure it stays inaccessible (mem_unmap() gives it back).
 */
int mem_expose(struct faultd_region *r)
{
	return make_accessible((void *)r->base, atomic_load(&r->len));
}

/* mem_unmap() - give back the region's memory and its reservation. */
void mem_unmap(struct faultd_region *r)
{
	munmap((void *)r->base, r->max_len);
}

/* mem_reregister() - register the region again, e.g. with WP added. */
int mem_reregister(struct faultd_region *r)
{
	bool wp = r->wp_registered;
	int ret;

	r->wp_registered = true;
	ret = uffd_register(r->group->uffd, r->base, atomic_load(&r->len),
			    register_mode(r, has_pcache(r)), NULL);
	if (ret < 0)
		r->wp_registered = wp;
	return ret;
}

/*
 * mem_freeze() - replace a memfd region's shared mapping by a private view
 * of the same memfd, registered for minor faults, without a moment in
 * which the range is unregistered: the view is made and registered
 * elsewhere, then moved into place. The registration survives the move
 * because the group's userfaultfd has EVENT_REMAP, and the move waits
 * until a handler has read that event: the caller holds no lock.
 */
int mem_freeze(struct faultd_region *r)
{
	size_t len = atomic_load(&r->len);
	uintptr_t tmp;
	void *p;
	int ret;

	ret = mem_reserve(NULL, len, r->page_size, &tmp);
	if (ret < 0)
		return ret;
	ret = map_inaccessible((void *)tmp, len, MAP_PRIVATE, r->memfd, 0,
			       false);
	if (!ret)
		ret = uffd_register(r->group->uffd, tmp, len,
				    register_mode(r, true), NULL);
	if (!ret)
		ret = make_accessible((void *)tmp, len);
	if (ret < 0)
		goto err;
	p = mremap((void *)tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED,
		   (void *)r->base);
	if (p != MAP_FAILED)
		return 0;
	ret = -errno;
err:
	munmap((void *)tmp, len);
	return ret;
}

/* Extend the reservation in place to @len bytes, or -ENOMEM. */
static int reserve_more(struct faultd_region *r, size_t len)
{
	uintptr_t at;
	int ret;

	ret = mem_reserve((char *)r->base + r->max_len, len - r->max_len,
			  r->page_size, &at);
	if (ret < 0)
		return ret == -EEXIST ? -ENOMEM : ret;
	if (r->cache) {
		ret = pcache_grow(r->cache, len);
		if (ret < 0) {
			munmap((void *)at, len - r->max_len);
			return ret;
		}
	}
	r->max_len = len;
	return 0;
}

/*
 * mem_grow() - map, register and then open [old_len, len). A fault there
 * once it is open finds the region's old length and waits for the context
 * lock, which the caller holds until the new length is in.
 */
int mem_grow(struct faultd_region *r, size_t old_len, size_t len)
{
	int ret;

	if (len > r->max_len) {
		ret = reserve_more(r, len);
		if (ret < 0)
			return ret;
	}
	if (r->memfd >= 0 && ftruncate(r->memfd, (off_t)len) < 0)
		return -errno;
	ret = populate(r, old_len, len - old_len);
	if (!ret) {
		ret = make_accessible((char *)r->base + old_len, len - old_len);
		if (ret < 0)
			unpopulate(r, old_len, len - old_len);
	}
	if (ret < 0 && r->memfd >= 0)
		(void)!ftruncate(r->memfd, (off_t)old_len);
	return ret;
}

/* mem_shrink() - give [len, old_len) back: memory freed, range reserved. */
void mem_shrink(struct faultd_region *r, size_t old_len, size_t len)
{
	unpopulate(r, len, old_len - len);
	if (r->memfd >= 0)
		(void)!ftruncate(r->memfd, (off_t)len);
	if (r->cache)
		pcache_forget(r->cache, len, old_len - len);
}

/*
 * mem_discard() - drop [off, off + len) so that the next access faults.
 * Private memory is zapped (its pages freed). shmem pages are punched out of
 * the file, since zapping the mapping alone would leave them in the page
 * cache. memfd-hugetlb pages are zapped but stay in the page cache, marked
 * stale: the next fault clears or refills them in place. A frozen view
 * drops its private copies: the next fault maps the base's page again.
 */
int mem_discard(struct faultd_region *r, uint64_t off, size_t len)
{
	char *p = (char *)r->base + off;
	int ret;

	/* Undo the fallback poison of kernels without UFFDIO_POISON
	 * (fault.c): a discarded page faults to the handler again. */
	if (!(uffd_have() & FAULTD_HAVE_POISON))
		mprotect(p, len, PROT_READ | PROT_WRITE);
	switch (r->kind) {
	case REGION_MEMFD:
		ret = fallocate(r->memfd,
				FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				(off_t)off, (off_t)len);
		if (!ret && r->cache) /* a freeze that did not complete */
			pcache_forget(r->cache, off, len);
		break;
	case REGION_MEMFD_HUGETLB:
		ret = madvise(p, len, MADV_DONTNEED);
		if (!ret)
			pcache_mark_stale(r->cache, off, len);
		break;
	default:
		ret = madvise(p, len, MADV_DONTNEED);
	}
	if (!ret)
		sigbus_discarded(r, off, len);
	return ret < 0 ? -errno : 0;
}
