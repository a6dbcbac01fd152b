/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — DeepSpeed importer: mixture of experts (ds_internal.h).
 *
 * Expert files (layer_L_expert_E_mp_rank_00_model_states.pt), the dense
 * and expert param groups of the optimizer, the expert-parallel ranks'
 * flats, and the entries and optimizer states of dense and expert params;
 * also a mixture-of-experts save without optimizer files.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ds_internal.h"

/* -------------------------------------------------------------------- MoE */

#define EXPERTS_AT "experts.deepspeed_experts."

/*
 * A param of a mixture-of-experts checkpoint: its module tensor and where
 * its master (and each optimizer state) lies.
 */
typedef struct moe_param {
	const char *name;    /* borrowed from a pickle */
	ds_file *f;          /* the file holding its module tensor */
	const gfs_pv *value; /* its module tensor */
	size_t flat;         /* 0: the dense flat; 1 + e: expert-parallel rank e's */
	uint64_t off;        /* element offset in that flat */
	const char *alias;   /* a second name of this param (a tied weight), or NULL */
	bool module_value;   /* no optimizer holds it (a buffer, a frozen param): the module tensor */
	uint64_t numel;
	uint32_t ndim;
	uint64_t shape[GFS_MAX_DIMS];
} moe_param;

gfs_err ds_moe_open(ds_ckpt *c, const ds_dir *d)
{
	const ds_file *m0 = &c->model[0];
	const gfs_pv *ne = gfs_pv_dict_get(m0->root, "num_experts");
	uint64_t total = 0;
	size_t k = 0;

	if (!ne || (ne->kind != GFS_PV_LIST && ne->kind != GFS_PV_TUPLE) || gfs_pv_seq_len(ne) == 0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: expert files (%s), but no num_experts list",
				m0->path, d->expert);
	c->nmoe = gfs_pv_seq_len(ne);
	c->moe_n = gfs_calloc(c->nmoe, sizeof(*c->moe_n));
	if (!c->moe_n)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t L = 0; L < c->nmoe; L++) {
		int64_t n;

		if (!gfs_pv_int(gfs_pv_seq_at(ne, L), &n) || n < 1 || n > DS_MAX_RANKS)
			return gfs_fail(GFS_ERR_FORMAT, "%s: num_experts[%zu] is not an integer in 1..%d",
					m0->path, L, DS_MAX_RANKS);
		c->moe_n[L] = (uint64_t)n;
		total += (uint64_t)n;
	}
	if (total < d->nexpert)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: %zu expert files, but num_experts in %s says %llu: expert files of two saves",
				c->tagdir, d->nexpert, m0->name, (unsigned long long)total);
	c->experts = gfs_calloc((size_t)total, sizeof(*c->experts));
	if (!c->experts)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	c->nexperts = (size_t)total;
	for (size_t i = 0; i < c->nexperts; i++)
		c->experts[i].fd = -1;
	for (size_t L = 0; L < c->nmoe; L++)
		for (uint64_t x = 0; x < c->moe_n[L]; x++) {
			char name[128];
			gfs_err err;

			snprintf(name, sizeof(name), "layer_%zu_expert_%llu_mp_rank_00_model_states.pt", L,
				 (unsigned long long)x);
			err = ds_file_open(&c->experts[k], c->tagdir, name);
			/* only its pickle is used (names, shapes): no fd is held
			 * per expert (thousands of them) */
			gfs_tzip_close(c->experts[k].zip);
			c->experts[k].zip = NULL;
			if (c->experts[k].fd >= 0)
				close(c->experts[k].fd);
			c->experts[k++].fd = -1;
			if (err == GFS_ERR_NOTFOUND)
				return gfs_fail(err,
						"%s/%s is missing: expert %llu of MoE layer %zu (num_experts in %s)",
						c->tagdir, name, (unsigned long long)x, L, m0->name);
			if (err)
				return err;
		}
	return GFS_OK;
}

/*
 * moe_groups(): the optimizer's two param groups: the dense one and the
 * expert one (moe: True, named ep_size_N: c->ep = N, which divides the
 * world size and each layer's expert count).
 */
static gfs_err moe_groups(ds_ckpt *c)
{
	const gfs_pv *pg = gfs_pv_dict_get(ds_base_state(c, 0), "param_groups");
	const gfs_pv *parts = gfs_pv_dict_get(ds_osd_of(&c->optim[0]), "single_partition_of_fp32_groups");
	size_t ndense = 0, nexp = 0;

	if (c->stage == 3)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: a ZeRO-3 mixture-of-experts checkpoint is not supported", c->tagdir);
	if (!pg || gfs_pv_seq_len(pg) != gfs_pv_seq_len(parts))
		return gfs_fail(GFS_ERR_FORMAT, "%s: %zu param groups but %zu fp32 partitions",
				c->optim[0].path, gfs_pv_seq_len(pg), gfs_pv_seq_len(parts));
	for (size_t g = 0; g < gfs_pv_seq_len(pg); g++) {
		const gfs_pv *grp = gfs_pv_seq_at(pg, g);
		const gfs_pv *moe = gfs_pv_dict_get(grp, "moe");
		const char *nm = gfs_pv_name(gfs_pv_dict_get(grp, "name"));
		const char *p = nm;

		if (!moe || moe->kind != GFS_PV_BOOL || !moe->u.b) {
			c->gdense = g;
			ndense++;
			continue;
		}
		if (!nm || !ds_eat(&p, "ep_size_") || !ds_parse_u64(&p, &c->ep) || *p || c->ep < 1 ||
		    c->ep > c->ws || c->ws % c->ep != 0)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: expert param group %zu is not named ep_size_N with N dividing the %llu ranks",
					c->optim[0].path, g, (unsigned long long)c->ws);
		c->gexp = g;
		nexp++;
	}
	if (ndense != 1 || nexp != 1)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: %zu dense and %zu expert param groups: only one of each is supported",
				c->optim[0].path, ndense, nexp);
	for (size_t L = 0; L < c->nmoe; L++)
		if (c->moe_n[L] % c->ep != 0)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: num_experts[%zu] is %llu, not a multiple of the expert-parallel size %llu",
					c->model[0].path, L, (unsigned long long)c->moe_n[L],
					(unsigned long long)c->ep);
	return GFS_OK;
}

/* The tensor of rank r, param group g, laid out like its fp32 partition. */
typedef gfs_err (*moe_part_fn)(ds_ckpt *c, size_t r, size_t g, const char *state, tview *tv);

/* moe_fp32_part(): rank r's fp32 partition of param group g (a moe_part_fn). */
static gfs_err moe_fp32_part(ds_ckpt *c, size_t r, size_t g, const char *state, tview *tv)
{
	(void)state;
	return ds_fp32_part(c, r, g, tv);
}

/* moe_state_part(): rank r's optimizer state `state` of param group g (a moe_part_fn). */
static gfs_err moe_state_part(ds_ckpt *c, size_t r, size_t g, const char *state, tview *tv)
{
	char what[128];

	snprintf(what, sizeof(what), "optimizer state %s of param group %zu", state, g);
	return ds_tensor_view(c, &c->optim[r], gfs_pv_dict_get(ds_group_state(c, r, g), state), what, tv);
}

/*
 * moe_flats(): fl[0] the dense group's partitions of every rank; fl[1 + e]
 * the expert group's partitions of expert-parallel rank e's expert
 * data-parallel ranks (e, e + ep, e + 2 ep, ...), as DeepSpeed groups them.
 */
static gfs_err moe_flats(ds_ckpt *c, moe_part_fn part, const char *state, flat *fl)
{
	gfs_err err = GFS_OK;

	for (uint64_t i = 0; i <= c->ep; i++)
		fl[i].dtype = GFS_DT_INVALID;
	for (uint64_t r = 0; !err && r < c->ws; r++) {
		tview tv;

		err = part(c, (size_t)r, c->gdense, state, &tv);
		if (!err)
			err = ds_flat_append(&fl[0], &tv, tv.numel, c->optim[r].path);
	}
	for (uint64_t e = 0; !err && e < c->ep; e++)
		for (uint64_t r = e; !err && r < c->ws; r += c->ep) {
			tview tv;

			err = part(c, (size_t)r, c->gexp, state, &tv);
			if (!err)
				err = ds_flat_append(&fl[1 + e], &tv, tv.numel, c->optim[r].path);
		}
	return err;
}

/* moe_push(): entry k of dict of tensors sd in file f as a param of flat fl at *off. */
/* moe_nentries(): the entries of module and of every expert file's state dict. */
static size_t moe_nentries(const ds_ckpt *c, const gfs_pv *module)
{
	size_t count = module->u.dict.len;

	for (size_t i = 0; i < c->nexperts; i++)
		count += c->experts[i].root->u.dict.len;
	return count;
}

static gfs_err moe_push(ds_ckpt *c, ds_file *f, const gfs_pv *sd, size_t k, size_t fl,
			uint64_t *off)
{
	const gfs_pv_item *it = &sd->u.dict.items[k];
	moe_param *p = &c->mparams[c->nmparams];
	const gfs_pv_tensor *t;

	p->name = gfs_pv_name(it->key);
	if (!p->name)
		return gfs_pv_name_fail(f->path, "state dict key", k, it->key);
	if (!it->value || it->value->kind != GFS_PV_TENSOR)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s is not a tensor", f->path, p->name);
	t = it->value->u.tensor;
	if (t->ndim > GFS_MAX_DIMS)
		return gfs_fail(GFS_ERR_LIMIT, "%s: %s: too many dimensions", f->path, p->name);
	p->f = f;
	p->value = it->value;
	p->flat = fl;
	p->off = *off;
	p->ndim = t->ndim;
	p->numel = 1;
	for (uint32_t d = 0; d < t->ndim; d++) {
		if (t->size[d] < 0 || !gfs_mul_u64(p->numel, (uint64_t)t->size[d], &p->numel))
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s: bad size", f->path, p->name);
		p->shape[d] = (uint64_t)t->size[d];
	}
	if (!gfs_add_u64(*off, p->numel, off))
		return gfs_fail(GFS_ERR_FORMAT, "%s: sizes overflow", f->path);
	c->nmparams++;
	return GFS_OK;
}

/*
 * moe_fits(): params taking used elements fit flat fl of group g written
 * by the ranks from r0 on, step apart: it holds them and at most the
 * padding those ranks record (group_paddings).
 */
static gfs_err moe_fits(const ds_ckpt *c, const flat *fl, size_t g, uint64_t r0, uint64_t step,
			uint64_t used, const char *what)
{
	uint64_t pad = 0;

	for (uint64_t r = r0; r < c->ws; r += step) {
		int64_t p;

		if (gfs_pv_int(gfs_pv_seq_at(gfs_pv_dict_get(ds_osd_of(&c->optim[r]), "group_paddings"), g),
			       &p) && p > 0)
			pad += (uint64_t)p;
	}
	if (used > fl->total || (used != fl->total && used + pad != fl->total))
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: %s take %llu elements, but their fp32 partitions hold %llu (padding %llu): a rank file is missing or from another run, or the model has buffers or frozen params",
				c->tagdir, what, (unsigned long long)used, (unsigned long long)fl->total,
				(unsigned long long)pad);
	return GFS_OK;
}

/*
 * moe_dense_names(): the names of the dense group's params in the order
 * of its flat, from the ranks' param_slice_mappings (rank by rank, a param
 * split between ranks once), in *names (to free; *n of them).  *names is
 * NULL when a rank records none (DeepSpeed before 0.10): every `module`
 * entry is then taken for a param.
 */
static gfs_err moe_dense_names(const ds_ckpt *c, const char ***names, size_t *n)
{
	size_t cap = 0;

	*names = NULL;
	*n = 0;
	for (uint64_t r = 0; r < c->ws; r++) {
		const gfs_pv *g = gfs_pv_seq_at(gfs_pv_dict_get(ds_osd_of(&c->optim[r]),
								"param_slice_mappings"), c->gdense);

		if (!g || g->kind != GFS_PV_DICT)
			return GFS_OK;
		cap += g->u.dict.len;
	}
	*names = gfs_calloc(cap ? cap : 1, sizeof(**names));
	if (!*names)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (uint64_t r = 0; r < c->ws; r++) {
		const gfs_pv *g = gfs_pv_seq_at(gfs_pv_dict_get(ds_osd_of(&c->optim[r]),
								"param_slice_mappings"), c->gdense);

		for (size_t k = 0; k < g->u.dict.len; k++) {
			const char *name = gfs_pv_name(g->u.dict.items[k].key);

			if (!name)
				return gfs_pv_name_fail(c->optim[r].path, "param_slice_mappings key", k,
							g->u.dict.items[k].key);
			if (*n == 0 || strcmp((*names)[*n - 1], name) != 0)
				(*names)[(*n)++] = name;
		}
	}
	return GFS_OK;
}

/* same_tensor(): do pickled tensors a and b view the same elements of one storage? */
static bool same_tensor(const gfs_pv *a, const gfs_pv *b)
{
	const gfs_pv_tensor *x = a->u.tensor, *y = b->u.tensor;

	if (x->offset != y->offset || x->ndim != y->ndim || !x->storage.key || !y->storage.key ||
	    strcmp(x->storage.key, y->storage.key) != 0)
		return false;
	for (uint32_t d = 0; d < x->ndim; d++)
		if (x->size[d] != y->size[d] || x->stride[d] != y->stride[d])
			return false;
	return true;
}

/*
 * moe_dense(): `module`'s entries as the dense params of c->mparams, in
 * order; with the dense group's names (moe_dense_names(), n of them, in
 * the same order), an entry not among them is a second name of an earlier
 * param when it is the same tensor (a tied weight), else served as the
 * module holds it (a buffer, a frozen param).
 */
static gfs_err moe_dense(ds_ckpt *c, const gfs_pv *module, const char **names, size_t n,
			 uint64_t *off)
{
	ds_file *m0 = &c->model[0];
	size_t j = 0;
	gfs_err err = GFS_OK;

	for (size_t k = 0; !err && k < module->u.dict.len; k++) {
		moe_param *p = &c->mparams[c->nmparams];

		err = moe_push(c, m0, module, k, 0, off);
		if (err || !names)
			continue;
		if (j < n && strcmp(p->name, names[j]) == 0) {
			j++;
			continue;
		}
		*off -= p->numel;
		p->module_value = true;
		for (size_t i = 0; i + 1 < c->nmparams && !p->alias; i++)
			if (!c->mparams[i].module_value && !c->mparams[i].alias &&
			    same_tensor(c->mparams[i].value, p->value))
				p->alias = c->mparams[i].name;
	}
	if (!err && names && j < n)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: param %s of the optimizer's param_slice_mappings is not in `module` (or not in its order)",
				m0->path, names[j]);
	return err;
}

/* expert_id(): is key an entry of expert gid (...experts.deepspeed_experts.GID.NAME)? */
static bool expert_id(const char *key, uint64_t gid)
{
	const char *p = strstr(key, EXPERTS_AT);
	uint64_t n;

	if (!p)
		return false;
	p += sizeof(EXPERTS_AT) - 1;
	return ds_parse_u64(&p, &n) && *p == '.' && n == gid;
}

/*
 * moe_plan(): the params in c->mparams: `module`'s entries (moe_dense():
 * the dense params, in order, the dense flat), then the experts, MoE layer by layer
 * in global id order, each in its expert-parallel rank's flat (rank e
 * holds experts e * n/ep .. (e + 1) * n/ep - 1 of each layer, layer by
 * layer).
 */
static gfs_err moe_plan(ds_ckpt *c)
{
	const ds_file *m0 = &c->model[0];
	const gfs_pv *module = gfs_pv_dict_get(m0->root, "module");
	uint64_t *eoff;
	const char **names = NULL;
	size_t count, nnames = 0;
	uint64_t off = 0;
	gfs_err err;

	if (!module || module->kind != GFS_PV_DICT)
		return gfs_fail(GFS_ERR_FORMAT, "%s: no `module` state dict", m0->path);
	count = moe_nentries(c, module);
	c->mparams = gfs_calloc(count ? count : 1, sizeof(*c->mparams));
	c->mflats = gfs_calloc((size_t)c->ep + 1, sizeof(*c->mflats));
	eoff = gfs_calloc((size_t)c->ep, sizeof(*eoff));
	if (!c->mparams || !c->mflats || !eoff) {
		free(eoff);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	err = moe_flats(c, moe_fp32_part, NULL, c->mflats);
	if (!err)
		err = moe_dense_names(c, &names, &nnames);
	if (!err)
		err = moe_dense(c, module, names, nnames, &off);
	free(names);
	if (!err)
		err = moe_fits(c, &c->mflats[0], c->gdense, 0, 1, off, "the dense params (`module`)");
	for (size_t L = 0, base = 0; !err && L < c->nmoe; base += c->moe_n[L++]) {
		const uint64_t nlocal = c->moe_n[L] / c->ep;

		for (uint64_t gid = 0; !err && gid < c->moe_n[L]; gid++) {
			ds_file *f = &c->experts[base + gid];
			const uint64_t e = gid / nlocal;

			for (size_t k = 0; !err && k < f->root->u.dict.len; k++) {
				err = moe_push(c, f, f->root, k, 1 + (size_t)e, &eoff[e]);
				if (!err && !expert_id(c->mparams[c->nmparams - 1].name, gid))
					err = gfs_fail(GFS_ERR_FORMAT,
						       "%s: %s is not a key of expert %llu",
						       f->path, c->mparams[c->nmparams - 1].name,
						       (unsigned long long)gid);
			}
		}
	}
	for (uint64_t e = 0; !err && e < c->ep; e++) {
		char what[96];

		snprintf(what, sizeof(what), "the experts of expert-parallel rank %llu",
			 (unsigned long long)e);
		err = moe_fits(c, &c->mflats[1 + e], c->gexp, e, c->ep, eoff[e], what);
	}
	free(eoff);
	return err;
}

/*
 * moe_zip(): file f's zip directory read again when ds_moe_open() closed it
 * (an expert file), closing the one read before: one expert's fd at a time.
 */
static gfs_err moe_zip(ds_ckpt *c, ds_file *f)
{
	gfs_err err;

	if (f->zip)
		return GFS_OK;
	if (c->zip_held) {
		gfs_tzip_close(c->zip_held->zip);
		c->zip_held->zip = NULL;
		close(c->zip_held->fd);
		c->zip_held->fd = -1;
		c->zip_held = NULL;
	}
	err = gfs_open_regular(f->path, 0, &f->fd, NULL);
	if (err)
		return err;
	c->zip_held = f;
	return gfs_tzip_open(f->fd, 0, f->size, f->path, NULL, &f->zip);
}

/*
 * moe_emit_one(): param p as a model tensor (state NULL) or as optimizer
 * state `state`: its elements of flats fl, or, a 0-d state, the value of
 * its flat in scal.  A second name of a param is an alias of it, and an
 * entry no optimizer holds is the module's tensor (it has no states).
 */
static gfs_err moe_emit_one(ds_ckpt *c, const moe_param *p, const flat *fl, const tview *scal,
			    const char *state)
{
	size_t ti;
	gfs_err err;

	if (p->module_value && state)
		return GFS_OK;
	if (p->alias)
		return gfs_layout_add_alias(c->l, p->name, p->alias);
	if (p->module_value) {
		tview tv;

		err = moe_zip(c, p->f);
		if (!err)
			err = ds_tensor_view(c, p->f, p->value, p->name, &tv);
		return err ? err : ds_emit_view(c, p->name, &tv, tv.numel, tv.ndim, tv.shape);
	}
	if (scal) {
		const tview *tv = &scal[p->flat];

		err = gfs_layout_add_state(c->l, state, p->name, tv->dtype, 0, NULL, &ti);
		return err ? err : gfs_layout_add_piece(c->l, ti, tv->src, tv->off,
							gfs_dtype_size(tv->dtype));
	}
	if (p->off + p->numel > fl[p->flat].total)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: optimizer state %s of %s lies beyond the %llu elements its ranks hold",
				c->tagdir, state, p->name, (unsigned long long)fl[p->flat].total);
	if (state)
		err = gfs_layout_add_state(c->l, state, p->name, fl[p->flat].dtype, p->ndim, p->shape,
					   &ti);
	else
		err = gfs_layout_add_tensor(c->l, p->name, fl[p->flat].dtype, p->ndim, p->shape, &ti);
	return err ? err : ds_flat_emit(c->l, ti, &fl[p->flat], p->off, p->numel);
}

/*
 * moe_emit(): every param (moe_emit_one()) in the model's state_dict()
 * order: `module`'s, each MoE layer's experts right after the last entry
 * sharing their prefix (...deepspeed_moe.: the gate), or at the end when
 * none does.
 */
static gfs_err moe_emit(ds_ckpt *c, const flat *fl, const tview *scal, const char *state)
{
	const size_t ndense = gfs_pv_dict_get(c->model[0].root, "module")->u.dict.len;
	size_t *at = gfs_calloc(c->nmoe, sizeof(*at));
	size_t *first = gfs_calloc(c->nmoe + 1, sizeof(*first));
	gfs_err err = GFS_OK;

	if (!at || !first) {
		free(at);
		free(first);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	first[0] = ndense;
	for (size_t L = 0, base = 0; L < c->nmoe; base += c->moe_n[L++]) {
		first[L + 1] = first[L];
		for (size_t x = 0; x < c->moe_n[L]; x++)
			first[L + 1] += c->experts[base + x].root->u.dict.len;
		at[L] = ndense;
		if (first[L + 1] > first[L]) {
			const char *k0 = c->mparams[first[L]].name;
			const size_t plen = (size_t)(strstr(k0, EXPERTS_AT) - k0);

			for (size_t i = 0; plen > 0 && i < ndense; i++)
				if (strncmp(c->mparams[i].name, k0, plen) == 0)
					at[L] = i;
		}
	}
	for (size_t i = 0; !err && i <= ndense; i++) {
		if (i < ndense)
			err = moe_emit_one(c, &c->mparams[i], fl, scal, state);
		for (size_t L = 0; !err && L < c->nmoe; L++)
			if (at[L] == (i < ndense ? i : ndense))
				for (size_t j = first[L]; !err && j < first[L + 1]; j++)
					err = moe_emit_one(c, &c->mparams[j], fl, scal, state);
	}
	free(at);
	free(first);
	return err;
}

/*
 * moe_states(): the optimizer states rank 0 holds for its dense group,
 * each laid out like the masters (moe_flats()); a 0-d one (the step)
 * from expert-data-parallel rank 0 of each flat.
 */
static gfs_err moe_states(ds_ckpt *c)
{
	const gfs_pv *st0 = ds_group_state(c, 0, c->gdense);
	gfs_err err = GFS_OK;

	for (size_t k = 0; !err && st0 && st0->kind == GFS_PV_DICT && k < st0->u.dict.len; k++) {
		const char *name = gfs_pv_name(st0->u.dict.items[k].key);
		const gfs_pv *v = st0->u.dict.items[k].value;
		flat *fl;
		tview *scal = NULL;

		if (!name || strpbrk(name, STATE_BAD_BYTES) || !*name || strcmp(name, ".") == 0 ||
		    strcmp(name, "..") == 0)
			return gfs_fail(GFS_ERR_FORMAT, "%s: optimizer state %zu has no usable name",
					c->optim[0].path, k);
		if (!v || v->kind != GFS_PV_TENSOR)
			continue;
		fl = gfs_calloc((size_t)c->ep + 1, sizeof(*fl));
		if (!fl)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		if (v->u.tensor->ndim == 0) {
			scal = gfs_calloc((size_t)c->ep + 1, sizeof(*scal));
			err = scal ? moe_state_part(c, 0, c->gdense, name, &scal[0])
				   : gfs_fail(GFS_ERR_NOMEM, "out of memory");
			for (uint64_t e = 0; !err && e < c->ep; e++)
				err = moe_state_part(c, (size_t)e, c->gexp, name, &scal[1 + e]);
		} else {
			err = moe_flats(c, moe_state_part, name, fl);
		}
		if (!err)
			err = moe_emit(c, fl, scal, name);
		ds_flats_free(fl, (size_t)c->ep + 1);
		free(scal);
	}
	return err;
}

gfs_err ds_moe_build_plain(ds_ckpt *c)
{
	ds_file *m0 = &c->model[0];
	const gfs_pv *module = gfs_pv_dict_get(m0->root, "module");
	size_t count;
	uint64_t off = 0, total = 0;
	char what[128];
	gfs_err err = GFS_OK;

	if (!module || module->kind != GFS_PV_DICT)
		return gfs_fail(GFS_ERR_FORMAT, "%s: no `module` state dict", m0->path);
	count = moe_nentries(c, module);
	c->mparams = gfs_calloc(count ? count : 1, sizeof(*c->mparams));
	if (!c->mparams)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t k = 0; !err && k < module->u.dict.len; k++)
		err = moe_push(c, m0, module, k, 0, &off);
	for (size_t L = 0, base = 0; !err && L < c->nmoe; base += c->moe_n[L++])
		for (uint64_t gid = 0; !err && gid < c->moe_n[L]; gid++) {
			ds_file *f = &c->experts[base + gid];

			for (size_t k = 0; !err && k < f->root->u.dict.len; k++) {
				err = moe_push(c, f, f->root, k, 0, &off);
				if (!err && !expert_id(c->mparams[c->nmparams - 1].name, gid))
					err = gfs_fail(GFS_ERR_FORMAT, "%s: %s is not a key of expert %llu",
						       f->path, c->mparams[c->nmparams - 1].name,
						       (unsigned long long)gid);
			}
		}
	for (size_t i = 0; !err && i < c->nmparams; i++) {
		const char *dt = c->mparams[i].value->u.tensor->dtype;
		const char *cls = c->mparams[i].value->u.tensor->storage.cls;
		const gfs_dtype d = dt ? gfs_dtype_parse(dt) : gfs_dtype_from_storage_class(cls);

		c->mparams[i].module_value = true;
		if (d == GFS_DT_F16 || d == GFS_DT_BF16)
			err = gfs_fail(GFS_ERR_UNSUPPORTED,
				       "%s: %s is %s in a mixture-of-experts checkpoint without ZeRO: its fp32 master is in the torch optimizer state of the expp_rank_*_optim_states.pt files, which gatherfs does not read",
				       c->mparams[i].f->path, c->mparams[i].name, gfs_dtype_name(d));
	}
	for (size_t i = 0; !err && i < c->nexperts; i++)
		err = gfs_layout_add_metafile(c->l, c->experts[i].path);
	if (!err)
		err = moe_emit(c, NULL, NULL, NULL);
	if (err)
		return err;
	for (size_t L = 0; L < c->nmoe; L++)
		total += c->moe_n[L];
	snprintf(what, sizeof(what), "mixture of experts (%llu experts in %zu MoE layers)",
		 (unsigned long long)total, c->nmoe);
	return ds_set_info(c, what, NULL, NULL);
}

gfs_err ds_moe_build(ds_ckpt *c)
{
	uint64_t total = 0;
	char what[160];
	gfs_err err = GFS_OK;

	for (size_t i = 0; !err && i < c->nexperts; i++)
		err = gfs_layout_add_metafile(c->l, c->experts[i].path);
	if (!err)
		err = moe_groups(c);
	if (!err)
		err = moe_plan(c);
	if (!err)
		err = moe_emit(c, c->mflats, NULL, NULL);
	if (!err)
		err = moe_states(c);
	if (!err)
		err = ds_build_optim(c);
	if (err)
		return err;
	c->l->optim.moe = true;
	for (size_t L = 0; L < c->nmoe; L++)
		total += c->moe_n[L];
	snprintf(what, sizeof(what),
		 "mixture of experts (%llu experts in %zu MoE layers, expert-parallel size %llu)",
		 (unsigned long long)total, c->nmoe, (unsigned long long)c->ep);
	return ds_set_info(c, what, c, "ranks");
}
