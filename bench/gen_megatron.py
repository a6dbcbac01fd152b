#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Write a Megatron-Core torch_dist or legacy checkpoint of any size, payloads as holes.

Usage:
  gen_megatron.py OUT [--format torch_dist|legacy] [--tp T] [--pp P]
                      [--layers L] [--hidden H] [--ffn F] [--heads N]
                      [--groups G] [--vocab V] [--dtype bf16|fp32]

OUT receives what Megatron-LM's save_checkpoint (--ckpt-format torch_dist)
writes for a Llama-shaped GPTModel at TP T x PP P (data parallel 1): OUT/
latest_checkpointed_iteration.txt ("1") and OUT/iter_0000001/ with
metadata.json (sharded_backend torch_dist), common.pt (args as an
argparse.Namespace, checkpoint_version, iteration) and a DCP checkpoint
(bench/gen_dcp.py's stand-in classes) whose keys are Megatron-Core's
sharded keys: per-layer tensors stacked on a leading layer axis,
TransformerEngine-style norm keys, the gated linear_fc1 global [gate; up].
Rank r = p * T + t writes __r_0.distcp holding, for its stage's layers, its
tensor-parallel chunks: linear_qkv and linear_fc1 (each half) split on dim 1
of the stacked tensor, linear_proj and linear_fc2 on dim 2, the norms from
tensor rank 0, the embedding (stage 0) and output layer (last stage) split
on the vocabulary, padded to a multiple of 128 x T.  Every chunk is a
complete torch.save archive whose payload is a hole (bench/sparse_zip.py).
Default: a Llama-70B shape (80 layers, hidden 8192, ffn 28672, 64 heads in 8
groups, vocabulary 128256) at TP 8 x PP 4, bf16.  Writes OUT/.gen-done last.

--shape dsv3: a DeepSeek-V3-shaped save instead (61 layers, the first 3
dense, 256 routed experts + 1 shared, MLA q_lora 1536, kv_lora 512, qk 128
+ rope 64, v 128, 128 heads, hidden 7168, ffn 18432, expert ffn 2048,
vocabulary 129280) at EP 8 x PP 4 (TP 1; --ep, and the --dsv3-* sizes
below, change it): a list moe_layer_freq, so Megatron-Core's per-layer keys
(decoder.layers.<i>.*, no layer axis) with TransformerEngine's norm keys
(linear_q_up_proj.layer_norm_weight, ...), each MoE layer's experts one
tensor [E, 2Fm, H] / [E, H, Fm] split over the expert ranks on axis 0,
everything else written by expert rank 0 of its stage; layers spread over
the stages as evenly as they go (16, 15, 15, 15).  args say rope_type
'rope' (the real model's is yarn, which the Hugging Face naming refuses).

--format legacy: what save_checkpoint writes with --ckpt-format torch
instead (Llama shape only): OUT/latest_checkpointed_iteration.txt ("1") and,
for rank r = p * T + t, OUT/iter_0000001/mp_rank_TT_PPP/model_optim_rng.pt
(mp_rank_TT when P is 1), one torch 2.x torch.save archive (prefix
model_optim_rng) of {args (that rank's: rank, world_size), checkpoint_version
3.0, iteration 1, model, rng_state, num_floating_point_operations_so_far}.
model is that rank's GPTModel state dict, as the real legacy saves of
tests/data/megatron (local layer spec) hold it: its stage's layers numbered
from 0, input_layernorm / pre_mlp_layernorm norms (replicated), linear_qkv
and linear_fc1 ([gate_t; up_t]) its rows, linear_proj and linear_fc2 its
columns, each linear layer's _extra_state None, the embedding (stage 0) and
output layer (last stage) its rows of the padded vocabulary.  rng_state
holds Python's and torch's generator states (no numpy's: stdlib and torch
only).  Every payload is a hole.
"""
import argparse
import json
import os
import pickle
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_dcp  # noqa: E402  (the DCP stand-in classes)
import sparse_zip  # noqa: E402


def keys(a):
    """(key, global shape, chunks) of every tensor; chunks: (rank, offsets, sizes)."""
    T, P, L, H, F = a.tp, a.pp, a.layers, a.hidden, a.ffn
    D = H // a.heads
    qkv = (a.heads + 2 * a.groups) * D
    per = L // P
    m = 128 * T
    vpad = -(-a.vocab // m) * m
    rank = lambda p, t: p * T + t  # noqa: E731
    out = []
    out.append(("embedding.word_embeddings.weight", (vpad, H),
                [(rank(0, t), (t * vpad // T, 0), (vpad // T, H)) for t in range(T)]))

    def stacked(name, shape, split):
        ch = []
        for l in range(L):
            p = l // per
            for t in range(T if split is not None else 1):
                if split is None:
                    ch.append((rank(p, 0), (l,) + (0,) * len(shape), (1,) + shape))
                elif split == "gated":
                    half = shape[0] // 2
                    for h in range(2):
                        ch.append((rank(p, t), (l, h * half + t * half // T, 0), (1, half // T, shape[1])))
                else:
                    off = [l] + [0] * len(shape)
                    size = [1] + list(shape)
                    off[1 + split] = t * shape[split] // T
                    size[1 + split] = shape[split] // T
                    ch.append((rank(p, t), tuple(off), tuple(size)))
        out.append(("decoder.layers." + name, (L,) + shape, ch))

    stacked("self_attention.linear_qkv.layer_norm_weight", (H,), None)
    stacked("self_attention.linear_qkv.weight", (qkv, H), 0)
    stacked("self_attention.linear_proj.weight", (H, a.heads * D), 1)
    stacked("mlp.linear_fc1.layer_norm_weight", (H,), None)
    stacked("mlp.linear_fc1.weight", (2 * F, H), "gated")
    stacked("mlp.linear_fc2.weight", (H, F), 1)
    out.append(("decoder.final_layernorm.weight", (H,), [(rank(P - 1, 0), (0,), (H,))]))
    out.append(("output_layer.weight", (vpad, H),
                [(rank(P - 1, t), (t * vpad // T, 0), (vpad // T, H)) for t in range(T)]))
    return out, vpad


def legacy_model(a, vpad, p, t):
    """Rank (stage p, tensor rank t)'s legacy model state dict (padded vocabulary vpad),
    tensors as holes."""
    T, P, H, F = a.tp, a.pp, a.hidden, a.ffn
    D = a.hidden // a.heads
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    hole = lambda *shape: sparse_zip.empty_hole(torch.Size(shape).numel(), dtype).view(shape)  # noqa: E731
    m = {}
    if p == 0:
        m["embedding.word_embeddings.weight"] = hole(vpad // T, H)
    for l in range(a.layers // P):
        pre = "decoder.layers.%d." % l
        m[pre + "input_layernorm.weight"] = hole(H)
        m[pre + "self_attention.linear_proj.weight"] = hole(H, a.heads * D // T)
        m[pre + "self_attention.linear_proj._extra_state"] = None
        m[pre + "self_attention.linear_qkv.weight"] = hole((a.heads + 2 * a.groups) * D // T, H)
        m[pre + "self_attention.linear_qkv._extra_state"] = None
        m[pre + "pre_mlp_layernorm.weight"] = hole(H)
        m[pre + "mlp.linear_fc1.weight"] = hole(2 * F // T, H)
        m[pre + "mlp.linear_fc1._extra_state"] = None
        m[pre + "mlp.linear_fc2.weight"] = hole(H, F // T)
        m[pre + "mlp.linear_fc2._extra_state"] = None
    if p == P - 1:
        m["decoder.final_layernorm.weight"] = hole(H)
        m["output_layer.weight"] = hole(vpad // T, H)
        m["output_layer._extra_state"] = None
    return m


def write_legacy(a, vpad, args, rnd):
    """OUT/iter_0000001/mp_rank_*/model_optim_rng.pt of every rank (--format legacy)."""
    for p in range(a.pp):
        for t in range(a.tp):
            r = p * a.tp + t
            d = os.path.join(a.out, "iter_0000001", "mp_rank_%02d" % t + ("_%03d" % p if a.pp > 1 else ""))
            os.makedirs(d, exist_ok=True)
            rank_args = argparse.Namespace(**vars(args))
            rank_args.rank = r
            gen = torch.Generator()
            gen.manual_seed(a.seed + r)
            ckpt = {"args": rank_args, "checkpoint_version": 3.0, "iteration": 1,
                    "model": legacy_model(a, vpad, p, t),
                    "rng_state": [{"random_rng_state": random.Random(a.seed + r).getstate(),
                                   "torch_rng_state": gen.get_state(),
                                   "cuda_rng_state": torch.zeros(16, dtype=torch.uint8),
                                   "rng_tracker_states": {}}],
                    "num_floating_point_operations_so_far": 0}
            with open(os.path.join(d, "model_optim_rng.pt"), "wb") as f:
                sid = str(rnd.getrandbits(128)).zfill(40).encode()
                sparse_zip.sparse_save_torch2(ckpt, f, sid, "model_optim_rng")
                f.truncate(f.tell())
            sparse_zip.forget_holes()


def keys_dsv3(a):
    """keys() for --shape dsv3: (key, global shape, chunks), vocabulary padded."""
    P, EP, L, H = a.pp, a.ep, a.layers, a.hidden
    N, Lq, Lkv, Dn, Dr, Dv = a.heads, a.q_lora, a.kv_lora, a.qk_head, a.qk_rope, a.v_head
    E, Fm, F = a.experts, a.moe_ffn, a.ffn
    vpad = -(-a.vocab // 128) * 128
    rank = lambda p, e: p * EP + e  # noqa: E731
    stage = [min(P - 1, l * P // L) for l in range(L)]
    out = [("embedding.word_embeddings.weight", (vpad, H), [(rank(0, 0), (0, 0), (vpad, H))])]
    for l in range(L):
        r = rank(stage[l], 0)
        pre = "decoder.layers.%d." % l

        def one(name, shape):
            out.append((pre + name, shape, [(r, (0,) * len(shape), shape)]))
        one("input_layernorm.weight", (H,))
        one("self_attention.linear_q_down_proj.weight", (Lq, H))
        one("self_attention.linear_q_up_proj.layer_norm_weight", (Lq,))
        one("self_attention.linear_q_up_proj.weight", (N * (Dn + Dr), Lq))
        one("self_attention.linear_kv_down_proj.weight", (Lkv + Dr, H))
        one("self_attention.linear_kv_up_proj.layer_norm_weight", (Lkv,))
        one("self_attention.linear_kv_up_proj.weight", (N * (Dn + Dv), Lkv))
        one("self_attention.linear_proj.weight", (H, N * Dv))
        if l < a.dense:
            one("mlp.linear_fc1.layer_norm_weight", (H,))
            one("mlp.linear_fc1.weight", (2 * F, H))
            one("mlp.linear_fc2.weight", (H, F))
            continue
        one("pre_mlp_layernorm.weight", (H,))
        one("mlp.router.weight", (E, H))
        one("mlp.router.expert_bias", (E,))
        for name, shape in (("linear_fc1.weight", (2 * Fm, H)), ("linear_fc2.weight", (H, Fm))):
            out.append((pre + "mlp.experts.experts." + name, (E,) + shape,
                        [(rank(stage[l], e), (e * E // EP, 0, 0), (E // EP,) + shape) for e in range(EP)]))
        one("mlp.shared_experts.linear_fc1.weight", (2 * Fm * a.shared, H))
        one("mlp.shared_experts.linear_fc2.weight", (H, Fm * a.shared))
    out.append(("decoder.final_layernorm.weight", (H,), [(rank(P - 1, 0), (0,), (H,))]))
    out.append(("output_layer.weight", (vpad, H), [(rank(P - 1, 0), (0, 0), (vpad, H))]))
    return out, vpad


def write_torch_dist(a, params, args, rnd):
    """OUT/iter_0000001/: the DCP files of keys() params, metadata.json and common.pt
    (--format torch_dist)."""
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    it = os.path.join(a.out, "iter_0000001")
    os.makedirs(it, exist_ok=True)
    files = {}
    sdm, planner, storage = {}, {}, {}
    for name, shape, chunks in params:
        metas = []
        for i, (r, off, size) in enumerate(chunks):
            rel = "__%d_0.distcp" % r
            f = files.get(rel) or files.setdefault(rel, open(os.path.join(it, rel), "wb"))
            t = sparse_zip.empty_hole(torch.Size(size).numel(), dtype).view(size)
            sid = str(rnd.getrandbits(128)).zfill(40).encode()
            start = f.tell()
            length = sparse_zip.sparse_save_torch2(t, f, sid)
            sparse_zip.forget_holes()
            storage[gen_dcp.MetadataIndex(name, i, torch.Size(off))] = gen_dcp.StorageInfo(rel, start, length)
            metas.append(gen_dcp.ChunkStorageMetadata(torch.Size(off), torch.Size(size)))
        sdm[name] = gen_dcp.TensorStorageMetadata(gen_dcp.TensorProperties(dtype), torch.Size(shape), metas)
        planner[name] = (name,)
    for f in files.values():
        f.truncate(f.tell())
        f.close()
    meta = gen_dcp.Metadata(sdm, planner, storage,
                            gen_dcp.StorageMeta(gen_dcp._Path(os.path.abspath(it)), "%032x" % rnd.getrandbits(128),
                                                None, []),
                            "1.0.0")
    with open(os.path.join(it, ".metadata"), "wb") as f:
        pickle.dump(meta, f, protocol=5)
    with open(os.path.join(it, "metadata.json"), "w") as f:
        json.dump({"sharded_backend": "torch_dist", "sharded_backend_version": 1,
                   "common_backend": "torch", "common_backend_version": 1}, f)
    torch.save({"args": args, "checkpoint_version": 3.0, "iteration": 1}, os.path.join(it, "common.pt"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--format", default="torch_dist", choices=("torch_dist", "legacy"))
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--pp", type=int, default=4)
    ap.add_argument("--layers", type=int, default=80)
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--ffn", type=int, default=28672)
    ap.add_argument("--heads", type=int, default=64)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp32"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shape", default="llama", choices=("llama", "dsv3"))
    ap.add_argument("--ep", type=int, default=8)
    for n, v in (("dense", 3), ("experts", 256), ("shared", 1), ("moe-ffn", 2048), ("q-lora", 1536),
                 ("kv-lora", 512), ("qk-head", 128), ("qk-rope", 64), ("v-head", 128)):
        ap.add_argument("--dsv3-" + n, dest=n.replace("-", "_"), type=int, default=v)
    a = ap.parse_args()
    if a.shape == "dsv3":
        for n, v in (("tp", 1), ("layers", 61), ("hidden", 7168), ("ffn", 18432), ("heads", 128),
                     ("vocab", 129280)):
            if getattr(a, n) == ap.get_default(n):
                setattr(a, n, v)
        assert a.tp == 1 and a.experts % a.ep == 0 and a.pp <= a.layers and a.dense < a.layers
    else:
        assert a.layers % a.pp == 0 and a.groups % a.tp == 0 and a.ffn % a.tp == 0
    assert a.format == "torch_dist" or a.shape == "llama", "--format legacy: Llama shape only"
    rnd = random.Random(a.seed)
    params, vpad = keys_dsv3(a) if a.shape == "dsv3" else keys(a)
    args = argparse.Namespace(
        num_layers=a.layers, hidden_size=a.hidden, ffn_hidden_size=a.ffn,
        num_attention_heads=a.heads, group_query_attention=True, num_query_groups=a.groups,
        kv_channels=a.hidden // a.heads, vocab_size=a.vocab, padded_vocab_size=vpad,
        max_position_embeddings=8192, norm_epsilon=1e-5, rotary_base=500000,
        position_embedding_type="rope", normalization="RMSNorm", swiglu=True,
        untie_embeddings_and_output_weights=True, add_bias_linear=False, add_qkv_bias=False,
        tensor_model_parallel_size=a.tp, pipeline_model_parallel_size=a.pp,
        expert_model_parallel_size=1, bf16=a.dtype == "bf16")
    if a.shape == "dsv3":
        vars(args).update(
            group_query_attention=False, num_query_groups=a.heads, kv_channels=a.v_head,
            norm_epsilon=1e-6, rotary_base=10000, expert_model_parallel_size=a.ep,
            multi_latent_attention=True, qk_layernorm=True, rope_type="rope", q_lora_rank=a.q_lora,
            kv_lora_rank=a.kv_lora, qk_head_dim=a.qk_head, qk_pos_emb_head_dim=a.qk_rope,
            v_head_dim=a.v_head, num_experts=a.experts, moe_router_topk=8,
            moe_ffn_hidden_size=a.moe_ffn, moe_shared_expert_intermediate_size=a.moe_ffn * a.shared,
            moe_layer_freq=[0] * a.dense + [1] * (a.layers - a.dense),
            moe_router_score_function="sigmoid", moe_router_enable_expert_bias=True,
            moe_router_topk_scaling_factor=2.5, moe_router_num_groups=8, moe_router_group_topk=4)
    if a.format == "legacy":
        vars(args).update(ckpt_format="torch", transformer_impl="local", data_parallel_size=1,
                          world_size=a.tp * a.pp,
                          params_dtype=torch.bfloat16 if a.dtype == "bf16" else torch.float32)
        write_legacy(a, vpad, args, rnd)
    else:
        write_torch_dist(a, params, args, rnd)
    with open(os.path.join(a.out, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("1")
    open(os.path.join(a.out, ".gen-done"), "w").close()


if __name__ == "__main__":
    main()
