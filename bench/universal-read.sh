#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Many ranks reading the universal checkpoint view at once (issue 15).
#
#   bench/universal-read.sh [WORKDIR] [LAYERS] [HIDDEN] [READERS]
#
# Generates a DeepSpeed ZeRO-2 checkpoint (bench/gen_deepspeed.py, 4 ranks,
# fp32, GPT-like, LAYERS x HIDDEN, default 12 x 768: ~124M params), mounts
# it, and reads every file of <tag>_universal/ the way a resuming job does
# (DeepSpeed's ZeRO-3 loader: every rank reads every file; stage 1/2: the
# files of its params), with 1 and with READERS (default 4) concurrent
# readers.  The baseline is the same tree copied to regular files on disk
# (what ds_to_universal would leave), read the same way in the same run.
# Page cache warm for both (each tree is read once before timing).
# Prints the command, the mount time, bytes the daemon wrote, and wall
# times with ratios.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
W=${1:-/tmp/gatherfs-bench-universal}
LAYERS=${2:-12}
HIDDEN=${3:-768}
READERS=${4:-4}
GATHERFS=${GATHERFS:-$top/gatherfs}
echo "# $0 $W $LAYERS $HIDDEN $READERS ($(date -u +%FT%TZ), $(nproc) CPUs)"
mkdir -p "$W"
ck="$W/ckpt-z2-l$LAYERS-h$HIDDEN"
[ -e "$ck/.gen-done" ] ||
	/usr/bin/python3 "$here/gen_deepspeed.py" "$ck" --stage 2 --ws 4 --layers "$LAYERS" --hidden "$HIDDEN" >/dev/null
mnt=$(mktemp -d "$W/mnt.XXXXXX")
t0=$(date +%s.%N)
"$GATHERFS" "$ck" "$mnt" -o nocrccache 2>"$W/mount.log"
t1=$(date +%s.%N)
trap 'fusermount3 -u "$mnt" 2>/dev/null; rmdir "$mnt"' EXIT
pid=$(pgrep -n -f "$GATHERFS $ck $mnt" || true)
u="$mnt/global_step3_universal"
nfiles=$(find "$u" -type f | wc -l)
bytes=$(find "$u" -type f -exec stat -c %s {} + | awk '{s += $1} END {print s}')
printf 'shards %s MB; universal view: %d files, %.1f MB; mount took %.2f s\n' \
	"$(du -sm "$ck" | cut -f1)" "$nfiles" "$(echo "$bytes" | awk '{print $1 / 1e6}')" \
	"$(echo "$t1 $t0" | awk '{print $1 - $2}')"

# readers TREE N: N concurrent readers of every file of TREE; prints the wall time
readers() {
	s=$(date +%s.%N)
	i=0
	while [ $i -lt "$2" ]; do
		find "$1" -type f | sort | xargs cat > /dev/null &
		i=$((i + 1))
	done
	wait
	e=$(date +%s.%N)
	echo "$e $s" | awk '{printf "%.3f", $1 - $2}'
}

disk="$W/disk_universal"
rm -rf "$disk"
cp -r "$u" "$disk"
readers "$u" 1 >/dev/null    # warm: CRCs computed, shards and view in the page cache
readers "$disk" 1 >/dev/null
m1=$(readers "$u" 1)
d1=$(readers "$disk" 1)
mn=$(readers "$u" "$READERS")
dn=$(readers "$disk" "$READERS")
echo "readers  mount_s  disk_s  mount/disk  MB/s(mount, all readers)"
echo "1 $m1 $d1 $bytes" | awk '{printf "%-8d %-8.3f %-7.3f %-11.2f %.0f\n", $1, $2, $3, $2 / $3, $4 / 1e6 / $2}'
echo "$READERS $mn $dn $bytes" | awk '{printf "%-8d %-8.3f %-7.3f %-11.2f %.0f\n", $1, $2, $3, $2 / $3, $1 * $4 / 1e6 / $2}'
if [ -n "$pid" ] && [ -r "/proc/$pid/io" ]; then
	echo "daemon wrote $(awk '/^write_bytes/ {print $2}' "/proc/$pid/io") bytes to storage"
fi
rm -rf "$disk"
