#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Megatron checkpoints mounted as Hugging Face models load and run: inside the
# Debian sid compat root (torch 2.x, transformers 5.x;
# tests/compat/make-compat-root.sh), from_pretrained(MNT) of the mount gives
# Megatron-Core's own logits on the run's batch within 1e-4
# (tests/compat/check_hf_logits.py): Llama at TP 2 x PP 2 (legacy), Mixtral
# at EP 2 (torch_dist of save_checkpoint, one with Megatron's distributed
# optimizer state), Llama with MQA and tied
# embeddings (legacy), Qwen2 with QKV biases, tied embeddings, bf16 weights
# and vocabulary 1003 at TP 2 x PP 2 (legacy and torch_dist; fp32 run against
# Megatron's fp32 forward on the same weights), and a bare torch_dist save
# and a torch_dcp save with -o hf_config; the model families
# (tests/megatron-families.sh): Qwen3 (also tied, bf16, PP 2: against
# Megatron's fp32 forward), Qwen3-MoE at EP 2 and with a dense layer and
# pre-softmax routing, Qwen2-MoE, DeepSeek-V3 (MLA) and V2-Lite style (no
# q_lora), legacy and torch_dist; grouped experts and MTP layers (legacy).  Skipped (77) when the root is absent.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
COMPAT_ROOT=${GATHERFS_COMPAT_ROOT:-/var/cache/gatherfs/compat-root}
[ "$(id -u)" = 0 ] || skip "the compat root needs root (chroot, mount namespaces)"
[ -x "$COMPAT_ROOT/usr/bin/python3" ] ||
	skip "no compat root at $COMPAT_ROOT: build it with tests/compat/make-compat-root.sh"
mount_setup
DATA="$top_srcdir/tests/data/megatron"

# add SRC CASE [ARG...]: mount SRC (with ARGs) on its own mount point and
# list it for from_pretrained(MNT) against CASE's logits.  All are mounted
# first, then one check_hf_logits.py --batch inside the root checks them all
# (torch and transformers imported once), then they are unmounted.
LIST="$T/checks.tsv"
: >"$LIST"
MNTS=""
k=0
add() {
	src=$1 case=$2
	shift 2
	k=$((k + 1))
	ref=reference_logits_fp32_forward.pt # a bf16 case: Megatron's fp32 forward of its weights
	[ -f "$case/$ref" ] || ref=reference_logits.pt
	gfs_mount "$src" "$T/mnt$k" "$@" 2>"$T/note" || fail "mount $src: $(cat "$T/note")"
	MNTS="$MNTS $T/mnt$k"
	printf '%s\t%s\t--ref\t%s\n' "$T/mnt$k" "$case" "$ref" >>"$LIST"
}

add "$DATA/tp2_pp2/legacy_torch" "$DATA/tp2_pp2"
add "$DATA/moe_ep2/training_torch_dist" "$DATA/moe_ep2"
add "$DATA/moe_distopt/training_torch_dist" "$DATA/moe_distopt"
add "$DATA/mqa_tie/legacy_torch" "$DATA/mqa_tie"
add "$DATA/qwen_tie_bf16/legacy_torch" "$DATA/qwen_tie_bf16"
add "$DATA/qwen_tie_bf16/training_torch_dist" "$DATA/qwen_tie_bf16"
add "$DATA/tp1_pp2/torch_dist" "$DATA/tp1_pp2" -o hf_config="$DATA/tp1_pp2/hf_config"
add "$DATA/dcp_tp1/torch_dcp" "$DATA/dcp_tp1" -o hf_config="$DATA/dcp_tp1/hf_config"
FAM="$top_srcdir/tests/data/megatron-families"
for c in qwen3_tp1 qwen3moe_ep2 qwen2moe_tp1 dsv3_tp1 qwen3_tie_bf16_pp2 qwen3moe_mixed_presoftmax_tp1 \
	dsv2lite_noqlora_tp1; do
	add "$FAM/$c/legacy_torch" "$FAM/$c"
	add "$FAM/$c/training_torch_dist" "$FAM/$c"
done
add "$FAM/dsv3_nobias_tp1/legacy_torch" "$FAM/dsv3_nobias_tp1"
add "$FAM/qwen3moe_grouped_ep2/legacy_torch" "$FAM/qwen3moe_ep2"
add "$FAM/qwen3_mtp_tp1/legacy_torch" "$FAM/qwen3_tp1"
COMPAT_BINDS="$top_srcdir $T" timeout 900 "$top_srcdir/tests/compat/compat-run.sh" \
	"$COMPAT_ROOT" python3 "$top_srcdir/tests/compat/check_hf_logits.py" --batch "$LIST" \
	>"$T/out" 2>"$T/err" || fail "$(tail -3 "$T/err") $(cat "$T/out")"
[ "$(grep -c '"ok": true' "$T/out")" -eq $k ] || fail "not $k passing checks: $(cat "$T/out")"
cat "$T/out"
for mnt in $MNTS; do
	gfs_umount "$mnt" || fail "unmount $mnt"
done
echo "megatron-compat: OK"
