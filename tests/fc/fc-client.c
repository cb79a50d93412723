// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * fc-client - does what Firecracker does when it loads a snapshot with the
 * Uffd memory backend, then acts as the guest and checks every byte.
 *
 *   fc-client --socket PATH --mem-file FILE [--regions SIZE[,SIZE...]]
 *             [--page 4k|2m] [--threads T] [--fraction F] [--seed S]
 *             [--writes PCT] [--balloon OFF,LEN|none] [--timeout SEC]
 *             [--wait-start | --handshake-only] [--wait-mid] [--wait-end]
 *             [--first-pass-only]
 *             [--remove-race ROUNDS] [--no-page-size-kib]
 *             [--claim-page-size N] [--json-file FILE]
 *             [--attach uffd|none|file]
 *
 * The restore, as Firecracker's persist.rs (guest_memory_from_uffd(),
 * send_uffd_handshake()) and vstate/memory.rs do it:
 *   - each region is anonymous private memory, PROT_READ|PROT_WRITE,
 *     MAP_NORESERVE, with MAP_HUGETLB|MAP_HUGE_2MB for 2 MiB pages, at a
 *     2 MiB-aligned address (a PROT_NONE reservation trimmed, then mapped
 *     over with MAP_FIXED);
 *   - the userfaultfd comes from /dev/userfaultfd (USERFAULTFD_IOC_NEW),
 *     or the system call where that device does not exist, with
 *     O_CLOEXEC|O_NONBLOCK and without UFFD_USER_MODE_ONLY; UFFDIO_API
 *     asks for UFFD_FEATURE_EVENT_REMOVE and nothing else;
 *   - every region is registered for MISSING faults;
 *   - it connects a Unix stream socket to PATH and makes one sendmsg()
 *     (MSG_NOSIGNAL) of the JSON serde_json writes for the regions, with
 *     the userfaultfd attached by SCM_RIGHTS; the socket and the
 *     userfaultfd stay open until the process exits. Regions are back to
 *     back in the memory file, in the order given.
 *
 * The guest: T threads touch the pages (all, or a seeded random fraction
 * F of them) in a seeded random order, each touch a load of 8 bytes or,
 * for PCT % of them, a store of the 8 the file has there (a write fault
 * that changes nothing); then every touched page
 * is compared with the memory file, read with pread(), never through a
 * mapping. Then a balloon inflation: MADV_DONTNEED over OFF,LEN of guest
 * memory (default: an eighth of it, from a quarter in), after which every
 * page there must read zeros - a quarter of them are written first, each
 * with a marker, before anything is read. Last, a second pass over every
 * page of every region finds the file's content outside the balloon and
 * zeros (and the markers) inside it. --first-pass-only stops after the
 * first pass and its check: the guest touched its working set, and only
 * it (what a handler records as the set, and replays).
 *
 * --remove-race ROUNDS: instead of the passes above, pairs of threads
 * (--threads, rounded down to pairs) race a fault with a balloon: in each
 * round both threads of a pair wait for each other on a page never touched
 * before; one reads it (a fault), the other discards it (MADV_DONTNEED, a
 * REMOVE event), then reads it and must find zeros - any of the file's
 * content there would be a fault answered with what the page held before
 * it was discarded, or an install that landed after the discard. When all
 * rounds are done, every raced page must still read zeros, and every other
 * page the file's content.
 *
 * Output: one JSON line on standard output: first_fault_ms (handshake
 * sent to the first touch done), all_in_ms (to the last touch of the
 * first pass done), gb_per_s (bytes of the touched pages over all_in_ms),
 * p50_ns / p99_ns (of a touch, measured here), and the counts.
 *
 * --wait-start: after the handshake, print {"ready":...} and wait for a
 * line (or end of file) on standard input before the guest starts.
 * --handshake-only: after the handshake, print {"ready":...} and wait
 * until the handler closes the connection (exit 3) or SIGTERM/SIGINT
 * (exit 0). --wait-mid: after the first pass and its check, print
 * {"first_pass":...} and wait for a line (or end of file) on standard
 * input before the balloon: what the guest did not touch is the handler's
 * to push meanwhile. --wait-end: after the output line, wait likewise
 * before exiting, so that the handler can be asked about the VM while it
 * lives. --json-file sends that file's bytes instead of the regions'
 * JSON, --claim-page-size puts N in the JSON's page size fields,
 * --no-page-size-kib leaves out the deprecated field, --attach sends the
 * userfaultfd, nothing, or the memory file's descriptor: handshakes a
 * handler must refuse (use them with --handshake-only).
 *
 * Exit status: 0 every check passed; 1 content that differs from what it
 * must be (the message says where); 2 usage or system errors; 3 the
 * handler closed the connection (--handshake-only); 4 --timeout expired;
 * 77 skipped (no userfaultfd for kernel faults, too few free huge pages).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "compat.h"

#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif

#define PAGE_4K 4096ul
#define PAGE_2M (2ul << 20)
#define ALIGN (2ul << 20)	/* Firecracker's GUEST_MEMORY_ALIGNMENT */
#define MAX_REGIONS 16
#define MAX_THREADS 64
#define JSON_MAX 8192
#define EXIT_MISMATCH 1
#define EXIT_ERROR 2
#define EXIT_CLOSED 3
#define EXIT_TIMEOUT 4
#define EXIT_SKIP 77

enum attach { ATTACH_UFFD, ATTACH_NONE, ATTACH_FILE };

struct opts {
	const char *socket, *mem_file, *json_file;
	uint64_t sizes[MAX_REGIONS];
	unsigned int nr;	/* 0: one region, the whole file */
	size_t page_size;
	unsigned int threads;
	double fraction;
	uint64_t seed;
	unsigned int writes;	/* percent of first-pass touches */
	bool balloon_set, no_balloon;
	uint64_t balloon_off, balloon_len;
	unsigned int timeout;
	bool wait_start, handshake_only, no_kib, wait_end, wait_mid;
	bool first_only;	/* --first-pass-only */
	uint64_t race_rounds;	/* --remove-race */
	size_t claim_page_size;	/* 0: the real one */
	enum attach attach;
};

struct region {
	uint8_t *base;
	uint64_t size, offset;	/* offset: in the file, and in the guest */
};

/* What the guest threads share. */
struct guest {
	struct opts o;
	int mem_fd, uffd, sock;
	uint64_t file_size, total;
	struct region r[MAX_REGIONS];
	unsigned int nr;
	uint64_t pages;		/* of all regions */
	uint64_t *order;	/* a pass's pages, in touch order */
	uint64_t count;		/* how many of them */
	uint64_t *lat;		/* ns per touch of the first pass */
	atomic_uint_fast64_t next;
	atomic_uint_fast64_t first_done, last_done, stores;
	atomic_bool failed;
	uint64_t sent_ns;	/* the handshake's sendmsg() returned */
	void *(*work)(struct guest *g, uint64_t page, uint8_t *buf);
};

static _Noreturn void die(int status, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static _Noreturn void die(int status, const char *fmt, ...)
{
	va_list ap;

	fputs("fc-client: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(status);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A seeded hash: the same page gets the same choices in every run. */
static uint64_t mix(uint64_t seed, uint64_t x)
{
	uint64_t z = seed * 0x9e3779b97f4a7c15ull + x + 0x632be59bd9b4e019ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Where the guest is, for the message of a time-out. */
static const char *volatile phase = "the handshake";

static void on_alarm(int sig)
{
	static const char msg[] = "fc-client: timed out (--timeout): a fault "
				  "was never answered? during ";
	const char *p = phase;

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0 ||
	    write(2, p, strlen(p)) < 0 || write(2, "\n", 1) < 0)
		_exit(EXIT_TIMEOUT);
	_exit(EXIT_TIMEOUT);
}

/* ------------------------------------------------------------------------
 * Options.
 */

/* "64M", "4k", "1G", "4096": bytes. */
static uint64_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 0);
	unsigned int shift = 0;

	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	}
	if (end == s || *end || (v << shift) >> shift != v)
		die(EXIT_ERROR, "not a size: %s", s);
	return (uint64_t)v << shift;
}

static void parse_regions(struct opts *o, char *arg)
{
	for (char *tok = strtok(arg, ","); tok; tok = strtok(NULL, ",")) {
		if (o->nr == MAX_REGIONS)
			die(EXIT_ERROR, "more than %d regions", MAX_REGIONS);
		o->sizes[o->nr++] = parse_size(tok);
	}
}

static void parse_balloon(struct opts *o, const char *arg)
{
	char buf[64], *comma;

	o->balloon_set = true;
	if (!strcmp(arg, "none")) {
		o->no_balloon = true;
		return;
	}
	snprintf(buf, sizeof(buf), "%s", arg);
	comma = strchr(buf, ',');
	if (!comma)
		die(EXIT_ERROR, "--balloon OFF,LEN or none");
	*comma = 0;
	o->balloon_off = parse_size(buf);
	o->balloon_len = parse_size(comma + 1);
}

static unsigned long parse_uint(const char *s, unsigned long max)
{
	char *end;
	unsigned long v = strtoul(s, &end, 0);

	if (end == s || *end || v > max)
		die(EXIT_ERROR, "not a number up to %lu: %s", max, s);
	return v;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: fc-client --socket PATH --mem-file FILE "
		"[--regions SIZE[,SIZE...]]\n"
		"       [--page 4k|2m] [--threads T] [--fraction F] "
		"[--seed S] [--writes PCT]\n"
		"       [--balloon OFF,LEN|none] [--timeout SEC] "
		"[--wait-start | --handshake-only]\n"
		"       [--wait-mid] [--wait-end] [--first-pass-only] "
		"[--remove-race ROUNDS]\n"
		"       [--no-page-size-kib] [--claim-page-size N] "
		"[--json-file FILE]\n"
		"       [--attach uffd|none|file]\n");
	exit(EXIT_ERROR);
}

static void parse_one(struct opts *o, int c, char *arg)
{
	switch (c) {
	case 's': o->socket = arg; break;
	case 'm': o->mem_file = arg; break;
	case 'r': parse_regions(o, arg); break;
	case 'p':
		if (strcmp(arg, "4k") && strcmp(arg, "2m"))
			die(EXIT_ERROR, "--page 4k or 2m");
		o->page_size = strcmp(arg, "4k") ? PAGE_2M : PAGE_4K;
		break;
	case 't': o->threads = (unsigned int)parse_uint(arg, MAX_THREADS);
		  break;
	case 'f': o->fraction = strtod(arg, NULL); break;
	case 'S': o->seed = strtoull(arg, NULL, 0); break;
	case 'w': o->writes = (unsigned int)parse_uint(arg, 100); break;
	case 'b': parse_balloon(o, arg); break;
	case 'T': o->timeout = (unsigned int)parse_uint(arg, 86400); break;
	case 'W': o->wait_start = true; break;
	case 'H': o->handshake_only = true; break;
	case 'E': o->wait_end = true; break;
	case 'M': o->wait_mid = true; break;
	case 'O': o->first_only = true; break;
	case 'R': o->race_rounds = parse_uint(arg, ULONG_MAX); break;
	case 'K': o->no_kib = true; break;
	case 'P': o->claim_page_size = parse_uint(arg, ULONG_MAX); break;
	case 'j': o->json_file = arg; break;
	case 'a':
		o->attach = !strcmp(arg, "none") ? ATTACH_NONE :
			    !strcmp(arg, "file") ? ATTACH_FILE : ATTACH_UFFD;
		if (o->attach == ATTACH_UFFD && strcmp(arg, "uffd"))
			die(EXIT_ERROR, "--attach uffd, none or file");
		break;
	default: usage();
	}
}

static void parse(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "mem-file", required_argument, NULL, 'm' },
		{ "regions", required_argument, NULL, 'r' },
		{ "page", required_argument, NULL, 'p' },
		{ "threads", required_argument, NULL, 't' },
		{ "fraction", required_argument, NULL, 'f' },
		{ "seed", required_argument, NULL, 'S' },
		{ "writes", required_argument, NULL, 'w' },
		{ "balloon", required_argument, NULL, 'b' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "wait-start", no_argument, NULL, 'W' },
		{ "handshake-only", no_argument, NULL, 'H' },
		{ "wait-end", no_argument, NULL, 'E' },
		{ "wait-mid", no_argument, NULL, 'M' },
		{ "first-pass-only", no_argument, NULL, 'O' },
		{ "remove-race", required_argument, NULL, 'R' },
		{ "no-page-size-kib", no_argument, NULL, 'K' },
		{ "claim-page-size", required_argument, NULL, 'P' },
		{ "json-file", required_argument, NULL, 'j' },
		{ "attach", required_argument, NULL, 'a' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct opts){ .page_size = PAGE_4K, .threads = 2,
			    .fraction = 1.0, .seed = 1, .writes = 25 };
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1)
		parse_one(o, c, optarg);
	if (optind != argc || !o->socket || !o->mem_file || !o->threads)
		usage();
	if (!(o->fraction > 0 && o->fraction <= 1))
		die(EXIT_ERROR, "--fraction must be in (0, 1]");
	if (o->wait_start && o->handshake_only)
		die(EXIT_ERROR, "--wait-start or --handshake-only, not both");
}

/* ------------------------------------------------------------------------
 * The restore, as Firecracker does it.
 */

/* Firecracker's allocate_protected() and allocate(): a 2 MiB-aligned
 * PROT_NONE reservation, trimmed, then the memory mapped over it. */
static uint8_t *map_region(uint64_t size, size_t ps)
{
	int huge = ps == PAGE_2M ? MAP_HUGETLB | MAP_HUGE_2MB : 0;
	size_t alloc = size + ALIGN - ps, head, tail;
	uint8_t *p, *a, *q;

	p = mmap(NULL, alloc, PROT_NONE,
		 huge | MAP_PRIVATE | MAP_NORESERVE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die(EXIT_ERROR, "mmap of %" PRIu64 " bytes: %s", size,
		    strerror(errno));
	a = (uint8_t *)(((uintptr_t)p + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1));
	head = (size_t)(a - p);
	tail = alloc - head - size;
	if ((head && munmap(p, head)) || (tail && munmap(a + size, tail)))
		die(EXIT_ERROR, "munmap: %s", strerror(errno));
	q = mmap(a, size, PROT_READ | PROT_WRITE,
		 MAP_NORESERVE | MAP_PRIVATE | MAP_ANONYMOUS | huge |
			 MAP_FIXED, -1, 0);
	if (q != a)
		die(EXIT_ERROR, "mmap at %p: %s", (void *)a, strerror(errno));
	return q;
}

/* The way the userfaultfd crate's UffdBuilder::create() makes it. */
static int uffd_create(void)
{
	struct uffdio_api api = { .api = UFFD_API,
				  .features = UFFD_FEATURE_EVENT_REMOVE };
	int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC), fd;

	if (dev >= 0) {
		fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
		close(dev);
	} else if (errno == ENOENT) {
		fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	} else {
		die(EXIT_SKIP, "cannot open /dev/userfaultfd: %s; skipped",
		    strerror(errno));
	}
	if (fd < 0)
		die(EXIT_SKIP, "no userfaultfd for kernel faults: %s; skipped",
		    strerror(errno));
	if (ioctl(fd, UFFDIO_API, &api) < 0)
		die(EXIT_ERROR, "UFFDIO_API with EVENT_REMOVE: %s",
		    strerror(errno));
	return fd;
}

static void uffd_register(int uffd, const struct region *r)
{
	struct uffdio_register reg = {
		.range = { .start = (uintptr_t)r->base, .len = r->size },
		.mode = UFFDIO_REGISTER_MODE_MISSING,
	};

	if (ioctl(uffd, UFFDIO_REGISTER, &reg) < 0)
		die(EXIT_ERROR, "UFFDIO_REGISTER of %" PRIu64 " bytes at %p: %s",
		    r->size, (void *)r->base, strerror(errno));
}

/* serde_json::to_string(&Vec<GuestRegionUffdMapping>), byte for byte. */
static size_t handshake_json(const struct guest *g, char *buf, size_t cap)
{
	size_t ps = g->o.claim_page_size ? g->o.claim_page_size
					 : g->o.page_size, len = 1;

	buf[0] = '[';
	for (unsigned int i = 0; i < g->nr; i++) {
		len += (size_t)snprintf(buf + len, cap - len,
			"%s{\"base_host_virt_addr\":%" PRIu64 ",\"size\":%"
			PRIu64 ",\"offset\":%" PRIu64 ",\"page_size\":%zu",
			i ? "," : "", (uint64_t)(uintptr_t)g->r[i].base,
			g->r[i].size, g->r[i].offset, ps);
		if (!g->o.no_kib)
			len += (size_t)snprintf(buf + len, cap - len,
						",\"page_size_kib\":%zu", ps);
		len += (size_t)snprintf(buf + len, cap - len, "}");
	}
	len += (size_t)snprintf(buf + len, cap - len, "]");
	if (len >= cap)
		die(EXIT_ERROR, "the handshake is too long");
	return len;
}

static size_t json_from_file(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, cap);

	if (n < 0)
		die(EXIT_ERROR, "%s: %s", path, strerror(errno));
	close(fd);
	return (size_t)n;
}

/* Firecracker's send_with_fd(): one sendmsg(), one iovec, one fd. */
static void send_handshake(struct guest *g, const char *json, size_t len)
{
	struct iovec iov = { .iov_base = (void *)json, .iov_len = len };
	char ctl[CMSG_SPACE(sizeof(int))] = { 0 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;
	int fd = g->o.attach == ATTACH_FILE ? g->mem_fd : g->uffd;
	ssize_t n;

	if (g->o.attach != ATTACH_NONE) {
		m.msg_control = ctl;
		m.msg_controllen = sizeof(ctl);
		c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(fd));
	}
	n = sendmsg(g->sock, &m, MSG_NOSIGNAL);
	if (n < 0)
		die(EXIT_ERROR, "sendmsg: %s", strerror(errno));
	if ((size_t)n != len) /* Firecracker would not notice */
		die(EXIT_ERROR, "sendmsg sent %zd of %zu bytes", n, len);
	g->sent_ns = now_ns();
}

static void connect_handler(struct guest *g)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };

	if (strlen(g->o.socket) >= sizeof(a.sun_path))
		die(EXIT_ERROR, "socket path too long: %s", g->o.socket);
	strcpy(a.sun_path, g->o.socket);
	g->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (g->sock < 0 || connect(g->sock, (struct sockaddr *)&a, sizeof(a)))
		die(EXIT_ERROR, "no handler listening on %s: %s", g->o.socket,
		    strerror(errno));
}

/* Enough free huge pages for all of guest memory, or skip. */
static void huge_pages_check(uint64_t need)
{
	FILE *f = fopen("/sys/kernel/mm/hugepages/hugepages-2048kB/"
			"free_hugepages", "re");
	unsigned long free_pages = 0;

	if (!f || fscanf(f, "%lu", &free_pages) != 1)
		die(EXIT_SKIP, "no 2 MiB huge pages here; skipped");
	fclose(f);
	if (free_pages < need)
		die(EXIT_SKIP, "%" PRIu64 " free 2 MiB huge pages needed, %lu "
		    "free; skipped", need, free_pages);
}

static void layout(struct guest *g)
{
	const struct opts *o = &g->o;
	uint64_t off = 0;

	g->nr = o->nr ? o->nr : 1;
	for (unsigned int i = 0; i < g->nr; i++) {
		uint64_t size = o->nr ? o->sizes[i] : g->file_size;

		if (!size || size % o->page_size)
			die(EXIT_ERROR, "region %u: %" PRIu64 " bytes are no "
			    "whole number of %zu-byte pages", i, size,
			    o->page_size);
		g->r[i] = (struct region){ .size = size, .offset = off };
		off += size;
	}
	g->total = off;
	g->pages = off / o->page_size;
	/* The guest checks content: the file must hold all of it. */
	if (!o->handshake_only && off > g->file_size)
		die(EXIT_ERROR, "the regions need %" PRIu64 " bytes, the memory "
		    "file has %" PRIu64 " (--handshake-only sends them anyway)",
		    off, g->file_size);
	if (o->page_size == PAGE_2M)
		huge_pages_check(off / PAGE_2M);
}

static void restore(struct guest *g)
{
	char json[JSON_MAX];
	struct stat st;
	size_t len;

	g->mem_fd = open(g->o.mem_file, O_RDONLY | O_CLOEXEC);
	if (g->mem_fd < 0 || fstat(g->mem_fd, &st))
		die(EXIT_ERROR, "%s: %s", g->o.mem_file, strerror(errno));
	g->file_size = (uint64_t)st.st_size;
	layout(g);
	for (unsigned int i = 0; i < g->nr; i++)
		g->r[i].base = map_region(g->r[i].size, g->o.page_size);
	g->uffd = uffd_create();
	for (unsigned int i = 0; i < g->nr; i++)
		uffd_register(g->uffd, &g->r[i]);
	len = g->o.json_file ? json_from_file(g->o.json_file, json,
					      sizeof(json))
			     : handshake_json(g, json, sizeof(json));
	connect_handler(g);
	send_handshake(g, json, len);
	/* g->sock and g->uffd stay open until exit, as Firecracker's. */
}

/* ------------------------------------------------------------------------
 * The guest.
 */

/* Page @p of guest memory: its address and its place in the file. */
static uint8_t *page_addr(const struct guest *g, uint64_t p, uint64_t *off)
{
	uint64_t at = p * g->o.page_size;
	unsigned int i = 0;

	while (at >= g->r[i].offset + g->r[i].size)
		i++;
	*off = at;
	return g->r[i].base + (at - g->r[i].offset);
}

static bool in_balloon(const struct guest *g, uint64_t off)
{
	return !g->o.no_balloon && off >= g->o.balloon_off &&
	       off - g->o.balloon_off < g->o.balloon_len;
}

/* The balloon's pages written before they are read get this marker. */
static uint64_t marker(uint64_t off)
{
	return mix(0xba11, off) | 1;
}

static bool marked(const struct guest *g, uint64_t off)
{
	return (off / g->o.page_size) % 4 == 0;
}

static void file_read(const struct guest *g, uint64_t off, void *buf,
		      size_t len)
{
	ssize_t n = pread(g->mem_fd, buf, len, (off_t)off);

	if (n != (ssize_t)len)
		die(EXIT_ERROR, "pread of the memory file at %" PRIu64 ": %s",
		    off, n < 0 ? strerror(errno) : "short");
}

/* What page @off of guest memory must hold now, into @want. */
static void expected(const struct guest *g, uint64_t off, uint8_t *want,
		     bool after_balloon)
{
	uint64_t m;

	if (!after_balloon || !in_balloon(g, off)) {
		file_read(g, off, want, g->o.page_size);
		return;
	}
	memset(want, 0, g->o.page_size);
	if (marked(g, off)) {
		m = marker(off);
		memcpy(want, &m, sizeof(m));
	}
}

/* Compare page @p with @want; on a difference, say where and fail. */
static bool page_check(struct guest *g, const uint8_t *mem, uint64_t off,
		       const uint8_t *want, const char *when)
{
	size_t i;

	if (!memcmp(mem, want, g->o.page_size))
		return true;
	for (i = 0; mem[i] == want[i]; i++)
		;
	if (!atomic_exchange(&g->failed, true))
		fprintf(stderr, "fc-client: %s: guest memory at offset %#" PRIx64
			" is 0x%02x, not 0x%02x (%s; its page of %zu bytes is "
			"at %p)\n", when, off + i, mem[i], want[i],
			in_balloon(g, off) && strcmp(when, "first pass")
				? "in the balloon: zeros expected"
				: "as the memory file has it at that offset",
			g->o.page_size, (const void *)mem);
	return false;
}

/* First pass: one touch of page @p, timed, then nothing else. */
static void *touch(struct guest *g, uint64_t k, uint8_t *buf)
{
	uint64_t p = g->order[k], h = mix(g->o.seed, p), off, t0, t1, v;
	size_t at = (size_t)(h >> 8) % (g->o.page_size / 8) * 8;
	volatile uint64_t *w = (volatile uint64_t *)(page_addr(g, p, &off) + at);

	(void)buf;
	if (h % 100 < g->o.writes) {
		file_read(g, off + at, &v, sizeof(v));
		t0 = now_ns();
		*w = v;
		atomic_fetch_add(&g->stores, 1);
	} else {
		t0 = now_ns();
		v = *w;
	}
	t1 = now_ns();
	(void)v;
	g->lat[k] = t1 - t0;
	for (uint64_t f = atomic_load(&g->first_done);
	     t1 < f && !atomic_compare_exchange_weak(&g->first_done, &f, t1);)
		;
	for (uint64_t l = atomic_load(&g->last_done);
	     t1 > l && !atomic_compare_exchange_weak(&g->last_done, &l, t1);)
		;
	return NULL;
}

/* After the first pass: the touched page against the file. */
static void *verify(struct guest *g, uint64_t k, uint8_t *buf)
{
	uint64_t off;
	uint8_t *mem = page_addr(g, g->order[k], &off);

	expected(g, off, buf, false);
	page_check(g, mem, off, buf, "first pass");
	return NULL;
}

/* After the balloon: marked pages written first, then every page read. */
static void *balloon_check(struct guest *g, uint64_t k, uint8_t *buf)
{
	uint64_t off, m;
	uint8_t *mem = page_addr(g, g->order[k], &off);

	if (marked(g, off)) {
		m = marker(off);
		memcpy(mem, &m, sizeof(m));
	}
	expected(g, off, buf, true);
	page_check(g, mem, off, buf, "after the balloon");
	return NULL;
}

static void *second_pass(struct guest *g, uint64_t k, uint8_t *buf)
{
	uint64_t off;
	uint8_t *mem = page_addr(g, g->order[k], &off);

	expected(g, off, buf, true);
	page_check(g, mem, off, buf, "second pass");
	return NULL;
}

static void *guest_thread(void *arg)
{
	struct guest *g = arg;
	uint8_t *buf = malloc(g->o.page_size);
	uint64_t k;

	if (!buf)
		die(EXIT_ERROR, "out of memory");
	while (!atomic_load(&g->failed) &&
	       (k = atomic_fetch_add(&g->next, 1)) < g->count)
		g->work(g, k, buf);
	free(buf);
	return NULL;
}

/* Run @work over g->order[0, count) on the guest threads. */
static double run_pass(struct guest *g, void *(*work)(struct guest *,
						       uint64_t, uint8_t *))
{
	pthread_t t[MAX_THREADS];
	uint64_t t0 = now_ns();
	int ret;

	g->work = work;
	atomic_store(&g->next, 0);
	for (unsigned int i = 0; i < g->o.threads; i++) {
		ret = pthread_create(&t[i], NULL, guest_thread, g);
		if (ret)
			die(EXIT_ERROR, "pthread_create: %s", strerror(ret));
	}
	for (unsigned int i = 0; i < g->o.threads; i++)
		pthread_join(t[i], NULL);
	if (atomic_load(&g->failed))
		exit(EXIT_MISMATCH);
	return (double)(now_ns() - t0) / 1e6;
}

/* The first @n of all pages in a seeded random order (Fisher-Yates). */
static void shuffle(struct guest *g, uint64_t n, uint64_t salt)
{
	for (uint64_t i = 0; i < g->pages; i++)
		g->order[i] = i;
	for (uint64_t i = 0; i + 1 < g->pages && i < n; i++) {
		uint64_t j = i + mix(g->o.seed ^ salt, i) % (g->pages - i), x;

		x = g->order[i];
		g->order[i] = g->order[j];
		g->order[j] = x;
	}
	g->count = n;
}

/* The balloon's pages, in order. */
static void balloon_pages(struct guest *g)
{
	uint64_t first = g->o.balloon_off / g->o.page_size;

	g->count = g->o.balloon_len / g->o.page_size;
	for (uint64_t i = 0; i < g->count; i++)
		g->order[i] = first + i;
}

static void balloon_default(struct guest *g)
{
	struct opts *o = &g->o;
	size_t ps = o->page_size;

	if (!o->balloon_set) {
		o->balloon_off = g->total / 4 / ps * ps;
		o->balloon_len = g->total / 8 / ps * ps;
		o->no_balloon = !o->balloon_len;
	}
	if (o->no_balloon)
		return;
	if ((o->balloon_off | o->balloon_len) % ps || !o->balloon_len ||
	    o->balloon_off > g->total || o->balloon_len > g->total -
						       o->balloon_off)
		die(EXIT_ERROR, "--balloon %" PRIu64 ",%" PRIu64 ": whole pages "
		    "inside the %" PRIu64 " bytes of guest memory",
		    o->balloon_off, o->balloon_len, g->total);
}

/* The balloon inflates: Firecracker's discard_range() on anonymous
 * memory, MADV_DONTNEED, region by region. */
static double inflate(struct guest *g)
{
	uint64_t from = g->o.balloon_off, to = from + g->o.balloon_len;
	uint64_t t0 = now_ns();

	for (unsigned int i = 0; i < g->nr; i++) {
		uint64_t s = g->r[i].offset, e = s + g->r[i].size;

		s = s > from ? s : from;
		e = e < to ? e : to;
		if (s < e && madvise(g->r[i].base + (s - g->r[i].offset),
				     e - s, MADV_DONTNEED))
			die(EXIT_ERROR, "madvise(MADV_DONTNEED): %s",
			    strerror(errno));
	}
	return (double)(now_ns() - t0) / 1e6;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static uint64_t percentile(uint64_t *v, uint64_t n, unsigned int pct)
{
	uint64_t i = n * pct / 100;

	return v[i < n ? i : n - 1];
}

static void wait_start(void);

static void guest_run(struct guest *g)
{
	uint64_t n = (uint64_t)(g->o.fraction * (double)g->pages + 0.5), touched;
	double first, all_in, gbps, balloon_ms = 0, pass2_ms = 0;

	n = n ? n : 1;
	g->order = malloc(g->pages * sizeof(*g->order));
	g->lat = malloc(n * sizeof(*g->lat));
	if (!g->order || !g->lat)
		die(EXIT_ERROR, "out of memory");
	shuffle(g, n, 0);
	atomic_store(&g->first_done, UINT64_MAX);
	phase = "the first pass";
	run_pass(g, touch);
	touched = n;
	first = (double)(atomic_load(&g->first_done) - g->sent_ns) / 1e6;
	all_in = (double)(atomic_load(&g->last_done) - g->sent_ns) / 1e6;
	gbps = (double)(n * g->o.page_size) / (all_in * 1e6);
	qsort(g->lat, n, sizeof(*g->lat), cmp_u64);
	phase = "the check of the first pass";
	run_pass(g, verify);
	if (g->o.wait_mid) {
		printf("{\"first_pass\":true,\"pages_touched\":%" PRIu64 "}\n",
		       n);
		fflush(stdout);
		wait_start();
	}
	if (!g->o.no_balloon && !g->o.first_only) {
		phase = "the balloon's inflation (MADV_DONTNEED)";
		balloon_ms = inflate(g);
		balloon_pages(g);
		phase = "the check of the balloon";
		run_pass(g, balloon_check);
	}
	if (!g->o.first_only) {
		shuffle(g, g->pages, 1);
		phase = "the second pass";
		pass2_ms = run_pass(g, second_pass);
	}
	printf("{\"regions\":%u,\"page_size\":%zu,\"bytes\":%" PRIu64
	       ",\"threads\":%u,\"seed\":%" PRIu64 ",\"pages_touched\":%"
	       PRIu64 ",\"stores\":%" PRIu64 ",\"first_fault_ms\":%.3f,"
	       "\"all_in_ms\":%.3f,\"gb_per_s\":%.3f,\"p50_ns\":%" PRIu64
	       ",\"p99_ns\":%" PRIu64 ",\"balloon_bytes\":%" PRIu64
	       ",\"balloon_ms\":%.3f,\"pass2_pages\":%" PRIu64
	       ",\"pass2_ms\":%.3f,\"ok\":true}\n", g->nr, g->o.page_size,
	       g->total, g->o.threads, g->o.seed, touched,
	       (uint64_t)atomic_load(&g->stores), first, all_in, gbps,
	       percentile(g->lat, n, 50), percentile(g->lat, n, 99),
	       g->o.no_balloon || g->o.first_only ? 0 : g->o.balloon_len,
	       balloon_ms, g->o.first_only ? 0 : g->pages, pass2_ms);
}

/* ------------------------------------------------------------------------
 * --remove-race: a fault and a discard of the same page at once.
 */

struct pair {
	struct guest *g;
	pthread_t leader, follower;
	_Atomic uint64_t go, seen, done;	/* round numbers */
	_Atomic uint64_t page;
};

static atomic_uint_fast64_t race_next;	/* into g->order */
static uint64_t *raced;			/* page of round k, or UINT64_MAX */

static bool page_has_data(const struct guest *g, uint64_t p, uint8_t *buf)
{
	file_read(g, p * g->o.page_size, buf, g->o.page_size);
	for (size_t i = 0; i < g->o.page_size; i++)
		if (buf[i])
			return true;
	return false;
}

/* Wait for the other thread of the pair, leaving the CPU to the rest
 * (the handler's threads, the discarding thread woken by the handler). */
static void spin_until(_Atomic uint64_t *v, uint64_t want)
{
	while (atomic_load_explicit(v, memory_order_acquire) != want)
		sched_yield();
}

/* The leader picks each round's page (one with data) and reads it. */
static void *race_leader(void *arg)
{
	struct pair *pr = arg;
	struct guest *g = pr->g;
	uint8_t *buf = malloc(g->o.page_size);
	uint64_t k, off;

	while (buf && (k = atomic_fetch_add(&race_next, 1)) < g->count) {
		uint64_t p = g->order[k];
		volatile uint64_t *w;

		if (!page_has_data(g, p, buf))
			continue;
		raced[k] = p;
		atomic_store(&pr->page, p);
		atomic_store_explicit(&pr->go, k + 1, memory_order_release);
		spin_until(&pr->seen, k + 1);
		w = (volatile uint64_t *)(page_addr(g, p, &off) +
					  mix(g->o.seed, p) % (g->o.page_size / 8) * 8);
		(void)*w;
		spin_until(&pr->done, k + 1);
	}
	atomic_store_explicit(&pr->go, UINT64_MAX, memory_order_release);
	free(buf);
	return NULL;
}

/* The follower discards the page, then must read zeros there. */
static void *race_follower(void *arg)
{
	struct pair *pr = arg;
	struct guest *g = pr->g;
	uint8_t *zero = calloc(1, g->o.page_size);
	uint64_t last = 0, k, off;

	while (zero) {
		uint8_t *mem;

		while ((k = atomic_load_explicit(&pr->go, memory_order_acquire)) ==
		       last)
			sched_yield();
		if (k == UINT64_MAX)
			break;
		mem = page_addr(g, atomic_load(&pr->page), &off);
		atomic_store_explicit(&pr->seen, k, memory_order_release);
		if (madvise(mem, g->o.page_size, MADV_DONTNEED))
			die(EXIT_ERROR, "madvise(MADV_DONTNEED): %s",
			    strerror(errno));
		page_check(g, mem, off, zero, "remove race: after MADV_DONTNEED");
		if (atomic_load(&g->failed))
			exit(EXIT_MISMATCH);
		last = k;
		atomic_store_explicit(&pr->done, k, memory_order_release);
	}
	free(zero);
	return NULL;
}

/* After the race: raced pages read zeros, the others the file. */
static void *race_verify(struct guest *g, uint64_t k, uint8_t *buf)
{
	uint64_t p = g->order[k], off;
	uint8_t *mem = page_addr(g, p, &off);

	if (raced[k] == p)
		memset(buf, 0, g->o.page_size);
	else
		file_read(g, off, buf, g->o.page_size);
	page_check(g, mem, off, buf, raced[k] == p ? "after the remove race: "
		   "zeros expected" : "after the remove race");
	return NULL;
}

static void race_run(struct guest *g)
{
	unsigned int pairs = g->o.threads / 2 ? g->o.threads / 2 : 1;
	struct pair *pr = calloc(pairs, sizeof(*pr));
	uint64_t rounds = g->o.race_rounds < g->pages ? g->o.race_rounds
						      : g->pages;

	g->order = malloc(g->pages * sizeof(*g->order));
	raced = malloc(g->pages * sizeof(*raced));
	if (!pr || !g->order || !raced)
		die(EXIT_ERROR, "out of memory");
	memset(raced, 0xff, g->pages * sizeof(*raced));
	shuffle(g, rounds, 2);
	for (unsigned int i = 0; i < pairs; i++) {
		pr[i].g = g;
		if (pthread_create(&pr[i].leader, NULL, race_leader, &pr[i]) ||
		    pthread_create(&pr[i].follower, NULL, race_follower, &pr[i]))
			die(EXIT_ERROR, "pthread_create failed");
	}
	for (unsigned int i = 0; i < pairs; i++) {
		pthread_join(pr[i].leader, NULL);
		pthread_join(pr[i].follower, NULL);
	}
	g->count = g->pages;
	run_pass(g, race_verify);
	printf("{\"remove_race\":%" PRIu64 ",\"pairs\":%u,\"pages\":%" PRIu64
	       ",\"ok\":true}\n", rounds, pairs, g->pages);
	free(pr);
}

/* ------------------------------------------------------------------------
 * Waiting: for the test's go, or for the handler to hang up.
 */

static volatile sig_atomic_t stop_sig;

static void on_stop(int sig)
{
	stop_sig = sig;
}

static void print_ready(const struct guest *g)
{
	printf("{\"ready\":true,\"pid\":%d,\"regions\":%u,\"bytes\":%" PRIu64
	       ",\"base\":%" PRIu64 "}\n", (int)getpid(), g->nr, g->total,
	       (uint64_t)(uintptr_t)g->r[0].base);
	fflush(stdout);
}

static void wait_start(void)
{
	char line[64];

	if (!fgets(line, sizeof(line), stdin) && ferror(stdin))
		die(EXIT_ERROR, "reading the go line: %s", strerror(errno));
}

/* Firecracker's handler never writes to the socket: readable means
 * closed (or a handler that breaks the protocol). */
static _Noreturn void wait_hangup(const struct guest *g)
{
	struct sigaction sa = { .sa_handler = on_stop };
	struct pollfd p = { .fd = g->sock, .events = POLLIN | POLLRDHUP };
	char c;

	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	while (!stop_sig) {
		if (poll(&p, 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			die(EXIT_ERROR, "poll: %s", strerror(errno));
		}
		if (recv(g->sock, &c, 1, MSG_DONTWAIT) > 0)
			die(EXIT_ERROR, "the handler wrote to the socket");
		die(EXIT_CLOSED, "the handler closed the connection");
	}
	exit(0);
}

int main(int argc, char **argv)
{
	static struct guest g;

	parse(argc, argv, &g.o);
	if (g.o.timeout) {
		signal(SIGALRM, on_alarm);
		alarm(g.o.timeout);
	}
	restore(&g);
	if (g.o.handshake_only || g.o.wait_start)
		print_ready(&g);
	if (g.o.handshake_only)
		wait_hangup(&g);
	if (g.o.wait_start)
		wait_start();
	if (g.o.race_rounds) {
		race_run(&g);
	} else {
		balloon_default(&g);
		guest_run(&g);
	}
	fflush(stdout);
	if (g.o.wait_end)
		wait_start();
	return 0;
}
