#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# How the mount's files meet the page cache.  By default pytorch_model.bin
# (and each .bin shard) is opened with direct I/O: every read reaches the
# daemon, a private mapping (torch.load mmap=True) still reads the right
# bytes, and so does a shared one on Linux 6.6 and later (gatherfs asks for
# FUSE_DIRECT_IO_ALLOW_MMAP; older kernels refuse it with ENODEV);
# model.safetensors and tensors/ files are cached, so a second read does not
# reach the daemon.  With -o bin_cache pytorch_model.bin is cached too and
# maps shared; with -o tensors_direct tensors/ files take direct I/O as
# pytorch_model.bin does (same bytes, a second read served again).  Reads reaching the daemon are counted by its rchar (pread
# bytes; -o nosplice so that every byte is a pread).
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
case="$CKPTS/z3_ws3_bf16"
[ -d "$case/checkpoint" ] || skip "fixture $case missing"

# served FILE: bytes the daemon ($GFS_PID) preads while FILE is read once.
served() {
	a=$(awk '/^rchar/ { print $2 }' "/proc/$GFS_PID/io")
	cat "$1" >/dev/null || fail "cat $1"
	b=$(awk '/^rchar/ { print $2 }' "/proc/$GFS_PID/io")
	echo $((b - a))
}

# expect_cached FILE yes|no: after a first read (which may also compute the
# zip CRCs), is a second one served from the page cache, or again by the
# daemon?  Tensor bytes are most of every file tested here; headers are
# generated, not read.
expect_cached() {
	size=$(stat -c %s "$1")
	served "$1" >/dev/null
	again=$(served "$1")
	case $2 in
	yes) [ "$again" -lt $((size / 2)) ] || fail "$1: a second read was served again ($again of $size bytes)" ;;
	no) [ "$again" -ge $((size / 2)) ] || fail "$1: a second read was served only $again of $size bytes" ;;
	esac
}

# maps FILE SHARED_MUST_WORK: private and shared read-only mappings of FILE
# against its bytes read with read(2).
maps() {
	"$PYTHON3" - "$1" "$2" <<'PY' || fail "mappings of $1"
import errno, hashlib, mmap, sys
path, shared_must_work = sys.argv[1], sys.argv[2] == "yes"
want = hashlib.sha256(open(path, "rb").read()).hexdigest()
with open(path, "rb") as f:
    m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
    got = hashlib.sha256(m).hexdigest()
    assert got == want, f"{path}: private mapping differs from read(2)"
    try:
        m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    except OSError as e:
        assert e.errno == errno.ENODEV and not shared_must_work, f"{path}: shared mapping: {e}"
        sys.exit(0)
    got = hashlib.sha256(m).hexdigest()
    assert got == want, f"{path}: shared mapping differs from read(2)"
PY
}

ck=$case/checkpoint
# direct-I/O files map shared where the kernel knows FUSE_DIRECT_IO_ALLOW_MMAP (6.6)
direct_shared=$(uname -r | awk -F. '{ print ($1 > 6 || ($1 == 6 && $2 + 0 >= 6)) ? "yes" : "no" }')
gfs_mount_fg "$ck" "$T/mnt" -o nosplice,nocrccache || fail "mount"
M=$T/mnt
expect_cached "$M/pytorch_model.bin" no
expect_cached "$M/model.safetensors" yes
big=$(ls -S "$M"/tensors/* | head -1)
expect_cached "$big" yes
maps "$M/pytorch_model.bin" "$direct_shared"
maps "$M/model.safetensors" yes
sha_direct=$(sha256sum <"$M/pytorch_model.bin" | cut -d' ' -f1)
sha_big=$(sha256sum <"$big" | cut -d' ' -f1)
gfs_umount "$M" || fail "unmount"

gfs_mount_fg "$ck" "$M" -o nosplice,nocrccache,tensors_direct || fail "mount -o tensors_direct"
expect_cached "$big" no
expect_cached "$M/model.safetensors" yes
maps "$big" "$direct_shared"
[ "$(sha256sum <"$big" | cut -d' ' -f1)" = "$sha_big" ] ||
	fail "$big differs between the page cache and -o tensors_direct"
gfs_umount "$M" || fail "unmount"
gfs_mount_fg "$ck" "$M" -o nocrccache,tensors_direct || fail "mount -o tensors_direct (splice)"
[ "$(sha256sum <"$big" | cut -d' ' -f1)" = "$sha_big" ] ||
	fail "$big differs between the page cache and -o tensors_direct, spliced"
gfs_umount "$M" || fail "unmount"

gfs_mount_fg "$ck" "$M" -o nosplice,nocrccache,bin_cache || fail "mount -o bin_cache"
expect_cached "$M/pytorch_model.bin" yes
maps "$M/pytorch_model.bin" yes
sha_cached=$(sha256sum <"$M/pytorch_model.bin" | cut -d' ' -f1)
[ "$sha_direct" = "$sha_cached" ] || fail "pytorch_model.bin differs between direct I/O and -o bin_cache"
gfs_umount "$M" || fail "unmount"

# The .bin shards of -o shard_size are zip views too.
gfs_mount_fg "$ck" "$M" -o nosplice,nocrccache,shard_size=100K || fail "mount -o shard_size"
n=$(ls "$M"/pytorch_model-*.bin | wc -l)
[ "$n" -ge 2 ] || fail "expected .bin shards, found $n"
expect_cached "$(ls -S "$M"/pytorch_model-*.bin | head -1)" no
gfs_umount "$M" || fail "unmount"
echo "PASS: io modes"
