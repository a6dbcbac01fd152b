#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Rank-local ZeRO-3 saves (python/gatherfs_save.py, docs/zero3-save.md):
#  - tests/data/lomo/saves/*: save_zero3 outputs of real DeepSpeed 0.14.5 +
#    LOMO runs (tests/data/lomo/README.md), mounted without -o format= and
#    compared with the run's truth.pt by torch.load (keys, order, dtypes,
#    values, the tied alias); the stale-copy summary on stderr.
#  - tests/data/lomo/hand_*: hand-written layout.json over raw per-rank
#    partition dumps, mounted as a directory.
#  - saves made here by the saver in W real processes (no DeepSpeed), with
#    config.json; then incomplete and mixed saves, each refused by the
#    mount and by gatherfs-inspect with one line.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
LOMO="$top_srcdir/tests/data/lomo"
SAVER="$top_srcdir/python/gatherfs_save.py"
CHECK="$top_srcdir/tests/tools/check_truth.py"

# check_save DIR TRUTH: mount DIR, compare its pytorch_model.bin with TRUTH
check_save() {
	gfs_mount "$1" "$T/mnt" 2>"$T/note" || fail "mount $1: $(cat "$T/note")"
	"$PYTHON3" "$CHECK" "$T/mnt/pytorch_model.bin" "$2" || fail "$1: differs from $2"
	if command -v unzip >/dev/null 2>&1; then
		unzip -tq "$T/mnt/pytorch_model.bin" >/dev/null || fail "unzip -t $1"
	fi
	gfs_umount "$T/mnt" || fail "unmount"
}

for d in "$LOMO"/saves/*/; do
	d=${d%/}
	echo "== $(basename "$d")"
	check_save "$d/gfs_save" "$d/truth.pt"
	grep -q "gatherfs: note: gatherfs save_zero3, tag '', .* ranks, 35 entries; stale live copies, not saved: p.data of [0-9]* params" \
		"$T/note" || fail "no stale summary: $(cat "$T/note")"
	"$INSPECT" ls "$d/gfs_save" >"$T/ls" 2>"$T/note" || fail "inspect ls $d"
	[ "$(grep -c . "$T/ls")" -eq 36 ] || fail "inspect ls: $(cat "$T/ls")"
	grep -q "^lm_head.weight .* embed.weight$" "$T/ls" || fail "inspect ls: no alias"
	grep -q "gatherfs-inspect: note: .*stale live copies" "$T/note" || fail "inspect: no note"
done
grep -q "ds_secondary_tensor of 30:" "$T/note" || fail "hpZ: stale secondaries not summarised: $(cat "$T/note")"

for d in "$LOMO"/hand_*/; do
	d=${d%/}
	echo "== $(basename "$d") (hand-written layout.json)"
	check_save "$d" "$d/truth.pt"
	# raw per-rank dumps carry no checksum: exit 3, each named
	rc=0
	"$INSPECT" verify "$d" >"$T/v.out" || rc=$?
	[ $rc -eq 3 ] && grep -q "^UNVERIFIED: $d/" "$T/v.out" || fail "inspect verify $d: exit $rc: $(cat "$T/v.out")"
done

echo "== a save with CRC-32s from real DeepSpeed 0.14.5 (saves-crc/ws4_fp32_hpz2)"
d=$LOMO/saves-crc/ws4_fp32_hpz2/gfs_save
check_save "$d" "$LOMO/saves/ws4_fp32_hpz2/truth.pt"
grep -q "save 'untagged' in $d, the newest complete one" "$T/note" || fail "which save: $(cat "$T/note")"
"$INSPECT" verify "$d" >"$T/v.out" 2>/dev/null || fail "verify $d: exit $?: $(cat "$T/v.out")"
grep -q "^OK: 130 zip records match their stored CRC-32" "$T/v.out" || fail "verify $d: $(cat "$T/v.out")"

echo "== saver in 3 processes, tag step5, config.json"
"$PYTHON3" "$top_srcdir/tests/tools/zero3_saver_test.py" "$SAVER" save "$T/s3" 3 --tag step5 ||
	fail "save s3"
check_save "$T/s3" "$T/s3.truth.pt"
[ -f "$T/s3/step5/zero3-rank-0.json" ] || fail "the save is not in its tag directory: $(ls -R "$T/s3")"
gfs_mount "$T/s3" "$T/mnt" -o tag=step5 || fail "mount with its tag"
grep -q '"model_type": "small"' "$T/mnt/config.json" || fail "config.json not passed through"
[ ! -e "$T/mnt/zero3-rank-0.json" ] || fail "a manifest is passed through"
gfs_umount "$T/mnt" || fail "unmount"
expect_mount_fail "s3: no save of tag 'step6'" "$T/s3" "$T/mnt" -o tag=step6
expect_mount_fail "zero3-rank-0.json: tag 'step5', not the 'step6' asked for" "$T/s3/step5" "$T/mnt" -o tag=step6

echo "== refusals"
# refuse PATTERN DIR: the mount and gatherfs-inspect both refuse DIR with one line
refuse() {
	expect_mount_fail "$1" "$2" "$T/mnt"
	if "$INSPECT" ls "$2" >/dev/null 2>"$T/ierr"; then
		fail "inspect ls $2 succeeded"
	fi
	[ "$(wc -l <"$T/ierr")" -eq 1 ] && grep -q -- "$1" "$T/ierr" || fail "inspect: $(cat "$T/ierr")"
}
fresh() {
	rm -rf "$T/bad"
	cp -r "$1" "$T/bad"
}
W4="$LOMO/saves/ws4_bf16/gfs_save"
W3="$LOMO/saves/ws3_bf16/gfs_save"

fresh "$W4"; rm "$T/bad/zero3-rank-2.json"
refuse "zero3-rank-2.json: missing: rank 2 did not finish this save" "$T/bad"
fresh "$W4"; rm "$T/bad/zero3-rank-0.json"
refuse "zero3-rank-0.json: missing: rank 0 did not finish this save" "$T/bad"
fresh "$W4"; rm "$T/bad/zero3-rank-3.bin"
refuse "zero3-rank-3.bin: No such file or directory (named by" "$T/bad"
fresh "$W4"; truncate -s -1 "$T/bad/zero3-rank-1.bin"
refuse "zero3-rank-1.bin: .* bytes, but its manifest says .*: truncated, or replaced by another save" "$T/bad"
fresh "$W4"; head -c 100 "$W4/zero3-rank-3.json" >"$T/bad/zero3-rank-3.json"
refuse "zero3-rank-3.json: invalid JSON" "$T/bad"
# a rank of a 4-rank save in a 3-rank save: both its files, then its manifest alone
fresh "$W3"; cp "$W4/zero3-rank-1.json" "$W4/zero3-rank-1.bin" "$T/bad/"
refuse "zero3-rank-1.json: world size 4, but rank 0's is 3: a file of another save" "$T/bad"
fresh "$W3"; cp "$W4/zero3-rank-1.json" "$T/bad/"
refuse "zero3-rank-1.json: world size 4, but rank 0's is 3: a file of another save" "$T/bad"
fresh "$W3"; cp "$W4/zero3-rank-3.json" "$W4/zero3-rank-3.bin" "$T/bad/"
refuse "holds files of rank 3, but rank 0's save has 3 ranks: files of another save are mixed in" "$T/bad"
# a rank of another save of the same run (tag), and of another model (shapes)
fresh "$T/s3/step5"
"$PYTHON3" "$top_srcdir/tests/tools/zero3_saver_test.py" "$SAVER" save "$T/s3b" 3 --tag step6 ||
	fail "save s3b"
cp "$T/s3b/step6/zero3-rank-2.json" "$T/s3b/step6/zero3-rank-2.bin" "$T/bad/"
refuse "zero3-rank-2.json: tag 'step6', but rank 0's is 'step5': a file of another save" "$T/bad"
fresh "$W3"; cp "$T/s3/step5/zero3-rank-1.json" "$T/s3/step5/zero3-rank-1.bin" "$T/bad/"
refuse "zero3-rank-1.json: tag 'step5', but rank 0's is ''\|zero3-rank-1.json: .* tensors, but rank 0's manifest has 35" "$T/bad"
"$PYTHON3" - "$T/bad/zero3-rank-1.json" "$W3/zero3-rank-1.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[2]))
m["tensors"][5]["shape"] = m["tensors"][5]["shape"][::-1]  # same numel, another shape
json.dump(m, open(sys.argv[1], "w"))
PY
cp "$W3/zero3-rank-1.bin" "$T/bad/"
refuse "zero3-rank-1.json: tensor 5 (pos.weight): its name, dtype, shape or partition size differs from rank 0's (pos.weight): a file of another save" "$T/bad"
# a save whose rank 1 failed, next to an older complete save: the mount
# picks the older one and names the newer; asked for, the newer is refused
"$PYTHON3" "$top_srcdir/tests/tools/zero3_saver_test.py" "$SAVER" save "$T/s3" 3 --tag step6 --fail-rank 1 ||
	fail "save s3 with a failing rank"
check_save "$T/s3" "$T/s3.truth.pt"
grep -q "gatherfs: note: save 'step5' in .*s3, the newest complete one; newer, not complete: step6 (.*zero3-rank-1.json: missing: rank 1 did not finish this save" \
	"$T/note" || fail "the pick is not said: $(cat "$T/note")"
expect_mount_fail "step6/zero3-rank-1.json: missing: rank 1 did not finish this save" "$T/s3" "$T/mnt" -o tag=step6
echo "PASS: zero3 saves"
