#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Random concurrent reads of mounted files equal one sequential read.

usage: concurrent_reads.py FILE... 

Reads each file sequentially once, then 8 threads read 400 random ranges
each (lengths 1 byte to 300 KiB, so they cross zstd frames, strided runs and
piece boundaries) and compare with the sequential bytes.  Exits 1 on any
difference.
"""
import random
import sys
import threading

files = sys.argv[1:]
ref = {f: open(f, "rb").read() for f in files}
errors = []


def worker(seed):
    rng = random.Random(seed)
    fds = {f: open(f, "rb", buffering=0) for f in files}
    for _ in range(400):
        f = rng.choice(files)
        data = ref[f]
        off = rng.randrange(len(data))
        n = rng.choice([1, 7, 4096, 65536, 300 * 1024, rng.randrange(1, 200000)])
        fds[f].seek(off)
        got = fds[f].read(n)
        if got != data[off:off + n]:
            errors.append(f"{f}: bytes {off}..+{n} differ")
            return


threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for e in errors:
    print("FAIL:", e)
print(f"{'FAIL' if errors else 'OK'}: 8 threads x 400 random reads over {len(files)} files")
sys.exit(1 if errors else 0)
