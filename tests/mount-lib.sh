# Helpers for the FUSE mount tests.  Sourced after tests/lib.sh.
#
#   mount_setup              skip (77) without /dev/fuse or fusermount3; make a
#                            scratch dir $T; unmount everything and remove $T
#                            at exit
#   gfs_mount SRC MNT [ARG...]   run the daemon (it backgrounds itself) and
#                            wait for the mount
#   gfs_mount_fg SRC MNT [ARG...]  run it in the foreground as a child; its
#                            pid is in $GFS_PID (SIGINT reaches it if
#                            $GFS_SIGINT_OK)
#   gfs_umount MNT           fusermount3 -u and wait until it is gone
#   is_mounted MNT           true if MNT is a gatherfs mount
#   wait_unmounted MNT       wait (10 s at most) until MNT is not mounted
GATHERFS="$top_builddir/gatherfs"
MOUNT_TOOLS="$top_srcdir/tests/mount"
export GATHERFS MOUNT_TOOLS
GFS_MOUNTS=""
# Background jobs of a non-interactive shell ignore SIGINT, and libfuse keeps
# an ignored signal ignored: restore the default so the daemon handles it.
if env --default-signal=INT true 2>/dev/null; then
	GFS_SIGINT_OK=true
	GFS_ENV="env --default-signal=INT"
else
	GFS_SIGINT_OK=false
	GFS_ENV=env
fi

mount_cleanup() {
	for m in $GFS_MOUNTS; do
		if is_mounted "$m"; then
			fusermount3 -u -z "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
		fi
	done
	[ -n "${T:-}" ] && rm -rf "$T"
}

mount_setup() {
	[ -c /dev/fuse ] || skip "/dev/fuse is missing"
	command -v fusermount3 >/dev/null 2>&1 || skip "fusermount3 is missing"
	[ -x "$GATHERFS" ] || fail "$GATHERFS not built"
	[ -x "$PYTHON3" ] || skip "python3 not found"
	T=$(mktemp -d "${TMPDIR:-/tmp}/gatherfs-mount.XXXXXX")
	trap mount_cleanup EXIT
	trap 'exit 1' INT TERM
}

is_mounted() {
	awk -v m="$1" '$2 == m && $3 ~ /^fuse/ { found = 1 } END { exit !found }' /proc/mounts
}

# wait_for CONDITION...: poll every 0.1 s, 10 s at most.
wait_for() {
	i=0
	while ! "$@"; do
		i=$((i + 1))
		[ $i -lt 100 ] || return 1
		sleep 0.1
	done
}

not_mounted() {
	! is_mounted "$1"
}

wait_unmounted() {
	wait_for not_mounted "$1"
}

gfs_mount() {
	src=$1 mnt=$2
	shift 2
	mkdir -p "$mnt"
	"$GATHERFS" "$src" "$mnt" "$@" || return 1
	GFS_MOUNTS="$GFS_MOUNTS $mnt"
	wait_for is_mounted "$mnt"
}

gfs_mount_fg() {
	src=$1 mnt=$2
	shift 2
	mkdir -p "$mnt"
	$GFS_ENV "$GATHERFS" "$src" "$mnt" -f "$@" &
	GFS_PID=$!
	GFS_MOUNTS="$GFS_MOUNTS $mnt"
	wait_for is_mounted "$mnt"
}

gfs_umount() {
	fusermount3 -u "$1" && wait_unmounted "$1"
}
