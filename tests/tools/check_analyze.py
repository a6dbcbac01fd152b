#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks of `gatherfs-inspect diff`, `stats` and `check` on real fixtures.

usage: check_analyze.py (diff|stats|check) INSPECT SRCDIR TMPDIR

The altered copies are made here: a fixture is exported to safetensors with
`gatherfs-inspect export`, then its bytes are edited (one ulp, two experts
swapped, a tensor renamed, a shape changed, a NaN planted, an expert zeroed
or copied, a layer dropped).  Expected values come from torch in fp64.
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys

import torch

MODE, INSPECT, SRC, TMP = sys.argv[1:5]
DATA = os.path.join(SRC, "tests", "data")
MOE = os.path.join(DATA, "megatron", "moe_ep2", "legacy_torch")
MOE_DIST = os.path.join(DATA, "megatron", "moe_ep2", "training_torch_dist")
LLAMA = os.path.join(DATA, "plain", "llama_bf16")
failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


def run(*args, want=None):
    p = subprocess.run([INSPECT, *args], capture_output=True, text=True, timeout=600)
    if want is not None and p.returncode != want:
        print(p.stdout[-3000:], p.stderr[-3000:])
        check(False, f"{' '.join(args)}: exit {p.returncode}, expected {want}")
    return p


def jsonl(out):
    return [json.loads(line) for line in out.splitlines()]


# ---- safetensors, by hand (stdlib): an ordered dict name -> [dtype, shape, bytes]
def st_load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = [v["dtype"], list(v["shape"]), bytearray(data[a:b])]
    return dict(sorted(out.items(), key=lambda kv: head[kv[0]]["data_offsets"][0]))


def st_save(path, tensors):
    head, blobs, off = {}, [], 0
    for k, (dt, shape, b) in tensors.items():
        head[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(bytes(b))
        off += len(b)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


TORCH_DT = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
            "F64": torch.float64, "I64": torch.int64}


def as_tensor(entry):
    dt, shape, b = entry
    return torch.frombuffer(bytearray(b), dtype=TORCH_DT[dt]).reshape(shape)


def export(src, dest, *opts):
    run("export", *opts, src, dest, want=0)
    return dest


def base_moe():
    """The MoE fixture as one fp32 safetensors file and a config.json beside it."""
    d = os.path.join(TMP, "moe")
    path = os.path.join(d, "model.safetensors")
    if not os.path.exists(path):
        os.makedirs(d, exist_ok=True)
        export(MOE, path)
        t = st_load(path)
        layers = {int(k.split(".")[2]) for k in t if k.startswith("model.layers.")}
        experts = {int(k.split(".")[5]) for k in t if ".experts." in k}
        emb = t["model.embed_tokens.weight"][1]
        cfg = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
               "num_hidden_layers": len(layers), "num_local_experts": len(experts),
               "vocab_size": emb[0], "hidden_size": emb[1], "tie_word_embeddings": False}
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
    return d


def variant(name, edit, base=None):
    """A copy of base (default: the MoE fixture) with edit(tensors) applied."""
    base = base or base_moe()
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(base, "config.json"), d)
    t = st_load(os.path.join(base, "model.safetensors"))
    edit(t)
    st_save(os.path.join(d, "model.safetensors"), t)
    return d


def big_pair():
    """Two files of one 2-D fp32 tensor of 400000 values (several chunks of
    the reductions): NaN, Inf, -0 and a large mean in the first chunk; B
    differs from A in one value of the last chunk."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(400, 1000, generator=g, dtype=torch.float32) * 0.02 + 3.0
    x.view(-1)[10] = float("nan")
    x.view(-1)[11] = float("inf")
    x.view(-1)[12] = -0.0
    y = x.clone()
    y.view(-1)[399_990] += 0.5
    out = []
    for name, t in (("big_a", x), ("big_b", y)):
        d = os.path.join(TMP, name)
        st_save(os.path.join(d, "model.safetensors"),
                {"model.layers.0.big.weight": ["F32", [400, 1000], bytearray(t.numpy().tobytes())]})
        out.append(d)
    return x, y, out


def dtypes_file():
    """One tensor of each float dtype (and int64) with NaN, Inf, -0 planted."""
    g = torch.Generator().manual_seed(3)
    out = {}
    for st, dt in (("F64", torch.float64), ("F16", torch.float16), ("BF16", torch.bfloat16),
                   ("F32", torch.float32)):
        x = (torch.randn(300, 7, generator=g) * 5).to(dt)
        x.view(-1)[3] = float("nan")
        x.view(-1)[4] = float("-inf")
        x.view(-1)[5] = -0.0
        raw = x.view(torch.int16).numpy().tobytes() if dt == torch.bfloat16 else x.numpy().tobytes()
        out["model.layers.0.%s.weight" % st.lower()] = [st, [300, 7], bytearray(raw)]
    i = torch.arange(-500, 1600, dtype=torch.int64).reshape(30, 70)
    out["model.layers.0.i64.weight"] = ["I64", [30, 70], bytearray(i.numpy().tobytes())]
    d = os.path.join(TMP, "dtypes")
    st_save(os.path.join(d, "model.safetensors"), out)
    return d


def finite_file():
    """Finite fp64, fp32 and bf16 tensors of several chunks (128 Ki values) and a
    few more, over a wide range: sums that depend on their order."""
    g = torch.Generator().manual_seed(4)
    out = {}
    for st, dt, n in (("F64", torch.float64, 300001), ("F32", torch.float32, 262147),
                      ("BF16", torch.bfloat16, 131075)):
        x = (torch.randn(n, generator=g, dtype=torch.float64)
             * torch.exp(2 * torch.randn(n, generator=g, dtype=torch.float64)) + 1.5).to(dt)
        raw = x.view(torch.int16).numpy().tobytes() if dt == torch.bfloat16 else x.numpy().tobytes()
        out["model.layers.0.%s.weight" % st.lower()] = [st, [n], bytearray(raw)]
    d = os.path.join(TMP, "finite")
    st_save(os.path.join(d, "model.safetensors"), out)
    return d


def ndiff_of(a, b):
    x, y = as_tensor(a).double().flatten(), as_tensor(b).double().flatten()
    same = (x == y) & ~((x == 0) & (torch.signbit(x) != torch.signbit(y)))
    same |= torch.isnan(x) & torch.isnan(y)
    return int((~same).sum())


# ------------------------------------------------------------------ diff
def test_diff():
    # the same model in two formats: Megatron legacy torch vs torch_dist, the
    # Megatron names vs the model's own state dict, safetensors vs .bin
    for a, b, opts in ((MOE, MOE_DIST, []),
                       (os.path.join(DATA, "megatron", "tp2_pp1", "legacy_torch"),
                        os.path.join(DATA, "megatron", "tp2_pp1", "truth_megatron_modules.pt"),
                        ["--a-naming", "megatron"]),
                       (LLAMA, os.path.join(DATA, "plain", "llama_bf16_bin"), []),
                       (MOE, base_moe(), [])):
        p = run("diff", *opts, "--json", a, b, want=0)
        rows = jsonl(p.stdout)
        s = rows[-1]["summary"]
        check(s["equal"] == len(rows) - 1 > 10 and s["tensors"] == len(rows) - 1,
              f"diff {a} {b}: every one of {len(rows) - 1} tensors equal")
        check(all(r["status"] == "equal" and r["ndiff"] == 0 and r["cosine"] == 1
                  for r in rows[:-1]), f"diff {a} {b}: rows equal, ndiff 0, cosine 1")
        fields = ["name", "status", "dtype_a", "dtype_b", "shape_a", "shape_b", "numel", "ndiff",
                  "max_abs", "max_rel", "mean_abs", "cosine", "nan_a", "nan_b", "inf_a", "inf_b"]
        check(list(rows[0]) == fields, f"JSON Lines fields: {list(rows[0])}")

    # one ulp, two experts swapped, a tensor renamed, a shape changed
    base = st_load(os.path.join(base_moe(), "model.safetensors"))
    ulp = "model.layers.1.self_attn.q_proj.weight"
    e1 = "model.layers.0.block_sparse_moe.experts.1."
    e2 = "model.layers.0.block_sparse_moe.experts.2."
    ren = "model.norm.weight"
    shp = "model.layers.1.self_attn.o_proj.weight"

    def edit(t):
        b = t[ulp][2]
        v = struct.unpack_from("<I", b, 4 * 37)[0]
        struct.pack_into("<I", b, 4 * 37, v + 1)
        for w in ("w1", "w2", "w3"):
            t[e1 + w + ".weight"][2], t[e2 + w + ".weight"][2] = \
                t[e2 + w + ".weight"][2], t[e1 + w + ".weight"][2]
        t["model.norm_renamed.weight"] = t.pop(ren)
        s = t[shp][1]
        t[shp][1] = [s[0] // 2, s[1] * 2]

    alt = variant("altered", edit)
    altt = st_load(os.path.join(alt, "model.safetensors"))
    expect = {ulp: ("differs", 1), ren: ("only_a", None),
              "model.norm_renamed.weight": ("only_b", None), shp: ("mismatch", None)}
    for w in ("w1", "w2", "w3"):
        for e in (e1, e2):
            k = e + w + ".weight"
            expect[k] = ("differs", ndiff_of(base[k], altt[k]))
    p = run("diff", base_moe(), "--json", alt, want=1)
    rows = jsonl(p.stdout)
    got = {r["name"]: (r["status"], r["ndiff"]) for r in rows[:-1] if r["status"] != "equal"}
    check(got == expect, f"altered copy: exactly {sorted(expect)} reported: {got}")
    check(all(v[1] is None or v[1] > 0 for v in expect.values()), "expected ndiffs > 0")
    s = rows[-1]["summary"]
    check((s["differs"], s["only_a"], s["only_b"], s["mismatch"]) == (7, 1, 1, 1),
          f"summary counts {s}")
    r = next(r for r in rows if r["name"] == ulp)
    check(r["max_abs"] > 0 and r["max_abs"] < 1e-8 and r["cosine"] > 0.9999999,
          f"one ulp: max_abs {r['max_abs']}, cosine {r['cosine']}")
    table = run("diff", base_moe(), alt, want=1).stdout
    check(table.splitlines()[-1].startswith("DIFFERENT: "), "table ends with the summary")
    # a tolerance covers the ulp, not the swapped experts
    p = run("diff", "--atol", "1e-6", base_moe(), alt, "--json")
    st = {x["name"]: x["status"] for x in jsonl(p.stdout)[:-1]}
    check(st[ulp] == "close" and st[e1 + "w1.weight"] == "differs", "--atol: the ulp is close")

    # a tensor of several chunks that differs in its last one: the sums of
    # every chunk count (cosine, nan/inf), as torch computes them in fp64
    x, y, (da, db) = big_pair()
    r = jsonl(run("diff", "--json", da, db, want=1).stdout)[0]
    fin = torch.isfinite(x.double()) & torch.isfinite(y.double())
    xd, yd = x.double()[fin], y.double()[fin]
    cos = float((xd * yd).sum() / (xd.norm() * yd.norm()))
    d = float((y.double() - x.double()).view(-1)[399_990].abs())
    check(r["ndiff"] == 1 and r["max_abs"] == d and abs(r["mean_abs"] - d / 400000) < 1e-18
          and abs(r["cosine"] - cos) < 1e-12 and (r["nan_a"], r["nan_b"], r["inf_a"], r["inf_b"])
          == (1, 1, 1, 1), f"a difference in the last chunk: {r}, cosine {cos!r}")
    r = jsonl(run("diff", "--json", da, da, want=0).stdout)[0]
    check(r["status"] == "equal" and (r["nan_a"], r["inf_b"]) == (1, 1), f"equal big: {r}")

    # every float dtype against itself: equal, NaN and Inf counted from the bits
    rows = jsonl(run("diff", "--json", dtypes_file(), dtypes_file(), want=0).stdout)
    check(all((r["nan_a"], r["nan_b"], r["inf_a"], r["inf_b"]) == (1, 1, 1, 1)
              for r in rows[:-1] if "i64" not in r["name"]) and len(rows) == 6,
          f"every dtype: equal, one NaN and one Inf each: {rows}")

    # bf16 against the same values widened to fp32, and against the fp32 it came from
    fp32 = os.path.join(DATA, "plain", "llama_fp32")
    bf = os.path.join(TMP, "bf16")
    wide = os.path.join(TMP, "wide")
    os.makedirs(bf, exist_ok=True)
    os.makedirs(wide, exist_ok=True)
    export(fp32, os.path.join(bf, "model.safetensors"), "--dtype", "bf16")
    export(bf, os.path.join(wide, "model.safetensors"), "--dtype", "fp32")
    rows = jsonl(run("diff", "--json", bf, wide, want=0).stdout)
    check(all(r["status"] == "equal" and r["dtype_a"] == "bfloat16" and r["dtype_b"] == "float32"
              for r in rows[:-1]), "bf16 vs widened fp32: every tensor equal")
    rows = jsonl(run("diff", "--json", bf, fp32, want=1).stdout)
    check(sum(r["status"] == "differs" for r in rows[:-1]) > 10, "bf16 vs fp32: differs")
    rows = jsonl(run("diff", "--json", "--rtol", "0.00390625", bf, fp32, want=0).stdout)
    check(all(r["status"] in ("equal", "close") for r in rows[:-1]) and
          sum(r["status"] == "close" for r in rows[:-1]) > 10, "bf16 vs fp32, rtol 2^-8: close")
    check(max(r["max_rel"] for r in rows[:-1]) <= 2 ** -8, "bf16 rounding max_rel <= 2^-8")
    # per-side options: --b-dtype bf16 presents B rounded: then equal
    run("diff", bf, fp32, "--b-dtype", "bf16", want=0)
    # an unreadable side: one line naming it, exit 1, nothing on stdout
    p = run("diff", base_moe(), os.path.join(TMP, "nonexistent"), want=1)
    check(p.stdout == "" and "nonexistent" in p.stderr and len(p.stderr.splitlines()) == 1,
          f"unreadable B: {p.stderr.strip()}")
    run("diff", base_moe(), want=2)
    run("diff", "--rtol", "x", base_moe(), alt, want=2)
    run("stats", "--atol", "1", base_moe(), want=2)
    # --html: one self-contained page
    page = os.path.join(TMP, "diff.html")
    run("diff", base_moe(), alt, "--html", page, want=1)
    html = open(page).read()
    check("<svg" in html and ulp in html and "layer 1" in html, "--html: chart and table")
    check(not any(s in html for s in ("src=", "href=", "url(", "@import", "<script")),
          "--html: nothing outside the file")


# ------------------------------------------------------------------ stats
def fp64_stats(t):
    x = t.double().flatten()
    fin = x[torch.isfinite(x)]
    r = {"numel": x.numel(), "nan": int(torch.isnan(x).sum()), "inf": int(torch.isinf(x).sum()),
         "zeros": int((x == 0).sum())}
    if fin.numel():
        r.update(min=float(fin.min()), max=float(fin.max()), mean=float(fin.mean()),
                 std=float(fin.std(unbiased=False)), absmax=float(fin.abs().max()),
                 l2=float(torch.sqrt((fin * fin).sum())))
    return r


def test_stats():
    def plant(t):
        b = t["model.layers.0.self_attn.q_proj.weight"][2]
        struct.pack_into("<f", b, 0, float("nan"))
        struct.pack_into("<f", b, 8, float("-inf"))
        struct.pack_into("<f", b, 12, 0.0)
        struct.pack_into("<f", b, 16, -0.0)
        k = t["model.layers.0.self_attn.k_proj.weight"]
        n = len(k[2]) // 4
        vals = struct.unpack(f"<{n}f", k[2])
        k[2] = bytearray(struct.pack(f"<{n}f", *[v + 1000.0 for v in vals]))

    planted = variant("stats_planted", plant)
    for d in (LLAMA, base_moe(), planted, big_pair()[2][0], dtypes_file(), finite_file()):
        t = st_load(os.path.join(d, "model.safetensors"))
        out = run("stats", "--json", d, want=0).stdout
        rows = jsonl(out)
        check([r["name"] for r in rows] == list(t), f"stats {d}: every tensor in order")
        plain = subprocess.run([INSPECT, "stats", "--json", d], capture_output=True, text=True,
                               timeout=600, env=dict(os.environ, GATHERFS_REDUCE_ISA="plain"))
        check(plain.stdout == out, f"stats {d}: the plain loops give the bits of the AVX2 kernels")
        bad = []
        for r in rows:
            e = fp64_stats(as_tensor(t[r["name"]]))
            if list(r) != ["name", "dtype", "shape", "numel", "min", "max", "mean", "std",
                           "absmax", "l2", "nan", "inf", "zeros"]:
                bad.append(f"{r['name']} fields {list(r)}")
            for k in ("numel", "nan", "inf", "zeros", "min", "max", "absmax"):
                if r[k] != e[k]:
                    bad.append(f"{r['name']} {k}: {r[k]} != {e[k]}")
            for k in ("mean", "std", "l2"):
                if abs(r[k] - e[k]) > 1e-9 * max(abs(e[k]), 1e-300):
                    bad.append(f"{r['name']} {k}: {r[k]!r} != {e[k]!r}")
            if r["shape"] != t[r["name"]][1]:
                bad.append(f"{r['name']} shape")
        check(not bad, f"stats {d}: every field of {len(rows)} tensors as fp64 torch: {bad[:5]}")
    rows = {r["name"]: r for r in jsonl(run("stats", "--json", planted, want=0).stdout)}
    q = rows["model.layers.0.self_attn.q_proj.weight"]
    check((q["nan"], q["inf"]) == (1, 1) and q["zeros"] >= 2, f"planted counts {q}")
    page = os.path.join(TMP, "stats.html")
    run("stats", base_moe(), "--html", page, want=0)
    html = open(page).read()
    check("<svg" in html and "layer 0" in html and "<script" not in html, "stats --html")


# ------------------------------------------------------------------ check
def test_check():
    for d in (LLAMA, os.path.join(DATA, "plain", "llama_bf16_bin"), MOE, MOE_DIST, base_moe(),
              os.path.join(DATA, "ckpt", "z3_ws2_bf16", "checkpoint"),
              os.path.join(DATA, "dcp", "fsdp2_ws2", "checkpoint"),
              os.path.join(DATA, "megatron", "qwen_tie_bf16", "legacy_torch")):
        p = run("check", "--json", d, want=0)
        check(p.stdout == "", f"check {d}: clean, exit 0")
    p = run("check", os.path.join(DATA, "dcp", "fsdp2_ws2", "checkpoint"), want=0)
    check("tied pair stored twice" in p.stderr, "DCP: the tied pair stored twice is a note")

    E = "model.layers.1.block_sparse_moe.experts."
    nan_t = "model.layers.1.self_attn.v_proj.weight"

    def plant_nan(t):
        struct.pack_into("<f", t[nan_t][2], 4 * 5, float("nan"))

    def zero_expert(t):
        t[E + "3.w2.weight"][2] = bytearray(len(t[E + "3.w2.weight"][2]))

    def copy_expert(t):
        for w in ("w1", "w2", "w3"):
            t[E + "2." + w + ".weight"][2] = bytearray(t[E + "0." + w + ".weight"][2])

    def drop_layer(t):
        for k in [k for k in t if k.startswith("model.layers.1.")]:
            del t[k]

    def drop_expert(t):
        for k in [k for k in t if k.startswith(E + "3.")]:
            del t[k]

    def drop_tensor(t):
        del t["model.layers.2.self_attn.k_proj.weight"]

    cases = [
        ("plant_nan", plant_nan, [("nan", [nan_t])]),
        ("drop_tensor", drop_tensor, [("config", ["model.layers.2.self_attn.k_proj.weight"])]),
        ("zero_expert", zero_expert, [("zero", [E + "3.w2.weight"])]),
        ("copy_expert", copy_expert,
         [("identical", [E + "0." + w + ".weight", E + "2." + w + ".weight"])
          for w in ("w1", "w2", "w3")]),
        ("drop_layer", drop_layer, [("config", ["model.layers.1."])]),
        ("drop_expert", drop_expert, [("config", ["model.layers.1."])]),
    ]
    for name, edit, want in cases:
        d = variant(name, edit)
        rows = jsonl(run("check", "--json", d, want=1).stdout)
        got = sorted((r["finding"], sorted(r["tensors"])) for r in rows)
        check(got == sorted((k, sorted(v)) for k, v in want),
              f"check {name}: {got}")
        check(all(isinstance(r["detail"], str) and r["detail"] for r in rows),
              f"check {name}: each finding has a detail")
    table = run("check", os.path.join(TMP, "drop_layer"), want=1).stdout
    check("model.layers.1." in table and table.splitlines()[-1].startswith("FINDINGS:"),
          "check table names the missing layer")


{"diff": test_diff, "stats": test_stats, "check": test_check}[MODE]()
if failures:
    print(f"{len(failures)} failures", file=sys.stderr)
    sys.exit(1)
print("all passed")
