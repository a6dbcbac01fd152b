/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — dtype table and float conversions (round to nearest even).
 */
#include "config.h"

#include <assert.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "gatherfs/arith/dtype.h"

typedef struct dtype_info {
	const char *name;
	const char *st_name;
	const char *storage;
	size_t size;
	bool is_float;
} dtype_info;

static const dtype_info infos[GFS_DT_COUNT_] = {
	[GFS_DT_INVALID] = { "invalid", "INVALID", "", 0, false },
	[GFS_DT_F64] = { "float64", "F64", "DoubleStorage", 8, true },
	[GFS_DT_F32] = { "float32", "F32", "FloatStorage", 4, true },
	[GFS_DT_F16] = { "float16", "F16", "HalfStorage", 2, true },
	[GFS_DT_BF16] = { "bfloat16", "BF16", "BFloat16Storage", 2, true },
	[GFS_DT_C128] = { "complex128", "C128", "ComplexDoubleStorage", 16, false },
	[GFS_DT_C64] = { "complex64", "C64", "ComplexFloatStorage", 8, false },
	[GFS_DT_I64] = { "int64", "I64", "LongStorage", 8, false },
	[GFS_DT_I32] = { "int32", "I32", "IntStorage", 4, false },
	[GFS_DT_I16] = { "int16", "I16", "ShortStorage", 2, false },
	[GFS_DT_I8] = { "int8", "I8", "CharStorage", 1, false },
	[GFS_DT_U8] = { "uint8", "U8", "ByteStorage", 1, false },
	[GFS_DT_BOOL] = { "bool", "BOOL", "BoolStorage", 1, false },
	[GFS_DT_F8_E4M3] = { "float8_e4m3fn", "F8_E4M3", "", 1, false },
	[GFS_DT_F8_E5M2] = { "float8_e5m2", "F8_E5M2", "", 1, false },
	[GFS_DT_F8_E8M0] = { "float8_e8m0fnu", "F8_E8M0", "", 1, false },
};

static const struct {
	const char *alias;
	gfs_dtype dt;
} aliases[] = {
	{ "fp64", GFS_DT_F64 }, { "f64", GFS_DT_F64 }, { "double", GFS_DT_F64 },
	{ "fp32", GFS_DT_F32 }, { "f32", GFS_DT_F32 }, { "float", GFS_DT_F32 },
	{ "fp16", GFS_DT_F16 }, { "f16", GFS_DT_F16 }, { "half", GFS_DT_F16 },
	{ "bf16", GFS_DT_BF16 }, { "long", GFS_DT_I64 }, { "int", GFS_DT_I32 },
	{ "short", GFS_DT_I16 }, { "cfloat", GFS_DT_C64 }, { "cdouble", GFS_DT_C128 },
};

static bool valid(gfs_dtype dt)
{
	return dt > GFS_DT_INVALID && dt < GFS_DT_COUNT_;
}

size_t gfs_dtype_size(gfs_dtype dt)
{
	return valid(dt) ? infos[dt].size : 0;
}

const char *gfs_dtype_name(gfs_dtype dt)
{
	return valid(dt) ? infos[dt].name : infos[GFS_DT_INVALID].name;
}

const char *gfs_dtype_st_name(gfs_dtype dt)
{
	return valid(dt) ? infos[dt].st_name : infos[GFS_DT_INVALID].st_name;
}

const char *gfs_dtype_storage_class(gfs_dtype dt)
{
	return valid(dt) ? infos[dt].storage : infos[GFS_DT_INVALID].storage;
}

bool gfs_dtype_is_float(gfs_dtype dt)
{
	return valid(dt) && infos[dt].is_float;
}

bool gfs_dtype_is_fp8(gfs_dtype dt)
{
	return dt == GFS_DT_F8_E4M3 || dt == GFS_DT_F8_E5M2 || dt == GFS_DT_F8_E8M0;
}

float gfs_fp8_to_f32(gfs_dtype dt, uint8_t b)
{
	const float sign = (b & 0x80u) ? -1.0f : 1.0f;

	assert(gfs_dtype_is_fp8(dt));
	if (dt == GFS_DT_F8_E8M0) /* unsigned: 2^(b - 127), 0xff NaN */
		return b == 0xffu ? NAN : ldexpf(1.0f, (int)b - 127);
	if (dt == GFS_DT_F8_E4M3) { /* bias 7, no infinities, S.1111.111 NaN */
		const int e = (b >> 3) & 0xf, m = b & 0x7;

		if (e == 0xf && m == 0x7)
			return copysignf(NAN, sign);
		return sign * (e ? ldexpf((float)(8 + m), e - 10) : ldexpf((float)m, -9));
	}
	{ /* E5M2: bias 15, IEEE-like */
		const int e = (b >> 2) & 0x1f, m = b & 0x3;

		if (e == 0x1f)
			return m ? copysignf(NAN, sign) : sign * INFINITY;
		return sign * (e ? ldexpf((float)(4 + m), e - 17) : ldexpf((float)m, -16));
	}
}

gfs_dtype gfs_dtype_parse(const char *s)
{
	if (!s)
		return GFS_DT_INVALID;
	for (int dt = GFS_DT_INVALID + 1; dt < GFS_DT_COUNT_; dt++)
		if (strcmp(s, infos[dt].name) == 0 || strcmp(s, infos[dt].st_name) == 0)
			return (gfs_dtype)dt;
	for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
		if (strcasecmp(s, aliases[i].alias) == 0)
			return aliases[i].dt;
	return GFS_DT_INVALID;
}

gfs_dtype gfs_dtype_from_storage_class(const char *cls)
{
	if (!cls)
		return GFS_DT_INVALID;
	for (int dt = GFS_DT_INVALID + 1; dt < GFS_DT_COUNT_; dt++)
		if (infos[dt].storage[0] && strcmp(cls, infos[dt].storage) == 0)
			return (gfs_dtype)dt;
	return GFS_DT_INVALID;
}

gfs_dtype gfs_dtype_out(gfs_dtype dt, gfs_dtype want)
{
	if (want == GFS_DT_INVALID || !gfs_dtype_is_float(dt))
		return dt;
	assert(gfs_dtype_is_float(want));
	return want;
}

static float f32_from_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static uint16_t f32_to_bf16(float f)
{
	return gfs_bf16_round(f);
}

static float bf16_to_f32(uint16_t h)
{
	return f32_from_bits((uint32_t)h << 16);
}

/* IEEE binary32 -> binary16, round to nearest even, with subnormals. */
static uint16_t f32_to_f16(float f)
{
	const uint32_t u = f32_bits(f);
	const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	const uint32_t au = u & 0x7fffffffu;

	if (au > 0x7f800000u)
		return (uint16_t)(sign | 0x7e00u);
	if (au >= 0x477ff000u) /* rounds to >= 65520: infinity */
		return (uint16_t)(sign | 0x7c00u);
	if (au < 0x38800000u) { /* below the smallest normal half: subnormal */
		const int shift = 126 - (int)(au >> 23); /* 14..24 below */
		const uint32_t mant = (au & 0x7fffffu) | 0x800000u;
		uint32_t half, rem, halfway;

		if (au < 0x33000000u) /* below half the smallest subnormal */
			return sign;
		/* value = mant * 2^(e-150) and the half subnormal unit is 2^-24 */
		half = mant >> shift;
		rem = mant & ((1u << shift) - 1u);
		halfway = 1u << (shift - 1);
		if (rem > halfway || (rem == halfway && (half & 1u)))
			half++;
		return (uint16_t)(sign | half);
	}
	{
		const uint32_t rounded = au + 0xfffu + ((au >> 13) & 1u);

		return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
	}
}

static float f16_to_f32(uint16_t h)
{
	const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	const uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t mant = h & 0x3ffu;

	if (exp == 0x1f)
		return f32_from_bits(sign | 0x7f800000u | (mant << 13));
	if (exp != 0)
		return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
	if (mant == 0)
		return f32_from_bits(sign);
	{
		/* subnormal: normalise */
		uint32_t e = 113;

		while (!(mant & 0x400u)) {
			mant <<= 1;
			e--;
		}
		return f32_from_bits(sign | (e << 23) | ((mant & 0x3ffu) << 13));
	}
}

static float load_as_f32(gfs_dtype dt, const uint8_t *p)
{
	switch (dt) {
	case GFS_DT_F64: {
		uint64_t u = gfs_le64(p);
		double d;

		memcpy(&d, &u, sizeof(d));
		return (float)d;
	}
	case GFS_DT_F32:
		return f32_from_bits(gfs_le32(p));
	case GFS_DT_F16:
		return f16_to_f32(gfs_le16(p));
	case GFS_DT_BF16:
		return bf16_to_f32(gfs_le16(p));
	default:
		assert(!"not a float dtype");
		return 0.0f;
	}
}

static void store_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void store_le32(uint8_t *p, uint32_t v)
{
	store_le16(p, (uint16_t)v);
	store_le16(p + 2, (uint16_t)(v >> 16));
}

void gfs_dtype_convert(gfs_dtype from, gfs_dtype to, const void *src, void *dst,
		       size_t n)
{
	const uint8_t *s = src;
	uint8_t *d = dst;
	const size_t ss = gfs_dtype_size(from);
	const size_t ds = gfs_dtype_size(to);

	assert(gfs_dtype_is_float(from) && gfs_dtype_is_float(to));
	if (from == to) {
		memcpy(dst, src, n * ss);
		return;
	}
	for (size_t i = 0; i < n; i++, s += ss, d += ds) {
		if (to == GFS_DT_F64) {
			double v = (double)load_as_f32(from, s);
			uint64_t u;

			memcpy(&u, &v, sizeof(u));
			store_le32(d, (uint32_t)u);
			store_le32(d + 4, (uint32_t)(u >> 32));
			continue;
		}
		{
			const float f = load_as_f32(from, s);

			switch (to) {
			case GFS_DT_F32:
				store_le32(d, f32_bits(f));
				break;
			case GFS_DT_F16:
				store_le16(d, f32_to_f16(f));
				break;
			case GFS_DT_BF16:
				store_le16(d, f32_to_bf16(f));
				break;
			default:
				assert(!"not a float dtype");
			}
		}
	}
}

void gfs_f32_round(gfs_dtype dt, float f, void *dst)
{
	uint8_t *d = dst;

	switch (dt) {
	case GFS_DT_F32:
		store_le32(d, f32_bits(f));
		break;
	case GFS_DT_F16:
		store_le16(d, f32_to_f16(f));
		break;
	case GFS_DT_BF16:
		store_le16(d, f32_to_bf16(f));
		break;
	default:
		assert(!"not F32, F16 or BF16");
	}
}
