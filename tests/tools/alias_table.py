# SPDX-License-Identifier: Apache-2.0
"""The truth of a table's tied aliases, for check_mount.py and check_safetensors.py.

An expected table PREFIX-MODE.tsv or PREFIX.MODE.tsv (.expected-default.tsv,
want.bf16.tsv) has its alias table PREFIX-aliases.tsv or PREFIX.aliases.tsv
beside it (the fixtures' are committed, generated tables' are written by
their generator): one line alias<TAB>target, names %XX-quoted as in the
table; an empty file says there is none.  Standard library only.
"""
import os
import re
import sys
import urllib.parse


def alias_table(tsv):
    """{alias: target} of expected table TSV; exit 1 when it has no alias table."""
    m = re.match(r"(.*[.-])[a-z0-9]+\.tsv$", tsv)
    path = m and m.group(1) + "aliases.tsv"
    if not path or not os.path.isfile(path):
        print(f"FAIL: {tsv}: no alias table {path or '(not named PREFIX-MODE.tsv or PREFIX.MODE.tsv)'}")
        sys.exit(1)
    out = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                alias, target = line.rstrip("\n").split("\t")
                out[urllib.parse.unquote(alias)] = urllib.parse.unquote(target)
    return out
