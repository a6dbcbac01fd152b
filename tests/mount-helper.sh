#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The fstab path: mount.fuse3 runs "gatherfs SRC MNT -o OPTS" (both the
# "gatherfs#SRC" and the "-t fuse.gatherfs" forms), fstab-only words are
# accepted and the mount stays read-only; `mount -t fuse.gatherfs` as root
# (the built gatherfs put on mount's PATH in a private mount namespace).
# Then the daemon's lifetime: fusermount3 -u, SIGTERM and SIGINT (with a
# file held open) unmount cleanly and the daemon exits 0.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
case="$CKPTS/z3_ws2_fp32"
[ -d "$case/checkpoint" ] || skip "fixture $case missing"
ck="$case/checkpoint"
mnt="$T/mnt"
mkdir -p "$mnt"
GFS_MOUNTS="$mnt"

# check_mount DTYPE: mounted read-only as fuse.gatherfs, tensors in DTYPE.
check_mount() {
	wait_for is_mounted "$mnt" || fail "not mounted"
	awk -v m="$mnt" '$2 == m { split($4, o, ","); exit !($3 == "fuse.gatherfs" && o[1] == "ro") }' \
		/proc/mounts || fail "mount entry: $(grep " $mnt " /proc/mounts)"
	[ "$(sed -n 2p "$mnt/tensors/INDEX" | cut -f2)" = "$1" ] || fail "dtype is not $1"
	[ -e "$mnt/latest" ] && fail "latest, naming a tag directory the mount lacks, is shown"
	[ -e "$mnt/pytorch_model.bin" ] || fail "no pytorch_model.bin"
}

if command -v mount.fuse3 >/dev/null 2>&1; then
	PATH="$top_builddir:$PATH" mount.fuse3 "gatherfs#$ck" "$mnt" \
		-o dtype=bf16,rw,dev,suid,noatime,nofail,_netdev,x-systemd.automount ||
		fail "mount.fuse3 gatherfs#SRC"
	check_mount bfloat16
	gfs_umount "$mnt" || fail "unmount"
	PATH="$top_builddir:$PATH" mount.fuse3 "$ck" "$mnt" -t fuse.gatherfs \
		-o dtype=fp16,tag=global_step3 || fail "mount.fuse3 -t fuse.gatherfs"
	check_mount float16
	gfs_umount "$mnt" || fail "unmount"
	echo "ok: mount.fuse3"
else
	skip_part mount.fuse3 "mount.fuse3 not installed"
fi

# mount(8) runs helpers with a sanitized PATH: only an installed gatherfs
# works. So, as root, in a private mount namespace: a tmpfs over
# /usr/local/sbin (the first directory of that PATH) holding a link to the
# gatherfs built here; nothing outside the namespace changes, and the
# namespace ends with the mount.
if [ "$(id -u)" = 0 ] && command -v mount >/dev/null 2>&1 && command -v unshare >/dev/null 2>&1 &&
   [ -d /usr/local/sbin ]; then
	timeout 60 unshare -m --propagation private sh -c '
		ck=$1 mnt=$2
		mount -t tmpfs gfs-test /usr/local/sbin || { echo "tmpfs over /usr/local/sbin"; exit 1; }
		ln -s "$3/gatherfs" /usr/local/sbin/gatherfs || exit 1
		mount -t fuse.gatherfs "$ck" "$mnt" -o dtype=bf16 || { echo "mount -t fuse.gatherfs"; exit 1; }
		rc=0
		awk -v m="$mnt" '"'"'$2 == m { split($4, o, ","); f = ($3 == "fuse.gatherfs" && o[1] == "ro") } END { exit !f }'"'"' \
			/proc/self/mounts || { echo "mount entry: $(grep " $mnt " /proc/self/mounts)"; rc=1; }
		[ "$(sed -n 2p "$mnt/tensors/INDEX" | cut -f2)" = bfloat16 ] || { echo "dtype is not bfloat16"; rc=1; }
		umount "$mnt" || { echo "umount"; rc=1; }
		exit $rc
	' sh "$ck" "$mnt" "$top_builddir" >"$T/helper.err" 2>&1 || fail "mount -t fuse.gatherfs: $(cat "$T/helper.err")"
	echo "ok: mount -t fuse.gatherfs (gatherfs on mount's PATH in a private mount namespace)"
else
	skip_part mount-fuse.gatherfs "mount -t fuse.gatherfs needs root, mount, unshare and /usr/local/sbin"
fi

# stop MODE: mount in the foreground, use it (the central directory first:
# the parallel CRC pass), stop it by MODE, expect exit 0 (with sanitizers:
# no leak either).
stop() {
	gfs_mount_fg "$ck" "$mnt" || fail "mount -f"
	tail -c 100 "$mnt/pytorch_model.bin" >/dev/null &&
		cat "$mnt/pytorch_model.bin" "$mnt/tensors/embed.weight" >/dev/null &&
		ls -lR "$mnt" >/dev/null || fail "read"
	case $1 in
	fusermount) fusermount3 -u "$mnt" ;;
	TERM) kill -TERM "$GFS_PID" ;;
	INT) exec 3<"$mnt/tensors/INDEX"; kill -INT "$GFS_PID" ;;
	esac
	st=0
	wait "$GFS_PID" || st=$?
	exec 3<&-
	[ $st -eq 0 ] || fail "$1: daemon exited with $st"
	wait_unmounted "$mnt" || fail "$1: still mounted"
	echo "ok: $1 unmounts, exit 0"
}
stop fusermount
stop TERM
if $GFS_SIGINT_OK; then
	stop INT
else
	skip_part SIGINT "env --default-signal missing, SIGINT not tested"
fi
echo "PASS: helper and signals"
