#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# PEFT LoRA in real DeepSpeed ZeRO checkpoints (tests/data/lora-ds): the
# merged view (-o merge=lora) within 2 ulps of the operands' scale of the
# float64 merge (and of PEFT's), bit-exact against the float64 merge of the
# fp32 masters; the layout.json of the mount read back; gatherfs-inspect
# ls/export of the merge; adapter/ equal to PEFT's save of the fp32 masters;
# a PEFT-wrapped state dict as plain model.safetensors; HF Trainer's
# adapter-only checkpoint with -o base=; notes on empty saved adapters; bad
# adapter configs refused in one line.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
D="$top_srcdir/tests/data/lora-ds"
CHECK="$top_srcdir/tests/tools/check_merged.py"
mkdir "$T/mnt"

for c in z3_ws2_bf16 z2_ws2_fp32; do
	echo "== $c -o merge=lora"
	gfs_mount "$D/$c/checkpoint" "$T/mnt" -o merge=lora || fail "mount $c"
	"$PYTHON3" "$CHECK" "$T/mnt" "$D/$c" --scale-ulp 2 -q || fail "$c: tensors/"
	"$PYTHON3" "$CHECK" "$T/mnt/model.safetensors" "$D/$c" --scale-ulp 2 -q ||
		fail "$c: model.safetensors"
	if [ -d "$D/$c/variant_fp32master" ]; then
		# LoRA from the fp32 masters: exactly the float64 merge rounded once
		"$PYTHON3" "$CHECK" "$T/mnt" "$D/$c/variant_fp32master" -q >"$T/v.txt" ||
			fail "$c: against the fp32-master merge: $(cat "$T/v.txt")"
		grep -q "MISMATCH\|FP64~" "$T/v.txt" && fail "$c: not bit-exact: $(cat "$T/v.txt")"
	fi
	"$PYTHON3" - "$T/mnt/adapter" "$D/$c/adapter_fp32_master" <<'PY' || fail "$c: adapter/"
import json, os, struct, sys
def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items()}
got = tensors(sys.argv[1] + "/adapter_model.safetensors")
want = tensors(sys.argv[2] + "/adapter_model.safetensors")
assert got == want, (sorted(set(got) ^ set(want)), [k for k in want if got.get(k) != want[k]])
assert sorted(os.listdir(sys.argv[1])) == ["adapter_config.json", "adapter_model.safetensors"]
print(f"ok: adapter/adapter_model.safetensors equals adapter_fp32_master ({len(got)} tensors)")
PY
	cmp "$T/mnt/adapter/adapter_config.json" "$D/$c/checkpoint/adapter_config.json" ||
		fail "$c: adapter/adapter_config.json"
	grep -q '"gatherfs_layout":	3' "$T/mnt/layout.json" || fail "$c: layout.json is not version 3"
	grep -q '"op":	"lora"' "$T/mnt/layout.json" || fail "$c: layout.json has no computed tensor"
	if command -v unzip >/dev/null 2>&1; then
		unzip -tq "$T/mnt/pytorch_model.bin" >/dev/null || fail "$c: unzip -t pytorch_model.bin"
	fi
	"$PYTHON3" - "$T/mnt" <<'PY' || fail "$c: torch.load of pytorch_model.bin"
import sys, torch
sd = torch.load(sys.argv[1] + "/pytorch_model.bin")
assert not any("lora_" in k or "base_layer" in k or k.startswith("base_model.") for k in sd), list(sd)
assert sd["lm_head.weight"].data_ptr() == sd["model.embed_tokens.weight"].data_ptr(), "not tied"
q = open(sys.argv[1] + "/tensors/model.layers.0.self_attn.q_proj.weight", "rb").read()
t = sd["model.layers.0.self_attn.q_proj.weight"]
t = t.view(torch.int16) if t.dtype == torch.bfloat16 else t
assert t.numpy().tobytes() == q
PY
	cp "$T/mnt/layout.json" "$T/layout.json"
	gfs_umount "$T/mnt" || fail "unmount"
	echo "== $c: its layout.json, mounted"
	gfs_mount "$T/layout.json" "$T/mnt" || fail "mount layout.json of $c"
	"$PYTHON3" "$CHECK" "$T/mnt" "$D/$c" --scale-ulp 2 -q || fail "$c: layout.json mount"
	gfs_umount "$T/mnt" || fail "unmount"
	echo "== $c: gatherfs-inspect --merge lora"
	"$INSPECT" export --merge lora "$D/$c/checkpoint" "$T/m.safetensors" || fail "export $c"
	"$PYTHON3" "$CHECK" "$T/m.safetensors" "$D/$c" --scale-ulp 2 -q || fail "$c: export"
	"$INSPECT" ls --merge lora "$D/$c/checkpoint" >"$T/ls.txt" || fail "ls $c"
	[ "$(grep -c 'merged:lora$' "$T/ls.txt")" -eq 4 ] || fail "$c: ls marks $(grep -c merged: "$T/ls.txt") merged tensors"
	"$INSPECT" ls "$D/$c/checkpoint" >"$T/ls.txt" || fail "ls $c"
	[ "$(grep -c ' lora$' "$T/ls.txt")" -eq 8 ] || fail "$c: ls marks $(grep -c ' lora$' "$T/ls.txt") LoRA tensors"
done

echo "== the unmerged mount has adapter/ too; -o dtype=bf16 converts it"
gfs_mount "$D/z3_ws2_bf16/checkpoint" "$T/mnt" -o dtype=bf16 || fail "mount unmerged"
"$PYTHON3" - "$T/mnt" <<'PY' || fail "adapter/ in bf16"
import json, struct, sys, torch
b = open(sys.argv[1] + "/adapter/adapter_model.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h.pop("__metadata__", None)
assert h and all(v["dtype"] == "BF16" for v in h.values()), h
sd = torch.load(sys.argv[1] + "/pytorch_model.bin")
for k, v in h.items():
    w = k.replace("base_model.model.", "").replace(".weight", "")
    src = [x for x in sd if x.startswith("base_model.model." + w.rsplit(".", 1)[0] + ".") and "." + w.rsplit(".", 1)[1] + "." in x]
    assert len(src) == 1, (k, src)
    raw = b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
    assert sd[src[0]].view(torch.int16).numpy().tobytes() == raw, k
print(f"ok: adapter/ in bf16 equals the bf16 LoRA tensors of pytorch_model.bin ({len(h)})")
PY
gfs_umount "$T/mnt" || fail "unmount"

echo "== -o dtype=fp32 of a bf16 checkpoint: no 16-bit rounding"
gfs_mount "$D/z3_ws2_bf16/checkpoint" "$T/mnt" -o merge=lora,dtype=fp32 || fail "mount fp32"
"$PYTHON3" - "$T/mnt" "$D/z3_ws2_bf16" "$top_srcdir/tests/tools" <<'PY' || fail "dtype=fp32 merge"
import os, sys
sys.path.insert(0, sys.argv[3])
import lora_ref
mnt, case = sys.argv[1], sys.argv[2]
base, _ = lora_ref.read_safetensors(case + "/base/model.safetensors")
m64, info = lora_ref.merge_fp64(base, case + "/adapter_fp32_master")
want = lora_ref.merged_state(base, m64, "F32")
n = 0
for name, (dt, shape, arr) in want.items():
    got = open(os.path.join(mnt, "tensors", name), "rb").read()
    assert got == arr.tobytes(), name
    n += name in m64
assert n == 4, n
print("ok: fp32 view of the bf16 merge equals the float64 merge rounded once to fp32")
PY
gfs_umount "$T/mnt" || fail "unmount"

echo "== a PEFT-wrapped state dict as a plain model.safetensors"
w="$D/z2_ws2_fp32/wrapped_plain"
gfs_mount "$w" "$T/mnt" -o merge=lora || fail "mount wrapped plain"
"$PYTHON3" "$CHECK" "$T/mnt" "$D/z2_ws2_fp32" --scale-ulp 2 -q || fail "wrapped plain: merge"
"$PYTHON3" "$CHECK" "$T/mnt/model.safetensors" "$D/z2_ws2_fp32" -q >/dev/null ||
	fail "wrapped plain: model.safetensors"
"$PYTHON3" - "$T/mnt/adapter/adapter_model.safetensors" "$D/z2_ws2_fp32/adapter_fp32_master/adapter_model.safetensors" <<'PY' || fail "wrapped plain: adapter/"
import json, struct, sys
def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items()}
assert tensors(sys.argv[1]) == tensors(sys.argv[2])
PY
cmp "$T/mnt/adapter/adapter_config.json" "$w/adapter_config.json" || fail "wrapped plain: adapter_config.json"
gfs_umount "$T/mnt" || fail "unmount"

echo "== HF Trainer's checkpoint without base weights, with -o base="
x="$D/z3_ws2_bf16_exclude_frozen"
gfs_mount "$x/checkpoint" "$T/mnt" -o "merge=lora,base=$x/base" || fail "mount exclude_frozen"
"$PYTHON3" "$CHECK" "$T/mnt" "$x" --scale-ulp 2 -q || fail "exclude_frozen merge"
cmp "$T/mnt/adapter/adapter_config.json" "$x/checkpoint/adapter_config.json" ||
	fail "exclude_frozen: adapter/adapter_config.json"
gfs_umount "$T/mnt" || fail "unmount"
expect_mount_fail 'holds only the adapter, no base weights .*give the base model with -o base=DIR' \
	-o merge=lora "$x/checkpoint" "$T/mnt"

echo "== empty saved adapters next to the checkpoint are noted"
cp -r "$D/z3_ws2_bf16/checkpoint" "$T/note"
chmod -R u+w "$T/note"
cp "$D/z3_ws2_bf16/adapter_naive/adapter_model.safetensors" "$T/note/"
gfs_mount "$T/note" "$T/mnt" -o merge=lora 2>"$T/note.err" || fail "mount with a [0]-shaped adapter file"
grep -q "has 8 of 8 tensors of shape \[0\]" "$T/note.err" || fail "no note: $(cat "$T/note.err")"
gfs_umount "$T/mnt" || fail "unmount"
cp "$D/z3_ws2_bf16/adapter_trainer_fallback/adapter_model.safetensors" "$T/note/"
gfs_mount "$T/note" "$T/mnt" 2>"$T/note.err" || fail "mount with a 40-byte adapter file"
grep -q "holds no tensor (40 bytes" "$T/note.err" || fail "no note: $(cat "$T/note.err")"
gfs_umount "$T/mnt" || fail "unmount"

echo "== bad adapter configs"
cp -r "$D/z2_ws2_fp32/checkpoint" "$T/bad"
chmod -R u+w "$T/bad"
cfg="$T/bad/adapter_config.json"
cp "$cfg" "$T/cfg.orig"
edit() { "$PYTHON3" -c "import json,sys; c=json.load(open(sys.argv[1])); c[sys.argv[2]]=json.loads(sys.argv[3]); json.dump(c,open(sys.argv[1],'w'))" "$cfg" "$1" "$2"; }
if command -v unzip >/dev/null 2>&1; then
	echo "== the CRC cache knows the merge: another lora_alpha, other CRCs"
	gfs_mount "$T/bad" "$T/mnt" -o "merge=lora,crc_cache=$T/crc" || fail "mount for CRCs"
	unzip -tq "$T/mnt/pytorch_model.bin" >/dev/null || fail "unzip -t (alpha 16)"
	gfs_umount "$T/mnt" || fail "unmount"
	edit lora_alpha 32
	gfs_mount "$T/bad" "$T/mnt" -o "merge=lora,crc_cache=$T/crc" || fail "mount for CRCs"
	unzip -tq "$T/mnt/pytorch_model.bin" >/dev/null || fail "unzip -t (alpha 32): stale CRCs"
	gfs_umount "$T/mnt" || fail "unmount"
	cp "$T/cfg.orig" "$cfg"
fi
edit peft_type '"IA3"'
expect_mount_fail 'peft_type is "IA3", not "LORA"' -o merge=lora "$T/bad" "$T/mnt"
cp "$T/cfg.orig" "$cfg"; edit r 0
expect_mount_fail 'r must be a positive integer' -o merge=lora "$T/bad" "$T/mnt"
cp "$T/cfg.orig" "$cfg"; edit r 4
expect_mount_fail 'r = 4 in the config, but its LoRA tensors have rank 8' -o merge=lora "$T/bad" "$T/mnt"
cp "$T/cfg.orig" "$cfg"; printf '{"peft_type": "LORA", "r": 8, "lora_alpha": 1e999}' >"$cfg"
expect_mount_fail 'lora_alpha must be a finite number' -o merge=lora "$T/bad" "$T/mnt"
rm "$cfg"
expect_mount_fail 'adapter_config.json: cannot open (a LoRA merge needs' -o merge=lora "$T/bad" "$T/mnt"
expect_mount_fail 'merge=x: expected lora' -o merge=x "$T/bad" "$T/mnt"
expect_mount_fail 'base= needs -o merge=lora' -o base=/nonexistent "$T/bad" "$T/mnt"
echo "PASS"
