# SPDX-License-Identifier: Apache-2.0
# Shared helpers for the shell tests.  Sourced; expects top_srcdir and
# top_builddir from the test environment (make check sets them).
: "${top_srcdir:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
: "${PYTHON3:=/usr/bin/python3}"
INSPECT="$top_builddir/gatherfs-inspect"
CKPTS="$top_srcdir/tests/data/ckpt"
export top_srcdir top_builddir PYTHON3 INSPECT CKPTS

# skip MESSAGE: exit with the automake "skipped" status.
skip() {
	echo "SKIP: $*"
	exit 77
}

# skip_part SECTION MESSAGE: say that a section of the test did not run
# (SECTION one word); the test goes on.  .ci/run counts each such line as a
# skip, a failure unless .ci/skips allows it.
skip_part() {
	local section=$1
	shift
	echo "SKIP-PART: $section $*"
}

# fail MESSAGE: report and exit with failure.
fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# mktempdir: a scratch directory removed at exit.
mktempdir() {
	TESTTMP=$(mktemp -d "${TMPDIR:-/tmp}/gatherfs-test.XXXXXX")
	trap 'rm -rf "$TESTTMP"' EXIT
}
