# SPDX-License-Identifier: Apache-2.0
"""Shared by check_inspect.py (DeepSpeed fixtures) and check_dcp.py (DCP
fixtures): run gatherfs-inspect, read a case's expected tables, count checks,
and the checks every fixture gets.

A case folder holds checkpoint/ and .expected-default.tsv /
.expected-bf16.tsv: name, dtype, shape (JSON), sha256 of the tensor's
contiguous bytes, in the order `ls` must list them.  Standard library only.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile


class Cases:
    def __init__(self, inspect, root):
        self.inspect, self.root = inspect, root
        self.failures = []
        self.checks = 0
        self.names = sorted(d for d in os.listdir(root)
                            if os.path.isdir(os.path.join(root, d, "checkpoint")))

    def ckpt(self, case):
        return os.path.join(self.root, case, "checkpoint")

    def run(self, *args, binary=True, ok=True):
        """gatherfs-inspect ARGS: its stdout (bytes, or text), or with
        ok=False the CompletedProcess; a failure raises unless ok=False."""
        p = subprocess.run([self.inspect, *args], capture_output=True, timeout=120)
        if not ok:
            return p
        if p.returncode != 0:
            raise RuntimeError(f"gatherfs-inspect {' '.join(args)} exited {p.returncode}: "
                               f"{p.stderr.decode(errors='replace').strip()}")
        return p.stdout if binary else p.stdout.decode()

    def expected(self, case, mode):
        rows = []
        with open(os.path.join(self.root, case, f".expected-{mode}.tsv")) as f:
            for line in f:
                name, dtype, shape, sha = line.rstrip("\n").split("\t")
                rows.append((name, dtype, json.loads(shape), sha))
        return rows

    def check(self, cond, what):
        self.checks += 1
        if not cond:
            self.failures.append(what)
            print("not ok -", what)

    def check_tables(self, case):
        """ls (names, order, dtypes, shapes, nbytes) and the sha256 of cat of
        every tensor, as stored and with --dtype bf16."""
        ckpt = self.ckpt(case)
        for mode, dt_args in (("default", []), ("bf16", ["--dtype", "bf16"])):
            exp = self.expected(case, mode)
            listing = json.loads(self.run("ls", "--json", *dt_args, ckpt, binary=False))
            got = [(e["name"], e["dtype"], e["shape"]) for e in listing]
            want = [(n, d, s) for n, d, s, _ in exp]
            self.check(got == want, f"{case} {mode}: ls names/order/dtypes/shapes {got} != {want}")
            by = {e["name"]: e for e in listing}
            for name, _, _, sha in exp:
                data = self.run("cat", *dt_args, ckpt, name)
                self.check(hashlib.sha256(data).hexdigest() == sha, f"{case} {mode}: sha256 of {name}")
                self.check(by.get(name, {}).get("nbytes") == len(data),
                           f"{case} {mode}: nbytes of {name}")

    def check_layout_and_verify(self, case, names):
        """The layout JSON round trip (ls agrees, cat of `names` matches the
        default table), then `verify` says OK."""
        ckpt = self.ckpt(case)
        sha = {n: s for n, _, _, s in self.expected(case, "default")}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "layout.json")
            with open(path, "wb") as f:
                f.write(self.run("layout", ckpt))
            self.check(self.run("ls", "--json", "--layout", path) == self.run("ls", "--json", ckpt),
                       f"{case}: ls --layout differs from ls")
            for name in names:
                self.check(hashlib.sha256(self.run("cat", "--layout", path, name)).hexdigest()
                           == sha[name], f"{case}: cat --layout {name}")
        out = self.run("verify", ckpt, binary=False)
        self.check(out.startswith("OK: "), f"{case}: verify said {out!r}")

    def run_all(self, check_case):
        """check_case(case) for every case; a crash fails that case."""
        for case in self.names:
            try:
                check_case(case)
            except Exception as e:  # a crash of the tool is a failure of this case
                self.check(False, f"{case}: {e}")
            print(f"{'ok' if not any(f.startswith(case) for f in self.failures) else 'not ok'}"
                  f" - {case}")

    def finish(self, min_cases):
        print(f"{self.checks - len(self.failures)} passed, {len(self.failures)} failed")
        sys.exit(1 if self.failures or len(self.names) < min_cases else 0)
