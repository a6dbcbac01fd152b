#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
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
import sys

from inspect_cases import Cases

C = Cases(sys.argv[1], sys.argv[2])
check, run = C.check, C.run


def check_case(case):
    ckpt = C.ckpt(case)
    C.check_tables(case)
    exp = C.expected(case, "default")
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
    C.check_layout_and_verify(case, [n for n, _, _, _ in exp])


C.run_all(check_case)
C.finish(3)
