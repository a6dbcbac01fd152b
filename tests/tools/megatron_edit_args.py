#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Rewrite a Megatron-LM model_optim_rng.pt with some args members changed.

Usage: megatron_edit_args.py SRC DST NAME=True|False|None|INT|FLOAT|'STR'...

The args Namespace's state is a dict in data.pkl; the value after each
member name's string (past a memo put) is one opcode for the scalars edited
here, replaced by the new value's opcode.  Protocol 2 (torch.save's) has no
frames, so nothing else moves.  The archive is written again (stored, not
compressed) with its CRC-32s recomputed, as if the run had saved it so.
"""
import pickletools
import struct
import sys
import zipfile

src, dst = sys.argv[1:3]
edits = dict(e.split("=", 1) for e in sys.argv[3:])


def opcode(v):
    if v in ("True", "False", "None"):
        return {"True": b"\x88", "False": b"\x89", "None": b"N"}[v]
    if v[:1] == "'" and v[-1:] == "'":
        b = v[1:-1].encode()
        return b"X" + struct.pack("<I", len(b)) + b
    if "." in v:
        return b"G" + struct.pack(">d", float(v))
    return b"J" + struct.pack("<i", int(v))


zin = zipfile.ZipFile(src)
names = zin.namelist()
pkl = next(n for n in names if n.endswith("/data.pkl"))
data = zin.read(pkl)
ops = list(pickletools.genops(data))
out = bytearray(data)
spans = []  # (start, end, name) of each edited value, applied from the end backwards
for i, (op, arg, pos) in enumerate(ops):
    if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8") and arg in edits and \
            arg not in [s[2] for s in spans]:
        j = i + 1
        while ops[j][0].name in ("BINPUT", "LONG_BINPUT", "MEMOIZE"):
            j += 1
        spans.append((ops[j][2], ops[j + 1][2], arg))
missing = set(edits) - {s[2] for s in spans}
assert not missing, ("not in the pickle", missing)
for start, end, arg in sorted(spans, reverse=True):
    out[start:end] = opcode(edits[arg])
with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
    for n in names:
        zout.writestr(n, bytes(out) if n == pkl else zin.read(n))
