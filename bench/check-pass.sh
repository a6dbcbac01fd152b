#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/check-pass.sh [CKPT] [BUILDDIR] [BASE_BUILDDIR] [ROUNDS]: the cost of
# the check pass (every source record's CRC-32 checked before the first byte
# of a view is served), in the same run as its baselines; with
# BASE_BUILDDIR, the same for another build, rounds interleaved.
#
# CKPT: a DeepSpeed checkpoint (default: the one of bench/crc-first-read.sh,
# see bench_ckpt in bench/lib.sh); its shards and the squashfs image are
# warm.  Each of ROUNDS (default 3) rounds times:
#   squashfuse_ll  the first dd bs=1M of pytorch_model.bin from a fresh
#                  squashfuse_ll mount of an uncompressed squashfs image of
#                  the file (gatherfs-inspect export; mksquashfs -noI -noD
#                  -noF -noX)
#   first dd       the same from a fresh gatherfs mount with -o nocrccache
#                  (no CRC-32 known: every source record is checked)
#   state dict     checkpoint to state dict: a fresh gatherfs mount
#                  (-o nocrccache) and python3 -c torch.load of
#                  MNT/pytorch_model.bin, mount time and the whole python
#                  process included
#   local copy     python3 -c torch.load of the file exported to local disk
#                  (gatherfs-inspect export), whole process: what no mount
#                  can beat (the import of torch and torch.load itself)
#   zero_to_fp32   DeepSpeed's way, if DS_ZERO_TO_FP32 is set (see ds_shim
#                  in bench/lib.sh: "real" also times DeepSpeed's import):
#                  zero_to_fp32.py CKPT out.bin, then python3 -c torch.load
#                  of out.bin
# and prints the best of the rounds and the ratios.  Needs a user allowed
# to mount FUSE, /usr/bin/python3 with torch, squashfuse_ll and mksquashfs.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bench_ab 3 "$@"
mkdir "$W/img"
"$B/gatherfs-inspect" export "$C" "$W/img/pytorch_model.bin" >/dev/null 2>&1
size=$(stat -c %s "$W/img/pytorch_model.bin")
mksquashfs "$W/img" "$W/plain.sqfs" -noI -noD -noF -noX -no-progress -quiet >/dev/null
ZF=
if ds_shim "$W/ds"; then ZF=1; else echo "zero_to_fp32 row skipped" >&2; fi
load() { cut -d' ' -f1-3 /proc/loadavg; }
minf() { awk -v a="$1" -v b="$2" 'BEGIN { print (b < a ? b : a) }'; }
echo "checkpoint $C ($(cat $shards | wc -c) bytes in $(echo $shards | wc -w) shards, pytorch_model.bin $size bytes), $(nproc) CPUs, load $(load)"
echo "build $B${A:+, base $A}"
best_sq=1e9 best_b=1e9 best_a=1e9 sd_b=1e9 sd_a=1e9 sd_l=1e9 zf=1e9
r=1
while [ "$r" -le "$rounds" ]; do
	cat $shards "$W/plain.sqfs" "$W/img/pytorch_model.bin" >/dev/null
	t=$(sqfs_dd_s "$W/plain.sqfs" "$W/m"); best_sq=$(minf "$best_sq" "$t")
	line="round $r: squashfuse_ll dd $t s"
	if [ -n "$A" ]; then
		t=$(first_dd_s "$A" "$C" "$W/m" 2>/dev/null); best_a=$(minf "$best_a" "$t")
		line="$line, base first dd $t s"
	fi
	t=$(first_dd_s "$B" "$C" "$W/m" 2>/dev/null); best_b=$(minf "$best_b" "$t")
	line="$line, first dd $t s"
	if [ -n "$A" ]; then
		t=$(gfs_to_sd "$A" "$C" "$W/m" 2>/dev/null); sd_a=$(minf "$sd_a" "$t")
		line="$line, base state dict $t s"
	fi
	t=$(gfs_to_sd "$B" "$C" "$W/m" 2>/dev/null); sd_b=$(minf "$sd_b" "$t")
	line="$line, state dict $t s"
	s=$(date +%s.%N)
	/usr/bin/python3 -c 'import sys, torch; torch.load(sys.argv[1])' "$W/img/pytorch_model.bin"
	t=$(echo "$(date +%s.%N) - $s" | bc); sd_l=$(minf "$sd_l" "$t")
	line="$line, local copy $t s"
	if [ -n "$ZF" ]; then
		t=$(ds_to_sd "$W/ds" "$C" "$W/out.bin"); zf=$(minf "$zf" "$t")
		line="$line, zero_to_fp32 $t s"
	fi
	echo "$line (load $(load))"
	r=$((r + 1))
done
# show LABEL SECONDS BASELINE_LABEL BASELINE_SECONDS
show() {
	awk -v l="$1" -v t="$2" -v bl="$3" -v bt="$4" -v b="$size" 'BEGIN {
		printf "%-44s %8.3f s (%5.2f GB/s); %s %.3f s: %.2fx\n", l, t, b / t / 1e9, bl, bt, bt / t }'
}
echo "== best of $rounds (load $(load))"
show "first dd, gatherfs -o nocrccache" "$best_b" "squashfuse_ll" "$best_sq"
[ -z "$A" ] || show "first dd, base gatherfs -o nocrccache" "$best_a" "squashfuse_ll" "$best_sq"
[ -z "$A" ] || show "first dd, gatherfs" "$best_b" "base" "$best_a"
if [ -n "$ZF" ]; then
	show "state dict, gatherfs" "$sd_b" "zero_to_fp32 ($DS_MODE) + torch.load" "$zf"
	[ -z "$A" ] || show "state dict, base gatherfs" "$sd_a" "zero_to_fp32 ($DS_MODE) + torch.load" "$zf"
	show "state dict, torch.load of a local copy" "$sd_l" "zero_to_fp32 ($DS_MODE) + torch.load" "$zf"
fi
[ -z "$A" ] || show "state dict, gatherfs" "$sd_b" "base" "$sd_a"
show "state dict, gatherfs" "$sd_b" "local copy" "$sd_l"
echo "command: DS_ZERO_TO_FP32=${DS_ZERO_TO_FP32:-} bench/check-pass.sh ${1:-\"\"} ${2:-.} ${3:-} $rounds"
