/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — SHA-256 (FIPS 180-4), streaming: the hash of a tensor's bytes
 * (user.gatherfs.sha256, `gatherfs-inspect ls --sha256`, check's
 * `identical` finding).
 */
#ifndef GATHERFS_SHA256_H
#define GATHERFS_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct gfs_sha256 {
	uint32_t h[8];
	uint64_t len;      /* bytes hashed so far */
	uint8_t buf[64];   /* a partial block: len % 64 bytes */
} gfs_sha256;

/* gfs_sha256_init(): start a new hash in c. */
void gfs_sha256_init(gfs_sha256 *c);

/* gfs_sha256_update(): hash n more bytes of p (p may be NULL when n is 0). */
void gfs_sha256_update(gfs_sha256 *c, const void *p, size_t n);

/* gfs_sha256_final(): the 32-byte digest of everything hashed into c; c is then spent. */
void gfs_sha256_final(gfs_sha256 *c, uint8_t out[32]);

/* gfs_sha256_hex(): digest as 64 lower-case hex digits and a NUL in hex (65 bytes). */
void gfs_sha256_hex(const uint8_t digest[32], char hex[65]);

#endif
