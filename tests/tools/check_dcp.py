#!/usr/bin/python3
"""Check gatherfs-inspect on the PyTorch DCP fixtures.

Usage: check_dcp.py INSPECT DCP_DIR

Each case folder holds checkpoint/ (.metadata and __R_0.distcp exactly as
torch.distributed.checkpoint.save wrote them, plus config.json) and
.expected-default.tsv / .expected-bf16.tsv: name, dtype, shape, sha256 of the
contiguous bytes of dcp_to_torch_save's output, in .metadata key order.
Then: --input-format, --prefix, the layout JSON round trip (strided and zstd
pieces) and verify.  Standard library only.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

INSPECT, DCP = sys.argv[1], sys.argv[2]
failures = []
checks = 0


def run(*args, binary=True, ok=True):
    p = subprocess.run([INSPECT, *args], capture_output=True, timeout=120)
    if ok and p.returncode != 0:
        raise RuntimeError(f"gatherfs-inspect {' '.join(args)} exited {p.returncode}: "
                           f"{p.stderr.decode(errors='replace').strip()}")
    if not ok:
        return p
    return p.stdout if binary else p.stdout.decode()


def expected(case, mode):
    rows = []
    with open(os.path.join(DCP, case, f".expected-{mode}.tsv")) as f:
        for line in f:
            name, dtype, shape, sha = line.rstrip("\n").split("\t")
            rows.append((name, dtype, json.loads(shape), sha))
    return rows


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print("not ok -", what)


def check_case(case):
    ckpt = os.path.join(DCP, case, "checkpoint")
    for mode, dt_args in (("default", []), ("bf16", ["--dtype", "bf16"])):
        exp = expected(case, mode)
        listing = json.loads(run("ls", "--json", *dt_args, ckpt, binary=False))
        got = [(e["name"], e["dtype"], e["shape"]) for e in listing]
        check(got == [(n, d, s) for n, d, s, _ in exp],
              f"{case} {mode}: ls names/order/dtypes/shapes")
        by = {e["name"]: e for e in listing}
        for name, dtype, shape, sha in exp:
            data = run("cat", *dt_args, ckpt, name)
            check(hashlib.sha256(data).hexdigest() == sha, f"{case} {mode}: sha256 of {name}")
            check(by.get(name, {}).get("nbytes") == len(data), f"{case} {mode}: nbytes of {name}")
    exp = expected(case, "default")
    # forced format: dcp works, deepspeed does not
    check(run("ls", "--json", "--input-format", "dcp", ckpt) == run("ls", "--json", ckpt),
          f"{case}: --input-format dcp")
    p = run("ls", "--input-format", "deepspeed", ckpt, ok=False)
    check(p.returncode == 1, f"{case}: --input-format deepspeed on a DCP dir must fail")
    # --prefix keeps model.* without the prefix
    listing = json.loads(run("ls", "--json", "--prefix", "model.", ckpt, binary=False))
    want = [n[len("model."):] for n, _, _, _ in exp if n.startswith("model.")]
    check([e["name"] for e in listing] == want, f"{case}: --prefix model. names")
    sha = dict((n, s) for n, _, _, s in exp)
    check(hashlib.sha256(run("cat", "--prefix", "model.", ckpt, "norm.weight")).hexdigest()
          == sha["model.norm.weight"], f"{case}: --prefix cat")
    p = run("ls", "--prefix", "optim.", ckpt, ok=False)
    check(p.returncode == 1 and b"prefix" in p.stderr, f"{case}: unknown prefix fails")
    # The layout JSON round trip.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "layout.json")
        with open(path, "wb") as f:
            f.write(run("layout", ckpt))
        check(run("ls", "--json", "--layout", path) == run("ls", "--json", ckpt),
              f"{case}: ls --layout differs from ls")
        for name, _, _, s in exp:
            check(hashlib.sha256(run("cat", "--layout", path, name)).hexdigest() == s,
                  f"{case}: cat --layout {name}")
    out = run("verify", ckpt, binary=False)
    check(out.startswith("OK: "), f"{case}: verify said {out!r}")


cases = sorted(d for d in os.listdir(DCP) if os.path.isdir(os.path.join(DCP, d, "checkpoint")))
for case in cases:
    try:
        check_case(case)
    except Exception as e:  # a crash of the tool is a failure of this case
        check(False, f"{case}: {e}")
    print(f"{'ok' if not any(f.startswith(case) for f in failures) else 'not ok'} - {case}")

print(f"{checks - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures or len(cases) < 3 else 0)
