/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for the CRC-32 (crc32.h): gfs_crc32() equals zlib's crc32()
 * on random buffers of many lengths and alignments, continued from any
 * value and split anywhere; gfs_crc32_combine() equals the CRC-32 of the
 * concatenation; and the check value of the zip CRC-32 ("123456789").
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "gatherfs/util/crc32.h"
#include "tap.h"

enum { BIG = 3 << 20, ALIGNS = 64 };

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static uint32_t zcrc(uint32_t crc, const uint8_t *b, size_t n)
{
	return (uint32_t)crc32_z(crc, b, (z_size_t)n);
}

int main(void)
{
	uint8_t *buf = malloc(BIG + ALIGNS);
	size_t bad = 0, cases = 0;
	static const size_t lens[] = { 0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65,
				       127, 128, 129, 255, 256, 257, 511, 512, 1000, 1023, 1024,
				       4095, 4096, 4097, 65535, 65536, 65537, 1 << 20, BIG };

	if (!buf)
		return 1;
	for (size_t i = 0; i < BIG + ALIGNS; i++)
		buf[i] = (uint8_t)next_rand();

	tap_ok(gfs_crc32(0, "123456789", 9) == 0xCBF43926u, "check value of \"123456789\"");
	tap_ok(gfs_crc32(0, NULL, 0) == 0 && gfs_crc32(0xdeadbeefu, NULL, 0) == 0xdeadbeefu,
	       "no bytes: the CRC continued is returned");

	/* Every listed length at every alignment, from 0 and from a random CRC. */
	for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
		for (size_t a = 0; a < ALIGNS; a += lens[li] > 65536 ? 13 : 1) {
			const uint32_t seed = (uint32_t)next_rand();

			cases += 2;
			bad += gfs_crc32(0, buf + a, lens[li]) != zcrc(0, buf + a, lens[li]);
			bad += gfs_crc32(seed, buf + a, lens[li]) != zcrc(seed, buf + a, lens[li]);
		}
	tap_ok(bad == 0, "equals zlib crc32(): %zu of %zu lengths x alignments differ", bad, cases);

	/* Random lengths and alignments. */
	bad = 0;
	for (int k = 0; k < 2000; k++) {
		const size_t a = (size_t)(next_rand() % ALIGNS);
		const size_t n = (size_t)(next_rand() % (k % 10 ? 9000 : BIG));
		const uint32_t seed = k % 2 ? (uint32_t)next_rand() : 0;

		bad += gfs_crc32(seed, buf + a, n) != zcrc(seed, buf + a, n);
	}
	tap_ok(bad == 0, "equals zlib crc32() on 2000 random lengths and alignments: %zu differ",
	       bad);

	/* A buffer split anywhere, continued and combined. */
	bad = 0;
	cases = 0;
	for (int k = 0; k < 500; k++) {
		const size_t a = (size_t)(next_rand() % ALIGNS);
		const size_t n = (size_t)(next_rand() % (k % 5 ? 70000 : BIG));
		const size_t cut = n ? (size_t)(next_rand() % (n + 1)) : 0;
		const uint32_t seed = (uint32_t)next_rand();
		const uint32_t whole = zcrc(0, buf + a, n);
		const uint32_t head = gfs_crc32(0, buf + a, cut);
		const uint32_t tail = gfs_crc32(0, buf + a + cut, n - cut);

		cases++;
		bad += gfs_crc32(head, buf + a + cut, n - cut) != whole;
		bad += gfs_crc32_combine(head, tail, n - cut) != whole;
		/* Pieces and whole from zlib's crc32(), the head continued from a seed. */
		bad += gfs_crc32_combine(zcrc(seed, buf + a, cut), zcrc(0, buf + a + cut, n - cut),
					 n - cut) != zcrc(seed, buf + a, n);
	}
	tap_ok(bad == 0, "split, continued and combined: %zu mismatches in %zu splits", bad, cases);

	/* Many pieces combined in order, as a record from its segments. */
	{
		uint32_t crc = 0;
		size_t at = 0;

		while (at < BIG) {
			size_t n = (size_t)(next_rand() % 300000);

			if (n > BIG - at)
				n = BIG - at;
			crc = gfs_crc32_combine(crc, gfs_crc32(0, buf + at, n), n);
			at += n;
		}
		tap_ok(crc == zcrc(0, buf, BIG), "%d MiB combined from random pieces", BIG >> 20);
	}
	tap_ok(gfs_crc32_combine(0x12345678u, 0, 0) == 0x12345678u,
	       "combine with an empty second part");
	free(buf);
	return tap_done();
}
