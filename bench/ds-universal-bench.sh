#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# "mount + resume" against "ds_to_universal + resume" with real DeepSpeed
# (issue 15): a single-group ZeRO-3 OtherLM saved at 4 ranks, resumed at 2.
#
#   HARNESS=DIR DS_SRC=DIR bench/ds-universal-bench.sh OUT [MODEL [RESUME_WS]]
#
# HARNESS: a writable copy of the universal-checkpoint harness (uni_case.py,
# convert.py); DS_SRC: a DeepSpeed v0.14.5 tree.  RESUME_WS: ranks of the
# resumed job (default 2).  MODEL: 67m (the default: vocab 32000, 768 x 6
# layers), 335m (vocab 32000, 1024 x 24 layers: the configuration of the
# format notes), or a model-config JSON for the harness's OtherLM.
# PATHS: "ds mount" (the default), or one of them (the other's output, if
# kept in OUT, is still compared against the view).  Each DeepSpeed job may
# run for an hour (the harness's default limit is 900 s; at 335M the load
# alone takes ~14 min on 2 busy CPUs).
# 335m runs with smaller ZeRO-3 buckets (20M elements live/prefetched
# instead of 100M/50M) and MALLOC_ARENA_MAX=2, which keep the 4-rank save
# under ~16 GB; ZERO_EXTRA (JSON) overrides the buckets.
# Prints, for each path: time before load_checkpoint can start (conversion,
# or the mount; and from the start of the resume job to rank 0's first
# "Loading checkpoint" log line), peak RSS of that step, bytes it wrote and
# left on disk, load_checkpoint seconds and peak RSS per rank, the eval loss
# after load, and the mount's universal view file by file against
# ds_to_universal's output (the harness's compare.compare_dirs).
set -u
: "${HARNESS:?set HARNESS}" "${DS_SRC:?set DS_SRC}"
export DS_SRC
OUT=$1
MODEL=${2:-67m}
RWS=${3:-2}
case $MODEL in
67m | '')
	CFG='{"vocab": 32000, "n_embd": 768, "n_layer": 6, "n_head": 12, "n_inner": 3072, "n_positions": 64, "seq": 8}'
	EXTRA='{"reduce_bucket_size": 50000000, "stage3_prefetch_bucket_size": 50000000, "stage3_max_live_parameters": 100000000, "stage3_max_reuse_distance": 100000000}' ;;
335m)
	CFG='{"vocab": 32000, "n_embd": 1024, "n_layer": 24, "n_head": 16, "n_inner": 4096, "n_positions": 64, "seq": 8}'
	EXTRA='{"reduce_bucket_size": 20000000, "stage3_prefetch_bucket_size": 20000000, "stage3_max_live_parameters": 20000000, "stage3_max_reuse_distance": 20000000}'
	export MALLOC_ARENA_MAX=2 ;;
*)
	CFG=$MODEL
	EXTRA='{"reduce_bucket_size": 50000000, "stage3_prefetch_bucket_size": 50000000, "stage3_max_live_parameters": 100000000, "stage3_max_reuse_distance": 100000000}' ;;
esac
EXTRA=${ZERO_EXTRA:-$EXTRA}
G=$(cd "$(dirname "$0")/.." && pwd)/gatherfs
PATHS=${PATHS:-ds mount}
COMMON=(--bench --model other --stage 3 --single-group --model-config "$CFG" --micro-batch 1 --steps 1
	--persistence-threshold 100000 --zero-extra "$EXTRA" --timeout 3600)
mem() { free -m | awk -v w="$1" '/^Mem:/ {print "free before " w ": " $7 " MB available"}'; }
# resume PATH_NAME LOAD_DIR: the resumed job at RWS ranks, timed; then how
# long after its start rank 0 began load_checkpoint (its first DeepSpeed
# "Loading checkpoint" log line, local time).
resume() {
	local j0
	mem "resume from $1"
	j0=$(date +%s.%N)
	/usr/bin/time -f "%e s wall, %M kB max RSS (largest process)" /usr/bin/python3 uni_case.py --phase resume \
		--world-size "$RWS" --load-dir "$2" --out "$OUT/resume_$1_ws$RWS" "${COMMON[@]}" \
		>"$OUT/resume_$1_ws$RWS.log" 2>&1
	tail -1 "$OUT/resume_$1_ws$RWS.log"
	/usr/bin/python3 -c '
import datetime, re, sys
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+)\].*Loading checkpoint from", line)
    if m:
        t = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        print("%s: load_checkpoint started %.1f s after the resume job" % (sys.argv[3], t - float(sys.argv[2])))
        break
' "$OUT/resume_$1_ws$RWS/logs/resume_rank0.log" "$j0" "$1"
}
cd "$HARNESS" || exit 1
echo "# $0 $OUT $MODEL $RWS ($(date -u +%FT%TZ), $(nproc) CPUs)"
echo "# model config $CFG; zero extra $EXTRA"
mkdir -p "$OUT"
if [ ! -d "$OUT/case/checkpoint" ]; then
	mem save
	/usr/bin/time -f "save at 4 ranks: %e s wall, %M kB max RSS (largest process)" -o "$OUT/save.time" \
		/usr/bin/python3 uni_case.py --phase save --world-size 4 --out "$OUT/case" "${COMMON[@]}" >"$OUT/save.log" 2>&1 ||
		{ echo "save failed: $OUT/save.log"; exit 1; }
	cat "$OUT/save.time"
fi
echo "checkpoint: $(du -sm "$OUT/case/checkpoint" | cut -f1) MB in $(find "$OUT/case/checkpoint" -type f | wc -l) files"

# ds_to_universal + resume (its output in a copy of the save dir's layout)
ds="$OUT/ds"
case " $PATHS " in *" ds "*)
rm -rf "$ds" && mkdir -p "$ds"
ln -s "$OUT/case/checkpoint/global_step1" "$ds/global_step1"
mem ds_to_universal
/usr/bin/python3 convert.py --input "$ds/global_step1" --output "$ds/global_step1_universal" \
	--record "$OUT/convert.json" >"$OUT/convert.out" 2>&1
/usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("ds_to_universal: rc %s, %.1f s, peak RSS %.0f MB (sum over its processes), wrote %.0f MB (tmp peak %.0f MB), left %.0f MB in %d files"
      % (d["rc"], d["wall_s"], d["tree_peak_rss_kb"] / 1024, d.get("fs_outputs_bytes", 0) / 1e6,
         d.get("tmp_peak_bytes", 0) / 1e6, d.get("output_bytes", 0) / 1e6, d.get("output_files", 0)))
' "$OUT/convert.json"
resume ds "$ds"
;; esac

# mount + resume
case " $PATHS " in *" mount "*)
m=$(mktemp -d)
t0=$(date +%s.%N)
"$G" "$OUT/case/checkpoint" "$m" -o nocrccache 2>"$OUT/mount.log" || { cat "$OUT/mount.log"; exit 1; }
t1=$(date +%s.%N)
pid=$(pgrep -n -f "^$G $OUT/case/checkpoint $m")
du0=$(du -sb "$OUT/case/checkpoint" | cut -f1)
resume mount "$m"
echo "mount: $(echo "$t1 $t0" | awk '{printf "%.2f", $1 - $2}') s, daemon peak RSS $(awk '/VmHWM/ {print $2, $3}' "/proc/$pid/status"), wrote $(awk '/^write_bytes/ {print $2}' "/proc/$pid/io") bytes"
echo "checkpoint dir: $du0 bytes before the resume, $(du -sb "$OUT/case/checkpoint" | cut -f1) after"
# the mount's universal view against ds_to_universal's output, file by file
/usr/bin/python3 -c '
import json, sys
sys.path.insert(0, ".")
import compare
r = compare.compare_dirs(sys.argv[1], sys.argv[2])
json.dump(r, open(sys.argv[3], "w"), indent=1)
d = r["differs"]
same = [k for k, v in d.items() if v.get("tensor_bit_identical")]
print("view vs ds_to_universal: %d files byte-identical, %d differ (%d of them decode to bit-identical tensors: %s), "
      "%d only in ds_to_universal'"'"'s output, %d only in the view; differing tensors: %s"
      % (len(r["byte_identical"]), len(d), len(same), ", ".join(sorted(same)[:3]) + (" ..." if len(same) > 3 else ""),
         len(r["only_in_ds_to_universal"]), len(r["only_in_view"]),
         ", ".join("%s %s" % (k, v["bytes"]) for k, v in sorted(d.items()) if k not in same and k.startswith("zero/") and not k.endswith("optimizer_state.pt")) or "none"))
' "$ds/global_step1_universal" "$m/global_step1_universal" "$OUT/view_vs_ds.json"
fusermount3 -u "$m"
rmdir "$m"
;; esac

for r in resume_ds_ws$RWS resume_mount_ws$RWS; do
	[ -d "$OUT/$r" ] || continue
	/usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1] + "/meta_resume.json"))
print("%-16s load_checkpoint s per rank %s, rchar MB per rank %s, peak RSS MB per rank %s, eval loss after load %s"
      % (sys.argv[2], [round(x, 1) for x in d["load_checkpoint_s_per_rank"]],
         [round(x / 1e6) for x in d["load_rchar_per_rank"]],
         [round(x / 1024) for x in d["peak_rss_kb_per_rank_after_load"]], d.get("eval_loss_after_load")))
' "$OUT/$r" "$r" 2>/dev/null || echo "$r: no meta_resume.json (failed: see $OUT/$r.log)"
done
