#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# gatherfs-inspect diff on real fixtures and altered copies of them
# (tests/tools/check_analyze.py).
. "${top_srcdir:-.}/tests/lib.sh"
[ -x "$PYTHON3" ] || skip "python3 not found"
"$PYTHON3" -c 'import torch' 2>/dev/null || skip "python3 has no torch"
mktempdir
"$PYTHON3" "$top_srcdir/tests/tools/check_analyze.py" diff "$INSPECT" "$top_srcdir" "$TESTTMP"
