#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Write safetensors files of a chosen header length, and check a mount of them.

usage: st_header_len.py write DIR
       st_header_len.py check MNT DIR

write: DIR/single/model.safetensors (header of 0x80 = 128 bytes), DIR/st384/
model.safetensors (0x180), DIR/sharded/ (model.safetensors.index.json and two
shards with headers of 0x280 and 0x80 bytes): every header length's low byte
is 0x80, pickle protocol 2's first byte, and every header is a JSON object
padded with spaces to that length (the format allows trailing spaces).
DIR/expect.json lists each case's tensors (dtype, shape, hex bytes).

check: MNT (a mount of one case, named by DIR) serves every tensor's bytes in
tensors/ and model.safetensors (parsed here, stdlib only) as written.
"""
import json
import os
import struct
import sys

CASES = {
    "single": [[("w", "F32", [4, 8]), ("b", "BF16", [8])]],
    "st384": [[("embed.weight", "F32", [16, 4]), ("norm.weight", "BF16", [4]),
               ("head.bias", "F16", [3]), ("step", "I64", [])]],
    "sharded": [[("a.weight", "F32", [8, 8]), ("a.bias", "BF16", [8])],
                [("b.weight", "F16", [2, 3])]],
}
HLEN = {"single": [0x80], "st384": [0x180], "sharded": [0x280, 0x80]}
SIZE = {"F32": 4, "BF16": 2, "F16": 2, "I64": 8}


def payload(name, dtype, shape):
    """Deterministic bytes of a tensor, different for every name."""
    n = SIZE[dtype]
    for d in shape:
        n *= d
    seed = sum(name.encode()) & 0xff
    return bytes((seed + 7 * i) & 0xff for i in range(n))


def write_st(path, tensors, hlen):
    head, data = {}, b""
    for name, dtype, shape in tensors:
        b = payload(name, dtype, shape)
        head[name] = {"dtype": dtype, "shape": shape,
                      "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    text = json.dumps(head, separators=(",", ":")).encode()
    assert len(text) <= hlen, (path, len(text), hlen)
    text += b" " * (hlen - len(text))
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", hlen) + text + data)
    with open(path, "rb") as f:
        assert f.read(1) == b"\x80", path


def write(root):
    expect = {}
    for case, shards in CASES.items():
        d = os.path.join(root, case)
        os.makedirs(d)
        if len(shards) == 1:
            write_st(os.path.join(d, "model.safetensors"), shards[0], HLEN[case][0])
        else:
            wm = {}
            for i, (tensors, hlen) in enumerate(zip(shards, HLEN[case])):
                f = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
                write_st(os.path.join(d, f), tensors, hlen)
                wm.update({t[0]: f for t in tensors})
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                json.dump({"metadata": {}, "weight_map": wm}, f)
        expect[case] = {t[0]: [t[1], t[2], payload(*t).hex()] for s in shards for t in s}
    with open(os.path.join(root, "expect.json"), "w") as f:
        json.dump(expect, f)


def check(mnt, d):
    case = os.path.basename(os.path.normpath(d))
    with open(os.path.join(os.path.dirname(os.path.normpath(d)), "expect.json")) as f:
        want = json.load(f)[case]
    with open(os.path.join(mnt, "model.safetensors"), "rb") as f:
        blob = f.read()
    hlen = struct.unpack("<Q", blob[:8])[0]
    head = json.loads(blob[8:8 + hlen])
    head.pop("__metadata__", None)
    if sorted(head) != sorted(want):
        sys.exit("%s: model.safetensors holds %s, want %s" % (mnt, sorted(head), sorted(want)))
    for name, (dtype, shape, hexb) in want.items():
        e = head[name]
        a, b = e["data_offsets"]
        got = blob[8 + hlen + a:8 + hlen + b]
        if e["dtype"] != dtype or e["shape"] != shape or got.hex() != hexb:
            sys.exit("%s: model.safetensors: %s is %s %s %s, want %s %s %s" %
                     (mnt, name, e["dtype"], e["shape"], got.hex()[:32], dtype, shape, hexb[:32]))
        with open(os.path.join(mnt, "tensors", name), "rb") as f:
            raw = f.read()
        if raw.hex() != hexb:
            sys.exit("%s: tensors/%s: %s, want %s" % (mnt, name, raw.hex()[:32], hexb[:32]))
    print("  %s: %d tensors OK" % (case, len(want)))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        write(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
