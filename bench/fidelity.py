#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""fidelity.py layout REAL.json GEN.json | pickles REAL.pt GEN.pt | dcpmeta REAL GEN

layout:  compare two `gatherfs-inspect layout` JSONs on what must match: the
         format line, and per tensor in order its name, dtype, shape, alias
         and piece sequence as (source file name, kind, length).  Source
         offsets and sizes are reported but not compared: they depend on the
         byte length of each data.pkl (memo numbering), not on the format.
pickles: compare inspect_pickles.py dumps of two files, ignoring the byte
         size of data.pkl.
dcpmeta: compare two DCP .metadata pickles as trees (classes by name, their
         state, containers in order, leaf types), loaded inertly (no class
         is imported); leaf values are compared except the ids and paths of
         storage_meta and the offsets and lengths of storage_data entries.
Prints the differences; exits 1 if any.
"""
import json
import pickle
import re
import subprocess
import sys


def layout_lines(path):
    lay = json.load(open(path))
    src = [s["path"] for s in lay["sources"]]
    out = [f"format {lay.get('format')} | {lay.get('info')}",
           "sources " + " ".join(sorted(src))]
    for t in lay["tensors"]:
        pieces = [(src[p["source"]] if "source" in p else None, p.get("kind", "file"), p["length"])
                  for p in t.get("pieces", [])]
        extra = {k: v for k, v in t.items() if k not in ("name", "dtype", "shape", "alias", "pieces")}
        out.append(f"{t['name']} {t.get('dtype')} {t.get('shape')} alias={t.get('alias', '')} "
                   f"{pieces} {extra}")
    return out


def pickle_lines(path, tool):
    txt = subprocess.run(["/usr/bin/python3", tool, path], check=True, capture_output=True,
                         text=True).stdout
    lines = txt.splitlines()[1:]  # the first names the file
    return [re.sub(r"(data\.pkl +)\d+ bytes", r"\1N bytes", ln) for ln in lines]


class _Inert:
    def __init__(self, cls, args):
        self.cls, self.args, self.state = cls, args, None

    def __setstate__(self, state):
        self.state = state


class _InertUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        full = f"{module}.{name}"

        class Stand(_Inert):
            def __new__(cls, *args):
                obj = object.__new__(_Inert)
                obj.__init__(full, args)
                return obj
        Stand.__name__ = full
        return Stand


def _tree(v, out, depth, skip_values):
    pad = "  " * depth
    if isinstance(v, _Inert):
        out.append(f"{pad}{v.cls}")
        for a in v.args:
            _tree(a, out, depth + 1, skip_values)
        if v.state is not None:
            _tree(v.state, out, depth + 1, skip_values or v.cls.endswith(("StorageMeta",
                                                                          "_StorageInfo")))
    elif isinstance(v, dict):
        out.append(f"{pad}dict")
        for k, x in v.items():
            _tree(k, out, depth + 1, skip_values)
            _tree(x, out, depth + 2, skip_values or k in ("offset", "length"))
    elif isinstance(v, (list, tuple)):
        out.append(f"{pad}{type(v).__name__} {len(v)}")
        for x in v:
            _tree(x, out, depth + 1, skip_values)
    elif isinstance(v, type):
        out.append(f"{pad}global {v.__name__}")
    else:
        out.append(f"{pad}{type(v).__name__}" + ("" if skip_values else f" {v!r}"))


def dcpmeta_lines(path):
    with open(path, "rb") as f:
        meta = _InertUnpickler(f).load()
    out = []
    _tree(meta, out, 0, False)
    return out


def main():
    mode, real, gen = sys.argv[1:4]
    if mode == "layout":
        a, b = layout_lines(real), layout_lines(gen)
    elif mode == "dcpmeta":
        a, b = dcpmeta_lines(real), dcpmeta_lines(gen)
    else:
        a, b = pickle_lines(real, sys.argv[4]), pickle_lines(gen, sys.argv[4])
    if a == b:
        return 0
    import difflib
    sys.stdout.writelines(l + "\n" for l in list(difflib.unified_diff(a, b, real, gen, lineterm=""))[:40])
    return 1


if __name__ == "__main__":
    sys.exit(main())
