#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Every gatherfs-inspect option either works or is refused (exit 2, one
# line), per command, as the man page's synopsis says
# (tests/tools/check_options.py).
. "${top_srcdir:-.}/tests/lib.sh"
[ -x "$PYTHON3" ] || skip "python3 not found"
C="$CKPTS/z3_ws2_fp32/checkpoint"
[ -d "$C" ] || skip "fixture $C missing"
mktempdir

# ls --optim honours --dtype as cat --optim does: every entry's dtype and
# size, and the size of what cat writes.
for dt in bf16 fp16 fp32; do
	"$INSPECT" ls --optim --json --dtype $dt "$C" > "$TESTTMP/optim.json" 2>/dev/null ||
		fail "ls --optim --dtype $dt"
	"$PYTHON3" - "$TESTTMP/optim.json" $dt > "$TESTTMP/optim.tsv" <<'PY' || fail "ls --optim --dtype $dt: wrong dtypes"
import json, sys
want = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[sys.argv[2]]
size = {"bf16": 2, "fp16": 2, "fp32": 4}[sys.argv[2]]
es = json.load(open(sys.argv[1]))
assert es
for e in es:
    n = 1
    for d in e["shape"]:
        n *= d
    assert e["dtype"] == want and e["nbytes"] == n * size, e
    print(f'{e["state"]}\t{e["name"]}\t{e["nbytes"]}')
PY
	"$INSPECT" ls --optim --dtype $dt "$C" 2>/dev/null | awk 'NR > 1 { print $3 }' | sort -u > "$TESTTMP/dtypes"
	case $dt in bf16) w=bfloat16 ;; fp16) w=float16 ;; *) w=float32 ;; esac
	[ "$(cat "$TESTTMP/dtypes")" = "$w" ] || fail "ls --optim --dtype $dt lists $(cat "$TESTTMP/dtypes")"
	head -3 "$TESTTMP/optim.tsv" | while IFS="$(printf '\t')" read -r st name n; do
		got=$("$INSPECT" cat --optim="$st" --dtype $dt "$C" "$name" | wc -c)
		[ "$got" -eq "$n" ] || fail "cat --optim=$st --dtype $dt $name: $got bytes, ls says $n"
	done || exit 1
done
echo "ok - ls --optim --dtype"
exec "$PYTHON3" "$top_srcdir/tests/tools/check_options.py" "$INSPECT" \
	"$top_srcdir/man/gatherfs-inspect.1" "$C" "$TESTTMP"
