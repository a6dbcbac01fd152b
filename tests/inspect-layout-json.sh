#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Layout JSON: a relative base_dir resolves against the JSON file's
# directory; trailing data and duplicate members are refused; every error is
# one line naming the file once (tests/tools/check_layout_json.py).
. "${top_srcdir:-.}/tests/lib.sh"
[ -x "$PYTHON3" ] || skip "python3 not found"
mktempdir
exec "$PYTHON3" "$top_srcdir/tests/tools/check_layout_json.py" "$INSPECT" "$TESTTMP"
