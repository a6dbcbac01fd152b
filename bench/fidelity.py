#!/usr/bin/python3
"""fidelity.py layout REAL.json GEN.json | pickles REAL.pt GEN.pt

layout:  compare two `gatherfs-inspect layout` JSONs on what must match: the
         format line, and per tensor in order its name, dtype, shape, alias
         and piece sequence as (source file name, kind, length).  Source
         offsets and sizes are reported but not compared: they depend on the
         byte length of each data.pkl (memo numbering), not on the format.
pickles: compare inspect_pickles.py dumps of two files, ignoring the byte
         size of data.pkl.
Prints the differences; exits 1 if any.
"""
import json
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


def main():
    mode, real, gen = sys.argv[1:4]
    if mode == "layout":
        a, b = layout_lines(real), layout_lines(gen)
    else:
        a, b = pickle_lines(real, sys.argv[4]), pickle_lines(gen, sys.argv[4])
    if a == b:
        return 0
    import difflib
    sys.stdout.writelines(l + "\n" for l in list(difflib.unified_diff(a, b, real, gen, lineterm=""))[:40])
    return 1


if __name__ == "__main__":
    sys.exit(main())
