/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * faultd.h - the public API of libfaultd: page faults handled in user space
 * with userfaultfd(2).
 *
 * An application creates a context (struct faultd_ctx), then regions
 * (struct faultd_region) inside it. A region is a range of address space
 * registered with userfaultfd; every missing page in it is produced by the
 * library's handler threads, as zeros or by a pager the application
 * supplies. The locking model follows the kernel's per-VMA locks: faults are
 * resolved under a per-region read lock found under RCU, never under a
 * context-wide lock, unless the context asks for FAULTD_LOCK_GLOBAL.
 *
 * Conventions: functions return 0 (or a count) on success and a negative
 * errno on failure, never -1 with errno set. Objects come back through
 * out-parameters. Option structs begin with their own size: set it to
 * sizeof(struct ...) so that fields can be added later. destroy functions
 * accept NULL. Each function says in a "Context:" line where it may be
 * called from.
 */
#ifndef FAULTD_H
#define FAULTD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAULTD_VERSION_MAJOR 0
#define FAULTD_VERSION_MINOR 1
#define FAULTD_VERSION_PATCH 0
#define FAULTD_VERSION_STRING "0.1.0"

/*
 * faultd_version() - the version of the library that is running, as
 * "MAJOR.MINOR.PATCH". Compare with FAULTD_VERSION_STRING, the version the
 * program was built against.
 * Context: any.
 */
const char *faultd_version(void);

struct faultd_ctx;
struct faultd_region;
struct faultd_group;

/* ------------------------------------------------------------------------
 * Kernel features
 */

/* What the running kernel offers, as found by faultd_probe(). */
#define FAULTD_HAVE_DEV_USERFAULTFD (1ull << 0) /* /dev/userfaultfd opens */
#define FAULTD_HAVE_WP (1ull << 1)		/* write-protect, anonymous */
#define FAULTD_HAVE_WP_SHMEM (1ull << 2)	/* write-protect, shmem/hugetlb */
#define FAULTD_HAVE_WP_ASYNC (1ull << 3)	/* UFFD_FEATURE_WP_ASYNC */
#define FAULTD_HAVE_MINOR_SHMEM (1ull << 4)	/* minor faults on shmem */
#define FAULTD_HAVE_MINOR_HUGETLB (1ull << 5)	/* minor faults on hugetlb */
#define FAULTD_HAVE_MISSING_SHMEM (1ull << 6)
#define FAULTD_HAVE_MISSING_HUGETLB (1ull << 7)
#define FAULTD_HAVE_POISON (1ull << 8)		/* UFFDIO_POISON */
#define FAULTD_HAVE_MOVE (1ull << 9)		/* UFFDIO_MOVE */
#define FAULTD_HAVE_SIGBUS (1ull << 10)		/* UFFD_FEATURE_SIGBUS */
#define FAULTD_HAVE_EVENTS (1ull << 11)		/* only EVENT_UNMAP is probed */
#define FAULTD_HAVE_PAGEMAP_SCAN (1ull << 12)	/* PAGEMAP_SCAN ioctl */
#define FAULTD_HAVE_CONTINUE_WP (1ull << 13)	/* UFFDIO_CONTINUE_MODE_WP */

struct faultd_features {
	size_t size;		/* sizeof(struct faultd_features) */
	uint64_t have;		/* FAULTD_HAVE_* */
	uint64_t uffd_features;	/* UFFD_FEATURE_* bits from UFFDIO_API */
	uint64_t uffd_ioctls;	/* 1 << _UFFDIO_* bits from UFFDIO_API */
};

/*
 * faultd_probe() - find what the running kernel supports.
 * Opens a userfaultfd (through /dev/userfaultfd, or the syscall when the
 * device is missing or closed to us; a syscall refused with EPERM is
 * retried with UFFD_USER_MODE_ONLY) and asks UFFDIO_API for every feature.
 * The answer, or the error, is computed once per process and cached: a
 * failure is not retried. *f is filled up to the smaller of f->size and
 * ours, and f->size is set to that.
 * Returns 0, or -ENOSYS (no userfaultfd in this kernel), -EPERM (the
 * user-mode-only retry was refused too: see vm.unprivileged_userfaultfd
 * and /dev/userfaultfd's mode), -EINVAL (f is NULL or f->size does not
 * cover have; or a kernel before 5.11, which refuses the retry's flag),
 * or another error of opening the fd or of UFFDIO_API.
 * Context: any thread.
 */
int faultd_probe(struct faultd_features *f);

/* ------------------------------------------------------------------------
 * Contexts
 */

/* Syslog-style levels for the log callback. */
enum faultd_log_level {
	FAULTD_LOG_ERR = 3,
	FAULTD_LOG_WARNING = 4,
	FAULTD_LOG_INFO = 6,
	FAULTD_LOG_DEBUG = 7,
};

/*
 * A log callback gets one complete line, without the newline. It may be
 * called from any thread, handler threads included, so it must be
 * thread-safe and must not call back into libfaultd.
 */
typedef void (*faultd_log_fn)(void *arg, int level, const char *msg);

/*
 * How faults are serialized against changes to the region map.
 * FAULTD_LOCK_REGION (default): a fault takes its region's read lock, found
 *   under RCU; it falls back to the context lock only when it must.
 * FAULTD_LOCK_GLOBAL: every resolution of a fault, on every path (handler
 *   threads, same-thread faults, prefetch, read-ahead, replay, clone
 *   reads), takes the context lock for reading, where the kernel before
 *   per-VMA locks held mmap_lock: the "before" of an A/B comparison.
 * The environment variable FAULTD_LOCK_MODE=global|region overrides the
 * option (for running a program unchanged in both modes); any other
 * non-empty value makes faultd_ctx_create() fail with -EINVAL.
 */
enum faultd_lock_mode {
	FAULTD_LOCK_REGION = 0,
	FAULTD_LOCK_GLOBAL = 1,
};

struct faultd_ctx_opts {
	size_t size;		  /* sizeof(struct faultd_ctx_opts) */
	unsigned int lock_mode;	  /* enum faultd_lock_mode */
	unsigned int handler_threads; /* default per region; 0 means 1 */
	faultd_log_fn log;	  /* NULL: the library prints nothing */
	void *log_arg;
	int log_level;		  /* highest level passed to log; 0: WARNING */
};

/*
 * faultd_ctx_create() - create a context: a region map, its lock, and the
 * defaults for the regions created in it.
 * @opts may be NULL for the defaults.
 * Returns 0 and the context in *ctxp, or -EINVAL (NULL ctxp, opts->size
 * short of log_level, bad lock_mode, a bad FAULTD_LOCK_MODE value), -E2BIG
 * (opts->size beyond ours with non-zero unknown fields), -ENOMEM, or the
 * error of faultd_probe() when userfaultfd is unusable.
 * Context: any thread that is not a handler thread.
 */
int faultd_ctx_create(const struct faultd_ctx_opts *opts,
		      struct faultd_ctx **ctxp);

/*
 * faultd_ctx_destroy() - destroy every region, heap and group of the
 * context, stop its handler and prefetch threads and free it. Handles of
 * its regions, heaps and groups become invalid: destroying one afterwards
 * is a use-after-free. Accepts NULL.
 * Context: not concurrently with any other call on the context or its
 * objects. From a handler thread of the context it logs an error and
 * does nothing; from any other pager callback (prefetch worker, evictor)
 * it would wait for itself.
 */
void faultd_ctx_destroy(struct faultd_ctx *ctx);

/*
 * faultd_ctx_lock_held() - 1 when the calling thread holds the context lock
 * of @ctx (for reading or writing), 0 otherwise. Meant for assertions in
 * pager callbacks, like lockdep_is_held().
 * Context: any.
 */
int faultd_ctx_lock_held(const struct faultd_ctx *ctx);

/* ------------------------------------------------------------------------
 * Pagers: where the content of a region comes from
 */

/*
 * FAULTD_PAGER_CONCURRENT: fill may run concurrently with itself and with
 * changes to other regions, under the region's read lock alone. Without it,
 * the pager is "not audited": its callbacks are called only with the context
 * lock held for reading (so the region map does not change under them) and
 * never concurrently with any other unaudited pager callback of the context.
 */
#define FAULTD_PAGER_CONCURRENT (1u << 0)
/*
 * FAULTD_PAGER_SIGNAL_SAFE: fill may be called in the faulting thread's
 * SIGBUS handler, for FAULTD_REGION_SAME_THREAD regions. It must then be
 * async-signal-safe: no locks (the faulting thread may hold any of them),
 * no malloc, no stdio; only system calls like pread() and its own
 * lock-free data. It must not touch missing pages of a same-thread region
 * (its own fault would nest). It implies FAULTD_PAGER_CONCURRENT: any
 * thread may fault at any time.
 */
#define FAULTD_PAGER_SIGNAL_SAFE (1u << 1)

struct faultd_pager {
	size_t size;	    /* sizeof(struct faultd_pager) */
	unsigned int flags; /* FAULTD_PAGER_* */
	/*
	 * fill() - produce the content of [offset, offset + len) of @region
	 * into @buf (page-aligned, len bytes). Returns the number of bytes
	 * produced: len, or fewer, in which case the rest is zeroed (a file
	 * that ends inside the range); or a negative errno, in which case the
	 * pages are poisoned (an access gets SIGBUS) and the error is counted
	 * and logged. It never becomes a page of zeros. @region is the region
	 * being filled: the one the pager was given to, or a clone of it.
	 * Context: a handler thread of the region or of a clone of it, a
	 * prefetch worker of the context, or the thread destroying a region
	 * that has clones (it saves their pages first); holding the read lock
	 * of the region (or of the clone it serves), or the context lock for
	 * reading (always, without FAULTD_PAGER_CONCURRENT or in
	 * FAULTD_LOCK_GLOBAL mode). In a same-thread region: the faulting
	 * thread's SIGBUS handler, with no lock (the context lock for reading
	 * in FAULTD_LOCK_GLOBAL mode). It may
	 * sleep (not in a signal handler). It must not create, resize or
	 * destroy regions or groups of the same context, nor touch the
	 * region's own missing pages; only in a handler thread do such calls
	 * fail with -EDEADLK, elsewhere they deadlock.
	 */
	ssize_t (*fill)(void *arg, struct faultd_region *region,
			uint64_t offset, void *buf, size_t len);
	/*
	 * writeback() - store [offset, offset + len) of @region from @buf
	 * (at most 4 MiB per call). Used by eviction and faultd_region_sync();
	 * may be NULL for read-only pagers. Returns 0 or a negative errno
	 * (counted, logged; the pages stay dirty).
	 * Context: the region's evictor thread; a handler thread or prefetch
	 * worker that finds the region's budget full and evicts at once; or
	 * a thread calling faultd_region_sync(). It holds the
	 * region's read lock (and the context lock for reading, without
	 * FAULTD_PAGER_CONCURRENT). The rules of fill() apply.
	 */
	int (*writeback)(void *arg, struct faultd_region *region,
			 uint64_t offset, const void *buf, size_t len);
	/*
	 * release() - called once for each region created with the pager,
	 * when that region and its clones are all destroyed (possibly after
	 * faultd_region_destroy() of the region itself), in the destroying
	 * thread. A failed faultd_region_create() never calls it: the pager
	 * stays the caller's. May be NULL.
	 */
	void (*release)(void *arg);
	void *arg;
};

/* ------------------------------------------------------------------------
 * The file pager
 */

#define FAULTD_FILE_DIRECT (1u << 0) /* read and write with O_DIRECT */

struct faultd_file_opts {
	size_t size;		/* sizeof(struct faultd_file_opts) */
	int fd;			/* the file (or block device); not taken */
	uint64_t offset;	/* file offset of the region's start (4 KiB
				   aligned) */
	unsigned int flags;	/* FAULTD_FILE_* */
};

/*
 * faultd_file_pager() - a pager that serves a region from a file: reads
 * and write-backs through io_uring, several in flight at once (a fill is
 * split into 64 KiB reads submitted together; every thread that calls the
 * pager has a ring of its own, made on first use and freed when the
 * thread exits). The file's size is taken now: the region's part beyond
 * it reads as zeros; a read that comes back short before it (the file was
 * truncated underneath) is an error, so the page is poisoned (SIGBUS),
 * never zeros. Write-back (eviction of dirty pages, faultd_region_sync())
 * writes the region's pages to the file and may grow it, and the size
 * with it. The pager is FAULTD_PAGER_CONCURRENT. Regions whose pager
 * is a file pager default to 64 KiB fault-around and 2 MiB read-ahead.
 * Fills *pager; it owns a descriptor of its own for the file (a duplicate
 * of @opts->fd, or the file opened again for FAULTD_FILE_DIRECT), closed
 * by its release(). Give it to one region: that region calls release()
 * when done. A failed faultd_region_create() leaves it yours: call
 * pager->release(pager->arg) if no region takes it.
 * Returns 0, or -EINVAL (NULL, opts->size short of offset, fd < 0, unknown
 * flags, offset not 4 KiB aligned, not a regular file or block device),
 * -E2BIG (opts->size beyond ours with non-zero unknown fields), -ENOMEM,
 * or the error of fstat/BLKGETSIZE64/fcntl/open.
 * Context: any thread.
 */
int faultd_file_pager(const struct faultd_file_opts *opts,
		      struct faultd_pager *pager);

/* ------------------------------------------------------------------------
 * Handler placement
 */

/*
 * Where handler threads run. A fault costs one wake-up of a handler and
 * one of the faulting thread; across CPUs each is an inter-processor
 * interrupt, so placement matters more than anything inside the handler.
 * FAULTD_PLACE_ANY: the scheduler decides (the default).
 * FAULTD_PLACE_CPU: every handler thread on CPU opts.cpu; with the
 *   faulting threads on that CPU too, no wake-up crosses CPUs.
 * FAULTD_PLACE_PER_CPU: one handler thread per CPU the process may use,
 *   each pinned to its CPU (handler_threads is ignored). All of them wake
 *   for each fault; the one on the faulting thread's CPU usually wins.
 * busy_poll_us: after the queue runs dry, a handler keeps reading it for
 * that long before it sleeps, so a fault that comes soon finds it awake.
 * It costs that much CPU time each time the queue runs dry.
 * The README's "choosing a mode" section has the figures.
 */
enum faultd_placement {
	FAULTD_PLACE_ANY = 0,
	FAULTD_PLACE_CPU = 1,
	FAULTD_PLACE_PER_CPU = 2,
};

/*
 * NUMA placement of a region's memory (libnuma). The policy is set before
 * the region is registered, so the pages filled for it land there.
 * FAULTD_NUMA_BIND: on node opts.numa_node; the region's handler threads
 *   run on that node's CPUs too (unless a placement above says where).
 * FAULTD_NUMA_INTERLEAVE: interleaved over the nodes in opts.numa_nodes
 *   (bit n: node n).
 * On a one-node machine this works and changes nothing; without NUMA
 * support in the kernel the request is ignored with a warning.
 */
enum faultd_numa_policy {
	FAULTD_NUMA_DEFAULT = 0,
	FAULTD_NUMA_BIND = 1,
	FAULTD_NUMA_INTERLEAVE = 2,
};

/* ------------------------------------------------------------------------
 * Regions
 */

/*
 * A write hook is called on the first write to a clean page of a
 * FAULTD_REGION_WP region, before the write lands: @old is the page's
 * content (read-only, valid during the call). It is called once per first
 * write, even when several threads write the page at once. A database
 * logs the page here. Context: a handler thread holding the region's read lock (or the
 * context lock for reading); it may sleep; it must not write to the
 * region, nor create, resize or destroy regions or groups of the context.
 */
typedef void (*faultd_write_hook)(void *arg, struct faultd_region *region,
				  uint64_t offset, const void *old);

/*
 * Memory kinds. The default is private anonymous memory in 4 KiB pages.
 * FAULTD_REGION_MEMFD: shmem behind a memfd (shareable).
 * FAULTD_REGION_HUGETLB: hugetlb pages of opts.page_size (0: the system's
 *   default huge page size, usually 2 MiB; 1 GiB where the system has it).
 *   Alone: private anonymous hugetlb, resolved with UFFDIO_COPY. With
 *   FAULTD_REGION_MEMFD: a hugetlb memfd resolved with minor faults - the
 *   page is prepared in place and mapped with UFFDIO_CONTINUE, no copy;
 *   the lowest-latency path for huge pages. The pages must be reserved
 *   (vm.nr_hugepages); without enough free ones creation fails with
 *   -ENOMEM and logs how to reserve them. Lengths, max_length and addr
 *   must be multiples of the huge page size.
 * FAULTD_REGION_THP: ask for transparent huge pages (MADV_HUGEPAGE) on
 *   4 KiB memory. userfaultfd fills 4 KiB pages; khugepaged may collapse a
 *   2 MiB range into a THP once all of its pages are present. Use hugetlb
 *   when faults should be 2 MiB at a time.
 */
#define FAULTD_REGION_ANON (0ull)
#define FAULTD_REGION_MEMFD (1ull << 0)
#define FAULTD_REGION_HUGETLB (1ull << 1)
#define FAULTD_REGION_THP (1ull << 2)
/*
 * Write-protection and dirty tracking (pick at most one):
 * FAULTD_REGION_WP: synchronous. Pages are installed write-protected; the
 *   first write to each faults to a handler, which calls opts.write_hook
 *   with the page's old content, records the page as dirty and lets the
 *   write go on. faultd_region_protect()/unprotect() are available.
 * FAULTD_REGION_WP_ASYNC: asynchronous (UFFD_FEATURE_WP_ASYNC): the kernel
 *   records the write and lets it go on at once; no hook. Collection with
 *   PAGEMAP_SCAN. The cheapest dirty tracking; needs its own handlers (no
 *   opts.group).
 * Both: faultd_region_dirty() collects the dirty set.
 */
#define FAULTD_REGION_WP (1ull << 3)
#define FAULTD_REGION_WP_ASYNC (1ull << 4)
/*
 * FAULTD_REGION_SAME_THREAD: the faulting thread resolves its own faults,
 * in a SIGBUS handler the library installs (UFFD_FEATURE_SIGBUS), with no
 * wake-up at all: the lowest latency. Zero-fill, or a pager with
 * FAULTD_PAGER_SIGNAL_SAFE. The region has no handler threads and cannot
 * be resized, tracked for writes or join a group. A fault the kernel takes
 * on the program's behalf (a read() into the region) fails with EFAULT
 * instead. Install your own SIGBUS handler before creating such a region
 * (the library's passes on every SIGBUS that is not its own), or call
 * faultd_sigbus() first from a handler installed later.
 */
#define FAULTD_REGION_SAME_THREAD (1ull << 5)
/* Placement */
#define FAULTD_REGION_FIXED (1ull << 8) /* at opts.addr; -EEXIST if taken */

struct faultd_region_opts {
	size_t size;		/* sizeof(struct faultd_region_opts) */
	uint64_t flags;		/* FAULTD_REGION_* */
	size_t length;		/* bytes; a multiple of the page size */
	/*
	 * Address space reserved after the region for growth in place, as
	 * a total size (>= length; 0: just length). Reserving costs no
	 * memory, and faultd_region_resize() within it cannot fail for lack
	 * of room.
	 */
	size_t max_length;
	void *addr;		/* with FAULTD_REGION_FIXED: page-aligned */
	/* NULL: missing pages are zero-filled. Copied; the region owns it
	 * only once creation succeeds (see faultd_pager's release()). */
	const struct faultd_pager *pager;
	unsigned int handler_threads; /* 0: the context's default */
	struct faultd_group *group;   /* NULL: the region's own handlers */
	const char *name;	      /* for logs and stats; may be NULL */
	size_t page_size;	      /* FAULTD_REGION_HUGETLB: 0 = default */
	faultd_write_hook write_hook; /* FAULTD_REGION_WP only; may be NULL */
	void *hook_arg;
	unsigned int placement;	      /* enum faultd_placement */
	unsigned int cpu;	      /* with FAULTD_PLACE_CPU */
	unsigned int busy_poll_us;    /* see enum faultd_placement */
	/*
	 * Fault-around: a missing fault fills the naturally aligned window
	 * of this many bytes around the faulting page (a power of two, at
	 * least a page), with one ioctl, never over pages already present
	 * nor past the region - the library's ->map_pages(). Zero-fill reads
	 * map the zero page (no memory); writes and pager fills allocate the
	 * whole window. 0: the default (64 KiB for the file pager, off
	 * otherwise); FAULTD_FAULT_AROUND_OFF: off. Not for clones, nor for
	 * regions with a budget (read-ahead fills those ahead instead).
	 */
	size_t fault_around;
	unsigned int numa_policy;     /* enum faultd_numa_policy */
	unsigned int numa_node;	      /* with FAULTD_NUMA_BIND */
	uint64_t numa_nodes;	      /* with FAULTD_NUMA_INTERLEAVE */
	/*
	 * Read-ahead: when faults come in sequence, the pages after them
	 * are filled ahead, asynchronously, in a window that doubles while
	 * the sequence holds (up to this many bytes, and a quarter of a
	 * budget) and stops when it breaks; the next sequence starts again
	 * at 128 KiB (or twice fault_around, if more). 0: the default (2 MiB
	 * for the file pager, off otherwise); FAULTD_READAHEAD_OFF: off. Needs
	 * a pager.
	 */
	size_t readahead_max;
	/*
	 * Bounded memory: the region never holds more than @budget bytes
	 * (the pages its memfd has allocated), at any instant: a page is
	 * charged before it is read in, and a fault or read-ahead that finds
	 * the budget full evicts first (or waits while another thread
	 * does). Only dirty pages whose write-back failed stay beyond it:
	 * faults then go over the budget rather than lose a write. Past
	 * halfway from @budget_low (0: 7/8 of @budget) to @budget, a thread
	 * of the region evicts down to @budget_low, so that faults seldom
	 * wait. Clean pages are dropped (the next access
	 * reads them again from the pager); dirty ones - the region needs
	 * FAULTD_REGION_WP - are written back with the pager's writeback()
	 * first. Victims are chosen by CLOCK (second chance):
	 * "recently used" means accessed since the clock hand last passed
	 * the page. The hand unmaps a page it passes but keeps it in memory;
	 * the next access maps it again with a cheap minor fault and marks
	 * it used; a page not accessed by the next pass is evicted. A budget
	 * makes the region a memfd (FAULTD_REGION_MEMFD) resolved with minor
	 * faults. 0: no budget.
	 */
	size_t budget;
	size_t budget_low;
};

/* Values of fault_around and readahead_max that turn them off. */
#define FAULTD_FAULT_AROUND_OFF ((size_t)1)
#define FAULTD_READAHEAD_OFF ((size_t)1)

/*
 * faultd_region_create() - reserve and register a region, and start its
 * handler threads (or join @opts->group).
 * Returns 0 and the region in *regionp, or
 *  -EINVAL  NULL ctx/opts/regionp; opts->size short of name; unknown
 *           flags; length 0 or unaligned; max_length below length or
 *           unaligned; FIXED without a page-aligned addr, addr without
 *           FIXED; page_size other than 0 or the base page without
 *           HUGETLB, a huge page size the system lacks, HUGETLB with THP;
 *           both WP flags, write_hook without WP, WP_ASYNC with a hook
 *           or a group; SAME_THREAD with WP, THP, a group, a hugetlb
 *           memfd or a pager without SIGNAL_SAFE; a group of another
 *           context, with handler_threads, or a too small max_page_size;
 *           bad NUMA options; an unknown placement or a cpu the process
 *           cannot use; a pager with a short size, no fill or unknown
 *           flags; fault_around not a power of two from a page to 2 MiB,
 *           or with HUGETLB or a budget; readahead_max unaligned, over
 *           256 MiB, without a pager, or with HUGETLB or SAME_THREAD;
 *           budget_low without budget; budget unaligned, under 16 pages,
 *           not above an aligned budget_low, without WP and a CONCURRENT
 *           pager with writeback(), or with HUGETLB, THP or SAME_THREAD;
 *  -E2BIG   opts->size beyond ours with non-zero unknown fields;
 *  -EOPNOTSUPP the kernel lacks what the options need: hugetlb (or its
 *           minor faults, for a hugetlb memfd), write-protection of this
 *           memory, WP_ASYNC and PAGEMAP_SCAN, SIGBUS, or minor faults on
 *           shmem for a budget;
 *  -EEXIST  FIXED and the range overlaps an existing mapping;
 *  -EDEADLK called from a handler thread of @ctx;
 *  -ENOSPC  SAME_THREAD and the process has 256 same-thread regions;
 *  -ENOMEM, -EAGAIN (threads), or the error of mmap/memfd/mbind/sigaction/
 *           UFFDIO_REGISTER.
 * On failure nothing is left behind, and opts->pager is still the caller's:
 * its release() is not called.
 * Context: any thread but a handler thread; serialized with other changes
 * to the context's region map by the context lock.
 */
int faultd_region_create(struct faultd_ctx *ctx,
			 const struct faultd_region_opts *opts,
			 struct faultd_region **regionp);

/*
 * faultd_region_destroy() - unmap the region, wake any thread still waiting
 * on one of its faults (it then gets SIGSEGV: the memory is gone, never
 * zeros), stop its own handler threads and evictor, and drop its pager
 * (released once its clones are gone too). In-flight fills and prefetches
 * finish first; queued prefetches are dropped; dirty pages are not written
 * back. A region with copy-on-write clones first saves the pages they
 * still need, calling its pager in this thread. Accepts NULL (returns 0).
 * Returns 0, or -EDEADLK when called from one of the context's handler
 * threads (a pager callback), where it would wait for itself.
 * Context: any other thread but a pager callback's (see fill()); not
 * concurrently with other calls that use the same region handle.
 */
int faultd_region_destroy(struct faultd_region *region);

/*
 * faultd_region_base() - the start of the region; it never moves (resize
 * works in place). faultd_region_size() - its current length.
 * faultd_region_page_size() - the size of its pages (the unit of a fault).
 * NULL gives NULL or 0.
 * Context: any thread, pager callbacks included.
 */
void *faultd_region_base(const struct faultd_region *region);
size_t faultd_region_size(const struct faultd_region *region);
size_t faultd_region_page_size(const struct faultd_region *region);

/*
 * faultd_region_resize() - grow or shrink the region in place to @length
 * bytes (a multiple of the page size). Its base does not move. Within the
 * region's max_length the address space is already reserved; beyond it,
 * growth needs free address space right after the reservation. Pages beyond
 * the new end are gone (their memory is given back); new pages fault in
 * like the others.
 * Returns 0, or -EINVAL (NULL, 0 or unaligned length), -ENOMEM (no room to
 * grow in place), -EBUSY (the region has copy-on-write clones, or is a
 * clone of a region without a memfd), -EOPNOTSUPP (a SAME_THREAD region;
 * a cloned memfd region or a clone of one: frozen), -EDEADLK (from a
 * handler thread), or the error of mmap/mremap/ftruncate/mbind/
 * UFFDIO_REGISTER.
 * Context: as faultd_region_create().
 */
int faultd_region_resize(struct faultd_region *region, size_t length);

/*
 * faultd_region_discard() - drop the pages of [offset, offset + len): the
 * next access faults again (to the pager, or zeros). The memory is given
 * back, except in memfd-hugetlb regions, which keep their huge pages and
 * clear or refill them at the next fault instead of going through the
 * pool; in a cloned memfd region or its clones, a page returns to its
 * content as of the first clone. The pages' writes are forgotten (not
 * reported dirty, not written back).
 * Returns 0, or -EINVAL (NULL, unaligned, empty or outside the region),
 * -EBUSY (the region has copy-on-write clones: they read its pages),
 * -EOPNOTSUPP (a copy-on-write clone of a region without a memfd), or the
 * error of madvise/fallocate.
 * Context: any thread but a handler thread of the region; not
 * concurrently with its destruction.
 */
int faultd_region_discard(struct faultd_region *region, uint64_t offset,
			  size_t len);

/*
 * faultd_region_protect(), faultd_region_unprotect() - write-protect the
 * pages of [offset, offset + len), or remove the protection (waking any
 * writer waiting on it). A write to a protected page of a FAULTD_REGION_WP
 * region faults to a handler (write hook, dirty bit) and goes on; in a
 * FAULTD_REGION_WP_ASYNC region the kernel records it. Unprotected pages
 * count as dirty for the next collection.
 * Returns 0, -EINVAL (NULL, unaligned, empty or outside the region),
 * -EOPNOTSUPP (the region tracks no writes).
 * Context: any thread but a handler thread of the region.
 */
int faultd_region_protect(struct faultd_region *region, uint64_t offset,
			  size_t len);
int faultd_region_unprotect(struct faultd_region *region, uint64_t offset,
			    size_t len);

/*
 * faultd_region_dirty() - collect the pages of [offset, offset + len)
 * written since the last collection and re-arm tracking. @bitmap receives
 * one bit per page (bit i: the page at offset + i * page size), in
 * ceil(len / page size / 64) words.
 * Guarantee: a write that completed before the call is reported by it or
 * an earlier one; a write that starts after it returns is reported by a
 * later one; a write concurrent with it is reported by it or the next. No
 * write goes unreported (pages unprotected with faultd_region_unprotect()
 * count as written), but faultd_region_sync() and eviction (a budget) take
 * the bits of the pages they write back, as a collection does.
 * Returns the number of dirty pages, or -EINVAL (NULL, unaligned, empty or
 * outside the region), -EOPNOTSUPP (the region tracks no writes).
 * Context: any thread but a handler thread of the region; concurrently
 * with writers.
 */
ssize_t faultd_region_dirty(struct faultd_region *region, uint64_t offset,
			    size_t len, uint64_t *bitmap);

/*
 * Clones: copy-on-write children of a region.
 */
struct faultd_clone_opts {
	size_t size;		/* sizeof(struct faultd_clone_opts) */
	uint64_t flags;		/* FAULTD_REGION_WP, or 0 */
	struct faultd_ctx *ctx;	/* NULL or the parent's: clones stay in it */
	unsigned int handler_threads; /* 0: the context's default */
	const char *name;
	faultd_write_hook write_hook; /* with FAULTD_REGION_WP */
	void *hook_arg;
};

/*
 * faultd_region_clone() - a region that reads @parent's content as of this
 * call; the first write to a page gives the child its own copy; later
 * writes to the parent are not seen by the child and the child's writes
 * never reach the parent. Two implementations:
 *
 * - A FAULTD_REGION_MEMFD parent shares its pages with the child. The
 *   first clone freezes the memfd as the base: parent and child become
 *   private views of it (faults map the page-cache page read-only with
 *   UFFDIO_CONTINUE; the kernel copies a page on its first write). The
 *   parent's later writes go to private pages of its own, so it can no
 *   longer be resized; discard returns a page to its frozen content. A
 *   frozen region can be cloned again (more children of the same base)
 *   while it has no pages of its own yet; otherwise -EBUSY.
 * - Any other 4 KiB anonymous parent is copied page by page on first
 *   touch: the child's read installs the parent's content write-protected
 *   (cow_reads), its first write makes the page its own (cow_faults). The
 *   parent copies before it writes: from the clone on, it is write-
 *   protected, and its first write to each page saves the old content for
 *   the child (cow_saved) unless the child has its own copy. While it has
 *   clones the parent cannot be resized or discarded (-EBUSY); destroying
 *   it first saves every page its clones still need. The child's private
 *   page state is allocated by its first fault, under the context lock
 *   (cow_prepare, like anon_vma_prepare()); later faults need only its
 *   region lock. A clone cannot be discarded (-EOPNOTSUPP).
 *
 * @opts may be NULL for the defaults. A failed clone may leave a memfd
 * parent frozen.
 * Returns 0 and the child in *childp, or -EINVAL (NULL parent/childp,
 * opts->size short of flags, flags other than WP, a hook without WP),
 * -E2BIG (opts->size beyond ours with non-zero unknown fields), -EXDEV
 * (opts->ctx is not the parent's), -EDEADLK (from a handler thread),
 * -EOPNOTSUPP (hugetlb parents, SAME_THREAD parents, parents with a
 * budget or WP_ASYNC tracking, kernels without MINOR faults on shmem for
 * memfd parents), -EBUSY (see above), -ENOMEM, or the errors of
 * faultd_region_create() and of the freeze (mmap/mremap/UFFDIO_REGISTER/
 * PAGEMAP_SCAN).
 * Context: as faultd_region_create().
 */
int faultd_region_clone(struct faultd_region *parent,
			const struct faultd_clone_opts *opts,
			struct faultd_region **childp);

/*
 * faultd_region_prefetch() - fill [offset, offset + len) of the region
 * from its pager (or zeros) in the background, leaving pages already
 * present alone; pages are installed clean (write-protected where writes
 * are tracked). Returns at once: 0, or -EINVAL (NULL, unaligned, empty,
 * outside the region), -EDEADLK (from a handler thread of the context),
 * -EOPNOTSUPP (huge pages, a clone, a heap, or pages in a page cache
 * without a budget: a memfd-hugetlb region, a cloned memfd region),
 * -EBUSY (a region with copy-on-write clones), -EAGAIN (the context's
 * queue of requests is full: wait and retry), -ENOMEM, or the error of
 * starting the worker threads (two per context, started by the first
 * region or call that needs them). In a region with a budget the pages
 * prefetched count against it like any other. Pager errors are counted,
 * not returned: the fault that needs the page reports them.
 * faultd_region_prefetch_wait() returns when no prefetch of the region is
 * queued or running: those queued before the call, and any queued while
 * it waits (read-ahead included). Returns 0, or -EINVAL (NULL).
 * Context: any thread but a handler thread of the region's context, nor
 * a pager callback; faultd_region_prefetch_wait() does not detect one
 * (no -EDEADLK) and may wait forever there.
 */
int faultd_region_prefetch(struct faultd_region *region, uint64_t offset,
			   size_t len);
int faultd_region_prefetch_wait(struct faultd_region *region);

/*
 * faultd_region_sync() - write the dirty pages of [offset, offset + len)
 * back with the pager's writeback(), without dropping them - msync() for
 * this library. It takes the dirty set as faultd_region_dirty() does: a
 * page it wrote back is not reported by a later faultd_region_dirty()
 * (unless written again). Pages written while it runs stay dirty for the
 * next sync.
 * Returns 0, -EINVAL (NULL, unaligned, empty, outside), -EOPNOTSUPP (the
 * region tracks no writes, its pager has no writeback(), or it is a
 * copy-on-write clone of a region without a memfd), -EDEADLK (from a
 * handler thread), -ENOMEM, the error of collecting the dirty set, or the
 * first writeback() error (its pages stay dirty; the other runs are still
 * written back).
 * Context: any thread but a handler thread of the region's context.
 */
int faultd_region_sync(struct faultd_region *region, uint64_t offset,
		       size_t len);

/*
 * faultd_region_memfd() - the memfd behind a FAULTD_REGION_MEMFD region
 * (hugetlb or not, or one with a budget), owned by the region: dup() it
 * to keep it. Returns the fd, or -EINVAL (NULL, or no memfd).
 * Pages of the memfd touched through another mapping are filled by the
 * kernel (zeros), not by the region's handlers: share it only for pages
 * that are already present.
 * In a cloned memfd region, and in its clones, it is the frozen base:
 * writing through it changes what the parent and every clone read (where
 * they have no page of their own).
 * With a budget, writes through it bypass dirty tracking: they are
 * written back only with a page the region dirtied itself, else lost when
 * the page is evicted (or, if it was not resident, overwritten by the
 * pager at the next fault).
 * Context: any thread.
 */
int faultd_region_memfd(const struct faultd_region *region);

/*
 * faultd_sigbus() - for a program's own SIGBUS handler: resolve the signal
 * if it is a fault in a FAULTD_REGION_SAME_THREAD region. @info is the
 * handler's siginfo_t * (void * here so that the header needs no POSIX
 * feature macros). Returns 1 if it was (return from the handler: the
 * access is retried), 0 if not (handle it as yours; also for a page it
 * poisoned after a pager error).
 * Context: a SIGBUS handler, in the faulting thread; async-signal-safe.
 */
int faultd_sigbus(int sig, void *info, void *ucontext);

/* ------------------------------------------------------------------------
 * Handler groups: one userfaultfd and a set of threads serving many regions
 */

struct faultd_group_opts {
	size_t size;		/* sizeof(struct faultd_group_opts) */
	unsigned int threads;	/* handler threads; 0: the context default */
	/* The largest page of the group's regions (0: up to 2 MiB); each
	 * thread reserves (not allocates) that much address space. */
	size_t max_page_size;
	unsigned int placement;	/* enum faultd_placement */
	unsigned int cpu;
	unsigned int busy_poll_us;
};

/*
 * faultd_group_create() - a handler group that regions can join with
 * faultd_region_opts.group, so that many small regions share a few threads.
 * @opts may be NULL for the defaults.
 * Returns 0, or -EINVAL (NULL ctx/groupp, opts->size short of threads, an
 * unknown placement, a cpu the process cannot use), -E2BIG (opts->size
 * beyond ours with non-zero unknown fields), -EDEADLK (from a handler
 * thread), -ENOMEM, -EAGAIN (threads), or the userfaultfd/eventfd error.
 * Context: as faultd_region_create().
 */
int faultd_group_create(struct faultd_ctx *ctx,
			const struct faultd_group_opts *opts,
			struct faultd_group **groupp);

/*
 * faultd_group_destroy() - stop the group's threads and free it.
 * Returns 0 (also for NULL), -EBUSY while regions still use it, -EDEADLK
 * from a handler thread.
 * Context: any thread but a handler thread of the context; not
 * concurrently with other calls that use the group.
 */
int faultd_group_destroy(struct faultd_group *group);

/* ------------------------------------------------------------------------
 * Statistics
 */

/* Latency histogram: 4 buckets per power of two of nanoseconds. */
#define FAULTD_HIST_SUB 4
#define FAULTD_HIST_BUCKETS (40 * FAULTD_HIST_SUB)

/*
 * Counters of a region, or of a whole context (its regions, live and
 * destroyed, and the faults that belonged to no region). The lock counters
 * have the meaning of the kernel's vma_lock_* vmstat items.
 */
struct faultd_stats {
	size_t size;		/* sizeof(struct faultd_stats) */
	uint64_t faults;	/* page-fault messages handled */
	uint64_t zero_fills;	/* missing faults whose page this fault
				   installed as zeros */
	uint64_t pager_fills;	/* missing faults whose page this fault
				   installed with the pager's content */
	uint64_t mapped;	/* resolved by mapping a page already in the
				   page cache (UFFDIO_CONTINUE) */
	uint64_t wp_faults;	/* write-protect faults (first writes) */
	uint64_t around;	/* pages mapped by fault-around, beyond the
				   faulting ones */
	uint64_t cow_faults;	/* clone: writes that got a private copy */
	uint64_t cow_reads;	/* clone: reads of the parent's content */
	uint64_t cow_prepare;	/* clone: private page state allocated (once
				   per clone, under the context lock) */
	uint64_t cow_saved;	/* parent: pages saved for a clone before
				   a write changed them */
	uint64_t fast;		/* resolved under the region lock alone */
	uint64_t retry;		/* fast path needed the context lock */
	uint64_t abort;		/* region try-lock failed (being changed) */
	uint64_t miss;		/* RCU lookup found no region (see below) */
	uint64_t locked;	/* resolved under the context lock */
	uint64_t eexist;	/* already resolved by another thread: woken */
	uint64_t eagain;	/* map changing: parked and retried */
	uint64_t gone;		/* range or process gone (ENOENT/ESRCH) */
	uint64_t no_region;	/* fault in no region: woken, gets SIGSEGV */
	uint64_t poisoned;	/* pages poisoned (the access gets SIGBUS) */
	uint64_t pager_errors;	/* fill() errors */
	uint64_t events;	/* non-cooperative events read */
	/* time from reading the message to its resolution, ns */
	uint64_t latency[FAULTD_HIST_BUCKETS];
	/* Added after latency[]: fields are only ever appended. */
	uint64_t readahead;	/* pages filled ahead of faults (read-ahead
				   and faultd_region_prefetch()) */
	uint64_t ra_hits;	/* faults that continued a sequence: the
				   read-ahead window grew */
	uint64_t evictions;	/* pages evicted for the budget */
	uint64_t writebacks;	/* pages written back (eviction, sync) */
	uint64_t bytes_read;	/* from the pager */
	uint64_t bytes_written;	/* to the pager */
};

/*
 * faultd_region_stats(), faultd_ctx_stats() - read the counters. They are
 * kept per handler thread and summed here, so a read while faults run is a
 * consistent snapshot of each thread's counters, not of all of them at once.
 * A fault is counted (faults and how it was resolved) before its thread
 * resumes; what else the handler did for it (around after a window that
 * stopped short, read-ahead queued) may be counted just after. A fault is
 * counted as resolved only by what it did: one whose fill lost a race
 * (EEXIST), found its range gone or was parked counts as eexist, gone, or
 * as what its retry did - so zero_fills + pager_fills + around are the
 * pages installed, exactly once the region is idle (a loser takes its
 * count back after the winner woke the thread). abort and miss are counted
 * in the region the fault then finds under the context lock, or only in
 * the context when it finds none (nearly every miss). Once the region is
 * destroyed its counters are final, and in the context's.
 * *stats is filled up to the smaller of stats->size and ours, and
 * stats->size is set to that.
 * Returns 0, or -EINVAL (NULL argument, stats->size smaller than a
 * size_t); faultd_ctx_stats() also -ENOMEM.
 * Context: any thread, pager callbacks and write hooks included:
 * faultd_ctx_stats() takes only a leaf lock, never the context lock.
 */
int faultd_region_stats(const struct faultd_region *region,
			struct faultd_stats *stats);
int faultd_ctx_stats(const struct faultd_ctx *ctx, struct faultd_stats *stats);

/*
 * faultd_stats_latency() - the latency at percentile @pct of the histogram
 * in @stats, in nanoseconds (the middle of its bucket). @pct is clamped to
 * 0..100. Returns 0 when the histogram is empty, @stats is NULL, or
 * stats->size < sizeof(struct faultd_stats) (so also for a struct of an
 * older, smaller size, though it holds the whole histogram).
 * Context: any.
 */
uint64_t faultd_stats_latency(const struct faultd_stats *stats, double pct);

/* ------------------------------------------------------------------------
 * Heaps: brk-like, growing in place
 */

struct faultd_heap;

struct faultd_heap_opts {
	size_t size;		/* sizeof(struct faultd_heap_opts) */
	size_t max_size;	/* the reservation; a multiple of the page size */
	/*
	 * Shrinking keeps the pages it frees until the present memory above
	 * the break exceeds this many bytes, then gives it all back
	 * (MADV_DONTNEED). 0: 128 KiB (glibc's M_TRIM_THRESHOLD); SIZE_MAX:
	 * never.
	 */
	size_t trim_threshold;
	const char *name;	/* for logs; may be NULL */
};

/*
 * faultd_heap_create() - reserve @opts->max_size bytes as a region of its
 * own, with the break at its base. Memory below the break reads as zeros
 * on first touch; memory above it gets SIGBUS when touched (except pages a
 * shrink kept, see trim_threshold, which are still mapped).
 * The heap belongs to that region: faultd_ctx_destroy() destroys it too.
 * Returns 0, or -EINVAL (NULL argument, opts->size short of max_size,
 * max_size 0 or unaligned), -E2BIG (opts->size beyond ours with non-zero
 * unknown fields), -ENOMEM, or the errors of faultd_region_create()
 * (-EDEADLK from a handler thread among them).
 * Context: as faultd_region_create().
 */
int faultd_heap_create(struct faultd_ctx *ctx,
		       const struct faultd_heap_opts *opts,
		       struct faultd_heap **heapp);

/*
 * faultd_heap_destroy() - destroy the heap's region, as
 * faultd_region_destroy() does, and free the heap. Accepts NULL. After
 * faultd_ctx_destroy() of its context the heap is gone already: calling
 * this then is a use-after-free, as for a region. From a handler thread
 * of the context it logs an error and does nothing.
 * Context: any thread but a handler thread of the context; not
 * concurrently with any other call on the heap.
 */
void faultd_heap_destroy(struct faultd_heap *heap);

/*
 * faultd_heap_sbrk() - move the break by @increment bytes (any sign, any
 * alignment; 0 reads it) and return the previous break in *prev, like
 * sbrk(2). Growth never makes a system call (but when it re-exposes pages
 * that were poisoned by accesses above the break), never changes the
 * region map, and clears memory it re-exposes that a shrink had kept, so
 * it never shows old data.
 * Returns 0, or -ENOMEM (past the reservation: the break is unchanged),
 * -EINVAL (below the base, or NULL arguments: unchanged). Unlike brk(2),
 * where the kernel ignores a break below the start and reports success,
 * that is an error here.
 * Context: any thread, concurrently with every heap call but destroy.
 */
int faultd_heap_sbrk(struct faultd_heap *heap, intptr_t increment,
		     void **prev);

/*
 * faultd_heap_brk() - set the break to @addr, like brk(2).
 * Returns 0, -ENOMEM (past the reservation), -EINVAL (below the base); on
 * error the break is unchanged. Context: as faultd_heap_sbrk().
 */
int faultd_heap_brk(struct faultd_heap *heap, void *addr);

/*
 * faultd_heap_base() - the start of the heap (its initial break and lowest
 * possible one); NULL for NULL. Context: any thread.
 */
void *faultd_heap_base(const struct faultd_heap *heap);

struct faultd_heap_stats {
	size_t size;		/* sizeof(struct faultd_heap_stats) */
	uint64_t growths;	/* calls that moved the break up */
	uint64_t shrinks;	/* calls that moved it down */
	uint64_t trims;		/* shrinks that gave memory back */
	uint64_t bytes_returned;/* given back by trims */
	uint64_t bytes_cleared;	/* kept memory cleared when re-exposed */
	uint64_t faults;	/* faults served in the heap */
	uint64_t poisoned;	/* accesses above the break (SIGBUS) */
};

/*
 * faultd_heap_stats() - read the heap's counters. *stats is filled up to
 * the smaller of stats->size and ours, and stats->size is set to that.
 * Returns 0, or -EINVAL (NULL argument, stats->size smaller than a
 * size_t). Context: as faultd_heap_sbrk().
 */
int faultd_heap_stats(const struct faultd_heap *heap,
		      struct faultd_heap_stats *stats);

/* ------------------------------------------------------------------------
 * Range clears
 */

/*
 * Clear strategies. AUTO (the default) measures once per process which is
 * fastest here: the best temporal one (memset or rep stosb) for small or
 * cached ranges, the best of all (often non-temporal stores or CLZERO) for
 * large ranges that are not in the cache; a large clear reads a few lines of
 * its range first to tell which it is.
 */
enum faultd_clear_strategy {
	FAULTD_CLEAR_AUTO = 0,
	FAULTD_CLEAR_MEMSET = 1,    /* the portable floor */
	FAULTD_CLEAR_REP_STOSB = 2, /* x86, fast with ERMS/FSRM */
	FAULTD_CLEAR_NT = 3,	    /* non-temporal stores: SSE2/AVX2/AVX-512 */
	FAULTD_CLEAR_CLZERO = 4,    /* AMD CLZERO */
};

/*
 * faultd_clear() - zero [dst, dst + len) as whole ranges, the way the
 * kernel clears huge folios, with the strategy chosen for this CPU. The
 * first call of faultd_clear*() in a process measures the strategies (a
 * few milliseconds); FAULTD_CLEAR=memset|rep-stosb|nt-store|clzero in the
 * environment forces one (an unknown or unavailable one is ignored).
 * After a non-temporal clear the range is not in the cache.
 * Context: any.
 */
void faultd_clear(void *dst, size_t len);

/*
 * faultd_clear_set() - force @strategy for every later faultd_clear() in
 * the process, whatever FAULTD_CLEAR says. FAULTD_CLEAR_AUTO returns to
 * the automatic choice between the hot and cold strategies; the
 * calibration behind it runs once per process (here, if no call ran it
 * yet), never again.
 * Returns 0, -EINVAL (unknown strategy), -EOPNOTSUPP (this CPU lacks it;
 * ENOTSUP, the same value on Linux).
 * Context: any.
 */
int faultd_clear_set(int strategy);

/*
 * faultd_clear_name() - "auto", "memset", ...; NULL for an unknown one.
 * Context: any.
 */
const char *faultd_clear_name(int strategy);

struct faultd_clear_info {
	size_t size;		/* sizeof(struct faultd_clear_info) */
	int forced;		/* the forced strategy, or FAULTD_CLEAR_AUTO */
	int hot;		/* chosen for small or cached ranges */
	int cold;		/* chosen for large ranges not in the cache */
	unsigned int available;	/* 1 << FAULTD_CLEAR_* this CPU has */
	size_t probe_min;	/* ranges from this size are probed */
	uint64_t probe_cycles;	/* a load slower than this missed the cache;
				   0: probing off, large ranges count as cold */
	const char *nt_isa;	/* "sse2", "avx2" or "avx512f" */
	double hot_gbps[5];	/* the calibration's figures, GB/s */
	double cold_gbps[5];
};

/*
 * faultd_clear_info() - what the calibration measured and chose (running
 * it if no call did yet). *info is filled up to the smaller of info->size
 * and ours, and info->size is set to that.
 * Returns 0, or -EINVAL (NULL, or info->size short of cold).
 * Context: any.
 */
int faultd_clear_info(struct faultd_clear_info *info);

/* ------------------------------------------------------------------------
 * Checkpoint and restore
 *
 * An image holds a region's content in 64 KiB blocks, each with a CRC32C
 * (or a MAC, with a key); blocks of zeros take no space. Images are
 * versioned; a reader refuses one it does not understand. See
 * faultd-image(5).
 */

#define FAULTD_CKPT_SYNC (1u << 0)	  /* fsync the image and its directory */
#define FAULTD_CKPT_INCREMENTAL (1u << 1) /* only what changed since @parent */
#define FAULTD_CKPT_HMAC (1u << 2)	  /* with @key_file: HMAC-SHA256s */

struct faultd_checkpoint_opts {
	size_t size;		/* sizeof(struct faultd_checkpoint_opts) */
	unsigned int flags;	/* FAULTD_CKPT_* */
	/* With FAULTD_CKPT_INCREMENTAL: the image this one is taken against;
	 * it must be in the same directory, under the name it has now. */
	const char *parent;
	/* NULL, or a key file (32 bytes, not readable or writable by group
	 * or others): the image is authenticated, every block, table chunk
	 * and the header with an AES-256-GMAC (with FAULTD_CKPT_HMAC: an
	 * HMAC-SHA256, for CPUs without AES and carry-less multiply
	 * instructions) under a key derived from it, and reads only with
	 * the same key (a parent must have been taken with it too). */
	const char *key_file;
};

/*
 * faultd_checkpoint() - write an image of the region to @path (opts may be
 * NULL: a full image, not synced). The calling thread reads the region:
 * pages not present are faulted in from the pager (a region without one
 * skips them: they are zeros). A full image of a region with write
 * tracking collects its dirty set first, so that an incremental image
 * taken later holds exactly the pages written since (and no dirty set
 * collected in between may be taken by faultd_region_dirty() or sync, or
 * those pages are missed). The image is consistent if the region is not
 * written while it is taken. It is written to a temporary file renamed over
 * @path when complete: a crash leaves the old file or the new one.
 * Returns 0, or -EINVAL (NULL, unknown flags, INCREMENTAL without a parent
 * or a parent without INCREMENTAL, HMAC without a key file, a key file
 * that is not a regular file of 32 bytes), -EPERM (the key file is open
 * to group or others), -E2BIG, -EOPNOTSUPP (incremental of a region
 * without write tracking; huge pages; a same-thread region), -EDEADLK
 * (from a handler thread), -ENAMETOOLONG, the parent's errors as for
 * faultd_restore(), or the error of a file operation.
 * Context: any thread but a handler thread; not concurrently with resize
 * or destroy of the region.
 */
int faultd_checkpoint(struct faultd_region *region, const char *path,
		      const struct faultd_checkpoint_opts *opts);

/*
 * FAULTD_RESTORE_DAEMON: the faults are served by the faultd daemon (see
 * faultd(8)) over @socket; the library keeps the userfaultfd and the
 * image open, and serves the region itself if the daemon dies (its faults
 * wait meanwhile; none is answered with zeros) and once the daemon has
 * put every page in.
 * FAULTD_RESTORE_LAZY: no background population: pages come in only when
 * touched (or prefetched); the daemon, told so, serves faults only.
 */
#define FAULTD_RESTORE_DAEMON (1u << 0)
#define FAULTD_RESTORE_LAZY (1u << 1)
/*
 * FAULTD_RESTORE_WSET_FIRST: with a working set, faultd_restore() returns
 * once the set is in (its faults are served meanwhile, for other threads
 * that touch the region), as a restore that loads the set before the
 * program resumes; in the process only.
 */
#define FAULTD_RESTORE_WSET_FIRST (1u << 2)

struct faultd_restore_opts {
	size_t size;		/* sizeof(struct faultd_restore_opts) */
	unsigned int flags;	/* FAULTD_RESTORE_* */
	const char *socket;	/* the daemon's socket; NULL: the default
				   ($XDG_RUNTIME_DIR/faultd.sock, else
				   /run/faultd/faultd.sock) */
	unsigned int handler_threads; /* 0: the context's default */
	const char *name;	/* the region's name; NULL: "restore" */
	/* NULL, or the key file the image was taken with: the image must be
	 * authenticated with it, and every block is checked by its MAC (a
	 * daemon is sent the image's own key, derived from this one). */
	const char *key_file;
	/*
	 * Working sets (faultd-working-set(5)). NULL, or a file to write the
	 * pages this restore's faults asked for into, in the order of first
	 * touch (pages filled ahead of any fault are not in it; a recording
	 * has no fault-around, so every page touched faults): in the
	 * process when the region is destroyed; through the daemon, by the
	 * daemon, when every page is in and when the session ends (the
	 * region's destruction waits for it, up to 5 s).
	 */
	const char *record_working_set;
	/*
	 * NULL, or a working set an earlier restore of this image recorded:
	 * its pages are read with large reads and put in before the
	 * background population, faults being served first meanwhile. A set of another image, a truncated or
	 * corrupt one, or one that lists pages beyond the image is logged
	 * and not used: the restore goes on without it.
	 */
	const char *working_set;
};

/*
 * faultd_restore() - a new region of the image's length whose content is
 * the image's, served lazily: the first access to a page faults and gets
 * its 64 KiB block from the image, while the rest is read in the
 * background (unless FAULTD_RESTORE_LAZY). A block whose checksum does not
 * match is never served: its pages are poisoned (the access gets SIGBUS)
 * and the error is logged and counted (pager_errors, poisoned). An
 * incremental image reads its parent from the same directory. With
 * FAULTD_RESTORE_DAEMON, @path may be an NBD URI (nbd://, nbds://,
 * nbd+unix://, nbd+vsock://) of an export of the image file, which the
 * daemon alone reads (faultd(8), "Restoring from network storage").
 * Returns 0 and the region in *regionp, or -EINVAL (NULL, unknown flags,
 * not an image, a bad key file), -EPERM (the key file is open to group or
 * others), -E2BIG, -EPROTONOSUPPORT (an image version or daemon protocol
 * this library does not speak), -EBADMSG (a corrupt or truncated image:
 * header or tables), -ENOKEY (the image is authenticated and no key file
 * was given), -EKEYREJECTED (a key file was given and the image has no
 * MACs, or was taken with another key), -EOPNOTSUPP (a key, and a daemon
 * that cannot check MACs; an NBD URI without FAULTD_RESTORE_DAEMON),
 * -ESTALE (the parent file is not the image's
 * parent), -ECONNREFUSED/-ENOENT (no daemon on the socket), an error the
 * daemon returned for the registration, or those of faultd_region_create().
 * Context: as faultd_region_create().
 */
int faultd_restore(struct faultd_ctx *ctx, const char *path,
		   const struct faultd_restore_opts *opts,
		   struct faultd_region **regionp);

/*
 * faultd_restore_wait() - wait until every page of a restored region is in
 * (the background population is done, or, through the daemon, the daemon
 * said so or the library finished in its place).
 * Returns 0, -EINVAL (NULL, not a restored region), -EDEADLK (from a
 * handler thread), or -EAGAIN (FAULTD_RESTORE_LAZY: nothing populates it).
 * Context: any thread but a handler thread.
 */
int faultd_restore_wait(struct faultd_region *region);

struct faultd_restore_progress {
	size_t size;		/* sizeof(struct faultd_restore_progress) */
	uint64_t pages_total;
	uint64_t pages_urgent;	   /* filled for faults (with fault-around) */
	uint64_t pages_background; /* filled ahead of any fault */
	uint64_t faults;
	uint64_t p50_ns;	/* fault latency, from reading the fault to
				   waking the thread */
	uint64_t p99_ns;
	int done;		/* every page is in */
	int daemon;		/* 1: the daemon served (or serves) it */
	int daemon_died;	/* the library took over after the daemon died */
	/* A working set replayed in the process (0 through the daemon, and
	 * without one): pages it put in, bytes it read, and how long that
	 * took (0 while it runs). */
	uint64_t pages_replayed;
	uint64_t replay_bytes;
	uint64_t replay_ns;
	uint64_t replay_read_ns; /* of replay_ns, in its reads (summed over
				    its threads) */
};

/*
 * faultd_restore_progress() - how far a restore is. Through the daemon,
 * the figures are the daemon's last report (it sends one every 100 ms and
 * one at the end) plus the library's own after a take-over.
 * Returns 0, or -EINVAL (NULL, not a restored region, size too small).
 * Context: any thread.
 */
int faultd_restore_progress(struct faultd_region *region,
			    struct faultd_restore_progress *progress);

#ifdef __cplusplus
}
#endif

#endif /* FAULTD_H */
