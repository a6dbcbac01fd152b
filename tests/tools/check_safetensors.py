#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Check a .safetensors file against the format rules and expected tensors.

Usage: check_safetensors.py FILE EXPECTED_TSV      (standard library only;
                                                    numpy.memmap if present)

Format rules (safetensors' own validation, and what loaders rely on):
- 8-byte little-endian header length N, then N bytes of JSON, padded with
  spaces to a multiple of 8, starting with '{';
- every entry has a known dtype string, a shape of non-negative ints and
  data_offsets [begin, end] with end - begin = numel * itemsize;
- sorted by offset, the data regions tile [0, data size) with no gap and no
  overlap, and the file length is exactly 8 + N + data size;
- __metadata__ (if present) maps strings to strings and has format "pt".
Contents: every tensor of EXPECTED_TSV (name, dtype, shape, sha256 of the
contiguous bytes) that is not a tied alias is present with those values,
read through mmap at the header's offsets; __metadata__["gatherfs.aliases"]
equals EXPECTED_TSV's alias table (tests/tools/alias_table.py, the truth),
and those aliases are exactly the omitted names.
"""
import hashlib
import json
import mmap
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alias_table import alias_table  # noqa: E402

SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
         "U8": 1, "BOOL": 1, "C64": 8, "C128": 16}
TORCH = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
         "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
         "bool": "BOOL", "complex64": "C64", "complex128": "C128"}

path, tsv = sys.argv[1], sys.argv[2]
problems = []


def bad(msg):
    problems.append(msg)
    print("FAIL:", msg)


size = os.path.getsize(path)
with open(path, "rb") as f:
    mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
n = struct.unpack("<Q", mm[:8])[0]
if n % 8 or 8 + n > size:
    bad(f"header length {n} (file {size} bytes)")
head = mm[8:8 + n]
if not head.startswith(b"{") or head.rstrip(b" ") != head.rstrip(b" ").rstrip():
    bad("header does not start with '{' or is padded with something other than spaces")
header = json.loads(head)
meta = header.pop("__metadata__", {})
if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
    bad("__metadata__ values must be strings")
if meta.get("format") != "pt":
    bad(f"__metadata__ format is {meta.get('format')!r}")
aliases = json.loads(meta.get("gatherfs.aliases", "{}"))
want_aliases = alias_table(tsv)
if aliases != want_aliases:
    bad(f"__metadata__ gatherfs.aliases {aliases}, the truth's {want_aliases}")

spans = []
for name, e in header.items():
    numel = 1
    for d in e["shape"]:
        if not isinstance(d, int) or d < 0:
            bad(f"{name}: shape {e['shape']}")
        numel *= d
    b, end = e["data_offsets"]
    if e["dtype"] not in SIZES or end - b != numel * SIZES[e["dtype"]]:
        bad(f"{name}: dtype {e['dtype']}, offsets {b}..{end} for {numel} elements")
    spans.append((b, end, name))
spans.sort()
pos = 0
for b, end, name in spans:
    if b != pos:
        bad(f"{name}: starts at {b}, want {pos} (gap or overlap)")
    pos = end
if 8 + n + pos != size:
    bad(f"file is {size} bytes, header + data is {8 + n + pos}")

rows = [line.rstrip("\n").split("\t") for line in open(tsv)]
want = {r[0]: r for r in rows if r[0] not in want_aliases}
if set(header) != set(want):
    bad(f"tensors {sorted(set(header) ^ set(want))[:5]} missing or unexpected")
if set(aliases) - {r[0] for r in rows} or any(v not in header for v in aliases.values()):
    bad(f"aliases {aliases} do not name known tensors")
base = 8 + n
try:
    import numpy
    arr = numpy.memmap(path, dtype=numpy.uint8, mode="r")
except ImportError:
    arr = None
for name, (_, dtype, shape, sha) in want.items():
    e = header.get(name)
    if e is None:
        continue
    if e["dtype"] != TORCH[dtype] or e["shape"] != json.loads(shape):
        bad(f"{name}: {e['dtype']} {e['shape']}, want {dtype} {shape}")
    b, end = e["data_offsets"]
    if hashlib.sha256(mm[base + b:base + end]).hexdigest() != sha:
        bad(f"{name}: bytes differ")
    if arr is not None and hashlib.sha256(arr[base + b:base + end].tobytes()).hexdigest() != sha:
        bad(f"{name}: bytes differ through numpy.memmap")

if problems:
    print(f"FAIL {path}: {len(problems)} problems")
    sys.exit(1)
print(f"OK {os.path.basename(path)}: {len(header)} tensors, {len(aliases)} aliases, header {n} bytes")
