#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tests/package.sh DEB: the Debian package (dpkg-buildpackage's .deb) as an
# admin uses it, on this machine: lintian finds no error; apt-get installs
# it; the installed layout (programs, man pages that render without
# warnings, docs/*.md, the example systemd units, which systemd-analyze
# verify accepts, Python modules /usr/bin/python3 imports); --version
# prints the package's upstream version (and gatherfs libfuse's); the
# README's demo against /usr/bin; `mount -t fuse.gatherfs` with the example
# mount unit's Type= and Options= (read by another user: allow_other) and
# an /etc/fstab line, each served by /usr/bin/gatherfs and checked view by
# view (torch.load with /usr/bin/python3 included); unmount; purge: nothing
# of `dpkg -L` is left but directories other packages own, no daemon runs,
# /etc/fstab is as it was.
#
# Needs root; changes the system (installs and purges gatherfs, adds and
# removes an /etc/fstab line): meant for CI machines (.ci/run runs it).
# Run from the source tree, which provides the fixtures and scripts/demo.sh.
top_srcdir=$(cd "$(dirname "$0")/.." && pwd)
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
[ $# -eq 1 ] && [ -f "$1" ] || fail "usage: $0 DEB"
[ "$(id -u)" = 0 ] || fail "needs root (installs and purges the package)"
deb=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
PYTHON3=/usr/bin/python3
SYSPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
DOC=/usr/share/doc/gatherfs
case="$CKPTS/z3_ws2_fp32"
ck="$case/checkpoint"
export DEBIAN_FRONTEND=noninteractive

status() {
	dpkg-query -W -f '${db:Status-Status}' gatherfs 2>/dev/null || echo not-installed
}
[ "$(status)" = not-installed ] || fail "gatherfs is already installed ($(status))"
if found=$(env PATH="$SYSPATH" sh -c 'command -v gatherfs'); then
	fail "$found would shadow the package's gatherfs"
fi

lintian --fail-on error "$deb" || fail "lintian reports errors on $deb"
echo "ok: lintian: no error"

T=$(mktemp -d "${TMPDIR:-/tmp}/gatherfs-package.XXXXXX")
fstab_added=false
cleanup() {
	if $fstab_added; then
		if [ -e "$T/fstab.orig" ]; then cat "$T/fstab.orig" >/etc/fstab; else rm -f /etc/fstab; fi
	fi
	mount_cleanup
}
trap cleanup EXIT
trap 'exit 1' INT TERM

apt-get install -y -q --no-install-recommends "$deb" >"$T/apt.log" 2>&1 ||
	{ cat "$T/apt.log"; fail "apt-get install $deb"; }
[ "$(status)" = installed ] || fail "not installed after apt-get install: $(status)"
dpkg-query -L gatherfs | LC_ALL=C sort >"$T/files"
echo "ok: installed, $(wc -l <"$T/files") paths"

# ---- the installed layout
for f in /usr/bin/gatherfs /usr/bin/gatherfs-inspect \
	/usr/share/man/man1/gatherfs.1.gz /usr/share/man/man1/gatherfs-inspect.1.gz \
	/usr/share/man/man5/gatherfs-layout.5.gz \
	$DOC/copyright $DOC/examples/mnt-model.mount $DOC/examples/mnt-model.automount; do
	grep -qxF "$f" "$T/files" && [ -f "$f" ] || fail "not installed: $f"
done
for d in "$top_srcdir"/docs/*.md "$top_srcdir/README.md"; do
	f=$DOC/$(basename "$d")
	{ [ -f "$f" ] || [ -f "$f.gz" ]; } || fail "$d is not installed in $DOC"
done
[ "$(man -w 5 gatherfs-layout)" = /usr/share/man/man5/gatherfs-layout.5.gz ] ||
	fail "man -w 5 gatherfs-layout: $(man -w 5 gatherfs-layout 2>&1)"
for m in $(grep '^/usr/share/man/.*\.gz$' "$T/files"); do
	w=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 -Z "$m" 2>&1 >/dev/null)
	[ -z "$w" ] || fail "$m renders with warnings: $w"
done
systemd-analyze verify $DOC/examples/mnt-model.mount $DOC/examples/mnt-model.automount ||
	fail "systemd-analyze verify rejects the example units"
# Python modules (automake's python_PYTHON): where /usr/bin/python3 imports them.
for py in $(grep '^/usr/lib/python3/dist-packages/[^/]*\.py$' "$T/files"); do
	mod=$(basename "$py" .py)
	(cd / && "$PYTHON3" -c "import $mod; assert $mod.__file__ == '$py', $mod.__file__") ||
		fail "/usr/bin/python3 cannot import $mod from $py"
	echo "ok: import $mod ($py)"
done
echo "ok: programs, man pages, docs, example units"

# ---- versions
v=$(dpkg-query -W -f '${Version}' gatherfs)
up=${v#*:}
up=${up%-*}
env PATH="$SYSPATH" gatherfs --version >"$T/version" 2>&1 || fail "gatherfs --version: $(cat "$T/version")"
[ "$(head -1 "$T/version")" = "gatherfs $up" ] || fail "gatherfs --version: '$(head -1 "$T/version")', package $v"
grep -q '^FUSE library version [0-9]' "$T/version" || fail "gatherfs --version names no libfuse: $(cat "$T/version")"
iv=$(env PATH="$SYSPATH" gatherfs-inspect --version) || fail "gatherfs-inspect --version"
[ "$iv" = "gatherfs $up" ] || fail "gatherfs-inspect --version: '$iv', package $v"
echo "ok: --version: $(tr '\n' ';' <"$T/version")"

# ---- the README's demo, with the installed programs
(cd "$top_srcdir" && env PATH="$SYSPATH" GATHERFS_BUILD=/usr/bin ./scripts/demo.sh) >"$T/demo" 2>&1 ||
	{ cat "$T/demo"; fail "scripts/demo.sh with GATHERFS_BUILD=/usr/bin"; }
grep -q "storage: True" "$T/demo" || { cat "$T/demo"; fail "demo: lm_head.weight is not tied"; }
echo "ok: GATHERFS_BUILD=/usr/bin ./scripts/demo.sh"

# ---- mounts through mount(8) and mount.fuse3
# Mounted with allow_other and read by uid 65534: a copy of the fixture
# under $T, readable by all on purpose (the source tree may be private).
chmod 755 "$T"
cp -r "$ck" "$T/ck" && chmod -R u+w,go+rX "$T/ck" || fail "copy $ck"
ck="$T/ck"
mnt="$T/mnt"
mkdir "$mnt"
GFS_MOUNTS="$mnt"

# served MNT: the mount at MNT is fuse.gatherfs, read-only, and its daemon is
# /usr/bin/gatherfs.
served() {
	wait_for is_mounted "$1" || fail "$1 is not mounted"
	awk -v m="$1" '$2 == m { split($4, o, ","); exit !($3 == "fuse.gatherfs" && o[1] == "ro") }' \
		/proc/mounts || fail "mount entry: $(grep " $1 " /proc/mounts)"
	for p in /proc/[0-9]*; do
		[ "$(readlink "$p/exe" 2>/dev/null)" = /usr/bin/gatherfs ] &&
			tr '\0' '\n' <"$p/cmdline" 2>/dev/null | grep -qxF "$1" && return 0
	done
	fail "no /usr/bin/gatherfs process serves $1"
}

unit=$DOC/examples/mnt-model.mount
type=$(sed -n 's/^Type=//p' "$unit")
opts=$(sed -n 's/^Options=//p' "$unit")
[ "$type" = fuse.gatherfs ] || fail "$unit: Type=$type"
# What systemd runs for the unit: mount WHAT WHERE -t TYPE -o OPTIONS.
env -i PATH="$SYSPATH" mount "$ck" "$mnt" -t "$type" -o "$opts,dtype=bf16" ||
	fail "mount -t $type -o $opts,dtype=bf16"
served "$mnt"
check_views "$mnt" "$case/.expected-bf16.tsv" "$ck"
(cd / && setpriv --reuid=65534 --regid=65534 --clear-groups \
	"$PYTHON3" -c 'import sys, torch; print(len(torch.load(sys.argv[1])), "tensors")' \
	"$mnt/pytorch_model.bin") >"$T/nobody" 2>&1 || fail "uid 65534 cannot torch.load: $(cat "$T/nobody")"
umount "$mnt" && wait_unmounted "$mnt" || fail "umount $mnt"
echo "ok: mount -t $type -o $opts,dtype=bf16 (torch.load by uid 65534: $(cat "$T/nobody"))"

[ -e /etc/fstab ] && cp -p /etc/fstab "$T/fstab.orig"
fstab_added=true
printf '%s %s fuse.gatherfs ro,noauto 0 0\n' "$(echo "$ck" | sed 's/ /\\040/g')" "$mnt" >>/etc/fstab
env -i PATH="$SYSPATH" mount "$mnt" || fail "mount $mnt (fstab: $(tail -1 /etc/fstab))"
served "$mnt"
check_views "$mnt" "$case/.expected-default.tsv" "$ck"
umount "$mnt" && wait_unmounted "$mnt" || fail "umount $mnt"
if [ -e "$T/fstab.orig" ]; then cat "$T/fstab.orig" >/etc/fstab; else rm -f /etc/fstab; fi
fstab_added=false
echo "ok: fstab line '$ck $mnt fuse.gatherfs ro,noauto 0 0', mount $mnt"

# ---- purge
wait_for sh -c '! for p in /proc/[0-9]*; do readlink "$p/exe"; done 2>/dev/null | grep -q "^/usr/bin/gatherfs"' ||
	fail "a gatherfs daemon still runs after umount"
apt-get purge -y -q gatherfs >"$T/apt.log" 2>&1 || { cat "$T/apt.log"; fail "apt-get purge gatherfs"; }
[ "$(status)" = not-installed ] || fail "after purge: $(status)"
left=0
while IFS= read -r f; do
	[ "$f" = /. ] && continue
	[ -e "$f" ] || [ -L "$f" ] || continue
	if [ -d "$f" ] && [ ! -L "$f" ] && dpkg-query -S "$f" >/dev/null 2>&1; then
		continue
	fi
	echo "left after purge: $f" >&2
	left=$((left + 1))
done <"$T/files"
[ $left -eq 0 ] || fail "$left paths of the package are left after purge"
echo "ok: purged, nothing left"
echo "PASS: package $v"
