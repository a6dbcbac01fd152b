#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# user.gatherfs.sha256 on tensors/ files (docs/diff.md): on mounts of several
# formats (Megatron legacy and torch_dist, plain safetensors and .bin, DCP,
# ZeRO-3) and dtypes (-o dtype=bf16), every tensor file's attribute equals
# sha256sum of the file, is listed by listxattr (INDEX has none), and equals
# `gatherfs-inspect ls --sha256` with the same dtype; the two Megatron forms
# give the same attributes (the same model); `diff` of a mounted view's
# model.safetensors against its source says every tensor is equal.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
D="$top_srcdir/tests/data"
command -v sha256sum >/dev/null 2>&1 || skip "sha256sum not installed"

# check SRC MNT_NAME [OPT...]: mount, compare; leaves the attributes in $T/MNT_NAME.attr
check() {
	src=$1 name=$2
	shift 2
	mnt="$T/$name"
	gfs_mount "$src" "$mnt" "$@" || fail "mount $src $*"
	"$PYTHON3" - "$mnt" >"$T/$name.attr" <<'PY' || { gfs_umount "$mnt"; fail "$src $*: xattr"; }
import hashlib, os, sys
t = os.path.join(sys.argv[1], "tensors")
assert "user.gatherfs.sha256" not in os.listxattr(os.path.join(t, "INDEX"))
n = 0
for f in sorted(os.listdir(t)):
    p = os.path.join(t, f)
    if f == "INDEX" or os.path.islink(p):  # an alias: a link to its target's file
        continue
    with open(p, "rb") as fh:
        want = hashlib.sha256(fh.read()).hexdigest()
    assert "user.gatherfs.sha256" in os.listxattr(p), f
    for _ in range(2):  # the second answer comes from the mount's cache
        got = os.getxattr(p, "user.gatherfs.sha256").decode()
        assert got == want, (f, got, want)
    print(os.getxattr(p, "user.gatherfs.name").decode(), got)
    n += 1
assert n > 5, n
PY
	# sha256sum itself, on the first and the last tensor file
	for f in $(ls "$mnt/tensors" | grep -v '^INDEX$' | sed -n '1p;$p'); do
		a=$(getfattr --only-values -n user.gatherfs.sha256 "$mnt/tensors/$f" 2>/dev/null) ||
			a=$("$PYTHON3" -c 'import os,sys; print(os.getxattr(sys.argv[1], "user.gatherfs.sha256").decode())' "$mnt/tensors/$f")
		b=$(sha256sum <"$mnt/tensors/$f" | cut -d' ' -f1)
		[ "$a" = "$b" ] || fail "$src: tensors/$f: attribute $a, sha256sum $b"
	done
	gfs_umount "$mnt" || fail "unmount $mnt"
	# gatherfs-inspect ls --sha256 --json with the same reading options
	dt=
	case "$*" in *dtype=bf16*) dt="--dtype bf16" ;; esac
	case "$*" in *naming=megatron*) dt="$dt --naming megatron" ;; esac
	# shellcheck disable=SC2086
	"$INSPECT" ls --sha256 --json $dt "$src" 2>/dev/null >"$T/$name.json" || fail "ls --sha256 $src"
	"$PYTHON3" - "$T/$name.json" "$T/$name.attr" <<'PY' || fail "$src $*: ls --sha256 differs from the xattrs"
import json, sys
ls = {e["name"]: e["sha256"] for e in json.load(open(sys.argv[1]))
      if e["dtype"] != "object" and e["alias_of"] is None}
attr = dict(l.split(" ") for l in open(sys.argv[2]).read().splitlines())
assert ls == attr, (sorted(set(ls.items()) ^ set(attr.items())))[:4]
PY
	echo "ok: $src $*: $(wc -l <"$T/$name.attr") tensors"
}

check "$D/megatron/moe_ep2/legacy_torch" moe_legacy
check "$D/megatron/moe_ep2/training_torch_dist" moe_dist
cmp "$T/moe_legacy.attr" "$T/moe_dist.attr" || fail "the two Megatron forms of one model: other hashes"
check "$D/megatron/tp2_pp1/legacy_torch" tp2_meg -o naming=megatron
check "$D/plain/llama_bf16" llama
check "$D/plain/llama_bf16_bin" llama_bin
check "$D/plain/llama_fp32" llama_fp32_bf16 -o dtype=bf16
check "$D/dcp/fsdp2_ws2/checkpoint" dcp
check "$D/ckpt/z3_ws2_bf16/checkpoint" zero3

# diff a mounted view's model.safetensors with its source: every tensor equal
gfs_mount "$D/ckpt/z3_ws2_bf16/checkpoint" "$T/view" || fail "mount"
"$INSPECT" diff --json "$D/ckpt/z3_ws2_bf16/checkpoint" "$T/view/model.safetensors" >"$T/d.jsonl" ||
	{ gfs_umount "$T/view"; fail "diff of a ZeRO-3 save and its mounted model.safetensors: exit $?"; }
gfs_umount "$T/view" || fail "unmount"
tail -n 1 "$T/d.jsonl" | grep -q '"differs":0,"only_a":0,"only_b":0,"mismatch":0' ||
	fail "diff of the mounted view: $(tail -n 1 "$T/d.jsonl")"
echo "PASS: user.gatherfs.sha256"
