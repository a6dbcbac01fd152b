#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# gatherfs --help and gatherfs-inspect --help open with the list of formats
# README.md's table ("What it reads") gives, row for row: each --help's
# "Formats" list, one per line, is the table's first column (backticks
# dropped), no more and no less, in the same order.
. "${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
GATHERFS=$top_builddir/gatherfs
T=$(mktemp -d "${TMPDIR:-/tmp}/gatherfs-help.XXXXXX") || fail "mktemp"
trap 'rm -rf "$T"' EXIT

# the first cell of every row of the table under "## What it reads"
awk '/^## / { f = ($0 == "## What it reads") } f && /^\| / { print }' "$top_srcdir/README.md" |
	grep -v '^| *Format *|' | cut -d'|' -f2 | tr -d '`' | sed 's/^ *//; s/ *$//' >"$T/readme"
[ "$(wc -l <"$T/readme")" -ge 8 ] ||
	fail "README.md: found only $(wc -l <"$T/readme") rows in the table of What it reads"

# formats HELPFILE: the lines after "Formats" up to the first not indented,
# one a format (a line indented by four spaces goes on the one before)
formats() {
	awk '/^Formats/ { f = 1; next } f && !/^  / { exit }
	     f && /^    / { sub(/^ */, ""); line = line " " $0; next }
	     f { if (line != "") print line; line = $0; sub(/^ */, "", line) }
	     END { if (line != "") print line }' "$1"
}
"$GATHERFS" --help >"$T/help" 2>&1 || fail "gatherfs --help: exit $?"
"$INSPECT" --help >"$T/ihelp" || fail "gatherfs-inspect --help: exit $?"
for h in help ihelp; do
	prog=gatherfs
	[ $h = ihelp ] && prog=gatherfs-inspect
	formats "$T/$h" >"$T/$h.formats"
	diff -u "$T/readme" "$T/$h.formats" >"$T/diff" ||
		fail "$prog --help's Formats list and README.md's table differ: $(cat "$T/diff")"
	echo "ok: $prog --help lists the README's $(wc -l <"$T/readme") formats"
done
