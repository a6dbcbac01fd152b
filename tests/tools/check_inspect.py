#!/usr/bin/python3
"""Check gatherfs-inspect against the expected tables of every fixture.

Usage: check_inspect.py INSPECT CKPTS_DIR

Each case folder holds checkpoint/ (what DeepSpeed wrote) and
.expected-default.tsv / .expected-bf16.tsv: name, dtype, shape, sha256 of the
bytes the output contract (docs/DESIGN.md §2) implies, in model order.
Standard library only.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

INSPECT, CKPTS = sys.argv[1], sys.argv[2]
failures = []
checks = 0


def run(*args, binary=True):
    p = subprocess.run([INSPECT, *args], capture_output=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"gatherfs-inspect {' '.join(args)} exited {p.returncode}: "
                           f"{p.stderr.decode(errors='replace').strip()}")
    return p.stdout if binary else p.stdout.decode()


def expected(case, mode):
    rows = []
    with open(os.path.join(CKPTS, case, f".expected-{mode}.tsv")) as f:
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
    ckpt = os.path.join(CKPTS, case, "checkpoint")
    for mode, dt_args in (("default", []), ("bf16", ["--dtype", "bf16"])):
        exp = expected(case, mode)
        listing = json.loads(run("ls", "--json", *dt_args, ckpt, binary=False))
        got = [(e["name"], e["dtype"], e["shape"]) for e in listing]
        check(got == [(n, d, s) for n, d, s, _ in exp],
              f"{case} {mode}: ls names/order/dtypes/shapes {got} != {[(n, d, s) for n, d, s, _ in exp]}")
        by = {e["name"]: e for e in listing}
        for name, dtype, shape, sha in exp:
            data = run("cat", *dt_args, ckpt, name)
            check(hashlib.sha256(data).hexdigest() == sha, f"{case} {mode}: sha256 of {name}")
            check(by.get(name, {}).get("nbytes") == len(data), f"{case} {mode}: nbytes of {name}")
    listing = json.loads(run("ls", "--json", ckpt, binary=False))
    aliases = {e["name"]: e["alias_of"] for e in listing if e["alias_of"]}
    check(aliases in ({"lm_head.weight": "embed.weight"},
                      {"lm_head.weight": "model.embed_tokens.weight"}),
          f"{case}: tied alias {aliases}")
    # The layout JSON round trip: ls and cat from a saved layout agree.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "layout.json")
        with open(path, "wb") as f:
            f.write(run("layout", ckpt))
        check(run("ls", "--json", "--layout", path) == run("ls", "--json", ckpt),
              f"{case}: ls --layout differs from ls")
        first = expected(case, "default")[-1]
        check(hashlib.sha256(run("cat", "--layout", path, first[0])).hexdigest() == first[3],
              f"{case}: cat --layout {first[0]}")
    out = run("verify", ckpt, binary=False)
    check(out.startswith("OK: "), f"{case}: verify said {out!r}")


cases = sorted(d for d in os.listdir(CKPTS) if os.path.isdir(os.path.join(CKPTS, d, "checkpoint")))
for case in cases:
    try:
        check_case(case)
    except Exception as e:  # a crash of the tool is a failure of this case
        check(False, f"{case}: {e}")
    print(f"{'ok' if not any(f.startswith(case) for f in failures) else 'not ok'} - {case}")

# The second tag of the two-tag case is reachable with --tag and differs.
tt = os.path.join(CKPTS, "z2_ws2_fp32_twotags", "checkpoint")
if os.path.isdir(tt):
    a = run("cat", tt, "embed.weight")
    b = run("cat", "--tag", "global_step2", tt, "embed.weight")
    c = run("cat", os.path.join(tt, "global_step2"), "embed.weight")
    check(len(a) == len(b) and a != b and b == c, "--tag global_step2 selects the older tag")

print(f"{checks - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures or not cases else 0)
