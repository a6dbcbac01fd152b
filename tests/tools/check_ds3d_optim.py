#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Check the optim/ view (and the fp32 masters) of a mounted DeepSpeed
pipeline, mixture-of-experts or tensor-parallel checkpoint.

    check_ds3d_optim.py MOUNT TAGDIR pipe|moe|tp [TRUTH_OPTIM]

The expected values are rebuilt the way DeepSpeed's ds_to_universal.py does,
independently of gatherfs's own mapping: every *_optim_states.pt is loaded
with torch.load (DeepSpeed's classes as inert stand-ins), and each param's
fragments are cut from each rank's flat partitions at the places
param_slice_mappings records, joined in data-parallel order; then:
  pipe  each stage's params, a tied one from its first stage;
  moe   the dense group over every rank; the expert group of
        expert-parallel rank e over ranks e, e+E, ... (local expert ids made
        global: e * n/E + local);
  tp    each tensor rank's param, joined as universal_checkpoint_info's
        patterns say, with Python's own re.match.
MOUNT/optim/STATE/NAME must hold exactly those bytes for exp_avg and
exp_avg_sq, the group's step for step, and MOUNT/tensors/NAME the fp32
master.
With TRUTH_OPTIM (a run's truth_optim.pt: {"exp_avg": {name: tensor},
"exp_avg_sq": {name: tensor}}, what DeepSpeed's
safe_get_full_optimizer_state gave on the live ranks, merged like truth.pt),
MOUNT/optim/exp_avg and MOUNT/optim/exp_avg_sq must also hold exactly its
names (as a set) and each its tensor's bytes.  Exit 1 with one line per
problem.
"""
import glob
import importlib.abc
import importlib.machinery
import os
import re
import sys
import types

import torch


class Stub:
    def __init__(self, *a, **k):
        pass

    def __setstate__(self, st):
        self.__dict__.update(st if isinstance(st, dict) else {"state": st})


class StubMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return name


class Mod(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return StubMeta(name, (Stub,), {})


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """deepspeed.* imported as modules of inert stand-in classes."""

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "deepspeed":
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return Mod(spec.name)

    def exec_module(self, module):
        module.__path__ = []


sys.meta_path.insert(0, Finder())


def load(path):
    return torch.load(path, map_location="cpu")


def frags(osd, g, key):
    """name -> flat fragment of param group g of one rank, from list key."""
    flat = key(osd, g)
    return {n: flat[a.start:a.start + a.numel] for n, a in osd["param_slice_mappings"][g].items()}


def states_of(osd, g):
    return osd["base_optimizer_state"]["state"][g]


def rank_parts(files):
    """per rank (in order): (osd, {(g, what): {name: fragment}})"""
    out = []
    for f in files:
        osd = load(f)["optimizer_state_dict"]
        parts = {}
        for g in range(len(osd["param_slice_mappings"])):
            parts[(g, "fp32")] = frags(osd, g, lambda o, g: o["single_partition_of_fp32_groups"][g])
            for s in ("exp_avg", "exp_avg_sq"):
                parts[(g, s)] = frags(osd, g, lambda o, g, s=s: states_of(o, g)[s])
        out.append((osd, parts))
    return out


def join(ranks, g, what):
    """name -> the param's flat, its fragments of ranks joined in order."""
    acc = {}
    for _, parts in ranks:
        for n, t in parts[(g, what)].items():
            acc.setdefault(n, []).append(t)
    return {n: torch.cat(v) for n, v in acc.items()}


def opt_files(tagdir, mp):
    fs = glob.glob(os.path.join(tagdir, f"*zero_pp_rank_*_mp_rank_{mp:02d}_optim_states.pt"))
    return sorted(fs, key=lambda f: int(re.search(r"zero_pp_rank_(\d+)_", f).group(1)))


def expected_pipe(tagdir):
    want = {}
    mp = 0
    while opt_files(tagdir, mp):
        ranks = rank_parts(opt_files(tagdir, mp))
        for g in range(len(ranks[0][0]["param_slice_mappings"])):
            step = states_of(ranks[0][0], g)["step"]
            for what in ("fp32", "exp_avg", "exp_avg_sq"):
                for n, t in join(ranks, g, what).items():
                    want.setdefault((what, n), t)
                    want.setdefault(("step", n), step)
        mp += 1
    return want


def expected_moe(tagdir):
    files = opt_files(tagdir, 0)
    ranks = rank_parts(files)
    groups = ranks[0][0]["base_optimizer_state"]["param_groups"]
    dense = [g for g, d in enumerate(groups) if not d.get("moe")][0]
    exp = [g for g, d in enumerate(groups) if d.get("moe")][0]
    ep = int(groups[exp]["name"][len("ep_size_"):])
    nexp = load(os.path.join(tagdir, "mp_rank_00_model_states.pt"))["num_experts"]
    # each MoE layer's expert count, by the prefix its expert 0's keys have
    nlocal = {}
    for L, n in enumerate(nexp):
        for k in load(os.path.join(tagdir, f"layer_{L}_expert_0_mp_rank_00_model_states.pt")):
            nlocal[k.split(".deepspeed_experts.")[0]] = n // ep
    want = {}
    for what in ("fp32", "exp_avg", "exp_avg_sq"):
        for n, t in join(ranks, dense, what).items():
            want[(what, n)] = t
            want[("step", n)] = states_of(ranks[0][0], dense)["step"]
        for e in range(ep):
            for n, t in join(ranks[e::ep], exp, what).items():
                m = re.match(r"(.*\.deepspeed_experts\.)(\d+)(\..*)", n)
                nl = nlocal[m.group(1)[:-len(".deepspeed_experts.")]]
                gn = f"{m.group(1)}{e * nl + int(m.group(2))}{m.group(3)}"
                assert (what, gn) not in want, gn
                want[(what, gn)] = t
                want[("step", gn)] = states_of(ranks[e][0], exp)["step"]
    return want


def expected_tp(tagdir):
    uci = load(os.path.join(tagdir, "mp_rank_00_model_states.pt"))["universal_checkpoint_info"]
    pats = {k: uci.get(k, []) for k in ("tp_replicated_parameter_patterns",
                                         "parameter_with_row_parallelism_patterns")}
    per = []
    mp = 0
    while opt_files(tagdir, mp):
        ranks = rank_parts(opt_files(tagdir, mp))
        sh = {n: tuple(s) for g in load(os.path.join(tagdir, f"mp_rank_{mp:02d}_model_states.pt"))
              ["param_shapes"] for n, s in g.items()}
        d = {}
        for g in range(len(ranks[0][0]["param_slice_mappings"])):
            for what in ("fp32", "exp_avg", "exp_avg_sq"):
                for n, t in join(ranks, g, what).items():
                    d[(what, n)] = t.reshape(sh[n])
                    d[("step", n)] = states_of(ranks[0][0], g)["step"]
        per.append(d)
        mp += 1
    want = {}
    for k, t in per[0].items():
        name = k[1]
        if k[0] == "step" or any(re.match(p, name) for p in pats["tp_replicated_parameter_patterns"]):
            want[k] = t
            continue
        dim = 1 if any(re.match(p, name) for p in pats["parameter_with_row_parallelism_patterns"]) else 0
        want[k] = torch.cat([d[k] for d in per], dim=dim)
    return want


def check_truth(mnt, path):
    """Problems of MOUNT/optim/{exp_avg,exp_avg_sq} against truth_optim.pt PATH (bit for bit)."""
    truth = load(path)
    errs, n = [], 0
    for s in ("exp_avg", "exp_avg_sq"):
        want = truth[s]
        if not want:
            errs.append(f"{path}: no {s}")
        have = set(os.listdir(os.path.join(mnt, "optim", s)))
        if have != set(want):
            errs.append(f"optim/{s}: names differ from {path}: {sorted(have ^ set(want))[:5]}")
        for name, t in want.items():
            try:
                got = open(os.path.join(mnt, "optim", s, name), "rb").read()
            except OSError as e:
                errs.append(f"optim/{s}/{name}: {e}")
                continue
            if t.dtype != torch.float32 or got != t.contiguous().numpy().tobytes():
                errs.append(f"optim/{s}/{name}: differs from {path} ({len(got)} bytes, truth {t.dtype} {list(t.shape)})")
            n += 1
    return errs, n


def main():
    mnt, tagdir, kind = sys.argv[1:4]
    want = {"pipe": expected_pipe, "moe": expected_moe, "tp": expected_tp}[kind](tagdir)
    errs = []
    seen = {s: set(os.listdir(os.path.join(mnt, "optim", s))) for s in ("exp_avg", "exp_avg_sq", "step")}
    for (what, n), t in want.items():
        path = os.path.join(mnt, "tensors" if what == "fp32" else os.path.join("optim", what), n)
        if what != "fp32":
            seen[what].discard(n)
        try:
            got = open(path, "rb").read()
        except OSError as e:
            errs.append(f"{what} {n}: {e}")
            continue
        if got != t.detach().contiguous().numpy().tobytes():
            errs.append(f"{what} {n}: {len(got)} bytes differ from the expected {t.numel() * t.element_size()}")
    for s, rest in seen.items():
        if rest:
            errs.append(f"optim/{s} has entries nobody expects: {sorted(rest)[:5]}")
    ntruth = 0
    if len(sys.argv) > 4:
        terrs, ntruth = check_truth(mnt, sys.argv[4])
        errs += terrs
    for e in errs[:20]:
        print(f"{mnt}: {e}", file=sys.stderr)
    if errs:
        sys.exit(1)
    print(f"ok: {mnt}: {len(want)} optimizer values equal to the ranks' partitions"
          + (f", {ntruth} moments equal to {sys.argv[4]}" if len(sys.argv) > 4 else ""))


if __name__ == "__main__":
    main()
