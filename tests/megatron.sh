#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Megatron-LM / Megatron-Core checkpoints (docs/megatron.md), both forms, both
# views, on real Megatron-Core core_v0.17.1 runs (tests/data/megatron/README.md):
#  - legacy iter_NNNNNNN/mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt at TP1,
#    TP2, PP2, TP2 x PP2, MoE EP2, MoE PP2 x EP2, MQA (tied), Qwen2 (QKV bias,
#    tied, bf16, vocabulary 1003) at TP2 x PP2; torch_dist saves of
#    Megatron-LM's save_checkpoint (args in common.pt; one with the state of
#    Megatron's distributed optimizer, chained_N.optimizer.* keys) and of a
#    bare dist_checkpointing.save (no args); a torch_dcp save (its args not
#    read: -o hf_config).
#  - Hugging Face view (the default): pytorch_model.bin and model.safetensors
#    equal the truth re-arranged into Llama / Qwen2 / Mixtral names, bit for
#    bit, and config.json says the model (tests/tools/check_megatron_views.py;
#    from_pretrained logits: tests/megatron-compat.sh).
#  - Megatron view (-o naming=megatron): legacy equal to
#    truth_megatron_modules.pt (keys, order, dtypes, bytes); torch_dist: the
#    truth's keys unstacked per layer and expert.
#  - -o hf_config=DIR: its config.json served as is, shapes checked against it.
#  - mp_rank_00_001 is a pipeline stage of tp1_pp2 and an expert rank of
#    moe_ep2; gatherfs-inspect ls, cat, verify.
#  - refusals: missing and foreign rank files, a truncated file, args that
#    stop the naming (notes, and refusals with naming=hf), no vocabulary size,
#    a config.json that disagrees: one line naming the file.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
DATA="$top_srcdir/tests/data/megatron"
CHECK="$top_srcdir/tests/tools/check_truth.py"

VIEWS="$top_srcdir/tests/tools/check_megatron_views.py"

# check_mount SRC TRUTH [ARG...]: mount SRC in the Megatron view, compare
# pytorch_model.bin and model.safetensors with TRUTH
check_mount() {
	src=$1 truth=$2
	shift 2
	gfs_mount "$src" "$T/mnt" -o naming=megatron "$@" 2>"$T/note" || fail "mount $src: $(cat "$T/note")"
	# one python: check_truth.py on pytorch_model.bin (exits 1 on a
	# difference), then model.safetensors against the truth
	timeout 300 "$PYTHON3" - "$CHECK" "$T/mnt" "$truth" <<'PY' ||
import json, runpy, struct, sys, torch
check, mnt, truth = sys.argv[1:4]
sys.argv = [check, mnt + "/pytorch_model.bin", truth]
runpy.run_path(check, run_name="__main__")
want = torch.load(truth)
raw = open(mnt + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
head.pop("__metadata__", None)
assert sorted(head) == sorted(want), "keys"
for k, v in want.items():
    h = head[k]
    b, e = h["data_offsets"]
    assert h["shape"] == list(v.shape), k
    assert raw[8 + n + b:8 + n + e] == v.contiguous().view(torch.uint8).numpy().tobytes(), k
PY
		fail "$src: pytorch_model.bin or model.safetensors differs from $truth"
	gfs_umount "$T/mnt" || fail "unmount"
}

# check_view MODE NOTE SRC CASE [ARG...]: mount SRC (MODE hf or dist), the
# note line matches NOTE, the views equal CASE's truth re-arranged
check_view() {
	mode=$1 note=$2 src=$3 case=$4
	shift 4
	gfs_mount "$src" "$T/mnt" "$@" 2>"$T/note" || fail "mount $src: $(cat "$T/note")"
	if [ -n "$note" ]; then
		grep -q -- "gatherfs: note: $note" "$T/note" || fail "mount $src: note: $(cat "$T/note")"
	else
		grep -q "gatherfs: note:" "$T/note" && fail "mount $src: a note: $(cat "$T/note")"
	fi
	timeout 300 "$PYTHON3" "$VIEWS" "$mode" "$T/mnt" "$case" || fail "$src: $mode view"
	gfs_umount "$T/mnt" || fail "unmount"
}

# check_k_proj_verify SAVE CASE: gatherfs-inspect cat of a Hugging Face
# name (model.layers.1.self_attn.k_proj.weight, split from linear_qkv)
# writes the truth's bytes, and verify checks every entry of the view
# (as many as the truth's Hugging Face tensors) and says so in two lines (three with replicas).
check_k_proj_verify() {
	timeout 60 "$INSPECT" cat "$1" model.layers.1.self_attn.k_proj.weight >"$T/cat" ||
		fail "inspect cat $1 k_proj"
	nhf=$(timeout 120 "$PYTHON3" "$VIEWS" hfcat "$T/cat" "$2" model.layers.1.self_attn.k_proj.weight) ||
		fail "inspect cat $1: model.layers.1.self_attn.k_proj.weight: not the truth's bytes"
	timeout 120 "$INSPECT" verify "$1" >"$T/v" 2>"$T/verr" || fail "inspect verify $1: $(cat "$T/v" "$T/verr")"
	# a third line where the save holds copies (a tied head's at PP > 1 or
	# PP 1 with the copy left out): every one equal to the copy served
	nl=$(wc -l <"$T/v")
	{ [ "$nl" -eq 2 ] || { [ "$nl" -eq 3 ] && grep -q "^OK: [1-9][0-9]* replicas equal the copy served " "$T/v"; }; } &&
		grep -q "^OK: $nhf entries ([0-9]* aliases), " "$T/v" &&
		grep -q "^OK: [1-9][0-9]* zip records match their stored CRC-32 " "$T/v" ||
		fail "inspect verify $1: want $nhf entries: $(cat "$T/v")"
}

for c in tp1_pp1 tp2_pp1 tp1_pp2 tp2_pp2 moe_ep2 moe_pp2_ep2 mqa_tie qwen_tie_bf16; do
	echo "== $c"
	save="$DATA/$c/legacy_torch"
	truth="$DATA/$c/truth_megatron_modules.pt"
	family=llama
	grep -q '"add_qkv_bias": true' "$DATA/$c/model_args.json" && family=qwen2
	grep -q '"num_moe_experts": [1-9]' "$DATA/$c/model_args.json" && family=mixtral
	check_view hf "Hugging Face view ($family naming" "$save" "$DATA/$c"
	check_mount "$save" "$truth"
	case $c in tp1_pp1 | moe_pp2_ep2)
		check_mount "$save/iter_0000003" "$truth"
		check_mount "$save" "$truth" -o tag=iter_0000003,format=megatron
	esac
	timeout 60 "$INSPECT" ls --naming megatron "$save" >"$T/ls" 2>"$T/err" || fail "inspect ls $c: $(cat "$T/err")"
	grep -q "legacy Megatron-LM checkpoint" "$T/err" || fail "inspect ls $c: $(cat "$T/err")"
	for name in decoder.layers.3.self_attention.linear_proj.weight embedding.word_embeddings.weight; do
		timeout 60 "$INSPECT" cat --naming megatron --tag iter_0000003 "$save" "$name" >"$T/cat.$name" ||
			fail "inspect cat $c $name"
	done
	# one python: the truth's tensor count (for the ls check), the cat bytes
	n=$(timeout 60 "$PYTHON3" -c "
import sys, torch
sd = torch.load(sys.argv[1])
for name in sys.argv[3:]:
    got = open(sys.argv[2] + '.' + name, 'rb').read()
    assert got == sd[name].contiguous().view(torch.uint8).numpy().tobytes(), name
print(len(sd))
" "$truth" "$T/cat" decoder.layers.3.self_attention.linear_proj.weight embedding.word_embeddings.weight) ||
		fail "inspect cat $c: wrong bytes"
	[ "$(grep -c . "$T/ls")" -eq $((n + 1)) ] || fail "inspect ls $c: $(cat "$T/ls")"
	check_k_proj_verify "$save" "$DATA/$c"
done

echo "== torch_dist"
for c in tp2_pp2 moe_ep2 qwen_tie_bf16; do
	save="$DATA/$c/training_torch_dist"
	check_view hf "Hugging Face view (" "$save" "$DATA/$c"
	check_view hf "Hugging Face view (" "$save/iter_0000003" "$DATA/$c" -o naming=hf
	check_view dist "" "$save" "$DATA/$c" -o naming=megatron
	check_k_proj_verify "$save" "$DATA/$c"
done
echo "== torch_dcp (--ckpt-format torch_dcp): module names past model., args not read"
dcp="$DATA/dcp_tp1/torch_dcp"
gfs_mount "$dcp" "$T/mnt" 2>"$T/note" || fail "mount $dcp: $(cat "$T/note")"
grep -q "gatherfs: note: Megatron view: the args of a torch_dcp save are not read; -o hf_config=DIR" "$T/note" ||
	fail "mount $dcp: note: $(cat "$T/note")"
gfs_umount "$T/mnt" || fail "unmount"
check_mount "$dcp" "$DATA/dcp_tp1/truth_megatron_modules.pt"
check_view hf "Hugging Face view (llama naming" "$dcp" "$DATA/dcp_tp1" -o hf_config="$DATA/dcp_tp1/hf_config"
expect_mount_fail "the args of a torch_dcp save are not read (a pickled object in its .distcp files): give the model's config with -o hf_config=DIR" \
	"$dcp" "$T/mnt" -o naming=hf
echo "== torch_dist with a ChainedOptimizer's state: chained_N.optimizer.* left out"
save="$DATA/moe_distopt/training_torch_dist"
check_view hf "Hugging Face view (mixtral naming" "$save" "$DATA/moe_distopt"
check_view dist "" "$save" "$DATA/moe_distopt" -o naming=megatron
timeout 60 "$INSPECT" ls --all "$save" >"$T/ls" 2>/dev/null || fail "ls --all moe_distopt"
grep -q "^chained_1.optimizer.distributed.dp_group_idx_1.gbuf_idx_0.dtype_(torch.float32, torch.float32).bucket_idx_0.exp_avg  *omitted .*(left out: optimizer state)" "$T/ls" ||
	fail "moe_distopt: the expert optimizer's state not left out as such"
bare="$DATA/tp1_pp2/torch_dist"
check_view dist "Megatron view: common.pt holds no args; -o hf_config=DIR" "$bare" "$DATA/tp1_pp2"
check_view hf "Hugging Face view (llama naming" "$bare" "$DATA/tp1_pp2" -o hf_config="$DATA/tp1_pp2/hf_config"
gfs_mount "$bare" "$T/mnt" -o hf_config="$DATA/tp1_pp2/hf_config" 2>/dev/null || fail "mount hf_config"
cmp -s "$T/mnt/config.json" "$DATA/tp1_pp2/hf_config/config.json" || fail "hf_config: config.json not served as it is"
cmp -s "$T/mnt/generation_config.json" "$DATA/tp1_pp2/hf_config/generation_config.json" ||
	fail "hf_config: generation_config.json not served as it is"
gfs_umount "$T/mnt" || fail "unmount"
expect_mount_fail "common.pt holds no args (a bare dist_checkpointing.save): give the model's config with -o hf_config=DIR" \
	"$bare" "$T/mnt" -o naming=hf
expect_mount_fail "naming 'gpt': hf, megatron, megatron-local, megatron-te or auto" "$bare" "$T/mnt" -o naming=gpt
expect_mount_fail "a naming applies to a Megatron checkpoint only" "$DATA/../dcp/fsdp2_ws2/checkpoint" "$T/mnt" -o naming=hf

echo "== export: the Hugging Face view as files"
save="$DATA/moe_ep2/training_torch_dist"
timeout 120 "$INSPECT" export "$save" "$T/x.safetensors" 2>"$T/err" || fail "export: $(cat "$T/err")"
gfs_mount "$save" "$T/mnt" 2>/dev/null || fail "mount for export"
cmp -s "$T/x.safetensors" "$T/mnt/model.safetensors" || fail "export differs from the mount's model.safetensors"
gfs_umount "$T/mnt" || fail "unmount"
rm -f "$T/x.safetensors"

echo "== ls --all: what no view shows"
timeout 60 "$INSPECT" ls "$DATA/qwen_tie_bf16/legacy_torch" >/dev/null 2>"$T/err" || fail "ls qwen"
grep -q "checkpoint entries no view shows (ls --all lists them)" "$T/err" || fail "ls: no count: $(cat "$T/err")"
timeout 60 "$INSPECT" ls --all "$DATA/qwen_tie_bf16/legacy_torch" >"$T/ls" 2>/dev/null || fail "ls --all"
for line in "mp_rank_01_001/model_optim_rng.pt:model.output_layer.weight .*the last stage's copy of the tied embedding" \
	"mp_rank_00_000/model_optim_rng.pt:rng_state .*not model state" \
	"mp_rank_00_000/model_optim_rng.pt:model.decoder.layers.0.self_attention.linear_qkv._extra_state .*TransformerEngine extra state"; do
	grep -q "^$line" "$T/ls" || fail "ls --all lacks $line"
done
timeout 60 "$INSPECT" ls --all "$DATA/moe_ep2/training_torch_dist" >"$T/ls" 2>/dev/null || fail "ls --all torch_dist"
grep -q "^decoder.layers.mlp.experts.experts.linear_fc1._extra_state/shard_0.0_4.4 *object" "$T/ls" ||
	fail "ls --all torch_dist: no _extra_state object"

echo "== mp_rank_00_001: pipeline stage 1 of tp1_pp2, expert rank 1 of moe_ep2"
timeout 60 "$INSPECT" ls --naming megatron "$DATA/tp1_pp2/legacy_torch" 2>"$T/err" | grep -q "^decoder.layers.3.input_layernorm.weight " ||
	fail "tp1_pp2: layer 3 (stage 1's local layer 1) not listed"
grep -q "TP 1 x PP 2 x EP 1" "$T/err" || fail "tp1_pp2: $(cat "$T/err")"
timeout 60 "$INSPECT" ls --naming megatron "$DATA/moe_ep2/legacy_torch" 2>"$T/err" >"$T/ls"
grep -q "^decoder.layers.0.mlp.experts.local_experts.3.linear_fc2.weight " "$T/ls" ||
	fail "moe_ep2: expert 3 (rank 1's local expert 1) not listed"
grep -q "^decoder.layers.4" "$T/ls" && fail "moe_ep2: an expert rank taken for a pipeline stage"
grep -q "TP 1 x PP 1 x EP 2" "$T/err" || fail "moe_ep2: $(cat "$T/err")"
timeout 60 "$INSPECT" ls "$DATA/moe_pp2_ep2/legacy_torch" 2>"$T/err" >"$T/ls"
grep -q "TP 1 x PP 2 x EP 2" "$T/err" || fail "moe_pp2_ep2: $(cat "$T/err")"
grep -q "^model.layers.3.block_sparse_moe.experts.3.w2.weight " "$T/ls" ||
	fail "moe_pp2_ep2: layer 3's expert 3 (stage 1, expert rank 1) not listed"

echo "== refusals"
fresh() {
	rm -rf "$T/bad"
	cp -r "$DATA/$1/legacy_torch" "$T/bad"
	chmod -R u+w "$T/bad"
}
I="$T/bad/iter_0000003"

fresh tp2_pp2; rm -r "$I/mp_rank_01_001"
expect_refused "mp_rank_01_001/model_optim_rng.pt: missing: the file of tensor rank 1, pipeline stage 1" "$T/bad"
fresh tp1_pp2; rm -r "$I/mp_rank_00_001"
expect_refused "mp_rank_00_001/model_optim_rng.pt: missing: the file of tensor rank 0, pipeline stage 1" "$T/bad"
fresh tp2_pp1; rm -r "$I/mp_rank_01"
expect_refused "mp_rank_01/model_optim_rng.pt: missing: the file of tensor rank 1" "$T/bad"
fresh moe_ep2; rm -r "$I/mp_rank_00_001"
expect_refused "mp_rank_00_001/model_optim_rng.pt: missing: the file of tensor rank 0, pipeline stage 0, expert rank 1" "$T/bad"
fresh tp2_pp1; f="$I/mp_rank_01/model_optim_rng.pt"
head -c $(($(wc -c <"$f") / 2)) "$f" >"$T/half" && mv "$T/half" "$f"
expect_refused "mp_rank_01/model_optim_rng.pt: not a zip archive (no end of central directory record)$" "$T/bad"
fresh tp2_pp1; cp "$DATA/tp2_pp1/truth_megatron_modules.pt" "$I/mp_rank_01/model_optim_rng.pt"
expect_refused "mp_rank_01/model_optim_rng.pt: no args namespace: not a Megatron-LM checkpoint file" "$T/bad"
fresh tp2_pp1; mkdir "$I/mp_rank_02"
expect_refused "mp_rank_02: not a rank of this TP 2 x PP 1 x EP 1 save" "$T/bad"
fresh tp1_pp1; echo 7 >"$T/bad/latest_checkpointed_iteration.txt"
expect_refused "no iteration directory iter_0000007" "$T/bad"
expect_mount_fail "tag 'global_step3': not iter_NNNNNNN or release" "$DATA/tp1_pp1/legacy_torch" "$T/mnt" -o tag=global_step3
expect_mount_fail "iter_0000003: a tag picks an iteration of a save directory" \
	"$DATA/tp1_pp1/legacy_torch/iter_0000003" "$T/mnt" -o tag=iter_0000003
fresh tp1_pp1; rm -r "$I"
expect_refused "bad: no iteration directory iter_0000003 (the one latest_checkpointed_iteration.txt names)" "$T/bad"

# rewrite SRC DST EDIT: re-save SRC's model dict and parallel args with real
# torch.save after EDIT (python on `model`); Megatron's own classes and numpy
# in the rest of the file are loaded as empty stand-ins and not written.
rewrite() {
	timeout 120 "$PYTHON3" - "$@" <<'PY' || fail "rewrite $1"
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
old = vars(ck["args"])
keep = ("tensor_model_parallel_size", "pipeline_model_parallel_size",
        "expert_model_parallel_size", "num_layers", "swiglu", "num_experts")
model = ck["model"]
exec(sys.argv[3])
torch.save({"args": argparse.Namespace(**{k: old[k] for k in keep}), "model": model}, sys.argv[2])
PY
}
fresh tp2_pp1; f="$I/mp_rank_01/model_optim_rng.pt"
rewrite "$f" "$f" 'model["decoder.layers.1.mlp.linear_fc2.weight"] = model["decoder.layers.1.mlp.linear_fc2.weight"][:, :80].clone()'
expect_refused "mp_rank_01/model_optim_rng.pt: decoder.layers.1.mlp.linear_fc2.weight: its shard's dtype or shape differs from tensor rank 0's" "$T/bad"
fresh tp2_pp1; f="$I/mp_rank_01/model_optim_rng.pt"
rewrite "$f" "$f" 'model["decoder.layers.1.mlp.linear_fc2.weight"] = 3'
expect_refused "mp_rank_01/model_optim_rng.pt: model entry decoder.layers.1.mlp.linear_fc2.weight is an int, not a tensor" "$T/bad"
fresh tp2_pp1; f="$I/mp_rank_01/model_optim_rng.pt"
rewrite "$f" "$f" 'del model["decoder.layers.2.self_attention.linear_qkv.weight"]'
expect_refused "decoder.layers.2.self_attention.linear_qkv.weight: not in the file of tensor rank 1" "$T/bad"
# an unchanged re-save mounts: the rewrite itself is sound
fresh tp2_pp1; f="$I/mp_rank_01/model_optim_rng.pt"
rewrite "$f" "$f" 'pass'
check_mount "$T/bad" "$DATA/tp2_pp1/truth_megatron_modules.pt"
echo "== the naming: notes and refusals"
EDIT="$top_srcdir/tests/tools/megatron_edit_args.py"
refuse_hf() {
	expect_mount_fail "$1" "$2" "$T/mnt" -o naming=hf
}
# edit_args CASE NAME=VALUE...: a copy of CASE's legacy save whose rank 0 args say so
edit_args() {
	fresh "$1"
	shift
	f=$(ls "$I"/mp_rank_00*/model_optim_rng.pt | head -1)
	timeout 60 "$PYTHON3" "$EDIT" "$f" "$T/edited" "$@" && mv "$T/edited" "$f" || fail "edit args $*"
}
for e in "rotary_interleaved=True:interleaved rotary embeddings" \
	"add_bias_linear=True:biases other than QKV" "multi_latent_attention=True:MLA" \
	"window_size=4:sliding-window attention" "swiglu=False:an activation other than SiLU with GLU" \
	"rotary_percent=0:partial rotary" "no_rope_freq=4:layers without RoPE" \
	"apply_residual_connection_post_layernorm=True:residual connections taken after the layernorm" \
	"softmax_type='off-by-one':an attention softmax other than the vanilla one" \
	"glu_linear_offset=1.0:an offset on the GLU's linear half" "use_mup=True:muP multipliers" \
	"qk_l2_norm=True:QK L2 normalization" "hidden_size=None:a model whose args lack a size (no args.hidden_size)"; do
	edit_args tp1_pp1 "${e%%:*}"
	timeout 60 "$INSPECT" ls "$T/bad" >"$T/ls" 2>"$T/err" || fail "${e%%:*}: $(cat "$T/err")"
	grep -q "note: Megatron view: the Hugging Face naming cannot express ${e#*:}" "$T/err" ||
		fail "${e%%:*}: no note: $(cat "$T/err")"
	grep -q "^decoder.layers.0.self_attention.linear_qkv.weight " "$T/ls" || fail "${e%%:*}: not the Megatron view"
	expect_mount_fail "the Hugging Face naming cannot express ${e#*:}" "$T/bad" "$T/mnt" -o naming=hf
done
# the last edit left args without hidden_size: the hf_config gives it
check_view hf "Hugging Face view (llama naming" "$T/bad" "$DATA/tp1_pp1" -o hf_config="$DATA/tp1_pp2/hf_config"
edit_args tp1_pp1 hidden_size=None rotary_interleaved=True
refuse_hf "cannot express interleaved rotary embeddings" "$T/bad"
expect_mount_fail "cannot express interleaved rotary embeddings" "$T/bad" "$T/mnt" -o hf_config="$DATA/tp1_pp2/hf_config"
# qk_layernorm makes it a Qwen3 (tests/megatron-families.sh), whose q/k norms this save lacks
edit_args tp1_pp1 qk_layernorm=True
expect_refused "no tensor decoder.layers.0.self_attention.q_layernorm.weight (for the qwen3 tensor model.layers.0.self_attn.q_norm.weight)" "$T/bad"
edit_args moe_ep2 moe_router_pre_softmax=True
refuse_hf "cannot express a router softmax before top-k" "$T/bad"
edit_args moe_ep2 moe_router_num_groups=2
refuse_hf "cannot express group-limited routing" "$T/bad"
edit_args moe_ep2 moe_apply_probs_on_input=True
refuse_hf "cannot express router probabilities applied to the expert input" "$T/bad"
edit_args tp1_pp1 vocab_size=None
expect_refused "the true vocabulary size is unknown (args.vocab_size is None, as with a Hugging Face tokenizer): give the model's config with -o hf_config=DIR" "$T/bad"
check_mount "$T/bad" "$DATA/tp1_pp1/truth_megatron_modules.pt"
check_view hf "Hugging Face view (llama naming" "$T/bad" "$DATA/tp1_pp1" -o hf_config="$DATA/tp1_pp2/hf_config"
edit_args tp1_pp1 num_query_groups=3
expect_refused "4 attention heads are not a multiple of 3 query groups" "$T/bad"
# hf_config must agree with the tensors
cfg() {
	rm -rf "$T/cfg" && mkdir "$T/cfg"
	timeout 60 "$PYTHON3" -c "
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(c, open(sys.argv[2], 'w'))" "$DATA/tp1_pp2/hf_config/config.json" "$T/cfg/config.json" "$1" || fail "cfg $1"
}
cfg 'c["intermediate_size"] = 170'
expect_mount_fail "decoder.layers.0.mlp.linear_fc1.weight: shape \[352, 64\], but the hf_config config.json gives \[340, 64\]" \
	"$bare" "$T/mnt" -o hf_config="$T/cfg"
cfg 'c["num_hidden_layers"] = 3'
expect_mount_fail "decoder.layers.3.self_attention.linear_qkv.layer_norm_weight maps to nothing in the llama naming" \
	"$bare" "$T/mnt" -o hf_config="$T/cfg"
cfg 'c["num_hidden_layers"] = 5'
expect_mount_fail "no tensor decoder.layers.4.input_layernorm.weight (for the llama tensor model.layers.4.input_layernorm.weight)" \
	"$bare" "$T/mnt" -o hf_config="$T/cfg"
cfg 'c["model_type"] = "gpt2"'
expect_mount_fail "model_type 'gpt2' is not in the naming table" "$bare" "$T/mnt" -o hf_config="$T/cfg"
cfg 'c["vocab_size"] = 1100'
expect_mount_fail "embedding.word_embeddings.weight: shape \[1024, 64\], but the hf_config config.json gives \[1100, 64\]" \
	"$bare" "$T/mnt" -o hf_config="$T/cfg"
echo "megatron: OK"
