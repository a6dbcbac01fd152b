/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — DeepSpeed ZeRO 1/2/3 (and BF16_Optimizer) importer: the entry
 * (gfs_import_deepspeed()).  The pieces share ds_internal.h.
 *
 * Reads the pickles of every *_model_states.pt and *_optim_states.pt of one
 * tag and maps every output byte to ranges of those files (DESIGN.md §2):
 *   - key order: rank 0's `module` keys;
 *   - trainable params: fp32 masters from the optimizer partitions
 *     (stage 1/2: single_partition_of_fp32_groups, one flat per param group
 *     split across ranks; stage 3: fp32_flat_groups, each param split into
 *     ceil(numel / ws) elements per rank);
 *   - frozen params: stage 3 gathered from every rank's
 *     frozen_param_fragments, stage 2 from rank 0's, stage 1 and
 *     BF16_Optimizer from `module`, in their stored dtype;
 *   - buffers from `module` in their stored dtype;
 *   - `shared_params` aliases.
 * Padding elements are never mapped.  Tensor payloads are never read.
 * Every rank file must be the file its name says: its zip folder is its
 * own name (or archive/, which names nothing: a note), the optimizer
 * states files agree on stage and partition_count (the world size), and
 * the model states read record that dp_world_size.
 *
 * Split models (docs/deepspeed-3d.md): a pipeline (layer files; one
 * ds_ckpt per stage, each mapped as above, keys `N.NAME` by layer and a
 * tied weight once as tied_modules.KEY.NAME), mixture of experts (expert
 * files; dense and expert param groups) and tensor parallelism (one
 * ds_ckpt per tensor rank, slices joined as universal_checkpoint_info's
 * patterns say).
 */
#include "config.h"

#include <stdlib.h>

#include "ds_internal.h"

static void ckpt_free(ds_ckpt *c)
{
	for (size_t r = 0; r < c->noptim; r++)
		ds_file_close(&c->optim[r]);
	for (size_t r = 0; c->model && r < c->nmodel; r++)
		ds_file_close(&c->model[r]);
	free(c->optim);
	free(c->model);
	free(c->train);
	free(c->tmap);
	ds_flats_free(c->rank_flats, (size_t)c->ws);
	ds_flats_free(c->group_flats, c->ngroups);
	for (size_t k = 0; k < c->nstates; k++) {
		ds_flats_free(c->states[k].flats, c->stage == 3 ? (size_t)c->ws : c->ngroups);
		free(c->states[k].values);
	}
	free(c->states);
	free(c->fkeys);
	for (size_t i = 0; i < c->nrfsets; i++)
		free(c->rfsets[i].ids);
	free(c->rfsets);
	for (size_t y = 0; y < c->nstages; y++) {
		c->stages[y].l = NULL;
		ckpt_free(&c->stages[y]);
	}
	free(c->stages);
	for (size_t i = 0; i < c->nlayers; i++)
		ds_file_close(&c->layers[i]);
	free(c->layers);
	free(c->play);
	for (size_t i = 0; i < c->nexperts; i++)
		ds_file_close(&c->experts[i]);
	free(c->experts);
	free(c->moe_n);
	free(c->mparams);
	ds_flats_free(c->mflats, c->mflats ? (size_t)c->ep + 1 : 0);
	free(c->tagdir);
	gfs_layout_free(c->l);
}

/*
 * mp_one(): a checkpoint with files of model-parallel rank 0 only records
 * mp_world_size 1 (or none): the files of the other ranks are not missing.
 */
static gfs_err mp_one(const ds_ckpt *c)
{
	const ds_file *m0 = &c->model[0];
	int64_t n;

	if (gfs_pv_int(gfs_pv_dict_get(m0->root, "mp_world_size"), &n) && n > 1)
		return gfs_fail(GFS_ERR_NOTFOUND,
				"%s/mp_rank_01_model_states.pt is missing: %s says %lld model-parallel ranks (mp_world_size)",
				c->tagdir, m0->name, (long long)n);
	return GFS_OK;
}

/*
 * not_dense(): refuse what this importer cannot serve: layer files of
 * tensor ranks > 0 (pipeline and tensor parallelism), expert files with
 * more than one model-parallel rank.
 */
static gfs_err not_dense(const char *tagdir, const ds_dir *d)
{
	if (d->expert && (d->nlayers || d->nmp > 1))
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s/%s: a mixture-of-experts checkpoint with pipeline or tensor parallelism: not supported",
				tagdir, d->expert);
	if (d->tp_layer)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s/%s: a layer file of tensor-parallel rank > 0: tensor parallelism is not supported (DeepSpeed does not record which dimension a param is split on)",
				tagdir, d->tp_layer);
	return GFS_OK;
}

gfs_err gfs_import_deepspeed(const char *dir, const char *tag, const char *tp_split,
			     gfs_layout **out)
{
	ds_ckpt c = { .label = dir, .tp_split = tp_split };
	ds_dir d = { 0 };
	char *root = NULL, *note = NULL;
	bool pipe = false;
	gfs_err err = ds_resolve_tagdir(dir, tag, &c.tagdir, &root, &note);

	if (!err)
		err = ds_list_tagdir(c.tagdir, &d);
	if (!err)
		err = not_dense(c.tagdir, &d);
	if (err)
		goto out;
	pipe = d.nlayers > 0 || d.nmp > 1;
	c.tp = d.nlayers == 0;
	if (tp_split && !(pipe && c.tp)) {
		err = gfs_fail(GFS_ERR_INVAL,
			       "%s: a tp_split applies to a tensor-parallel checkpoint only, not to this %s one",
			       c.tagdir, d.nlayers ? "pipeline" : d.expert ? "mixture-of-experts" : "data-parallel");
		goto out;
	}
	if (pipe) {
		err = ds_pipe_open(&c, &d);
	} else {
		err = d.expert && d.mp[0].count_optim == 0 ? ds_moe_plain_open(&c, &d.mp[0])
							   : ds_open_files(&c, &d.mp[0]);
		if (!err)
			err = mp_one(&c);
		if (!err && d.expert)
			err = ds_moe_open(&c, &d);
		if (!err)
			err = ds_anon_note(&c, &note);
	}
	ds_dir_free(&d);
	gfs_pickle_pool_drain(); /* the ranks' pickles are read: not kept while emitting */
	if (!err)
		err = gfs_layout_new("deepspeed", c.tagdir, &c.l);
	if (!err)
		err = gfs_layout_set_root(c.l, root);
	if (!err && pipe) {
		err = c.tp ? ds_tp_build(&c, &note) : ds_pipe_build(&c, &note);
		goto finish;
	}
	for (size_t r = 0; !err && r < c.noptim; r++)
		err = gfs_layout_add_metafile(c.l, c.optim[r].path);
	for (size_t r = 0; !err && r < c.nmodel; r++)
		err = gfs_layout_add_metafile(c.l, c.model[r].path);
	if (!err)
		err = gfs_layout_set_note(c.l, note);
	if (!err && c.nexperts) {
		err = c.noptim ? ds_moe_build(&c) : ds_moe_build_plain(&c);
		goto finish;
	}
	if (!err)
		err = c.stage == 3 ? ds_plan_stage3(&c) : ds_plan_stage12(&c);
	if (!err)
		err = ds_tmap_build(&c);
	if (!err)
		err = ds_build_entries(&c);
	if (!err)
		err = ds_plan_states(&c);
	if (!err)
		err = ds_emit_states(&c);
	if (!err)
		err = ds_build_optim(&c);
	if (!err)
		err = ds_set_info(&c, NULL, &c, "ranks");
finish:
	if (!err)
		err = gfs_layout_finish(c.l, c.tagdir);
	if (!err) {
		*out = c.l;
		c.l = NULL;
	}
out:
	ds_dir_free(&d);
	ckpt_free(&c);
	free(root);
	free(note);
	return err;
}
