#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Prove that importing plain model files never reads tensor payloads.

Usage: check_plain_noread.py INSPECT SRC...    (standard library + strace)

For each SRC (a plain model dir or file), runs `gatherfs-inspect ls SRC`
under strace, maps every read/pread of a model file to its byte range, and
checks that none overlaps a payload: the data after a safetensors header,
the data/<key> records of a torch zip (found with Python's zipfile).  No
model file may be mapped.
"""
import os
import struct
import sys

from noread import payload_reads, zip_payload

INSPECT = sys.argv[1]


def payload_of(path):
    """Byte ranges of path that hold tensor data."""
    with open(path, "rb") as f:
        head = f.read(8)
    if head[:4] == b"PK\3\4":
        return zip_payload(path)
    n = struct.unpack("<Q", head)[0]
    return [(8 + n, os.path.getsize(path))] if 8 + n < os.path.getsize(path) else []


def model_files(src):
    if os.path.isfile(src):
        return [src]
    return [os.path.join(src, f) for f in os.listdir(src)
            if f.endswith((".safetensors", ".bin", ".pt"))]


failed = 0
for src in sys.argv[2:]:
    payload = {os.path.realpath(p): payload_of(p) for p in model_files(src)}
    _, total, bad = payload_reads([INSPECT, "ls", src], payload)
    size = sum(os.path.getsize(p) for p in payload)
    print(f"{'ok' if not bad else 'not ok'} - {src}: read {total} of {size} bytes, "
          f"payload bytes read: {'NONE' if not bad else 'SOME'}")
    for b in bad[:5]:
        print("   ", b)
    failed += bool(bad)
sys.exit(1 if failed else 0)
