#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Source integrity of merged mounts (-o lora=DIR): the merged layout carries
# the records of its base and adapter, so a byte flipped in a tensor payload
# of the base pytorch_model.bin (a merged weight W) or of the adapter's
# adapter_model.bin (a lora_A) is caught: reading the merged weight fails
# with EIO and a log line naming file, record and tensor; other tensors are
# still served; -o verify refuses to mount; `gatherfs-inspect verify --lora`
# exits 1 with one CORRUPT line.  Safetensors files carry no CRC: a flipped
# byte there cannot be detected (gatherfs(1), INTEGRITY).
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
"$PYTHON3" -c "import torch" 2>/dev/null || skip "python3-torch not installed"
case="$top_srcdir/tests/data/lora/a_llama_fp32"
FLIP="$top_srcdir/tests/tools/flip_byte.py"
mkdir "$T/mnt"

# fresh: writable copies: $T/base (pytorch_model.bin), $T/ad (adapter_model.bin
# written by torch.save from the fixture's adapter_model.safetensors).
fresh() {
	rm -rf "$T/base" "$T/ad"
	cp -r "$case/base_bin" "$T/base" && mkdir "$T/ad" &&
		cp "$case/adapter/adapter_config.json" "$T/ad/" && chmod -R u+w "$T/base" "$T/ad" ||
		fail "copy $case"
	"$PYTHON3" - "$case/adapter/adapter_model.safetensors" "$T/ad/adapter_model.bin" <<'PY' || fail "write adapter_model.bin"
import json, struct, sys, torch
blob = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
head = json.loads(blob[8:8 + n])
head.pop("__metadata__", None)
dt = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
sd = {}
for k, v in head.items():
    a, e = v["data_offsets"]
    sd[k] = torch.frombuffer(bytearray(blob[8 + n + a:8 + n + e]), dtype=dt[v["dtype"]]).reshape(v["shape"]).clone()
torch.save(sd, sys.argv[2])
PY
}

# flip DIR TENSOR: flip the first payload byte of TENSOR in DIR's torch zip.
flip() {
	"$INSPECT" layout --input-format plain "$1" >"$T/l.json" 2>/dev/null || fail "layout $1"
	"$PYTHON3" "$FLIP" "$T/l.json" "$2" payload >"$T/flip" || fail "flip_byte.py $1 $2"
	. "$T/flip"
	echo "flipped byte $OFFSET of $SHARD ($RECORD; tensors $TENSORS)"
}

# corrupt MERGED OTHER: with one byte flipped (SHARD, RECORD), merged weight
# MERGED fails everywhere; OTHER, a merged weight from other records, is
# served as from the clean sources ($T/clean/OTHER).
corrupt() {
	merged=$1 other=$2
	rc=0
	"$INSPECT" verify --lora "$T/ad" "$T/base" >"$T/v.out" 2>"$T/v.err" || rc=$?
	[ $rc -eq 1 ] || fail "verify --lora: exit status $rc: $(cat "$T/v.out" "$T/v.err")"
	[ "$(grep -c '^CORRUPT: ' "$T/v.out")" -eq 1 ] || fail "verify --lora: $(cat "$T/v.out")"
	grep -q "^CORRUPT: $SHARD: record $RECORD does not match its stored CRC-32; tensors affected: $merged\$" "$T/v.out" ||
		fail "verify --lora: $(cat "$T/v.out")"
	echo "ok: $(cat "$T/v.out")"
	expect_mount_fail "does not match its stored CRC-32" "$T/base" "$T/mnt" -o "lora=$T/ad" -o verify
	grep -q -- "-o verify: not mounting: $SHARD: record $RECORD (tensor $merged)" "$T/err" ||
		fail "-o verify: $(cat "$T/err")"
	gfs_mount_fg "$T/base" "$T/mnt" -o "lora=$T/ad" 2>"$T/log" || fail "mount"
	cat_fails_eio "$T/mnt/tensors/$merged"
	cat_fails_eio "$T/mnt/tensors/$merged"
	cat_fails_eio "$T/mnt/model.safetensors"
	cmp "$T/mnt/tensors/$other" "$T/clean/$other" || fail "tensors/$other not served as before"
	gfs_umount "$T/mnt" || fail "unmount"
	wait_child "$GFS_PID" 10
	grep -q "gatherfs: .*$SHARD: record $RECORD (tensor $merged) does not match its stored CRC-32" "$T/log" ||
		fail "no log line naming file, record and tensor: $(cat "$T/log")"
	echo "ok: log: $(head -1 "$T/log")"
}

W0=model.layers.0.self_attn.q_proj.weight
V1=model.layers.1.self_attn.v_proj.weight
fresh
echo "== clean: the merge is right, verify and -o verify pass"
gfs_mount "$T/base" "$T/mnt" -o "lora=$T/ad" -o verify || fail "mount -o verify (clean)"
"$PYTHON3" "$top_srcdir/tests/tools/check_merged.py" "$T/mnt" "$case" --scale-ulp 1 --allow-untied -q ||
	fail "the merge of the .bin adapter"
mkdir "$T/clean"
cp "$T/mnt/tensors/$W0" "$T/mnt/tensors/$V1" "$T/clean/" || fail "read the merged weights"
gfs_umount "$T/mnt" || fail "unmount"
"$INSPECT" verify --lora "$T/ad" "$T/base" >"$T/v.out" 2>/dev/null || fail "verify --lora (clean): $(cat "$T/v.out")"
grep -q "^OK: [0-9]* zip records match" "$T/v.out" || fail "verify --lora: $(cat "$T/v.out")"

echo "== a byte of the base weight under a merge"
flip "$T/base" "$W0"
corrupt "$W0" "$V1"

echo "== a byte of the adapter's lora_A"
fresh
flip "$T/ad" base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight
corrupt "$V1" "$W0"
echo "PASS"
