#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""fault_read.py FILE...: for each file, drop its page cache
(POSIX_FADV_DONTNEED, so the read reaches the daemon), read it whole, and
print "SHA256 FILE" or "ERRNAME FILE" (e.g. "EIO FILE") on failure.
Always exits 0 unless the arguments are wrong."""
import errno
import hashlib
import os
import sys

if len(sys.argv) < 2:
    sys.exit(__doc__)
for f in sys.argv[1:]:
    try:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            h = hashlib.sha256()
            while True:
                b = os.read(fd, 1 << 20)
                if not b:
                    break
                h.update(b)
            print(h.hexdigest(), f)
        finally:
            os.close(fd)
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e.errno)), f)
