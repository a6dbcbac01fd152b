#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Faults in the sources of a live mount (a copy of a ZeRO-3 world size 3
# fixture; the daemon runs in the foreground, its stderr captured):
#   - a shard truncated, or rewritten in place with the same size: reads of
#     the tensors it holds fail with EIO (page cache dropped first, so the
#     reads reach the daemon), the others read correctly, the daemon logs
#     the file, survives and unmounts cleanly;
#   - a shard replaced by rename (trainers write-then-mv): every tensor
#     still reads its pre-rename bytes (the daemon serves the open inode);
#   - the checkpoint directory deleted (rm -rf): every tensor still reads
#     its bytes from the daemon's open descriptors;
#   - the checkpoint on a tmpfs, lazily unmounted (umount -l): the same;
#     the mount unmounts cleanly.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
case="$CKPTS/z3_ws3_bf16"
[ -d "$case/checkpoint" ] || skip "fixture $case missing"
TAB=$(printf '\t')
READ="$MOUNT_TOOLS/fault_read.py"

# expected NAME: the sha256 of tensor NAME (from the fixture's expected list).
expected() {
	awk -F "$TAB" -v n="$1" '$1 == n { print $4 }' "$case/.expected-default.tsv"
}

# split_by_source DIR SHARD: write $T/hit and $T/miss, the tensors/ file
# names of the tensors with / without bytes in SHARD (aliases omitted).
split_by_source() {
	"$INSPECT" layout "$1" >"$T/layout.json" || fail "inspect layout $1"
	"$PYTHON3" - "$T/layout.json" "$2" "$T/hit" "$T/miss" <<'EOF' || fail "split_by_source"
import json, sys
d = json.load(open(sys.argv[1]))
srcs = [i for i, s in enumerate(d["sources"]) if s["path"].endswith(sys.argv[2])]
hit, miss = open(sys.argv[3], "w"), open(sys.argv[4], "w")
for t in d["tensors"]:
    if "pieces" not in t:
        continue
    uses = any(p.get("source") in srcs for p in t["pieces"])
    (hit if uses else miss).write(t["name"] + "\n")
EOF
	[ -s "$T/hit" ] && [ -s "$T/miss" ] || fail "$2: no tensor split ($(wc -l <"$T/hit") / $(wc -l <"$T/miss"))"
}

# check_reads MNT LIST WANT: every tensor of LIST reads as WANT: "ok" (its
# expected sha256) or an errno name such as EIO.
check_reads() {
	n=0
	while read -r name; do
		file=$(printf '%s' "$name" | sed 's/%/%25/g; s|/|%2F|g')
		got=$(timeout 60 "$PYTHON3" "$READ" "$1/tensors/$file" | cut -d' ' -f1)
		if [ "$3" = ok ]; then
			want=$(expected "$name")
			[ "$got" = "$want" ] || fail "tensors/$file: got $got, want sha256 $want"
		else
			[ "$got" = "$3" ] || fail "tensors/$file: got $got, want $3"
		fi
		n=$((n + 1))
	done <"$2"
	echo "  $n tensors: $3"
}

# start NAME: a fresh copy $T/NAME of the fixture mounted on $T/NAME.mnt
# (foreground daemon, stderr in $T/NAME.log).
start() {
	rm -rf "${T:?}/$1"
	cp -r "$case/checkpoint" "$T/$1" && chmod -R u+w "$T/$1" || fail "copy"
	gfs_mount_fg "$T/$1" "$T/$1.mnt" 2>"$T/$1.log" || fail "mount $1: $(cat "$T/$1.log")"
	PID=$GFS_PID
}

# stop NAME: unmount; the daemon must exit with status 0 within 30 s.
stop() {
	gfs_umount "$T/$1.mnt" || fail "unmount $1"
	wait_child "$PID" 30
	[ "$CHILD_RC" = running ] && fail "$1: daemon still running 30 s after unmount"
	[ "$CHILD_RC" = 0 ] || fail "$1: daemon exit status $CHILD_RC: $(cat "$T/$1.log")"
}

# expect_eio NAME SHARD: after SHARD of copy NAME changed in place.
expect_eio() {
	check_reads "$T/$1.mnt" "$T/hit" EIO
	check_reads "$T/$1.mnt" "$T/miss" ok
	got=$(timeout 60 "$PYTHON3" "$READ" "$T/$1.mnt/pytorch_model.bin" | cut -d' ' -f1)
	[ "$got" = EIO ] || fail "$1: pytorch_model.bin read gave $got, want EIO"
	grep -Eq "$2: (the file changed since it was opened|truncated)" "$T/$1.log" ||
		fail "$1: the daemon did not log $2: $(cat "$T/$1.log")"
	echo "  logged: $(grep -m1 "$2" "$T/$1.log")"
	kill -0 "$PID" || fail "$1: the daemon died"
	check_reads "$T/$1.mnt" "$T/miss" ok
}

shard=zero_pp_rank_1_mp_rank_00_model_states.pt
split_by_source "$case/checkpoint" "$shard"

echo "== truncated in place"
start trunc
check_reads "$T/trunc.mnt" "$T/hit" ok
truncate -s 5000 "$T/trunc/global_step3/$shard"
expect_eio trunc "$shard"
stop trunc

echo "== rewritten in place, same size"
start rewrite
size=$(stat -c %s "$T/rewrite/global_step3/$shard")
head -c "$size" /dev/urandom | dd of="$T/rewrite/global_step3/$shard" conv=notrunc status=none
[ "$(stat -c %s "$T/rewrite/global_step3/$shard")" -eq "$size" ] || fail "size changed"
expect_eio rewrite "$shard"
stop rewrite

echo "== replaced by rename"
start rename
cat "$T/rename.mnt/tensors/INDEX" >/dev/null
for f in "$T/rename/global_step3"/*.pt; do
	head -c "$(stat -c %s "$f")" /dev/urandom >"$f.tmp" && mv "$f.tmp" "$f" || fail "mv"
done
check_reads "$T/rename.mnt" "$T/hit" ok
check_reads "$T/rename.mnt" "$T/miss" ok
stop rename

echo "== checkpoint directory deleted"
start deleted
rm -rf "${T:?}/deleted"
check_reads "$T/deleted.mnt" "$T/hit" ok
check_reads "$T/deleted.mnt" "$T/miss" ok
stop deleted

echo "== source filesystem lazily unmounted"
if mkdir -p "$T/fs" && mount -t tmpfs -o size=64m gfs-test "$T/fs" 2>/dev/null; then
	cp -r "$case/checkpoint" "$T/fs/ckpt" || { umount "$T/fs"; fail "copy to tmpfs"; }
	gfs_mount_fg "$T/fs/ckpt" "$T/tmpfs.mnt" 2>"$T/tmpfs.log" || { umount -l "$T/fs"; fail "mount tmpfs copy"; }
	PID=$GFS_PID
	umount -l "$T/fs" || fail "umount -l"
	grep -q " $T/fs " /proc/mounts && fail "tmpfs still mounted"
	check_reads "$T/tmpfs.mnt" "$T/hit" ok
	check_reads "$T/tmpfs.mnt" "$T/miss" ok
	stop tmpfs
else
	skip_part tmpfs "a source on a tmpfs unmounted lazily: cannot mount a tmpfs here (not root?)"
fi
echo "PASS: source faults"
