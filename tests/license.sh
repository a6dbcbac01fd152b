#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The project is Apache-2.0: LICENSE holds the licence text and every source
# file (C, headers, shell, Python, man pages, build files) carries an SPDX
# line in its first three lines.  Test data and fuzz corpora are not source.
. "${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"

grep -q "Apache License" "$top_srcdir/LICENSE" && grep -q "Version 2.0, January 2004" "$top_srcdir/LICENSE" ||
	fail "LICENSE does not hold the Apache License 2.0"
# debian/ is packaging, not part of the source tarball (make dist): checked
# where it is, in a git tree
if [ -d "$top_srcdir/debian" ]; then
	grep -q "^License: Apache-2.0$" "$top_srcdir/debian/copyright" ||
		fail "debian/copyright does not name Apache-2.0"
fi

missing=0
checked=0
for f in $(cd "$top_srcdir" && find src include tests fuzz bench python scripts man \
	\( -path tests/data -o -path fuzz/corpus \) -prune -o -type f \
	\( -name '*.c' -o -name '*.h' -o -name '*.sh' -o -name '*.py' -o -name '*.[15]' \) -print) \
	Makefile.am configure.ac autogen.sh; do
	checked=$((checked + 1))
	if ! head -3 "$top_srcdir/$f" | grep -q "SPDX-License-Identifier: Apache-2.0"; then
		echo "no SPDX line: $f"
		missing=$((missing + 1))
	fi
done
[ "$checked" -gt 100 ] || fail "only $checked source files found under $top_srcdir"
[ "$missing" -eq 0 ] || fail "$missing of $checked source files have no SPDX line"
echo "ok: LICENSE$([ -d "$top_srcdir/debian" ] && echo ", debian/copyright") and $checked source files"
