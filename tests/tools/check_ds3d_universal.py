#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Check the universal view of a mounted DeepSpeed pipeline checkpoint.

    check_ds3d_universal.py MOUNT TAGDIR TRUTH [TRUTH_OPTIM]

TAGDIR is the checkpoint's global_step3, TRUTH its truth.pt (the fp32
masters by PipelineModule.state_dict() name), TRUTH_OPTIM its
truth_optim.pt ({"exp_avg": {name: T}, "exp_avg_sq": ...}) where the
fixture has one.  What DeepSpeed 0.14.5's
universal loader reads, and what ds_to_universal.py writes for a pipeline:
latest_universal naming <tag>_universal; in it every stage's
mp_rank_YY_model_states.pt, byte-identical (no layer file: the loader takes
the values from zero/), and zero/ with optimizer_state.pt (ds_version and
stage 0's param_groups, params [g]) and one folder per param name of every
stage's param_shapes (N.NAME, tied_modules.KEY.NAME: the names the engine's
param_names holds), each with fp32.pt ({'cat_dim': 0, 'param': T}, T equal
to the truth bit for bit), exp_avg.pt and exp_avg_sq.pt (equal to TRUTH_OPTIM's; without
it, to the bytes of optim/<state>/NAME, which check_ds3d_optim.py holds to
the ranks' partitions) and step.pt (a 0-d tensor, optim/step/NAME's value).
"""
import filecmp
import glob
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_universal import load_any, plain_groups  # noqa: E402


def fail(msg):
    print(f"check_ds3d_universal: FAIL: {msg}")
    sys.exit(1)


def main():
    mount, src, truth_path = sys.argv[1:4]
    truth = torch.load(truth_path)
    truth_optim = torch.load(sys.argv[4]) if len(sys.argv) > 4 else None
    tag = os.path.basename(os.path.normpath(src))
    latest = open(os.path.join(mount, "latest_universal"), "rb").read()
    if latest != f"{tag}_universal".encode():
        fail(f"latest_universal holds {latest!r}")
    udir = os.path.join(mount, f"{tag}_universal")
    models = sorted(os.path.basename(p) for p in glob.glob(os.path.join(src, "mp_rank_*_model_states.pt")))
    if len(models) < 2 or sorted(os.listdir(udir)) != models + ["zero"]:
        fail(f"{udir} lists {sorted(os.listdir(udir))}, want {models + ['zero']}")
    names = set()
    for m in models:
        if not filecmp.cmp(os.path.join(src, m), os.path.join(udir, m), shallow=False):
            fail(f"{m} differs from the checkpoint's")
        for group in load_any(os.path.join(src, m))["param_shapes"]:
            names.update(group)
    if names != set(truth):
        fail(f"param_shapes names {sorted(names ^ set(truth))} are not truth.pt's")
    zero = os.path.join(udir, "zero")
    if sorted(os.listdir(zero)) != sorted(names | {"optimizer_state.pt"}):
        fail(f"zero/ lists {sorted(os.listdir(zero))}")

    optim0 = sorted(glob.glob(os.path.join(src, "*zero_pp_rank_0_mp_rank_00_optim_states.pt")))[0]
    want_groups = plain_groups(load_any(optim0)["optimizer_state_dict"]["base_optimizer_state"]["param_groups"])
    opt = torch.load(os.path.join(zero, "optimizer_state.pt"))
    if not opt.get("ds_version"):
        fail("optimizer_state.pt: no ds_version")
    groups = opt["param_groups"]
    if plain_groups(groups) != want_groups or [g["params"] for g in groups] != [[i] for i in range(len(groups))]:
        fail(f"optimizer_state.pt: param_groups {groups}, want {want_groups}")

    for name in sorted(names):
        d = os.path.join(zero, name)
        if sorted(os.listdir(d)) != ["exp_avg.pt", "exp_avg_sq.pt", "fp32.pt", "step.pt"]:
            fail(f"zero/{name} lists {sorted(os.listdir(d))}")
        want = {"fp32": truth[name].contiguous().numpy().tobytes()}
        for s in ("exp_avg", "exp_avg_sq"):
            if truth_optim is not None:
                want[s] = truth_optim[s][name].float().contiguous().numpy().tobytes()
            else:
                want[s] = open(os.path.join(mount, "optim", s, name), "rb").read()
        for s, b in want.items():
            obj = torch.load(os.path.join(d, f"{s}.pt"))
            if sorted(obj) != ["cat_dim", "param"] or obj["cat_dim"] != 0:
                fail(f"zero/{name}/{s}.pt: keys {sorted(obj)}")
            t = obj["param"]
            if t.dtype != torch.float32 or t.shape != truth[name].shape:
                fail(f"zero/{name}/{s}.pt: {t.dtype} {list(t.shape)}, want {list(truth[name].shape)}")
            if t.detach().contiguous().numpy().tobytes() != b:
                fail(f"zero/{name}/{s}.pt: bytes differ")
        st = torch.load(os.path.join(d, "step.pt"))
        want_step = struct.unpack("<f", open(os.path.join(mount, "optim", "step", name), "rb").read())[0]
        if st.dim() != 0 or float(st) != want_step or want_step != 3:
            fail(f"zero/{name}/step.pt: {st!r}")
    moments = sys.argv[4] if truth_optim is not None else "optim/"
    print(f"ok: universal view of {len(models)} stages, {len(names)} params, moments equal to {moments}")


if __name__ == "__main__":
    main()
