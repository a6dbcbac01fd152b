#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Make a broken copy of a DCP checkpoint directory for the bad-input tests.

Usage: make_bad_dcp.py SRC OUT MODE

MODE is one of
  missing       remove the last .distcp file
  truncated     cut the last 100 bytes of the last .distcp file
  zstd-corrupt  overwrite the header of the first item's zstd frame
  gap           the first tensor one row larger than its chunks (a gap)
  overlap       the second chunk of the first tensor one row earlier (overlap)
  badsize       the first chunk one row longer than the tensor it holds
  garbage       .metadata is not a pickle
  dupitem       the first storage item whose offset is not all zeros at offset
                zero, like its tensor's first chunk's (an item listed twice)
  lazy-eocd     the last chunk archive of the last .distcp file without its
                end of central directory record (a bad zip, found on first read)
  lazy-size     the last chunk archive's central directory gives its data/0
                record 4 bytes fewer (a record of the wrong size, found on
                first read)
Integers are patched in place in the pickle: pickletools finds the BININT2
after the n-th occurrence of a key.  Standard library only.
"""
import os
import pickletools
import shutil
import struct
import sys

src, out, mode = sys.argv[1:4]
shutil.copytree(src, out)
for f in os.listdir(out):
    os.chmod(os.path.join(out, f), 0o644)
distcp = sorted(f for f in os.listdir(out) if f.endswith(".distcp"))
meta = os.path.join(out, ".metadata")


def patch(key, nth, delta):
    """Add delta to the BININT2 right after the nth use of the string key."""
    data = bytearray(open(meta, "rb").read())
    ops = list(pickletools.genops(bytes(data)))
    memo, key_memo, seen = 0, None, 0
    for i, (op, arg, pos) in enumerate(ops):
        hit = False
        if op.name == "MEMOIZE":
            if ops[i - 1][0].name == "SHORT_BINUNICODE" and ops[i - 1][1] == key:
                key_memo = memo
            memo += 1
        elif op.name == "SHORT_BINUNICODE" and arg == key:
            hit = True
        elif op.name in ("BINGET", "LONG_BINGET") and arg == key_memo:
            hit = True
        if not hit:
            continue
        seen += 1
        if seen < nth:
            continue
        for op2, arg2, pos2 in ops[i + 1:i + 12]:
            if op2.name == "BININT2":
                data[pos2 + 1:pos2 + 3] = struct.pack("<H", arg2 + delta)
                open(meta, "wb").write(data)
                return
        break
    sys.exit(f"no BININT2 after '{key}' #{nth}")


def zero_item_offset():
    """Zero the ints of the first MetadataIndex offset (torch.Size by GET) that has any."""
    data = bytearray(open(meta, "rb").read())
    ops = list(pickletools.genops(bytes(data)))
    memo, key_memo = 0, None
    for i, (op, arg, pos) in enumerate(ops):
        if op.name == "MEMOIZE":
            if ops[i - 1][0].name == "SHORT_BINUNICODE" and ops[i - 1][1] == "offset":
                key_memo = memo
            memo += 1
            continue
        hit = (op.name == "SHORT_BINUNICODE" and arg == "offset") or \
            (op.name in ("BINGET", "LONG_BINGET") and arg == key_memo)
        j = i + 1 + (ops[i + 1][0].name == "MEMOIZE")
        if not hit or ops[j][0].name not in ("BINGET", "LONG_BINGET"):
            continue
        ints = []
        for op2, arg2, pos2 in ops[j + 1:j + 8]:
            if op2.name not in ("BININT1", "BININT2"):
                break
            ints.append((op2.name, arg2, pos2))
        if not any(a for _, a, _ in ints):
            continue
        for name, a, p in ints:
            n = 1 if name == "BININT1" else 2
            data[p + 1:p + 1 + n] = bytes(n)
        open(meta, "wb").write(data)
        return
    sys.exit("no MetadataIndex offset with a non-zero int")


if mode == "missing":
    os.unlink(os.path.join(out, distcp[-1]))
elif mode == "truncated":
    p = os.path.join(out, distcp[-1])
    os.truncate(p, os.path.getsize(p) - 100)
elif mode == "zstd-corrupt":
    p = os.path.join(out, distcp[0])
    with open(p, "r+b") as f:
        f.seek(4)
        f.write(b"\xff" * 8)
elif mode == "gap":
    patch("size", 1, +1)
elif mode == "overlap":
    patch("offsets", 2, -1)
elif mode == "badsize":
    patch("sizes", 1, +1)
elif mode in ("lazy-eocd", "lazy-size"):
    p = os.path.join(out, distcp[-1])
    data = bytearray(open(p, "rb").read())
    if mode == "lazy-eocd":
        at = data.rfind(b"PK\x05\x06")
        data[at:at + 4] = b"\0\0\0\0"
    else:
        at = data.rfind(b"PK\x01\x02")
        while at >= 0:
            nlen = struct.unpack_from("<H", data, at + 28)[0]
            if data[at + 46:at + 46 + nlen].endswith(b"/data/0"):
                break
            at = data.rfind(b"PK\x01\x02", 0, at)
        if at < 0:
            sys.exit("no data/0 record in the last archive")
        for field in (20, 24):
            size = struct.unpack_from("<I", data, at + field)[0]
            struct.pack_into("<I", data, at + field, size - 4)
    open(p, "wb").write(data)
elif mode == "dupitem":
    zero_item_offset()
elif mode == "garbage":
    open(meta, "wb").write(b"not a pickle\n")
else:
    sys.exit(f"unknown mode {mode}")
