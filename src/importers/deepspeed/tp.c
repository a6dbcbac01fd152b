/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — DeepSpeed importer: tensor parallelism (ds_internal.h).
 *
 * One ds_ckpt per tensor rank (mp_rank_NN files, no layer files); each
 * param's slices are joined as universal_checkpoint_info's patterns say
 * (replicated, averaged, sub-params, row or vocabulary parallel), or as
 * a -o tp_split file says; the patterns are re.match()ed with
 * util/pyre.h.
 */
#include "config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/util/json.h"
#include "gatherfs/util/pyre.h"
#include "ds_internal.h"

/* ------------------------------------------------------ tensor parallelism */

/* What universal_checkpoint_info (TP_COL: a tp_split file only) says of a param. */
enum { TP_REP, TP_AVG, TP_SUB2, TP_SUB, TP_ROW, TP_VOCAB, TP_NKINDS, TP_COL = TP_NKINDS };

/* Bounds of a tp_split file. */
#define TP_SPLIT_MAX_BYTES (1u << 20)
#define TP_SPLIT_MAX_PATS 4096

/*
 * The steps of pattern matching (pyre.h) one import may take in all: a
 * base, and more for each param name classified (real patterns take tens
 * to hundreds of steps a name and pattern); past it the import is refused.
 * Some 10^8 steps take a fraction of a second.
 */
#define TP_PYRE_BUDGET_BASE (1ul << 26)
#define TP_PYRE_BUDGET_PER_NAME (1ul << 16)

static const char *const tp_keys[TP_NKINDS] = {
	"tp_replicated_parameter_patterns", "parameter_to_average_patterns",
	"parameter_with_2_sub_params_cat_dim_0", "parameter_with_sub_params",
	"parameter_with_row_parallelism_patterns", "vocabulary_parameter_patterns",
};

/* The compiled patterns of universal_checkpoint_info, or of a tp_split file. */
typedef struct tp_info {
	gfs_pyre *pats;  /* [npats] */
	int *kind;       /* [npats]: TP_* */
	size_t npats;
	int64_t vocab;   /* original_vocab_size, or -1 */
	const char *file; /* the tp_split file (the first pattern matching decides), or NULL */
	const char *from; /* the file the patterns come from (file, or a model-states file) */
	unsigned long budget; /* matching steps left to this import (TP_PYRE_BUDGET_*) */
	cJSON *json;     /* the tp_split file as parsed: its patterns point into it; or NULL */
} tp_info;

/* tp_info_free(): free what tp_info_read() allocated in ti. */
static void tp_info_free(tp_info *ti)
{
	free(ti->pats);
	free(ti->kind);
	cJSON_Delete(ti->json);
}

/*
 * tp_info_read(): the patterns of universal_checkpoint_info in file f (a
 * dict of lists of strings), each compiled; a pattern outside pyre.h's subset
 * is refused.  No universal_checkpoint_info: refused (the split dimension
 * is never guessed).
 */
static gfs_err tp_info_read(const ds_ckpt *c, const ds_file *f, tp_info *ti)
{
	const gfs_pv *uci = gfs_pv_dict_get(f->root, "universal_checkpoint_info");
	size_t n = 0;

	memset(ti, 0, sizeof(*ti));
	ti->vocab = -1;
	ti->from = f->path;
	if (!uci || uci->kind != GFS_PV_DICT)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: %zu tensor-parallel ranks and no universal_checkpoint_info patterns in %s: which dimension each param is split on is not recorded (refused, not guessed; -o tp_split=FILE gives it)",
				c->tagdir, c->nstages, f->name);
	for (int k = 0; k < TP_NKINDS; k++)
		n += gfs_pv_seq_len(gfs_pv_dict_get(uci, tp_keys[k]));
	ti->pats = gfs_calloc(n ? n : 1, sizeof(*ti->pats));
	ti->kind = gfs_calloc(n ? n : 1, sizeof(*ti->kind));
	if (!ti->pats || !ti->kind)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (int k = 0; k < TP_NKINDS; k++) {
		const gfs_pv *list = gfs_pv_dict_get(uci, tp_keys[k]);

		if (list && list->kind != GFS_PV_LIST && list->kind != GFS_PV_TUPLE)
			return gfs_fail(GFS_ERR_FORMAT, "%s: universal_checkpoint_info %s is not a list",
					f->path, tp_keys[k]);
		for (size_t i = 0; i < gfs_pv_seq_len(list); i++) {
			const char *p = gfs_pv_name(gfs_pv_seq_at(list, i));
			char shown[160];

			if (!p)
				return gfs_fail(GFS_ERR_FORMAT,
						"%s: universal_checkpoint_info %s[%zu] is not a string",
						f->path, tp_keys[k], i);
			if (!gfs_pyre_compile(p, &ti->pats[ti->npats]))
				return gfs_fail(GFS_ERR_UNSUPPORTED,
						"%s: universal_checkpoint_info %s pattern %s uses a regular-expression feature gatherfs does not evaluate (groups, alternation, {m,n}, or an escape other than \\d \\w \\s)",
						f->path, tp_keys[k], ds_printable(p, shown, sizeof(shown)));
			ti->kind[ti->npats++] = k;
		}
	}
	if (gfs_pv_dict_get(uci, "original_vocab_size") &&
	    (!gfs_pv_int(gfs_pv_dict_get(uci, "original_vocab_size"), &ti->vocab) || ti->vocab < 1))
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: universal_checkpoint_info original_vocab_size is not a positive integer",
				f->path);
	return GFS_OK;
}

/*
 * tp_split_read(): the patterns of the tp_split file at path: a JSON object
 * whose members map a pattern (re.match, pyre.h's subset) to 0 or 1 (the
 * dimension the slices are joined on) or "replicated", in file order.
 * Anything else is refused with one line naming the file.  ti keeps the
 * parsed file, which the compiled patterns point into (tp_info_free()).
 */
static gfs_err tp_split_read(const char *path, tp_info *ti)
{
	char *text = NULL;
	size_t len = 0, n;
	cJSON *j = NULL;
	const cJSON *it;
	gfs_err err;

	memset(ti, 0, sizeof(*ti));
	ti->vocab = -1;
	ti->file = ti->from = path;
	err = gfs_read_text(path, TP_SPLIT_MAX_BYTES, &text, &len);
	if (err)
		return gfs_fail_prefix(err, "tp_split");
	err = gfs_json_parse(text, len, path, &j);
	free(text);
	if (err)
		return err;
	n = cJSON_IsObject(j) ? (size_t)cJSON_GetArraySize(j) : 0;
	if (n == 0 || n > TP_SPLIT_MAX_PATS) {
		cJSON_Delete(j);
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: a tp_split file is a JSON object of 1 to %d patterns, each mapped to 0, 1 or \"replicated\"",
				path, TP_SPLIT_MAX_PATS);
	}
	ti->pats = gfs_calloc(n, sizeof(*ti->pats));
	ti->kind = gfs_calloc(n, sizeof(*ti->kind));
	if (!ti->pats || !ti->kind)
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	cJSON_ArrayForEach(it, j) {
		char shown[160];

		if (err)
			break;
		if (!gfs_pyre_compile(it->string, &ti->pats[ti->npats])) {
			err = gfs_fail(GFS_ERR_UNSUPPORTED,
				       "%s: tp_split pattern %s uses a regular-expression feature gatherfs does not evaluate (groups, alternation, {m,n}, or an escape other than \\d \\w \\s)",
				       path, ds_printable(it->string, shown, sizeof(shown)));
		} else if (cJSON_IsString(it) && strcmp(it->valuestring, "replicated") == 0) {
			ti->kind[ti->npats++] = TP_REP;
		} else if (cJSON_IsNumber(it) && (it->valuedouble == 0 || it->valuedouble == 1)) {
			ti->kind[ti->npats++] = it->valuedouble == 1 ? TP_ROW : TP_COL;
		} else {
			err = gfs_fail(GFS_ERR_FORMAT,
				       "%s: tp_split pattern %s: the value is not 0, 1 or \"replicated\"",
				       path, ds_printable(it->string, shown, sizeof(shown)));
		}
	}
	ti->json = j; /* the compiled patterns borrow its strings (pyre.h) */
	return err;
}

/*
 * tp_too_costly(): the refusal of a match that answered -1 for param name:
 * the one match past GFS_PYRE_MAX_STEPS, or the import's budget spent.
 */
static gfs_err tp_too_costly(const ds_ckpt *c, const tp_info *ti, const char *name,
			     const char *what)
{
	if (ti->budget == 0)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: matching its %s patterns took all the steps one import may take (at param %s): patterns that backtrack this much are refused",
				ti->from, what, name);
	return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: param %s: matching the %s patterns of %s takes too long",
			c->tagdir, name, what, ti->from);
}

/*
 * tp_split_classify(): kind of the first pattern of the tp_split file
 * that param name matches; none is refused.
 */
static gfs_err tp_split_classify(const ds_ckpt *c, tp_info *ti, const char *name, int *kind)
{
	for (size_t i = 0; i < ti->npats; i++) {
		const int m = gfs_pyre_match(&ti->pats[i], name, &ti->budget);

		if (m < 0)
			return tp_too_costly(c, ti, name, "tp_split");
		if (m) {
			*kind = ti->kind[i];
			return GFS_OK;
		}
	}
	return gfs_fail(GFS_ERR_NOTFOUND,
			"%s: param %s matches no pattern of the tp_split file %s: how its tensor-parallel slices join is not known",
			c->tagdir, name, ti->file);
}

/* tp_matches(): does param name match a pattern of kind k?  -1: too costly to tell. */
static int tp_matches(tp_info *ti, int k, const char *name)
{
	for (size_t i = 0; i < ti->npats; i++) {
		int m;

		if (ti->kind[i] != k)
			continue;
		m = gfs_pyre_match(&ti->pats[i], name, &ti->budget);
		if (m)
			return m;
	}
	return 0;
}

/* How a param's tensor-parallel slices make it. */
typedef struct tp_how {
	int dim;        /* concatenated on it; -1 replicated (rank 0's) */
	bool sub2;      /* two sub-params: the first halves (dim 0) of every slice, then the second */
	uint64_t rows;  /* dim 0 of the result: all of it, or original_vocab_size */
} tp_how;

/*
 * tp_classify(): how param name (slice shape ndim, shape) is made, as
 * ds_to_universal.py does: replicated, else averaged or split in
 * sub-params (refused: not a view of the slices, but two sub-params on
 * dim 0), else concatenated on dim 1 (row parallelism) or 0; a vocabulary
 * param cut to original_vocab_size rows.  The full shape in out_shape.
 * A buffer (buffer_names) no pattern matches is refused: the dim 0 rule
 * is ds_to_universal.py's for params, which it applies to no buffer.
 */
static gfs_err tp_classify(const ds_ckpt *c, tp_info *ti, const char *name, uint32_t ndim,
			   const uint64_t *shape, tp_how *how, uint64_t *out_shape)
{
	int m[TP_NKINDS] = { 0 };

	if (ti->file) { /* the first matching pattern decides: one kind, or TP_COL (none) */
		int kind = TP_COL;
		const gfs_err err = tp_split_classify(c, ti, name, &kind);

		if (err)
			return err;
		if (kind != TP_COL)
			m[kind] = 1;
	} else {
		for (int k = 0; k < TP_NKINDS; k++)
			if ((m[k] = tp_matches(ti, k, name)) < 0)
				return tp_too_costly(c, ti, name, tp_keys[k]);
	}
	if (!ti->file && ds_in_list(gfs_pv_dict_get(c->stages[0].model[0].root, "buffer_names"), name)) {
		bool any = false;

		for (int k = 0; k < TP_NKINDS; k++)
			any = any || m[k];
		if (!any)
			return gfs_fail(GFS_ERR_UNSUPPORTED,
					"%s: buffer %s matches no universal_checkpoint_info pattern: whether it is split between the tensor ranks is not recorded (refused, not guessed; -o tp_split=FILE gives it)",
					c->tagdir, name);
	}
	memset(how, 0, sizeof(*how));
	memcpy(out_shape, shape, ndim * sizeof(*shape));
	if (m[TP_REP]) {
		how->dim = -1;
	} else if (m[TP_AVG] || m[TP_SUB]) {
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: param %s matches universal_checkpoint_info %s: made by arithmetic on the slices, not served",
				c->tagdir, name, tp_keys[m[TP_AVG] ? TP_AVG : TP_SUB]);
	} else {
		how->sub2 = m[TP_SUB2] != 0;
		how->dim = !how->sub2 && m[TP_ROW] ? 1 : 0;
		if ((uint32_t)how->dim >= ndim || (how->sub2 && shape[0] % 2 != 0))
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: param %s has %u dimensions (size %llu), it cannot be split as %s says",
					c->tagdir, name, ndim, ndim ? (unsigned long long)shape[0] : 0ull,
					ti->file ? ti->file : "universal_checkpoint_info");
		out_shape[how->dim] *= c->nstages;
	}
	how->rows = ndim ? out_shape[0] : 0;
	if (m[TP_VOCAB] && how->sub2)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: param %s is both a vocabulary param and two sub-params: not supported",
				c->tagdir, name);
	if (m[TP_VOCAB] && ti->vocab >= 0) {
		if (ndim == 0 || (uint64_t)ti->vocab > out_shape[0])
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: vocabulary param %s has fewer rows than original_vocab_size %lld",
					c->tagdir, name, (long long)ti->vocab);
		how->rows = out_shape[0] = (uint64_t)ti->vocab;
	} else if (m[TP_VOCAB]) {
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: param %s matches vocabulary_parameter_patterns, but universal_checkpoint_info has no original_vocab_size",
				c->tagdir, name);
	}
	return GFS_OK;
}

/*
 * tp_emit(): the pieces of entry ti: the slices (fl[y] from element
 * off[y], each of shape ndim/shape) put together as how says.
 */
static gfs_err tp_emit(const ds_ckpt *c, size_t ti, const flat *const *fl, const uint64_t *off,
		       uint32_t ndim, const uint64_t *shape, const tp_how *how)
{
	uint64_t numel = 1, outer = 1, run, keep;
	gfs_err err = GFS_OK;

	for (uint32_t d = 0; d < ndim; d++)
		numel *= shape[d];
	keep = ndim && shape[0] ? numel / shape[0] * how->rows : numel; /* elements of one slice's rows kept */
	if (how->dim < 0) {
		/* served from tensor rank 0; the other ranks' copies are replicas verify compares */
		err = ds_flat_emit(c->l, ti, fl[0], off[0], keep);
		for (size_t y = 1; !err && y < c->nstages; y++)
			err = ds_flat_walk(c->l, ti, fl[y], off[y], keep, true);
		return err;
	}
	if (how->sub2) {
		for (uint64_t h = 0; !err && h < 2; h++)
			for (size_t y = 0; !err && y < c->nstages; y++)
				err = ds_flat_emit(c->l, ti, fl[y], off[y] + h * (numel / 2), numel / 2);
		return err;
	}
	for (uint32_t d = 0; d < (uint32_t)how->dim; d++)
		outer *= shape[d];
	run = outer ? numel / outer : 0;
	if (how->dim == 0) {
		uint64_t left = numel / (shape[0] ? shape[0] : 1) * how->rows;

		for (size_t y = 0; !err && y < c->nstages && left; y++) {
			const uint64_t n = numel < left ? numel : left;

			err = ds_flat_emit(c->l, ti, fl[y], off[y], n);
			left -= n;
		}
		return err;
	}
	/* dim > 0: rows of dim 0 beyond how->rows are cut */
	outer = outer / (shape[0] ? shape[0] : 1) * how->rows;
	for (uint64_t o = 0; !err && o < outer; o++)
		for (size_t y = 0; !err && y < c->nstages; y++)
			err = ds_flat_emit(c->l, ti, fl[y], off[y] + o * run, run);
	return err;
}

/*
 * tp_govern(): entry ti (slices of shape ndim/shape, put together as how
 * says) follows the declarations: its replicas (tp_emit()) must equal the
 * copy served; a split entry's slices must not be byte-identical unless
 * constant (a replicated tensor declared split).  A vocabulary param cut
 * to fewer rows has no split claim (its last slice is cut).
 */
static gfs_err tp_govern(const ds_ckpt *c, size_t ti, uint32_t ndim, const uint64_t *shape,
			 const tp_how *how)
{
	const uint64_t es = gfs_dtype_size(c->l->tensors[ti].dtype);
	uint64_t numel = 1, outer = 1;
	gfs_split_claim sc = { .ti = ti, .nparts = (uint32_t)c->nstages };

	for (uint32_t d = 0; d < ndim; d++)
		numel *= shape[d];
	if (how->dim < 0 || numel == 0 ||
	    (ndim && how->rows != shape[0] * (how->dim == 0 ? c->nstages : 1)))
		return gfs_layout_govern(c->l, ti, NULL);
	if (how->sub2) { /* slice y: its two halves, each after the other slices' */
		sc.len = sc.step = numel / 2 * es;
		sc.count = 2;
		sc.stride = sc.len * c->nstages;
	} else if (how->dim == 0) {
		sc.len = sc.step = numel * es;
		sc.count = 1;
	} else { /* slice y: run y of each of the outer rows */
		for (uint32_t d = 0; d < (uint32_t)how->dim; d++)
			outer *= shape[d];
		sc.len = sc.step = numel / outer * es;
		sc.count = outer;
		sc.stride = sc.len * c->nstages;
	}
	return gfs_layout_govern(c->l, ti, &sc);
}

/*
 * tp_slices(): the slices of param name (rank 0's `module` entry v0) on
 * every tensor rank: fl[y] from element off[y], of shape ndim/shape, the
 * same on every rank.  A trainable param (in rank 0's param_shapes): each
 * rank's fp32 masters, or with state >= 0 its optimizer state number
 * state (rank 0's numbering, found by name on the others); else each
 * rank's `module` tensor, as a one-piece flat own[y].
 */
static gfs_err tp_slices(ds_ckpt *c, const char *name, int state, const flat **fl, uint64_t *off,
			 flat *own, uint32_t *ndim, uint64_t *shape)
{
	const ds_ckpt *s0 = &c->stages[0];
	const bool train = s0->tmap && ds_tmap_find(s0, name);

	for (size_t y = 0; y < c->nstages; y++) {
		ds_ckpt *s = &c->stages[y];
		const train_param *tp = train && s->tmap ? ds_tmap_find(s, name) : NULL;
		uint64_t sh[GFS_MAX_DIMS], numel;
		uint32_t nd;
		gfs_err err;

		if (train && !tp)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: param %s is in the param_shapes of %s but not of %s: files of two saves",
					s->model[0].path, name, s0->model[0].name, s->model[0].name);
		if (tp) {
			const flat *base = s->group_flats;

			err = ds_shape_from_pv(tp->shape, s->model[0].path, name, &nd, sh, &numel);
			if (!err && state >= 0) {
				size_t k = 0;

				while (k < s->nstates &&
				       strcmp(s->states[k].name, s0->states[state].name) != 0)
					k++;
				if (k == s->nstates || s->states[k].scalar)
					return gfs_fail(GFS_ERR_FORMAT,
							"%s: no optimizer state %s like %s's",
							s->optim[0].path, s0->states[state].name,
							s0->optim[0].name);
				base = s->states[k].flats;
			}
			fl[y] = &base[tp->group];
			off[y] = tp->offset;
		} else {
			tview tv;

			err = ds_tensor_view(c, &s->model[0],
					  gfs_pv_dict_get(gfs_pv_dict_get(s->model[0].root, "module"), name),
					  name, &tv);
			if (!err)
				err = ds_flat_append(&own[y], &tv, tv.numel, s->model[0].path);
			nd = tv.ndim;
			memcpy(sh, tv.shape, sizeof(sh));
			fl[y] = &own[y];
			off[y] = 0;
		}
		if (err)
			return err;
		if (y == 0) {
			*ndim = nd;
			memcpy(shape, sh, nd * sizeof(*sh));
		} else if (nd != *ndim || memcmp(sh, shape, nd * sizeof(*sh)) != 0) {
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: %s has another shape than in %s: slices of unequal size are not supported",
					s->model[0].path, name, s0->model[0].name);
		}
	}
	return GFS_OK;
}

/*
 * tp_entry(): model tensor name (state < 0), or its optimizer state number
 * state of rank 0, put together from the tensor ranks' slices.
 */
static gfs_err tp_entry(ds_ckpt *c, tp_info *ti, const char *name, int state)
{
	const ds_ckpt *s0 = &c->stages[0];
	const flat **fl = gfs_calloc(c->nstages, sizeof(*fl));
	uint64_t *off = gfs_calloc(c->nstages, sizeof(*off));
	flat *own = gfs_calloc(c->nstages, sizeof(*own));
	uint64_t shape[GFS_MAX_DIMS], full[GFS_MAX_DIMS];
	uint32_t ndim = 0;
	tp_how how;
	size_t idx;
	gfs_err err = fl && off && own ? GFS_OK : gfs_fail(GFS_ERR_NOMEM, "out of memory");

	for (size_t y = 0; own && y < c->nstages; y++)
		own[y].dtype = GFS_DT_INVALID;
	if (!err)
		err = tp_slices(c, name, state, fl, off, own, &ndim, shape);
	if (!err)
		err = tp_classify(c, ti, name, ndim, shape, &how, full);
	if (!err && state >= 0)
		err = gfs_layout_add_state(c->l, s0->states[state].name, name,
					   fl[0]->dtype == GFS_DT_INVALID ? GFS_DT_F32 : fl[0]->dtype,
					   ndim, full, &idx);
	else if (!err)
		err = gfs_layout_add_tensor(c->l, name,
					    fl[0]->dtype == GFS_DT_INVALID ? GFS_DT_F32 : fl[0]->dtype,
					    ndim, full, &idx);
	if (!err)
		err = tp_emit(c, idx, fl, off, ndim, shape, &how);
	if (!err)
		err = tp_govern(c, idx, ndim, shape, &how);
	free(fl);
	free(off);
	ds_flats_free(own, own ? c->nstages : 0);
	return err;
}

gfs_err ds_tp_build(ds_ckpt *c, char **note)
{
	ds_ckpt *s0 = &c->stages[0];
	const gfs_pv *module = gfs_pv_dict_get(s0->model[0].root, "module");
	char what[64];
	tp_info ti;
	gfs_err err = c->tp_split ? tp_split_read(c->tp_split, &ti) : tp_info_read(c, &s0->model[0], &ti);

	if (!err && module && module->kind == GFS_PV_DICT) {
		const size_t names = module->u.dict.len * (1 + s0->nstates);

		ti.budget = names > (ULONG_MAX - TP_PYRE_BUDGET_BASE) / TP_PYRE_BUDGET_PER_NAME
				    ? ULONG_MAX
				    : TP_PYRE_BUDGET_BASE + TP_PYRE_BUDGET_PER_NAME * names;
	}
	if (!err) {
		char decl[PATH_MAX + 64];

		snprintf(decl, sizeof(decl),
			 ti.file ? "the tp_split file %s" : "universal_checkpoint_info of %s", ti.from);
		err = gfs_layout_declare(c->l, decl, "tensor rank");
	}
	for (size_t y = 0; !err && y < c->nstages; y++)
		err = ds_anon_note(&c->stages[y], note);
	for (size_t y = 0; !err && y < c->nstages; y++) {
		ds_ckpt *s = &c->stages[y];

		s->l = c->l;
		for (size_t r = 0; !err && r < s->noptim; r++)
			err = gfs_layout_add_metafile(c->l, s->optim[r].path);
		if (!err)
			err = gfs_layout_add_metafile(c->l, s->model[0].path);
		if (!err && s->noptim)
			err = ds_plan_stage12(s);
		if (!err && s->noptim)
			err = ds_tmap_build(s);
		if (!err && s->noptim)
			err = ds_plan_states(s);
	}
	if (!err)
		err = gfs_layout_set_note(c->l, *note);
	if (!err && (!module || module->kind != GFS_PV_DICT))
		err = gfs_fail(GFS_ERR_FORMAT, "%s: no `module` state dict", s0->model[0].path);
	for (size_t i = 0; !err && i < module->u.dict.len; i++) {
		const char *name = gfs_pv_name(module->u.dict.items[i].key);

		err = name ? tp_entry(c, &ti, name, -1)
			   : gfs_pv_name_fail(s0->model[0].path, "module key", i,
					      module->u.dict.items[i].key);
	}
	for (size_t k = 0; !err && k < s0->nstates; k++)
		for (size_t i = 0; !err && i < s0->ntrain; i++) {
			const train_param *tp = &s0->train[i];
			const tview *tv;
			size_t idx;

			if (!s0->states[k].scalar) {
				err = tp_entry(c, &ti, tp->name, (int)k);
				continue;
			}
			tv = &s0->states[k].values[tp->group]; /* a scalar state's values */
			err = gfs_layout_add_state(c->l, s0->states[k].name, tp->name, tv->dtype, 0, NULL,
						   &idx);
			if (!err)
				err = gfs_layout_add_piece(c->l, idx, tv->src, tv->off,
							   gfs_dtype_size(tv->dtype));
		}
	tp_info_free(&ti);
	if (!err && s0->noptim) {
		err = ds_build_optim(s0);
		c->l->optim.tp_ranks = (uint32_t)c->nstages;
	}
	if (err)
		return err;
	snprintf(what, sizeof(what), "tensor parallel, %zu tensor ranks", c->nstages);
	return ds_set_info(c, what, s0->noptim ? s0 : NULL, "data-parallel ranks");
}
