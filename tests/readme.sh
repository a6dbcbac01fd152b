#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# README.md stays a first screen for a user: under 300 lines, the install
# command (one line: apt-get install ... ./autogen.sh && ./configure && make)
# within its first 12 lines and `make check` within its first 16, every
# row of its "What it reads" table linked to a doc, and every docs/ file
# it links present (here and so in the tarball and the package).
. "${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
readme=$top_srcdir/README.md
[ -f "$readme" ] || fail "$readme: missing"
n=$(wc -l <"$readme")
[ "$n" -lt 300 ] || fail "README.md has $n lines (fewer than 300, please: details go to docs/)"
head -12 "$readme" | grep -q '^    S=.*apt-get install .*&& \./autogen\.sh && \./configure && make' ||
	fail "README.md: no one-line install command (apt-get install ... ./autogen.sh && ./configure && make) in its first 12 lines"
head -16 "$readme" | grep -qx '    make check' || fail "README.md: no '    make check' line in its first 16 lines"
rows=$(awk '/^## What it reads/ { f = 1; next } /^## / { f = 0 } f && /^\| / && !/^\| Format/ && !/^\|---/' "$readme")
[ -n "$rows" ] || fail "README.md: no table under '## What it reads'"
nolink=$(printf '%s\n' "$rows" | grep -v '](docs/[A-Za-z0-9_.-]*\.md)' || :)
[ -z "$nolink" ] || fail "README.md: a format without a link to its doc: $nolink"
bad=0
for d in $(grep -o '](docs/[^)]*)' "$readme" | sed 's/^](//; s/)$//' | sort -u); do
	[ -f "$top_srcdir/$d" ] || { echo "FAIL: README.md links $d, which does not exist" >&2; bad=1; }
done
[ $bad -eq 0 ] || exit 1
echo "ok: README.md: $n lines, install command and make check on the first screen, $(printf '%s\n' "$rows" | wc -l) formats each linked to its doc"
