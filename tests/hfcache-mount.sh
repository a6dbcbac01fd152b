#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Mount a model from a Hugging Face cache repository (models--ORG--NAME with
# blobs/, snapshots/REV/ of links ../../blobs/HASH, refs/main), built here
# from the plain fixtures: by snapshot path and by repository path, the views
# and the passed-through config.json / generation_config.json exactly those of
# the fixture mounted directly (torch.load, safetensors, tensors/); -o tag=
# picks another snapshot (a pytorch_model.bin one) or a ref; gatherfs-inspect
# takes the same paths; bad tags fail with one line.  Links that leave the
# repository, chains through blobs/, and links into another repository's
# blobs/ stay hidden; a private blob (0600, root's) is refused to nobody on an
# allow_other mount (root only).
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
"$PYTHON3" -c "import torch" 2>/dev/null || skip "python3-torch not installed"
PLAIN="$top_srcdir/tests/data/plain"
REF="$top_srcdir/tests/tools/plain_ref.py"
chmod 755 "$T"
R="$T/hub/models--org--tiny"
REV1=0123456789abcdef0123456789abcdef01234567
REV2=fedcba9876543210fedcba9876543210fedcba98
REV3=3333333333333333333333333333333333333333
mkdir -p "$R/blobs" "$R/refs" "$R/snapshots"

# blob FILE: store FILE in blobs/ under its hash (as huggingface_hub does); print the hash.
blob() {
	h=$(sha256sum < "$1" | cut -c1-64)
	cp "$1" "$R/blobs/$h"
	chmod 644 "$R/blobs/$h"
	echo "$h"
}

# snapshot REV SRCDIR: snapshots/REV/ with a relative link per file of SRCDIR.
snapshot() {
	mkdir -p "$R/snapshots/$1"
	for f in "$2"/*; do
		ln -s "../../blobs/$(blob "$f")" "$R/snapshots/$1/${f##*/}"
	done
}

snapshot $REV1 "$PLAIN/llama_bf16"
snapshot $REV2 "$PLAIN/llama_bf16_bin"
printf '%s' $REV1 > "$R/refs/main"
printf '%s\n' $REV2 > "$R/refs/bin"
[ -L "$R/snapshots/$REV1/config.json" ] || fail "the snapshot holds no links"

# same_mount A B: the root listings and every file of two mounts are equal
# (layout.json names the sources' paths: its tensors are compared instead).
same_mount() {
	[ "$(ls "$1")" = "$(ls "$2")" ] || fail "$1 lists $(ls "$1" | tr '\n' ' '), $2 $(ls "$2" | tr '\n' ' ')"
	for f in "$1"/* "$1"/tensors/*; do
		[ -d "$f" ] && continue
		[ "${f##*/}" = layout.json ] && continue
		cmp "$f" "$2/${f#"$1"/}" || fail "$f differs from $2/${f#"$1"/}"
	done
}

# check_hf SRC FIXTURE [ARG...] (gfs_mount sets $src: these are hf_src, hf_fix): SRC mounts exactly as FIXTURE does (views
# against the reference readers, passed-through files byte for byte), with
# nothing said on stderr but, for a repository, the snapshot and ref read.
check_hf() {
	hf_src=$1 hf_fix=$2
	shift 2
	"$PYTHON3" "$REF" tsv "$hf_fix" "$T/want" || fail "plain_ref.py tsv $hf_fix"
	gfs_mount "$hf_fix" "$T/ref.mnt" || fail "mount $hf_fix"
	gfs_mount "$hf_src" "$T/hf.mnt" "$@" 2>"$T/err" || fail "mount $hf_src $*: $(cat "$T/err")"
	grep -v "^gatherfs: note: Hugging Face cache: snapshot [0-9a-f]*\(, named by refs/[a-z]*\| (given)\)$" \
		"$T/err" >"$T/err2"
	[ -s "$T/err2" ] && fail "mount $hf_src $*: said $(cat "$T/err")"
	check_views "$T/hf.mnt" "$T/want.default.tsv" "$hf_fix"
	same_mount "$T/hf.mnt" "$T/ref.mnt"
	cmp "$T/hf.mnt/config.json" "$hf_fix/config.json" || fail "$hf_src: config.json differs"
	gfs_umount "$T/hf.mnt" || fail "unmount $T/hf.mnt"
	gfs_umount "$T/ref.mnt" || fail "unmount $T/ref.mnt"
	echo "ok: $hf_src $* mounts as $hf_fix"
}

check_hf "$R/snapshots/$REV1" "$PLAIN/llama_bf16"
check_hf "$R" "$PLAIN/llama_bf16"
check_hf "$R/" "$PLAIN/llama_bf16" -o tag=main
check_hf "$R" "$PLAIN/llama_bf16_bin" -o tag=$REV2
check_hf "$R" "$PLAIN/llama_bf16_bin" -o tag=bin
check_hf "$R/snapshots/$REV2" "$PLAIN/llama_bf16_bin"

echo "== gatherfs-inspect takes the same paths"
"$INSPECT" ls "$PLAIN/llama_bf16" > "$T/ls.want" 2>/dev/null || fail "inspect ls fixture"
"$INSPECT" ls "$R" > "$T/ls.got" 2>"$T/err" || fail "inspect ls $R: $(cat "$T/err")"
cmp "$T/ls.want" "$T/ls.got" || fail "inspect ls $R differs"
"$INSPECT" ls "$PLAIN/llama_bf16_bin" > "$T/ls.want" 2>/dev/null || fail "inspect ls fixture"
"$INSPECT" ls --tag $REV2 "$R" > "$T/ls.got" 2>"$T/err" || fail "inspect ls --tag: $(cat "$T/err")"
cmp "$T/ls.want" "$T/ls.got" || fail "inspect ls --tag $REV2 $R differs"
name=$(head -2 "$T/ls.want" | tail -1 | cut -d' ' -f1)
"$INSPECT" cat "$R/snapshots/$REV2" "$name" > "$T/t.got" || fail "inspect cat"
"$INSPECT" cat "$PLAIN/llama_bf16_bin" "$name" > "$T/t.want" || fail "inspect cat fixture"
cmp "$T/t.got" "$T/t.want" || fail "inspect cat $name differs"
# each blob is checked against its name, its SHA-256 (tests/hfcache-verify.sh
# has git blob names and changed blobs): verify exits 0, nothing unverified
rc=0
"$INSPECT" verify "$R" >"$T/v.out" 2>"$T/err" || rc=$?
[ $rc -eq 0 ] && grep -q "Hugging Face cache blobs match" "$T/v.out" && ! grep -q UNVERIFIED "$T/v.out" ||
	fail "inspect verify $R: exit $rc: $(cat "$T/v.out" "$T/err")"
echo "ok: gatherfs-inspect ls, cat, verify"

echo "== bad tags and refs: one line, no mount"
mkdir -p "$T/mnt"
expect_mount_fail "tag '\.\.': not a revision" "$R" "$T/mnt" -o tag=..
expect_mount_fail "tag 'a/b': not a revision" "$R" "$T/mnt" -o tag=a/b
expect_mount_fail "not a revision (one path component of 1 to 255 bytes)" "$R" "$T/mnt" \
	-o tag="$(printf '%0256d' 0)"
expect_mount_fail "no snapshot or ref 'nope'" "$R" "$T/mnt" -o tag=nope
printf '../%s' $REV1 > "$R/refs/evil"
expect_mount_fail "refs/evil: does not name a revision" "$R" "$T/mnt" -o tag=evil
printf 'deadbeef' > "$R/refs/gone"
expect_mount_fail "refs/gone names a revision that is no directory in snapshots/" "$R" "$T/mnt" -o tag=gone
# a ref that is a link (to a token file, say) is refused, its text never shown
printf 'hf_SECRETxyz' > "$T/token"
ln -s "$T/token" "$R/refs/leak"
expect_mount_fail "refs/leak: a symbolic link: refused" "$R" "$T/mnt" -o tag=leak
grep -q SECRET "$T/err" && fail "a ref's text in a message: $(cat "$T/err")"
printf 'hf_SECRETxyz' > "$R/refs/gone"
expect_mount_fail "refs/gone names a revision that is no directory" "$R" "$T/mnt" -o tag=gone
grep -q SECRET "$T/err" && fail "a ref's text in a message: $(cat "$T/err")"
mkfifo "$R/refs/fifo"
expect_mount_fail "refs/fifo: not a regular file" "$R" "$T/mnt" -o tag=fifo
mv "$R/refs/main" "$R/refs/main.away"
expect_mount_fail "no refs/main: pick a snapshot with a tag" "$R" "$T/mnt"
mv "$R/refs/main.away" "$R/refs/main"
expect_mount_fail "a snapshot of a Hugging Face cache repository: a tag picks a snapshot of the repository itself" "$R/snapshots/$REV1" "$T/mnt" -o tag=$REV2

echo "== links that leave the repository stay hidden"
S3="$R/snapshots/$REV3"
mkdir -p "$S3"
cp -P "$R/snapshots/$REV1/"* "$S3/"
echo outside > "$T/outside.txt"
ln -s "$T/outside.txt" "$S3/abs.txt"
ln -s ../../../../outside.txt "$S3/rel.txt"
ln -s ../../blobs/../../../outside.txt "$S3/via.txt"
cfg=$(readlink "$S3/config.json")
ln -s "${cfg##*/}" "$R/blobs/chain"
ln -s ../../blobs/chain "$S3/chain.json"
O="$T/hub/models--org--other"
mkdir -p "$O/blobs" "$O/refs" "$O/snapshots"
cp "$PLAIN/llama_bf16/config.json" "$O/blobs/other"
ln -s "../../../models--org--other/blobs/other" "$S3/other.json"
ln -s "$R/blobs/${cfg##*/}" "$S3/absblob.json"
gfs_mount "$S3" "$T/hf.mnt" 2>"$T/err" || fail "mount $S3: $(cat "$T/err")"
for n in abs.txt rel.txt via.txt other.json; do
	grep -q "$S3/$n: not shown: a symbolic link that leaves the checkpoint directory" "$T/err" ||
		fail "$n: no line: $(cat "$T/err")"
	[ -e "$T/hf.mnt/$n" ] && fail "$n is shown"
done
grep -q "$S3/chain.json: not shown: a symbolic link into blobs/ that goes on through another symbolic link" "$T/err" ||
	fail "chain.json: no line: $(cat "$T/err")"
[ -e "$T/hf.mnt/chain.json" ] && fail "chain.json is shown"
cmp "$T/hf.mnt/absblob.json" "$PLAIN/llama_bf16/config.json" || fail "absblob.json (absolute link to a blob)"
cmp "$T/hf.mnt/config.json" "$PLAIN/llama_bf16/config.json" || fail "config.json"
gfs_umount "$T/hf.mnt" || fail "unmount $T/hf.mnt"
echo "ok: links out of the repository, into another one, and chains are hidden"

if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null 2>&1; then
	skip_part private-blob "a private blob refused to nobody: needs root and setpriv"
	echo "PASS"
	exit 0
fi
echo "== a private blob is refused to nobody"
# as_nobody CMD...: CMD as nobody, from / (the working directory, in the
# build tree, may be private).
as_nobody() {
	(cd / && setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@")
}
as_nobody test -x "$T" || skip "$T is not searchable by nobody (TMPDIR private?)"
chmod -R go+rX "$T/hub"
echo secret > "$R/blobs/private"
chown 0:0 "$R/blobs/private"
chmod 600 "$R/blobs/private"
ln -s ../../blobs/private "$S3/secret.json"
gfs_mount "$S3" "$T/hf.mnt" -o allow_other 2>/dev/null || fail "mount $S3 -o allow_other"
[ "$(stat -c %a "$T/hf.mnt/secret.json")" = 400 ] || fail "secret.json: mode $(stat -c %a "$T/hf.mnt/secret.json")"
if as_nobody cat "$T/hf.mnt/secret.json" >/dev/null 2>"$T/err"; then
	fail "nobody reads secret.json"
fi
grep -q "Permission denied" "$T/err" || fail "nobody reading secret.json: $(cat "$T/err")"
cmp "$T/hf.mnt/secret.json" "$R/blobs/private" || fail "root cannot read secret.json"
# nobody reads through the mount only; the comparison with the fixture (in
# the source tree, which may be private) is root's
as_nobody cat "$T/hf.mnt/config.json" >"$T/nobody.json" 2>"$T/err" ||
	fail "nobody cannot read config.json: $(cat "$T/err")"
cmp "$T/nobody.json" "$PLAIN/llama_bf16/config.json" || fail "nobody reads other bytes in config.json"
as_nobody cat "$T/hf.mnt/model.safetensors" >/dev/null 2>"$T/err" ||
	fail "nobody cannot read model.safetensors: $(cat "$T/err")"
gfs_umount "$T/hf.mnt" || fail "unmount $T/hf.mnt"
echo "ok: a private blob is its owner's only"
echo "PASS"
