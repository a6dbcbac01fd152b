#!/bin/bash
# "mount + resume" against "ds_to_universal + resume" with real DeepSpeed
# (issue 15): a single-group ZeRO-3 OtherLM saved at 4 ranks, resumed at 2.
#
#   HARNESS=DIR DS_SRC=DIR bench/ds-universal-bench.sh OUT [MODEL_CONFIG_JSON [RESUME_WS]]
#
# HARNESS: a writable copy of the universal-checkpoint harness (uni_case.py,
# convert.py); DS_SRC: a DeepSpeed v0.14.5 tree.  RESUME_WS: ranks of the
# resumed job (default 2).  Default model: vocab 32000,
# 768 x 6 layers (~67M params).  The ~335M configuration of the format notes
# is '{"vocab": 32000, "n_embd": 1024, "n_layer": 24, "n_head": 16,
# "n_inner": 4096, "n_positions": 64, "seq": 8}' (its save needs ~16.5 GB).
# Prints, for each path: time before load_checkpoint can start (conversion,
# or the mount), peak RSS of that step, bytes it wrote and left on disk,
# load_checkpoint seconds and peak RSS per rank, and the eval loss after load.
set -u
: "${HARNESS:?set HARNESS}" "${DS_SRC:?set DS_SRC}"
export DS_SRC
OUT=$1
CFG=${2:-'{"vocab": 32000, "n_embd": 768, "n_layer": 6, "n_head": 12, "n_inner": 3072, "n_positions": 64, "seq": 8}'}
RWS=${3:-2}
G=$(cd "$(dirname "$0")/.." && pwd)/gatherfs
COMMON=(--bench --model other --stage 3 --single-group --model-config "$CFG" --micro-batch 1 --steps 1
	--persistence-threshold 100000 --zero-extra
	'{"reduce_bucket_size": 50000000, "stage3_prefetch_bucket_size": 50000000, "stage3_max_live_parameters": 100000000, "stage3_max_reuse_distance": 100000000}')
cd "$HARNESS" || exit 1
echo "# $0 $OUT '$CFG' ($(date -u +%FT%TZ), $(nproc) CPUs)"
mkdir -p "$OUT"
[ -d "$OUT/case/checkpoint" ] ||
	/usr/bin/python3 uni_case.py --phase save --world-size 4 --out "$OUT/case" "${COMMON[@]}" >"$OUT/save.log" 2>&1 ||
	{ echo "save failed: $OUT/save.log"; exit 1; }
echo "checkpoint: $(du -sm "$OUT/case/checkpoint" | cut -f1) MB"

# ds_to_universal + resume (its output in a copy of the save dir's layout)
ds="$OUT/ds"
rm -rf "$ds" && mkdir -p "$ds"
ln -s "$OUT/case/checkpoint/global_step1" "$ds/global_step1"
/usr/bin/python3 convert.py --input "$ds/global_step1" --output "$ds/global_step1_universal" \
	--record "$OUT/convert.json" >"$OUT/convert.out" 2>&1
/usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("ds_to_universal: rc %s, %.1f s, peak RSS %.0f MB (sum over its processes), wrote %.0f MB (tmp peak %.0f MB), left %.0f MB in %d files"
      % (d["rc"], d["wall_s"], d["tree_peak_rss_kb"] / 1024, d.get("fs_outputs_bytes", 0) / 1e6,
         d.get("tmp_peak_bytes", 0) / 1e6, d.get("output_bytes", 0) / 1e6, d.get("output_files", 0)))
' "$OUT/convert.json"
/usr/bin/time -f "%e s wall, %M kB max RSS (launcher)" /usr/bin/python3 uni_case.py --phase resume --world-size "$RWS" \
	--load-dir "$ds" --out "$OUT/resume_ds_ws$RWS" "${COMMON[@]}" >"$OUT/resume_ds_ws$RWS.log" 2>&1
tail -1 "$OUT/resume_ds_ws$RWS.log"

# mount + resume
m=$(mktemp -d)
t0=$(date +%s.%N)
"$G" "$OUT/case/checkpoint" "$m" -o nocrccache 2>"$OUT/mount.log" || { cat "$OUT/mount.log"; exit 1; }
t1=$(date +%s.%N)
pid=$(pgrep -n -f "^$G $OUT/case/checkpoint $m")
/usr/bin/time -f "%e s wall, %M kB max RSS (launcher)" /usr/bin/python3 uni_case.py --phase resume --world-size "$RWS" \
	--load-dir "$m" --out "$OUT/resume_mount_ws$RWS" "${COMMON[@]}" >"$OUT/resume_mount_ws$RWS.log" 2>&1
tail -1 "$OUT/resume_mount_ws$RWS.log"
echo "mount: $(echo "$t1 $t0" | awk '{printf "%.2f", $1 - $2}') s, daemon peak RSS $(awk '/VmHWM/ {print $2, $3}' "/proc/$pid/status"), wrote $(awk '/^write_bytes/ {print $2}' "/proc/$pid/io") bytes"
fusermount3 -u "$m"
rmdir "$m"

for r in resume_ds_ws$RWS resume_mount_ws$RWS; do
	/usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1] + "/meta_resume.json"))
print("%-16s load_checkpoint s per rank %s, rchar MB per rank %s, peak RSS MB per rank %s, eval loss after load %s"
      % (sys.argv[2], [round(x, 1) for x in d["load_checkpoint_s_per_rank"]],
         [round(x / 1e6) for x in d["load_rchar_per_rank"]],
         [round(x / 1024) for x in d["peak_rss_kb_per_rank_after_load"]], d.get("eval_loss_after_load")))
' "$OUT/$r" "$r" 2>/dev/null || echo "$r: no meta_resume.json (failed: see $OUT/$r.log)"
done
