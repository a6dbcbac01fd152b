#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/mp-latency.sh [DELAY_US] [BUILDDIR] [ROUNDS]: the Hugging Face view of
# a model-parallel save on slow storage: a sparse Megatron-Core torch_dist
# checkpoint (bench/gen_megatron.py --tp 4 --pp 2, 8 layers, hidden 2048,
# ffn 5632, 16 heads in 4 groups, vocabulary 32000, bf16: 1.0 GB, written
# once under /var/tmp/gatherfs-bench/mglat) served through bench/latencyfs,
# which delays every read request by DELAY_US microseconds (default 2000)
# and keeps no page cache, as a network file system without client cache.
# Rows (ROUNDS fresh mounts each, default 2):
#   first read   dd bs=1M of MNT/model.safetensors (QKV split per group,
#                row-parallel merges, every record's CRC-32 checked first)
#                from a fresh gatherfs mount over the latencyfs mount,
#                -o nosplice (latencyfs's replies are not spliceable)
#   baseline     bench/preadall.py 16 over the .distcp files through the
#                same latencyfs mount (16 reads in flight, no re-arrangement)
# GATHERFS_OPTS: more gatherfs options (e.g. "-o readahead_kb=512").
# LATENCYFS_OPTS: more latencyfs options ("-o cache": a caching client, as
# NFS or Lustre: reads go through its page cache, read ahead by the kernel;
# its pages are dropped before each read).
# Needs a user allowed to mount FUSE and python3 with torch (the generator).
set -eu
us=${1:-2000}
B=$(cd "${2:-.}" && pwd)
rounds=${3:-2}
here=$(cd "$(dirname "$0")" && pwd)
C=/var/tmp/gatherfs-bench/mglat
[ -e "$C/.gen-done" ] || /usr/bin/python3 "$here/gen_megatron.py" "$C" --tp 4 --pp 2 --layers 8 \
	--hidden 2048 --ffn 5632 --heads 16 --groups 4 --vocab 32000 >/dev/null
. "$here/lib.sh"
bench_workdir
mkdir "$W/lat"
lpid=
mp_cleanup() {
	timeout 10 fusermount3 -u "$W/m" 2>/dev/null || true
	timeout 10 fusermount3 -u "$W/lat" 2>/dev/null || true
	[ -z "$lpid" ] || wait "$lpid" 2>/dev/null || true
	bench_cleanup
}
trap mp_cleanup EXIT
"$B/bench/latencyfs" -f -o "delay_us=$us" ${LATENCYFS_OPTS:-} "$C" "$W/lat" &
lpid=$!
until mountpoint -q "$W/lat"; do sleep 0.01; done
best=
for _r in $(seq "$rounds"); do
	bench_drop $(find "$W/lat" -name '*.distcp')
	"$B/gatherfs" -o nosplice ${GATHERFS_OPTS:-} "$W/lat" "$W/m" 2>/dev/null
	s=$(bench_now)
	timeout 900 dd if="$W/m/model.safetensors" of=/dev/null bs=1M status=none
	t=$(echo "$(bench_now) - $s" | bc)
	size=$(stat -c %s "$W/m/model.safetensors")
	timeout 10 fusermount3 -u "$W/m"
	echo "first read, model.safetensors: $size bytes in $t s"
	best=$(echo "${best:-$t} $t" | awk '{ print ($2 < $1 ? $2 : $1) }')
done
bench_drop $(find "$W/lat" -name '*.distcp')
s=$(bench_now)
bytes=$(/usr/bin/python3 "$here/preadall.py" 16 $(find "$W/lat" -name '*.distcp' | sort))
bt=$(echo "$(bench_now) - $s" | bc)
awk -v b="$size" -v t="$best" -v bb="$bytes" -v bt="$bt" -v us="$us" 'BEGIN {
	printf "latency %d us a request\n", us
	printf "first read (best of the rounds) %6.2f GB in %6.2f s = %5.2f GB/s\n", b / 1e9, t, b / t / 1e9
	printf "baseline, preadall.py 16        %6.2f GB in %6.2f s = %5.2f GB/s\n", bb / 1e9, bt, bb / bt / 1e9
	printf "ratio (gatherfs / baseline)      %5.2fx\n", (b / t) / (bb / bt)
}'
echo "command: ${GATHERFS_OPTS:+GATHERFS_OPTS=\"$GATHERFS_OPTS\" }${LATENCYFS_OPTS:+LATENCYFS_OPTS=\"$LATENCYFS_OPTS\" }bench/mp-latency.sh $us ${2:-.} $rounds"
