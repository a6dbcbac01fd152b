#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/ab-read.sh BUILDDIR_A BUILDDIR_B CKPT [FILE] [ROUNDS]: warm reads of
# one mounted file by two builds of gatherfs, interleaved (A B A B ...), in
# the same run.
#
# Each round and build: mount CKPT with a CRC cache of its own (so CRC-32s
# are known after the first round), one dd bs=1M of FILE (default
# pytorch_model.bin) to warm the sources and the cache, then two more; the
# row gives the two passes' throughput (dd) and the daemon's CPU time over
# them (utime + stime from /proc/PID/stat, in clock ticks: less sensitive to
# other jobs on the CPUs than the throughput).  For before/after checks of
# the read path; not part of `make check`.  Needs root (mounts).
set -eu
[ $# -ge 3 ] || { echo "usage: bench/ab-read.sh BUILDDIR_A BUILDDIR_B CKPT [FILE] [ROUNDS]" >&2; exit 2; }
A=$(cd "$1" && pwd) B=$(cd "$2" && pwd) C=$3 F=${4:-pytorch_model.bin} R=${5:-4}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
pid=
bench_workdir
mkdir "$W/crc-a" "$W/crc-b"
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
rate() { dd if="$W/m/$F" of=/dev/null bs=1M 2>&1 | awk 'END { print $(NF - 1), $NF }'; }
echo "| round | build | dd pass 1 | dd pass 2 | daemon CPU, ticks | command |"
echo "|---|---|---|---|---|---|"
for r in $(seq "$R"); do
	for side in a b; do
		d=$A
		[ $side = b ] && d=$B
		"$d/gatherfs" -f -o "crc_cache=$W/crc-$side" "$C" "$W/m" 2>/dev/null &
		pid=$!
		until stat "$W/m/$F" >/dev/null 2>&1; do sleep 0.05; done
		dd if="$W/m/$F" of=/dev/null bs=1M 2>/dev/null
		c0=$(cpu "$pid")
		r1=$(rate)
		r2=$(rate)
		c1=$(cpu "$pid")
		echo "| $r | $side: $d | $r1 | $r2 | $((c1 - c0)) | \`gatherfs -o crc_cache=DIR $C MNT; dd if=MNT/$F bs=1M\` |"
		fusermount3 -u "$W/m"
		wait "$pid" || true
		pid=
	done
done
