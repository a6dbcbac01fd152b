#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Check gatherfs-inspect against the expected tables of every fixture.

Usage: check_inspect.py INSPECT CKPTS_DIR

Each case folder holds checkpoint/ (what DeepSpeed wrote) and
.expected-default.tsv / .expected-bf16.tsv: name, dtype, shape, sha256 of the
bytes the output contract (docs/DESIGN.md §2) implies, in model order.
Standard library only.
"""
import json
import os
import sys

from inspect_cases import Cases

C = Cases(sys.argv[1], sys.argv[2])
check, run = C.check, C.run


def check_case(case):
    ckpt = C.ckpt(case)
    C.check_tables(case)
    listing = json.loads(run("ls", "--json", ckpt, binary=False))
    aliases = {e["name"]: e["alias_of"] for e in listing if e["alias_of"]}
    check(aliases in ({"lm_head.weight": "embed.weight"},
                      {"lm_head.weight": "model.embed_tokens.weight"}),
          f"{case}: tied alias {aliases}")
    C.check_layout_and_verify(case, [C.expected(case, "default")[-1][0]])


C.run_all(check_case)

# The second tag of the two-tag case is reachable with --tag and differs.
tt = C.ckpt("z2_ws2_fp32_twotags")
if os.path.isdir(tt):
    a = run("cat", tt, "embed.weight")
    b = run("cat", "--tag", "global_step2", tt, "embed.weight")
    c = run("cat", os.path.join(tt, "global_step2"), "embed.weight")
    check(len(a) == len(b) and a != b and b == c, "--tag global_step2 selects the older tag")

C.finish(1)
