#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# docs/HACKING.md is the map of the source: its file list names every *.c
# and *.h under src/, each on one line of the form
#     - `src/FOLDER/FILE.c`: what it holds
# This fails, naming them, when a source file is not in that list (added
# without updating the map), when the list or any other line of HACKING.md
# names a src/ file that does not exist (removed or renamed), when a file
# is listed twice, or when a list line says nothing about its file.
. "${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
doc=$top_srcdir/docs/HACKING.md
[ -f "$doc" ] || fail "$doc: missing"
T=$(mktemp -d "${TMPDIR:-/tmp}/gatherfs-hacking.XXXXXX") || fail "mktemp"
trap 'rm -rf "$T"' EXIT

(cd "$top_srcdir" && find src -type f \( -name '*.c' -o -name '*.h' \)) | LC_ALL=C sort >"$T/tree"
[ "$(wc -l <"$T/tree")" -gt 20 ] || fail "only $(wc -l <"$T/tree") source files under $top_srcdir/src"
sed -n 's/^- `\(src\/[^`]*\.[ch]\)`.*/\1/p' "$doc" | LC_ALL=C sort >"$T/listed"
# Every src/*.c or *.h path on any line: the list, the walks, the how-tos.
grep -oE '(^|[^A-Za-z0-9_./-])src/[A-Za-z0-9_./-]+\.[ch]([^A-Za-z0-9_]|$)' "$doc" |
	sed -E 's/^[^s]?(src\/[A-Za-z0-9_./-]+\.[ch]).*/\1/' | LC_ALL=C sort -u >"$T/named"

bad=0
dup=$(uniq -d "$T/listed")
[ -z "$dup" ] || { echo "FAIL: listed more than once in docs/HACKING.md:" $dup >&2; bad=1; }
unlisted=$(LC_ALL=C comm -23 "$T/tree" "$T/listed")
[ -z "$unlisted" ] || {
	echo "FAIL: not in the file list of docs/HACKING.md (add a line '- \`PATH\`: what it holds'):" >&2
	printf '  %s\n' $unlisted >&2
	bad=1
}
gone=$(LC_ALL=C comm -13 "$T/tree" "$T/named")
[ -z "$gone" ] || {
	echo "FAIL: named in docs/HACKING.md, not in src/:" >&2
	printf '  %s\n' $gone >&2
	bad=1
}
empty=$(grep -E '^- `src/[^`]*\.[ch]`:?[[:space:]]*$' "$doc" || :)
[ -z "$empty" ] || { echo "FAIL: a list line of docs/HACKING.md says nothing: $empty" >&2; bad=1; }
[ $bad -eq 0 ] || exit 1
echo "ok: docs/HACKING.md names all $(wc -l <"$T/tree") source files under src/, and no other"
