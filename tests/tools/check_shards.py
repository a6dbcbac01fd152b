#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Check the Hugging Face sharded views of a gatherfs mount.

Usage: check_shards.py MNT EXPECTED_TSV

- model.safetensors.index.json lists every non-alias tensor exactly once,
  pytorch_model.bin.index.json every tensor (aliases in their target's
  shard); metadata.total_size is the exact sum of the non-alias tensors'
  bytes; every file named in a weight_map exists, and every shard file is
  named in one;
- every safetensors shard passes check_safetensors.py's rules for its own
  tensors (checked here by reading the header and bytes);
- torch.load of each .bin shard, merged in index order, equals the expected
  tensors (names, dtypes, shapes, sha256), and a tied alias shares its
  target's storage.
"""
import hashlib
import json
import os
import struct
import sys

import torch

MNT, TSV = sys.argv[1], sys.argv[2]
rows = [line.rstrip("\n").split("\t") for line in open(TSV)]
exp = {r[0]: r for r in rows}
problems = []


def bad(msg):
    problems.append(msg)
    print("FAIL:", msg)


def nbytes(r):
    size = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
            "int16": 2, "int8": 1, "uint8": 1, "bool": 1}[r[1]]
    n = 1
    for d in json.loads(r[2]):
        n *= d
    return n * size


def digest(t):
    t = t.reshape(-1).contiguous()
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"").hexdigest()


st_index = json.load(open(os.path.join(MNT, "model.safetensors.index.json")))
bin_index = json.load(open(os.path.join(MNT, "pytorch_model.bin.index.json")))
shard_files = sorted(n for n in os.listdir(MNT) if n.startswith(("model-", "pytorch_model-")))

# safetensors shards
aliases = set()
seen = []
for fname in sorted(set(st_index["weight_map"].values())):
    with open(os.path.join(MNT, fname), "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    aliases |= set(json.loads(meta.get("gatherfs.aliases", "{}")))
    end = 0
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        b, en = e["data_offsets"]
        if b != end:
            bad(f"{fname}: {name} at {b}, want {end}")
        end = en
        r = exp.get(name)
        if r is None or hashlib.sha256(data[8 + n + b:8 + n + en]).hexdigest() != r[3]:
            bad(f"{fname}: {name} bytes differ")
        if st_index["weight_map"].get(name) != fname:
            bad(f"{name} is in {fname} but the index says {st_index['weight_map'].get(name)}")
        seen.append(name)
    if 8 + n + end != len(data):
        bad(f"{fname}: {len(data)} bytes, want {8 + n + end}")
want_st = [r[0] for r in rows if r[0] not in aliases]
if sorted(seen) != sorted(want_st) or sorted(st_index["weight_map"]) != sorted(want_st):
    bad("safetensors shards do not hold every non-alias tensor exactly once")
total = sum(nbytes(exp[k]) for k in want_st)
for label, idx in (("safetensors", st_index), ("bin", bin_index)):
    if idx["metadata"]["total_size"] != total:
        bad(f"{label} index total_size {idx['metadata']['total_size']}, want {total}")
named = set(st_index["weight_map"].values()) | set(bin_index["weight_map"].values())
if sorted(named) != shard_files:
    bad(f"shard files {shard_files} vs index {sorted(named)}")

# .bin shards through torch.load, merged
merged = {}
for fname in sorted(set(bin_index["weight_map"].values())):
    sd = torch.load(os.path.join(MNT, fname))
    for k, v in sd.items():
        if k in merged:
            bad(f"{k} in two .bin shards")
        if bin_index["weight_map"].get(k) != fname:
            bad(f"{k} is in {fname} but the bin index says {bin_index['weight_map'].get(k)}")
        merged[k] = v
if sorted(merged) != sorted(exp):
    bad(f".bin shards hold {len(merged)} tensors, want {len(exp)}")
for k, v in merged.items():
    r = exp.get(k)
    if r and (str(v.dtype).replace("torch.", "") != r[1] or list(v.shape) != json.loads(r[2])
              or digest(v) != r[3]):
        bad(f".bin shards: {k} differs")
for a in aliases:
    if a in merged:
        t = next(n for n in exp if n != a and exp[n][3] == exp[a][3] and n not in aliases)
        if merged[a].storage().data_ptr() != merged[t].storage().data_ptr():
            bad(f".bin shards: {a} does not share {t}'s storage")

if problems:
    print(f"FAIL {len(problems)} problems")
    sys.exit(1)
print(f"OK {len(shard_files)} shard files, {len(merged)} tensors, total_size {total}")
