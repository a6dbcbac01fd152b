# SPDX-License-Identifier: Apache-2.0
# bench/lib.sh: sourced by the bench scripts (POSIX sh).
#
# bench_workdir: W, a new temporary directory with the mount point W/m;
# on exit the mount there is undone (if any), the daemon $pid waited for
# (if the script set one) and W removed.
bench_workdir() {
	W=$(mktemp -d "${TMPDIR:-/tmp}/gatherfs-bench.XXXXXX")
	trap bench_cleanup EXIT
	mkdir "$W/m"
}

bench_cleanup() {
	timeout 10 fusermount3 -u "$W/m" 2>/dev/null || true
	[ -z "${pid:-}" ] || wait "$pid" 2>/dev/null || true
	rm -rf "$W"
}
