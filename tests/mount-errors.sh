#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Mounting something broken exits non-zero before daemonizing, with one line
# on stderr naming the file and the problem, and leaves no mount behind.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
case="$CKPTS/z3_ws2_fp32"
[ -d "$case/checkpoint" ] || skip "fixture $case missing"
mkdir -p "$T/mnt" "$T/empty"

# A copy with a truncated shard.
cp -r "$case/checkpoint" "$T/broken"
chmod -R u+w "$T/broken"
shard=$(ls "$T/broken"/global_step3/*optim_states.pt | head -n 1)
truncate -s 100000 "$shard"
expect_mount_fail "$shard" "$T/broken" "$T/mnt"

# A copy whose model states file is gone.
cp -r "$case/checkpoint" "$T/nomodel"
chmod -R u+w "$T/nomodel"
rm "$T/nomodel"/global_step3/*model_states.pt
expect_mount_fail "$T/nomodel" "$T/nomodel" "$T/mnt"

expect_mount_fail "$T/empty: no known checkpoint format (looked for: DeepSpeed" "$T/empty" "$T/mnt"
mkdir -p "$T/readme"
echo "a model" > "$T/readme/README"
expect_mount_fail "$T/readme: no known checkpoint format (looked for: DeepSpeed" "$T/readme" "$T/mnt"
expect_mount_fail "$T/missing" "$T/missing" "$T/mnt"
expect_mount_fail "global_step9" "$case/checkpoint" "$T/mnt" -o tag=global_step9
expect_mount_fail "dtype=int8" "$case/checkpoint" "$T/mnt" -o dtype=int8
expect_mount_fail "usage:" "$case/checkpoint"
expect_mount_fail "^gatherfs: $T/nomnt: no such directory (create it first)$" "$case/checkpoint" "$T/nomnt"
expect_mount_fail "^gatherfs: $T/nomnt: no such directory (create it first)$" "$case/checkpoint" "$T/nomnt" -o ro
expect_mount_fail "bogus" "$case/checkpoint" "$T/mnt" -o bogus

# A layout whose source changed size since the layout was written.
"$PYTHON3" "$MOUNT_TOOLS/make_layouts.py" "$T/lay" || fail "make_layouts.py"
truncate -s 1000 "$T/lay/src/a.bin"
expect_mount_fail "a.bin" "$T/lay/special.json" "$T/mnt"

"$GATHERFS" --help >"$T/out" 2>&1 || fail "--help"
grep -q "dtype=bf16|fp16|fp32" "$T/out" && grep -q "tag=TAG" "$T/out" &&
	grep -q "allow_other" "$T/out" || fail "--help: $(cat "$T/out")"
"$GATHERFS" --version >"$T/out" 2>&1 || fail "--version"
grep -q "^gatherfs [0-9]" "$T/out" || fail "--version: $(cat "$T/out")"
echo "PASS: errors"
