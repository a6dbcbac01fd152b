#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Every output is checked: ls, ls --json, layout, cat, verify, --help and
# export writing to /dev/full, to a full tmpfs and to a tmpfs with one page
# free (output cut in the middle) fail with one line naming what could not
# be written and exit status 1; export leaves no file behind.
. "${top_srcdir:-.}/tests/lib.sh"
mktempdir
T=$TESTTMP
C="$CKPTS/z3_ws3_bf16/checkpoint"
[ -d "$C" ] || skip "fixture $C missing"
[ -w /dev/full ] || skip "no /dev/full"

# expect_fail WHAT PATTERN CMD...: CMD exits 1 with one stderr line matching PATTERN.
expect_fail() {
	what=$1 pat=$2
	shift 2
	"$@" 2>"$T/all"
	rc=$?
	# ls and verify say what they read first: not an error line.
	grep -v "^gatherfs-inspect: $C: DeepSpeed ZeRO-3, 3 ranks, tag global_step3\$" "$T/all" >"$T/err"
	[ $rc -eq 1 ] || fail "$what: exit status $rc, want 1 ($(cat "$T/err"))"
	[ "$(wc -l < "$T/err")" -eq 1 ] || fail "$what: want one error line, got: $(cat "$T/err")"
	grep -q "$pat" "$T/err" || fail "$what: error does not match '$pat': $(cat "$T/err")"
	echo "ok: $what: $(cat "$T/err")"
}

# to FILE CMD...: run CMD with standard output to FILE.
to() {
	f=$1
	shift
	"$@" >"$f"
}

STDOUT="writing to standard output: No space left on device"
for cmd in "ls" "ls --json" "layout" "verify"; do
	# shellcheck disable=SC2086
	expect_fail "$cmd > /dev/full" "$STDOUT" to /dev/full "$INSPECT" $cmd "$C"
done
expect_fail "cat > /dev/full" "$STDOUT" to /dev/full "$INSPECT" cat "$C" embed.weight
expect_fail "--help > /dev/full" "$STDOUT" to /dev/full "$INSPECT" --help
expect_fail "--version > /dev/full" "$STDOUT" to /dev/full "$INSPECT" --version

# A tiny tmpfs, full, then with one page free (the outputs are larger).
[ "$(id -u)" -eq 0 ] || skip "not root: cannot mount a tmpfs"
mkdir "$T/small"
mount -t tmpfs -o size=64k tmpfs "$T/small" || skip "cannot mount a tmpfs"
trap 'umount "$T/small"; rm -rf "$T"' EXIT
S=$T/small
dd if=/dev/zero of="$S/fill" bs=4096 2>/dev/null
for cmd in "ls" "ls --json" "layout" "verify"; do
	# shellcheck disable=SC2086
	expect_fail "$cmd > full tmpfs" "$STDOUT" to "$S/out" "$INSPECT" $cmd "$C"
done
expect_fail "cat > full tmpfs" "$STDOUT" to "$S/out" "$INSPECT" cat "$C" embed.weight
rm -f "$S/out"
expect_fail "export to a full tmpfs" "pytorch_model.bin.*No space left on device" \
	"$INSPECT" export "$C" "$S/pytorch_model.bin"
[ "$(ls -A "$S")" = fill ] || fail "export left files: $(ls -A "$S")"

truncate -s $((60 * 1024)) "$S/fill"
for cmd in "layout"; do
	# shellcheck disable=SC2086
	expect_fail "$cmd > tmpfs with 4 KiB free" "$STDOUT" to "$S/out" "$INSPECT" $cmd "$C"
done
expect_fail "cat > tmpfs with 4 KiB free" "$STDOUT" to "$S/out" "$INSPECT" cat "$C" embed.weight
rm -f "$S/out"
expect_fail "export (4 KiB free)" "model.safetensors.*No space left on device" \
	"$INSPECT" export "$C" "$S/model.safetensors"
expect_fail "sharded export (4 KiB free)" "No space left on device" \
	"$INSPECT" export --shard-size 100KB "$C" "$S/shards"
[ "$(ls -A "$S")" = fill ] || fail "export left files: $(ls -A "$S")"
# What fits is written: ls --json (under 4 KiB) beside the filler, layout alone.
"$INSPECT" ls --json "$C" >"$S/out" || fail "ls --json to a tmpfs with 4 KiB free"
rm -f "$S/fill" "$S/out"
"$INSPECT" layout "$C" >"$S/out" || fail "layout to an empty tmpfs"
"$INSPECT" layout "$C" | cmp -s - "$S/out" || fail "layout on the tmpfs differs"
echo "PASS: write errors"
