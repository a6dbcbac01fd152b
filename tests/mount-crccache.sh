#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The persistent CRC-32 cache (-o crc_cache=DIR): a remount takes the CRCs
# from DIR, a damaged or stale cache file is ignored, -o nocrccache writes
# none, and the archive passes `unzip -t` in every case; -o crc_cache_max
# bounds it, evicting the least recently used entries, with two daemons too.  Also: splice and
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

rm -rf "$XDG_CACHE_HOME"
test_zip -o nocrccache
[ -e "$XDG_CACHE_HOME" ] && fail "-o nocrccache wrote $XDG_CACHE_HOME"

# -o crc_cache_max: the tiny fixtures' entries are all one size S (one
# model); with room for FIT of them, entry a (key 1, used again after
# key 2's b) outlives b, the least recently used, when key FIT+1 is
# written; after every write the entries total at most the bound.
B=$T/bounded MAX=2048
cache_total() { cat "$B"/*.crc 2>/dev/null | wc -c; }
# use_key N: mount the Nth (fixture, dtype), read pytorch_model.bin's central directory.
use_key() {
	# shellcheck disable=SC2046
	set -- $(ls "$CKPTS" | grep -v '\.' | awk '{ for (d = 0; d < 3; d++) print $0, d }' | sed -n "${1}p")
	dt=$(echo fp32 bf16 fp16 | cut -d' ' -f$(($2 + 1)))
	gfs_mount "$CKPTS/$1/checkpoint" "$T/mnt" -o "crc_cache=$B,crc_cache_max=$MAX,dtype=$dt" ||
		fail "mount $1 dtype=$dt"
	tail -c 100 "$T/mnt/pytorch_model.bin" >/dev/null || fail "read $1 dtype=$dt"
	gfs_umount "$T/mnt" || fail "unmount"
	[ "$(cache_total)" -le $MAX ] || fail "key $1 dtype=$dt: the entries total $(cache_total) bytes, above $MAX"
	[ -z "$(ls "$B" | grep -v '\.crc$')" ] || fail "left in the cache: $(ls "$B" | grep -v '\.crc$')"
}
use_key 1
a=$(ls "$B")
S=$(cache_total) FIT=$((MAX / S))
[ "$FIT" -ge 2 ] && [ "$FIT" -le 25 ] || fail "entry size $S: no test for a bound of $MAX"
use_key 2
b=$(ls "$B" | grep -vx "$a")
[ -n "$b" ] || fail "key 2 wrote no entry"
sleep 0.1
use_key 1
[ "$(ls "$B" | wc -l)" -eq 2 ] || fail "key 1 again: $(ls "$B")"
k=3
while [ $k -le $((FIT + 1)) ]; do
	use_key $k
	k=$((k + 1))
done
[ "$(ls "$B"/*.crc | wc -l)" -eq "$FIT" ] || fail "$((FIT + 1)) keys, bound $FIT entries: $(ls "$B" | wc -l) kept"
[ -e "$B/$a" ] || fail "the entry used last but FIT - 1 was evicted"
[ -e "$B/$b" ] && fail "the least recently used entry was kept"
echo "ok: crc_cache_max=$MAX: $FIT entries of $S bytes kept, the least recently used evicted"

# Two daemons sharing the cache write at once: still bounded, no temporary left.
# (keys past the ones used above: new entries)
gfs_mount "$CKPTS/z3_ws3_bf16/checkpoint" "$T/mnt" -o "crc_cache=$B,crc_cache_max=$MAX,dtype=fp16" ||
	fail "mount 1"
gfs_mount "$CKPTS/z3_ws3_fp32_subgroups/checkpoint" "$T/mnt2" -o "crc_cache=$B,crc_cache_max=$MAX,dtype=fp16" ||
	fail "mount 2"
tail -c 100 "$T/mnt/pytorch_model.bin" >/dev/null & p1=$!
tail -c 100 "$T/mnt2/pytorch_model.bin" >/dev/null & p2=$!
wait $p1 && wait $p2 || fail "parallel reads"
gfs_umount "$T/mnt2" || fail "unmount"
gfs_umount "$T/mnt" || fail "unmount"
[ "$(cache_total)" -le $MAX ] || fail "two daemons: the entries total $(cache_total) bytes, above $MAX"
[ -z "$(ls "$B" | grep -v '\.crc$')" ] || fail "two daemons left: $(ls "$B" | grep -v '\.crc$')"
[ -f "$B/.lock" ] || fail "no lock file"
echo "ok: two daemons, $(ls "$B" | wc -l) entries, $(cache_total) bytes"

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
	for kb in default 1024 16384; do
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
