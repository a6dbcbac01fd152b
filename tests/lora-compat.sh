#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# LoRA-merged mounts loaded by transformers inside the compat root (torch
# 2.x): from_pretrained(MNT) in fp32 reproduces the unmerged PeftModel's
# logits within 1e-6, for every fp32 case, the targeted tied embedding
# included (its head untied).  Skipped (77) without the compat root.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
COMPAT_ROOT=${GATHERFS_COMPAT_ROOT:-/var/cache/gatherfs/compat-root}
[ "$(id -u)" = 0 ] || skip "the compat root needs root (chroot, mount namespaces)"
[ -x "$COMPAT_ROOT/usr/bin/python3" ] ||
	skip "no compat root at $COMPAT_ROOT: build it with tests/compat/make-compat-root.sh"
mount_setup
D="$top_srcdir/tests/data/lora"

# logits MNT CASE: the check inside the root.
logits() {
	COMPAT_BINDS="$top_srcdir $T" timeout 600 "$top_srcdir/tests/compat/compat-run.sh" \
		"$COMPAT_ROOT" python3 "$top_srcdir/tests/compat/check_lora_logits.py" "$@"
}

# The four fp32 cases and z2_ws2_fp32 are mounted first, then one
# check_lora_logits.py --each checks them all (torch and transformers imported
# once), then they are unmounted.
n=0
pairs="" MNTS=""
for case in "$D"/*/; do
	case=${case%/}
	[ -f "$case/logits_unmerged.pt" ] || continue
	mnt="$T/mnt-$(basename "$case")"
	mkdir "$mnt"
	gfs_mount "$case/base" "$mnt" -o "lora=$case/adapter" || fail "mount $case"
	pairs="$pairs $mnt $case" MNTS="$MNTS $mnt"
	n=$((n + 1))
done
c="$top_srcdir/tests/data/lora-ds/z2_ws2_fp32"
mkdir "$T/mnt-z2"
gfs_mount "$c/checkpoint" "$T/mnt-z2" -o merge=lora || fail "mount z2_ws2_fp32"
pairs="$pairs $T/mnt-z2 $c" MNTS="$MNTS $T/mnt-z2"
[ $n -eq 4 ] || fail "$n fp32 cases, expected 4"
# shellcheck disable=SC2086
logits --each $pairs || fail "logits: see the FAIL lines above"
for mnt in $MNTS; do
	gfs_umount "$mnt" || fail "unmount $mnt"
done
# control: PEFT's in-place merge of the tied embedding changes the head too,
# so it does not keep the unmerged model's function
g="$D/g_llama_fp32_tied_embed"
mkdir "$T/mnt-peft"
gfs_mount "$g/base" "$T/mnt-peft" -o "lora=$g/adapter,lora_tied=peft" || fail "mount g peft"
logits "$T/mnt-peft" "$g" 1e-3 && fail "g with lora_tied=peft kept the unmerged logits"
gfs_umount "$T/mnt-peft" || fail "unmount"
echo "PASS"
