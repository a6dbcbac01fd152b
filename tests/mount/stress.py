#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""stress.py SECONDS FILE[=REF]...: 16 threads read random ranges of the files,
dropping the page cache (POSIX_FADV_DONTNEED) as they go so that reads reach
the daemon, and compare every byte with one sequential read done first: of
FILE, or of REF when given (FILE is then not read before the threads start:
its first reads are concurrent).  Exits 1 on the first mismatch or error."""
import os
import random
import sys
import threading
import time

THREADS = 16
secs = float(sys.argv[1])
files = [a.split("=", 1)[0] for a in sys.argv[2:]]
refpath = {a.split("=", 1)[0]: a.split("=", 1)[-1] for a in sys.argv[2:]}


def drop(fd):
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


ref = {}
for f in files:
    fd = os.open(refpath[f], os.O_RDONLY)
    drop(fd)
    chunks = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        chunks.append(b)
    os.close(fd)
    ref[f] = b"".join(chunks)
    if len(ref[f]) != os.stat(f).st_size:
        sys.exit(f"FAIL: {f}: sequential read gave {len(ref[f])} bytes of {os.stat(f).st_size}")

errors = []
counts = [0] * THREADS
nbytes = [0] * THREADS
deadline = time.monotonic() + secs


def worker(k):
    rng = random.Random(k)
    fds = {f: os.open(f, os.O_RDONLY) for f in files}
    try:
        while time.monotonic() < deadline and not errors:
            f = rng.choice(files)
            data = ref[f]
            off = rng.randrange(0, len(data) + 100)
            n = rng.choice([1, 3, 64, 4095, 4096, 65536, 131072, 1 << 20, rng.randrange(1, 3 << 20)])
            got = os.pread(fds[f], n, off)
            if got != data[off:off + n]:
                errors.append(f"{f}: {n} bytes at {off}: got {len(got)} bytes, mismatch")
            counts[k] += 1
            nbytes[k] += len(got)
            if counts[k] % 16 == 0:
                drop(fds[f])
    except OSError as e:
        errors.append(f"thread {k}: {e}")
    finally:
        for fd in fds.values():
            os.close(fd)


threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if errors:
    print("\n".join(errors[:10]))
    sys.exit(1)
print(f"OK {sum(counts)} random reads, {sum(nbytes) / 2**20:.0f} MiB, {THREADS} threads, {secs:g} s")
