#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/dcp-first-cat.sh CKPT ROUNDS BUILDDIR[:OPTIONS]...: the first `cat`
# of the first tensors/ file (INDEX order) of a fresh `gatherfs -f -o
# nocrccache[,OPTIONS] CKPT MNT` mount, then a second cat of it in the same
# mount, for each build in turn, ROUNDS rounds (builds interleaved).  Meant for a DCP
# checkpoint whose chunk archives are opened lazily (bench/gen_dcp.py's
# d1k): the first cat opens the tensor's chunk archives and checks the
# CRC-32 of its records, the second only serves.
#
# Sources warm: before the rounds, one mount of the first build cats the
# file twice (the check pass and the serving read every byte the
# measured cats need: the records' pages, the archives' ends); the bench
# files are sparse, so a `cat CKPT/*.distcp` would read hundreds of GB of
# holes.  The mount itself (the .metadata parse) is not timed.
#
# Each figure: wall seconds of the cat, and the daemon's CPU seconds
# (user + system, from /proc/PID/stat) over it.
set -eu
[ $# -ge 3 ] || { echo "usage: $0 CKPT ROUNDS BUILDDIR[:OPTIONS]..." >&2; exit 2; }
C=$1 R=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bench_workdir
M=$W/m
tck=$(getconf CLK_TCK)

# cpu_s PID: the user + system CPU seconds of process PID so far.
cpu_s() {
	awk -v t="$tck" '{ print ($14 + $15) / t }' "/proc/$1/stat"
}

# timed_cat FILE: "WALL CPU" of a cat of FILE to /dev/null ($pid the daemon).
timed_cat() {
	c0=$(cpu_s "$pid")
	s=$(date +%s.%N)
	timeout 600 cat "$1" >/dev/null
	e=$(date +%s.%N)
	c1=$(cpu_s "$pid")
	echo "$e $s $c1 $c0" | awk '{ printf "%.3f s wall, %.2f s daemon CPU", $1 - $2, $3 - $4 }'
}

# mount_cat BUILD[:OPTIONS]: print the first and second cat of a fresh mount.
mount_cat() {
	case $1 in
	*:*) b=${1%%:*} o=nocrccache,${1#*:} ;;
	*) b=$1 o=nocrccache ;;
	esac
	"$b/gatherfs" -f -o "$o" "$C" "$M" 2>"$W/log" &
	pid=$!
	until timeout 10 stat "$M/pytorch_model.bin" >/dev/null 2>&1; do
		kill -0 "$pid" 2>/dev/null || { cat "$W/log" >&2; exit 1; }
		sleep 0.05
	done
	name=$(awk -F'\t' 'NR >= 2 { print $1; exit }' "$M/tensors/INDEX")
	f=$(timed_cat "$M/tensors/$name")
	g=$(timed_cat "$M/tensors/$name")
	timeout 30 fusermount3 -u "$M"
	wait "$pid"
	pid=
	echo "$name: first cat $f; second $g"
}

echo "checkpoint $C, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "warming: $(mount_cat "$1")"
i=1
while [ "$i" -le "$R" ]; do
	for b in "$@"; do
		echo "round $i $b (load $(cut -d' ' -f1 /proc/loadavg)): $(mount_cat "$b")"
	done
	i=$((i + 1))
done
echo "load after $(cut -d' ' -f1-3 /proc/loadavg)"
