#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/check_fidelity.sh [BUILDDIR]: prove that bench/gen_deepspeed.py writes
# what DeepSpeed 0.14.5 writes.  For real fixtures in tests/data/ckpt it
# generates the same configuration (tiny_model.TinyLM, same stage, world size
# and dtype) and requires
#   1. `gatherfs-inspect layout` to agree in tensor names, order, dtypes,
#      shapes, aliases and per-rank pieces (source file name, length);
#   2. the pickle structure dump (bench/inspect_pickles.py: zip records,
#      GLOBALs, persistent ids, key order, shapes, storages) of every file to
#      be identical, except the byte size of data.pkl;
# and the same of its --sparse output (payloads as holes), which must also
# pass `gatherfs-inspect verify` (every record CRC-32 checked where the
# build checks them) and hold holes; and bench/sparse_fidelity.py: the
# sparse writer's archive is byte-identical to torch.save's for zero
# payloads.  Likewise bench/gen_dcp.py against the real FSDP2 DCP fixture
# (tests/data/dcp/fsdp2_ws2, torch 2.14): same layout and the same .metadata
# tree (fidelity.py dcpmeta).
# What differs and why: tensor values (random) and thus source offsets of the
# zip records; data.pkl sizes differ by a few bytes where DeepSpeed's objects
# share memo entries differently (e.g. the module's _metadata built in
# another order).  Needs torch in /usr/bin/python3 (skips with 77 if absent).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
B=$(cd "${1:-${top_builddir:-$here/..}}" && pwd)
D=$here/../tests/data/ckpt
TOOL=${INSPECT_PICKLES:-$here/inspect_pickles.py}
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "no torch: skip"; exit 77; }
W=$(mktemp -d "${TMPDIR:-/tmp}/gfs-fidelity.XXXXXX")
trap 'rm -rf "$W"' EXIT
fail=0
# case: fixture stage ws dtype
if /usr/bin/python3 "$here/sparse_fidelity.py" "$W/sparse-fidelity"; then
	echo "ok   sparse_zip: byte-identical to torch.save"
else
	echo "FAIL sparse_zip"; fail=1
fi
for c in z3_ws2_fp32:3:2:fp32 z3_ws3_bf16:3:3:bf16 z2_ws2_fp32_twotags:2:2:fp32 z2_ws3_bf16:2:3:bf16; do
	IFS=: read -r fx st ws dt <<-E
	$c
	E
	for mode in dense sparse; do
	g=$W/$fx-$mode
	flag=; [ $mode = sparse ] && flag=--sparse
	/usr/bin/python3 "$here/gen_deepspeed.py" "$g" --tiny --tiny-dir "$D" \
		--stage "$st" --ws "$ws" --dtype "$dt" $flag
	"$B/gatherfs-inspect" layout "$D/$fx/checkpoint" > "$W/real.json"
	"$B/gatherfs-inspect" layout "$g" > "$W/gen.json"
	if /usr/bin/python3 "$here/fidelity.py" layout "$W/real.json" "$W/gen.json"; then
		echo "ok   $fx $mode layout: names, order, dtypes, shapes, pieces"
	else
		echo "FAIL $fx $mode layout"; fail=1
	fi
	tag=$(cat "$D/$fx/checkpoint/latest")
	if [ -f "$TOOL" ]; then
		for f in "$D/$fx/checkpoint/$tag"/*.pt; do
			n=$(basename "$f")
			if /usr/bin/python3 "$here/fidelity.py" pickles "$f" "$g/global_step3/$n" "$TOOL"; then
				echo "ok   $fx $mode $n pickle structure"
			else
				echo "FAIL $fx $mode $n pickle structure"; fail=1
			fi
		done
	fi
	if [ $mode = sparse ]; then
		if "$B/gatherfs-inspect" verify "$g" >/dev/null; then
			echo "ok   $fx sparse verifies"
		else
			echo "FAIL $fx sparse verify"; fail=1
		fi
	fi
	done
done
DC=$here/../tests/data/dcp/fsdp2_ws2/checkpoint
/usr/bin/python3 "$here/gen_dcp.py" "$W/dcp" --ws 2 --like "$DC/config.json"
"$B/gatherfs-inspect" layout "$DC" > "$W/real.json"
"$B/gatherfs-inspect" layout "$W/dcp" > "$W/gen.json"
if /usr/bin/python3 "$here/fidelity.py" layout "$W/real.json" "$W/gen.json" &&
	/usr/bin/python3 "$here/fidelity.py" dcpmeta "$DC/.metadata" "$W/dcp/.metadata" &&
	"$B/gatherfs-inspect" verify "$W/dcp" >/dev/null; then
	echo "ok   fsdp2_ws2 gen_dcp: layout, .metadata tree, verify"
else
	echo "FAIL fsdp2_ws2 gen_dcp"; fail=1
fi
exit $fail
