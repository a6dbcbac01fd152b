#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""preadall.py N FILE...: read the files with N threads of 1 MiB preads.

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
    fds = [os.open(f, os.O_RDONLY) for f in files]
    work = queue.SimpleQueue()
    for fd in fds:
        size = os.fstat(fd).st_size
        for off in range(0, size, BLOCK):
            work.put((fd, off))
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
