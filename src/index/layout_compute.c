/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — computed tensors in the layout index: their inputs table and
 * the checks of each operation against its operands (layout.h).
 */
#include "config.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/index/layout.h"

static const char *const op_names[] = {
	[GFS_OP_LORA] = "lora", [GFS_OP_LORA_BIAS] = "lora_bias", [GFS_OP_DORA] = "dora",
	[GFS_OP_DEQUANT] = "dequant",
};

const char *gfs_op_name(gfs_op op)
{
	assert(op >= GFS_OP_LORA && op <= GFS_OP_DEQUANT);
	return op_names[op];
}

gfs_op gfs_op_parse(const char *s)
{
	for (int op = GFS_OP_LORA; op <= GFS_OP_DEQUANT; op++)
		if (strcmp(s, op_names[op]) == 0)
			return (gfs_op)op;
	return 0;
}

/* sync_sources(): give l's inputs table the sources l has (it may have fewer). */
static gfs_err sync_sources(gfs_layout *l, const char *label)
{
	gfs_layout *in = l->inputs;

	for (size_t i = 0; i < l->nsources; i++) {
		uint32_t idx;
		gfs_err err;

		if (i < in->nsources) {
			if (strcmp(in->sources[i].path, l->sources[i].path) != 0)
				return gfs_fail(GFS_ERR_FORMAT, "%s: the inputs table has its own sources",
						label);
			continue;
		}
		err = gfs_layout_add_source(in, l->sources[i].path, l->sources[i].size, &idx);
		if (err)
			return err;
		if (idx != i)
			return gfs_fail(GFS_ERR_FORMAT, "%s: source %s is listed twice", label,
					l->sources[i].path);
	}
	if (in->nsources != l->nsources)
		return gfs_fail(GFS_ERR_FORMAT, "%s: the inputs table has its own sources", label);
	return GFS_OK;
}

gfs_err gfs_layout_add_input(gfs_layout *l, const char *name, gfs_dtype dtype,
			     uint32_t ndim, const uint64_t *shape, size_t *idx)
{
	gfs_err err;

	assert(!l->finished);
	if (!l->inputs) {
		err = gfs_layout_new("inputs", l->base_dir, &l->inputs);
		if (err)
			return err;
	}
	err = sync_sources(l, "inputs");
	return err ? err : gfs_layout_add_tensor(l->inputs, name, dtype, ndim, shape, idx);
}

gfs_err gfs_layout_finish_inputs(gfs_layout *l, const char *label)
{
	gfs_layout *in = l->inputs;
	gfs_err err;

	if (!in || in->finished)
		return GFS_OK;
	err = sync_sources(l, label);
	if (err)
		return err;
	for (size_t i = 0; i < in->ntensors; i++)
		if (in->tensors[i].alias_of >= 0 || in->tensors[i].comp)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: input %s: inputs must be tensors with data", label,
					in->tensors[i].name);
	return gfs_layout_finish(in, label);
}

gfs_err gfs_layout_set_compute(gfs_layout *l, size_t ti, const gfs_compute *c)
{
	gfs_tensor *t;

	assert(!l->finished && ti < l->ntensors);
	t = &l->tensors[ti];
	if (t->npieces || t->alias_of >= 0)
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: a computed tensor has no pieces",
				t->name);
	if (!t->comp) {
		t->comp = malloc(sizeof(*t->comp));
		if (!t->comp)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	*t->comp = *c;
	return GFS_OK;
}

/* input(): operand k of c, or NULL if unused or out of range. */
static const gfs_tensor *input(const gfs_layout *l, const gfs_compute *c, int k)
{
	if (!l->inputs || c->in[k] < 0 || (uint64_t)c->in[k] >= l->inputs->ntensors)
		return NULL;
	return &l->inputs->tensors[c->in[k]];
}

/*
 * check_dequant(): DEQUANT's weight (F8_E4M3 or F8_E5M2, 2-D or more, the
 * tensor's shape) and scale (F32, BF16 or F8_E8M0, the block grid).
 */
static gfs_err check_dequant(const gfs_tensor *t, const gfs_tensor *W, const gfs_tensor *S,
			     const gfs_compute *c, const char *label)
{
	uint64_t grid[GFS_MAX_DIMS], gnumel = 1;

	if (W->dtype != GFS_DT_F8_E4M3 && W->dtype != GFS_DT_F8_E5M2)
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: weight %s is %s, not F8_E4M3 or F8_E5M2",
				label, t->name, W->name, gfs_dtype_name(W->dtype));
	if (S->dtype != GFS_DT_F32 && S->dtype != GFS_DT_BF16 && S->dtype != GFS_DT_F8_E8M0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: scale %s is %s, not F32, BF16 or F8_E8M0",
				label, t->name, S->name, gfs_dtype_name(S->dtype));
	if (t->ndim < 2 || W->ndim != t->ndim ||
	    memcmp(W->shape, t->shape, t->ndim * sizeof(t->shape[0])))
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: its shape differs from its weight %s (at least 2-D)",
				label, t->name, W->name);
	if (c->block[0] == 0 || c->block[1] == 0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: block size %ux%u", label, t->name,
				c->block[0], c->block[1]);
	for (uint32_t d = 0; d < t->ndim; d++) {
		const uint64_t n = t->shape[d];

		grid[d] = d == t->ndim - 2 ? n / c->block[0] + (n % c->block[0] != 0)
			: d == t->ndim - 1 ? n / c->block[1] + (n % c->block[1] != 0) : n;
		gnumel *= grid[d]; /* at most numel: no overflow */
	}
	if (S->ndim == t->ndim ? memcmp(S->shape, grid, t->ndim * sizeof(grid[0])) != 0
			       : S->ndim > 1 || gnumel != 1 || S->numel != 1)
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: scale %s is not the %ux%u block grid of its weight",
				label, t->name, S->name, c->block[0], c->block[1]);
	return GFS_OK;
}

/* check_one(): the operands of computed tensor t. */
static gfs_err check_one(const gfs_layout *l, const gfs_tensor *t, const char *label)
{
	static const char *const roles[] = { "weight", "lora_A", "lora_B", "magnitude", "weight_scale" };
	const gfs_compute *c = t->comp;
	const bool tr = c->flags & GFS_OPF_T;
	const bool dq = c->op == GFS_OP_DEQUANT;
	const gfs_tensor *in[GFS_OPIN_COUNT];
	const int need = c->op == GFS_OP_DORA ? 4 : c->op == GFS_OP_LORA ? 3 : 2;

	if (c->op < GFS_OP_LORA || c->op > GFS_OP_DEQUANT)
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: unknown operation", label, t->name);
	if (!isfinite(c->scale))
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: the scale is not finite (%g)",
				label, t->name, c->scale);
	if (c->flags & ~GFS_OPF_T || (dq && c->flags))
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: unknown flags", label, t->name);
	/* LORA, DORA: an FP8 weight comes with its scale (and block), as DEQUANT's */
	const bool fp8w = dq || (c->op != GFS_OP_LORA_BIAS && input(l, c, GFS_OPIN_S));

	if (!fp8w && (c->block[0] || c->block[1]))
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: %s has no block size", label,
				t->name, gfs_op_name(c->op));
	for (int k = 0; k < GFS_OPIN_COUNT; k++) {
		const bool want = dq ? k == GFS_OPIN_W || k == GFS_OPIN_S
				     : k < need || (fp8w && k == GFS_OPIN_S);

		in[k] = input(l, c, k);
		if (want != (in[k] != NULL))
			return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: %s: %s operand %s", label,
					t->name, gfs_op_name(c->op), want ? "missing" : "unexpected",
					roles[k]);
		if (in[k] && !(fp8w && (k == GFS_OPIN_W || k == GFS_OPIN_S)) &&
		    !gfs_dtype_is_float(in[k]->dtype))
			return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: operand %s (%s) is %s, not floating point",
					label, t->name, roles[k], in[k]->name,
					gfs_dtype_name(in[k]->dtype));
	}
	if (!gfs_dtype_is_float(t->dtype))
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: a computed tensor must be floating point",
				label, t->name);
	if (fp8w) {
		const gfs_err err = check_dequant(t, in[GFS_OPIN_W], in[GFS_OPIN_S], c, label);

		if (err || dq)
			return err;
		if (t->ndim != 2)
			return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: %s of an FP8 weight needs it 2-D",
					label, t->name, gfs_op_name(c->op));
	}
	if (in[0]->ndim != t->ndim || memcmp(in[0]->shape, t->shape, t->ndim * sizeof(t->shape[0])))
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: its shape differs from its weight %s",
				label, t->name, in[0]->name);
	if (c->op == GFS_OP_LORA_BIAS) {
		if (t->ndim != 1 || in[1]->ndim != 1 || in[1]->shape[0] != t->shape[0])
			return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: lora_bias needs a bias and lora_B.bias of one shape [n]",
					label, t->name);
		return GFS_OK;
	}
	if (t->ndim != 2 || in[1]->ndim != 2 || in[2]->ndim != 2)
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: %s needs 2-D weight, lora_A and lora_B",
				label, t->name, gfs_op_name(c->op));
	{
		const uint64_t rows = t->shape[0], cols = t->shape[1], r = in[1]->shape[0];
		const uint64_t a_in = tr ? rows : cols, b_out = tr ? cols : rows;

		if (r == 0 || r > GFS_MAX_LORA_RANK)
			return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: rank %llu (1 to %d)", label,
					t->name, (unsigned long long)r, GFS_MAX_LORA_RANK);
		if (in[1]->shape[1] != a_in || in[2]->shape[0] != b_out || in[2]->shape[1] != r)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: tensor %s [%llu, %llu]: lora_A [%llu, %llu] and lora_B [%llu, %llu] do not fit it%s",
					label, t->name, (unsigned long long)rows,
					(unsigned long long)cols, (unsigned long long)in[1]->shape[0],
					(unsigned long long)in[1]->shape[1],
					(unsigned long long)in[2]->shape[0],
					(unsigned long long)in[2]->shape[1],
					tr ? " (transposed delta)" : "");
		if (c->op == GFS_OP_DORA && (in[3]->ndim != 1 || in[3]->shape[0] != (tr ? cols : rows)))
			return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: the DoRA magnitude must have %llu elements",
					label, t->name, (unsigned long long)(tr ? cols : rows));
	}
	return GFS_OK;
}

gfs_err gfs_layout_check_computed(gfs_layout *l, const char *label)
{
	gfs_err err = gfs_layout_finish_inputs(l, label);

	for (size_t i = 0; i < l->ntensors && !err; i++)
		if (l->tensors[i].comp)
			err = check_one(l, &l->tensors[i], label);
	return err;
}
