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
} nm_split;

/* A dimension of a tensor, as the architecture gives it. */
typedef enum nm_dim {
	D_NONE, D_H, D_QKV, D_ATTN, D_2F, D_F, D_E, D_VPAD,
} nm_dim;

/* Where a rule applies. */
enum {
	R_DENSE = 1,   /* models without experts */
	R_MOE = 2,     /* models with experts */
	R_BIAS = 4,    /* models with QKV biases */
	R_UNTIED = 8,  /* untied embeddings (when tied, the tensor is a copy: dropped) */
	R_LAYER = 16,  /* once per layer: '#' in the names */
	R_EXPERT = 32, /* once per expert too: '@' in the names */
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

/* One table for the Llama family (Llama, Mistral), Qwen2 (QKV biases) and Mixtral (experts). */
static const nm_rule rules[] = {
	{ "embedding.word_embeddings.weight", { D_VPAD, D_H }, "model.embed_tokens.weight", NM_VOCAB, 0 },
	{ L_ "input_layernorm.weight", { D_H }, H_ "input_layernorm.weight", NM_ALL, R_LAYER },
	{ L_ "self_attention.linear_qkv.layer_norm_weight", { D_H }, H_ "input_layernorm.weight", NM_ALL, R_LAYER },
	{ L_ "self_attention.linear_qkv.weight", { D_QKV, D_H }, H_ "self_attn.q_proj.weight", NM_Q, R_LAYER },
	{ L_ "self_attention.linear_qkv.bias", { D_QKV }, H_ "self_attn.q_proj.bias", NM_Q, R_LAYER | R_BIAS },
	{ L_ "self_attention.linear_qkv.weight", { D_QKV, D_H }, H_ "self_attn.k_proj.weight", NM_K, R_LAYER },
	{ L_ "self_attention.linear_qkv.bias", { D_QKV }, H_ "self_attn.k_proj.bias", NM_K, R_LAYER | R_BIAS },
	{ L_ "self_attention.linear_qkv.weight", { D_QKV, D_H }, H_ "self_attn.v_proj.weight", NM_V, R_LAYER },
	{ L_ "self_attention.linear_qkv.bias", { D_QKV }, H_ "self_attn.v_proj.bias", NM_V, R_LAYER | R_BIAS },
	{ L_ "self_attention.linear_proj.weight", { D_H, D_ATTN }, H_ "self_attn.o_proj.weight", NM_ALL, R_LAYER },
	{ L_ "pre_mlp_layernorm.weight", { D_H }, H_ "post_attention_layernorm.weight", NM_ALL, R_LAYER },
	{ L_ "mlp.linear_fc1.layer_norm_weight", { D_H }, H_ "post_attention_layernorm.weight", NM_ALL, R_LAYER },
	{ L_ "mlp.linear_fc1.weight", { D_2F, D_H }, H_ "mlp.gate_proj.weight", NM_GATE, R_LAYER | R_DENSE },
	{ L_ "mlp.linear_fc1.weight", { D_2F, D_H }, H_ "mlp.up_proj.weight", NM_UP, R_LAYER | R_DENSE },
	{ L_ "mlp.linear_fc2.weight", { D_H, D_F }, H_ "mlp.down_proj.weight", NM_ALL, R_LAYER | R_DENSE },
	{ L_ "mlp.router.weight", { D_E, D_H }, H_ "block_sparse_moe.gate.weight", NM_ALL, R_LAYER | R_MOE },
	{ L_ "mlp.experts.local_experts.@.linear_fc1.weight", { D_2F, D_H },
	  H_ "block_sparse_moe.experts.@.w1.weight", NM_GATE, R_LAYER | R_EXPERT | R_MOE },
	{ L_ "mlp.experts.local_experts.@.linear_fc2.weight", { D_H, D_F },
	  H_ "block_sparse_moe.experts.@.w2.weight", NM_ALL, R_LAYER | R_EXPERT | R_MOE },
	{ L_ "mlp.experts.local_experts.@.linear_fc1.weight", { D_2F, D_H },
	  H_ "block_sparse_moe.experts.@.w3.weight", NM_UP, R_LAYER | R_EXPERT | R_MOE },
	{ "decoder.final_layernorm.weight", { D_H }, "model.norm.weight", NM_ALL, 0 },
	{ "output_layer.weight", { D_VPAD, D_H }, "lm_head.weight", NM_VOCAB, R_UNTIED },
};

#define NRULES (sizeof(rules) / sizeof(rules[0]))

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

/* The flags (bools) of args that stop the naming, and what each means. */
static const struct {
	const char *arg, *what;
} nm_flags[] = {
	{ "rotary_interleaved", "interleaved rotary embeddings (rotary_interleaved)" },
	{ "qk_layernorm", "QK layernorm (qk_layernorm)" },
	{ "add_bias_linear", "biases other than QKV (add_bias_linear)" },
	{ "multi_latent_attention", "MLA (multi_latent_attention)" },
	{ "use_rope_scaling", "RoPE scaling (use_rope_scaling)" },
	{ "squared_relu", "an activation other than SiLU with GLU (squared_relu)" },
	{ "layernorm_zero_centered_gamma", "zero-centred norm weights (layernorm_zero_centered_gamma)" },
	{ "apply_layernorm_1p", "zero-centred norm weights (apply_layernorm_1p)" },
	{ "attention_output_gate", "a gated attention output (attention_output_gate)" },
	{ "apply_residual_connection_post_layernorm",
	  "residual connections taken after the layernorm (apply_residual_connection_post_layernorm)" },
	{ "qk_l2_norm", "QK L2 normalization (qk_l2_norm)" },
	{ "use_mup", "muP multipliers (use_mup)" },
	{ "moe_router_pre_softmax", "a router softmax before top-k (moe_router_pre_softmax)" },
	{ "moe_router_enable_expert_bias", "expert bias in the router (moe_router_enable_expert_bias)" },
	{ "moe_router_force_load_balancing", "forced load-balanced routing (moe_router_force_load_balancing)" },
	{ "moe_apply_probs_on_input", "router probabilities applied to the expert input (moe_apply_probs_on_input)" },
};

/* The other flags of args the naming reads. */
static const char *const nm_more_flags[] = {
	"untie_embeddings_and_output_weights", "add_qkv_bias", "group_query_attention", "swiglu",
	"gated_linear_unit",
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

/* unsupported(): the first feature of args the tables cannot express, or NULL. */
static const char *unsupported(const gfs_pv *args, char *buf, size_t n)
{
	static const struct {
		const char *arg, *what;
	} present[] = {
		{ "moe_shared_expert_intermediate_size", "shared experts (moe_shared_expert_intermediate_size)" },
		{ "window_size", "sliding-window attention (window_size)" },
		{ "rotary_seq_len_interpolation_factor", "RoPE interpolation (rotary_seq_len_interpolation_factor)" },
		{ "mtp_num_layers", "multi-token prediction layers (mtp_num_layers)" },
		{ "experimental_attention_variant", "an experimental attention variant" },
		{ "heterogeneous_layers_config_path", "heterogeneous layers" },
		{ "heterogeneous_layers_config_encoded_json", "heterogeneous layers" },
		{ "moe_router_topk_scaling_factor", "scaled top-k routing (moe_router_topk_scaling_factor)" },
		{ "no_rope_freq", "layers without RoPE (no_rope_freq)" },
		{ "linear_attention_freq", "linear attention layers (linear_attention_freq)" },
		{ "activation_func_clamp_value", "a clamped activation (activation_func_clamp_value)" },
		{ "moe_router_num_groups", "group-limited routing (moe_router_num_groups)" },
		{ "moe_router_topk_limited_devices", "device-limited routing (moe_router_topk_limited_devices)" },
		{ "moe_latent_size", "latent expert projections (moe_latent_size)" },
	};
	double pct = 1.0, freq = 1.0, offset = 0.0;
	const gfs_pv *softmax = arg(args, "softmax_type");
	const gfs_pv *pe = arg(args, "position_embedding_type");
	const gfs_pv *norm = arg(args, "normalization");
	const gfs_pv *score = arg(args, "moe_router_score_function");

	for (size_t i = 0; i < sizeof(nm_flags) / sizeof(nm_flags[0]); i++)
		if (arg_true(args, nm_flags[i].arg))
			return nm_flags[i].what;
	for (size_t i = 0; i < sizeof(present) / sizeof(present[0]); i++)
		if (arg(args, present[i].arg))
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
		if (score && !arg_str_is(args, "moe_router_score_function", "softmax"))
			return "a router score function other than softmax";
		if (!arg_num(args, "moe_layer_freq", 1.0, &freq) || freq != 1.0)
			return "experts in some layers only (moe_layer_freq)";
		if (arg_true(args, "add_qkv_bias"))
			return "experts with QKV biases";
	}
	return NULL;
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
	a->family = a->experts ? "mixtral" : a->qkv_bias ? "qwen2" : "llama";
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

/* read_arch(): a's numbers from the parsed config c of path. */
static gfs_err read_arch(const cJSON *c, const char *path, gfs_arch *a)
{
	const cJSON *mt = gfs_json_get(c, "model_type"), *act = gfs_json_get(c, "hidden_act");
	const cJSON *rp = gfs_json_get(c, "rope_parameters");
	const char *type = cJSON_IsString(mt) ? mt->valuestring : NULL;
	gfs_err err;

	if (!type)
		return gfs_fail(GFS_ERR_FORMAT, "%s: no model_type", path);
	if (strcmp(type, "llama") == 0 || strcmp(type, "mistral") == 0)
		a->family = "llama";
	else if (strcmp(type, "qwen2") == 0)
		a->family = "qwen2";
	else if (strcmp(type, "mixtral") == 0)
		a->family = "mixtral";
	else
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: model_type '%s' is not in the naming table (llama, mistral, qwen2, mixtral)",
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
	if (err)
		return err;
	a->tied = cfg_true(c, "tie_word_embeddings");
	a->qkv_bias = strcmp(a->family, "qwen2") == 0;
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

void gfs_arch_clear(gfs_arch *a)
{
	if (!a)
		return;
	free(a->config);
	free(a->gen_config);
	a->config = a->gen_config = NULL;
}

/* ---------------------------------------------------------------- the HF view */

/* applies(): does rule r belong to the table of architecture a? */
static bool applies(const nm_rule *r, const gfs_arch *a)
{
	if ((r->when & R_DENSE) && a->experts)
		return false;
	if ((r->when & R_MOE) && !a->experts)
		return false;
	if ((r->when & R_BIAS) && !a->qkv_bias)
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
	const int64_t f = a->experts ? a->moe_ffn : a->ffn;

	switch (d) {
	case D_H: return a->hidden;
	case D_QKV: return (a->heads + 2 * a->groups) * a->kv_channels;
	case D_ATTN: return a->heads * a->kv_channels;
	case D_2F: return 2 * f;
	case D_F: return f;
	case D_E: return a->experts;
	case D_VPAD: return a->vocab;
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

/* check_shape(): the Megatron tensor t against rule r's shape under a. */
static gfs_err check_shape(const gfs_tensor *t, const nm_rule *r, const gfs_arch *a)
{
	const uint32_t nd = r->shape[1] != D_NONE ? 2 : 1;
	uint64_t want[2];
	char have[96], need[96];
	bool ok = t->ndim == nd;

	for (uint32_t d = 0; d < nd; d++) {
		want[d] = (uint64_t)dim_of(a, r->shape[d]);
		if (ok && r->shape[d] == D_VPAD)
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

/* add_hf(): HF tensor name from Megatron tensor si by rule r. */
static gfs_err add_hf(gfs_layout *hf, const gfs_layout *mg, size_t si, const nm_rule *r,
		      const gfs_arch *a, const char *name, nm_rows *rows)
{
	const gfs_tensor *t = &mg->tensors[si];
	const uint64_t row_bytes = t->shape[0] ? t->nbytes / t->shape[0] : 0;
	uint64_t shape[2], total = 0;
	size_t n = rows_of(r->split, a, t->shape[0], rows), ti;
	gfs_err err;

	for (size_t i = 0; i < n; i++)
		total += rows[i].n;
	memcpy(shape, t->shape, t->ndim * sizeof(*shape));
	shape[0] = total;
	err = gfs_layout_add_tensor(hf, name, t->dtype, t->ndim, shape, &ti);
	for (size_t i = 0; i < n && !err; i++)
		if (rows[i].n && row_bytes)
			err = gfs_layout_add_extent(hf, ti, rows[i].to * row_bytes, mg, si,
						    rows[i].first * row_bytes, rows[i].n * row_bytes);
	return err;
}

/* find_source(): the one Megatron tensor of HF rule r (or its alternatives) at (layer, expert). */
static gfs_err find_source(const gfs_layout *mg, const gfs_arch *a, size_t r, int64_t layer,
			   int64_t expert, const char *label, bool *used, int64_t *si, size_t *rule)
{
	char name[1024], first[1024] = "";
	gfs_err err;

	*si = -1;
	for (size_t k = 0; k < NRULES; k++) {
		int64_t i;

		if (strcmp(rules[k].hf, rules[r].hf) != 0 || !applies(&rules[k], a))
			continue;
		err = fill(rules[k].mg, layer, expert, name, sizeof(name));
		if (err)
			return err;
		i = gfs_layout_find(mg, name);
		if (i < 0)
			continue;
		if (*si >= 0)
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s and %s are both present: which is the norm?",
					label, first, name);
		*si = i;
		*rule = k;
		used[i] = true;
		snprintf(first, sizeof(first), "%s", name);
	}
	if (*si < 0) {
		err = fill(rules[r].mg, layer, expert, name, sizeof(name));
		if (!err)
			err = fill(rules[r].hf, layer, expert, first, sizeof(first));
		if (!err)
			err = gfs_fail(GFS_ERR_FORMAT, "%s: no tensor %s (for the %s tensor %s)", label,
				       name, a->family, first);
		return err;
	}
	return GFS_OK;
}

/* first_of(): is rule r the first applying rule of its HF name? */
static bool first_of(size_t r, const gfs_arch *a)
{
	for (size_t k = 0; k < r; k++)
		if (applies(&rules[k], a) && strcmp(rules[k].hf, rules[r].hf) == 0)
			return false;
	return true;
}

/* emit(): the HF tensors of rule r at (layer, expert). */
static gfs_err emit(gfs_layout *hf, const gfs_layout *mg, const gfs_arch *a, size_t r,
		    int64_t layer, int64_t expert, const char *label, bool *used, nm_rows *rows)
{
	char name[1024];
	int64_t si;
	size_t k = r;
	gfs_err err = find_source(mg, a, r, layer, expert, label, used, &si, &k);

	if (!err && (err = check_shape(&mg->tensors[si], &rules[k], a)) != GFS_OK)
		err = gfs_fail_prefix(err, "%s", label);
	if (!err)
		err = fill(rules[r].hf, layer, expert, name, sizeof(name));
	if (!err)
		err = add_hf(hf, mg, (size_t)si, &rules[k], a, name, rows);
	return err;
}

/*
 * emit_layer(): the HF tensors of layer l, rules from r0 on in table
 * order, each expert's together (at the first expert rule).
 */
static gfs_err emit_layer(gfs_layout *hf, const gfs_layout *mg, const gfs_arch *a, size_t r0,
			  int64_t l, const char *label, bool *used, nm_rows *rows)
{
	bool experts_done = false;
	gfs_err err = GFS_OK;

	for (size_t k = r0; k < NRULES && !err; k++) {
		if (!(rules[k].when & R_LAYER) || !applies(&rules[k], a) || !first_of(k, a))
			continue;
		if (!(rules[k].when & R_EXPERT)) {
			err = emit(hf, mg, a, k, l, -1, label, used, rows);
			continue;
		}
		if (experts_done)
			continue;
		experts_done = true;
		for (int64_t e = 0; e < a->experts && !err; e++)
			for (size_t x = k; x < NRULES && !err; x++)
				if ((rules[x].when & R_EXPERT) && applies(&rules[x], a) && first_of(x, a))
					err = emit(hf, mg, a, x, l, e, label, used, rows);
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

/* make_config(): a config.json for a (family set) and the tensors' dtype. */
static gfs_err make_config(const gfs_arch *a, gfs_dtype dt, char **out)
{
	const bool moe = strcmp(a->family, "mixtral") == 0, qwen = strcmp(a->family, "qwen2") == 0;
	const char *arch = moe ? "MixtralForCausalLM" : qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
	gfs_buf b = { 0 };
	char s[256];

	snprintf(s, sizeof(s), "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n", arch,
		 a->family);
	put(&b, s);
	put_int(&b, "hidden_size", a->hidden);
	put_int(&b, "intermediate_size", moe ? a->moe_ffn : a->ffn);
	put_int(&b, "num_hidden_layers", a->layers);
	put_int(&b, "num_attention_heads", a->heads);
	put_int(&b, "num_key_value_heads", a->groups);
	put_int(&b, "head_dim", a->kv_channels);
	put_int(&b, "vocab_size", a->vocab);
	put_int(&b, "max_position_embeddings", a->max_pos);
	if (moe) {
		put_int(&b, "num_local_experts", a->experts);
		put_int(&b, "num_experts_per_tok", a->topk);
		put(&b, "  \"router_jitter_noise\": 0.0,\n  \"output_router_logits\": false,\n");
	}
	if (qwen)
		put(&b, "  \"use_sliding_window\": false,\n");
	if (qwen || moe)
		put(&b, "  \"sliding_window\": null,\n");
	if (!qwen)
		put(&b, "  \"attention_bias\": false,\n");
	if (!qwen && !moe)
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

/* check_all_used(): every Megatron tensor went somewhere (an untied copy of a tied one aside). */
static gfs_err check_all_used(const gfs_layout *mg, const gfs_arch *a, const char *label,
			      const bool *used)
{
	for (size_t i = 0; i < mg->ntensors; i++) {
		if (used[i] || mg->tensors[i].alias_of >= 0)
			continue;
		if (a->tied && strcmp(mg->tensors[i].name, "output_layer.weight") == 0)
			continue; /* the last stage's copy of the tied embedding */
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
	gfs_layout *hf = NULL;
	bool *used = NULL;
	nm_rows *rows = NULL;
	char *config = NULL;
	const int64_t embed = gfs_layout_find(mg, "embedding.word_embeddings.weight");
	size_t first_layer = 0;
	gfs_err err;

	assert(mg && mg->finished && a && a->family && a->vocab > 0 && label && out);
	*out = NULL;
	used = gfs_calloc(mg->ntensors + 1, sizeof(*used));
	rows = gfs_calloc((size_t)a->groups + 1, sizeof(*rows));
	if (!used || !rows) {
		free(used);
		free(rows);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	while (first_layer < NRULES && !(rules[first_layer].when & R_LAYER))
		first_layer++;
	err = gfs_layout_derive(mg, mg->format, &hf);
	/* the globals before the layers, the layers (each in table order), the globals after */
	for (int phase = 0; phase < 3 && !err; phase++)
		for (size_t r = 0; r < NRULES && !err; r++) {
			const nm_rule *ru = &rules[r];

			if (!applies(ru, a) || !first_of(r, a) || ((ru->when & R_UNTIED) && a->tied) ||
			    (phase == 1) != ((ru->when & R_LAYER) != 0) ||
			    (phase == 0 && r > first_layer) || (phase == 2 && r < first_layer))
				continue;
			if (phase != 1) {
				err = emit(hf, mg, a, r, -1, -1, label, used, rows);
				continue;
			}
			if (r != first_layer)
				break; /* the layers are emitted from the first layer rule */
			for (int64_t l = 0; l < a->layers && !err; l++)
				err = emit_layer(hf, mg, a, r, l, label, used, rows);
		}
	if (!err)
		err = check_all_used(mg, a, label, used);
	if (!err && embed >= 0)
		err = carry_replicas(mg, (size_t)embed, hf);
	if (!err && !a->config)
		err = make_config(a, embed >= 0 ? mg->tensors[embed].dtype : GFS_DT_F32, &config);
	if (!err)
		err = gfs_layout_add_text(hf, "config.json", a->config ? a->config : config);
	if (!err && a->gen_config)
		err = gfs_layout_add_text(hf, "generation_config.json", a->gen_config);
	if (!err)
		err = gfs_layout_finish(hf, label);
	free(config);
	free(used);
	free(rows);
	if (err) {
		gfs_layout_free(hf);
		return err;
	}
	*out = hf;
	return GFS_OK;
}
