# SPDX-License-Identifier: Apache-2.0
"""Shared by the no-payload-read checkers: where tensor payloads are, and
which bytes of them a command read (standard library + strace)."""
import os
import re
import struct
import subprocess
import tempfile
import zipfile


def zip_payload(path):
    """Byte ranges of the data/<key> records of the torch zip at path."""
    ranges = []
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        for info in z.infolist():
            if "/data/" not in info.filename or info.file_size == 0:
                continue
            f.seek(info.header_offset + 26)
            n, m = struct.unpack("<HH", f.read(4))
            start = info.header_offset + 30 + n + m
            ranges.append((start, start + info.file_size))
    return ranges


def syscalls(log):
    """The lines of an `strace -f` log, pid prefix dropped, with each call a
    thread left unfinished joined to its resumption."""
    pending = {}
    for line in open(log):
        pid, _, rest = line.partition(" ")
        if not pid.isdigit():
            pid, rest = "", line
        rest = rest.strip()
        if rest.endswith("<unfinished ...>"):
            pending[pid] = rest[: -len("<unfinished ...>")].rstrip()
            continue
        m = re.match(r"<\.\.\. \w+ resumed>\s?(.*)", rest)
        if m:
            rest = pending.pop(pid, "") + m.group(1)
        yield rest


def payload_reads(argv, payload):
    """Run argv under strace; return (reads, bytes, problems) for the reads of
    the files in payload (realpath -> [(start, end)]): problems lists every
    read that overlaps a payload range and every mmap of such a file."""
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "strace.log")
        # LeakSanitizer cannot run under ptrace: switch it off in a sanitizer build.
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
        subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat,read,pread64,close,mmap",
                        "-o", log, *argv], check=True, stdout=subprocess.DEVNULL, env=env)
        fds, offsets = {}, {}
        reads, total, bad = 0, 0, []
        for line in syscalls(log):
            m = re.match(r'openat\(AT_FDCWD, "([^"]+)", [^)]*\) = (\d+)', line)
            if m:
                fds[int(m.group(2))] = os.path.realpath(m.group(1))
                offsets[int(m.group(2))] = 0
                continue
            m = re.match(r'close\((\d+)\)', line)
            if m:
                fds.pop(int(m.group(1)), None)
                continue
            m = re.match(r'mmap\([^,]+, \d+, [^,]+, [^,]+, (\d+),', line)
            if m and fds.get(int(m.group(1))) in payload:
                bad.append(f"mmap of {fds[int(m.group(1))]}")
                continue
            m = re.match(r'pread64\((\d+), .*, (\d+), (\d+)\) = (\d+)', line)
            r = None
            if m:
                r = (int(m.group(1)), int(m.group(3)), int(m.group(4)))
            else:
                m = re.match(r'read\((\d+), .*\) = (\d+)', line)
                if m:
                    fd, n = int(m.group(1)), int(m.group(2))
                    r = (fd, offsets.get(fd, 0), n)
                    offsets[fd] = offsets.get(fd, 0) + n
            if not r or fds.get(r[0]) not in payload:
                continue
            fd, off, n = r
            reads += 1
            total += n
            for s, e in payload[fds[fd]]:
                if off < e and s < off + n:
                    bad.append(f"{os.path.basename(fds[fd])}: read of {n} bytes at {off} "
                               f"overlaps payload {s}..{e}")
                    break
    return reads, total, bad
