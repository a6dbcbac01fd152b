#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# DeepSpeed tensor parallelism: what a -o tp_split file (or
# universal_checkpoint_info) declares is bounded and checked (issue 48
# item 7, issue 41 item 4; docs/deepspeed-3d.md), on the real TP 2 run
# tests/data/ds3d/tp2_dp2_z1_fp32_uci:
#  - 4,095 backtracking patterns before `.*` (each under the per-match
#    step bound): refused within seconds, one line naming the file, by
#    gatherfs-inspect and the mount (the matching budget is per import);
#  - declarations checked against the data: {".*": "replicated"} (rank 0's
#    slice of qkv served as the whole tensor) and {".*": 0} (identical
#    slices of the replicated embedding stacked) are proven wrong: every
#    tensor they govern fails with EIO under -o verify=read (the daemon's
#    log names the tensor and the ranks or rank file), -o verify=mount
#    refuses the mount, gatherfs-inspect verify exits 1 naming it; so does
#    a universal_checkpoint_info that declares everything replicated; the
#    right split file (and the checkpoint's own patterns) still serve
#    pytorch_model.bin bit-exact and verify says they hold.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
DATA="$top_srcdir/tests/data/ds3d"
CK="$DATA/tp2_dp2_z1_fp32_uci/checkpoint"
TRUTH="$DATA/tp2_dp2_z1_fp32_uci/truth.pt"
CHECK="$top_srcdir/tests/tools/check_truth.py"

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

echo "== the right declarations: served bit-exact, verify says they hold"
cat >"$T/split.json" <<'EOF'
{
  ".*qkv\\.": 0,
  ".*fc1\\.": 0,
  ".*proj\\.weight": 1,
  ".*fc2\\.weight": 1,
  ".*": "replicated"
}
EOF
gfs_mount "$CK" "$T/mnt" -o tp_split="$T/split.json" 2>"$T/log" || fail "mount split.json: $(cat "$T/log")"
timeout 300 "$PYTHON3" "$CHECK" "$T/mnt/pytorch_model.bin" "$TRUTH" || fail "split.json: pytorch_model.bin"
gfs_umount "$T/mnt" || fail "unmount"
for split in "" "$T/split.json"; do
	timeout 120 "$INSPECT" verify ${split:+--tp-split "$split"} "$CK" >"$T/v" 2>&1 ||
		fail "inspect verify ${split:-(universal_checkpoint_info)}: $(cat "$T/v")"
	grep -q "^OK: .* holds: 36 split tensors" "$T/v" || fail "inspect verify: $(cat "$T/v")"
done
gfs_mount "$CK" "$T/mnt" -o verify=mount 2>"$T/log" || fail "mount -o verify=mount: $(cat "$T/log")"
timeout 300 "$PYTHON3" "$CHECK" "$T/mnt/pytorch_model.bin" "$TRUTH" || fail "verify=mount: pytorch_model.bin"
gfs_umount "$T/mnt" || fail "unmount"

# wrong NAME PATTERN: the declarations of $T/NAME.json are proven wrong, the
# proof's line matching PATTERN: every read of pytorch_model.bin and
# model.safetensors fails with EIO (the daemon's log names the proof),
# -o verify=mount refuses, gatherfs-inspect verify exits 1
wrong() {
	gfs_mount_fg "$CK" "$T/$1.mnt" -o tp_split="$T/$1.json" 2>"$T/$1.log" ||
		fail "mount $1.json: $(cat "$T/$1.log")"
	pid=$GFS_PID
	for f in pytorch_model.bin model.safetensors; do
		timeout 60 cat "$T/$1.mnt/$f" >/dev/null 2>"$T/cat.err" && fail "$1.json: $f read without an error"
		grep -q "Input/output error" "$T/cat.err" || fail "$1.json: $f: $(cat "$T/cat.err")"
	done
	gfs_umount "$T/$1.mnt" || fail "unmount"
	wait "$pid"
	grep -q "not served: the tp_split file .*$1.json is wrong: $2" "$T/$1.log" ||
		fail "$1.json: the log lacks '$2': $(cat "$T/$1.log")"
	expect_mount_fail "verify: not mounting: .*the tp_split file .*$1.json is wrong: $2" \
		"$CK" "$T/mnt" -o verify=mount -o tp_split="$T/$1.json"
	rc=0
	timeout 120 "$INSPECT" verify --tp-split "$T/$1.json" "$CK" >"$T/v" 2>&1 || rc=$?
	[ $rc -eq 1 ] || fail "inspect verify $1.json: exit $rc: $(cat "$T/v")"
	grep -q "^DECLARATION WRONG: .*$1.json is wrong: $2" "$T/v" || fail "inspect verify $1.json: $(cat "$T/v")"
	echo "ok: $1.json: $(grep "^DECLARATION WRONG" "$T/v")"
}

echo "== everything declared replicated: rank 0's qkv slice is not the tensor"
echo '{".*": "replicated"}' >"$T/rep.json"
wrong rep "the copies of blocks.0.qkv.weight differ (.*mp_rank_01.*holds other bytes"

echo "== everything declared split on dim 0: the embedding's identical copies are no slices"
echo '{".*": 0}' >"$T/dim0.json"
wrong dim0 "embed.weight is declared split between 2 tensor ranks, but tensor ranks 0 to 1 hold byte-identical slices that are not constant"

echo "== universal_checkpoint_info that declares every param replicated"
rm -rf "$T/bad"
cp -r "$CK" "$T/bad"
chmod -R u+w "$T/bad"
timeout 120 "$PYTHON3" - "$T/bad/global_step3" <<'PY' || fail "rewrite universal_checkpoint_info"
import sys, torch
for r in (0, 1):
    f = "%s/mp_rank_%02d_model_states.pt" % (sys.argv[1], r)
    ck = torch.load(f)
    ck["universal_checkpoint_info"]["tp_replicated_parameter_patterns"].append(".*")
    torch.save(ck, f)
PY
rc=0
timeout 120 "$INSPECT" verify "$T/bad" >"$T/v" 2>&1 || rc=$?
[ $rc -eq 1 ] || fail "inspect verify (universal_checkpoint_info): exit $rc: $(cat "$T/v")"
grep -q "^DECLARATION WRONG: universal_checkpoint_info of .*mp_rank_00_model_states.pt is wrong: the copies of blocks.0.qkv.weight differ" "$T/v" ||
	fail "inspect verify (universal_checkpoint_info): $(cat "$T/v")"
gfs_mount "$T/bad" "$T/mnt" 2>"$T/log" || fail "mount: $(cat "$T/log")"
timeout 60 cat "$T/mnt/pytorch_model.bin" >/dev/null 2>"$T/cat.err" && fail "universal_checkpoint_info: read without an error"
grep -q "Input/output error" "$T/cat.err" || fail "universal_checkpoint_info: $(cat "$T/cat.err")"
gfs_umount "$T/mnt" || fail "unmount"
echo "ok"
