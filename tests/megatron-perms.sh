#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Megatron metadata on a shared mount (issue 48 items 1, 2): root mounts with
# -o allow_other, the unprivileged user nobody (65534) reads.
#   (1) -o hf_config=DIR: a config.json of mode 0600 makes the served
#       config.json (and every tensor view) root's only; a
#       generation_config.json that is a link (to a secret) or no JSON
#       object is refused, and config.json may not be a link either
#   (2) torch_dist: a common.pt (whose args give config.json) or a
#       metadata.json of mode 0600 makes config.json root's only
# Copies live under $T (0755), made readable to nobody on purpose (the source
# tree may be private), so every refusal comes from the mount's own modes.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
[ "$(id -u)" -eq 0 ] || skip "needs root (mounts with allow_other, reads as nobody)"
command -v setpriv >/dev/null 2>&1 || skip "setpriv is missing"
chmod 755 "$T"
MG="$top_srcdir/tests/data/megatron"

as_nobody() {
	setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"
}
as_nobody test -x "$T" || skip "$T is not searchable by nobody (TMPDIR private?)"

# nobody_reads FILE / nobody_refused FILE: as in tests/mount-perms.sh
nobody_reads() {
	as_nobody cat "$1" >/dev/null 2>"$T/err" || fail "nobody cannot read $1: $(cat "$T/err")"
}
nobody_refused() {
	if as_nobody cat "$1" >/dev/null 2>"$T/err"; then
		fail "nobody reads $1"
	fi
	grep -q "Permission denied" "$T/err" || fail "nobody reading $1: $(cat "$T/err")"
	cat "$1" >/dev/null || fail "root cannot read $1"
}

# public SRC DST: a copy of SRC readable by all
public() {
	rm -rf "$2"
	cp -r "$1" "$2"
	chmod -R u+w,go=rX "$2"
}

echo "== (1) -o hf_config=DIR"
public "$MG/tp1_pp2/torch_dist" "$T/dist"
public "$MG/tp1_pp2/hf_config" "$T/hfc"
mkdir -p "$T/mnt"
gfs_mount "$T/dist" "$T/mnt" -o allow_other,hf_config="$T/hfc" 2>"$T/log" ||
	fail "mount: $(cat "$T/log")"
nobody_reads "$T/mnt/config.json"
nobody_reads "$T/mnt/generation_config.json"
gfs_umount "$T/mnt" || fail "unmount"
echo "ok: a public hf_config stays public"
chmod 600 "$T/hfc/config.json"
gfs_mount "$T/dist" "$T/mnt" -o allow_other,hf_config="$T/hfc" 2>"$T/log" ||
	fail "mount: $(cat "$T/log")"
nobody_refused "$T/mnt/config.json"
nobody_refused "$T/mnt/generation_config.json"
nobody_refused "$T/mnt/model.safetensors"
gfs_umount "$T/mnt" || fail "unmount"
echo "ok: a 0600 hf_config config.json is root's only"
chmod 644 "$T/hfc/config.json"
chmod 600 "$T/hfc/generation_config.json"
gfs_mount "$T/dist" "$T/mnt" -o allow_other,hf_config="$T/hfc" 2>"$T/log" ||
	fail "mount: $(cat "$T/log")"
nobody_refused "$T/mnt/config.json"
nobody_refused "$T/mnt/generation_config.json"
gfs_umount "$T/mnt" || fail "unmount"
echo "ok: a 0600 generation_config.json makes the views root's only"
printf 'root:$6$secret:19000:0:99999:7:::\n' >"$T/secret"
chmod 600 "$T/secret"
rm "$T/hfc/generation_config.json"
ln -s "$T/secret" "$T/hfc/generation_config.json"
expect_mount_fail "generation_config.json: a symbolic link: refused" "$T/dist" "$T/mnt" \
	-o allow_other,hf_config="$T/hfc"
rm "$T/hfc/generation_config.json"
cp "$T/secret" "$T/hfc/generation_config.json"
chmod 644 "$T/hfc/generation_config.json"
expect_mount_fail "generation_config.json: " "$T/dist" "$T/mnt" -o allow_other,hf_config="$T/hfc"
grep -q secret "$T/err" && fail "the refused file's text in the message: $(cat "$T/err")"
printf '[1, 2]\n' >"$T/hfc/generation_config.json"
expect_mount_fail "generation_config.json: not a JSON object" "$T/dist" "$T/mnt" \
	-o allow_other,hf_config="$T/hfc"
cp "$MG/tp1_pp2/hf_config/generation_config.json" "$T/hfc/generation_config.json"
mv "$T/hfc/config.json" "$T/hfc/real.json"
ln -s real.json "$T/hfc/config.json"
expect_mount_fail "config.json: a symbolic link: refused" "$T/dist" "$T/mnt" \
	-o allow_other,hf_config="$T/hfc"

echo "== (2) torch_dist: common.pt and metadata.json behind config.json"
public "$MG/tp2_pp2/training_torch_dist" "$T/td"
I="$T/td/iter_0000003"
gfs_mount "$T/td" "$T/mnt" -o allow_other 2>"$T/log" || fail "mount: $(cat "$T/log")"
nobody_reads "$T/mnt/config.json"
gfs_umount "$T/mnt" || fail "unmount"
for f in common.pt metadata.json; do
	chmod 600 "$I/$f"
	gfs_mount "$T/td" "$T/mnt" -o allow_other 2>"$T/log" || fail "mount: $(cat "$T/log")"
	nobody_refused "$T/mnt/config.json"
	nobody_refused "$T/mnt/pytorch_model.bin"
	gfs_umount "$T/mnt" || fail "unmount"
	chmod 644 "$I/$f"
	echo "ok: a 0600 $f makes config.json root's only"
done
