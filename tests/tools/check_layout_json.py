#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Layout JSON files read by gatherfs-inspect: relative base_dir, strict JSON,
and error messages.

Usage: check_layout_json.py INSPECT SCRATCH_DIR

- a relative "base_dir" resolves against the directory holding the JSON
  file, whatever the current directory (ls, cat give the source's bytes);
- trailing data after the JSON value (text, a second value, a NUL byte) and
  a member that appears twice in one object (top level, tensor, piece) are
  refused with one line naming the file (and the member);
- every error names the file exactly once, first, and never repeats a
  context ("tensor a: tensor a:").
"""
import json
import os
import subprocess
import sys

INSPECT, TMP = sys.argv[1], sys.argv[2]
problems = []


def check(ok, msg):
    print(("ok: " if ok else "FAIL: ") + msg)
    if not ok:
        problems.append(msg)


def run(*args, cwd=None):
    p = subprocess.run([INSPECT, *args], cwd=cwd, capture_output=True)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


# --- relative base_dir
data = bytes(range(256)) * 4
os.makedirs(os.path.join(TMP, "ck", "shards"))
os.makedirs(os.path.join(TMP, "elsewhere", "shards"))
with open(os.path.join(TMP, "ck", "shards", "r0.bin"), "wb") as f:
    f.write(data)
# A decoy of the same size where the old (cwd-relative) reading would look.
with open(os.path.join(TMP, "elsewhere", "shards", "r0.bin"), "wb") as f:
    f.write(bytes(len(data)))
layout = {"gatherfs_layout": 1, "base_dir": "shards",
          "sources": [{"path": "r0.bin", "size": len(data)}],
          "tensors": [{"name": "w", "dtype": "uint8", "shape": [len(data)],
                       "pieces": [{"source": 0, "offset": 0, "length": len(data)}]}]}
lpath = os.path.join(TMP, "ck", "l.json")
with open(lpath, "w") as f:
    json.dump(layout, f)
rc, out, err = run("cat", "--layout", lpath, "w", cwd=os.path.join(TMP, "elsewhere"))
check(rc == 0 and out == data,
      f"relative base_dir resolves against the JSON file's directory (rc {rc}, {err.strip()})")
rc, out, err = run("layout", "--layout", "../ck/l.json", cwd=os.path.join(TMP, "elsewhere"))
check(rc == 0 and os.path.isabs(json.loads(out)["base_dir"]) and
      os.path.normpath(json.loads(out)["base_dir"]) == os.path.join(TMP, "ck", "shards"),
      "a relative layout path and base_dir: written back absolute")
layout["base_dir"] = os.path.join(TMP, "ck", "shards")
with open(lpath, "w") as f:
    json.dump(layout, f)
rc, out, err = run("cat", "--layout", lpath, "w", cwd="/")
check(rc == 0 and out == data, "an absolute base_dir is used as it is")

# --- bad documents: (name, text, required fragment of the one error line)
good = {"gatherfs_layout": 1, "sources": [{"path": "r0.bin", "size": len(data)}],
        "tensors": [{"name": "a", "dtype": "uint8", "shape": [len(data)],
                     "pieces": [{"source": 0, "offset": 0, "length": len(data)}]}]}
g = json.dumps(good)


def tensor(t):
    d = dict(good)
    d["tensors"] = [t]
    return json.dumps(d)


cases = [
    ("trailing text", g + " garbage", "unexpected data after the JSON value at byte"),
    ("a second value", g + "\n{}", "unexpected data after the JSON value at byte"),
    ("a trailing NUL", g + "\0", "unexpected data after the JSON value at byte"),
    ("duplicate top-level member",
     g[:-1] + ', "tensors": []}', 'member "tensors" appears twice in the top-level object'),
    ("duplicate tensor member",
     g.replace('"dtype": "uint8"', '"dtype": "uint8", "dtype": "float32"'),
     'member "dtype" appears twice in tensors[0]'),
    ("duplicate piece member",
     g.replace('"offset": 0', '"offset": 0, "offset": 4'),
     'member "offset" appears twice in tensors[0].pieces[0]'),
    ("dtype not a string", tensor({"name": "a", "dtype": 3, "shape": [], "pieces": []}),
     "tensor a: dtype must be a string"),
    ("bad shape", tensor({"name": "a", "dtype": "uint8", "shape": [-1], "pieces": []}),
     "tensor a: a shape dimension must be"),
    ("bad piece offset", tensor({"name": "a", "dtype": "uint8", "shape": [4],
                                 "pieces": [{"source": 0, "offset": "x", "length": 4}]}),
     "tensor a: piece offset must be a number"),
    ("source out of range", tensor({"name": "a", "dtype": "uint8", "shape": [4],
                                    "pieces": [{"source": 3, "offset": 0, "length": 4}]}),
     "tensor a: piece source 3 out of range"),
    ("pieces too long", tensor({"name": "a", "dtype": "uint8", "shape": [4],
                                "pieces": [{"source": 0, "offset": 0, "length": 8}]}),
     "tensor a: pieces exceed its 4 bytes"),
    ("zstd zero piece", tensor({"name": "a", "dtype": "uint8", "shape": [4],
                                "pieces": [{"at": 0, "zero": 4, "zstd": {}}]}),
     "tensor a: a zero piece cannot be zstd"),
    ("object source", json.dumps(dict(good, gatherfs_layout=2, objects=[
        {"name": "o", "source": 9, "offset": 0, "length": 1}])),
     "object o: source 9 out of range"),
    ("no magic", "{}", "not a gatherfs layout"),
    ("base_dir not a string", json.dumps(dict(good, base_dir=3)), "base_dir must be a string"),
]
for name, text, want in cases:
    path = os.path.join(TMP, "ck", "bad.json")
    with open(path, "w") as f:
        f.write(text)
    rc, out, err = run("ls", "--layout", path)
    lines = err.strip("\n").split("\n")
    first = f"gatherfs-inspect: {path}: "
    ok = (rc == 1 and len(lines) == 1 and lines[0].startswith(first) and want in lines[0]
          and lines[0].count(path) == 1 and lines[0].count("tensor a:") <= 1
          and lines[0].count("bad.json") == 1)
    check(ok, f"{name}: {err.strip()!r}")
sys.exit(1 if problems else 0)
