# SPDX-License-Identifier: Apache-2.0
"""check_rankdict_optim.py MNT TRUTH_OPTIM: a mount's optim/ against the truth.

TRUTH_OPTIM is {"state": {param name: {state name: full tensor}}, ...}.  For
every state name, MNT/optim/<state>.safetensors must hold exactly the
parameters that have it, each with the truth's dtype, shape and bytes, and
MNT/optim/<state>/<param> the same bytes.  Exit 1 with one line per problem.
"""
import json
import os
import struct
import sys

import torch

ST = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I64": torch.int64}


def raw(t):
    t = t.contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def main():
    mnt, truth = sys.argv[1], sys.argv[2]
    want = torch.load(truth, map_location="cpu")["state"]
    states = {}
    for param, sd in want.items():
        for s, t in sd.items():
            states.setdefault(s, {})[param] = t
    errs = []
    for s, params in states.items():
        path = os.path.join(mnt, "optim", s + ".safetensors")
        data = open(path, "rb").read()
        n = struct.unpack("<Q", data[:8])[0]
        head = json.loads(data[8:8 + n])
        head.pop("__metadata__", None)
        if sorted(head) != sorted(params):
            errs.append(f"{path}: parameters {sorted(head)}, want {sorted(params)}")
        for p, t in params.items():
            h = head.get(p)
            if h is None:
                continue
            b, e = h["data_offsets"]
            if ST.get(h["dtype"]) != t.dtype or h["shape"] != list(t.shape):
                errs.append(f"{path}: {p}: {h['dtype']} {h['shape']}, want {t.dtype} {list(t.shape)}")
            elif data[8 + n + b:8 + n + e] != raw(t):
                errs.append(f"{path}: {p}: values differ")
            one = os.path.join(mnt, "optim", s, p)
            if open(one, "rb").read() != raw(t):
                errs.append(f"{one}: values differ")
    for e in errs:
        print(e, file=sys.stderr)
    if errs:
        sys.exit(1)
    print(f"ok: {mnt}/optim: {len(states)} states of {len(want)} parameters equal to {truth}")


if __name__ == "__main__":
    main()
