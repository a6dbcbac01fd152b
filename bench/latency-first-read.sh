#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/latency-first-read.sh [CKPT] [BUILDDIR] [DELAYS_US] [RA_KB]: the first
# read of the views from slow storage, CRCs unknown, against a parallel
# reader of the shards through the same storage, in the same run.
#
# CKPT: a DeepSpeed checkpoint (default: bench/scale's lat checkpoint, a
# sparse 0.1B Llama-like ZeRO-3 x 8 ranks, generated once under
# /var/tmp/gatherfs-bench/lat).  The storage is bench/latencyfs over CKPT,
# delaying every read request by each of DELAYS_US (default "10000 2000")
# microseconds, in two modes:
#   cache   -o cache: a caching client (NFS, Lustre, mountpoint-s3 with
#           its cache): the kernel's page cache of the latencyfs mount,
#           its read-ahead window set to RA_KB (default 1024) KiB through
#           /sys/class/bdi; reads it misses pay the delay
#   direct  direct_io (no page cache: every read pays the delay); gatherfs
#           with -o nosplice (a splice from a FUSE file fills its page cache)
# For each, latencyfs is mounted afresh before every figure (its page cache
# starts empty) and unmounted after:
#   preadall         bench/preadall.py 16 over the shards (16 readers of
#                    1 MiB blocks: the storage's bandwidth)
#   first dd NAME    dd bs=1M of MNT/NAME from a fresh gatherfs mount with
#                    -o nocrccache (no CRC-32 known: the default -o
#                    verify=read checks every source record of the view
#                    before serving it), NAME pytorch_model.bin and
#                    model.safetensors
#   ... shards cached  (cache mode) the same after preadall.py 16 in the same
#                    latencyfs mount: no read pays the delay, what is left
#                    is the CPU (the check's CRC-32s, copies and serving)
# Targets (issue 31, the cache mode): first dd >= 0.7x preadall at 10 ms,
# >= 0.5x at 2 ms.  Needs root (mounts, sysfs).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
B=$(cd "${2:-$here/..}" && pwd)
delays=${3:-10000 2000}
ra_kb=${4:-1024}
if [ -n "${1:-}" ]; then
	C=$1
else
	C=/var/tmp/gatherfs-bench/lat
	if [ ! -e "$C/.gen-done" ]; then
		rm -rf "$C"
		/usr/bin/python3 "$here/gen_deepspeed.py" "$C" --stage 3 --arch llama --sparse \
			--layers 4 --hidden 1024 --ffn 2816 --kv-heads 8 --vocab 8000 --ws 8 >/dev/null
		touch "$C/.gen-done"
	fi
fi
bench_workdir
mkdir "$W/lat"
lpid=
trap 'timeout 10 fusermount3 -u "$W/m" 2>/dev/null || true; [ -z "$pid" ] || wait "$pid" || true
	timeout 10 fusermount3 -u "$W/lat" 2>/dev/null || true; [ -z "$lpid" ] || wait "$lpid" || true
	rm -rf "$W"' EXIT
pid=
# lat_mount MODE US: latencyfs over C at W/lat, its page cache empty.
lat_mount() {
	opt=
	[ "$1" = cache ] && opt="-o cache"
	# shellcheck disable=SC2086
	"$B/bench/latencyfs" -f -o "delay_us=$2" $opt "$C" "$W/lat" &
	lpid=$!
	until mountpoint -q "$W/lat"; do sleep 0.01; done
	if [ "$1" = cache ]; then
		echo "$ra_kb" >"/sys/class/bdi/$(mountpoint -d "$W/lat")/read_ahead_kb"
	fi
}
lat_umount() {
	timeout 10 fusermount3 -u "$W/lat"
	wait "$lpid"
	lpid=
}
# gbs BYTES SECONDS
gbs() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.3f", b / s / 1e9 }'; }
# preadall MODE US: GB/s of bench/preadall.py 16 over the shards.
preadall() {
	lat_mount "$1" "$2"
	s=$(bench_now)
	# shellcheck disable=SC2046
	/usr/bin/python3 "$here/preadall.py" 16 $(find "$W/lat/" -name '*.pt' | sort) >/dev/null
	e=$(bench_now)
	lat_umount
	gbs "$shard_bytes" "$(echo "$e - $s" | bc)"
}
# first_dd MODE US NAME [warm]: GB/s of the first dd bs=1M of MNT/NAME, CRCs
# unknown; warm: the shards read through latencyfs first.
first_dd() {
	lat_mount "$1" "$2"
	if [ -n "${4:-}" ]; then
		# shellcheck disable=SC2046
		/usr/bin/python3 "$here/preadall.py" 16 $(find "$W/lat/" -name '*.pt' | sort) >/dev/null
	fi
	opt=
	[ "$1" = direct ] && opt="-o nosplice"
	# shellcheck disable=SC2086
	"$B/gatherfs" -f -o nocrccache $opt "$W/lat" "$W/m" 2>"$W/log" &
	pid=$!
	t=$(timed_dd_s "$W/m/$3" 900)
	size=$(stat -c %s "$W/m/$3")
	timeout 10 fusermount3 -u "$W/m"
	wait "$pid"
	pid=
	lat_umount
	gbs "$size" "$t"
}
shards=$(find "$C/" -name '*.pt' | sort)
shard_bytes=$(cat $shards | wc -c)
echo "checkpoint $C ($shard_bytes bytes in $(echo $shards | wc -w) shards), build $B"
echo "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), cache mode read_ahead_kb=$ra_kb"
printf '%-6s %-7s %-32s %9s %9s %s\n' delay mode figure GB/s ratio target
for us in $delays; do
	ms=$(awk -v u="$us" 'BEGIN { printf "%g", u / 1000 }')
	target=$(awk -v u="$us" 'BEGIN { print (u >= 10000 ? ">= 0.7x" : ">= 0.5x") }')
	for mode in cache direct; do
		p=$(preadall "$mode" "$us")
		printf '%-6s %-7s %-32s %9s\n' "${ms}ms" "$mode" "preadall.py 16 (the shards)" "$p"
		for name in pytorch_model.bin model.safetensors; do
			g=$(first_dd "$mode" "$us" "$name")
			r=$(awk -v a="$g" -v b="$p" 'BEGIN { printf "%.2fx", a / b }')
			t=
			[ "$mode" = cache ] && t=$target
			printf '%-6s %-7s %-32s %9s %9s %s\n' "${ms}ms" "$mode" "first dd $name" "$g" "$r" "$t"
			[ "$mode" = cache ] || continue
			g=$(first_dd "$mode" "$us" "$name" warm)
			r=$(awk -v a="$g" -v b="$p" 'BEGIN { printf "%.2fx", a / b }')
			printf '%-6s %-7s %-32s %9s %9s\n' "${ms}ms" "$mode" "  ... shards cached" "$g" "$r"
		done
	done
done
echo "load after $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command: bench/latency-first-read.sh ${1:-\"\"} ${2:-.} \"$delays\" $ra_kb"
