// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * opts.c - option structs of any size, the way the kernel's
 * copy_struct_from_user() takes them.
 *
 * Every public option struct begins with its size (faultd.h), so that a
 * program built against an older or a newer faultd.h keeps working: what
 * it did not know of reads as zero, and what we do not know of must be
 * zero. An entry point copies the caller's struct into one of ours with
 * opts_copy() before it reads a field.
 */
#include <errno.h>
#include <string.h>

#include "internal.h"

/*
 * opts_copy() - copy a caller's option struct of any size into ours, the
 * way the kernel's copy_struct_from_user() does: a shorter struct than
 * @min is refused, a longer one is accepted only when the fields we do not
 * know are zero, and our fields the caller did not have are zeroed.
 */
int opts_copy(void *dst, size_t dst_size, const void *src, size_t min)
{
	size_t src_size = *(const size_t *)src;
	const unsigned char *tail = (const unsigned char *)src + dst_size;

	if (src_size < min)
		return -EINVAL;
	for (size_t i = 0; dst_size + i < src_size; i++)
		if (tail[i])
			return -E2BIG;
	memset(dst, 0, dst_size);
	memcpy(dst, src, src_size < dst_size ? src_size : dst_size);
	return 0;
}
