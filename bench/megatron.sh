#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/megatron.sh [CKPT] [BUILDDIR] [GIB]: a Megatron-Core torch_dist or
# legacy checkpoint mounted as a Hugging Face model, against a plain parallel
# read of its .distcp (or mp_rank_*/model_optim_rng.pt) files, in the same run.
#
# CKPT: a Megatron save (default: a sparse Llama-70B-shaped torch_dist
# checkpoint at TP 8 x PP 4, bf16, written once by bench/gen_megatron.py under
# /var/tmp/gatherfs-bench/mg70b: 141 GB of holes; "dsv3": a DeepSeek-V3-shaped
# one, bench/gen_megatron.py --shape dsv3, 61 layers, 256 + 1 experts, MLA, EP
# 8 x PP 4, bf16, under /var/tmp/gatherfs-bench/dsv3; "legacy": the default's
# shape saved in the legacy form, bench/gen_megatron.py --format legacy, 32
# mp_rank_TT_PPP/model_optim_rng.pt files, under
# /var/tmp/gatherfs-bench/benchlegacy-mg70b).  The iteration read is the one
# latest_checkpointed_iteration.txt names (CKPT itself without it).  Rows:
#   mount time        gatherfs CKPT MNT until MNT/model.safetensors can be
#                     stat'ed (median of 3 fresh mounts)
#   daemon RSS        VmRSS after mount, VmHWM after the read
#   first read        the first GIB GiB (default: all) of MNT/model.safetensors
#                     (the HF view: QKV split per query group, gate/up split,
#                     vocabulary trimmed; every record's CRC-32 checked first,
#                     the default -o verify=read) with dd bs=1M, from a fresh
#                     mount
#   baseline          bench/preadall.py 8 over all the .distcp files, or a
#                     legacy save's model_optim_rng.pt files (the same bytes
#                     and the rest of the archives, no re-arrangement, no
#                     check); with GIB, over as many of their first bytes as
#                     the first read read
# The payloads are holes, read as zeros at memory speed, the shards' pages
# dropped from the page cache before each read (bench_drop), so this
# measures gatherfs's own cost (index, re-arrangement, CRC-32 of every
# record) against a reader's, not storage.
# Needs a user allowed to mount FUSE and python3 (for the generator).
set -eu
B=$(cd "${2:-.}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
C=${1:-/var/tmp/gatherfs-bench/mg70b}
if [ "$C" = dsv3 ]; then
	C=/var/tmp/gatherfs-bench/dsv3
	[ -e "$C/.gen-done" ] || /usr/bin/python3 "$here/gen_megatron.py" "$C" --shape dsv3
elif [ "$C" = legacy ]; then
	C=/var/tmp/gatherfs-bench/benchlegacy-mg70b
	[ -e "$C/.gen-done" ] || /usr/bin/python3 "$here/gen_megatron.py" "$C" --format legacy
elif [ -z "${1:-}" ] && [ ! -e "$C/.gen-done" ]; then
	/usr/bin/python3 "$here/gen_megatron.py" "$C"
fi
. "$here/lib.sh"
bench_workdir
it=$C
if [ -f "$C/latest_checkpointed_iteration.txt" ]; then
	tag=$(cat "$C/latest_checkpointed_iteration.txt")
	case $tag in
	release) it=$C/release ;;
	*) it=$C/$(printf 'iter_%07d' "$tag") ;;
	esac
fi
shards=$(find "$it" -maxdepth 1 -name '*.distcp' | sort)
kind=.distcp
if [ -z "$shards" ]; then
	shards=$(find "$it" -maxdepth 2 -path '*/mp_rank_*/model_optim_rng.pt' | sort)
	kind=.pt
fi

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
echo "checkpoint $C ($(stat -c %s $shards | awk '{ s += $1 } END { printf "%.0f", s }') bytes in $(echo $shards | wc -w) $kind files)"
echo "model.safetensors: $size bytes"
awk -v m="$mt" -v all="$mounts" 'BEGIN { printf "mount time (median of 3)   %8.3f s   (%s)\n", m, all }'
awk -v r="$rss" -v h="$hwm" 'BEGIN { printf "daemon RSS after mount     %8.1f MiB, peak %.1f MiB after the read\n", r / 1024, h / 1024 }'
awk -v b="$read_b" -v t="$read_s" -v bb="$base_b" -v bt="$base_s" -v k="$kind" 'BEGIN {
	printf "first read, model.safetensors  %8.2f GB in %7.2f s = %6.2f GB/s\n", b / 1e9, t, b / t / 1e9
	printf "baseline, preadall.py 8 %-7s %7.2f GB in %7.2f s = %6.2f GB/s\n", k, bb / 1e9, bt, bb / bt / 1e9
	printf "ratio (gatherfs / baseline)      %6.2fx\n", (b / t) / (bb / bt)
}'
echo "command: bench/megatron.sh ${1:-\"\"} ${2:-.} ${3:-}"
