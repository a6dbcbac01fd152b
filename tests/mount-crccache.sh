#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The persistent CRC-32 cache (-o crc_cache=DIR): a remount takes the CRCs
# from DIR, a damaged or stale cache file is ignored, -o nocrccache writes
# none, and the archive passes `unzip -t` in every case.  Also: splice and
# copy (-o nosplice) reads give the same bytes, and -o readahead_kb sets the
# mount's read-ahead window (as root), above 1 MiB too.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
case="$CKPTS/z3_ws3_bf16"
[ -d "$case/checkpoint" ] || skip "fixture $case missing"
command -v unzip >/dev/null || skip "no unzip"
cp -r "$case/checkpoint" "$T/ck" && chmod -R u+w "$T/ck" || fail "copy"
C=$T/cache

# test_zip OPTS...: mount, check the archive, unmount.
test_zip() {
	gfs_mount "$T/ck" "$T/mnt" "$@" || fail "mount $*"
	unzip -tq "$T/mnt/pytorch_model.bin" >"$T/unzip" 2>&1 || fail "unzip -t ($*): $(cat "$T/unzip")"
	gfs_umount "$T/mnt" || fail "unmount"
}

test_zip -o "crc_cache=$C"
n=$(ls "$C"/*.crc 2>/dev/null | wc -l)
[ "$n" -eq 1 ] || fail "expected one cache file, found $n"
f=$(ls "$C"/*.crc)
cp "$f" "$T/good"
test_zip -o "crc_cache=$C"
cmp -s "$f" "$T/good" || fail "a valid cache file was rewritten differently"

# Damage every CRC byte: the file is ignored, then rewritten correctly.
"$PYTHON3" - "$f" <<'PY' || fail "damage"
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
for i in range(36 + 8, len(b) - 4, 12):
    for k in range(4):
        b[i + k] ^= 0x5A
open(p, "wb").write(b)
PY
test_zip -o "crc_cache=$C"
cmp -s "$f" "$T/good" || fail "a damaged cache file was not replaced"

# A truncated file is ignored too.
head -c 20 "$T/good" >"$f"
test_zip -o "crc_cache=$C"

# A changed source gives a new key.
touch "$T/ck/global_step3/"*model_states.pt
test_zip -o "crc_cache=$C"
n=$(ls "$C"/*.crc | wc -l)
[ "$n" -eq 2 ] || fail "a touched source did not change the key ($n files)"

rm -rf "$C"
test_zip -o "crc_cache=$C" -o nocrccache
[ -e "$C" ] && fail "-o nocrccache wrote $C"

# Splice and copy reads agree.
gfs_mount "$T/ck" "$T/mnt" -o nocrccache || fail "mount"
gfs_mount "$T/ck" "$T/mnt2" -o nocrccache -o nosplice || fail "mount nosplice"
for f in pytorch_model.bin model.safetensors; do
	cmp "$T/mnt/$f" "$T/mnt2/$f" || fail "$f: splice and copy differ"
done
gfs_umount "$T/mnt2" || fail "unmount"
gfs_umount "$T/mnt" || fail "unmount"

# ra_kb: the read-ahead window of the mount at $T/mnt.
ra_kb() { cat "/sys/class/bdi/$(mountpoint -d "$T/mnt")/read_ahead_kb"; }
if [ "$(id -u)" = 0 ] && command -v mountpoint >/dev/null; then
	for kb in default 4096 16384; do
		if [ $kb = default ]; then
			gfs_mount "$T/ck" "$T/mnt" -o nocrccache || fail "mount"
			want=512
		else
			gfs_mount "$T/ck" "$T/mnt" -o nocrccache -o readahead_kb=$kb || fail "mount"
			want=$kb
		fi
		got=$(ra_kb) || fail "no bdi read_ahead_kb for the mount"
		[ "$got" = "$want" ] || fail "readahead_kb=$kb: the mount's window is $got KiB, not $want"
		gfs_umount "$T/mnt" || fail "unmount"
	done
fi
echo "PASS: crc cache"
