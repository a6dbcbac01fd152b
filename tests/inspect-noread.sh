#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Importing a checkpoint reads metadata only: under strace, no read of any
# shard file touches the payload of a data/<key> record.  Run on the largest
# fixture; prints the bytes read against the shard bytes.
. "${top_srcdir:-.}/tests/lib.sh"
[ -x "$PYTHON3" ] || skip "python3 not found"
command -v strace >/dev/null 2>&1 || skip "strace not installed"
exec "$PYTHON3" "$top_srcdir/tests/tools/check_noread.py" "$INSPECT" "$CKPTS"
