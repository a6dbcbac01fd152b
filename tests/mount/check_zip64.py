#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""check_zip64.py MOUNTPOINT AFTER_BYTES: pytorch_model.bin of zip64.json
(make_layouts.py) is a valid ZIP64 archive that torch loads: "big" is 4 GiB
of int16 zeros, "after" holds the 8 bytes in the file AFTER_BYTES."""
import inspect
import os
import struct
import sys
import zipfile

import torch

mnt, after_path = sys.argv[1:3]
path = os.path.join(mnt, "pytorch_model.bin")
big = 4096 << 20
with zipfile.ZipFile(path) as z:
    infos = {i.filename.split("/", 1)[1]: i for i in z.infolist()}
    if infos["data/0"].file_size != big or infos["data/1"].header_offset <= big:
        sys.exit(f"FAIL: sizes/offsets {infos['data/0'].file_size} {infos['data/1'].header_offset}")
    bad = z.testzip()
    if bad is not None:
        sys.exit(f"FAIL: zipfile.testzip: bad CRC in {bad}")
print("zipfile: ZIP64 sizes and offsets, CRCs OK")
kw = {"weights_only": True} if "weights_only" in inspect.signature(torch.load).parameters else {}
sd = torch.load(path, **kw)
after = struct.unpack("<2f", open(after_path, "rb").read())
if list(sd) != ["big", "after"] or sd["big"].shape != (big // 2,) or sd["big"].dtype != torch.int16:
    sys.exit(f"FAIL: torch.load: {[(k, v.dtype, v.shape) for k, v in sd.items()]}")
if sd["big"].count_nonzero().item() != 0 or sd["after"].tolist() != list(after):
    sys.exit("FAIL: torch.load: wrong values")
print("torch.load: OK")
