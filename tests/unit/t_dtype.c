/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for dtype conversions: exhaustive over every bf16 and fp16 bit
 * pattern (round trips, ties to even at every midpoint), overflow and NaN.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "gatherfs/arith/dtype.h"
#include "tap.h"

static float f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static uint16_t to16(gfs_dtype dt, float f)
{
	uint8_t out[2];

	gfs_dtype_convert(GFS_DT_F32, dt, &f, out, 1);
	return gfs_le16(out);
}

static float from16(gfs_dtype dt, uint16_t h)
{
	const uint8_t in[2] = { (uint8_t)h, (uint8_t)(h >> 8) };
	float f;

	gfs_dtype_convert(dt, GFS_DT_F32, in, &f, 1);
	return f;
}

static bool is_nan16(gfs_dtype dt, uint16_t h)
{
	return dt == GFS_DT_BF16 ? (h & 0x7f80u) == 0x7f80u && (h & 0x7fu)
				 : (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
}

/* Every 16-bit pattern survives a round trip through f32 (NaN stays NaN). */
static void roundtrip(gfs_dtype dt)
{
	unsigned bad = 0;

	for (uint32_t h = 0; h < 65536; h++) {
		const uint16_t back = to16(dt, from16(dt, (uint16_t)h));

		if (is_nan16(dt, (uint16_t)h) ? !is_nan16(dt, back) : back != h)
			bad++;
	}
	tap_ok(bad == 0, "%s: all 65536 patterns round-trip through float32 (%u bad)",
	       gfs_dtype_name(dt), bad);
}

/*
 * Between every pair of adjacent finite positive values a < b, the exact
 * midpoint rounds to the one with an even mantissa, and one float32 ulp
 * either side rounds down / up.
 */
static void ties(gfs_dtype dt)
{
	const uint16_t maxfinite = dt == GFS_DT_BF16 ? 0x7f7f : 0x7bff;
	unsigned bad = 0;

	for (uint16_t h = 0; h < maxfinite; h++) {
		const float a = from16(dt, h), b = from16(dt, (uint16_t)(h + 1));
		const float mid = a + (b - a) / 2;
		uint32_t mu;

		memcpy(&mu, &mid, sizeof(mu));
		if (to16(dt, mid) != ((h & 1) ? h + 1 : h))
			bad++;
		if (to16(dt, f32(mu - 1)) != h || to16(dt, f32(mu + 1)) != h + 1)
			bad++;
		if (to16(dt, -mid) != (uint16_t)(((h & 1) ? h + 1 : h) | 0x8000u))
			bad++;
	}
	tap_ok(bad == 0, "%s: ties to even at every midpoint (%u bad)", gfs_dtype_name(dt), bad);
}

int main(void)
{
	roundtrip(GFS_DT_BF16);
	roundtrip(GFS_DT_F16);
	ties(GFS_DT_BF16);
	ties(GFS_DT_F16);
	tap_ok(to16(GFS_DT_F16, 65520.0f) == 0x7c00, "fp16: 65520 overflows to infinity");
	tap_ok(to16(GFS_DT_F16, 65519.99f) == 0x7bff, "fp16: 65519.99 rounds to 65504");
	tap_ok(to16(GFS_DT_F16, -1e10f) == 0xfc00, "fp16: -1e10 is -infinity");
	tap_ok(to16(GFS_DT_F16, 1e-10f) == 0, "fp16: 1e-10 underflows to zero");
	tap_ok(to16(GFS_DT_F16, f32(0x33000001)) == 1, "fp16: just above 2^-25 rounds to the smallest subnormal");
	tap_ok(to16(GFS_DT_BF16, f32(0x7f7fffff)) == 0x7f80, "bf16: FLT_MAX rounds to infinity (as torch)");
	tap_ok(to16(GFS_DT_BF16, INFINITY) == 0x7f80, "bf16: infinity");
	tap_ok(is_nan16(GFS_DT_BF16, to16(GFS_DT_BF16, f32(0x7f800001))), "bf16: a signalling NaN stays NaN");
	tap_ok(is_nan16(GFS_DT_F16, to16(GFS_DT_F16, NAN)), "fp16: NaN stays NaN");
	{
		const double d[3] = { 1.0 / 3.0, -2.5e-40, 3.0e38 };
		float f[3];
		uint8_t h[6];

		gfs_dtype_convert(GFS_DT_F64, GFS_DT_F32, d, f, 3);
		tap_ok(f[0] == (float)d[0] && f[1] == (float)d[1] && f[2] == (float)d[2],
		       "f64 -> f32 rounds as a C cast");
		gfs_dtype_convert(GFS_DT_F64, GFS_DT_BF16, d, h, 3);
		tap_ok(gfs_le16(h) == to16(GFS_DT_BF16, (float)d[0]), "f64 -> bf16 goes through f32, as torch");
	}
	tap_ok(gfs_dtype_parse("bf16") == GFS_DT_BF16 && gfs_dtype_parse("float32") == GFS_DT_F32 &&
	       gfs_dtype_parse("F16") == GFS_DT_F16 && gfs_dtype_parse("half") == GFS_DT_F16 &&
	       gfs_dtype_parse("nope") == GFS_DT_INVALID, "dtype names parse");
	tap_ok(gfs_dtype_out(GFS_DT_I64, GFS_DT_BF16) == GFS_DT_I64 &&
	       gfs_dtype_out(GFS_DT_BOOL, GFS_DT_F16) == GFS_DT_BOOL &&
	       gfs_dtype_out(GFS_DT_F32, GFS_DT_BF16) == GFS_DT_BF16 &&
	       gfs_dtype_out(GFS_DT_BF16, GFS_DT_INVALID) == GFS_DT_BF16,
	       "only floating-point tensors change dtype");
	tap_ok(gfs_dtype_from_storage_class("BFloat16Storage") == GFS_DT_BF16 &&
	       gfs_dtype_from_storage_class("LongStorage") == GFS_DT_I64 &&
	       gfs_dtype_from_storage_class("Bogus") == GFS_DT_INVALID, "storage classes map to dtypes");
	tap_ok(gfs_dtype_from_storage_class("") == GFS_DT_INVALID &&
	       gfs_dtype_parse("F8_E4M3") == GFS_DT_F8_E4M3 &&
	       gfs_dtype_parse("float8_e8m0fnu") == GFS_DT_F8_E8M0 &&
	       gfs_dtype_size(GFS_DT_F8_E5M2) == 1 && !gfs_dtype_is_float(GFS_DT_F8_E4M3) &&
	       gfs_dtype_out(GFS_DT_F8_E4M3, GFS_DT_BF16) == GFS_DT_F8_E4M3,
	       "FP8 dtypes: names, size 1, never converted by -o dtype=");
	tap_ok(gfs_fp8_to_f32(GFS_DT_F8_E4M3, 0x7e) == 448.0f &&
	       gfs_fp8_to_f32(GFS_DT_F8_E4M3, 0x01) == ldexpf(1, -9) &&
	       gfs_fp8_to_f32(GFS_DT_F8_E4M3, 0x08) == ldexpf(1, -6) &&
	       gfs_fp8_to_f32(GFS_DT_F8_E4M3, 0x38) == 1.0f &&
	       gfs_fp8_to_f32(GFS_DT_F8_E4M3, 0xb9) == -1.125f &&
	       isnan(gfs_fp8_to_f32(GFS_DT_F8_E4M3, 0x7f)) && isnan(gfs_fp8_to_f32(GFS_DT_F8_E4M3, 0xff)) &&
	       signbit(gfs_fp8_to_f32(GFS_DT_F8_E4M3, 0x80)),
	       "E4M3: 448, subnormals, 1, -1.125, NaN, -0");
	tap_ok(gfs_fp8_to_f32(GFS_DT_F8_E5M2, 0x7b) == 57344.0f &&
	       gfs_fp8_to_f32(GFS_DT_F8_E5M2, 0x01) == ldexpf(1, -16) &&
	       gfs_fp8_to_f32(GFS_DT_F8_E5M2, 0x3c) == 1.0f &&
	       gfs_fp8_to_f32(GFS_DT_F8_E5M2, 0xfc) == -INFINITY &&
	       isnan(gfs_fp8_to_f32(GFS_DT_F8_E5M2, 0x7d)),
	       "E5M2: 57344, subnormal, 1, -inf, NaN");
	tap_ok(gfs_fp8_to_f32(GFS_DT_F8_E8M0, 0x7f) == 1.0f &&
	       gfs_fp8_to_f32(GFS_DT_F8_E8M0, 0x00) == ldexpf(1, -127) &&
	       gfs_fp8_to_f32(GFS_DT_F8_E8M0, 0xfe) == ldexpf(1, 127) &&
	       isnan(gfs_fp8_to_f32(GFS_DT_F8_E8M0, 0xff)),
	       "E8M0: 2^(b - 127), 0xff NaN");
	{
		bool mono = true;

		for (int b = 1; b < 0x7f; b++)
			mono = mono && gfs_fp8_to_f32(GFS_DT_F8_E4M3, (uint8_t)b) >
					       gfs_fp8_to_f32(GFS_DT_F8_E4M3, (uint8_t)(b - 1)) &&
			       gfs_fp8_to_f32(GFS_DT_F8_E4M3, (uint8_t)(b | 0x80)) ==
				       -gfs_fp8_to_f32(GFS_DT_F8_E4M3, (uint8_t)b);
		tap_ok(mono, "E4M3: the 126 finite positive codes increase, negatives mirror them");
	}
	return tap_done();
}
