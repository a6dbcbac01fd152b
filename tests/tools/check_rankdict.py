# SPDX-License-Identifier: Apache-2.0
"""check_rankdict.py LOADED TRUTH [TIED_KEY=TARGET ...]: a mount's model file against the truth.

LOADED (pytorch_model.bin, read with real torch.load, or model.safetensors,
read by its header) must hold TRUTH's keys in TRUTH's order, each with the
same dtype, shape and bytes (compared as integers).  For pytorch_model.bin,
each TIED_KEY must share its storage with TARGET and no other two keys may
share one (the truth, gathered with full_tensor(), stores tied keys apart);
model.safetensors leaves each TIED_KEY out, as transformers does.
Exit 1 with one line per problem.
"""
import json
import struct
import sys

import torch

INTS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
ST = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def bits(t):
    t = t.contiguous()
    return t if t.dtype == torch.bool else t.view(INTS[t.element_size()])


def check_safetensors(path, want, tied, errs):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    if sorted(head) != sorted(k for k in want if k not in tied):
        errs.append(f"keys differ: got {sorted(head)}")
    for k, v in want.items():
        h = head.get(k)
        if h is None:
            continue
        b, e = h["data_offsets"]
        if ST.get(h["dtype"]) != v.dtype or h["shape"] != list(v.shape):
            errs.append(f"{k}: {h['dtype']} {h['shape']}, want {v.dtype} {list(v.shape)}")
        elif raw[8 + n + b:8 + n + e] != bits(v).numpy().tobytes():
            errs.append(f"{k}: values differ")


def main():
    path, truth = sys.argv[1], sys.argv[2]
    tied = dict(a.split("=", 1) for a in sys.argv[3:])
    want = torch.load(truth, map_location="cpu")
    errs = []
    if path.endswith(".safetensors"):
        check_safetensors(path, want, tied, errs)
    else:
        got = torch.load(path, map_location="cpu")
        if list(got) != list(want):
            errs.append(f"keys differ:\n  got  {list(got)}\n  want {list(want)}")
        for k in want:
            if k not in got:
                continue
            a, b = got[k], want[k]
            if a.dtype != b.dtype or a.shape != b.shape:
                errs.append(f"{k}: {a.dtype} {tuple(a.shape)}, want {b.dtype} {tuple(b.shape)}")
            elif not torch.equal(bits(a), bits(b)):
                errs.append(f"{k}: values differ")
        by = {}
        for k, v in got.items():
            by.setdefault(v.storage().data_ptr(), []).append(k)
        groups = sorted(sorted(g) for g in by.values() if len(g) > 1)
        expect = sorted(sorted([k, t]) for k, t in tied.items())
        if groups != expect:
            errs.append(f"shared storages {groups}, want {expect}")
    for e in errs:
        print(f"{path}: {e}", file=sys.stderr)
    if errs:
        sys.exit(1)
    print(f"ok: {path}: {len(want)} keys equal to {truth}")


if __name__ == "__main__":
    main()
