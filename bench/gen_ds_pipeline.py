#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Write a sparse DeepSpeed 0.14 PipelineModule checkpoint of a Llama-shaped model.

Usage:
  gen_ds_pipeline.py OUT [--pp P] [--dp D] [--layers L] [--hidden H]
                         [--ffn F] [--heads N] [--kv-heads K] [--vocab V]
                         [--tag TAG]

OUT receives what PipelineEngine.save_checkpoint (DeepSpeed 0.14.5, torch
1.13) writes for a bf16 PipelineModule trained with BF16_Optimizer (bf16
enabled, ZeRO stage 1, data_types.grad_accum_dtype fp32) on P pipeline
stages x D data-parallel ranks, TP 1, the default
PipeModelDataParallelTopology, partition_method "uniform": `latest` and
TAG/ with
  layer_XX-model_00-model_states.pt            one per layer: the layer's
                                               state_dict, bf16 clones;
  mp_rank_YY_model_states.pt                   one per stage: param_shapes
                                               of the stage's params, no
                                               module;
  bf16_zero_pp_rank_R_mp_rank_YY_optim_states.pt  one per stage and rank:
                                               the rank's fp32 partition of
                                               the stage's flat group, Adam's
                                               exp_avg and exp_avg_sq, and
                                               param_slice_mappings.
The layers are the embedding (`weight`, V x H), L Llama decoder blocks
(self_attn.q/k/v/o_proj, mlp.gate/up/down_proj, input_layernorm,
post_attention_layernorm: HF LlamaDecoderLayer's state_dict, head dim
H / N, K key/value heads), the final RMSNorm (`weight`) and the untied head
(`weight`, V x H): L + 3 layer files.  Defaults: Llama-3-70B at PP 8 x DP 1.

The pickles follow the real fixture tests/data/ds3d/pp2_dp2_bf16 (same
keys, order, classes and ds_config a bf16 ZeRO-1 pipeline run saves); one
param group holding all of a stage's params, as there.  Every tensor
payload is a hole (bench/sparse_zip.py): a 70B model at PP 8 is about
1 TB apparent (bf16 layers, and fp32 master + two moments per param) and a
few MB on disk.  Writes OUT/.gen-done last.
"""
import argparse
import collections
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_deepspeed  # noqa: E402  (registers the deepspeed.* stand-ins)
import sparse_zip  # noqa: E402

fragment_address = gen_deepspeed.fragment_address


def layers(a):
    """[(name, shape)] of each PipelineModule layer, in layer order."""
    hd = a.hidden // a.heads
    kv = a.kv_heads * hd
    block = [("self_attn.q_proj.weight", (a.hidden, a.hidden)),
             ("self_attn.k_proj.weight", (kv, a.hidden)),
             ("self_attn.v_proj.weight", (kv, a.hidden)),
             ("self_attn.o_proj.weight", (a.hidden, a.hidden)),
             ("mlp.gate_proj.weight", (a.ffn, a.hidden)),
             ("mlp.up_proj.weight", (a.ffn, a.hidden)),
             ("mlp.down_proj.weight", (a.hidden, a.ffn)),
             ("input_layernorm.weight", (a.hidden,)),
             ("post_attention_layernorm.weight", (a.hidden,))]
    return ([[("weight", (a.vocab, a.hidden))]] + [block] * a.layers +
            [[("weight", (a.hidden,))], [("weight", (a.vocab, a.hidden))]])


def partition_uniform(num_items, num_parts):
    """deepspeed.runtime.utils.partition_uniform: the first layer of each stage, and the end."""
    if num_items <= num_parts:
        return [min(p, num_items) for p in range(num_parts + 1)]
    chunk, residual = divmod(num_items, num_parts)
    parts = [p * chunk for p in range(num_parts + 1)]
    for i in range(residual):
        for j in range(i + 1, num_parts + 1):
            parts[j] += 1
    return parts


def ds_config(a):
    """The ds_config a bf16 ZeRO-1 pipeline run saves (pp2_dp2_bf16's, with its batch sizes)."""
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": a.gas,
        "gradient_clipping": 1.0,
        "steps_per_print": 1000,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.0001, "betas": [0.9, 0.95],
                                                   "eps": 1e-08, "weight_decay": 0.1}},
        "zero_optimization": {"stage": 1},
        "zero_allow_untested_optimizer": True,
        "wall_clock_breakdown": False,
        "train_batch_size": a.gas * a.dp,
        "bf16": {"enabled": True},
        "data_types": {"grad_accum_dtype": "fp32"},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--pp", type=int, default=8)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--layers", type=int, default=80)
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--ffn", type=int, default=28672)
    ap.add_argument("--heads", type=int, default=64)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--gas", type=int, default=8, help="gradient accumulation steps")
    ap.add_argument("--tag", default="global_step3")
    a = ap.parse_args()
    steps = int("".join(c for c in a.tag if c.isdigit()) or "3")
    cfg = ds_config(a)
    tagdir = os.path.join(a.out, a.tag)
    os.makedirs(tagdir, exist_ok=True)

    specs = layers(a)
    for i, entries in enumerate(specs):
        sd = collections.OrderedDict(
            (n, sparse_zip.empty_hole(torch.Size(s).numel(), torch.bfloat16).view(s))
            for n, s in entries)
        sparse_zip.sparse_save(sd, os.path.join(tagdir, f"layer_{i:02d}-model_00-model_states.pt"))
        del sd
        sparse_zip.forget_holes()

    bounds = partition_uniform(len(specs), a.pp)
    align = 2 * a.dp  # BF16_Optimizer: nccl_start_alignment_factor 2 x dp world size
    for y in range(a.pp):
        shapes = collections.OrderedDict(
            (f"{i}.{n}", torch.Size(s)) for i in range(bounds[y], bounds[y + 1])
            for n, s in specs[i])
        sparse_zip.sparse_save({
            "module": None, "buffer_names": [], "optimizer": None, "param_shapes": [shapes],
            "frozen_param_shapes": None, "shared_params": {}, "frozen_param_fragments": None,
            "lr_scheduler": None, "data_sampler": None, "random_ltd": None,
            "sparse_tensor_module_names": set(), "skipped_steps": 0, "global_steps": steps,
            "global_samples": steps * cfg["train_batch_size"], "dp_world_size": a.dp,
            "mp_world_size": a.pp, "ds_config": cfg, "ds_version": gen_deepspeed.DS_VERSION},
            os.path.join(tagdir, f"mp_rank_{y:02d}_model_states.pt"))
        total = sum(s.numel() for s in shapes.values())
        padded = -(-total // align) * align
        ps = padded // a.dp
        for r in range(a.dp):
            m = collections.OrderedDict()
            o = 0
            for n, s in shapes.items():
                lo, hi = max(o, r * ps), min(o + s.numel(), (r + 1) * ps)
                if lo < hi:
                    m[n] = fragment_address(hi - lo, lo - r * ps)
                o += s.numel()
            betas = cfg["optimizer"]["params"]["betas"]
            osd = {
                "clip_grad": 1.0,
                "base_optimizer_state": {
                    "state": {0: {"step": torch.tensor(float(steps)),
                                  "exp_avg": sparse_zip.empty_hole(ps),
                                  "exp_avg_sq": sparse_zip.empty_hole(ps)}},
                    "param_groups": [{"lr": 0.0001, "betas": betas, "eps": 1e-08,
                                      "weight_decay": 0.1, "amsgrad": False, "foreach": None,
                                      "maximize": False, "capturable": False, "params": [0]}]},
                "single_partition_of_fp32_groups": [sparse_zip.empty_hole(ps).requires_grad_(True)],
                "group_paddings": [padded - total if r == a.dp - 1 else 0],
                "partition_count": [a.dp],
                "ds_version": gen_deepspeed.DS_VERSION,
                "param_slice_mappings": [m]}
            sparse_zip.sparse_save(
                {"optimizer_state_dict": osd, "ds_config": cfg,
                 "ds_version": gen_deepspeed.DS_VERSION},
                os.path.join(tagdir, f"bf16_zero_pp_rank_{r}_mp_rank_{y:02d}_optim_states.pt"))
            del osd
            sparse_zip.forget_holes()
    gen_deepspeed.finish(a.out, a.tag)


if __name__ == "__main__":
    main()
