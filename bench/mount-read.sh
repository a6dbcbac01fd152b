#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/mount-read.sh [GIB] [BUILDDIR]: read speed of a gatherfs mount against
# the raw read speed of the same source bytes, in the same run.
#
# Makes GIB GiB (default 2) of random float32 data in one source file, a
# layout JSON cutting it into 128 tensors, mounts it (BUILDDIR/gatherfs,
# default .), and times, with the source cold (dropped from the page cache)
# and warm:
#   raw          dd of the source file
#   first CRC    the first read of the central directory: CRC-32 of all data
#   bin seq      dd of pytorch_model.bin (buffered: kernel readahead requests)
#   bin direct   dd iflag=direct bs=1M of pytorch_model.bin (1 MiB requests)
#   tensors      cat of every tensors/ file
# Needs root or a user allowed to mount FUSE, python3, about GIB GiB of /tmp.
set -eu
GIB=${1:-2}
B=$(cd "${2:-.}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bench_workdir
head -c $((GIB << 30)) /dev/urandom > "$W/src.bin"
python3 - "$W" "$GIB" <<'PY'
import json, sys
w, gib = sys.argv[1], int(sys.argv[2])
n = gib << 30
per = n // 128 // 4 * 4
json.dump({"gatherfs_layout": 1, "base_dir": w, "sources": [{"path": "src.bin", "size": n}],
           "tensors": [{"name": f"w{i}", "dtype": "float32", "shape": [per // 4],
                        "pieces": [{"source": 0, "offset": i * per, "length": per}]}
                       for i in range(128)]}, open(f"{w}/bench.json", "w"))
PY

# t LABEL BYTES CMD...: run CMD, print seconds and GB/s.
t() {
	label=$1 bytes=$2
	shift 2
	bench_time "$@"
	awk -v l="$label" -v d="$T" -v b="$bytes" \
		'BEGIN { printf "%-34s %7.3f s  %6.2f GB/s\n", l, d, b / d / 1e9 }'
}
drop() { dd if="$1" iflag=nocache count=0 status=none; }
size=$((GIB << 30))

for state in cold warm; do
	"$B/gatherfs" "$W/bench.json" "$W/m"
	bin="$W/m/pytorch_model.bin"
	binsize=$(stat -c %s "$bin")
	if [ $state = cold ]; then drop "$W/src.bin"; else cat "$W/src.bin" >/dev/null; fi
	echo "== source $state ($GIB GiB, $(nproc) CPUs)"
	t "first CRC (tail of the central dir)" "$size" tail -c 4096 "$bin"
	[ $state = cold ] && drop "$W/src.bin"
	t "raw source dd bs=1M" "$size" dd if="$W/src.bin" bs=1M status=none
	[ $state = cold ] && drop "$W/src.bin"
	t "pytorch_model.bin dd bs=1M" "$binsize" dd if="$bin" bs=1M status=none
	[ $state = cold ] && drop "$W/src.bin"
	t "pytorch_model.bin O_DIRECT bs=1M" "$binsize" dd if="$bin" bs=1M iflag=direct status=none
	[ $state = cold ] && drop "$W/src.bin"
	t "tensors/* cat" "$size" sh -c "cat '$W/m/tensors/'w*"
	fusermount3 -u "$W/m"
done
