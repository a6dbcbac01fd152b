#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A DeepSpeed save directory without `latest`: with one tag directory it is
# read through that one (a note on stderr says so), by gatherfs-inspect and
# by the mount; with two, both refuse and list the tags.  ls and verify say
# on stderr which tag and format they read; ls --json stdout stays JSON.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
case="$CKPTS/z2_ws2_fp32_twotags/checkpoint"
[ -d "$case" ] || skip "fixture $case missing"
cp -r "$case" "$T/two" && chmod -R u+w "$T/two" || fail "copy"
rm "$T/two/latest"

# With `latest`: ls and verify name the tag on stderr, nothing else there.
"$INSPECT" ls "$case" >"$T/ls.latest" 2>"$T/err" || fail "ls: $(cat "$T/err")"
[ "$(cat "$T/err")" = "gatherfs-inspect: $case: DeepSpeed ZeRO-2, 2 ranks, tag global_step3" ] ||
	fail "ls does not say what it read: $(cat "$T/err")"
"$INSPECT" verify --tag global_step2 "$case" >/dev/null 2>"$T/err" || fail "verify: $(cat "$T/err")"
grep -q "^gatherfs-inspect: $case: DeepSpeed ZeRO-2, 2 ranks, tag global_step2\$" "$T/err" ||
	fail "verify does not say what it read: $(cat "$T/err")"
echo "ok: with latest: $(cat "$T/err")"

# Two tags, no `latest`: one line listing both, for every command and the mount.
for cmd in ls verify layout; do
	if "$INSPECT" $cmd "$T/two" >/dev/null 2>"$T/err"; then
		fail "$cmd of a save dir with two tags and no latest succeeded"
	fi
	[ "$(wc -l < "$T/err")" -eq 1 ] || fail "$cmd: want one line: $(cat "$T/err")"
	grep -q "no \`latest\` file and 2 tag directories (global_step2, global_step3)" "$T/err" ||
		fail "$cmd: the tags are not listed: $(cat "$T/err")"
done
echo "ok: two tags: $(cat "$T/err")"
mkdir "$T/mnt"
expect_mount_fail "no \`latest\` file and 2 tag directories (global_step2, global_step3)" \
	"$T/two" "$T/mnt"
# --tag still picks one.
"$INSPECT" ls --tag global_step2 "$T/two" >/dev/null 2>&1 || fail "ls --tag global_step2"

# One tag, no `latest`: that tag, with a note.
rm -r "$T/two/global_step2"
NOTE="note: $T/two has no \`latest\` file: using its only tag directory, global_step3"
"$INSPECT" ls "$T/two" >"$T/ls.one" 2>"$T/err" || fail "ls one tag: $(cat "$T/err")"
grep -q "^gatherfs-inspect: $NOTE\$" "$T/err" || fail "no note: $(cat "$T/err")"
grep -q "^gatherfs-inspect: $T/two: DeepSpeed ZeRO-2, 2 ranks, tag global_step3\$" "$T/err" ||
	fail "ls does not name the tag: $(cat "$T/err")"
cmp -s "$T/ls.latest" "$T/ls.one" || fail "ls of the only tag differs from ls through latest"
"$INSPECT" ls --json "$T/two" 2>/dev/null | "$PYTHON3" -c 'import json, sys; json.load(sys.stdin)' ||
	fail "ls --json stdout is not JSON"
"$INSPECT" verify "$T/two" >/dev/null 2>"$T/err" || fail "verify one tag: $(cat "$T/err")"
grep -q "tag global_step3\$" "$T/err" || fail "verify does not name the tag: $(cat "$T/err")"
echo "ok: one tag: $(head -1 "$T/err")"

# The mount: the same note, the same files as through `latest`.
"$INSPECT" export "$case" "$T/model.safetensors" || fail "export"
"$GATHERFS" "$T/two" "$T/mnt" 2>"$T/err" || fail "mount one tag: $(cat "$T/err")"
GFS_MOUNTS="$GFS_MOUNTS $T/mnt"
wait_for is_mounted "$T/mnt" || fail "not mounted"
grep -q "^gatherfs: $NOTE\$" "$T/err" || fail "mount: no note: $(cat "$T/err")"
cmp "$T/mnt/model.safetensors" "$T/model.safetensors" || fail "mount of the only tag differs"
gfs_umount "$T/mnt" || fail "unmount"
echo "PASS: save directories without latest"
