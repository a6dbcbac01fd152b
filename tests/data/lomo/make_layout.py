"""make_layout.py CASE_DIR: write CASE_DIR/layout.json, a layout JSON (docs/layout-json.md)
over the per-rank raw partition dumps CASE_DIR/raw/rank_R.bin (format "lomo-raw-v1":
whole partitions, padding included, described by rank_R.json) and raw/buffers.bin.

This is how a user serves a custom per-rank dump with a layout written by hand: the
valid part of each rank's partition, in rank order, then the buffers, then the tied
alias.  It was run once to make the committed layout.json files; stdlib only.
"""
import json
import os
import sys


def main():
    case = sys.argv[1]
    raw = os.path.join(case, "raw")
    r0 = json.load(open(os.path.join(raw, "rank_0.json")))
    ws = r0["world_size"]
    ranks = [json.load(open(os.path.join(raw, f"rank_{r}.json"))) for r in range(ws)]
    bufs = {b["name"]: b for b in json.load(open(os.path.join(raw, "buffers.json")))["buffers"]}
    sources = [{"path": f"raw/rank_{r}.bin", "size": os.path.getsize(os.path.join(raw, f"rank_{r}.bin"))}
               for r in range(ws)]
    sources.append({"path": "raw/buffers.bin", "size": os.path.getsize(os.path.join(raw, "buffers.bin"))})
    itemsize = {"float32": 4, "bfloat16": 2, "int64": 8}
    tensors = []
    for key in r0["state_dict_keys"]:
        if key in r0["aliases"]:
            tensors.append({"name": key, "alias_of": r0["aliases"][key]})
        elif key in bufs:
            b = bufs[key]
            tensors.append({"name": key, "dtype": b["dtype"], "shape": b["shape"],
                            "pieces": [{"source": ws, "offset": b["offset"], "length": b["nbytes"]}]})
        else:
            parts = [next(p for p in m["params"] if p["name"] == key) for m in ranks]
            pieces = [{"source": r, "offset": p["offset"], "length": p["valid_numel"] * itemsize[p["dtype"]]}
                      for r, p in enumerate(parts) if p["valid_numel"]]
            tensors.append({"name": key, "dtype": parts[0]["dtype"], "shape": parts[0]["ds_shape"],
                            "pieces": pieces})
    layout = {"gatherfs_layout": 1, "format": "json",
              "info": f"LOMO raw partition dump, {ws} ranks (hand-written layout)",
              "sources": sources, "tensors": tensors}
    with open(os.path.join(case, "layout.json"), "w") as f:
        json.dump(layout, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
