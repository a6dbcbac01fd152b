#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# By hand, not in `make check` (Chromium is too heavy for CI):
#   tests/html-screenshot.sh [BUILDDIR]
# The --html pages of diff and stats render in headless Chromium (Debian's
# package) with every network name unresolvable: each screenshot is a PNG
# whose chart and table draw many non-white pixels.  The PNGs are left in
# ${OUT:-/var/tmp/gatherfs-html} to look at.
set -eu
top_srcdir=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:-$top_srcdir}" && pwd)
I="$B/gatherfs-inspect"
O=${OUT:-/var/tmp/gatherfs-html}
D="$top_srcdir/tests/data"
command -v chromium >/dev/null || { echo "SKIP: chromium not installed (apt-get install chromium)"; exit 77; }
mkdir -p "$O"
"$I" diff --html "$O/diff.html" --rtol 0.01 "$D/plain/llama_bf16" "$D/plain/llama_fp32" >/dev/null || :
"$I" diff --html "$O/same.html" "$D/megatron/moe_ep2/legacy_torch" \
	"$D/megatron/moe_ep2/training_torch_dist" >/dev/null 2>&1
"$I" stats --html "$O/stats.html" "$D/megatron/moe_ep2/legacy_torch" >/dev/null 2>&1
for p in diff same stats; do
	rm -f "$O/$p.png"
	timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
		--host-resolver-rules='MAP * ~NOTFOUND' --window-size=1000,1400 \
		--screenshot="$O/$p.png" "file://$O/$p.html" >/dev/null 2>&1 || :
	/usr/bin/python3 - "$O/$p.png" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, w = 8, b"", 0
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
        bpp = {2: 3, 6: 4}[ctype]
    elif kind == b"IDAT":
        idat += body
    pos += 12 + n
raw = zlib.decompress(idat)
stride = w * bpp + 1
# count the rows that are not a single colour (filters make exact pixel
# decoding long; a row of one colour filters to near-constant bytes)
busy = sum(1 for r in range(h) if len(set(raw[r * stride + 1:(r + 1) * stride])) > 4)
print(f"{sys.argv[1]}: {w}x{h}, {busy} rows with content")
assert busy > 200, "the page looks empty"
PY
done
echo "PASS: the pages render (see $O/*.png)"
