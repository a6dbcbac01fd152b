/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for the merge arithmetic and computed tensors: one rounding
 * from float64 to bf16 / fp16 / fp32 against a brute-force nearest-value
 * search (ties to even, subnormals, overflow, NaN); the low-rank update
 * against exact integer arithmetic; computed tensors served from a layout
 * (JSON round trip, every offset, dtype conversion) and their validation.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gatherfs/index/layout.h"
#include "gatherfs/arith/merge.h"
#include "gatherfs/server/server.h"
#include "tap.h"

/* The finite non-negative values of a 16-bit format, as doubles, ascending. */
static double vals[2][0x7f81];
static int nvals[2];

static void make_tables(void)
{
	for (uint32_t h = 0; h < 0x7f81; h++) { /* bf16: up to +inf */
		const uint32_t b = h << 16;
		float f;

		memcpy(&f, &b, 4);
		vals[0][h] = f;
	}
	nvals[0] = 0x7f81;
	for (uint32_t h = 0; h < 0x7c01; h++) { /* fp16: up to +inf */
		const int e = (int)(h >> 10), m = (int)(h & 0x3ff);

		vals[1][h] = e == 0x1f ? INFINITY : e ? ldexp(m | 0x400, e - 25) : ldexp(m, -24);
	}
	nvals[1] = 0x7c01;
}

/* ref16(): the correctly rounded bits of x (k 0: bf16, 1: fp16) by search. */
static uint16_t ref16(int k, double x)
{
	const double ax = fabs(x);
	const uint16_t sign = signbit(x) ? 0x8000 : 0;
	const double *v = vals[k];
	int lo = 0, hi = nvals[k] - 1, best;

	/* largest index with v <= ax */
	while (lo < hi) {
		const int mid = (lo + hi + 1) / 2;

		if (v[mid] <= ax)
			lo = mid;
		else
			hi = mid - 1;
	}
	best = lo;
	if (v[lo] != ax && lo + 1 < nvals[k]) {
		const int top = nvals[k] - 2; /* the largest finite value */
		double next = v[lo + 1];

		if (lo + 1 == nvals[k] - 1) /* past the largest finite: the next would be 2^emax+1 */
			next = 2 * v[top] - v[top - 1];
		if (ax - v[lo] > next - ax || (ax - v[lo] == next - ax && (lo & 1)))
			best = lo + 1;
	}
	return sign | (uint16_t)best;
}

static uint64_t rng = 88172645463325252ull;

static uint64_t xorshift(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void test_rounding(void)
{
	int bad[3] = { 0, 0, 0 };
	double first_bad[3] = { 0, 0, 0 };

	make_tables();
	for (int i = 0; i < 400000; i++) {
		const uint64_t u = xorshift();
		/* exponents around both formats' ranges, and halfway points */
		const int e = (int)(u % 300) - 160;
		double x = ldexp(1.0 + (double)(xorshift() >> 11) * 0x1p-53, e);
		uint8_t out[2];
		float f;

		if (u & 0x100) { /* an exact midpoint of bf16 or fp16 values */
			const int k = (u >> 9) & 1;
			const int j = (int)(xorshift() % (uint64_t)(nvals[k] - 2));

			x = (vals[k][j] + vals[k][j + 1]) / 2;
		}
		if (u & 0x200)
			x = -x;
		for (int k = 0; k < 2; k++) {
			uint16_t got;

			gfs_merge_round(k ? GFS_DT_F16 : GFS_DT_BF16, &x, out, 1);
			got = (uint16_t)(out[0] | out[1] << 8);
			if (got != ref16(k, x) && !bad[k]++)
				first_bad[k] = x;
		}
		gfs_merge_round(GFS_DT_F32, &x, &f, 1);
		if (f != (float)x && !bad[2]++)
			first_bad[2] = x;
	}
	tap_ok(!bad[0], "bf16: 400000 values rounded once to nearest even (%d wrong, first %a)",
	       bad[0], first_bad[0]);
	tap_ok(!bad[1], "fp16: 400000 values rounded once to nearest even (%d wrong, first %a)",
	       bad[1], first_bad[1]);
	tap_ok(!bad[2], "fp32: as the C conversion (%d wrong)", bad[2]);
	{
		const double sp[] = { NAN,   INFINITY, -INFINITY, 0.0,	   -0.0,
				      1e300, -1e300,   0x1p-1074, -0x1p-1030 };
		const uint16_t bf[] = { 0x7fc0, 0x7f80, 0xff80, 0, 0x8000, 0x7f80, 0xff80, 0, 0x8000 };
		const uint16_t hf[] = { 0x7e00, 0x7c00, 0xfc00, 0, 0x8000, 0x7c00, 0xfc00, 0, 0x8000 };
		uint8_t o[18], p[18];
		int ok = 1;

		gfs_merge_round(GFS_DT_BF16, sp, o, 9);
		gfs_merge_round(GFS_DT_F16, sp, p, 9);
		for (int i = 0; i < 9; i++)
			ok &= (o[2 * i] | o[2 * i + 1] << 8) == bf[i] &&
			      (p[2 * i] | p[2 * i + 1] << 8) == hf[i];
		tap_ok(ok, "NaN, infinities, signed zeros, float64 subnormals and overflow");
	}
	{
		/* 1 + 2^-8 + 2^-40: above the bf16 midpoint, so it rounds up; through
		 * fp32 first it would round to the midpoint, then down to even */
		const double x = 1.0 + 0x1p-8 + 0x1p-40;
		uint8_t o[2];

		gfs_merge_round(GFS_DT_BF16, &x, o, 1);
		tap_ok((o[0] | o[1] << 8) == 0x3f81, "bf16 is rounded from float64 directly, not via fp32");
	}
}

static void test_update(void)
{
	/* small integers: every operation is exact, so the result must be too */
	enum { ROWS = 3, COLS = 700, RK = 7 };
	static double c[ROWS * RK], R[RK * COLS], P[RK * (COLS + 15)], v[ROWS * COLS],
		want[ROWS * COLS];
	int ok = 1;

	for (int i = 0; i < ROWS * RK; i++)
		c[i] = (double)((int)(xorshift() % 17) - 8);
	for (int i = 0; i < RK * COLS; i++)
		R[i] = (double)((int)(xorshift() % 33) - 16);
	for (int i = 0; i < ROWS; i++)
		for (int j = 0; j < COLS; j++) {
			double sum = 0;

			for (int k = 0; k < RK; k++)
				sum += c[i * RK + k] * R[k * COLS + j];
			v[i * COLS + j] = i - j;
			want[i * COLS + j] = (i - j) + 0.5 * sum;
		}
	gfs_merge_pack(RK, COLS, R, P);
	for (int exact = 0; exact < 2; exact++) {
		static double w[ROWS * COLS];

		memcpy(w, v, sizeof(w));
		gfs_merge_lora_rows(ROWS, COLS, RK, 0.5, c, P, w, exact);
		ok = 1;
		for (int i = 0; i < ROWS * COLS; i++)
			ok &= w[i] == want[i];
		tap_ok(ok, "low-rank update of 3 x 700 at rank 7 (tail tile, odd rank) is exact%s",
		       exact ? " (fused multiply-adds)" : "");
	}
}

/* rnd32(): a random fp32 of magnitude about 2^-e. */
static float rnd32(int e)
{
	return ldexpf((float)(int32_t)(uint32_t)xorshift(), -31 - e);
}

/*
 * The one-pass merge (gfs_merge_lora_round()) is gfs_merge_round() of
 * gfs_merge_widen() + gfs_merge_lora_rows() of the ISO C kernel, bit for
 * bit, with each kernel this CPU has (GATHERFS_MERGE_ISA caps it) and fused
 * multiply-adds where the products are exact: W in each float dtype to each
 * output dtype, 5 rows (a pair and an odd one), 300 columns (a full and a
 * tail tile), ranks 6 and 19 (four-rank passes and the rest); fp32 operands
 * (exact products), then float64 ones (not exact: no fusing); W with zeros,
 * subnormals, NaN, infinities and values that overflow bf16.
 */
static void test_round_pass(void)
{
	enum { ROWS = 5, COLS = 300, RKMAX = 19 };
	static const gfs_dtype dts[] = { GFS_DT_F32, GFS_DT_BF16, GFS_DT_F16, GFS_DT_F64 };
	static const char *const isas[] = { "plain", "avx2", "fma", "" };
	static double c[ROWS * RKMAX], R[RKMAX * COLS], P[RKMAX * (COLS + 15)], v[ROWS * COLS];
	static uint8_t w[ROWS * COLS * 8], want[ROWS * COLS * 8], got[ROWS * COLS * 8];
	gfs_merge_r32 *q;

	for (int f64 = 0; f64 < 2; f64++)
		for (size_t wi = 0; wi < 4; wi++) {
			int ok = 1;

			for (int i = 0; i < ROWS * COLS; i++) {
				static const double sp[] = { 0.0, -0.0, 3e38, -1e-40, NAN, INFINITY, 1e-300 };
				const double x = i % 37 == 3 ? sp[i / 37 % 7] : rnd32(1);

				gfs_merge_round(dts[wi], &x, w + i * gfs_dtype_size(dts[wi]), 1);
			}
			for (size_t rk = 6; rk <= RKMAX; rk += RKMAX - 6) {
				for (size_t i = 0; i < ROWS * rk; i++)
					c[i] = f64 ? rnd32(4) * (1 + 0x1p-40) : rnd32(4);
				for (size_t i = 0; i < rk * COLS; i++)
					R[i] = f64 ? rnd32(4) * (1 - 0x1p-45) : rnd32(4);
				gfs_merge_pack(rk, COLS, R, P);
				q = gfs_merge_r32_new(rk, COLS, P); /* NULL for float64 operands */
				ok &= (q == NULL) == (f64 != 0);
				for (size_t oi = 0; oi < 4; oi++) {
					const size_t n = ROWS * COLS * gfs_dtype_size(dts[oi]);

					setenv("GATHERFS_MERGE_ISA", "plain", 1);
					gfs_merge_widen(dts[wi], w, v, ROWS * COLS);
					gfs_merge_lora_rows(ROWS, COLS, rk, 0.375, c, P, v, false);
					gfs_merge_round(dts[oi], v, want, ROWS * COLS);
					for (size_t k = 0; k < 4; k++) {
						setenv("GATHERFS_MERGE_ISA", isas[k], 1);
						gfs_merge_lora_round(dts[wi], w, ROWS, COLS, rk, 0.375, c,
								     P, q, !f64, dts[oi], got);
						ok &= memcmp(got, want, n) == 0;
						gfs_merge_widen(dts[wi], w, v, ROWS * COLS);
						gfs_merge_lora_rows(ROWS, COLS, rk, 0.375, c, P, v, !f64);
						gfs_merge_round(dts[oi], v, got, ROWS * COLS);
						ok &= memcmp(got, want, n) == 0;
					}
				}
				gfs_merge_r32_free(q);
			}
			unsetenv("GATHERFS_MERGE_ISA");
			tap_ok(ok, "merge of %s W with %s operands: every kernel, fused or not, one "
				   "pass or three, the same bits", gfs_dtype_name(dts[wi]),
			       f64 ? "float64" : "fp32");
		}
	{
		/* fp32 W at bf16 midpoints: rows 0, 2, 4 unchanged (c = 0: exact ties,
		 * to even), rows 1, 3 nudged by far less than a bf16 ulp (a tie no
		 * more): the rounding sees every bit below the rounding bit */
		int ok = 1;

		for (int i = 0; i < ROWS * COLS; i++) {
			const uint32_t b = ((uint32_t)xorshift() & 0x3fff0000u) | 0x8000u | 0x08000000u;
			float f;

			memcpy(&f, &b, 4);
			memcpy(w + 4 * i, &f, 4);
		}
		for (int i = 0; i < ROWS; i++)
			c[i] = i % 2 ? 0x1p-60 : 0;
		for (int j = 0; j < COLS; j++)
			R[j] = j % 3 ? 1 : -1;
		gfs_merge_pack(1, COLS, R, P);
		q = gfs_merge_r32_new(1, COLS, P);
		setenv("GATHERFS_MERGE_ISA", "plain", 1);
		gfs_merge_lora_round(GFS_DT_F32, w, ROWS, COLS, 1, 1.0, c, P, NULL, true, GFS_DT_BF16,
				     want);
		for (size_t k = 1; k < 4; k++) {
			setenv("GATHERFS_MERGE_ISA", isas[k], 1);
			gfs_merge_lora_round(GFS_DT_F32, w, ROWS, COLS, 1, 1.0, c, P, q, true, GFS_DT_BF16,
					     got);
			ok &= memcmp(got, want, ROWS * COLS * 2) == 0;
		}
		unsetenv("GATHERFS_MERGE_ISA");
		gfs_merge_r32_free(q);
		for (int i = 0; i < ROWS * COLS; i++) { /* and the plain kernel is right */
			const double x = (double)*(const float *)(const void *)(w + 4 * i) +
					 c[i / COLS] * (i % COLS % 3 ? 1 : -1);
			uint8_t h[2];

			gfs_merge_round(GFS_DT_BF16, &x, h, 1);
			ok &= memcmp(h, want + 2 * i, 2) == 0;
		}
		tap_ok(ok, "bf16 output at exact ties and just off them: every kernel the same bits");
	}
}

/*
 * The bf16 filter (merge.c): where fp32 accumulation decides a bf16 rounding
 * wrongly, the float64 kernel's bits come out anyway.  Rows of c = [1, e,
 * -1] with e = +-2^-25 over R = 1: the fp32 sum is 0 (1 + e rounds to 1),
 * the exact one e; fp32 W at bf16 midpoints of magnitude 1 to 16, so that
 * W + e is a tie for fp32 and no tie for float64.  Then a large random
 * block (rank 16, rows of four and an odd tail, W fp32 and bf16).
 */
static void test_bf16_filter(void)
{
	enum { ROWS = 9, COLS = 100, RK = 16 };
	static double c[ROWS * RK], R[RK * COLS], P[RK * (COLS + 15)];
	static uint8_t w[ROWS * COLS * 4], want[ROWS * COLS * 2], got[ROWS * COLS * 2];
	gfs_merge_r32 *q;
	int ok = 1, hard = 0;

	for (int i = 0; i < ROWS; i++) {
		c[i * 3] = 1;
		c[i * 3 + 1] = i % 2 ? 0x1p-25 : -0x1p-25;
		c[i * 3 + 2] = -1;
	}
	for (int j = 0; j < 3 * COLS; j++)
		R[j] = 1;
	for (int i = 0; i < ROWS * COLS; i++) {
		const uint32_t b = (uint32_t)(xorshift() & 0x80030000u) | 0x3f808000u;

		memcpy(w + 4 * i, &b, 4);
	}
	gfs_merge_pack(3, COLS, R, P);
	q = gfs_merge_r32_new(3, COLS, P);
	setenv("GATHERFS_MERGE_ISA", "plain", 1);
	gfs_merge_lora_round(GFS_DT_F32, w, ROWS, COLS, 3, 1.0, c, P, NULL, true, GFS_DT_BF16, want);
	unsetenv("GATHERFS_MERGE_ISA");
	gfs_merge_lora_round(GFS_DT_F32, w, ROWS, COLS, 3, 1.0, c, P, q, true, GFS_DT_BF16, got);
	ok &= q != NULL && memcmp(got, want, sizeof(want)) == 0;
	for (int i = 0; i < ROWS * COLS; i++) { /* what fp32 alone would give: W, a tie */
		uint8_t h[2];
		float f;
		double x;

		memcpy(&f, w + 4 * i, 4);
		x = f;
		gfs_merge_round(GFS_DT_BF16, &x, h, 1);
		hard += memcmp(h, want + 2 * i, 2) != 0;
	}
	gfs_merge_r32_free(q);
	tap_ok(ok && hard > ROWS * COLS / 4,
	       "bf16 filter: sums fp32 gets wrong at ties (%d of %d would round otherwise) "
	       "come out as in float64", hard, ROWS * COLS);

	ok = 1;
	for (int i = 0; i < ROWS * RK; i++)
		c[i] = rnd32(6);
	for (int i = 0; i < RK * COLS; i++)
		R[i] = rnd32(6);
	gfs_merge_pack(RK, COLS, R, P);
	q = gfs_merge_r32_new(RK, COLS, P);
	for (int bf = 0; bf < 2; bf++) {
		const gfs_dtype wdt = bf ? GFS_DT_BF16 : GFS_DT_F32;

		for (int i = 0; i < ROWS * COLS; i++) {
			const double x = rnd32(4);

			gfs_merge_round(wdt, &x, w + i * gfs_dtype_size(wdt), 1);
		}
		setenv("GATHERFS_MERGE_ISA", "plain", 1);
		gfs_merge_lora_round(wdt, w, ROWS, COLS, RK, 3.0, c, P, NULL, true, GFS_DT_BF16,
				     want);
		unsetenv("GATHERFS_MERGE_ISA");
		gfs_merge_lora_round(wdt, w, ROWS, COLS, RK, 3.0, c, P, q, true, GFS_DT_BF16, got);
		ok &= q != NULL && memcmp(got, want, sizeof(want)) == 0;
	}
	gfs_merge_r32_free(q);
	tap_ok(ok, "bf16 filter: %d x %d at rank %d, W fp32 and bf16, the float64 kernel's bits",
	       ROWS, COLS, RK);

	/* magnitudes where fp32 would underflow or overflow (the rows go to
	 * float64), subnormal factors, and scales from tiny to huge */
	ok = 1;
	for (int m = 0; m < 6; m++) {
		static const int ce[] = { 80, 140, 6, 0, -60, 20 }, re[] = { 30, 6, 140, -70, -60, 6 };
		static const double sc[] = { 1.0, 2.0, 0x1p-130, 0x1p90, 1.0, 0.0 };

		for (int i = 0; i < ROWS * RK; i++)
			c[i] = i % 5 ? ldexp(rnd32(0), -ce[m]) : 0;
		for (int i = 0; i < RK * COLS; i++)
			R[i] = ldexp(rnd32(0), -re[m]);
		gfs_merge_pack(RK, COLS, R, P);
		q = gfs_merge_r32_new(RK, COLS, P);
		for (int i = 0; i < ROWS * COLS; i++) {
			const double x = i % 7 ? rnd32(4) : ldexp(rnd32(0), -130);

			gfs_merge_round(GFS_DT_BF16, &x, w + 2 * i, 1);
		}
		setenv("GATHERFS_MERGE_ISA", "plain", 1);
		gfs_merge_lora_round(GFS_DT_BF16, w, ROWS, COLS, RK, sc[m], c, P, NULL, true,
				     GFS_DT_BF16, want);
		unsetenv("GATHERFS_MERGE_ISA");
		gfs_merge_lora_round(GFS_DT_BF16, w, ROWS, COLS, RK, sc[m], c, P, q, true,
				     GFS_DT_BF16, got);
		ok &= memcmp(got, want, sizeof(want)) == 0;
		gfs_merge_r32_free(q);
	}
	tap_ok(ok, "bf16 filter: products near fp32 underflow and overflow, scales 2^-130 to "
		   "2^90 and 0: the float64 kernel's bits");
}

/* A source of 4096 bytes: float32 values k / 64 - 8 at element k. */
static char tmpdir[] = "/tmp/gfs-t-merge-XXXXXX";
static char srcpath[512];

static void make_source(void)
{
	float buf[1024];
	FILE *f;

	for (int i = 0; i < 1024; i++)
		buf[i] = (float)i / 64 - 8;
	if (!mkdtemp(tmpdir))
		abort();
	snprintf(srcpath, sizeof(srcpath), "%s/src.bin", tmpdir);
	f = fopen(srcpath, "wb");
	if (!f || fwrite(buf, 1, sizeof(buf), f) != sizeof(buf) || fclose(f) != 0)
		abort();
}

/* layout_json(): W [6, 5] at element 0, A [2, 5] at 100, B [6, 2] at 200; op, transpose. */
static void layout_json(char *j, size_t n, const char *op, const char *extra, const char *ashape,
			const char *scale)
{
	const int abytes = strcmp(ashape, "[2, 5]") == 0 ? 40 : strcmp(ashape, "[2, 4]") == 0 ? 32 : 0;
	char apieces[128] = "[]";

	if (abytes)
		snprintf(apieces, sizeof(apieces), "[{\"source\": 0, \"offset\": 400, \"length\": %d}]",
			 abytes);
	snprintf(j, n,
		 "{\"gatherfs_layout\": 3, \"sources\": [{\"path\": \"%s\", \"size\": 4096}],"
		 " \"inputs\": ["
		 "{\"name\": \"W\", \"dtype\": \"float32\", \"shape\": [6, 5], \"pieces\": [{\"source\": 0, \"offset\": 0, \"length\": 120}]},"
		 "{\"name\": \"A\", \"dtype\": \"float32\", \"shape\": %s, \"pieces\": %s},"
		 "{\"name\": \"B\", \"dtype\": \"float32\", \"shape\": [6, 2], \"pieces\": [{\"source\": 0, \"offset\": 800, \"length\": 48}]},"
		 "{\"name\": \"M\", \"dtype\": \"float32\", \"shape\": [6], \"pieces\": [{\"source\": 0, \"offset\": 1200, \"length\": 24}]}],"
		 " \"tensors\": [{\"name\": \"merged\", \"dtype\": \"float32\", \"shape\": [6, 5],"
		 " \"compute\": {\"op\": \"%s\", \"scale\": %s, \"weight\": \"W\", \"lora_A\": \"A\", \"lora_B\": \"B\"%s}}]}",
		 srcpath, ashape, apieces, op, scale, extra);
}

static float src_val(int k)
{
	return (float)k / 64 - 8;
}

static void test_computed(void)
{
	char j[4096];
	gfs_layout *l = NULL, *l2 = NULL;
	gfs_srcset *s = NULL;
	char *text = NULL;
	double want[30];
	int ok = 1;

	for (int i = 0; i < 6; i++)
		for (int jj = 0; jj < 5; jj++) {
			double sum = 0;

			for (int k = 0; k < 2; k++)
				sum += (double)src_val(200 + i * 2 + k) * (double)src_val(100 + k * 5 + jj);
			want[i * 5 + jj] = (double)src_val(i * 5 + jj) + 0.375 * sum;
		}
	layout_json(j, sizeof(j), "lora", "", "[2, 5]", "0.375");
	tap_ok(gfs_layout_from_json(j, strlen(j), "t.json", "/", &l) == GFS_OK, "a computed tensor loads: %s",
	       gfs_errmsg());
	if (!l)
		return;
	tap_ok(l->tensors[0].comp && l->tensors[0].comp->op == GFS_OP_LORA && l->inputs &&
		       l->inputs->ntensors == 4,
	       "it is computed, with its inputs");
	tap_ok(gfs_layout_to_json(l, &text) == GFS_OK && strstr(text, "\"gatherfs_layout\":\t3") &&
		       gfs_layout_from_json(text, strlen(text), "rt.json", "/", &l2) == GFS_OK,
	       "JSON round trip (version 3): %s", gfs_errmsg());
	free(text);
	gfs_layout_free(l2);
	if (gfs_srcset_open(l, &s) == GFS_OK) {
		float got[30];
		uint16_t bf[30];

		/* every offset and length */
		for (size_t off = 0; off < 120 && ok; off += 4)
			for (size_t len = 4; off + len <= 120 && ok; len += 4) {
				ok = gfs_tensor_read(l, s, 0, GFS_DT_INVALID, off, (uint8_t *)got + off, len) ==
				     GFS_OK;
				for (size_t e = off / 4; ok && e < (off + len) / 4; e++)
					ok = got[e] == (float)want[e];
			}
		tap_ok(ok, "reads at every offset give the float64 merge rounded once to fp32");
		ok = gfs_tensor_read(l, s, 0, GFS_DT_BF16, 0, bf, sizeof(bf)) == GFS_OK;
		for (int e = 0; ok && e < 30; e++) {
			uint8_t o[2];

			gfs_merge_round(GFS_DT_BF16, &want[e], o, 1);
			ok = bf[e] == (uint16_t)(o[0] | o[1] << 8);
		}
		tap_ok(ok, "-o dtype=bf16: rounded once from float64");
		gfs_srcset_close(s);
	}
	gfs_layout_free(l);

	layout_json(j, sizeof(j), "lora", "", "[2, 4]", "0.375");
	tap_ok(gfs_layout_from_json(j, strlen(j), "t.json", "/", &l) == GFS_ERR_FORMAT &&
		       strstr(gfs_errmsg(), "do not fit"),
	       "a lora_A of the wrong shape is refused: %s", gfs_errmsg());
	layout_json(j, sizeof(j), "lora", "", "[0, 5]", "0.375");
	tap_ok(gfs_layout_from_json(j, strlen(j), "t.json", "/", &l) == GFS_ERR_FORMAT &&
		       strstr(gfs_errmsg(), "rank 0"),
	       "rank 0 is refused: %s", gfs_errmsg());
	layout_json(j, sizeof(j), "lora", "", "[2, 5]", "1e999");
	tap_ok(gfs_layout_from_json(j, strlen(j), "t.json", "/", &l) == GFS_ERR_FORMAT &&
		       strstr(gfs_errmsg(), "not finite"),
	       "an infinite scale is refused: %s", gfs_errmsg());
	layout_json(j, sizeof(j), "dora", "", "[2, 5]", "1");
	tap_ok(gfs_layout_from_json(j, strlen(j), "t.json", "/", &l) == GFS_ERR_FORMAT &&
		       strstr(gfs_errmsg(), "missing operand magnitude"),
	       "dora without a magnitude is refused: %s", gfs_errmsg());
	layout_json(j, sizeof(j), "dora", ", \"magnitude\": \"M\"", "[2, 5]", "1");
	tap_ok(gfs_layout_from_json(j, strlen(j), "t.json", "/", &l) == GFS_OK, "dora with one: %s",
	       gfs_errmsg());
	gfs_layout_free(l);
	layout_json(j, sizeof(j), "lora", ", \"magnitude\": \"nope\"", "[2, 5]", "1");
	tap_ok(gfs_layout_from_json(j, strlen(j), "t.json", "/", &l) == GFS_ERR_FORMAT,
	       "an operand that is no input is refused: %s", gfs_errmsg());
	layout_json(j, sizeof(j), "mystery", "", "[2, 5]", "1");
	tap_ok(gfs_layout_from_json(j, strlen(j), "t.json", "/", &l) == GFS_ERR_FORMAT,
	       "an unknown op is refused: %s", gfs_errmsg());
	snprintf(j, sizeof(j), "{\"gatherfs_layout\": 2, \"sources\": [], \"inputs\": [], \"tensors\": []}");
	tap_ok(gfs_layout_from_json(j, strlen(j), "t.json", "/", &l) == GFS_ERR_FORMAT,
	       "inputs in a version-2 layout are refused: %s", gfs_errmsg());
}

int main(void)
{
	test_rounding();
	test_update();
	test_round_pass();
	test_bf16_filter();
	make_source();
	test_computed();
	unlink(srcpath);
	rmdir(tmpdir);
	return tap_done();
}
