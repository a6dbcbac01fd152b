/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — model-family naming: how a Megatron-Core GPT model's tensors
 * (the Megatron view: module names with global layer and expert numbers,
 * or their TransformerEngine-style norm keys) become a Hugging Face model's
 * (Llama, Qwen2, Mixtral, Qwen3, Qwen3-MoE, Qwen2-MoE, DeepSeek-V3), as
 * one table per family.  Every re-arrangement
 * (QKV split per query group, gate/up split, vocabulary trim) is byte
 * ranges of the Megatron tensors: pieces in a derived layout, no
 * arithmetic.  The legacy and torch_dist importers share it
 * (docs/megatron.md has the tables).
 */
#ifndef GATHERFS_NAMING_H
#define GATHERFS_NAMING_H

#include "gatherfs/index/layout.h"
#include "gatherfs/readers/pickle.h"

/* Most layers a per-layer dense/MoE pattern (moe_layer_freq as a list) may have. */
#define GFS_ARCH_MAX_PATTERN 4096

/* The architecture of a model, as the naming needs it. */
typedef struct gfs_arch {
	const char *family;  /* the HF model_type ("llama", "qwen2", "mixtral", "qwen3",
				"qwen3_moe", "qwen2_moe", "deepseek_v3"); NULL: no table expresses it */
	char why[160];       /* family NULL: the feature that stops it, one phrase */
	bool incomplete;     /* family NULL because the args lack a size (hf_config can give it) */
	const char *source;  /* "the args of FILE" or "FILE": where the numbers come from */
	int64_t layers, hidden, ffn, moe_ffn, heads, groups, kv_channels;
	int64_t vocab;       /* the true vocabulary; 0: unknown */
	int64_t experts, topk, max_pos;
	double eps, theta;
	bool tied, qkv_bias;
	bool qk_norm;        /* Qwen3 q/k norms over the head dim (qk_layernorm) */
	int64_t shared_ffn;  /* shared experts' total intermediate size; 0: none */
	bool shared_gate;    /* the shared expert's sigmoid gate (Qwen2-MoE) */
	bool norm_topk;      /* HF norm_topk_prob */
	double scaling;      /* DeepSeek routed_scaling_factor */
	bool expert_bias;    /* DeepSeek: the router's expert_bias (else the HF bias is zeros) */
	int64_t n_group, topk_group;               /* DeepSeek group-limited routing */
	int64_t q_lora, kv_lora, qk_head, qk_rope, v_head; /* MLA; q_lora 0: none */
	int64_t first_dense; /* DeepSeek first_k_dense_replace */
	uint8_t dense[GFS_ARCH_MAX_PATTERN / 8]; /* MoE model: bit l set = layer l is dense */
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

/*
 * gfs_arch_family_agree(): the family-specific fields of the args'
 * architecture a (family set) and an hf_config's c agree: model_type, the
 * dense layers (mlp_only_layers, first_k_dense_replace), norm_topk_prob,
 * the shared expert size, the MLA ranks and head dims, n_group,
 * topk_group, routed_scaling_factor.  Else GFS_ERR_FORMAT naming idir,
 * the field and both values.
 */
gfs_err gfs_arch_family_agree(const gfs_arch *a, const gfs_arch *c, const char *idir);

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
