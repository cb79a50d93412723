/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-key.h - the key of the authenticated seeds (fuzz-seeds writes
 * them with it) and the one image-fuzz opens and repairs them with: 32
 * bytes of FUZZ_KEY_BYTE.
 */
#ifndef FAULTD_FUZZ_KEY_H
#define FAULTD_FUZZ_KEY_H

#define FUZZ_KEY_BYTE 0x5a

#endif
