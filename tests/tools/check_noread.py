#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Prove that importing a checkpoint never reads tensor payloads.

Usage: check_noread.py INSPECT CKPTS_DIR    (standard library + strace)

Runs `gatherfs-inspect ls` on the largest fixture under strace, maps every
read/pread of a shard file to its byte range, and checks that none overlaps
the payload of a data/<key> record (found with Python's zipfile).
"""
import os
import sys

from noread import payload_reads, zip_payload

INSPECT, CKPTS = sys.argv[1], sys.argv[2]


def size_of(case):
    root = os.path.join(CKPTS, case, "checkpoint")
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(root) for f in fs)


case = max((c for c in os.listdir(CKPTS) if os.path.isdir(os.path.join(CKPTS, c, "checkpoint"))),
           key=size_of)
ckpt = os.path.join(CKPTS, case, "checkpoint")
payload = {}  # realpath -> [(start, end)]
for root, _, files in os.walk(ckpt):
    for fn in files:
        if fn.endswith(".pt"):
            path = os.path.realpath(os.path.join(root, fn))
            payload[path] = zip_payload(path)

reads, total, bad = payload_reads([INSPECT, "ls", ckpt], payload)

shard_bytes = sum(os.path.getsize(p) for p in payload)
payload_bytes = sum(e - s for rs in payload.values() for s, e in rs)
print(f"case {case}: {len(payload)} shard files, {shard_bytes} bytes, of which {payload_bytes} "
      f"payload; import read {total} bytes in {reads} reads ({100.0 * total / shard_bytes:.2f}%), "
      f"payload bytes read: {'NONE' if not bad else 'SOME'}")
for b in bad[:10]:
    print("not ok -", b)
print(f"{1 if not bad and reads else 0} passed, {0 if not bad and reads else 1} failed")
sys.exit(0 if not bad and reads else 1)
