/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — per-rank state dicts (docs/rankdict.md): what verl's
 * FSDPCheckpointManager and other FSDP trainers write when every rank calls
 * torch.save(model.state_dict()):
 *
 *   model_world_size_W_rank_R.pt   R = 0..W-1: {key: DTensor (FSDP2),
 *                                  ShardedTensor (FSDP1 SHARDED_STATE_DICT)
 *                                  or tensor (a 1-rank save, buffers)}
 *   fsdp_config.json               {"FSDP_version": 1|2, "world_size": W}
 *   huggingface/                   the model's config (passed through)
 *
 * Each key's shards are placed by their placements (DTensor: Shard(d) as
 * torch.chunk cuts, Replicate served from the replica of coordinate 0;
 * ShardedTensor: each local shard's offsets and sizes); a plain tensor
 * comes from rank 0.  Two keys viewing one storage the same way on every
 * rank are tied: the later one is an alias.  Only metadata is read.
 */
#ifndef GATHERFS_IMPORT_RANKDICT_H
#define GATHERFS_IMPORT_RANKDICT_H

#include "gatherfs/index/layout.h"

#define GFS_RD_MAX_RANKS 65536 /* bound on the world size */

/*
 * gfs_rankdict_detect(): does directory dir look like a per-rank save: it
 * holds a model_world_size_W_rank_R.pt file, or an actor/ or critic/
 * directory holding one (verl's global_step_N), or it is a verl
 * checkpoint root: its latest_checkpointed_iteration.txt holds a number
 * and global_step_N directories lie beside it (Megatron's file of that name
 * goes with iter_NNNNNNN directories instead).
 */
bool gfs_rankdict_detect(const char *dir);

/*
 * gfs_import_rankdict(): import the per-rank save at dir: the directory
 * holding the rank files; or a global_step_N directory: its subdirectory
 * tag (a role: "actor" without tag, "critic"...); or a verl root: the
 * global_step_N directory its latest_checkpointed_iteration.txt names, then
 * as before.  Every rank 0..W-1 must be present exactly once (one world
 * size W among the names, equal to fsdp_config.json's when present), every
 * file holding the same keys in the same order, each key of one kind,
 * dtype, global shape and placement on every rank, the DTensors' mesh
 * coordinates one per rank, and the shards tiling each tensor; otherwise
 * one error line naming the file.  The layout's format is "rankdict", its
 * base_dir the rank files' directory, its root_dir that directory's
 * huggingface/ when there is one (so a mount passes config.json through).
 * @return GFS_OK and a finished layout in *out.
 */
gfs_err gfs_import_rankdict(const char *dir, const char *tag, gfs_layout **out);

#endif
