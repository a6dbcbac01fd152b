#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Reads whose pieces come from several source files, on slow storage, read
# those pieces in parallel (issue 45): the real Megatron-Core TP 2 x PP 2
# legacy save of tests/data/megatron/tp2_pp2 behind bench/latencyfs (1 ms a
# request, no page cache: every piece misses it), gatherfs over that, and a
# mount of the same files on local disk (pieces read one after the other).
#   - model.safetensors (QKV split per group, row-parallel merges: two TP
#     pieces a row) and every tensors/ file are the same bytes through both;
#   - the daemon over latencyfs says at exit that it read pieces in
#     parallel (else the parallel path went untested);
#   - 16 threads reading a fresh mount over latencyfs at random from its
#     first read get the same bytes (tests/mount/stress.py);
#   - (root) the mount over latencyfs has a 4 MiB read-ahead window.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
LATFS="$top_builddir/bench/latencyfs"
[ -x "$LATFS" ] || fail "$LATFS not built"
SRC="$top_srcdir/tests/data/megatron/tp2_pp2/legacy_torch"
[ -d "$SRC" ] || fail "$SRC missing"
LAT=""
lat_cleanup() {
	[ -z "$LAT" ] || ! mountpoint -q "$LAT" || fusermount3 -u -z "$LAT"
	mount_cleanup
}
trap lat_cleanup EXIT
mkdir -p "$T/lat"
"$LATFS" -f -o delay_us=1000 "$SRC" "$T/lat" 2>"$T/latfs.err" &
LAT=$T/lat
wait_for mountpoint -q "$T/lat" || fail "latencyfs: $(cat "$T/latfs.err")"

gfs_mount "$SRC" "$T/ref" 2>"$T/ref.err" || fail "mount $SRC: $(cat "$T/ref.err")"
gfs_mount_fg "$T/lat" "$T/mnt" -o nosplice 2>"$T/gfs.err" || fail "mount over latencyfs: $(cat "$T/gfs.err")"
if [ "$(id -u)" = 0 ] && command -v mountpoint >/dev/null; then
	got=$(cat "/sys/class/bdi/$(mountpoint -d "$T/mnt")/read_ahead_kb") || fail "no bdi read_ahead_kb"
	[ "$got" = 4096 ] || fail "read-ahead window over latencyfs: $got KiB, not 4096"
fi
n=0
for f in model.safetensors $(cd "$T/ref" && ls tensors | grep -v '^INDEX$' | sed 's|^|tensors/|'); do
	timeout 120 cmp "$T/mnt/$f" "$T/ref/$f" || fail "$f: bytes differ over latencyfs"
	n=$((n + 1))
done
[ "$n" -gt 10 ] || fail "only $n files compared"
echo "ok: model.safetensors and $((n - 1)) tensors/ files: the same bytes over latencyfs"
# ended_parallel MNT LOG: the daemon over latencyfs at MNT unmounted, its
# exit status 0 and its exit line (in LOG) counting K > 0 parallel reads.
ended_parallel() {
	gfs_umount "$1" || fail "unmount"
	wait_child "$GFS_PID" 30
	[ "$CHILD_RC" = 0 ] || fail "the daemon over latencyfs: exit status $CHILD_RC"
	K=$(sed -n 's/.*parallel reads: \([0-9]*\) reads of tensor bytes.*/\1/p' "$2")
	[ -n "$K" ] && [ "$K" -gt 0 ] || fail "no read had its pieces read in parallel: $(cat "$2")"
}
ended_parallel "$T/mnt" "$T/gfs.err"
echo "ok: $K reads had their pieces read in parallel"

# A fresh mount read by 16 threads from its first read: records checked
# concurrently (background checks, check-ahead, each reader's own), spans
# of several FUSE threads on the one I/O pool at once.
gfs_mount_fg "$T/lat" "$T/mnt2" -o nosplice 2>"$T/gfs2.err" || fail "mount over latencyfs: $(cat "$T/gfs2.err")"
timeout 120 "$PYTHON3" "$MOUNT_TOOLS/stress.py" 4 "$T/mnt2/model.safetensors=$T/ref/model.safetensors" \
	"$T/mnt2/pytorch_model.bin=$T/ref/pytorch_model.bin" || fail "concurrent first reads over latencyfs"
ended_parallel "$T/mnt2" "$T/gfs2.err"
echo "ok: concurrent first reads, the same bytes; $K reads had their pieces read in parallel"
echo "PASS: parallel piece reads"
