#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# PEFT adapter directories merged onto plain bases (-o lora=DIR): every case
# of tests/data/lora (real PEFT merges: Linear fp32 and bf16, GPT-2 Conv1D,
# DoRA, a targeted tied embedding) within 1 ulp of the operands' scale of the
# float64 merge; -o dtype=fp32 of a bf16 base; the tied head untied (and
# config.json saying so) or, with -o lora_tied=peft, tied as PEFT merges;
# a pytorch_model.bin base; gatherfs-inspect --lora; adapters built with the
# float64 reference for rsLoRA + rank/alpha patterns, DoRA on an embedding
# with the adapter's own copy of it, Conv1D DoRA + lora_bias +
# modules_to_save; bad adapters refused in one line.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
D="$top_srcdir/tests/data/lora"
TOOLS="$top_srcdir/tests/tools"
CHECK="$TOOLS/check_merged.py"
mkdir "$T/mnt"

for case in "$D"/*/; do
	case=${case%/}
	c=$(basename "$case")
	echo "== $c"
	gfs_mount "$case/base" "$T/mnt" -o "lora=$case/adapter" || fail "mount $c"
	"$PYTHON3" "$CHECK" "$T/mnt" "$case" --scale-ulp 1 --allow-untied -q || fail "$c: tensors/"
	"$PYTHON3" "$CHECK" "$T/mnt/model.safetensors" "$case" --scale-ulp 1 --allow-untied -q ||
		fail "$c: model.safetensors"
	grep -q '"op":	"' "$T/mnt/layout.json" || fail "$c: layout.json has no computed tensor"
	gfs_umount "$T/mnt" || fail "unmount"
done

echo "== the tied embedding: untied head, config.json says so; lora_tied=peft keeps the tie"
g="$D/g_llama_fp32_tied_embed"
gfs_mount "$g/base" "$T/mnt" -o "lora=$g/adapter" || fail "mount g"
"$PYTHON3" "$CHECK" "$T/mnt" "$g" -q >"$T/out" && fail "g without --allow-untied passed: $(cat "$T/out")"
grep -q "UNTIED-HEAD" "$T/out" || fail "g: no untied head: $(cat "$T/out")"
"$PYTHON3" -c "import json,sys; c=json.load(open(sys.argv[1])); assert c['tie_word_embeddings'] is False, c" \
	"$T/mnt/config.json" || fail "g: config.json still ties"
gfs_umount "$T/mnt" || fail "unmount"
gfs_mount "$g/base" "$T/mnt" -o "lora=$g/adapter,lora_tied=peft" || fail "mount g peft"
"$PYTHON3" "$CHECK" "$T/mnt" "$g" -q || fail "g with lora_tied=peft"
cmp "$T/mnt/config.json" "$g/base/config.json" || fail "g peft: config.json changed"
gfs_umount "$T/mnt" || fail "unmount"

echo "== -o dtype=fp32 of the bf16 base: the float64 merge rounded once to fp32"
b="$D/b_llama_bf16"
gfs_mount "$b/base" "$T/mnt" -o "lora=$b/adapter,dtype=fp32" || fail "mount b fp32"
"$PYTHON3" "$CHECK" "$T/mnt" "$b" -q >"$T/out" || fail "b fp32: $(cat "$T/out")"
[ "$(grep -c 'FP64-EXACT(float32)' "$T/out")" -eq 1 ] && grep -q "FP64-EXACT(float32): 20" "$T/out" ||
	fail "b fp32 not exact: $(cat "$T/out")"
gfs_umount "$T/mnt" || fail "unmount"

echo "== a pytorch_model.bin base"
a="$D/a_llama_fp32"
gfs_mount "$a/base_bin" "$T/mnt" -o "lora=$a/adapter" || fail "mount a bin"
"$PYTHON3" "$CHECK" "$T/mnt" "$a" --scale-ulp 1 --allow-untied -q || fail "a (bin base)"
gfs_umount "$T/mnt" || fail "unmount"

echo "== gatherfs-inspect --lora"
"$INSPECT" ls --lora "$a/adapter" "$a/base" >"$T/ls" || fail "inspect ls"
[ "$(grep -c 'merged:lora$' "$T/ls")" -eq 4 ] || fail "ls: $(cat "$T/ls")"
"$INSPECT" export --lora "$a/adapter" "$a/base" "$T/m.safetensors" || fail "inspect export"
"$PYTHON3" "$CHECK" "$T/m.safetensors" "$a" --scale-ulp 1 -q || fail "export"
"$INSPECT" cat --lora "$a/adapter" "$a/base" model.layers.1.self_attn.v_proj.weight >"$T/v" ||
	fail "inspect cat"
"$PYTHON3" - "$T/v" "$a/merged_fp64.safetensors" <<'PY' || fail "inspect cat of a merged tensor"
import json, struct, sys
b = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])["model.layers.1.self_attn.v_proj.weight"]
assert open(sys.argv[1], "rb").read() == b[8 + n + h["data_offsets"][0]:8 + n + h["data_offsets"][1]]
PY

echo "== adapters built with the float64 reference (lora_ref.py)"
"$PYTHON3" "$TOOLS/make_lora_adapters.py" "$D" "$T/gen" || fail "make_lora_adapters.py"
for c in patterns emb_dora gpt2_bias; do
	gfs_mount "$(cat "$T/gen/$c/base")" "$T/mnt" -o "lora=$T/gen/$c/adapter" || fail "mount $c"
	"$PYTHON3" "$TOOLS/check_lora_ref.py" "$T/mnt" "$T/gen/$c" || fail "$c"
	gfs_umount "$T/mnt" || fail "unmount"
done
# the checker fails on the unmerged base
gfs_mount "$(cat "$T/gen/patterns/base")" "$T/mnt" || fail "mount base"
"$PYTHON3" "$TOOLS/check_lora_ref.py" "$T/mnt" "$T/gen/patterns" >/dev/null 2>&1 &&
	fail "check_lora_ref.py passed the unmerged base"
gfs_umount "$T/mnt" || fail "unmount"

echo "== bad adapters"
bad="$T/bad"
cp -r "$a/adapter" "$bad"
chmod -R u+w "$bad"
cp "$bad/adapter_config.json" "$T/cfg"
edit() { "$PYTHON3" -c "import json,sys; c=json.load(open(sys.argv[1])); c[sys.argv[2]]=json.loads(sys.argv[3]); json.dump(c,open(sys.argv[1],'w'))" "$bad/adapter_config.json" "$1" "$2"; }
edit peft_type '"ADALORA"'
expect_mount_fail 'peft_type is "ADALORA", not "LORA"' -o "lora=$bad" "$a/base" "$T/mnt"
cp "$T/cfg" "$bad/adapter_config.json"; edit r 0
expect_mount_fail 'r must be a positive integer' -o "lora=$bad" "$a/base" "$T/mnt"
cp "$T/cfg" "$bad/adapter_config.json"; printf '{"peft_type": "LORA", "r": 8, "lora_alpha": -1e999}' >"$bad/adapter_config.json"
expect_mount_fail 'lora_alpha must be a finite number' -o "lora=$bad" "$a/base" "$T/mnt"
cp "$T/cfg" "$bad/adapter_config.json"; edit lora_alpha 1e308; edit use_rslora true; edit r 8
printf '{"peft_type": "LORA", "r": 8, "lora_alpha": 1e308, "rank_pattern": {"q_proj": 1e-320}}' >"$bad/adapter_config.json"
expect_mount_fail 'r = ' -o "lora=$bad" "$a/base" "$T/mnt"
rm "$bad/adapter_config.json"
expect_mount_fail 'cannot open (a LoRA merge needs' -o "lora=$bad" "$a/base" "$T/mnt"
cp "$T/cfg" "$bad/adapter_config.json"
# another model's adapter: GPT-2's c_attn on a Llama base
expect_mount_fail "$D/c_gpt2_conv1d/adapter: the adapter targets transformer.h.0.attn.c_attn, but the base $a/base has no" \
	-o "lora=$D/c_gpt2_conv1d/adapter" "$a/base" "$T/mnt"
"$INSPECT" ls --lora "$D/c_gpt2_conv1d/adapter" "$a/base" >/dev/null 2>"$T/err" && fail "inspect --lora of another model's adapter"
grep -q "$D/c_gpt2_conv1d/adapter: the adapter targets" "$T/err" || fail "inspect --lora: $(cat "$T/err")"
# -o merge=lora of a checkpoint that is no PEFT checkpoint: says so
nopeft="needs a PEFT checkpoint (adapter_config.json and adapter weights); this is a"
expect_mount_fail "$a/base: -o merge=lora (--merge lora) $nopeft plain model" -o merge=lora "$a/base" "$T/mnt"
expect_mount_fail "$CKPTS/z1_ws2_fp32/checkpoint: -o merge=lora (--merge lora) $nopeft DeepSpeed ZeRO" \
	-o merge=lora "$CKPTS/z1_ws2_fp32/checkpoint" "$T/mnt"
for src in "$a/base" "$CKPTS/z1_ws2_fp32/checkpoint"; do
	"$INSPECT" ls --merge lora "$src" >/dev/null 2>"$T/err" && fail "inspect --merge lora $src succeeded"
	[ "$(wc -l < "$T/err")" -eq 1 ] || fail "inspect --merge lora $src: $(cat "$T/err")"
	grep -qF "$src: -o merge=lora (--merge lora) $nopeft" "$T/err" || fail "inspect --merge lora $src: $(cat "$T/err")"
done
# a bf16 adapter of the right names but wrong shapes, and one without lora_B
"$PYTHON3" - "$T" "$TOOLS" <<'PY' || fail "make bad adapters"
import os, shutil, sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import lora_ref
t = sys.argv[1]
for name, drop, shape in (("shape", None, (8, 32)), ("missing", "lora_B", (8, 64))):
    d = os.path.join(t, name)
    os.makedirs(d)
    shutil.copy(os.path.join(t, "cfg"), os.path.join(d, "adapter_config.json"))
    p = "base_model.model.model.layers.0.self_attn.q_proj."
    ts = {p + "lora_A.weight": ("F32", list(shape), np.ones(shape, np.float32)),
          p + "lora_B.weight": ("F32", [64, 8], np.ones((64, 8), np.float32))}
    ts = {k: v for k, v in ts.items() if not drop or drop not in k}
    lora_ref.write_safetensors(os.path.join(d, "adapter_model.safetensors"), ts, {"format": "pt"})
PY
expect_mount_fail 'do not fit it' -o "lora=$T/shape" "$a/base" "$T/mnt"
expect_mount_fail 'q_proj: the adapter lacks its lora_B.weight' -o "lora=$T/missing" "$a/base" "$T/mnt"
expect_mount_fail 'an empty LoRA tensor (shape \[0\]' \
	-o "lora=$top_srcdir/tests/data/lora-ds/z3_ws2_bf16/adapter_naive" "$b/base" "$T/mnt"
expect_mount_fail 'holds no LoRA tensor (an empty adapter file' \
	-o "lora=$top_srcdir/tests/data/lora-ds/z3_ws2_bf16/adapter_trainer_fallback" "$b/base" "$T/mnt"
echo "PASS"
