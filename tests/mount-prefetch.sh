#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The read-ahead of pytorch_model.bin on slow storage (-o prefetch, issue
# 16), through real mounts: a checkpoint written by bench/gen_deepspeed.py
# (9 MiB of weights) behind bench/latencyfs (2 ms a request, no page cache),
# gatherfs over that, and a reference mount of the same files on local disk
# with -o prefetch=0.  Not timed: the daemon's exit line says how many bytes
# the read-ahead served, and this test requires that it served them.
#   - dd bs=1M and cat of the prefetching mount equal the reference bytes,
#     and torch.load of it equals torch.load of the reference;
#   - four concurrent sequential readers, and a random-access reader next to
#     a sequential one, get the reference bytes;
#   - a checkpoint with one flipped byte fails with EIO on a read, the
#     corrupt bytes never served (read_corrupt.py), read-ahead on;
#   - (root) the mount over latencyfs has a 4 MiB read-ahead window, the
#     local one 512 KiB.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
LATFS="$top_builddir/bench/latencyfs"
[ -x "$LATFS" ] || fail "$LATFS not built"
"$PYTHON3" -c 'import torch' 2>/dev/null || skip "no torch for $PYTHON3"
GEN="$top_srcdir/bench/gen_deepspeed.py"
# gpt: embed (8000 x 256 fp32, 7.8 MiB), then a frozen position embedding
# with its own zip record in the model states (the record flipped below)
"$PYTHON3" "$GEN" "$T/ck" --stage 3 --ws 2 --layers 2 --hidden 256 --vocab 8000 >/dev/null ||
	fail "gen_deepspeed.py"
LATS=""
lat_cleanup() {
	for m in $LATS; do
		mountpoint -q "$m" && fusermount3 -u -z "$m"
	done
	mount_cleanup
}
trap lat_cleanup EXIT

# latmount SRC MNT: bench/latencyfs over SRC at MNT, 2 ms a read request.
latmount() {
	mkdir -p "$2"
	"$LATFS" -f -o delay_us=2000 "$1" "$2" 2>>"$T/latfs.err" &
	LATS="$LATS $2"
	wait_for mountpoint -q "$2" || fail "latencyfs $1: $(cat "$T/latfs.err")"
}

# served LOG: the bytes the read-ahead served, from the daemon's exit line.
served() {
	sed -n 's/.*read-ahead: [0-9]* sequential readers, [0-9]* bytes prefetched, \([0-9]*\) bytes served.*/\1/p' "$1"
}

latmount "$T/ck" "$T/lat"
gfs_mount "$T/ck" "$T/ref" -o prefetch=0 -o crc_cache="$T/crc-ref" || fail "mount ref"
REF=$T/ref/pytorch_model.bin
gfs_mount_fg "$T/lat" "$T/mnt" -o crc_cache="$T/crc" 2>"$T/gfs.err" || fail "mount over latencyfs"
BIN=$T/mnt/pytorch_model.bin
# sources on a FUSE file system: the read-ahead window is 4 MiB (root sets it)
if [ "$(id -u)" = 0 ] && command -v mountpoint >/dev/null; then
	for m in ref mnt; do
		got=$(cat "/sys/class/bdi/$(mountpoint -d "$T/$m")/read_ahead_kb") ||
			fail "no bdi read_ahead_kb for the $m mount"
		want=512
		[ $m = ref ] || want=4096
		[ "$got" = "$want" ] || fail "$m mount: read-ahead window $got KiB, not $want"
	done
fi
size=$(stat -c %s "$REF")
[ "$size" -gt 8000000 ] || fail "pytorch_model.bin of $size bytes: too small to prefetch"

# first pass: CRCs computed on the way
dd if="$BIN" of="$T/a.bin" bs=1M status=none || fail "dd bs=1M $BIN"
cmp "$T/a.bin" "$REF" || fail "dd bs=1M: bytes differ from the reference"
# CRCs known now: dd, cat
dd if="$BIN" bs=1M status=none | cmp - "$REF" || fail "dd bs=1M, second pass: bytes differ"
cat "$BIN" | cmp - "$REF" || fail "cat: bytes differ"
"$PYTHON3" - "$BIN" "$REF" <<'EOF' || fail "torch.load differs"
import sys
import torch
a = torch.load(sys.argv[1], map_location="cpu")
b = torch.load(sys.argv[2], map_location="cpu")
assert a.keys() == b.keys(), (sorted(a), sorted(b))
for k in a:
    assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
    assert torch.equal(a[k], b[k]), k
print("  torch.load: %d tensors equal" % len(a))
EOF

# concurrent readers of one file (separate opens), and a random-access
# reader beside a sequential one
pids=""
for i in 1 2 3 4; do
	(dd if="$BIN" bs=1M status=none | cmp - "$REF") &
	pids="$pids $!"
done
"$PYTHON3" - "$BIN" "$REF" <<'EOF' &
import os
import random
import sys
rnd = random.Random(16)
a, b = os.open(sys.argv[1], os.O_RDONLY), os.open(sys.argv[2], os.O_RDONLY)
size = os.fstat(b).st_size
for i in range(300):
    n = rnd.choice((1, 4096, 65536, 1 << 20, 3 << 19))
    off = rnd.randrange(0, size)
    if os.pread(a, n, off) != os.pread(b, n, off):
        sys.exit("random read of %d bytes at %d differs" % (n, off))
# a seek back into what a sequential pass has read ahead
for off in range(0, size, 1 << 20):
    if os.pread(a, 1 << 20, off) != os.pread(b, 1 << 20, off):
        sys.exit("sequential read at %d differs" % off)
    if off >= 2 << 20 and os.pread(a, 777, off - 1000) != os.pread(b, 777, off - 1000):
        sys.exit("read back at %d differs" % (off - 1000))
EOF
pids="$pids $!"
for p in $pids; do
	wait "$p" || fail "a concurrent reader got wrong bytes"
done
echo "ok: dd, cat, torch.load, 4 concurrent readers and a random reader: reference bytes"

gfs_umount "$T/mnt" || fail "unmount"
wait_child "$GFS_PID" 30
[ "$CHILD_RC" = 0 ] || fail "the daemon over latencyfs: exit status $CHILD_RC"
n=$(served "$T/gfs.err")
[ -n "$n" ] && [ "$n" -gt "$size" ] ||
	fail "the read-ahead served ${n:-no} bytes (want more than one pass, $size): $(cat "$T/gfs.err")"
echo "ok: the read-ahead served $n bytes"

# ---- a corrupt source record: EIO, read-ahead on
"$INSPECT" layout "$T/ck" >"$T/l.json" || fail "layout"
"$PYTHON3" "$top_srcdir/tests/tools/flip_byte.py" "$T/l.json" pos.weight payload >"$T/flip" ||
	fail "flip_byte.py"
. "$T/flip"
echo "flipped byte $OFFSET of $SHARD ($RECORD; tensors $TENSORS)"
gfs_mount_fg "$T/lat" "$T/mnt" -o crc_cache="$T/crc2" 2>"$T/gfs2.err" || fail "mount corrupt"
"$PYTHON3" "$MOUNT_TOOLS/read_corrupt.py" seq "$BIN" "$WINDOW" || fail "read_corrupt.py seq"
"$PYTHON3" "$MOUNT_TOOLS/read_corrupt.py" seq "$BIN" "$WINDOW" || fail "read_corrupt.py seq, second pass"
gfs_umount "$T/mnt" || fail "unmount"
wait_child "$GFS_PID" 30
[ "$CHILD_RC" = 0 ] || fail "the daemon over latencyfs: exit status $CHILD_RC"
grep -q "$(basename "$SHARD")" "$T/gfs2.err" || fail "the EIO was not logged: $(cat "$T/gfs2.err")"
n=$(served "$T/gfs2.err")
[ -n "$n" ] && [ "$n" -gt 0 ] || fail "no read-ahead before the corrupt record: $(cat "$T/gfs2.err")"
echo "ok: a corrupt record fails with EIO after $n bytes served by the read-ahead"
