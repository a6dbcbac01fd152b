#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Mount hand-made layout JSON files (tests/mount/make_layouts.py): every
# dtype, empty and scalar tensors, names that need escaping, an alias before
# its target, zero pieces, passed-through files next to a stale
# pytorch_model.bin, symlinks and a subdirectory (default and dtype=bf16);
# then a 4 GiB tensor that needs ZIP64 fields (zipfile, torch.load).
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
"$PYTHON3" "$MOUNT_TOOLS/make_layouts.py" "$T/lay" || fail "make_layouts.py"

for mode in default bf16; do
	opt=
	[ $mode = bf16 ] && opt="-o dtype=bf16"
	echo "== special.json ($mode)"
	# shellcheck disable=SC2086
	gfs_mount "$T/lay/special.json" "$T/mnt" $opt || fail "mount special.json"
	timeout 300 "$PYTHON3" "$MOUNT_TOOLS/check_mount.py" "$T/mnt" "$T/lay/special.$mode.tsv" \
		"$T/lay/root" || fail "special.json ($mode)"
	if command -v unzip >/dev/null 2>&1; then
		unzip -tq "$T/mnt/pytorch_model.bin" || fail "unzip -t special.json ($mode)"
	fi
	[ "$(cat "$T/mnt/tensors/empty" | wc -c)" -eq 0 ] || fail "tensors/empty is not empty"
	gfs_umount "$T/mnt" || fail "unmount"
done

echo "== zip64.json"
gfs_mount "$T/lay/zip64.json" "$T/mnt" || fail "mount zip64.json"
size=$(stat -c %s "$T/mnt/pytorch_model.bin")
[ "$size" -gt 4294967296 ] || fail "pytorch_model.bin is $size bytes"
timeout 300 "$PYTHON3" "$MOUNT_TOOLS/check_zip64.py" "$T/mnt" "$T/lay/zip64.after" || fail "zip64"
gfs_umount "$T/mnt" || fail "unmount"
echo "PASS: layouts"
