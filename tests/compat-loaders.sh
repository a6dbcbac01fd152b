#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The mount read by unmodified modern loaders (torch 2.x, safetensors,
# transformers) inside the Debian sid compat root built by
# tests/compat/make-compat-root.sh.  Skipped (77) when the root is absent.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
COMPAT_ROOT=${GATHERFS_COMPAT_ROOT:-/var/cache/gatherfs/compat-root}
[ "$(id -u)" = 0 ] || skip "the compat root needs root (chroot, mount namespaces)"
[ -x "$COMPAT_ROOT/usr/bin/python3" ] ||
	skip "no compat root at $COMPAT_ROOT: build it with tests/compat/make-compat-root.sh (about 90 s and 1.9 GB)"
mount_setup

# run_check MNT TSV [CASE]: check_loaders.py inside the root.
run_check() {
	COMPAT_BINDS="$top_srcdir $T" timeout 600 "$top_srcdir/tests/compat/compat-run.sh" \
		"$COMPAT_ROOT" python3 "$top_srcdir/tests/compat/check_loaders.py" "$@"
}

# mount_check LABEL CKPT TSV CASE [OPT...]: mount CKPT (with OPTs) on $mnt,
# check a sharded view has its index, run the loaders against TSV (and
# CASE's reference logits, if CASE is not empty), unmount.
mount_check() {
	label=$1 ck=$2 tsv=$3 ref=$4
	shift 4
	echo "== $label"
	gfs_mount "$ck" "$mnt" "$@" || fail "mount $label"
	case " $* " in
	*shard_size=*) [ -f "$mnt/model.safetensors.index.json" ] || fail "$label: no safetensors index" ;;
	esac
	run_check "$mnt" "$tsv" ${ref:+"$ref"} || fail "$label: loaders"
	gfs_umount "$mnt" || fail "unmount $label"
}

n=0
for case in "$CKPTS"/*/; do
	case=${case%/}
	name=$(basename "$case")
	[ -d "$case/checkpoint" ] || continue
	mnt="$T/mnt-$name"
	mount_check "$name" "$case/checkpoint" "$case/.expected-default.tsv" "$case"
	case $name in
	*bf16*)
		mount_check "$name (-o dtype=bf16)" "$case/checkpoint" "$case/.expected-bf16.tsv" "" \
			-o dtype=bf16 ;;
	esac
	if [ -f "$case/reference_logits.pt" ]; then
		mount_check "$name (-o shard_size=100K)" "$case/checkpoint" \
			"$case/.expected-default.tsv" "$case" -o shard_size=100K
	fi
	n=$((n + 1))
done
# PyTorch DCP fixtures: the mount of the DCP directory (config.json copied
# in, passed through) loads and reproduces the reference logits.  DCP stores
# the tied lm_head.weight separately, so no alias is expected.
GFS_EXPECT_UNTIED=1
export GFS_EXPECT_UNTIED
for case in "$top_srcdir"/tests/data/dcp/*/; do
	case=${case%/}
	name=dcp-$(basename "$case")
	[ -d "$case/checkpoint" ] || continue
	mnt="$T/mnt-$name"
	mount_check "$name" "$case/checkpoint" "$case/.expected-default.tsv" "$case"
	n=$((n + 1))
done
[ $n -gt 0 ] || fail "no fixtures found"
echo "compat: $n fixtures checked"
