#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/st-mmap.sh [CKPT] [BUILDDIR] [ROUNDS]: model.safetensors loaded the
# way transformers loads it (safetensors.torch.load_file, a mapping of the
# file, then every tensor's bytes read) against dd of the same view, both
# from a fresh mount, in the same run.
#
# CKPT: a DeepSpeed checkpoint (default: the ZeRO-3 model of bench/run,
# bench/gen_deepspeed.py --stage 3 --ws 4 --layers 24 --hidden 1024, 1.42 GB
# model.safetensors, generated once under
# /var/tmp/gatherfs-bench/main_layers24hidden1024).  ROUNDS (default 5)
# interleaved rounds of
#   dd          a fresh mount; dd if=MNT/model.safetensors bs=1M
#   load_file   a fresh mount; in the compat root's python (torch 2.x,
#               safetensors), load_file(MNT/model.safetensors) and every
#               tensor's bytes copied into one reused buffer (as
#               transformers copies them into the model's parameters);
#               timed inside python, so its start-up is not counted
#   local       the same load_file of a local copy in the page cache (what
#               the loader itself costs: context, not a baseline)
# with the shards warm (read once first).  Prints the median of each and
# `ratio (load_file / dd) N.NNx`: the page-fault path's speed as a fraction
# of the sequential read's (issue 45's target: >= 0.80x).
# GATHERFS_OPTS: more mount options (e.g. "-o readahead_kb=4096").
# Needs root (the compat root: tests/compat/make-compat-root.sh) and FUSE.
set -eu
B=$(cd "${2:-.}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
rounds=${3:-5}
R=${GATHERFS_COMPAT_ROOT:-/var/cache/gatherfs/compat-root}
run=$here/../tests/compat/compat-run.sh
[ -x "$R/usr/bin/python3" ] || { echo "no compat root at $R (tests/compat/make-compat-root.sh)" >&2; exit 1; }
C=${1:-/var/tmp/gatherfs-bench/main_layers24hidden1024}
if [ -z "${1:-}" ] && [ ! -e "$C/.gen-done" ]; then
	/usr/bin/python3 "$here/gen_deepspeed.py" "$C" --stage 3 --ws 4 --layers 24 --hidden 1024 >/dev/null
fi
. "$here/lib.sh"
bench_workdir
cat $(find "$C/" -name '*.pt') >/dev/null

cat >"$W/load.py" <<'EOF'
import sys, time, torch
from safetensors.torch import load_file
t0 = time.perf_counter()
sd = load_file(sys.argv[1])
buf = torch.empty(max(t.numel() * t.element_size() for t in sd.values()), dtype=torch.uint8)
n = 0
for t in sd.values():
    b = t.reshape(-1).view(torch.uint8)
    buf[:b.numel()].copy_(b)
    n += b.numel()
print("%.4f %d" % (time.perf_counter() - t0, n))
EOF

"$B/gatherfs" ${GATHERFS_OPTS:-} "$C" "$W/m" 2>/dev/null
size=$(timeout 60 stat -c %s "$W/m/model.safetensors")
timeout 600 cp "$W/m/model.safetensors" "$W/local.safetensors"
timeout 10 fusermount3 -u "$W/m"

# pyload FILE: seconds of load.py on FILE, in the compat root.
pyload() { COMPAT_BINDS="$W" timeout 600 "$run" "$R" python3 "$W/load.py" "$1" | cut -d' ' -f1; }
dds="" loads="" locals=""
i=0
while [ "$i" -lt "$rounds" ]; do
	"$B/gatherfs" ${GATHERFS_OPTS:-} "$C" "$W/m" 2>/dev/null
	bench_time timeout 600 dd if="$W/m/model.safetensors" of=/dev/null bs=1M status=none
	dds="$dds $T"
	timeout 10 fusermount3 -u "$W/m"
	"$B/gatherfs" ${GATHERFS_OPTS:-} "$C" "$W/m" 2>/dev/null
	loads="$loads $(pyload "$W/m/model.safetensors")"
	timeout 10 fusermount3 -u "$W/m"
	locals="$locals $(pyload "$W/local.safetensors")"
	i=$((i + 1))
done
med() { echo $* | tr ' ' '\n' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
d=$(med $dds) l=$(med $loads) o=$(med $locals)
echo "checkpoint $C: model.safetensors $size bytes; load $(cat /proc/loadavg)"
awk -v s="$size" -v d="$d" -v l="$l" -v o="$o" -v ds="$dds" -v ls="$loads" -v os="$locals" 'BEGIN {
	printf "dd, fresh mount           %7.3f s = %5.2f GB/s  (%s)\n", d, s / d / 1e9, ds
	printf "load_file, fresh mount    %7.3f s = %5.2f GB/s  (%s)\n", l, s / l / 1e9, ls
	printf "load_file, local copy     %7.3f s = %5.2f GB/s  (%s)\n", o, s / o / 1e9, os
	printf "ratio (load_file / dd)    %6.2fx\n", d / l
}'
echo "command: ${GATHERFS_OPTS:+GATHERFS_OPTS=\"$GATHERFS_OPTS\" }bench/st-mmap.sh ${1:-\"\"} $B $rounds"
