#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Build PEFT-format LoRA adapters for features no fixture covers, and their
float64 reference merges (lora_ref.py), next to copies of real bases.

usage: make_lora_adapters.py DATA OUT

DATA is tests/data/lora (bases of real transformers models).  For each case
OUT/<case>/ gets adapter/ (adapter_config.json + adapter_model.safetensors),
base -> the base dir used, and ref.safetensors: lora_ref.merged_state() of
the float64 merge (every base tensor, changed ones rounded once), plus
extra.json naming tensors the mount adds (an untied head) and what they must
equal.
  patterns   Llama: rsLoRA, rank_pattern, alpha_pattern on q_proj/v_proj
  emb_dora   Llama: DoRA on the tied embedding (per-column norms) and on
             q_proj, with the adapter's own copy of the embedding weight
  gpt2_bias  GPT-2 Conv1D (fan_in_fan_out): DoRA + lora_bias on c_attn,
             modules_to_save of mlp.c_fc (weight and bias)
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lora_ref  # noqa: E402

P = lora_ref.PEFT_PREFIX


def f32(rng, shape, scale):
    return ("F32", list(shape), (rng.standard_normal(shape) * scale).astype(np.float32))


def config(**kw):
    c = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "use_rslora": False, "use_dora": False,
         "fan_in_fan_out": False, "rank_pattern": {}, "alpha_pattern": {}, "lora_bias": False,
         "modules_to_save": None, "target_modules": [], "bias": "none", "task_type": "CAUSAL_LM"}
    c.update(kw)
    return c


def write_case(out, name, base_dir, cfg, tensors, extra=None):
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "adapter"), exist_ok=True)
    with open(os.path.join(d, "adapter", "adapter_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    lora_ref.write_safetensors(os.path.join(d, "adapter", "adapter_model.safetensors"), tensors)
    base, _ = lora_ref.read_safetensors(os.path.join(base_dir, "model.safetensors"))
    m64, info = lora_ref.merge_fp64(base, os.path.join(d, "adapter"))
    lora_ref.write_safetensors(os.path.join(d, "ref.safetensors"), lora_ref.merged_state(base, m64))
    with open(os.path.join(d, "base"), "w") as f:
        f.write(base_dir + "\n")
    with open(os.path.join(d, "extra.json"), "w") as f:
        json.dump({"changed": sorted(m64), **(extra or {})}, f)


def main():
    data, out = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(14)
    llama = os.path.join(data, "a_llama_fp32", "base")
    gpt2 = os.path.join(data, "c_gpt2_conv1d", "base")

    t = {}
    for layer in (0, 1):
        q = f"{P}model.layers.{layer}.self_attn.q_proj"
        v = f"{P}model.layers.{layer}.self_attn.v_proj"
        rq = 4 if layer == 0 else 8
        t[q + ".lora_A.weight"] = f32(rng, (rq, 64), 0.1)
        t[q + ".lora_B.weight"] = f32(rng, (64, rq), 0.1)
        t[v + ".lora_A.weight"] = f32(rng, (8, 64), 0.1)
        t[v + ".lora_B.weight"] = f32(rng, (32, 8), 0.1)
    write_case(out, "patterns", llama,
               config(use_rslora=True, target_modules=["q_proj", "v_proj"],
                      rank_pattern={"model.layers.0.self_attn.q_proj": 4}, alpha_pattern={"v_proj": 32}), t)

    base, _ = lora_ref.read_safetensors(os.path.join(llama, "model.safetensors"))
    emb = base["model.embed_tokens.weight"][2]
    copy = (emb + np.float32(1) / 1024).astype(np.float32)
    e = f"{P}model.embed_tokens"
    q = f"{P}model.layers.0.self_attn.q_proj"
    t = {e + ".base_layer.weight": ("F32", list(emb.shape), copy),
         e + ".lora_embedding_A": f32(rng, (8, 256), 0.1), e + ".lora_embedding_B": f32(rng, (64, 8), 0.1),
         e + ".lora_magnitude_vector": ("F32", [64], (np.abs(rng.standard_normal(64)) + 0.5).astype(np.float32)),
         q + ".lora_A.weight": f32(rng, (8, 64), 0.1), q + ".lora_B.weight": f32(rng, (64, 8), 0.1),
         q + ".lora_magnitude_vector": ("F32", [64], (np.abs(rng.standard_normal(64)) + 0.5).astype(np.float32))}
    write_case(out, "emb_dora", llama, config(use_dora=True, target_modules=["embed_tokens", "q_proj"]), t,
               {"untied_head": "lm_head.weight", "head_equals": "adapter:" + e + ".base_layer.weight"})

    c = f"{P}transformer.h.0.attn.c_attn"
    m = f"{P}transformer.h.0.mlp.c_fc"
    t = {c + ".lora_A.weight": f32(rng, (8, 64), 0.1), c + ".lora_B.weight": f32(rng, (192, 8), 0.1),
         c + ".lora_B.bias": f32(rng, (192,), 0.1),
         c + ".lora_magnitude_vector": ("F32", [192], (np.abs(rng.standard_normal(192)) + 0.5).astype(np.float32)),
         m + ".modules_to_save.weight": f32(rng, (64, 256), 0.05), m + ".modules_to_save.bias": f32(rng, (256,), 0.05)}
    write_case(out, "gpt2_bias", gpt2,
               config(fan_in_fan_out=True, use_dora=True, lora_bias=True, target_modules=["c_attn"],
                      modules_to_save=["transformer.h.0.mlp.c_fc"]), t)


if __name__ == "__main__":
    main()
