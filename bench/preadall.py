#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""preadall.py N [--bytes=B] FILE...: read the files with N threads of 1 MiB
preads; with --bytes, only their first B bytes (in file order, whole blocks).

The bandwidth limit of storage that needs many requests in flight: the
blocks of all files are shared out to N threads from one queue.  Prints the
bytes read.
"""
import os
import queue
import sys
import threading

BLOCK = 1 << 20


def main():
    n, files = int(sys.argv[1]), sys.argv[2:]
    limit = None
    if files and files[0].startswith("--bytes="):
        limit, files = int(files[0][len("--bytes="):]), files[1:]
    fds = [os.open(f, os.O_RDONLY) for f in files]
    work = queue.SimpleQueue()
    queued = 0
    for fd in fds:
        size = os.fstat(fd).st_size
        for off in range(0, size, BLOCK):
            if limit is not None and queued >= limit:
                break
            work.put((fd, off))
            queued += min(BLOCK, size - off)
    total = [0] * n

    def reader(i):
        while True:
            try:
                fd, off = work.get_nowait()
            except queue.Empty:
                return
            total[i] += len(os.pread(fd, BLOCK, off))

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(sum(total))


if __name__ == "__main__":
    main()
