# SPDX-License-Identifier: Apache-2.0
"""check_ds3d_moe.py LOADED TRUTH: a DeepSpeed MoE fixture's whole state dict.

TRUTH (the harness's truth.pt) has the harness's key order, not the
model's, so: the same keys as a set; for every key the same dtype, shape
and bytes (compared as integers); the same aliasing as TRUTH (two keys
share a storage exactly when they do there); and the order the importer
documents (docs/deepspeed-3d.md): each MoE layer's experts, global ids in
order, right after its gate.  Exit 1 with one line per problem.
"""
import sys

import torch

INTS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
EXPERT = "blocks.{b}.moe.deepspeed_moe.experts.deepspeed_experts.{e}.{n}"
GATE = "blocks.{b}.moe.deepspeed_moe.gate.wg.weight"


def bits(t):
    t = t.contiguous()
    return t if t.dtype == torch.bool else t.view(INTS[t.element_size()])


def alias_groups(sd):
    by = {}
    for k, v in sd.items():
        by.setdefault(v.storage().data_ptr(), []).append(k)
    return sorted(sorted(g) for g in by.values() if len(g) > 1)


def main():
    got = torch.load(sys.argv[1], map_location="cpu")
    want = torch.load(sys.argv[2], map_location="cpu")
    errs = []
    if set(got) != set(want):
        errs.append(f"keys differ: only in the file {sorted(set(got) - set(want))}, "
                    f"only in the truth {sorted(set(want) - set(got))}")
    for k, b in want.items():
        if k not in got:
            continue
        a = got[k]
        if a.dtype != b.dtype or a.shape != b.shape:
            errs.append(f"{k}: {a.dtype} {tuple(a.shape)}, want {b.dtype} {tuple(b.shape)}")
        elif not torch.equal(bits(a), bits(b)):
            errs.append(f"{k}: values differ")
    if alias_groups(got) != alias_groups(want):
        errs.append(f"aliasing differs: got {alias_groups(got)}, want {alias_groups(want)}")
    keys = list(got)
    layers = 0
    for b in range(64):
        if GATE.format(b=b) not in got:
            continue
        layers += 1
        gate = keys.index(GATE.format(b=b))
        exp = [EXPERT.format(b=b, e=e, n=n) for e in range(4)
               for n in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")]
        if keys[gate + 1:gate + 1 + len(exp)] != exp:
            errs.append(f"block {b}: the experts do not follow the gate in id order: "
                        f"{keys[gate:gate + 1 + len(exp)]}")
    if layers == 0:
        errs.append("no MoE gate among the keys")
    for e in errs:
        print(f"{sys.argv[1]}: {e}", file=sys.stderr)
    if errs:
        sys.exit(1)
    print(f"ok: {sys.argv[1]}: {len(want)} keys ({layers} MoE layers) equal to {sys.argv[2]}")


if __name__ == "__main__":
    main()
