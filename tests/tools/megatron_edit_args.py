#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Rewrite a Megatron-LM model_optim_rng.pt with some args members changed.

Usage: megatron_edit_args.py SRC DST NAME=True|False|None|INT|FLOAT|'STR'|[INT,...]...

The args Namespace's state is a dict in data.pkl; the value after each
member name's string (past a memo put) is one opcode for the scalars edited
here (a list of ints: EMPTY_LIST through its APPENDS), replaced by the new
value's opcodes.  Protocol 2 (torch.save's) has no
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
    if v[:1] == "[" and v[-1:] == "]":
        return b"](" + b"".join(opcode(x.strip()) for x in v[1:-1].split(",") if x.strip()) + b"e"
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
        end = j + 1
        if ops[j][0].name == "EMPTY_LIST":
            k = end
            while ops[k][0].name in ("BINPUT", "LONG_BINPUT", "MEMOIZE"):
                k += 1
            if ops[k][0].name == "MARK":
                while ops[k][0].name != "APPENDS":
                    k += 1
                end = k + 1
        spans.append((ops[j][2], ops[end][2], arg))
missing = set(edits) - {s[2] for s in spans}
assert not missing, ("not in the pickle", missing)
for start, end, arg in sorted(spans, reverse=True):
    out[start:end] = opcode(edits[arg])
with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
    for n in names:
        zout.writestr(n, bytes(out) if n == pkl else zin.read(n))
