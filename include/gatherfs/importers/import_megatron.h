/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — importer for legacy Megatron-LM checkpoints
 * (iter_NNNNNNN/mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt), served in the
 * Megatron view: the `model` dict's module names with global layer and
 * expert numbers, every tensor-, pipeline- and expert-parallel shard
 * merged (docs/megatron.md).
 */
#ifndef GATHERFS_IMPORT_MEGATRON_H
#define GATHERFS_IMPORT_MEGATRON_H

#include "gatherfs/importers/import.h"

/*
 * gfs_megatron_detect(): does directory dir look like a legacy Megatron-LM
 * save directory (it holds latest_checkpointed_iteration.txt) or iteration
 * directory (it holds mp_rank_00[_000[_000]]/model_optim_rng.pt)?
 */
bool gfs_megatron_detect(const char *dir);

/*
 * gfs_import_megatron(): import the legacy Megatron-LM checkpoint in dir:
 * a save directory (the iteration latest_checkpointed_iteration.txt names,
 * or tag: "iter_0000300" or "release"), or an iteration directory (tag
 * must be NULL).  The tensor-, pipeline- and expert-parallel sizes come
 * from the files' args; every rank's file must be present and agree.
 * Tensors keep their stored dtypes and come in the order of the model's
 * parameter kinds (first appearance), then by global layer and expert;
 * TransformerEngine `_extra_state` entries are left out; any other
 * non-tensor entry, a missing shard or a shard of the wrong shape is
 * refused naming the file.  Reads metadata only.
 * @return GFS_OK and a finished layout in *out.
 */
gfs_err gfs_import_megatron(const char *dir, const gfs_import_opts *opts, gfs_layout **out);

#endif
