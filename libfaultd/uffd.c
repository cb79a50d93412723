// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * uffd.c - thin wrappers over userfaultfd(2) and its ioctls.
 *
 * This is the only place where errno is read after a userfaultfd call: every
 * wrapper returns 0 / a count, or -errno. The feature probe runs once per
 * process and treats ENOSYS/EPERM as "userfaultfd unavailable", the way
 * CRIU's uffd.c does. uffd_classify() is the one place that decides what an
 * ioctl result means for a fault: resolved, raced, retry later, or gone.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "internal.h"

static int dev_userfaultfd(int flags)
{
	int dev, fd;

	dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
	if (dev < 0)
		return -errno;
	fd = ioctl(dev, USERFAULTFD_IOC_NEW, flags);
	fd = fd < 0 ? -errno : fd;
	close(dev);
	return fd;
}

static int sys_userfaultfd(int flags)
{
	int fd = (int)syscall(SYS_userfaultfd, flags);

	return fd < 0 ? -errno : fd;
}

/* An fd without the API handshake: the device first, then the syscall. */
static int uffd_open_raw(bool nonblock)
{
	int flags = O_CLOEXEC | (nonblock ? O_NONBLOCK : 0);
	int fd;

	fd = dev_userfaultfd(flags);
	if (fd >= 0)
		return fd;
	fd = sys_userfaultfd(flags);
	if (fd == -EPERM) { /* unprivileged_userfaultfd=0: user faults only */
		int user = sys_userfaultfd(flags | UFFD_USER_MODE_ONLY);

		/* Before 5.11 the flag is unknown (-EINVAL): EPERM stands. */
		return user == -EINVAL ? -EPERM : user;
	}
	return fd;
}

/* The feature probe's own ioctls are no failure points (see inject.h). */
static __thread bool probing;

/* The failure point of a userfaultfd ioctl; INJ_NR: none. */
static enum inject_point ioctl_point(unsigned long req)
{
	switch (req) {
	case UFFDIO_REGISTER:
		return INJ_REGISTER;
	case UFFDIO_COPY:
		return INJ_COPY;
	case UFFDIO_ZEROPAGE:
		return INJ_ZEROPAGE;
	case UFFDIO_WAKE:
		return INJ_WAKE;
	case UFFDIO_WRITEPROTECT:
		return INJ_WRITEPROTECT;
	case UFFDIO_CONTINUE:
		return INJ_CONTINUE;
	case UFFDIO_POISON:
		return INJ_POISON;
	default:
		return INJ_NR;
	}
}

/*
 * Every ioctl on a userfaultfd after the handshake goes through here, so
 * that an injected failure looks to the wrappers like the kernel's own:
 * -1 with errno, nothing done.
 */
static int uffd_ioctl(int fd, unsigned long req, void *arg)
{
	int err;

	if (!probing && inject_fail(ioctl_point(req), &err)) {
		errno = -err;
		return -1;
	}
	return ioctl(fd, req, arg);
}

static int uffd_api(int fd, uint64_t features, struct uffdio_api *api)
{
	memset(api, 0, sizeof(*api));
	api->api = UFFD_API;
	api->features = features;
	if (ioctl(fd, UFFDIO_API, api) < 0)
		return -errno;
	return 0;
}

/*
 * uffd_open() - a userfaultfd with exactly @features enabled.
 * Returns the fd, or -errno (-EINVAL when the kernel lacks a feature).
 */
int uffd_open(uint64_t features, bool nonblock)
{
	struct uffdio_api api;
	int fd, ret;

	fd = uffd_open_raw(nonblock);
	if (fd < 0)
		return fd;
	ret = uffd_api(fd, features, &api);
	if (ret < 0) {
		close(fd);
		return ret;
	}
	return fd;
}

static bool pagemap_scan_works(void)
{
	struct pm_scan_arg arg = { .size = sizeof(arg) };
	int fd, ret;

	fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	/* An empty range: valid when the ioctl exists, ENOTTY when not. */
	ret = ioctl(fd, PAGEMAP_SCAN, &arg);
	close(fd);
	return ret == 0;
}

/*
 * Can UFFDIO_CONTINUE install a page write-protected (6.2 and later)? No
 * feature bit says so: try it on one page of a memfd.
 */
static bool continue_wp_works(void)
{
	uint64_t f = UFFD_FEATURE_MINOR_SHMEM | UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
	int mfd = memfd_create("faultd-probe", MFD_CLOEXEC), fd = -1;
	char *view = MAP_FAILED, *alias = MAP_FAILED;
	bool ok = false;

	if (mfd < 0 || ftruncate(mfd, 4096) < 0)
		goto out;
	view = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	alias = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	fd = uffd_open(f, true);
	if (view == MAP_FAILED || alias == MAP_FAILED || fd < 0)
		goto out;
	alias[0] = 1; /* the page is in the page cache */
	ok = !uffd_register(fd, (uintptr_t)view, 4096,
			    UFFDIO_REGISTER_MODE_MINOR |
				    UFFDIO_REGISTER_MODE_WP,
			    NULL) &&
	     uffd_continue(fd, (uintptr_t)view, 4096,
			   UFFDIO_CONTINUE_MODE_WP) == 4096;
out:
	if (fd >= 0)
		close(fd);
	if (view != MAP_FAILED)
		munmap(view, 4096);
	if (alias != MAP_FAILED)
		munmap(alias, 4096);
	if (mfd >= 0)
		close(mfd);
	return ok;
}

static uint64_t have_from_api(const struct uffdio_api *api)
{
	const struct {
		uint64_t feature;
		uint64_t have;
	} map[] = {
		{ UFFD_FEATURE_PAGEFAULT_FLAG_WP, FAULTD_HAVE_WP },
		{ UFFD_FEATURE_WP_HUGETLBFS_SHMEM, FAULTD_HAVE_WP_SHMEM },
		{ UFFD_FEATURE_WP_ASYNC, FAULTD_HAVE_WP_ASYNC },
		{ UFFD_FEATURE_MINOR_SHMEM, FAULTD_HAVE_MINOR_SHMEM },
		{ UFFD_FEATURE_MINOR_HUGETLBFS, FAULTD_HAVE_MINOR_HUGETLB },
		{ UFFD_FEATURE_MISSING_SHMEM, FAULTD_HAVE_MISSING_SHMEM },
		{ UFFD_FEATURE_MISSING_HUGETLBFS, FAULTD_HAVE_MISSING_HUGETLB },
		{ UFFD_FEATURE_POISON, FAULTD_HAVE_POISON },
		{ UFFD_FEATURE_MOVE, FAULTD_HAVE_MOVE },
		{ UFFD_FEATURE_SIGBUS, FAULTD_HAVE_SIGBUS },
		{ UFFD_FEATURE_EVENT_UNMAP, FAULTD_HAVE_EVENTS },
	};
	uint64_t have = 0;

	for (size_t i = 0; i < ARRAY_SIZE(map); i++)
		if (api->features & map[i].feature)
			have |= map[i].have;
	return have;
}

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int probe_err;
static struct faultd_features probed;

static void probe_kernel(void)
{
	struct uffdio_api api;
	int fd, ret;

	fd = uffd_open_raw(true);
	if (fd < 0) {
		probe_err = fd;
		return;
	}
	/* Features 0: the kernel answers with everything it supports. */
	ret = uffd_api(fd, 0, &api);
	close(fd);
	if (ret < 0) {
		probe_err = ret;
		return;
	}
	probed.size = sizeof(probed);
	probed.uffd_features = api.features;
	probed.uffd_ioctls = api.ioctls;
	probed.have = have_from_api(&api);
	fd = dev_userfaultfd(O_CLOEXEC);
	if (fd >= 0) {
		probed.have |= FAULTD_HAVE_DEV_USERFAULTFD;
		close(fd);
	}
	if (pagemap_scan_works())
		probed.have |= FAULTD_HAVE_PAGEMAP_SCAN;
	probing = true;
	if ((probed.have & FAULTD_HAVE_MINOR_SHMEM) &&
	    (probed.have & FAULTD_HAVE_WP_SHMEM) && continue_wp_works())
		probed.have |= FAULTD_HAVE_CONTINUE_WP;
	probing = false;
}

int uffd_probe(struct faultd_features *f)
{
	pthread_once(&probe_once, probe_kernel);
	if (probe_err)
		return probe_err;
	if (f)
		*f = probed;
	return 0;
}

uint64_t uffd_have(void)
{
	return uffd_probe(NULL) ? 0 : probed.have;
}

FAULTD_EXPORT int faultd_probe(struct faultd_features *f)
{
	struct faultd_features all;
	int ret;

	if (!f || f->size < offsetof(struct faultd_features, have) +
				    sizeof(f->have))
		return -EINVAL;
	ret = uffd_probe(&all);
	if (ret < 0)
		return ret;
	all.size = f->size < sizeof(all) ? f->size : sizeof(all);
	memcpy(f, &all, all.size);
	return 0;
}

int uffd_register(int fd, uintptr_t start, size_t len, uint64_t mode,
		  uint64_t *ioctls)
{
	struct uffdio_register reg = {
		.range = { .start = start, .len = len },
		.mode = mode,
	};

	if (uffd_ioctl(fd, UFFDIO_REGISTER, &reg) < 0)
		return -errno;
	if (ioctls)
		*ioctls = reg.ioctls;
	return 0;
}

int uffd_unregister(int fd, uintptr_t start, size_t len)
{
	struct uffdio_range range = { .start = start, .len = len };

	return uffd_ioctl(fd, UFFDIO_UNREGISTER, &range) < 0 ? -errno : 0;
}

/*
 * Whether reads can be non-blocking per call (RWF_NOWAIT): userfaultfd has
 * ->read_iter and FMODE_NOWAIT since Linux 6.9. 1 yes, 0 unknown, -1 no.
 */
static atomic_int read_nowait;

/*
 * Returns the number of messages read, or -errno (-EAGAIN when none).
 * Never blocks where the kernel can say so per call, whatever the file's
 * O_NONBLOCK flag: that flag belongs to the open file, which a peer that
 * sent us its userfaultfd shares and may clear at any time (faultd(8)).
 * On older kernels it falls back to read(), which blocks if the flag was
 * cleared; callers that share the file with a peer check the flag.
 */
ssize_t uffd_read_msgs(int fd, struct uffd_msg *msgs, size_t max)
{
	struct iovec iov = { msgs, max * sizeof(*msgs) };
	ssize_t n = -1;

	if (atomic_load_explicit(&read_nowait, memory_order_relaxed) >= 0) {
		n = preadv2(fd, &iov, 1, -1, RWF_NOWAIT);
		if (n < 0 && errno == EOPNOTSUPP) {
			atomic_store(&read_nowait, -1);
			n = read(fd, msgs, iov.iov_len);
		}
	} else {
		n = read(fd, msgs, iov.iov_len);
	}
	if (n < 0)
		return -errno;
	return n / (ssize_t)sizeof(*msgs);
}

/*
 * The fill ioctls report in two places: the return value (with errno) and
 * an output field (bytes done, or -errno). Kernels have used both for
 * "nothing done". Fold them into one: bytes done (possibly short), or -errno.
 */
static ssize_t fill_result(int ret, int err, __s64 field, size_t len)
{
	if (ret == 0)
		return (ssize_t)len;
	if (field > 0)
		return field;
	if (field < 0)
		return field;
	return -err;
}

ssize_t uffd_copy(int fd, uintptr_t dst, const void *src, size_t len,
		  uint64_t mode)
{
	struct uffdio_copy c = {
		.dst = dst,
		.src = (uintptr_t)src,
		.len = len,
		.mode = mode,
	};
	int ret = uffd_ioctl(fd, UFFDIO_COPY, &c);

	return fill_result(ret, errno, c.copy, len);
}

ssize_t uffd_zeropage(int fd, uintptr_t dst, size_t len, uint64_t mode)
{
	struct uffdio_zeropage z = {
		.range = { .start = dst, .len = len },
		.mode = mode,
	};
	int ret = uffd_ioctl(fd, UFFDIO_ZEROPAGE, &z);

	return fill_result(ret, errno, z.zeropage, len);
}

ssize_t uffd_continue(int fd, uintptr_t dst, size_t len, uint64_t mode)
{
	struct uffdio_continue c = {
		.range = { .start = dst, .len = len },
		.mode = mode,
	};
	int ret = uffd_ioctl(fd, UFFDIO_CONTINUE, &c);

	return fill_result(ret, errno, c.mapped, len);
}

/* Set (@wp) or clear the write protection of a range; clearing wakes. */
int uffd_writeprotect(int fd, uintptr_t start, size_t len, bool wp)
{
	struct uffdio_writeprotect w = {
		.range = { .start = start, .len = len },
		.mode = wp ? UFFDIO_WRITEPROTECT_MODE_WP : 0,
	};

	return uffd_ioctl(fd, UFFDIO_WRITEPROTECT, &w) < 0 ? -errno : 0;
}

int uffd_wake(int fd, uintptr_t start, size_t len)
{
	struct uffdio_range range = { .start = start, .len = len };

	return uffd_ioctl(fd, UFFDIO_WAKE, &range) < 0 ? -errno : 0;
}

ssize_t uffd_poison(int fd, uintptr_t start, size_t len, uint64_t mode)
{
	struct uffdio_poison p = {
		.range = { .start = start, .len = len },
		.mode = mode,
	};
	int ret = uffd_ioctl(fd, UFFDIO_POISON, &p);

	return fill_result(ret, errno, p.updated, len);
}

/*
 * uffd_classify() - what a fill/wake result means for the fault.
 * EEXIST: the page is already there (a racing fault was resolved first);
 *   the waiters are not woken by the failed ioctl, so the caller wakes them.
 * EAGAIN: a non-cooperative event (fork, mremap, ...) is pending; retry the
 *   fault after the events have been read.
 * ENOENT/ESRCH: the range is no longer registered or the process exited.
 */
enum uffd_outcome uffd_classify(ssize_t ret)
{
	if (ret >= 0)
		return UFFD_DONE;
	switch (-ret) {
	case EEXIST:
		return UFFD_EXISTS;
	case EAGAIN:
		return UFFD_AGAIN;
	case ENOENT:
	case ESRCH:
		return UFFD_GONE;
	default:
		return UFFD_FAILED;
	}
}
