#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Unit tests of python/gatherfs_save.py's pure parts, with real torch (no DeepSpeed).
. "${top_srcdir:-.}/tests/lib.sh"
[ -x "$PYTHON3" ] || skip "python3 not found"
"$PYTHON3" -c "import torch" 2>/dev/null || skip "torch is missing"
"$PYTHON3" "$top_srcdir/tests/tools/zero3_saver_test.py" "$top_srcdir/python/gatherfs_save.py" unit ||
	fail "saver unit tests"
"$PYTHON3" -c "
import importlib.util, sys
spec = importlib.util.spec_from_file_location('gatherfs_save', '$top_srcdir/python/gatherfs_save.py')
spec.loader.exec_module(importlib.util.module_from_spec(spec))
assert 'deepspeed' not in sys.modules
" || fail "the saver imports deepspeed"
echo "PASS: saver unit tests"
