#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# FP8 checkpoints (tests/data/fp8, README there; docs/fp8.md) on real mounts:
#  - as stored: model.safetensors of the mount equals the source's tensors (float8 dtypes);
#  - -o dequant=bf16: model.safetensors holds exactly truth_bf16.safetensors' tensors, bit for
#    bit; config.json has no quantization_config and says bfloat16; a sharded view's index
#    names them; gatherfs-inspect export --dequant bf16 writes the same tensors; tensors/ and
#    gatherfs-inspect cat give a weight's bytes, as stored and dequantized; gatherfs-inspect
#    diff --a-dequant bf16 finds the checkpoint SAME as the truth; stats decodes FP8;
#  - -o dequant=fp32: each weight is float32(q) * float32(scale), computed by fp8_check.py;
#  - the same for MoE experts stacked [E, M, N] (fp8_check.py stack);
#  - a LoRA adapter merged onto the dequantized weights (fp8_check.py lora); an HF cache snapshot;
#  - in the compat root (skipped without it): torch.load of the as-stored pytorch_model.bin
#    holds float8 tensors equal to the source, from_pretrained of the dequantized mount gives
#    truth_logits.pt bit for bit; a pytorch_model.bin written by torch.save mounts dequantized;
#  - hostile copies refused with one line naming the tensor or config and the file.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
D="$top_srcdir/tests/data/fp8"
CHECK="$PYTHON3 $top_srcdir/tests/fp8_check.py"
COMPAT_ROOT=${GATHERFS_COMPAT_ROOT:-/var/cache/gatherfs/compat-root}

n=0 TRIPLES="" MNTS=""
for case in "$D"/*/; do
	case=${case%/}
	name=$(basename "$case")
	case $name in *.truth) continue ;; esac
	truth="$case.truth/truth_bf16.safetensors"
	echo "== $name"
	gfs_mount "$case" "$T/s-$name" || fail "mount $name"
	$CHECK same "$T/s-$name/model.safetensors" "$case" || fail "$name: as stored"
	gfs_mount "$case" "$T/d-$name" -o dequant=bf16 || fail "mount $name -o dequant=bf16"
	$CHECK same "$T/d-$name/model.safetensors" "$truth" || fail "$name: dequant=bf16"
	$CHECK config "$T/d-$name/config.json" bfloat16 || fail "$name: config.json"
	# one FP8 weight through tensors/ and gatherfs-inspect cat, as stored and dequantized
	w=model.layers.0.self_attn.o_proj.weight
	$CHECK raw "$T/s-$name/tensors/$w" "$case" "$w" || fail "$name: tensors/$w as stored"
	$CHECK raw "$T/d-$name/tensors/$w" "$truth" "$w" || fail "$name: tensors/$w dequantized"
	timeout 60 "$INSPECT" cat --dequant bf16 "$case" "$w" >"$T/cat" || fail "$name: inspect cat"
	$CHECK raw "$T/cat" "$truth" "$w" || fail "$name: inspect cat --dequant bf16 $w"
	# gatherfs-inspect diff of the dequantized checkpoint against the truth file
	timeout 60 "$INSPECT" diff --a-dequant bf16 "$case" "$truth" >"$T/diff" ||
		fail "$name: inspect diff --a-dequant bf16: $(tail -1 "$T/diff")"
	grep -q "^SAME: [0-9]* tensors: [0-9]* equal, 0 close, 0 differ, 0 only in A, 0 only in B" "$T/diff" ||
		fail "$name: inspect diff: $(tail -1 "$T/diff")"
	TRIPLES="$TRIPLES $T/s-$name $T/d-$name $case" MNTS="$MNTS $T/s-$name $T/d-$name"
	gfs_mount "$case" "$T/f-$name" -o dequant=fp32 || fail "mount $name -o dequant=fp32"
	$CHECK fp32 "$T/f-$name/model.safetensors" "$case" || fail "$name: dequant=fp32"
	gfs_umount "$T/f-$name" || fail "unmount"
	gfs_mount "$case" "$T/h-$name" -o dequant=bf16,shard_size=200K || fail "mount $name sharded"
	$CHECK same "$T/h-$name" "$truth" || fail "$name: sharded dequant=bf16"
	$CHECK index "$T/h-$name/model.safetensors.index.json" "$truth" || fail "$name: index"
	gfs_umount "$T/h-$name" || fail "unmount"
	timeout 60 "$INSPECT" export --dequant bf16 "$case" "$T/x.safetensors" ||
		fail "$name: inspect export --dequant bf16"
	$CHECK same "$T/x.safetensors" "$truth" || fail "$name: export --dequant bf16"
	rm -f "$T/x.safetensors"
	n=$((n + 1))
done
[ $n -eq 5 ] || fail "$n cases, expected 5"
# stats decodes FP8: block-quantized E4M3 weights reach +-448 (the block maxima), UE8M0 scales
# are powers of two
timeout 60 "$INSPECT" stats "$D/qwen3_block128" >"$T/stats" || fail "inspect stats"
grep -q "^model.layers.0.mlp.down_proj.weight  *float8_e4m3fn  *-448  *448 " "$T/stats" ||
	fail "stats of an E4M3 weight: $(grep down_proj.weight "$T/stats")"

# Stacked experts (transformers' fused naming): mlp.experts.P [E, M, N] with P_scale_inv
# [E, gm, gn], made from qwen3_moe_ue8m0 and its truth by stacking the per-expert tensors.
$CHECK stack "$D/qwen3_moe_ue8m0" "$T/stacked" || fail "stack"
gfs_mount "$T/stacked" "$T/d-stacked" -o dequant=bf16 || fail "mount stacked"
$CHECK same "$T/d-stacked/model.safetensors" "$T/stacked.truth/truth_bf16.safetensors" ||
	fail "stacked: dequant=bf16"
gfs_umount "$T/d-stacked" || fail "unmount"
gfs_mount "$T/stacked" "$T/f-stacked" -o dequant=fp32 || fail "mount stacked fp32"
$CHECK fp32 "$T/f-stacked/model.safetensors" "$T/stacked" || fail "stacked: dequant=fp32"
gfs_umount "$T/f-stacked" || fail "unmount"

if [ "$(id -u)" = 0 ] && [ -x "$COMPAT_ROOT/usr/bin/python3" ]; then
	# shellcheck disable=SC2086
	COMPAT_BINDS="$top_srcdir $T" timeout 600 "$top_srcdir/tests/compat/compat-run.sh" \
		"$COMPAT_ROOT" python3 "$top_srcdir/tests/compat/check_fp8.py" $TRIPLES ||
		fail "compat root: see the FAIL lines above"
	# a pytorch_model.bin that torch 2.14 itself wrote (float8 through _rebuild_tensor_v3 and
	# torch.storage.UntypedStorage) as the source, dequantized
	mkdir "$T/bin-src"
	cp "$D/qwen3_moe_ue8m0/config.json" "$T/bin-src/"
	COMPAT_BINDS="$top_srcdir $T" timeout 300 "$top_srcdir/tests/compat/compat-run.sh" \
		"$COMPAT_ROOT" python3 -c 'import sys, glob, torch; from safetensors.torch import load_file
d = {}
[d.update(load_file(f)) for f in sorted(glob.glob(sys.argv[1] + "/*.safetensors"))]
torch.save(d, sys.argv[2])' "$D/qwen3_moe_ue8m0" "$T/bin-src/pytorch_model.bin" || fail "torch.save"
	gfs_mount "$T/bin-src" "$T/d-bin" -o dequant=bf16 || fail "mount torch.save source"
	$CHECK same "$T/d-bin/model.safetensors" "$D/qwen3_moe_ue8m0.truth/truth_bf16.safetensors" ||
		fail "torch.save source: dequant=bf16"
	gfs_umount "$T/d-bin" || fail "unmount"
else
	echo "skip: torch.load and from_pretrained checks (no compat root at $COMPAT_ROOT, or not root)"
fi
for mnt in $MNTS; do
	gfs_umount "$mnt" || fail "unmount $mnt"
done

# A Hugging Face cache snapshot (links into blobs/) of the sharded qwen3_moe_ue8m0: dequantized
# the same, config.json (a link to a blob) served without quantization_config.
R="$T/hub/models--org--fp8"
REV=0123456789abcdef0123456789abcdef01234567
mkdir -p "$R/blobs" "$R/refs" "$R/snapshots/$REV"
for f in "$D/qwen3_moe_ue8m0"/*; do
	h=$(sha256sum <"$f" | cut -c1-64)
	cp "$f" "$R/blobs/$h"
	ln -s "../../blobs/$h" "$R/snapshots/$REV/${f##*/}"
done
printf '%s' $REV >"$R/refs/main"
gfs_mount "$R" "$T/hf" -o dequant=bf16 || fail "mount the HF cache repository"
$CHECK same "$T/hf/model.safetensors" "$D/qwen3_moe_ue8m0.truth/truth_bf16.safetensors" ||
	fail "HF cache: dequant=bf16"
$CHECK config "$T/hf/config.json" bfloat16 || fail "HF cache: config.json"
gfs_umount "$T/hf" || fail "unmount"

# A LoRA adapter merged onto dequantized FP8 weights (-o dequant=bf16,lora=DIR): each target
# W + 2 (B @ A), W the float32 dequantized value, rounded once (fp8_check.py lora), on a
# per-channel and a 128x128-block checkpoint (v_proj 64 rows: ragged); the other weights stay the dequantized truth.
for c in llama_channel_bf16 qwen3_block128; do
	$CHECK adapter "$D/$c" "$T/ad-$c" || fail "adapter"
	gfs_mount "$D/$c" "$T/l-$c" -o "dequant=bf16,lora=$T/ad-$c" || fail "mount $c lora"
	$CHECK lora "$T/l-$c/model.safetensors" "$D/$c" "$T/ad-$c" || fail "$c: lora on dequant"
	timeout 60 "$INSPECT" export --dequant bf16 --lora "$T/ad-$c" "$D/$c" "$T/x.safetensors" ||
		fail "$c: inspect export --dequant --lora"
	$CHECK same "$T/x.safetensors" "$T/l-$c/model.safetensors" || fail "$c: export differs"
	rm -f "$T/x.safetensors"
	gfs_umount "$T/l-$c" || fail "unmount"
done

# Refusals: hostile copies of qwen3_block128, each one line naming what is wrong and where.
B="$T/bad"
mkdir "$T/mnt"
S="model.layers.0.mlp.down_proj.weight_scale_inv"
fresh() {
	rm -rf "$B"
	cp -r "$D/qwen3_block128" "$B"
	chmod -R u+w "$B"
}
cfg() { # cfg OLD NEW: replace OLD by NEW in config.json
	sed "s/$1/$2/" "$B/config.json" >"$B/c" && mv "$B/c" "$B/config.json"
}
fresh
expect_mount_fail "down_proj.weight is F8_E4M3: FP8 is not converted" "$B" "$T/mnt" -o dtype=bf16
cfg '"quant_method": "fp8"' '"quant_method": "bitsandbytes"'
expect_mount_fail 'config.json: quantization_config: quant_method "bitsandbytes" is not supported' \
	"$B" "$T/mnt" -o dequant=bf16
fresh
cfg '"fmt": "e4m3"' '"fmt": "e3m4"'
expect_mount_fail 'config.json: quantization_config: fmt "e3m4" is not supported' "$B" "$T/mnt" -o dequant=bf16
fresh
cfg '"activation_scheme"' '"scale_fmt": "ue4m3", "activation_scheme"'
expect_mount_fail 'scale_fmt "ue4m3" is not supported' "$B" "$T/mnt" -o dequant=bf16
fresh
cfg '"quantization_config"' '"no_quantization_config"'
expect_mount_fail 'config.json: no quantization_config' "$B" "$T/mnt" -o dequant=bf16
fresh
tr -d '\n' <"$B/config.json" | sed 's/"weight_block_size": *\[ *128, *128 *\]/"weight_block_size": [64, 128]/' >"$B/c"
mv "$B/c" "$B/config.json"
grep -q '\[64, 128\]' "$B/config.json" || fail "config edit"
expect_mount_fail "model.safetensors: scale model.layers.0.[a-z_.]*weight_scale_inv \[.*\] is not the block grid of weight .*block size \[64, 128\]" \
	"$B" "$T/mnt" -o dequant=bf16
fresh
$CHECK edit "$B/model.safetensors" "\"$S\":{\"dtype\":\"F32\",\"shape\":[1,2]" "\"$S\":{\"dtype\":\"F32\",\"shape\":[2,1]" || fail "edit"
expect_mount_fail "model.safetensors: scale $S \[2, 1\] is not the block grid of weight model.layers.0.mlp.down_proj.weight \[128, 256\]" \
	"$B" "$T/mnt" -o dequant=bf16
fresh
$CHECK edit "$B/model.safetensors" "\"$S\":{\"dtype\":\"F32\"" "\"$S\":{\"dtype\":\"I32\"" || fail "edit"
expect_mount_fail "model.safetensors: scale $S is I32: not supported (F32, BF16, F8_E8M0)" "$B" "$T/mnt" -o dequant=bf16
fresh
$CHECK edit "$B/model.safetensors" "\"$S\"" "\"model.layers.0.mlp.down_proj.weight_scale_inX\"" || fail "edit"
expect_mount_fail "model.safetensors: FP8 weight model.layers.0.mlp.down_proj.weight has no scale $S" \
	"$B" "$T/mnt" -o dequant=bf16
fresh
$CHECK edit "$B/model.safetensors" "\"model.layers.0.mlp.down_proj.weight\"" "\"model.layers.0.mlp.down_proj.weighX\"" || fail "edit"
expect_mount_fail "model.safetensors: scale $S has no FP8 weight model.layers.0.mlp.down_proj.weight" \
	"$B" "$T/mnt" -o dequant=bf16
$CHECK edit "$B/model.safetensors" "\"$S\"" "\"model.layers.0.mlp.down_proj.weighX_scale_inv\"" || fail "edit"
expect_mount_fail "model.safetensors: tensor model.layers.0.mlp.down_proj.weighX is F8_E4M3 but no quantized weight" \
	"$B" "$T/mnt" -o dequant=bf16
if timeout 60 "$INSPECT" ls --dequant bf16 "$B" >/dev/null 2>"$T/ierr"; then
	fail "inspect ls --dequant accepted a stray FP8 tensor"
fi
if [ "$(wc -l <"$T/ierr")" -ne 1 ] || ! grep -q "down_proj.weighX is F8_E4M3" "$T/ierr"; then
	fail "inspect: $(cat "$T/ierr")"
fi
# compressed-tensors: an ignored module stored as FP8
rm -rf "$B" && cp -r "$D/llama_channel_bf16" "$B" && chmod -R u+w "$B"
tr -d '\n' <"$B/config.json" | sed 's/"ignore": *\[ *"lm_head" *\]/"ignore": ["lm_head", "re:.*layers[.]1[.]mlp[.]up_proj"]/' >"$B/c"
mv "$B/c" "$B/config.json"
expect_mount_fail "model.safetensors: weight model.layers.1.mlp.up_proj.weight is FP8, but .*config.json ignores its module" \
	"$B" "$T/mnt" -o dequant=bf16
sed 's/"symmetric": true/"symmetric": false/' "$D/llama_channel_bf16/config.json" >"$B/config.json"
grep -q '"symmetric": false' "$B/config.json" || fail "config edit"
expect_mount_fail "config.json: quantization_config: group group_0: only symmetric 8-bit float weights" \
	"$B" "$T/mnt" -o dequant=bf16
cp "$D/llama_channel_bf16/config.json" "$B/config.json"
$CHECK edit "$B/model.safetensors" '"model.layers.0.post_attention_layernorm.weight"' \
	'"model.layers.0.post_attn.weight_zero_point"' || fail "edit"
expect_mount_fail "model.safetensors: model.layers.0.post_attn.weight_zero_point: asymmetric quantization (a zero point) is not supported" \
	"$B" "$T/mnt" -o dequant=bf16
echo "PASS: $n FP8 cases"
