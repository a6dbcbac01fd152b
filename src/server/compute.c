/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — computed tensors on read: low-rank factors prepared once per
 * tensor, row blocks computed on demand and kept in a bounded LRU cache.
 */
#include "config.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/server/compute.h"
#include "gatherfs/server/integrity.h"
#include "gatherfs/arith/merge.h"
#include "gatherfs/util/pfor.h"

enum { CSLOTS = 256, CPENDING = 64, CSPARE = 8 };

/* What every block of one computed tensor needs. */
typedef struct prep {
	size_t rows, cols, r, rb; /* shape as [rows, cols], rank, rows per block */
	bool exact;               /* every product C[i][k] R[k][j] is exact in float64 */
	double *C;                /* [rows, r] */
	double *R;                /* [r, cols], packed (gfs_merge_pack()) */
	gfs_merge_r32 *R32;       /* R for the bf16 filter (exact products), or NULL */
	double *m;                /* DoRA, norms per row: the magnitude [rows] */
	double *colf;             /* DoRA, norms per column: m[j] / ||V[:, j]|| [cols] */
	/* DEQUANT: rows counts every matrix [M, cols] of the weight */
	float *S;                 /* the scale grid as float32 [rows / M * gm, gn] */
	float lut[256];           /* float32 of each FP8 byte of the weight (exact) */
	size_t M, gm, gn, bm, bn; /* rows per matrix, the grid, the block */
} prep;

typedef struct cslot {
	uint8_t *data; /* NULL: free */
	size_t len;
	size_t ti;
	uint64_t block;
	gfs_dtype out;
	uint64_t used;
} cslot;

/* Working memory of one block's computation: the float64 block and the raw W rows. */
typedef struct scratch {
	double *v;
	uint8_t *raw;
	size_t cap; /* elements of each */
} scratch;

/* A block being computed by some thread: others wait for it. */
typedef struct cpend {
	bool busy;
	size_t ti;
	uint64_t block;
	gfs_dtype out;
} cpend;

struct gfs_ccache {
	const gfs_layout *l;
	pthread_mutex_t mu;
	pthread_cond_t done; /* a pending block was finished (or given up) */
	prep **prep; /* per tensor, NULL until first read */
	cslot slot[CSLOTS];
	cpend pend[CPENDING];
	scratch *spare[CSPARE]; /* scratch kept for the next block */
	size_t nspare;
	gfs_pool *pool; /* the blocks of one read are computed on it */
	bool pooled;    /* pool made (or tried): on the first read, after any fork */
	uint64_t bytes, budget, tick;
};

gfs_err gfs_ccache_new(const gfs_layout *l, gfs_ccache **out)
{
	gfs_ccache *c = calloc(1, sizeof(*c));
	const char *env = getenv("GATHERFS_MERGE_CACHE_MB");

	if (!c)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	c->prep = gfs_calloc(l->ntensors ? l->ntensors : 1, sizeof(*c->prep));
	if (!c->prep) {
		free(c);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	c->l = l;
	c->budget = GFS_CCACHE_BUDGET;
	if (env && *env) {
		char *end;
		const unsigned long long mb = strtoull(env, &end, 10);

		if (*end == '\0' && mb <= ((uint64_t)1 << 20))
			c->budget = (uint64_t)mb << 20;
	}
	(void)pthread_mutex_init(&c->mu, NULL);
	(void)pthread_cond_init(&c->done, NULL);
	*out = c;
	return GFS_OK;
}

static void prep_free(prep *p)
{
	if (!p)
		return;
	free(p->C);
	free(p->R);
	gfs_merge_r32_free(p->R32);
	free(p->m);
	free(p->colf);
	free(p->S);
	free(p);
}

static void scratch_free(scratch *w)
{
	if (!w)
		return;
	free(w->v);
	free(w->raw);
	free(w);
}

/* scratch_get(): working memory for n elements (a spare one if c has it), or NULL. */
static scratch *scratch_get(gfs_ccache *c, size_t n)
{
	scratch *w = NULL;

	(void)pthread_mutex_lock(&c->mu);
	if (c->nspare)
		w = c->spare[--c->nspare];
	(void)pthread_mutex_unlock(&c->mu);
	if (!w && !(w = calloc(1, sizeof(*w))))
		return NULL;
	if (w->cap < n) {
		const size_t nb = n <= SIZE_MAX / sizeof(double) ? n * sizeof(double) : 0;

		free(w->v);
		free(w->raw);
		w->v = nb ? gfs_iobuf(nb) : NULL;
		w->raw = nb ? gfs_iobuf(nb) : NULL; /* the widest input dtype */
		w->cap = w->v && w->raw ? n : 0;
		if (!w->cap) {
			scratch_free(w);
			return NULL;
		}
	}
	return w;
}

/* scratch_put(): keep w for the next block (at most CSPARE are kept). */
static void scratch_put(gfs_ccache *c, scratch *w)
{
	(void)pthread_mutex_lock(&c->mu);
	if (c->nspare < CSPARE) {
		c->spare[c->nspare++] = w;
		w = NULL;
	}
	(void)pthread_mutex_unlock(&c->mu);
	scratch_free(w);
}

void gfs_ccache_free(gfs_ccache *c)
{
	if (!c)
		return;
	gfs_pool_free(c->pool);
	for (size_t i = 0; i < c->nspare; i++)
		scratch_free(c->spare[i]);
	for (size_t i = 0; i < c->l->ntensors; i++)
		prep_free(c->prep[i]);
	for (size_t i = 0; i < CSLOTS; i++)
		free(c->slot[i].data);
	free(c->prep);
	(void)pthread_mutex_destroy(&c->mu);
	(void)pthread_cond_destroy(&c->done);
	free(c);
}

/* read_input(): all of input tensor in widened to float64 (a new array in *out). */
static gfs_err read_input(const gfs_layout *l, const gfs_srcset *s, const gfs_tensor *in,
			  double **out)
{
	double *d = gfs_calloc(in->numel ? in->numel : 1, sizeof(*d));
	void *raw = gfs_iobuf(in->nbytes ? (size_t)in->nbytes : 1);
	gfs_err err = GFS_OK;

	if (!d || !raw)
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory (input %s)", in->name);
	if (!err)
		err = gfs_tensor_read_raw(l, s, in, 0, raw, (size_t)in->nbytes);
	if (!err)
		gfs_merge_widen(in->dtype, raw, d, (size_t)in->numel);
	free(raw);
	if (err) {
		free(d);
		return err;
	}
	*out = d;
	return GFS_OK;
}

/* transpose(): a new [cols, rows] copy of the [rows, cols] matrix a (freed). */
static double *transpose(double *a, size_t rows, size_t cols)
{
	double *t = gfs_calloc(rows * cols + 1, sizeof(*t));

	if (t)
		for (size_t i = 0; i < rows; i++)
			for (size_t j = 0; j < cols; j++)
				t[j * rows + i] = a[i * cols + j];
	free(a);
	return t;
}

/* pack(): a new gfs_merge_pack() of R [r, cols] (freed), or NULL. */
static double *pack(double *R, size_t r, size_t cols)
{
	double *P = gfs_calloc(gfs_merge_packed_len(r, cols) + 1, sizeof(*P));

	if (P)
		gfs_merge_pack(r, cols, R, P);
	free(R);
	return P;
}

static gfs_err compute_block_f64(const gfs_layout *l, const gfs_srcset *s, const gfs_tensor *t,
				 const prep *p, uint64_t block, bool dora, scratch *w);
static void dequant_rows(const prep *p, size_t i0, size_t n, const uint8_t *q, gfs_dtype out,
			 uint8_t *data);

/*
 * read_w(): rows [i0, i0 + n) of the weight of LORA/DORA tensor t into
 * w->raw, in dtype *wdt: as stored, or an FP8 weight (with a scale operand)
 * dequantized to float32 (its FP8 bytes read behind the float32 values,
 * which overtake none of them).
 */
static gfs_err read_w(const gfs_layout *l, const gfs_srcset *s, const gfs_tensor *t,
		      const prep *p, size_t i0, size_t n, scratch *w, gfs_dtype *wdt)
{
	const gfs_compute *c = t->comp;
	const gfs_tensor *W = &l->inputs->tensors[c->in[GFS_OPIN_W]];
	const size_t ne = n * p->cols;
	gfs_err err;

	assert(ne <= w->cap);
	if (c->in[GFS_OPIN_S] < 0) {
		*wdt = W->dtype;
		return gfs_tensor_read_raw(l, s, W, (uint64_t)i0 * p->cols * gfs_dtype_size(W->dtype),
					   w->raw, ne * gfs_dtype_size(W->dtype));
	}
	*wdt = GFS_DT_F32;
	err = gfs_tensor_read_raw(l, s, W, (uint64_t)i0 * p->cols, w->raw + 4 * ne, ne);
	if (!err)
		dequant_rows(p, i0, n, w->raw + 4 * ne, GFS_DT_F32, w->raw);
	return err;
}

/*
 * check_inputs(): the checksummed records holding bytes of t's inputs are
 * checked and good (integrity.h): a corrupt one is GFS_ERR_IO naming it, so
 * no merged byte is computed from it.
 */
static gfs_err check_inputs(const gfs_layout *l, const gfs_srcset *s, const gfs_tensor *t)
{
	size_t n = 0, cap = 0;
	uint32_t *recs = NULL;
	gfs_err err = GFS_OK;

	for (int k = 0; k < GFS_OPIN_COUNT && !err; k++) {
		const gfs_tensor *in = t->comp->in[k] >= 0 ? &l->inputs->tensors[t->comp->in[k]] : NULL;

		for (size_t p = 0; in && p < in->npieces && !err; p++) {
			if (in->slots[p].rec == GFS_NO_RECORD)
				continue;
			if (!gfs_grow((void **)&recs, &cap, n, sizeof(*recs), 8))
				err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
			else
				recs[n++] = in->slots[p].rec;
		}
	}
	if (!err && n)
		err = gfs_integrity_require(l, s, recs, n, 0);
	free(recs);
	return err;
}

/* bits_f32(): the float32 with bits u. */
static float bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/*
 * prep_dequant(): the scale grid of DEQUANT tensor t as float32 (exact from
 * F32, BF16 and F8_E8M0) and the weight's FP8 table.
 */
static gfs_err prep_dequant(const gfs_layout *l, const gfs_srcset *s, const gfs_tensor *t,
			    prep *p)
{
	const gfs_compute *c = t->comp;
	const gfs_tensor *W = &l->inputs->tensors[c->in[GFS_OPIN_W]];
	const gfs_tensor *S = &l->inputs->tensors[c->in[GFS_OPIN_S]];
	uint8_t *raw = gfs_iobuf(S->nbytes ? (size_t)S->nbytes : 1);
	gfs_err err = GFS_OK;

	p->cols = (size_t)t->shape[t->ndim - 1];
	p->M = (size_t)t->shape[t->ndim - 2];
	p->rows = p->cols ? (size_t)(t->numel / p->cols) : 0;
	p->bm = c->block[0];
	p->bn = c->block[1];
	p->gm = p->M / p->bm + (p->M % p->bm != 0);
	p->gn = p->cols / p->bn + (p->cols % p->bn != 0);
	for (int b = 0; b < 256; b++)
		p->lut[b] = gfs_fp8_to_f32(W->dtype, (uint8_t)b);
	p->S = gfs_calloc(S->numel ? (size_t)S->numel : 1, sizeof(*p->S));
	if (!raw || !p->S)
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory (scale %s)", S->name);
	if (!err)
		err = gfs_tensor_read_raw(l, s, S, 0, raw, (size_t)S->nbytes);
	for (size_t i = 0; !err && i < S->numel; i++)
		p->S[i] = S->dtype == GFS_DT_F8_E8M0 ? gfs_fp8_to_f32(S->dtype, raw[i])
			: S->dtype == GFS_DT_BF16 ? bits_f32((uint32_t)gfs_le16(raw + 2 * i) << 16)
			: bits_f32(gfs_le32(raw + 4 * i));
	free(raw);
	return err;
}

/* build_prep(): the factors of computed tensor t, its inputs' records checked first. */
static gfs_err build_prep(const gfs_layout *l, const gfs_srcset *s, const gfs_tensor *t,
			  prep **out)
{
	const gfs_compute *c = t->comp;
	const gfs_tensor *in = l->inputs->tensors;
	const bool tr = c->flags & GFS_OPF_T;
	prep *p;
	gfs_err err = check_inputs(l, s, t);

	if (err)
		return gfs_fail_prefix(err, "tensor %s", t->name);
	p = calloc(1, sizeof(*p));
	if (!p)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (c->op == GFS_OP_DEQUANT) {
		err = prep_dequant(l, s, t, p);
		p->rb = p->cols == 0 || p->cols >= GFS_CBLOCK_ELEMS ? 1 : GFS_CBLOCK_ELEMS / p->cols;
		if (err) {
			prep_free(p);
			return gfs_fail_prefix(err, "tensor %s", t->name);
		}
		*out = p;
		return GFS_OK;
	}
	if (c->op == GFS_OP_LORA_BIAS) {
		p->rows = 1;
		p->cols = (size_t)t->shape[0];
		p->r = 1;
		p->exact = true; /* 1 * b */
		p->C = malloc(sizeof(double));
		if (!p->C)
			err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		else
			p->C[0] = 1.0; /* W + s * (1 * b): the product is exact */
		if (!err)
			err = read_input(l, s, &in[c->in[GFS_OPIN_A]], &p->R);
	} else {
		const gfs_tensor *A = &in[c->in[GFS_OPIN_A]], *B = &in[c->in[GFS_OPIN_B]];

		p->rows = (size_t)t->shape[0];
		p->cols = (size_t)t->shape[1];
		p->r = (size_t)A->shape[0];
		/* at most 24 significant bits each: a product has at most 48 */
		p->exact = gfs_dtype_size(A->dtype) <= 4 && gfs_dtype_size(B->dtype) <= 4;
		if (!tr) { /* v[i][j] += s * sum_k B[i][k] A[k][j] */
			err = read_input(l, s, B, &p->C);
			if (!err)
				err = read_input(l, s, A, &p->R);
		} else { /* v[i][j] += s * sum_k A[k][i] B[j][k] */
			err = read_input(l, s, A, &p->C);
			if (!err && !(p->C = transpose(p->C, p->r, p->rows)))
				err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
			if (!err)
				err = read_input(l, s, B, &p->R);
			if (!err && !(p->R = transpose(p->R, p->cols, p->r)))
				err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		}
		if (!err && c->op == GFS_OP_DORA)
			err = read_input(l, s, &in[c->in[GFS_OPIN_M]], &p->m);
	}
	if (!err && c->in[GFS_OPIN_S] >= 0) /* an FP8 weight: dequantized first */
		err = prep_dequant(l, s, t, p);
	if (!err && !(p->R = pack(p->R, p->r, p->cols)))
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (!err && p->exact && c->op == GFS_OP_LORA)
		p->R32 = gfs_merge_r32_new(p->r, p->cols, p->R); /* NULL: no filter, same bits */
	p->rb = p->cols == 0 || p->cols >= GFS_CBLOCK_ELEMS ? 1 : GFS_CBLOCK_ELEMS / p->cols;
	if (!err && c->op == GFS_OP_DORA && tr) {
		/* one norm per column: a pass over the whole tensor */
		const size_t nb = (p->rows + p->rb - 1) / p->rb;
		scratch w = { .v = gfs_calloc(p->rb * p->cols, sizeof(double)),
			      .raw = gfs_calloc(p->rb * p->cols, sizeof(double)),
			      .cap = p->rb * p->cols };

		p->colf = gfs_calloc(p->cols, sizeof(*p->colf));
		if (!w.v || !w.raw || !p->colf)
			err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		for (size_t b = 0; b < nb && !err; b++) {
			const size_t i0 = b * p->rb;
			const size_t n = p->rows - i0 < p->rb ? p->rows - i0 : p->rb;

			err = compute_block_f64(l, s, t, p, b, false, &w);
			if (!err)
				gfs_merge_sumsq_cols(n, p->cols, w.v, p->colf);
		}
		for (size_t j = 0; !err && j < p->cols; j++)
			p->colf[j] = p->m[j] / sqrt(p->colf[j]);
		free(w.v);
		free(w.raw);
	}
	if (err) {
		prep_free(p);
		return gfs_fail_prefix(err, "tensor %s", t->name);
	}
	*out = p;
	return GFS_OK;
}

/* get_prep(): the factors of tensor ti, built on first use. */
static gfs_err get_prep(const gfs_layout *l, const gfs_srcset *s, gfs_ccache *c, size_t ti,
			const prep **out)
{
	prep *p;
	gfs_err err;

	(void)pthread_mutex_lock(&c->mu);
	p = c->prep[ti];
	(void)pthread_mutex_unlock(&c->mu);
	if (p) {
		*out = p;
		return GFS_OK;
	}
	err = build_prep(l, s, &l->tensors[ti], &p);
	if (err)
		return err;
	(void)pthread_mutex_lock(&c->mu);
	if (c->prep[ti]) { /* another thread was first */
		prep_free(p);
		p = c->prep[ti];
	} else {
		c->prep[ti] = p;
	}
	(void)pthread_mutex_unlock(&c->mu);
	*out = p;
	return GFS_OK;
}

/*
 * compute_block_f64(): block `block` of t in float64 into w->v (rb * cols
 * elements, as w->raw): W + s * delta, and with dora the DoRA scaling.
 */
static gfs_err compute_block_f64(const gfs_layout *l, const gfs_srcset *s, const gfs_tensor *t,
				 const prep *p, uint64_t block, bool dora, scratch *w)
{
	const gfs_compute *c = t->comp;
	const size_t i0 = (size_t)block * p->rb;
	const size_t n = p->rows - i0 < p->rb ? p->rows - i0 : p->rb;
	double *v = w->v;
	gfs_dtype wdt;
	gfs_err err = read_w(l, s, t, p, i0, n, w, &wdt);

	if (!err) {
		gfs_merge_widen(wdt, w->raw, v, n * p->cols);
		gfs_merge_lora_rows(n, p->cols, p->r, c->scale, p->C + i0 * p->r, p->R, v,
				    p->exact);
		if (dora && p->colf)
			gfs_merge_scale_cols(n, p->cols, p->colf, v);
		else if (dora)
			gfs_merge_dora_rows(n, p->cols, p->m + i0, v);
	}
	return err;
}

/*
 * dequant_rows(): rows [i0, i0 + n) of DEQUANT tensor t from their FP8
 * bytes q: float32(q) * float32(scale of its block), a float32 product,
 * rounded once to dtype out into data.
 */
static void dequant_rows(const prep *p, size_t i0, size_t n, const uint8_t *q, gfs_dtype out,
			 uint8_t *data)
{
	const size_t os = gfs_dtype_size(out);

	for (size_t i = i0; i < i0 + n; i++) {
		const float *srow = p->S + ((i / p->M) * p->gm + (i % p->M) / p->bm) * p->gn;

		for (size_t j0 = 0; j0 < p->cols; j0 += p->bn) {
			const size_t j1 = p->cols - j0 < p->bn ? p->cols : j0 + p->bn;
			const float sc = srow[j0 / p->bn];

			switch (out) {
			case GFS_DT_BF16:
				for (size_t j = j0; j < j1; j++) {
					const uint16_t h = gfs_bf16_round(p->lut[q[j]] * sc);

					data[2 * j] = (uint8_t)h;
					data[2 * j + 1] = (uint8_t)(h >> 8);
				}
				break;
			default:
				for (size_t j = j0; j < j1; j++)
					gfs_f32_round(out, p->lut[q[j]] * sc, data + os * j);
			}
		}
		q += p->cols;
		data += os * p->cols;
	}
}

/*
 * compute_block(): block `block` of t rounded to dtype out into data:
 * compute_block_f64() then gfs_merge_round(), in one pass without DoRA.
 */
static gfs_err compute_block(const gfs_layout *l, const gfs_srcset *s, const gfs_tensor *t,
			     const prep *p, uint64_t block, gfs_dtype out, scratch *w, void *data)
{
	const gfs_compute *c = t->comp;
	const gfs_tensor *W = &l->inputs->tensors[c->in[GFS_OPIN_W]];
	const size_t i0 = (size_t)block * p->rb;
	const size_t n = p->rows - i0 < p->rb ? p->rows - i0 : p->rb;
	gfs_dtype wdt;
	gfs_err err;

	if (c->op == GFS_OP_DEQUANT) {
		assert(n * p->cols <= w->cap);
		err = gfs_tensor_read_raw(l, s, W, (uint64_t)i0 * p->cols, w->raw, n * p->cols);
		if (!err)
			dequant_rows(p, i0, n, w->raw, out, data);
		return err;
	}
	if (c->op == GFS_OP_DORA) {
		err = compute_block_f64(l, s, t, p, block, true, w);
		if (!err)
			gfs_merge_round(out, w->v, data, n * p->cols);
		return err;
	}
	err = read_w(l, s, t, p, i0, n, w, &wdt);
	if (!err)
		gfs_merge_lora_round(wdt, w->raw, n, p->cols, p->r, c->scale,
				     p->C + i0 * p->r, p->R, p->R32, p->exact, out, data);
	return err;
}

/* slot_copy(): with c->mu held, copy [a, b) of a cached block; true on a hit. */
static bool slot_copy(gfs_ccache *c, size_t ti, uint64_t block, gfs_dtype out, size_t a,
		      size_t b, uint8_t *buf)
{
	for (size_t i = 0; i < CSLOTS; i++) {
		cslot *z = &c->slot[i];

		if (z->data && z->ti == ti && z->block == block && z->out == out) {
			assert(b <= z->len);
			memcpy(buf, z->data + a, b - a);
			z->used = ++c->tick;
			return true;
		}
	}
	return false;
}

/*
 * cache_get(): copy [a, b) of a block out of the cache (true), waiting while
 * another thread computes it; on a miss (false), *claim is the pending entry
 * this thread now owns (NULL if none was free: compute without one).
 */
static bool cache_get(gfs_ccache *c, size_t ti, uint64_t block, gfs_dtype out, size_t a,
		      size_t b, uint8_t *buf, cpend **claim)
{
	*claim = NULL;
	(void)pthread_mutex_lock(&c->mu);
	for (;;) {
		cpend *busy = NULL, *free_pend = NULL;

		if (slot_copy(c, ti, block, out, a, b, buf)) {
			(void)pthread_mutex_unlock(&c->mu);
			return true;
		}
		for (size_t i = 0; i < CPENDING && !busy; i++) {
			cpend *p = &c->pend[i];

			if (p->busy && p->ti == ti && p->block == block && p->out == out)
				busy = p;
			else if (!p->busy && !free_pend)
				free_pend = p;
		}
		if (!busy) {
			if (free_pend) {
				*free_pend = (cpend){ .busy = true, .ti = ti, .block = block, .out = out };
				*claim = free_pend;
			}
			(void)pthread_mutex_unlock(&c->mu);
			return false;
		}
		(void)pthread_cond_wait(&c->done, &c->mu);
	}
}

/* cache_release(): the owner of claim is done with it (computed or failed). */
static void cache_release(gfs_ccache *c, cpend *claim)
{
	if (!claim)
		return;
	(void)pthread_mutex_lock(&c->mu);
	claim->busy = false;
	(void)pthread_cond_broadcast(&c->done);
	(void)pthread_mutex_unlock(&c->mu);
}

/* cache_put(): keep data (len bytes) as block `block` of ti in dtype out. */
static void cache_put(gfs_ccache *c, size_t ti, uint64_t block, gfs_dtype out, uint8_t *data,
		      size_t len)
{
	cslot *free_slot;

	if (len > c->budget) {
		free(data);
		return;
	}
	(void)pthread_mutex_lock(&c->mu);
	for (;;) {
		cslot *lru = NULL;

		free_slot = NULL;
		for (size_t i = 0; i < CSLOTS; i++) {
			cslot *z = &c->slot[i];

			if (z->data && z->ti == ti && z->block == block && z->out == out) {
				(void)pthread_mutex_unlock(&c->mu); /* another thread was first */
				free(data);
				return;
			}
			if (!z->data && !free_slot)
				free_slot = z;
			if (z->data && (!lru || z->used < lru->used))
				lru = z;
		}
		if (free_slot && c->bytes + len <= c->budget)
			break;
		assert(lru);
		c->bytes -= lru->len;
		free(lru->data);
		memset(lru, 0, sizeof(*lru));
	}
	*free_slot = (cslot){ .data = data, .len = len, .ti = ti, .block = block, .out = out,
			      .used = ++c->tick };
	c->bytes += len;
	(void)pthread_mutex_unlock(&c->mu);
}

/* One read of a computed tensor, for read_block(). */
typedef struct rdctx {
	const gfs_layout *l;
	const gfs_srcset *s;
	gfs_ccache *c;
	size_t ti;
	const prep *p;
	gfs_dtype out;
	uint64_t off, end; /* the tensor bytes read, in dtype out */
	uint64_t first;    /* their first block */
	uint64_t bbytes;   /* bytes per block */
	uint8_t *buf;
} rdctx;

/*
 * read_block(): the bytes of x's k-th block into x->buf: from the cache, or
 * computed (then cached unless the read takes the block whole).
 */
static gfs_err read_block(void *arg, size_t k)
{
	const rdctx *x = arg;
	const prep *p = x->p;
	const gfs_tensor *t = &x->l->tensors[x->ti];
	const uint64_t block = x->first + k, start = block * x->bbytes;
	const size_t n = (size_t)((block + 1) * p->rb <= p->rows ? p->rb : p->rows - block * p->rb);
	const size_t blen = n * p->cols * gfs_dtype_size(x->out);
	const uint64_t lo = x->off > start ? x->off : start;
	const uint64_t hi = x->end < start + blen ? x->end : start + blen;
	const size_t a = (size_t)(lo - start), b = (size_t)(hi - start);
	uint8_t *dst = x->buf + (lo - x->off);
	cpend *claim;

	if (!cache_get(x->c, x->ti, block, x->out, a, b, dst, &claim)) {
		/* a block this read takes whole goes straight to it, uncached */
		const bool whole = a == 0 && b == blen;
		scratch *w = scratch_get(x->c, n * p->cols);
		uint8_t *data = whole ? dst : malloc(blen);
		gfs_err err = w && data ? GFS_OK : gfs_fail(GFS_ERR_NOMEM, "out of memory");

		if (!err)
			err = compute_block(x->l, x->s, t, p, block, x->out, w, data);
		if (!err && !whole) {
			memcpy(dst, data + a, b - a);
			cache_put(x->c, x->ti, block, x->out, data, blen);
			data = NULL;
		}
		cache_release(x->c, claim);
		if (w)
			scratch_put(x->c, w);
		if (!whole)
			free(data);
		if (err)
			return gfs_fail_prefix(err, "tensor %s", t->name);
	}
	return GFS_OK;
}

gfs_err gfs_compute_read(const gfs_layout *l, const gfs_srcset *s, gfs_ccache *c, size_t ti,
			 gfs_dtype out, uint64_t off, void *buf, size_t len)
{
	const gfs_tensor *t = &l->tensors[ti];
	const size_t os = gfs_dtype_size(out);
	rdctx x = { .l = l, .s = s, .c = c, .ti = ti, .out = out, .off = off, .end = off + len,
		    .buf = buf };
	gfs_err err;

	assert(t->comp && gfs_dtype_is_float(out) && off + len <= t->numel * os);
	if (len == 0)
		return GFS_OK;
	err = get_prep(l, s, c, ti, &x.p);
	if (err)
		return err;
	(void)pthread_mutex_lock(&c->mu);
	if (!c->pooled) { /* without a pool (out of memory): one block after the other */
		(void)gfs_pool_new(&c->pool);
		c->pooled = true;
	}
	(void)pthread_mutex_unlock(&c->mu);
	x.bbytes = (uint64_t)x.p->rb * x.p->cols * os;
	x.first = off / x.bbytes;
	return gfs_pool_for(c->pool, (size_t)((x.end - 1) / x.bbytes - x.first + 1), read_block, &x);
}
