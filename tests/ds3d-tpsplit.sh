#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# DeepSpeed tensor parallelism: what a -o tp_split file (or
# universal_checkpoint_info) declares is bounded and checked (issue 48
# item 7, issue 41 item 4; docs/deepspeed-3d.md), on the real TP 2 run
# tests/data/ds3d/tp2_dp2_z1_fp32_uci:
#  - 4,095 backtracking patterns before `.*` (each under the per-match
#    step bound): refused within seconds, one line naming the file, by
#    gatherfs-inspect and the mount (the matching budget is per import).
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
DATA="$top_srcdir/tests/data/ds3d"
CK="$DATA/tp2_dp2_z1_fp32_uci/checkpoint"

echo "== a tp_split file of 4,095 backtracking patterns: refused within seconds"
"$PYTHON3" - "$T/hostile.json" <<'PY' || fail "write hostile.json"
import json, sys
# each pattern fails on every name after some 10^5 steps (under the per-match bound)
d = {".*" * 7 + "#%d" % i: 0 for i in range(4094)}
d[".*"] = "replicated"
json.dump(d, open(sys.argv[1], "w"))
PY
start=$(date +%s)
if timeout 20 "$INSPECT" ls --tp-split "$T/hostile.json" "$CK" >/dev/null 2>"$T/err"; then
	fail "inspect ls --tp-split hostile.json succeeded"
fi
[ $(($(date +%s) - start)) -lt 20 ] || fail "inspect ls --tp-split hostile.json: not answered within 20 s"
grep -v "DeepSpeed tensor parallel" "$T/err" >"$T/err1"
[ "$(wc -l <"$T/err1")" -eq 1 ] &&
	grep -q "hostile.json: matching its tp_split patterns took all the steps one import may take" "$T/err1" ||
	fail "inspect ls --tp-split hostile.json: $(cat "$T/err")"
mkdir -p "$T/mnt"
start=$(date +%s)
expect_mount_fail "hostile.json: matching its tp_split patterns took all the steps one import may take" \
	"$CK" "$T/mnt" -o tp_split="$T/hostile.json"
[ $(($(date +%s) - start)) -lt 20 ] || fail "mount -o tp_split=hostile.json: not answered within 20 s"
echo "ok"
