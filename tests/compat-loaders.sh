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

# Every fixture is mounted first (each on its own mount point), then one
# check_loaders.py --batch inside the root checks them all (torch and
# transformers imported once, not once a mount), then all are unmounted.
LIST="$T/mounts.tsv"
: >"$LIST"

# mount_add LABEL CKPT TSV CASE MNT [OPT...]: mount CKPT (with OPTs) on MNT,
# check a sharded view has its index, and list MNT for the loaders to check
# against TSV (and CASE's reference logits, if CASE is not empty).
mount_add() {
	label=$1 ck=$2 tsv=$3 ref=$4 mnt=$5
	shift 5
	echo "== mount $label"
	gfs_mount "$ck" "$mnt" "$@" || fail "mount $label"
	case " $* " in
	*shard_size=*) [ -f "$mnt/model.safetensors.index.json" ] || fail "$label: no safetensors index" ;;
	esac
	printf '%s\t%s\t%s\t%s\t%s\n' "$label" "$mnt" "$tsv" "$ref" "${GFS_EXPECT_UNTIED:-0}" >>"$LIST"
	MNTS="$MNTS $mnt"
}

MNTS=""
n=0
GFS_EXPECT_UNTIED=0
for case in "$CKPTS"/*/; do
	case=${case%/}
	name=$(basename "$case")
	[ -d "$case/checkpoint" ] || continue
	mnt="$T/mnt-$name"
	mount_add "$name" "$case/checkpoint" "$case/.expected-default.tsv" "$case" "$mnt"
	case $name in
	*bf16*)
		mount_add "$name (-o dtype=bf16)" "$case/checkpoint" "$case/.expected-bf16.tsv" "" \
			"$mnt-bf16" -o dtype=bf16 ;;
	esac
	if [ -f "$case/reference_logits.pt" ]; then
		mount_add "$name (-o shard_size=100K)" "$case/checkpoint" \
			"$case/.expected-default.tsv" "$case" "$mnt-shards" -o shard_size=100K
	fi
	n=$((n + 1))
done
# PyTorch DCP fixtures: the mount of the DCP directory (config.json copied
# in, passed through) loads and reproduces the reference logits.  DCP stores
# the tied lm_head.weight separately, so no alias is expected.
GFS_EXPECT_UNTIED=1
for case in "$top_srcdir"/tests/data/dcp/*/; do
	case=${case%/}
	name=dcp-$(basename "$case")
	[ -d "$case/checkpoint" ] || continue
	mount_add "$name" "$case/checkpoint" "$case/.expected-default.tsv" "$case" "$T/mnt-$name"
	n=$((n + 1))
done
[ $n -gt 0 ] || fail "no fixtures found"
COMPAT_BINDS="$top_srcdir $T" timeout 900 "$top_srcdir/tests/compat/compat-run.sh" \
	"$COMPAT_ROOT" python3 "$top_srcdir/tests/compat/check_loaders.py" --batch "$LIST" ||
	fail "loaders: $(grep -c . "$LIST") mounts, see the failed ones above"
for mnt in $MNTS; do
	gfs_umount "$mnt" || fail "unmount $mnt"
done
echo "compat: $n fixtures checked"
