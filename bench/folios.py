#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""folios.py FILE [PAGES]: how the page cache holds the first PAGES (default
8192) pages of FILE: in large folios (compound pages) or single pages.

Maps FILE, touches each page, and reads the page frames' flags from
/proc/self/pagemap and /proc/kpageflags (root only).  Prints
"PAGES pages: N in large folios, M single".  Used by bench/run to show why
reads through FUSE cost the reader more than reads of a local file.
"""
import ctypes
import mmap
import os
import struct
import sys

KPF_COMPOUND_HEAD, KPF_COMPOUND_TAIL = 15, 16
path = sys.argv[1]
pages = min(int(sys.argv[2]) if len(sys.argv) > 2 else 8192, os.path.getsize(path) // 4096)
fd = os.open(path, os.O_RDONLY)
m = mmap.mmap(fd, pages * 4096, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE)
for i in range(pages):
    m[i * 4096]  # a read fault maps the page-cache page itself
base = ctypes.addressof(ctypes.c_char.from_buffer(m)) // 4096
large = single = 0
with open("/proc/self/pagemap", "rb") as pm, open("/proc/kpageflags", "rb") as kf:
    for i in range(pages):
        pm.seek((base + i) * 8)
        entry = struct.unpack("<Q", pm.read(8))[0]
        if not entry >> 63:
            continue
        kf.seek((entry & ((1 << 55) - 1)) * 8)
        flags = struct.unpack("<Q", kf.read(8))[0]
        if flags >> KPF_COMPOUND_HEAD & 1 or flags >> KPF_COMPOUND_TAIL & 1:
            large += 1
        else:
            single += 1
print(f"{pages} pages: {large} in large folios, {single} single")
