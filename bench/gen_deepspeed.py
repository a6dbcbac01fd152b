#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Write a DeepSpeed 0.14-layout ZeRO-2 or ZeRO-3 checkpoint of any size.

Usage:
  gen_deepspeed.py OUT [--stage 2|3] [--ws N] [--dtype fp32|bf16]
                       [--arch gpt|llama|moe] [--layers L] [--hidden H]
                       [--vocab V] [--ffn F] [--kv-heads K] [--experts E]
                       [--tiny] [--sparse] [--tag TAG] [--seed S]

OUT receives exactly what DeepSpeedEngine.save_checkpoint (0.14.5, torch
1.13, CPU/gloo) writes: `latest` and TAG/ with
  stage 3: zero_pp_rank_R_mp_rank_00_model_states.pt (every rank) and
           [bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt
  stage 2: mp_rank_00_model_states.pt and
           [bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt
with the same pickle structure as the real files (tests/data/ckpt, dumps in
docs/format-dumps): dict keys in DeepSpeed's order, OrderedDicts with the
module's _metadata, torch.Size shapes, and the DeepSpeed globals
(ZeroStageEnum via getattr, LossScaler, fragment_address) referenced by the
same module/name, produced by stand-in classes registered under fake
`deepspeed.*` modules (deepspeed itself is not imported).

Partitioning follows DeepSpeed: stage 3 pads every trainable parameter to
ceil(numel / ws) per rank and concatenates the per-param partitions of a
param group (one sub-group per group: sub_group_size 1e9); frozen params
become ceil(numel / ws) fragments on every rank.  Stage 2 concatenates a
group, pads it to a multiple of 2 * ws and cuts it into ws equal partitions;
the module holds views into the 16/32-bit flat group.

The model is tiny_model.TinyLM (--tiny: the configuration of the real
fixtures; needs tests/data/ckpt on sys.path) or, with --arch:
  gpt    embed (V x H), learned positions (frozen), L blocks of
         ln1/qkv/proj/ln2/fc1/fc2, norm, lm_head tied to embed, an int64 and
         a float persistent buffer (the default);
  llama  embed, L blocks of input_layernorm, q/k/v/o (GQA: --kv-heads, head
         dim 128), post_attention_layernorm, gate/up/down (--ffn), norm,
         untied lm_head: 9 tensors a block (Llama-70B: --layers 80 --hidden
         8192 --ffn 28672 --kv-heads 8 --vocab 128256);
  moe    the llama block with the MLP replaced by a router (E x H) and E
         experts of gate/up/down weights and biases: 6E + 6 tensors a block
         (DeepSeek-V3-like: --layers 58 --experts 256 --hidden 7168
         --ffn 2048, about 90k tensors).
Values are random; padding is zero.  Writes OUT/.gen-done last.

--sparse writes the same files with every tensor payload as a hole (a
sparse file that reads as zeros; bench/sparse_zip.py): the pickles and zip
structure are unchanged, the records' CRC-32s are those of the zeros, and
no payload is ever held in memory, so a 70B-parameter checkpoint at 1,024
ranks takes seconds and a little disk (the pickles).  Frozen params and
buffers keep their small real values.
"""
import argparse
import collections
import math
import os
import sys
import types
import zipfile

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sparse_zip  # noqa: E402

DS_VERSION = "0.14.5"


# ------------------------------------------------------ deepspeed stand-ins
def _fake_module(name):
    mod = sys.modules.get(name)
    if mod is None:
        mod = types.ModuleType(name)
        sys.modules[name] = mod
        parent, _, leaf = name.rpartition(".")
        if parent:
            setattr(_fake_module(parent), leaf, mod)
    return mod


def _register(cls, module):
    cls.__module__ = module
    cls.__qualname__ = cls.__name__
    setattr(_fake_module(module), cls.__name__, cls)
    return cls


class ZeroStageEnum:
    """deepspeed.runtime.zero.config.ZeroStageEnum: pickled by name."""

    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        return (getattr, (ZeroStageEnum, self.name))


class LossScaler:
    """deepspeed.runtime.fp16.loss_scaler.LossScaler (static scale 1)."""

    def __init__(self):
        self.cur_scale = 1.0
        self.dynamic = False


class fragment_address:  # noqa: N801 (DeepSpeed's name)
    """deepspeed.utils.tensor_fragment.fragment_address."""

    def __init__(self, numel, start):
        self.numel = numel
        self.start = start


_register(ZeroStageEnum, "deepspeed.runtime.zero.config")
_register(LossScaler, "deepspeed.runtime.fp16.loss_scaler")
_register(fragment_address, "deepspeed.utils.tensor_fragment")
STAGE_NAME = {1: "optimizer_states", 2: "gradients", 3: "weights"}


# ------------------------------------------------------------------ models
class Block(nn.Module):

    def __init__(self, h, ffn, dev):
        super().__init__()
        self.ln1 = nn.LayerNorm(h, device=dev)
        self.qkv = nn.Linear(h, 3 * h, device=dev)
        self.proj = nn.Linear(h, h, device=dev)
        self.ln2 = nn.LayerNorm(h, device=dev)
        self.fc1 = nn.Linear(h, ffn, device=dev)
        self.fc2 = nn.Linear(ffn, h, device=dev)


class GPT(nn.Module):

    def __init__(self, vocab, hidden, layers, maxpos=256, dev="meta"):
        """Parameters on the meta device: only names, shapes and identity are used."""
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden, device=dev)
        self.pos = nn.Embedding(maxpos, hidden, device=dev)
        self.pos.weight.requires_grad_(False)  # frozen
        self.layers = nn.ModuleList([Block(hidden, 4 * hidden, dev) for _ in range(layers)])
        self.norm = nn.LayerNorm(hidden, device=dev)
        self.lm_head = nn.Linear(hidden, vocab, bias=False, device=dev)
        self.lm_head.weight = self.embed.weight  # tied
        self.register_buffer("position_ids", torch.arange(maxpos, dtype=torch.int64, device=dev))
        self.register_buffer("rope_like", torch.empty(hidden // 2, device=dev))


class LlamaBlock(nn.Module):

    def __init__(self, h, ffn, kv_heads, experts, dev):
        super().__init__()
        hd = 128 if h % 128 == 0 else h // 4
        kv = min(kv_heads, h // hd) * hd
        self.input_layernorm = RMSNorm(h, dev)
        self.q_proj = nn.Linear(h, h, bias=False, device=dev)
        self.k_proj = nn.Linear(h, kv, bias=False, device=dev)
        self.v_proj = nn.Linear(h, kv, bias=False, device=dev)
        self.o_proj = nn.Linear(h, h, bias=False, device=dev)
        self.post_attention_layernorm = RMSNorm(h, dev)
        if experts:
            self.router = nn.Linear(h, experts, bias=False, device=dev)
            self.experts = nn.ModuleList([Expert(h, ffn, dev) for _ in range(experts)])
        else:
            self.gate_proj = nn.Linear(h, ffn, bias=False, device=dev)
            self.up_proj = nn.Linear(h, ffn, bias=False, device=dev)
            self.down_proj = nn.Linear(ffn, h, bias=False, device=dev)


class RMSNorm(nn.Module):

    def __init__(self, h, dev):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(h, device=dev))


class Expert(nn.Module):

    def __init__(self, h, ffn, dev):
        super().__init__()
        self.gate_proj = nn.Linear(h, ffn, device=dev)
        self.up_proj = nn.Linear(h, ffn, device=dev)
        self.down_proj = nn.Linear(ffn, h, device=dev)


class Llama(nn.Module):

    def __init__(self, vocab, hidden, layers, ffn, kv_heads, experts, dev="meta"):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden, device=dev)
        self.layers = nn.ModuleList([LlamaBlock(hidden, ffn, kv_heads, experts, dev)
                                     for _ in range(layers)])
        self.norm = RMSNorm(hidden, dev)
        self.lm_head = nn.Linear(hidden, vocab, bias=False, device=dev)


def param_groups(model):
    """tiny_model.param_groups: decay (dim >= 2) / no-decay, trainable only."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]


def build_model(a):
    if a.tiny:
        sys.path.insert(0, a.tiny_dir)
        import tiny_model  # noqa: E402
        return tiny_model.TinyLM(), tiny_model.param_groups
    if a.arch == "gpt":
        return GPT(a.vocab, a.hidden, a.layers), param_groups
    experts = a.experts if a.arch == "moe" else 0
    return Llama(a.vocab, a.hidden, a.layers, a.ffn or 4 * a.hidden, a.kv_heads, experts), \
        param_groups


# ---------------------------------------------------------------- writing
def ds_config(a):
    zero = {"stage": a.stage}
    if a.stage == 3:
        zero = {"stage": 3, "stage3_param_persistence_threshold": 100, "sub_group_size": 1000000000}
    cfg = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "steps_per_print": 1000,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "betas": [0.9, 0.95], "eps": 1e-08,
                                                   "weight_decay": 0.1}},
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,
        "wall_clock_breakdown": False,
    }
    if a.dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    return cfg


def adam_groups(groups, cfg):
    out = []
    betas = cfg["optimizer"]["params"]["betas"]  # the config's list, shared by all groups
    for i, g in enumerate(groups):
        out.append({"weight_decay": g["weight_decay"], "lr": 0.01, "betas": betas, "eps": 1e-08,
                    "amsgrad": False, "foreach": None, "maximize": False, "capturable": False,
                    "params": [i]})
    return out


def adam_state(sizes, sparse):
    """Adam moments of partitions of the given numels: small random values (holes if sparse)."""
    st = {}
    for i, n in enumerate(sizes):
        if sparse:
            st[i] = {"step": torch.tensor(3.0), "exp_avg": sparse_zip.empty_hole(n),
                     "exp_avg_sq": sparse_zip.empty_hole(n)}
        else:
            st[i] = {"step": torch.tensor(3.0), "exp_avg": torch.randn(n) * 1e-3,
                     "exp_avg_sq": torch.rand(n) * 1e-6}
    return st


def finish(out, tag):
    """DeepSpeed's `latest` (naming tag), then OUT/.gen-done: the checkpoint is complete."""
    with open(os.path.join(out, "latest"), "w") as f:
        f.write(tag)
    open(os.path.join(out, ".gen-done"), "w").close()


def ceil_div(a, b):
    return -(-a // b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--stage", type=int, default=3, choices=(2, 3))
    ap.add_argument("--ws", type=int, default=4)
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--arch", default="gpt", choices=("gpt", "llama", "moe"))
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--ffn", type=int, default=0, help="llama/moe MLP width (default 4 x hidden)")
    ap.add_argument("--kv-heads", type=int, default=8, help="llama/moe key/value heads")
    ap.add_argument("--experts", type=int, default=8, help="moe experts a block")
    ap.add_argument("--sparse", action="store_true", help="payloads as holes (sparse files)")
    ap.add_argument("--tiny", action="store_true", help="tests/data/ckpt/tiny_model.py's TinyLM")
    ap.add_argument("--tiny-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                       "..", "tests", "data", "ckpt"))
    ap.add_argument("--tag", default="global_step3")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    ws, cdt = a.ws, (torch.bfloat16 if a.dtype == "bf16" else torch.float32)
    steps = int("".join(c for c in a.tag if c.isdigit()) or "3")

    model, make_groups = build_model(a)
    names = {id(p): n for n, p in model.named_parameters()}  # de-duplicated: first name wins
    sd_keys = list(model.state_dict(keep_vars=True).keys())
    meta = model.state_dict()._metadata
    groups = make_groups(model)
    frozen = [(n, p) for n, p in model.named_parameters() if not p.requires_grad]
    buffer_names = [n for n, _ in model.named_buffers()
                    if n.rpartition(".")[2] not in getattr(model, "_non_persistent_buffers_set", set())
                    and n in sd_keys]
    sdv = model.state_dict(keep_vars=True)
    shared = {}
    for n in sd_keys:
        p = sdv[n]
        if isinstance(p, nn.Parameter) and names.get(id(p)) not in (None, n):
            shared[n] = names[id(p)]

    # fp32 master values of every trainable param, frozen values, buffers.
    master = {}
    for g in groups if not a.sparse else ():
        for p in g["params"]:
            master[names[id(p)]] = torch.randn(p.numel()) * 0.02
    fvals = {n: (torch.randn(p.shape) * 0.02).to(cdt) for n, p in frozen}
    save = sparse_zip.sparse_save if a.sparse else torch.save
    bufs = {}
    for n in buffer_names:
        b = sdv[n]
        if b.dtype == torch.int64:
            bufs[n] = torch.arange(b.numel(), dtype=torch.int64).reshape(b.shape)
        else:
            bufs[n] = torch.rand(b.shape).to(cdt if b.is_floating_point() else b.dtype)
    param_shapes = [collections.OrderedDict((names[id(p)], p.shape) for p in g["params"])
                    for g in groups]
    frozen_shapes = collections.OrderedDict((n, p.shape) for n, p in frozen)
    cfg = ds_config(a)

    tagdir = os.path.join(a.out, a.tag)
    os.makedirs(tagdir, exist_ok=True)
    pre = "bf16_" if a.dtype == "bf16" else ""

    def model_states(module, fragments, shared_params):
        return {
            "module": module, "buffer_names": buffer_names, "optimizer": None,
            "param_shapes": param_shapes, "frozen_param_shapes": frozen_shapes,
            "shared_params": shared_params, "frozen_param_fragments": fragments,
            "lr_scheduler": None, "data_sampler": None, "random_ltd": None,
            "sparse_tensor_module_names": set(), "skipped_steps": 0, "global_steps": steps,
            "global_samples": steps * 2 * ws, "dp_world_size": ws, "mp_world_size": 1,
            "ds_config": cfg, "ds_version": DS_VERSION}

    def module_dict(value_of):
        od = collections.OrderedDict()
        seen = {}
        for n in sd_keys:
            p = sdv[n]
            key = names.get(id(p), n)
            if key not in seen:
                seen[key] = value_of(key)
                od[n] = seen[key]
            else:  # a tied alias: its own tensor object over the same storage
                od[n] = seen[key].view(seen[key].shape)
        od._metadata = meta
        return od

    if a.stage == 3:
        twins, nrecords = {}, {}  # model states files to copy, by digits of the rank
        for r in range(ws):
            parts = []
            for g in groups:
                if a.sparse:
                    n = sum(ceil_div(p.numel(), ws) for p in g["params"])
                    parts.append(sparse_zip.empty_hole(n).requires_grad_(True))
                    continue
                chunks = []
                for p in g["params"]:
                    v = master[names[id(p)]]
                    ps = ceil_div(v.numel(), ws)
                    c = torch.zeros(ps)
                    lo, hi = min(r * ps, v.numel()), min((r + 1) * ps, v.numel())
                    c[:hi - lo] = v[lo:hi]
                    chunks.append(c)
                parts.append(torch.cat(chunks).requires_grad_(True))
            frags = collections.OrderedDict()
            for n, p in frozen:
                v = fvals[n].reshape(-1)
                ps = ceil_div(v.numel(), ws)
                c = torch.zeros(ps, dtype=cdt)
                lo, hi = min(r * ps, v.numel()), min((r + 1) * ps, v.numel())
                c[:hi - lo] = v[lo:hi]
                frags[n] = c
            stem = f"zero_pp_rank_{r}_mp_rank_00_model_states"
            path = os.path.join(tagdir, stem + ".pt")
            twin = twins.get(len(str(r))) if r >= 1 and not frozen else None
            if twin:
                # ranks >= 1 hold the same model states (no fragments, no
                # shared_params): a saved rank's file with the same number
                # of digits, its zip folder (torch.save names it after the
                # file, which gatherfs checks) renamed to this file's
                data, old = twin
                new = stem.encode() + b"/"
                assert data.count(old) == 2 * nrecords[old] and len(new) == len(old)
                with open(path, "wb") as f:
                    f.write(data.replace(old, new))
            else:
                module = module_dict(lambda k: bufs[k] if k in bufs else torch.empty(0, dtype=cdt))
                save(model_states(module, frags, shared if r == 0 else {}), path)
                if r >= 1 and not frozen:
                    with open(path, "rb") as f:
                        data = f.read()
                    old = stem.encode() + b"/"
                    with zipfile.ZipFile(path) as z:
                        nrecords[old] = len(z.namelist())
                    twins[len(str(r))] = (data, old)
            osd = {"zero_stage": ZeroStageEnum(STAGE_NAME[3]), "loss_scaler": LossScaler(),
                   "dynamic_loss_scale": False, "overflow": False, "partition_count": ws,
                   "optimizer_state_dict": {"state": adam_state([p.storage().size() for p in parts],
                                                                a.sparse),
                                            "param_groups": adam_groups(groups, cfg)},
                   "fp32_flat_groups": parts}
            save({"optimizer_state_dict": osd, "ds_config": cfg, "ds_version": DS_VERSION},
                 os.path.join(tagdir, f"{pre}zero_pp_rank_{r}_mp_rank_00_optim_states.pt"))
            del parts, osd
            sparse_zip.forget_holes()
    else:
        flats, offs, pads = [], {}, []
        for g in groups:
            total = sum(p.numel() for p in g["params"])
            padded = ceil_div(total, 2 * ws) * 2 * ws
            flat = sparse_zip.empty_hole(padded) if a.sparse else torch.zeros(padded)
            o = 0
            for p in g["params"]:
                n = names[id(p)]
                if not a.sparse:
                    flat[o:o + p.numel()] = master[n]
                offs[n] = (len(flats), o)
                o += p.numel()
            flats.append(flat)
            pads.append(padded - total)
        lp = [sparse_zip.empty_hole(f.numel(), cdt) if a.sparse and f.dtype != cdt else f.to(cdt)
              for f in flats]
        frags = collections.OrderedDict((n, fvals[n]) for n, _ in frozen)

        def value(k):
            if k in bufs:
                return bufs[k]
            if k in fvals:
                return fvals[k]
            gi, o = offs[k]
            shape = sdv[k].shape
            return lp[gi][o:o + math.prod(shape)].view(shape)

        save(model_states(module_dict(value), frags, shared),
                   os.path.join(tagdir, "mp_rank_00_model_states.pt"))
        for r in range(ws):
            parts, maps = [], []
            for gi, g in enumerate(groups):
                ps = flats[gi].numel() // ws
                part = (sparse_zip.empty_hole(ps) if a.sparse else
                        flats[gi][r * ps:(r + 1) * ps].clone()).requires_grad_(True)
                # DeepSpeed saves the last rank's partition without its group padding: a view.
                parts.append(part[:ps - pads[gi]] if r == ws - 1 else part)
                m = collections.OrderedDict()
                for p in g["params"]:
                    n = names[id(p)]
                    s, e = offs[n][1], offs[n][1] + p.numel()
                    lo, hi = max(s, r * ps), min(e, (r + 1) * ps)
                    if lo < hi:
                        m[n] = fragment_address(hi - lo, lo - r * ps)
                maps.append(m)
            osd = {"loss_scaler": LossScaler(), "dynamic_loss_scale": False, "overflow": False,
                   "clip_grad": 1.0,
                   "base_optimizer_state": {"state": adam_state([p.storage().size() for p in parts],
                                                                a.sparse),
                                            "param_groups": adam_groups(groups, cfg)},
                   "single_partition_of_fp32_groups": parts,
                   "zero_stage": ZeroStageEnum(STAGE_NAME[2]),
                   "group_paddings": [pads[gi] if r == ws - 1 else 0 for gi in range(len(groups))],
                   "partition_count": [ws] * len(groups), "ds_version": DS_VERSION,
                   "param_slice_mappings": maps}
            save({"optimizer_state_dict": osd, "ds_config": cfg, "ds_version": DS_VERSION},
                 os.path.join(tagdir, f"{pre}zero_pp_rank_{r}_mp_rank_00_optim_states.pt"))
            del parts, osd
            sparse_zip.forget_holes()
    finish(a.out, a.tag)


if __name__ == "__main__":
    main()
