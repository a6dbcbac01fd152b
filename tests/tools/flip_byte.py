#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Flip one byte of a checkpoint's tensor payload, in place, and say where.

usage: flip_byte.py LAYOUT_JSON TENSOR (payload | padding | zstd)

LAYOUT_JSON is `gatherfs-inspect layout` of the (copied) checkpoint.
TENSOR is a model tensor's name, or STATE:NAME for an optimizer-state entry
(its "optimizer_state" list: exp_avg:NAME, step:NAME...).
  payload  flips the first byte of TENSOR's first piece;
  padding  flips the last byte of the zip record holding that piece, which
           must be a byte no tensor of the layout reads (exit 3 if not);
  zstd     flips the middle byte of the zstd frame of TENSOR's first piece.
The zip record is found through the shard's own zip directory (zipfile),
which must test clean before and report that record after (payload and
padding).  Prints shell assignments: SHARD, RECORD (zip record name, or
"item at offset N" for the DCP item whose frame was hit), OFFSET (of the flipped byte), TENSORS (every tensor
with a piece in the record or frame, space separated, aliases included, optimizer-state entries as
STATE:NAME) and
WINDOW (hex of the 16 corrupt bytes starting at the flipped one, as a
reader would see them; payload only).
"""
import json
import os
import struct
import sys
import zipfile


def records(path):
    """(name, data start, data end) of every record, from the zip directory."""
    out = []
    with open(path, "rb") as f, zipfile.ZipFile(path) as z:
        for info in z.infolist():
            f.seek(info.header_offset)
            hdr = f.read(30)
            assert hdr[:4] == b"PK\x03\x04", path
            n, e = struct.unpack("<HH", hdr[26:30])
            start = info.header_offset + 30 + n + e
            out.append((info.filename, start, start + info.compress_size))
    return out


def main():
    layout_path, name, mode = sys.argv[1:4]
    layout = json.load(open(layout_path))
    base = layout["base_dir"]
    entries = layout["tensors"] + [dict(e, name=e["state"] + ":" + e["name"])
                                   for e in layout.get("optimizer_state", [])]
    tensors = {t["name"]: t for t in entries}
    t = tensors[name]
    piece = next(p for p in t["pieces"] if "source" in p)
    src = piece["source"]
    shard = os.path.join(base, layout["sources"][src]["path"])

    def readers(lo, hi, frame=None):
        """Tensors with a piece of source src inside [lo, hi) (or in frame)."""
        hit = []
        for u in entries:
            for p in u.get("pieces", []):
                if p.get("source") != src:
                    continue
                if frame is not None:
                    ok = p.get("zstd", {}).get("offset") == frame
                else:
                    ok = "zstd" not in p and lo <= p["offset"] < hi
                if ok:
                    hit.append(u["name"])
                    break
        hit += [u["name"] for u in layout["tensors"] if u.get("alias_of") in hit]
        return hit

    if mode == "zstd":
        fr = piece["zstd"]
        off = fr["offset"] + fr["length"] // 2
        rec = "item at offset %d" % fr["offset"]  # as gatherfs names it
        affected = readers(0, 0, frame=fr["offset"])
    else:
        assert zipfile.ZipFile(shard).testzip() is None, shard + " is not clean"
        rname, lo, hi = next(r for r in records(shard) if r[1] <= piece["offset"] < r[2])
        affected = readers(lo, hi)
        rec = rname
        if mode == "payload":
            off = piece["offset"]
        else:
            off = hi - 1
            for u in entries:
                for p in u.get("pieces", []):
                    if p.get("source") == src and "zstd" not in p:
                        n = p.get("count", 1)
                        end = p["offset"] + (n - 1) * p.get("src_stride", 0) + p["length"]
                        if p["offset"] <= off < end:
                            sys.exit(3)  # no padding at the end of this record
    with open(shard, "r+b") as f:
        f.seek(off)
        b = f.read(16)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x5A]))
        window = bytes([b[0] ^ 0x5A]) + b[1:]
    if mode != "zstd":
        bad = zipfile.ZipFile(shard).testzip()
        assert bad == rec, "zipfile.testzip() says %r, not %r" % (bad, rec)
    print("SHARD='%s'" % shard)
    print("RECORD='%s'" % rec)
    print("OFFSET=%d" % off)
    print("TENSORS='%s'" % " ".join(affected))
    print("WINDOW=%s" % (window.hex() if mode == "payload" else ""))


if __name__ == "__main__":
    main()
