/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — DeepSpeed importer: pipeline parallelism (ds_internal.h).
 *
 * A PipelineModule checkpoint: layer_NN-model_states.pt files and one
 * ds_ckpt per pipeline stage (each a ZeRO checkpoint of its own, or none),
 * keys `N.NAME` by layer, a tied weight served once as
 * tied_modules.KEY.NAME; every stage's files must agree with the layer
 * files on which params they hold.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_internal.h"

/* -------------------------------------------------------------- pipelines */

#define TIED "tied_modules."
#define TIED_LEN (sizeof(TIED) - 1)

/* MPWORD(): what a model-parallel rank of c is, for messages. */
#define MPWORD(c) ((c)->tp ? "tensor rank" : "pipeline stage")

/* How the entries of a pipeline layer file are named and served. */
typedef struct pipe_layer {
	size_t stage;     /* the stage holding the layer */
	const char *tied; /* its TiedLayerSpec key (borrowed from param_shapes), or NULL */
	size_t tied_len;
} pipe_layer;

/*
 * stage_open(): the files of pipeline stage y (listing ls): its optimizer
 * states files with its mp_rank file (ds_open_files()), or, without ZeRO or
 * BF16_Optimizer, its mp_rank file alone.
 */
static gfs_err stage_open(ds_ckpt *c, size_t y, const ds_listing *ls)
{
	ds_ckpt *s = &c->stages[y];
	gfs_err err;

	s->label = c->label;
	s->tagdir = gfs_strdup(c->tagdir);
	if (!s->tagdir)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (!ls->mpmodel)
		return gfs_fail(GFS_ERR_NOTFOUND, "%s/mp_rank_%02zu_model_states.pt is missing (%s %zu)",
				c->tagdir, y, MPWORD(c), y);
	if (ls->count_optim) {
		err = ds_open_files(s, ls);
		if (!err && s->stage == 3)
			err = gfs_fail(GFS_ERR_UNSUPPORTED,
				       "%s: ZeRO-3 with pipeline or tensor parallelism is not supported",
				       c->tagdir);
		return err;
	}
	s->model = calloc(1, sizeof(*s->model));
	if (!s->model)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	s->model[0].fd = -1;
	s->nmodel = 1;
	err = ds_file_open(&s->model[0], s->tagdir, ls->mpmodel);
	if (!err && (!gfs_pv_dict_get(s->model[0].root, "optimizer") ||
		     gfs_pv_dict_get(s->model[0].root, "optimizer")->kind == GFS_PV_NONE))
		err = gfs_fail(GFS_ERR_NOTFOUND,
			       "%s/zero_pp_rank_0_mp_rank_%02zu_optim_states.pt is missing: %s holds no optimizer state, so it is in *_optim_states.pt files, and there are none",
			       c->tagdir, y, s->model[0].path);
	return err;
}

/*
 * stages_check(): the stages are of one save: the same optimizer files
 * kinds, ZeRO stage and data-parallel size, and as many stages as each
 * mp_rank file's mp_world_size.
 */
static gfs_err stages_check(const ds_ckpt *c)
{
	const ds_ckpt *s0 = &c->stages[0];

	for (size_t y = 0; y < c->nstages; y++) {
		const ds_ckpt *s = &c->stages[y];
		const gfs_pv *v = gfs_pv_dict_get(s->model[0].root, "mp_world_size");
		int64_t n;

		if ((s->noptim == 0) != (s0->noptim == 0))
			return gfs_fail(GFS_ERR_NOTFOUND,
					"%s/zero_pp_rank_0_mp_rank_%02zu_optim_states.pt is missing: %s %zu has optimizer states files",
					c->tagdir, s->noptim ? (size_t)0 : y, MPWORD(c),
					s->noptim ? y : (size_t)0);
		if (s->ws != s0->ws || s->stage != s0->stage || s->bf16_optimizer != s0->bf16_optimizer)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: %s %zu was written with %llu data-parallel ranks and ZeRO stage %d, %s 0 with %llu and %d: files of two saves",
					s->model[0].path, MPWORD(c), y, (unsigned long long)s->ws, s->stage,
					MPWORD(c), (unsigned long long)s0->ws, s0->stage);
		if (!v || v->kind == GFS_PV_NONE)
			continue;
		if (!gfs_pv_int(v, &n) || n < 1)
			return gfs_fail(GFS_ERR_FORMAT, "%s: mp_world_size is not a positive integer",
					s->model[0].path);
		if ((uint64_t)n > c->nstages)
			return gfs_fail(GFS_ERR_NOTFOUND,
					"%s/mp_rank_%02zu_model_states.pt is missing: %s says %lld model-parallel ranks (mp_world_size)",
					c->tagdir, c->nstages, s->model[0].name, (long long)n);
		if ((uint64_t)n < c->nstages)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: mp_world_size is %lld, but files of %zu model-parallel ranks are here: files of two saves",
					s->model[0].path, (long long)n, c->nstages);
	}
	return GFS_OK;
}

gfs_err ds_pipe_open(ds_ckpt *c, const ds_dir *d)
{
	gfs_err err = GFS_OK;

	c->stages = gfs_calloc(d->nmp, sizeof(*c->stages));
	c->layers = gfs_calloc(d->nlayers, sizeof(*c->layers));
	if (!c->stages || !c->layers)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	c->nstages = d->nmp;
	c->nlayers = d->nlayers;
	for (size_t i = 0; i < c->nlayers; i++)
		c->layers[i].fd = -1;
	for (size_t y = 0; !err && y < c->nstages; y++)
		err = stage_open(c, y, &d->mp[y]);
	if (!err)
		err = stages_check(c);
	for (size_t i = 0; !err && i < c->nlayers; i++)
		if (d->layers[i])
			err = ds_file_open(&c->layers[i], c->tagdir, d->layers[i]);
	return err;
}

/* train_any(): the trainable param name of any stage, or NULL; its stage in *y. */
static train_param *train_any(const ds_ckpt *c, const char *name, size_t *y)
{
	for (size_t k = 0; k < c->nstages; k++) {
		const ds_ckpt *s = &c->stages[k];
		const train_param *tp = s->tmap ? ds_tmap_find(s, name) : NULL;

		if (tp) {
			*y = k;
			return &s->train[tp - s->train];
		}
	}
	return NULL;
}

/* same_shape(): does tensor v have the shape of param_shapes entry tp? */
static bool same_shape(const ds_ckpt *s, const train_param *tp, const gfs_pv *v)
{
	uint64_t shape[GFS_MAX_DIMS], numel;
	uint32_t ndim;
	bool same;

	if (!v || v->kind != GFS_PV_TENSOR ||
	    ds_shape_from_pv(tp->shape, s->model[0].path, tp->name, &ndim, shape, &numel))
		return false;
	same = v->u.tensor->ndim == ndim;
	for (uint32_t d = 0; same && d < ndim; d++)
		same = v->u.tensor->size[d] >= 0 && (uint64_t)v->u.tensor->size[d] == shape[d];
	return same;
}

/* key_name(): buf = prefix + "." + local name, or GFS_ERR_LIMIT naming f. */
static gfs_err key_name(char *buf, size_t n, const ds_file *f, const char *prefix, size_t plen,
			const char *local)
{
	if ((size_t)snprintf(buf, n, "%.*s.%s", (int)plen, prefix, local) >= n)
		return gfs_fail(GFS_ERR_LIMIT, "%s: key %.64s... is too long", f->path, local);
	return GFS_OK;
}

/*
 * tied_fits(): is every entry of layer file f a param tied_modules.K.NAME
 * of some stage, of its shape (K: key[0..klen))?
 */
static bool tied_fits(const ds_ckpt *c, const ds_file *f, const char *key, size_t klen)
{
	char pre[512], name[4096];

	if ((size_t)snprintf(pre, sizeof(pre), TIED "%.*s", (int)klen, key) >= sizeof(pre))
		return false;
	for (size_t k = 0; k < f->root->u.dict.len; k++) {
		const char *local = gfs_pv_name(f->root->u.dict.items[k].key);
		const train_param *tp;
		size_t y;

		if (!local || key_name(name, sizeof(name), f, pre, strlen(pre), local) ||
		    !(tp = train_any(c, name, &y)) ||
		    !same_shape(&c->stages[y], tp, f->root->u.dict.items[k].value))
			return false;
	}
	return true;
}

/*
 * pipe_tied(): the TiedLayerSpec key of layer file f, whose first entry
 * (local name p0) is no stage's param "N.p0": the one key K whose params
 * tied_modules.K.* fit it (tied_fits()), else none.
 */
static gfs_err pipe_tied(const ds_ckpt *c, const ds_file *f, const char *p0, pipe_layer *pl)
{
	const size_t plen = strlen(p0);

	for (size_t y = 0; y < c->nstages; y++) {
		const ds_ckpt *s = &c->stages[y];

		for (size_t t = 0; t < s->ntrain; t++) {
			const char *n = s->train[t].name;
			const size_t nl = strlen(n);
			size_t klen;

			if (strncmp(n, TIED, TIED_LEN) != 0 || nl < TIED_LEN + 2 + plen ||
			    n[nl - plen - 1] != '.' || strcmp(n + nl - plen, p0) != 0)
				continue;
			klen = nl - plen - 1 - TIED_LEN;
			if ((pl->tied && klen == pl->tied_len &&
			     strncmp(pl->tied, n + TIED_LEN, klen) == 0) ||
			    !tied_fits(c, f, n + TIED_LEN, klen))
				continue;
			if (pl->tied)
				return gfs_fail(GFS_ERR_UNSUPPORTED,
						"%s: its weights fit two tied modules, " TIED "%.*s and " TIED "%.*s: which one it holds is not recorded",
						f->path, (int)pl->tied_len, pl->tied, (int)klen,
						n + TIED_LEN);
			pl->tied = n + TIED_LEN;
			pl->tied_len = klen;
		}
	}
	return GFS_OK;
}

/*
 * pipe_untied_check(): without param_shapes (no ZeRO, no BF16_Optimizer)
 * no param is named: a TiedLayerSpec weight (tied_modules.KEY.NAME in the
 * model) cannot be told from a layer's own.  Refused when the stages'
 * optimizers hold more params than the layer files hold tensors (a
 * weight tied across stages); else the entries are "N.NAME".
 */
static gfs_err pipe_untied_check(const ds_ckpt *c)
{
	uint64_t nopt = 0, nlay = 0;

	for (size_t y = 0; y < c->nstages; y++) {
		const gfs_pv *pg = gfs_pv_dict_get(gfs_pv_dict_get(c->stages[y].model[0].root,
								   "optimizer"), "param_groups");

		for (size_t g = 0; g < gfs_pv_seq_len(pg); g++)
			nopt += gfs_pv_seq_len(gfs_pv_dict_get(gfs_pv_seq_at(pg, g), "params"));
	}
	for (size_t i = 0; i < c->nlayers; i++)
		if (c->layers[i].root)
			nlay += c->layers[i].root->u.dict.len;
	if (nopt > nlay)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: the stages' optimizers hold %llu params but the layer files %llu tensors: a TiedLayerSpec weight shared by stages, whose name (" TIED "KEY.NAME) a checkpoint without ZeRO or BF16_Optimizer does not record (no param_shapes)",
				c->tagdir, (unsigned long long)nopt, (unsigned long long)nlay);
	return GFS_OK;
}

/* pipe_plan(): each stage's trainable params and how each layer file is served. */
static gfs_err pipe_plan(ds_ckpt *c)
{
	size_t stage = 0;
	bool named = false;
	gfs_err err = GFS_OK;

	for (size_t y = 0; !err && y < c->nstages; y++) {
		ds_ckpt *s = &c->stages[y];

		s->l = c->l;
		if (s->noptim == 0)
			continue;
		err = ds_plan_stage12(s);
		if (!err)
			err = ds_tmap_build(s);
		named = true;
	}
	if (!err && !named)
		err = pipe_untied_check(c);
	c->play = gfs_calloc(c->nlayers ? c->nlayers : 1, sizeof(*c->play));
	if (!err && !c->play)
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; !err && i < c->nlayers; i++) {
		const ds_file *f = &c->layers[i];
		const char *p0;
		char pre[32], name[4096];
		size_t y;

		c->play[i].stage = stage;
		if (!f->root || f->root->u.dict.len == 0)
			continue;
		p0 = gfs_pv_name(f->root->u.dict.items[0].key);
		if (!p0)
			return gfs_pv_name_fail(f->path, "layer key", 0, f->root->u.dict.items[0].key);
		(void)snprintf(pre, sizeof(pre), "%zu", i);
		err = key_name(name, sizeof(name), f, pre, strlen(pre), p0);
		if (!err && train_any(c, name, &y))
			c->play[i].stage = stage = y;
		else if (!err && named)
			err = pipe_tied(c, f, p0, &c->play[i]);
	}
	return err;
}

/* pipe_entry(): entry name of stage s, value v of layer file f. */
static gfs_err pipe_entry(ds_ckpt *c, ds_ckpt *s, ds_file *f, const char *name, const gfs_pv *v)
{
	tview tv;
	size_t y;
	train_param *tp = train_any(c, name, &y);
	gfs_err err;

	if (tp && y == (size_t)(s - c->stages)) {
		tp->used = true;
		return ds_emit_trainable(s, tp, v);
	}
	err = ds_tensor_view(c, f, v, name, &tv);
	return err ? err : ds_emit_view(c, name, &tv, tv.numel, tv.ndim, tv.shape);
}

/*
 * pipe_tied_value(): the module value of tied param name (tied_modules.K.P)
 * in the first layer file of K, or NULL.
 */
static const gfs_pv *pipe_tied_value(const ds_ckpt *c, const char *name)
{
	for (size_t i = 0; i < c->nlayers; i++) {
		const pipe_layer *pl = &c->play[i];
		const char *rest = name + TIED_LEN;

		if (pl->tied && strncmp(rest, pl->tied, pl->tied_len) == 0 &&
		    rest[pl->tied_len] == '.')
			return gfs_pv_dict_get(c->layers[i].root, rest + pl->tied_len + 1);
	}
	return NULL;
}

/*
 * pipe_missing(): the error for param name of stage y, which no layer file
 * holds: the file of layer N for a param "N.NAME"; for a tied weight, the
 * first layer file absent (a TiedLayerSpec used only through a forward_fn
 * has no file, but its module is built, and saved, at its first use).
 */
static gfs_err pipe_missing(const ds_ckpt *c, size_t y, const char *name)
{
	const char *p = name;
	uint64_t n = 0;
	bool suffix = false;

	for (size_t i = 0; i < c->nlayers; i++)
		if (c->layers[i].name)
			suffix = strstr(c->layers[i].name, "-model_00-") != NULL;
	if (!ds_parse_u64(&p, &n) || *p != '.')
		for (n = 0; n < c->nlayers && c->layers[n].name; n++)
			;
	return gfs_fail(GFS_ERR_NOTFOUND,
			"%s/layer_%02llu%s-model_states.pt is missing: param %s of pipeline stage %zu (%s) is in no layer file",
			c->tagdir, (unsigned long long)n, suffix ? "-model_00" : "", name, y,
			c->stages[y].model[0].name);
}

/* served_before(): does a stage before y hold trainable param name? */
static bool served_before(const ds_ckpt *c, size_t y, const char *name)
{
	for (size_t k = 0; k < y; k++)
		if (c->stages[k].tmap && ds_tmap_find(&c->stages[k], name))
			return true;
	return false;
}

/*
 * pipe_entries(): the model's entries in its state_dict() order: stage by
 * stage, its tied weights not served yet (each once, in param_shapes
 * order), then its layers in layer order, each layer's entries in its
 * file's order; trainable params as fp32 masters of the stage holding
 * them, the rest (and everything without ZeRO) as the layer files hold it.
 */
static gfs_err pipe_entries(ds_ckpt *c)
{
	gfs_err err = GFS_OK;

	for (size_t y = 0; !err && y < c->nstages; y++) {
		ds_ckpt *s = &c->stages[y];

		for (size_t t = 0; !err && t < s->ntrain; t++) {
			train_param *tp = &s->train[t];
			const gfs_pv *v;

			if (strncmp(tp->name, TIED, TIED_LEN) != 0)
				continue;
			if (served_before(c, y, tp->name)) {
				tp->used = tp->dup = true;
				continue;
			}
			tp->used = true;
			v = pipe_tied_value(c, tp->name);
			err = v ? ds_emit_trainable(s, tp, v) : pipe_missing(c, y, tp->name);
		}
		for (size_t i = 0; !err && i < c->nlayers; i++) {
			ds_file *f = &c->layers[i];
			char pre[32];

			if (!f->root || c->play[i].stage != y || c->play[i].tied)
				continue;
			(void)snprintf(pre, sizeof(pre), "%zu", i);
			for (size_t k = 0; !err && k < f->root->u.dict.len; k++) {
				const gfs_pv_item *it = &f->root->u.dict.items[k];
				const char *local = gfs_pv_name(it->key);
				char name[4096];

				if (!local)
					return gfs_pv_name_fail(f->path, "layer key", k, it->key);
				err = key_name(name, sizeof(name), f, pre, strlen(pre), local);
				if (!err)
					err = pipe_entry(c, s, f, name, it->value);
			}
		}
	}
	for (size_t y = 0; !err && y < c->nstages; y++)
		for (size_t t = 0; !err && t < c->stages[y].ntrain; t++)
			if (!c->stages[y].train[t].used)
				err = pipe_missing(c, y, c->stages[y].train[t].name);
	return err;
}

/*
 * pipe_model_srcs(): after ds_build_optim() of stage 0, every stage's
 * mp_rank_YY_model_states.pt as a model-states source, in stage order (the
 * universal view copies them, as ds_to_universal.py does).
 */
static gfs_err pipe_model_srcs(ds_ckpt *c)
{
	gfs_optim *o = &c->l->optim;
	uint32_t *srcs = gfs_calloc(c->nstages, sizeof(*srcs));

	if (!srcs)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t y = 0; y < c->nstages; y++) {
		const gfs_err err = ds_file_source(&c->stages[y], &c->stages[y].model[0], &srcs[y]);

		if (err) {
			free(srcs);
			return err;
		}
	}
	free(o->model_srcs);
	o->model_srcs = srcs;
	o->nmodel_srcs = c->nstages;
	return GFS_OK;
}

gfs_err ds_pipe_build(ds_ckpt *c, char **note)
{
	const ds_ckpt *s0 = &c->stages[0];
	char what[64];
	gfs_err err = GFS_OK;

	for (size_t y = 0; !err && y < c->nstages; y++)
		err = ds_anon_note(&c->stages[y], note);
	for (size_t y = 0; !err && y < c->nstages; y++) {
		const ds_ckpt *s = &c->stages[y];

		for (size_t r = 0; !err && r < s->noptim; r++)
			err = gfs_layout_add_metafile(c->l, s->optim[r].path);
		if (!err)
			err = gfs_layout_add_metafile(c->l, s->model[0].path);
	}
	for (size_t i = 0; !err && i < c->nlayers; i++)
		if (c->layers[i].path)
			err = gfs_layout_add_metafile(c->l, c->layers[i].path);
	if (!err)
		err = gfs_layout_set_note(c->l, *note);
	if (!err)
		err = pipe_plan(c);
	if (!err)
		err = pipe_entries(c);
	for (size_t y = 0; !err && s0->noptim && y < c->nstages; y++) {
		err = ds_plan_states(&c->stages[y]);
		if (!err)
			err = ds_emit_states(&c->stages[y]);
	}
	if (!err && s0->noptim) {
		err = ds_build_optim(&c->stages[0]);
		if (!err)
			err = pipe_model_srcs(c);
		c->l->optim.pipe_stages = (uint32_t)c->nstages;
	}
	if (err)
		return err;
	snprintf(what, sizeof(what), "pipeline, %zu stages", c->nstages);
	return ds_set_info(c, what, s0->noptim ? s0 : NULL, "data-parallel ranks");
}
