#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The namespace at kernel speed: every listing is a readdirplus whose
# entries and attributes the kernel keeps, so stat() of a listed file never
# reaches the daemon.  Requests are counted in the daemon's own debug log
# (-d: one "opcode: NAME" line per request), over a mount of 3,000 tensors:
# far more than one readdir reply holds, where the kernel's adaptive mode
# (libfuse's default) switched to plain READDIR and one LOOKUP a file.
#   (a) find -printf '%s %m %u' of the whole mount: no READDIR, no LOOKUP
#       of a listed file
#   (b) a second find, ls -lR and stat of every file: no LOOKUP, GETATTR,
#       READDIR, READDIRPLUS or READ (directories are still opened and
#       released, their listing is cached)
#   (c) the attributes readdirplus gave are those LOOKUP gives
#       (-o readdirplus=no: one LOOKUP a file, same find output)
#   (d) as root, with allow_other, attributes cached by root's listing
#       do not open a private checkpoint to another user (nobody)
#   (e) layout.json's size, counted without writing its pieces on the
#       first stat, is the length of its text: pieces from sources, zero,
#       strided (count), general (at), zstd, optimizer states
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup

# A plain safetensors file of 3,000 small tensors (a readdirplus reply of
# ls or find holds a few hundred entries).
mkdir "$T/src"
"$PYTHON3" - "$T/src/model.safetensors" <<'EOF' || fail "cannot write the fixture"
import json, struct, sys
hdr, off = {}, 0
for i in range(3000):
    k = i % 7 + 1
    hdr[f"layers.{i}.weight"] = {"dtype": "F32", "shape": [k], "data_offsets": [off, off + 4 * k]}
    off += 4 * k
h = json.dumps(hdr).encode()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + bytes(i % 251 for i in range(off)))
EOF

# ops LOG NAME...: how many requests of these opcodes LOG shows.
ops() {
	log=$1
	shift
	n=0
	for op in "$@"; do
		n=$((n + $(grep -c "opcode: $op " "$log")))
	done
	echo "$n"
}

M=$T/mnt
gfs_mount_fg "$T/src" "$M" -d 2>"$T/plus.log" || fail "mount failed: $(tail -3 "$T/plus.log")"
before=$(ops "$T/plus.log" LOOKUP)

# (a) the first listing
timeout 60 find "$M" -printf '%s %m %u %g %y %P\n' | sort > "$T/plus.txt" || fail "find $M"
files=$(wc -l < "$T/plus.txt")
[ "$files" -gt 3000 ] || fail "find $M: $files entries, want more than 3000"
plain=$(ops "$T/plus.log" READDIR)
[ "$plain" -eq 0 ] || fail "(a) find: $plain plain READDIR requests, want only READDIRPLUS"
[ "$(ops "$T/plus.log" READDIRPLUS)" -gt 0 ] || fail "(a) find: no READDIRPLUS request"
lookups=$(($(ops "$T/plus.log" LOOKUP) - before))
[ "$lookups" -le 2 ] || fail "(a) find of $files files: $lookups LOOKUP requests, want none of a listed file"
echo "  (a) find of $files entries: READDIRPLUS only, $lookups LOOKUP"

# (b) everything again: from the kernel's caches (ls -l still asks for
# the ACL of the directories it is given: GETXATTR is not counted)
seen=$(ops "$T/plus.log" LOOKUP GETATTR READDIR READDIRPLUS READ)
timeout 60 find "$M" -printf '%s %m %u %g %y %P\n' | sort > "$T/again.txt" || fail "find $M again"
cmp -s "$T/plus.txt" "$T/again.txt" || fail "(b) the second find differs"
timeout 60 ls -lR "$M" > /dev/null || fail "ls -lR $M"
(cd "$M" && timeout 120 find . -type f -print0 | xargs -0 stat -c '%s' > /dev/null) ||
	fail "stat of every file"
now=$(ops "$T/plus.log" LOOKUP GETATTR READDIR READDIRPLUS READ)
[ "$now" -eq "$seen" ] ||
	fail "(b) a second listing and stat of every file: $((now - seen)) requests reached the daemon, want 0"
echo "  (b) second find, ls -lR, stat of every file: no request"
gfs_umount "$M" || fail "umount"
wait "$GFS_PID" || fail "daemon exited with status $?"

# (c) attributes by LOOKUP only
gfs_mount_fg "$T/src" "$M" -d -o readdirplus=no 2>"$T/lookup.log" ||
	fail "mount -o readdirplus=no failed: $(tail -3 "$T/lookup.log")"
timeout 60 find "$M" -printf '%s %m %u %g %y %P\n' | sort > "$T/lookup.txt" || fail "find $M"
[ "$(ops "$T/lookup.log" READDIRPLUS)" -eq 0 ] || fail "(c) -o readdirplus=no: READDIRPLUS requests"
[ "$(ops "$T/lookup.log" LOOKUP)" -ge 3000 ] ||
	fail "(c) -o readdirplus=no: $(ops "$T/lookup.log" LOOKUP) LOOKUP requests for $files files"
cmp -s "$T/plus.txt" "$T/lookup.txt" ||
	fail "(c) readdirplus and lookup attributes differ: $(diff "$T/plus.txt" "$T/lookup.txt" | head -4)"
echo "  (c) -o readdirplus=no: $(ops "$T/lookup.log" LOOKUP) LOOKUP requests, the same attributes"
gfs_umount "$M" || fail "umount"
wait "$GFS_PID" || fail "daemon exited with status $?"

# (e) layout.json: its size before any read, against its bytes
"$PYTHON3" - "$T/src" <<'EOF' || fail "cannot write the layout fixture"
import json, os, sys
d = sys.argv[1]
size = os.path.getsize(d + "/model.safetensors")
json.dump({"gatherfs_layout": 1, "format": "json", "base_dir": d,
           "sources": [{"path": "model.safetensors", "size": size}],
           "tensors": [{"name": "a", "dtype": "float32", "shape": [1524],
                        "pieces": [{"source": 0, "offset": 8, "length": 2000},
                                   {"zero": 4096}]},
                       {"name": "b", "dtype": "uint8", "shape": [100000],
                        "pieces": [{"source": 0, "offset": 1000, "length": 100000}]}]},
          open(d + "/zero.json", "w"))
EOF
for src in "$T/src/zero.json" "$CKPTS/z3_ws3_fp32_subgroups/checkpoint" \
	"$top_srcdir/tests/data/dcp/fsdp2_ws2_zstd/checkpoint" \
	"$top_srcdir/tests/data/megatron/tp2_pp2/training_torch_dist/iter_0000003"; do
	gfs_mount "$src" "$M" 2>"$T/err" || fail "(e) mount $src: $(cat "$T/err")"
	size=$(stat -c %s "$M/layout.json")
	got=$(timeout 60 cat "$M/layout.json" | wc -c)
	[ "$size" -eq "$got" ] || fail "(e) $src: layout.json of $size bytes holds $got"
	grep -q '"zero"' "$M/layout.json" || [ "$src" != "$T/src/zero.json" ] ||
		fail "(e) $src: no zero piece in layout.json"
	gfs_umount "$M" || fail "umount"
done
echo "  (e) layout.json sized without writing it: 4 layouts, sizes exact"

# (d) a private checkpoint, listed by root first
if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null 2>&1; then
	skip_part private-checkpoint "(d) a private checkpoint listed by root first: needs root and setpriv"
	echo "mount-namespace: OK"
	exit 0
fi
chmod 755 "$T"
chmod 700 "$T/src"
chmod 600 "$T/src/model.safetensors"
# as_nobody CMD...: CMD as nobody, from / (the working directory, in the
# build tree, may be private).
as_nobody() {
	(cd / && setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@")
}
as_nobody test -x "$T" || skip "$T is not searchable by nobody (TMPDIR private?)"
gfs_mount "$T/src" "$M" -o allow_other || fail "mount -o allow_other"
timeout 60 find "$M" -printf '%s %m\n' > /dev/null || fail "find $M as root"
cat "$M/tensors/layers.7.weight" > /dev/null || fail "root cannot read a tensor"
[ "$(stat -c %a "$M/tensors")" = 500 ] || fail "(d) tensors/: mode $(stat -c %a "$M/tensors"), want 500"
for f in tensors/layers.7.weight pytorch_model.bin model.safetensors; do
	if as_nobody cat "$M/$f" > /dev/null 2>"$T/err"; then
		fail "(d) nobody reads $f after root listed the mount"
	fi
	grep -q "Permission denied" "$T/err" || fail "(d) nobody reading $f: $(cat "$T/err")"
done
if as_nobody ls "$M/tensors" > /dev/null 2>"$T/err"; then
	fail "(d) nobody lists tensors/ after root listed it"
fi
echo "  (d) root's cached listing: nobody still refused"
gfs_umount "$M" || fail "umount"
echo "mount-namespace: OK"
