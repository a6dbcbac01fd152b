#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/fp8-read.sh [BUILDDIR [CKPT]]: an FP8 checkpoint (default: a sparse DeepSeek-V3-shaped
# one written by bench/gen_fp8_deepseek.py: 61 layers, 256 experts, hub naming and shapes, ~689
# GB of holes) mounted as stored and with -o dequant=bf16, in the same run: mount time, the
# daemon's peak RSS, and the first READ_GIB (default 8) GiB of model.safetensors read with
# `dd bs=1M`, in output bytes per second; the dequantized view's rate over the FP8 view's
# (target >= 0.5).  GEN_ARGS (e.g. "--layers 8 --experts 32") shrinks the generated model.
# Needs a user allowed to mount FUSE and /usr/bin/python3 (PYTHON3).
set -eu
B=$(cd "${1:-.}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
READ_GIB=${READ_GIB:-8}
W=$(mktemp -d "${TMPDIR:-/var/tmp}/gatherfs-bench-fp8.XXXXXX")
cleanup() { fusermount3 -u "$W/m" 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
mkdir "$W/m"
if [ $# -ge 2 ]; then
	C=$2
else
	C="$W/ckpt"
	# shellcheck disable=SC2086
	"${PYTHON3:-/usr/bin/python3}" "$HERE/gen_fp8_deepseek.py" "$C" ${GEN_ARGS:-}
fi

mounted() { awk -v m="$W/m" '$2 == m { f = 1 } END { exit !f }' /proc/mounts; }

# run LABEL [OPT...]: mount C on $W/m in the foreground, time the mount, read, report, unmount.
run() {
	label=$1
	shift
	s=$(date +%s.%N)
	"$B/gatherfs" -f "$C" "$W/m" "$@" &
	pid=$!
	i=0
	until mounted; do
		i=$((i + 1))
		[ $i -lt 3000 ] || { echo "mount failed" >&2; exit 1; }
		sleep 0.05
	done
	m=$(date +%s.%N)
	size=$(stat -c %s "$W/m/model.safetensors")
	r0=$(date +%s.%N)
	dd if="$W/m/model.safetensors" of=/dev/null bs=1M count=$((READ_GIB * 1024)) 2>/dev/null
	r1=$(date +%s.%N)
	rss=$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status")
	fusermount3 -u "$W/m"
	wait $pid
	echo "$label $s $m $r0 $r1 $rss $size" | awk -v g="$READ_GIB" '{
		rate = g * 1073741824 / ($5 - $4)
		printf "%-14s mount %6.2f s  RSS %7.1f MiB  view %8.1f GB  first %d GiB: %7.1f MB/s\n",
		       $1, $3 - $2, $6 / 1024, $7 / 1e9, g, rate / 1e6
		print rate > "/dev/stderr" }' 2>"$W/rate.$label"
}

run fp8
run dequant=bf16 -o dequant=bf16
awk 'FNR == 1 { r[++n] = $1 } END { printf "dequant/fp8: %.2fx (target >= 0.5x)\n", r[2] / r[1] }' \
	"$W/rate.fp8" "$W/rate.dequant=bf16"
