/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — Hugging Face style sharding: split a layout's entries into
 * files of at most a given size, named and indexed as transformers'
 * save_pretrained() does:
 *
 *   model-00001-of-00003.safetensors ... + model.safetensors.index.json
 *   pytorch_model-00001-of-00003.bin ... + pytorch_model.bin.index.json
 *
 * index: {"metadata": {"total_size": N}, "weight_map": {name: file, ...}}.
 * Tensors are never split; a shard holds at least one tensor even if that
 * tensor alone exceeds the limit.  A tied alias goes to its target's shard
 * (so it can share the storage in a .bin); the safetensors index omits
 * aliases, as the safetensors files do.
 */
#ifndef GATHERFS_SHARDS_H
#define GATHERFS_SHARDS_H

#include "gatherfs/index/layout.h"

typedef struct gfs_shard {
	size_t *entries; /* layout entries in model order, aliases included */
	size_t n;
	uint64_t nbytes; /* bytes of its non-alias tensors in the output dtype */
} gfs_shard;

typedef struct gfs_shard_plan {
	gfs_shard *shards;
	size_t nshards;
	uint64_t total_size; /* bytes of every non-alias tensor in the output dtype */
} gfs_shard_plan;

/*
 * gfs_shard_plan_new(): plan shards of at most max_bytes (> 0) of tensor
 * data, greedily in model order, for tensors presented in dtype `want`.
 * @return GFS_OK and *out, freed with gfs_shard_plan_free().
 */
gfs_err gfs_shard_plan_new(const gfs_layout *l, gfs_dtype want, uint64_t max_bytes,
			   gfs_shard_plan **out);

/* gfs_shard_plan_free(): NULL allowed. */
void gfs_shard_plan_free(gfs_shard_plan *p);

/*
 * gfs_shard_name(): the file name of shard i (0-based) with the given stem
 * and extension, e.g. ("model", ".safetensors") -> "model-00001-of-00003.safetensors".
 * The caller frees *out.
 */
gfs_err gfs_shard_name(const gfs_shard_plan *p, size_t i, const char *stem,
		       const char *ext, char **out);

/*
 * gfs_shard_index_json(): the index file text for shards named with stem and
 * ext; with_aliases lists tied aliases in weight_map too (for .bin shards).
 * The caller frees *out.
 */
gfs_err gfs_shard_index_json(const gfs_layout *l, const gfs_shard_plan *p, const char *stem,
			     const char *ext, bool with_aliases, char **out);

/*
 * gfs_parse_size(): parse a size such as "5G", "500MB", "1.5GiB", "123"
 * (decimal units K/M/G/T = 10^3.., binary units Ki/Mi/Gi/Ti = 2^10..;
 * a trailing B is optional).  @return GFS_ERR_INVAL on a bad string or 0.
 */
gfs_err gfs_parse_size(const char *s, uint64_t *out);

#endif
