#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/diff.sh [CKPT] [BUILDDIR]: gatherfs-inspect diff and stats against
# the plain byte tools in the same run (docs/diff.md), warm.
#
# CKPT: a DeepSpeed checkpoint (default: the ZeRO-3 checkpoint of
# bench/integrity.sh, generated once by bench/gen_deepspeed.py under
# /var/tmp/gatherfs-bench/integrity).  Its view is exported once to
# W/pytorch_model.bin on local disk; CKPT is mounted at W/m.  Rows (median of
# 3, everything read once before, so the page cache holds the sources and
# the export):
#   cmp     cmp W/m/pytorch_model.bin W/pytorch_model.bin
#   diff    gatherfs-inspect diff CKPT W/pytorch_model.bin  (must say SAME)
#   cat     cat W/m/pytorch_model.bin >/dev/null
#   stats   gatherfs-inspect stats CKPT >/dev/null
# with peak RSS (/usr/bin/time %M) of diff and stats.  Targets (issue 43):
# diff <= 1.5 x cmp, stats <= 1.5 x cat, RSS <= 256 MiB; each row says
# whether it is met.  Needs a user allowed to mount FUSE, python3 (for the
# generator) and GNU time (/usr/bin/time).
set -eu
B=$(cd "${2:-.}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bench_ckpt "${1:-}"
bench_workdir
I="$B/gatherfs-inspect"

"$I" export "$C" "$W/pytorch_model.bin" 2>/dev/null
"$B/gatherfs" "$C" "$W/m" 2>/dev/null
cat "$W/m/pytorch_model.bin" "$W/pytorch_model.bin" >/dev/null
"$I" stats "$C" >/dev/null 2>&1

# median3 CMD...: T, the median wall time of 3 runs of CMD (output
# discarded), and RSS, that run's peak RSS (KiB)
median3() {
	for k in 1 2 3; do
		/usr/bin/time -f '%e %M' -o "$W/time" "$@" >/dev/null 2>"$W/err" || {
			# cmp and diff exit 1 on a difference: that is a failed bench
			echo "$*: exit status $?: $(cat "$W/err")" >&2
			exit 1
		}
		cat "$W/time"
	done | sort -n | sed -n 2p >"$W/med"
	T=$(cut -d' ' -f1 "$W/med")
	RSS=$(cut -d' ' -f2 "$W/med")
}

median3 cmp "$W/m/pytorch_model.bin" "$W/pytorch_model.bin"
t_cmp=$T
median3 "$I" diff "$C" "$W/pytorch_model.bin"
t_diff=$T r_diff=$RSS
median3 cat "$W/m/pytorch_model.bin"
t_cat=$T
median3 "$I" stats "$C"
t_stats=$T r_stats=$RSS
size=$(stat -c %s "$W/pytorch_model.bin")

verdict() { # RATIO LIMIT
	if [ "$(echo "$1 <= $2" | bc)" = 1 ]; then echo met; else echo "NOT met"; fi
}
ratio() { echo "scale=2; $1 / $2" | bc; }
echo "checkpoint: $C ($size bytes in pytorch_model.bin), $(nproc) CPUs"
echo
echo "| command | s (median of 3) | ratio | target | peak RSS |"
echo "|---|---|---|---|---|"
echo "| cmp W/m/pytorch_model.bin W/pytorch_model.bin | $t_cmp | 1 | | |"
rd=$(ratio "$t_diff" "$t_cmp")
echo "| gatherfs-inspect diff CKPT W/pytorch_model.bin | $t_diff | $rd | <= 1.5 x cmp: $(verdict "$rd" 1.5) | $((r_diff / 1024)) MiB: $(verdict "$r_diff" 262144) |"
echo "| cat W/m/pytorch_model.bin | $t_cat | 1 | | |"
rs=$(ratio "$t_stats" "$t_cat")
echo "| gatherfs-inspect stats CKPT | $t_stats | $rs | <= 1.5 x cat: $(verdict "$rs" 1.5) | $((r_stats / 1024)) MiB: $(verdict "$r_stats" 262144) |"
