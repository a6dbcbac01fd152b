#!/usr/bin/python3
"""Build the crafted zips next to this script and print the expectations
table of tests/unit/t_torchzip.c.  Run once when the set changes:

    /usr/bin/python3 tests/data/zips/make_zips.py > /tmp/expect.inc

Inputs (copied from the shared fixtures, real torch.save output):
  torch113.pt          torch 1.13 (deepspeed-0.14 z3_ws3_bf16 rank 1 model states)
  torch2.pt            torch 2.x  (hf-deepspeed-0.19 z3_ws2_bf16 rank 1 model states)
  torch2_input_ids.pt  torch 2.x  (hf-deepspeed-0.19 z3_ws2_bf16 input_ids.pt)
Outputs (records of torch2_input_ids.pt, rewritten):
  py_zip64.pt   Python zipfile, force_zip64 (ZIP64 extras in local headers)
  zip64_cd.pt   torch-like writer with every central directory and classic
                EOCD field saturated (0xFFFF/0xFFFFFFFF) and ZIP64 extras
  deflate.pt    Python zipfile, ZIP_DEFLATED
  comment.pt    Python zipfile with an archive comment
  long_name.pt  Python zipfile, a 300-byte name outside the prefix
  huge_name.pt  Python zipfile, a 5000-byte name (over the reader's limit)
"""
import os
import struct
import sys
import zipfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def path(name):
    return os.path.join(HERE, name)


def members(src):
    with zipfile.ZipFile(path(src)) as z:
        return [(i.filename, z.read(i)) for i in z.infolist()]


def write_python(dst, recs, method, force64=False, comment=b""):
    with zipfile.ZipFile(path(dst), "w", compression=method,
                         allowZip64=True) as z:
        z.comment = comment
        for name, data in recs:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = method
            with z.open(info, "w", force_zip64=force64) as f:
                f.write(data)


def write_torch_like_zip64(dst, recs, prefix):
    """Torch 2.x layout (flag 0x808, zero local CRC/sizes, FB padding to 64,
    data descriptors, ZIP64 EOCD + locator), but every central directory
    field that may be saturated is, with its value in a ZIP64 extra."""
    out = bytearray()
    cd = bytearray()
    for name, data in recs:
        fname = (prefix + "/" + name.split("/", 1)[1]).encode()
        lho = len(out)
        start = lho + 30 + len(fname) + 4
        pad = (-start) % 64
        extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 0, 0x808, 0, 0, 0,
                           0, 0, 0, len(fname), len(extra))
        out += fname + extra
        assert len(out) % 64 == 0
        out += data
        crc = zlib.crc32(data)
        out += struct.pack("<IIII", 0x08074B50, crc, len(data), len(data))
        x64 = struct.pack("<HHQQQI", 1, 28, len(data), len(data), lho, 0)
        cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0x808, 0,
                          0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF, len(fname),
                          len(x64), 0, 0xFFFF, 0, 0, 0xFFFFFFFF)
        cd += fname + x64
    cd_off = len(out)
    out += cd
    eocd64 = len(out)
    n = len(recs)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n,
                       len(cd), cd_off)
    out += struct.pack("<IIQI", 0x07064B50, 0, eocd64, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0xFFFF, 0xFFFF, 0xFFFF,
                       0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    with open(path(dst), "wb") as f:
        f.write(out)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def data_off(raw, info):
    lh = raw[info.header_offset:info.header_offset + 30]
    assert lh[:4] == b"PK\x03\x04"
    nlen, xlen = struct.unpack("<HH", lh[26:30])
    return info.header_offset + 30 + nlen + xlen


def expectations(name):
    raw = open(path(name), "rb").read()
    with zipfile.ZipFile(path(name)) as z:
        assert z.testzip() is None, name
        infos = z.infolist()
        prefix = infos[0].filename.split("/", 1)[0]
        data = sorted((i for i in infos if "/data/" in i.filename),
                      key=lambda i: (-i.file_size, i.filename))[:2]
        pick = [i for i in infos
                if i.filename.split("/", 1)[1] in ("data.pkl", "version",
                                                   "byteorder")] + data
        print('\t{ "%s", "%s", %d, %d, {' % (name, prefix, len(infos),
                                              len(pick)))
        for i in pick:
            rel = i.filename.split("/", 1)[1]
            print('\t\t{ "%s", %d, %d, %d, 0x%016xull },' % (
                rel, data_off(raw, i), i.file_size, i.compress_type,
                fnv1a64(z.read(i))))
        print("\t} },")


def main():
    recs = members("torch2_input_ids.pt")
    write_python("py_zip64.pt", recs, zipfile.ZIP_STORED, force64=True)
    write_torch_like_zip64("zip64_cd.pt", recs, "archive")
    write_python("deflate.pt", recs, zipfile.ZIP_DEFLATED)
    write_python("comment.pt", recs, zipfile.ZIP_STORED,
                 comment=b"an archive comment, as zip -z writes")
    small = [r for r in recs if not r[0].endswith("/data/0")]
    write_python("long_name.pt", small + [("x" * 300, b"long")],
                 zipfile.ZIP_STORED)
    write_python("huge_name.pt", small + [("input_ids/" + "x" * 4990, b"")],
                 zipfile.ZIP_STORED)
    for name in ("torch113.pt", "torch2.pt", "torch2_input_ids.pt",
                 "py_zip64.pt", "zip64_cd.pt", "deflate.pt", "comment.pt"):
        expectations(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
