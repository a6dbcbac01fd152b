#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A mounted Megatron model-family checkpoint against its reference conversion.

Usage: check_family_ref.py MNT CASE_DIR

CASE_DIR/hf_ref holds the reference conversion of the run's truth
(model.safetensors and config.json written by transformers 5.12's
save_pretrained, tests/data/megatron-families/README.md) and keys.txt (the
Hugging Face model's state_dict order, experts one by one).  MNT's
pytorch_model.bin and model.safetensors must hold exactly those tensors,
bit for bit (dtype, shape, bytes), pytorch_model.bin in keys.txt's order;
MNT/config.json must give every field transformers reads for the class as
the reference does (when generated, rope theta both in rope_parameters and
at the top level).
"""
import json
import os
import struct
import sys

import torch

mnt, case = sys.argv[1:3]
ref_dir = os.path.join(case, "hf_ref")
ST = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    out = {}
    for k, h in head.items():
        b, e = h["data_offsets"]
        out[k] = (h["dtype"], h["shape"], raw[8 + n + b:8 + n + e])
    return out


def raw(v):
    return v.contiguous().view(torch.uint8).numpy().tobytes()


ref = safetensors(os.path.join(ref_dir, "model.safetensors"))
order = open(os.path.join(ref_dir, "keys.txt")).read().split()
assert sorted(order) == sorted(ref), "keys.txt and the reference disagree"

got = torch.load(os.path.join(mnt, "pytorch_model.bin"))
assert list(got) == order, ("key order", [k for k in got if k not in ref][:5],
                            [k for k in order if k not in got][:5],
                            next(((a, b) for a, b in zip(got, order) if a != b), None))
for k, (dt, shape, data) in ref.items():
    g = got[k]
    assert g.dtype == ST[dt] and list(g.shape) == shape, (k, g.dtype, dt, list(g.shape), shape)
    assert raw(g) == data, ("bytes", k)
st = safetensors(os.path.join(mnt, "model.safetensors"))
assert sorted(st) == sorted(ref), "safetensors keys"
for k, v in ref.items():
    assert st[k] == v, ("safetensors", k)

cfg = json.load(open(os.path.join(mnt, "config.json")))
want = json.load(open(os.path.join(ref_dir, "config.json")))
# what save_pretrained adds that the model does not depend on, or derives
skip = {"transformers_version", "initializer_range", "bos_token_id", "eos_token_id", "pad_token_id",
        "layer_types", "router_aux_loss_coef", "pretraining_tp", "use_cache", "qk_head_dim",
        "max_window_layers", "sliding_window"}
if want["model_type"] == "deepseek_v3":
    skip.add("head_dim")  # qk_rope_head_dim, derived
for k, v in want.items():
    if k in skip:
        continue
    got_v = cfg.get(k)
    if k == "num_local_experts" and want["model_type"] == "qwen3_moe":
        got_v = cfg.get(k, cfg.get("num_experts"))  # the 4.x name, which 5.x maps
    assert got_v == v, ("config.json", k, got_v, v)
if open(os.path.join(mnt, "config.json"), "rb").read() != open(os.path.join(ref_dir, "config.json"), "rb").read():
    # generated (not -o hf_config's, served as it is): 4.x and vLLM read the top-level theta
    assert cfg["rope_theta"] == want["rope_parameters"]["rope_theta"], "top-level rope_theta"
print("ok: hf view of %s: %d tensors bit-exact, in order; config.json agrees"
      % (os.path.basename(case.rstrip("/")), len(ref)))
