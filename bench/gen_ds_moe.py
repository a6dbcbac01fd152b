#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Write a DeepSpeed 0.14 mixture-of-experts ZeRO-2 checkpoint in the expert-file layout.

Usage:
  gen_ds_moe.py OUT [--ws N] [--ep E] [--layers L] [--experts X] [--hidden H]
                    [--ffn F] [--vocab V] [--kv-heads K] [--sparse] [--tag TAG]

OUT receives what DeepSpeedEngine.save_checkpoint (0.14.5) writes for a model
with deepspeed.moe.layer.MoE blocks at expert-parallel size E over N ranks,
ZeRO-2, fp32 (the layout of tests/data/ds3d/moe_ep2_dp2_z2_fp32, a real run;
docs/deepspeed-3d.md), in TAG/:
  mp_rank_00_model_states.pt      `module` (the dense entries, views into
                                  the dense flat), num_experts, no param_shapes
  layer_M_expert_X_mp_rank_00_model_states.pt
                                  expert X (global id) of MoE layer M, keyed
                                  by its global name
  expp_rank_R_mp_rank_00_optim_states.pt
                                  {'optimizer': None} stubs
  zero_pp_rank_R_mp_rank_00_optim_states.pt
                                  two param groups: 'dense-params' partitioned
                                  over the N ranks, 'ep_size_E' (moe: True):
                                  expert-parallel rank e = R % E holds experts
                                  e*X/E .. (e+1)*X/E - 1 of every layer, its
                                  group partitioned over ranks e, e+E, ...;
                                  param_slice_mappings name experts by their
                                  local index, as DeepSpeed's do.
The model: embed_tokens, L blocks of input_layernorm, q/k/v/o (GQA, head
dim 128), post_attention_layernorm, gate.wg (X x H) and X experts of
gate/up/down weights and biases (6 tensors each), norm, lm_head; the
DeepSeek-V3-like row of bench/scale is --layers 58 --experts 256 --hidden
7168 --ffn 2048 --ws 8 --ep 8.  --sparse writes every payload as a hole
(bench/sparse_zip.py): seconds and a little disk at any size.  Values are
random otherwise.  Writes OUT/.gen-done last.  Deepspeed is not imported:
its pickled globals come from gen_deepspeed.py's stand-ins.
"""
import argparse
import collections
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_deepspeed as gd  # noqa: E402
import sparse_zip  # noqa: E402

EXPERT_PARAMS = (("gate_proj", "ffn", "h"), ("up_proj", "ffn", "h"), ("down_proj", "h", "ffn"))


def dense_shapes(a):
    """The dense entries in the module's order, (name, shape), and where MoE layer m's gate is."""
    h, hd = a.hidden, 128 if a.hidden % 128 == 0 else a.hidden // 4
    kv = min(a.kv_heads, h // hd) * hd
    out = [("embed_tokens.weight", (a.vocab, h))]
    for i in range(a.layers):
        p = f"layers.{i}."
        out += [(p + "input_layernorm.weight", (h,)),
                (p + "self_attn.q_proj.weight", (h, h)), (p + "self_attn.k_proj.weight", (kv, h)),
                (p + "self_attn.v_proj.weight", (kv, h)), (p + "self_attn.o_proj.weight", (h, h)),
                (p + "post_attention_layernorm.weight", (h,)),
                (p + "mlp.deepspeed_moe.gate.wg.weight", (a.experts, h))]
    out += [("norm.weight", (h,)), ("lm_head.weight", (a.vocab, h))]
    return out


def expert_shapes(a, layer, x):
    """Expert x of block `layer`: (name, shape) of its 6 tensors, in the file's order."""
    dim = {"h": a.hidden, "ffn": a.ffn}
    p = f"layers.{layer}.mlp.deepspeed_moe.experts.deepspeed_experts.{x}."
    out = []
    for n, rows, cols in EXPERT_PARAMS:
        out += [(p + n + ".weight", (dim[rows], dim[cols])), (p + n + ".bias", (dim[rows],))]
    return out


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def zero2_partition(flat_numel, dp):
    """ZeRO-2: the group padded to a multiple of 2 * dp, cut in dp partitions: (size, padding)."""
    padded = gd.ceil_div(flat_numel, 2 * dp) * 2 * dp
    return padded // dp, padded - flat_numel


def values(n, a):
    """n fp32 values: random, or (--sparse) a hole."""
    return sparse_zip.empty_hole(n) if a.sparse else torch.randn(n) * 0.02


def slice_map(entries, r, ps):
    """param_slice_mappings of partition r (size ps) of a group laid out as entries (name, numel)."""
    m, o = collections.OrderedDict(), 0
    for n, k in entries:
        lo, hi = max(o, r * ps), min(o + k, (r + 1) * ps)
        if lo < hi:
            m[n] = gd.fragment_address(hi - lo, lo - r * ps)
        o += k
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--ws", type=int, default=8)
    ap.add_argument("--ep", type=int, default=8)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--sparse", action="store_true", help="payloads as holes (sparse files)")
    ap.add_argument("--tag", default="global_step3")
    a = ap.parse_args()
    if a.ws % a.ep or a.experts % a.ep:
        ap.error("--ep must divide --ws and --experts")
    torch.manual_seed(0)
    save = sparse_zip.sparse_save if a.sparse else torch.save
    tagdir = os.path.join(a.out, a.tag)
    os.makedirs(tagdir, exist_ok=True)
    cfg = gd.ds_config(argparse.Namespace(stage=2, dtype="fp32"))
    cfg["moe"] = {"enabled": True, "ep_size": a.ep}
    groups_cfg = [{"weight_decay": 0.1}, {"weight_decay": 0.1}]
    adam = gd.adam_groups(groups_cfg, cfg)
    adam[0] = {"name": "dense-params", **adam[0]}
    adam[1] = {"name": f"ep_size_{a.ep}", "moe": True, **adam[1]}

    # the dense flat (fp32 masters; the module's entries are views into it)
    dense = dense_shapes(a)
    dn = sum(numel(s) for _, s in dense)
    dps, dpad = zero2_partition(dn, a.ws)
    dflat = values(dps * a.ws, a)
    module, o = collections.OrderedDict(), 0
    for n, s in dense:
        module[n] = dflat[o:o + numel(s)].view(s)
        o += numel(s)
    module._metadata = collections.OrderedDict()
    save({"module": module, "lr_scheduler": None, "data_sampler": None, "random_ltd": None,
          "sparse_tensor_module_names": set(), "skipped_steps": 0, "global_steps": 3,
          "global_samples": 3 * 2 * a.ws, "dp_world_size": a.ws, "mp_world_size": 1,
          "num_experts": [a.experts] * a.layers},
         os.path.join(tagdir, "mp_rank_00_model_states.pt"))
    sparse_zip.forget_holes()

    # each expert-parallel rank's expert flat: its experts, layer by layer
    per = a.experts // a.ep
    edp = a.ws // a.ep
    eflat, eentries = [], []
    for e in range(a.ep):
        entries, chunks = [], []
        for m in range(a.layers):
            for x in range(e * per, (e + 1) * per):
                tensors = collections.OrderedDict()
                for (gn, s), (ln, _) in zip(expert_shapes(a, m, x), expert_shapes(a, m, x - e * per)):
                    t = values(numel(s), a)
                    chunks.append(t)
                    tensors[gn] = t.view(s)
                    entries.append((ln, numel(s)))
                save(tensors, os.path.join(tagdir, f"layer_{m}_expert_{x}_mp_rank_00_model_states.pt"))
                if a.sparse:
                    sparse_zip.forget_holes()
        en = sum(k for _, k in entries)
        eps, epad = zero2_partition(en, edp)
        eflat.append((None if a.sparse else torch.cat(chunks + [torch.zeros(eps * edp - en)]),
                      eps, epad))
        eentries.append(entries)
    for r in range(a.ep):
        save({"optimizer": None}, os.path.join(tagdir, f"expp_rank_{r}_mp_rank_00_optim_states.pt"))

    for r in range(a.ws):
        e, er = r % a.ep, r // a.ep
        ef, eps, epad = eflat[e]
        dpart = values(dps, a) if a.sparse else dflat[r * dps:(r + 1) * dps].clone()
        epart = values(eps, a) if a.sparse else ef[er * eps:(er + 1) * eps].clone()
        # DeepSpeed saves the last partition of a group without its padding: a view
        parts = [dpart[:dps - dpad] if r == a.ws - 1 else dpart,
                 epart[:eps - epad] if er == edp - 1 else epart]
        parts = [p.requires_grad_(True) for p in parts]
        osd = {"loss_scaler": gd.LossScaler(), "dynamic_loss_scale": False, "overflow": False,
               "clip_grad": 1.0,
               "base_optimizer_state": {"state": gd.adam_state([p.storage().size() for p in parts],
                                                               a.sparse),
                                        "param_groups": adam},
               "single_partition_of_fp32_groups": parts,
               "zero_stage": gd.ZeroStageEnum(gd.STAGE_NAME[2]),
               "group_paddings": [dpad if r == a.ws - 1 else 0, epad if er == edp - 1 else 0],
               "partition_count": [a.ws, edp], "ds_version": gd.DS_VERSION,
               "param_slice_mappings": [slice_map([(n, numel(s)) for n, s in dense], r, dps),
                                        slice_map(eentries[e], er, eps)]}
        save({"optimizer_state_dict": osd, "ds_config": cfg, "ds_version": gd.DS_VERSION},
             os.path.join(tagdir, f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt"))
        sparse_zip.forget_holes()
    gd.finish(a.out, a.tag)


if __name__ == "__main__":
    main()
