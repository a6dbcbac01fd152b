/*
 * gatherfs — merged-tensor arithmetic (merge.h): exact widening, the
 * float64 low-rank update, and rounding once to the output dtype.
 */
#include "config.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "gatherfs/merge.h"

static double half_to_double(uint16_t h)
{
	const int e = (h >> 10) & 0x1f;
	const int m = h & 0x3ff;
	double v;

	if (e == 0x1f)
		v = m ? NAN : INFINITY;
	else if (e == 0)
		v = ldexp(m, -24);
	else
		v = ldexp(m | 0x400, e - 25);
	return (h & 0x8000) ? -v : v;
}

void gfs_merge_widen(gfs_dtype dt, const void *src, double *dst, size_t n)
{
	const uint8_t *p = src;

	for (size_t i = 0; i < n; i++) {
		switch (dt) {
		case GFS_DT_F64: {
			double d;

			memcpy(&d, p + 8 * i, 8);
			dst[i] = d;
			break;
		}
		case GFS_DT_F32: {
			float f;

			memcpy(&f, p + 4 * i, 4);
			dst[i] = f;
			break;
		}
		case GFS_DT_BF16: {
			const uint32_t b = (uint32_t)gfs_le16(p + 2 * i) << 16;
			float f;

			memcpy(&f, &b, 4);
			dst[i] = f;
			break;
		}
		case GFS_DT_F16:
			dst[i] = half_to_double(gfs_le16(p + 2 * i));
			break;
		default:
			assert(!"gfs_merge_widen: not a floating-point dtype");
			dst[i] = NAN;
		}
	}
}

/*
 * round_bits(): |x| (finite) rounded once, to nearest even, to p significant
 * bits with exponents no lower than emin (the quantum stops shrinking below
 * 2^emin: subnormals).  Scaling by powers of two is exact, nearbyint()
 * rounds ties to even in the default mode.
 */
static double round_bits(double ax, int p, int emin)
{
	int e;

	if (ax == 0)
		return 0;
	(void)frexp(ax, &e); /* ax = m * 2^e, 0.5 <= m < 1 */
	if (e < emin)
		e = emin;
	return ldexp(nearbyint(ldexp(ax, p - e)), e - p);
}

static uint16_t to_bf16(double x)
{
	const uint16_t sign = signbit(x) ? 0x8000 : 0;
	double r;
	float f;
	uint32_t b;

	if (isnan(x))
		return sign | 0x7fc0;
	if (isinf(x))
		return sign | 0x7f80;
	r = round_bits(fabs(x), 8, -125); /* 8 bits, normals down to 2^-126 */
	f = (float)r;                    /* exact, or infinity past the largest bf16 */
	memcpy(&b, &f, 4);
	return sign | (uint16_t)(b >> 16);
}

static uint16_t to_f16(double x)
{
	const uint16_t sign = signbit(x) ? 0x8000 : 0;
	double r;
	int e;

	if (isnan(x))
		return sign | 0x7e00;
	r = isinf(x) ? INFINITY : round_bits(fabs(x), 11, -13); /* normals down to 2^-14 */
	if (r >= 65536.0)
		return sign | 0x7c00;
	if (r < 0x1p-14)
		return sign | (uint16_t)ldexp(r, 24); /* subnormal (or zero): a multiple of 2^-24 */
	(void)frexp(r, &e); /* r = 1.f * 2^(e-1) */
	return sign | (uint16_t)((e - 1 + 15) << 10) |
	       (uint16_t)(ldexp(r, 11 - e) - 1024.0);
}

void gfs_merge_round(gfs_dtype dt, const double *src, void *dst, size_t n)
{
	uint8_t *p = dst;

	for (size_t i = 0; i < n; i++) {
		switch (dt) {
		case GFS_DT_F64:
			memcpy(p + 8 * i, &src[i], 8);
			break;
		case GFS_DT_F32: {
			const float f = (float)src[i]; /* one IEEE rounding, to nearest even */

			memcpy(p + 4 * i, &f, 4);
			break;
		}
		case GFS_DT_BF16: {
			const uint16_t h = to_bf16(src[i]);

			p[2 * i] = (uint8_t)h;
			p[2 * i + 1] = (uint8_t)(h >> 8);
			break;
		}
		case GFS_DT_F16: {
			const uint16_t h = to_f16(src[i]);

			p[2 * i] = (uint8_t)h;
			p[2 * i + 1] = (uint8_t)(h >> 8);
			break;
		}
		default:
			assert(!"gfs_merge_round: not a floating-point dtype");
		}
	}
}

void gfs_merge_lora_rows(size_t rows, size_t cols, size_t r, double s, const double *c,
			 const double *R, double *v, double *acc)
{
	for (size_t i = 0; i < rows; i++) {
		double *restrict a = acc;
		double *restrict vi = v + i * cols;

		memset(a, 0, cols * sizeof(*a));
		for (size_t k = 0; k < r; k++) {
			const double cik = c[i * r + k];
			const double *restrict Rk = R + k * cols;

			/* the product is exact, so a fused multiply-add changes nothing */
			for (size_t j = 0; j < cols; j++)
				a[j] += cik * Rk[j];
		}
		for (size_t j = 0; j < cols; j++)
			vi[j] += s * a[j];
	}
}

void gfs_merge_dora_rows(size_t rows, size_t cols, const double *m, double *v)
{
	for (size_t i = 0; i < rows; i++) {
		double *vi = v + i * cols;
		double ss = 0, f;

		for (size_t j = 0; j < cols; j++)
			ss += vi[j] * vi[j];
		f = m[i] / sqrt(ss);
		for (size_t j = 0; j < cols; j++)
			vi[j] *= f;
	}
}

void gfs_merge_sumsq_cols(size_t rows, size_t cols, const double *v, double *sumsq)
{
	for (size_t i = 0; i < rows; i++)
		for (size_t j = 0; j < cols; j++)
			sumsq[j] += v[i * cols + j] * v[i * cols + j];
}

void gfs_merge_scale_cols(size_t rows, size_t cols, const double *f, double *v)
{
	for (size_t i = 0; i < rows; i++)
		for (size_t j = 0; j < cols; j++)
			v[i * cols + j] *= f[j];
}
