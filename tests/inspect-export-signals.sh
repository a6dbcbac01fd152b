#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# `gatherfs-inspect export` interrupted by SIGINT, SIGTERM or SIGHUP at
# several points (at once, inside the first file, between files, near the
# end), single file and sharded: the process dies of the signal, no
# temporary file is left, and the output directory holds nothing new — or,
# over a previous export, exactly that previous complete set.  Also: a failed
# export into a directory it created removes the directory.
. "${top_srcdir:-.}/tests/lib.sh"
[ -x "$PYTHON3" ] || skip "python3 not found"
mktempdir
T=$TESTTMP
SIGNAL="$PYTHON3 $top_srcdir/tests/tools/signal_export.py"

# A layout over a 256 MiB sparse source: four 64 MiB float32 tensors, big
# enough that an export takes a moment.
truncate -s 256M "$T/src.bin"
"$PYTHON3" - "$T/l.json" <<'PY' || fail "layout"
import json, sys
sz = 64 << 20
t = [{"name": "layer%d.weight" % i, "dtype": "float32", "shape": [sz // 4096, 1024],
      "pieces": [{"source": 0, "offset": i * sz, "length": sz}]} for i in range(4)]
json.dump({"gatherfs_layout": 1, "sources": [{"path": "src.bin", "size": 4 * sz}],
           "tensors": t}, open(sys.argv[1], "w"))
PY
MB=1048576

# listing DIR: everything under DIR (dot files too): directories by name,
# files with size and mtime.
listing() {
	(cd "$1" && find . -mindepth 1 \( -type d -printf '%p/\n' \) -o -printf '%p %s %T@\n' | sort)
}

# complete OUT: OUT is a complete export: a safetensors file whose header
# accounts for every byte, a torch zip whose central directory reads, or a
# directory whose index names shards that all are complete.
complete() {
	"$PYTHON3" - "$1" <<'PY'
import json, os, struct, sys, zipfile
def st_ok(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    end = max(v["data_offsets"][1] for k, v in h.items() if k != "__metadata__")
    return 8 + n + end == os.path.getsize(p)
def ok(p):
    return st_ok(p) if p.endswith(".safetensors") else zipfile.ZipFile(p).testzip() is None
out = sys.argv[1]
if os.path.isdir(out):
    idx = [n for n in os.listdir(out) if n.endswith(".index.json")]
    names = set(json.load(open(os.path.join(out, idx[0])))["weight_map"].values())
    sys.exit(0 if len(idx) == 1 and all(ok(os.path.join(out, n)) for n in names) else 1)
sys.exit(0 if ok(out) else 1)
PY
}

# interrupt [--late] DIR BYTES SIG ARGS... OUT: run `export ARGS OUT` under
# signal_export.py watching DIR; DIR must afterwards list exactly as before,
# hold no temporary file, and the process must have reported the
# interruption.  With --late (a point near the end, which a loaded machine
# may let the export pass before the signal lands) a complete new OUT is
# accepted too (and removed if it is new).
interrupt() {
	late=false
	[ "$1" = --late ] && late=true && shift
	dir=$1 bytes=$2 sig=$3
	shift 3
	for out; do :; done
	existed=false
	[ -e "$out" ] && existed=true
	listing "$dir" > "$T/before"
	$SIGNAL "$dir" "$bytes" "$sig" "$INSPECT" export --layout "$T/l.json" "$@" \
		>"$T/sig.out" 2>"$T/sig.err"
	rc=$?
	listing "$dir" > "$T/after"
	if $late && ! cmp -s "$T/before" "$T/after" &&
		! grep -q '/\.[^/]*\.[A-Za-z0-9]\{6\} ' "$T/after" && complete "$out"; then
		echo "ok: export $* $sig at $bytes bytes: came after the commit, complete set"
		$existed || rm -rf "$out"
		return
	fi
	[ $rc -eq 0 ] || fail "export $* ($sig at $bytes): $(cat "$T/sig.out" "$T/sig.err")"
	cmp -s "$T/before" "$T/after" ||
		fail "export $* left files after $sig at $bytes bytes: $(diff "$T/before" "$T/after")"
	[ "$bytes" -eq 0 ] || grep -q "export interrupted by SIG$sig" "$T/sig.err" ||
		fail "no interruption message: $(cat "$T/sig.err")"
	echo "ok: export $* $sig at $bytes bytes: $(cat "$T/sig.out")"
}

mkdir "$T/out"
# One file: the torch zip and safetensors.
interrupt "$T/out" 0 INT "$T/out/pytorch_model.bin"
interrupt "$T/out" $((10 * MB)) INT "$T/out/pytorch_model.bin"
interrupt --late "$T/out" $((200 * MB)) TERM "$T/out/pytorch_model.bin"
interrupt "$T/out" $((100 * MB)) HUP "$T/out/model.safetensors"
# Sharded into a new directory: it goes too.
interrupt "$T/out" 0 TERM --shard-size 70MB "$T/out/new"
interrupt "$T/out" $((30 * MB)) INT --shard-size 70MB "$T/out/new"
interrupt "$T/out" $((64 * MB + 200)) TERM --shard-size 70MB "$T/out/new"
interrupt "$T/out" $((150 * MB)) INT --shard-size 70MB --format bin "$T/out/new"
interrupt --late "$T/out" $((210 * MB)) TERM --shard-size 70MB "$T/out/new"

# Sharded over a previous complete export (two shards): it stays as it was.
"$INSPECT" export --layout "$T/l.json" --shard-size 140MB "$T/out/old" || fail "export old"
[ -f "$T/out/old/model-00002-of-00002.safetensors" ] || fail "old export: $(ls "$T/out/old")"
interrupt "$T/out" $((5 * MB)) INT --shard-size 70MB "$T/out/old"
interrupt "$T/out" $((130 * MB)) TERM --shard-size 70MB "$T/out/old"
interrupt --late "$T/out" $((200 * MB)) HUP --shard-size 70MB "$T/out/old"

# A signal during the renames (each rename slowed down by strace) takes
# effect once they are done: the process dies of it, and the directory holds
# the complete new set (the old shards, named otherwise, stay).
if command -v strace >/dev/null 2>&1 &&
	strace -f -o /dev/null -e trace=rename -e inject=rename:delay_enter=1000 true 2>/dev/null; then
	rm -f "$T/out/old"/model-0000?-of-00004.safetensors
	for sig in INT TERM; do
		$SIGNAL --child "$T/out" exists:old/model-00001-of-00004.safetensors $sig \
			strace -f -o /dev/null -e trace=rename -e inject=rename:delay_enter=300000 \
			"$INSPECT" export --layout "$T/l.json" --shard-size 70MB "$T/out/old" \
			>"$T/sig.out" 2>"$T/sig.err" || fail "$sig during the renames: $(cat "$T/sig.out" "$T/sig.err")"
		"$PYTHON3" - "$T/out/old" <<'PY' || fail "$sig during the renames: incomplete set: $(ls -A "$T/out/old")"
import json, os, sys
d = sys.argv[1]
index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
names = sorted(set(index["weight_map"].values()))
assert names == ["model-%05d-of-00004.safetensors" % i for i in range(1, 5)], names
assert all(os.path.getsize(os.path.join(d, n)) > 64 << 20 for n in names)
assert not [n for n in os.listdir(d) if n.startswith(".")], os.listdir(d)
PY
		grep -q "interrupted" "$T/sig.err" && fail "$sig after the renames reported an interruption"
		echo "ok: $sig during the renames: complete set, then died of it"
		rm -f "$T/out/old"/model-0000?-of-00004.safetensors
	done
else
	echo "note: no strace with fault injection: signals during the renames not tested"
fi

# Uninterrupted, it replaces the index and adds the new shards.
"$INSPECT" export --layout "$T/l.json" --shard-size 70MB "$T/out/old" || fail "export over old"
grep -q model-00004-of-00004 "$T/out/old/model.safetensors.index.json" || fail "new index"
ls -A "$T/out/old" | grep -q '^\.' && fail "temporary files left: $(ls -A "$T/out/old")"

# A failed sharded export (a source that is too short) removes the directory it made.
truncate -s 200M "$T/src.bin"
if "$INSPECT" export --layout "$T/l.json" --shard-size 70MB "$T/out/failed" 2>"$T/err"; then
	fail "export from a short source succeeded"
fi
[ -e "$T/out/failed" ] && fail "a failed export left its directory: $(ls -A "$T/out/failed")"
echo "ok: failed export: $(cat "$T/err")"
echo "PASS: export under signals"
