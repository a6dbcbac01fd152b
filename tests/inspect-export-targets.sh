#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# `gatherfs-inspect export` writes only new names and regular files: OUT a
# FIFO, a character device (mknod, as root), a socket, a symbolic link (to
# a file or a directory) or an existing directory, a shard or the index of
# a --shard-size export that is one of those, and --shard-size OUT a
# regular file or a symbolic link to a directory are refused with one line
# naming it and what it is, exit status 1, before anything is created: the
# target keeps its type, inode and contents (or link target) and its
# directory lists as before.  A new name, an existing regular file and
# --shard-size into an existing directory still work; `-` writes standard
# output (a pipe; /dev/full is a write error, exit 1), the same bytes as the
# file.  /dev/full as OUT is refused, as the README says.  A FIFO or a
# symbolic link that takes OUT's name while the export runs is refused at
# the rename, not replaced.  Without a .bin/.safetensors suffix such a
# target is still refused as what it is (exit 1), before the suffix rule.
. "${top_srcdir:-.}/tests/lib.sh"
mktempdir
T=$TESTTMP
C="$CKPTS/z3_ws3_bf16/checkpoint"
[ -d "$C" ] || skip "fixture $C missing"
D=$T/out
mkdir "$D"

# state PATH: type, inode and, for a regular file or a symbolic link, the
# contents or link target; for a directory, its listing with inodes.
state() {
	stat -c '%F %i' "$1"
	if [ -L "$1" ]; then
		readlink "$1"
	elif [ -f "$1" ]; then
		cksum <"$1"
	elif [ -d "$1" ]; then
		ls -Ali "$1"
	fi
}

# refused WHAT PATTERN TARGET ARGS...: `export ARGS` exits 1 with one
# stderr line naming TARGET and matching PATTERN; TARGET and $D are as
# before, and no temporary file was created.
refused() {
	what=$1 pat=$2 target=$3
	shift 3
	state "$target" >"$T/before"
	ls -Ali "$D" >"$T/dir-before"
	"$INSPECT" export "$@" 2>"$T/err"
	rc=$?
	[ $rc -eq 1 ] || fail "$what: exit status $rc, want 1 ($(cat "$T/err"))"
	[ "$(wc -l <"$T/err")" -eq 1 ] || fail "$what: want one error line, got: $(cat "$T/err")"
	grep -q "^gatherfs-inspect: $target: is $pat" "$T/err" ||
		fail "$what: error does not name $target as $pat: $(cat "$T/err")"
	state "$target" | cmp -s "$T/before" - || fail "$what: $target changed: $(state "$target")"
	ls -Ali "$D" | cmp -s "$T/dir-before" - || fail "$what: $D changed: $(ls -Ali "$D")"
	echo "ok: $what: $(cat "$T/err")"
}

# The files a plain export writes, to compare with.
"$INSPECT" export "$C" "$T/pytorch_model.bin" || fail "export to a new name"
"$INSPECT" export "$C" "$T/model.safetensors" || fail "export to a new name (safetensors)"

# A single-file OUT that is not a regular file.
mkfifo "$D/fifo.bin"
refused "FIFO" "a FIFO, not a regular file" "$D/fifo.bin" "$C" "$D/fifo.bin"
echo real >"$D/real.bin"
ln -s real.bin "$D/link.bin"
refused "symlink to a file" "a symbolic link, not a regular file" "$D/link.bin" "$C" "$D/link.bin"
state "$D/real.bin" | grep -q "^regular file" || fail "the symlink's target changed"
[ "$(cat "$D/real.bin")" = real ] || fail "the symlink's target was written"
ln -s /nonexistent/x.bin "$D/dangling.bin"
refused "dangling symlink" "a symbolic link, not a regular file" "$D/dangling.bin" \
	"$C" "$D/dangling.bin"
mkdir "$D/dir.bin"
refused "directory" "a directory, not a regular file" "$D/dir.bin" "$C" "$D/dir.bin"
refused "directory (--format)" "a directory, not a regular file" "$D/dir.bin" \
	--format safetensors "$C" "$D/dir.bin"
if [ -x "$PYTHON3" ]; then
	"$PYTHON3" -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' \
		"$D/sock.bin" || fail "cannot make a socket"
	refused "socket" "a socket, not a regular file" "$D/sock.bin" "$C" "$D/sock.bin"
fi
if [ "$(id -u)" -eq 0 ] && mknod "$D/null.bin" c 1 3 2>/dev/null; then
	refused "character device" "a character device, not a regular file" "$D/null.bin" \
		"$C" "$D/null.bin"
	mknod "$D/full" c 1 7 || fail "mknod full"
	refused "character device (--format)" "a character device, not a regular file" "$D/full" \
		--format bin "$C" "$D/full"
	rm "$D/null.bin" "$D/full"
else
	echo "SKIP (this case only): not root or no mknod: no character device made with mknod"
fi

# Without a .bin/.safetensors suffix (and no --format) the target is still
# checked first: one refusal naming what it is, exit 1, not "name it .bin".
mkfifo "$D/fifo"
refused "FIFO, no suffix" "a FIFO, not a regular file" "$D/fifo" "$C" "$D/fifo"
ln -s real.bin "$D/link"
refused "symlink, no suffix" "a symbolic link, not a regular file" "$D/link" "$C" "$D/link"
mkdir "$D/dir"
refused "directory, no suffix" "a directory, not a regular file" "$D/dir" "$C" "$D/dir"
rm "$D/fifo" "$D/link"
rmdir "$D/dir"
if [ -c /dev/null ]; then
	refused "/dev/null, no suffix" "a character device, not a regular file" /dev/null \
		"$C" /dev/null
fi
"$INSPECT" export "$C" "$D/newname" 2>"$T/err"
[ $? -eq 2 ] || fail "a new name without a suffix: want exit status 2 ($(cat "$T/err"))"
grep -q "name it .bin or .safetensors" "$T/err" || fail "a new name without a suffix: $(cat "$T/err")"
[ ! -e "$D/newname" ] || fail "a new name without a suffix was created"

# --shard-size: OUT a regular file, a symlink to a directory, a FIFO.
mkdir "$D/real"
ln -s real "$D/ldir"
refused "--shard-size to a symlink to a directory" "a symbolic link, not a directory" \
	"$D/ldir" --shard-size 100KB "$C" "$D/ldir"
refused "--shard-size to a symlink to a directory, with a slash" "a symbolic link, not a directory" \
	"$D/ldir/" --shard-size 100KB "$C" "$D/ldir/"
[ -z "$(ls -A "$D/real")" ] || fail "shards were written through the symlink: $(ls -A "$D/real")"
refused "--shard-size to a regular file" "a regular file, not a directory" "$D/real.bin" \
	--shard-size 100KB "$C" "$D/real.bin"
refused "--shard-size to a FIFO" "a FIFO, not a directory" "$D/fifo.bin" \
	--shard-size 100KB "$C" "$D/fifo.bin"

# --shard-size into an existing directory works; then a shard or the index
# that is not a regular file is refused, and the directory is left as it is.
S=$D/shards
mkdir "$S"
"$INSPECT" export --shard-size 100KB "$C" "$S" || fail "--shard-size into an existing directory"
[ -f "$S/model.safetensors.index.json" ] || fail "no index in $S: $(ls -A "$S")"
n=$(ls -A "$S" | wc -l)
[ "$n" -gt 2 ] || fail "want several shards in $S, got: $(ls -A "$S")"
"$INSPECT" export --shard-size 100KB "$C" "$S" || fail "--shard-size over a previous export"
set -- "$S"/*-of-*
shard=$(basename "$2")
rm "$S/$shard"
mkfifo "$S/$shard"
state "$S" >"$T/shards-before"
refused "a shard is a FIFO" "a FIFO, not a regular file" "$S/$shard" --shard-size 100KB "$C" "$S"
state "$S" | cmp -s "$T/shards-before" - || fail "$S changed"
rm "$S/$shard"
mv "$S/model.safetensors.index.json" "$D/index.json"
ln -s ../index.json "$S/model.safetensors.index.json"
refused "the index is a symlink" "a symbolic link, not a regular file" \
	"$S/model.safetensors.index.json" --shard-size 100KB "$C" "$S"
rm "$S/model.safetensors.index.json"
mkdir "$S/model.safetensors.index.json"
refused "the index is a directory" "a directory, not a regular file" \
	"$S/model.safetensors.index.json" --shard-size 100KB "$C" "$S"
rmdir "$S/model.safetensors.index.json"
"$INSPECT" export --shard-size 100KB "$C" "$S" || fail "--shard-size once the names are free"
[ "$(ls -A "$S" | wc -l)" -eq "$n" ] || fail "want $n files in $S, got: $(ls -A "$S")"

# A new name and an existing regular file (replaced: a new inode, the new bytes).
rc=0
"$INSPECT" export "$C" "$D/new/pytorch_model.bin" 2>"$T/err" || rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <"$T/err")" -eq 1 ] &&
	grep -qx "gatherfs-inspect: $D/new/pytorch_model.bin: cannot create a temporary file: No such file or directory" "$T/err" ||
	fail "export into a missing directory: exit status $rc: $(cat "$T/err")"
echo old >"$D/pytorch_model.bin"
"$INSPECT" export "$C" "$D/pytorch_model.bin" || fail "export over a regular file"
cmp -s "$T/pytorch_model.bin" "$D/pytorch_model.bin" || fail "export over a regular file: wrong bytes"
echo "ok: new name and existing regular file"

# `-`: standard output, through a pipe, the same bytes as the file.
"$INSPECT" export --format bin "$C" - | cmp -s "$T/pytorch_model.bin" - ||
	fail "export - (bin) through a pipe differs from the file"
"$INSPECT" export --format safetensors "$C" - | cat >"$T/st" || fail "export - (safetensors)"
cmp -s "$T/model.safetensors" "$T/st" || fail "export - (safetensors) differs from the file"
echo "ok: - through a pipe"
"$INSPECT" export "$C" - 2>"$T/err" >/dev/null
[ $? -eq 2 ] || fail "export - without --format: want exit status 2"
"$INSPECT" export --shard-size 1G "$C" - 2>"$T/err" >/dev/null
[ $? -eq 2 ] || fail "export --shard-size to -: want exit status 2"

# /dev/full: as OUT it is refused (never replaced, even as root); through
# `-` it is a write error.  Both exit 1 with one line.
if [ -c /dev/full ]; then
	refused "/dev/full" "a character device, not a regular file" /dev/full \
		--format bin "$C" /dev/full
	"$INSPECT" export --format bin "$C" - >/dev/full 2>"$T/err"
	rc=$?
	[ $rc -eq 1 ] || fail "export - > /dev/full: exit status $rc, want 1"
	[ "$(wc -l <"$T/err")" -eq 1 ] || fail "export - > /dev/full: want one line: $(cat "$T/err")"
	grep -q "standard output.*No space left on device" "$T/err" ||
		fail "export - > /dev/full: $(cat "$T/err")"
	echo "ok: - > /dev/full: $(cat "$T/err")"
fi

# Races: OUT checked at the start, then, while the export is stopped
# (SIGSTOP) in the middle of writing its temporary file, a FIFO appears at
# the name that was missing, or a regular OUT becomes a symbolic link.  The
# rename then refuses it: exit 1, one line, the new target unchanged, no
# temporary file left.  The layout: four 64 MiB tensors over a sparse file,
# long enough to be stopped at 16 MiB.
[ -x "$PYTHON3" ] || skip "python3 not found (the race cases)"
R=$T/race
mkdir "$R"
truncate -s 256M "$R/src.bin"
"$PYTHON3" - "$R/l.json" <<'PY' || fail "layout"
import json, sys
sz = 64 << 20
t = [{"name": "layer%d.weight" % i, "dtype": "float32", "shape": [sz // 4096, 1024],
      "pieces": [{"source": 0, "offset": i * sz, "length": sz}]} for i in range(4)]
json.dump({"gatherfs_layout": 1, "sources": [{"path": "src.bin", "size": 4 * sz}],
           "tensors": t}, open(sys.argv[1], "w"))
PY
# swap OUT SHELL-CMD: export to OUT, stop it once its temporary file holds
# 16 MiB, run SHELL-CMD, continue it; print its exit status.
swap() {
	"$PYTHON3" - "$INSPECT" "$R/l.json" "$1" "$2" <<'PY'
import glob, os, signal, subprocess, sys, time
inspect, layout, out, cmd = sys.argv[1:]
tmp = os.path.join(os.path.dirname(out), "." + os.path.basename(out) + ".*")
p = subprocess.Popen([inspect, "export", "--layout", layout, out], stderr=subprocess.PIPE)
while not any(os.path.getsize(f) >= 16 << 20 for f in glob.glob(tmp) if os.path.exists(f)):
    if p.poll() is not None:
        sys.exit("export ended before it could be stopped")
    time.sleep(0.0005)
p.send_signal(signal.SIGSTOP)
subprocess.run(["sh", "-c", cmd], check=True)
p.send_signal(signal.SIGCONT)
err = p.stderr.read().decode()
sys.stderr.write(err)
print(p.wait(), len(err.splitlines()))
PY
}
rc=$(swap "$R/out.bin" "mkfifo '$R/out.bin'" 2>"$T/err") || fail "race (FIFO): $(cat "$T/err")"
[ "$rc" = "1 1" ] || fail "race: a FIFO appeared: exit status and lines $rc, want 1 1: $(cat "$T/err")"
grep -q "out.bin: is a FIFO, not a regular file" "$T/err" || fail "race (FIFO): $(cat "$T/err")"
[ -p "$R/out.bin" ] || fail "race: the FIFO that appeared was replaced"
echo "ok: race, a FIFO appears: $(cat "$T/err")"
echo old >"$R/real.bin"
echo regular >"$R/link.bin"
rc=$(swap "$R/link.bin" "rm '$R/link.bin'; ln -s real.bin '$R/link.bin'" 2>"$T/err") ||
	fail "race (symlink): $(cat "$T/err")"
[ "$rc" = "1 1" ] || fail "race: OUT became a symlink: exit status and lines $rc, want 1 1: $(cat "$T/err")"
grep -q "link.bin: is a symbolic link, not a regular file" "$T/err" || fail "race (symlink): $(cat "$T/err")"
[ "$(readlink "$R/link.bin")" = real.bin ] || fail "race: the symlink was replaced"
[ "$(cat "$R/real.bin")" = old ] || fail "race: the symlink's target was written"
echo "ok: race, OUT becomes a symlink: $(cat "$T/err")"
set -- "$R"/.[!.]*
[ ! -e "$1" ] || fail "race: temporary files left: $(ls -A "$R")"
echo "PASS: export targets"
