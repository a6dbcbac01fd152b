#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Stopping the daemon while 16 threads read (random 1 MiB reads, page cache
# dropped before each, so the daemon is busy):
#   - SIGTERM: the daemon unmounts and exits with status 0 within 30 s;
#   - fusermount3 -u: refused while files are open (EBUSY, the mount stays
#     and keeps serving) or done; fusermount3 -u -z then detaches it and the
#     daemon exits with status 0 within 30 s;
#   - SIGKILL: the mount point gives ENOTCONN ("Transport endpoint is not
#     connected"); the documented recovery, fusermount3 -u -z MNT, clears
#     it and a fresh mount on the same mount point works.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
case="$CKPTS/z3_ws3_bf16"
[ -d "$case/checkpoint" ] || skip "fixture $case missing"
MNT="$T/mnt"

# readers SECONDS: 16 reader threads on $MNT in the background ($RPID).
readers() {
	timeout $(($1 + 30)) "$PYTHON3" "$MOUNT_TOOLS/readers.py" 16 "$1" "$MNT/pytorch_model.bin" \
		"$MNT/model.safetensors" "$MNT/tensors/embed.weight" >"$T/readers.out" 2>&1 &
	RPID=$!
	sleep 2 # let them start
}

# exits_ok WHAT: the daemon $PID exits with status 0 within 30 s and $MNT is gone.
exits_ok() {
	wait_child "$PID" 30
	[ "$CHILD_RC" = running ] && fail "$1: daemon still running after 30 s: $(cat "$T/log")"
	[ "$CHILD_RC" = 0 ] || fail "$1: daemon exit status $CHILD_RC: $(cat "$T/log")"
	wait_unmounted "$MNT" || fail "$1: still mounted"
}

# errno_of PATH: the errno name of stat(PATH), or "ok".
errno_of() {
	"$PYTHON3" -c '
import errno, os, sys
try:
    os.stat(sys.argv[1]); print("ok")
except OSError as e:
    print(errno.errorcode[e.errno])' "$1"
}

echo "== SIGTERM with 16 readers"
gfs_mount_fg "$case/checkpoint" "$MNT" 2>"$T/log" || fail "mount"
PID=$GFS_PID
readers 6
kill -TERM "$PID"
exits_ok SIGTERM
wait "$RPID"
echo "  exited 0, unmounted; readers: $(cat "$T/readers.out")"

echo "== fusermount3 -u with 16 readers"
gfs_mount_fg "$case/checkpoint" "$MNT" 2>"$T/log" || fail "mount"
PID=$GFS_PID
readers 6
if fusermount3 -u "$MNT" 2>"$T/fu.err"; then
	echo "  fusermount3 -u: done"
else
	grep -q "busy" "$T/fu.err" || fail "fusermount3 -u: $(cat "$T/fu.err")"
	is_mounted "$MNT" || fail "fusermount3 -u failed but unmounted"
	[ "$(errno_of "$MNT/pytorch_model.bin")" = ok ] || fail "mount broken after a refused unmount"
	echo "  fusermount3 -u: refused ($(cat "$T/fu.err")); the mount keeps serving"
	fusermount3 -u -z "$MNT" || fail "fusermount3 -u -z"
fi
exits_ok "fusermount3 -u"
wait "$RPID"
echo "  exited 0, unmounted; readers: $(cat "$T/readers.out")"

echo "== SIGKILL, then recovery"
gfs_mount_fg "$case/checkpoint" "$MNT" 2>"$T/log" || fail "mount"
PID=$GFS_PID
kill -KILL "$PID"
wait "$PID" 2>/dev/null
is_mounted "$MNT" || fail "SIGKILL: the mount went away by itself"
got=$(errno_of "$MNT/pytorch_model.bin")
[ "$got" = ENOTCONN ] || fail "after SIGKILL: stat gives $got, want ENOTCONN"
echo "  after SIGKILL: $got"
fusermount3 -u -z "$MNT" || fail "fusermount3 -u -z after SIGKILL"
wait_unmounted "$MNT" || fail "still mounted after fusermount3 -u -z"
gfs_mount "$case/checkpoint" "$MNT" || fail "mount again after SIGKILL"
cmp -s "$MNT/tensors/embed.weight" /dev/null && fail "empty tensor"
"$PYTHON3" "$MOUNT_TOOLS/fault_read.py" "$MNT/pytorch_model.bin" | grep -q "^[0-9a-f]\{64\} " ||
	fail "read after the new mount"
gfs_umount "$MNT" || fail "unmount the new mount"
echo "  fusermount3 -u -z cleared it; a fresh mount works"
echo "PASS: signals"
