// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * fc_json_fuzz.c - libFuzzer target for Firecracker's handshake
 * (daemon/fc_json.h): the input is the bytes a peer sends on the socket.
 *
 * Covers fc_json_parse() (only its documented errors, each with a
 * message; nothing read past the input, which ASan sees) and, for what
 * parses, fc_regions_check() against memory files of several sizes and
 * page sizes. What parses is written again as serde_json writes it and
 * must parse to the same regions: the parser and the format agree.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct fc_handshake h, again;
static char json[FC_MAX_REGIONS * 160 + 2];

/* The regions as Firecracker 1.12 on sends them. */
static size_t serde_write(const struct fc_handshake *p)
{
	size_t len = 0;

	json[len++] = '[';
	for (size_t i = 0; i < p->nr; i++)
		len += (size_t)snprintf(json + len, sizeof(json) - len,
			"%s{\"base_host_virt_addr\":%llu,\"size\":%llu,"
			"\"offset\":%llu,\"page_size\":%zu,\"page_size_kib\":"
			"%zu}", i ? "," : "",
			(unsigned long long)p->r[i].base,
			(unsigned long long)p->r[i].size,
			(unsigned long long)p->r[i].offset, p->r[i].page_size,
			p->r[i].page_size);
	json[len++] = ']';
	return len;
}

static void regions_check(void)
{
	static const uint64_t files[] = { 0, 4096, 2ull << 20, 1ull << 40,
					  UINT64_MAX };
	static const size_t pages[] = { 0, 4096, 2ul << 20 };
	char why[FC_WHY_MAX];

	for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
		for (size_t p = 0; p < sizeof(pages) / sizeof(pages[0]); p++) {
			int ret;

			why[0] = 0;
			ret = fc_regions_check(h.r, h.nr, files[f], pages[p],
					       why, sizeof(why));
			if (ret != 0 && ret != -EINVAL && ret != -ERANGE)
				abort();
			if (ret ? !why[0] : why[0] != 0)
				abort();
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[FC_WHY_MAX] = "";
	size_t len;
	int ret = fc_json_parse((const char *)data, size, &h, why,
				sizeof(why));

	if (ret != 0 && ret != -EBADMSG && ret != -EMSGSIZE && ret != -E2BIG)
		abort();
	if (ret ? !why[0] || h.nr : why[0] != 0)
		abort(); /* every refusal says why and yields no region */
	if (ret)
		return 0;
	if (h.nr > FC_MAX_REGIONS || (h.ignored && !h.ignored_key[0]))
		abort();
	regions_check();
	len = serde_write(&h);
	if (fc_json_parse(json, len, &again, why, sizeof(why)) ||
	    again.nr != h.nr || again.ignored ||
	    memcmp(again.r, h.r, h.nr * sizeof(h.r[0])))
		abort();
	return 0;
}
