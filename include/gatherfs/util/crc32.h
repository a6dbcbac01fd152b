/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — CRC-32 of the zip format (ISO 3309 / ITU-T V.42, the
 * polynomial 0xEDB88320 reflected, initial value and final XOR 0xFFFFFFFF):
 * the one CRC-32 of gatherfs, computed by Intel ISA-L (crc32_gzip_refl,
 * PCLMUL folding where the CPU has it), with zlib's crc32() conventions.
 */
#ifndef GATHERFS_CRC32_H
#define GATHERFS_CRC32_H

#include <stddef.h>
#include <stdint.h>

/*
 * gfs_crc32(): the CRC-32 of buf[0..len) continuing crc, the CRC-32 of the
 * bytes before them (0 for none): gfs_crc32(gfs_crc32(0, a, n), b, m) is
 * the CRC-32 of a followed by b, the value zlib's crc32() returns for the
 * same arguments.  buf may be NULL when len is 0 (crc is returned).
 */
uint32_t gfs_crc32(uint32_t crc, const void *buf, size_t len);

/*
 * gfs_crc32_combine(): the CRC-32 of A followed by B, from crc_a (of A),
 * crc_b (of B) and len_b (B's length in bytes); zlib's crc32_combine().
 * O(log len_b), the bytes are not needed.
 */
uint32_t gfs_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

#endif
