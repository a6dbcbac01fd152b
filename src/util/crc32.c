/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — CRC-32 (crc32.h): ISA-L computes, zlib combines.
 *
 * ISA-L's crc32_gzip_refl() takes and returns the CRC with zlib's
 * convention (it inverts on entry and exit), so it continues a zlib
 * crc32() value; tests/unit/t_crc32.c checks that against zlib.
 */
#include "config.h"

#include <isa-l/crc.h>
#include <zlib.h>

#include "gatherfs/util/crc32.h"

uint32_t gfs_crc32(uint32_t crc, const void *buf, size_t len)
{
	if (len == 0)
		return crc;
	return crc32_gzip_refl(crc, buf, (uint64_t)len);
}

uint32_t gfs_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
	return (uint32_t)crc32_combine(crc_a, crc_b, (z_off_t)len_b);
}
