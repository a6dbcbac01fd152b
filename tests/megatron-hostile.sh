#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Hostile metadata (issue 48): inputs made from the fixtures by
# tests/tools/hostile_megatron.py (standard library only) and shell; each is
# answered by gatherfs-inspect ls within seconds (timeout 20) and 1 GB of
# address space (ulimit -v), with one line naming the file and the problem.
#   item 4: a FIFO at a metadata path (DeepSpeed `latest` and rank files, Megatron and rank-dict tracker, a
#           rank file, hf_config's config.json and generation_config.json,
#           torch_dist metadata.json, DCP .metadata, fsdp_config.json,
#           -o tp_split) is refused at once
#   item 5: args claiming TP = PP = EP = 4096 and a stray mp_rank_* entry
#   item 6: 200,000 model keys
#   item 8: a .metadata stacking 10^7 layers, or 10^6 layers x 10^6 experts
#   item 9: a 2 MB string in args
#   item 10: norm_epsilon inf or NaN, rotary_base inf
#   item 11: a flag that is not a bool ('True', [1], 1.0, 'no')
#   item 12: a model key holding 0x01; a tracker file holding a NUL
# (items 1-3, the leaks: tests/megatron-perms.sh, tests/hfcache-mount.sh)
. "${top_srcdir:-.}/tests/lib.sh"
[ -x "$INSPECT" ] || fail "$INSPECT not built"
[ -x "$PYTHON3" ] || skip "python3 not found"
mktempdir
T=$TESTTMP
DATA="$top_srcdir/tests/data"
MG="$DATA/megatron"
HOSTILE="$top_srcdir/tests/tools/hostile_megatron.py"
LEGACY="$MG/tp1_pp1/legacy_torch"
RANK0="$LEGACY/iter_0000003/mp_rank_00/model_optim_rng.pt"

# The bound on memory: 1 GB of address space; a sanitizer build reserves
# terabytes of shadow, so there ASan's own RSS limit holds it (a blow-up is
# then its report: more than one line, a failure all the same).
vlimit=1048576
if nm "$INSPECT" 2>/dev/null | grep -q "__asan_init"; then
	vlimit=unlimited
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}hard_rss_limit_mb=1024"
	export ASAN_OPTIONS
fi

# refused PATTERN ARG...: gatherfs-inspect ls ARG... fails within 20 s and
# 1 GB of address space with one line matching PATTERN
refused() {
	pattern=$1
	shift
	rc=0
	(ulimit -v "$vlimit" && exec timeout 20 "$INSPECT" ls "$@") >/dev/null 2>"$T/err" || rc=$?
	[ $rc -ne 124 ] || fail "inspect ls $*: still running after 20 s"
	[ $rc -ne 0 ] || fail "inspect ls $*: accepted ($(cat "$T/err"))"
	[ "$(wc -l <"$T/err")" -eq 1 ] || fail "inspect ls $*: not one line: $(cat "$T/err")"
	grep -q -- "$pattern" "$T/err" || fail "inspect ls $*: '$(cat "$T/err")' lacks '$pattern'"
	echo "ok: $(cat "$T/err")"
}

# fresh: a writable copy of tp1_pp1's legacy save in $T/bad
fresh() {
	rm -rf "$T/bad"
	cp -r "$LEGACY" "$T/bad"
	chmod -R u+w "$T/bad"
	R="$T/bad/iter_0000003/mp_rank_00/model_optim_rng.pt"
}

# hostile CMD ARG...: rank 0 of a fresh copy made by hostile_megatron.py CMD
hostile() {
	fresh
	cmd=$1
	shift
	timeout 120 "$PYTHON3" "$HOSTILE" "$cmd" "$RANK0" "$R" "$@" || fail "hostile_megatron.py $cmd $*"
}

# fifo PATH: PATH replaced by a FIFO
fifo() {
	rm -f "$1"
	mkfifo "$1" || fail "mkfifo $1"
}

echo "== item 4: a FIFO at a metadata path"
fresh; fifo "$T/bad/latest_checkpointed_iteration.txt"
refused "latest_checkpointed_iteration.txt: not a regular file" "$T/bad"
fresh; fifo "$R"
refused "mp_rank_00/model_optim_rng.pt: not a regular file" "$T/bad"
rm -rf "$T/dist" "$T/hfc"
cp -r "$MG/tp1_pp2/torch_dist" "$T/dist"
cp -r "$MG/tp1_pp2/hf_config" "$T/hfc"
chmod -R u+w "$T/dist" "$T/hfc"
fifo "$T/hfc/config.json"
refused "hfc/config.json: not a regular file" "$T/dist" --hf-config "$T/hfc"
cp "$MG/tp1_pp2/hf_config/config.json" "$T/hfc/config.json.new" && mv "$T/hfc/config.json.new" "$T/hfc/config.json"
fifo "$T/hfc/generation_config.json"
refused "hfc/generation_config.json: not a regular file" "$T/dist" --hf-config "$T/hfc"
fifo "$T/dist/metadata.json"
refused "dist/metadata.json: not a regular file" "$T/dist"
rm -rf "$T/dist"; cp -r "$MG/tp1_pp2/torch_dist" "$T/dist"; chmod -R u+w "$T/dist"
fifo "$T/dist/.metadata"
refused "dist/.metadata: not a regular file" "$T/dist"
rm -rf "$T/fsdp"; cp -r "$DATA/fsdp_rank/fsdp1_ws2" "$T/fsdp"; chmod -R u+w "$T/fsdp"
fifo "$T/fsdp/global_step_2/actor/fsdp_config.json"
refused "fsdp_config.json: not a regular file" "$T/fsdp"
rm -rf "$T/fsdp"; cp -r "$DATA/fsdp_rank/fsdp1_ws2" "$T/fsdp"; chmod -R u+w "$T/fsdp"
fifo "$T/fsdp/latest_checkpointed_iteration.txt"
refused "latest_checkpointed_iteration.txt: not a regular file" "$T/fsdp"
fifo "$T/split.json"
refused "split.json: not a regular file" "$DATA/ds3d/tp2_dp2_z1_fp32_uci/checkpoint" --tp-split "$T/split.json"
# the DeepSpeed importer's own opens: `latest` and a rank file
rm -rf "$T/ds"; cp -r "$DATA/ckpt/z2_ws2_bf16/checkpoint" "$T/ds"; chmod -R u+w "$T/ds"
fifo "$T/ds/latest"
refused "ds/latest: not a regular file" "$T/ds"
rm -rf "$T/ds"; cp -r "$DATA/ckpt/z2_ws2_bf16/checkpoint" "$T/ds"; chmod -R u+w "$T/ds"
fifo "$T/ds/global_step3/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"
refused "optim_states.pt: not a regular file" "$T/ds"
rm -rf "$T/ds"

echo "== item 5: TP = PP = EP = 4096 and a stray rank directory"
hostile args tensor_model_parallel_size=4096 pipeline_model_parallel_size=4096 \
	expert_model_parallel_size=4096 num_experts=4096
mv "$T/bad/iter_0000003/mp_rank_00" "$T/bad/iter_0000003/mp_rank_00_000_000"
mkdir "$T/bad/iter_0000003/mp_rank_01_000_0000"
refused "mp_rank_01_000_0000: not a rank of this TP 4096 x PP 4096 x EP 4096 save" "$T/bad"

echo "== item 6: 200,000 model keys"
hostile keys 200000
rc=0
(ulimit -v "$vlimit" && exec timeout 20 "$INSPECT" ls --naming megatron "$T/bad") >"$T/ls" 2>"$T/err" || rc=$?
[ $rc -eq 0 ] || fail "200,000 keys: exit $rc: $(cat "$T/err")"
grep -q "^extra.199999 " "$T/ls" || fail "200,000 keys: extra.199999 not listed"
echo "ok: 200,000 keys listed"

echo "== item 8: unstacking bounded"
rm -rf "$T/dist"; cp -r "$MG/tp1_pp2/torch_dist" "$T/dist"; chmod -R u+w "$T/dist"
timeout 60 "$PYTHON3" "$HOSTILE" unstack "$MG/tp1_pp2/torch_dist/.metadata" "$T/dist/.metadata" 10000000 ||
	fail "hostile .metadata"
refused "decoder.layers.hostile.weight: 10000000 layers x 1 experts: more than 1000000 tensors unstacked" "$T/dist"
timeout 60 "$PYTHON3" "$HOSTILE" unstack "$MG/tp1_pp2/torch_dist/.metadata" "$T/dist/.metadata" 1000000 1000000 ||
	fail "hostile .metadata"
refused "1000000 layers x 1000000 experts: more than 1000000 tensors unstacked" "$T/dist"

echo "== item 9: a 2 MB string in args"
hostile args tokenizer_type=bigstr:2000000
refused "args.tokenizer_type: a string of 2000000 bytes" "$T/bad"

echo "== item 10: non-finite args"
for e in norm_epsilon=inf norm_epsilon=nan rotary_base=inf; do
	hostile args "$e"
	refused "norm epsilon or rotary base is not a finite positive number" "$T/bad"
done

echo "== item 11: flags that are not bools"
for e in "rotary_interleaved='True'" "qk_layernorm=[1]" "add_bias_linear=1.0" \
	"untie_embeddings_and_output_weights='no'"; do
	hostile args "$e"
	refused "args.${e%%=*} is not a bool" "$T/bad"
done

echo "== item 12: 0x01 in a key, NUL in the tracker file"
hostile key "$(printf 'decoder.a\001b')"
refused "model key decoder.a%01b holds byte 0x01: refused" "$T/bad" --naming megatron
fresh
printf '3\000../../etc' >"$T/bad/latest_checkpointed_iteration.txt"
refused "latest_checkpointed_iteration.txt: holds a NUL byte" "$T/bad"
echo "ok: all hostile inputs refused in time"
