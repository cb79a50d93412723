// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * uloop.c - the one read loop of a userfaultfd, shared by the library's
 * handler threads and the daemon's sessions.
 *
 * One service of a port reads a batch of messages and handles it in the
 * order the rules of DESIGN §2 need: the batch's non-cooperative events
 * first, then the faults this reader parked earlier, then the batch's new
 * faults. A fault whose install got EAGAIN (an event not read yet) is
 * parked and retried at the next service, after the events.
 *
 * The kernel hands a pending fault out before a pending event, and an
 * event's effect (pages removed, a range moved) must be known before any
 * fault that follows it is resolved. With one reader that is the order of
 * the calls. A parked fault waits a little before each new try
 * (ULOOP_RETRY_MIN_NS), never spins. With several readers of one port, a reader holds the port's
 * read_lock from its read() until the events it got are applied: a fault
 * another reader reads after that sees them; a fault read before them was
 * queued before them, and its install fails with EAGAIN until they are read.
 *
 * Reads never block (uffd_read_msgs()); waiting for messages is the
 * caller's (poll, epoll, busy polling): that is where the library and the
 * daemon differ.
 */
#include <errno.h>
#include <string.h>

#include "uffd.h"

void uport_init(struct uport *p, int uffd, const struct uport_ops *ops,
		void *owner, size_t page_size, unsigned int readers)
{
	*p = (struct uport){
		.uffd = uffd,
		.ops = ops,
		.owner = owner,
		.page_size = page_size,
		/*
		 * A lone reader takes a full batch per read(). Several read
		 * one message each: a reader that took a batch would resolve
		 * it in order while the others idle, and a pager that sleeps
		 * would be serialized behind it.
		 */
		.batch = readers > 1 ? 1 : ULOOP_BATCH,
		.shared = readers > 1,
	};
	pthread_mutex_init(&p->read_lock, NULL);
}

void uport_destroy(struct uport *p)
{
	pthread_mutex_destroy(&p->read_lock);
}

/*
 * Keep a fault for later, tried @tries times so far (ULOOP_RETRY_MIN_NS
 * says when it is tried again). When the reader's park is full, wake the
 * faulting thread instead: it faults again, and its new message comes
 * after the pending event.
 */
static void park(struct ureader *rd, struct uport *p,
		 const struct fault_req *req, unsigned int tries)
{
	uint64_t wait = ULOOP_RETRY_MIN_NS << (tries < 5 ? tries : 5);

	if (rd->nr_parked < ULOOP_PARK_MAX) {
		rd->parked[rd->nr_parked++] = (struct parked_fault){
			.port = p, .req = *req, .tries = tries + 1,
			.due_ns = now_ns() + (wait < ULOOP_RETRY_MAX_NS
						      ? wait
						      : ULOOP_RETRY_MAX_NS),
		};
		return;
	}
	uffd_wake(p->uffd, req->addr & ~(p->page_size - 1), p->page_size);
}

static void dispatch(struct ureader *rd, struct uport *p,
		     struct fault_req *req, unsigned int tries)
{
	if (fr_is(p->ops->fault(rd, p, req), FR_PARK))
		park(rd, p, req, tries);
}

/*
 * uloop_retry_parked() - try the parked faults of @rd again whose time
 * has come; the others stay parked. The ports of those tried get their
 * batch_end. Context: the thread that owns @rd.
 */
void uloop_retry_parked(struct ureader *rd)
{
	struct parked_fault retry[ULOOP_PARK_MAX];
	unsigned int n = rd->nr_parked;
	uint64_t now = now_ns();

	memcpy(retry, rd->parked, n * sizeof(retry[0]));
	rd->nr_parked = 0;
	for (unsigned int i = 0; i < n; i++) {
		if (now < retry[i].due_ns) {
			rd->parked[rd->nr_parked++] = retry[i];
			retry[i].port = NULL; /* not tried: no batch_end */
			continue;
		}
		dispatch(rd, retry[i].port, &retry[i].req, retry[i].tries);
	}
	for (unsigned int i = 0; i < n; i++) {
		struct uport *p = retry[i].port;
		bool seen = !p;

		for (unsigned int j = 0; j < i && !seen; j++)
			seen = retry[j].port == p;
		if (!seen && p->ops->batch_end)
			p->ops->batch_end(rd, p);
	}
}

/*
 * uloop_forget_port() - drop @rd's parked faults of @p, a port about to be
 * freed (its process is gone: no one waits on them).
 */
void uloop_forget_port(struct ureader *rd, const struct uport *p)
{
	unsigned int k = 0;

	for (unsigned int i = 0; i < rd->nr_parked; i++)
		if (rd->parked[i].port != p)
			rd->parked[k++] = rd->parked[i];
	rd->nr_parked = k;
}

/* Read once; apply the events of what was read. */
static ssize_t read_batch(struct ureader *rd, struct uport *p)
{
	ssize_t n;

	if (p->ops->read_begin)
		p->ops->read_begin(p);
	if (p->shared)
		pthread_mutex_lock(&p->read_lock);
	n = uffd_read_msgs(p->uffd, rd->msgs, p->batch);
	for (ssize_t i = 0; i < n; i++)
		if (rd->msgs[i].event != UFFD_EVENT_PAGEFAULT)
			p->ops->event(rd, p, &rd->msgs[i]);
	if (p->shared)
		pthread_mutex_unlock(&p->read_lock);
	if (p->ops->read_end)
		p->ops->read_end(p);
	return n;
}

/*
 * uloop_service() - read one batch from @p and handle it: its events,
 * then @rd's parked faults, then its faults. Returns the number of
 * messages read, or -errno from the read (-EAGAIN: none were there).
 * Context: the thread that owns @rd; no lock held.
 */
ssize_t uloop_service(struct ureader *rd, struct uport *p)
{
	ssize_t n = read_batch(rd, p);
	uint64_t t_read;

	if (rd->nr_parked)
		uloop_retry_parked(rd);
	if (n <= 0)
		return n;
	t_read = now_ns();
	for (ssize_t i = 0; i < n; i++) {
		struct fault_req req = {
			.addr = rd->msgs[i].arg.pagefault.address,
			.flags = rd->msgs[i].arg.pagefault.flags,
			.t_read = t_read,
		};

		if (rd->msgs[i].event == UFFD_EVENT_PAGEFAULT)
			dispatch(rd, p, &req, 0);
	}
	if (p->ops->batch_end)
		p->ops->batch_end(rd, p);
	return n;
}
