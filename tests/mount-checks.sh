#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Mount-time checks: each is one clear line and no mount, or a documented
# behaviour said on stderr.
#   a regular file, a non-empty directory or a mount point as MOUNTPOINT;
#   tensors/ names longer than 255 bytes (cut with a hash; cp -r works);
#   checkpoint files named like a view (not shown, one line each);
#   DeepSpeed's `latest` and DCP's `.metadata` not shown (they point at what
#   the mount lacks), `latest_universal` shown;
#   -o readahead_kb above the limit; -o crc_cache= on an unusable dir;
#   numeric options out of range, -o nocrccache with crc_cache= or
#   crc_cache_max=; -o views= naming views the checkpoint lacks (all: no
#   mount; some: a warning);
#   a bad GATHERFS_ZSTD_CACHE_MB; --help listing -o max_threads once;
#   the fstab example's options through mount.fuse3.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
case="$CKPTS/z3_ws2_fp32/checkpoint"
twotags="$CKPTS/z2_ws2_fp32_twotags/checkpoint"
[ -d "$case" ] && [ -d "$twotags" ] || skip "fixtures missing"
mkdir -p "$T/mnt"

echo "== mount points"
: > "$T/file"
expect_mount_fail "$T/file: not a directory" "$case" "$T/file"
mkdir "$T/full"
: > "$T/full/x"
expect_mount_fail "$T/full: not empty" "$case" "$T/full"
[ -f "$T/full/x" ] || fail "the non-empty mount point lost its file"
gfs_mount "$case" "$T/m1" || fail "mount $case"
before=$(our_mounts)
if "$GATHERFS" "$case" "$T/m1" 2>"$T/err"; then
	fail "mounting twice on $T/m1 succeeded"
fi
[ "$(wc -l < "$T/err")" -eq 1 ] && grep -q "$T/m1: already a mount point (fuse.gatherfs)" "$T/err" ||
	fail "second mount: $(cat "$T/err")"
[ "$(our_mounts)" -eq "$before" ] || fail "the second mount stacked"
gfs_umount "$T/m1" || fail "unmount"
echo "ok: $(cat "$T/err")"

echo "== names longer than 255 bytes"
"$PYTHON3" "$MOUNT_TOOLS/make_layouts.py" "$T/lay" || fail "make_layouts.py"
gfs_mount "$T/lay/special.json" "$T/mnt" || fail "mount special.json"
max=$(ls "$T/mnt/tensors" | awk '{ if (length($0) > m) m = length($0) } END { print m }')
[ "$max" -le 255 ] || fail "a tensors/ name has $max bytes"
cp -r "$T/mnt/tensors" "$T/copy" || fail "cp -r tensors/"
[ "$(ls "$T/copy" | wc -l)" -eq "$(ls "$T/mnt/tensors" | wc -l)" ] || fail "cp -r copied other names"
"$PYTHON3" - "$T/mnt" <<'EOF' || fail "long names"
import os, sys, urllib.parse
mnt = sys.argv[1]
rows = [l.rstrip(b"\n").split(b"\t") for l in open(os.path.join(mnt, "tensors", "INDEX"), "rb")][1:]
cut = [r for r in rows if b"%~" in r[0]]
assert len(cut) == 4, f"{len(cut)} cut names"
for r in cut:
    key = urllib.parse.unquote_to_bytes(r[5]).decode()
    assert len(r[0]) <= 255 and len(r[5]) > 255, r[0]
    assert r[0].endswith(b"%~" + r[0][-16:]) and r[0][:-18] == r[5][:len(r[0]) - 18], r[0]
    p = os.path.join(mnt.encode(), b"tensors", r[0])
    if r[4] == b"-":
        assert os.getxattr(p, "user.gatherfs.name").decode() == key, key
    else:
        assert os.readlink(p) == r[4], r
print("ok: cut names keep their key in INDEX and user.gatherfs.name")
EOF
gfs_umount "$T/mnt" || fail "unmount"

echo "== checkpoint files named like a view"
cp -r "$case" "$T/shadowed"
for f in model.safetensors pytorch_model.bin layout.json pytorch_model.bin.index.json \
	model.safetensors.index.json model-00001-of-00002.safetensors; do
	echo stale > "$T/shadowed/$f"
done
"$GATHERFS" "$T/shadowed" "$T/mnt" 2>"$T/err" || fail "mount shadowed"
GFS_MOUNTS="$GFS_MOUNTS $T/mnt"
wait_for is_mounted "$T/mnt" || fail "mount shadowed"
for f in model.safetensors pytorch_model.bin layout.json pytorch_model.bin.index.json \
	model.safetensors.index.json model-00001-of-00002.safetensors; do
	grep -q "shadowed/$f: not shown: the name belongs to a gatherfs view" "$T/err" ||
		fail "no line about $f: $(cat "$T/err")"
done
for f in model.safetensors pytorch_model.bin layout.json; do
	[ "$(cat "$T/mnt/$f" | head -c 5)" = stale ] && fail "$f is the stale file"
done
for f in pytorch_model.bin.index.json model.safetensors.index.json model-00001-of-00002.safetensors; do
	[ -e "$T/mnt/$f" ] && fail "stale $f is passed through"
done
gfs_umount "$T/mnt" || fail "unmount"
echo "ok: stale files are not shown, each said"

echo "== the root shows no file pointing at what the mount lacks"
# DeepSpeed's latest names a tag directory, DCP's .metadata indexes the
# .distcp shards: neither is shown, whatever the tag; latest_universal is.
[ "$(cat "$twotags/latest")" = global_step3 ] || fail "fixture: latest is not global_step3"
for tag in global_step2 global_step3; do
	"$GATHERFS" "$twotags" "$T/mnt" -o tag=$tag 2>"$T/err" || fail "mount tag=$tag"
	GFS_MOUNTS="$GFS_MOUNTS $T/mnt"
	wait_for is_mounted "$T/mnt" || fail "mount tag=$tag"
	[ -s "$T/err" ] && fail "tag=$tag: $(cat "$T/err")"
	[ -e "$T/mnt/latest" ] && fail "tag=$tag: latest is shown"
	ls -a "$T/mnt" | grep -qx latest && fail "tag=$tag: latest is listed"
	[ -f "$T/mnt/pytorch_model.bin" ] || fail "tag=$tag: no pytorch_model.bin"
	gfs_umount "$T/mnt" || fail "unmount"
done
uni="$top_srcdir/tests/data/universal/z1_ws4_fp32/checkpoint"
dcp="$top_srcdir/tests/data/dcp/fsdp2_ws2/checkpoint"
[ -f "$uni/latest_universal" ] && [ -f "$dcp/.metadata" ] || fail "fixtures missing"
gfs_mount "$uni" "$T/mnt" -o views=bin+tensors 2>/dev/null || fail "mount $uni"
[ "$(ls -a "$T/mnt" | tr '\n' ' ')" = ". .. latest_universal pytorch_model.bin tensors " ] ||
	fail "universal fixture, views=bin+tensors: root lists $(ls -a "$T/mnt" | tr '\n' ' ')"
gfs_umount "$T/mnt" || fail "unmount"
gfs_mount "$dcp" "$T/mnt" 2>/dev/null || fail "mount $dcp"
[ "$(ls -a "$T/mnt" | tr '\n' ' ')" = ". .. config.json generation_config.json layout.json model.safetensors pytorch_model.bin tensors " ] ||
	fail "DCP: root lists $(ls -a "$T/mnt" | tr '\n' ' ')"
[ -e "$T/mnt/.metadata" ] && fail "DCP: .metadata is shown"
gfs_umount "$T/mnt" || fail "unmount"
echo "ok: no latest, no .metadata; latest_universal passed through"

echo "== the fstab options of the documentation"
if command -v mount.fuse3 >/dev/null 2>&1; then
	PATH="$top_builddir:$PATH" mount.fuse3 "$case" "$T/mnt" -t fuse.gatherfs \
		-o ro,nodev,nosuid,noexec,nofail,allow_other,dtype=bf16 || fail "mount.fuse3 (fstab options)"
	GFS_MOUNTS="$GFS_MOUNTS $T/mnt"
	wait_for is_mounted "$T/mnt" || fail "mount.fuse3 (fstab options)"
	opts=$(awk -v m="$T/mnt" '$2 == m { print $4 }' /proc/mounts)
	for o in ro nodev nosuid noexec allow_other default_permissions; do
		echo ",$opts," | grep -q ",$o," || fail "mount options $opts lack $o"
	done
	gfs_umount "$T/mnt" || fail "unmount"
	echo "ok: $opts"
else
	echo "note: mount.fuse3 not installed, skipped"
fi

echo "== options"
expect_mount_fail "readahead_kb=70000: expected an integer from 0 to 65536 (KiB" "$case" "$T/mnt" -o readahead_kb=70000
gfs_mount "$case" "$T/mnt" -o readahead_kb=65536 || fail "readahead_kb=65536"
gfs_umount "$T/mnt" || fail "unmount"
expect_mount_fail "crc_cache=$T/file: not a directory" "$case" "$T/mnt" -o crc_cache="$T/file"
expect_mount_fail "crc_cache=$T/file/sub: cannot create" "$case" "$T/mnt" -o crc_cache="$T/file/sub"
expect_mount_fail "crc_cache=/proc/gatherfs: cannot create" "$case" "$T/mnt" -o crc_cache=/proc/gatherfs
gfs_mount "$case" "$T/mnt" -o crc_cache="$T/cache/crc" || fail "crc_cache=$T/cache/crc"
[ -d "$T/cache/crc" ] || fail "crc_cache dir not made"
gfs_umount "$T/mnt" || fail "unmount"
for v in abc -1 12x 1048577; do
	GATHERFS_ZSTD_CACHE_MB=$v expect_mount_fail "GATHERFS_ZSTD_CACHE_MB=$v: expected" "$case" "$T/mnt"
done
GATHERFS_ZSTD_CACHE_MB=0 gfs_mount "$case" "$T/mnt" || fail "GATHERFS_ZSTD_CACHE_MB=0"
gfs_umount "$T/mnt" || fail "unmount"
# numbers out of range and contradictions: one line naming the option, no mount
for v in -5 0 100000 4x ""; do
	expect_mount_fail "gatherfs: -o max_threads=$v: expected an integer from 1 to 1024 (worker threads)" \
		"$case" "$T/mnt" -o max_threads=$v
done
expect_mount_fail "gatherfs: -o max_idle_threads=2000: expected an integer from 0 to 1024" \
	"$case" "$T/mnt" -o max_idle_threads=2000
expect_mount_fail "gatherfs: -o max_read=512: expected an integer from 4096 to 1048576 (bytes)" \
	"$case" "$T/mnt" -o max_read=512
expect_mount_fail "gatherfs: -o readahead_kb=-1: expected an integer from 0 to 65536" \
	"$case" "$T/mnt" -o readahead_kb=-1
expect_mount_fail "gatherfs: -o crc_cache_max=100: expected 1KiB to 1TiB" "$case" "$T/mnt" -o crc_cache_max=100
expect_mount_fail "gatherfs: -o crc_cache_max=lots: bad size" "$case" "$T/mnt" -o crc_cache_max=lots
expect_mount_fail "gatherfs: -o nocrccache contradicts -o crc_cache=" \
	"$case" "$T/mnt" -o nocrccache,crc_cache="$T/nocache"
[ -e "$T/nocache" ] && fail "nocrccache,crc_cache=: the cache directory was made"
expect_mount_fail "gatherfs: -o nocrccache contradicts -o crc_cache_max=" \
	"$case" "$T/mnt" -o nocrccache,crc_cache_max=1M
for o in max_threads=1 max_threads=1024 max_idle_threads=-1 max_read=4096 crc_cache_max=64Mi; do
	gfs_mount "$case" "$T/mnt" -o $o 2>"$T/err" || fail "-o $o: $(cat "$T/err")"
	# the one line this checkpoint always gets
	grep -v "universal view of ZeRO-3 with 2 param groups in 2 sub-groups: DeepSpeed >= 0.18 loads it" "$T/err" && fail "-o $o"
	[ -f "$T/mnt/pytorch_model.bin" ] || fail "-o $o: no pytorch_model.bin"
	gfs_umount "$T/mnt" || fail "unmount"
done
echo "ok: ranges and contradictions"

echo "== -o views= naming views the checkpoint lacks"
plain="$top_srcdir/tests/data/plain/llama_bf16"
for src in "$dcp" "$plain"; do
	expect_mount_fail "gatherfs: -o views=optim+universal: no such view for this checkpoint (optim: no optimizer state; universal: no DeepSpeed optimizer state): not mounting" \
		"$src" "$T/mnt" -o views=optim+universal
done
# in part: one warning line, and the mount of the others
gfs_mount "$dcp" "$T/mnt" -o views=safetensors+optim 2>"$T/err" || fail "views=safetensors+optim: $(cat "$T/err")"
[ "$(wc -l < "$T/err")" -eq 1 ] &&
	grep -q "gatherfs: -o views=safetensors+optim: warning: not shown (optim: no optimizer state)" "$T/err" ||
	fail "views=safetensors+optim: $(cat "$T/err")"
[ "$(ls "$T/mnt" | tr '\n' ' ')" = "config.json generation_config.json model.safetensors " ] ||
	fail "views=safetensors+optim: root lists $(ls "$T/mnt" | tr '\n' ' ')"
gfs_umount "$T/mnt" || fail "unmount"
echo "ok: $(cat "$T/err")"
# a universal view only DeepSpeed >= 0.18 loads: shown, said once in the note
gfs_mount "$case" "$T/mnt" -o views=optim+universal 2>"$T/err" || fail "z3 views=optim+universal: $(cat "$T/err")"
[ "$(wc -l < "$T/err")" -eq 1 ] &&
	grep -q "universal view of ZeRO-3 with 2 param groups in 2 sub-groups: DeepSpeed >= 0.18 loads it" "$T/err" ||
	fail "z3 views=optim+universal: $(cat "$T/err")"
[ -f "$T/mnt/optim/exp_avg.safetensors" ] || fail "z3 views=optim+universal: no optim/"
[ -f "$T/mnt/latest_universal" ] || fail "z3 views=optim+universal: no universal view"
gfs_umount "$T/mnt" || fail "unmount"
echo "ok: $(cat "$T/err")"
"$GATHERFS" --help >"$T/out" 2>&1 || fail "--help"
[ "$(grep -c 'max_threads' "$T/out")" -eq 1 ] || fail "--help: $(grep max_threads "$T/out")"
grep -q "max_idle_threads" "$T/out" && grep -q "allow_other" "$T/out" || fail "--help lost FUSE options"
echo "PASS: mount checks"
