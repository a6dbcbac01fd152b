#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A mounted Megatron checkpoint's view against the run's own truth.

Usage: check_megatron_views.py hf|dist MNT CASE_DIR
       check_megatron_views.py hfcat FILE CASE_DIR NAME

CASE_DIR holds model_args.json and truth_megatron.pt (every shard gathered
by Megatron-Core: the torch_dist keys, layers stacked on axis 0, experts on
axis 1, padded vocabulary), or truth_megatron_modules.pt (the same tensors
under the model's module names), which is stacked here into the former
(norms under their TransformerEngine keys, as Megatron-Core's keys map
says).
  hf:   MNT's pytorch_model.bin and model.safetensors equal the truth
        re-arranged into Hugging Face names here (the QKV rows split per
        query group, fc1 into gate and up, the vocabulary trimmed, one
        tensor per layer and expert), key order included; MNT/config.json
        says the model's numbers.
  dist: the torch_dist Megatron view: the truth's keys with the layer axis
        split off (decoder.layers.L.*) and the expert axis
        (decoder.layers.L.mlp.experts.local_experts.E.*).
  hfcat: FILE holds the bytes of Hugging Face tensor NAME (as
        gatherfs-inspect cat writes them); prints the number of tensors of
        the Hugging Face view.
Bit for bit: dtype, shape and bytes.
"""
import json
import os
import struct
import sys

import torch

mode, mnt, case = sys.argv[1:4]
a = json.load(open(os.path.join(case, "model_args.json")))
L = a["num_layers"]
STACK = "decoder.layers."
EXP = "mlp.experts.experts."


def stacked(mods):
    keys_map = a.get("sharded_state_dict_keys_map", {})
    groups = {}
    for k, v in mods.items():
        if not k.startswith(STACK):
            groups[k] = v
            continue
        layer, rest = k[len(STACK):].split(".", 1)
        for old, new in keys_map.items():
            if rest.startswith(old):
                rest = new + rest[len(old):]
        expert = None
        if rest.startswith("mlp.experts.local_experts."):
            expert, rest = rest[len("mlp.experts.local_experts."):].split(".", 1)
            rest = EXP + rest
        groups.setdefault(STACK + rest, {})[(int(layer), -1 if expert is None else int(expert))] = v
    out = {}
    for k, v in groups.items():
        if not isinstance(v, dict):
            out[k] = v
            continue
        nl = 1 + max(i for i, _ in v)
        ne = 1 + max(e for _, e in v)
        if ne == 0:
            out[k] = torch.stack([v[(i, -1)] for i in range(nl)])
        else:
            out[k] = torch.stack([torch.stack([v[(i, e)] for e in range(ne)]) for i in range(nl)])
    return out


if os.path.exists(os.path.join(case, "truth_megatron.pt")):
    truth = torch.load(os.path.join(case, "truth_megatron.pt"))
else:
    truth = stacked(torch.load(os.path.join(case, "truth_megatron_modules.pt")))


def dist_view(t):
    out = {}
    for k, v in t.items():
        if not k.startswith(STACK):
            out[k] = v
            continue
        rest = k[len(STACK):]
        for i in range(v.shape[0]):
            if rest.startswith(EXP):
                for e in range(v.shape[1]):
                    out["%s%d.mlp.experts.local_experts.%d.%s" % (STACK, i, e, rest[len(EXP):])] = v[i, e]
            else:
                out["%s%d.%s" % (STACK, i, rest)] = v[i]
    return out


def hf_view(t):
    NH, NG, KV, V = a["num_attention_heads"], a["num_query_groups"], a["kv_channels"], a["vocab_size"]
    per = NH // NG
    moe = a.get("num_moe_experts")
    tied = bool(a["share_embeddings_and_output_weights"])
    sd = {"model.embed_tokens.weight": t["embedding.word_embeddings.weight"][:V]}
    post = t.get("decoder.layers.mlp.linear_fc1.layer_norm_weight",
                 t.get("decoder.layers.pre_mlp_layernorm.weight"))
    for i in range(L):
        p = "model.layers.%d." % i
        sd[p + "input_layernorm.weight"] = t["decoder.layers.self_attention.linear_qkv.layer_norm_weight"][i]
        g = t["decoder.layers.self_attention.linear_qkv.weight"][i].reshape(NG, (per + 2) * KV, -1)
        names = ["q_proj", "k_proj", "v_proj"]
        parts = [g[:, :per * KV], g[:, per * KV:(per + 1) * KV], g[:, (per + 1) * KV:]]
        bias = t.get("decoder.layers.self_attention.linear_qkv.bias")
        for n, w in zip(names, parts):
            sd[p + "self_attn.%s.weight" % n] = w.reshape(-1, w.shape[-1])
            if bias is not None:
                gb = bias[i].reshape(NG, (per + 2) * KV)
                b = {"q_proj": gb[:, :per * KV], "k_proj": gb[:, per * KV:(per + 1) * KV],
                     "v_proj": gb[:, (per + 1) * KV:]}[n]
                sd[p + "self_attn.%s.bias" % n] = b.reshape(-1)
        sd[p + "self_attn.o_proj.weight"] = t["decoder.layers.self_attention.linear_proj.weight"][i]
        sd[p + "post_attention_layernorm.weight"] = post[i]
        if moe:
            sd[p + "block_sparse_moe.gate.weight"] = t["decoder.layers.mlp.router.weight"][i]
            fc1 = t["decoder.layers.mlp.experts.experts.linear_fc1.weight"][i]
            fc2 = t["decoder.layers.mlp.experts.experts.linear_fc2.weight"][i]
            F = fc1.shape[1] // 2
            for e in range(moe):
                q = p + "block_sparse_moe.experts.%d." % e
                sd[q + "w1.weight"] = fc1[e][:F]
                sd[q + "w2.weight"] = fc2[e]
                sd[q + "w3.weight"] = fc1[e][F:]
        else:
            fc1 = t["decoder.layers.mlp.linear_fc1.weight"][i]
            F = fc1.shape[0] // 2
            sd[p + "mlp.gate_proj.weight"] = fc1[:F]
            sd[p + "mlp.up_proj.weight"] = fc1[F:]
            sd[p + "mlp.down_proj.weight"] = t["decoder.layers.mlp.linear_fc2.weight"][i]
    sd["model.norm.weight"] = t["decoder.final_layernorm.weight"]
    if not tied:
        sd["lm_head.weight"] = t["output_layer.weight"][:V]
    return sd


def raw(v):
    v = v.contiguous()
    return v.view(torch.uint8).numpy().tobytes() if v.dtype == torch.bfloat16 else v.numpy().tobytes()


if mode == "hfcat":
    hf = hf_view(truth)
    assert open(mnt, "rb").read() == raw(hf[sys.argv[4]]), (mnt, "is not", sys.argv[4])
    print(len(hf))
    sys.exit(0)

want = hf_view(truth) if mode == "hf" else dist_view(truth)
ST = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}

got = torch.load(os.path.join(mnt, "pytorch_model.bin"))
# the torch_dist Megatron view keeps the checkpoint's key order (its
# .metadata's), which is neither the module order of a truth stacked here
# nor, for Megatron-LM's save_checkpoint, the order of truth_megatron.pt
order = list if mode == "hf" else sorted
assert order(got) == order(want), ("keys or order", [k for k in got if k not in want][:5],
                                 [k for k in want if k not in got][:5])
for k, v in want.items():
    g = got[k]
    assert g.dtype == v.dtype and g.shape == v.shape, (k, g.dtype, v.dtype, g.shape, v.shape)
    assert raw(g) == raw(v), k

data = open(os.path.join(mnt, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", data[:8])[0]
head = json.loads(data[8:8 + n])
head.pop("__metadata__", None)
assert sorted(head) == sorted(want), "safetensors keys"
for k, v in want.items():
    h = head[k]
    b, e = h["data_offsets"]
    assert h["dtype"] == ST[v.dtype] and h["shape"] == list(v.shape), k
    assert data[8 + n + b:8 + n + e] == raw(v), k

if mode == "hf":
    cfg = json.load(open(os.path.join(mnt, "config.json")))
    moe = a.get("num_moe_experts")
    expect = {
        "num_hidden_layers": L, "hidden_size": a["hidden_size"],
        "num_attention_heads": a["num_attention_heads"],
        "num_key_value_heads": a["num_query_groups"], "head_dim": a["kv_channels"],
        "vocab_size": a["vocab_size"], "rms_norm_eps": a["layernorm_epsilon"],
        "rope_theta": float(a["rotary_base"]),
        "tie_word_embeddings": bool(a["share_embeddings_and_output_weights"]),
        "intermediate_size": a["moe_ffn_hidden_size"] if moe else a["ffn_hidden_size"],
        "model_type": "mixtral" if moe else "qwen2" if a.get("add_qkv_bias") else "llama",
    }
    if moe:
        expect.update(num_local_experts=moe, num_experts_per_tok=a["moe_router_topk"])
    cfg.setdefault("rope_theta", cfg.get("rope_parameters", {}).get("rope_theta"))
    for k, v in expect.items():
        assert cfg.get(k) == v, ("config.json", k, cfg.get(k), v)
print("ok: %s view of %s: %d tensors bit-exact" % (mode, os.path.basename(case.rstrip("/")), len(want)))
