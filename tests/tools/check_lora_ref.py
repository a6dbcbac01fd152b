#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check_lora_ref.py MNT CASE: a LoRA-merged mount against the float64
reference of a case made by make_lora_adapters.py.

Every tensor of CASE/ref.safetensors must be in MNT/tensors/ with its dtype
and shape, within 1 ulp of the reference (the reference and gatherfs both
sum in float64 and round once, so they differ only where the exact value is
within float64 noise of a rounding boundary); every tensor the adapter
changes must differ from the base; the mount must hold nothing else but the
untied head named in CASE/extra.json, equal to what it names.  Needs numpy.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lora_ref  # noqa: E402


def main():
    mnt, case = sys.argv[1], sys.argv[2]
    ref, _ = lora_ref.read_safetensors(os.path.join(case, "ref.safetensors"))
    extra = json.load(open(os.path.join(case, "extra.json")))
    base_dir = open(os.path.join(case, "base")).read().strip()
    base, _ = lora_ref.read_safetensors(os.path.join(base_dir, "model.safetensors"))
    with open(os.path.join(mnt, "tensors", "INDEX")) as f:
        index = {line.split("\t")[0]: line.split("\t") for line in f.read().splitlines()[1:]}
    want = set(ref) | ({extra["untied_head"]} if "untied_head" in extra else set())
    assert set(index) == want, f"names: extra {sorted(set(index) - want)}, missing {sorted(want - set(index))}"
    exact = close = 0
    for name, (dt, shape, arr) in ref.items():
        _, gdt, gshape, nbytes, _ = index[name][:5]
        assert lora_ref.TORCH_TO_ST[gdt] == dt and json.loads(gshape) == shape, (name, gdt, gshape)
        got = np.frombuffer(open(os.path.join(mnt, "tensors", name), "rb").read(),
                            dtype=lora_ref._ST_NP[dt]).reshape(shape)
        if dt in lora_ref.FLOAT_ST:
            d = lora_ref.ulp_diff(dt, got, arr)
            assert d.max() <= 1, f"{name}: {int(d.max())} ulps from the float64 merge"
            exact += int((d == 0).sum())
            close += int((d == 1).sum())
        else:
            assert got.tobytes() == arr.tobytes(), name
        if name in extra["changed"]:
            assert got.tobytes() != base[name][2].tobytes(), f"{name}: unmerged"
    if "untied_head" in extra:
        src, key = extra["head_equals"].split(":", 1)
        adapter, _ = lora_ref.read_safetensors(os.path.join(case, "adapter", "adapter_model.safetensors"))
        want_head = adapter[key][2] if src == "adapter" else base[key][2]
        got = open(os.path.join(mnt, "tensors", extra["untied_head"]), "rb").read()
        assert got == want_head.tobytes(), "the untied head is not the unmerged embedding"
    print(f"ok: {case}: {len(ref)} tensors, {exact} elements equal to the float64 merge, {close} at 1 ulp")


if __name__ == "__main__":
    main()
