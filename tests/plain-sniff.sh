#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Safetensors files whose 8-byte header length has 0x80 as its low byte (the
# first byte of the file, and pickle protocol 2's first byte) are mounted as
# safetensors, not refused as legacy torch.save pickles: a single file, a
# sharded model with its index, and the file given as the source; every
# tensor's bytes checked (tests/tools/st_header_len.py).  A real pickle named
# pytorch_model.bin is still refused as a legacy torch file.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
TOOL="$top_srcdir/tests/tools/st_header_len.py"
G="$T/gen"
"$PYTHON3" "$TOOL" write "$G" || fail "st_header_len.py write"

for c in single st384 sharded; do
	mnt="$T/mnt-$c"
	gfs_mount "$G/$c" "$mnt" 2> "$T/err" || fail "mount $c: $(cat "$T/err")"
	"$PYTHON3" "$TOOL" check "$mnt" "$G/$c" || fail "check $c"
	gfs_umount "$mnt" || fail "unmount $mnt"
done
mnt="$T/mnt-file"
gfs_mount "$G/single/model.safetensors" "$mnt" 2> "$T/err" || fail "mount the file: $(cat "$T/err")"
"$PYTHON3" "$TOOL" check "$mnt" "$G/single" || fail "check the file"
gfs_umount "$mnt" || fail "unmount $mnt"

mkdir -p "$T/legacy" "$T/mnt"
"$PYTHON3" -c 'import pickle, sys; open(sys.argv[1], "wb").write(pickle.dumps({"w": 1}, protocol=2))' \
	"$T/legacy/pytorch_model.bin" || fail "write the pickle"
expect_mount_fail "legacy (non-zip) torch.save file" "$T/legacy" "$T/mnt"
expect_mount_fail "legacy (non-zip) torch.save file" "$T/legacy/pytorch_model.bin" "$T/mnt"
echo "PASS"
