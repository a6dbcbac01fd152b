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

# bench_ckpt [CKPT]: C, the checkpoint CKPT, or (none given) the ZeRO-3
# checkpoint of the integrity benchmarks (2 ranks, 8 layers, hidden 1024:
# 1.8 GB of shards), written once by gen_deepspeed.py under
# /var/tmp/gatherfs-bench/integrity.  Needs $here, the bench directory.
bench_ckpt() {
	C=${1:-/var/tmp/gatherfs-bench/integrity}
	if [ -z "${1:-}" ] && [ ! -e "$C/.gen-done" ]; then
		/usr/bin/python3 "$here/gen_deepspeed.py" "$C" --stage 3 --ws 2 --layers 8 \
			--hidden 1024 >/dev/null
	fi
}
