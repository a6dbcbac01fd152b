#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Check a mounted DeepSpeed universal checkpoint view and the optim/ view.

    check_universal.py MOUNT CASE [--real DIR]

CASE holds checkpoint/global_step3 (the training checkpoint) and
universal_expected.json (what each zero/<param>/<state>.pt must decode to,
derived from the training ranks' own partitions).  Every file of
MOUNT/<tag>_universal/ is loaded with torch.load (the way DeepSpeed's loader
reads it) and compared: same folders, same files, fp32/moment bytes
(sha256), step, param_groups of the optimizer; the model-states files are
byte-identical to the checkpoint's.  optim/<state>/NAME and
optim/<state>.safetensors must hold the same bytes.  With --real, DeepSpeed's
own ds_to_universal output DIR must decode to the same values, with the same
pickled structure and the same tensor bytes (the tests keep it next to the
checkpoint, hidden behind the view); DeepSpeed's zips are not byte-identical
(torch 2.x adds a random serialization id).
"""
import argparse
import filecmp
import glob
import hashlib
import json
import os
import pickle
import struct
import sys
import zipfile

import torch


class _StubMeta(type):
    def __getattr__(cls, name):  # enum members: getattr(ZeroStageEnum, 'gradients')
        if name.startswith("__"):
            raise AttributeError(name)
        return name


class _Stub(metaclass=_StubMeta):
    """Stands for DeepSpeed classes pickled in the optimizer states."""

    def __init__(self, *a, **k):
        pass

    def __setstate__(self, state):
        self.__dict__["state"] = state


_Unpickler = pickle.Unpickler


class _StubUnpickler(_Unpickler):
    def find_class(self, module, name):
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError):
            return type(name, (_Stub,), {"__module__": module})


def load_any(path):
    """torch.load of a file that pickles DeepSpeed objects, without DeepSpeed
    (Debian's torch 1.13 ignores pickle_module, so swap pickle.Unpickler)."""
    pickle.Unpickler = _StubUnpickler
    try:
        return torch.load(path, map_location="cpu")
    finally:
        pickle.Unpickler = _Unpickler


def fail(msg):
    print(f"check_universal: FAIL: {msg}")
    sys.exit(1)


def sha(t):
    return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()


def plain_groups(groups):
    return [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items() if k != "params"}
            for g in groups]


def structure(o):
    """What a pickle decodes to, without tensor values: types, keys, dtypes, shapes, strides."""
    if torch.is_tensor(o):
        return ("tensor", str(o.dtype), tuple(o.shape), o.stride(), o.requires_grad)
    if isinstance(o, dict):
        return (type(o).__name__, [(k, structure(v)) for k, v in o.items()])
    if isinstance(o, (list, tuple)):
        return (type(o).__name__, [structure(v) for v in o])
    return (type(o).__name__, o)


def storages(path):
    """The tensor bytes of a torch zip: its data/N records, by N."""
    with zipfile.ZipFile(path) as z:
        return {n.split("/data/", 1)[1]: z.read(n) for n in z.namelist() if "/data/" in n and
                not n.split("/data/", 1)[1].startswith(".") and "/.data/" not in n}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mount")
    ap.add_argument("case")
    ap.add_argument("--real")
    a = ap.parse_args()
    exp = json.load(open(os.path.join(a.case, "universal_expected.json")))
    params = exp["params"]
    tag = exp["tag"]
    src = os.path.join(a.case, "checkpoint", tag)
    stage3 = not os.path.exists(os.path.join(src, "mp_rank_00_model_states.pt"))
    optim0 = sorted(glob.glob(os.path.join(src, "*zero_pp_rank_0_mp_rank_00_optim_states.pt")))[0]
    osd = load_any(optim0)["optimizer_state_dict"]
    base = osd["optimizer_state_dict" if stage3 else "base_optimizer_state"]
    want_groups = plain_groups(base["param_groups"])
    nfiles = 0

    latest = open(os.path.join(a.mount, "latest_universal"), "rb").read()
    if latest != f"{tag}_universal".encode():
        fail(f"latest_universal holds {latest!r}")
    udir = os.path.join(a.mount, f"{tag}_universal")
    models = sorted(os.path.basename(p) for p in glob.glob(os.path.join(src, "*model_states.pt")))
    if sorted(os.listdir(udir)) != sorted(models + ["zero"]):
        fail(f"{udir} lists {sorted(os.listdir(udir))}, want {models + ['zero']}")
    for m in models:
        if not filecmp.cmp(os.path.join(src, m), os.path.join(udir, m), shallow=False):
            fail(f"{m} differs from the checkpoint's")
        nfiles += 1
    zero = os.path.join(udir, "zero")
    if sorted(os.listdir(zero)) != sorted(list(params) + ["optimizer_state.pt"]):
        fail(f"zero/ lists {sorted(os.listdir(zero))}")

    opt = torch.load(os.path.join(zero, "optimizer_state.pt"))
    nfiles += 1
    step0 = next(iter(params.values()))["step"][0]
    if stage3:
        inner = opt["optimizer_state_dict"]
        if float(inner["state"][0]["step"]) != step0:
            fail("optimizer_state.pt: wrong step")
        groups = inner["param_groups"]
    else:
        if not opt.get("ds_version"):
            fail("optimizer_state.pt: no ds_version")
        groups = opt["param_groups"]
    if plain_groups(groups) != want_groups:
        fail(f"optimizer_state.pt: param_groups {groups} != {want_groups}")
    if [g["params"] for g in groups] != [[i] for i in range(len(groups))]:
        fail("optimizer_state.pt: params indices")

    states = ["fp32", "exp_avg", "exp_avg_sq"]
    for name, p in params.items():
        d = os.path.join(zero, name)
        want = sorted(f"{s}.pt" for s in states + ([] if stage3 else ["step"]))
        if sorted(os.listdir(d)) != want:
            fail(f"zero/{name} lists {sorted(os.listdir(d))}, want {want}")
        for s in states:
            obj = torch.load(os.path.join(d, f"{s}.pt"))
            if stage3:
                t = obj
                shape = [p["numel"]]
            else:
                if sorted(obj) != ["cat_dim", "param"] or obj["cat_dim"] != 0:
                    fail(f"zero/{name}/{s}.pt: keys {sorted(obj)}")
                t = obj["param"]
                shape = p["shape"] or [1]  # 0-d params as shape (1,)
            if list(t.shape) != shape or t.dtype != torch.float32:
                fail(f"zero/{name}/{s}.pt: {t.dtype} {list(t.shape)}, want float32 {shape}")
            if sha(t) != p[s]["sha256"]:
                fail(f"zero/{name}/{s}.pt: bytes differ from the training ranks'")
            nfiles += 1
        if not stage3:
            st = torch.load(os.path.join(d, "step.pt"))
            if st.dim() != 0 or float(st) != p["step"][0]:
                fail(f"zero/{name}/step.pt: {st!r}")
            nfiles += 1

    # optim/: raw files and one safetensors file per state
    for s in ["exp_avg", "exp_avg_sq", "step"]:
        for name, p in params.items():
            b = open(os.path.join(a.mount, "optim", s, name), "rb").read()
            if s == "step":
                if struct.unpack("<f", b) != (p["step"][0],):
                    fail(f"optim/step/{name}")
            elif hashlib.sha256(b).hexdigest() != p[s]["sha256"]:
                fail(f"optim/{s}/{name}: bytes differ")
        blob = open(os.path.join(a.mount, "optim", f"{s}.safetensors"), "rb").read()
        n = struct.unpack("<Q", blob[:8])[0]
        hdr = json.loads(blob[8:8 + n])
        hdr.pop("__metadata__", None)
        if sorted(hdr) != sorted(params):
            fail(f"optim/{s}.safetensors: keys {sorted(hdr)}")
        for name, e in hdr.items():
            lo, hi = e["data_offsets"]
            b = blob[8 + n + lo:8 + n + hi]
            if e["dtype"] != "F32" or e["shape"] != ([] if s == "step" else params[name]["shape"]):
                fail(f"optim/{s}.safetensors: {name}: {e}")
            if s == "step":
                ok = struct.unpack("<f", b) == (params[name]["step"][0],)
            else:
                ok = hashlib.sha256(b).hexdigest() == params[name][s]["sha256"]
            if not ok:
                fail(f"optim/{s}.safetensors: {name}: bytes differ")
        nfiles += 1

    if a.real:
        rzero = os.path.join(a.real, "zero")
        if sorted(os.listdir(rzero)) != sorted(os.listdir(zero)):
            fail("DeepSpeed's zero/ has other folders")
        for name in params:
            if sorted(os.listdir(os.path.join(rzero, name))) != sorted(os.listdir(os.path.join(zero, name))):
                fail(f"DeepSpeed's zero/{name} has other files")
            for f in os.listdir(os.path.join(rzero, name)):
                x = torch.load(os.path.join(rzero, name, f))
                y = torch.load(os.path.join(zero, name, f))
                if structure(x) != structure(y):
                    fail(f"zero/{name}/{f}: pickled structure {structure(y)} differs from DeepSpeed's "
                         f"{structure(x)}")
                if storages(os.path.join(rzero, name, f)) != storages(os.path.join(zero, name, f)):
                    fail(f"zero/{name}/{f}: tensor bytes differ from DeepSpeed's")
                if isinstance(x, dict):
                    x, y = x["param"], y["param"]
                if x.shape != y.shape or not torch.equal(x, y):
                    fail(f"zero/{name}/{f} differs from DeepSpeed's")
        r = load_any(os.path.join(rzero, "optimizer_state.pt"))
        if plain_groups(r["param_groups"]) != plain_groups(groups):
            fail("optimizer_state.pt: param_groups differ from DeepSpeed's")
        if stage3:
            # the view's optimizer_state.pt is the part of DeepSpeed's that the loader reads
            ri = r["optimizer_state_dict"]
            if structure(ri["param_groups"]) != structure(groups):
                fail(f"optimizer_state.pt: param_groups {groups} != DeepSpeed's {ri['param_groups']}")
            if structure(ri["state"][0]["step"]) != structure(opt["optimizer_state_dict"]["state"][0]["step"]) \
                    or float(ri["state"][0]["step"]) != float(opt["optimizer_state_dict"]["state"][0]["step"]):
                fail("optimizer_state.pt: step differs from DeepSpeed's")
    print(f"check_universal: ok: {a.case}: {nfiles} files, {len(params)} params"
          f"{', equal to DeepSpeed' + chr(39) + 's' if a.real else ''}")


if __name__ == "__main__":
    main()
