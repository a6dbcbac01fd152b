#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/first-read.sh [CKPT] [BUILDDIR]: what verifying every view costs the
# first read, against the same read unchecked, in the same run.
#
# CKPT: a DeepSpeed checkpoint (default: the one bench/integrity.sh uses,
# generated once with bench/gen_deepspeed.py --stage 3 --ws 2 --layers 8
# --hidden 1024 under /var/tmp/gatherfs-bench/integrity).  For each of
#   small tensor     the first read of the smallest tensors/ file
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
C=${1:-/var/tmp/gatherfs-bench/integrity}
if [ -z "${1:-}" ] && [ ! -e "$C/.gen-done" ]; then
	/usr/bin/python3 "$here/gen_deepspeed.py" "$C" --stage 3 --ws 2 --layers 8 \
		--hidden 1024 >/dev/null
fi
W=$(mktemp -d "${TMPDIR:-/tmp}/gatherfs-bench.XXXXXX")
cleanup() {
	timeout 10 fusermount3 -u "$W/m" 2>/dev/null || true
	rm -rf "$W"
}
trap cleanup EXIT
mkdir "$W/m"
shards=$(find "$C/" -name '*.pt' | sort)
small=$("$B/gatherfs-inspect" ls "$C" | awk 'NR > 1 && $5 == "-" { print $4, $1 }' | sort -n | head -1 | cut -d' ' -f2)
[ -n "$small" ] || { echo "no tensor in $C" >&2; exit 1; }
sfile=$(printf '%s' "$small" | sed 's/%/%25/g; s|/|%2F|g')

now() { date +%s.%N; }
drop() { for f in $shards; do dd if="$f" iflag=nocache count=0 status=none; done; }
warm() { cat $shards >/dev/null; }
# first MODE FILE cold|warm: seconds of the first read of FILE in a fresh
# mount with -o verify=MODE.
first() {
	"$B/gatherfs" "$C" "$W/m" -o nocrccache -o verify="$1" 2>/dev/null
	if [ "$3" = cold ]; then drop; else warm; fi
	s=$(now)
	timeout 600 cat "$W/m/$2" >/dev/null
	e=$(now)
	timeout 10 fusermount3 -u "$W/m"
	echo "$e - $s" | bc
}
echo "checkpoint $C ($(cat $shards | wc -c) bytes of shards); small tensor: $small"
printf '%-28s %-5s %10s %10s %7s\n' "first read of" cache "verify=off" "=read" ratio
for what in "tensors/$sfile" model.safetensors; do
	for cache in cold warm; do
		off=$(first off "$what" $cache)
		on=$(first read "$what" $cache)
		awk -v w="$what" -v c=$cache -v a="$off" -v b="$on" \
			'BEGIN { printf "%-28s %-5s %9.3fs %9.3fs %6.1fx\n", substr(w, 1, 28), c, a, b, b / a }'
	done
done
echo "command: bench/first-read.sh ${1:-} ${2:-.}"
