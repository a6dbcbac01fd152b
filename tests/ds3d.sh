#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# DeepSpeed checkpoints of models split across ranks (issue 30,
# docs/deepspeed-3d.md), on real DeepSpeed 0.14.5 runs (tests/data/ds3d,
# README.md there):
#  - pipelines (PipelineModule layer files, mp_rank_YY per stage): ZeRO-1
#    fp32 with a tied embedding and BF16_Optimizer; pytorch_model.bin (real
#    torch.load) and model.safetensors equal to truth.pt bit for bit (keys,
#    order, dtypes, shapes; the tied weight once, as
#    tied_modules.embed.weight); -o dtype=bf16 equal to the module's own
#    values (truth_module.pt); optim/ holds every param's states once,
#    equal to what the ranks' partitions hold at the places
#    param_slice_mappings records (check_ds3d_optim.py, the way
#    ds_to_universal.py reads them), and its exp_avg and exp_avg_sq equal
#    to the run's optimizer truth bit for bit (truth_optim.pt: DeepSpeed's
#    safe_get_full_optimizer_state on the live ranks);
#    gatherfs-inspect ls, cat and verify; PipeDataParallelTopology's file
#    names (layer_XX-model_states.pt); the universal view (what DeepSpeed's
#    universal loader reads: every stage's mp_rank_YY file, zero/NAME/ for
#    every param name of param_shapes, fp32 equal to truth.pt, moments and
#    step as optim/ holds them: check_ds3d_universal.py), also from the
#    layout JSON (which round-trips);
#  - mixture of experts (expert files, expert parallel 2, ZeRO-2): the same,
#    keys compared as a set (truth.pt's order is the harness's), each MoE
#    layer's experts right after its gate in global id order; with a head
#    tied to the embedding and a buffer (the optimizer's
#    param_slice_mappings say which `module` entries are params): the head
#    an alias of the embedding, the buffer the module's tensor, no states;
#    without ZeRO (expp_rank_* files hold the torch optimizer's state):
#    the module's and the expert files' tensors, no optim/ view; in 16
#    bits refused (the fp32 masters are in that optimizer state);
#  - tensor parallelism (TP 2, ZeRO-1) with universal_checkpoint_info
#    patterns: the same, each param's slices put together as the patterns
#    say (replicated: rank 0's; row parallel: on dim 1; else dim 0), the
#    moments equal to truth_optim.pt (the harness's TP concatenation);
#  - -o tp_split=FILE (gatherfs-inspect --tp-split): the same case without
#    universal_checkpoint_info, its patterns given in a JSON file, equal to
#    the truth; given, it overrides universal_checkpoint_info; a bad file
#    (not JSON, a bad value, an unevaluated pattern, a param matching no
#    pattern, missing) or a checkpoint not tensor-parallel refused, one line;
#  - refusals, one line naming the file: a missing stage, a missing layer
#    file, a missing rank's optimizer states file, a pipeline without ZeRO
#    whose tied weight's name is not recorded, a missing or extra expert
#    file, tensor parallelism without universal_checkpoint_info patterns, a
#    pattern gatherfs does not evaluate, a param made by averaging, a
#    missing tensor rank, a buffer no universal_checkpoint_info pattern
#    matches (served as a pattern or -o tp_split says).
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
DATA="$top_srcdir/tests/data/ds3d"
CHECK="$top_srcdir/tests/tools/check_truth.py"
MOE="$top_srcdir/tests/tools/check_ds3d_moe.py"
OPTIM="$top_srcdir/tests/tools/check_ds3d_optim.py"
UNI="$top_srcdir/tests/tools/check_ds3d_universal.py"

# check_st FILE TRUTH: model.safetensors FILE holds TRUTH's tensors, bit for bit
check_st() {
	timeout 300 "$PYTHON3" - "$1" "$2" <<'PY' || fail "$1: differs from $2"
import json, struct, sys, torch
DT = {torch.float32: "F32", torch.bfloat16: "BF16"}
want = torch.load(sys.argv[2])
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
head.pop("__metadata__", None)
assert sorted(head) == sorted(want), "keys"
for k, v in want.items():
    h = head[k]
    b, e = h["data_offsets"]
    assert h["dtype"] == DT[v.dtype] and h["shape"] == list(v.shape), k
    assert raw[8 + n + b:8 + n + e] == v.contiguous().view(torch.uint8).numpy().tobytes(), k
PY
}

for c in pp2_dp2_z1_fp32_tied pp2_dp2_bf16; do
	echo "== $c"
	ck="$DATA/$c/checkpoint"
	truth="$DATA/$c/truth.pt"
	gfs_mount "$ck" "$T/mnt" 2>"$T/log" || fail "mount $c: $(cat "$T/log")"
	grep -q "universal" "$T/log" && fail "$c: $(cat "$T/log")"
	timeout 300 "$PYTHON3" "$UNI" "$T/mnt" "$ck/global_step3" "$truth" "$DATA/$c/truth_optim.pt" || fail "$c: universal view"
	timeout 300 "$PYTHON3" "$CHECK" "$T/mnt/pytorch_model.bin" "$truth" || fail "$c: pytorch_model.bin"
	check_st "$T/mnt/model.safetensors" "$truth"
	for s in exp_avg exp_avg_sq step; do
		[ "$(ls "$T/mnt/optim/$s" | wc -l)" -eq 52 ] || fail "$c: optim/$s: $(ls "$T/mnt/optim/$s")"
	done
	[ -f "$T/mnt/optim/exp_avg/tied_modules.embed.weight" ] || fail "$c: no state of the tied weight"
	timeout 300 "$PYTHON3" "$OPTIM" "$T/mnt" "$ck/global_step3" pipe "$DATA/$c/truth_optim.pt" || fail "$c: optim/"
	gfs_umount "$T/mnt" || fail "unmount"
	timeout 60 "$INSPECT" ls "$ck" >"$T/ls" 2>"$T/err" || fail "inspect ls $c: $(cat "$T/err")"
	[ "$(grep -c . "$T/ls")" -eq 53 ] || fail "inspect ls $c: $(cat "$T/ls")"
	grep -q "DeepSpeed pipeline, 2 stages, ZeRO-1.*2 data-parallel ranks, tag global_step3" "$T/err" ||
		fail "inspect ls $c: $(cat "$T/err")"
	for name in tied_modules.embed.weight 5.fc2.weight 6.bias; do
		timeout 60 "$INSPECT" cat "$ck" "$name" >"$T/cat" || fail "inspect cat $c $name"
		timeout 60 "$PYTHON3" -c "
import sys, torch
t = torch.load(sys.argv[2])[sys.argv[3]]
assert open(sys.argv[1], 'rb').read() == t.contiguous().numpy().tobytes(), sys.argv[3]
" "$T/cat" "$truth" "$name" || fail "inspect cat $c $name: wrong bytes"
	done
	timeout 120 "$INSPECT" verify "$ck" >"$T/v" 2>&1 || fail "inspect verify $c: $(cat "$T/v")"
done

echo "== pp2_dp1_z0_bf16_pdtopo: PipeDataParallelTopology (layer_XX-model_states.pt), bf16, no ZeRO: BF16_Optimizer"
c=pp2_dp1_z0_bf16_pdtopo
ck="$DATA/$c/checkpoint"
truth="$DATA/$c/truth.pt"
[ -f "$ck/global_step3/layer_03-model_states.pt" ] || fail "$c: not the PipeDataParallelTopology names"
gfs_mount "$ck" "$T/mnt" 2>"$T/log" || fail "mount $c: $(cat "$T/log")"
timeout 300 "$PYTHON3" "$CHECK" "$T/mnt/pytorch_model.bin" "$truth" || fail "$c: pytorch_model.bin"
check_st "$T/mnt/model.safetensors" "$truth"
# no truth_optim.pt for this fixture: the moments equal optim/'s, which
# check_ds3d_optim.py holds to the ranks' partitions
timeout 300 "$PYTHON3" "$UNI" "$T/mnt" "$ck/global_step3" "$truth" || fail "$c: universal view"
timeout 300 "$PYTHON3" "$OPTIM" "$T/mnt" "$ck/global_step3" pipe || fail "$c: optim/"
gfs_umount "$T/mnt" || fail "unmount"
gfs_mount "$ck" "$T/mnt" -o dtype=bf16 2>/dev/null || fail "mount $c -o dtype=bf16"
timeout 300 "$PYTHON3" "$CHECK" "$T/mnt/pytorch_model.bin" "$DATA/$c/truth_module.pt" ||
	fail "$c: -o dtype=bf16 is not the module's own values"
gfs_umount "$T/mnt" || fail "unmount"
timeout 60 "$INSPECT" ls "$ck" >/dev/null 2>"$T/err" || fail "inspect ls $c: $(cat "$T/err")"
grep -q "DeepSpeed pipeline, 2 stages, ZeRO-1 (BF16_Optimizer), 1 data-parallel ranks" "$T/err" ||
	fail "inspect ls $c: $(cat "$T/err")"
timeout 120 "$INSPECT" verify "$ck" >"$T/v" 2>&1 || fail "inspect verify $c: $(cat "$T/v")"

echo "== pp2_dp2_bf16 -o dtype=bf16: the module's own values"
gfs_mount "$DATA/pp2_dp2_bf16/checkpoint" "$T/mnt" -o dtype=bf16 2>/dev/null || fail "mount bf16"
timeout 300 "$PYTHON3" "$CHECK" "$T/mnt/pytorch_model.bin" "$DATA/pp2_dp2_bf16/truth_module.pt" ||
	fail "dtype=bf16: pytorch_model.bin"
check_st "$T/mnt/model.safetensors" "$DATA/pp2_dp2_bf16/truth_module.pt"
gfs_umount "$T/mnt" || fail "unmount"

echo "== moe_ep2_dp2_z2_fp32: MoE, expert parallel 2, ZeRO-2"
ck="$DATA/moe_ep2_dp2_z2_fp32/checkpoint"
truth="$DATA/moe_ep2_dp2_z2_fp32/truth.pt"
gfs_mount "$ck" "$T/mnt" 2>"$T/log" || fail "mount moe: $(cat "$T/log")"
grep -q "no DeepSpeed universal checkpoint view: a mixture-of-experts checkpoint: no DeepSpeed release loads universal checkpoints of MoE models" "$T/log" ||
	fail "moe: no line on the universal view: $(cat "$T/log")"
# truth.pt's order is not the model's (the harness's): check_ds3d_moe.py
timeout 300 "$PYTHON3" "$MOE" "$T/mnt/pytorch_model.bin" "$truth" || fail "moe: pytorch_model.bin"
check_st "$T/mnt/model.safetensors" "$truth"
for s in exp_avg exp_avg_sq step; do
	[ "$(ls "$T/mnt/optim/$s" | wc -l)" -eq 66 ] || fail "moe: optim/$s: $(ls "$T/mnt/optim/$s")"
done
timeout 300 "$PYTHON3" "$OPTIM" "$T/mnt" "$ck/global_step3" moe "$ck/../truth_optim.pt" || fail "moe: optim/"
gfs_umount "$T/mnt" || fail "unmount"
timeout 60 "$INSPECT" ls "$ck" >/dev/null 2>"$T/err" || fail "inspect ls moe: $(cat "$T/err")"
grep -q "DeepSpeed mixture of experts (8 experts in 2 MoE layers, expert-parallel size 2), ZeRO-2, 2 ranks" "$T/err" ||
	fail "inspect ls moe: $(cat "$T/err")"
timeout 120 "$INSPECT" verify "$ck" >"$T/v" 2>&1 || fail "inspect verify moe: $(cat "$T/v")"

echo "== moe_tied_buf_ep2_dp2_z2_fp32: MoE with a tied head and a buffer (param_slice_mappings: which entries are params)"
c=moe_tied_buf_ep2_dp2_z2_fp32
ck="$DATA/$c/checkpoint"
gfs_mount "$ck" "$T/mnt" 2>"$T/log" || fail "mount $c: $(cat "$T/log")"
# keys as a set (truth.pt's order is the harness's); head.weight an alias
# of embed.weight, the buffer `scale` the module's tensor
timeout 300 "$PYTHON3" - "$T/mnt/pytorch_model.bin" "$DATA/$c/truth.pt" <<'PY' || fail "$c: pytorch_model.bin"
import sys, torch
got, want = torch.load(sys.argv[1]), torch.load(sys.argv[2])
assert set(got) == set(want), set(got) ^ set(want)
for k, v in want.items():
    assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
    assert torch.equal(got[k].view(torch.int32), v.view(torch.int32)), k
assert got["head.weight"].data_ptr() == got["embed.weight"].data_ptr(), "head.weight is not embed.weight"
assert list(got)[0] == "scale" and torch.equal(got["scale"], torch.full((32,), 0.5)), "scale"
print("ok:", sys.argv[1], len(want), "keys")
PY
for s in exp_avg exp_avg_sq step; do
	[ "$(ls "$T/mnt/optim/$s" | wc -l)" -eq 65 ] || fail "$c: optim/$s: $(ls "$T/mnt/optim/$s")"
done
[ -e "$T/mnt/optim/exp_avg/scale" ] && fail "$c: optimizer states for the buffer"
timeout 300 "$PYTHON3" "$OPTIM" "$T/mnt" "$ck/global_step3" moe || fail "$c: optim/"
gfs_umount "$T/mnt" || fail "unmount"
timeout 120 "$INSPECT" verify "$ck" >"$T/v" 2>&1 || fail "inspect verify $c: $(cat "$T/v")"
grep -q "^OK: 67 entries (1 aliases)" "$T/v" || fail "inspect verify $c: $(cat "$T/v")"

echo "== moe_ep2_dp2_z0_fp32: MoE without ZeRO (no *_optim_states.pt but expp_rank_*): the module's tensors"
c=moe_ep2_dp2_z0_fp32
ck="$DATA/$c/checkpoint"
gfs_mount "$ck" "$T/mnt" 2>"$T/log" || fail "mount $c: $(cat "$T/log")"
timeout 300 "$PYTHON3" "$MOE" "$T/mnt/pytorch_model.bin" "$DATA/$c/truth.pt" || fail "$c: pytorch_model.bin"
check_st "$T/mnt/model.safetensors" "$DATA/$c/truth.pt"
[ -e "$T/mnt/optim" ] && fail "$c: an optim/ view without the optimizer's states"
gfs_umount "$T/mnt" || fail "unmount"
timeout 60 "$INSPECT" ls "$ck" >/dev/null 2>"$T/err" || fail "inspect ls $c: $(cat "$T/err")"
grep -q "DeepSpeed mixture of experts (8 experts in 2 MoE layers), no ZeRO, tag global_step3" "$T/err" ||
	fail "inspect ls $c: $(cat "$T/err")"
timeout 120 "$INSPECT" verify "$ck" >"$T/v" 2>&1 || fail "inspect verify $c: $(cat "$T/v")"

echo "== tp2_dp2_z1_fp32_uci: tensor parallel 2, ZeRO-1, universal_checkpoint_info patterns"
ck="$DATA/tp2_dp2_z1_fp32_uci/checkpoint"
truth="$DATA/tp2_dp2_z1_fp32_uci/truth.pt"
gfs_mount "$ck" "$T/mnt" 2>"$T/log" || fail "mount tp: $(cat "$T/log")"
grep -q "no DeepSpeed universal checkpoint view: a tensor-parallel checkpoint (2 tensor ranks)" "$T/log" ||
	fail "tp: no line on the universal view: $(cat "$T/log")"
timeout 300 "$PYTHON3" "$CHECK" "$T/mnt/pytorch_model.bin" "$truth" || fail "tp: pytorch_model.bin"
check_st "$T/mnt/model.safetensors" "$truth"
for s in exp_avg exp_avg_sq step; do
	[ "$(ls "$T/mnt/optim/$s" | wc -l)" -eq 28 ] || fail "tp: optim/$s: $(ls "$T/mnt/optim/$s")"
done
timeout 300 "$PYTHON3" "$OPTIM" "$T/mnt" "$ck/global_step3" tp "$ck/../truth_optim.pt" || fail "tp: optim/"
# a row-parallel weight's moments are put together like its master
[ "$(wc -c <"$T/mnt/optim/exp_avg/blocks.1.fc2.weight")" -eq $((32 * 64 * 4)) ] ||
	fail "tp: optim/exp_avg/blocks.1.fc2.weight: $(wc -c <"$T/mnt/optim/exp_avg/blocks.1.fc2.weight") bytes"
gfs_umount "$T/mnt" || fail "unmount"
timeout 60 "$INSPECT" ls "$ck" >"$T/ls" 2>"$T/err" || fail "inspect ls tp: $(cat "$T/err")"
grep -q "^blocks.1.fc2.weight  *float32  *\[32, 64\]" "$T/ls" || fail "inspect ls tp: $(cat "$T/ls")"
grep -q "DeepSpeed tensor parallel, 2 tensor ranks, ZeRO-1, 2 data-parallel ranks" "$T/err" ||
	fail "inspect ls tp: $(cat "$T/err")"
timeout 120 "$INSPECT" verify "$ck" >"$T/v" 2>&1 || fail "inspect verify tp: $(cat "$T/v")"
# replicated params (and their moments) are served from tensor rank 0; verify compares rank 1's copies
grep -q "^OK: 48 replicas equal the copy served" "$T/v" || fail "inspect verify tp: replicas: $(cat "$T/v")"

echo "== PipeDataParallelTopology names: layer_XX-model_states.pt"
rm -rf "$T/pd"
cp -r "$DATA/pp2_dp2_bf16/checkpoint" "$T/pd"
chmod -R u+w "$T/pd"
# each layer file renamed, its zip folder too (as torch.save names it)
timeout 120 "$PYTHON3" - "$T/pd/global_step3" <<'PY' || fail "rename layer files"
import glob, os, sys, zipfile
for f in glob.glob(os.path.join(sys.argv[1], "layer_*-model_00-model_states.pt")):
    new = f.replace("-model_00-model_states.pt", "-model_states.pt")
    old_pre = os.path.basename(f)[:-3] + "/"
    new_pre = os.path.basename(new)[:-3] + "/"
    with zipfile.ZipFile(f) as zin, zipfile.ZipFile(new, "w") as zout:
        for zi in zin.infolist():
            data = zin.read(zi.filename)
            zi.filename = new_pre + zi.filename[len(old_pre):]
            zout.writestr(zi, data)
    os.remove(f)
PY
gfs_mount "$T/pd" "$T/mnt" 2>/dev/null || fail "mount pd"
timeout 300 "$PYTHON3" "$CHECK" "$T/mnt/pytorch_model.bin" "$DATA/pp2_dp2_bf16/truth.pt" || fail "pd: pytorch_model.bin"
gfs_umount "$T/mnt" || fail "unmount"
rm "$T/pd/global_step3/layer_05-model_states.pt"
expect_mount_fail "global_step3/layer_05-model_states.pt is missing: param 5.ln1.weight of pipeline stage 1" "$T/pd" "$T/mnt"

echo "== layout JSON round trip: the universal view of a pipeline, none of MoE or tensor parallel"
ck="$DATA/pp2_dp2_bf16/checkpoint"
timeout 60 "$INSPECT" layout "$ck" >"$T/layout.json" || fail "layout pp2_dp2_bf16"
timeout 60 "$INSPECT" layout --layout "$T/layout.json" | cmp - "$T/layout.json" || fail "pp2_dp2_bf16: JSON round trip"
gfs_mount "$T/layout.json" "$T/mnt" 2>/dev/null || fail "mount the layout JSON of pp2_dp2_bf16"
timeout 300 "$PYTHON3" "$UNI" "$T/mnt" "$ck/global_step3" "$ck/../truth.pt" "$ck/../truth_optim.pt" ||
	fail "pp2_dp2_bf16: layout JSON: universal view"
gfs_umount "$T/mnt" || fail "unmount"
for c in "moe_ep2_dp2_z2_fp32:a mixture-of-experts checkpoint" \
	"tp2_dp2_z1_fp32_uci:a tensor-parallel checkpoint (2 tensor ranks)"; do
	ck="$DATA/${c%%:*}/checkpoint"
	timeout 60 "$INSPECT" layout "$ck" >"$T/layout.json" || fail "layout ${c%%:*}"
	timeout 60 "$INSPECT" layout --layout "$T/layout.json" | cmp - "$T/layout.json" ||
		fail "${c%%:*}: JSON round trip"
	gfs_mount "$T/layout.json" "$T/mnt" 2>"$T/log" || fail "mount the layout JSON of ${c%%:*}"
	grep -q "no DeepSpeed universal checkpoint view: ${c#*:}" "$T/log" ||
		fail "${c%%:*}: layout JSON: $(cat "$T/log")"
	# the MoE truth.pt has the harness's key order: check_ds3d_moe.py
	chk="$CHECK"; [ "${c%%:*}" = moe_ep2_dp2_z2_fp32 ] && chk="$MOE"
	timeout 300 "$PYTHON3" "$chk" "$T/mnt/pytorch_model.bin" "$ck/../truth.pt" >/dev/null 2>"$T/err" ||
		fail "${c%%:*}: layout JSON: $(cat "$T/err")"
	gfs_umount "$T/mnt" || fail "unmount"
done

echo "== refusals"
fresh() {
	rm -rf "$T/bad"
	cp -r "$DATA/$1/checkpoint" "$T/bad"
	chmod -R u+w "$T/bad"
}
G="$T/bad/global_step3"

fresh pp2_dp2_z1_fp32_tied; rm "$G"/*mp_rank_01*
expect_refused "global_step3/mp_rank_01_model_states.pt is missing: mp_rank_00_model_states.pt says 2 model-parallel ranks" "$T/bad"
fresh pp2_dp2_z1_fp32_tied; rm "$G/mp_rank_01_model_states.pt"
expect_refused "global_step3/mp_rank_01_model_states.pt is missing (pipeline stage 1)" "$T/bad"
fresh pp2_dp2_bf16; rm "$G/layer_04-model_00-model_states.pt"
expect_refused "global_step3/layer_04-model_00-model_states.pt is missing: param 4.ln1.weight of pipeline stage 1" "$T/bad"
fresh pp2_dp2_z1_fp32_tied; rm "$G/layer_00-model_00-model_states.pt"
expect_refused "global_step3/layer_00-model_00-model_states.pt is missing" "$T/bad"
fresh pp2_dp2_bf16; rm "$G/bf16_zero_pp_rank_1_mp_rank_01_optim_states.pt"
expect_refused "optimizer states file of rank 1 (of 2) is missing" "$T/bad"
fresh pp2_dp2_z1_fp32_tied; rm "$G"/zero_pp_rank_*_mp_rank_01_optim_states.pt
expect_refused "global_step3/zero_pp_rank_0_mp_rank_01_optim_states.pt is missing" "$T/bad"
fresh pp2_dp2_z1_fp32_tied; cp "$DATA/pp2_dp2_bf16/checkpoint/global_step3/layer_03-model_00-model_states.pt" "$G/layer_03-model_states.pt"
expect_refused "global_step3: two files for rank 3: layer_03-" "$T/bad"
expect_refused "the stages' optimizers hold 53 params but the layer files 52 tensors: a TiedLayerSpec weight shared by stages" \
	"$DATA/pp2_dp1_z0_fp32_tied/checkpoint"
fresh moe_ep2_dp2_z2_fp32; rm "$G/layer_1_expert_2_mp_rank_00_model_states.pt"
expect_refused "global_step3/layer_1_expert_2_mp_rank_00_model_states.pt is missing: expert 2 of MoE layer 1 (num_experts in mp_rank_00_model_states.pt)" "$T/bad"
fresh moe_ep2_dp2_z2_fp32; cp "$G/layer_1_expert_2_mp_rank_00_model_states.pt" "$G/layer_1_expert_4_mp_rank_00_model_states.pt"
expect_refused "global_step3: 9 expert files, but num_experts in mp_rank_00_model_states.pt says 8: expert files of two saves" "$T/bad"
fresh moe_ep2_dp2_z0_fp32; rm "$G/layer_1_expert_3_mp_rank_00_model_states.pt"
expect_refused "global_step3/layer_1_expert_3_mp_rank_00_model_states.pt is missing: expert 3 of MoE layer 1" "$T/bad"
fresh moe_ep2_dp2_z0_fp32
timeout 120 "$PYTHON3" -c "
import sys, torch
ck = torch.load(sys.argv[1])
ck['module']['embed.weight'] = ck['module']['embed.weight'].bfloat16()
torch.save(ck, sys.argv[1])
" "$G/mp_rank_00_model_states.pt" || fail "rewrite mp_rank_00_model_states.pt"
expect_refused "mp_rank_00_model_states.pt: embed.weight is bfloat16 in a mixture-of-experts checkpoint without ZeRO: its fp32 master is in the torch optimizer state of the expp_rank_" "$T/bad"
fresh moe_ep2_dp2_z2_fp32; rm "$G/zero_pp_rank_1_mp_rank_00_optim_states.pt"
expect_refused "optimizer states file of rank 1 (of 2) is missing" "$T/bad"
# uci FILE PYTHON: re-save mp_rank file FILE with real torch.save after
# PYTHON on its universal_checkpoint_info `u` (del: none)
uci() {
	timeout 120 "$PYTHON3" - "$1" "$2" <<'PY' || fail "rewrite $1"
import sys, torch
ck = torch.load(sys.argv[1])
u = ck["universal_checkpoint_info"]
exec(sys.argv[2])
if u is None:
    del ck["universal_checkpoint_info"]
else:
    ck["universal_checkpoint_info"] = u
torch.save(ck, sys.argv[1])
PY
}
fresh tp2_dp2_z1_fp32_uci; uci "$G/mp_rank_00_model_states.pt" "u = None"
expect_refused "global_step3: 2 tensor-parallel ranks and no universal_checkpoint_info patterns in mp_rank_00_model_states.pt: which dimension each param is split on is not recorded" "$T/bad"
fresh tp2_dp2_z1_fp32_uci; uci "$G/mp_rank_00_model_states.pt" "u['parameter_with_row_parallelism_patterns'].append(r'(fc|proj)3')"
expect_refused "universal_checkpoint_info parameter_with_row_parallelism_patterns pattern (fc|proj)3 uses a regular-expression feature gatherfs does not evaluate" "$T/bad"
fresh tp2_dp2_z1_fp32_uci; uci "$G/mp_rank_00_model_states.pt" "u['parameter_to_average_patterns'] = [r'.*qkv\.b\w+']"
expect_refused "param blocks.0.qkv.bias matches universal_checkpoint_info parameter_to_average_patterns: made by arithmetic on the slices, not served" "$T/bad"
fresh tp2_dp2_z1_fp32_uci; rm "$G/mp_rank_01_model_states.pt"
expect_refused "global_step3/mp_rank_01_model_states.pt is missing (tensor rank 1)" "$T/bad"
fresh tp2_dp2_z1_fp32_uci; rm "$G"/*mp_rank_01*
expect_refused "global_step3/mp_rank_01_model_states.pt is missing: mp_rank_00_model_states.pt says 2 model-parallel ranks" "$T/bad"

echo "== tp2_buf_dp1_z1_fp32_uci: a buffer no universal_checkpoint_info pattern matches"
c=tp2_buf_dp1_z1_fp32_uci
expect_refused "buffer inv_freq matches no universal_checkpoint_info pattern: whether it is split between the tensor ranks is not recorded" \
	"$DATA/$c/checkpoint"
cat >"$T/bsplit.json" <<'EOF'
{
  ".*qkv\\.": 0,
  ".*fc1\\.": 0,
  ".*proj\\.weight": 1,
  ".*fc2\\.weight": 1,
  ".*": "replicated"
}
EOF
gfs_mount "$DATA/$c/checkpoint" "$T/mnt" -o tp_split="$T/bsplit.json" 2>/dev/null || fail "mount $c -o tp_split"
timeout 300 "$PYTHON3" "$CHECK" "$T/mnt/pytorch_model.bin" "$DATA/$c/truth.pt" || fail "$c: tp_split: pytorch_model.bin"
gfs_umount "$T/mnt" || fail "unmount"
fresh $c
uci "$G/mp_rank_00_model_states.pt" "u['tp_replicated_parameter_patterns'].append('inv_freq')"
gfs_mount "$T/bad" "$T/mnt" 2>/dev/null || fail "mount $c with a pattern for the buffer"
timeout 300 "$PYTHON3" "$CHECK" "$T/mnt/pytorch_model.bin" "$DATA/$c/truth.pt" || fail "$c: pytorch_model.bin"
check_st "$T/mnt/model.safetensors" "$DATA/$c/truth.pt"
gfs_umount "$T/mnt" || fail "unmount"

echo "== -o tp_split=FILE: tensor parallelism without universal_checkpoint_info"
fresh tp2_dp2_z1_fp32_uci; uci "$G/mp_rank_00_model_states.pt" "u = None"
uci "$G/mp_rank_01_model_states.pt" "u = None"
truth="$DATA/tp2_dp2_z1_fp32_uci/truth.pt"
# the first pattern a param matches decides (re.match: anchored at the start)
cat >"$T/split.json" <<'EOF'
{
  ".*qkv\\.": 0,
  ".*fc1\\.": 0,
  ".*proj\\.weight": 1,
  ".*fc2\\.weight": 1,
  ".*": "replicated"
}
EOF
gfs_mount "$T/bad" "$T/mnt" -o tp_split="$T/split.json" 2>"$T/log" || fail "mount tp_split: $(cat "$T/log")"
timeout 300 "$PYTHON3" "$CHECK" "$T/mnt/pytorch_model.bin" "$truth" || fail "tp_split: pytorch_model.bin"
check_st "$T/mnt/model.safetensors" "$truth"
# (the optimizer files are the fixture's; the checker reads its patterns)
timeout 300 "$PYTHON3" "$OPTIM" "$T/mnt" "$DATA/tp2_dp2_z1_fp32_uci/checkpoint/global_step3" tp \
	"$DATA/tp2_dp2_z1_fp32_uci/truth_optim.pt" || fail "tp_split: optim/"
gfs_umount "$T/mnt" || fail "unmount"
timeout 120 "$INSPECT" verify --tp-split "$T/split.json" "$T/bad" >"$T/v" 2>&1 || fail "inspect verify tp_split: $(cat "$T/v")"
grep -q "^OK: 48 replicas equal the copy served" "$T/v" || fail "inspect verify tp_split: replicas: $(cat "$T/v")"
# given, it is used instead of universal_checkpoint_info: all replicated is what it says
echo '{".*": "replicated"}' >"$T/rep.json"
timeout 60 "$INSPECT" ls --tp-split "$T/rep.json" "$DATA/tp2_dp2_z1_fp32_uci/checkpoint" >"$T/ls" 2>/dev/null ||
	fail "inspect ls --tp-split rep.json"
grep -q "^blocks.1.fc2.weight  *float32  *\[32, 32\]" "$T/ls" || fail "tp_split over universal_checkpoint_info: $(cat "$T/ls")"
# refusals, one line
head -c 40 "$T/split.json" >"$T/trunc.json"
expect_mount_fail "trunc.json" "$T/bad" "$T/mnt" -o tp_split="$T/trunc.json"
echo '{".*qkv": 2}' >"$T/two.json"
expect_mount_fail 'two.json: tp_split pattern .*qkv: the value is not 0, 1 or "replicated"' "$T/bad" "$T/mnt" -o tp_split="$T/two.json"
echo '{"(qkv|fc1)": 0}' >"$T/alt.json"
expect_mount_fail "alt.json: tp_split pattern (qkv|fc1) uses a regular-expression feature gatherfs does not evaluate" "$T/bad" "$T/mnt" -o tp_split="$T/alt.json"
echo '[]' >"$T/list.json"
expect_mount_fail "list.json: a tp_split file is a JSON object of 1 to 4096 patterns" "$T/bad" "$T/mnt" -o tp_split="$T/list.json"
echo '{".*qkv": 0}' >"$T/few.json"
expect_mount_fail "param embed.weight matches no pattern of the tp_split file .*few.json" "$T/bad" "$T/mnt" -o tp_split="$T/few.json"
expect_mount_fail "tp_split: .*nonexistent.json" "$T/bad" "$T/mnt" -o tp_split="$T/nonexistent.json"
expect_mount_fail "a tp_split applies to a tensor-parallel checkpoint only, not to this pipeline one" \
	"$DATA/pp2_dp2_bf16/checkpoint" "$T/mnt" -o tp_split="$T/split.json"
expect_mount_fail "a tp_split applies to a DeepSpeed checkpoint only" "$T/layout.json" "$T/mnt" -o tp_split="$T/split.json"
echo "ok"
