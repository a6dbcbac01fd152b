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
 * finite_moments(): min, max, sum of n finite values (into *mn, *mx, *sum),
 * their squares added to *sq, their zeros to *zeros; four independent
 * accumulators, then combined in a fixed order (the same result every run).
 */
static void finite_moments(const double *v, size_t n, double *mn, double *mx, double *sum,
			   double *sq, uint64_t *zeros)
{
	double s[4] = { 0 }, q[4] = { 0 }, lo[4], hi[4];
	uint64_t z[4] = { 0 };
	size_t k = 0;

	for (int j = 0; j < 4; j++) {
		lo[j] = INFINITY;
		hi[j] = -INFINITY;
	}
	for (; k + 4 <= n; k += 4)
		for (int j = 0; j < 4; j++) {
			const double x = v[k + j];

			s[j] += x;
			q[j] += x * x;
			lo[j] = x < lo[j] ? x : lo[j];
			hi[j] = x > hi[j] ? x : hi[j];
			z[j] += x == 0;
		}
	for (; k < n; k++) {
		s[0] += v[k];
		q[0] += v[k] * v[k];
		lo[0] = v[k] < lo[0] ? v[k] : lo[0];
		hi[0] = v[k] > hi[0] ? v[k] : hi[0];
		z[0] += v[k] == 0;
	}
	*sum = (s[0] + s[1]) + (s[2] + s[3]);
	*sq += (q[0] + q[1]) + (q[2] + q[3]);
	*zeros += z[0] + z[1] + z[2] + z[3];
	for (int j = 0; j < 4; j++) {
		*mn = lo[j] < *mn ? lo[j] : *mn;
		*mx = hi[j] > *mx ? hi[j] : *mx;
	}
}

/* finite_m2(): the sum of squared deviations from mean of n finite values. */
static double finite_m2(const double *v, size_t n, double mean)
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
		uint64_t cn = 0, nan, inf;

		count_special(r.dt, r.raw, n, &nan, &inf);
		n = widen(r.dt, r.raw, n, r.v);
		if (!nan && !inf) {
			finite_moments(r.v, n, &cmin, &cmax, &csum, &sq, &out->zeros);
			cn = n;
		}
		for (size_t k = 0; (nan || inf) && k < n; k++) {
			const double v = r.v[k];

			if (isnan(v)) {
				out->nan++;
				continue;
			}
			if (isinf(v)) {
				out->inf++;
				continue;
			}
			out->zeros += v == 0;
			cmin = v < cmin ? v : cmin;
			cmax = v > cmax ? v : cmax;
			csum += v;
			sq += v * v;
			cn++;
		}
		if (!cn)
			continue;
		cmean = csum / (double)cn;
		if (!nan && !inf)
			cm2 = finite_m2(r.v, n, cmean);
		for (size_t k = 0; (nan || inf) && k < n; k++)
			if (isfinite(r.v[k]))
				cm2 += (r.v[k] - cmean) * (r.v[k] - cmean);
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
