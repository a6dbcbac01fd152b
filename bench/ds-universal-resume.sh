#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Real DeepSpeed resumes at another world size from a gatherfs mount's
# universal checkpoint view (issue 15), checked with the universal harness's
# compare.py (fp32 masters, exp_avg, exp_avg_sq, step bit-identical after the
# load; eval loss unchanged; one more step against a reference step).
#
#   HARNESS=DIR DS_SRC=DIR bench/ds-universal-resume.sh OUT [CASE...]
#
# HARNESS is a writable copy of the universal-checkpoint harness (uni_case.py,
# convert.py, compare.py; not part of gatherfs), DS_SRC a DeepSpeed v0.14.5
# source tree.  CASE is one of
#   z2_ws4_fp32 z1_ws4_fp32 z1_ws4_bf16opt z3_ws4_fp32_1group other_z2_ws4_fp32
# (default: all): saved at the first world size, resumed from the mount at
# the second.  z3_ws4_fp32_1group and other_z2_ws4_fp32 also run DeepSpeed's
# ds_to_universal on the same checkpoint to show where it fails: a ZeRO-3
# param smaller than the world size (resume at 2 ranks fails), a 0-d param
# (the conversion fails).  Results: OUT/<case>/TRUTH.md, compare.json.
set -u
: "${HARNESS:?set HARNESS to a copy of the universal harness}" "${DS_SRC:?set DS_SRC}"
export DS_SRC
OUT=$1
shift
G=$(cd "$(dirname "$0")/.." && pwd)/gatherfs
[ $# -gt 0 ] || set -- z2_ws4_fp32 z1_ws4_fp32 z1_ws4_bf16opt z3_ws4_fp32_1group other_z2_ws4_fp32
mkdir -p "$OUT"
cd "$HARNESS" || exit 1
run() { echo "+ $*"; "$@"; echo "rc=$?"; }
mount_resume() { # case stage ws uni_case-args...
	local c=$1 st=$2 ws=$3 m
	shift 3
	m=$(mktemp -d)
	run "$G" "$OUT/$c/checkpoint" "$m"
	run /usr/bin/python3 uni_case.py --phase resume --stage "$st" --world-size "$ws" --scramble \
		--load-dir "$m" --out "$OUT/$c/resume_ws${ws}_mount" "$@"
	fusermount3 -u "$m"
	rmdir "$m"
}
compare() {
	run env PYTHONPATH="$DS_SRC:stubs" DS_ACCELERATOR=cpu /usr/bin/python3 compare.py "$OUT/$1"
	grep -E "^## |verdict|S2 " "$OUT/$1/TRUTH.md"
}
one() { # case stage save-ws resume-ws uni_case-args...
	local c=$1 st=$2 sws=$3 rws=$4
	shift 4
	echo "=== $c $(date -u +%T)"
	run /usr/bin/python3 uni_case.py --phase save --stage "$st" --world-size "$sws" --out "$OUT/$c" "$@"
	if [ "$c" = other_z2_ws4_fp32 ]; then # ds_to_universal on a 0-d param
		run /usr/bin/python3 convert.py --input "$OUT/$c/checkpoint/global_step3" \
			--output "$OUT/$c-ds_universal/global_step3_universal" --record "$OUT/$c/convert.json" \
			--inject-missing-state
	fi
	if [ "$c" = z3_ws4_fp32_1group ]; then # ds_to_universal, then its resume at 2 ranks
		run /usr/bin/python3 convert.py --input "$OUT/$c/checkpoint/global_step3" \
			--output "$OUT/$c/checkpoint/global_step3_universal" --record "$OUT/$c/convert.json"
		run /usr/bin/python3 uni_case.py --phase resume --stage 3 --world-size 2 --scramble \
			--load-dir "$OUT/$c/checkpoint" --out "$OUT/$c/resume_ws2_ds" "$@"
		grep -h "RuntimeError" "$OUT/$c/resume_ws2_ds/logs/"*.log | sort -u
		# DeepSpeed's output stays in the checkpoint dir: the mount hides it
	fi
	mount_resume "$c" "$st" "$rws" "$@"
	compare "$c"
}
for c in "$@"; do
	case $c in
	z2_ws4_fp32) one "$c" 2 4 3 ;;
	z1_ws4_fp32) one "$c" 1 4 2 ;;
	z1_ws4_bf16opt) one "$c" 1 4 3 --dtype bf16 --grad-accum-dtype fp32 ;;
	z3_ws4_fp32_1group) one "$c" 3 4 2 --single-group ;;
	other_z2_ws4_fp32) one "$c" 2 4 3 --model other ;;
	*) echo "unknown case $c" >&2; exit 2 ;;
	esac
done
echo "=== done $(date -u +%T)"
