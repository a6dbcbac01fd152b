#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Mount the bundled sample checkpoint (a Hugging Face Llama trained with
# DeepSpeed ZeRO-3 on 2 ranks) and use it: ls, one tensor with cat,
# torch.load of the virtual pytorch_model.bin.  Run from the build tree, or
# with GATHERFS_BUILD=/usr/bin to use the installed gatherfs.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${GATHERFS_BUILD:-$top}
ckpt="$top/tests/data/ckpt/z3_ws2_bf16/checkpoint"
mnt=$(mktemp -d "${TMPDIR:-/tmp}/gatherfs-demo.XXXXXX")

echo "\$ ls $ckpt/global_step3"
ls "$ckpt/global_step3"
echo
echo "\$ gatherfs $ckpt $mnt"
"$build/gatherfs" "$ckpt" "$mnt"
trap 'fusermount3 -u "$mnt"; rmdir "$mnt"' EXIT
echo
echo "\$ ls -l $mnt"
ls -l "$mnt"
echo
echo "\$ head -6 $mnt/tensors/INDEX"
head -6 "$mnt/tensors/INDEX"
echo
echo "\$ ls -l $mnt/tensors | grep lm_head"
ls -l "$mnt/tensors" | grep lm_head
echo
echo "\$ od -A d -t f4 -N 16 $mnt/tensors/model.norm.weight"
od -A d -t f4 -N 16 "$mnt/tensors/model.norm.weight"
echo
echo "\$ python3 -c 'torch.load(\"$mnt/pytorch_model.bin\")'"
/usr/bin/python3 - "$mnt/pytorch_model.bin" <<'PY'
import sys, torch
sd = torch.load(sys.argv[1])
print(f"{len(sd)} tensors")
for k in list(sd)[:3]:
    print(f"  {k}: {sd[k].dtype} {tuple(sd[k].shape)}")
print("  lm_head.weight shares model.embed_tokens.weight's storage:",
      sd["lm_head.weight"].storage().data_ptr() == sd["model.embed_tokens.weight"].storage().data_ptr())
PY
