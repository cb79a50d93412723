/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * proto.h - the protocol between the library (or faultctl) and the faultd
 * daemon, on a SOCK_SEQPACKET Unix socket: one message per packet, each
 * starting with struct proto_hdr. Host byte order (a local socket).
 *
 *   client                                   daemon
 *   HELLO {versions, features}          ->
 *                                       <-   HELLO {version, features}
 *   [OPEN {uri}                         ->   the daemon opens the image on
 *                                       <-   IMAGE {header} | ERROR  NBD]
 *   REGISTER {ranges[, key]}            ->   (SCM_RIGHTS: uffd, image, then
 *            + [uffd, image[, record]         a record file with RECORD and
 *               [, working set]]              a working set with WSET; no
 *                                             image after an OPEN)
 *                                       <-   ACK {session, pages} | ERROR
 *   PREFETCH {range}, STATS             ->
 *                                       <-   PROGRESS ..., DONE
 *
 *   faultctl: HELLO, then STATUS        ->
 *                                       <-   STATUS {sessions}
 *
 * Every message is checked against its type's exact length (REGISTER:
 * header + nr_ranges ranges) before it is used; anything else gets an
 * ERROR naming what was wrong, and the connection is closed. A message may
 * carry file descriptors only where the protocol says so; others are
 * closed on receipt.
 */
#ifndef FAULTD_PROTO_H
#define FAULTD_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PROTO_MAGIC 0x31504446u /* "FDP1" */
/* 2: PROGRESS and DONE carry pages_poisoned. */
#define PROTO_VERSION 2
#define PROTO_MAX_MSG 65536
#define PROTO_MAX_RANGES 256

/* Features a side may offer in HELLO. */
#define PROTO_F_PREFETCH (1ull << 0)
#define PROTO_F_PROGRESS (1ull << 1)
#define PROTO_F_MAC (1ull << 2) /* REGISTER may carry an image key */
/* REGISTER may carry working-set files (PROTO_REG_RECORD, _WSET) */
#define PROTO_F_WSET (1ull << 3)
/* OPEN: the daemon reads an image from an NBD export (PROTO_REG_OPEN) */
#define PROTO_F_NBD (1ull << 4)
#define PROTO_FEATURES                                                         \
	(PROTO_F_PREFETCH | PROTO_F_PROGRESS | PROTO_F_MAC | PROTO_F_WSET |    \
	 PROTO_F_NBD)

enum proto_type {
	MSG_HELLO = 1,	/* both ways: struct proto_hello */
	MSG_REGISTER,	/* client: struct proto_register; fds uffd, image */
	MSG_ACK,	/* daemon: struct proto_ack */
	MSG_ERROR,	/* daemon: struct proto_error; then it closes */
	MSG_PREFETCH,	/* client: struct proto_range, pushed next */
	MSG_STATS,	/* client: header only; answered by PROGRESS */
	MSG_PROGRESS,	/* daemon: struct proto_progress */
	MSG_DONE,	/* daemon: struct proto_progress; every page is in */
	MSG_STATUS,	/* faultctl: header only; daemon: struct proto_status */
	MSG_LAZY_PAGES,	/* faultctl: struct proto_lazy_pages; daemon ACK */
	MSG_OPEN,	/* client: struct proto_open; daemon IMAGE or ERROR */
	MSG_IMAGE,	/* daemon: struct proto_image */
	MSG_TYPE_MAX,
};

struct proto_hdr {
	uint32_t magic;		/* PROTO_MAGIC */
	uint16_t version;	/* PROTO_VERSION */
	uint16_t type;		/* enum proto_type */
	uint32_t len;		/* of the whole message */
	uint32_t reserved;
};

struct proto_hello {
	struct proto_hdr h;
	uint32_t min_version;	/* what the sender speaks */
	uint32_t max_version;
	uint64_t features;	/* PROTO_F_* */
};

/* [start, start + len) of the client is [image_off, ..) of the image. */
struct proto_range {
	uint64_t start;
	uint64_t len;
	uint64_t image_off;
};

struct proto_register {
	struct proto_hdr h;
	uint64_t uffd_features;	/* UFFD_FEATURE_* enabled on the uffd */
	uint32_t nr_ranges;	/* 1..PROTO_MAX_RANGES */
	uint32_t flags;		/* PROTO_REG_* */
	struct proto_range r[];
};

#define PROTO_REG_LAZY (1u << 0) /* serve faults only: no background push */
/* The image is authenticated: its own key (not the user's: imgcheck.c)
 * follows the ranges, PROTO_KEY_LEN bytes, and every block is checked
 * with it. */
#define PROTO_REG_MAC (1u << 1)
/* Working sets (faultd-working-set(5)), with PROTO_F_WSET only. RECORD:
 * a descriptor follows the image's, of a regular file open for writing:
 * the daemon writes into it the pages that faulted, from offset 0, when
 * every page is in (before DONE) and when the session ends. WSET: a
 * descriptor follows (after the record's), of a working set open for
 * reading, replayed before the push. */
#define PROTO_REG_RECORD (1u << 2)
#define PROTO_REG_WSET (1u << 3)
/* The image is the one this connection's OPEN opened (PROTO_F_NBD): no
 * image descriptor follows the uffd. */
#define PROTO_REG_OPEN (1u << 4)
#define PROTO_REG_FLAGS                                                        \
	(PROTO_REG_LAZY | PROTO_REG_MAC | PROTO_REG_RECORD | PROTO_REG_WSET |  \
	 PROTO_REG_OPEN)
#define PROTO_KEY_LEN 32
#define PROTO_REG_MAX_FDS 4

/* The descriptors a REGISTER with @flags carries. */
static inline unsigned int proto_register_nfds(uint32_t flags)
{
	return 1 + !(flags & PROTO_REG_OPEN) + !!(flags & PROTO_REG_RECORD) +
	       !!(flags & PROTO_REG_WSET);
}

/* Where the key of a REGISTER with PROTO_REG_MAC is: after its ranges. */
static inline void *proto_register_key(const struct proto_register *r)
{
	return (void *)&r->r[r->nr_ranges];
}

struct proto_ack {
	struct proto_hdr h;
	uint64_t session;
	uint64_t pages_total;
};

struct proto_error {
	struct proto_hdr h;
	int32_t err;		/* a negative errno */
	uint32_t reserved;
	char msg[192];		/* NUL-terminated */
};

struct proto_progress {
	struct proto_hdr h;
	uint64_t pages_total;
	uint64_t pages_urgent;	/* served for faults */
	uint64_t pages_background;
	uint64_t faults;
	uint64_t p50_ns;	/* fault: message read to wake */
	uint64_t p99_ns;
	uint64_t pages_poisoned; /* bad image blocks: SIGBUS on access */
};

struct proto_session {
	uint64_t session;
	int32_t pid;
	uint32_t done;		/* every page is in */
	uint64_t pages_total;
	uint64_t pages_urgent;
	uint64_t pages_background;
	uint64_t faults;
	uint64_t p50_ns;
	uint64_t p99_ns;
	uint64_t age_ms;
	uint64_t pages_zero;	/* in as zeros; urgent and background: data */
	uint64_t eexist;	/* installs that found the page in */
	uint64_t eagain;	/* tries of faults that waited for an event */
	uint64_t removes;	/* REMOVE and UNMAP events */
	uint64_t poisoned;	/* pages that get SIGBUS: bad content */
	uint64_t first_fault_ms; /* from the session's start; 0: none yet */
	uint64_t all_in_ms;	/* every page in, from its start; 0: not yet */
	uint32_t kept;		/* kept outside the daemon: a restart adopts it */
	uint32_t reserved;
};

/*
 * LAZY_PAGES: serve the next `criu restore --lazy-pages` of the CRIU dump
 * in @dir, listening on @workdir/lazy-pages.socket, as `faultd lazy-pages
 * -D DIR -W WORKDIR [--verify FILE] [--fault-around KIB] [--handlers N]
 * [--working-set FILE | --record-working-set FILE]` would. Absolute paths,
 * NUL-terminated; an empty one: not asked for. Root or the daemon's own
 * user only. ACK once the socket listens (session 0, pages_total: the
 * dump's lazy pages).
 */
#define PROTO_PATH_MAX 1024
#define PROTO_LP_AROUND_MAX 2048 /* KiB */
#define PROTO_LP_HANDLERS_MAX 4
struct proto_lazy_pages {
	struct proto_hdr h;
	uint32_t flags;		/* none yet: 0 */
	uint32_t around_kib;	/* fault-around; 0: the daemon's */
	uint32_t handlers;	/* handler threads; 0: the daemon's */
	uint32_t reserved;	/* 0 */
	char dir[PROTO_PATH_MAX];
	char workdir[PROTO_PATH_MAX];
	char verify[PROTO_PATH_MAX]; /* the --sum sidecar; "": none */
	char wset[PROTO_PATH_MAX];   /* a working set to replay; "": none */
	char record[PROTO_PATH_MAX]; /* where to record one; "": none */
};

/*
 * OPEN: the daemon opens the faultd image whose file is the NBD export
 * @uri names (nbd://, nbds://, nbd+unix://, nbd+vsock://; faultd(8),
 * "Restoring from network storage") - allowed for root, the daemon's own
 * user, and the users and servers its allow list names - reads and checks
 * its header, and answers IMAGE; the connection's REGISTER then names
 * that image (PROTO_REG_OPEN). The header is what the client needs
 * before it has a region: its length, and for an authenticated image its
 * id and MAC, to derive the image's key. An OPEN refused, or an image
 * that cannot be read, gets ERROR with the reason, and the connection is
 * closed.
 */
#define PROTO_URI_MAX 1024
#define PROTO_IMG_HEADER_MAX 512
struct proto_open {
	struct proto_hdr h;
	uint32_t flags;		/* none yet: 0 */
	uint32_t reserved;	/* 0 */
	char uri[PROTO_URI_MAX]; /* NUL-terminated */
};

struct proto_image {
	struct proto_hdr h;
	uint64_t file_len;	/* bytes of the image file (the export's) */
	uint32_t header_len;	/* bytes of header[] that are the image's
				   header (faultd-image(5)); the rest 0 */
	uint32_t reserved;
	uint8_t header[PROTO_IMG_HEADER_MAX];
};

#define PROTO_MAX_SESSIONS                                                     \
	((PROTO_MAX_MSG - sizeof(struct proto_status)) /                       \
	 sizeof(struct proto_session))

struct proto_status {
	struct proto_hdr h;
	uint64_t uptime_ms;
	uint32_t nr_sessions;
	int32_t keeper_pid;	/* the daemon's keeper (faultd(8)); 0: none */
	struct proto_session s[];
};

/* proto.c */
void proto_init(struct proto_hdr *h, enum proto_type type, size_t len);
int proto_send(int sock, const void *msg, const int *fds, unsigned int nfds);
ssize_t proto_recv(int sock, void *buf, size_t max, int *fds,
		   unsigned int max_fds, unsigned int *nfds);
int proto_check(const void *buf, size_t n, const char **why);
ssize_t proto_recv_checked(int sock, void *buf, size_t max, int *fds,
			   unsigned int max_fds, unsigned int *nfds,
			   const char **why);
ssize_t proto_call(int sock, const void *msg, const int *fds,
		   unsigned int nfds, void *reply, size_t max);
int proto_connect(const char *path);
int proto_connect_daemon(const char *path, const char **why);
const char *proto_default_socket(char *buf, size_t len);
int proto_hello(int sock, uint64_t features, struct proto_hello *reply);
void proto_error_send(int sock, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif /* FAULTD_PROTO_H */
