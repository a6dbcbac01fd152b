#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# 16 concurrent readers doing random-offset reads (page cache dropped as they
# go) of pytorch_model.bin and tensor files get exactly the bytes of a
# sequential read: a real fixture, and a 40 MiB layout of scattered pieces
# converted to bf16 on the fly.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
case="$CKPTS/z3_ws3_bf16"
[ -d "$case/checkpoint" ] || skip "fixture $case missing"
"$PYTHON3" "$MOUNT_TOOLS/make_layouts.py" "$T/lay" || fail "make_layouts.py"

gfs_mount "$case/checkpoint" "$T/m1" || fail "mount $case"
gfs_mount "$T/lay/stress.json" "$T/m2" -o dtype=bf16 || fail "mount stress.json"
timeout 120 "$PYTHON3" "$MOUNT_TOOLS/stress.py" 5 "$T/m1/pytorch_model.bin" \
	"$T/m1/tensors/embed.weight" "$T/m1/tensors/lm_head.weight" || fail "fixture"
timeout 120 "$PYTHON3" "$MOUNT_TOOLS/stress.py" 5 "$T/m2/pytorch_model.bin" \
	"$T/m2/tensors/layer.7.weight" || fail "stress.json"
gfs_umount "$T/m1" || fail "unmount"
gfs_umount "$T/m2" || fail "unmount"
echo "PASS: concurrent random reads"
