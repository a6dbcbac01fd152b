#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Per-rank state dicts (docs/rankdict.md): verl's FSDPCheckpointManager
# layout, real FSDP runs in tests/data/fsdp_rank (README.md there):
#  - FSDP2 DTensors at world sizes 1, 2 (tied embeddings), 3 (uneven
#    Shard(0), untied), 4 (a 2 x 2 HSDP mesh: Replicate, Shard(0)) and 6
#    (a tiny model with biases: rows fewer than ranks, empty shards),
#    FSDP1 ShardedTensors at world size 2, FSDP1 with a device mesh (as
#    verl runs it: DTensors, empty shards) at 3, and a 1-rank save of plain
#    tensors (made here from the truth, tied by storage, with an optimizer
#    state naming its parameters by param_names): the verl root,
#    its global_step_2 and its actor/ directory mounted; pytorch_model.bin
#    (torch.load) and model.safetensors compared bit for bit with truth.pt;
#    config.json passed through; gatherfs-inspect ls and verify.
#  - optim/ of FSDP2 saves (ws 2 tied, ws 3 untied, ws 6 with empty
#    shards) equal to truth_optim.pt;
#    refused with a note, the model still served: FSDP1's optimizer files
#    (ShardedTensor models, and DTensor ones by fsdp_config.json),
#    a missing optimizer rank, parameter counts that disagree, a moment
#    whose global shape disagrees with its TensorMeta.
#  - in the compat root (torch 2.14, transformers), when present: the
#    loaders of tests/compat/check_loaders.py, from_pretrained(MNT) logits
#    equal to the run's reference logits (fsdp2_ws2, fsdp2_ws4_hsdp2x2,
#    fsdp2_ws6_empty, fsdp1_ws3_mesh).
#  - refusals, one line naming the file: a missing rank, a duplicated rank
#    (a file copied under another rank's name), ranks of two world sizes,
#    a truncated file, fsdp_config.json of another world size, a tag on
#    the rank directory, and pickles edited in place: placements that
#    disagree with rank 0's, a Partial placement, overlapping
#    ShardedTensor shards, a mesh without coordinates, an unknown class.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
DATA="$top_srcdir/tests/data/fsdp_rank"
CHECK="$top_srcdir/tests/tools/check_rankdict.py"
TIE="lm_head.weight=model.embed_tokens.weight"
NOCONFIG=

# check_mount SRC TRUTH TIES [ARG...]: mount SRC, compare its views with TRUTH
check_mount() {
	src=$1 truth=$2 ties=$3
	shift 3
	gfs_mount "$src" "$T/mnt" "$@" 2>"$T/note" || fail "mount $src: $(cat "$T/note")"
	timeout 300 "$PYTHON3" "$CHECK" "$T/mnt/pytorch_model.bin" "$truth" $ties ||
		fail "$src: pytorch_model.bin differs from $truth"
	timeout 300 "$PYTHON3" "$CHECK" "$T/mnt/model.safetensors" "$truth" $ties ||
		fail "$src: model.safetensors differs from $truth"
	[ -f "$T/mnt/config.json" ] || [ -n "$NOCONFIG" ] || fail "$src: no config.json at the mount's root"
	gfs_umount "$T/mnt" || fail "unmount"
}

for c in fsdp2_ws1 fsdp2_ws2 fsdp2_ws3_untied fsdp2_ws4_hsdp2x2 fsdp2_ws6_empty fsdp1_ws3_mesh fsdp1_ws2; do
	echo "== $c"
	root="$DATA/$c"
	actor="$root/global_step_2/actor"
	ties=$TIE
	case $c in
	*untied*|*empty|fsdp1_*) ties= ;;
	esac
	nls=22
	case $c in
	fsdp2_ws6_empty|fsdp1_ws3_mesh) nls=36 ;;
	esac
	check_mount "$root" "$root/truth.pt" "$ties"
	check_mount "$root/global_step_2" "$root/truth.pt" "$ties"
	check_mount "$actor" "$root/truth.pt" "$ties" -o format=rankdict
	timeout 60 "$INSPECT" ls "$root" >"$T/ls" 2>"$T/err" || fail "inspect ls $c: $(cat "$T/err")"
	[ "$(grep -c . "$T/ls")" -eq "$nls" ] || fail "inspect ls $c: $(cat "$T/ls")"
	grep -q "per-rank state dicts" "$T/err" || fail "inspect ls $c: $(cat "$T/err")"
	timeout 120 "$INSPECT" verify "$root" >"$T/v" 2>&1 || fail "inspect verify $c: $(cat "$T/v")"
	[ "$c" != fsdp1_ws3_mesh ] || grep -q "(FSDP1 DTensor), world size 3" "$T/err" || fail "$c: $(cat "$T/err")"
done
grep -q "FSDP1 ShardedTensor), world size 2" "$T/err" || fail "fsdp1_ws2: $(cat "$T/err")"

echo "== HSDP replicas: served from one, compared by verify"
timeout 120 "$INSPECT" verify "$DATA/fsdp2_ws4_hsdp2x2" >"$T/v" 2>&1 || fail "verify hsdp: $(cat "$T/v")"
grep -q "^OK: 40 replicas equal the copy served" "$T/v" || fail "hsdp: replicas not compared: $(cat "$T/v")"
rm -rf "$T/hsdp" && cp -r "$DATA/fsdp2_ws4_hsdp2x2" "$T/hsdp" && chmod -R u+w "$T/hsdp"
# flip a payload byte of rank 3's (a replica's) first storage record
timeout 60 "$PYTHON3" - "$T/hsdp/global_step_2/actor/model_world_size_4_rank_3.pt" <<'PY' || fail "flip a replica byte"
import struct, sys, zipfile
path = sys.argv[1]
z = zipfile.ZipFile(path)
info = next(i for i in z.infolist() if "/data/" in i.filename and i.file_size >= 16)
with open(path, "r+b") as f:
    f.seek(info.header_offset)
    h = f.read(30)
    off = info.header_offset + 30 + struct.unpack("<H", h[26:28])[0] + struct.unpack("<H", h[28:30])[0]
    f.seek(off + 8)
    b = f.read(1)
    f.seek(off + 8)
    f.write(bytes([b[0] ^ 0x40]))
PY
if timeout 120 "$INSPECT" verify "$T/hsdp" >"$T/v" 2>"$T/err"; then
	fail "verify passed a differing replica"
fi
grep -q "^REPLICA DIFFERS: .* bytes \[.*model_world_size_4_rank_3.pt at offset .* holds other values" "$T/v" ||
	fail "verify: no REPLICA DIFFERS line: $(cat "$T/v" "$T/err")"
grep -q "1 of 40 replicas differ from the copy served" "$T/err" || fail "verify: $(cat "$T/err")"
check_mount "$T/hsdp" "$DATA/fsdp2_ws4_hsdp2x2/truth.pt" "$TIE"

echo "== optim/ (FSDP2: states by parameter index, tied pair counted once)"
for c in fsdp2_ws2 fsdp2_ws3_untied fsdp2_ws6_empty; do
	gfs_mount "$DATA/$c" "$T/mnt" 2>"$T/note" || fail "mount $c: $(cat "$T/note")"
	timeout 300 "$PYTHON3" "$top_srcdir/tests/tools/check_rankdict_optim.py" "$T/mnt" \
		"$DATA/$c/truth_optim.pt" || fail "$c: optim/ differs from truth_optim.pt"
	gfs_umount "$T/mnt" || fail "unmount"
	timeout 60 "$INSPECT" ls --optim "$DATA/$c" >"$T/ls" 2>"$T/err" || fail "inspect ls --optim $c: $(cat "$T/err")"
	[ "$(grep -c "^exp_avg " "$T/ls")" -eq "$(grep -c "^step " "$T/ls")" ] || fail "inspect ls --optim $c: $(cat "$T/ls")"
done
# optim_refused DIR PATTERN: DIR mounts, its note says why optim/ is absent, the model is served
optim_refused() {
	gfs_mount "$1" "$T/mnt" 2>"$T/note" || fail "mount $1: $(cat "$T/note")"
	grep -q -- "no optim/: $2" "$T/note" || fail "$1: no note '$2': $(cat "$T/note")"
	[ -f "$T/mnt/pytorch_model.bin" ] || fail "$1: no pytorch_model.bin"
	[ -e "$T/mnt/optim/exp_avg.safetensors" ] && fail "$1: optim/ shown"
	gfs_umount "$T/mnt" || fail "unmount"
	echo "ok: $(grep "no optim/" "$T/note")"
}
rm -rf "$T/o"; cp -r "$DATA/fsdp1_ws2" "$T/o"; chmod -R u+w "$T/o"
: >"$T/o/global_step_2/actor/optim_world_size_2_rank_0.pt"
optim_refused "$T/o" "FSDP1's optimizer files hold flat-parameter shards"
# FSDP1 with a device mesh: DTensor values, flat-parameter optimizer files (3 for 35 keys)
optim_refused "$DATA/fsdp1_ws3_mesh" "FSDP1's optimizer files hold flat-parameter shards, .* (fsdp_config.json: FSDP_version 1)"
rm -rf "$T/o"; cp -r "$DATA/fsdp2_ws2" "$T/o"; chmod -R u+w "$T/o"
rm "$T/o/global_step_2/actor/optim_world_size_2_rank_1.pt"
optim_refused "$T/o" ".*optim_world_size_2_rank_1.pt: missing (rank 1 of 2)"
rm -rf "$T/o"; cp -r "$DATA/fsdp2_ws3_untied" "$T/o"; chmod -R u+w "$T/o"
for r in 0 1 2; do
	cp "$DATA/fsdp2_ws2/global_step_2/actor/optim_world_size_2_rank_0.pt" \
		"$T/o/global_step_2/actor/optim_world_size_3_rank_$r.pt"
done
optim_refused "$T/o" ".*optim_world_size_3_rank_0.pt: the optimizer has 20 parameters, the model 21"
rm -rf "$T/o"; cp -r "$DATA/fsdp2_ws2" "$T/o"; chmod -R u+w "$T/o"
for r in 0 1; do
	timeout 60 "$PYTHON3" "$top_srcdir/tests/tools/edit_rank_pickle.py" \
		"$T/o/global_step_2/actor/optim_world_size_2_rank_$r.pt" "b'M\x00\x02K@\x86'" "b'M\x00\x02K \x86'" ||
		fail "edit optim"
done
optim_refused "$T/o" ".*optim_world_size_2_rank_0.pt: model.embed_tokens.weight: the DTensor's size disagrees with its TensorMeta's shape"

echo "== config.json passed through"
gfs_mount "$DATA/fsdp2_ws2" "$T/mnt" 2>"$T/note" || fail "mount: $(cat "$T/note")"
cmp "$T/mnt/config.json" "$DATA/fsdp2_ws2/global_step_2/actor/huggingface/config.json" ||
	fail "config.json is not huggingface/config.json"
gfs_umount "$T/mnt" || fail "unmount"

echo "== a 1-rank save of plain tensors (tied by storage)"
mkdir -p "$T/plain/actor"
# its optimizer state names its parameters (param_names, in reverse order)
timeout 120 "$PYTHON3" - "$DATA/fsdp2_ws1/truth.pt" "$T/plain/actor" "$T/plain-optim.pt" <<'PY' ||
import sys, torch
sd = torch.load(sys.argv[1])
sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
torch.save(sd, sys.argv[2] + "/model_world_size_1_rank_0.pt")
names = [k for k in sd if k != "lm_head.weight"][::-1]
state = {i: {"step": torch.tensor(3.0), "exp_avg": sd[n] * 2} for i, n in enumerate(names)}
groups = [{"lr": 0.1, "params": list(range(5)), "param_names": names[:5]},
          {"lr": 0.2, "params": list(range(5, len(names))), "param_names": names[5:]}]
torch.save({"state": state, "param_groups": groups}, sys.argv[2] + "/optim_world_size_1_rank_0.pt")
torch.save({"state": {n: state[i] for i, n in enumerate(names)}}, sys.argv[3])
PY
	fail "make the plain save"
NOCONFIG=1 check_mount "$T/plain" "$DATA/fsdp2_ws1/truth.pt" "$TIE"
gfs_mount "$T/plain" "$T/mnt" 2>"$T/note" || fail "mount plain: $(cat "$T/note")"
timeout 300 "$PYTHON3" "$top_srcdir/tests/tools/check_rankdict_optim.py" "$T/mnt" "$T/plain-optim.pt" ||
	fail "plain: optim/ by param_names"
gfs_umount "$T/mnt" || fail "unmount"
timeout 60 "$INSPECT" ls "$T/plain/actor" 2>"$T/err" >/dev/null || fail "inspect ls plain: $(cat "$T/err")"
grep -q "(plain tensors), world size 1" "$T/err" || fail "plain: $(cat "$T/err")"

echo "== from_pretrained in the compat root (torch 2.x, transformers)"
COMPAT_ROOT=${GATHERFS_COMPAT_ROOT:-/var/cache/gatherfs/compat-root}
if [ "$(id -u)" = 0 ] && [ -x "$COMPAT_ROOT/usr/bin/python3" ]; then
	for c in fsdp2_ws2 fsdp2_ws4_hsdp2x2 fsdp2_ws6_empty fsdp1_ws3_mesh; do
		timeout 120 "$PYTHON3" - "$DATA/$c/truth.pt" "$T/$c.tsv" <<'PY' || fail "$c: expected table"
import hashlib, json, sys, torch
with open(sys.argv[2], "w") as f:
    for k, v in torch.load(sys.argv[1]).items():
        b = v.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        f.write(f"{k}\t{str(v.dtype).replace('torch.', '')}\t{json.dumps(list(v.shape))}\t{hashlib.sha256(b).hexdigest()}\n")
PY
		gfs_mount "$DATA/$c" "$T/mnt" 2>"$T/note" || fail "mount $c: $(cat "$T/note")"
		# untied, or FSDP1 (its tied keys saved apart): no alias in the files
		case $c in
		fsdp2_ws6_empty|fsdp1_*) untied=1 ;;
		*) untied= ;;
		esac
		GFS_EXPECT_UNTIED=$untied COMPAT_BINDS="$top_srcdir $T" timeout 600 "$top_srcdir/tests/compat/compat-run.sh" \
			"$COMPAT_ROOT" python3 "$top_srcdir/tests/compat/check_loaders.py" "$T/mnt" \
			"$T/$c.tsv" "$DATA/$c" >"$T/compat.log" 2>&1 || fail "$c: compat loaders: $(grep -v '^ok' "$T/compat.log")"
		tail -1 "$T/compat.log"
		gfs_umount "$T/mnt" || fail "unmount"
	done
else
	skip_part compat-root "from_pretrained: no compat root at $COMPAT_ROOT (or not root)"
fi

echo "== refusals"
fresh() {
	rm -rf "$T/bad"
	cp -r "$DATA/$1" "$T/bad"
	chmod -R u+w "$T/bad"
}
A="$T/bad/global_step_2/actor"

fresh fsdp2_ws3_untied; rm "$A/model_world_size_3_rank_1.pt"
expect_refused "actor/model_world_size_3_rank_1.pt: missing (rank 1 of 3)" "$T/bad"
fresh fsdp2_ws3_untied; cp "$A/model_world_size_3_rank_0.pt" "$A/model_world_size_3_rank_01.pt"
expect_refused "actor/model_world_size_3_rank_01.pt: rank 1 twice\|actor/model_world_size_3_rank_1.pt: rank 1 twice" "$T/bad"
fresh fsdp2_ws2; cp "$A/model_world_size_2_rank_0.pt" "$A/model_world_size_2_rank_1.pt"
expect_refused "model_world_size_2_rank_1.pt: model.embed_tokens.weight: saved by rank 0, not by rank 1" "$T/bad"
fresh fsdp1_ws2; cp "$A/model_world_size_2_rank_0.pt" "$A/model_world_size_2_rank_1.pt"
expect_refused "model_world_size_2_rank_1.pt: model.embed_tokens.weight: a local shard placed on rank 0, not on rank 1" "$T/bad"
fresh fsdp2_ws2; cp "$A/model_world_size_2_rank_1.pt" "$A/model_world_size_3_rank_2.pt"
expect_refused "ranks of two saves" "$T/bad"
fresh fsdp2_ws2; printf '{"FSDP_version": 2, "world_size": 3}' >"$A/fsdp_config.json"
expect_refused "fsdp_config.json: world_size 3, but the rank files are of a world of 2" "$T/bad"
fresh fsdp2_ws2; rm "$A/fsdp_config.json"; mv "$A/model_world_size_2_rank_1.pt" "$A/model_world_size_3_rank_1.pt"
mv "$A/model_world_size_2_rank_0.pt" "$A/model_world_size_3_rank_0.pt"
expect_refused "model_world_size_3_rank_2.pt: missing (rank 2 of 3)" "$T/bad"
fresh fsdp2_ws2; f="$A/model_world_size_2_rank_1.pt"
head -c $(($(wc -c <"$f") / 2)) "$f" >"$T/half" && mv "$T/half" "$f"
expect_refused "model_world_size_2_rank_1.pt: not a zip archive (no end of central directory record)$" "$T/bad"
fresh fsdp2_ws2; cp "$DATA/fsdp2_ws2/truth.pt" "$A/model_world_size_2_rank_1.pt"
expect_refused "model_world_size_2_rank_1.pt: model.embed_tokens.weight: its kind, dtype or global shape disagrees with rank 0's" "$T/bad"
# edit FILE OLD NEW: replace bytes in FILE's pickle (tests/tools/edit_rank_pickle.py)
edit() {
	timeout 60 "$PYTHON3" "$top_srcdir/tests/tools/edit_rank_pickle.py" "$@" || fail "edit $1"
}
fresh fsdp2_ws2; edit "$A/model_world_size_2_rank_1.pt" "b'placement_types\nShard\n'" "b'placement_types\nReplicate\n'"
expect_refused "model_world_size_2_rank_1.pt: model.embed_tokens.weight: its placements or mesh disagree with rank 0's" "$T/bad"
fresh fsdp2_ws2
for r in 0 1; do
	edit "$A/model_world_size_2_rank_$r.pt" "b'placement_types\nShard\n'" "b'placement_types\nPartial\n'"
done
expect_refused "model_world_size_2_rank_0.pt: model.embed_tokens.weight: a Partial placement (unreduced values): cannot be gathered" "$T/bad"
fresh fsdp1_ws2; edit "$A/model_world_size_2_rank_1.pt" "b'M\x00\x01K\x00e'" "b'K\x00K\x00e'"
expect_refused "model_world_size_2_rank_1.pt: model.embed_tokens.weight: its shard overlaps that of model_world_size_2_rank_0.pt: the shards do not tile the tensor" "$T/bad"
fresh fsdp2_ws2; edit "$A/model_world_size_2_rank_1.pt" "b'_coordinate_on_dim'" "b'_coordinate_of_dim'"
expect_refused "model_world_size_2_rank_1.pt: model.embed_tokens.weight: a DeviceMesh without its rank's coordinate" "$T/bad"
fresh fsdp2_ws2; edit "$A/model_world_size_2_rank_1.pt" "b'torch.distributed.tensor\nDTensor\n'" "b'torch.distributed.tensor\nEvilTensor\n'"
expect_refused "model_world_size_2_rank_1.pt: model.embed_tokens.weight: EvilTensor, not a tensor, DTensor or ShardedTensor" "$T/bad"
# rank files are opened ahead, several at once: still the first rank's error
fresh fsdp2_ws3_untied; edit "$A/model_world_size_3_rank_1.pt" "b'torch.distributed.tensor\nDTensor\n'" "b'torch.distributed.tensor\nEvilTensor\n'"
f="$A/model_world_size_3_rank_2.pt"
head -c $(($(wc -c <"$f") / 2)) "$f" >"$T/half" && mv "$T/half" "$f"
expect_refused "model_world_size_3_rank_1.pt: .*EvilTensor, not a tensor, DTensor or ShardedTensor" "$T/bad"
fresh fsdp2_ws2; echo 7 >"$T/bad/latest_checkpointed_iteration.txt"
expect_refused "bad: no directory global_step_7 (the step latest_checkpointed_iteration.txt names)" "$T/bad"
expect_mount_fail "holds the rank files itself: a tag picks a role directory" \
	"$DATA/fsdp2_ws2/global_step_2/actor" "$T/mnt" -o tag=critic
expect_mount_fail "critic: no model_world_size_W_rank_R.pt file in it" \
	"$DATA/fsdp2_ws2/global_step_2" "$T/mnt" -o tag=critic
echo "rankdict: OK"
