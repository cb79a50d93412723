/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fc_json.h - Firecracker's page-fault handler handshake: the JSON array it
 * sends with the userfaultfd, parsed, and its regions checked.
 *
 * On a snapshot load with the Uffd memory backend, Firecracker connects to
 * the handler's Unix stream socket and sends, in one sendmsg() with the
 * userfaultfd attached, its guest memory regions as serde_json writes a
 * Vec<GuestRegionUffdMapping>: compact, fields in this order,
 *   [{"base_host_virt_addr":U64,"size":U64,"offset":U64,
 *     "page_size":U64,"page_size_kib":U64},...]
 * "offset" is where the region's content starts in the memory file (the
 * regions are back to back there); "page_size_kib" holds the page size in
 * bytes despite its name and is deprecated (Firecracker 1.7 to 1.11 sent
 * only it; 1.12 on send both; 2.0 drops it).
 *
 * The parser accepts any JSON that means such an array (keys in any
 * order, whitespace anywhere JSON allows it) and nothing else. Unknown
 * keys are skipped, as serde's default (which Firecracker's own handlers
 * rely on: a new field has been added beside an old one before) does, but
 * counted, so that the caller can log them; known keys must appear once.
 * Numbers of known keys are unsigned integers that fit 64 bits.
 *
 * Context: pure functions; any thread.
 */
#ifndef FAULTD_FC_JSON_H
#define FAULTD_FC_JSON_H

#include <stddef.h>
#include <stdint.h>

#define FC_JSON_MAX (64u << 10)	/* a handshake is at most this long */
#define FC_MAX_REGIONS 64	/* Firecracker sends 1 to 3 */
#define FC_WHY_MAX 192		/* room for any message below */
#define FC_PAGE_4K 4096ul
#define FC_PAGE_2M (2ul << 20)

struct fc_region {
	uint64_t base;		/* base_host_virt_addr: in Firecracker */
	uint64_t size;		/* bytes */
	uint64_t offset;	/* of its content in the memory file */
	size_t page_size;	/* page_size, else page_size_kib (bytes) */
};

struct fc_handshake {
	struct fc_region r[FC_MAX_REGIONS];
	size_t nr;
	unsigned int ignored;	/* unknown keys skipped */
	char ignored_key[32];	/* the first of them, cut to fit */
};

/*
 * fc_json_parse() - the handshake in [buf, buf + len) into *h.
 * Returns 0, or with a message in @why (FC_WHY_MAX bytes is enough):
 * -EMSGSIZE longer than FC_JSON_MAX, -E2BIG more than FC_MAX_REGIONS
 * regions, -EBADMSG anything else that is not such an array (a syntax
 * error, a value of the wrong type, a number that does not fit, a known
 * key twice or missing, page_size and page_size_kib that disagree).
 * An empty array parses (nr 0); fc_regions_check() refuses it.
 */
int fc_json_parse(const char *buf, size_t len, struct fc_handshake *h,
		  char *why, size_t why_len);

/*
 * fc_json_complete() - does [buf, buf + len), the bytes of a handshake
 * received so far, hold a whole top-level value yet? 1 when the value
 * that starts it has closed (brackets outside strings balanced), 0 when
 * more bytes may complete it, -EBADMSG when it cannot be an array (its
 * first byte that is not whitespace is not '['). It checks nothing else:
 * fc_json_parse() does. A stream socket may deliver one sendmsg() in
 * pieces; this says when to stop reading.
 */
int fc_json_complete(const char *buf, size_t len);

/*
 * fc_regions_check() - can these regions be served from a memory file of
 * @file_size bytes? Each region's page size is 4096 or 2 MiB, the same for
 * all and, when @page_size is not 0, equal to it (what the memory file was
 * taken with); base, size and offset are multiples of it; the regions do
 * not overlap in the guest's address space or in the file, lie in the user
 * address space, and the file holds each one whole.
 * Returns 0, or with a message in @why: -ERANGE the file is shorter than a
 * region needs, -EINVAL any other failure.
 */
int fc_regions_check(const struct fc_region *r, size_t nr, uint64_t file_size,
		     size_t page_size, char *why, size_t why_len);

#endif /* FAULTD_FC_JSON_H */
