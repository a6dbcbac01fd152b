#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Megatron inputs that must never be served wrong (issue 41; docs/megatron.md),
# made from the real runs of tests/data/megatron by copying or editing files:
#  - a legacy rank file copied over another (tensor, pipeline or expert rank):
#    its args say which rank saved it, the mount and verify refuse it.
#  - -o hf_config= whose config.json contradicts the args: refused naming the
#    field and both values; a config whose two RoPE theta forms disagree.
#  - a Megatron or verl save directory without its tracker file: the only
#    iteration (step) directory with a note, several listed; --tag N.
#  - -o naming=megatron-local / megatron-te: the legacy and torch_dist forms
#    of one model list the same names, each tensor the same bytes.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
DATA="$top_srcdir/tests/data/megatron"

# fresh CASE: a writable copy of CASE's legacy save in $T/bad
fresh() {
	rm -rf "$T/bad"
	cp -r "$DATA/$1/legacy_torch" "$T/bad"
	chmod -R u+w "$T/bad"
}
I="$T/bad/iter_0000003"
mkdir -p "$T/mnt"
# refused PATTERN DIR: the mount, inspect ls and inspect verify refuse DIR with PATTERN
refused() {
	expect_refused "$1" "$2"
	if timeout 120 "$INSPECT" verify "$2" >"$T/v" 2>&1; then
		fail "verify $2 succeeded: $(cat "$T/v")"
	fi
	grep -q -- "$1" "$T/v" || fail "verify $2: $(cat "$T/v")"
}

echo "== a rank file copied over another"
fresh tp2_pp2; cp "$I/mp_rank_00_001/model_optim_rng.pt" "$I/mp_rank_01_001/model_optim_rng.pt"
refused "mp_rank_01_001/model_optim_rng.pt: its args say rank 2 saved it (tensor rank 0, pipeline stage 1, expert rank 0), not tensor rank 1, pipeline stage 1, expert rank 0: another rank's file" "$T/bad"
fresh tp2_pp2; cp "$I/mp_rank_00_000/model_optim_rng.pt" "$I/mp_rank_00_001/model_optim_rng.pt"
refused "mp_rank_00_001/model_optim_rng.pt: its args say rank 0 saved it" "$T/bad"
fresh moe_ep2; cp "$I/mp_rank_00_000/model_optim_rng.pt" "$I/mp_rank_00_001/model_optim_rng.pt"
refused "mp_rank_00_001/model_optim_rng.pt: its args say rank 0 saved it (tensor rank 0, pipeline stage 0, expert rank 0), not tensor rank 0, pipeline stage 0, expert rank 1" "$T/bad"
fresh moe_pp2_ep2; cp "$I/mp_rank_00_001_000/model_optim_rng.pt" "$I/mp_rank_00_001_001/model_optim_rng.pt"
refused "mp_rank_00_001_001/model_optim_rng.pt: its args say rank 2 saved it" "$T/bad"
fresh tp2_pp1; cp "$I/mp_rank_00/model_optim_rng.pt" "$I/mp_rank_01/model_optim_rng.pt"
refused "mp_rank_01/model_optim_rng.pt: its args say rank 0 saved it" "$T/bad"
# every real save's files are who they say
for c in tp1_pp1 tp2_pp1 tp1_pp2 tp2_pp2 moe_ep2 moe_pp2_ep2 mqa_tie qwen_tie_bf16; do
	timeout 120 "$INSPECT" verify "$DATA/$c/legacy_torch" >"$T/v" 2>&1 || fail "verify $c: $(cat "$T/v")"
done

echo "== -o hf_config= against the args"
CFG="$DATA/tp1_pp2/hf_config/config.json"
# cfg PY: $T/cfg/config.json is CFG after PY (python on the dict c)
cfg() {
	rm -rf "$T/cfg" && mkdir "$T/cfg"
	timeout 60 "$PYTHON3" -c "
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(c, open(sys.argv[2], 'w'))" "$CFG" "$T/cfg/config.json" "$1" || fail "cfg $1"
}
save="$DATA/tp1_pp1/legacy_torch"
cfg 'pass'
gfs_mount "$save" "$T/mnt" -o hf_config="$T/cfg" 2>"$T/err" || fail "an agreeing hf_config refused: $(cat "$T/err")"
gfs_umount "$T/mnt" || fail "unmount"
for e in 'c["vocab_size"] = 990:vocab_size is 990, but args.vocab_size is 1000' \
	'c["hidden_size"] = 128:hidden_size is 128, but args.hidden_size is 64' \
	'c["num_hidden_layers"] = 3:num_hidden_layers is 3, but args.num_layers is 4' \
	'c["num_attention_heads"] = 2:num_attention_heads is 2, but args.num_attention_heads is 4' \
	'c["num_key_value_heads"] = 4:num_key_value_heads is 4, but args.num_query_groups is 2' \
	'c["head_dim"] = 8:head_dim is 8, but args.kv_channels is 16' \
	'c["intermediate_size"] = 170:intermediate_size is 170, but args.ffn_hidden_size is 176' \
	'c["rope_parameters"]["rope_theta"] = 500000.0:rope_theta is 500000, but args.rotary_base is 10000' \
	'del c["rope_parameters"]; c["rope_theta"] = 20000.0:rope_theta is 20000, but args.rotary_base is 10000' \
	'c["rms_norm_eps"] = 1e-6:rms_norm_eps is 1e-06, but args.norm_epsilon is 1e-05' \
	'c["tie_word_embeddings"] = True:tie_word_embeddings is true, but args.untie_embeddings_and_output_weights is True' \
	'c["model_type"] = "mixtral"; c["num_local_experts"] = 4; c["num_experts_per_tok"] = 2:num_local_experts is 4, but args.num_experts is 0'; do
	cfg "${e%%:*}"
	expect_mount_fail "the hf_config config.json's ${e#*:} (the args of " "$save" "$T/mnt" -o hf_config="$T/cfg"
	timeout 60 "$INSPECT" ls --hf-config "$T/cfg" "$save" >/dev/null 2>"$T/err" && fail "inspect ls: ${e%%:*} accepted"
	grep -q -- "${e#*:}" "$T/err" || fail "inspect ls: $(cat "$T/err")"
done
cfg 'c["rope_theta"] = 20000.0'
expect_mount_fail "config.json: rope_theta 20000 and rope_parameters.rope_theta 10000 disagree" \
	"$DATA/tp1_pp2/torch_dist" "$T/mnt" -o hf_config="$T/cfg"
# the args lack the vocabulary: the config gives it
cp -r "$save" "$T/novocab" && chmod -R u+w "$T/novocab"
f="$T/novocab/iter_0000003/mp_rank_00/model_optim_rng.pt"
timeout 60 "$PYTHON3" "$top_srcdir/tests/tools/megatron_edit_args.py" "$f" "$T/edited" vocab_size=None && mv "$T/edited" "$f" ||
	fail "edit args"
cfg 'c["vocab_size"] = 990'
gfs_mount "$T/novocab" "$T/mnt" -o hf_config="$T/cfg" 2>"$T/err" || fail "hf_config filling the vocabulary: $(cat "$T/err")"
gfs_umount "$T/mnt" || fail "unmount"

echo "== no latest_checkpointed_iteration.txt"
rm -rf "$T/nt" && cp -r "$DATA/tp1_pp2/legacy_torch" "$T/nt" && chmod -R u+w "$T/nt" && rm "$T/nt/latest_checkpointed_iteration.txt" ||
	fail "copy"
gfs_mount "$T/nt" "$T/mnt" 2>"$T/err" || fail "a save without its tracker file: $(cat "$T/err")"
grep -q "gatherfs: note: .*nt has no latest_checkpointed_iteration.txt: using its only iteration directory, iter_0000003" "$T/err" ||
	fail "no note: $(cat "$T/err")"
timeout 300 "$PYTHON3" "$top_srcdir/tests/tools/check_megatron_views.py" hf "$T/mnt" "$DATA/tp1_pp2" || fail "hf view"
gfs_umount "$T/mnt" || fail "unmount"
for tag in 3 iter_0000003; do
	timeout 60 "$INSPECT" ls --tag $tag "$T/nt" >"$T/ls" 2>"$T/err" || fail "--tag $tag: $(cat "$T/err")"
	grep -q "legacy Megatron-LM checkpoint, TP 1 x PP 2" "$T/err" || fail "--tag $tag: $(cat "$T/err")"
done
cmp -s "$T/ls" "$(timeout 60 "$INSPECT" ls "$DATA/tp1_pp2/legacy_torch" >"$T/ls0" 2>/dev/null; echo "$T/ls0")" || fail "--tag: another listing"
mv "$T/nt/iter_0000003" "$T/nt/iter_0000009"
gfs_mount "$T/nt" "$T/mnt" -o tag=9 2>"$T/err" || fail "-o tag=9: $(cat "$T/err")"
gfs_umount "$T/mnt" || fail "unmount"
cp -r "$T/nt/iter_0000009" "$T/nt/iter_0000012"
expect_refused "nt: no latest_checkpointed_iteration.txt and 2 iteration directories (iter_00000" "$T/nt"
grep -q "iter_0000009" "$T/err" && grep -q "iter_0000012" "$T/err" || fail "not both listed: $(cat "$T/err")"
timeout 60 "$INSPECT" ls --tag 12 "$T/nt" >/dev/null 2>&1 || fail "--tag 12"
expect_mount_fail "tag 'it9': not iter_NNNNNNN or release (or the iteration's number)" "$T/nt" "$T/mnt" -o tag=it9
# verl
rm -rf "$T/verl" && cp -r "$top_srcdir/tests/data/fsdp_rank/fsdp2_ws2" "$T/verl" && chmod -R u+w "$T/verl" &&
	rm "$T/verl/latest_checkpointed_iteration.txt" || fail "copy verl"
timeout 60 "$INSPECT" ls "$T/verl" >/dev/null 2>"$T/err" || fail "verl without its tracker file: $(cat "$T/err")"
grep -q "note: read .*verl/global_step_2/actor (no latest_checkpointed_iteration.txt: the only step directory)" "$T/err" ||
	fail "verl: no note: $(cat "$T/err")"
cp -r "$T/verl/global_step_2" "$T/verl/global_step_4"
expect_refused "verl: no latest_checkpointed_iteration.txt and 2 step directories (global_step_" "$T/verl"
# the list of formats looked for names every format
mkdir "$T/empty"
expect_refused "no known checkpoint format" "$T/empty"
for f in DeepSpeed DCP zero3 Megatron verl layout.json safetensors; do
	grep -q "$f" "$T/ierr" || fail "looked-for list lacks $f: $(cat "$T/ierr")"
done

echo "== one spelling of the norms for both forms"
mkdir -p "$T/mnt2"
for c in tp2_pp2 moe_ep2 qwen_tie_bf16; do
	for n in megatron-local megatron-te; do
		gfs_mount "$DATA/$c/legacy_torch" "$T/mnt" -o naming=$n 2>"$T/err" || fail "mount $c legacy $n: $(cat "$T/err")"
		gfs_mount "$DATA/$c/training_torch_dist" "$T/mnt2" -o naming=$n 2>"$T/err" ||
			fail "mount $c torch_dist $n: $(cat "$T/err")"
		(cd "$T/mnt/tensors" && ls | grep -v '^INDEX$') >"$T/names1"
		(cd "$T/mnt2/tensors" && ls | grep -v '^INDEX$') >"$T/names2"
		cmp -s "$T/names1" "$T/names2" || fail "$c $n: the two forms' names differ: $(diff "$T/names1" "$T/names2" | head -4)"
		case $n in
		megatron-local) grep -q "^decoder.layers.3.pre_mlp_layernorm.weight$" "$T/names1" &&
			! grep -q "layer_norm_weight" "$T/names1" || fail "$c $n: not the local spelling" ;;
		megatron-te) grep -q "^decoder.layers.3.mlp.linear_fc1.layer_norm_weight$" "$T/names1" &&
			! grep -q "input_layernorm\|pre_mlp_layernorm" "$T/names1" || fail "$c $n: not the TE spelling" ;;
		esac
		while read -r name; do
			cmp -s "$T/mnt/tensors/$name" "$T/mnt2/tensors/$name" || fail "$c $n: $name differs"
		done <"$T/names1"
		gfs_umount "$T/mnt" || fail "unmount"
		gfs_umount "$T/mnt2" || fail "unmount"
	done
done
echo "megatron-wrong: OK"
