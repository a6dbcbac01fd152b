#!/usr/bin/python3
"""Prove that importing a checkpoint never reads tensor payloads.

Usage: check_noread.py INSPECT CKPTS_DIR    (standard library + strace)

Runs `gatherfs-inspect ls` on the largest fixture under strace, maps every
read/pread of a shard file to its byte range, and checks that none overlaps
the payload of a data/<key> record (found with Python's zipfile).
"""
import os
import re
import subprocess
import sys
import tempfile
import zipfile

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
        if not fn.endswith(".pt"):
            continue
        path = os.path.realpath(os.path.join(root, fn))
        ranges = []
        with zipfile.ZipFile(path) as z, open(path, "rb") as f:
            for info in z.infolist():
                if "/data/" not in info.filename or info.file_size == 0:
                    continue
                f.seek(info.header_offset + 26)
                n = int.from_bytes(f.read(2), "little")
                m = int.from_bytes(f.read(2), "little")
                start = info.header_offset + 30 + n + m
                ranges.append((start, start + info.file_size))
        payload[path] = ranges

with tempfile.TemporaryDirectory() as tmp:
    log = os.path.join(tmp, "strace.log")
    # LeakSanitizer cannot run under ptrace: switch it off in a sanitizer build.
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat,read,pread64,close,mmap",
                    "-o", log, INSPECT, "ls", ckpt], check=True, stdout=subprocess.DEVNULL,
                   env=env)
    fds, offsets = {}, {}
    reads, bad, total = 0, [], 0
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
            fd, off, n = int(m.group(1)), int(m.group(3)), int(m.group(4))
            r = (fd, off, n)
        else:
            m = re.match(r'read\((\d+), .*\) = (\d+)', line)
            if m:
                fd, n = int(m.group(1)), int(m.group(2))
                r = (fd, offsets.get(fd, 0), n)
                offsets[fd] = offsets.get(fd, 0) + n
        if not r or fds.get(r[0]) not in payload:
            continue
        fd, off, n = r
        reads += 1
        total += n
        for s, e in payload[fds[fd]]:
            if off < e and s < off + n:
                bad.append(f"{os.path.basename(fds[fd])}: read of {n} bytes at {off} "
                           f"overlaps payload {s}..{e}")
                break

shard_bytes = sum(os.path.getsize(p) for p in payload)
payload_bytes = sum(e - s for rs in payload.values() for s, e in rs)
print(f"case {case}: {len(payload)} shard files, {shard_bytes} bytes, of which {payload_bytes} "
      f"payload; import read {total} bytes in {reads} reads ({100.0 * total / shard_bytes:.2f}%), "
      f"payload bytes read: {'NONE' if not bad else 'SOME'}")
for b in bad[:10]:
    print("not ok -", b)
print(f"{1 if not bad and reads else 0} passed, {0 if not bad and reads else 1} failed")
sys.exit(0 if not bad and reads else 1)
