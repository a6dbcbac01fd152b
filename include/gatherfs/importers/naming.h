/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — model-family naming: how a Megatron-Core GPT model's tensors
 * (the Megatron view: module names with global layer and expert numbers,
 * or their TransformerEngine-style norm keys) become a Hugging Face model's
 * (Llama, Qwen2, Mixtral), as one table per family.  Every re-arrangement
 * (QKV split per query group, gate/up split, vocabulary trim) is byte
 * ranges of the Megatron tensors: pieces in a derived layout, no
 * arithmetic.  The legacy and torch_dist importers share it
 * (docs/megatron.md has the tables).
 */
#ifndef GATHERFS_NAMING_H
#define GATHERFS_NAMING_H

#include "gatherfs/index/layout.h"
#include "gatherfs/readers/pickle.h"

/* The architecture of a model, as the naming needs it. */
typedef struct gfs_arch {
	const char *family;  /* "llama", "qwen2", "mixtral"; NULL: the table cannot express it */
	char why[160];       /* family NULL: the feature that stops it, one phrase */
	bool incomplete;     /* family NULL because the args lack a size (hf_config can give it) */
	const char *source;  /* "the args of FILE" or "FILE": where the numbers come from */
	int64_t layers, hidden, ffn, moe_ffn, heads, groups, kv_channels;
	int64_t vocab;       /* the true vocabulary; 0: unknown */
	int64_t experts, topk, max_pos;
	double eps, theta;
	bool tied, qkv_bias;
	char *config;        /* hf_config: its config.json as read; else NULL (generated) */
	char *gen_config;    /* hf_config: its generation_config.json, or NULL */
} gfs_arch;

/*
 * gfs_arch_from_args(): the architecture a Megatron-LM args Namespace's
 * state dict (args) describes; path names the file in messages.  A
 * feature the tables cannot express leaves a->family NULL and names it in
 * a->why; numbers that cannot be (negative, heads not a multiple of the
 * query groups) are GFS_ERR_FORMAT.  src is kept in a->source (static or
 * outliving a).
 */
gfs_err gfs_arch_from_args(const gfs_pv *args, const char *src, gfs_arch *a);

/*
 * gfs_arch_from_hf_config(): the architecture of the Hugging Face
 * config.json in dir (model_type llama, mistral, qwen2 or mixtral), whose
 * text (and generation_config.json's, when present) a keeps to be served
 * as they are.  Free with gfs_arch_clear().
 */
gfs_err gfs_arch_from_hf_config(const char *dir, gfs_arch *a);

/* gfs_arch_clear(): free what a owns. */
void gfs_arch_clear(gfs_arch *a);

/*
 * gfs_naming_to_hf(): the Hugging Face view of the finished Megatron-view
 * layout mg of a model of architecture a (family set, vocab known): every
 * HF tensor of the family's table, in HF order, each covered exactly once
 * by byte ranges of mg's tensors, their shapes checked against a, and a
 * config.json (a->config, or one generated from a).  A tensor of mg the
 * table maps to nothing, or an HF tensor with no source, is
 * GFS_ERR_FORMAT naming it and label (the checkpoint).  @return GFS_OK and
 * a finished layout in *out.
 */
gfs_err gfs_naming_to_hf(const gfs_layout *mg, const gfs_arch *a, const char *label,
			 gfs_layout **out);

#endif
