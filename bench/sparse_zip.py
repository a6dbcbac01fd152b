# SPDX-License-Identifier: Apache-2.0
"""torch.save to a sparse file: the archive torch 1.13 writes, payloads as holes.

sparse_save(obj, path) pickles obj with torch's own serializer
(torch.serialization._save, so data.pkl is exactly what torch.save writes)
into a zip writer that lays the records out as torch 1.13's
PyTorchStreamWriter does (archive prefix = file name without extension,
data 64-byte aligned by an "FB" padding extra field, data descriptors,
ZIP64 end records), except that the bytes of every storage registered with
hole() are not written: the file gets a hole of that size (reads as zeros),
and the record's CRC-32 is that of the zeros, computed in O(log n) by
crc32_zeros() (zlib's crc32_combine operator), so a CRC check of the record
passes.  A storage not registered is written as is (small buffers, steps).
For archives under 4 GiB with zero-filled payloads, the output is byte for
byte what torch.save writes (checked by bench/sparse_fidelity.py).

Hole storages are never touched, so their pages are never committed:
memory stays small whatever the sizes.  Those up to 1 GiB are allocated
with torch.empty; larger ones map a sparse temporary file (shared), which
the kernel's overcommit check does not count against memory.
"""
import ctypes
import functools
import os
import struct
import tempfile
import zlib

import torch
import torch.serialization

_ALIGN = 64
_U32 = 0xFFFFFFFF
_POLY = 0xEDB88320  # CRC-32, reflected

_holes = {}  # storage address -> tensor (held, so the address is not reused)
HOLE = -1  # write_record's data for a record of size bytes left as a hole
_holes[HOLE] = None


def hole(t):
    """Register tensor t's storage as a hole (its bytes are never written); return t."""
    _holes[t.storage().data_ptr()] = t
    return t


def empty_hole(numel, dtype=torch.float32):
    """An untouched tensor of numel elements whose bytes are a hole in the file."""
    numel = max(int(numel), 0)
    size = numel * torch.empty(0, dtype=dtype).element_size()
    if size <= 1 << 30:
        return hole(torch.empty(numel, dtype=dtype))
    with tempfile.NamedTemporaryFile(dir=os.environ.get("TMPDIR", "/var/tmp")) as f:
        f.truncate(size)
        return hole(torch.from_file(f.name, shared=True, size=numel, dtype=dtype))


def forget_holes():
    """Forget every registered hole (call after a save to release the pointers)."""
    _holes.clear()
    _holes[HOLE] = None


def _mat_times(mat, vec):
    s, i = 0, 0
    while vec:
        if vec & 1:
            s ^= mat[i]
        vec >>= 1
        i += 1
    return s


def _mat_square(mat):
    return [_mat_times(mat, mat[n]) for n in range(32)]


def _zero_ops():
    """ops[k]: the operator that appends 2^k zero bytes to a CRC-32 register."""
    one_bit = [_POLY] + [1 << n for n in range(31)]  # one zero bit
    two = _mat_square(one_bit)   # 2 bits
    four = _mat_square(two)      # 4 bits
    op = _mat_square(four)       # 1 byte
    ops = []
    for _ in range(64):
        ops.append(op)
        op = _mat_square(op)
    return ops


_OPS = _zero_ops()


def crc32_zeros(crc, n):
    """zlib.crc32(b"\\0" * n, crc), in O(log n)."""
    reg = crc ^ _U32
    k = 0
    while n:
        if n & 1:
            reg = _mat_times(_OPS[k], reg)
        n >>= 1
        k += 1
    return reg ^ _U32


@functools.lru_cache(maxsize=None)
def _crc32_of_zeros(n):
    return crc32_zeros(0, n)


class SparseZipWriter:
    """The write_record() interface of torch._C.PyTorchFileWriter, with holes.

    Writes to file object f from its current position (offsets in the
    archive are relative to it, as in an archive embedded in a larger file)
    with the given archive prefix.
    """

    def __init__(self, f, prefix):
        self.f = f
        self.prefix = prefix
        self.pos = 0
        self.entries = []  # (name bytes, crc, size, offset)

    def _pad_extra(self, name_len, size):
        start = self.pos + 30 + name_len + 4
        z64 = b""
        if size >= _U32 or self.pos >= _U32:
            fields = b""
            if size >= _U32:
                fields += struct.pack("<QQ", 0, 0)
            if self.pos >= _U32:
                fields += struct.pack("<Q", self.pos)
            z64 = struct.pack("<HH", 1, len(fields)) + fields
            start += len(z64)
        pad = -start % _ALIGN
        return z64 + b"FB" + struct.pack("<H", pad) + b"Z" * pad

    def write_record(self, name, data, size):
        """Write record name: bytes data, size bytes at address data (a storage),
        or (data HOLE) size bytes of hole."""
        full = (self.prefix + "/" + name).encode()
        extra = self._pad_extra(len(full), size)
        off = self.pos
        flags = 0x0808 if size else 0x0800  # empty records: no data descriptor
        self.f.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 0, flags, 0, 0, 0, 0, 0, 0,
                                 len(full), len(extra)) + full + extra)
        self.pos += 30 + len(full) + len(extra)
        if isinstance(data, (bytes, bytearray)):
            crc = zlib.crc32(data)
            self.f.write(data)
        elif data in _holes and size > 0:
            crc = _crc32_of_zeros(size)
            self.f.seek(size, os.SEEK_CUR)
        else:
            raw = ctypes.string_at(data, size) if size else b""
            crc = zlib.crc32(raw)
            self.f.write(raw)
        self.pos += size
        if size >= _U32:
            desc = struct.pack("<IIQQ", 0x08074B50, crc, size, size)
        elif size:
            desc = struct.pack("<IIII", 0x08074B50, crc, size, size)
        else:
            desc = b""
        self.f.write(desc)
        self.pos += len(desc)
        self.entries.append((full, crc, size, off))

    def write_end_of_file(self):
        cd_off = self.pos
        cd = bytearray()
        for full, crc, size, off in self.entries:
            fields = b""
            if size >= _U32:
                fields += struct.pack("<QQ", size, size)
            if off >= _U32:
                fields += struct.pack("<Q", off)
            extra = struct.pack("<HH", 1, len(fields)) + fields if fields else b""
            s32 = min(size, _U32)
            cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0, 0, 0x0808 if size else 0x0800, 0, 0,
                              0, crc, s32,
                              s32, len(full), len(extra), 0, 0, 0, 0, min(off, _U32))
            cd += full + extra
        n = len(self.entries)
        z64_off = cd_off + len(cd)
        cd += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 0x2D, 0, 0, n, n, len(cd), cd_off)
        cd += struct.pack("<IIQI", 0x07064B50, 0, z64_off, 1)
        cd_len = z64_off - cd_off
        cd += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, min(n, 0xFFFF), min(n, 0xFFFF),
                          min(cd_len, _U32), min(cd_off, _U32), 0)
        self.f.write(cd)
        self.pos += len(cd)


class _Torch2Records:
    """Adds the records torch 2.x writes around _save's (to embed DCP items)."""

    def __init__(self, w, serialization_id):
        self.w = w
        self.sid = serialization_id

    def write_record(self, name, data, size):
        self.w.write_record(name, data, size)
        if name == "data.pkl":
            for n, v in ((".format_version", b"1"), (".storage_alignment", b"64"),
                         ("byteorder", b"little")):
                self.w.write_record(n, v, len(v))


def sparse_save(obj, path):
    """torch.save(obj, path), with the bytes of hole() storages left as holes."""
    with open(path, "wb") as f:
        try:
            w = SparseZipWriter(f, os.path.splitext(os.path.basename(path))[0])
            torch.serialization._save(obj, w, torch.serialization.pickle, 2)
            w.write_record("version", b"3\n", 2)
            w.write_end_of_file()
            f.truncate(f.tell())
        except BaseException:
            os.unlink(path)
            raise


def sparse_save_torch2(obj, f, serialization_id, prefix="archive"):
    """Append to open file f the archive torch 2.x's torch.save writes for obj
    (archive prefix prefix: "archive" for a buffer, the file name without
    extension for a path; .format_version, .storage_alignment, byteorder,
    .data/serialization_id records), hole() storages as holes, however many
    (a whole state dict of them).  Returns its length in bytes."""
    w = SparseZipWriter(f, prefix)
    torch.serialization._save(obj, _Torch2Records(w, serialization_id),
                              torch.serialization.pickle, 2)
    w.write_record("version", b"3\n", 2)
    w.write_record(".data/serialization_id", serialization_id, len(serialization_id))
    w.write_end_of_file()
    return w.pos
