#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Today's model families from Megatron as Hugging Face models (docs/megatron.md,
# "Model families"), on real Megatron-Core core_v0.17.1 runs
# (tests/data/megatron-families/README.md): Qwen3 (QK norms, head_dim =
# kv_channels != hidden/heads), Qwen3-MoE at EP 2, Qwen2-MoE (QKV biases, a
# shared expert and its sigmoid gate, pre-softmax routing) and DeepSeek-V3 (MLA,
# sigmoid routing with an expert bias, a shared expert, a dense first layer:
# per-layer torch_dist keys, experts on axis 0).
#  - every case, all three forms (legacy torch, Megatron-LM's torch_dist with
#    args, a bare dist_checkpointing.save with -o hf_config): the Hugging Face
#    view equals the reference conversion (transformers' save_pretrained of the
#    truth) bit for bit, in the HF model's key order, and config.json gives the
#    fields transformers reads as the reference does
#    (tests/tools/check_family_ref.py; logits: tests/megatron-compat.sh);
#  - MLA at TP 2 (dense, with and without a query low-rank projection; the
#    HF naming has no dense DeepSeek-V3, and MoE at TP > 1 needs sequence
#    parallelism, which the CPU generator does not run): the Megatron view of
#    all three forms equals the run's truth (the local layer spec's
#    column-parallel down projections gathered); args that fit neither a
#    whole nor a 1/TP down projection are refused;
#  - refusals: what no family table expresses is a note with the Megatron
#    view, and one line under -o naming=hf.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
DATA="$top_srcdir/tests/data/megatron-families"
REF="$top_srcdir/tests/tools/check_family_ref.py"
EDIT="$top_srcdir/tests/tools/megatron_edit_args.py"

# check SRC CASE NOTE [ARG...]: mount SRC, the note says NOTE, the view is the reference's
check() {
	src=$1 case=$2 note=$3
	shift 3
	gfs_mount "$src" "$T/mnt" "$@" 2>"$T/note" || fail "mount $src: $(cat "$T/note")"
	grep -q -- "gatherfs: note: $note" "$T/note" || fail "mount $src: note: $(cat "$T/note")"
	timeout 300 "$PYTHON3" "$REF" "$T/mnt" "$case" || fail "$src: not the reference conversion"
	gfs_umount "$T/mnt" || fail "unmount"
}

fresh() {
	rm -rf "$T/bad"
	cp -r "$DATA/$1/legacy_torch" "$T/bad"
	chmod -R u+w "$T/bad"
}
for c in qwen3_tp1:qwen3 qwen3moe_ep2:qwen3_moe qwen2moe_tp1:qwen2_moe dsv3_tp1:deepseek_v3 \
	qwen3_tie_bf16_pp2:qwen3 qwen3moe_mixed_presoftmax_tp1:qwen3_moe dsv2lite_noqlora_tp1:deepseek_v3; do
	case=$DATA/${c%%:*} family=${c#*:}
	echo "== ${c%%:*} ($family)"
	check "$case/legacy_torch" "$case" "Hugging Face view ($family naming"
	check "$case/training_torch_dist" "$case" "Hugging Face view ($family naming"
	check "$case/torch_dist" "$case" "Hugging Face view ($family naming" -o hf_config="$case/hf_ref"
done

echo "== MLA at TP 2 (dense, so the Megatron view): equal to the run's truth in all three forms"
# Megatron-Core's local layer spec makes the down projections column-parallel
# (each rank 1/TP of the rows), TransformerEngine's duplicates them
VIEWS="$top_srcdir/tests/tools/check_megatron_views.py"
for c in mla_dense_tp2 mla_noqlora_dense_tp2; do
	case=$DATA/$c
	for f in legacy_torch training_torch_dist torch_dist; do
		note="the Hugging Face naming cannot express MLA without experts"
		[ $f = torch_dist ] && note="common.pt holds no args"
		gfs_mount "$case/$f" "$T/mnt" 2>"$T/note" || fail "mount $c/$f: $(cat "$T/note")"
		grep -q -- "gatherfs: note: Megatron view: $note" "$T/note" || fail "mount $c/$f: note: $(cat "$T/note")"
		timeout 300 "$PYTHON3" "$VIEWS" dist "$T/mnt" "$case" || fail "$c/$f: not the truth"
		gfs_umount "$T/mnt" || fail "unmount"
	done
done
# args whose MLA sizes fit neither a whole nor a 1/TP down projection
for e in q_lora_rank=48 q_lora_rank=None kv_lora_rank=8; do
	rm -rf "$T/bad"
	cp -r "$DATA/mla_dense_tp2/legacy_torch" "$T/bad"
	chmod -R u+w "$T/bad"
	f="$T/bad/iter_0000003/mp_rank_00/model_optim_rng.pt"
	timeout 60 "$PYTHON3" "$EDIT" "$f" "$T/edited" "$e" && mv "$T/edited" "$f" || fail "edit $e"
	case $e in
	*=None) want="linear_q_down_proj.weight: an MLA down projection at TP 2, but the args lack q_lora_rank" ;;
	q_*) want="linear_q_down_proj.weight: 2 dimensions, 16 rows: neither the 48 rows the args give nor their 1/2 share" ;;
	*) want="linear_kv_down_proj.weight: 2 dimensions, 20 rows: neither the 16 rows the args give nor their 1/2 share" ;;
	esac
	expect_refused "$want" "$T/bad"
done

echo "== DeepSeek-V3 routing without an expert bias: e_score_correction_bias zeros"
nb="$DATA/dsv3_nobias_tp1"
check "$nb/legacy_torch" "$nb" "Hugging Face view (deepseek_v3 naming"
check "$nb/torch_dist" "$nb" "Hugging Face view (deepseek_v3 naming" -o hf_config="$nb/hf_ref"
# args that say there is none while the save has one: the bias maps to nothing
fresh dsv3_tp1
f="$T/bad/iter_0000003/mp_rank_00/model_optim_rng.pt"
timeout 60 "$PYTHON3" "$EDIT" "$f" "$T/edited" moe_router_enable_expert_bias=False && mv "$T/edited" "$f" || fail "edit"
expect_refused "decoder.layers.1.mlp.router.expert_bias maps to nothing in the deepseek_v3 naming" "$T/bad"

echo "== TransformerEngine's grouped experts (linear_fc1.weight<e>) read like SequentialMLP's"
check "$DATA/qwen3moe_grouped_ep2/legacy_torch" "$DATA/qwen3moe_ep2" "Hugging Face view (qwen3_moe naming"
timeout 60 "$INSPECT" ls --naming megatron "$DATA/qwen3moe_grouped_ep2/legacy_torch" >"$T/ls" 2>/dev/null ||
	fail "ls grouped"
grep -q "^decoder.layers.2.mlp.experts.local_experts.3.linear_fc1.weight " "$T/ls" ||
	fail "grouped: rank 1's weight1 is not expert 3"

echo "== multi-token prediction layers: left out of the HF view, listed by ls --all"
mtp="$DATA/qwen3_mtp_tp1/legacy_torch"
check "$mtp" "$DATA/qwen3_tp1" \
	"Hugging Face view (qwen3 naming; -o naming=megatron for Megatron's names); 12 multi-token prediction tensors (mtp.\*) left out: gatherfs-inspect ls --all lists them"
timeout 60 "$INSPECT" ls --all "$mtp" >"$T/ls" 2>/dev/null || fail "ls --all mtp"
[ "$(grep -c "^mtp.layers.0.* (left out: a multi-token prediction layer: the Hugging Face model has none)" "$T/ls")" -eq 12 ] ||
	fail "ls --all: not the 12 MTP tensors: $(grep mtp "$T/ls")"
grep -q "^mtp.layers.0.eh_proj.weight " "$T/ls" || fail "ls --all: no eh_proj"
timeout 60 "$INSPECT" ls --naming megatron "$mtp" 2>/dev/null | grep -q "^mtp.layers.0.mtp_model_layer.self_attention.linear_qkv.weight " ||
	fail "Megatron view: no MTP layer"

echo "== -o hf_config with args: the family's fields must agree"
check "$DATA/qwen3moe_ep2/training_torch_dist" "$DATA/qwen3moe_ep2" "Hugging Face view (qwen3_moe naming" \
	-o hf_config="$DATA/qwen3moe_ep2/hf_ref"
check "$DATA/dsv3_tp1/legacy_torch" "$DATA/dsv3_tp1" "Hugging Face view (deepseek_v3 naming" \
	-o hf_config="$DATA/dsv3_tp1/hf_ref"
# disagree CASE EDIT PATTERN: CASE's reference config.json after EDIT (python on c) is refused
disagree() {
	rm -rf "$T/cfg" && mkdir "$T/cfg"
	timeout 60 "$PYTHON3" -c "
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(c, open(sys.argv[2], 'w'))" "$DATA/$1/hf_ref/config.json" "$T/cfg/config.json" "$2" || fail "cfg $2"
	expect_mount_fail "$3" "$DATA/$1/training_torch_dist" "$T/mnt" -o hf_config="$T/cfg"
}
disagree qwen3moe_ep2 'c["norm_topk_prob"] = False' "config.json's norm_topk_prob is 0, but the args of .* give 1: they must agree"
disagree qwen3moe_ep2 'c["mlp_only_layers"] = [1]' "config.json makes layer 1 dense, but the args of .* make it one with experts: they must agree"
disagree qwen3_tp1 'c["model_type"] = "llama"' "config.json's model_type is llama, but the args of .* say qwen3: they must agree"
disagree dsv3_tp1 'c["routed_scaling_factor"] = 1.0' "config.json's routed_scaling_factor is 1, but the args of .* give 2.5: they must agree"
disagree dsv3_tp1 'c["first_k_dense_replace"] = 0' "config.json makes layer 0 one with experts, but the args of .* make it dense: they must agree"
disagree dsv3_tp1 'c["n_shared_experts"] = 2' "config.json's shared expert size is 64, but the args of .* give 32: they must agree"
disagree dsv3_tp1 'c["kv_lora_rank"] = 16' "config.json's kv_lora_rank is 16, but the args of .* give 32: they must agree"
disagree dsv3_tp1 'c["rope_interleave"] = False' "rope_interleave false: Megatron's MLA rotary is the interleaved one"
disagree qwen2moe_tp1 'c["shared_expert_intermediate_size"] = 48' "config.json's shared expert size is 48, but the args of .* give 96: they must agree"

echo "== refusals: a note and the Megatron view; one line with -o naming=hf"
# refused CASE WHAT NAME=VALUE...: CASE's legacy save with its args edited so is refused for WHAT
refused() {
	fresh "$1"
	what=$2
	shift 2
	f=$(ls "$T"/bad/iter_0000003/mp_rank_00*/model_optim_rng.pt | head -1)
	timeout 60 "$PYTHON3" "$EDIT" "$f" "$T/edited" "$@" && mv "$T/edited" "$f" || fail "edit args $*"
	timeout 60 "$INSPECT" ls "$T/bad" >"$T/ls" 2>"$T/err" || fail "$*: $(cat "$T/err")"
	grep -q "note: Megatron view: the Hugging Face naming cannot express $what" "$T/err" ||
		fail "$*: no note: $(cat "$T/err")"
	grep -q "^decoder.layers.0.self_attention.linear_proj.weight " "$T/ls" || fail "$*: not the Megatron view"
	expect_mount_fail "the Hugging Face naming cannot express $what" "$T/bad" "$T/mnt" -o naming=hf
}
refused dsv3_tp1 "YaRN RoPE scaling (rope_type yarn" "rope_type='yarn'"
refused dsv3_tp1 "YaRN RoPE scaling (rope_type yarn" rope_type=None
refused dsv3_tp1 "dense layers other than a prefix (moe_layer_freq" "moe_layer_freq=[1,0,1]"
refused dsv3_tp1 "dense layers other than a prefix (moe_layer_freq" moe_layer_freq=2
refused dsv3_tp1 "MLA without the sizes it needs" kv_lora_rank=None
refused dsv3_tp1 "MLA without the sizes it needs" v_head_dim=None
refused dsv3_tp1 "MLA without its latent norms (qk_layernorm)" qk_layernorm=False
refused dsv3_tp1 "an MLA model whose norm epsilon is not 1e-6" layernorm_epsilon=0.00001
refused dsv3_tp1 "a shared expert size 48 that is not a multiple of the expert size 32" \
	moe_shared_expert_intermediate_size=48
refused dsv3_tp1 "MLA with a router score function other than sigmoid" "moe_router_score_function='softmax'"
refused dsv3_tp1 "MLA with experts but no shared expert" moe_shared_expert_intermediate_size=None
refused dsv3_tp1 "a fused MLA down projection (mla_down_proj_fusion)" mla_down_proj_fusion=True
refused qwen2moe_tp1 "a shared expert without its sigmoid gate" moe_shared_expert_gate=False
refused qwen3_tp1 "QKV biases with QK layernorm" add_qkv_bias=True
refused qwen3moe_ep2 "experts with QKV biases" add_qkv_bias=True
refused qwen3moe_ep2 "scaled top-k routing" moe_router_topk_scaling_factor=2.0
# an unchanged list edit mounts: the edit itself is sound
fresh dsv3_tp1
f="$T/bad/iter_0000003/mp_rank_00/model_optim_rng.pt"
timeout 60 "$PYTHON3" "$EDIT" "$f" "$T/edited" "moe_layer_freq=[0,1,1]" && mv "$T/edited" "$f" || fail "edit"
check "$T/bad" "$DATA/dsv3_tp1" "Hugging Face view (deepseek_v3 naming"
echo "megatron-families: OK"
