#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The manual pages match --help: every option gatherfs --help lists before
# libfuse's own is documented in OPTIONS of gatherfs(1), every -o option that
# OPTIONS documents is one gatherfs --help lists (its own or libfuse's), and
# gatherfs-inspect --help and gatherfs-inspect(1) name the same long options.
. "${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
GATHERFS=$top_builddir/gatherfs
INSPECT=$top_builddir/gatherfs-inspect
T=$(mktemp -d "${TMPDIR:-/tmp}/gatherfs-man.XXXXXX") || fail "mktemp"
trap 'rm -rf "$T"' EXIT

"$GATHERFS" --help >"$T/help" 2>&1 || fail "gatherfs --help: exit $?"
grep -q "^FUSE options:" "$T/help" || fail "gatherfs --help has no FUSE options part"
sed '/^FUSE options:/q' "$T/help" | grep -o -- '-o [a-z_]*' | sort -u >"$T/own"
grep -o -- '-o [a-z_]*' "$T/help" | sort -u >"$T/all"
awk '/^\.SH OPTIONS/ { f = 1; next } /^\.SH/ { f = 0 } f' "$top_srcdir/man/gatherfs.1" |
	grep -o -- '\\-o [a-z_]*' | sed 's/\\//' | sort -u >"$T/man"
[ "$(wc -l <"$T/own")" -gt 10 ] || fail "gatherfs --help lists only $(wc -l <"$T/own") options"
missing=$(comm -23 "$T/own" "$T/man")
[ -z "$missing" ] || fail "in gatherfs --help, not in OPTIONS of gatherfs(1):" $missing
extra=$(comm -13 "$T/all" "$T/man")
[ -z "$extra" ] || fail "in OPTIONS of gatherfs(1), not in gatherfs --help:" $extra
echo "ok: gatherfs: $(wc -l <"$T/own") options in --help and gatherfs(1)"

"$INSPECT" --help >"$T/ihelp" || fail "gatherfs-inspect --help: exit $?"
grep -o -- '--[a-z][a-z-]*' "$T/ihelp" | sort -u >"$T/iown"
grep -o -- '\\-\\-[a-z][a-z\\-]*' "$top_srcdir/man/gatherfs-inspect.1" | sed 's/\\//g' | sort -u >"$T/iman"
[ "$(wc -l <"$T/iown")" -gt 10 ] || fail "gatherfs-inspect --help lists only $(wc -l <"$T/iown") options"
diff=$(comm -3 "$T/iown" "$T/iman" | tr -d '\t')
[ -z "$diff" ] || fail "gatherfs-inspect --help and gatherfs-inspect(1) differ in:" $diff
echo "ok: gatherfs-inspect: $(wc -l <"$T/iown") options in --help and gatherfs-inspect(1)"
