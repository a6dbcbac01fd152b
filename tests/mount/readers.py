#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""readers.py THREADS SECONDS FILE...: THREADS threads read 1 MiB at random
offsets of the files for SECONDS, dropping the page cache
(POSIX_FADV_DONTNEED) before each read so that reads reach the daemon.
Errors (the mount going away) are counted, not fatal.  Prints
"reads N errors M" at the end."""
import os
import random
import sys
import threading
import time

threads, secs, files = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
end = time.monotonic() + secs
counts = {"reads": 0, "errors": 0}
lock = threading.Lock()


def reader(seed):
    rnd = random.Random(seed)
    while time.monotonic() < end:
        f = rnd.choice(files)
        try:
            fd = os.open(f, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.pread(fd, 1 << 20, rnd.randrange(max(size, 1)))
                key = "reads"
            finally:
                os.close(fd)
        except OSError:
            key = "errors"
            time.sleep(0.01)
        with lock:
            counts[key] += 1


ts = [threading.Thread(target=reader, args=(i,)) for i in range(threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("reads %d errors %d" % (counts["reads"], counts["errors"]))
