# SPDX-License-Identifier: Apache-2.0
"""Compare a Hugging Face model's logits with the Megatron reference logits of a case.

  python3 check_hf_logits.py MODEL_DIR CASE_DIR [--atol 1e-4] [--dtype float32|bfloat16|auto] [--ref FILE]
  python3 check_hf_logits.py --batch LIST

LIST: one check a line, its arguments (as above) tab-separated; every check runs
in this one process (torch and transformers imported once), one JSON line each;
exit status 1 if any fails.

Loads MODEL_DIR with transformers.AutoModelForCausalLM.from_pretrained(dtype=float32 by default;
bf16 checkpoint tensors are upcast exactly), runs CASE_DIR/input_ids.pt (batch of token ids, no
padding, causal), and compares the logits with CASE_DIR/reference_logits.pt (Megatron GPTModel's
own forward, trimmed to the true vocab, stored as fp32).
Exit status 0 = pass (max |diff| <= atol and same shape), 1 = fail.

Tolerance: fp32 cases pass at the default 1e-4 (observed <= 1.3e-6). For bf16 cases
(model_args.json "params_dtype": "bfloat16") the reference is Megatron's forward computed in
bf16 (Float16Module) and upcast, so it carries bf16 rounding (relative ~2^-8 per op); use
--atol 5e-2 (verify_case.sh does this when the case is bf16). bf16 cases also hold
reference_logits_fp32_forward.pt (Megatron's fp32 forward of the same bf16 weights); with
--ref reference_logits_fp32_forward.pt an fp32 run is checked at the default 1e-4.
"""
import argparse
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM


def check(argv):
    """The check of the arguments ARGV (as for one run); prints its JSON line, returns its outcome."""
    p = argparse.ArgumentParser()
    p.add_argument("model_dir")
    p.add_argument("case_dir")
    p.add_argument("--atol", type=float, default=1e-4)
    p.add_argument("--dtype", choices=["float32", "bfloat16", "auto"], default="float32",
                   help="dtype the HF model is loaded and run in (auto = as saved)")
    p.add_argument("--ref", default="reference_logits.pt", help="reference file name inside CASE_DIR")
    a = p.parse_args(argv)
    ids = torch.load(a.case_dir + "/input_ids.pt")
    ref = torch.load(os.path.join(a.case_dir, a.ref)).float()
    dt = "auto" if a.dtype == "auto" else getattr(torch, a.dtype)
    try:
        model = AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=dt)
    except TypeError:
        model = AutoModelForCausalLM.from_pretrained(a.model_dir, torch_dtype=dt)
    model.eval()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.float()
    case_dtype = None
    margs = os.path.join(a.case_dir, "model_args.json")
    if os.path.exists(margs):
        case_dtype = json.load(open(margs)).get("params_dtype")
    res = dict(model_dir=a.model_dir, case_dir=a.case_dir, reference=a.ref, model_class=type(model).__name__,
               hf_run_dtype=str(next(model.parameters()).dtype).split(".")[-1], case_params_dtype=case_dtype,
               hf_shape=list(out.shape), ref_shape=list(ref.shape))
    if out.shape != ref.shape:
        res.update(ok=False, error="shape mismatch")
    else:
        d = (out - ref).abs()
        res.update(max_abs_diff=float(d.max()), mean_abs_diff=float(d.mean()),
                   ref_max_abs=float(ref.abs().max()),
                   argmax_agree=float((out.argmax(-1) == ref.argmax(-1)).float().mean()),
                   atol=a.atol, ok=bool(d.max() <= a.atol))
    print(json.dumps(res), flush=True)
    return res["ok"]


def main():
    if sys.argv[1:2] == ["--batch"] and len(sys.argv) == 3:
        runs = [line.rstrip("\n").split("\t") for line in open(sys.argv[2]) if line.strip()]
        if not runs:
            sys.exit(f"{sys.argv[2]}: no checks")
        sys.exit(0 if all([check(r) for r in runs]) else 1)
    sys.exit(0 if check(sys.argv[1:]) else 1)


if __name__ == "__main__":
    main()
