#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Write hand-made layouts (docs/layout-json.md) for the mount tests.

usage: make_layouts.py OUTDIR

OUTDIR/src/*.bin     source files: float32/float16/bfloat16/float64 values
OUTDIR/root/         a checkpoint root to pass through: regular files, a
                     symlink, a dangling symlink, a subdirectory, and a stale
                     pytorch_model.bin that the virtual one must hide
OUTDIR/special.json  every dtype, empty and scalar tensors, names that need
                     escaping ('/', '%', control bytes, ".", "..", "INDEX",
                     UTF-8), names longer than 255 bytes, an alias placed
                     before its target, zero pieces
OUTDIR/special.{default,bf16}.tsv   expected name (%-quoted), dtype, shape, sha256
OUTDIR/special.aliases.tsv          its aliases: alias, target (%-quoted)
OUTDIR/stress.json   200 float32 tensors of scattered pieces (about 40 MiB)
OUTDIR/zip64.json    a 4 GiB tensor of zeros, then a small one
"""
import hashlib
import json
import os
import random
import sys
import urllib.parse

import torch

out = sys.argv[1]
rng = random.Random(1234)
torch.manual_seed(1234)
os.makedirs(os.path.join(out, "src"), exist_ok=True)
os.makedirs(os.path.join(out, "root", "subdir"), exist_ok=True)

# Sources: one region per element type, so that every value is finite.
regions = {}
blobs = []
for name, dtype, n in (("f32", torch.float32, 2 << 20), ("f16", torch.float16, 4096),
                       ("bf16", torch.bfloat16, 4096), ("f64", torch.float64, 4096)):
    t = torch.randn(n, dtype=torch.float32).to(dtype)
    b = (t.view(torch.int16) if dtype == torch.bfloat16 else t).numpy().tobytes()
    regions[name] = (sum(len(x) for x in blobs), len(b))
    blobs.append(b)
src = b"".join(blobs)
with open(os.path.join(out, "src", "a.bin"), "wb") as f:
    f.write(src)
sources = [{"path": "src/a.bin", "size": len(src)}]

root = os.path.join(out, "root")
for name, text in (("config.json", '{"model_type": "tiny"}\n'), ("latest", "global_step7"),
                   ("tokenizer.model", "x" * 70000), ("pytorch_model.bin", "stale\n"),
                   ("subdir/inner.txt", "not passed through\n")):
    with open(os.path.join(root, name), "w") as f:
        f.write(text)
for link, target in (("link.json", "config.json"), ("dangling", "nowhere")):
    if not os.path.lexists(os.path.join(root, link)):
        os.symlink(target, os.path.join(root, link))

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64, "complex64": torch.complex64, "complex128": torch.complex128,
          "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8,
          "uint8": torch.uint8, "bool": torch.bool}
SIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "complex64": 8,
        "complex128": 16, "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def tensor(name, dtype, shape, region, offset=0, zeros_at=None):
    """A tensor read from a region, split into pieces, optionally with zeros."""
    nbytes = numel(shape) * SIZE[dtype]
    base = regions[region][0] + offset
    pieces, pos = [], 0
    while pos < nbytes:
        n = min(nbytes - pos, rng.choice([4, 8, 24, 64, 100, 256, 4096]) * SIZE[dtype])
        if zeros_at is not None and pos == zeros_at:
            pieces.append({"zero": n})
        else:
            pieces.append({"source": 0, "offset": base + pos, "length": n})
        pos += n
    return {"name": name, "dtype": dtype, "shape": shape, "pieces": pieces}


def content(t):
    b = bytearray()
    for p in t["pieces"]:
        b += bytes(p["zero"]) if "zero" in p else src[p["offset"]:p["offset"] + p["length"]]
    return bytes(b)


special = [
    {"name": "tied_first", "alias_of": "w"},
    tensor("a/b/c", "float32", [4, 8], "f32", 0),
    tensor("100%", "float32", [3], "f32", 4000),
    tensor("INDEX", "int64", [2], "f32", 8000),
    tensor(".", "float16", [5], "f16", 0),
    tensor("..", "bfloat16", [7], "bf16", 0),
    tensor("empty", "float32", [0, 16], "f32"),
    tensor("empty_int", "int64", [0], "f32"),
    tensor("scalar", "float64", [], "f64", 64),
    tensor("tab\tand\nnewline", "int32", [3, 1], "f32", 12000),
    tensor("\u00fcn\u00efc\u00f6de", "float32", [2], "f32", 16000),
    tensor("w", "float32", [16, 16], "f32", 20000, zeros_at=0),
    tensor("f64", "float64", [2, 3], "f64", 128),
    tensor("c64", "complex64", [3], "f32", 30000),
    tensor("c128", "complex128", [2], "f64", 512),
    tensor("i16", "int16", [5], "f32", 32000),
    tensor("i8", "int8", [6], "f32", 33000),
    tensor("u8", "uint8", [7], "f32", 34000),
    {"name": "mask", "dtype": "bool", "shape": [2, 2], "pieces": [{"zero": 4}]},
    {"name": "lm_head.weight", "alias_of": "a/b/c"},
    # longer than 255 bytes as tensors/ names: cut, with a hash suffix
    tensor("long." * 60 + "weight", "float32", [2], "f32", 36000),
    tensor("long." * 60 + "bias", "float32", [2], "f32", 36100),
    tensor("p" * 233 + "/%" + "\u00fc" * 20, "float32", [3], "f32", 36200),
    {"name": "tied." * 55 + "weight", "alias_of": "long." * 60 + "weight"},
]


def write_layout(name, tensors, root_dir=None):
    layout = {"gatherfs_layout": 1, "format": "json", "info": f"mount test {name}",
              "base_dir": out, "sources": sources, "tensors": tensors}
    if root_dir:
        layout["root_dir"] = root_dir
    with open(os.path.join(out, name + ".json"), "w") as f:
        json.dump(layout, f, indent=1)


def raw(t):
    t = t.contiguous()
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()


write_layout("special", special, root)
by_name = {t["name"]: t for t in special}
# the aliases the layout declares: the truth check_mount.py holds INDEX to
with open(os.path.join(out, "special.aliases.tsv"), "w") as f:
    for t in special:
        if "alias_of" in t:
            f.write(f"{urllib.parse.quote(t['name'], safe='')}\t{urllib.parse.quote(t['alias_of'], safe='')}\n")
for mode in ("default", "bf16"):
    with open(os.path.join(out, f"special.{mode}.tsv"), "w") as f:
        for t in special:
            d = by_name[t.get("alias_of", t["name"])]
            b = content(d)
            v = torch.frombuffer(bytearray(b), dtype=DTYPES[d["dtype"]]) if b else \
                torch.empty(0, dtype=DTYPES[d["dtype"]])
            v = v.reshape(d["shape"])
            if mode == "bf16" and v.is_floating_point():
                v = v.to(torch.bfloat16)
            dt = str(v.dtype).replace("torch.", "")
            f.write(f"{urllib.parse.quote(t['name'], safe='')}\t{dt}\t{list(v.shape)}\t{hashlib.sha256(raw(v)).hexdigest()}\n")

stress = []
for i in range(200):
    shape = [rng.randint(1, 300), rng.randint(1, 200)]
    off = rng.randrange(0, regions["f32"][1] - numel(shape) * 4, 4)
    stress.append(tensor(f"layer.{i}.weight", "float32", shape, "f32", off,
                         zeros_at=0 if i % 7 == 0 else None))
    if i % 50 == 49:
        stress.append({"name": f"layer.{i}.tied", "alias_of": f"layer.{i - 1}.weight"})
write_layout("stress", stress, root)

big = 4096 << 20  # 4 GiB: past the 0xFFFFFFFF limit of 32-bit zip fields
write_layout("zip64", [
    {"name": "big", "dtype": "int16", "shape": [big // 2], "pieces": [{"zero": big}]},
    tensor("after", "float32", [2], "f32", 0),
])
with open(os.path.join(out, "zip64.after"), "wb") as f:
    f.write(src[:8])
