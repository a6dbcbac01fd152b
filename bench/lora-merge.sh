#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/lora-merge.sh [BUILDDIR]: read throughput of a LoRA-merged tensor
# (-o merge / layout JSON version 3: computed on read) against the unmerged
# view of the same weight, in the same run, with every source in the page
# cache.  A 4096 x 4096 weight in fp32 and in bf16, LoRA A [r, 4096] and
# B [4096, r] in fp32, for r = 8, 16, 64.  Each figure is the best of
# ROUNDS (default 5) first reads (`dd bs=1M` of tensors/NAME on a fresh
# mount, so neither the kernel's page cache of the mount nor the daemon's
# block cache helps), unmerged and merged read alternately.  On a shared
# machine, `chrt -f 10 bench/lora-merge.sh .` (root) keeps other processes
# off the CPUs during the reads: both views run at that priority.
# Needs a user allowed to mount FUSE, /usr/bin/python3 (PYTHON3) with numpy, ~200 MiB of /tmp.
set -eu
B=$(cd "${1:-.}" && pwd)
ROUNDS=${ROUNDS:-5}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bench_workdir
"${PYTHON3:-/usr/bin/python3}" - "$W" <<'PY'
import json, sys
import numpy as np
w = sys.argv[1]
rng = np.random.default_rng(0)
n = 4096
W32 = rng.standard_normal((n, n), dtype=np.float32) * 0.02
W32.tofile(f"{w}/w_fp32.bin")
(W32.view(np.uint32) >> 16).astype(np.uint16).tofile(f"{w}/w_bf16.bin")
for r in (8, 16, 64):
    (rng.standard_normal((r, n), dtype=np.float32) * 0.01).tofile(f"{w}/a{r}.bin")
    (rng.standard_normal((n, r), dtype=np.float32) * 0.01).tofile(f"{w}/b{r}.bin")
    for dt, isz in (("fp32", 4), ("bf16", 2)):
        srcs = [{"path": f"w_{dt}.bin", "size": n * n * isz},
                {"path": f"a{r}.bin", "size": r * n * 4}, {"path": f"b{r}.bin", "size": n * r * 4}]
        dtn = {"fp32": "float32", "bf16": "bfloat16"}[dt]
        def t(name, dtype, shape, src, size):
            return {"name": name, "dtype": dtype, "shape": shape,
                    "pieces": [{"source": src, "offset": 0, "length": size}]}
        lay = {"gatherfs_layout": 3, "base_dir": w, "sources": srcs,
               "inputs": [t("W", dtn, [n, n], 0, n * n * isz), t("A", "float32", [r, n], 1, r * n * 4),
                          t("B", "float32", [n, r], 2, n * r * 4)],
               "tensors": [t("unmerged", dtn, [n, n], 0, n * n * isz),
                           {"name": "merged", "dtype": dtn, "shape": [n, n],
                            "compute": {"op": "lora", "scale": 2.0, "weight": "W", "lora_A": "A",
                                        "lora_B": "B"}}]}
        json.dump(lay, open(f"{w}/{dt}_r{r}.json", "w"))
PY
cat "$W"/*.bin >/dev/null # sources into the page cache

# mounted: the mount point is in the mount table.
mounted() { awk -v m="$W/m" '$2 == m { f = 1 } END { exit !f }' /proc/mounts; }

# cpu PID: user + system CPU seconds of process PID so far.
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / hz }' "/proc/$1/stat"; }

# read JSON FILE: "SECONDS CPU" of one first read of tensors/FILE on a fresh
# mount: the wall time of dd, and the daemon's CPU time (user + system)
# during it.
read1() {
	"$B/gatherfs" -f "$W/$1" "$W/m" &
	pid=$!
	i=0
	until mounted; do
		i=$((i + 1))
		[ $i -lt 100 ] || { echo "mount failed" >&2; exit 1; }
		sleep 0.1
	done
	c0=$(cpu $pid)
	s=$(date +%s.%N)
	dd if="$W/m/tensors/$2" of=/dev/null bs=1M 2>/dev/null
	e=$(date +%s.%N)
	c1=$(cpu $pid)
	fusermount3 -u "$W/m"
	wait $pid
	echo "$s $e $c0 $c1" | awk '{ printf "%.4f %.4f", $2 - $1, $4 - $3 }'
}

# pair JSON: "U UC M MC": the best of ROUNDS first reads of the unmerged and
# of the merged tensor, read alternately (so that a change in the machine's
# load during the run weighs on both alike).
pair() {
	bu= buc= bm= bmc=
	for _ in $(seq "$ROUNDS"); do
		u=$(read1 "$1" unmerged)
		m=$(read1 "$1" merged)
		set -- "$1" $(echo "$u $m $bu $buc $bm $bmc" | awk '{
			if ($5 != "" && $5 < $1) $1 = $5; if ($6 != "" && $6 < $2) $2 = $6
			if ($7 != "" && $7 < $3) $3 = $7; if ($8 != "" && $8 < $4) $4 = $8
			print $1, $2, $3, $4 }')
		bu=$2 buc=$3 bm=$4 bmc=$5
		set -- "$1"
	done
	echo "$bu $buc $bm $bmc"
}

echo "| weight | r | unmerged MB/s | merged MB/s | merged / unmerged | daemon CPU s, unmerged | daemon CPU s, merged | MB per daemon CPU s, merged |"
echo "|---|---|---|---|---|---|---|---|"
for dt in fp32 bf16; do
	mb=64
	[ $dt = bf16 ] && mb=32
	for r in 8 16 64; do
		echo "$dt $r $(pair "${dt}_r$r.json") $mb" | awk '{ printf "| 4096x4096 %s | %d | %.0f | %.0f | %.2fx | %.3f | %.3f | %.0f |\n", $1, $2, $7 / $3 * 1.048576, $7 / $5 * 1.048576, $3 / $5, $4, $6, $7 * 1.048576 / ($6 > 0 ? $6 : 1e-9) }'
	done
done
echo
echo "command: bench/lora-merge.sh $B (dd if=MNT/tensors/{unmerged,merged} of=/dev/null bs=1M, fresh mount each, sources cached, alternately, best of $ROUNDS each)"
echo "load average during the run: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs (wall-clock ratios suffer when CPUs are shared; the CPU columns do not)"
