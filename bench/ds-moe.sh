#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/ds-moe.sh [BUILDDIR]: a sparse DeepSeek-V3-shaped mixture-of-experts
# checkpoint in DeepSpeed's expert-file layout (expert parallel 8, 8 ranks,
# ZeRO-2: 58 MoE layers x 256 experts = 14,848 expert files,
# bench/gen_ds_moe.py), against the same model saved data-parallel (ZeRO-3,
# 8 ranks, 8 files: bench/gen_deepspeed.py, bench/scale's moe row at 8
# ranks), in the same run.  Rows, for each:
#   mount time   gatherfs TAG MNT until MNT/pytorch_model.bin can be stat'ed
#                (median of 3 fresh mounts; the sources warm)
#   daemon RSS   VmRSS after mount
#   ls -l        of MNT/tensors/ (89,498 entries)
# Payloads are holes (a little disk); the checkpoints are written once under
# $GFS_BENCH_DIR (default /var/tmp/gatherfs-bench: ds-moe-ep8, ds-moe-z3).
# Needs a user allowed to mount FUSE and /usr/bin/python3 with torch.
set -eu
B=$(cd "${1:-.}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
D=${GFS_BENCH_DIR:-/var/tmp/gatherfs-bench}
SHAPE="--layers 58 --experts 256 --hidden 7168 --ffn 2048 --kv-heads 8 --vocab 129280 --ws 8"
declare -A GEN=([ep8]="gen_ds_moe.py --ep 8 $SHAPE" [z3]="gen_deepspeed.py --stage 3 --arch moe $SHAPE")
for c in ep8 z3; do
	if [ ! -e "$D/ds-moe-$c/.gen-done" ]; then
		rm -rf "$D/ds-moe-$c"
		mkdir -p "$D/ds-moe-$c"
		# shellcheck disable=SC2086
		/usr/bin/python3 "$here"/${GEN[$c]} --sparse "$D/ds-moe-$c"
	fi
done
. "$here/lib.sh"
bench_workdir
median() { tr ' ' '\n' | sort -g | awk 'NF { v[++n] = $1 } END { print v[int((n + 1) / 2)] }'; }

declare -A MT RSS LS FILES
for c in ep8 z3; do
	tag=$D/ds-moe-$c/global_step3
	FILES[$c]=$(find "$tag" -type f | wc -l)
	all=""
	for _ in 1 2 3; do
		s=$(bench_now)
		"$B/gatherfs" "$tag" "$W/m" 2>/dev/null
		timeout 600 stat "$W/m/pytorch_model.bin" >/dev/null
		all="$all $(echo "$(bench_now) - $s" | bc)"
		timeout 10 fusermount3 -u "$W/m"
	done
	MT[$c]=$(echo "$all" | median)
	"$B/gatherfs" -f "$tag" "$W/m" 2>/dev/null &
	pid=$!
	until timeout 10 stat "$W/m/pytorch_model.bin" >/dev/null 2>&1; do sleep 0.01; done
	RSS[$c]=$(awk '/VmRSS/ { printf "%.0f", $2 / 1024 }' /proc/"$pid"/status)
	s=$(bench_now)
	n=$(timeout 600 ls -l "$W/m/tensors" | wc -l)
	LS[$c]="$(printf '%.3f' "$(echo "$(bench_now) - $s" | bc)") s ($((n - 1)) entries)"
	timeout 10 fusermount3 -u "$W/m"
	wait "$pid" || true
done
printf '%-44s %16s %16s %8s\n' "" "expert files" "ZeRO-3 (8 files)" "ratio"
printf '%-44s %16s %16s\n' "source files" "${FILES[ep8]}" "${FILES[z3]}"
printf '%-44s %14.3f s %14.3f s %7.2fx\n' "mount time (median of 3)" "${MT[ep8]}" "${MT[z3]}" \
	"$(echo "${MT[ep8]} / ${MT[z3]}" | bc -l)"
printf '%-44s %12s MiB %12s MiB\n' "daemon RSS after mount" "${RSS[ep8]}" "${RSS[z3]}"
printf '%-44s %s, %s\n' "ls -l tensors/" "${LS[ep8]}" "${LS[z3]}"
echo "command: bench/ds-moe.sh ${1:-.}"
