#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Megatron inputs that must never be served wrong (issue 41; docs/megatron.md),
# made from the real runs of tests/data/megatron by copying or editing files:
#  - a legacy rank file copied over another (tensor, pipeline or expert rank):
#    its args say which rank saved it, the mount and verify refuse it.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
DATA="$top_srcdir/tests/data/megatron"

# fresh CASE: a writable copy of CASE's legacy save in $T/bad
fresh() {
	rm -rf "$T/bad"
	cp -r "$DATA/$1/legacy_torch" "$T/bad"
	chmod -R u+w "$T/bad"
}
I="$T/bad/iter_0000003"
mkdir -p "$T/mnt"
# refused PATTERN DIR: the mount, inspect ls and inspect verify refuse DIR with PATTERN
refused() {
	expect_refused "$1" "$2"
	if timeout 120 "$INSPECT" verify "$2" >"$T/v" 2>&1; then
		fail "verify $2 succeeded: $(cat "$T/v")"
	fi
	grep -q -- "$1" "$T/v" || fail "verify $2: $(cat "$T/v")"
}

echo "== a rank file copied over another"
fresh tp2_pp2; cp "$I/mp_rank_00_001/model_optim_rng.pt" "$I/mp_rank_01_001/model_optim_rng.pt"
refused "mp_rank_01_001/model_optim_rng.pt: its args say rank 2 saved it (tensor rank 0, pipeline stage 1, expert rank 0), not tensor rank 1, pipeline stage 1, expert rank 0: another rank's file" "$T/bad"
fresh tp2_pp2; cp "$I/mp_rank_00_000/model_optim_rng.pt" "$I/mp_rank_00_001/model_optim_rng.pt"
refused "mp_rank_00_001/model_optim_rng.pt: its args say rank 0 saved it" "$T/bad"
fresh moe_ep2; cp "$I/mp_rank_00_000/model_optim_rng.pt" "$I/mp_rank_00_001/model_optim_rng.pt"
refused "mp_rank_00_001/model_optim_rng.pt: its args say rank 0 saved it (tensor rank 0, pipeline stage 0, expert rank 0), not tensor rank 0, pipeline stage 0, expert rank 1" "$T/bad"
fresh moe_pp2_ep2; cp "$I/mp_rank_00_001_000/model_optim_rng.pt" "$I/mp_rank_00_001_001/model_optim_rng.pt"
refused "mp_rank_00_001_001/model_optim_rng.pt: its args say rank 2 saved it" "$T/bad"
fresh tp2_pp1; cp "$I/mp_rank_00/model_optim_rng.pt" "$I/mp_rank_01/model_optim_rng.pt"
refused "mp_rank_01/model_optim_rng.pt: its args say rank 0 saved it" "$T/bad"
# every real save's files are who they say
for c in tp1_pp1 tp2_pp1 tp1_pp2 tp2_pp2 moe_ep2 moe_pp2_ep2 mqa_tie qwen_tie_bf16; do
	timeout 120 "$INSPECT" verify "$DATA/$c/legacy_torch" >"$T/v" 2>&1 || fail "verify $c: $(cat "$T/v")"
done
echo "megatron-wrong: OK"
