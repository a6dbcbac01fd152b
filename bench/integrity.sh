#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/integrity.sh [CKPT] [BUILDDIR]: what the source checks cost, against
# the raw read speed of the same shards in the same run.
#
# CKPT: a DeepSpeed checkpoint (default: generated once with
# bench/gen_deepspeed.py --stage 3 --ws 2 --layers 8 --hidden 1024 under
# /var/tmp/gatherfs-bench/integrity, 1.8 GB of shards, 0.6 GB of records
# tensor bytes come from).  With the shards cold (dropped from the page
# cache) and warm, times:
#   raw cat          cat of every shard (all their bytes)
#   verify records   the record pass of `gatherfs-inspect verify` (its own
#                    timing: every source record's stored CRC-32)
#   verify total     `gatherfs-inspect verify` (records, then every piece)
#   CRC pass +src    first read of pytorch_model.bin's central directory of
#                    a mount of CKPT: source checks, then the CRC-32s
#   CRC pass -src    the same of a mount of CKPT's layout JSON (same pieces,
#                    no records: no source checks) -- the baseline
#   ... bf16         both with -o dtype=bf16 (converted tensors: the CRC-32s
#                    cannot be combined from the source checks')
#   mount -o verify  mount time with -o verify, and without
# Needs a user allowed to mount FUSE and python3.
set -eu
B=$(cd "${2:-.}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bench_setup "${1:-}"
"$B/gatherfs-inspect" layout "$C" >"$W/l.json"
shard_bytes=$(cat $shards | wc -c)
rec_bytes=$("$B/gatherfs-inspect" verify "$C" | sed -n 's/.* zip records match their stored CRC-32 (\([0-9]*\) source bytes.*/\1/p')

drop() { for f in $shards; do dd if="$f" iflag=nocache count=0 status=none; done; }
warm() { cat $shards >/dev/null; }
# row LABEL BYTES SECONDS
row() {
	awk -v l="$1" -v b="$2" -v d="$3" \
		'BEGIN { printf "%-30s %7.3f s  %6.2f GB/s  %6.3f s/GB\n", l, d, b / d / 1e9, d / (b / 1e9) }'
}
# t LABEL BYTES CMD...: run CMD, print a row.
t() {
	label=$1 bytes=$2
	shift 2
	bench_time "$@"
	row "$label" "$bytes" "$T"
}
# crc_pass SRC cold|warm LABEL [OPTION...]
crc_pass() {
	src=$1 state=$2 label=$3
	shift 3
	"$B/gatherfs" "$src" "$W/m" -o nocrccache "$@"
	[ "$state" = cold ] && drop
	t "$label" "$rec_bytes" tail -c 4096 "$W/m/pytorch_model.bin"
	fusermount3 -u "$W/m"
}

echo "checkpoint: $C ($shard_bytes shard bytes, $rec_bytes bytes in checksummed records), $(nproc) CPUs"
echo "build: $B"
for state in cold warm; do
	echo "== shards $state"
	if [ $state = cold ]; then drop; else warm; fi
	t "raw cat of the shards" "$shard_bytes" cat $shards
	if [ $state = cold ]; then drop; else warm; fi
	s=$(bench_now)
	"$B/gatherfs-inspect" verify "$C" >"$W/v"
	e=$(bench_now)
	row "verify records" "$rec_bytes" "$(sed -n 's/.*checksum) in \([0-9.]*\) s$/\1/p' "$W/v")"
	row "verify total" "$rec_bytes" "$(echo "$e - $s" | bc)"
	crc_pass "$C" $state "CRC pass +src (checkpoint)"
	crc_pass "$W/l.json" $state "CRC pass -src (layout JSON)"
	crc_pass "$C" $state "CRC pass +src, bf16" -o dtype=bf16
	crc_pass "$W/l.json" $state "CRC pass -src, bf16" -o dtype=bf16
	[ $state = cold ] && drop
	t "mount -o verify" "$rec_bytes" "$B/gatherfs" "$C" "$W/m" -o verify -o nocrccache
	fusermount3 -u "$W/m"
	s=$(bench_now)
	"$B/gatherfs" "$C" "$W/m" -o nocrccache
	e=$(bench_now)
	fusermount3 -u "$W/m"
	echo "mount without -o verify         $(echo "$e - $s" | bc) s"
done
