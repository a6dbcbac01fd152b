/*
 * gatherfs — merged-tensor arithmetic (merge.h): exact widening, the
 * float64 low-rank update, and rounding once to the output dtype.
 */
#include "config.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "gatherfs/arith/merge.h"

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

	switch (dt) {
	case GFS_DT_F64:
		memcpy(dst, src, n * 8);
		return;
	case GFS_DT_F32:
		for (size_t i = 0; i < n; i++) {
			float f;

			memcpy(&f, p + 4 * i, 4);
			dst[i] = f;
		}
		return;
	case GFS_DT_BF16:
		for (size_t i = 0; i < n; i++) {
			const uint32_t b = (uint32_t)gfs_le16(p + 2 * i) << 16;
			float f;

			memcpy(&f, &b, 4);
			dst[i] = f;
		}
		return;
	case GFS_DT_F16:
		for (size_t i = 0; i < n; i++)
			dst[i] = half_to_double(gfs_le16(p + 2 * i));
		return;
	default:
		assert(!"gfs_merge_widen: not a floating-point dtype");
		for (size_t i = 0; i < n; i++)
			dst[i] = NAN;
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

/*
 * rne_bits(): the bits of double x rounded to nearest even at bit `drop`
 * of its significand (keeping 52 - drop fraction bits).  Exact for any
 * finite x whose result stays a normal number of the target format: a
 * carry out of the fraction correctly increments the exponent.
 */
static uint64_t rne_bits(uint64_t u, int drop)
{
	const uint64_t half = ((uint64_t)1 << (drop - 1)) - 1;

	u += half + ((u >> drop) & 1);
	return u & ~(((uint64_t)1 << drop) - 1);
}

static uint16_t to_bf16(double x)
{
	const uint16_t sign = signbit(x) ? 0x8000 : 0;
	uint64_t u;
	double r;
	float f;
	uint32_t b;
	int e;

	memcpy(&u, &x, 8);
	e = (int)((u >> 52) & 0x7ff) - 1023;
	if (e >= -126 && e < 128) { /* a bf16 normal (or it rounds up to 2^128: infinity) */
		u = rne_bits(u, 45);
		e = (int)((u >> 52) & 0x7ff) - 1023;
		if (e >= 128)
			return sign | 0x7f80;
		return sign | (uint16_t)((e + 127) << 7) | (uint16_t)((u >> 45) & 0x7f);
	}
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
	uint64_t u;
	double r;
	int e;

	memcpy(&u, &x, 8);
	e = (int)((u >> 52) & 0x7ff) - 1023;
	if (e >= -14 && e < 16) { /* an f16 normal (or it rounds up to 2^16: infinity) */
		u = rne_bits(u, 42);
		e = (int)((u >> 52) & 0x7ff) - 1023;
		if (e >= 16)
			return sign | 0x7c00;
		return sign | (uint16_t)((e + 15) << 10) | (uint16_t)((u >> 42) & 0x3ff);
	}
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

/*
 * round_bf16(): to_bf16() of n values into p (little-endian), in two passes:
 * a branch-free one (it vectorizes) that is to_bf16() for every value whose
 * exponent is that of a bf16 normal, e in [-126, 127] (a carry out of the
 * fraction becomes the exponent's, and from e = 127 to 2^128 gives exactly
 * the infinity's bits 0x7f80), then to_bf16() itself for the others, if any.
 */
static void round_bf16(const double *src, uint8_t *p, size_t n)
{
	uint64_t odd = 0;

	for (size_t i = 0; i < n; i++) {
		uint64_t u;
		uint32_t e, h;

		memcpy(&u, &src[i], 8);
		e = (uint32_t)(u >> 52) & 0x7ff;
		odd |= (uint64_t)(e - (1023 - 126) > 253); /* e - 1023 outside [-126, 127] */
		u = rne_bits(u, 45);
		h = (uint32_t)(u >> 48) & 0x8000;
		h |= ((uint32_t)(u >> 45) & 0x3ffff) - ((1023 - 127) << 7);
		p[2 * i] = (uint8_t)h;
		p[2 * i + 1] = (uint8_t)(h >> 8);
	}
	for (size_t i = 0; odd && i < n; i++) {
		uint64_t u;
		uint32_t e;

		memcpy(&u, &src[i], 8);
		e = (uint32_t)(u >> 52) & 0x7ff;
		if (e - (1023 - 126) > 253) {
			const uint16_t h = to_bf16(src[i]);

			p[2 * i] = (uint8_t)h;
			p[2 * i + 1] = (uint8_t)(h >> 8);
		}
	}
}

void gfs_merge_round(gfs_dtype dt, const double *src, void *dst, size_t n)
{
	uint8_t *p = dst;

	switch (dt) {
	case GFS_DT_F64:
		memcpy(dst, src, n * 8);
		return;
	case GFS_DT_F32:
		for (size_t i = 0; i < n; i++) {
			const float f = (float)src[i]; /* one IEEE rounding, to nearest even */

			memcpy(p + 4 * i, &f, 4);
		}
		return;
	case GFS_DT_BF16:
		round_bf16(src, p, n);
		return;
	case GFS_DT_F16:
		for (size_t i = 0; i < n; i++) {
			const uint16_t h = to_f16(src[i]);

			p[2 * i] = (uint8_t)h;
			p[2 * i + 1] = (uint8_t)(h >> 8);
		}
		return;
	default:
		assert(!"gfs_merge_round: not a floating-point dtype");
	}
}

/*
 * The update works on tiles of TILE columns so that the accumulators stay in
 * the first-level cache, and takes four ranks per pass: a[j] += (c0 R0[j] +
 * c1 R1[j]) + (c2 R2[j] + c3 R3[j]).  Each product is exact; each of the at
 * most r + 1 additions (and the scaling) rounds once in float64, which is
 * the bound merge.h states (the order of the additions does not enter it).
 * Rows go in pairs (tile_update2()), each row's operations in the same order
 * as alone, so that the result does not depend on the pairing.
 */
enum { TILE = 256 };

/*
 * tile_update(): n columns (n <= TILE) of row ci's update, starting at R
 * (row stride cols).  Always inlined (so each clone below has its own), with
 * n == TILE for full tiles, so that the loops have a constant trip count and
 * vectorize at -O2.
 */
static inline __attribute__((always_inline)) void
tile_update(size_t n, size_t r, size_t cols, double s,
			       const double *restrict ci, const double *restrict R,
			       double *restrict vi)
{
	double a[TILE];
	size_t k = 0;

	for (size_t j = 0; j < n; j++)
		a[j] = 0;
	for (; k + 4 <= r; k += 4) {
		const double c0 = ci[k], c1 = ci[k + 1], c2 = ci[k + 2], c3 = ci[k + 3];
		const double *restrict R0 = R + k * cols;
		const double *restrict R1 = R0 + cols;
		const double *restrict R2 = R1 + cols;
		const double *restrict R3 = R2 + cols;

		for (size_t j = 0; j < n; j++)
			a[j] += (c0 * R0[j] + c1 * R1[j]) + (c2 * R2[j] + c3 * R3[j]);
	}
	for (; k < r; k++) {
		const double ck = ci[k];
		const double *restrict Rk = R + k * cols;

		for (size_t j = 0; j < n; j++)
			a[j] += ck * Rk[j];
	}
	for (size_t j = 0; j < n; j++)
		vi[j] += s * a[j];
}

/*
 * tile_update2(): tile_update() of rows ci and ci + r (v rows vi and
 * vi + cols) in one pass over R, each row's operations in tile_update()'s
 * order: every load of R serves two rows.
 */
static inline __attribute__((always_inline)) void
tile_update2(size_t n, size_t r, size_t cols, double s,
			       const double *restrict ci, const double *restrict R,
			       double *restrict vi)
{
	const double *restrict di = ci + r;
	double *restrict wi = vi + cols;
	double a[TILE], b[TILE];
	size_t k = 0;

	for (size_t j = 0; j < n; j++)
		a[j] = b[j] = 0;
	for (; k + 4 <= r; k += 4) {
		const double c0 = ci[k], c1 = ci[k + 1], c2 = ci[k + 2], c3 = ci[k + 3];
		const double d0 = di[k], d1 = di[k + 1], d2 = di[k + 2], d3 = di[k + 3];
		const double *restrict R0 = R + k * cols;
		const double *restrict R1 = R0 + cols;
		const double *restrict R2 = R1 + cols;
		const double *restrict R3 = R2 + cols;

		for (size_t j = 0; j < n; j++) {
			const double r0 = R0[j], r1 = R1[j], r2 = R2[j], r3 = R3[j];

			a[j] += (c0 * r0 + c1 * r1) + (c2 * r2 + c3 * r3);
			b[j] += (d0 * r0 + d1 * r1) + (d2 * r2 + d3 * r3);
		}
	}
	for (; k < r; k++) {
		const double ck = ci[k], dk = di[k];
		const double *restrict Rk = R + k * cols;

		for (size_t j = 0; j < n; j++) {
			a[j] += ck * Rk[j];
			b[j] += dk * Rk[j];
		}
	}
	for (size_t j = 0; j < n; j++) {
		vi[j] += s * a[j];
		wi[j] += s * b[j];
	}
}

/*
 * On x86-64 the update is also compiled for AVX2 (four doubles per
 * operation instead of SSE2's two), chosen at load time by the CPU.  The
 * result is the same bits: the same operations in the same order, and the
 * compiler does not fuse multiply-adds in ISO C mode (nor would it matter:
 * the products are exact).
 */
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define MERGE_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef MERGE_CLONES
#define MERGE_CLONES
#endif

MERGE_CLONES
static void lora_rows(size_t rows, size_t cols, size_t r, double s, const double *c,
		      const double *R, double *v)
{
	/* tiles outermost: a tile of R (r x TILE) is reused by every row */
	for (size_t j0 = 0; j0 < cols; j0 += TILE) {
		const size_t n = cols - j0 < TILE ? cols - j0 : TILE;
		size_t i = 0;

		for (; i + 2 <= rows; i += 2) {
			if (n == TILE)
				tile_update2(TILE, r, cols, s, c + i * r, R + j0, v + i * cols + j0);
			else
				tile_update2(n, r, cols, s, c + i * r, R + j0, v + i * cols + j0);
		}
		if (i < rows) {
			if (n == TILE)
				tile_update(TILE, r, cols, s, c + i * r, R + j0, v + i * cols + j0);
			else
				tile_update(n, r, cols, s, c + i * r, R + j0, v + i * cols + j0);
		}
	}
}

void gfs_merge_lora_rows(size_t rows, size_t cols, size_t r, double s, const double *c,
			 const double *R, double *v)
{
	lora_rows(rows, cols, r, s, c, R, v);
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
