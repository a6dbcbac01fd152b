#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A shard truncated under a live mount before its records are checked (a
# copy of a ZeRO-3 world size 3 fixture, -o nocrccache so that the first
# read of pytorch_model.bin checks every source record): the check fails;
# the read gives EIO, the daemon logs the shard, survives, still serves and
# unmounts cleanly.  Both ways of checking: pread() (the default,
# GATHERFS_CHECK_MMAP=0) and mappings of the shard (GATHERFS_CHECK_MMAP=1,
# which touch pages the truncation took away: SIGBUS, the file is cut to
# its first page).
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
case="$CKPTS/z3_ws3_bf16"
[ -d "$case/checkpoint" ] || skip "fixture $case missing"
READ="$MOUNT_TOOLS/fault_read.py"
shard=bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt

# run NAME MMAP: the truncation with GATHERFS_CHECK_MMAP=MMAP.
run() {
	rm -rf "${T:?}/$1"
	cp -r "$case/checkpoint" "$T/$1" && chmod -R u+w "$T/$1" || fail "copy"
	env0=$GFS_ENV
	GFS_ENV="$GFS_ENV GATHERFS_CHECK_MMAP=$2"
	gfs_mount_fg "$T/$1" "$T/$1.mnt" -o nocrccache 2>"$T/$1.log" ||
		fail "mount $1: $(cat "$T/$1.log")"
	GFS_ENV=$env0
	pid=$GFS_PID
	f="$T/$1/global_step3/$shard"
	truncate -s 4096 "$f"
	got=$(timeout 60 "$PYTHON3" "$READ" "$T/$1.mnt/pytorch_model.bin" | cut -d' ' -f1)
	[ "$got" = EIO ] || fail "$1: pytorch_model.bin read gave $got, want EIO"
	kill -0 "$pid" || fail "$1: the daemon died: $(cat "$T/$1.log")"
	grep -q "$shard" "$T/$1.log" || fail "$1: the daemon did not log $shard: $(cat "$T/$1.log")"
	echo "  logged: $(grep -m1 "$shard" "$T/$1.log")"
	timeout 60 cat "$T/$1.mnt/tensors/INDEX" >/dev/null || fail "$1: the mount stopped serving"
	gfs_umount "$T/$1.mnt" || fail "unmount $1"
	wait_child "$pid" 30
	[ "$CHILD_RC" = 0 ] || fail "$1: daemon exit status $CHILD_RC: $(cat "$T/$1.log")"
}

echo "== truncated before the check, mapped"
run mapped 1
echo "== truncated before the check, pread"
run pread 0
echo "ok"
