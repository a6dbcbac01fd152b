# SPDX-License-Identifier: Apache-2.0
"""Checks of FP8 mounts for tests/fp8.sh (Python stdlib only: safetensors read by hand).

  fp8_check.py same A B           the tensors of safetensors files/dirs A and B are equal:
                                  names, dtypes, shapes, bytes (a dir: all its *.safetensors)
  fp8_check.py fp32 MNT SRC       MNT (mounted -o dequant=fp32) holds, for each FP8 weight X of
                                  SRC, float32(q) * float32(scale) computed here (a float32
                                  product), no scale tensors, and the other tensors as stored
  fp8_check.py config FILE DTYPE  config.json FILE has no quantization_config and dtype DTYPE
  fp8_check.py index FILE TRUTH   the weight_map of index FILE names the tensors of TRUTH
  fp8_check.py stack SRC OUT      a copy of the MoE dir SRC (and of SRC.truth's truth) with the
                                  experts of each layer stacked: mlp.experts.P [E, M, N] and
                                  mlp.experts.P_scale_inv [E, gm, gn] for P gate_proj, up_proj,
                                  down_proj (transformers' fused naming), into OUT and OUT.truth
  fp8_check.py adapter SRC OUT     a PEFT LoRA adapter (r 4, alpha 8) for q_proj and v_proj of
                                  SRC, with values of few bits (every product and sum exact)
  fp8_check.py lora MNT SRC AD    MNT (mounted -o dequant=bf16,lora=AD) holds for each target
                                  W + 2 * (B @ A) rounded once to bf16, W = float32(q) * scale
  fp8_check.py raw FILE ST NAME    FILE holds the bytes of tensor NAME of safetensors file/dir ST
  fp8_check.py edit FILE OLD NEW  rewrite the header of safetensors FILE: the first OLD (a
                                  JSON text fragment) replaced by NEW (same data, header
                                  padded to its old length)
"""
import glob
import json
import math
import os
import struct
import sys


def read_st(path):
    """{name: (dtype, shape, bytes)} of one safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    hdr = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        out[k] = (v["dtype"], tuple(v["shape"]), data[base + b:base + e])
    return out


def read_any(path):
    if os.path.isdir(path):
        out = {}
        files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
        if not files:
            sys.exit("FAIL: no safetensors in %s" % path)
        for f in files:
            out.update(read_st(f))
        return out
    return read_st(path)


def write_st(path, tensors):
    hdr, off, blobs = {}, 0, []
    for k in sorted(tensors):
        dt, shape, raw = tensors[k]
        hdr[k] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def stack(tensors):
    """tensors with model.layers.L.mlp.experts.E.P.weight[_scale_inv] stacked per (L, P)."""
    out, groups = {}, {}
    for k, v in tensors.items():
        parts = k.split(".")
        if len(parts) == 8 and parts[3:5] == ["mlp", "experts"] and parts[5].isdigit():
            base = ".".join(parts[:5] + [parts[6]])
            sfx = {"weight": "", "weight_scale_inv": "_scale_inv"}[parts[7]]
            groups.setdefault(base + sfx, {})[int(parts[5])] = v
        else:
            out[k] = v
    for k, g in groups.items():
        es = [g[e] for e in range(len(g))]
        out[k] = (es[0][0], (len(es),) + es[0][1], b"".join(e[2] for e in es))
    return out


def make_stacked(src, dst):
    import shutil
    os.makedirs(dst)
    shutil.copy(os.path.join(src, "config.json"), dst)
    t = stack(read_any(src))
    write_st(os.path.join(dst, "model.safetensors"), t)
    os.makedirs(dst + ".truth")
    write_st(os.path.join(dst + ".truth", "truth_bf16.safetensors"),
             stack(read_any(os.path.join(src + ".truth", "truth_bf16.safetensors"))))
    print("ok: %s: %d tensors, %d stacked" % (dst, len(t), sum(1 for v in t.values() if len(v[1]) == 3)))


def cmp_tensors(a, b, la, lb):
    if set(a) != set(b):
        sys.exit("FAIL: names differ: only in %s: %s; only in %s: %s" % (
            la, sorted(set(a) - set(b))[:5], lb, sorted(set(b) - set(a))[:5]))
    for k in sorted(a):
        if a[k][:2] != b[k][:2]:
            sys.exit("FAIL: %s: %s %s in %s, %s %s in %s" % (k, a[k][0], a[k][1], la, b[k][0], b[k][1], lb))
        if a[k][2] != b[k][2]:
            sys.exit("FAIL: %s: bytes differ" % k)
    print("ok: %d tensors equal (%s, %s)" % (len(a), la, lb))


def f32(x):
    """x rounded to float32 (nearest, ties to even)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def e4m3(b):
    s = -1.0 if b & 0x80 else 1.0
    e, m = (b >> 3) & 15, b & 7
    if e == 15 and m == 7:
        return math.nan
    return s * (math.ldexp(8 + m, e - 10) if e else math.ldexp(m, -9))


def scales(dtype, raw):
    if dtype == "F32":
        return list(struct.unpack("<%df" % (len(raw) // 4), raw))
    if dtype == "BF16":
        return [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
    if dtype == "F8_E8M0":
        return [math.ldexp(1.0, b - 127) for b in raw]
    sys.exit("FAIL: scale dtype %s" % dtype)


def deq32(s, k, qc):
    """The float32 values of FP8 weight k of tensors s: float32(q) * float32(scale)."""
    suffix = "weight_scale_inv" if qc["quant_method"] == "fp8" else "weight_scale"
    bs = qc.get("weight_block_size")
    dt, shape, raw = s[k]
    sdt, sshape, sraw = s[k[:-len("weight")] + suffix if k.endswith(".weight") else k + "_scale_inv"]
    sv = scales(sdt, sraw)
    M, N = shape[-2], shape[-1]
    E = len(raw) // (M * N)
    if bs:
        bm, bn = bs
    elif len(sshape) == 2 and sshape[1] == 1:
        bm, bn = 1, N
    else:
        bm, bn = M, N
    gm, gn = -(-M // bm), -(-N // bn)
    lut = [e4m3(b) for b in range(256)]
    out = []
    for i in range(E * M):
        srow = ((i // M) * gm + (i % M) // bm) * gn
        out += [f32(lut[raw[i * N + j]] * sv[srow + j // bn]) for j in range(N)]
    return out


def bf16_bits(v):
    """float v rounded once to bfloat16 (nearest, ties to even; normal range), its bits."""
    if v == 0:
        return 0x8000 if math.copysign(1, v) < 0 else 0
    m, e = math.frexp(v)
    r = math.ldexp(round(math.ldexp(m, 8)), e - 8)
    return struct.unpack("<I", struct.pack("<f", r))[0] >> 16


def make_adapter(src, out):
    import random
    random.seed(5)
    t = read_any(src)
    os.makedirs(out)
    ad, r = {}, 4
    for k, (dt, shape, raw) in sorted(t.items()):
        if dt != "F8_E4M3" or not (k.endswith("q_proj.weight") or k.endswith("v_proj.weight")):
            continue
        M, N = shape
        p = "base_model.model." + k[:-len(".weight")]
        vals = lambda n: [random.randint(-16, 16) / 64.0 for _ in range(n)]
        ad[p + ".lora_A.weight"] = ("F32", (r, N), struct.pack("<%df" % (r * N), *vals(r * N)))
        ad[p + ".lora_B.weight"] = ("F32", (M, r), struct.pack("<%df" % (M * r), *vals(M * r)))
    write_st(os.path.join(out, "adapter_model.safetensors"), ad)
    json.dump({"peft_type": "LORA", "r": r, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]},
              open(os.path.join(out, "adapter_config.json"), "w"))
    print("ok: adapter for %d modules" % (len(ad) // 2))


def check_lora(mnt, src, adir):
    got = read_any(mnt)
    s = read_any(src)
    ad = read_any(adir)
    qc = json.load(open(os.path.join(src, "config.json")))["quantization_config"]
    n = 0
    for k in sorted(ad):
        if not k.endswith(".lora_A.weight"):
            continue
        name = k[len("base_model.model."):-len(".lora_A.weight")] + ".weight"
        _, (r, N), araw = ad[k]
        _, (M, _), braw = ad[k.replace("lora_A", "lora_B")]
        A = struct.unpack("<%df" % (r * N), araw)
        B = struct.unpack("<%df" % (M * r), braw)
        W = deq32(s, name, qc)
        want = b"".join(struct.pack("<H", bf16_bits(W[i * N + j] + 2.0 * sum(B[i * r + q] * A[q * N + j] for q in range(r))))
                        for i in range(M) for j in range(N))
        if got.get(name) != ("BF16", (M, N), want):
            sys.exit("FAIL: %s: not W + 2 (B @ A) rounded once" % name)
        n += 1
    if n == 0:
        sys.exit("FAIL: no LoRA target")
    print("ok: %d merged FP8 weights = W + 2 (B @ A), rounded once" % n)


def check_fp32(mnt, src):
    got = read_any(mnt)
    s = read_any(src)
    qc = json.load(open(os.path.join(src, "config.json")))["quantization_config"]
    suffix = "weight_scale_inv" if qc["quant_method"] == "fp8" else "weight_scale"
    nq = 0
    for k, (dt, shape, raw) in s.items():
        if k.endswith("." + suffix) or k.endswith(".input_scale") or k.endswith("_scale_inv"):
            if k in got:
                sys.exit("FAIL: %s is still in the dequantized model" % k)
            continue
        if dt != "F8_E4M3":
            if got.get(k) != (dt, shape, raw):
                sys.exit("FAIL: %s not as stored" % k)
            continue
        w = deq32(s, k, qc)
        want = struct.pack("<%df" % len(w), *w)
        if got.get(k) != ("F32", shape, want):
            g = got.get(k)
            sys.exit("FAIL: %s: %s %s, not float32(q) * scale" % (k, g[0] if g else None, g[1] if g else None))
        nq += 1
    if nq == 0 or len(got) != len([k for k in s if not (k.endswith("." + suffix) or k.endswith(".input_scale") or k.endswith("_scale_inv"))]):
        sys.exit("FAIL: %d dequantized weights, %d tensors" % (nq, len(got)))
    print("ok: %d weights = float32(q) * scale, %d tensors" % (nq, len(got)))


def check_config(path, dtype):
    c = json.load(open(path))
    if "quantization_config" in c:
        sys.exit("FAIL: %s has quantization_config" % path)
    if c.get("dtype") != dtype or c.get("torch_dtype", dtype) != dtype:
        sys.exit("FAIL: %s: dtype %s, torch_dtype %s" % (path, c.get("dtype"), c.get("torch_dtype")))
    print("ok: config.json without quantization_config, dtype %s" % dtype)


def check_index(path, truth):
    wm = json.load(open(path))["weight_map"]
    names = set(read_any(truth))
    if set(wm) != names:
        sys.exit("FAIL: %s: weight_map differs: %s" % (path, sorted(set(wm) ^ names)[:5]))
    print("ok: %s names the %d tensors" % (path, len(names)))


def edit(path, old, new):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    hdr = data[8:8 + n].decode()
    if old not in hdr:
        sys.exit("FAIL: %s not in the header of %s" % (old, path))
    hdr = hdr.replace(old, new, 1)
    if len(hdr) > n:
        sys.exit("FAIL: the edited header is longer")
    hdr = hdr + " " * (n - len(hdr))
    with open(path, "wb") as f:
        f.write(data[:8] + hdr.encode() + data[8 + n:])


def main():
    a = sys.argv[1:]
    if a[:1] == ["same"] and len(a) == 3:
        cmp_tensors(read_any(a[1]), read_any(a[2]), a[1], a[2])
    elif a[:1] == ["fp32"] and len(a) == 3:
        check_fp32(a[1], a[2])
    elif a[:1] == ["config"] and len(a) == 3:
        check_config(a[1], a[2])
    elif a[:1] == ["index"] and len(a) == 3:
        check_index(a[1], a[2])
    elif a[:1] == ["adapter"] and len(a) == 3:
        make_adapter(a[1], a[2])
    elif a[:1] == ["lora"] and len(a) == 4:
        check_lora(a[1], a[2], a[3])
    elif a[:1] == ["raw"] and len(a) == 4:
        if open(a[1], "rb").read() != read_any(a[2])[a[3]][2]:
            sys.exit("FAIL: %s differs from %s in %s" % (a[1], a[3], a[2]))
        print("ok: %s = %s" % (a[1], a[3]))
    elif a[:1] == ["stack"] and len(a) == 3:
        make_stacked(a[1], a[2])
    elif a[:1] == ["edit"] and len(a) == 4:
        edit(a[1], a[2], a[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
