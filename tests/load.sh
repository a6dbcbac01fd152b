#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Load test: 64 concurrent readers over mixed views (pytorch_model.bin,
# model.safetensors, tensors/ files) of a layout over four random "rank"
# files (tensors of mixed dtypes cut across the ranks, a ZERO piece, a tied
# alias), checking every byte read (tests/mount/load.py), reporting
# throughput and the daemon's RSS over time.
#
#   GFS_LOAD_SECONDS  duration (default 10: the make check version)
#   GFS_LOAD_MB       checkpoint size in MiB (default 64; 1024 for the
#                     bench: GFS_LOAD_SECONDS=60 GFS_LOAD_MB=1024 tests/load.sh)
#   GFS_LOAD_READERS  reader threads (default 64)
# Needs about 3 x GFS_LOAD_MB of $TMPDIR (sources + exported references).
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
secs=${GFS_LOAD_SECONDS:-10}
mb=${GFS_LOAD_MB:-64}
readers=${GFS_LOAD_READERS:-64}
free=$(df -Pm "$T" | awk 'NR == 2 { print $4 }')
[ "$free" -gt $((mb * 3 + 256)) ] || skip "$T: ${free} MiB free, need $((mb * 3 + 256))"

per=$((mb / 4))
for r in 0 1 2 3; do
	head -c $((per << 20)) /dev/urandom >"$T/rank$r.bin" || fail "make rank$r.bin"
done
"$PYTHON3" - "$T" "$per" <<'EOF' || fail "make layout"
import json, sys
w, per = sys.argv[1], int(sys.argv[2]) << 20
dtypes = [("float32", 4), ("bfloat16", 2), ("int64", 8), ("float16", 2)]
ntens = 32
chunk = per // ntens // 8 * 8
tensors = []
for k in range(ntens):
    dt, es = dtypes[k % len(dtypes)]
    # a ZeRO-like partition: one chunk of each rank, in rank order
    pieces = [{"source": r, "offset": k * chunk, "length": chunk} for r in range(4)]
    if k == 5:
        pieces.insert(2, {"zero": 4096})
    nbytes = sum(p.get("length", p.get("zero", 0)) for p in pieces)
    name = "model.layers.%d.weight" % k if k else "embed.weight"
    tensors.append({"name": name, "dtype": dt, "shape": [nbytes // es], "pieces": pieces})
tensors.append({"name": "lm_head.weight", "alias_of": "embed.weight"})
json.dump({"gatherfs_layout": 1, "format": "json", "info": "load test", "base_dir": w,
           "sources": [{"path": "rank%d.bin" % r, "size": per} for r in range(4)],
           "tensors": tensors}, open(w + "/load.json", "w"), indent=1)
EOF
mkdir -p "$T/ref"
"$INSPECT" export "$T/load.json" "$T/ref/pytorch_model.bin" >/dev/null 2>&1 || fail "export bin"
"$INSPECT" export "$T/load.json" "$T/ref/model.safetensors" >/dev/null 2>&1 || fail "export safetensors"

gfs_mount_fg "$T/load.json" "$T/mnt" 2>"$T/daemon.log" || fail "mount: $(cat "$T/daemon.log")"
PID=$GFS_PID
echo "checkpoint: $mb MiB in 4 sources, 32 tensors + 1 alias; $readers readers for $secs s"
timeout $((secs + 120)) "$PYTHON3" "$MOUNT_TOOLS/load.py" "$secs" "$readers" "$PID" "$T/mnt" \
	"$T/ref" "$T/load.json" || fail "load: $(cat "$T/daemon.log")"
gfs_umount "$T/mnt" || fail "unmount"
rc=0
wait "$PID" || rc=$?
[ $rc -eq 0 ] || fail "daemon exit status $rc"
echo "PASS: load"
