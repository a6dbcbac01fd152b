#!/bin/sh
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

n=0
for case in "$CKPTS"/*/; do
	case=${case%/}
	name=$(basename "$case")
	[ -d "$case/checkpoint" ] || continue
	echo "== $name"
	mnt="$T/mnt-$name"
	gfs_mount "$case/checkpoint" "$mnt" || fail "mount $name"
	run_check "$mnt" "$case/.expected-default.tsv" "$case" || fail "$name: loaders"
	gfs_umount "$mnt" || fail "unmount $name"
	case $name in
	*bf16*)
		echo "== $name (-o dtype=bf16)"
		gfs_mount "$case/checkpoint" "$mnt" -o dtype=bf16 || fail "mount $name bf16"
		run_check "$mnt" "$case/.expected-bf16.tsv" || fail "$name (bf16): loaders"
		gfs_umount "$mnt" || fail "unmount $name"
		;;
	esac
	if [ -f "$case/reference_logits.pt" ]; then
		echo "== $name (-o shard_size=100K)"
		gfs_mount "$case/checkpoint" "$mnt" -o shard_size=100K || fail "mount $name sharded"
		ls "$mnt"
		[ -f "$mnt/model.safetensors.index.json" ] || fail "$name: no safetensors index"
		run_check "$mnt" "$case/.expected-default.tsv" "$case" || fail "$name (sharded): loaders"
		gfs_umount "$mnt" || fail "unmount $name"
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
	echo "== $name"
	mnt="$T/mnt-$name"
	gfs_mount "$case/checkpoint" "$mnt" || fail "mount $name"
	run_check "$mnt" "$case/.expected-default.tsv" "$case" || fail "$name: loaders"
	gfs_umount "$mnt" || fail "unmount $name"
	n=$((n + 1))
done
[ $n -gt 0 ] || fail "no fixtures found"
echo "compat: $n fixtures checked"
