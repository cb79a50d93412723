// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * install.c - the one fill-and-install layer: put content into a range of
 * a userfaultfd-registered address space and say exactly what happened.
 *
 * Every path that resolves faults installs through install_range(): the handler
 * threads (fault.c), the prefetch workers, the same-thread SIGBUS path and
 * the daemon's sessions. It issues the ioctl of the operation (COPY, ZERO,
 * CONTINUE, POISON) with the right write-protect and wake modes, goes on
 * after a short result, steps past pages that are there already (or stops
 * at the first, if asked), classifies every result with uffd_classify(), and
 * wakes what no successful ioctl woke. The caller gets one inst_res: bytes
 * installed, bytes found present, and why it stopped early if it did. So a
 * fix to how a result is read is made here once, for every path.
 *
 * What install_range() never does: decide what the content is (the caller fills
 * the buffer, or asks for zeros, and install_fill_tail() zeros the part a
 * short fill left), poison on its own (a failure is reported; the caller
 * knows whether poisoning is right), or count statistics.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "faultd.h"
#include "uffd.h"

/*
 * Zeros to copy from where a zero page cannot be mapped (hugetlb has no
 * UFFDIO_ZEROPAGE, ZEROPAGE has no write-protect mode): INSTALL_ZEROS
 * bytes of read-only anonymous memory that is never written, so every page
 * of it is the kernel's shared zero page and it costs no memory.
 */
#define INSTALL_ZEROS (2ul << 20)

static const char *zeros;
static pthread_once_t zeros_once = PTHREAD_ONCE_INIT;

static void zeros_map(void)
{
	void *p = mmap(NULL, INSTALL_ZEROS, PROT_READ,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	zeros = p == MAP_FAILED ? NULL : p;
}

/*
 * install_zeros() - @len bytes of zeros to copy from, or NULL when the
 * mapping failed (at most once a process; the caller reports -ENOMEM).
 * Context: any thread; the first call maps (not from a signal handler:
 * same-thread regions call it when they are created).
 */
const void *install_zeros(size_t len)
{
	if (len > INSTALL_ZEROS)
		return NULL;
	pthread_once(&zeros_once, zeros_map);
	return zeros;
}

/* One ioctl over [dst, dst + len) with @src at the same offset. */
static ssize_t install_one(const struct inst_req *q, uintptr_t dst,
			   const void *src, size_t len)
{
	bool wp = q->flags & INST_WP;
	uint64_t dontwake = (q->flags & INST_DONTWAKE) ? 1 : 0;

	switch (q->op) {
	case INST_COPY:
		return uffd_copy(q->uffd, dst, src, len,
				 (wp ? UFFDIO_COPY_MODE_WP : 0) |
					 (dontwake ? UFFDIO_COPY_MODE_DONTWAKE
						   : 0));
	case INST_ZERO:
		return uffd_zeropage(q->uffd, dst, len,
				     dontwake ? UFFDIO_ZEROPAGE_MODE_DONTWAKE
					      : 0);
	case INST_CONTINUE:
		return uffd_continue(q->uffd, dst, len,
				     (wp ? UFFDIO_CONTINUE_MODE_WP : 0) |
					     (dontwake
						      ? UFFDIO_CONTINUE_MODE_DONTWAKE
						      : 0));
	case INST_POISON:
		return uffd_poison(q->uffd, dst, len,
					 dontwake ? UFFDIO_POISON_MODE_DONTWAKE
						  : 0);
	}
	return -EINVAL;
}

/*
 * Zeros that must be copied (hugetlb, write-protected, or asked for): a
 * COPY from the zero area, in pieces no larger than it.
 */
static bool zero_by_copy(const struct inst_req *q)
{
	return q->op == INST_ZERO &&
	       (q->flags & (INST_ZERO_COPY | INST_WP));
}

static ssize_t install_piece(const struct inst_req *q, size_t off)
{
	size_t len = q->len - off;

	if (zero_by_copy(q)) {
		struct inst_req c = *q;
		const void *z = q->src ? q->src : install_zeros(q->page_size);
		size_t max = q->src ? q->zeros_len : INSTALL_ZEROS;

		if (!z || max < q->page_size)
			return -ENOMEM;
		if (len > max)
			len = max - max % q->page_size;
		c.op = INST_COPY;
		return install_one(&c, q->dst + off, z, len);
	}
	return install_one(q, q->dst + off,
			   q->op == INST_COPY ? (const char *)q->src + off
					      : NULL,
			   len);
}

/*
 * install_range() - install [q->dst, q->dst + q->len) as @q says; the result
 * in *res. Pages that are present already are stepped over one at a time
 * and counted in res->present (with INST_STOP_PRESENT it stops at the first
 * one instead, res->end UFFD_EXISTS). A range that is not one registered
 * mapping (ENOENT) is taken a page at a time: pages outside any are
 * counted in res->gone and the rest installed. Any other failure ends it:
 * res->end says which (UFFD_AGAIN: retry after the pending events; GONE:
 * the range or the process is gone; FAILED: res->err, the caller poisons
 * or reports). Unless INST_DONTWAKE, the range's waiters are woken when
 * the call ends with pages present or the range gone, since a failed
 * ioctl wakes no one; never on AGAIN (the caller retries) or FAILED;
 * res->woken says the wake was made. res->watch_present: the page at
 * q->watch was one of those present.
 * Context: any thread; no lock of the library is taken.
 */
void install_range(const struct inst_req *q, struct inst_res *res)
{
	struct inst_req one = *q;
	size_t off = 0;

	*res = (struct inst_res){ .end = UFFD_DONE };
	while (off < q->len) {
		ssize_t n = install_piece(q, off);
		enum uffd_outcome o = uffd_classify(n);

		if (o == UFFD_DONE) {
			res->done += (size_t)n;
			off += (size_t)n;
			continue;
		}
		if (o == UFFD_EXISTS && !(q->flags & INST_STOP_PRESENT)) {
			res->watch_present |= q->dst + off == q->watch;
			res->present += q->page_size;
			off += q->page_size;
			continue;
		}
		if (n == -ENOENT) {
			/*
			 * Not one registered mapping: the range may cross
			 * the boundary of two (an mprotect() split it) or
			 * end in a hole. Take its first page alone: it goes
			 * in, or it is gone; go on after it either way.
			 */
			one.dst = q->dst + off;
			one.len = q->page_size;
			one.src = q->op == INST_COPY
					  ? (const char *)q->src + off
					  : q->src;
			/* A page alone already: that was its answer. */
			if (q->len - off > q->page_size) {
				n = install_piece(&one, 0);
				o = uffd_classify(n);
			}
			if (n == -ENOENT || o == UFFD_DONE ||
			    (o == UFFD_EXISTS &&
			     !(q->flags & INST_STOP_PRESENT))) {
				if (o == UFFD_DONE)
					res->done += q->page_size;
				else if (o == UFFD_EXISTS)
					res->present += q->page_size;
				else
					res->gone += q->page_size;
				res->watch_present |= o == UFFD_EXISTS &&
						      one.dst == q->watch;
				off += q->page_size;
				continue;
			}
		}
		res->end = o;
		res->err = (int)n;
		break;
	}
	if (!(q->flags & INST_DONTWAKE) &&
	    (res->end == UFFD_GONE ||
	     ((res->present || res->gone) && res->end != UFFD_AGAIN &&
	      res->end != UFFD_FAILED)))
		res->woken = !uffd_wake(q->uffd, q->dst, q->len);
}

/*
 * install_wake() - the wake that install_range() of @q made with
 * INST_DONTWAKE left out: the range's waiters woken where the install
 * went in (the kernel's own wake, which DONTWAKE stops) and, as
 * install_range() wakes, where it ended with pages present or gone
 * (res->woken); on AGAIN or FAILED only the part it reached. For a caller
 * that counts what went in before any waiter runs: a thread woken on the
 * waker's CPU takes it at once, and the count waits behind it.
 */
void install_wake(const struct inst_req *q, struct inst_res *res)
{
	size_t reached = res->done + res->present + res->gone;

	if (res->end == UFFD_AGAIN || res->end == UFFD_FAILED) {
		if (reached)
			(void)uffd_wake(q->uffd, q->dst, reached);
		return;
	}
	res->woken = !uffd_wake(q->uffd, q->dst, q->len);
}

/*
 * install_outcome() - what install_range() did, as one outcome, for a
 * caller that installs one page (or wants the first reason it was not
 * installed): the stop if it stopped, else EXISTS if a page was present,
 * GONE if one was in no mapping, DONE when all went in.
 */
enum uffd_outcome install_outcome(const struct inst_res *res)
{
	if (res->end != UFFD_DONE)
		return res->end;
	if (res->present)
		return UFFD_EXISTS;
	return res->gone ? UFFD_GONE : UFFD_DONE;
}

/*
 * install_fault_ret() - what an install of a faulting page means for its
 * fault: the one conversion from an install's result to a fault's, for
 * installs that leave the wake to the layer (neither INST_DONTWAKE nor
 * INST_STOP_PRESENT). The page went in, or
 * it was there already or its range is gone and the waiters were woken:
 * FR_DONE. EAGAIN (an event is pending), or a wake that failed, which
 * would leave a thread asleep: FR_PARK, tried again after the events. Any
 * other failure: FR_ERROR with its errno, for the caller to poison.
 */
struct fault_ret install_fault_ret(const struct inst_res *res)
{
	switch (install_outcome(res)) {
	case UFFD_DONE:
		return fr(FR_DONE);
	case UFFD_EXISTS:
	case UFFD_GONE:
		return fr(res->woken ? FR_DONE : FR_PARK);
	case UFFD_AGAIN:
		return fr(FR_PARK);
	case UFFD_FAILED:
		break;
	}
	return fr_error(res->err);
}

/*
 * install_fill_tail() - a fill that produced @n of @len bytes: the rest
 * is zeros (a file that ends inside the page). Returns @n if it was an
 * error (negative), else @len.
 */
ssize_t install_fill_tail(void *buf, ssize_t n, size_t len)
{
	if (n < 0 || (size_t)n >= len)
		return n < 0 ? n : (ssize_t)len;
	faultd_clear((char *)buf + n, len - (size_t)n);
	return (ssize_t)len;
}
