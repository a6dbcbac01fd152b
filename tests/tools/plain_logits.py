#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Reference logits of a Hugging Face model directory, for check_loaders.py.

usage: plain_logits.py MODEL_DIR OUTDIR [MODEL_DIR OUTDIR...]   (inside the compat root)

Loads MODEL_DIR (the original plain files) with
AutoModelForCausalLM.from_pretrained in float32 and writes OUTDIR/input_ids.pt
(a fixed batch) and OUTDIR/reference_logits.pt (its logits): what a mount of
MODEL_DIR must reproduce exactly with the same loader.  Several pairs: one
process (one torch and transformers import) writes every OUTDIR.
"""
import os
import sys

import torch
from transformers import AutoModelForCausalLM

if len(sys.argv) < 3 or len(sys.argv) % 2 == 0:
    sys.exit(__doc__)
for i in range(1, len(sys.argv), 2):
    src, out = sys.argv[i:i + 2]
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    ids = torch.arange(32).reshape(2, 16) * 7 % model.config.vocab_size
    with torch.no_grad():
        logits = model(ids).logits
    os.makedirs(out, exist_ok=True)
    torch.save(ids, os.path.join(out, "input_ids.pt"))
    torch.save(logits, os.path.join(out, "reference_logits.pt"))
    del model
