#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Every write, create, rename, unlink, mkdir, chmod, truncate, xattr change
# on a mount fails with EROFS; the mount is read-only in /proc/mounts.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
case="$CKPTS/z3_ws2_fp32"
[ -d "$case/checkpoint" ] || skip "fixture $case missing"
# a passed-through file to write to: a copy with a config.json
cp -r "$case/checkpoint" "$T/ck" && chmod -R u+w "$T/ck" || fail "copy"
printf '{"a": 1}\n' > "$T/ck/config.json"
gfs_mount "$T/ck" "$T/mnt" || fail "mount"
awk -v m="$T/mnt" '$2 == m { split($4, o, ","); exit o[1] != "ro" }' /proc/mounts ||
	fail "not mounted read-only"
"$PYTHON3" "$MOUNT_TOOLS/check_readonly.py" "$T/mnt" || fail "writes"
( echo x >> "$T/mnt/config.json" ) 2>"$T/err" && fail "shell append succeeded"
grep -q "Read-only file system" "$T/err" || fail "shell append: $(cat "$T/err")"
cmp "$T/ck/config.json" "$T/mnt/config.json" || fail "config.json changed"
gfs_umount "$T/mnt" || fail "unmount"
echo "PASS: read-only"
