# SPDX-License-Identifier: Apache-2.0
"""edit_rank_pickle.py FILE OLD NEW: replace the first occurrence of the bytes
OLD (a Python bytes literal) by NEW in the data.pkl of the torch zip FILE, in
place, keeping every other record (written STORED, as torch writes them).
Exit 1 if OLD is not in the pickle."""
import ast
import sys
import zipfile


def main():
    path, old, new = sys.argv[1], ast.literal_eval(sys.argv[2]), ast.literal_eval(sys.argv[3])
    with zipfile.ZipFile(path) as z:
        items = [(i, z.read(i.filename)) for i in z.infolist()]
    out = []
    found = False
    for info, data in items:
        if info.filename.endswith("/data.pkl"):
            found = old in data
            data = data.replace(old, new, 1)
        out.append((info.filename, data))
    if not found:
        sys.exit(f"{path}: {old!r} not in its data.pkl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in out:
            z.writestr(name, data)


if __name__ == "__main__":
    main()
