/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — merged-tensor arithmetic (merge.h): exact widening, the
 * float64 low-rank update, and rounding once to the output dtype.
 */
#include "config.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/arith/merge.h"

/* Inlined into each of the CPU-specific functions below, so compiled for each. */
#define ALWAYS_INLINE inline __attribute__((always_inline))

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

/* widen_n(): gfs_merge_widen(). */
static ALWAYS_INLINE void widen_n(gfs_dtype dt, const void *src, double *dst, size_t n)
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

void gfs_merge_widen(gfs_dtype dt, const void *src, double *dst, size_t n)
{
	widen_n(dt, src, dst, n);
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

/* A 16-bit binary format: sign, exponent of ebits bits (bias), mbits fraction bits. */
typedef struct half_fmt {
	int mbits, bias;
	uint16_t qnan;
} half_fmt;

static const half_fmt BF16 = { 7, 127, 0x7fc0 }, F16 = { 10, 15, 0x7e00 };

/*
 * to_half(): x rounded once, to nearest even, to format f.  A normal result
 * (or the infinity a carry reaches) from the float64 bits (rne_bits()); a
 * subnormal one (or zero, or the smallest normal it rounds up to: the same
 * encoding) as the nearest multiple of the subnormal quantum, which scaling
 * by a power of two makes an integer to round (nearbyint(): ties to even in
 * the default mode).
 */
static uint16_t to_half(double x, const half_fmt *f)
{
	const uint16_t sign = signbit(x) ? 0x8000 : 0;
	const int emin = 1 - f->bias, emax = f->bias + 1, drop = 52 - f->mbits;
	const uint16_t inf = (uint16_t)((2 * f->bias + 1) << f->mbits);
	uint64_t u;
	int e;

	memcpy(&u, &x, 8);
	e = (int)((u >> 52) & 0x7ff) - 1023;
	if (e >= emin && e < emax) {
		u = rne_bits(u, drop);
		e = (int)((u >> 52) & 0x7ff) - 1023;
		if (e >= emax)
			return sign | inf;
		return sign | (uint16_t)((e + f->bias) << f->mbits) |
		       (uint16_t)((u >> drop) & (((uint64_t)1 << f->mbits) - 1));
	}
	if (isnan(x))
		return sign | f->qnan;
	if (e >= emax) /* infinite, or finite past the format's range */
		return sign | inf;
	return sign | (uint16_t)nearbyint(ldexp(fabs(x), f->mbits - emin));
}

static uint16_t to_bf16(double x)
{
	return to_half(x, &BF16);
}

static uint16_t to_f16(double x)
{
	return to_half(x, &F16);
}

/* put_le16(): h at p, little-endian (one 16-bit store where that is the host's order). */
static ALWAYS_INLINE void put_le16(uint8_t *p, uint16_t h)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(p, &h, 2);
#else
	p[0] = (uint8_t)h;
	p[1] = (uint8_t)(h >> 8);
#endif
}

/*
 * round_bf16(): to_bf16() of n values into p (little-endian), in two passes:
 * a branch-free one (it vectorizes) that is to_bf16() for every value whose
 * exponent is that of a bf16 normal, e in [-126, 127] (a carry out of the
 * fraction becomes the exponent's, and from e = 127 to 2^128 gives exactly
 * the infinity's bits 0x7f80), then to_bf16() itself for the others, if any.
 */
static ALWAYS_INLINE void round_bf16(const double *src, uint8_t *p, size_t n)
{
	uint64_t odd = 0;

	for (size_t i = 0; i < n; i++) {
		uint64_t u;
		uint32_t e, h;
		uint16_t h16;

		memcpy(&u, &src[i], 8);
		e = (uint32_t)(u >> 52) & 0x7ff;
		/* e - 1023 outside [-126, 127], and not a zero (or a float64 subnormal) */
		odd |= (uint64_t)(e - (1023 - 126) > 253 && e != 0);
		h = (uint32_t)(u >> 48) & 0x8000;
		u = rne_bits(u, 45);
		h16 = (uint16_t)(e == 0 ? h : h | (((uint32_t)(u >> 45) & 0x3ffff) - ((1023 - 127) << 7)));
		put_le16(p + 2 * i, h16);
	}
	for (size_t i = 0; odd && i < n; i++) {
		uint64_t u;
		uint32_t e;

		memcpy(&u, &src[i], 8);
		e = (uint32_t)(u >> 52) & 0x7ff;
		if (e - (1023 - 126) > 253 && e != 0)
			put_le16(p + 2 * i, to_bf16(src[i]));
	}
}

/* round_n(): gfs_merge_round(). */
static ALWAYS_INLINE void round_n(gfs_dtype dt, const double *src, void *dst, size_t n)
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

void gfs_merge_round(gfs_dtype dt, const double *src, void *dst, size_t n)
{
	round_n(dt, src, dst, n);
}

/*
 * The update works on tiles of TILE columns so that a tile of R (r x TILE)
 * stays in cache for every row, rows in pairs so that every load of R
 * serves two rows, and strips of STRIP columns whose accumulators stay in
 * registers through all r ranks.  R is packed strip by strip (gfs_merge_pack():
 * a strip's r x STRIP values contiguous), so that a strip is read as one
 * stream: R's own rows are often 2^k bytes apart, and the same column of
 * every row then falls in one cache set.  Each element's accumulation is
 * a = (((0 + c0 R0) + c1 R1) + ...) in the order of k, the scaling and W's
 * addition after: r + 1 roundings in float64, the bound merge.h states,
 * whatever the pairing, tile or strip.  When the products are exact
 * (exact_products) a multiply-add may be fused (one rounding of the exact
 * a + c R, as the product is exact): the same bits.
 *
 * Kernels: ISA_PLAIN is ISO C; on x86-64 ISA_AVX2 (four doubles per
 * operation) and ISA_FMA (with fused multiply-adds) are compiled for those
 * extensions and chosen by the CPU at run time.  The compiler never fuses
 * on its own (ISO C mode for GCC; the pragma for clang), so that every
 * kernel gives the same bits.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#define MERGE_X86 1
#include <immintrin.h>
#endif

enum { TILE = 256, STRIP = 16 };
enum { ISA_PLAIN, ISA_AVX2, ISA_FMA, ISA_FAST };

/*
 * A strip finished in registers (x86-64 kernels, W and output fp32 or bf16):
 * out = round(widen(W) + s * acc), the operations of round_body()'s tile
 * path, for rows w0 (and w1 with a second row) into o0 (o1).
 */
typedef struct strip_out {
	double s;
	gfs_dtype wdt, odt;
	const uint8_t *w0, *w1;
	uint8_t *o0, *o1;
} strip_out;

#ifdef MERGE_X86
#define AVX2 __attribute__((target("avx2")))

/* load4(): four values of W (fp32 or bf16) at w, as float64 (exact). */
AVX2 static ALWAYS_INLINE __m256d load4(gfs_dtype wdt, const uint8_t *w)
{
	__m128i b;

	if (wdt == GFS_DT_F32)
		return _mm256_cvtps_pd(_mm_loadu_ps((const float *)(const void *)w));
	/* bf16: the high half of an fp32 */
	b = _mm_cvtepu16_epi32(_mm_loadl_epi64((const __m128i *)(const void *)w));
	return _mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32(b, 16)));
}

/*
 * bf16x8(): bf16_fast() of the four float64 of x0 and the four of x1, as
 * 32-bit lanes holding the bf16 in their low 16 bits, in the order
 * x0[0] x0[1] x1[0] x1[1] x0[2] x0[3] x1[2] x1[3]; *odd gets all ones in
 * the lanes bf16_fast() would flag.  It works on the high 32 bits of each
 * float64, with the low 32 folded into their lowest bit (they are all below
 * the rounding bit, bit 44): the same rounding to nearest even at bit 45.
 */
AVX2 static ALWAYS_INLINE __m256i bf16x8(__m256d x0, __m256d x1, __m256i *odd)
{
	const __m256 a = _mm256_castpd_ps(x0), b = _mm256_castpd_ps(x1);
	const __m256i hi = _mm256_castps_si256(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
	const __m256i lo = _mm256_castps_si256(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
	const __m256i one = _mm256_set1_epi32(1);
	const __m256i e = _mm256_and_si256(_mm256_srli_epi32(hi, 20), _mm256_set1_epi32(0x7ff));
	const __m256i zero = _mm256_cmpeq_epi32(e, _mm256_setzero_si256());
	const __m256i big = _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1023 + 127));
	const __m256i small = _mm256_andnot_si256(zero, _mm256_cmpgt_epi32(_mm256_set1_epi32(1023 - 126), e));
	const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(hi, 16), _mm256_set1_epi32(0x8000));
	const __m256i st = _mm256_or_si256(hi, _mm256_andnot_si256(_mm256_cmpeq_epi32(lo, _mm256_setzero_si256()), one));
	const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(st, 13), one);
	const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(st, _mm256_set1_epi32(0xfff)), lsb), 13);
	const __m256i m = _mm256_sub_epi32(_mm256_and_si256(r, _mm256_set1_epi32(0x3ffff)),
					   _mm256_set1_epi32((1023 - 127) << 7));

	*odd = _mm256_or_si256(*odd, _mm256_or_si256(big, small));
	return _mm256_blendv_epi8(_mm256_or_si256(sign, m), sign, zero);
}

/* finish16(): out = round(widen(w) + s * acc) for a strip's 16 values of one row. */
AVX2 static ALWAYS_INLINE void finish16(__m256d a0, __m256d a1, __m256d a2, __m256d a3,
					const strip_out *f, const uint8_t *w, uint8_t *o)
{
	const size_t wes = f->wdt == GFS_DT_F32 ? 4 : 2;
	const __m256d sv = _mm256_set1_pd(f->s);
	const __m256d x0 = _mm256_add_pd(load4(f->wdt, w), _mm256_mul_pd(sv, a0));
	const __m256d x1 = _mm256_add_pd(load4(f->wdt, w + 4 * wes), _mm256_mul_pd(sv, a1));
	const __m256d x2 = _mm256_add_pd(load4(f->wdt, w + 8 * wes), _mm256_mul_pd(sv, a2));
	const __m256d x3 = _mm256_add_pd(load4(f->wdt, w + 12 * wes), _mm256_mul_pd(sv, a3));
	__m256i odd = _mm256_setzero_si256(), b;

	if (f->odt == GFS_DT_F32) {
		_mm_storeu_ps((float *)(void *)o, _mm256_cvtpd_ps(x0));
		_mm_storeu_ps((float *)(void *)(o + 16), _mm256_cvtpd_ps(x1));
		_mm_storeu_ps((float *)(void *)(o + 32), _mm256_cvtpd_ps(x2));
		_mm_storeu_ps((float *)(void *)(o + 48), _mm256_cvtpd_ps(x3));
		return;
	}
	/* the low 16 bits of sixteen 32-bit lanes, back in order */
	b = _mm256_packus_epi32(bf16x8(x0, x1, &odd), bf16x8(x2, x3, &odd));
	b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
	_mm256_storeu_si256((__m256i *)(void *)o, b);
	if (!_mm256_testz_si256(odd, odd)) {
		double t[STRIP];

		_mm256_storeu_pd(t, x0);
		_mm256_storeu_pd(t + 4, x1);
		_mm256_storeu_pd(t + 8, x2);
		_mm256_storeu_pd(t + 12, x3);
		for (int j = 0; j < STRIP; j++)
			put_le16(o + 2 * j, to_bf16(t[j]));
	}
}

/*
 * strip_avx2(), strip_fma(): strip_plain() in eight (four) registers; with
 * f, finished in registers (finish16()) instead of stored to a and b.
 */
#define STRIP_KERNEL(NAME, TARGET, MADD)                                                   \
	__attribute__((target(TARGET))) static void NAME(size_t r, const double *ci,       \
							 const double *P, double *a,        \
							 double *b, const strip_out *f)     \
	{                                                                                  \
		const double *di = ci + r;                                                 \
		__m256d x0 = _mm256_setzero_pd(), x1 = x0, x2 = x0, x3 = x0;               \
		__m256d y0 = x0, y1 = x0, y2 = x0, y3 = x0;                                \
                                                                                           \
		for (size_t k = 0; b && k < r; k++) { /* two rows */                       \
			const double *Pk = P + k * STRIP;                                  \
			const __m256d r0 = _mm256_loadu_pd(Pk), r1 = _mm256_loadu_pd(Pk + 4); \
			const __m256d r2 = _mm256_loadu_pd(Pk + 8);                        \
			const __m256d r3 = _mm256_loadu_pd(Pk + 12);                       \
			const __m256d c = _mm256_broadcast_sd(ci + k);                     \
			const __m256d d = _mm256_broadcast_sd(di + k);                     \
                                                                                           \
			x0 = MADD(c, r0, x0);                                              \
			x1 = MADD(c, r1, x1);                                              \
			x2 = MADD(c, r2, x2);                                              \
			x3 = MADD(c, r3, x3);                                              \
			y0 = MADD(d, r0, y0);                                              \
			y1 = MADD(d, r1, y1);                                              \
			y2 = MADD(d, r2, y2);                                              \
			y3 = MADD(d, r3, y3);                                              \
		}                                                                          \
		for (size_t k = 0; !b && k < r; k++) { /* one */                           \
			const double *Pk = P + k * STRIP;                                  \
			const __m256d c = _mm256_broadcast_sd(ci + k);                     \
                                                                                           \
			x0 = MADD(c, _mm256_loadu_pd(Pk), x0);                             \
			x1 = MADD(c, _mm256_loadu_pd(Pk + 4), x1);                         \
			x2 = MADD(c, _mm256_loadu_pd(Pk + 8), x2);                         \
			x3 = MADD(c, _mm256_loadu_pd(Pk + 12), x3);                        \
		}                                                                          \
		if (f) {                                                                   \
			finish16(x0, x1, x2, x3, f, f->w0, f->o0);                         \
			if (b)                                                             \
				finish16(y0, y1, y2, y3, f, f->w1, f->o1);                 \
			return;                                                            \
		}                                                                          \
		_mm256_storeu_pd(a, x0);                                                   \
		_mm256_storeu_pd(a + 4, x1);                                               \
		_mm256_storeu_pd(a + 8, x2);                                               \
		_mm256_storeu_pd(a + 12, x3);                                              \
		if (b) {                                                                   \
			_mm256_storeu_pd(b, y0);                                           \
			_mm256_storeu_pd(b + 4, y1);                                       \
			_mm256_storeu_pd(b + 8, y2);                                       \
			_mm256_storeu_pd(b + 12, y3);                                      \
		}                                                                          \
	}

#define MADD_AVX2(c, x, a) _mm256_add_pd(a, _mm256_mul_pd(c, x))
#define MADD_FMA(c, x, a) _mm256_fmadd_pd(c, x, a)
STRIP_KERNEL(strip_avx2, "avx2", MADD_AVX2)
STRIP_KERNEL(strip_fma, "avx2,fma", MADD_FMA)
#endif

/*
 * strip_plain(): the accumulations of a strip (STRIP columns) of rows ci
 * and ci + r (ci: row i of C, rank r; b NULL: row ci alone) into a and b,
 * P the strip of the packed R (gfs_merge_pack()), four ranks a pass.
 */
static ALWAYS_INLINE void strip_plain(size_t r, const double *restrict ci,
				      const double *restrict P, double *restrict a,
				      double *restrict b)
{
	const double *restrict di = ci + r;
	double x[STRIP], y[STRIP];
	size_t k = 0;

	for (size_t q = 0; q < STRIP; q++)
		x[q] = y[q] = 0;
	for (; k + 4 <= r; k += 4) {
		const double c0 = ci[k], c1 = ci[k + 1], c2 = ci[k + 2], c3 = ci[k + 3];
		const double *restrict P0 = P + k * STRIP;
		const double *restrict P1 = P0 + STRIP;
		const double *restrict P2 = P1 + STRIP;
		const double *restrict P3 = P2 + STRIP;

		for (size_t q = 0; q < STRIP; q++)
			x[q] = (((x[q] + c0 * P0[q]) + c1 * P1[q]) + c2 * P2[q]) + c3 * P3[q];
		if (b) {
			const double d0 = di[k], d1 = di[k + 1], d2 = di[k + 2], d3 = di[k + 3];

			for (size_t q = 0; q < STRIP; q++)
				y[q] = (((y[q] + d0 * P0[q]) + d1 * P1[q]) + d2 * P2[q]) + d3 * P3[q];
		}
	}
	for (; k < r; k++) {
		const double *restrict Pk = P + k * STRIP;

		for (size_t q = 0; q < STRIP; q++)
			x[q] += ci[k] * Pk[q];
		for (size_t q = 0; b && q < STRIP; q++)
			y[q] += di[k] * Pk[q];
	}
	memcpy(a, x, sizeof(x));
	if (b)
		memcpy(b, y, sizeof(y));
}

/*
 * acc_tile2(): strip_plain() (or its ISA's kernel) for the strips of a tile
 * of n columns (n <= TILE, the tile's packed R at P) into a and b: whole
 * strips, up to STRIP - 1 columns past n (padding) written too.
 */
static ALWAYS_INLINE void acc_tile2(int isa, size_t n, size_t r, const double *ci,
				    const double *P, double *a, double *b)
{
	for (size_t j = 0; j < n; j += STRIP) {
		const double *Ps = P + j * r;
#ifdef MERGE_X86
		if (isa == ISA_FMA) {
			strip_fma(r, ci, Ps, a + j, b ? b + j : NULL, NULL);
			continue;
		}
		if (isa == ISA_AVX2) {
			strip_avx2(r, ci, Ps, a + j, b ? b + j : NULL, NULL);
			continue;
		}
#endif
		(void)isa;
		strip_plain(r, ci, Ps, a + j, b ? b + j : NULL);
	}
}

/* add_scaled(): v[j] += s * a[j] (the product rounded, then the sum: never fused). */
static ALWAYS_INLINE void add_scaled(size_t n, double s, const double *restrict a,
				     double *restrict v)
{
	for (size_t j = 0; j < n; j++) {
		const double d = s * a[j];

		v[j] += d;
	}
}

/* rows_body(): rows x cols of v (float64, row-major) += s * (c @ R), R packed in P. */
static ALWAYS_INLINE void rows_body(int isa, size_t rows, size_t cols, size_t r, double s,
				    const double *c, const double *P, double *v)
{
	double a[TILE], b[TILE];

	for (size_t j0 = 0; j0 < cols; j0 += TILE) {
		const size_t n = cols - j0 < TILE ? cols - j0 : TILE;

		for (size_t i = 0; i < rows; i += 2) {
			const bool two = i + 1 < rows;
			double *vi = v + i * cols + j0;

			acc_tile2(isa, n, r, c + i * r, P + j0 * r, a, two ? b : NULL);
			add_scaled(n, s, a, vi);
			if (two)
				add_scaled(n, s, b, vi + cols);
		}
	}
}

/*
 * round_body(): rows x cols of out (dtype odt, row-major, rows ld elements
 * apart) = the rounding of widen(W) + s * (c @ R), for rows x cols of W
 * (dtype wdt, rows ld elements apart), R packed in P: one tile of one row
 * in float64 at a time.  n == TILE is constant where it is, so that the
 * loops vectorize at -O2.
 */
static ALWAYS_INLINE void round_body(int isa, gfs_dtype wdt, const void *W, size_t ld,
				     size_t rows, size_t cols, size_t r, double s,
				     const double *c, const double *P, gfs_dtype odt, void *out)
{
	const size_t wes = gfs_dtype_size(wdt), oes = gfs_dtype_size(odt);
	const uint8_t *w = W;
	uint8_t *o = out;
	double a[TILE], b[TILE], x[TILE];
#ifdef MERGE_X86
	/* whole strips finished in registers */
	const bool inreg = isa != ISA_PLAIN && (wdt == GFS_DT_F32 || wdt == GFS_DT_BF16) &&
			   (odt == GFS_DT_F32 || odt == GFS_DT_BF16);
#endif

	for (size_t j0 = 0; j0 < cols; j0 += TILE) {
		const size_t n = cols - j0 < TILE ? cols - j0 : TILE;

		for (size_t i = 0; i < rows; i += 2) {
			const bool two = i + 1 < rows;
			size_t j = 0;      /* columns of the tile done */
			bool have = false; /* a and b hold the accumulations from column j */

#ifdef MERGE_X86
			for (; inreg && j < n; j += STRIP) {
				const size_t e = i * ld + j0 + j;
				const strip_out f = { .s = s, .wdt = wdt, .odt = odt,
						      .w0 = w + e * wes,
						      .w1 = two ? w + (e + ld) * wes : NULL,
						      .o0 = o + e * oes,
						      .o1 = two ? o + (e + ld) * oes : NULL };
				const bool whole = j + STRIP <= n;

				if (isa == ISA_FMA)
					strip_fma(r, c + i * r, P + (j0 + j) * r, a + j, two ? b + j : NULL,
						  whole ? &f : NULL);
				else
					strip_avx2(r, c + i * r, P + (j0 + j) * r, a + j, two ? b + j : NULL,
						   whole ? &f : NULL);
				if (!whole) {
					have = true;
					break;
				}
			}
#endif
			if (j >= n)
				continue;
			if (!have)
				acc_tile2(isa, n, r, c + i * r, P + j0 * r, a, two ? b : NULL);
			for (size_t q = 0; q < (two ? 2u : 1u); q++) {
				const size_t e = (i + q) * ld + j0 + j;
				const double *acc = (q ? b : a) + j;

				if (n == TILE && j == 0) {
					widen_n(wdt, w + e * wes, x, TILE);
					add_scaled(TILE, s, acc, x);
					round_n(odt, x, o + e * oes, TILE);
				} else {
					widen_n(wdt, w + e * wes, x, n - j);
					add_scaled(n - j, s, acc, x);
					round_n(odt, x, o + e * oes, n - j);
				}
			}
		}
	}
}

size_t gfs_merge_packed_len(size_t r, size_t cols)
{
	return r * ((cols + STRIP - 1) / STRIP * STRIP);
}

void gfs_merge_pack(size_t r, size_t cols, const double *R, double *P)
{
	const size_t ns = (cols + STRIP - 1) / STRIP;

	for (size_t sj = 0; sj < ns; sj++)
		for (size_t k = 0; k < r; k++)
			for (size_t q = 0; q < STRIP; q++) {
				const size_t j = sj * STRIP + q;

				P[(sj * r + k) * STRIP + q] = j < cols ? R[k * cols + j] : 0;
			}
}

static void rows_plain(size_t rows, size_t cols, size_t r, double s, const double *c,
		       const double *R, double *v)
{
	rows_body(ISA_PLAIN, rows, cols, r, s, c, R, v);
}

static void round_plain(gfs_dtype wdt, const void *W, size_t ld, size_t rows, size_t cols,
			size_t r, double s, const double *c, const double *R, gfs_dtype odt,
			void *out)
{
	round_body(ISA_PLAIN, wdt, W, ld, rows, cols, r, s, c, R, odt, out);
}

#ifdef MERGE_X86
__attribute__((target("avx2"))) static void
rows_avx2(size_t rows, size_t cols, size_t r, double s, const double *c, const double *R,
	  double *v)
{
	rows_body(ISA_AVX2, rows, cols, r, s, c, R, v);
}

__attribute__((target("avx2,fma"))) static void
rows_fma(size_t rows, size_t cols, size_t r, double s, const double *c, const double *R,
	 double *v)
{
	rows_body(ISA_FMA, rows, cols, r, s, c, R, v);
}

__attribute__((target("avx2"))) static void
round_avx2(gfs_dtype wdt, const void *W, size_t ld, size_t rows, size_t cols, size_t r,
	   double s, const double *c, const double *R, gfs_dtype odt, void *out)
{
	round_body(ISA_AVX2, wdt, W, ld, rows, cols, r, s, c, R, odt, out);
}

__attribute__((target("avx2,fma"))) static void
round_fma(gfs_dtype wdt, const void *W, size_t ld, size_t rows, size_t cols, size_t r,
	  double s, const double *c, const double *R, gfs_dtype odt, void *out)
{
	round_body(ISA_FMA, wdt, W, ld, rows, cols, r, s, c, R, odt, out);
}

/*
 * cpu(): the best kernel this CPU runs, ISA_FMA and ISA_FAST (ISA_FMA with
 * the bf16 filter) only for exact products; GATHERFS_MERGE_ISA=plain, avx2
 * or fma caps it (tests, benchmarks).
 */
static int cpu(bool exact_products)
{
	const char *cap = getenv("GATHERFS_MERGE_ISA");

	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2") || (cap && strcmp(cap, "plain") == 0))
		return ISA_PLAIN;
	if (cap && strcmp(cap, "avx2") == 0)
		return ISA_AVX2;
	if (!exact_products || !__builtin_cpu_supports("fma"))
		return ISA_AVX2;
	return cap && strcmp(cap, "fma") == 0 ? ISA_FMA : ISA_FAST;
}
#endif

struct gfs_merge_r32 {
	size_t r, cols;
	float *P;      /* R packed as gfs_merge_pack() does, in fp32 */
	float *colsum; /* per column (padded to whole strips): >= sum_k |R[k][j]| */
	double rmin;   /* the smallest nonzero |R[k][j]| (INFINITY: none) */
	double smax;   /* the largest colsum */
};

gfs_merge_r32 *gfs_merge_r32_new(size_t r, size_t cols, const double *P)
{
	const size_t ns = (cols + STRIP - 1) / STRIP;
	gfs_merge_r32 *q;

	if (r == 0 || r > GFS_MERGE_R32_MAX)
		return NULL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return NULL;
	q->r = r;
	q->cols = cols;
	q->rmin = INFINITY;
	q->P = malloc(gfs_merge_packed_len(r, cols) * sizeof(float) + 1);
	q->colsum = malloc(ns * STRIP * sizeof(float) + 1);
	if (!q->P || !q->colsum) {
		gfs_merge_r32_free(q);
		return NULL;
	}
	for (size_t sj = 0; sj < ns; sj++) {
		double sum[STRIP] = { 0 };

		for (size_t k = 0; k < r; k++)
			for (size_t x = 0; x < STRIP; x++) {
				const size_t i = (sj * r + k) * STRIP + x;
				const double a = fabs(P[i]);

				q->P[i] = (float)P[i];
				if (!(a <= FLT_MAX) || (double)q->P[i] != P[i]) { /* not an fp32 */
					gfs_merge_r32_free(q);
					return NULL;
				}
				sum[x] += a;
				if (a != 0 && a < q->rmin)
					q->rmin = a;
			}
		for (size_t x = 0; x < STRIP; x++) {
			/* above the float64 sum's rounding (r * 2^-53) and the conversion's */
			const float f = (float)(sum[x] * 1.001);

			if (!(f <= FLT_MAX)) {
				gfs_merge_r32_free(q);
				return NULL;
			}
			q->colsum[sj * STRIP + x] = f;
			if (f > q->smax)
				q->smax = f;
		}
	}
	return q;
}

void gfs_merge_r32_free(gfs_merge_r32 *q)
{
	if (q) {
		free(q->P);
		free(q->colsum);
		free(q);
	}
}

#ifdef MERGE_X86
/*
 * The bf16 filter (ISA_FAST).  Rows of four, strips of 16 columns: the
 * accumulation in fp32 with fused multiply-adds (8 lanes, twice the float64
 * kernel's), y = fl32(W + s32 * a), then y rounded to bf16.  That bf16 is the
 * float64 kernel's whenever no bf16 rounding boundary (a midpoint between
 * two bf16 values) lies within E of y, where E bounds both |y - exact| and
 * |float64 kernel's value - exact| (rounding is monotonic: everything in
 * [y - E, y + E] then rounds alike):
 *   - the fp32 sum of r fused products: gamma_r * S, S = sum_k |c_k R_k| <=
 *     cmax * colsum_j, gamma_r = r u / (1 - r u), u = 2^-24; s32 = fl32(s):
 *     u |s| S more; so K * colsum_j with K = |s| cmax (r + 2) u * 1.01;
 *   - y's own rounding (2^-24 |y|), the float64 kernel's ((r + 1) 2^-53 of
 *     the operands' scale) and E's own (2^-24 E): 2^-23 |y|.
 * fast_row() keeps the products and sums away from fp32 underflow and
 * overflow (every nonzero product >= 2^-100, every sum <= 2^100), where
 * these bounds hold.  The midpoint nearest to y is y's fp32 bits with the
 * low 16 replaced by 0x8000 (the one below a power of two is at least
 * |y| 2^-10 away: E must be below that too); y - mid is exact (same
 * exponent).  A row pair with a lane outside this is done again by the
 * float64 kernel (strip_fma()), as is a row fast_row() refuses: every
 * output bit is the float64 kernel's.  NaN and infinite y fail the test.
 */
#define FMA __attribute__((target("avx2,fma")))

enum { FAST_CHUNK = 16 }; /* rows whose fp32 factors round_fast() keeps */

/* load8(): eight values of W (fp32 or bf16) at w, as fp32 (exact). */
FMA static ALWAYS_INLINE __m256 load8(gfs_dtype wdt, const uint8_t *w)
{
	const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)w);

	if (wdt == GFS_DT_F32)
		return _mm256_loadu_ps((const float *)(const void *)w);
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
}

/* bf16_of(): eight fp32 rounded to bf16 (nearest even), in the low 16 bits of 32-bit lanes. */
FMA static ALWAYS_INLINE __m256i bf16_of(__m256 y)
{
	const __m256i b = _mm256_castps_si256(y);
	const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));

	return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb),
				 16);
}

/* sure(): all ones in the lanes whose y has no bf16 rounding boundary within e. */
FMA static ALWAYS_INLINE __m256 sure(__m256 y, __m256 e, __m256 ay)
{
	const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	const __m256i hi = _mm256_and_si256(_mm256_castps_si256(y), _mm256_set1_epi32((int)0xffff0000u));
	const __m256 mid = _mm256_castsi256_ps(_mm256_or_si256(hi, _mm256_set1_epi32(0x8000)));
	const __m256 d = _mm256_and_ps(_mm256_sub_ps(y, mid), abs);

	return _mm256_and_ps(_mm256_cmp_ps(d, e, _CMP_GT_OQ),
			     _mm256_cmp_ps(e, _mm256_mul_ps(ay, _mm256_set1_ps(0x1p-10f)), _CMP_LE_OQ));
}

/* fin32(): a row's 16 outputs from accumulations a0, a1; false if a lane is not sure(). */
FMA static ALWAYS_INLINE bool fin32(__m256 a0, __m256 a1, __m256 sv, float k, const float *bnd,
				    gfs_dtype wdt, const uint8_t *w, uint8_t *o)
{
	const size_t wes = wdt == GFS_DT_F32 ? 4 : 2;
	const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	const __m256 kv = _mm256_set1_ps(k), tiny = _mm256_set1_ps(0x1p-23f);
	const __m256 y0 = _mm256_fmadd_ps(sv, a0, load8(wdt, w));
	const __m256 y1 = _mm256_fmadd_ps(sv, a1, load8(wdt, w + 8 * wes));
	const __m256 ay0 = _mm256_and_ps(y0, abs), ay1 = _mm256_and_ps(y1, abs);
	const __m256 e0 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(bnd), _mm256_mul_ps(ay0, tiny));
	const __m256 e1 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(bnd + 8), _mm256_mul_ps(ay1, tiny));
	const __m256 ok = _mm256_and_ps(sure(y0, e0, ay0), sure(y1, e1, ay1));
	const __m256i h = _mm256_packus_epi32(bf16_of(y0), bf16_of(y1));

	_mm256_storeu_si256((__m256i *)(void *)o, _mm256_permute4x64_epi64(h, _MM_SHUFFLE(3, 1, 2, 0)));
	return _mm256_movemask_ps(ok) == 0xff;
}

/*
 * strip4(): four rows (their fp32 factors at cf, r apart) of one strip (Q: its
 * packed fp32 R, bnd: its colsums), W at w and out at o, rows wld and old
 * bytes apart; bit q of the result: row q needs the float64 kernel.
 */
FMA static unsigned strip4(size_t r, const float *cf, const float *Q, const float *bnd,
			   const float *K, float s, gfs_dtype wdt, const uint8_t *w, size_t wld,
			   uint8_t *o, size_t old)
{
	const __m256 sv = _mm256_set1_ps(s);
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, d0 = a0,
	       d1 = a0;
	unsigned bad = 0;

	for (size_t k = 0; k < r; k++) {
		const __m256 q0 = _mm256_loadu_ps(Q + k * STRIP), q1 = _mm256_loadu_ps(Q + k * STRIP + 8);
		__m256 x = _mm256_broadcast_ss(cf + k);

		a0 = _mm256_fmadd_ps(x, q0, a0);
		a1 = _mm256_fmadd_ps(x, q1, a1);
		x = _mm256_broadcast_ss(cf + r + k);
		b0 = _mm256_fmadd_ps(x, q0, b0);
		b1 = _mm256_fmadd_ps(x, q1, b1);
		x = _mm256_broadcast_ss(cf + 2 * r + k);
		c0 = _mm256_fmadd_ps(x, q0, c0);
		c1 = _mm256_fmadd_ps(x, q1, c1);
		x = _mm256_broadcast_ss(cf + 3 * r + k);
		d0 = _mm256_fmadd_ps(x, q0, d0);
		d1 = _mm256_fmadd_ps(x, q1, d1);
	}
	bad |= (unsigned)!fin32(a0, a1, sv, K[0], bnd, wdt, w, o);
	bad |= (unsigned)!fin32(b0, b1, sv, K[1], bnd, wdt, w + wld, o + old) << 1;
	bad |= (unsigned)!fin32(c0, c1, sv, K[2], bnd, wdt, w + 2 * wld, o + 2 * old) << 2;
	bad |= (unsigned)!fin32(d0, d1, sv, K[3], bnd, wdt, w + 3 * wld, o + 3 * old) << 3;
	return bad;
}

/*
 * fast_row(): row ci's factors in fp32 into cf and its K; false if the row
 * is outside the filter's range (fp32 underflow or overflow possible).
 */
static bool fast_row(size_t r, const double *ci, double s, const gfs_merge_r32 *q, float *cf,
		     float *K)
{
	double cmax = 0, cmin = INFINITY, kd;

	for (size_t k = 0; k < r; k++) {
		const double a = fabs(ci[k]);

		if (!(a <= FLT_MAX))
			return false;
		cf[k] = (float)ci[k]; /* exact: the caller has exact products */
		if (a > cmax)
			cmax = a;
		if (a != 0 && a < cmin)
			cmin = a;
	}
	if (cmax == 0) { /* every product zero: the sum is exactly zero */
		*K = 0;
		return true;
	}
	kd = fabs(s) * cmax * (double)(r + 2) * 0x1p-24 * 1.01;
	if (!(cmin * q->rmin >= 0x1p-100 && cmax * q->smax <= 0x1p100 &&
	      fabs(s) * cmax * q->smax <= 0x1p100 && kd >= 0x1p-120))
		return false;
	*K = (float)kd;
	return true;
}

/*
 * fast_tile(): round_fast() of rows [i0, i0 + m) (m a multiple of 4, cf, K
 * and ok theirs: fast_row() and its verdict per four) and columns [j0, j0 + n).
 */
FMA static ALWAYS_INLINE void fast_tile(gfs_dtype wdt, const void *W, size_t cols, size_t i0,
					size_t m, size_t j0, size_t n, size_t r, double s,
					const double *c, const double *P, const gfs_merge_r32 *q,
					const float *cf, const float *K, const bool *ok, void *out)
{
	const size_t wes = gfs_dtype_size(wdt);
	const float s32 = (float)s;
	const uint8_t *w = W;
	uint8_t *o = out;

	for (size_t i = i0; i < i0 + m; i += 4) {
		const size_t x0 = i - i0;

		if (!ok[x0 / 4]) {
			const size_t e = i * cols + j0;

			round_fma(wdt, w + e * wes, cols, 4, n, r, s, c + i * r, P + j0 * r,
				  GFS_DT_BF16, o + e * 2);
			continue;
		}
		for (size_t j = 0; j < n; j += STRIP) {
			const size_t e = i * cols + j0 + j;
			const unsigned bad = strip4(r, cf + x0 * r, q->P + (j0 + j) * r,
						    q->colsum + j0 + j, K + x0, s32, wdt, w + e * wes,
						    cols * wes, o + e * 2, cols * 2);

			for (size_t x = 0; x < 4; x += 2) { /* a pair, or the one row of it */
				const unsigned two = bad >> x & 3;
				const size_t e2 = e + (x + (two == 2)) * cols;
				const strip_out f = { .s = s, .wdt = wdt, .odt = GFS_DT_BF16,
						      .w0 = w + e2 * wes,
						      .w1 = w + (e2 + cols) * wes,
						      .o0 = o + e2 * 2, .o1 = o + (e2 + cols) * 2 };
				double a[STRIP], b[STRIP];

				if (two)
					strip_fma(r, c + (i + x + (two == 2)) * r, P + (j0 + j) * r, a,
						  two == 3 ? b : NULL, &f);
			}
		}
	}
}

/*
 * round_fast(): gfs_merge_lora_round() to bf16 (W fp32 or bf16, exact
 * products, q made from P): rows [0, rows & ~3) and columns [0, cols & ~15)
 * through the bf16 filter, the column and row tails by round_fma().
 */
FMA static void round_fast(gfs_dtype wdt, const void *W, size_t rows, size_t cols, size_t r,
			   double s, const double *c, const double *P, const gfs_merge_r32 *q,
			   void *out)
{
	const size_t wes = gfs_dtype_size(wdt), rows4 = rows & ~(size_t)3;
	const size_t cols16 = cols & ~(size_t)(STRIP - 1);
	const uint8_t *w = W;
	uint8_t *o = out;
	float cf[FAST_CHUNK * GFS_MERGE_R32_MAX], K[FAST_CHUNK];
	bool ok[FAST_CHUNK / 4];

	assert(r <= GFS_MERGE_R32_MAX && q->r == r && q->cols == cols);
	for (size_t i0 = 0; i0 < rows4; i0 += FAST_CHUNK) { /* a chunk of rows, every tile */
		const size_t m = rows4 - i0 < FAST_CHUNK ? rows4 - i0 : FAST_CHUNK;

		for (size_t x = 0; x < m; x++) {
			const bool y = fast_row(r, c + (i0 + x) * r, s, q, cf + x * r, &K[x]);

			ok[x / 4] = (x % 4 == 0 || ok[x / 4]) && y;
		}
		for (size_t j0 = 0; j0 < cols16; j0 += TILE)
			fast_tile(wdt, W, cols, i0, m, j0, cols16 - j0 < TILE ? cols16 - j0 : TILE, r,
				  s, c, P, q, cf, K, ok, out);
	}
	if (cols16 < cols && rows4)
		round_fma(wdt, w + cols16 * wes, cols, rows4, cols - cols16, r, s, c, P + cols16 * r,
			  GFS_DT_BF16, o + cols16 * 2);
	if (rows4 < rows)
		round_fma(wdt, w + rows4 * cols * wes, cols, rows - rows4, cols, r, s, c + rows4 * r,
			  P, GFS_DT_BF16, o + rows4 * cols * 2);
}

#endif

void gfs_merge_lora_rows(size_t rows, size_t cols, size_t r, double s, const double *c,
			 const double *R, double *v, bool exact_products)
{
#ifdef MERGE_X86
	switch (cpu(exact_products)) {
	case ISA_FAST:
	case ISA_FMA:
		rows_fma(rows, cols, r, s, c, R, v);
		return;
	case ISA_AVX2:
		rows_avx2(rows, cols, r, s, c, R, v);
		return;
	}
#endif
	(void)exact_products;
	rows_plain(rows, cols, r, s, c, R, v);
}

void gfs_merge_lora_round(gfs_dtype wdt, const void *W, size_t rows, size_t cols, size_t r,
			  double s, const double *c, const double *R, const gfs_merge_r32 *q,
			  bool exact_products, gfs_dtype odt, void *out)
{
	assert(gfs_dtype_is_float(wdt) && gfs_dtype_is_float(odt));
	assert(!q || (q->r == r && q->cols == cols));
#ifdef MERGE_X86
	switch (cpu(exact_products)) {
	case ISA_FAST:
		if (q && odt == GFS_DT_BF16 && (wdt == GFS_DT_F32 || wdt == GFS_DT_BF16)) {
			round_fast(wdt, W, rows, cols, r, s, c, R, q, out);
			return;
		}
		/* fall through */
	case ISA_FMA:
		round_fma(wdt, W, cols, rows, cols, r, s, c, R, odt, out);
		return;
	case ISA_AVX2:
		round_avx2(wdt, W, cols, rows, cols, r, s, c, R, odt, out);
		return;
	}
#endif
	(void)exact_products;
	(void)q;
	round_plain(wdt, W, cols, rows, cols, r, s, c, R, odt, out);
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
