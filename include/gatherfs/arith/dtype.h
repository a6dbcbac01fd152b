/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — element types and conversions between floating-point formats.
 */
#ifndef GATHERFS_DTYPE_H
#define GATHERFS_DTYPE_H

#include <string.h>

#include "gatherfs/util/common.h"

typedef enum gfs_dtype {
	GFS_DT_INVALID = 0,
	GFS_DT_F64,
	GFS_DT_F32,
	GFS_DT_F16,
	GFS_DT_BF16,
	GFS_DT_C128,
	GFS_DT_C64,
	GFS_DT_I64,
	GFS_DT_I32,
	GFS_DT_I16,
	GFS_DT_I8,
	GFS_DT_U8,
	GFS_DT_BOOL,
	GFS_DT_F8_E4M3, /* float8_e4m3fn */
	GFS_DT_F8_E5M2, /* float8_e5m2 */
	GFS_DT_F8_E8M0, /* float8_e8m0fnu (UE8M0: 2^(e - 127), 0xff NaN) */
	GFS_DT_COUNT_
} gfs_dtype;

/* gfs_dtype_size(): bytes per element (0 for GFS_DT_INVALID). */
size_t gfs_dtype_size(gfs_dtype dt);

/* gfs_dtype_name(): torch's name ("float32", "bfloat16", "int64"...). */
const char *gfs_dtype_name(gfs_dtype dt);

/* gfs_dtype_st_name(): the safetensors name ("F32", "BF16", "I64"...). */
const char *gfs_dtype_st_name(gfs_dtype dt);

/*
 * gfs_dtype_storage_class(): torch's legacy storage class ("FloatStorage"...);
 * "" for the FP8 dtypes, which torch pickles with an untyped storage and the
 * dtype (torch._utils._rebuild_tensor_v3).
 */
const char *gfs_dtype_storage_class(gfs_dtype dt);

/*
 * gfs_dtype_is_float(): true for F64, F32, F16, BF16 (real floating point
 * that -o dtype= converts between; the FP8 dtypes are not).
 */
bool gfs_dtype_is_float(gfs_dtype dt);

/* gfs_dtype_is_fp8(): true for F8_E4M3, F8_E5M2, F8_E8M0. */
bool gfs_dtype_is_fp8(gfs_dtype dt);

/*
 * gfs_fp8_to_f32(): the value of FP8 byte b of dtype dt (gfs_dtype_is_fp8())
 * as float32, exactly (every FP8 value is a float32; NaN encodings give a
 * quiet NaN with b's sign, E5M2 infinities infinity).
 */
float gfs_fp8_to_f32(gfs_dtype dt, uint8_t b);

/*
 * gfs_bf16_round(): the bits of float32 f rounded once to bfloat16 (nearest,
 * ties to even; NaN stays a quiet NaN with its sign and top payload bits).
 */
static inline uint16_t gfs_bf16_round(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x0040u);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/*
 * gfs_f32_round(): float32 f rounded once to floating-point dtype dt (F32,
 * F16 or BF16; nearest, ties to even), stored little-endian at dst.
 */
void gfs_f32_round(gfs_dtype dt, float f, void *dst);

/*
 * gfs_dtype_parse(): accept a torch name ("float32", "bfloat16"), a short
 * name ("fp32", "bf16", "fp16", "f32", "half", "float") or a safetensors name
 * ("F32", "BF16").  @return GFS_DT_INVALID if unknown.
 */
gfs_dtype gfs_dtype_parse(const char *s);

/* gfs_dtype_from_storage_class(): "FloatStorage" -> GFS_DT_F32 etc. */
gfs_dtype gfs_dtype_from_storage_class(const char *cls);

/*
 * gfs_dtype_out(): the dtype a tensor of dtype dt is presented in when the
 * user asked for `want` (GFS_DT_INVALID: no conversion).  Only floating
 * point tensors convert; integers and bool never change.
 */
gfs_dtype gfs_dtype_out(gfs_dtype dt, gfs_dtype want);

/*
 * gfs_dtype_convert(): convert n elements from src (dtype from) to dst
 * (dtype to), both little-endian.  Supported: any pair of F64, F32, F16,
 * BF16.  Narrowing rounds to nearest, ties to even, as torch's .to(dtype)
 * does on CPU (F64 goes through F32 first, as torch does): every value but
 * NaN gives torch's bits.  NaN stays NaN with its sign, but not with torch's
 * bits: to BF16 it keeps the top 7 payload bits and sets the quiet bit
 * (0x7fc12345 -> 0x7fc1), where torch writes 0x7fc0 (scalar path) or 0xffff
 * (torch 1.13's AVX2 path for contiguous F32); to F16 it is sign | 0x7e00,
 * as torch; F16 -> F32 shifts the payload into place without quieting a
 * signalling NaN (0x7c01 -> 0x7f802000, torch 0x7fc02000).  src and dst
 * must not overlap.
 */
void gfs_dtype_convert(gfs_dtype from, gfs_dtype to, const void *src, void *dst,
		       size_t n);

#endif
