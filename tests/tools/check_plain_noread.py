#!/usr/bin/python3
"""Prove that importing plain model files never reads tensor payloads.

Usage: check_plain_noread.py INSPECT SRC...    (standard library + strace)

For each SRC (a plain model dir or file), runs `gatherfs-inspect ls SRC`
under strace, maps every read/pread of a model file to its byte range, and
checks that none overlaps a payload: the data after a safetensors header,
the data/<key> records of a torch zip (found with Python's zipfile).  No
model file may be mapped.
"""
import os
import re
import struct
import subprocess
import sys
import tempfile
import zipfile

INSPECT = sys.argv[1]


def payload_of(path):
    """Byte ranges of path that hold tensor data."""
    with open(path, "rb") as f:
        head = f.read(8)
    if head[:4] == b"PK\3\4":
        ranges = []
        with zipfile.ZipFile(path) as z, open(path, "rb") as f:
            for info in z.infolist():
                if "/data/" not in info.filename or info.file_size == 0:
                    continue
                f.seek(info.header_offset + 26)
                n, m = struct.unpack("<HH", f.read(4))
                start = info.header_offset + 30 + n + m
                ranges.append((start, start + info.file_size))
        return ranges
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
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "strace.log")
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
        subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat,read,pread64,close,mmap",
                        "-o", log, INSPECT, "ls", src], check=True, stdout=subprocess.DEVNULL,
                       env=env)
        fds, offsets = {}, {}
        bad, total = [], 0
        for line in open(log):
            line = line.split(None, 1)[1] if line[:1].isdigit() else line
            m = re.match(r'openat\(AT_FDCWD, "([^"]+)", [^)]*\) = (\d+)', line)
            if m:
                fds[int(m.group(2))] = os.path.realpath(m.group(1))
                offsets[int(m.group(2))] = 0
                continue
            m = re.match(r'close\((\d+)\)', line)
            if m:
                fds.pop(int(m.group(1)), None)
                continue
            m = re.match(r'mmap\([^,]+, \d+, [^,]+, [^,]+, (\d+),', line)
            if m and fds.get(int(m.group(1))) in payload:
                bad.append(f"mmap of {fds[int(m.group(1))]}")
                continue
            m = re.match(r'pread64\((\d+), .*, (\d+), (\d+)\) = (\d+)', line)
            r = None
            if m:
                r = (int(m.group(1)), int(m.group(3)), int(m.group(4)))
            else:
                m = re.match(r'read\((\d+), .*\) = (\d+)', line)
                if m:
                    fd, n = int(m.group(1)), int(m.group(2))
                    r = (fd, offsets.get(fd, 0), n)
                    offsets[fd] = offsets.get(fd, 0) + n
            if not r or fds.get(r[0]) not in payload:
                continue
            fd, off, n = r
            total += n
            for s, e in payload[fds[fd]]:
                if off < e and s < off + n:
                    bad.append(f"{os.path.basename(fds[fd])}: read of {n} bytes at {off} overlaps payload {s}..{e}")
                    break
    size = sum(os.path.getsize(p) for p in payload)
    print(f"{'ok' if not bad else 'not ok'} - {src}: read {total} of {size} bytes, "
          f"payload bytes read: {'NONE' if not bad else 'SOME'}")
    for b in bad[:5]:
        print("   ", b)
    failed += bool(bad)
sys.exit(1 if failed else 0)
