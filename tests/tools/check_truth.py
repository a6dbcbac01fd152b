# SPDX-License-Identifier: Apache-2.0
"""check_truth.py LOADED TRUTH: compare two torch.save files loaded with real torch.load.

Same keys in the same order; for every key the same dtype, shape and bytes
(compared as integers: NaN == NaN, -0.0 != 0.0); and the same aliasing: two
keys share a storage in LOADED exactly when they do in TRUTH.  Exit 1 with one
line per problem.
"""
import sys

import torch

INTS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t):
    t = t.contiguous()
    return t if t.dtype == torch.bool else t.view(INTS[t.element_size()])


def storage_key(t):
    return t.storage().data_ptr()


def main():
    got = torch.load(sys.argv[1], map_location="cpu")
    want = torch.load(sys.argv[2], map_location="cpu")
    errs = []
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
    groups = {}
    for name, sd in (("got", got), ("want", want)):
        by = {}
        for k, v in sd.items():
            by.setdefault(storage_key(v), []).append(k)
        groups[name] = sorted(sorted(g) for g in by.values())
    if groups["got"] != groups["want"]:
        errs.append(f"aliasing differs: got {[g for g in groups['got'] if len(g) > 1]}, "
                    f"want {[g for g in groups['want'] if len(g) > 1]}")
    for e in errs:
        print(f"{sys.argv[1]}: {e}", file=sys.stderr)
    if errs:
        sys.exit(1)
    print(f"ok: {sys.argv[1]}: {len(want)} keys equal to {sys.argv[2]}")


if __name__ == "__main__":
    main()
