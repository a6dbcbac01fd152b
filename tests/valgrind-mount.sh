#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The daemon under valgrind (memcheck, --leak-check=full, definite leaks
# and every memory error fail): mount a ZeRO-3 fixture as stored and a
# ZeRO-1 one with -o dtype=bf16,shard_size=..., read every view and compare
# it with `gatherfs-inspect export`, read a changed source (the EIO path),
# then unmount; a third mount is stopped with SIGTERM.  Each daemon must
# exit with status 0 (valgrind's --error-exitcode is 99).  Uses the
# GATHERFS_WRAPPER hook of tests/mount-lib.sh; set GATHERFS_VALGRIND=no to
# skip.
. "${top_srcdir:-.}/tests/lib.sh"
[ "${GATHERFS_VALGRIND:-yes}" = no ] && skip "GATHERFS_VALGRIND=no"
command -v valgrind >/dev/null 2>&1 || skip "valgrind not installed"
# A sanitizer build cannot run under valgrind.
if nm "$top_builddir/gatherfs" 2>/dev/null | grep -q "__asan_init\|__ubsan_handle"; then
	skip "gatherfs is built with sanitizers"
fi
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
GATHERFS_WRAPPER="valgrind -q --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99 --log-file=$T/vg.%p"
GFS_WAIT_TICKS=1200
z3="$CKPTS/z3_ws2_fp32"
z1="$CKPTS/z1_ws2_fp32"
[ -d "$z3/checkpoint" ] && [ -d "$z1/checkpoint" ] || skip "fixtures missing"

# vg_fail WHAT: fail with valgrind's logs.
vg_fail() {
	cat "$T"/vg.* >&2 2>/dev/null
	fail "$1"
}

# same MNT/FILE EXPORTED: the mounted file equals the exported one.
same() {
	timeout 120 cmp "$1" "$2" || vg_fail "$1 differs from gatherfs-inspect export"
}

echo "== $(basename "$z3"), as stored"
mkdir -p "$T/z3"
"$INSPECT" export "$z3/checkpoint" "$T/z3/pytorch_model.bin" >/dev/null 2>&1 || fail "export bin"
"$INSPECT" export "$z3/checkpoint" "$T/z3/model.safetensors" >/dev/null 2>&1 || fail "export safetensors"
rm -rf "$T/copy" && cp -r "$z3/checkpoint" "$T/copy" && chmod -R u+w "$T/copy" || fail "copy"
gfs_mount "$T/copy" "$T/m1" || vg_fail "mount under valgrind"
same "$T/m1/pytorch_model.bin" "$T/z3/pytorch_model.bin"
same "$T/m1/model.safetensors" "$T/z3/model.safetensors"
cat "$T/m1/tensors/"* "$T/m1/layout.json" >/dev/null || vg_fail "cat tensors/"
getfattr -d "$T/m1/tensors/embed.weight" >/dev/null 2>&1 || true
# The EIO path: a shard rewritten in place.
f=$(ls "$T/copy/global_step3/"*model_states.pt | head -n 1)
head -c "$(stat -c %s "$f")" /dev/urandom | dd of="$f" conv=notrunc status=none
"$PYTHON3" "$MOUNT_TOOLS/fault_read.py" "$T/m1/pytorch_model.bin" | grep -q "^EIO " ||
	vg_fail "changed source: no EIO"
gfs_umount "$T/m1" || vg_fail "$(basename "$z3"): valgrind reported errors or the daemon failed"

echo "== $(basename "$z1"), dtype=bf16, HF shards"
"$INSPECT" export --dtype bf16 --shard-size 200K "$z1/checkpoint" "$T/z1/" >/dev/null 2>&1 ||
	fail "export shards"
gfs_mount "$z1/checkpoint" "$T/m2" -o dtype=bf16,shard_size=200K || vg_fail "mount under valgrind"
n=0
for f in "$T/z1"/*; do
	same "$T/m2/$(basename "$f")" "$f"
	n=$((n + 1))
done
[ $n -ge 2 ] || fail "expected several shard files, got $n"
gfs_umount "$T/m2" || vg_fail "$(basename "$z1"): valgrind reported errors or the daemon failed"

echo "== SIGTERM"
gfs_mount_fg "$z3/checkpoint" "$T/m3" || vg_fail "mount under valgrind"
cat "$T/m3/pytorch_model.bin" >/dev/null || vg_fail "read"
kill -TERM "$GFS_PID"
wait_child "$GFS_PID" 120
[ "$CHILD_RC" = running ] && vg_fail "daemon still running 120 s after SIGTERM"
[ "$CHILD_RC" = 0 ] || vg_fail "SIGTERM: exit status $CHILD_RC"
wait_unmounted "$T/m3" || fail "still mounted after SIGTERM"
[ "$(ls "$T"/vg.* 2>/dev/null | wc -l)" -ge 3 ] || fail "valgrind did not run 3 daemons"
[ -z "$(cat "$T"/vg.* 2>/dev/null)" ] || vg_fail "valgrind printed something"
echo "PASS: valgrind clean (3 daemons)"
