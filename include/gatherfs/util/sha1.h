/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — SHA-1 (FIPS 180-4), streaming: the git blob hash that names a
 * small (non-LFS) file in a Hugging Face cache's blobs/, sha1("blob LEN\0"
 * + content).  Not for anything that needs collision resistance.
 */
#ifndef GATHERFS_SHA1_H
#define GATHERFS_SHA1_H

#include <stddef.h>
#include <stdint.h>

typedef struct gfs_sha1 {
	uint32_t h[5];
	uint64_t len;      /* bytes hashed so far */
	uint8_t buf[64];   /* a partial block: len % 64 bytes */
} gfs_sha1;

/* gfs_sha1_init(): start a new hash in c. */
void gfs_sha1_init(gfs_sha1 *c);

/* gfs_sha1_update(): hash n more bytes of p (p may be NULL when n is 0). */
void gfs_sha1_update(gfs_sha1 *c, const void *p, size_t n);

/* gfs_sha1_final(): the 20-byte digest of everything hashed into c; c is then spent. */
void gfs_sha1_final(gfs_sha1 *c, uint8_t out[20]);

#endif
