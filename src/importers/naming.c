/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — model-family naming (naming.h, docs/megatron.md): one table of
 * rules per family maps the Megatron view's tensors to a Hugging Face
 * model's, each rule a byte-range re-arrangement of one Megatron tensor.
 * Adding a family is a table and a config writer.
 */
#include "config.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/importers/naming.h"
#include "gatherfs/util/json.h"

#define NM_MAX_CONFIG ((uint64_t)1 << 20)
#define NM_MAX_DIM ((int64_t)1 << 40)

/* Which rows (dim 0) of the Megatron tensor an HF tensor takes. */
typedef enum nm_split {
	NM_ALL,
	NM_Q,     /* fused QKV, rows grouped per query group [q; k; v]: the q rows */
	NM_K,
	NM_V,
	NM_GATE,  /* gated fc1 [gate; up]: the first half */
	NM_UP,
	NM_VOCAB, /* the first `vocab` rows (padding trimmed) */
	NM_ZERO,  /* no source: zeros of the embedding's dtype */
} nm_split;

/* A dimension of a tensor, as the architecture gives it. */
typedef enum nm_dim {
	D_NONE, D_H, D_QKV, D_ATTN, D_2F, D_F, D_2M, D_M, D_2S, D_S, D_E, D_VPAD, D_KV, D_ONE,
	D_QLORA, D_QB, D_KVA, D_KVLORA, D_KVB, D_MLAO,
} nm_dim;

/* Where a rule applies. */
enum {
	R_DENSE = 1,    /* dense layers (all layers of a model without experts) */
	R_MOE = 2,      /* layers with experts */
	R_BIAS = 4,     /* models with QKV biases */
	R_UNTIED = 8,   /* untied embeddings (when tied, the tensor is a copy: dropped) */
	R_LAYER = 16,   /* once per layer: '#' in the names */
	R_EXPERT = 32,  /* once per expert too: '@' in the HF name */
	R_EXPAX = 64,   /* the Megatron tensor holds every expert, expert axis first (no '@') */
	R_QLORA = 128,  /* MLA with a query low-rank projection */
	R_NOQLORA = 256, /* MLA without one (q_lora_rank None) */
	R_EBIAS = 512,  /* routers with an expert bias */
	R_NOEBIAS = 1024, /* routers without one */
};

/*
 * A rule: the Megatron tensor mg (alternative spellings are rules with the
 * same hf name, of which exactly one may be present), its shape, and the
 * HF tensor hf it becomes.
 */
typedef struct nm_rule {
	const char *mg;
	nm_dim shape[2];
	const char *hf;
	nm_split split;
	unsigned when;
} nm_rule;

#define L_ "decoder.layers.#."
#define H_ "model.layers.#."
#define LE_ L_ "mlp.experts.local_experts.@."
#define LX_ L_ "mlp.experts.experts."

/* the rules every family shares: before the layers, the layer norms, after the layers */
#define EMBED { "embedding.word_embeddings.weight", { D_VPAD, D_H }, "model.embed_tokens.weight", NM_VOCAB, 0 }
#define IN_NORM                                                                                      \
	{ L_ "input_layernorm.weight", { D_H }, H_ "input_layernorm.weight", NM_ALL, R_LAYER },       \
	{ L_ "self_attention.linear_qkv.layer_norm_weight", { D_H }, H_ "input_layernorm.weight", NM_ALL, R_LAYER }
#define POST_NORM                                                                                    \
	{ L_ "pre_mlp_layernorm.weight", { D_H }, H_ "post_attention_layernorm.weight", NM_ALL, R_LAYER }, \
	{ L_ "mlp.linear_fc1.layer_norm_weight", { D_H }, H_ "post_attention_layernorm.weight", NM_ALL, R_LAYER }
#define FINAL                                                                                        \
	{ "decoder.final_layernorm.weight", { D_H }, "model.norm.weight", NM_ALL, 0 },                \
	{ "output_layer.weight", { D_VPAD, D_H }, "lm_head.weight", NM_VOCAB, R_UNTIED }
/* grouped-query attention from the fused QKV (biases when the model has them) */
#define QKV                                                                                          \
	{ L_ "self_attention.linear_qkv.weight", { D_QKV, D_H }, H_ "self_attn.q_proj.weight", NM_Q, R_LAYER }, \
	{ L_ "self_attention.linear_qkv.bias", { D_QKV }, H_ "self_attn.q_proj.bias", NM_Q, R_LAYER | R_BIAS }, \
	{ L_ "self_attention.linear_qkv.weight", { D_QKV, D_H }, H_ "self_attn.k_proj.weight", NM_K, R_LAYER }, \
	{ L_ "self_attention.linear_qkv.bias", { D_QKV }, H_ "self_attn.k_proj.bias", NM_K, R_LAYER | R_BIAS }, \
	{ L_ "self_attention.linear_qkv.weight", { D_QKV, D_H }, H_ "self_attn.v_proj.weight", NM_V, R_LAYER }, \
	{ L_ "self_attention.linear_qkv.bias", { D_QKV }, H_ "self_attn.v_proj.bias", NM_V, R_LAYER | R_BIAS }, \
	{ L_ "self_attention.linear_proj.weight", { D_H, D_ATTN }, H_ "self_attn.o_proj.weight", NM_ALL, R_LAYER }
/* a dense SwiGLU MLP (P: the HF module prefix) */
#define DENSE_MLP                                                                                    \
	{ L_ "mlp.linear_fc1.weight", { D_2F, D_H }, H_ "mlp.gate_proj.weight", NM_GATE, R_LAYER | R_DENSE }, \
	{ L_ "mlp.linear_fc1.weight", { D_2F, D_H }, H_ "mlp.up_proj.weight", NM_UP, R_LAYER | R_DENSE }, \
	{ L_ "mlp.linear_fc2.weight", { D_H, D_F }, H_ "mlp.down_proj.weight", NM_ALL, R_LAYER | R_DENSE }
/* routed experts as mlp.experts.E.{gate,up,down}_proj: SequentialMLP's local_experts.E, or
   the per-layer torch_dist tensor of a model with dense layers (expert axis first) */
#define EXPERTS                                                                                      \
	{ LE_ "linear_fc1.weight", { D_2M, D_H }, H_ "mlp.experts.@.gate_proj.weight", NM_GATE, R_LAYER | R_EXPERT | R_MOE }, \
	{ LX_ "linear_fc1.weight", { D_2M, D_H }, H_ "mlp.experts.@.gate_proj.weight", NM_GATE, R_LAYER | R_EXPERT | R_MOE | R_EXPAX }, \
	{ LE_ "linear_fc1.weight", { D_2M, D_H }, H_ "mlp.experts.@.up_proj.weight", NM_UP, R_LAYER | R_EXPERT | R_MOE }, \
	{ LX_ "linear_fc1.weight", { D_2M, D_H }, H_ "mlp.experts.@.up_proj.weight", NM_UP, R_LAYER | R_EXPERT | R_MOE | R_EXPAX }, \
	{ LE_ "linear_fc2.weight", { D_H, D_M }, H_ "mlp.experts.@.down_proj.weight", NM_ALL, R_LAYER | R_EXPERT | R_MOE }, \
	{ LX_ "linear_fc2.weight", { D_H, D_M }, H_ "mlp.experts.@.down_proj.weight", NM_ALL, R_LAYER | R_EXPERT | R_MOE | R_EXPAX }
#define ROUTER(hf) { L_ "mlp.router.weight", { D_E, D_H }, H_ hf, NM_ALL, R_LAYER | R_MOE }
/* shared experts (one fused MLP of the shared size) as P.{gate,up,down}_proj */
#define SHARED(P)                                                                                    \
	{ L_ "mlp.shared_experts.linear_fc1.weight", { D_2S, D_H }, H_ P ".gate_proj.weight", NM_GATE, R_LAYER | R_MOE }, \
	{ L_ "mlp.shared_experts.linear_fc1.weight", { D_2S, D_H }, H_ P ".up_proj.weight", NM_UP, R_LAYER | R_MOE }, \
	{ L_ "mlp.shared_experts.linear_fc2.weight", { D_H, D_S }, H_ P ".down_proj.weight", NM_ALL, R_LAYER | R_MOE }

/* Llama, Mistral, Qwen2 (QKV biases), Mixtral (experts): the tensors in the order of old releases. */
static const nm_rule llama_rules[] = {
	EMBED,
	IN_NORM,
	QKV,
	POST_NORM,
	DENSE_MLP,
	{ L_ "mlp.router.weight", { D_E, D_H }, H_ "block_sparse_moe.gate.weight", NM_ALL, R_LAYER | R_MOE },
	{ LE_ "linear_fc1.weight", { D_2M, D_H }, H_ "block_sparse_moe.experts.@.w1.weight", NM_GATE,
	  R_LAYER | R_EXPERT | R_MOE },
	{ LE_ "linear_fc2.weight", { D_H, D_M }, H_ "block_sparse_moe.experts.@.w2.weight", NM_ALL,
	  R_LAYER | R_EXPERT | R_MOE },
	{ LE_ "linear_fc1.weight", { D_2M, D_H }, H_ "block_sparse_moe.experts.@.w3.weight", NM_UP,
	  R_LAYER | R_EXPERT | R_MOE },
	FINAL,
};

/* Qwen3 and Qwen3-MoE, in the HF model's order (experts written one by one). */
static const nm_rule qwen3_rules[] = {
	EMBED,
	QKV,
	{ L_ "self_attention.q_layernorm.weight", { D_KV }, H_ "self_attn.q_norm.weight", NM_ALL, R_LAYER },
	{ L_ "self_attention.k_layernorm.weight", { D_KV }, H_ "self_attn.k_norm.weight", NM_ALL, R_LAYER },
	DENSE_MLP,
	EXPERTS,
	ROUTER("mlp.gate.weight"),
	IN_NORM,
	POST_NORM,
	FINAL,
};

/* Qwen2-MoE (Qwen1.5/2-MoE): routed experts, a shared expert and its sigmoid gate. */
static const nm_rule qwen2_moe_rules[] = {
	EMBED,
	QKV,
	ROUTER("mlp.gate.weight"),
	EXPERTS,
	SHARED("mlp.shared_expert"),
	{ L_ "mlp.shared_experts.gate_weight", { D_ONE, D_H }, H_ "mlp.shared_expert_gate.weight", NM_ALL,
	  R_LAYER | R_MOE },
	DENSE_MLP,
	IN_NORM,
	POST_NORM,
	FINAL,
};

/* DeepSeek-V3 / V2-Lite: MLA (norms in the local or TransformerEngine spelling), sigmoid routing. */
static const nm_rule deepseek_v3_rules[] = {
	EMBED,
	{ L_ "self_attention.linear_q_down_proj.weight", { D_QLORA, D_H }, H_ "self_attn.q_a_proj.weight", NM_ALL,
	  R_LAYER | R_QLORA },
	{ L_ "self_attention.q_layernorm.weight", { D_QLORA }, H_ "self_attn.q_a_layernorm.weight", NM_ALL,
	  R_LAYER | R_QLORA },
	{ L_ "self_attention.linear_q_up_proj.layer_norm_weight", { D_QLORA }, H_ "self_attn.q_a_layernorm.weight",
	  NM_ALL, R_LAYER | R_QLORA },
	{ L_ "self_attention.linear_q_up_proj.weight", { D_QB, D_QLORA }, H_ "self_attn.q_b_proj.weight", NM_ALL,
	  R_LAYER | R_QLORA },
	{ L_ "self_attention.linear_q_proj.weight", { D_QB, D_H }, H_ "self_attn.q_proj.weight", NM_ALL,
	  R_LAYER | R_NOQLORA },
	{ L_ "self_attention.linear_kv_down_proj.weight", { D_KVA, D_H }, H_ "self_attn.kv_a_proj_with_mqa.weight",
	  NM_ALL, R_LAYER },
	{ L_ "self_attention.kv_layernorm.weight", { D_KVLORA }, H_ "self_attn.kv_a_layernorm.weight", NM_ALL, R_LAYER },
	{ L_ "self_attention.linear_kv_up_proj.layer_norm_weight", { D_KVLORA }, H_ "self_attn.kv_a_layernorm.weight",
	  NM_ALL, R_LAYER },
	{ L_ "self_attention.linear_kv_up_proj.weight", { D_KVB, D_KVLORA }, H_ "self_attn.kv_b_proj.weight", NM_ALL,
	  R_LAYER },
	{ L_ "self_attention.linear_proj.weight", { D_H, D_MLAO }, H_ "self_attn.o_proj.weight", NM_ALL, R_LAYER },
	EXPERTS,
	ROUTER("mlp.gate.weight"),
	{ L_ "mlp.router.expert_bias", { D_E }, H_ "mlp.gate.e_score_correction_bias", NM_ALL,
	  R_LAYER | R_MOE | R_EBIAS },
	/* without moe_router_enable_expert_bias Megatron routes by the plain sigmoid: a zero bias */
	{ NULL, { D_E }, H_ "mlp.gate.e_score_correction_bias", NM_ZERO, R_LAYER | R_MOE | R_NOEBIAS },
	SHARED("mlp.shared_experts"),
	DENSE_MLP,
	IN_NORM,
	POST_NORM,
	FINAL,
};

/* A family: its HF model_type, class and table. */
typedef struct nm_family {
	const char *type, *cls;
	const nm_rule *rules;
	size_t n;
} nm_family;

#define FAM(t, c, r) { t, c, r, sizeof(r) / sizeof(r[0]) }
static const nm_family families[] = {
	FAM("llama", "LlamaForCausalLM", llama_rules),
	FAM("qwen2", "Qwen2ForCausalLM", llama_rules),
	FAM("mixtral", "MixtralForCausalLM", llama_rules),
	FAM("qwen3", "Qwen3ForCausalLM", qwen3_rules),
	FAM("qwen3_moe", "Qwen3MoeForCausalLM", qwen3_rules),
	FAM("qwen2_moe", "Qwen2MoeForCausalLM", qwen2_moe_rules),
	FAM("deepseek_v3", "DeepseekV3ForCausalLM", deepseek_v3_rules),
};

/* family_of(): the family of model_type t, or NULL. */
static const nm_family *family_of(const char *t)
{
	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
		if (strcmp(families[i].type, t) == 0)
			return &families[i];
	return NULL;
}

/* is_dense(): is layer l of a dense (no experts, or a dense layer of a MoE model)? */
static bool is_dense(const gfs_arch *a, int64_t l)
{
	return !a->experts ||
	       (l >= 0 && l < GFS_ARCH_MAX_PATTERN && (a->dense[l / 8] >> (l % 8) & 1));
}

/* ---------------------------------------------------------------- architecture from args */

/* arg(): the value of args member name, or NULL when absent or None. */
static const gfs_pv *arg(const gfs_pv *args, const char *name)
{
	const gfs_pv *v = gfs_pv_dict_get(args, name);

	return v && v->kind != GFS_PV_NONE ? v : NULL;
}

/* arg_num(): a number member (int or float) or dflt; false: present but not a number. */
static bool arg_num(const gfs_pv *args, const char *name, double dflt, double *out)
{
	const gfs_pv *v = arg(args, name);
	int64_t i;

	*out = dflt;
	if (!v)
		return true;
	if (v->kind == GFS_PV_FLOAT) {
		*out = v->u.f;
		return true;
	}
	if (gfs_pv_int(v, &i)) {
		*out = (double)i;
		return true;
	}
	return false;
}

/* arg_true(): is member name present and true (a nonzero int or bool)? */
static bool arg_true(const gfs_pv *args, const char *name)
{
	const gfs_pv *v = arg(args, name);
	int64_t i;

	return v && gfs_pv_int(v, &i) && i != 0;
}

/* arg_str_is(): is member name the string s (an enum member's name counts too)? */
static bool arg_str_is(const gfs_pv *args, const char *name, const char *s)
{
	const gfs_pv *v = arg(args, name);
	const char *t = v ? gfs_pv_str(v) : NULL;

	return t && strcmp(t, s) == 0;
}

/*
 * detect(): the family args say (by its HF model_type), before any check:
 * MLA is DeepSeek-V3; experts with a shared expert Qwen2-MoE, with QK
 * norms Qwen3-MoE, else Mixtral; QK norms alone Qwen3; QKV biases Qwen2.
 */
static const char *detect(const gfs_pv *args)
{
	if (arg_true(args, "multi_latent_attention"))
		return "deepseek_v3";
	if (arg(args, "num_experts")) {
		if (arg(args, "moe_shared_expert_intermediate_size"))
			return "qwen2_moe";
		return arg_true(args, "qk_layernorm") ? "qwen3_moe" : "mixtral";
	}
	if (arg_true(args, "qk_layernorm"))
		return "qwen3";
	return arg_true(args, "add_qkv_bias") ? "qwen2" : "llama";
}

/*
 * The flags (bools) of args that stop the naming, what each means, and the
 * families whose table expresses it (" family ... ").
 */
static const struct {
	const char *arg, *what, *fams;
} nm_flags[] = {
	{ "rotary_interleaved", "interleaved rotary embeddings (rotary_interleaved)", "" },
	{ "qk_layernorm", "QK layernorm (qk_layernorm)", " qwen3 qwen3_moe deepseek_v3 " },
	{ "add_bias_linear", "biases other than QKV (add_bias_linear)", "" },
	{ "multi_latent_attention", "MLA (multi_latent_attention)", " deepseek_v3 " },
	{ "mla_down_proj_fusion", "a fused MLA down projection (mla_down_proj_fusion)", "" },
	{ "use_rope_scaling", "RoPE scaling (use_rope_scaling)", "" },
	{ "squared_relu", "an activation other than SiLU with GLU (squared_relu)", "" },
	{ "layernorm_zero_centered_gamma", "zero-centred norm weights (layernorm_zero_centered_gamma)", "" },
	{ "apply_layernorm_1p", "zero-centred norm weights (apply_layernorm_1p)", "" },
	{ "attention_output_gate", "a gated attention output (attention_output_gate)", "" },
	{ "apply_residual_connection_post_layernorm",
	  "residual connections taken after the layernorm (apply_residual_connection_post_layernorm)", "" },
	{ "qk_l2_norm", "QK L2 normalization (qk_l2_norm)", "" },
	{ "use_mup", "muP multipliers (use_mup)", "" },
	{ "moe_router_pre_softmax", "a router softmax before top-k (moe_router_pre_softmax)", " qwen3_moe qwen2_moe " },
	{ "moe_router_enable_expert_bias", "expert bias in the router (moe_router_enable_expert_bias)", " deepseek_v3 " },
	{ "moe_router_force_load_balancing", "forced load-balanced routing (moe_router_force_load_balancing)", "" },
	{ "moe_apply_probs_on_input", "router probabilities applied to the expert input (moe_apply_probs_on_input)", "" },
};

/* in(): is family f one of fams (" a b ")? */
static bool in(const char *fams, const char *f)
{
	char k[40];

	snprintf(k, sizeof(k), " %s ", f);
	return strstr(fams, k) != NULL;
}

/* The other flags of args the naming reads. */
static const char *const nm_more_flags[] = {
	"untie_embeddings_and_output_weights", "add_qkv_bias", "group_query_attention", "swiglu",
	"gated_linear_unit", "moe_shared_expert_gate",
};

/*
 * check_flags(): every flag the naming reads is a bool when present (a
 * string 'no' or a list read as false would change the model).
 */
static gfs_err check_flags(const gfs_pv *args, const char *src)
{
	const size_t nf = sizeof(nm_flags) / sizeof(nm_flags[0]);
	const size_t nm = sizeof(nm_more_flags) / sizeof(nm_more_flags[0]);

	for (size_t i = 0; i < nf + nm; i++) {
		const char *name = i < nf ? nm_flags[i].arg : nm_more_flags[i - nf];
		const gfs_pv *v = arg(args, name);

		if (v && v->kind != GFS_PV_BOOL)
			return gfs_fail(GFS_ERR_FORMAT, "%s: args.%s is not a bool", src, name);
	}
	return GFS_OK;
}

/* family_unsupported(): what fam's table cannot express of args (needs no sizes), or NULL. */
static const char *family_unsupported(const gfs_pv *args, const char *fam)
{
	static const char *const mla_args[] = {
		"kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim",
	};
	double eps = 0;

	if (strcmp(fam, "qwen3") == 0 && arg_true(args, "add_qkv_bias"))
		return "QKV biases with QK layernorm (Qwen3 has none)";
	if (strcmp(fam, "qwen2_moe") == 0 && arg_true(args, "qk_layernorm"))
		return "QK layernorm with a shared expert (Qwen2-MoE has none)";
	if (strcmp(fam, "qwen2_moe") == 0 && !arg_true(args, "moe_shared_expert_gate"))
		return "a shared expert without its sigmoid gate (moe_shared_expert_gate)";
	if (strcmp(fam, "deepseek_v3") != 0)
		return NULL;
	if (!arg(args, "num_experts"))
		return "MLA without experts (DeepSeek-V3 has routed experts)";
	if (!arg_true(args, "qk_layernorm"))
		return "MLA without its latent norms (qk_layernorm)";
	if (arg_true(args, "add_qkv_bias"))
		return "MLA with QKV biases";
	for (size_t i = 0; i < sizeof(mla_args) / sizeof(mla_args[0]); i++)
		if (!arg(args, mla_args[i]))
			return "MLA without the sizes it needs (kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim, v_head_dim)";
	if (arg_str_is(args, "rope_type", "yarn") || !arg(args, "rope_type"))
		return "YaRN RoPE scaling (rope_type yarn; MLA's default): not shown to match transformers";
	if (!arg_str_is(args, "rope_type", "rope"))
		return "an MLA RoPE other than rope_type 'rope'";
	if (!arg(args, "moe_shared_expert_intermediate_size"))
		return "MLA with experts but no shared expert (DeepSeek-V3 has n_shared_experts)";
	if (arg_true(args, "moe_shared_expert_gate"))
		return "a gated shared expert with MLA (DeepSeek-V3 does not gate it)";
	if (arg_num(args, arg(args, "norm_epsilon") ? "norm_epsilon" : "layernorm_epsilon", 1e-5, &eps) &&
	    eps != 1e-6)
		return "an MLA model whose norm epsilon is not 1e-6 (transformers fixes q_a_layernorm and kv_a_layernorm at 1e-6)";
	return NULL;
}

/* unsupported(): the first feature of args the tables cannot express, or NULL. */
static const char *unsupported(const gfs_pv *args, char *buf, size_t n)
{
	static const struct {
		const char *arg, *what, *fams;
	} present[] = {
		{ "moe_shared_expert_intermediate_size", "shared experts (moe_shared_expert_intermediate_size)",
		  " qwen2_moe deepseek_v3 " },
		{ "window_size", "sliding-window attention (window_size)", "" },
		{ "rotary_seq_len_interpolation_factor", "RoPE interpolation (rotary_seq_len_interpolation_factor)", "" },
		{ "experimental_attention_variant", "an experimental attention variant", "" },
		{ "heterogeneous_layers_config_path", "heterogeneous layers", "" },
		{ "heterogeneous_layers_config_encoded_json", "heterogeneous layers", "" },
		{ "moe_router_topk_scaling_factor", "scaled top-k routing (moe_router_topk_scaling_factor)",
		  " deepseek_v3 " },
		{ "no_rope_freq", "layers without RoPE (no_rope_freq)", "" },
		{ "linear_attention_freq", "linear attention layers (linear_attention_freq)", "" },
		{ "activation_func_clamp_value", "a clamped activation (activation_func_clamp_value)", "" },
		{ "moe_router_num_groups", "group-limited routing (moe_router_num_groups)", " deepseek_v3 " },
		{ "moe_router_topk_limited_devices", "device-limited routing (moe_router_topk_limited_devices)", "" },
		{ "moe_latent_size", "latent expert projections (moe_latent_size)", "" },
	};
	const char *fam = detect(args);
	double pct = 1.0, freq = 1.0, offset = 0.0;
	const gfs_pv *softmax = arg(args, "softmax_type");
	const gfs_pv *pe = arg(args, "position_embedding_type");
	const gfs_pv *norm = arg(args, "normalization");
	const gfs_pv *score = arg(args, "moe_router_score_function");

	for (size_t i = 0; i < sizeof(nm_flags) / sizeof(nm_flags[0]); i++)
		if (arg_true(args, nm_flags[i].arg) && !in(nm_flags[i].fams, fam))
			return nm_flags[i].what;
	for (size_t i = 0; i < sizeof(present) / sizeof(present[0]); i++)
		if (arg(args, present[i].arg) && !in(present[i].fams, fam))
			return present[i].what;
	if (pe && !arg_str_is(args, "position_embedding_type", "rope")) {
		snprintf(buf, n, "position embeddings '%s' (learned positions or none, not RoPE)",
			 gfs_pv_str(pe) ? gfs_pv_str(pe) : "?");
		return buf;
	}
	if (!arg_num(args, "rotary_percent", 1.0, &pct) || pct != 1.0)
		return "partial rotary (rotary_percent below 1)";
	if (norm && !arg_str_is(args, "normalization", "RMSNorm"))
		return "a normalization other than RMSNorm";
	if (softmax && !arg_str_is(args, "softmax_type", "vanilla"))
		return "an attention softmax other than the vanilla one (softmax_type)";
	if (!arg_num(args, "glu_linear_offset", 0.0, &offset) || offset != 0.0)
		return "an offset on the GLU's linear half (glu_linear_offset)";
	if (!arg_true(args, "swiglu") && !arg_true(args, "gated_linear_unit"))
		return "an activation other than SiLU with GLU (no swiglu)";
	if (arg(args, "num_experts")) {
		const bool ds = strcmp(fam, "deepseek_v3") == 0;

		if (!ds && score && !arg_str_is(args, "moe_router_score_function", "softmax"))
			return "a router score function other than softmax";
		if (ds && !arg_str_is(args, "moe_router_score_function", "sigmoid"))
			return "MLA with a router score function other than sigmoid (DeepSeek-V3 routes by sigmoid)";
		if (strcmp(fam, "mixtral") == 0 &&
		    (!arg_num(args, "moe_layer_freq", 1.0, &freq) || freq != 1.0))
			return "experts in some layers only (moe_layer_freq) without QK layernorm or a shared expert";
		if (arg_true(args, "add_qkv_bias") && strcmp(fam, "qwen2_moe") != 0)
			return "experts with QKV biases";
	}
	return family_unsupported(args, fam);
}

/* arg_dim(): a positive integer member (dflt when absent; dflt 0: required). */
static gfs_err arg_dim(const gfs_pv *args, const char *src, const char *name, int64_t dflt,
		       int64_t *out)
{
	const gfs_pv *v = arg(args, name);

	if (!v && dflt > 0) {
		*out = dflt;
		return GFS_OK;
	}
	if (!v)
		return gfs_fail(GFS_ERR_NOTFOUND, "no args.%s", name);
	if (!gfs_pv_int(v, out) || *out <= 0 || *out > NM_MAX_DIM)
		return gfs_fail(GFS_ERR_FORMAT, "%s: args.%s is not a positive integer", src, name);
	return GFS_OK;
}

/* check_arch(): numbers the naming relies on. */
static gfs_err check_arch(const gfs_arch *a)
{
	if (a->heads % a->groups != 0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %lld attention heads are not a multiple of %lld query groups",
				a->source, (long long)a->heads, (long long)a->groups);
	if (a->experts && (a->topk < 1 || a->topk > a->experts))
		return gfs_fail(GFS_ERR_FORMAT, "%s: top-%lld routing over %lld experts", a->source,
				(long long)a->topk, (long long)a->experts);
	return GFS_OK;
}

/* set_dense(): layer l of a MoE model is dense. */
static void set_dense(gfs_arch *a, int64_t l)
{
	a->dense[l / 8] |= (uint8_t)(1u << (l % 8));
}

/*
 * moe_pattern(): the dense layers of args.moe_layer_freq (an int N: every
 * Nth layer has experts; a list: one 0/1 per layer) into a->dense.
 * @return GFS_OK; a->why set when no table can hold the pattern.
 */
static gfs_err moe_pattern(const gfs_pv *args, const char *src, gfs_arch *a)
{
	const gfs_pv *v = arg(args, "moe_layer_freq");
	int64_t n = 1, bit;

	if (v && gfs_pv_int(v, &n)) {
		if (n < 1)
			return gfs_fail(GFS_ERR_FORMAT, "%s: args.moe_layer_freq is %lld", src, (long long)n);
		if (n > 1 && a->layers > GFS_ARCH_MAX_PATTERN) {
			snprintf(a->why, sizeof(a->why), "a moe_layer_freq pattern over more than %d layers",
				 GFS_ARCH_MAX_PATTERN);
			return GFS_OK;
		}
		for (int64_t l = 0; n > 1 && l < a->layers; l++)
			if (l % n != 0)
				set_dense(a, l);
		return GFS_OK;
	}
	if (!v)
		return GFS_OK;
	if (v->kind != GFS_PV_LIST || gfs_pv_seq_len(v) != (size_t)a->layers)
		return gfs_fail(GFS_ERR_FORMAT, "%s: args.moe_layer_freq is neither an int nor a list of %lld 0s and 1s",
				src, (long long)a->layers);
	if (a->layers > GFS_ARCH_MAX_PATTERN) {
		snprintf(a->why, sizeof(a->why), "a moe_layer_freq pattern over more than %d layers",
			 GFS_ARCH_MAX_PATTERN);
		return GFS_OK;
	}
	for (int64_t l = 0; l < a->layers; l++) {
		if (!gfs_pv_int(gfs_pv_seq_at(v, (size_t)l), &bit) || (bit != 0 && bit != 1))
			return gfs_fail(GFS_ERR_FORMAT, "%s: args.moe_layer_freq[%lld] is not 0 or 1", src,
					(long long)l);
		if (!bit)
			set_dense(a, l);
	}
	return GFS_OK;
}

/*
 * family_args(): the numbers family fam needs beyond Llama's, from args
 * (a's sizes read); a->family set, or left NULL with a->why.
 */
static gfs_err family_args(const gfs_pv *args, const char *src, const char *fam, gfs_arch *a)
{
	gfs_err err = GFS_OK;
	int64_t dense = 0;

	a->qk_norm = strcmp(fam, "qwen3") == 0 || strcmp(fam, "qwen3_moe") == 0;
	a->norm_topk = !arg_true(args, "moe_router_pre_softmax");
	if (a->experts)
		err = moe_pattern(args, src, a);
	if (!err && a->why[0])
		return GFS_OK;
	for (int64_t l = 0; a->experts && l < a->layers; l++)
		dense += is_dense(a, l);
	if (!err && a->experts && dense == a->layers)
		return gfs_fail(GFS_ERR_FORMAT, "%s: args.moe_layer_freq leaves no layer with experts", src);
	if (!err && arg(args, "moe_shared_expert_intermediate_size"))
		err = arg_dim(args, src, "moe_shared_expert_intermediate_size", 0, &a->shared_ffn);
	a->shared_gate = arg_true(args, "moe_shared_expert_gate");
	if (err || strcmp(fam, "deepseek_v3") != 0) {
		a->family = err ? NULL : fam;
		return err;
	}
	/* DeepSeek-V3: MLA sizes, sigmoid routing, a dense prefix */
	if (arg(args, "q_lora_rank"))
		err = arg_dim(args, src, "q_lora_rank", 0, &a->q_lora);
	if (!err)
		err = arg_dim(args, src, "kv_lora_rank", 0, &a->kv_lora);
	if (!err)
		err = arg_dim(args, src, "qk_head_dim", 0, &a->qk_head);
	if (!err)
		err = arg_dim(args, src, "qk_pos_emb_head_dim", 0, &a->qk_rope);
	if (!err)
		err = arg_dim(args, src, "v_head_dim", 0, &a->v_head);
	if (!err)
		err = arg_dim(args, src, "moe_router_num_groups", 1, &a->n_group);
	if (!err)
		err = arg_dim(args, src, "moe_router_group_topk", 1, &a->topk_group);
	if (!err && (!arg_num(args, "moe_router_topk_scaling_factor", 1.0, &a->scaling) ||
		     !isfinite(a->scaling) || !(a->scaling > 0)))
		err = gfs_fail(GFS_ERR_FORMAT, "%s: args.moe_router_topk_scaling_factor is not a positive number", src);
	if (err)
		return err;
	a->expert_bias = arg_true(args, "moe_router_enable_expert_bias");
	/* Megatron divides sigmoid top-k scores by their sum only when top-k > 1 */
	a->norm_topk = a->topk > 1;
	while (a->first_dense < a->layers && is_dense(a, a->first_dense))
		a->first_dense++;
	if (dense != a->first_dense) {
		snprintf(a->why, sizeof(a->why),
			 "dense layers other than a prefix (moe_layer_freq; DeepSeek-V3 has first_k_dense_replace only)");
		return GFS_OK;
	}
	if (a->shared_ffn % a->moe_ffn != 0) {
		snprintf(a->why, sizeof(a->why),
			 "a shared expert size %lld that is not a multiple of the expert size %lld (n_shared_experts)",
			 (long long)a->shared_ffn, (long long)a->moe_ffn);
		return GFS_OK;
	}
	a->family = fam;
	return GFS_OK;
}

gfs_err gfs_arch_from_args(const gfs_pv *args, const char *src, gfs_arch *a)
{
	const char *why;
	gfs_err err;

	assert(args && src && a);
	memset(a, 0, sizeof(*a));
	a->source = src;
	err = check_flags(args, src);
	if (err)
		return err;
	a->tied = !arg_true(args, "untie_embeddings_and_output_weights");
	a->qkv_bias = arg_true(args, "add_qkv_bias");
	err = arg_dim(args, src, "num_layers", 0, &a->layers);
	if (!err)
		err = arg_dim(args, src, "hidden_size", 0, &a->hidden);
	if (!err)
		err = arg_dim(args, src, "num_attention_heads", 0, &a->heads);
	if (!err)
		err = arg_dim(args, src, "ffn_hidden_size", 4 * a->hidden, &a->ffn);
	if (!err)
		err = arg_dim(args, src, "kv_channels", a->hidden / a->heads, &a->kv_channels);
	if (!err && arg_true(args, "group_query_attention"))
		err = arg_dim(args, src, "num_query_groups", 0, &a->groups);
	else if (!err)
		a->groups = a->heads;
	if (!err && arg(args, "num_experts")) {
		err = arg_dim(args, src, "num_experts", 0, &a->experts);
		if (!err)
			err = arg_dim(args, src, "moe_router_topk", 2, &a->topk);
		if (!err)
			err = arg_dim(args, src, "moe_ffn_hidden_size", a->ffn, &a->moe_ffn);
	}
	if (!err && arg(args, "vocab_size"))
		err = arg_dim(args, src, "vocab_size", 0, &a->vocab);
	if (!err)
		err = arg_dim(args, src, "max_position_embeddings", 0, &a->max_pos);
	if (err == GFS_ERR_NOTFOUND) {
		char missing[64];

		snprintf(missing, sizeof(missing), "%s", gfs_errmsg());
		why = unsupported(args, a->why, sizeof(a->why));
		a->incomplete = !why;
		if (!why)
			snprintf(a->why, sizeof(a->why), "a model whose args lack a size (%s)", missing);
		else if (why != a->why)
			snprintf(a->why, sizeof(a->why), "%s", why);
		return GFS_OK;
	}
	if (err)
		return err;
	if (!arg_num(args, arg(args, "norm_epsilon") ? "norm_epsilon" : "layernorm_epsilon", 1e-5,
		     &a->eps) ||
	    !arg_num(args, "rotary_base", 10000.0, &a->theta) || !isfinite(a->eps) ||
	    !isfinite(a->theta) || !(a->eps > 0) || !(a->theta > 0))
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: args: norm epsilon or rotary base is not a finite positive number", src);
	why = unsupported(args, a->why, sizeof(a->why));
	if (why) {
		if (why != a->why)
			snprintf(a->why, sizeof(a->why), "%s", why);
		return check_arch(a);
	}
	err = family_args(args, src, detect(args), a);
	if (err || !a->family)
		return err;
	return check_arch(a);
}

/* ---------------------------------------------------------------- architecture from config.json */

/* cfg_int(): a positive integer member (dflt when absent; 0: required). */
static gfs_err cfg_int(const cJSON *c, const char *path, const char *name, int64_t dflt,
		       int64_t *out)
{
	const cJSON *v = gfs_json_get(c, name);
	uint64_t u;
	gfs_err err;

	if ((!v || cJSON_IsNull(v)) && dflt > 0) {
		*out = dflt;
		return GFS_OK;
	}
	if (!v)
		return gfs_fail(GFS_ERR_FORMAT, "%s: no %s", path, name);
	err = gfs_json_u64(v, path, name, &u);
	if (!err && (u == 0 || u > (uint64_t)NM_MAX_DIM))
		err = gfs_fail(GFS_ERR_FORMAT, "%s: %s is out of range", path, name);
	*out = (int64_t)u;
	return err;
}

/* cfg_num(): a positive number member, or dflt when absent. */
static gfs_err cfg_num(const cJSON *c, const char *path, const char *name, double dflt,
		       double *out)
{
	const cJSON *v = gfs_json_get(c, name);

	*out = dflt;
	if (!v || cJSON_IsNull(v))
		return GFS_OK;
	if (!cJSON_IsNumber(v) || !(v->valuedouble > 0))
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s is not a positive number", path, name);
	*out = v->valuedouble;
	return GFS_OK;
}

/* cfg_true(): is member name true? */
static bool cfg_true(const cJSON *c, const char *name)
{
	return cJSON_IsTrue(gfs_json_get(c, name));
}

/* cfg_dense(): a Qwen MoE config's dense layers (mlp_only_layers, decoder_sparse_step) into a->dense. */
static gfs_err cfg_dense(const cJSON *c, const char *path, gfs_arch *a)
{
	const cJSON *only = gfs_json_get(c, "mlp_only_layers"), *e;
	int64_t step = 1;
	gfs_err err = cfg_int(c, path, "decoder_sparse_step", 1, &step);

	if (err)
		return err;
	if (a->layers > GFS_ARCH_MAX_PATTERN)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: more than %d layers with dense ones among them", path,
				GFS_ARCH_MAX_PATTERN);
	for (int64_t l = 0; l < a->layers; l++)
		if ((l + 1) % step != 0)
			set_dense(a, l);
	if (only && !cJSON_IsNull(only) && !cJSON_IsArray(only))
		return gfs_fail(GFS_ERR_FORMAT, "%s: mlp_only_layers is not a list", path);
	cJSON_ArrayForEach(e, only) {
		if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= (double)a->layers ||
		    e->valuedouble != floor(e->valuedouble))
			return gfs_fail(GFS_ERR_FORMAT, "%s: mlp_only_layers holds something not a layer number",
					path);
		set_dense(a, (int64_t)e->valuedouble);
	}
	return GFS_OK;
}

/* cfg_family(): the numbers of a->family beyond Llama's, from config c of path. */
static gfs_err cfg_family(const cJSON *c, const char *path, gfs_arch *a)
{
	const char *f = a->family;
	const cJSON *nt = gfs_json_get(c, "norm_topk_prob"), *ql = gfs_json_get(c, "q_lora_rank");
	const cJSON *qb = gfs_json_get(c, "qkv_bias"), *fk;
	int64_t shared = 0;
	gfs_err err = GFS_OK;

	a->qkv_bias = strcmp(f, "qwen2") == 0 || (strcmp(f, "qwen2_moe") == 0 && !cJSON_IsFalse(qb));
	a->qk_norm = strcmp(f, "qwen3") == 0 || strcmp(f, "qwen3_moe") == 0;
	a->norm_topk = cJSON_IsTrue(nt);
	if (strcmp(f, "qwen3_moe") == 0 || strcmp(f, "qwen2_moe") == 0) {
		err = cfg_int(c, path, "moe_intermediate_size", 0, &a->moe_ffn);
		if (!err)
			err = cfg_int(c, path, gfs_json_get(c, "num_experts") ? "num_experts" : "num_local_experts",
				      0, &a->experts);
		if (!err)
			err = cfg_int(c, path, "num_experts_per_tok", 0, &a->topk);
		if (!err)
			err = cfg_dense(c, path, a);
		if (!err && strcmp(f, "qwen2_moe") == 0)
			err = cfg_int(c, path, "shared_expert_intermediate_size", 0, &a->shared_ffn);
		a->shared_gate = a->shared_ffn > 0;
	}
	if (err || strcmp(f, "deepseek_v3") != 0)
		return err;
	if (cJSON_IsFalse(gfs_json_get(c, "rope_interleave")))
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: rope_interleave false: Megatron's MLA rotary is the interleaved one", path);
	if (ql && !cJSON_IsNull(ql))
		err = cfg_int(c, path, "q_lora_rank", 0, &a->q_lora);
	if (!err)
		err = cfg_int(c, path, "kv_lora_rank", 0, &a->kv_lora);
	if (!err)
		err = cfg_int(c, path, "qk_nope_head_dim", 0, &a->qk_head);
	if (!err)
		err = cfg_int(c, path, "qk_rope_head_dim", 0, &a->qk_rope);
	if (!err)
		err = cfg_int(c, path, "v_head_dim", 0, &a->v_head);
	if (!err)
		err = cfg_int(c, path, "moe_intermediate_size", 0, &a->moe_ffn);
	if (!err)
		err = cfg_int(c, path, "n_routed_experts", 0, &a->experts);
	if (!err)
		err = cfg_int(c, path, "num_experts_per_tok", 0, &a->topk);
	if (!err)
		err = cfg_int(c, path, "n_shared_experts", 0, &shared);
	if (err)
		return err;
	a->shared_ffn = shared * a->moe_ffn;
	err = cfg_int(c, path, "n_group", 1, &a->n_group);
	if (!err)
		err = cfg_int(c, path, "topk_group", 1, &a->topk_group);
	if (!err)
		err = cfg_num(c, path, "routed_scaling_factor", 1.0, &a->scaling);
	if (err)
		return err;
	a->groups = a->heads;
	a->kv_channels = a->v_head;
	fk = gfs_json_get(c, "first_k_dense_replace");
	if (fk && (!cJSON_IsNumber(fk) || fk->valuedouble < 0 || fk->valuedouble != floor(fk->valuedouble) ||
		   fk->valuedouble > (double)a->layers))
		return gfs_fail(GFS_ERR_FORMAT, "%s: first_k_dense_replace is not a layer count", path);
	a->first_dense = fk ? (int64_t)fk->valuedouble : 0;
	if (a->first_dense > GFS_ARCH_MAX_PATTERN)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: first_k_dense_replace over %d layers", path,
				GFS_ARCH_MAX_PATTERN);
	for (int64_t l = 0; l < a->first_dense; l++)
		set_dense(a, l);
	return GFS_OK;
}

/* read_arch(): a's numbers from the parsed config c of path. */
static gfs_err read_arch(const cJSON *c, const char *path, gfs_arch *a)
{
	const cJSON *mt = gfs_json_get(c, "model_type"), *act = gfs_json_get(c, "hidden_act");
	const cJSON *rp = gfs_json_get(c, "rope_parameters");
	const char *type = cJSON_IsString(mt) ? mt->valuestring : NULL;
	gfs_err err;

	if (!type)
		return gfs_fail(GFS_ERR_FORMAT, "%s: no model_type", path);
	if (strcmp(type, "mistral") == 0)
		a->family = "llama";
	else if (family_of(type))
		a->family = family_of(type)->type;
	else
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: model_type '%s' is not in the naming table (llama, mistral, qwen2, mixtral, qwen3, qwen3_moe, qwen2_moe, deepseek_v3)",
				path, type);
	if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0))
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: hidden_act is not silu", path);
	if (cfg_true(c, "attention_bias") || cfg_true(c, "mlp_bias"))
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: attention_bias or mlp_bias: biases other than Qwen2's QKV biases",
				path);
	err = cfg_int(c, path, "num_hidden_layers", 0, &a->layers);
	if (!err)
		err = cfg_int(c, path, "hidden_size", 0, &a->hidden);
	if (!err)
		err = cfg_int(c, path, "num_attention_heads", 0, &a->heads);
	if (!err)
		err = cfg_int(c, path, "num_key_value_heads", a->heads, &a->groups);
	if (!err)
		err = cfg_int(c, path, "head_dim", a->hidden / a->heads, &a->kv_channels);
	if (!err)
		err = cfg_int(c, path, "intermediate_size", 0, &a->ffn);
	if (!err)
		err = cfg_int(c, path, "vocab_size", 0, &a->vocab);
	if (!err)
		err = cfg_int(c, path, "max_position_embeddings", 2048, &a->max_pos);
	if (!err && strcmp(a->family, "mixtral") == 0) {
		a->moe_ffn = a->ffn;
		err = cfg_int(c, path, "num_local_experts", 0, &a->experts);
		if (!err)
			err = cfg_int(c, path, "num_experts_per_tok", 0, &a->topk);
	}
	if (!err)
		err = cfg_num(c, path, "rms_norm_eps", 1e-6, &a->eps);
	if (!err)
		err = cfg_num(c, path, "rope_theta", 10000.0, &a->theta);
	if (!err && cJSON_IsObject(rp)) {
		double theta;

		err = cfg_num(rp, path, "rope_theta", a->theta, &theta);
		if (!err && gfs_json_get(c, "rope_theta") && theta != a->theta)
			err = gfs_fail(GFS_ERR_FORMAT,
				       "%s: rope_theta %.17g and rope_parameters.rope_theta %.17g disagree",
				       path, a->theta, theta);
		a->theta = theta;
	}
	if (!err)
		err = cfg_family(c, path, a);
	if (err)
		return err;
	a->tied = cfg_true(c, "tie_word_embeddings");
	return check_arch(a);
}

gfs_err gfs_arch_from_hf_config(const char *dir, gfs_arch *a)
{
	char path[4096];
	size_t len = 0;
	cJSON *c = NULL;
	gfs_err err;

	assert(dir && a);
	memset(a, 0, sizeof(*a));
	if ((size_t)snprintf(path, sizeof(path), "%s/config.json", dir) >= sizeof(path))
		return gfs_fail(GFS_ERR_INVAL, "%s: path too long", dir);
	err = gfs_read_meta(path, NM_MAX_CONFIG, GFS_OPEN_NOFOLLOW, &a->config, &len);
	if (!err)
		err = gfs_json_parse(a->config, len, path, &c);
	if (!err && !cJSON_IsObject(c))
		err = gfs_fail(GFS_ERR_FORMAT, "%s: not a JSON object", path);
	if (!err)
		err = read_arch(c, path, a);
	cJSON_Delete(c);
	c = NULL;
	if (!err) {
		snprintf(path, sizeof(path), "%s/generation_config.json", dir);
		err = gfs_read_meta(path, NM_MAX_CONFIG, GFS_OPEN_NOFOLLOW, &a->gen_config, &len);
		if (err == GFS_ERR_NOTFOUND)
			err = GFS_OK;
		else if (!err)
			err = gfs_json_parse(a->gen_config, len, path, &c);
		if (!err && a->gen_config && !cJSON_IsObject(c))
			err = gfs_fail(GFS_ERR_FORMAT, "%s: not a JSON object", path);
		cJSON_Delete(c);
	}
	if (err)
		gfs_arch_clear(a);
	a->source = "the hf_config config.json";
	return err;
}

gfs_err gfs_arch_family_agree(const gfs_arch *a, const gfs_arch *c, const char *idir)
{
	const bool ds = strcmp(c->family, "deepseek_v3") == 0;
	const bool moe = a->experts > 0;
	const struct {
		const char *field;
		int64_t have, want;
		bool when;
	} ints[] = {
		{ "shared expert size", c->shared_ffn, a->shared_ffn, moe },
		{ "norm_topk_prob", c->norm_topk, a->norm_topk, moe },
		{ "q_lora_rank", c->q_lora, a->q_lora, ds },
		{ "kv_lora_rank", c->kv_lora, a->kv_lora, ds },
		{ "qk_nope_head_dim", c->qk_head, a->qk_head, ds },
		{ "qk_rope_head_dim", c->qk_rope, a->qk_rope, ds },
		{ "v_head_dim", c->v_head, a->v_head, ds },
		{ "n_group", c->n_group, a->n_group, ds },
		{ "topk_group", c->topk_group, a->topk_group, ds },
	};

	assert(a && a->family && c && c->family && idir);
	if (strcmp(a->family, c->family) != 0)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: the hf_config config.json's model_type is %s, but %s say %s: they must agree",
				idir, c->family, a->source, a->family);
	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
		if (ints[i].when && ints[i].have != ints[i].want)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: the hf_config config.json's %s is %lld, but %s give %lld: they must agree",
					idir, ints[i].field, (long long)ints[i].have, a->source,
					(long long)ints[i].want);
	if (ds && c->scaling != a->scaling)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: the hf_config config.json's routed_scaling_factor is %.17g, but %s give %.17g: they must agree",
				idir, c->scaling, a->source, a->scaling);
	for (int64_t l = 0; moe && l < a->layers && l < c->layers; l++)
		if (is_dense(a, l) != is_dense(c, l))
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: the hf_config config.json makes layer %lld %s, but %s make it %s: they must agree",
					idir, (long long)l, is_dense(c, l) ? "dense" : "one with experts", a->source,
					is_dense(a, l) ? "dense" : "one with experts");
	return GFS_OK;
}

void gfs_arch_clear(gfs_arch *a)
{
	if (!a)
		return;
	free(a->config);
	free(a->gen_config);
	a->config = a->gen_config = NULL;
}

/* ---------------------------------------------------------------- the HF view */

/* applies(): does rule r belong to a's table at layer l (-1: the tensors outside the layers)? */
static bool applies(const nm_rule *r, const gfs_arch *a, int64_t l)
{
	if ((r->when & R_DENSE) && !is_dense(a, l))
		return false;
	if ((r->when & R_MOE) && (l < 0 || is_dense(a, l)))
		return false;
	if ((r->when & R_BIAS) && !a->qkv_bias)
		return false;
	if ((r->when & R_QLORA) && !a->q_lora)
		return false;
	if ((r->when & R_NOQLORA) && a->q_lora)
		return false;
	if ((r->when & R_EBIAS) && !a->expert_bias)
		return false;
	if ((r->when & R_NOEBIAS) && a->expert_bias)
		return false;
	return true;
}

/* fill(): template t with '#' -> layer and '@' -> expert, into buf. */
static gfs_err fill(const char *t, int64_t layer, int64_t expert, char *buf, size_t n)
{
	size_t k = 0;

	for (; *t; t++) {
		const int w = *t == '#' ? snprintf(buf + k, n - k, "%lld", (long long)layer)
			    : *t == '@' ? snprintf(buf + k, n - k, "%lld", (long long)expert)
					: snprintf(buf + k, n - k, "%c", *t);

		if (w < 0 || (size_t)w >= n - k)
			return gfs_fail(GFS_ERR_LIMIT, "a tensor name is too long");
		k += (size_t)w;
	}
	return GFS_OK;
}

/* dim_of(): the size a gives dimension d (D_VPAD: the true vocabulary, a minimum). */
static int64_t dim_of(const gfs_arch *a, nm_dim d)
{
	switch (d) {
	case D_H: return a->hidden;
	case D_QKV: return (a->heads + 2 * a->groups) * a->kv_channels;
	case D_ATTN: return a->heads * a->kv_channels;
	case D_2F: return 2 * a->ffn;
	case D_F: return a->ffn;
	case D_2M: return 2 * a->moe_ffn;
	case D_M: return a->moe_ffn;
	case D_2S: return 2 * a->shared_ffn;
	case D_S: return a->shared_ffn;
	case D_E: return a->experts;
	case D_VPAD: return a->vocab;
	case D_KV: return a->kv_channels;
	case D_ONE: return 1;
	case D_QLORA: return a->q_lora;
	case D_QB: return a->heads * (a->qk_head + a->qk_rope);
	case D_KVA: return a->kv_lora + a->qk_rope;
	case D_KVLORA: return a->kv_lora;
	case D_KVB: return a->heads * (a->qk_head + a->v_head);
	case D_MLAO: return a->heads * a->v_head;
	case D_NONE: break;
	}
	return 0;
}

/* shape_str(): "[a, b]" into buf. */
static const char *shape_str(uint32_t ndim, const uint64_t *shape, char *buf, size_t n)
{
	size_t k = (size_t)snprintf(buf, n, "[");

	for (uint32_t d = 0; d < ndim && k < n; d++)
		k += (size_t)snprintf(buf + k, n - k, "%s%llu", d ? ", " : "",
				      (unsigned long long)shape[d]);
	if (k < n)
		snprintf(buf + k, n - k, "]");
	return buf;
}

/* check_shape(): the Megatron tensor t against rule r's shape under a (R_EXPAX: [experts, ...] first). */
static gfs_err check_shape(const gfs_tensor *t, const nm_rule *r, const gfs_arch *a)
{
	const uint32_t ax = (r->when & R_EXPAX) ? 1 : 0;
	const uint32_t nd = (r->shape[1] != D_NONE ? 2 : 1) + ax;
	uint64_t want[3];
	char have[96], need[96];
	bool ok = t->ndim == nd;

	want[0] = (uint64_t)a->experts;
	ok = ok && (!ax || t->shape[0] == want[0]);
	for (uint32_t d = ax; d < nd; d++) {
		want[d] = (uint64_t)dim_of(a, r->shape[d - ax]);
		if (ok && r->shape[d - ax] == D_VPAD)
			ok = t->shape[d] >= want[d];
		else if (ok)
			ok = t->shape[d] == want[d];
	}
	if (ok)
		return GFS_OK;
	return gfs_fail(GFS_ERR_FORMAT, "%s: shape %s, but %s gives %s%s", t->name,
			shape_str(t->ndim, t->shape, have, sizeof(have)), a->source,
			shape_str(nd, want, need, sizeof(need)),
			r->shape[0] == D_VPAD ? " (at least that many rows: the vocabulary)" : "");
}

/* A row range [first, first + n) of a tensor, copied to row `to`. */
typedef struct nm_rows {
	uint64_t first, n, to;
} nm_rows;

/*
 * rows_of(): the row ranges split takes of a Megatron tensor of `rows`
 * rows into out (at most a->groups of them).  @return how many.
 */
static size_t rows_of(nm_split split, const gfs_arch *a, uint64_t rows, nm_rows *out)
{
	const uint64_t per = (uint64_t)(a->heads / a->groups), kv = (uint64_t)a->kv_channels;
	const uint64_t group = (per + 2) * kv;
	size_t n = 0;

	switch (split) {
	case NM_ALL:
		out[n++] = (nm_rows){ 0, rows, 0 };
		break;
	case NM_VOCAB:
		out[n++] = (nm_rows){ 0, (uint64_t)a->vocab, 0 };
		break;
	case NM_ZERO: /* no rows: emit() writes zeros */
		break;
	case NM_GATE:
		out[n++] = (nm_rows){ 0, rows / 2, 0 };
		break;
	case NM_UP:
		out[n++] = (nm_rows){ rows / 2, rows / 2, 0 };
		break;
	case NM_Q:
	case NM_K:
	case NM_V:
		for (uint64_t g = 0; g < (uint64_t)a->groups; g++) {
			if (split == NM_Q)
				out[n++] = (nm_rows){ g * group, per * kv, g * per * kv };
			else
				out[n++] = (nm_rows){ g * group + (split == NM_K ? per : per + 1) * kv,
						      kv, g * kv };
		}
		break;
	}
	return n;
}

/*
 * add_hf(): HF tensor name from Megatron tensor si by rule r (R_EXPAX:
 * from expert `expert`'s slice of it).
 */
static gfs_err add_hf(gfs_layout *hf, const gfs_layout *mg, size_t si, const nm_rule *r,
		      const gfs_arch *a, int64_t expert, const char *name, nm_rows *rows)
{
	const gfs_tensor *t = &mg->tensors[si];
	const uint32_t ax = (r->when & R_EXPAX) ? 1 : 0;
	const uint64_t slice = ax ? t->nbytes / t->shape[0] : t->nbytes;
	const uint64_t base = ax ? (uint64_t)expert * slice : 0;
	const uint64_t row_bytes = t->shape[ax] ? slice / t->shape[ax] : 0;
	uint64_t shape[2], total = 0;
	size_t n = rows_of(r->split, a, t->shape[ax], rows), ti;
	gfs_err err;

	for (size_t i = 0; i < n; i++)
		total += rows[i].n;
	memcpy(shape, t->shape + ax, (t->ndim - ax) * sizeof(*shape));
	shape[0] = total;
	err = gfs_layout_add_tensor(hf, name, t->dtype, t->ndim - ax, shape, &ti);
	for (size_t i = 0; i < n && !err; i++)
		if (rows[i].n && row_bytes)
			err = gfs_layout_add_extent(hf, ti, rows[i].to * row_bytes, mg, si,
						    base + rows[i].first * row_bytes, rows[i].n * row_bytes);
	return err;
}

/* A family's table and the model it is applied to. */
typedef struct nm_ctx {
	const nm_rule *rules;
	size_t n;
	const gfs_arch *a;
	const gfs_layout *mg;
	const char *label;
	bool *used;
	nm_rows *rows;
} nm_ctx;

/* find_source(): the one Megatron tensor of HF rule r (or its alternatives) at (layer, expert). */
static gfs_err find_source(const nm_ctx *c, size_t r, int64_t layer, int64_t expert, int64_t *si,
			   size_t *rule)
{
	const nm_rule *rules = c->rules;
	char name[1024], first[1024] = "";
	gfs_err err;

	*si = -1;
	for (size_t k = 0; k < c->n; k++) {
		int64_t i;

		if (!rules[k].mg || strcmp(rules[k].hf, rules[r].hf) != 0 || !applies(&rules[k], c->a, layer))
			continue;
		err = fill(rules[k].mg, layer, expert, name, sizeof(name));
		if (err)
			return err;
		i = gfs_layout_find(c->mg, name);
		if (i < 0)
			continue;
		if (*si >= 0)
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s and %s are both present: which is the %s?",
					c->label, first, name, rules[r].hf);
		*si = i;
		*rule = k;
		c->used[i] = true;
		snprintf(first, sizeof(first), "%s", name);
	}
	if (*si < 0) {
		err = fill(rules[r].mg, layer, expert, name, sizeof(name));
		if (!err)
			err = fill(rules[r].hf, layer, expert, first, sizeof(first));
		if (!err)
			err = gfs_fail(GFS_ERR_FORMAT, "%s: no tensor %s (for the %s tensor %s)", c->label,
				       name, c->a->family, first);
		return err;
	}
	return GFS_OK;
}

/* first_of(): is rule r the first rule of its HF name applying at layer l? */
static bool first_of(const nm_ctx *c, size_t r, int64_t l)
{
	for (size_t k = 0; k < r; k++)
		if (applies(&c->rules[k], c->a, l) && strcmp(c->rules[k].hf, c->rules[r].hf) == 0)
			return false;
	return true;
}

/* emit(): the HF tensors of rule r at (layer, expert). */
static gfs_err emit(gfs_layout *hf, const nm_ctx *c, size_t r, int64_t layer, int64_t expert)
{
	char name[1024];
	int64_t si;
	size_t k = r;
	gfs_err err;

	if (c->rules[r].split == NM_ZERO) {
		const int64_t e = gfs_layout_find(c->mg, "embedding.word_embeddings.weight");
		const gfs_dtype dt = e >= 0 ? c->mg->tensors[e].dtype : GFS_DT_F32;
		const uint64_t shape[1] = { (uint64_t)dim_of(c->a, c->rules[r].shape[0]) };
		size_t ti;

		err = fill(c->rules[r].hf, layer, expert, name, sizeof(name));
		if (!err)
			err = gfs_layout_add_tensor(hf, name, dt, 1, shape, &ti);
		if (!err)
			err = gfs_layout_add_zero(hf, ti, shape[0] * gfs_dtype_size(dt));
		return err;
	}
	err = find_source(c, r, layer, expert, &si, &k);

	if (!err && (err = check_shape(&c->mg->tensors[si], &c->rules[k], c->a)) != GFS_OK)
		err = gfs_fail_prefix(err, "%s", c->label);
	if (!err)
		err = fill(c->rules[r].hf, layer, expert, name, sizeof(name));
	if (!err)
		err = add_hf(hf, c->mg, (size_t)si, &c->rules[k], c->a, expert, name, c->rows);
	return err;
}

/*
 * emit_layer(): the HF tensors of layer l in table order, each expert's
 * together (at the first expert rule).
 */
static gfs_err emit_layer(gfs_layout *hf, const nm_ctx *c, int64_t l)
{
	bool experts_done = false;
	gfs_err err = GFS_OK;

	for (size_t k = 0; k < c->n && !err; k++) {
		const nm_rule *r = &c->rules[k];

		if (!(r->when & R_LAYER) || !applies(r, c->a, l) || !first_of(c, k, l))
			continue;
		if (!(r->when & R_EXPERT)) {
			err = emit(hf, c, k, l, -1);
			continue;
		}
		if (experts_done)
			continue;
		experts_done = true;
		for (int64_t e = 0; e < c->a->experts && !err; e++)
			for (size_t x = k; x < c->n && !err; x++)
				if ((c->rules[x].when & R_EXPERT) && applies(&c->rules[x], c->a, l) &&
				    first_of(c, x, l))
					err = emit(hf, c, x, l, e);
	}
	return err;
}

/* json_num(): a JSON number that reads back as v (a float keeps its point). */
static void json_num(gfs_buf *b, double v)
{
	char s[40];

	if (v == floor(v) && fabs(v) < 1e15)
		snprintf(s, sizeof(s), "%.1f", v);
	else
		snprintf(s, sizeof(s), "%.17g", v);
	gfs_buf_put(b, s, strlen(s));
}

/* put(): append a C string. */
static void put(gfs_buf *b, const char *s)
{
	gfs_buf_put(b, s, strlen(s));
}

/* put_int(): append "  \"key\": v,\n". */
static void put_int(gfs_buf *b, const char *key, int64_t v)
{
	char s[160];

	snprintf(s, sizeof(s), "  \"%s\": %lld,\n", key, (long long)v);
	put(b, s);
}

/* put_bool(): append "  \"key\": true|false,\n". */
static void put_bool(gfs_buf *b, const char *key, bool v)
{
	char s[160];

	snprintf(s, sizeof(s), "  \"%s\": %s,\n", key, v ? "true" : "false");
	put(b, s);
}

/* put_num(): append "  \"key\": v,\n" (v a float). */
static void put_num(gfs_buf *b, const char *key, double v)
{
	put(b, "  \"");
	put(b, key);
	put(b, "\": ");
	json_num(b, v);
	put(b, ",\n");
}

/* put_dense(): the dense layers of a MoE model as "  \"key\": [0, 1],\n". */
static void put_dense(gfs_buf *b, const gfs_arch *a, const char *key)
{
	char s[32];
	bool any = false;

	put(b, "  \"");
	put(b, key);
	put(b, "\": [");
	for (int64_t l = 0; l < a->layers; l++)
		if (is_dense(a, l)) {
			snprintf(s, sizeof(s), "%s%lld", any ? ", " : "", (long long)l);
			put(b, s);
			any = true;
		}
	put(b, "],\n");
}

/*
 * family_config(): the fields of a's family beyond Llama's, as
 * transformers reads them (5.x names; the 4.x ones where they differ).
 */
static void family_config(gfs_buf *b, const gfs_arch *a)
{
	const char *f = a->family;
	const bool qwen_moe = strcmp(f, "qwen3_moe") == 0 || strcmp(f, "qwen2_moe") == 0;

	if (strcmp(f, "mixtral") == 0) {
		put_int(b, "num_local_experts", a->experts);
		put_int(b, "num_experts_per_tok", a->topk);
		put(b, "  \"router_jitter_noise\": 0.0,\n  \"output_router_logits\": false,\n");
	}
	if (qwen_moe) {
		put_int(b, "moe_intermediate_size", a->moe_ffn);
		put_int(b, "num_experts", a->experts);
		put_int(b, "num_experts_per_tok", a->topk);
		put_bool(b, "norm_topk_prob", a->norm_topk);
		put_int(b, "decoder_sparse_step", 1);
		put_dense(b, a, "mlp_only_layers");
		put(b, "  \"output_router_logits\": false,\n");
	}
	if (strcmp(f, "qwen2_moe") == 0) {
		put_int(b, "shared_expert_intermediate_size", a->shared_ffn);
		put_bool(b, "qkv_bias", a->qkv_bias);
	}
	if (strncmp(f, "qwen", 4) == 0) {
		put(b, "  \"use_sliding_window\": false,\n");
		put_int(b, "max_window_layers", a->layers);
	}
	if (strcmp(f, "deepseek_v3") == 0) {
		put_int(b, "moe_intermediate_size", a->moe_ffn);
		put_int(b, "n_routed_experts", a->experts);
		put_int(b, "n_shared_experts", a->shared_ffn / a->moe_ffn);
		put_int(b, "num_experts_per_tok", a->topk);
		put_int(b, "first_k_dense_replace", a->first_dense);
		put_int(b, "n_group", a->n_group);
		put_int(b, "topk_group", a->topk_group);
		put_bool(b, "norm_topk_prob", a->norm_topk);
		put_num(b, "routed_scaling_factor", a->scaling);
		if (a->q_lora)
			put_int(b, "q_lora_rank", a->q_lora);
		else
			put(b, "  \"q_lora_rank\": null,\n");
		put_int(b, "kv_lora_rank", a->kv_lora);
		put_int(b, "qk_nope_head_dim", a->qk_head);
		put_int(b, "qk_rope_head_dim", a->qk_rope);
		put_int(b, "v_head_dim", a->v_head);
		put(b, "  \"rope_interleave\": true,\n");
	}
}

/* make_config(): a config.json for a (family set) and the tensors' dtype. */
static gfs_err make_config(const gfs_arch *a, const nm_family *fam, gfs_dtype dt, char **out)
{
	const char *f = a->family;
	const bool mla = strcmp(f, "deepseek_v3") == 0;
	gfs_buf b = { 0 };
	char s[256];

	snprintf(s, sizeof(s), "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n", fam->cls, f);
	put(&b, s);
	put_int(&b, "hidden_size", a->hidden);
	put_int(&b, "intermediate_size", strcmp(f, "mixtral") == 0 ? a->moe_ffn : a->ffn);
	put_int(&b, "num_hidden_layers", a->layers);
	put_int(&b, "num_attention_heads", a->heads);
	put_int(&b, "num_key_value_heads", a->groups);
	if (!mla)
		put_int(&b, "head_dim", a->kv_channels);
	put_int(&b, "vocab_size", a->vocab);
	put_int(&b, "max_position_embeddings", a->max_pos);
	family_config(&b, a);
	if (strcmp(f, "llama") != 0 && !mla)
		put(&b, "  \"sliding_window\": null,\n");
	if (strcmp(f, "qwen2") != 0 && strcmp(f, "qwen2_moe") != 0)
		put(&b, "  \"attention_bias\": false,\n");
	if (strcmp(f, "llama") == 0)
		put(&b, "  \"mlp_bias\": false,\n");
	put(&b, "  \"hidden_act\": \"silu\",\n  \"attention_dropout\": 0.0,\n  \"rms_norm_eps\": ");
	json_num(&b, a->eps);
	put(&b, ",\n  \"rope_theta\": ");
	json_num(&b, a->theta);
	put(&b, ",\n  \"rope_scaling\": null,\n  \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": ");
	json_num(&b, a->theta);
	snprintf(s, sizeof(s), "},\n  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"%s\",\n  \"dtype\": \"%s\",\n",
		 a->tied ? "true" : "false", gfs_dtype_name(dt), gfs_dtype_name(dt));
	put(&b, s);
	put(&b, "  \"use_cache\": true\n}");
	if (b.oom) {
		free(b.p);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	*out = (char *)b.p;
	return GFS_OK;
}

/*
 * check_all_used(): every Megatron tensor went somewhere (an untied copy of
 * a tied one aside); multi-token prediction layers (mtp.*: no HF class has
 * them) are left out of hf, listed as such.
 */
static gfs_err check_all_used(const gfs_layout *mg, const gfs_arch *a, const char *label,
			      const bool *used, gfs_layout *hf)
{
	for (size_t i = 0; i < mg->ntensors; i++) {
		gfs_err err;

		if (used[i] || mg->tensors[i].alias_of >= 0)
			continue;
		if (a->tied && strcmp(mg->tensors[i].name, "output_layer.weight") == 0)
			continue; /* the last stage's copy of the tied embedding */
		if (strncmp(mg->tensors[i].name, "mtp.", 4) == 0) {
			err = gfs_layout_add_omitted(hf, mg->tensors[i].name,
						     "a multi-token prediction layer: the Hugging Face model has none");
			if (err)
				return err;
			continue;
		}
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: %s maps to nothing in the %s naming (-o naming=megatron serves it)",
				label, mg->tensors[i].name, a->family);
	}
	return GFS_OK;
}

/*
 * carry_replicas(): the replicas of mg's embedding (embed: its index; the
 * last stage's copy of a tied one) onto hf's model.embed_tokens.weight,
 * its first rows: the same bytes at the same offsets, clipped to them.
 */
static gfs_err carry_replicas(const gfs_layout *mg, size_t embed, gfs_layout *hf)
{
	size_t to = hf->ntensors;

	for (size_t i = 0; i < hf->ntensors; i++)
		if (strcmp(hf->tensors[i].name, "model.embed_tokens.weight") == 0)
			to = i;
	for (size_t i = 0; i < mg->nreplicas && to < hf->ntensors; i++) {
		gfs_piece p = mg->replicas[i].p;
		const uint64_t n = hf->tensors[to].nbytes;
		gfs_err err;

		if (mg->replicas[i].ti != embed || p.count != 1 || p.toff >= n)
			continue;
		if (p.len > n - p.toff)
			p.len = n - p.toff;
		err = mg->replicas[i].on_read ? gfs_layout_add_replica_on_read(hf, to, &p)
					      : gfs_layout_add_replica(hf, to, &p);
		if (err)
			return err;
	}
	return GFS_OK;
}

gfs_err gfs_naming_to_hf(const gfs_layout *mg, const gfs_arch *a, const char *label,
			 gfs_layout **out)
{
	const nm_family *fam = family_of(a->family);
	gfs_layout *hf = NULL;
	char *config = NULL;
	const int64_t embed = gfs_layout_find(mg, "embedding.word_embeddings.weight");
	nm_ctx c = { fam ? fam->rules : NULL, fam ? fam->n : 0, a, mg, label, NULL, NULL };
	gfs_arch *own = NULL;
	gfs_err err;

	assert(mg && mg->finished && a && a->family && fam && a->vocab > 0 && label && out);
	*out = NULL;
	if (a->config && strcmp(a->family, "deepseek_v3") == 0) {
		/* a config.json does not say whether the router had an expert bias: its tensors do */
		char name[96];

		own = gfs_calloc(1, sizeof(*own));
		if (!own)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		*own = *a;
		snprintf(name, sizeof(name), "decoder.layers.%lld.mlp.router.expert_bias",
			 (long long)a->first_dense);
		own->expert_bias = gfs_layout_find(mg, name) >= 0;
		c.a = a = own;
	}
	c.used = gfs_calloc(mg->ntensors + 1, sizeof(*c.used));
	c.rows = gfs_calloc((size_t)a->groups + 1, sizeof(*c.rows));
	if (!c.used || !c.rows) {
		free(c.used);
		free(c.rows);
		free(own);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	err = gfs_layout_derive(mg, mg->format, &hf);
	/* the tensors before the layers, the layers (each in table order), those after */
	for (int phase = 0; phase < 3 && !err; phase++) {
		bool seen_layer = false;

		if (phase == 1) {
			for (int64_t l = 0; l < a->layers && !err; l++)
				err = emit_layer(hf, &c, l);
			continue;
		}
		for (size_t r = 0; r < c.n && !err; r++) {
			const nm_rule *ru = &c.rules[r];

			seen_layer = seen_layer || (ru->when & R_LAYER);
			if ((ru->when & R_LAYER) || seen_layer != (phase == 2) ||
			    ((ru->when & R_UNTIED) && a->tied) || !first_of(&c, r, -1))
				continue;
			err = emit(hf, &c, r, -1, -1);
		}
	}
	if (!err)
		err = check_all_used(mg, a, label, c.used, hf);
	if (!err && embed >= 0)
		err = carry_replicas(mg, (size_t)embed, hf);
	if (!err && !a->config)
		err = make_config(a, fam, embed >= 0 ? mg->tensors[embed].dtype : GFS_DT_F32, &config);
	if (!err)
		err = gfs_layout_add_text(hf, "config.json", a->config ? a->config : config);
	if (!err && a->gen_config)
		err = gfs_layout_add_text(hf, "generation_config.json", a->gen_config);
	if (!err)
		err = gfs_layout_finish(hf, label);
	free(config);
	free(c.used);
	free(c.rows);
	free(own);
	if (err) {
		gfs_layout_free(hf);
		return err;
	}
	*out = hf;
	return GFS_OK;
}
