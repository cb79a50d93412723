/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * image.h - a faultd checkpoint image as a source (image.c): a local
 * file, or the bytes of another source (an NBD export of the file).
 */
#ifndef FAULTD_SRC_IMAGE_H
#define FAULTD_SRC_IMAGE_H

#include "source.h"

struct image;
struct img_header;
struct img_key;

extern const struct source_type src_image_type;
extern const struct source_type src_remote_image_type;

int src_image_open(int fd, const struct img_key *key, struct source **sp,
		   const char **why);
int src_image_open_over(struct source *under, const struct img_key *key,
			struct source **sp, const char **why);
int src_image_header(struct source *under, struct img_header *h,
		     const char **why);
struct image *src_image_of(struct source *s);

#endif /* FAULTD_SRC_IMAGE_H */
