#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# gatherfs-inspect on every real DeepSpeed fixture: ls (names, order, dtypes,
# shapes), cat (sha256 of every tensor, default and --dtype bf16), aliases,
# the layout JSON round trip and verify.
. "${top_srcdir:-.}/tests/lib.sh"
[ -x "$PYTHON3" ] || skip "python3 not found"
exec "$PYTHON3" "$top_srcdir/tests/tools/check_inspect.py" "$INSPECT" "$CKPTS"
