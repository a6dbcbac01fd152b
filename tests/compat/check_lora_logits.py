#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check_lora_logits.py MNT CASE [TOL]: inside the compat root, a LoRA-merged
mount loaded with transformers' from_pretrained (fp32; safetensors and the
.bin path) reproduces the unmerged PeftModel's logits (CASE/logits_unmerged.pt
on CASE/input_ids.pt) within TOL (default 1e-6) max abs difference.

check_lora_logits.py --each MNT CASE [MNT CASE...]: the same check (default
TOL) of every pair in one process (torch and transformers imported once);
fails if any pair fails."""
import sys

import torch
from transformers import AutoModelForCausalLM



def check(mnt, case, tol):
    """How many of the two loads of MNT miss CASE's unmerged logits."""
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
        print(f"{'ok' if ok else 'FAIL'}: {case}: from_pretrained ({label}): logits within {diff:.3g} of the unmerged model's (tolerance {tol})",
              flush=True)
        del model
    return bad


if sys.argv[1:2] == ["--each"] and len(sys.argv) >= 4 and len(sys.argv) % 2 == 0:
    sys.exit(1 if sum(check(sys.argv[i], sys.argv[i + 1], 1e-6) for i in range(2, len(sys.argv), 2)) else 0)
if len(sys.argv) not in (3, 4):
    sys.exit(__doc__)
sys.exit(1 if check(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 1e-6) else 0)
