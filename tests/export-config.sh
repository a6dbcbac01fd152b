#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# `gatherfs-inspect export --shard-size S DIR OUT/` writes a model directory
# a loader takes: the shards, their index and the config.json (and
# generation_config.json) the mount serves, generated (Megatron's Hugging
# Face view) or passed through (a DeepSpeed save's own, verl's
# huggingface/config.json), byte for byte what `cat DIR config.json`
# prints.  A config.json in OUT that is not a regular file is refused as a
# shard would be (exit 1, one line, nothing written).  In the Debian sid
# compat root (torch 2.x, transformers 5.x; skipped, 77, without it)
# from_pretrained(OUT) of a Megatron (TP 2 x PP 2 legacy), a verl (FSDP2,
# world size 2) and a DeepSpeed (ZeRO-2) export gives the run's logits.
. "${top_srcdir:-.}/tests/lib.sh"
mktempdir
T=$TESTTMP
D="$top_srcdir/tests/data"
MEG=$D/megatron/tp2_pp2/legacy_torch VERL=$D/fsdp_rank/fsdp2_ws2 DS=$D/ckpt/z2_ws2_bf16/checkpoint
for c in "$MEG" "$VERL" "$DS"; do
	[ -d "$c" ] || skip "fixture $c missing"
done

# export_dir NAME SRC: export SRC into $T/NAME; config.json is there and is
# what `cat SRC config.json` prints.
export_dir() {
	"$INSPECT" export --shard-size 100KB "$2" "$T/$1" 2>"$T/err" || fail "export $2: $(cat "$T/err")"
	[ -f "$T/$1/config.json" ] || fail "export $2: no config.json in $(ls "$T/$1")"
	"$INSPECT" cat "$2" config.json >"$T/$1.cat" 2>"$T/err" || fail "cat $2 config.json: $(cat "$T/err")"
	cmp -s "$T/$1.cat" "$T/$1/config.json" || fail "export $2: config.json differs from cat's"
	[ ! -e "$T/$1/generation_config.json" ] ||
		"$INSPECT" cat "$2" generation_config.json 2>/dev/null |
		cmp -s - "$T/$1/generation_config.json" || fail "export $2: generation_config.json differs"
	echo "ok: export $1: $(ls "$T/$1" | grep -v -- '-of-' | tr '\n' ' ')"
}
export_dir meg "$MEG"
export_dir verl "$VERL"
export_dir ds "$DS"
grep -q '"LlamaForCausalLM"' "$T/meg/config.json" || fail "Megatron: not the generated config.json"
cmp -s "$VERL/global_step_2/actor/huggingface/config.json" "$T/verl/config.json" ||
	fail "verl: config.json is not huggingface/config.json passed through"
cmp -s "$DS/config.json" "$T/ds/config.json" || fail "DeepSpeed: config.json not passed through"
cmp -s "$DS/generation_config.json" "$T/ds/generation_config.json" ||
	fail "DeepSpeed: generation_config.json not passed through"

# a config.json in OUT that is a FIFO: refused before anything is written
mkdir "$T/fifo"
mkfifo "$T/fifo/config.json"
"$INSPECT" export --shard-size 100KB "$DS" "$T/fifo" 2>"$T/err"
rc=$?
[ $rc -eq 1 ] || fail "config.json a FIFO: exit status $rc, want 1"
[ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "fifo/config.json: is a FIFO" "$T/err" ||
	fail "config.json a FIFO: $(cat "$T/err")"
[ "$(ls -A "$T/fifo")" = config.json ] || fail "config.json a FIFO: written: $(ls -A "$T/fifo")"
echo "ok: config.json a FIFO: $(cat "$T/err")"

COMPAT_ROOT=${GATHERFS_COMPAT_ROOT:-/var/cache/gatherfs/compat-root}
[ "$(id -u)" = 0 ] || skip "the compat root needs root (chroot, mount namespaces)"
[ -x "$COMPAT_ROOT/usr/bin/python3" ] ||
	skip "no compat root at $COMPAT_ROOT: build it with tests/compat/make-compat-root.sh"
printf '%s\t%s\n' "$T/meg" "$D/megatron/tp2_pp2" "$T/verl" "$VERL" "$T/ds" "$D/ckpt/z2_ws2_bf16" \
	>"$T/list"
COMPAT_BINDS="$top_srcdir $T" timeout 600 "$top_srcdir/tests/compat/compat-run.sh" \
	"$COMPAT_ROOT" python3 "$top_srcdir/tests/compat/check_hf_logits.py" --batch "$T/list" \
	>"$T/out" 2>"$T/err" || fail "$(tail -3 "$T/err") $(cat "$T/out")"
[ "$(grep -c '"ok": true' "$T/out")" -eq 3 ] || fail "not 3 passing checks: $(cat "$T/out")"
cat "$T/out"
echo "export-config: OK"
