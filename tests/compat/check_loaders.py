#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Load a gatherfs mount with the tools people really use (run inside the
compat chroot: torch 2.x, safetensors, transformers).

Usage: check_loaders.py MNT EXPECTED_TSV [CASE_DIR]
       check_loaders.py --batch LIST

LIST has one mount a line, tab-separated: LABEL, MNT, EXPECTED_TSV, CASE_DIR
(may be empty) and UNTIED (1: no tied alias expected, as GFS_EXPECT_UNTIED=1
says for the single-mount form).  Every mount is checked in this one process
(torch and transformers imported once), each under a "== LABEL" line and
ending with a "fixture LABEL: N passed, N failed" line; a mount with no
check, or an exception, fails that mount and the next is checked.  For each mount:

- torch.load(MNT/pytorch_model.bin) with the default weights_only=True, with
  mmap=True and with map_location="meta": names, order, dtypes, shapes and
  the sha256 of every tensor equal EXPECTED_TSV; the tied alias shares its
  target's storage;
- safetensors.safe_open(MNT/model.safetensors, "pt"): every tensor equals
  EXPECTED_TSV (aliases are omitted), metadata has format "pt" and lists them;
- if CASE_DIR holds input_ids.pt and reference_logits.pt (the Hugging Face
  cases): AutoModelForCausalLM.from_pretrained(MNT) in fp32, from
  model.safetensors and again with use_safetensors=False (the .bin path,
  mmap + weights_only), reproduces the reference logits exactly (max abs
  difference 0) and, unless UNTIED, keeps lm_head tied to the embedding.
Prints "ok - ..." lines and a final "N passed, N failed"; exits 1 if any check
(of any mount) failed.
"""
import hashlib
import json
import os
import sys
import traceback

import torch

results = []


def check(cond, what):
    results.append(bool(cond))
    print(("ok - " if cond else "not ok - ") + what, flush=True)


def expected(tsv):
    rows = []
    for line in open(tsv):
        name, dtype, shape, sha = line.rstrip("\n").split("\t")
        rows.append((name, dtype, json.loads(shape), sha))
    return rows


def digest(t):
    t = t.reshape(-1).contiguous()
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"").hexdigest()


def same_rows(sd, rows, what, with_values=True):
    got = [(k, str(v.dtype).replace("torch.", ""), list(v.shape)) for k, v in sd.items()]
    want = [(n, d, s) for n, d, s, _ in rows]
    check(got == want, f"{what}: names, order, dtypes, shapes")
    if with_values:
        bad = [n for n, _, _, sha in rows if n in sd and digest(sd[n]) != sha]
        check(not bad, f"{what}: values of {len(rows)} tensors" + (f" (differ: {bad[:5]})" if bad else ""))


def tied_pairs(rows, untied):
    # A DCP checkpoint stores a tied pair twice (no storage dedup): no alias.
    if untied:
        return []
    names = [r[0] for r in rows]
    pairs = []
    for a, b in (("lm_head.weight", "embed.weight"), ("lm_head.weight", "model.embed_tokens.weight")):
        if a in names and b in names:
            pairs.append((a, b))
    return pairs


def check_mount(mnt, tsv, case, untied):
    """Every check of the docstring on the mount at MNT."""
    rows = expected(tsv)
    binp = os.path.join(mnt, "pytorch_model.bin")
    stp = os.path.join(mnt, "model.safetensors")

    if os.path.exists(binp):
        for label, kw in (("torch.load (weights_only default)", {}),
                          ("torch.load mmap=True", {"mmap": True}),
                          ("torch.load weights_only=True mmap=True", {"mmap": True, "weights_only": True})):
            sd = torch.load(binp, **kw)
            same_rows(sd, rows, label)
            for a, b in tied_pairs(rows, untied):
                check(sd[a].untyped_storage().data_ptr() == sd[b].untyped_storage().data_ptr(),
                      f"{label}: {a} shares {b}'s storage")
            del sd
        sd = torch.load(binp, map_location="meta")
        same_rows(sd, rows, "torch.load map_location=meta", with_values=False)
        check(all(v.device.type == "meta" for v in sd.values()), "map_location=meta gives meta tensors")
        del sd

    if os.path.exists(stp):
        from safetensors import safe_open
        with safe_open(stp, "pt") as f:
            meta = f.metadata()
            keys = list(f.keys())
            tensors = {k: f.get_tensor(k) for k in keys}
        aliases = json.loads(meta.get("gatherfs.aliases", "{}"))
        want = [r for r in rows if r[0] not in aliases]
        check(meta.get("format") == "pt", f"safetensors metadata format pt ({meta})")
        check(set(aliases) == {a for a, _ in tied_pairs(rows, untied)}, f"safetensors lists the tied aliases {aliases}")
        check(sorted(keys) == sorted(r[0] for r in want), "safetensors: every non-alias tensor present")
        bad = [n for n, d, s, sha in want
               if str(tensors[n].dtype).replace("torch.", "") != d or list(tensors[n].shape) != s
               or digest(tensors[n]) != sha]
        check(not bad, f"safe_open: {len(want)} tensors exact" + (f" (differ: {bad[:5]})" if bad else ""))
        del tensors
        from safetensors.torch import load_file
        lf = load_file(stp)
        check(all(digest(lf[n]) == sha for n, _, _, sha in want), "safetensors.torch.load_file exact")
        del lf

    if case and os.path.exists(os.path.join(case, "reference_logits.pt")):
        from transformers import AutoModelForCausalLM
        ids = torch.load(os.path.join(case, "input_ids.pt"))
        ref = torch.load(os.path.join(case, "reference_logits.pt"))
        variants = [("from_pretrained (default)", {})]
        if os.path.exists(binp) or os.path.exists(os.path.join(mnt, "pytorch_model.bin.index.json")):
            variants.append(("from_pretrained use_safetensors=False", {"use_safetensors": False}))
        for label, kw in variants:
            model = AutoModelForCausalLM.from_pretrained(mnt, torch_dtype=torch.float32, **kw)
            model.eval()
            with torch.no_grad():
                logits = model(ids).logits
            diff = (logits.float() - ref.float()).abs().max().item()
            check(diff == 0.0, f"{label}: logits max abs diff {diff}")
            if not untied:
                check(model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(),
                      f"{label}: lm_head tied to embed_tokens")
            del model


print(f"torch {torch.__version__}", flush=True)
if sys.argv[1:2] == ["--batch"] and len(sys.argv) == 3:
    mounts = []
    for line in open(sys.argv[2]):
        label, mnt, tsv, case, untied = line.rstrip("\n").split("\t")
        mounts.append((label, mnt, tsv, case or None, untied == "1"))
    check(mounts, f"{sys.argv[2]} lists mounts")
    bad_mounts = []
    for label, mnt, tsv, case, untied in mounts:
        print(f"== {label}", flush=True)
        first = len(results)
        try:
            check_mount(mnt, tsv, case, untied)
        except Exception:
            traceback.print_exc()
            check(False, f"{label}: no exception")
        if len(results) == first:
            check(False, f"{label}: no check ran")
        mine = results[first:]
        print(f"fixture {label}: {sum(mine)} passed, {len(mine) - sum(mine)} failed", flush=True)
        if not all(mine):
            bad_mounts.append(label)
    if bad_mounts:
        print(f"failed mounts: {bad_mounts}", flush=True)
elif 3 <= len(sys.argv) <= 4:
    check_mount(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None,
                os.environ.get("GFS_EXPECT_UNTIED") == "1")
else:
    sys.exit(__doc__)

passed = sum(results)
print(f"{passed} passed, {len(results) - passed} failed")
sys.exit(0 if results and all(results) else 1)
