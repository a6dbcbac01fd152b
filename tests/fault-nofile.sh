#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# RLIMIT_NOFILE lower than the checkpoint needs (ZeRO-3 world size 3: six
# shard files, all kept open for the life of the mount):
#   - soft and hard limit 8: the import cannot open the shards; one line
#     naming the file and saying to raise the limit, exit 1, no mount;
#   - soft and hard limit 16: the shards open, but too few descriptors
#     would be left for /dev/fuse and the daemon: one line saying so
#     (checked before mounting), exit 1, no mount;
#   - soft limit 8, hard limit above: the daemon raises the soft limit and
#     the mount works.
#   (bash: ulimit -S and -H are not POSIX sh.)
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
case="$CKPTS/z3_ws3_bf16"
[ -d "$case/checkpoint" ] || skip "fixture $case missing"
[ "$(ls "$case/checkpoint/global_step3" | wc -l)" -ge 6 ] || fail "expected 6 shard files"
hard=$(ulimit -H -n)
[ "$hard" = unlimited ] || [ "$hard" -ge 64 ] || skip "hard open file limit $hard is too low to test"
MNT="$T/mnt"
mkdir -p "$MNT"
# Mounts of this test (others run in parallel: the whole table may change).
before=$(our_mounts)

# limited SOFT HARD: gatherfs with these limits; fails with one line.
limited() {
	if (ulimit -S -n "$1" && ulimit -H -n "$2" &&
		exec timeout 60 "$GATHERFS" "$case/checkpoint" "$MNT") >"$T/out" 2>"$T/err"; then
		fail "limit $1/$2: mounted"
	fi
	[ "$(wc -l <"$T/err")" -eq 1 ] || fail "limit $1/$2: not one line: $(cat "$T/err")"
	grep -q "open file limit" "$T/err" && grep -q "ulimit -n" "$T/err" ||
		fail "limit $1/$2: unclear message: $(cat "$T/err")"
	is_mounted "$MNT" && fail "limit $1/$2: left a mount"
	[ "$(our_mounts)" -eq "$before" ] || fail "limit $1/$2: mount table changed"
	echo "ok: limit $1/$2: $(cat "$T/err")"
}

limited 8 8
limited 16 16

# A low soft limit under a higher hard one is raised.
(ulimit -S -n 8 && exec timeout 60 "$GATHERFS" "$case/checkpoint" "$MNT") ||
	fail "soft limit 8: mount failed"
GFS_MOUNTS="$GFS_MOUNTS $MNT"
wait_for is_mounted "$MNT" || fail "soft limit 8: not mounted"
"$PYTHON3" "$MOUNT_TOOLS/fault_read.py" "$MNT/pytorch_model.bin" | grep -q "^[0-9a-f]\{64\} " ||
	fail "soft limit 8: read failed"
gfs_umount "$MNT" || fail "unmount"
echo "ok: soft limit 8, hard $hard: mounted and read"
echo "PASS: open file limit"
