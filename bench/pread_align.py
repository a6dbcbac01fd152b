#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The speed of pread() from the page cache into buffers at offsets 0, 16 and
64 bytes past a page boundary (a large malloc() block starts 16 bytes into
its mapping; gfs_iobuf() aligns to 64).

  bench/pread_align.py FILE [BLOCK_KIB]

FILE is read once to bring it into the page cache, then in BLOCK_KIB
(default 128) reads into an mmap'd buffer at each offset, best of 5 passes
each, interleaved.  Prints GB/s and the ratio against offset 0.
"""
import mmap
import os
import sys
import time


def main():
    path = sys.argv[1]
    blk = (int(sys.argv[2]) if len(sys.argv) > 2 else 128) << 10
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    size -= size % blk
    if size == 0:
        sys.exit(f"{path}: smaller than one block")
    buf = mmap.mmap(-1, blk + 4096)
    offs = (0, 16, 64)
    views = {o: memoryview(buf)[o:o + blk] for o in offs}
    for pos in range(0, size, blk):  # into the page cache, and fault the buffer in
        os.preadv(fd, [views[0]], pos)
    best = {o: float("inf") for o in offs}
    for _ in range(5):
        for o in offs:
            t = time.perf_counter()
            for pos in range(0, size, blk):
                os.preadv(fd, [views[o]], pos)
            best[o] = min(best[o], time.perf_counter() - t)
    print(f"| buffer offset | GB/s | vs offset 0 |\n|---|---|---|")
    for o in offs:
        print(f"| {o} | {size / best[o] / 1e9:.2f} | {best[0] / best[o]:.2f}x |")
    print(f"\ncommand: bench/pread_align.py {path} {blk >> 10} ({size >> 20} MiB, reads of {blk >> 10} KiB, best of 5)")


if __name__ == "__main__":
    main()
