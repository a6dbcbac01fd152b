#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check_lora_logits.py MNT CASE [TOL]: inside the compat root, a LoRA-merged
mount loaded with transformers' from_pretrained (fp32; safetensors and the
.bin path) reproduces the unmerged PeftModel's logits (CASE/logits_unmerged.pt
on CASE/input_ids.pt) within TOL (default 1e-6) max abs difference."""
import sys

import torch
from transformers import AutoModelForCausalLM

mnt, case = sys.argv[1], sys.argv[2]
tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-6
ids = torch.load(f"{case}/input_ids.pt")
ref = torch.load(f"{case}/logits_unmerged.pt")
bad = 0
for label, kw in (("safetensors", {}), ("pytorch_model.bin", {"use_safetensors": False})):
    model = AutoModelForCausalLM.from_pretrained(mnt, torch_dtype=torch.float32, **kw)
    model.eval()
    with torch.no_grad():
        logits = model(ids).logits
    diff = (logits.float() - ref.float()).abs().max().item()
    ok = diff <= tol
    bad += not ok
    print(f"{'ok' if ok else 'FAIL'}: {case}: from_pretrained ({label}): logits within {diff:.3g} of the unmerged model's (tolerance {tol})")
sys.exit(1 if bad else 0)
