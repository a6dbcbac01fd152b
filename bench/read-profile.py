#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/read-profile.py FILE GIB [STEP_MIB]: where a sequential read of
FILE is slow.  Reads the first GIB GiB of FILE in 1 MiB read(2)s (as dd
bs=1M does) and prints the throughput of every STEP_MIB MiB (default 512)
in file order, then the whole read's.  Run it on a view of a fresh mount
with the sources' pages dropped (bench/lib.sh's bench_drop) to see which
tensors a first read spends its time in (the layout: the view's header,
e.g. a safetensors header's data_offsets).  Not part of `make check`."""
import os
import sys
import time

if len(sys.argv) not in (3, 4):
    sys.exit("usage: bench/read-profile.py FILE GIB [STEP_MIB]")
path, total = sys.argv[1], int(sys.argv[2]) << 30
step = (int(sys.argv[3]) if len(sys.argv) == 4 else 512) << 20
fd = os.open(path, os.O_RDONLY)
buf = memoryview(bytearray(1 << 20))
start = last = time.monotonic()
off, mark, rates = 0, step, []
while off < total:
    n = os.readv(fd, [buf])
    if n <= 0:
        break
    off += n
    if off >= mark:
        now = time.monotonic()
        rates.append("%.2f" % (step / (now - last) / 1e9))
        last, mark = now, mark + step
os.close(fd)
whole = off / (time.monotonic() - start) / 1e9
print("GB/s per %d MiB: %s" % (step >> 20, " ".join(rates)))
print("whole: %.2f GB in %.2f s = %.2f GB/s" % (off / 1e9, time.monotonic() - start, whole))
print("command: bench/read-profile.py %s %s %d" % (path, sys.argv[2], step >> 20))
