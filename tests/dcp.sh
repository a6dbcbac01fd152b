#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# gatherfs-inspect on the PyTorch DCP fixtures (tests/data/dcp): ls, cat
# (sha256 of every tensor, default and --dtype bf16), --input-format,
# --prefix, the layout JSON round trip and verify; then broken copies
# (missing .distcp, truncated item, corrupt zstd frame, chunks that leave a
# gap or overlap, a chunk whose archive disagrees, a garbage .metadata): each
# exits 1 with one line naming the file and the problem.
. "${top_srcdir:-.}/tests/lib.sh"
[ -x "$PYTHON3" ] || skip "python3 not found"
DCP="$top_srcdir/tests/data/dcp"
mktempdir
"$PYTHON3" "$top_srcdir/tests/tools/check_dcp.py" "$INSPECT" "$DCP" || fail "check_dcp.py"

# The zstd case again with the shared frame cache off (every frame streamed).
TAB=$(printf '\t')
while IFS="$TAB" read -r name dtype shape sha; do
	got=$(GATHERFS_ZSTD_CACHE_MB=0 "$INSPECT" cat "$DCP/fsdp2_ws2_zstd/checkpoint" "$name" | sha256sum | cut -d' ' -f1)
	[ "$got" = "$sha" ] || fail "GATHERFS_ZSTD_CACHE_MB=0: cat $name: sha256 $got, want $sha"
done < "$DCP/fsdp2_ws2_zstd/.expected-default.tsv"
echo "ok - zstd case streamed (GATHERFS_ZSTD_CACHE_MB=0)"

# expect_fail MODE CASE PATTERN
expect_fail() {
	"$PYTHON3" "$top_srcdir/tests/tools/make_bad_dcp.py" "$DCP/$2/checkpoint" "$TESTTMP/$1" "$1" ||
		fail "make_bad_dcp.py $1"
	if "$INSPECT" ls "$TESTTMP/$1" >/dev/null 2>"$TESTTMP/err"; then
		fail "$1: ls succeeded"
	fi
	[ "$(wc -l < "$TESTTMP/err")" -eq 1 ] || fail "$1: not one line: $(cat "$TESTTMP/err")"
	grep -q -- "$3" "$TESTTMP/err" || fail "$1: '$(cat "$TESTTMP/err")' lacks '$3'"
	echo "ok - $1: $(cat "$TESTTMP/err")"
}

expect_fail missing fsdp2_ws2 "__1_0.distcp: cannot open: No such file"
expect_fail truncated shard1_ws3 "__2_0.distcp: item of .* lies past its end"
expect_fail zstd-corrupt fsdp2_ws2_zstd "__0_0.distcp: model.embed_tokens.weight: zstd frame at offset 0"
expect_fail gap fsdp2_ws2 "model.embed_tokens.weight: chunks cover 32768 of its 32832 elements"
expect_fail overlap fsdp2_ws2 "model.embed_tokens.weight: chunks 0 and 1 overlap"
expect_fail badsize fsdp2_ws2 "chunk size 256 in dimension 0, the metadata says 257"
expect_fail garbage fsdp2_ws2 "\.metadata: "
# A chunk archive broken where only opening it can tell (lazy-eocd: a bad
# zip, lazy-size: a record of the wrong size): ls needs only .metadata and
# succeeds, cat of its tensor and verify (which opens every archive) exit 1
# naming the file and the problem; GATHERFS_DCP_EAGER=1 refuses it at import.
for spec in "lazy-eocd:not a zip archive" "lazy-size:chunk bytes lie outside its storage record"; do
	m=${spec%%:*} pat="__1_0.distcp: chunk archive at offset [0-9]*: ${spec#*:}"
	"$PYTHON3" "$top_srcdir/tests/tools/make_bad_dcp.py" "$DCP/fsdp2_ws2/checkpoint" "$TESTTMP/$m" "$m" ||
		fail "make_bad_dcp.py $m"
	"$INSPECT" ls "$TESTTMP/$m" >/dev/null 2>&1 || fail "$m: ls failed"
	"$INSPECT" cat "$TESTTMP/$m" model.norm.weight >/dev/null || fail "$m: cat model.norm.weight failed"
	for cmd in cat verify; do
		name=
		[ $cmd = cat ] && name=lm_head.weight
		# shellcheck disable=SC2086
		if "$INSPECT" $cmd "$TESTTMP/$m" $name >/dev/null 2>"$TESTTMP/err"; then
			fail "$m: $cmd succeeded"
		fi
		grep -q -- "$pat" "$TESTTMP/err" || fail "$m: $cmd: '$(cat "$TESTTMP/err")' lacks '$pat'"
		echo "ok - $m: $cmd: $(grep -- "$pat" "$TESTTMP/err")"
	done
	if GATHERFS_DCP_EAGER=1 "$INSPECT" ls "$TESTTMP/$m" >/dev/null 2>"$TESTTMP/err"; then
		fail "$m: GATHERFS_DCP_EAGER=1 ls succeeded"
	fi
	grep -q "__1_0.distcp" "$TESTTMP/err" || fail "$m: eager: $(cat "$TESTTMP/err")"
done
# A forced format that does not match, an unknown format.
"$INSPECT" ls --input-format layout "$DCP/fsdp2_ws2/checkpoint" >/dev/null 2>&1 &&
	fail "--input-format layout on a directory succeeded"
"$INSPECT" ls --input-format zip "$DCP/fsdp2_ws2/checkpoint" 2>"$TESTTMP/err" >/dev/null &&
	fail "--input-format zip succeeded"
grep -q "unknown input format 'zip'" "$TESTTMP/err" || fail "--input-format zip: $(cat "$TESTTMP/err")"
"$INSPECT" ls --prefix model. "$CKPTS/z3_ws2_fp32/checkpoint" 2>"$TESTTMP/err" >/dev/null &&
	fail "--prefix on DeepSpeed succeeded"
grep -q "prefix applies to a DCP checkpoint only" "$TESTTMP/err" || fail "--prefix on DeepSpeed: $(cat "$TESTTMP/err")"
echo "PASS"
