#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The reference reading of plain model files, for the plain importer's tests.

usage: plain_ref.py tsv SRC OUT [SRC OUT...]
                                        expected tables of SRC in OUT.default.tsv
                                        and OUT.bf16.tsv, its tied pairs in
                                        OUT.aliases.tsv: one line per key in
                                        the order gatherfs documents,
                                        name<TAB>dtype<TAB>[shape]<TAB>sha256
                                        (bf16: floating-point tensors as
                                        torch's .to(torch.bfloat16) rounds them);
                                        several pairs: one process (one torch
                                        import) writes every table
       plain_ref.py aliases MNT SRC     the mount's tied aliases (tensors/INDEX,
                                        and storages shared in torch.load of
                                        MNT/pytorch_model.bin) are exactly the
                                        tied pairs of SRC

SRC is a directory (model.safetensors, model.safetensors.index.json,
pytorch_model.bin, pytorch_model.bin.index.json, adapter_model.safetensors,
adapter_model.bin: the first present) or one such file.  The values come from
the real readers: torch.load (weights_only where available) for torch files,
and for safetensors the safetensors library's safe_open where it is
installed (as in the compat root), else the format itself (8-byte header
length, JSON header, data at data_offsets) read with the standard library
into torch.frombuffer; the key order is always the header's.
Order: a torch file's dict order, a safetensors header's order, shards in
file name order.  A tied pair: two keys of one torch file viewing one storage
at the same offset with the same dtype, shape and strides (the later one is
the alias).
"""
import hashlib
import inspect
import json
import os
import struct
import sys
import urllib.parse

import torch

DIR_FILES = ["model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
             "pytorch_model.bin.index.json", "adapter_model.safetensors", "adapter_model.bin"]
ST = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
      "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
      "U8": torch.uint8, "BOOL": torch.bool, "C64": torch.complex64}
FLOATS = {torch.float64, torch.float32, torch.float16, torch.bfloat16}


def load_st(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        dt = ST[e["dtype"]]
        if end > b:
            t = torch.frombuffer(bytearray(data[8 + n + b:8 + n + end]), dtype=dt).reshape(e["shape"])
        else:
            t = torch.empty(e["shape"], dtype=dt)
        out.append((name, t))
    try:
        from safetensors import safe_open
    except ImportError:
        return out, {}
    with safe_open(path, "pt") as f:
        return [(name, f.get_tensor(name)) for name, _ in out], {}


def view_key(t):
    return (t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr(),
            t.storage_offset(), t.dtype, tuple(t.shape), t.stride())


def load_bin(path):
    kw = {"weights_only": True} if "weights_only" in inspect.signature(torch.load).parameters else {}
    sd = torch.load(path, map_location="cpu", **kw)
    first, aliases = {}, {}
    for name, t in sd.items():
        k = view_key(t)
        if k in first:
            aliases[name] = first[k]
        else:
            first[k] = name
    return list(sd.items()), aliases


def load_file(path):
    if path.endswith(".index.json"):
        with open(path) as f:
            wm = json.load(f)["weight_map"]
        out, aliases = [], {}
        for shard in sorted(set(wm.values())):
            items, al = load_file(os.path.join(os.path.dirname(path), shard))
            out += items
            aliases.update(al)
        return out, aliases
    with open(path, "rb") as f:
        zip_ = f.read(4) == b"PK\3\4"
    return load_bin(path) if zip_ else load_st(path)


def load(src):
    if os.path.isdir(src):
        for n in DIR_FILES:
            if os.path.isfile(os.path.join(src, n)):
                return load_file(os.path.join(src, n))
        sys.exit(f"{src}: no plain model file")
    return load_file(src)


def digest(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return hashlib.sha256(t.numpy().tobytes()).hexdigest()


def tsv(src, out):
    items, aliases = load(src)
    with open(f"{out}.aliases.tsv", "w") as f:
        for alias, target in aliases.items():
            f.write(f"{urllib.parse.quote(alias, safe='')}\t{urllib.parse.quote(target, safe='')}\n")
    for want in ("default", "bf16"):
        with open(f"{out}.{want}.tsv", "w") as f:
            for name, t in items:
                t = t.detach()
                if want == "bf16" and t.dtype in FLOATS:
                    t = t.to(torch.bfloat16)
                quoted = urllib.parse.quote(name, safe="")
                f.write(f"{quoted}\t{str(t.dtype).replace('torch.', '')}\t{list(t.shape)}\t{digest(t)}\n")


def aliases(mnt, src):
    _, want = load(src)
    with open(os.path.join(mnt, "tensors", "INDEX"), "rb") as f:
        rows = [l.rstrip(b"\n").split(b"\t") for l in f][1:]
    got = {urllib.parse.unquote(r[0].decode()): urllib.parse.unquote(r[4].decode())
           for r in rows if r[4] != b"-"}
    ok = True
    if got != want:
        print(f"FAIL: tensors/INDEX aliases {got}, the source ties {want}")
        ok = False
    sd, _ = load_bin(os.path.join(mnt, "pytorch_model.bin"))
    owner = {}
    for name, t in sd:
        p = view_key(t)[0]
        if p in owner and want.get(name) != owner[p]:
            print(f"FAIL: {name} shares {owner[p]}'s storage in the mount, the source does not tie them")
            ok = False
        owner.setdefault(p, name)
    if not ok:
        sys.exit(1)
    print(f"OK {len(want)} tied aliases, no other shared storage")


if sys.argv[1] == "tsv" and len(sys.argv) >= 4 and len(sys.argv) % 2 == 0:
    for i in range(2, len(sys.argv), 2):
        tsv(sys.argv[i], sys.argv[i + 1])
elif sys.argv[1] == "aliases":
    aliases(sys.argv[2], sys.argv[3])
else:
    sys.exit(__doc__)
