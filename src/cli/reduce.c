/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — streaming reductions over tensors (see reduce.h).
 */
#include "config.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/cli/reduce.h"
#include "gatherfs/util/sha256.h"

/* Values per chunk: 1 MiB of fp64, at most 1 MiB of source bytes. */
#define CHUNK_VALUES ((size_t)1 << 17)

size_t gfs_reduce_chunk_bytes(void)
{
	return 2 * CHUNK_VALUES * sizeof(double);
}

static gfs_dtype out_dtype(const gfs_rside *x, size_t i)
{
	return gfs_dtype_out(gfs_layout_target(x->l, i)->dtype, x->want);
}

static bool is_complex(gfs_dtype dt)
{
	return dt == GFS_DT_C64 || dt == GFS_DT_C128;
}

uint64_t gfs_reduce_values(const gfs_rside *x, size_t i)
{
	return x->l->tensors[i].numel * (is_complex(out_dtype(x, i)) ? 2 : 1);
}

/* A reader of one entry's values, chunk by chunk. */
typedef struct vreader {
	const gfs_rside *x;
	size_t i;
	gfs_dtype dt;   /* presented dtype */
	size_t es;      /* its element size */
	uint64_t nbytes, off;
	uint8_t *raw;
	double *v;
} vreader;

static gfs_err vreader_open(vreader *r, const gfs_rside *x, size_t i)
{
	*r = (vreader){ .x = x, .i = i, .dt = out_dtype(x, i) };
	r->es = gfs_dtype_size(r->dt);
	r->nbytes = gfs_tensor_out_nbytes(x->l, i, x->want);
	r->raw = malloc(CHUNK_VALUES * sizeof(double));
	r->v = malloc(CHUNK_VALUES * sizeof(double));
	if (!r->raw || !r->v) {
		free(r->raw);
		free(r->v);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	return GFS_OK;
}

static void vreader_close(vreader *r)
{
	free(r->raw);
	free(r->v);
}

/* widen_f32(): n fp32 values at p as doubles in v (exact). */
static void widen_f32(const uint8_t *p, size_t n, double *v)
{
	for (size_t k = 0; k < n; k++) {
		const uint32_t bits = gfs_le32(p + 4 * k);
		float f;

		memcpy(&f, &bits, 4);
		v[k] = f;
	}
}

/* widen(): n elements of dtype dt at p as fp64 values in v; @return the value count. */
static size_t widen(gfs_dtype dt, const uint8_t *p, size_t n, double *v)
{
	switch (dt) {
	case GFS_DT_F64:
		memcpy(v, p, n * 8);
		return n;
	case GFS_DT_C128:
		memcpy(v, p, n * 16);
		return 2 * n;
	case GFS_DT_C64: /* its parts are fp32 */
		widen_f32(p, 2 * n, v);
		return 2 * n;
	case GFS_DT_F32:
		widen_f32(p, n, v);
		return n;
	case GFS_DT_BF16:
		for (size_t k = 0; k < n; k++) {
			const uint32_t bits = (uint32_t)gfs_le16(p + 2 * k) << 16;
			float f;

			memcpy(&f, &bits, 4);
			v[k] = f;
		}
		return n;
	case GFS_DT_F16:
		gfs_dtype_convert(dt, GFS_DT_F64, p, v, n);
		return n;
	case GFS_DT_I64:
		for (size_t k = 0; k < n; k++)
			v[k] = (double)(int64_t)gfs_le64(p + 8 * k);
		return n;
	case GFS_DT_I32:
		for (size_t k = 0; k < n; k++)
			v[k] = (double)(int32_t)gfs_le32(p + 4 * k);
		return n;
	case GFS_DT_I16:
		for (size_t k = 0; k < n; k++)
			v[k] = (double)(int16_t)gfs_le16(p + 2 * k);
		return n;
	case GFS_DT_I8:
		for (size_t k = 0; k < n; k++)
			v[k] = (double)(int8_t)p[k];
		return n;
	case GFS_DT_F8_E4M3:
	case GFS_DT_F8_E5M2:
	case GFS_DT_F8_E8M0:
		for (size_t k = 0; k < n; k++)
			v[k] = gfs_fp8_to_f32(dt, p[k]);
		return n;
	default: /* U8, BOOL */
		for (size_t k = 0; k < n; k++)
			v[k] = (double)p[k];
		return n;
	}
}

/* vreader_raw(): the next chunk's bytes in r->raw, *elems elements (0 at the end). */
static gfs_err vreader_raw(vreader *r, size_t *elems)
{
	const size_t per = is_complex(r->dt) ? CHUNK_VALUES / 2 : CHUNK_VALUES;
	const uint64_t left = (r->nbytes - r->off) / r->es;
	gfs_err err;

	*elems = left < per ? (size_t)left : per;
	if (!*elems)
		return GFS_OK;
	err = gfs_tensor_read(r->x->l, r->x->s, r->i, r->x->want, r->off, r->raw, *elems * r->es);
	if (err)
		return gfs_fail_prefix(err, "%s", r->x->what);
	r->off += *elems * r->es;
	return GFS_OK;
}

/*
 * The moments of a chunk of finite values are kept in four lanes: lane j
 * takes the values k with k % 4 == j, in order, the last n % 4 values
 * lane 0; the lanes are then combined in a fixed order.  The AVX2 kernels
 * (x86-64, chosen at run time) are the same operations on the same lanes,
 * so they give the same bits as the plain loops; the compiler never fuses
 * a multiply with an add (ISO C mode for GCC, the pragma for clang).
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#define REDUCE_X86 1
#include <immintrin.h>
#endif

typedef struct lanes {
	double s[4], q[4], lo[4], hi[4];
	uint64_t z[4];
} lanes;

/*
 * lanes_plain(): the lanes of the n values at v; @return false when one
 * of them is NaN or infinite (then the lanes mean nothing).
 */
static bool lanes_plain(const double *v, size_t n, lanes *L)
{
	double bad = 0;
	size_t k = 0;

	*L = (lanes){ .lo = { INFINITY, INFINITY, INFINITY, INFINITY },
		      .hi = { -INFINITY, -INFINITY, -INFINITY, -INFINITY } };
	for (; k + 4 <= n; k += 4)
		for (int j = 0; j < 4; j++) {
			const double x = v[k + j];

			L->s[j] += x;
			L->q[j] += x * x;
			L->lo[j] = x < L->lo[j] ? x : L->lo[j];
			L->hi[j] = x > L->hi[j] ? x : L->hi[j];
			L->z[j] += x == 0;
			bad += x * 0; /* NaN from here on after a NaN or an infinity */
		}
	for (; k < n; k++) {
		L->s[0] += v[k];
		L->q[0] += v[k] * v[k];
		L->lo[0] = v[k] < L->lo[0] ? v[k] : L->lo[0];
		L->hi[0] = v[k] > L->hi[0] ? v[k] : L->hi[0];
		L->z[0] += v[k] == 0;
		bad += v[k] * 0;
	}
	return bad == 0;
}

/* m2_plain(): the lanes' sum of squared deviations of the n values at v from mean. */
static double m2_plain(const double *v, size_t n, double mean)
{
	double m[4] = { 0 };
	size_t k = 0;

	for (; k + 4 <= n; k += 4)
		for (int j = 0; j < 4; j++)
			m[j] += (v[k + j] - mean) * (v[k + j] - mean);
	for (; k < n; k++)
		m[0] += (v[k] - mean) * (v[k] - mean);
	return (m[0] + m[1]) + (m[2] + m[3]);
}

#ifdef REDUCE_X86
#define AVX2 __attribute__((target("avx2")))
#define ALWAYS_INLINE inline __attribute__((always_inline))

/* load4(): the four values of dtype dt (fp64, fp32, bf16) at p + k elements, as fp64 (exact). */
AVX2 static ALWAYS_INLINE __m256d load4(gfs_dtype dt, const uint8_t *p, size_t k)
{
	__m128i b;

	if (dt == GFS_DT_F64)
		return _mm256_loadu_pd((const double *)(const void *)(p + 8 * k));
	if (dt == GFS_DT_F32)
		return _mm256_cvtps_pd(_mm_loadu_ps((const float *)(const void *)(p + 4 * k)));
	/* bf16: the high half of an fp32 */
	b = _mm_cvtepu16_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p + 2 * k)));
	return _mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32(b, 16)));
}

/* lanes_k(): lanes_plain() of the first n4 (a multiple of 4) values of dtype dt at p. */
AVX2 static ALWAYS_INLINE bool lanes_k(gfs_dtype dt, const uint8_t *p, size_t n4, lanes *L)
{
	const __m256d zero = _mm256_setzero_pd();
	__m256d s = zero, q = zero, bad = zero;
	__m256d lo = _mm256_set1_pd(INFINITY), hi = _mm256_set1_pd(-INFINITY);
	__m256i z = _mm256_setzero_si256();

	for (size_t k = 0; k < n4; k += 4) {
		const __m256d x = load4(dt, p, k);

		s = _mm256_add_pd(s, x);
		q = _mm256_add_pd(q, _mm256_mul_pd(x, x));
		lo = _mm256_min_pd(x, lo); /* x < lo ? x : lo */
		hi = _mm256_max_pd(x, hi); /* x > hi ? x : hi */
		z = _mm256_sub_epi64(z, _mm256_castpd_si256(_mm256_cmp_pd(x, zero, _CMP_EQ_OQ)));
		bad = _mm256_add_pd(bad, _mm256_mul_pd(x, zero));
	}
	_mm256_storeu_pd(L->s, s);
	_mm256_storeu_pd(L->q, q);
	_mm256_storeu_pd(L->lo, lo);
	_mm256_storeu_pd(L->hi, hi);
	_mm256_storeu_si256((__m256i *)(void *)L->z, z);
	return _mm256_movemask_pd(_mm256_cmp_pd(bad, zero, _CMP_NEQ_UQ)) == 0;
}

/* m2_k(): the lanes of m2_plain() of the first n4 (a multiple of 4) values of dtype dt at p. */
AVX2 static ALWAYS_INLINE void m2_k(gfs_dtype dt, const uint8_t *p, size_t n4, double mean,
				    double m[4])
{
	const __m256d mu = _mm256_set1_pd(mean);
	__m256d acc = _mm256_setzero_pd();

	for (size_t k = 0; k < n4; k += 4) {
		const __m256d d = _mm256_sub_pd(load4(dt, p, k), mu);

		acc = _mm256_add_pd(acc, _mm256_mul_pd(d, d));
	}
	_mm256_storeu_pd(m, acc);
}

AVX2 static bool lanes_avx2(gfs_dtype dt, const uint8_t *p, size_t n4, lanes *L)
{
	switch (dt) {
	case GFS_DT_F64: return lanes_k(GFS_DT_F64, p, n4, L);
	case GFS_DT_F32: return lanes_k(GFS_DT_F32, p, n4, L);
	default: return lanes_k(GFS_DT_BF16, p, n4, L);
	}
}

AVX2 static void m2_avx2(gfs_dtype dt, const uint8_t *p, size_t n4, double mean, double m[4])
{
	switch (dt) {
	case GFS_DT_F64: m2_k(GFS_DT_F64, p, n4, mean, m); break;
	case GFS_DT_F32: m2_k(GFS_DT_F32, p, n4, mean, m); break;
	default: m2_k(GFS_DT_BF16, p, n4, mean, m); break;
	}
}

/* use_avx2(): whether this CPU runs the AVX2 kernels (GATHERFS_REDUCE_ISA=plain: never). */
static bool use_avx2(void)
{
	const char *cap = getenv("GATHERFS_REDUCE_ISA");

	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && !(cap && strcmp(cap, "plain") == 0);
}

/*
 * any_special_avx2(): whether one of the n values at p of dtype dt (a
 * complex one: its parts) has all its exponent bits set (NaN or infinity;
 * none for an integer dtype).
 */
AVX2 static bool any_special_avx2(gfs_dtype dt, const uint8_t *p, size_t n)
{
	const size_t w = gfs_dtype_size(dt) / (is_complex(dt) ? 2 : 1), bytes = n * w;
	__m256i e, hit = _mm256_setzero_si256();
	size_t k = 0;
	bool tail = false;

	switch (dt) {
	case GFS_DT_F64:
	case GFS_DT_C128:
		e = _mm256_set1_epi64x(0x7ff0000000000000);
		for (; k + 32 <= bytes; k += 32) {
			const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(p + k));

			hit = _mm256_or_si256(hit, _mm256_cmpeq_epi64(_mm256_and_si256(x, e), e));
		}
		for (; k < bytes; k += 8)
			tail |= (gfs_le64(p + k) & 0x7ff0000000000000u) == 0x7ff0000000000000u;
		break;
	case GFS_DT_F32:
	case GFS_DT_C64:
		e = _mm256_set1_epi32(0x7f800000);
		for (; k + 32 <= bytes; k += 32) {
			const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(p + k));

			hit = _mm256_or_si256(hit, _mm256_cmpeq_epi32(_mm256_and_si256(x, e), e));
		}
		for (; k < bytes; k += 4)
			tail |= (gfs_le32(p + k) & 0x7f800000u) == 0x7f800000u;
		break;
	case GFS_DT_F16:
	case GFS_DT_BF16: {
		const uint16_t m = dt == GFS_DT_F16 ? 0x7c00u : 0x7f80u;

		e = _mm256_set1_epi16((short)m);
		for (; k + 32 <= bytes; k += 32) {
			const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(p + k));

			hit = _mm256_or_si256(hit, _mm256_cmpeq_epi16(_mm256_and_si256(x, e), e));
		}
		for (; k < bytes; k += 2)
			tail |= (gfs_le16(p + k) & m) == m;
		break;
	}
	default:
		break;
	}
	return tail || !_mm256_testz_si256(hit, hit);
}
#endif

/*
 * count_special(): how many of the n elements of dtype dt at p are NaN
 * (*nan) and infinite (*inf), from their bits (a complex element: both
 * parts); integers have none.
 */
static void count_special(gfs_dtype dt, const uint8_t *p, size_t n, uint64_t *nan, uint64_t *inf)
{
	uint64_t nn = 0, ni = 0, hit = 0;

	if (gfs_dtype_is_fp8(dt)) {
		for (size_t k = 0; k < n; k++) {
			const float f = gfs_fp8_to_f32(dt, p[k]);

			nn += isnan(f) != 0;
			ni += isinf(f) != 0;
		}
		*nan = nn;
		*inf = ni;
		return;
	}
	if (is_complex(dt))
		n *= 2;
	/* a first pass without branches: most chunks have no such value */
#ifdef REDUCE_X86
	if (use_avx2() && dt != GFS_DT_F8_E4M3 && dt != GFS_DT_F8_E5M2 && dt != GFS_DT_F8_E8M0)
		hit = any_special_avx2(dt, p, n);
	else
#endif
	switch (dt) {
	case GFS_DT_F64:
	case GFS_DT_C128:
		for (size_t k = 0; k < n; k++)
			hit |= (gfs_le64(p + 8 * k) & 0x7ff0000000000000u) == 0x7ff0000000000000u;
		break;
	case GFS_DT_F32:
	case GFS_DT_C64:
		for (size_t k = 0; k < n; k++)
			hit |= (gfs_le32(p + 4 * k) & 0x7f800000u) == 0x7f800000u;
		break;
	case GFS_DT_F16:
		for (size_t k = 0; k < n; k++)
			hit |= (gfs_le16(p + 2 * k) & 0x7c00u) == 0x7c00u;
		break;
	case GFS_DT_BF16:
		for (size_t k = 0; k < n; k++)
			hit |= (gfs_le16(p + 2 * k) & 0x7f80u) == 0x7f80u;
		break;
	default:
		break;
	}
	for (size_t k = 0; hit && k < n; k++) {
		const size_t w = gfs_dtype_size(dt) / (is_complex(dt) ? 2 : 1);
		const uint64_t v = w == 8 ? gfs_le64(p + 8 * k) : w == 4 ? gfs_le32(p + 4 * k)
								: gfs_le16(p + 2 * k);
		const uint64_t e = w == 8 ? 0x7ff0000000000000u : w == 4 ? 0x7f800000u
					   : dt == GFS_DT_F16 ? 0x7c00u : 0x7f80u;
		const uint64_t m = w == 8 ? 0x000fffffffffffffu : w == 4 ? 0x007fffffu
					   : dt == GFS_DT_F16 ? 0x03ffu : 0x007fu;

		if ((v & e) == e) {
			nn += (v & m) != 0;
			ni += (v & m) == 0;
		}
	}
	*nan = nn;
	*inf = ni;
}

/*
 * A chunk's values: n values of dtype dt (fp64, fp32 or bf16: the
 * kernels read them where they are; any other dtype is widened to fp64 in
 * v first), with v a buffer for all n widened.
 */
typedef struct vchunk {
	gfs_dtype dt;
	const uint8_t *p;
	size_t n;
	double *v;
	bool widened; /* v holds the n values */
	bool avx2;
} vchunk;

/* chunk_v(): the chunk's values as fp64 (c->v). */
static const double *chunk_v(vchunk *c)
{
	if (!c->widened)
		widen(c->dt, c->p, c->n, c->v);
	c->widened = true;
	return c->v;
}

#ifdef REDUCE_X86
/*
 * chunk_tail(): the last n % 4 of the chunk's values (at most 3) as fp64
 * at t; @return its first n - n % 4 values for the kernels: their dtype
 * in *dt, *p, their count in *n4.
 */
static const double *chunk_tail(const vchunk *c, double t[3], gfs_dtype *dt, const uint8_t **p,
				size_t *n4)
{
	*n4 = c->n & ~(size_t)3;
	if (c->widened) {
		*dt = GFS_DT_F64;
		*p = (const uint8_t *)c->v;
		return c->v + *n4;
	}
	*dt = c->dt;
	*p = c->p;
	widen(c->dt, c->p + *n4 * gfs_dtype_size(c->dt), c->n - *n4, t);
	return t;
}
#endif

/*
 * chunk_lanes(): lanes_plain() of the chunk's values; @return false when
 * one of them is NaN or infinite.
 */
static bool chunk_lanes(vchunk *c, lanes *L)
{
#ifdef REDUCE_X86
	if (c->avx2) {
		double tb[3];
		gfs_dtype dt;
		const uint8_t *p;
		size_t n4;
		const double *t = chunk_tail(c, tb, &dt, &p, &n4);
		bool ok = lanes_avx2(dt, p, n4, L);

		for (size_t k = 0; k < c->n - n4; k++) {
			L->s[0] += t[k];
			L->q[0] += t[k] * t[k];
			L->lo[0] = t[k] < L->lo[0] ? t[k] : L->lo[0];
			L->hi[0] = t[k] > L->hi[0] ? t[k] : L->hi[0];
			L->z[0] += t[k] == 0;
			ok = ok && isfinite(t[k]);
		}
		return ok;
	}
#endif
	return lanes_plain(chunk_v(c), c->n, L);
}

/* chunk_m2(): m2_plain() of the chunk's values. */
static double chunk_m2(vchunk *c, double mean)
{
#ifdef REDUCE_X86
	if (c->avx2) {
		double tb[3], m[4];
		gfs_dtype dt;
		const uint8_t *p;
		size_t n4;
		const double *t = chunk_tail(c, tb, &dt, &p, &n4);

		m2_avx2(dt, p, n4, mean, m);
		for (size_t k = 0; k < c->n - n4; k++)
			m[0] += (t[k] - mean) * (t[k] - mean);
		return (m[0] + m[1]) + (m[2] + m[3]);
	}
#endif
	return m2_plain(chunk_v(c), c->n, mean);
}

/*
 * chunk_of(): the chunk of the n elements of dtype dt at p (a complex
 * element: its two parts), v a buffer for its values as fp64.
 */
static vchunk chunk_of(gfs_dtype dt, const uint8_t *p, size_t n, double *v)
{
	vchunk c = { .dt = dt, .p = p, .n = n, .v = v };

	if (dt == GFS_DT_C64 || dt == GFS_DT_C128) {
		c.dt = dt == GFS_DT_C64 ? GFS_DT_F32 : GFS_DT_F64;
		c.n = 2 * n;
	}
#ifdef REDUCE_X86
	c.avx2 = use_avx2();
#endif
	if (c.dt != GFS_DT_F64 && c.dt != GFS_DT_F32 && c.dt != GFS_DT_BF16)
		chunk_v(&c);
	return c;
}

gfs_err gfs_reduce_stats(const gfs_rside *x, size_t i, gfs_tstats *out)
{
	vreader r;
	double mean = 0, m2 = 0, sq = 0;
	size_t n;
	gfs_err err = vreader_open(&r, x, i);

	*out = (gfs_tstats){ .numel = gfs_reduce_values(x, i), .min = NAN, .max = NAN,
			     .absmax = NAN };
	while (!err && !(err = vreader_raw(&r, &n)) && n) {
		double cmin = INFINITY, cmax = -INFINITY, csum = 0, cm2 = 0, cmean;
		uint64_t cn = 0;
		vchunk c = chunk_of(r.dt, r.raw, n, r.v);
		lanes L;
		const double *v;
		bool finite = chunk_lanes(&c, &L);

		if (finite) {
			csum = (L.s[0] + L.s[1]) + (L.s[2] + L.s[3]);
			sq += (L.q[0] + L.q[1]) + (L.q[2] + L.q[3]);
			out->zeros += L.z[0] + L.z[1] + L.z[2] + L.z[3];
			for (int j = 0; j < 4; j++) {
				cmin = L.lo[j] < cmin ? L.lo[j] : cmin;
				cmax = L.hi[j] > cmax ? L.hi[j] : cmax;
			}
			cn = c.n;
		}
		v = finite ? NULL : chunk_v(&c);
		n = c.n;
		for (size_t k = 0; !finite && k < n; k++) {
			if (isnan(v[k])) {
				out->nan++;
				continue;
			}
			if (isinf(v[k])) {
				out->inf++;
				continue;
			}
			out->zeros += v[k] == 0;
			cmin = v[k] < cmin ? v[k] : cmin;
			cmax = v[k] > cmax ? v[k] : cmax;
			csum += v[k];
			sq += v[k] * v[k];
			cn++;
		}
		if (!cn)
			continue;
		cmean = csum / (double)cn;
		if (finite)
			cm2 = chunk_m2(&c, cmean);
		for (size_t k = 0; !finite && k < n; k++)
			if (isfinite(v[k]))
				cm2 += (v[k] - cmean) * (v[k] - cmean);
		/* Chan et al.: merge this chunk's (count, mean, M2) into the total */
		if (!out->finite) {
			mean = cmean;
			m2 = cm2;
			out->min = cmin;
			out->max = cmax;
		} else {
			const double tot = (double)(out->finite + cn), d = cmean - mean;

			mean += d * (double)cn / tot;
			m2 += cm2 + d * d * (double)out->finite * (double)cn / tot;
			out->min = cmin < out->min ? cmin : out->min;
			out->max = cmax > out->max ? cmax : out->max;
		}
		out->finite += cn;
	}
	vreader_close(&r);
	if (err)
		return err;
	out->l2 = sqrt(sq);
	if (out->finite) {
		out->mean = mean;
		out->std = sqrt(m2 / (double)out->finite);
		out->absmax = fabs(out->min) > fabs(out->max) ? fabs(out->min) : fabs(out->max);
	} else {
		out->mean = out->std = NAN;
	}
	return GFS_OK;
}

static bool same_bits(double a, double b)
{
	return memcmp(&a, &b, sizeof(a)) == 0 || (isnan(a) && isnan(b));
}

gfs_err gfs_reduce_diff(const gfs_rside *a, size_t ia, const gfs_rside *b, size_t ib,
			double atol, double rtol, gfs_tdiff *out)
{
	vreader ra, rb;
	double dot = 0, sq_b = 0, sum_abs = 0;
	size_t na, nb;
	gfs_err err = vreader_open(&ra, a, ia);

	bool full = false;    /* every chunk's sums are needed: some value differs */
	bool skipped = false; /* a chunk of equal bytes was only counted */

	assert(gfs_reduce_values(a, ia) == gfs_reduce_values(b, ib));
	if (err)
		return err;
	err = vreader_open(&rb, b, ib);
	if (err) {
		vreader_close(&ra);
		return err;
	}
restart:
	*out = (gfs_tdiff){ .numel = gfs_reduce_values(a, ia) };
	dot = sq_b = sum_abs = 0;
	ra.off = rb.off = 0;
	while (!(err = vreader_raw(&ra, &na)) && !(err = vreader_raw(&rb, &nb)) && na) {
		const bool same = ra.dt == rb.dt && memcmp(ra.raw, rb.raw, na * ra.es) == 0;

		if (same && !full) {
			/* the same bytes, nothing differed so far (the common case):
			 * only the NaN and Inf counts; the sums matter only once a
			 * value differs, and then the tensor is read again */
			uint64_t nan, inf;

			count_special(ra.dt, ra.raw, na, &nan, &inf);
			out->nan_a += nan;
			out->nan_b += nan;
			out->inf_a += inf;
			out->inf_b += inf;
			skipped = true;
			continue;
		}
		if (!same && !full) {
			full = true;
			if (skipped)
				goto restart;
		}
		if (same) {
			double sq = 0;

			na = widen(ra.dt, ra.raw, na, ra.v);
			for (size_t k = 0; k < na; k++) {
				const double x = ra.v[k];

				if (isfinite(x)) {
					sq += x * x;
				} else if (isnan(x)) {
					out->nan_a++;
					out->nan_b++;
				} else {
					out->inf_a++;
					out->inf_b++;
				}
			}
			dot += sq;
			out->sq_a += sq;
			sq_b += sq;
			continue;
		}
		na = widen(ra.dt, ra.raw, na, ra.v);
		nb = widen(rb.dt, rb.raw, nb, rb.v);
		assert(na == nb);
		for (size_t k = 0; k < na; k++) {
			const double x = ra.v[k], y = rb.v[k];
			double d, m;

			out->nan_a += isnan(x) != 0;
			out->nan_b += isnan(y) != 0;
			out->inf_a += isinf(x) != 0;
			out->inf_b += isinf(y) != 0;
			if (isfinite(x) && isfinite(y)) {
				dot += x * y;
				out->sq_a += x * x;
				sq_b += y * y;
				out->sq_diff += (x - y) * (x - y);
			}
			if (same_bits(x, y))
				continue;
			out->ndiff++;
			if (isnan(x) || isnan(y)) {
				out->nfar++;
				continue;
			}
			d = fabs(x - y);
			m = fabs(x) > fabs(y) ? fabs(x) : fabs(y);
			sum_abs += d;
			out->max_abs = d > out->max_abs ? d : out->max_abs;
			if (m > 0 && d / m > out->max_rel)
				out->max_rel = d / m;
			if (!(d <= atol + rtol * m))
				out->nfar++;
		}
	}
	vreader_close(&ra);
	vreader_close(&rb);
	if (err)
		return err;
	out->mean_abs = out->numel ? sum_abs / (double)out->numel : 0;
	if ((out->sq_a == 0 && sq_b == 0) || out->ndiff == 0)
		out->cosine = 1; /* the same values: exactly 1, not a rounding of it */
	else if (out->sq_a == 0 || sq_b == 0)
		out->cosine = 0;
	else
		out->cosine = fmax(-1, fmin(1, dot / (sqrt(out->sq_a) * sqrt(sq_b))));
	return GFS_OK;
}

gfs_err gfs_reduce_sha256(const gfs_rside *x, size_t i, uint8_t digest[32])
{
	const uint64_t size = gfs_tensor_out_nbytes(x->l, i, x->want);
	uint8_t *buf = malloc(CHUNK_VALUES * sizeof(double));
	const size_t chunk = CHUNK_VALUES * sizeof(double);
	gfs_sha256 c;
	gfs_err err = GFS_OK;

	if (!buf)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	gfs_sha256_init(&c);
	for (uint64_t off = 0; !err && off < size; off += chunk) {
		const size_t n = size - off < chunk ? (size_t)(size - off) : chunk;

		err = gfs_tensor_read(x->l, x->s, i, x->want, off, buf, n);
		if (err)
			err = gfs_fail_prefix(err, "%s", x->what);
		else
			gfs_sha256_update(&c, buf, n);
	}
	free(buf);
	if (!err)
		gfs_sha256_final(&c, digest);
	return err;
}
