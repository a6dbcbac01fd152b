#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Write plain model file cases for the plain importer's tests.

usage: make_plain.py good OUTDIR
       make_plain.py bad GOODDIR OUTDIR MODE...

`good` writes, under OUTDIR, with this machine's torch (torch.save) and a
standard-library safetensors writer (struct + json; the format is an 8-byte
little-endian header length, a JSON header, the data):
  views/pytorch_model.bin     views into shared storages: storage offsets,
                              transposed, sliced with steps, permuted,
                              expanded (stride 0) views, a tied pair, an
                              overlapping different view, every dtype
  sharded_st/                 model.safetensors.index.json + 3 shards, every
                              safetensors dtype gatherfs supports, header
                              order != name order != data order, an empty
                              and a 0-d tensor
  sharded_bin/                pytorch_model.bin.index.json + 2 torch.save
                              shards, a tied pair inside one shard

`bad` copies case GOODDIR (sharded_st or views) to OUTDIR/MODE and breaks
it, for each MODE (below); the importer must refuse it with one line naming
the file.
"""
import json
import os
import shutil
import struct
import sys

import torch

ST_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
             torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32",
             torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
             torch.complex64: "C64"}


def raw(t):
    t = t.contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def write_safetensors(path, tensors, data_order=None):
    """tensors: list of (name, tensor) in header order; data laid out in data_order (names)."""
    order = data_order or [n for n, _ in tensors]
    by_name = dict(tensors)
    offs, blob = {}, b""
    for n in order:
        b = raw(by_name[n])
        offs[n] = (len(blob), len(blob) + len(b))
        blob += b
    header = {"__metadata__": {"format": "pt"}}
    for n, t in tensors:
        header[n] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape),
                     "data_offsets": list(offs[n])}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blob)


def write_index(path, weight_map, total):
    with open(path, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2,
                  sort_keys=True)


def good(out):
    g = torch.Generator().manual_seed(14)
    os.makedirs(f"{out}/views", exist_ok=True)
    base = torch.randn(600, generator=g)
    other = torch.randn(4, 5, 6, generator=g)
    sd = {
        "a.offset_view": base[10:110].view(10, 10),
        "b.transposed": base[0:200].view(10, 20).t(),
        "c.stepped": base[0:300].view(30, 10)[::3, 2:7],
        "e.overlapping": base[50:150].view(10, 10),
        "f.expanded": torch.arange(5.0).view(1, 5).expand(4, 5),
        "s.permuted": other.permute(2, 0, 1),
        "t.same_offset_1d": base[10:110],
        "g.int64": torch.tensor([2 ** 40 + 1, -3, 2 ** 53 + 1], dtype=torch.int64),
        "h.bool": torch.tensor([True, False, True]),
        "i.scalar": torch.tensor(3.5),
        "j.empty": torch.zeros(0, 3),
        "k.bf16": torch.randn(7, 3, generator=g).to(torch.bfloat16),
        "l.f16": torch.randn(5, generator=g).to(torch.float16)[1:],
        "m.f64": torch.randn(2, 3, generator=g).double().t(),
        "n.u8": torch.arange(250, 256, dtype=torch.uint8),
        "o.i8": torch.tensor([-128, 127], dtype=torch.int8),
        "p.i16": torch.tensor([-32768, 7], dtype=torch.int16),
        "q.i32": torch.tensor([[1, 2], [3, 4]], dtype=torch.int32).t(),
        "r.c64": torch.randn(3, generator=g, dtype=torch.complex64),
        "u.param": torch.nn.Parameter(torch.randn(3, generator=g)),
    }
    sd["d.tied"] = sd["a.offset_view"]
    torch.save(sd, f"{out}/views/pytorch_model.bin")

    # sharded safetensors: header order (and data order) differ from name order
    os.makedirs(f"{out}/sharded_st", exist_ok=True)
    shards = [
        [("z.f32", torch.randn(8, 4, generator=g)), ("a.bf16", torch.randn(6, generator=g).to(torch.bfloat16)),
         ("m.f16", torch.randn(3, 3, generator=g).half()), ("b.f64", torch.randn(2, generator=g).double())],
        [("y.i64", torch.tensor([2 ** 62, -1])), ("c.i32", torch.tensor([7, -7], dtype=torch.int32)),
         ("x.i16", torch.tensor([1, -2, 3], dtype=torch.int16)), ("d.i8", torch.tensor([-1], dtype=torch.int8)),
         ("w.u8", torch.tensor([200, 1], dtype=torch.uint8)), ("e.bool", torch.tensor([False, True])),
         ("v.empty", torch.zeros(2, 0)), ("f.scalar", torch.tensor(-0.0))],
        [("u.c64", torch.randn(2, 2, generator=g, dtype=torch.complex64)),
         ("t.big", torch.randn(64, 33, generator=g))],
    ]
    wm, total = {}, 0
    for i, tensors in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(f"{out}/sharded_st/{name}", tensors,
                          data_order=[n for n, _ in reversed(tensors)])
        for n, t in tensors:
            wm[n] = name
            total += len(raw(t))
    write_index(f"{out}/sharded_st/model.safetensors.index.json", wm, total)
    with open(f"{out}/sharded_st/config.json", "w") as f:
        json.dump({"model_type": "test"}, f)

    # sharded .bin, a tied pair in the second shard
    os.makedirs(f"{out}/sharded_bin", exist_ok=True)
    emb = torch.randn(16, 4, generator=g)
    parts = [{"layer.0.w": torch.randn(4, 4, generator=g), "layer.0.b": torch.randn(4, generator=g)},
             {"embed.weight": emb, "lm_head.weight": emb, "layer.1.w": torch.randn(4, 4, generator=g).t()}]
    wm = {}
    for i, part in enumerate(parts):
        name = f"pytorch_model-{i + 1:05d}-of-{len(parts):05d}.bin"
        torch.save(part, f"{out}/sharded_bin/{name}")
        wm.update({k: name for k in part})
    write_index(f"{out}/sharded_bin/pytorch_model.bin.index.json", wm, 0)


def read_header(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    return data, n, json.loads(data[8:8 + n])


def rewrite_header(path, fn):
    """Apply fn to the header dict of a safetensors file, keeping its length."""
    data, n, h = read_header(path)
    fn(h)
    text = json.dumps(h).encode()
    assert len(text) <= n, "header grew"
    with open(path, "wb") as f:
        f.write(data[:8] + text + b" " * (n - len(text)) + data[8 + n:])


def bad(src, out, mode):
    shutil.copytree(src, out)
    shard1 = f"{out}/model-00001-of-00003.safetensors"
    index = f"{out}/model.safetensors.index.json"
    data, n, h = read_header(shard1) if os.path.exists(shard1) else (b"", 0, {})
    if mode == "truncated-header":
        open(shard1, "wb").write(data[:8 + n // 2])
    elif mode == "huge-header":
        open(shard1, "wb").write(struct.pack("<Q", 1 << 40) + data[8:])
    elif mode == "past-eof":
        open(shard1, "wb").write(data[:-16])
    elif mode == "trailing":
        open(shard1, "wb").write(data + b"\0" * 8)
    elif mode == "overlap":
        def f(h):
            b, e = h["a.bf16"]["data_offsets"]
            h["a.bf16"]["data_offsets"] = [b - 2, e - 2]
        rewrite_header(shard1, f)
    elif mode == "badsize":
        def f(h):
            h["z.f32"]["shape"] = [8, 5]
        rewrite_header(shard1, f)
    elif mode == "bad-dtype":
        def f(h):
            h["z.f32"]["dtype"] = "U32"
        rewrite_header(shard1, f)
    elif mode == "c128":
        def f(h):
            h["b.f64"]["dtype"] = "C128"
            h["b.f64"]["shape"] = [1]
        rewrite_header(shard1, f)
    elif mode == "not-json":
        open(shard1, "wb").write(data[:8] + b"{" + b"x" * (n - 1) + data[8 + n:])
    elif mode == "missing-shard":
        os.unlink(f"{out}/model-00002-of-00003.safetensors")
    elif mode == "index-extra":
        idx = json.load(open(index))
        idx["weight_map"]["not.there"] = "model-00002-of-00003.safetensors"
        json.dump(idx, open(index, "w"))
    elif mode == "index-missing":
        idx = json.load(open(index))
        del idx["weight_map"]["y.i64"]
        json.dump(idx, open(index, "w"))
    elif mode == "index-wrong-shard":
        idx = json.load(open(index))
        idx["weight_map"]["y.i64"] = "model-00003-of-00003.safetensors"
        json.dump(idx, open(index, "w"))
    elif mode == "index-path":
        idx = json.load(open(index))
        idx["weight_map"]["y.i64"] = "../model-00002-of-00003.safetensors"
        json.dump(idx, open(index, "w"))
    elif mode == "bin-truncated":
        p = f"{out}/pytorch_model.bin"
        data = open(p, "rb").read()
        open(p, "wb").write(data[:len(data) // 2])
    elif mode == "bin-not-tensor":
        torch.save({"w": torch.zeros(2), "step": 3}, f"{out}/pytorch_model.bin")
    elif mode == "bin-fragmented":
        torch.save({"w": torch.zeros(600, 600).t()}, f"{out}/pytorch_model.bin")
    elif mode == "bin-legacy":
        torch.save({"w": torch.zeros(2)}, f"{out}/pytorch_model.bin",
                   _use_new_zipfile_serialization=False)
    else:
        sys.exit(f"unknown mode {mode}")


if sys.argv[1] == "good":
    good(sys.argv[2])
else:
    for m in sys.argv[4:]:
        bad(sys.argv[2], os.path.join(sys.argv[3], m), m)
