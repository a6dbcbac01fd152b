#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Write a DeepSeek-V3-shaped FP8 checkpoint of any size, payloads as holes.

Usage:
  gen_fp8_deepseek.py OUT [--layers L] [--experts E] [--dense D] [--scale-fill]

OUT receives what the hub holds for deepseek-ai/DeepSeek-V3 (hub naming and shapes): config.json
with quantization_config {quant_method fp8, fmt e4m3, weight_block_size [128, 128]},
model-0000K-of-0000N.safetensors (one shard per decoder layer, plus one for the embedding, the
final norm and lm_head) and model.safetensors.index.json.  Every Linear weight of the decoder
layers (MLA q_a/q_b/kv_a_proj_with_mqa/kv_b/o_proj, dense and expert gate/up/down_proj, the shared
expert) is F8_E4M3 with its F32 weight_scale_inv of the ceil(M/128) x ceil(N/128) grid (ragged:
kv_a_proj_with_mqa has 576 rows); norms, router gate and e_score_correction_bias, embedding and
lm_head as DeepSeek stores them (BF16; the bias F32).  The payloads are holes (the files are
sparse: zeros), the scales too unless --scale-fill writes 1.0 into every scale (real data, 1 GiB at
full size).  Default: the full model (61 layers, the first 3 dense, 256 routed experts + 1 shared):
about 689 GB of sparse files.  Stdlib only.
"""
import argparse
import json
import os
import struct

H, VOCAB, INTER, MOE_INTER = 7168, 129280, 18432, 2048
HEADS, Q_LORA, KV_LORA, NOPE, ROPE, VHEAD = 128, 1536, 512, 128, 64, 128


def layer_tensors(i, a):
    """(name, dtype, shape) of decoder layer i."""
    p = f"model.layers.{i}."
    t = [(p + "input_layernorm.weight", "BF16", [H]), (p + "post_attention_layernorm.weight", "BF16", [H])]
    lin = [("self_attn.q_a_proj", Q_LORA, H), ("self_attn.q_b_proj", HEADS * (NOPE + ROPE), Q_LORA),
           ("self_attn.kv_a_proj_with_mqa", KV_LORA + ROPE, H),
           ("self_attn.kv_b_proj", HEADS * (NOPE + VHEAD), KV_LORA), ("self_attn.o_proj", H, HEADS * VHEAD)]
    t += [(p + "self_attn.q_a_layernorm.weight", "BF16", [Q_LORA]),
          (p + "self_attn.kv_a_layernorm.weight", "BF16", [KV_LORA])]
    if i < a.dense:
        lin += [("mlp.gate_proj", INTER, H), ("mlp.up_proj", INTER, H), ("mlp.down_proj", H, INTER)]
    else:
        t += [(p + "mlp.gate.weight", "BF16", [a.experts, H]),
              (p + "mlp.gate.e_score_correction_bias", "F32", [a.experts])]
        for e in [f"experts.{k}" for k in range(a.experts)] + ["shared_experts"]:
            lin += [(f"mlp.{e}.gate_proj", MOE_INTER, H), (f"mlp.{e}.up_proj", MOE_INTER, H),
                    (f"mlp.{e}.down_proj", H, MOE_INTER)]
    for name, m, n in lin:
        t.append((p + name + ".weight", "F8_E4M3", [m, n]))
        t.append((p + name + ".weight_scale_inv", "F32", [-(-m // 128), -(-n // 128)]))
    return t


SIZE = {"BF16": 2, "F32": 4, "F8_E4M3": 1}


def write_shard(path, tensors, fill):
    hdr, off, scales = {}, 0, []
    for name, dt, shape in sorted(tensors):
        n = SIZE[dt]
        for d in shape:
            n *= d
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        if fill and name.endswith("_scale_inv"):
            scales.append((off, n))
        off += n
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        base = 8 + len(h)
        one = struct.pack("<f", 1.0)
        for o, n in scales:
            f.seek(base + o)
            f.write(one * (n // 4))
        f.truncate(base + off)
    return off


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=61)
    ap.add_argument("--dense", type=int, default=3)
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--scale-fill", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    shards = [layer_tensors(i, a) for i in range(a.layers)]
    shards.append([("model.embed_tokens.weight", "BF16", [VOCAB, H]), ("model.norm.weight", "BF16", [H]),
                   ("lm_head.weight", "BF16", [VOCAB, H])])
    wm, total = {}, 0
    for k, t in enumerate(shards):
        fn = "model-%05d-of-%05d.safetensors" % (k + 1, len(shards))
        total += write_shard(os.path.join(a.out, fn), t, a.scale_fill)
        for name, _, _ in t:
            wm[name] = fn
    json.dump({"metadata": {"total_size": total}, "weight_map": wm},
              open(os.path.join(a.out, "model.safetensors.index.json"), "w"), indent=2)
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": H,
           "intermediate_size": INTER, "moe_intermediate_size": MOE_INTER, "num_hidden_layers": a.layers,
           "first_k_dense_replace": a.dense, "n_routed_experts": a.experts, "n_shared_experts": 1,
           "num_attention_heads": HEADS, "q_lora_rank": Q_LORA, "kv_lora_rank": KV_LORA,
           "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE, "v_head_dim": VHEAD, "vocab_size": VOCAB,
           "torch_dtype": "bfloat16",
           "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                   "weight_block_size": [128, 128]}}
    json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    print("%s: %d shards, %d tensors, %.1f GB" % (a.out, len(shards), len(wm), total / 1e9))


if __name__ == "__main__":
    main()
