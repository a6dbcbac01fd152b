#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/first-read.sh [CKPT] [BUILDDIR] [TENSOR]: what verifying every view costs the
# first read, against the same read unchecked, in the same run.
#
# CKPT: a DeepSpeed checkpoint (default: the one bench/integrity.sh uses,
# generated once with bench/gen_deepspeed.py --stage 3 --ws 2 --layers 8
# --hidden 1024 under /var/tmp/gatherfs-bench/integrity).  For each of
#   small tensors    the first read of the smallest bias and the smallest
#                    2-D tensor in tensors/
#   TENSOR           (if given) the first read of tensors/TENSOR
#   model.safetensors a first read of the whole file
# it mounts CKPT afresh twice, with -o verify=off (the baseline: what
# every view but pytorch_model.bin did before verify=read) and with the
# default -o verify=read (each source record checked on first use), with the
# shards cold (dropped from the page cache) and warm, and prints both times
# and their ratio.  In ZeRO-3 a small tensor has bytes in every rank's flat
# partition, so its first checked read reads every partition.
# Needs a user allowed to mount FUSE and python3.
set -eu
B=$(cd "${2:-.}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bench_setup "${1:-}"
# smallest PATTERN: the tensors/ file of the smallest tensor whose ls line matches PATTERN (awk).
smallest() {
	"$B/gatherfs-inspect" ls "$C" 2>/dev/null |
		awk -v p="$1" 'NR > 1 && $NF == "-" && $0 ~ p { print $(NF - 1), $1 }' |
		sort -n | head -1 | cut -d' ' -f2 | sed 's/%/%25/g; s|/|%2F|g'
}
sbias=$(smallest '^[^ ]*bias ')
smatrix=$(smallest '[[][0-9]+, [0-9]+[]]')
[ -n "$smatrix" ] || { echo "no 2-D tensor in $C" >&2; exit 1; }

drop() { for f in $shards; do dd if="$f" iflag=nocache count=0 status=none; done; }
warm() { cat $shards >/dev/null; }
# first MODE FILE cold|warm: seconds of the first read of FILE in a fresh
# mount with -o verify=MODE.
first() {
	"$B/gatherfs" "$C" "$W/m" -o nocrccache -o verify="$1" 2>/dev/null
	if [ "$3" = cold ]; then drop; else warm; fi
	s=$(bench_now)
	timeout 600 cat "$W/m/$2" >/dev/null
	e=$(bench_now)
	timeout 10 fusermount3 -u "$W/m"
	echo "$e - $s" | bc
}
echo "checkpoint $C ($(cat $shards | wc -c) bytes of shards)"
printf '%-28s %-5s %10s %10s %7s\n' "first read of" cache "verify=off" "=read" ratio
extra=$(printf '%s' "${3:-}" | sed 's/%/%25/g; s|/|%2F|g')
for what in ${sbias:+"tensors/$sbias"} "tensors/$smatrix" ${extra:+"tensors/$extra"} model.safetensors; do
	for cache in cold warm; do
		off=$(first off "$what" $cache)
		on=$(first read "$what" $cache)
		awk -v w="$what" -v c=$cache -v a="$off" -v b="$on" \
			'BEGIN { printf "%-28s %-5s %9.3fs %9.3fs %6.1fx\n", substr(w, 1, 28), c, a, b, b / a }'
	done
done
echo "command: bench/first-read.sh ${1:-\"\"} ${2:-.} ${3:-}"
