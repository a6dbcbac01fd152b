#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Mount every real DeepSpeed fixture, without a dtype option and with
# -o dtype=bf16, and check pytorch_model.bin (torch.load, zipfile, unzip -t),
# model.safetensors (header rules, bytes through mmap and numpy.memmap),
# tensors/ (cat | sha256sum against the expected list, symlinks, sizes,
# xattrs, INDEX), layout.json and the passed-through files.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
command -v unzip >/dev/null 2>&1 || echo "note: unzip not installed, unzip -t skipped"
ncases=0
for case in "$CKPTS"/*/; do
	case=${case%/}
	[ -d "$case/checkpoint" ] && [ -f "$case/.expected-default.tsv" ] || continue
	for mode in default bf16; do
		mnt="$T/mnt-$(basename "$case")-$mode"
		opt=
		[ $mode = bf16 ] && opt="-o dtype=bf16"
		echo "== $(basename "$case") ($mode)"
		# shellcheck disable=SC2086
		gfs_mount "$case/checkpoint" "$mnt" $opt || fail "mount $case ($mode)"
		check_views "$mnt" "$case/.expected-$mode.tsv" "$case/checkpoint"
		gfs_umount "$mnt" || fail "unmount $mnt"
	done
	ncases=$((ncases + 1))
done
[ $ncases -gt 0 ] || skip "no fixtures in $CKPTS"
echo "PASS: $ncases fixtures, default and bf16"
