#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Check bench/sparse_zip.py against torch.save: same bytes for zero payloads.

sparse_fidelity.py DIR: saves one object (DeepSpeed-like nesting, several
dtypes, a shared storage, a tensor view, an empty tensor, a scalar) with
torch.save and with sparse_save (payloads as holes), and checks that the two
files are byte-identical, that the sparse one has holes, and that
torch.load reads it back.  Exit 0 when they agree.
"""
import collections
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sparse_zip  # noqa: E402


def sample(holes):
    mk = (lambda n, dt: sparse_zip.hole(torch.zeros(n, dtype=dt))) if holes else \
        (lambda n, dt: torch.zeros(n, dtype=dt))
    big = mk(3_000_000, torch.float32)
    od = collections.OrderedDict()
    od["a"] = mk(1000, torch.bfloat16).view(10, 100)
    od["b"] = od["a"].view(100, 10)
    od["pos"] = torch.arange(7, dtype=torch.int64)
    od["e"] = torch.empty(0)
    od._metadata = collections.OrderedDict({"": {"version": 1}})
    return {"module": od, "flat": [big.requires_grad_(True)], "step": torch.tensor(3.0),
            "slice": big[10:20], "cfg": {"x": [1, 2.5, None, True]}}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    os.makedirs(os.path.join(out, "ref"), exist_ok=True)
    os.makedirs(os.path.join(out, "sparse"), exist_ok=True)
    a, b = os.path.join(out, "ref", "states.pt"), os.path.join(out, "sparse", "states.pt")
    torch.save(sample(False), a)
    sparse_zip.sparse_save(sample(True), b)
    sparse_zip.forget_holes()
    ra, rb = open(a, "rb").read(), open(b, "rb").read()
    st = os.stat(b)
    ok = ra == rb and st.st_blocks * 512 < st.st_size // 2
    t = torch.load(b)
    ok = ok and t["flat"][0].numel() == 3_000_000 and int(t["flat"][0].abs().sum()) == 0
    ok = ok and t["module"]["b"].storage().data_ptr() == t["module"]["a"].storage().data_ptr()
    print(f"sparse_zip fidelity: {'OK' if ok else 'MISMATCH'} ({len(ra)} bytes, "
          f"{st.st_blocks * 512} allocated)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
