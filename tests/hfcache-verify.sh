#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Hugging Face cache repositories (built here from tests/data/plain/llama_bf16
# as huggingface_hub lays them out: model.safetensors an LFS blob named by
# its SHA-256, config.json and generation_config.json git blobs named by
# their git blob SHA-1): gatherfs-inspect says on stderr which snapshot and
# through which ref it read; `verify` checks every blob against its name
# (exit 0, no UNVERIFIED line), and a blob whose bytes changed, LFS or git,
# is exit 1 naming it.  -o dtype=fp32 (and --dtype fp32) serve a config.json
# whose dtype says float32, for a cache snapshot (transformers 5's "dtype")
# and a DeepSpeed save passed through ("torch_dtype" added); without it
# config.json is the checkpoint's own bytes.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
P="$top_srcdir/tests/data/plain/llama_bf16"
DS="$top_srcdir/tests/data/ckpt/z2_ws2_bf16/checkpoint"
[ -d "$P" ] && [ -d "$DS" ] || skip "fixtures missing"
R="$T/hub/models--org--tiny"
REV=0123456789abcdef0123456789abcdef01234567
mkdir -p "$R/blobs" "$R/refs" "$R/snapshots/$REV"

# hashname FILE: the name huggingface_hub stores FILE under in blobs/
hashname() {
	"$PYTHON3" - "$1" <<'PY'
import hashlib, sys
data = open(sys.argv[1], "rb").read()
if sys.argv[1].endswith(".safetensors"):
    print(hashlib.sha256(data).hexdigest())
else:
    print(hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest())
PY
}
for f in "$P"/*; do
	h=$(hashname "$f")
	cp "$f" "$R/blobs/$h"
	ln -s "../../blobs/$h" "$R/snapshots/$REV/${f##*/}"
done
printf '%s' $REV >"$R/refs/main"
ST=$(hashname "$P/model.safetensors")
CFG=$(hashname "$P/config.json")

"$INSPECT" verify "$R" >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 0 ] || fail "verify: exit status $rc, want 0: $(cat "$T/out" "$T/err")"
grep -q "OK: 3 Hugging Face cache blobs match" "$T/out" || fail "verify: $(cat "$T/out")"
grep -q UNVERIFIED "$T/out" && fail "verify: $(cat "$T/out")"
grep -q "note: Hugging Face cache: snapshot $REV, named by refs/main" "$T/err" ||
	fail "verify: no note of the snapshot and ref: $(cat "$T/err")"
"$INSPECT" ls --tag $REV "$R" 2>"$T/err" >/dev/null || fail "ls --tag"
grep -q "snapshot $REV (given)" "$T/err" || fail "ls --tag: $(cat "$T/err")"
echo "ok: verify: $(grep 'cache blobs' "$T/out"); $(head -1 "$T/err")"

# bad BLOB OFFSET: a copy of the repository with one byte of BLOB changed
# fails verify (exit 1) naming the blob.
bad() {
	rm -rf "$T/badhub"
	mkdir -p "$T/badhub"
	cp -a "$R" "$T/badhub/"
	B="$T/badhub/models--org--tiny"
	printf 'X' | dd of="$B/blobs/$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
	"$INSPECT" verify "$B" >"$T/out" 2>"$T/err"
	rc=$?
	[ $rc -eq 1 ] || fail "blob $1 changed: exit status $rc, want 1: $(cat "$T/out" "$T/err")"
	grep -q "^BLOB DIFFERS: .*/snapshots/$REV/.*: blobs/$1 " "$T/out" ||
		fail "blob $1 changed: not named: $(cat "$T/out")"
	echo "ok: $(cat "$T/out")"
}
bad "$ST" 5000
bad "$CFG" 3

# -o dtype=fp32: config.json says float32; without it, the file itself
cfg_dtype() {
	"$PYTHON3" -c 'import json, sys; c = json.load(open(sys.argv[1])); print(c.get("torch_dtype"), c.get("dtype"))' "$1"
}
"$INSPECT" cat --dtype fp32 "$R" config.json >"$T/c1" 2>/dev/null || fail "cat --dtype fp32 config.json"
[ "$(cfg_dtype "$T/c1")" = "None float32" ] || fail "cat --dtype fp32 config.json: $(cfg_dtype "$T/c1")"
gfs_mount "$R" "$T/m1" -o dtype=fp32 || fail "mount -o dtype=fp32"
gfs_mount "$DS" "$T/m2" -o dtype=fp32 || fail "mount DeepSpeed -o dtype=fp32"
gfs_mount "$R" "$T/m3" || fail "mount"
timeout 20 cat "$T/m1/config.json" >"$T/m1.cfg" || fail "read config.json"
timeout 20 cat "$T/m2/config.json" >"$T/m2.cfg" || fail "read config.json (DeepSpeed)"
timeout 20 cat "$T/m3/config.json" >"$T/m3.cfg" || fail "read config.json (no dtype)"
for m in m1 m2 m3; do
	gfs_umount "$T/$m" || fail "unmount $m"
done
cmp -s "$T/c1" "$T/m1.cfg" || fail "cat --dtype fp32 and the mount's config.json differ"
[ "$(cfg_dtype "$T/m1.cfg")" = "None float32" ] || fail "cache -o dtype=fp32: $(cfg_dtype "$T/m1.cfg")"
[ "$(cfg_dtype "$T/m2.cfg")" = "float32 None" ] || fail "DeepSpeed -o dtype=fp32: $(cfg_dtype "$T/m2.cfg")"
cmp -s "$P/config.json" "$T/m3.cfg" || fail "without -o dtype config.json is not the file's bytes"
echo "ok: -o dtype=fp32: cache $(cfg_dtype "$T/m1.cfg"), DeepSpeed $(cfg_dtype "$T/m2.cfg")"
echo "hfcache-verify: OK"
