#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Every gatherfs-inspect option either works or is refused (exit 2, one
# line), per command, as the man page's synopsis says
# (tests/tools/check_options.py).
. "${top_srcdir:-.}/tests/lib.sh"
[ -x "$PYTHON3" ] || skip "python3 not found"
C="$CKPTS/z3_ws2_fp32/checkpoint"
[ -d "$C" ] || skip "fixture $C missing"
mktempdir
exec "$PYTHON3" "$top_srcdir/tests/tools/check_options.py" "$INSPECT" \
	"$top_srcdir/man/gatherfs-inspect.1" "$C" "$TESTTMP"
