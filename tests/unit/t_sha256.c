/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for SHA-256 (sha256.h): the FIPS 180-4 / NIST example vectors
 * ("", "abc", the 448- and 896-bit messages, a million 'a'), and the same
 * digest however the input is split into updates.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/util/sha256.h"
#include "tap.h"

static void hex_of(const void *p, size_t n, size_t step, char hex[65])
{
	gfs_sha256 c;
	uint8_t d[32];

	gfs_sha256_init(&c);
	for (size_t off = 0; off < n; off += step)
		gfs_sha256_update(&c, (const uint8_t *)p + off, n - off < step ? n - off : step);
	gfs_sha256_final(&c, d);
	gfs_sha256_hex(d, hex);
}

int main(void)
{
	static const struct {
		const char *msg, *hex;
	} v[] = {
		{ "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
		{ "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
		{ "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
		{ "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
		  "klmnopqrlmnopqrsmnopqrstnopqrstu",
		  "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1" },
	};
	const size_t big = 1000000;
	char *a = malloc(big);
	char hex[65];

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		static const size_t steps[] = { 1, 3, 63, 64, 65, 1000 };

		for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
			hex_of(v[i].msg, strlen(v[i].msg), steps[s], hex);
			tap_ok(strcmp(hex, v[i].hex) == 0, "vector %zu in updates of %zu: %s", i,
			       steps[s], hex);
		}
	}
	if (!a)
		return 1;
	memset(a, 'a', big);
	hex_of(a, big, 4096, hex);
	tap_ok(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0,
	       "a million 'a': %s", hex);
	hex_of(a, big, 777, hex);
	tap_ok(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0,
	       "a million 'a' in updates of 777: %s", hex);
	free(a);
	return tap_done();
}
