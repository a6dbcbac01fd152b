#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# gatherfs-inspect on plain model files (tests/data/plain, and cases
# tests/tools/make_plain.py writes with this machine's torch: views into
# shared storages, every dtype, sharded safetensors and .bin): ls order,
# dtypes and shapes, and every tensor's bytes (cat, default and --dtype
# bf16) against the reference readers (tests/tools/plain_ref.py: torch.load,
# and the safetensors format read with the standard library); format
# detection, --input-format plain, --prefix, single files, the layout JSON
# round trip, verify and export; that importing reads no tensor payload
# (strace); then broken files: each exits 1 with one line naming the file
# and the problem.
. "${top_srcdir:-.}/tests/lib.sh"
[ -x "$PYTHON3" ] || skip "python3 not found"
"$PYTHON3" -c "import torch" 2>/dev/null || skip "python3-torch not installed"
PLAIN="$top_srcdir/tests/data/plain"
REF="$top_srcdir/tests/tools/plain_ref.py"
TAB=$(printf '\t')
mktempdir
G="$TESTTMP/gen"
"$PYTHON3" "$top_srcdir/tests/tools/make_plain.py" good "$G" || fail "make_plain.py good"

# check_case SRC [INSPECT_ARGS...]: ls and cat of SRC against the reference.
check_case() {
	src=$1
	shift
	"$PYTHON3" "$REF" tsv "$src" "$TESTTMP/want" || fail "plain_ref.py tsv $src"
	for mode in default bf16; do
		dt=
		[ $mode = bf16 ] && dt="--dtype bf16"
		# shellcheck disable=SC2086
		"$INSPECT" ls --json $dt "$@" "$src" > "$TESTTMP/ls.json" || fail "ls $src"
		"$PYTHON3" -c '
import json, sys, urllib.parse
got = [(e["name"], e["dtype"], str(e["shape"])) for e in json.load(open(sys.argv[1]))]
want = [(urllib.parse.unquote(r[0]), r[1], r[2]) for r in
        (l.rstrip("\n").split("\t") for l in open(sys.argv[2]))]
if got != want:
    sys.exit(f"ls: {got[:3]}... want {want[:3]}...")
' "$TESTTMP/ls.json" "$TESTTMP/want.$mode.tsv" || fail "ls $src ($mode) differs from the reference"
		n=0
		while IFS="$TAB" read -r name dtype shape sha; do
			case $name in *%*) fail "$src: a key needing %-decoding: $name" ;; esac
			# shellcheck disable=SC2086
			got=$("$INSPECT" cat $dt "$@" "$src" "$name" | sha256sum | cut -d' ' -f1)
			[ "$got" = "$sha" ] || fail "cat $src $name ($mode): sha256 $got, want $sha"
			n=$((n + 1))
		done < "$TESTTMP/want.$mode.tsv"
		echo "ok - $src ($mode): $n tensors"
	done
}

for c in llama_fp32 llama_bf16 llama_bf16_bin; do
	check_case "$PLAIN/$c"
done
check_case "$PLAIN/lomo_ws2_fp32/old_save.pt"
check_case "$PLAIN/lomo_ws3_bf16/old_save.pt"
check_case "$PLAIN/adapter" --input-format plain
for c in views sharded_st sharded_bin; do
	check_case "$G/$c"
done
check_case "$G/sharded_st/model.safetensors.index.json"
check_case "$G/sharded_st/model-00003-of-00003.safetensors"

# Detection: plain dirs and files are found without --input-format; an
# adapter-only dir needs it; a forced format that does not fit fails.
"$INSPECT" ls "$PLAIN/adapter" > /dev/null 2> "$TESTTMP/err" && fail "adapter dir detected without --input-format plain"
grep -q "adapter: no known checkpoint format" "$TESTTMP/err" || fail "adapter dir: $(cat "$TESTTMP/err")"
"$INSPECT" ls --input-format plain "$CKPTS/z3_ws2_fp32/checkpoint" > /dev/null 2> "$TESTTMP/err" &&
	fail "--input-format plain on a DeepSpeed dir succeeded"
grep -q "no plain model files" "$TESTTMP/err" || fail "plain on DeepSpeed: $(cat "$TESTTMP/err")"
"$INSPECT" ls --input-format deepspeed "$PLAIN/llama_fp32" > /dev/null 2>&1 &&
	fail "--input-format deepspeed on a plain dir succeeded"
"$INSPECT" layout "$PLAIN/llama_fp32" | grep -q '"format":[[:space:]]*"plain"' || fail "layout format is not plain"
echo "ok - detection"

# --prefix: keys starting with it, named without it; none is an error.
"$INSPECT" ls --input-format plain --prefix base_model.model. "$PLAIN/adapter" > "$TESTTMP/ls" || fail "ls --prefix"
grep -q "^model.layers.0.self_attn.q_proj.lora_A.weight " "$TESTTMP/ls" || fail "--prefix: $(head -3 "$TESTTMP/ls")"
grep -q "^base_model" "$TESTTMP/ls" && fail "--prefix: prefix not stripped"
"$INSPECT" ls --prefix nothing. "$PLAIN/llama_fp32" > /dev/null 2> "$TESTTMP/err" && fail "--prefix nothing. succeeded"
grep -q "no key starts with 'nothing.'" "$TESTTMP/err" || fail "--prefix nothing.: $(cat "$TESTTMP/err")"
echo "ok - --prefix"

# The layout JSON round trip, verify, export.
for src in "$PLAIN/llama_bf16_bin" "$PLAIN/lomo_ws2_fp32/old_save.pt" "$G/views" "$G/sharded_st"; do
	"$INSPECT" layout "$src" > "$TESTTMP/layout.json" || fail "layout $src"
	"$INSPECT" ls --json "$src" > "$TESTTMP/a.json" || fail "ls $src"
	"$INSPECT" ls --json --layout "$TESTTMP/layout.json" > "$TESTTMP/b.json" || fail "ls --layout ($src)"
	cmp -s "$TESTTMP/a.json" "$TESTTMP/b.json" || fail "layout round trip of $src differs"
	# exit 3 and an UNVERIFIED line per file when safetensors files (no
	# checksum) hold tensor bytes; 0 when every byte is in a zip record
	rc=0
	"$INSPECT" verify "$src" > "$TESTTMP/verify" || rc=$?
	want=0
	ls "$src"/*.safetensors >/dev/null 2>&1 && want=3
	[ $rc -eq $want ] || fail "verify $src: exit $rc, expected $want: $(cat "$TESTTMP/verify")"
	grep -q "^OK: " "$TESTTMP/verify" || fail "verify $src: $(cat "$TESTTMP/verify")"
	if [ $want -eq 3 ]; then
		grep -q "^UNVERIFIED: .*\.safetensors: no stored checksum" "$TESTTMP/verify" ||
			fail "verify $src names no unverified file: $(cat "$TESTTMP/verify")"
	else
		grep -q "^UNVERIFIED" "$TESTTMP/verify" && fail "verify $src: $(cat "$TESTTMP/verify")"
	fi
	"$PYTHON3" "$REF" tsv "$src" "$TESTTMP/want" || fail "plain_ref.py tsv $src"
	rm -f "$TESTTMP/out.safetensors"
	"$INSPECT" export --dtype bf16 "$src" "$TESTTMP/out.safetensors" || fail "export $src"
	"$PYTHON3" "$top_srcdir/tests/tools/check_safetensors.py" "$TESTTMP/out.safetensors" "$TESTTMP/want.bf16.tsv" ||
		fail "export of $src"
done
echo "ok - layout round trip, verify, export"

# Importing reads metadata only (strace: no read of a tensor payload).
if command -v strace >/dev/null 2>&1; then
	"$PYTHON3" "$top_srcdir/tests/tools/check_plain_noread.py" "$INSPECT" "$PLAIN/llama_fp32" \
		"$PLAIN/llama_bf16_bin" "$PLAIN/lomo_ws2_fp32/old_save.pt" "$G/views" "$G/sharded_st" \
		"$G/sharded_bin" || fail "check_plain_noread.py"
else
	echo "SKIP: strace not installed: payload reads not checked"
fi

# Broken files: exit 1, one line naming the file and the problem.
ST_BAD="truncated-header huge-header past-eof trailing overlap badsize bad-dtype c128 not-json
	missing-shard index-extra index-missing index-wrong-shard index-path"
BIN_BAD="bin-truncated bin-not-tensor bin-legacy bin-fragmented"
# shellcheck disable=SC2086
"$PYTHON3" "$top_srcdir/tests/tools/make_plain.py" bad "$G/sharded_st" "$TESTTMP/bad" $ST_BAD &&
	"$PYTHON3" "$top_srcdir/tests/tools/make_plain.py" bad "$G/views" "$TESTTMP/bad" $BIN_BAD ||
	fail "make_plain.py bad"
# expect_fail MODE FILE PATTERN
expect_fail() {
	if "$INSPECT" ls "$TESTTMP/bad/$1" > /dev/null 2> "$TESTTMP/err"; then
		fail "$1: ls succeeded"
	fi
	[ "$(wc -l < "$TESTTMP/err")" -eq 1 ] || fail "$1: not one line: $(cat "$TESTTMP/err")"
	grep -q -- "$TESTTMP/bad/$1/$2" "$TESTTMP/err" || fail "$1: '$(cat "$TESTTMP/err")' does not name $2"
	grep -q -- "$3" "$TESTTMP/err" || fail "$1: '$(cat "$TESTTMP/err")' lacks '$3'"
	echo "ok - $1: $(cat "$TESTTMP/err")"
}

S1=model-00001-of-00003.safetensors
S2=model-00002-of-00003.safetensors
IDX=model.safetensors.index.json
expect_fail truncated-header $S1 "header (.* bytes) runs past the end"
expect_fail huge-header $S1 "header length 1099511627776 exceeds"
expect_fail past-eof $S1 "lie past the end of the file's"
expect_fail trailing $S1 "the file holds .* data bytes"
expect_fail overlap $S1 "overlap"
expect_fail badsize $S1 "z.f32: data_offsets .* hold 128 bytes, its dtype and shape need 160"
expect_fail bad-dtype $S1 'z.f32: dtype "U32" is not supported'
expect_fail c128 $S1 'b.f64: dtype "C128" is not supported'
expect_fail not-json $S1 "invalid JSON"
expect_fail missing-shard $S2 "cannot open: No such file or directory (a shard named by $IDX)"
expect_fail index-extra $IDX "lists not.there in $S2, which does not hold it"
expect_fail index-missing $S2 "holds y.i64, which $IDX does not list"
expect_fail index-wrong-shard $S2 "holds y.i64, which $IDX puts in model-00003-of-00003.safetensors"
expect_fail index-path $IDX "is not a file name next to the index"
expect_fail bin-truncated pytorch_model.bin "not a zip archive"
expect_fail bin-not-tensor pytorch_model.bin "step is an int, not a tensor"
expect_fail bin-legacy pytorch_model.bin "legacy (non-zip) torch.save file"
expect_fail bin-fragmented pytorch_model.bin "w is a non-contiguous view too fragmented to serve (600 interleaved pieces"
echo "PASS"
