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
#  - args that say "tied": an output_layer.weight at PP 1 is refused; at
#    PP > 1 the last stage's copy is a replica that verify compares, and the
#    mount under -o verify=read before it serves the embedding.
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

echo "== tied embeddings: the output layer's weight"
# resave SRC EDIT: re-save SRC's args (plain members) and model after EDIT
# (python on `model`) with real torch.save; Megatron's classes and numpy in
# the rest of the file are loaded as empty stand-ins and not written.
resave() {
	timeout 120 "$PYTHON3" - "$@" <<'PY' || fail "resave $1"
import argparse, importlib.abc, importlib.machinery, sys, types, torch
class Stub:
    def __init__(self, *a, **k): pass
    def __setstate__(self, st): pass
    def __call__(self, *a, **k): return self
class Mod(types.ModuleType):
    def __getattr__(self, n):
        if n.startswith("__"): raise AttributeError(n)
        return type(n, (Stub,), {})
class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("megatron", "transformer_engine") or name.startswith("numpy._core"):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec): return Mod(spec.name)
    def exec_module(self, m): m.__path__ = []
sys.meta_path.insert(0, Finder())
ck = torch.load(sys.argv[1], weights_only=False)
args = {k: v for k, v in vars(ck["args"]).items() if v is None or type(v) in (bool, int, float, str)}
model = ck["model"]
exec(sys.argv[2])
torch.save({"args": argparse.Namespace(**args), "model": model}, sys.argv[1])
PY
}
fresh mqa_tie; f="$I/mp_rank_00/model_optim_rng.pt"
resave "$f" 'pass'
timeout 120 "$INSPECT" verify "$T/bad" >"$T/v" 2>&1 || fail "an unchanged re-save: $(cat "$T/v")"
resave "$f" 'model["output_layer.weight"] = model["embedding.word_embeddings.weight"].clone()'
refused "mp_rank_00/model_optim_rng.pt: output_layer.weight: the args say the output layer is tied to the embedding (untie_embeddings_and_output_weights False), but the file holds one" "$T/bad"
fresh qwen_tie_bf16
timeout 120 "$INSPECT" verify "$T/bad" >"$T/v" 2>&1 || fail "verify qwen_tie_bf16: $(cat "$T/v")"
grep -q "^OK: 2 replicas equal the copy served" "$T/v" || fail "the tied copies not compared: $(cat "$T/v")"
f="$I/mp_rank_01_001/model_optim_rng.pt"
resave "$f" 'w = model["output_layer.weight"]; w[3, 5] = w[3, 5] + 1'
for naming in hf megatron; do
	if timeout 120 "$INSPECT" verify --naming $naming "$T/bad" >"$T/v" 2>&1; then
		fail "verify --naming $naming: a tied copy that differs accepted: $(cat "$T/v")"
	fi
	grep -q "^REPLICA DIFFERS: .*embed.*mp_rank_01_001/model_optim_rng.pt at offset" "$T/v" ||
		fail "verify --naming $naming: $(cat "$T/v")"
	grep -q "1 of 2 replicas differ from the copy served" "$T/v" || fail "verify --naming $naming: $(cat "$T/v")"
done
# the mount (-o verify=read, the default): the first read serving the
# embedding compares its copies, and fails; other tensors are served
for naming in hf megatron; do
	gfs_mount "$T/bad" "$T/mnt" -o naming=$naming 2>/dev/null || fail "mount the differing copy ($naming)"
	case $naming in
	hf) emb=model.embed_tokens.weight other=model.layers.3.mlp.down_proj.weight ;;
	megatron) emb=embedding.word_embeddings.weight other=decoder.layers.3.mlp.linear_fc2.weight ;;
	esac
	timeout 60 cat "$T/mnt/tensors/$other" >/dev/null || fail "$naming: $other not served"
	timeout 60 cat "$T/mnt/tensors/$emb" >/dev/null 2>&1 && fail "$naming: $emb served though its copy differs"
	timeout 60 cat "$T/mnt/model.safetensors" >/dev/null 2>&1 && fail "$naming: model.safetensors served whole"
	gfs_umount "$T/mnt" || fail "unmount"
done
gfs_mount "$T/bad" "$T/mnt" -o verify=off 2>/dev/null || fail "mount verify=off"
timeout 60 cat "$T/mnt/tensors/model.embed_tokens.weight" >/dev/null || fail "verify=off: the embedding not served"
gfs_umount "$T/mnt" || fail "unmount"
echo "megatron-wrong: OK"
