#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Legacy Megatron-LM checkpoints (iter_NNNNNNN/mp_rank_TT[_PPP][_EEE]/
# model_optim_rng.pt), Megatron view (docs/megatron.md):
#  - tests/data/megatron/<case>/legacy_torch: real Megatron-Core core_v0.17.1
#    runs (tests/data/megatron/README.md) at TP1, TP2, PP2, TP2 x PP2 and
#    MoE EP2; the save dir and its iteration dir mounted without options,
#    pytorch_model.bin compared by torch.load with truth_megatron_modules.pt
#    (keys, order, dtypes, shapes, bytes); gatherfs-inspect ls, cat, verify.
#    mp_rank_00_001 is a pipeline stage of tp1_pp2 and an expert rank of
#    moe_ep2.
#  - refusals: a missing pipeline stage, a missing tensor rank, a truncated
#    and a foreign model_optim_rng.pt, a bad tag: one line naming the file.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
DATA="$top_srcdir/tests/data/megatron"
CHECK="$top_srcdir/tests/tools/check_truth.py"

# check_mount SRC TRUTH [ARG...]: mount SRC, compare pytorch_model.bin with TRUTH
check_mount() {
	src=$1 truth=$2
	shift 2
	gfs_mount "$src" "$T/mnt" "$@" 2>"$T/note" || fail "mount $src: $(cat "$T/note")"
	grep -q "gatherfs: note: Megatron view (Hugging Face naming not built yet)" "$T/note" ||
		fail "mount $src: no note: $(cat "$T/note")"
	timeout 300 "$PYTHON3" "$CHECK" "$T/mnt/pytorch_model.bin" "$truth" ||
		fail "$src: differs from $truth"
	timeout 300 "$PYTHON3" - "$T/mnt/model.safetensors" "$truth" <<'PY' || fail "$src: model.safetensors"
import json, struct, sys, torch
want = torch.load(sys.argv[2])
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
head.pop("__metadata__", None)
assert sorted(head) == sorted(want), "keys"
for k, v in want.items():
    h = head[k]
    b, e = h["data_offsets"]
    assert h["dtype"] == "F32" and h["shape"] == list(v.shape), k
    assert raw[8 + n + b:8 + n + e] == v.contiguous().numpy().tobytes(), k
PY
	gfs_umount "$T/mnt" || fail "unmount"
}

for c in tp1_pp1 tp2_pp1 tp1_pp2 tp2_pp2 moe_ep2; do
	echo "== $c"
	save="$DATA/$c/legacy_torch"
	truth="$DATA/$c/truth_megatron_modules.pt"
	check_mount "$save" "$truth"
	check_mount "$save/iter_0000003" "$truth"
	check_mount "$save" "$truth" -o tag=iter_0000003,format=megatron
	n=$(timeout 60 "$PYTHON3" -c "import sys, torch; print(len(torch.load(sys.argv[1])))" "$truth")
	timeout 60 "$INSPECT" ls "$save" >"$T/ls" 2>"$T/err" || fail "inspect ls $c: $(cat "$T/err")"
	[ "$(grep -c . "$T/ls")" -eq $((n + 1)) ] || fail "inspect ls $c: $(cat "$T/ls")"
	grep -q "legacy Megatron-LM checkpoint" "$T/err" || fail "inspect ls $c: $(cat "$T/err")"
	for name in decoder.layers.3.self_attention.linear_proj.weight output_layer.weight; do
		timeout 60 "$INSPECT" cat --tag iter_0000003 "$save" "$name" >"$T/cat" ||
			fail "inspect cat $c $name"
		timeout 60 "$PYTHON3" -c "
import sys, torch
t = torch.load(sys.argv[2])[sys.argv[3]]
assert open(sys.argv[1], 'rb').read() == t.contiguous().numpy().tobytes(), sys.argv[3]
" "$T/cat" "$truth" "$name" || fail "inspect cat $c $name: wrong bytes"
	done
	timeout 120 "$INSPECT" verify "$save" >"$T/v" 2>&1 || fail "inspect verify $c: $(cat "$T/v")"
done

echo "== mp_rank_00_001: pipeline stage 1 of tp1_pp2, expert rank 1 of moe_ep2"
timeout 60 "$INSPECT" ls "$DATA/tp1_pp2/legacy_torch" 2>"$T/err" | grep -q "^decoder.layers.3.input_layernorm.weight " ||
	fail "tp1_pp2: layer 3 (stage 1's local layer 1) not listed"
grep -q "TP 1 x PP 2 x EP 1" "$T/err" || fail "tp1_pp2: $(cat "$T/err")"
timeout 60 "$INSPECT" ls "$DATA/moe_ep2/legacy_torch" 2>"$T/err" >"$T/ls"
grep -q "^decoder.layers.0.mlp.experts.local_experts.3.linear_fc2.weight " "$T/ls" ||
	fail "moe_ep2: expert 3 (rank 1's local expert 1) not listed"
grep -q "^decoder.layers.4" "$T/ls" && fail "moe_ep2: an expert rank taken for a pipeline stage"
grep -q "TP 1 x PP 1 x EP 2" "$T/err" || fail "moe_ep2: $(cat "$T/err")"

echo "== refusals"
# refuse PATTERN DIR: the mount and gatherfs-inspect both refuse DIR with one line
refuse() {
	expect_mount_fail "$1" "$2" "$T/mnt"
	if timeout 60 "$INSPECT" ls "$2" >/dev/null 2>"$T/ierr"; then
		fail "inspect ls $2 succeeded"
	fi
	[ "$(wc -l <"$T/ierr")" -eq 1 ] && grep -q -- "$1" "$T/ierr" || fail "inspect: $(cat "$T/ierr")"
}
fresh() {
	rm -rf "$T/bad"
	cp -r "$DATA/$1/legacy_torch" "$T/bad"
	chmod -R u+w "$T/bad"
}
I="$T/bad/iter_0000003"

fresh tp2_pp2; rm -r "$I/mp_rank_01_001"
refuse "mp_rank_01_001/model_optim_rng.pt: missing: the file of tensor rank 1, pipeline stage 1" "$T/bad"
fresh tp1_pp2; rm -r "$I/mp_rank_00_001"
refuse "mp_rank_00_001/model_optim_rng.pt: missing: the file of tensor rank 0, pipeline stage 1" "$T/bad"
fresh tp2_pp1; rm -r "$I/mp_rank_01"
refuse "mp_rank_01/model_optim_rng.pt: missing: the file of tensor rank 1" "$T/bad"
fresh moe_ep2; rm -r "$I/mp_rank_00_001"
refuse "mp_rank_00_001/model_optim_rng.pt: missing: the file of tensor rank 0, pipeline stage 0, expert rank 1" "$T/bad"
fresh tp2_pp1; f="$I/mp_rank_01/model_optim_rng.pt"
head -c $(($(wc -c <"$f") / 2)) "$f" >"$T/half" && mv "$T/half" "$f"
refuse "mp_rank_01/model_optim_rng.pt: " "$T/bad"
fresh tp2_pp1; cp "$DATA/tp2_pp1/truth_megatron_modules.pt" "$I/mp_rank_01/model_optim_rng.pt"
refuse "mp_rank_01/model_optim_rng.pt: no args namespace: not a Megatron-LM checkpoint file" "$T/bad"
fresh tp2_pp1; mkdir "$I/mp_rank_02"
refuse "mp_rank_02: not a rank of this TP 2 x PP 1 x EP 1 save" "$T/bad"
fresh tp1_pp1; echo 7 >"$T/bad/latest_checkpointed_iteration.txt"
refuse "no iteration directory iter_0000007" "$T/bad"
expect_mount_fail "tag 'global_step3': not iter_NNNNNNN or release" "$DATA/tp1_pp1/legacy_torch" "$T/mnt" -o tag=global_step3
expect_mount_fail "iter_0000003: a tag picks an iteration of a save directory" \
	"$DATA/tp1_pp1/legacy_torch/iter_0000003" "$T/mnt" -o tag=iter_0000003
fresh tp1_pp1; rm -r "$I"
refuse "bad: no iteration directory iter_0000003 (the one latest_checkpointed_iteration.txt names)" "$T/bad"

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
refuse "mp_rank_01/model_optim_rng.pt: decoder.layers.1.mlp.linear_fc2.weight: its shard's dtype or shape differs from tensor rank 0's" "$T/bad"
fresh tp2_pp1; f="$I/mp_rank_01/model_optim_rng.pt"
rewrite "$f" "$f" 'model["decoder.layers.1.mlp.linear_fc2.weight"] = 3'
refuse "mp_rank_01/model_optim_rng.pt: model entry decoder.layers.1.mlp.linear_fc2.weight is an int, not a tensor" "$T/bad"
fresh tp2_pp1; f="$I/mp_rank_01/model_optim_rng.pt"
rewrite "$f" "$f" 'del model["decoder.layers.2.self_attention.linear_qkv.weight"]'
refuse "decoder.layers.2.self_attention.linear_qkv.weight: not in the file of tensor rank 1" "$T/bad"
# an unchanged re-save mounts: the rewrite itself is sound
fresh tp2_pp1; f="$I/mp_rank_01/model_optim_rng.pt"
rewrite "$f" "$f" 'pass'
check_mount "$T/bad" "$DATA/tp2_pp1/truth_megatron_modules.pt"
echo "megatron: OK"
