/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — PEFT LoRA adapters: the merged model as a layout of computed
 * tensors (layout.h, compute.h), from a PEFT-wrapped checkpoint or from a
 * base plus a PEFT adapter directory.
 *
 * Names follow PEFT (docs: README "LoRA"): a wrapped model's keys are
 * base_model.model.<path>.base_layer.weight, <path>.lora_A.<adapter>.weight,
 * <path>.lora_B.<adapter>.weight (and .bias), <path>.lora_embedding_A.<adapter>,
 * <path>.lora_magnitude_vector.<adapter>.weight, <path>.modules_to_save.<adapter>.*;
 * an adapter file's keys are the same without the adapter name.  The merged
 * model has the names merge_and_unload() leaves: base_model.model. and
 * .base_layer stripped, lora_* gone, modules_to_save copies in place of the
 * originals.
 *
 * Scale and rank per module come from adapter_config.json (r, lora_alpha,
 * use_rslora, use_dora, fan_in_fan_out, rank_pattern, alpha_pattern with
 * PEFT's rule: the first key k, in file order, with the module path matching
 * (.*\.)?(k)$); r must equal lora_A's first dimension.
 */
#ifndef GATHERFS_LORA_H
#define GATHERFS_LORA_H

#include "gatherfs/index/layout.h"

typedef struct gfs_lora_opts {
	const char *config;  /* adapter_config.json (required) */
	bool tied_peft;      /* a targeted tied embedding stays tied (PEFT's in-place merge) */
	bool tie_default;    /* config.json says tie_word_embeddings (or says nothing) */
} gfs_lora_opts;

/*
 * gfs_lora_merge(): the merged model of base (a finished layout: a plain
 * model, or a PEFT-wrapped checkpoint holding base weights) and adapter (a
 * finished layout of PEFT adapter tensors, wrapped or adapter-file names;
 * NULL: the LoRA tensors are in base).  Every LoRA target becomes a
 * computed tensor; other tensors keep their pieces (an adapter's own copy
 * of a base weight, e.g. a saved embedding, replaces it).  A tied alias of
 * a targeted tensor becomes an untied copy of the unmerged target unless
 * o->tied_peft; when base has no head for a targeted embedding and
 * o->tie_default, "lm_head.weight" is added as that copy.  *untied is set
 * when that happened (config.json should then say tie_word_embeddings:
 * false).  Errors (one line): unreadable or unknown config (peft_type not
 * LORA, r or lora_alpha missing or not positive/finite), an adapter tensor
 * without its partner, a target the base lacks, shapes that do not fit, a
 * rank that differs from the config, a non-finite scale, an adapter
 * without LoRA tensors.  @return GFS_OK and a finished layout in *out
 * (root_dir and base_dir from base).
 */
gfs_err gfs_lora_merge(const gfs_layout *base, const gfs_layout *adapter,
		       const gfs_lora_opts *o, gfs_layout **out, bool *untied);

/*
 * gfs_lora_count(): the number of LoRA tensors (lora_A/B, embedding A/B,
 * magnitude) among l's names.
 */
size_t gfs_lora_count(const gfs_layout *l);

/*
 * gfs_lora_adapter(): the adapter of a PEFT-wrapped layout l as PEFT's
 * save_pretrained() writes adapter_model.safetensors: its LoRA tensors (and
 * modules_to_save copies, and the base weight of a targeted embedding),
 * named without the adapter name (base_model.model.<path>.lora_A.weight,
 * ...), with their pieces (so a ZeRO checkpoint gives the fp32 masters),
 * and l's root directory (where adapter_config.json is).
 * @return GFS_OK and a finished layout in *out, or GFS_ERR_NOTFOUND when l
 * holds no LoRA tensor or already is an adapter file (only LoRA tensors,
 * named as in one).
 */
gfs_err gfs_lora_adapter(const gfs_layout *l, gfs_layout **out);

/* The LoRA options of the front ends (-o lora=, merge=, base=, lora_tied=). */
typedef struct gfs_lora_cli {
	const char *lora;  /* a PEFT adapter directory to merge onto the source */
	const char *merge; /* "lora": merge the source's own adapter */
	const char *base;  /* with merge: the base model, the source holds only the adapter */
	const char *tied;  /* "untied" (default) or "peft" */
} gfs_lora_cli;

/*
 * gfs_lora_apply(): replace *layout (the import of the mount's source) by
 * its merged model as the options ask: with c->lora, *layout is the base
 * and the adapter is the PEFT adapter directory c->lora
 * (adapter_model.safetensors or .bin, read by gfs_import_plain_dir()) with
 * its adapter_config.json; with c->merge, the adapter is in *layout and
 * its adapter_config.json in the layout's root directory; c->base then
 * names the base (imported with gfs_import()).  Nothing asked: a no-op.
 * *untied as for gfs_lora_merge().  On error *layout is unchanged.
 */
gfs_err gfs_lora_apply(const gfs_lora_cli *c, gfs_layout **layout, bool *untied);

/*
 * gfs_lora_saved_note(): for a PEFT-wrapped layout l, a one-line note when
 * the adapter_model.safetensors saved in its root directory is empty (no
 * tensors: HF Trainer's fallback) or has [0]-shaped tensors (a ZeRO-3 save
 * without gathering).  *note is NULL otherwise (also when that file is
 * absent or unreadable); the caller frees it.
 */
gfs_err gfs_lora_saved_note(const gfs_layout *l, char **note);

#endif
