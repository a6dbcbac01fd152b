#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/crc-first-read.sh [CKPT] [BUILDDIR] [BASE_BUILDDIR] [ROUNDS]: the first
# read of pytorch_model.bin, CRC-32 of every source record included, against a
# parallel reader of the shards, in the same run; with BASE_BUILDDIR, the same
# with another build (e.g. one before a change), rounds interleaved.
#
# CKPT: a DeepSpeed checkpoint (default: the one bench/integrity.sh uses,
# generated once with bench/gen_deepspeed.py --stage 3 --ws 2 --layers 8
# --hidden 1024 under /var/tmp/gatherfs-bench/integrity).  The shards are
# warm (read once first).  Each of ROUNDS (default 2) rounds times, for each
# build:
#   verify records   the record pass of `gatherfs-inspect verify` (its own
#                    timing: the stored CRC-32 of every source record)
#   first dd         `dd bs=1M` of MNT/pytorch_model.bin from a fresh mount
#                    with -o nocrccache (no CRC-32 known: every source record
#                    is checked, the default -o verify=read), and the
#                    daemon's peak RSS (VmHWM)
# and once a round bench/preadall.py 8 over the shards (all their bytes, no
# check).  Needs a user allowed to mount FUSE and python3.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bench_ab 2 "$@"
shard_bytes=$(cat $shards | wc -c)
# row LABEL BYTES SECONDS [EXTRA]
row() {
	awk -v l="$1" -v b="$2" -v d="$3" -v x="${4:-}" \
		'BEGIN { printf "%-34s %6.2f GB in %7.3f s = %5.2f GB/s %s\n", l, b / 1e9, d, b / d / 1e9, x }'
}
# verify_row BUILD LABEL: the record pass of gatherfs-inspect verify.
verify_row() {
	"$1/gatherfs-inspect" verify "$C" >"$W/v" 2>/dev/null
	bytes=$(sed -n 's/.* zip records match their stored CRC-32 (\([0-9]*\) source bytes.*/\1/p' "$W/v")
	row "$2 verify records" "$bytes" "$(sed -n 's/.*checksum) in \([0-9.]*\) s$/\1/p' "$W/v")"
}
# first_dd BUILD LABEL: dd bs=1M of pytorch_model.bin from a fresh mount.
first_dd() {
	"$1/gatherfs" -f "$C" "$W/m" -o nocrccache 2>"$W/log" &
	pid=$!
	t=$(timed_dd_s "$W/m/pytorch_model.bin")
	size=$(stat -c %s "$W/m/pytorch_model.bin")
	hwm=$(awk '/VmHWM/ { print $2 }' /proc/"$pid"/status)
	timeout 10 fusermount3 -u "$W/m"
	wait "$pid"
	pid=
	row "$2 first dd" "$size" "$t" "(daemon peak RSS $((hwm / 1024)) MiB)"
}
echo "checkpoint $C ($shard_bytes bytes in $(echo $shards | wc -w) shards), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "build $B${A:+, base $A}"
cat $shards >/dev/null
r=1
while [ "$r" -le "$rounds" ]; do
	echo "== round $r"
	s=$(bench_now)
	/usr/bin/python3 "$here/preadall.py" 8 $shards >/dev/null
	e=$(bench_now)
	row "preadall.py 8 (the shards)" "$shard_bytes" "$(echo "$e - $s" | bc)"
	if [ -n "$A" ]; then
		verify_row "$A" base
		first_dd "$A" base
	fi
	verify_row "$B" build
	first_dd "$B" build
	r=$((r + 1))
done
echo "load after $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command: bench/crc-first-read.sh ${1:-\"\"} ${2:-.} ${3:-} ${4:-}"
