# SPDX-License-Identifier: Apache-2.0
# Helpers for the FUSE mount tests.  Sourced after tests/lib.sh.
#
#   mount_setup              skip (77) without /dev/fuse or fusermount3; make a
#                            scratch dir $T (XDG_CACHE_HOME is $T/xdg-cache);
#                            unmount everything and remove $T at exit
#   gfs_mount SRC MNT [ARG...]   run the daemon (it backgrounds itself) and
#                            wait for the mount
#   gfs_mount_fg SRC MNT [ARG...]  run it in the foreground as a child; its
#                            pid is in $GFS_PID (SIGINT reaches it if
#                            $GFS_SIGINT_OK)
#   gfs_umount MNT           fusermount3 -u and wait until it is gone
#   is_mounted MNT           true if MNT is a gatherfs mount
#   wait_unmounted MNT       wait (10 s at most) until MNT is not mounted
#   wait_child PID SECONDS   wait for a child to exit; its status in $CHILD_RC
#   check_cat MNT TSV        every tensors/ file against an expected table
#   check_views MNT TSV CKPT every view of a mount against an expected table
#   expect_mount_fail PATTERN ARG...  gatherfs ARG... fails with one line
#                            matching PATTERN and leaves no mount
#
# GATHERFS_WRAPPER (e.g. "valgrind --error-exitcode=99 ..."): when set, the
# daemon command is prefixed by it and gfs_mount runs it in the foreground
# (-f) as a child; gfs_umount then waits for that child (GFS_WRAP_WAIT
# seconds at most, default 120) and fails unless it exited with status 0.
# Waits for a mount are 10 s, or 120 s under a wrapper.
GATHERFS="$top_builddir/gatherfs"
MOUNT_TOOLS="$top_srcdir/tests/mount"
export GATHERFS MOUNT_TOOLS
GFS_MOUNTS=""
# Background jobs of a non-interactive shell ignore SIGINT, and libfuse keeps
# an ignored signal ignored: restore the default so the daemon handles it.
if env --default-signal=INT true 2>/dev/null; then
	GFS_SIGINT_OK=true
	GFS_ENV="env --default-signal=INT"
else
	GFS_SIGINT_OK=false
	GFS_ENV=env
fi

mount_cleanup() {
	for m in $GFS_MOUNTS; do
		if is_mounted "$m"; then
			fusermount3 -u -z "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
		fi
	done
	[ -n "${T:-}" ] && rm -rf "$T"
}

mount_setup() {
	[ -c /dev/fuse ] || skip "/dev/fuse is missing"
	command -v fusermount3 >/dev/null 2>&1 || skip "fusermount3 is missing"
	[ -x "$GATHERFS" ] || fail "$GATHERFS not built"
	[ -x "$PYTHON3" ] || skip "python3 not found"
	T=$(mktemp -d "${TMPDIR:-/tmp}/gatherfs-mount.XXXXXX")
	# The default CRC cache (-o crc_cache) goes to $XDG_CACHE_HOME/gatherfs:
	# keep it in $T, never in the user's ~/.cache.
	XDG_CACHE_HOME=$T/xdg-cache
	export XDG_CACHE_HOME
	trap mount_cleanup EXIT
	trap 'exit 1' INT TERM
}

is_mounted() {
	awk -v m="$1" '$2 == m && $3 ~ /^fuse/ { found = 1 } END { exit !found }' /proc/mounts
}

GFS_WRAPPED="" # "PID:MNT ..." of the daemons run under $GATHERFS_WRAPPER
GFS_WAIT_TICKS=100
[ -n "${GATHERFS_WRAPPER:-}" ] && GFS_WAIT_TICKS=1200

# wait_for CONDITION...: poll every 0.1 s, 10 s at most (120 s under a wrapper).
wait_for() {
	i=0
	while ! "$@"; do
		i=$((i + 1))
		[ $i -lt $GFS_WAIT_TICKS ] || return 1
		sleep 0.1
	done
}

# our_mounts: how many mounts lie under this test's scratch dir $T (other
# tests mount in parallel, so the whole table is no measure).
our_mounts() {
	awk -v t="$T/" 'index($2, t) == 1' /proc/mounts | wc -l
}

not_mounted() {
	! is_mounted "$1"
}

wait_unmounted() {
	wait_for not_mounted "$1"
}

gfs_mount() {
	src=$1 mnt=$2
	shift 2
	mkdir -p "$mnt"
	if [ -n "${GATHERFS_WRAPPER:-}" ]; then
		# shellcheck disable=SC2086
		$GATHERFS_WRAPPER "$GATHERFS" "$src" "$mnt" -f "$@" &
		GFS_WRAPPED="$GFS_WRAPPED $!:$mnt"
		GFS_MOUNTS="$GFS_MOUNTS $mnt"
		wait_for mounted_or_gone $! "$mnt" && is_mounted "$mnt"
		return
	fi
	"$GATHERFS" "$src" "$mnt" "$@" || return 1
	GFS_MOUNTS="$GFS_MOUNTS $mnt"
	wait_for is_mounted "$mnt"
}

# mounted_or_gone PID MNT: MNT is mounted, or process PID has exited.
mounted_or_gone() {
	is_mounted "$2" || ! kill -0 "$1" 2>/dev/null
}

# wait_child PID SECONDS: wait, SECONDS at most, for the child PID to exit:
# its exit status is then in $CHILD_RC, else CHILD_RC is "running".
wait_child() {
	CHILD_RC=running
	i=0
	while kill -0 "$1" 2>/dev/null; do
		i=$((i + 1))
		[ $i -lt $(($2 * 10)) ] || return 0
		sleep 0.1
	done
	CHILD_RC=0
	wait "$1" || CHILD_RC=$?
}

# wrapped_wait MNT: wait for the wrapped daemon of MNT (if any) to exit;
# fail unless it exited with status 0.
wrapped_wait() {
	rest=""
	for pm in $GFS_WRAPPED; do
		if [ "${pm#*:}" != "$1" ]; then
			rest="$rest $pm"
			continue
		fi
		wait_child "${pm%%:*}" "${GFS_WRAP_WAIT:-120}"
		case $CHILD_RC in
		0) ;;
		running) echo "wrapped daemon of $1 (pid ${pm%%:*}) did not exit" >&2; return 1 ;;
		*) echo "wrapped daemon of $1 exited with status $CHILD_RC" >&2; return 1 ;;
		esac
	done
	GFS_WRAPPED=$rest
	return 0
}

gfs_mount_fg() {
	src=$1 mnt=$2
	shift 2
	mkdir -p "$mnt"
	# shellcheck disable=SC2086
	$GFS_ENV ${GATHERFS_WRAPPER:-} "$GATHERFS" "$src" "$mnt" -f "$@" &
	GFS_PID=$!
	GFS_MOUNTS="$GFS_MOUNTS $mnt"
	wait_for is_mounted "$mnt"
}

gfs_umount() {
	fusermount3 -u "$1" && wait_unmounted "$1" && wrapped_wait "$1"
}

# want_sha TSV NAME: the sha256 an .expected-*.tsv table gives tensor NAME
# (as the table writes it); exit 1 when it has no row for NAME.
want_sha() {
	awk -F'\t' -v n="$2" '$1 == n { print $4; f = 1 } END { exit !f }' "$1"
}

# is_truth FILE TSV NAME: FILE's sha256 is the one TSV gives tensor NAME.
is_truth() {
	it_want=$(want_sha "$2" "$3") || fail "$2: no row for $3"
	[ "$(sha256sum <"$1" | cut -d' ' -f1)" = "$it_want" ]
}

# truth_bytes TSV CKPT NAME OUT: gatherfs-inspect cat of tensor NAME of the
# clean checkpoint CKPT into OUT, its sha256 the one TSV gives: the bytes a
# test compares parts of, taken from the truth table.
truth_bytes() {
	tb_want=$(want_sha "$1" "$3") || fail "$1: no row for $3"
	timeout 60 "$INSPECT" cat "$2" "$3" >"$4" || fail "gatherfs-inspect cat $3"
	[ "$(sha256sum <"$4" | cut -d' ' -f1)" = "$tb_want" ] || fail "$2: $3 is not $1's"
}

# check_cat MNT TSV: cat every tensors/ file of the mount at MNT through
# sha256sum against an .expected-*.tsv table (name, dtype, shape, sha256);
# names are escaped as tensors/ shows them (% and / as %25 and %2F). A
# missing or empty table, or a row without a sha256, fails.
check_cat() {
	[ -s "$2" ] || fail "check_cat: no table $2, or an empty one"
	n=0
	while IFS="$(printf '\t')" read -r name dtype shape sha; do
		[ -n "$sha" ] || fail "check_cat: $2: a row without a sha256: $name"
		file=$(printf '%s' "$name" | sed 's/%/%25/g; s|/|%2F|g')
		got=$(cat "$1/tensors/$file" | sha256sum | cut -d' ' -f1)
		[ "$got" = "$sha" ] || fail "cat tensors/$file: sha256 $got, want $sha"
		n=$((n + 1))
	done < "$2"
	[ $n -gt 0 ] || fail "check_cat: no tensor in $2"
	echo "  cat | sha256sum: $n tensors OK"
}

# check_views MNT TSV CKPT: the mount at MNT of checkpoint dir CKPT against an
# .expected-*.tsv table: pytorch_model.bin through torch.load and zipfile,
# tensors/ metadata, layout.json and the passed-through files
# (check_mount.py), `unzip -t` when installed, every tensors/ file's bytes,
# and model.safetensors (check_safetensors.py).
check_views() {
	timeout 300 "$PYTHON3" "$MOUNT_TOOLS/check_mount.py" "$1" "$2" "$3" || fail "check_mount.py $1"
	if command -v unzip >/dev/null 2>&1; then
		unzip -tq "$1/pytorch_model.bin" || fail "unzip -t $1/pytorch_model.bin"
	fi
	check_cat "$1" "$2"
	"$PYTHON3" "$top_srcdir/tests/tools/check_safetensors.py" "$1/model.safetensors" "$2" ||
		fail "check_safetensors.py $1/model.safetensors"
}

# cat_fails_eio FILE: reading FILE fails with EIO (stderr kept in $T/cat.err).
cat_fails_eio() {
	if cat "$1" >/dev/null 2>"$T/cat.err"; then
		fail "$1: read without an error"
	fi
	grep -q "Input/output error" "$T/cat.err" || fail "$1: $(cat "$T/cat.err")"
}

# expect_mount_fail PATTERN ARG...: gatherfs ARG..., which names $T/mnt as the
# mountpoint, fails with one line on stderr matching PATTERN (grep) and leaves
# no mount: neither $T/mnt nor any other under $T.
expect_mount_fail() {
	pattern=$1
	shift
	before=$(our_mounts)
	emf_rc=0
	timeout 60 "$GATHERFS" "$@" >"$T/out" 2>"$T/err" || emf_rc=$?
	[ $emf_rc -ne 0 ] || fail "gatherfs $* succeeded"
	[ $emf_rc -lt 124 ] || fail "gatherfs $*: exit status $emf_rc (a crash or a hang): $(cat "$T/err")"
	[ "$(wc -l < "$T/err")" -eq 1 ] || fail "gatherfs $*: not one line: $(cat "$T/err")"
	grep -q -- "$pattern" "$T/err" || fail "gatherfs $*: '$(cat "$T/err")' lacks '$pattern'"
	is_mounted "$T/mnt" && fail "gatherfs $*: left a mount"
	[ "$(our_mounts)" -eq "$before" ] || fail "gatherfs $*: mount table changed"
	echo "ok: $(cat "$T/err")"
}

# expect_refused PATTERN DIR: the mount (expect_mount_fail) and gatherfs-inspect ls
# both refuse DIR with one line matching PATTERN
expect_refused() {
	expect_mount_fail "$1" "$2" "$T/mnt"
	emf_rc=0
	timeout 60 "$INSPECT" ls "$2" >/dev/null 2>"$T/ierr" || emf_rc=$?
	[ $emf_rc -ne 0 ] || fail "inspect ls $2 succeeded"
	[ $emf_rc -lt 124 ] || fail "inspect ls $2: exit status $emf_rc (a crash or a hang): $(cat "$T/ierr")"
	[ "$(wc -l <"$T/ierr")" -eq 1 ] && grep -q -- "$1" "$T/ierr" || fail "inspect: $(cat "$T/ierr")"
}
