#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Mount plain model files (tests/data/plain and the cases
# tests/tools/make_plain.py writes: views into shared storages, every dtype,
# sharded safetensors and .bin) and check every view against the reference
# readers (tests/tools/plain_ref.py): pytorch_model.bin through torch.load
# (keys, order, dtypes, shapes, bytes; tied pairs share one storage, nothing
# else does), model.safetensors, tensors/, layout.json, the passed-through
# files; -o dtype=bf16, -o shard_size=; a single file as the source; a dir
# holding both DeepSpeed shards and plain files (the shards win, the plain
# files are hidden with a log line, -o format=plain picks them); a dir with
# two plain formats; an adapter-only dir with -o format=plain; broken files
# fail at mount time with one line and leave no mount.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
"$PYTHON3" -c "import torch" 2>/dev/null || skip "python3-torch not installed"
PLAIN="$top_srcdir/tests/data/plain"
REF="$top_srcdir/tests/tools/plain_ref.py"
G="$T/gen"
"$PYTHON3" "$top_srcdir/tests/tools/make_plain.py" good "$G" || fail "make_plain.py good"
mkdir -p "$T/empty"

# check_source SRC ROOT: mount SRC (its passed-through files are those of
# ROOT), default and -o dtype=bf16, against the reference.
check_source() {
	src=$1 root=$2
	shift 2
	"$PYTHON3" "$REF" tsv "$src" "$T/want" || fail "plain_ref.py tsv $src"
	for mode in default bf16; do
		mnt="$T/mnt-$mode"
		opt=
		[ $mode = bf16 ] && opt="-o dtype=bf16"
		echo "== $src ($mode)"
		# shellcheck disable=SC2086
		gfs_mount "$src" "$mnt" $opt "$@" || fail "mount $src ($mode)"
		check_views "$mnt" "$T/want.$mode.tsv" "$root"
		"$PYTHON3" "$REF" aliases "$mnt" "$src" || fail "aliases of $src ($mode)"
		gfs_umount "$mnt" || fail "unmount $mnt"
	done
}

for c in llama_fp32 llama_bf16 llama_bf16_bin; do
	check_source "$PLAIN/$c" "$PLAIN/$c"
done
check_source "$PLAIN/lomo_ws2_fp32/old_save.pt" "$T/empty"
check_source "$PLAIN/lomo_ws3_bf16/old_save.pt" "$T/empty"
check_source "$PLAIN/adapter" "$PLAIN/adapter" -o format=plain
for c in views sharded_st sharded_bin; do
	check_source "$G/$c" "$G/$c"
done

# -o shard_size= over plain sources: Hugging Face shards and their indexes.
for src in "$PLAIN/llama_bf16_bin" "$PLAIN/lomo_ws2_fp32/old_save.pt" "$G/sharded_bin"; do
	"$PYTHON3" "$REF" tsv "$src" "$T/want" || fail "plain_ref.py tsv $src"
	mnt="$T/mnt-shards"
	gfs_mount "$src" "$mnt" -o shard_size=64K -o dtype=bf16 || fail "mount -o shard_size $src"
	timeout 300 "$PYTHON3" "$top_srcdir/tests/tools/check_shards.py" "$mnt" "$T/want.bf16.tsv" ||
		fail "check_shards.py $src"
	gfs_umount "$mnt" || fail "unmount $mnt"
done

# DeepSpeed shards and plain files in one dir (HF Trainer writes both): the
# shards win, the plain file is hidden with a log line; -o format=plain
# mounts the plain file.
Z=z3_ws2_bf16
cp -r "$CKPTS/$Z/checkpoint" "$T/mixed"
cp "$PLAIN/llama_bf16/model.safetensors" "$T/mixed/"
mnt="$T/mnt-mixed"
gfs_mount "$T/mixed" "$mnt" 2> "$T/err" || fail "mount mixed: $(cat "$T/err")"
grep -q "gatherfs: $T/mixed: hiding model.safetensors: the mount shows the deepspeed checkpoint (-o format=plain" "$T/err" ||
	fail "mixed: no log line: $(cat "$T/err")"
check_cat "$mnt" "$CKPTS/$Z/.expected-default.tsv"
"$PYTHON3" "$top_srcdir/tests/tools/check_safetensors.py" "$mnt/model.safetensors" "$CKPTS/$Z/.expected-default.tsv" ||
	fail "mixed: model.safetensors is not the DeepSpeed model"
[ "$(ls "$mnt" | tr '\n' ' ')" = "config.json generation_config.json global_step3_universal latest_universal layout.json model.safetensors optim pytorch_model.bin tensors " ] ||
	fail "mixed: root lists $(ls "$mnt" | tr '\n' ' ')"
gfs_umount "$mnt" || fail "unmount $mnt"
gfs_mount "$T/mixed" "$mnt" -o shard_size=64K 2> "$T/err" || fail "mount mixed, shards: $(cat "$T/err")"
[ -e "$mnt/model.safetensors" ] && fail "mixed, -o shard_size: the plain model.safetensors passed through"
gfs_umount "$mnt" || fail "unmount $mnt"
"$PYTHON3" "$REF" tsv "$PLAIN/llama_bf16" "$T/want" || fail "plain_ref.py tsv"
gfs_mount "$T/mixed" "$mnt" -o format=plain 2> "$T/err" || fail "mount mixed -o format=plain"
[ -s "$T/err" ] && fail "mixed -o format=plain: unexpected output: $(cat "$T/err")"
check_cat "$mnt" "$T/want.default.tsv"
gfs_umount "$mnt" || fail "unmount $mnt"
echo "ok: DeepSpeed shards win over plain files, -o format=plain"

# Two plain formats: model.safetensors wins (as in transformers), the other is hidden.
mkdir "$T/both"
cp "$PLAIN/llama_bf16/"* "$T/both/"
cp "$PLAIN/llama_bf16_bin/pytorch_model.bin" "$T/both/"
gfs_mount "$T/both" "$mnt" -o shard_size=64K 2> "$T/err" || fail "mount both"
grep -q "$T/both: hiding pytorch_model.bin: the mount shows the model it was imported from (model.safetensors)" "$T/err" ||
	fail "both: no log line: $(cat "$T/err")"
check_cat "$mnt" "$T/want.default.tsv"
[ -e "$mnt/pytorch_model.bin" ] && fail "both: the plain pytorch_model.bin passed through"
gfs_umount "$mnt" || fail "unmount $mnt"
echo "ok: model.safetensors wins over pytorch_model.bin"

# An adapter-only dir is no model dir unless asked.
mkdir -p "$T/mnt"
expect_mount_fail "adapter: no known checkpoint format" "$PLAIN/adapter" "$T/mnt"

# Broken files: one line, no mount.
"$PYTHON3" "$top_srcdir/tests/tools/make_plain.py" bad "$G/sharded_st" "$T/bad" \
	truncated-header overlap missing-shard index-missing &&
	"$PYTHON3" "$top_srcdir/tests/tools/make_plain.py" bad "$G/views" "$T/bad" bin-truncated ||
	fail "make_plain.py bad"
expect_mount_fail "model-00001-of-00003.safetensors: the safetensors header .* runs past the end" "$T/bad/truncated-header" "$T/mnt"
expect_mount_fail "model-00001-of-00003.safetensors: tensors .* overlap" "$T/bad/overlap" "$T/mnt"
expect_mount_fail "model-00002-of-00003.safetensors: cannot open" "$T/bad/missing-shard" "$T/mnt"
expect_mount_fail "holds y.i64, which model.safetensors.index.json does not list" "$T/bad/index-missing" "$T/mnt"
expect_mount_fail "pytorch_model.bin: not a zip archive" "$T/bad/bin-truncated" "$T/mnt"
echo "PASS"
