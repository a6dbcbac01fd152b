#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Plain model files and modern loaders, inside the Debian sid compat root
# (torch 2.x, safetensors, transformers; tests/compat/make-compat-root.sh).
# Skipped (77) when the root is absent.
#  - The real readers there (torch.load of torch 2.x, safetensors.safe_open)
#    read every plain source (tests/data/plain and the cases
#    tests/tools/make_plain.py writes with the host's torch) exactly as the
#    host reference does (tests/tools/plain_ref.py: torch 1.13 and the
#    safetensors format read with the standard library).
#  - Mounts of the Hugging Face sources, whole and as shards, load with
#    torch.load (weights_only, mmap, meta), safe_open and from_pretrained
#    (tests/compat/check_loaders.py), and from_pretrained of the mount gives
#    exactly the logits from_pretrained of the original files gives
#    (tests/tools/plain_logits.py).
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
COMPAT_ROOT=${GATHERFS_COMPAT_ROOT:-/var/cache/gatherfs/compat-root}
[ "$(id -u)" = 0 ] || skip "the compat root needs root (chroot, mount namespaces)"
[ -x "$COMPAT_ROOT/usr/bin/python3" ] ||
	skip "no compat root at $COMPAT_ROOT: build it with tests/compat/make-compat-root.sh"
mount_setup
"$PYTHON3" -c "import torch" 2>/dev/null || skip "python3-torch not installed"
PLAIN="$top_srcdir/tests/data/plain"
REF="$top_srcdir/tests/tools/plain_ref.py"
G="$T/gen"
"$PYTHON3" "$top_srcdir/tests/tools/make_plain.py" good "$G" || fail "make_plain.py good"

compat_py() {
	COMPAT_BINDS="$top_srcdir $T" timeout 600 "$top_srcdir/tests/compat/compat-run.sh" \
		"$COMPAT_ROOT" python3 "$@"
}

# Each step runs one python process over every source (torch, and in the
# root transformers, imported once per step, not once per source).
SRCS="$PLAIN/llama_fp32 $PLAIN/llama_bf16 $PLAIN/llama_bf16_bin
	$PLAIN/lomo_ws2_fp32/old_save.pt $PLAIN/lomo_ws3_bf16/old_save.pt
	$G/views $G/sharded_st $G/sharded_bin"
n=0
host_args="" compat_args=""
for src in $SRCS; do
	n=$((n + 1))
	host_args="$host_args $src $T/host-$n"
	compat_args="$compat_args $src $T/compat-$n"
done
# shellcheck disable=SC2086
"$PYTHON3" "$REF" tsv $host_args || fail "host plain_ref.py tsv"
# shellcheck disable=SC2086
compat_py "$REF" tsv $compat_args || fail "compat plain_ref.py tsv"
i=0
for src in $SRCS; do
	i=$((i + 1))
	for m in default bf16; do
		[ -s "$T/host-$i.$m.tsv" ] || fail "$src ($m): no host table"
		cmp -s "$T/host-$i.$m.tsv" "$T/compat-$i.$m.tsv" ||
			fail "$src ($m): torch 2.x / safetensors read it otherwise than the host reference: $(diff "$T/host-$i.$m.tsv" "$T/compat-$i.$m.tsv" | head -4)"
	done
done
[ $i -eq 8 ] || fail "$i sources, want 8"
echo "ok: $n sources read alike by the host reference and the compat root's loaders"

# Every Hugging Face source mounted whole and as 64K shards, then one
# check_loaders.py --batch in the root checks the six mounts.
CASES="llama_fp32 llama_bf16 llama_bf16_bin"
ref_args="" logits_args=""
for c in $CASES; do
	ref_args="$ref_args $PLAIN/$c $T/want-$c"
	logits_args="$logits_args $PLAIN/$c $T/ref-$c"
done
# shellcheck disable=SC2086
"$PYTHON3" "$REF" tsv $ref_args || fail "plain_ref.py tsv"
# shellcheck disable=SC2086
compat_py "$top_srcdir/tests/tools/plain_logits.py" $logits_args || fail "plain_logits.py"
LIST="$T/mounts.tsv"
: >"$LIST"
MNTS=""
for c in $CASES; do
	for opt in "" "-o shard_size=64K"; do
		mnt="$T/mnt-$c${opt:+-shards}"
		echo "== mount $c $opt"
		# shellcheck disable=SC2086
		gfs_mount "$PLAIN/$c" "$mnt" $opt || fail "mount $c $opt"
		MNTS="$MNTS $mnt"
		printf '%s\t%s\t%s\t%s\t0\n' "$c $opt" "$mnt" "$T/want-$c.default.tsv" "$T/ref-$c" >>"$LIST"
	done
done
compat_py "$top_srcdir/tests/compat/check_loaders.py" --batch "$LIST" || fail "loaders: see the failed mounts above"
for mnt in $MNTS; do
	gfs_umount "$mnt" || fail "unmount $mnt"
done
echo "PASS"
