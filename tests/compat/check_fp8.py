#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check_fp8.py STORED DEQ CASE [STORED DEQ CASE...]: inside the compat root, for each FP8
fixture CASE (tests/data/fp8/NAME, its truth in NAME.truth):
  - torch.load(STORED/pytorch_model.bin) (the mount as stored) holds float8 tensors, every
    tensor equal to CASE's safetensors (dtype, shape, bytes);
  - from_pretrained(DEQ) (the mount with -o dequant=bf16; safetensors and the .bin path)
    gives truth_logits.pt on input_ids.pt bit for bit.
Fails if any check fails."""
import glob
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def check(stored, deq, case):
    bad = 0
    src = {}
    for f in sorted(glob.glob(f"{case}/*.safetensors")):
        src.update(load_file(f))
    got = torch.load(f"{stored}/pytorch_model.bin", weights_only=True)
    nf8 = sum(1 for v in got.values() if v.dtype in (torch.float8_e4m3fn, torch.float8_e8m0fnu))
    same = got.keys() == src.keys() and all(
        got[k].dtype == src[k].dtype and got[k].shape == src[k].shape and
        torch.equal(got[k].reshape(-1).view(torch.uint8), src[k].reshape(-1).view(torch.uint8)) for k in src)
    ok = same and nf8 > 0
    bad += not ok
    print(f"{'ok' if ok else 'FAIL'}: {case}: torch.load(pytorch_model.bin) as stored: {len(got)} tensors, {nf8} float8, equal: {same}", flush=True)
    ids = torch.load(f"{case}.truth/input_ids.pt")
    ref = torch.load(f"{case}.truth/truth_logits.pt")
    for label, kw in (("safetensors", {}), ("pytorch_model.bin", {"use_safetensors": False})):
        model = AutoModelForCausalLM.from_pretrained(deq, dtype=torch.bfloat16, **kw)
        model.eval()
        with torch.no_grad():
            logits = model(ids).logits.float()
        ok = torch.equal(logits, ref)
        bad += not ok
        print(f"{'ok' if ok else 'FAIL'}: {case}: from_pretrained(dequant=bf16, {label}): logits bit for bit: {ok} (max diff {(logits - ref).abs().max().item():.3g})",
              flush=True)
        del model
    return bad


a = sys.argv[1:]
if not a or len(a) % 3:
    sys.exit(__doc__)
sys.exit(1 if sum(check(a[i], a[i + 1], a[i + 2]) for i in range(0, len(a), 3)) else 0)
