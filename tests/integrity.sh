#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Source integrity (issue 12): a shard with one flipped byte.  Every zip
# record of a shard carries a CRC-32; gatherfs checks the stored CRC of each
# record tensor bytes come from (the whole record, padding included):
#   - `gatherfs-inspect verify` exits 1 naming shard, record and tensors;
#   - the mount's pytorch_model.bin never serves the byte and never shows a
#     central directory with CRCs of corrupt data (EIO), through read(2),
#     zipfile and torch.load, with and without the CRC cache;
#   - after that pass, every view byte of the record fails with EIO, bytes
#     of other records are still served;
#   - with the default -o verify=read, tensors/ and model.safetensors fail
#     from their first read (the record is checked on first use);
#   - -o verify refuses to mount a corrupt checkpoint, mounts a clean one;
#   - -o verify=off serves the corrupt bytes (documented as unsafe);
#   - export of the torch zip fails too;
#   - the same for a byte of record padding that no view serves, and for a
#     zstd DCP checkpoint with a corrupt frame.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
case="$CKPTS/z3_ws2_fp32"
[ -d "$case/checkpoint" ] || skip "fixture $case missing"
FLIP="$top_srcdir/tests/tools/flip_byte.py"
RC="$MOUNT_TOOLS/read_corrupt.py"

# fresh CASE: a writable copy of fixture CASE in $T/ck and its layout in $T/l.json.
fresh() {
	rm -rf "$T/ck"
	cp -r "$1" "$T/ck" && chmod -R u+w "$T/ck" || fail "copy $1"
	"$INSPECT" layout "$T/ck" >"$T/l.json" || fail "layout $1"
}

# flip TENSOR MODE: flip a byte (tests/tools/flip_byte.py), set SHARD, RECORD...
flip() {
	"$PYTHON3" "$FLIP" "$T/l.json" "$1" "$2" >"$T/flip" || fail "flip_byte.py $1 $2"
	. "$T/flip"
	echo "flipped byte $OFFSET of $SHARD ($RECORD; tensors $TENSORS)"
}

# tensor_file NAME: the tensors/ file name of NAME.
tensor_file() {
	printf '%s' "$1" | sed 's/%/%25/g; s|/|%2F|g'
}

# verify_fails: verify exits 1 with one CORRUPT line naming $SHARD, $RECORD
# (a pattern) and every tensor of $TENSORS (STATE:NAME: "STATE of NAME").
verify_fails() {
	rc=0
	"$INSPECT" verify "$T/ck" >"$T/v.out" 2>"$T/v.err" || rc=$?
	[ $rc -eq 1 ] || fail "verify of a corrupt checkpoint: exit status $rc: $(cat "$T/v.out")"
	[ "$(grep -c '^CORRUPT: ' "$T/v.out")" -eq 1 ] || fail "verify: $(cat "$T/v.out")"
	line=$(grep '^CORRUPT: ' "$T/v.out")
	case $line in
	"CORRUPT: $SHARD: record "*) ;;
	*) fail "verify does not name $SHARD: $line" ;;
	esac
	printf '%s\n' "$line" | grep -q -- "$RECORD" || fail "verify does not name $RECORD: $line"
	for t in $TENSORS; do
		pat=$(printf '%s' "$t" | sed 's/^\([a-z_]*\):/\1 of /')
		printf '%s\n' "$line" | grep -q -- "[:,] $pat\(,\|$\)" || fail "verify does not name tensor $pat: $line"
	done
	grep -q "1 of [0-9]* checksummed records are corrupt" "$T/v.err" || fail "verify: $(cat "$T/v.err")"
	echo "ok: verify: $line"
}

# ---- a clean checkpoint verifies, and mounts with -o verify
fresh "$case/checkpoint"
"$INSPECT" verify "$T/ck" >"$T/v.out" || fail "verify of a clean checkpoint: $(cat "$T/v.out")"
grep -q "^OK: [1-9][0-9]* zip records match their stored CRC-32" "$T/v.out" ||
	fail "verify does not say what it checked: $(cat "$T/v.out")"
gfs_mount "$T/ck" "$T/mnt" -o verify -o nocrccache || fail "mount -o verify of a clean checkpoint"
check_views "$T/mnt" "$case/.expected-default.tsv" "$T/ck"
gfs_umount "$T/mnt" || fail "unmount"

# ---- one flipped payload byte (a ZeRO-3 fp32 partition of rank 0)
flip mix payload
verify_fails
# export of the torch zip checks as the mount does, and leaves nothing
mkdir "$T/exp"
"$INSPECT" export "$T/ck" "$T/exp/pytorch_model.bin" 2>"$T/x.err" && fail "export of a corrupt checkpoint"
grep -q "$RECORD.*does not match its stored CRC-32" "$T/x.err" || fail "export: $(cat "$T/x.err")"
[ -z "$(ls -A "$T/exp")" ] || fail "export left $(ls -A "$T/exp")"
# so does the export to safetensors (every view is verified)
"$INSPECT" export "$T/ck" "$T/exp/model.safetensors" 2>"$T/x.err" && fail "export to safetensors of a corrupt checkpoint"
grep -q "$RECORD.*does not match its stored CRC-32" "$T/x.err" || fail "export (safetensors): $(cat "$T/x.err")"
[ -z "$(ls -A "$T/exp")" ] || fail "export left $(ls -A "$T/exp")"
expect_mount_fail "does not match its stored CRC-32" "$T/ck" "$T/mnt" -o verify -o nocrccache
grep -q -- "-o verify: not mounting: $SHARD: record $RECORD" "$T/err" || fail "-o verify: $(cat "$T/err")"

gfs_mount_fg "$T/ck" "$T/mnt" -o nocrccache 2>"$T/log" || fail "mount"
# -o verify=read (the default): the first read of a view byte of a record
# checks the record, so every view of the corrupt tensors fails at once,
# before anything has read pytorch_model.bin, and never serves the byte.
for t in $TENSORS; do
	cat_fails_eio "$T/mnt/tensors/$(tensor_file "$t")"
done
"$PYTHON3" "$RC" seq "$T/mnt/model.safetensors" "$WINDOW" || fail "model.safetensors (first read)"
echo "ok: tensors/ and model.safetensors fail before any read of pytorch_model.bin"
# pytorch_model.bin: never the byte, never a valid-looking archive
for mode in seq zip torch; do
	"$PYTHON3" "$RC" $mode "$T/mnt/pytorch_model.bin" "$WINDOW" || fail "pytorch_model.bin ($mode)"
done
command -v unzip >/dev/null && unzip -tq "$T/mnt/pytorch_model.bin" >/dev/null 2>&1 &&
	fail "unzip -t passed a corrupt archive"
# After it: every view byte of the record fails, the rest is served.
for t in $TENSORS; do
	cat_fails_eio "$T/mnt/tensors/$(tensor_file "$t")"
done
"$PYTHON3" "$RC" seq "$T/mnt/model.safetensors" "$WINDOW" || fail "model.safetensors"
n=0
for t in $("$INSPECT" ls "$T/ck" | awk 'NR > 1 && $5 == "-" { print $1 }'); do
	case " $TENSORS " in *" $t "*) continue ;; esac
	f=$(tensor_file "$t")
	is_truth "$T/mnt/tensors/$f" "$case/.expected-default.tsv" "$t" ||
		fail "tensors/$f (not in the corrupt record) is not served, or not the fixture's"
	n=$((n + 1))
done
[ $n -gt 0 ] || fail "no tensor outside the corrupt record"
echo "ok: $n tensors outside the record still served"
gfs_umount "$T/mnt" || fail "unmount"
wait_child "$GFS_PID" 10
grep -q "gatherfs: $SHARD: record $RECORD (tensors .*mix" "$T/log" ||
	fail "no log line naming shard, record and tensors: $(cat "$T/log")"
echo "ok: log: $(head -1 "$T/log")"

# ---- the CRC cache: CRCs computed from a clean shard, then the shard rots
# (same size and mtime, so the cache key matches).  The central directory
# comes from the cache, but no byte of the corrupt record is served.
fresh "$case/checkpoint"
gfs_mount "$T/ck" "$T/mnt" -o crc_cache="$T/cache" || fail "mount"
unzip -tq "$T/mnt/pytorch_model.bin" >/dev/null || fail "unzip -t (clean)"
gfs_umount "$T/mnt" || fail "unmount"
[ "$(ls "$T/cache" | wc -l)" -eq 1 ] || fail "no CRC cache file"
shard0=$T/ck/global_step3/zero_pp_rank_0_mp_rank_00_optim_states.pt
touch -r "$shard0" "$T/stamp"
flip mix payload
touch -r "$T/stamp" "$SHARD"
gfs_mount "$T/ck" "$T/mnt" -o crc_cache="$T/cache" || fail "mount"
"$PYTHON3" "$RC" open "$T/mnt/pytorch_model.bin" "$WINDOW" || fail "pytorch_model.bin with a cache hit"
"$PYTHON3" "$RC" torch "$T/mnt/pytorch_model.bin" "$WINDOW" || fail "torch.load with a cache hit"
cat_fails_eio "$T/mnt/tensors/$(tensor_file mix)"
gfs_umount "$T/mnt" || fail "unmount"

# ---- a flipped byte of an optimizer-state record (ZeRO-3: an exp_avg
# partition): verify reads and counts the optimizer-state entries and names
# those of the record, as "STATE of NAME"
fresh "$case/checkpoint"
"$INSPECT" verify "$T/ck" >"$T/v.out" || fail "verify of a clean checkpoint: $(cat "$T/v.out")"
grep -q "^OK: [1-9][0-9]* entries ([0-9]* aliases) and [1-9][0-9]* optimizer-state entries, " "$T/v.out" ||
	fail "verify does not count the optimizer-state entries: $(cat "$T/v.out")"
flip exp_avg:mix payload
case " $TENSORS " in *" exp_avg:mix "*) ;; *) fail "flip_byte.py: exp_avg:mix not in $TENSORS" ;; esac
verify_fails
expect_mount_fail "does not match its stored CRC-32" "$T/ck" "$T/mnt" -o verify -o nocrccache

# ---- ZeRO-2, a payload byte flipped before mount: every view of every
# affected entry fails from its first read (tensors/, optim/,
# model.safetensors, pytorch_model.bin), and so do gatherfs-inspect cat and
# export; what is served of the other entries equals the clean checkpoint.
case="$CKPTS/z2_ws2_bf16"
fresh "$case/checkpoint"
flip exp_avg:model.layers.0.self_attn.q_proj.weight payload
verify_fails
gfs_mount "$T/ck" "$T/mnt" -o nocrccache || fail "mount (ZeRO-2)"
nstate=0
for t in $TENSORS; do
	case $t in
	*:*)
		cat_fails_eio "$T/mnt/optim/${t%%:*}/$(tensor_file "${t#*:}")"
		"$INSPECT" cat --optim="${t%%:*}" "$T/ck" "${t#*:}" >/dev/null 2>"$T/c.err" &&
			fail "gatherfs-inspect cat --optim of $t served a corrupt record"
		nstate=$((nstate + 1))
		;;
	*)
		cat_fails_eio "$T/mnt/tensors/$(tensor_file "$t")"
		"$INSPECT" cat "$T/ck" "$t" >/dev/null 2>"$T/c.err" && fail "gatherfs-inspect cat $t served a corrupt record"
		;;
	esac
	grep -q "does not match its stored CRC-32" "$T/c.err" || fail "cat $t: $(cat "$T/c.err")"
done
[ $nstate -gt 0 ] || fail "no optimizer-state entry in $TENSORS"
"$PYTHON3" "$RC" seq "$T/mnt/optim/exp_avg.safetensors" "$WINDOW" || fail "optim/exp_avg.safetensors"
"$INSPECT" export "$case/checkpoint" "$T/pytorch_model.bin" || fail "export (clean)"
cmp -s "$T/mnt/pytorch_model.bin" "$T/pytorch_model.bin" || fail "pytorch_model.bin (no optimizer state in it) differs from the clean one"
rm -f "$T/pytorch_model.bin"
n=0
for t in $("$INSPECT" ls "$T/ck" | awk 'NR > 1 && $5 == "-" { print $1 }'); do
	is_truth "$T/mnt/tensors/$(tensor_file "$t")" "$case/.expected-default.tsv" "$t" ||
		fail "tensors/$t (clean record) differs from the fixture's"
	n=$((n + 1))
done
[ $n -gt 0 ] || fail "no clean tensor checked"
"$INSPECT" export --format safetensors "$T/ck" "$T/m.safetensors" || fail "export of the model (its records are clean)"
"$INSPECT" export --format safetensors "$case/checkpoint" "$T/want.safetensors" || fail "export (clean)"
cmp -s "$T/m.safetensors" "$T/want.safetensors" || fail "export of the clean records differs"
gfs_umount "$T/mnt" || fail "unmount"
echo "ok: ZeRO-2: $nstate corrupt entries fail through every view, cat and export; $n clean tensors equal"
fresh "$case/checkpoint"
flip model.layers.0.self_attn.q_proj.weight payload
gfs_mount "$T/ck" "$T/mnt" -o nocrccache || fail "mount (ZeRO-2)"
for t in $TENSORS; do
	cat_fails_eio "$T/mnt/tensors/$(tensor_file "$t")"
	rc=0
	"$INSPECT" cat "$T/ck" "$t" >/dev/null 2>"$T/c.err" || rc=$?
	[ $rc -eq 1 ] && [ "$(wc -l <"$T/c.err")" -eq 1 ] &&
		grep -q "^gatherfs-inspect: .*$SHARD: .*does not match its stored CRC-32" "$T/c.err" ||
		fail "gatherfs-inspect cat $t of a corrupt record: exit status $rc: $(cat "$T/c.err")"
done
"$PYTHON3" "$RC" seq "$T/mnt/model.safetensors" "$WINDOW" || fail "model.safetensors (ZeRO-2)"
"$PYTHON3" "$RC" seq "$T/mnt/pytorch_model.bin" "$WINDOW" || fail "pytorch_model.bin (ZeRO-2)"
gfs_umount "$T/mnt" || fail "unmount"
echo "ok: ZeRO-2: a flipped parameter byte fails tensors/, model.safetensors, pytorch_model.bin and cat"

# ---- a flipped byte of record padding (ZeRO-1: the flat partition's
# alignment padding, which no view serves)
case="$CKPTS/z1_ws2_fp32"
fresh "$case/checkpoint"
flip layers.0.qkv.weight padding
verify_fails
expect_mount_fail "does not match its stored CRC-32" "$T/ck" "$T/mnt" -o verify -o nocrccache
gfs_mount "$T/ck" "$T/mnt" -o nocrccache || fail "mount"
f=$(tensor_file layers.0.qkv.weight)
cat_fails_eio "$T/mnt/tensors/$f"
"$PYTHON3" "$RC" seq "$T/mnt/pytorch_model.bin" "" || fail "pytorch_model.bin (padding)"
gfs_umount "$T/mnt" || fail "unmount"
# -o verify=off: the bytes are served unchecked (the padding is in no view,
# so the tensor's bytes are the clean ones), with a warning at mount
gfs_mount "$T/ck" "$T/mnt" -o nocrccache -o verify=off 2>"$T/off.err" || fail "mount -o verify=off"
grep -q -- "-o verify=off: source bytes are served without checking" "$T/off.err" ||
	fail "-o verify=off says nothing: $(cat "$T/off.err")"
is_truth "$T/mnt/tensors/$f" "$case/.expected-default.tsv" layers.0.qkv.weight ||
	fail "tensors/$f with -o verify=off is not the fixture's"
gfs_umount "$T/mnt" || fail "unmount"
echo "ok: -o verify=off serves unchecked bytes, with a warning"
expect_mount_fail "^gatherfs: -o verify=sometimes: expected read, mount or off$" "$T/ck" "$T/mnt" -o verify=sometimes
expect_mount_fail "^gatherfs: -o verify and -o verify=off contradict each other$" "$T/ck" "$T/mnt" -o verify,verify=off
echo "ok: -o verify=sometimes and -o verify,verify=off refused"

# ---- zstd DCP: a corrupt frame.  torch's zstd writer stores no content
# checksum; the CRC-32 of the zip record inside the frame catches it.
case="$top_srcdir/tests/data/dcp/fsdp2_ws2_zstd"
fresh "$case/checkpoint"
"$INSPECT" verify "$T/ck" >"$T/v.out" || fail "verify (zstd, clean): exit $?"
grep -q "[1-9][0-9]* zstd frames decompressed, 0 of them with a content checksum" "$T/v.out" ||
	fail "verify (zstd): $(cat "$T/v.out")"
name=$("$PYTHON3" -c 'import json, sys
l = json.load(open(sys.argv[1]))
print(next(t["name"] for t in l["tensors"] if any("zstd" in p for p in t.get("pieces", []))))' "$T/l.json")
flip "$name" zstd
verify_fails
expect_mount_fail "does not match its stored CRC-32" "$T/ck" "$T/mnt" -o verify -o nocrccache
gfs_mount "$T/ck" "$T/mnt" -o nocrccache || fail "mount"
"$PYTHON3" "$RC" zip "$T/mnt/pytorch_model.bin" "" || fail "pytorch_model.bin (zstd)"
cat_fails_eio "$T/mnt/tensors/$(tensor_file "$name")"
gfs_umount "$T/mnt" || fail "unmount"

# ---- a zstd frame with a content checksum, in a layout JSON (no zip
# record): verify decodes it, so a wrong checksum fails verify. Needs the
# zstd command (a package the README and .ci/run install).
command -v zstd >/dev/null 2>&1 || fail "no zstd command: the content checksum case cannot run (apt-get install zstd)"
mkdir "$T/z"
head -c 65536 /dev/urandom >"$T/z/raw"
zstd -q --check "$T/z/raw" -o "$T/z/f.zst" || fail "zstd --check"
L=$(stat -c %s "$T/z/f.zst")
cat >"$T/z/l.json" <<EOF
{"gatherfs_layout": 2, "sources": [{"path": "f.zst", "size": $L}],
 "tensors": [{"name": "w", "dtype": "uint8", "shape": [65536], "pieces": [{"at": 0,
   "source": 0, "offset": 0, "length": 65536, "zstd": {"offset": 0, "length": $L, "size": 65536}}]}]}
EOF
# exit status 3: nothing corrupt found, but no stored checksum covers f.zst
rc=0
"$INSPECT" verify --layout "$T/z/l.json" >"$T/v.out" || rc=$?
[ $rc -eq 3 ] || fail "verify (zstd --check): exit $rc: $(cat "$T/v.out")"
grep -q "^UNVERIFIED: $T/z/f.zst: no stored checksum" "$T/v.out" &&
	grep -q "^note: 65536 bytes of 1 tensors lie in no checksummed record" "$T/v.out" ||
	fail "verify does not say what it could not check: $(cat "$T/v.out")"
# -o verify=mount mounts it, with one line naming what it could not check
gfs_mount "$T/z/l.json" "$T/mnt" -o verify=mount 2>"$T/vm.err" || fail "mount -o verify=mount (no checksums)"
grep -q -- "-o verify=mount: 65536 bytes of 1 tensors have no stored checksum and could not be checked: $T/z/f.zst" "$T/vm.err" ||
	fail "-o verify=mount: $(cat "$T/vm.err")"
gfs_umount "$T/mnt" || fail "unmount"
echo "ok: verify exits 3 and -o verify=mount names f.zst"
"$PYTHON3" -c 'import sys
b = bytearray(open(sys.argv[1], "rb").read()); b[-1] ^= 0x5A; open(sys.argv[1], "wb").write(b)' "$T/z/f.zst"
rc=0
"$INSPECT" verify --layout "$T/z/l.json" >"$T/v.out" 2>"$T/v.err" || rc=$?
[ $rc -eq 1 ] && grep -q "f.zst: zstd frame at offset 0: .*checksum" "$T/v.err" ||
	fail "verify of a frame failing its content checksum: $rc $(cat "$T/v.err")"
echo "ok: $(cat "$T/v.err")"
echo "PASS"
