#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""load.py SECONDS THREADS PID MNT REFDIR LAYOUT: THREADS threads read
random ranges (4 KiB .. 1 MiB) of MNT/pytorch_model.bin,
MNT/model.safetensors and every MNT/tensors/ file for SECONDS, dropping the
page cache of a file (POSIX_FADV_DONTNEED) every few reads so that reads
reach the daemon, and compare every byte: the two single files against
REFDIR/pytorch_model.bin and REFDIR/model.safetensors (gatherfs-inspect
export), tensor files against the layout's pieces read from the sources
directly.  Samples the daemon's RSS (PID) every second.  Prints throughput
and RSS over time; exits 1 on any mismatch or read error."""
import json
import os
import random
import sys
import threading
import time

secs, nthreads, pid = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
mnt, refdir, layout_path = sys.argv[4], sys.argv[5], sys.argv[6]
lay = json.load(open(layout_path))
base = lay["base_dir"]
src_fds = [os.open(os.path.join(base, s["path"]), os.O_RDONLY) for s in lay["sources"]]
SIZES = {"float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "int32": 4, "uint8": 1}

tensors = {}  # name -> pieces [(toff, len, src or None, src_off)]
for t in lay["tensors"]:
    if "pieces" not in t:
        continue
    ps, toff = [], 0
    for p in t["pieces"]:
        if "zero" in p:
            ps.append((toff, p["zero"], None, 0))
            toff += p["zero"]
        else:
            ps.append((toff, p["length"], p["source"], p["offset"]))
            toff += p["length"]
    tensors[t["name"]] = ps
aliases = {t["name"]: t["alias_of"] for t in lay["tensors"] if "alias_of" in t}


def tensor_ref(name, off, n):
    out = bytearray()
    for toff, ln, src, soff in tensors[aliases.get(name, name)]:
        lo, hi = max(off, toff), min(off + n, toff + ln)
        if lo >= hi:
            continue
        if src is None:
            out += bytes(hi - lo)
        else:
            out += os.pread(src_fds[src], hi - lo, soff + lo - toff)
    return bytes(out)


targets = []  # (path in mount, reference function(off, n))
for f in ("pytorch_model.bin", "model.safetensors"):
    rfd = os.open(os.path.join(refdir, f), os.O_RDONLY)
    targets.append((os.path.join(mnt, f), lambda off, n, rfd=rfd: os.pread(rfd, n, off)))
for name in list(tensors) + list(aliases):
    fname = name.replace("%", "%25").replace("/", "%2F")
    targets.append((os.path.join(mnt, "tensors", fname),
                    lambda off, n, name=name: tensor_ref(name, off, n)))

end = time.monotonic() + secs
lock = threading.Lock()
stats = {"reads": 0, "bytes": 0, "bad": 0, "errors": 0}
first_problem = []


def reader(seed):
    rnd = random.Random(seed)
    fds = {}
    k = 0
    while time.monotonic() < end:
        i = rnd.randrange(len(targets)) if rnd.random() < 0.5 else rnd.randrange(2)
        path, ref = targets[i]
        try:
            fd = fds.get(path)
            if fd is None:
                fd = fds[path] = os.open(path, os.O_RDONLY)
            size = os.fstat(fd).st_size
            n = min(1 << rnd.randrange(12, 21), size)
            off = rnd.randrange(size - n + 1)
            k += 1
            if k % 4 == 0:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            got = os.pread(fd, n, off)
        except OSError as e:
            with lock:
                stats["errors"] += 1
                if not first_problem:
                    first_problem.append("%s: %s" % (path, e))
            continue
        ok = got == ref(off, n)
        with lock:
            stats["reads"] += 1
            stats["bytes"] += len(got)
            if not ok:
                stats["bad"] += 1
                if not first_problem:
                    first_problem.append("%s: wrong bytes at %d+%d" % (path, off, n))
    for fd in fds.values():
        os.close(fd)


def rss_kib():
    try:
        for line in open("/proc/%d/status" % pid):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


threads = [threading.Thread(target=reader, args=(s,)) for s in range(nthreads)]
t0 = time.monotonic()
for t in threads:
    t.start()
rss = []
while any(t.is_alive() for t in threads):
    rss.append((round(time.monotonic() - t0), rss_kib()))
    time.sleep(1)
for t in threads:
    t.join()
el = time.monotonic() - t0
step = max(1, len(rss) // 10)
print("%d readers, %.0f s, %d files: %d reads, %.1f MiB, %.1f MiB/s; wrong %d, errors %d"
      % (nthreads, el, len(targets), stats["reads"], stats["bytes"] / 2**20,
         stats["bytes"] / 2**20 / el, stats["bad"], stats["errors"]))
print("daemon RSS MiB over time (s:MiB): " +
      " ".join("%d:%.0f" % (s, r / 1024) for s, r in rss[::step] + rss[-1:]))
if first_problem:
    print("first problem:", first_problem[0])
sys.exit(1 if stats["bad"] or stats["errors"] or stats["reads"] == 0 else 0)
