#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# `gatherfs-inspect ls` (and ls --all) keeps its columns aligned when a
# name is longer than the NAME column's 48 characters: the DTYPE column
# starts at the same place on every line, the header's included (Megatron
# torch_dist `_extra_state/shard_...` objects, legacy entries left out).
. "${top_srcdir:-.}/tests/lib.sh"
mktempdir
T=$TESTTMP
M="$top_srcdir/tests/data/megatron"
[ -d "$M/moe_ep2/training_torch_dist" ] || skip "fixture $M/moe_ep2 missing"

for d in moe_ep2/training_torch_dist qwen_tie_bf16/legacy_torch; do
	for all in "" --all; do
		timeout 60 "$INSPECT" ls $all "$M/$d" >"$T/ls" 2>/dev/null || fail "ls $all $d"
		long=$(awk 'length($1) > 48' "$T/ls" | wc -l)
		# where the second column starts on each line
		awk '{ match($0, /^[^ ]+ +/); print RLENGTH }' "$T/ls" | sort -u >"$T/cols"
		[ "$(wc -l <"$T/cols")" -eq 1 ] ||
			fail "ls $all $d: columns not aligned ($long names over 48): DTYPE starts at $(tr '\n' ' ' <"$T/cols")"
		echo "ok: ls $all $d: aligned ($long names over 48 characters)"
	done
done
