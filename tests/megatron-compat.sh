#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Megatron checkpoints mounted as Hugging Face models load and run: inside the
# Debian sid compat root (torch 2.x, transformers 5.x;
# tests/compat/make-compat-root.sh), from_pretrained(MNT) of the mount gives
# Megatron-Core's own logits on the run's batch within 1e-4
# (tests/compat/check_hf_logits.py): Llama at TP 2 x PP 2 (legacy), Mixtral
# at EP 2 (torch_dist of save_checkpoint), Llama with MQA and tied
# embeddings (legacy), Qwen2 with QKV biases, tied embeddings, bf16 weights
# and vocabulary 1003 at TP 2 x PP 2 (legacy and torch_dist; fp32 run against
# Megatron's fp32 forward on the same weights), and a bare torch_dist save
# with -o hf_config.  Skipped (77) when the root is absent.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
COMPAT_ROOT=${GATHERFS_COMPAT_ROOT:-/var/cache/gatherfs/compat-root}
[ "$(id -u)" = 0 ] || skip "the compat root needs root (chroot, mount namespaces)"
[ -x "$COMPAT_ROOT/usr/bin/python3" ] ||
	skip "no compat root at $COMPAT_ROOT: build it with tests/compat/make-compat-root.sh"
mount_setup
DATA="$top_srcdir/tests/data/megatron"

# logits SRC CASE [ARG...]: mount SRC, from_pretrained(MNT) against CASE's logits
logits() {
	src=$1 case=$2
	shift 2
	ref=reference_logits.pt
	[ -f "$case/$ref" ] || ref=reference_logits_fp32_forward.pt
	gfs_mount "$src" "$T/mnt" "$@" 2>"$T/note" || fail "mount $src: $(cat "$T/note")"
	COMPAT_BINDS="$top_srcdir $T" timeout 600 "$top_srcdir/tests/compat/compat-run.sh" \
		"$COMPAT_ROOT" python3 "$top_srcdir/tests/compat/check_hf_logits.py" "$T/mnt" "$case" \
		--ref "$ref" >"$T/out" 2>"$T/err" || fail "$src: $(tail -3 "$T/err") $(cat "$T/out")"
	tail -1 "$T/out"
	gfs_umount "$T/mnt" || fail "unmount"
}

logits "$DATA/tp2_pp2/legacy_torch" "$DATA/tp2_pp2"
logits "$DATA/moe_ep2/training_torch_dist" "$DATA/moe_ep2"
logits "$DATA/mqa_tie/legacy_torch" "$DATA/mqa_tie"
logits "$DATA/qwen_tie_bf16/legacy_torch" "$DATA/qwen_tie_bf16"
logits "$DATA/qwen_tie_bf16/training_torch_dist" "$DATA/qwen_tie_bf16"
logits "$DATA/tp1_pp2/torch_dist" "$DATA/tp1_pp2" -o hf_config="$DATA/tp1_pp2/hf_config"
echo "megatron-compat: OK"
