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

n=0
for src in "$PLAIN/llama_fp32" "$PLAIN/llama_bf16" "$PLAIN/llama_bf16_bin" \
	"$PLAIN/lomo_ws2_fp32/old_save.pt" "$PLAIN/lomo_ws3_bf16/old_save.pt" \
	"$G/views" "$G/sharded_st" "$G/sharded_bin"; do
	"$PYTHON3" "$REF" tsv "$src" "$T/host" || fail "host plain_ref.py tsv $src"
	compat_py "$REF" tsv "$src" "$T/compat" || fail "compat plain_ref.py tsv $src"
	for m in default bf16; do
		cmp -s "$T/host.$m.tsv" "$T/compat.$m.tsv" ||
			fail "$src ($m): torch 2.x / safetensors read it otherwise than the host reference: $(diff "$T/host.$m.tsv" "$T/compat.$m.tsv" | head -4)"
	done
	n=$((n + 1))
done
echo "ok: $n sources read alike by the host reference and the compat root's loaders"

mnt="$T/mnt"
for c in llama_fp32 llama_bf16 llama_bf16_bin; do
	"$PYTHON3" "$REF" tsv "$PLAIN/$c" "$T/want" || fail "plain_ref.py tsv $c"
	ref="$T/ref-$c"
	compat_py "$top_srcdir/tests/tools/plain_logits.py" "$PLAIN/$c" "$ref" || fail "plain_logits.py $c"
	for opt in "" "-o shard_size=64K"; do
		echo "== $c $opt"
		# shellcheck disable=SC2086
		gfs_mount "$PLAIN/$c" "$mnt" $opt || fail "mount $c $opt"
		COMPAT_BINDS="$top_srcdir $T" timeout 600 "$top_srcdir/tests/compat/compat-run.sh" \
			"$COMPAT_ROOT" python3 "$top_srcdir/tests/compat/check_loaders.py" "$mnt" \
			"$T/want.default.tsv" "$ref" || fail "$c $opt: loaders"
		gfs_umount "$mnt" || fail "unmount $mnt"
	done
done
echo "PASS"
