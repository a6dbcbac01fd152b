/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — SHA-1 (FIPS 180-4), a plain portable implementation.
 */
#include "config.h"

#include <assert.h>
#include <string.h>

#include "gatherfs/util/sha1.h"

static inline uint32_t rol(uint32_t x, unsigned n)
{
	return (x << n) | (x >> (32 - n));
}

static void block(uint32_t h[5], const uint8_t *p)
{
	uint32_t w[80], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 80; i++)
		w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
	for (int i = 0; i < 80; i++) {
		uint32_t f, k, t;

		if (i < 20) {
			f = (b & c) | (~b & d);
			k = 0x5a827999;
		} else if (i < 40) {
			f = b ^ c ^ d;
			k = 0x6ed9eba1;
		} else if (i < 60) {
			f = (b & c) | (b & d) | (c & d);
			k = 0x8f1bbcdc;
		} else {
			f = b ^ c ^ d;
			k = 0xca62c1d6;
		}
		t = rol(a, 5) + f + e + k + w[i];
		e = d;
		d = c;
		c = rol(b, 30);
		b = a;
		a = t;
	}
	h[0] += a;
	h[1] += b;
	h[2] += c;
	h[3] += d;
	h[4] += e;
}

void gfs_sha1_init(gfs_sha1 *c)
{
	static const uint32_t iv[5] = { 0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476,
					0xc3d2e1f0 };

	memcpy(c->h, iv, sizeof(iv));
	c->len = 0;
}

void gfs_sha1_update(gfs_sha1 *c, const void *data, size_t n)
{
	const uint8_t *p = data;
	size_t have = (size_t)(c->len % 64);

	assert(p || n == 0);
	c->len += n;
	if (have) {
		const size_t take = n < 64 - have ? n : 64 - have;

		memcpy(c->buf + have, p, take);
		p += take;
		n -= take;
		if (have + take < 64)
			return;
		block(c->h, c->buf);
	}
	for (; n >= 64; p += 64, n -= 64)
		block(c->h, p);
	if (n)
		memcpy(c->buf, p, n);
}

void gfs_sha1_final(gfs_sha1 *c, uint8_t out[20])
{
	const uint64_t bits = c->len * 8;
	size_t have = (size_t)(c->len % 64);

	c->buf[have++] = 0x80;
	if (have > 56) {
		memset(c->buf + have, 0, 64 - have);
		block(c->h, c->buf);
		have = 0;
	}
	memset(c->buf + have, 0, 56 - have);
	for (int i = 0; i < 8; i++)
		c->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
	block(c->h, c->buf);
	for (int i = 0; i < 5; i++) {
		out[4 * i] = (uint8_t)(c->h[i] >> 24);
		out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
		out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
		out[4 * i + 3] = (uint8_t)c->h[i];
	}
}
