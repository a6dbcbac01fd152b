#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Keys with control bytes: a pytorch_model.bin (torch.save) and a
# model.safetensors (written with the standard library) whose keys hold a
# tab are listed (gatherfs-inspect ls writes the tab %09, --json keeps it)
# and mounted: tensors/a%09b holds the bytes, pytorch_model.bin (torch.load)
# and model.safetensors carry the key itself.  A key holding a NUL byte
# (a safetensors \u0000 escape, a pickled str) is refused with one line
# naming the file and the key.  One plain file given directly is listed
# and mounted as a plain source.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
"$PYTHON3" -c "import torch" 2>/dev/null || skip "python3-torch not installed"
mkdir -p "$T/bin" "$T/st" "$T/nulbin" "$T/nulst" "$T/mnt"
"$PYTHON3" - "$T" <<'PY' || fail "writing the fixtures"
import json, struct, sys, torch
t = sys.argv[1]
torch.save({"a\tb": torch.arange(4, dtype=torch.float32), "c\x7f": torch.ones(2)},
           t + "/bin/pytorch_model.bin")
torch.save({"a\x00b": torch.ones(2)}, t + "/nulbin/pytorch_model.bin")
def st(path, key):
    h = json.dumps({key: {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + struct.pack("<4f", 1, 2, 3, 4))
st(t + "/st/model.safetensors", "a\tb")
st(t + "/nulst/model.safetensors", "a\x00b")
PY

# ls: %09 in the columns, the key itself in --json; cat takes the key.
"$INSPECT" ls "$T/bin" > "$T/ls" 2>/dev/null || fail "ls $T/bin"
grep -q '^a%09b ' "$T/ls" || fail "ls: $(cat "$T/ls")"
grep -q '^c%7F ' "$T/ls" || fail "ls: $(cat "$T/ls")"
"$INSPECT" ls --json "$T/st" 2>/dev/null | grep -q '"name":[[:space:]]*"a\\tb"' || fail "ls --json $T/st"
[ "$("$INSPECT" cat "$T/st" "$(printf 'a\tb')" | od -An -tf4 | tr -s ' ')" = " 1 2 3 4" ] ||
	fail "cat of the tab key"
echo "ok - gatherfs-inspect"

for kind in bin st; do
	mnt="$T/mnt-$kind"
	gfs_mount "$T/$kind" "$mnt" || fail "mount $T/$kind"
	ls "$mnt/tensors" > "$T/names"
	grep -qx 'a%09b' "$T/names" || fail "$kind: ls tensors: $(cat "$T/names")"
	"$PYTHON3" - "$mnt" "$kind" <<'PY' || fail "$kind: the mount's views"
import json, struct, sys, torch
mnt, src = sys.argv[1], sys.argv[2]
want = torch.arange(4, dtype=torch.float32) if src == "bin" else torch.tensor([1., 2., 3., 4.])
with open(mnt + "/tensors/a%09b", "rb") as f:
    got = f.read()
    assert got == want.numpy().tobytes(), f"tensors/a%09b: {got}"
sd = torch.load(mnt + "/pytorch_model.bin", weights_only=True)
assert "a\tb" in sd and torch.equal(sd["a\tb"], want), sorted(sd)
if src == "bin":
    assert "c\x7f" in sd and torch.equal(sd["c\x7f"], torch.ones(2)), sorted(sd)
with open(mnt + "/model.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    assert "a\tb" in h, sorted(h)
    o = h["a\tb"]["data_offsets"]
    f.seek(8 + n + o[0])
    assert f.read(o[1] - o[0]) == want.numpy().tobytes(), "model.safetensors bytes"
PY
	gfs_umount "$mnt" || fail "unmount $mnt"
	echo "ok - mount of $kind"
done

# One plain file given directly: listed and mounted as a plain source (ls
# says so, not "layout JSON").
for f in "$T/bin/pytorch_model.bin" "$T/st/model.safetensors"; do
	"$INSPECT" ls "$f" > "$T/ls" 2> "$T/err" || fail "ls $f: $(cat "$T/err")"
	grep -q '^a%09b ' "$T/ls" || fail "ls $f: $(cat "$T/ls")"
	grep -q "^gatherfs-inspect: $f: plain model file" "$T/err" || fail "ls $f says: $(cat "$T/err")"
	grep -q "layout JSON" "$T/err" && fail "ls $f says: $(cat "$T/err")"
	gfs_mount "$f" "$T/mnt-file" || fail "mount $f"
	[ -f "$T/mnt-file/pytorch_model.bin" ] && [ -f "$T/mnt-file/model.safetensors" ] ||
		fail "mount $f: $(ls "$T/mnt-file")"
	[ "$(od -An -tf4 "$T/mnt-file/tensors/a%09b" | wc -w)" -eq 4 ] || fail "mount $f: tensors/a%09b"
	gfs_umount "$T/mnt-file" || fail "unmount $T/mnt-file"
done
"$INSPECT" layout "$T/bin/pytorch_model.bin" > "$T/layout.json" || fail "layout of a file"
"$INSPECT" ls "$T/layout.json" 2>&1 > /dev/null | grep -q "layout JSON: plain model file" ||
	fail "ls of a layout JSON no longer says so"
echo "ok - one plain file"

# A NUL byte cannot be part of a name: one line naming the file and the key.
"$INSPECT" ls "$T/nulbin" > /dev/null 2> "$T/err" && fail "ls of a NUL key succeeded"
[ "$(wc -l < "$T/err")" -eq 1 ] || fail "NUL key: not one line: $(cat "$T/err")"
grep -q 'pytorch_model.bin: key 0 ("a%00b") holds a NUL byte' "$T/err" || fail "NUL key: $(cat "$T/err")"
expect_mount_fail 'model.safetensors: a string holds \\u0000' "$T/nulst" "$T/mnt"
echo "ok - NUL keys refused"
