#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Bad input gives one clear line naming the file and the problem, and a
# non-zero exit: missing rank file, truncated shard, a shard from another
# world size, corrupt pickle, a pickle calling os.system, a non-checkpoint
# directory, a zero-length file, broken layout JSON.
. "${top_srcdir:-.}/tests/lib.sh"
[ -x "$PYTHON3" ] || skip "python3 not found"
exec "$PYTHON3" "$top_srcdir/tests/tools/check_badinput.py" "$INSPECT" "$CKPTS"
