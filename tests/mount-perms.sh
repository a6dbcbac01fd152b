#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A shared mount shows each user only what it could read itself: root mounts
# with -o allow_other, the unprivileged user nobody (65534) reads.
#   (a) a symlink to /etc/shadow planted in a checkpoint is not shown
#   (b) a layout JSON naming /etc/shadow: that tensor and the views holding
#       it are refused to nobody, root reads them, the rest stays readable;
#       one naming a FIFO is refused at once
#   (c) a checkpoint dir 0700 with shards 0600: every view refused to nobody
#       (modes 0400/0500), root still reads them all
#   (d) a world-readable checkpoint stays readable by nobody (0444/0555)
#   (e) a checkpoint shared with a group (0750/0640): its members read it,
#       others do not
#   (f) a source that is a symlink (hub snapshot style) into a 0700 dir:
#       private, though the link's own directory is public
#   (g) a source whose ACL denies nobody: the tensor is its owner's only
# Fixtures and mountpoints live under $T (0755 below /tmp), so every refusal
# comes from the mount's own modes.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
[ "$(id -u)" -eq 0 ] || skip "needs root (mounts with allow_other, reads as nobody)"
command -v setpriv >/dev/null 2>&1 || skip "setpriv is missing"
case="$CKPTS/z3_ws2_fp32"
[ -d "$case/checkpoint" ] || skip "fixture $case missing"
chmod 755 "$T"
GROUP=4242

# as_nobody CMD...: run as nobody (uid and gid 65534, no other group), from
# / (the working directory, in the build tree, may be private).
as_nobody() {
	(cd / && setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@")
}
as_nobody test -x "$T" || skip "$T is not searchable by nobody (TMPDIR private?)"

# nobody_reads FILE: nobody reads FILE and gets what root gets.
nobody_reads() {
	want=$(sha256sum < "$1") || fail "root cannot read $1"
	got=$(as_nobody sh -c 'sha256sum < "$1"' sh "$1" 2>"$T/err") ||
		fail "nobody cannot read $1: $(cat "$T/err")"
	[ "$got" = "$want" ] || fail "nobody reads other bytes in $1"
}

# nobody_refused FILE: nobody's open of FILE fails with EACCES; root reads it.
nobody_refused() {
	if as_nobody cat "$1" >/dev/null 2>"$T/err"; then
		fail "nobody reads $1"
	fi
	grep -q "Permission denied" "$T/err" || fail "nobody reading $1: $(cat "$T/err")"
	cat "$1" >/dev/null || fail "root cannot read $1"
}

# mode_is WANT PATH...: octal permission bits of each path (not following links).
mode_is() {
	want=$1
	shift
	for p in "$@"; do
		got=$(stat -c %a "$p")
		[ "$got" = "$want" ] || fail "$p: mode $got, want $want"
	done
}

views() {
	echo "$1/pytorch_model.bin $1/model.safetensors $1/layout.json $1/tensors/INDEX $1/tensors/embed.weight"
}

echo "== (d) a world-readable checkpoint"
cp -r "$case/checkpoint" "$T/pub"
chmod -R u=rwX,go=rX "$T/pub"
printf '{"a": 1}\n' > "$T/pub/config.json"
chmod 644 "$T/pub/config.json"
gfs_mount "$T/pub" "$T/pub.mnt" -o allow_other 2>"$T/mount.err" || fail "mount pub"
# the one line allowed: which DeepSpeed loads this checkpoint's universal view
grep -v "universal view of ZeRO-3 with [0-9]* param groups in [0-9]* sub-groups: DeepSpeed >= 0.18 loads it" "$T/mount.err" >"$T/mount.other" || :
[ -s "$T/mount.other" ] && fail "mount pub: $(cat "$T/mount.other")"
mode_is 555 "$T/pub.mnt" "$T/pub.mnt/tensors" "$T/pub.mnt/optim"
nobody_reads "$T/pub.mnt/optim/exp_avg.safetensors"
# shellcheck disable=SC2046
mode_is 444 $(views "$T/pub.mnt") "$T/pub.mnt/config.json"
# shellcheck disable=SC2046
for f in $(views "$T/pub.mnt") "$T/pub.mnt/config.json"; do
	nobody_reads "$f"
done
as_nobody ls "$T/pub.mnt/tensors" >/dev/null || fail "nobody cannot list tensors/"
as_nobody "$PYTHON3" -c 'import sys, torch; torch.load(sys.argv[1])' \
	"$T/pub.mnt/pytorch_model.bin" || fail "nobody: torch.load"
gfs_umount "$T/pub.mnt" || fail "unmount pub"
echo "ok: nobody reads every view of a world-readable checkpoint"

echo "== (a) a symlink to /etc/shadow planted by the checkpoint's owner"
cp -r "$T/pub" "$T/plant"
chown -R 65534:65534 "$T/plant"
as_nobody ln -s /etc/shadow "$T/plant/notes.txt" || fail "ln -s as nobody"
as_nobody ln -s ../../../../../../../etc/shadow "$T/plant/rel.txt" || fail "ln -s as nobody"
as_nobody ln -s config.json "$T/plant/link.json" || fail "ln -s as nobody"
as_nobody mkdir "$T/plant/sub" && as_nobody sh -c 'echo inner > "$1/sub/inner.txt"' sh "$T/plant" &&
	as_nobody ln -s sub/../sub/inner.txt "$T/plant/inner.txt" || fail "inner.txt as nobody"
gfs_mount "$T/plant" "$T/plant.mnt" -o allow_other 2>"$T/mount.err" || fail "mount plant"
for l in notes.txt rel.txt; do
	grep -q "plant/$l: not shown: a symbolic link that leaves the checkpoint directory" \
		"$T/mount.err" || fail "no line about $l: $(cat "$T/mount.err")"
	[ -e "$T/plant.mnt/$l" ] || [ -L "$T/plant.mnt/$l" ] && fail "$l is shown"
	as_nobody cat "$T/plant.mnt/$l" >/dev/null 2>&1 && fail "nobody reads $l"
done
# a link that stays inside is passed through as the file it names
nobody_reads "$T/plant.mnt/link.json"
cmp "$T/plant.mnt/link.json" "$T/plant/config.json" || fail "link.json differs"
nobody_reads "$T/plant.mnt/inner.txt"
[ "$(cat "$T/plant.mnt/inner.txt")" = inner ] || fail "inner.txt differs"
[ "$(stat -c %U "$T/plant.mnt/pytorch_model.bin")" = nobody ] ||
	fail "views of nobody's checkpoint are not nobody's"
gfs_umount "$T/plant.mnt" || fail "unmount plant"
echo "ok: symlinks out of the checkpoint are not shown"

echo "== (b) a layout JSON naming /etc/shadow"
mkdir "$T/lay"
head -c 4096 /dev/urandom > "$T/lay/public.bin"
chmod 644 "$T/lay/public.bin"
n=$(stat -c %s /etc/shadow)
cat > "$T/lay/evil.json" <<EOF
{"gatherfs_layout": 1, "format": "json",
 "sources": [{"path": "/etc/shadow", "size": $n}, {"path": "public.bin", "size": 4096}],
 "tensors": [
  {"name": "s", "dtype": "uint8", "shape": [$n], "pieces": [{"source": 0, "offset": 0, "length": $n}]},
  {"name": "t", "dtype": "uint8", "shape": [4096], "pieces": [{"source": 1, "offset": 0, "length": 4096}]}
 ]}
EOF
chown -R 65534:65534 "$T/lay"
chmod 644 "$T/lay/evil.json"
gfs_mount "$T/lay/evil.json" "$T/lay.mnt" -o allow_other || fail "mount evil.json"
mode_is 400 "$T/lay.mnt/tensors/s"
for f in tensors/s pytorch_model.bin model.safetensors layout.json; do
	nobody_refused "$T/lay.mnt/$f"
done
cmp "$T/lay.mnt/tensors/s" /etc/shadow || fail "root reads other bytes in tensors/s"
nobody_reads "$T/lay.mnt/tensors/t"
nobody_reads "$T/lay.mnt/tensors/INDEX"
gfs_umount "$T/lay.mnt" || fail "unmount evil.json"
# a FIFO named as a source is refused, not waited on
mkfifo "$T/lay/fifo"
sed "s|\"/etc/shadow\"|\"$T/lay/fifo\"|" "$T/lay/evil.json" > "$T/lay/fifo.json"
mkdir -p "$T/mnt"
expect_mount_fail "fifo: not a regular file" "$T/lay/fifo.json" "$T/mnt"
echo "ok: a source only root may read stays root's"

echo "== (f) sources that are symbolic links (a hub snapshot): their targets decide"
mkdir -p "$T/hub/blobs" "$T/hub/snap"
head -c 4096 /dev/urandom > "$T/hub/blobs/b1"
chmod 644 "$T/hub/blobs/b1"
ln -s ../blobs/b1 "$T/hub/snap/model.bin"
cat > "$T/hub/snap/layout.json" <<EOF
{"gatherfs_layout": 1, "format": "json",
 "sources": [{"path": "model.bin", "size": 4096}],
 "tensors": [{"name": "w", "dtype": "uint8", "shape": [4096], "pieces": [{"source": 0, "offset": 0, "length": 4096}]}]}
EOF
chmod 644 "$T/hub/snap/layout.json"
gfs_mount "$T/hub/snap/layout.json" "$T/hub.mnt" -o allow_other || fail "mount hub"
nobody_reads "$T/hub.mnt/tensors/w"
gfs_umount "$T/hub.mnt" || fail "unmount hub"
chmod 700 "$T/hub/blobs"
gfs_mount "$T/hub/snap/layout.json" "$T/hub.mnt" -o allow_other || fail "mount hub (blobs 0700)"
mode_is 400 "$T/hub.mnt/tensors/w" "$T/hub.mnt/pytorch_model.bin"
nobody_refused "$T/hub.mnt/tensors/w"
nobody_reads "$T/hub.mnt/tensors/INDEX"
gfs_umount "$T/hub.mnt" || fail "unmount hub"
echo "ok: a symlinked source is as readable as its target along the target's path"

echo "== (g) a source with an extended ACL denying nobody (mode 0644)"
cp "$T/hub/blobs/b1" "$T/hub/snap/acl.bin"
chmod 644 "$T/hub/snap/acl.bin"
if "$PYTHON3" - "$T/hub/snap/acl.bin" <<'EOF'
import os, struct, sys
# system.posix_acl_access: version 2, then (tag, perm, id) sorted by tag:
# user::rw- user:nobody:--- group::r-- mask::r-- other::r--
none = 0xFFFFFFFF
entries = [(0x01, 6, none), (0x02, 0, 65534), (0x04, 4, none), (0x10, 4, none), (0x20, 4, none)]
os.setxattr(sys.argv[1], "system.posix_acl_access",
            struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries))
EOF
then
	as_nobody cat "$T/hub/snap/acl.bin" >/dev/null 2>&1 && fail "the ACL does not deny nobody"
	sed "s|model.bin|acl.bin|" "$T/hub/snap/layout.json" > "$T/hub/snap/acl.json"
	gfs_mount "$T/hub/snap/acl.json" "$T/acl.mnt" -o allow_other || fail "mount acl.json"
	mode_is 400 "$T/acl.mnt/tensors/w"
	nobody_refused "$T/acl.mnt/tensors/w"
	gfs_umount "$T/acl.mnt" || fail "unmount acl.json"
	echo "ok: a file with an extended ACL is only its owner's"
else
	echo "note: $T has no POSIX ACLs, (g) not run"
fi

echo "== (c) a private checkpoint: dir 0700, shards 0600"
cp -r "$T/pub" "$T/priv"
chmod 700 "$T/priv"
chmod 600 "$T/priv"/global_step3/*
gfs_mount "$T/priv" "$T/priv.mnt" -o allow_other || fail "mount priv"
mode_is 500 "$T/priv.mnt" "$T/priv.mnt/tensors" "$T/priv.mnt/optim"
# shellcheck disable=SC2046
mode_is 400 $(views "$T/priv.mnt") "$T/priv.mnt/config.json" "$T/priv.mnt/optim/exp_avg.safetensors"
# shellcheck disable=SC2046
for f in $(views "$T/priv.mnt") "$T/priv.mnt/config.json" "$T/priv.mnt/optim/exp_avg.safetensors"; do
	nobody_refused "$f"
done
as_nobody ls "$T/priv.mnt" >/dev/null 2>"$T/err" && fail "nobody lists the private mount"
grep -q "Permission denied" "$T/err" || fail "nobody listing the mount: $(cat "$T/err")"
check_views "$T/priv.mnt" "$case/.expected-default.tsv" "$T/priv"
gfs_umount "$T/priv.mnt" || fail "unmount priv"
# the same with only the shards private: the metadata (names, shapes) is
# theirs, so the mount's directories are private too; config.json is 0444
chmod 755 "$T/priv"
gfs_mount "$T/priv" "$T/priv.mnt" -o allow_other || fail "mount priv (dir 0755)"
mode_is 500 "$T/priv.mnt" "$T/priv.mnt/tensors"
# shellcheck disable=SC2046
mode_is 400 $(views "$T/priv.mnt")
mode_is 444 "$T/priv.mnt/config.json"
nobody_refused "$T/priv.mnt/tensors/embed.weight"
nobody_refused "$T/priv.mnt/pytorch_model.bin"
nobody_refused "$T/priv.mnt/config.json"
gfs_umount "$T/priv.mnt" || fail "unmount priv"
echo "ok: a private checkpoint stays private, root reads it"

echo "== (e) a checkpoint shared with group $GROUP: 0750 and 0640"
cp -r "$T/pub" "$T/grp"
chgrp -R "$GROUP" "$T/grp"
chmod -R u=rwX,g=rX,o= "$T/grp"
gfs_mount "$T/grp" "$T/grp.mnt" -o allow_other || fail "mount grp"
[ "$(stat -c %g "$T/grp.mnt/pytorch_model.bin")" = "$GROUP" ] || fail "group is not $GROUP"
mode_is 550 "$T/grp.mnt" "$T/grp.mnt/tensors"
# shellcheck disable=SC2046
mode_is 440 $(views "$T/grp.mnt")
in_group=$(cd / && setpriv --reuid=65534 --regid=65534 --groups="$GROUP" -- \
	sh -c 'sha256sum < "$1"' sh "$T/grp.mnt/pytorch_model.bin") || fail "a member of $GROUP cannot read"
[ "$in_group" = "$(sha256sum < "$T/grp.mnt/pytorch_model.bin")" ] || fail "a member reads other bytes"
as_nobody cat "$T/grp.mnt/pytorch_model.bin" >/dev/null 2>&1 && fail "nobody (not in $GROUP) reads"
gfs_umount "$T/grp.mnt" || fail "unmount grp"
echo "ok: group members read, others do not"

echo "PASS: perms"
