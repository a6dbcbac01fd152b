#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Check a gatherfs mount against an expected tensor list.

usage: check_mount.py MOUNTPOINT EXPECTED_TSV CHECKPOINT_DIR

EXPECTED_TSV: one line per state-dict key in model order,
name<TAB>dtype<TAB>[shape]<TAB>sha256 of the tensor's contiguous bytes; %XX
in names is decoded (so names with tabs or newlines can be listed).  Its
alias table (tests/tools/alias_table.py) is the truth the tied aliases of
tensors/INDEX must equal.
CHECKPOINT_DIR: the directory whose regular files the mount passes through.

Checks pytorch_model.bin (torch.load with weights_only where available, and
mmap=True where available; names, order, dtypes, shapes, sha256, tied
aliases sharing one storage; zipfile.testzip; record names and 64-byte
alignment), tensors/ (INDEX, sizes, bytes, symlinks, xattrs), layout.json
and the passed-through files.  Prints one line per problem and exits 1 if
there is any.
"""
import collections
import errno
import filecmp
import hashlib
import inspect
import json
import os
import struct
import sys
import urllib.parse
import zipfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from alias_table import alias_table  # noqa: E402

VIRTUAL = {"pytorch_model.bin", "model.safetensors", "layout.json", "tensors"}
problems = []


def bad(msg):
    problems.append(msg)
    print("FAIL:", msg)


def escape_full(name):
    """A state-dict key escaped as tensors/ names are, before any cut (bytes)."""
    special = {".": b"%2E", "..": b"%2E%2E", "INDEX": b"%49NDEX"}
    if name in special:
        return special[name]
    out = bytearray()
    for b in name.encode():
        if b in (0x25, 0x2F) or b < 0x20 or b == 0x7F:
            out += b"%%%02X" % b
        else:
            out.append(b)
    return bytes(out)


def escape(name):
    """The tensors/ file name of a state-dict key (bytes): names over 255
    bytes keep at most 237 bytes (whole escapes and UTF-8 characters), then
    "%~" and the FNV-1a 64 hash of the key in 16 hex digits."""
    full = escape_full(name)
    if len(full) <= 255:
        return full
    k = 0
    while True:
        if full[k] == 0x25:
            unit = 3
        else:
            unit = 1
            while k + unit < len(full) and full[k + unit] & 0xC0 == 0x80:
                unit += 1
        if k + unit > 237:
            break
        k += unit
    h = 0xcbf29ce484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return full[:k] + b"%%~%016x" % h


def raw(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def storage_ptr(t):
    return t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr()


def check_state_dict(sd, expected, aliases, what):
    if not isinstance(sd, (dict, collections.OrderedDict)):
        bad(f"{what}: root is {type(sd).__name__}, not a dict")
        return
    if list(sd) != [e[0] for e in expected]:
        bad(f"{what}: keys/order differ: {list(sd)[:5]}... vs {[e[0] for e in expected][:5]}...")
        return
    for name, dtype, shape, sha in expected:
        t = sd[name]
        got = (str(t.dtype).replace("torch.", ""), str(list(t.shape)),
               hashlib.sha256(raw(t)).hexdigest())
        if got != (dtype, shape, sha):
            bad(f"{what}: {name}: got {got[:2]} {got[2][:12]}, want {dtype} {shape} {sha[:12]}")
        if t.requires_grad:
            bad(f"{what}: {name} requires grad")
    for alias, target in aliases.items():
        if storage_ptr(sd[alias]) != storage_ptr(sd[target]):
            bad(f"{what}: alias {alias} does not share {target}'s storage")


def check_zip(path):
    with zipfile.ZipFile(path) as z:
        first_bad = z.testzip()
        if first_bad is not None:
            bad(f"zipfile.testzip: bad CRC in {first_bad}")
        names = z.namelist()
        prefix = names[0].split("/")[0] if names else ""
        rel = [n[len(prefix) + 1:] for n in names]
        if not all(n.startswith(prefix + "/") for n in names):
            bad(f"records without the common prefix: {names[:4]}")
        nstor = len(rel) - 3
        want = ["data.pkl", "byteorder"] + [f"data/{k}" for k in range(nstor)] + ["version"]
        if rel != want:
            bad(f"records are {rel[:4]}...{rel[-2:]}, want data.pkl, byteorder, data/0.., version")
        if z.read(names[-1]) != b"3\n" or z.read(names[1]) != b"little":
            bad("version or byteorder content wrong")
        with open(path, "rb") as f:
            for info in z.infolist():
                f.seek(info.header_offset)
                hdr = f.read(30)
                nlen, xlen = struct.unpack("<HH", hdr[26:30])
                data = info.header_offset + 30 + nlen + xlen
                if info.compress_type != zipfile.ZIP_STORED or data % 64:
                    bad(f"{info.filename}: method {info.compress_type}, data at {data}")
    return nstor


def main():
    mnt, tsv, ckpt = sys.argv[1:4]
    expected = []
    for line in open(tsv):
        if line.strip():
            name, dtype, shape, sha = line.rstrip("\n").split("\t")
            expected.append((urllib.parse.unquote(name), dtype, shape, sha))
    path = os.path.join(mnt, "pytorch_model.bin")

    # tensors/INDEX: escaped names, dtypes, shapes, byte counts, alias targets
    with open(os.path.join(mnt, "tensors", "INDEX"), "rb") as f:
        index = [l.rstrip(b"\n").split(b"\t") for l in f]
    if index[0] != [b"name", b"dtype", b"shape", b"bytes", b"target", b"key"]:
        bad(f"INDEX header is {index[0]}")
    rows = index[1:]
    if [r[:3] + r[5:] for r in rows] != [[escape(n), d.encode(), s.encode(), escape_full(n)]
                                         for n, d, s, _ in expected]:
        bad("INDEX names/dtypes/shapes/keys differ from the expected list")
    files = {r[0]: urllib.parse.unquote_to_bytes(r[5]).decode() for r in rows}
    aliases = {files[r[0]]: files[r[4]] for r in rows if r[4] != b"-"}
    want_aliases = alias_table(tsv)
    if aliases != want_aliases:
        bad(f"tensors/INDEX aliases {aliases}, the truth's {want_aliases}")

    # pytorch_model.bin through torch.load
    params = inspect.signature(torch.load).parameters
    kw = {"weights_only": True} if "weights_only" in params else {}
    check_state_dict(torch.load(path, **kw), expected, aliases, "torch.load" + (
        "(weights_only=True)" if kw else ""))
    if "mmap" in params:
        check_state_dict(torch.load(path, mmap=True, **kw), expected, aliases, "torch.load(mmap=True)")
    else:
        print(f"SKIP: torch.load(mmap=True) needs torch >= 2.1 (this is {torch.__version__})")
    nstor = check_zip(path)
    if nstor != len(expected) - len(aliases):
        bad(f"{nstor} storages for {len(expected)} keys and {len(aliases)} aliases")

    # tensors/: sizes, bytes, symlinks, xattrs
    tdir = os.path.join(mnt, "tensors").encode()
    listed = sorted(os.listdir(tdir))
    if listed != sorted([b"INDEX"] + [escape(e[0]) for e in expected]):
        bad("tensors/ does not list INDEX and one entry per key")
    for (name, dtype, shape, sha), row in zip(expected, rows):
        p = os.path.join(tdir, escape(name))
        if name in aliases:
            if not os.path.islink(p) or os.readlink(p) != escape(aliases[name]):
                bad(f"tensors/{name}: not a symlink to {aliases[name]}")
        st = os.stat(p)
        if st.st_size != int(row[3]):
            bad(f"tensors/{name}: size {st.st_size}, INDEX says {row[3]}")
        with open(p, "rb") as f:
            data = f.read()
        if hashlib.sha256(data).hexdigest() != sha or len(data) != st.st_size:
            bad(f"tensors/{name}: bytes differ")
        if name not in aliases:
            attrs = {a: os.getxattr(p, a) for a in os.listxattr(p)}
            want = {"user.gatherfs.dtype": dtype.encode(), "user.gatherfs.shape": shape.encode(),
                    "user.gatherfs.name": name.encode(),
                    "user.gatherfs.sha256": hashlib.sha256(data).hexdigest().encode()}
            if attrs != want:
                bad(f"tensors/{name}: xattrs {attrs}")
            # outside user.*: not supported (ENOTSUP: ls -l stops asking); a
            # user.* name the file lacks: ENODATA
            for a, code in (("security.selinux", errno.ENOTSUP),
                            ("system.posix_acl_access", errno.ENOTSUP),
                            ("user.gatherfs.none", errno.ENODATA)):
                try:
                    os.getxattr(p, a)
                    bad(f"tensors/{name}: getxattr {a} succeeded")
                except OSError as e:
                    if e.errno != code:
                        bad(f"tensors/{name}: getxattr {a}: {e.strerror}, not {os.strerror(code)}")

    # layout.json
    with open(os.path.join(mnt, "layout.json")) as f:
        layout = json.load(f)
    if [t["name"] for t in layout["tensors"]] != [e[0] for e in expected]:
        bad("layout.json tensor names differ")

    # passed-through files: every regular file of the checkpoint root
    # (except the layout's own source files: their contents are the views)
    sources = {os.path.realpath(os.path.join(layout["base_dir"], s["path"]))
               for s in layout["sources"]}
    # (and the optimizer-state views of a DeepSpeed import: optim/ and, when
    # served, latest_universal naming <tag>_universal/; tests/universal.sh
    # checks their contents)
    virtual = set(VIRTUAL)
    if layout.get("optimizer_state"):
        virtual.add("optim")
    if os.path.isfile(os.path.join(mnt, "latest_universal")):
        with open(os.path.join(mnt, "latest_universal")) as f:
            udir = f.read()
        if not os.path.isdir(os.path.join(mnt, udir)):
            bad(f"latest_universal names {udir!r}, which is not a directory")
        virtual |= {"latest_universal", udir}
    # (and the files that point at what the mount does not show: DeepSpeed's
    # latest, DCP's .metadata)
    dead = {"deepspeed": "latest", "dcp": ".metadata"}.get(layout.get("format"))
    passed = sorted(n for n in os.listdir(ckpt) if n not in virtual and n != dead
                    and os.path.isfile(os.path.join(ckpt, n))
                    and os.path.realpath(os.path.join(ckpt, n)) not in sources)
    if sorted(os.listdir(mnt)) != sorted(passed + list(virtual)):
        bad(f"root lists {sorted(os.listdir(mnt))}, want {sorted(passed + list(virtual))}")
    # (config.json under -o dtype: the checkpoint's, but its dtype the one served)
    floats = {d for _, d, _, _ in expected if d in ("float32", "float16", "bfloat16")}
    for n in passed:
        if filecmp.cmp(os.path.join(ckpt, n), os.path.join(mnt, n), shallow=False):
            continue
        if n == "config.json" and len(floats) == 1:
            with open(os.path.join(ckpt, n)) as f:
                orig = json.load(f)
            with open(os.path.join(mnt, n)) as f:
                got = json.load(f)
            dt = floats.pop()
            keys = [k for k in ("torch_dtype", "dtype") if k in orig] or ["torch_dtype"]
            if {k: dt for k in keys} == {k: got.get(k) for k in keys} and \
                    {k: v for k, v in orig.items() if k not in keys} == \
                    {k: v for k, v in got.items() if k not in keys}:
                continue
        bad(f"passed-through {n} differs")

    if problems:
        print(f"FAIL {len(problems)} problems")
        sys.exit(1)
    print(f"OK {len(expected)} tensors, {len(aliases)} aliases, {nstor} storages, {len(passed)} passed-through files")


main()
