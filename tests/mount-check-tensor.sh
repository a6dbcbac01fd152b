#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# -o verify=read checks a tensor's records together: the first read of any
# byte of a ZeRO-3 tensor checks every rank's record of it in one batch (its
# reads in flight together), not only the record holding that byte; what is
# served stays the same.  With a flipped byte in rank 0's record of
# embed.weight, on a fresh mount: a first read of the tensor's last bytes
# (rank 1's record, sound) is served, equal to the checkpoint's; then a read
# of its first bytes (rank 0's) fails with EIO naming rank 0's shard; a
# tensor with no piece in that record is served.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
case="$CKPTS/z3_ws2_fp32"
[ -d "$case/checkpoint" ] || skip "fixture $case missing"
FLIP="$top_srcdir/tests/tools/flip_byte.py"
mkdir -p "$T/mnt"

cp -r "$case/checkpoint" "$T/ck" && chmod -R u+w "$T/ck" || fail "copy $case"
"$INSPECT" layout "$T/ck" >"$T/l.json" || fail "layout"
"$PYTHON3" "$FLIP" "$T/l.json" embed.weight payload >"$T/flip" || fail "flip_byte.py"
. "$T/flip"
echo "flipped byte $OFFSET of $SHARD ($RECORD; tensors $TENSORS)"
case $SHARD in *zero_pp_rank_0_*) ;; *) fail "flipped in $SHARD, not rank 0's" ;; esac
# embed.weight: 1000 x 64 fp32 split over both ranks; its last 4 KiB are
# rank 1's
truth_bytes "$case/.expected-default.tsv" "$case/checkpoint" embed.weight "$T/embed"
size=$(wc -c <"$T/embed")
[ "$size" -eq 256000 ] || fail "embed.weight: $size bytes, expected 256000"

gfs_mount_fg "$T/ck" "$T/mnt" -o nocrccache 2>"$T/log" || fail "mount"
# one pread of the last 4 KiB, nothing before them (tail -c reads more)
"$PYTHON3" - "$T/mnt/tensors/embed.weight" "$T/embed" <<'EOF' || fail "embed.weight"
import errno, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
want = open(sys.argv[2], "rb").read()
if os.pread(fd, 4096, 256000 - 4096) != want[-4096:]:
    sys.exit("the last 4 KiB (rank 1's) differ")
try:
    os.pread(fd, 4096, 0)
except OSError as e:
    sys.exit(0 if e.errno == errno.EIO else "pread: %s" % e)
sys.exit("the first 4 KiB (rank 0's corrupt record) read")
EOF
echo "ok: rank 1's bytes of embed.weight served, rank 0's fail with EIO"
other=
for t in $("$INSPECT" ls "$T/ck" 2>/dev/null | awk 'NR > 1 && $5 == "-" { print $1 }'); do
	case " $TENSORS " in *" $t "*) ;; *) other=$t; break ;; esac
done
[ -n "$other" ] || fail "no tensor outside the corrupt record"
is_truth "$T/mnt/tensors/$other" "$case/.expected-default.tsv" "$other" ||
	fail "tensors/$other (not in the corrupt record) not served, or not the fixture's"
echo "ok: tensors/$other (not in the corrupt record) served"
gfs_umount "$T/mnt" || fail "unmount"
wait_child "$GFS_PID" 10
grep -q "tensor embed.weight: $SHARD: record $RECORD" "$T/log" || fail "no log line naming $SHARD: $(cat "$T/log")"
echo "ok: log: $(grep -m1 "tensor embed.weight" "$T/log")"
exit 0
