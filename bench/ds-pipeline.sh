#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/ds-pipeline.sh [CKPT] [BUILDDIR] [GIB]: a DeepSpeed PipelineModule
# checkpoint mounted as one model, against a plain parallel read of its layer
# files, in the same run (issue 45).
#
# CKPT: a DeepSpeed pipeline save (its directory, with `latest`; default: a
# sparse Llama-70B-shaped one, 80 blocks, hidden 8192, ffn 28672, 64 heads,
# 8 kv heads, vocabulary 128256, bf16 with BF16_Optimizer (ZeRO-1), PP 8 x
# TP 1 x DP 1, written once by bench/gen_ds_pipeline.py under
# /var/tmp/gatherfs-bench/benchdspipe-70b: 83 layer files, 8 mp_rank files,
# 8 optimizer files, about 1 TB of holes).  Rows:
#   mount time        gatherfs CKPT MNT until MNT/model.safetensors can be
#                     stat'ed (median of 3 fresh mounts)
#   daemon RSS        VmRSS after mount, VmHWM after the read
#   first read        the first GIB GiB (default: all) of MNT/model.safetensors
#                     (the fp32 masters from the stages' optimizer partitions,
#                     every record's CRC-32 checked first, the default
#                     -o verify=read) with dd bs=1M, from a fresh mount
#   baseline          bench/preadall.py 8 over all the layer files (the bf16
#                     module weights, no re-arrangement, no check); with GIB,
#                     over as many of their first bytes as the first read read
# The payloads are holes, read as zeros at memory speed, the files' pages
# dropped from the page cache before each read (bench_drop), so this measures
# gatherfs's own cost (index, partition mapping, CRC-32 of every record)
# against a reader's, not storage.
# Needs a user allowed to mount FUSE and python3 with torch (for the generator).
set -eu
B=$(cd "${2:-.}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
C=${1:-/var/tmp/gatherfs-bench/benchdspipe-70b}
if [ -z "${1:-}" ] && [ ! -e "$C/.gen-done" ]; then
	/usr/bin/python3 "$here/gen_ds_pipeline.py" "$C"
fi
. "$here/lib.sh"
bench_workdir
shards=$(find "$C/$(cat "$C/latest")" -name 'layer_*-model_states.pt' | sort)

mounts=""
for i in 1 2 3; do
	s=$(bench_now)
	"$B/gatherfs" "$C" "$W/m" 2>/dev/null
	timeout 600 stat "$W/m/model.safetensors" >/dev/null
	e=$(bench_now)
	mounts="$mounts $(echo "$e - $s" | bc)"
	timeout 10 fusermount3 -u "$W/m"
done
mt=$(echo $mounts | tr ' ' '\n' | sort -n | sed -n 2p)
"$B/gatherfs" -f "$C" "$W/m" 2>/dev/null &
pid=$!
until timeout 10 stat "$W/m/model.safetensors" >/dev/null 2>&1; do sleep 0.01; done
rss=$(awk '/VmRSS/ { print $2 }' /proc/"$pid"/status)
size=$(stat -c %s "$W/m/model.safetensors")
gib=${3:-}
count=$(( ${gib:-0} * 1024 ))
[ "$count" -gt 0 ] || count=$(( (size + 1048575) / 1048576 ))
bench_drop $shards
s=$(bench_now)
timeout 3600 dd if="$W/m/model.safetensors" of=/dev/null bs=1M count=$count status=none
e=$(bench_now)
hwm=$(awk '/VmHWM/ { print $2 }' /proc/"$pid"/status)
timeout 10 fusermount3 -u "$W/m"
wait "$pid" || true
read_s=$(echo "$e - $s" | bc)
read_b=$(( count * 1048576 < size ? count * 1048576 : size ))
bench_drop $shards
s=$(bench_now)
base_b=$(/usr/bin/python3 "$here/preadall.py" 8 ${gib:+--bytes=$read_b} $shards)
e=$(bench_now)
base_s=$(echo "$e - $s" | bc)
echo "checkpoint $C ($(stat -c %s $shards | paste -sd+ | bc) bytes in $(echo $shards | wc -w) layer files)"
echo "model.safetensors: $size bytes"
awk -v m="$mt" -v all="$mounts" 'BEGIN { printf "mount time (median of 3)   %8.3f s   (%s)\n", m, all }'
awk -v r="$rss" -v h="$hwm" 'BEGIN { printf "daemon RSS after mount     %8.1f MiB, peak %.1f MiB after the read\n", r / 1024, h / 1024 }'
awk -v b="$read_b" -v t="$read_s" -v bb="$base_b" -v bt="$base_s" 'BEGIN {
	printf "first read, model.safetensors  %8.2f GB in %7.2f s = %6.2f GB/s\n", b / 1e9, t, b / t / 1e9
	printf "baseline, preadall.py 8 layers %8.2f GB in %7.2f s = %6.2f GB/s\n", bb / 1e9, bt, bb / bt / 1e9
	printf "ratio (gatherfs / baseline)      %6.2fx\n", (b / t) / (bb / bt)
}'
echo "command: bench/ds-pipeline.sh ${1:-\"\"} ${2:-.} ${3:-}"
