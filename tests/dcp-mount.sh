#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Mount every PyTorch DCP fixture (tests/data/dcp), without a dtype option
# and with -o dtype=bf16, and check pytorch_model.bin (torch.load),
# model.safetensors and every tensors/ file against the expected tables;
# concurrent random reads (across zstd frames and strided runs) against a
# sequential read, also with the shared zstd frame cache off; two entries
# sharing one TensorStorageMetadata; -o format= and -o prefix=; broken copies fail at mount
# time with one line and leave no mount; a chunk archive broken where only
# opening it can tell fails the first read of its tensor (EIO, one log
# line), only the reads that need its bytes, and -o verify=mount.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
DCP="$top_srcdir/tests/data/dcp"
TAB=$(printf '\t')

ncases=0
for case in "$DCP"/*/; do
	case=${case%/}
	[ -d "$case/checkpoint" ] || continue
	for mode in default bf16; do
		mnt="$T/mnt-$(basename "$case")-$mode"
		opt=
		[ $mode = bf16 ] && opt="-o dtype=bf16"
		echo "== $(basename "$case") ($mode)"
		# shellcheck disable=SC2086
		gfs_mount "$case/checkpoint" "$mnt" $opt || fail "mount $case ($mode)"
		check_views "$mnt" "$case/.expected-$mode.tsv" "$case/checkpoint"
		if [ $mode = default ]; then
			timeout 300 "$PYTHON3" "$MOUNT_TOOLS/concurrent_reads.py" "$mnt/pytorch_model.bin" \
				"$mnt/model.safetensors" "$mnt/tensors/model.embed_tokens.weight" \
				"$mnt/tensors/model.layers.0.mlp.down_proj.weight" ||
				fail "concurrent reads $(basename "$case")"
		fi
		gfs_umount "$mnt" || fail "unmount $mnt"
	done
	ncases=$((ncases + 1))
done
[ $ncases -eq 3 ] || fail "expected 3 DCP fixtures in $DCP, found $ncases"

# Two entries naming one TensorStorageMetadata object (a memo reference in
# the pickle; tests/tools/make_shared_tsm.py): the second looks up its own
# storage items, and every view is fsdp2_ws2's.
mkdir "$T/shared-tsm"
cp -R "$DCP/fsdp2_ws2/checkpoint" "$T/shared-tsm/"
chmod -R u+w "$T/shared-tsm"
cp "$DCP/fsdp2_ws2-shared-tsm.metadata" "$T/shared-tsm/checkpoint/.metadata"
mnt="$T/mnt-shared-tsm"
gfs_mount "$T/shared-tsm/checkpoint" "$mnt" || fail "mount shared-tsm"
check_views "$mnt" "$DCP/fsdp2_ws2/.expected-default.tsv" "$T/shared-tsm/checkpoint"
gfs_umount "$mnt" || fail "unmount $mnt"
echo "ok: two entries sharing one TensorStorageMetadata"

# The zstd case with the shared frame cache off: per-thread streams only.
mnt="$T/mnt-zstd-stream"
GATHERFS_ZSTD_CACHE_MB=0 gfs_mount "$DCP/fsdp2_ws2_zstd/checkpoint" "$mnt" || fail "mount zstd, no cache"
timeout 300 "$PYTHON3" "$MOUNT_TOOLS/concurrent_reads.py" "$mnt/pytorch_model.bin" \
	"$mnt/tensors/model.embed_tokens.weight" "$mnt/tensors/lm_head.weight" ||
	fail "concurrent reads, zstd streamed"
check_cat "$mnt" "$DCP/fsdp2_ws2_zstd/.expected-default.tsv"
gfs_umount "$mnt" || fail "unmount $mnt"
echo "ok: zstd streamed (GATHERFS_ZSTD_CACHE_MB=0)"

# -o format=dcp -o prefix=model.: names without the prefix, lm_head dropped.
mnt="$T/mnt-prefix"
gfs_mount "$DCP/shard1_ws3/checkpoint" "$mnt" -o format=dcp -o prefix=model. || fail "mount -o prefix"
[ -f "$mnt/tensors/norm.weight" ] || fail "-o prefix: tensors/norm.weight missing"
[ -e "$mnt/tensors/lm_head.weight" ] && fail "-o prefix: lm_head.weight present"
want=$(grep "^model.norm.weight$TAB" "$DCP/shard1_ws3/.expected-default.tsv" | cut -f4)
got=$(sha256sum < "$mnt/tensors/norm.weight" | cut -d' ' -f1)
[ "$got" = "$want" ] || fail "-o prefix: norm.weight sha256 $got, want $want"
gfs_umount "$mnt" || fail "unmount $mnt"
echo "ok: -o format=dcp -o prefix=model."

# Broken copies fail at mount time: one line, no mount left.
mkdir -p "$T/mnt"
for spec in missing:fsdp2_ws2:cannot.open truncated:shard1_ws3:lies.past.its.end \
	zstd-corrupt:fsdp2_ws2_zstd:zstd.frame gap:fsdp2_ws2:do.not.tile \
	overlap:fsdp2_ws2:overlap dupitem:fsdp2_ws2:twice.at.one.offset; do
	m=${spec%%:*} rest=${spec#*:}
	c=${rest%%:*} pat=${rest#*:}
	"$PYTHON3" "$top_srcdir/tests/tools/make_bad_dcp.py" "$DCP/$c/checkpoint" "$T/bad-$m" "$m" ||
		fail "make_bad_dcp.py $m"
	expect_mount_fail "$pat" "$T/bad-$m" "$T/mnt"
done
expect_mount_fail "not a DeepSpeed ZeRO checkpoint" -o format=deepspeed "$DCP/fsdp2_ws2/checkpoint" "$T/mnt"

# Lazy chunks: an archive the mount does not open (the last of __1_0.distcp,
# lm_head.weight's) broken after the mount-time checks would pass: the
# mount succeeds, the first read of its tensor fails with EIO and one log
# line naming the file and the problem, other tensors read; with -o
# verify=off too; -o verify=mount opens every archive and refuses it.
for spec in "lazy-eocd:not a zip archive" "lazy-size:chunk bytes lie outside its storage record"; do
	m=${spec%%:*} pat=${spec#*:}
	"$PYTHON3" "$top_srcdir/tests/tools/make_bad_dcp.py" "$DCP/fsdp2_ws2/checkpoint" "$T/bad-$m" "$m" ||
		fail "make_bad_dcp.py $m"
	line="__1_0.distcp: chunk archive at offset [0-9]*: $pat"
	for vopt in read off; do
		mnt="$T/mnt-$m-$vopt"
		gfs_mount_fg "$T/bad-$m" "$mnt" -o verify=$vopt 2>"$T/$m.log" ||
			fail "mount $m (verify=$vopt): $(cat "$T/$m.log")"
		want=$(grep "^model.norm.weight$TAB" "$DCP/fsdp2_ws2/.expected-default.tsv" | cut -f4)
		got=$(timeout 60 cat "$mnt/tensors/model.norm.weight" | sha256sum | cut -d' ' -f1)
		[ "$got" = "$want" ] || fail "$m: model.norm.weight sha256 $got, want $want"
		cat_fails_eio "$mnt/tensors/lm_head.weight"
		gfs_umount "$mnt" || fail "unmount $mnt"
		# one line a failed read request, each naming the file and the problem
		[ "$(grep -c "$line" "$T/$m.log")" -ge 1 ] &&
			! grep -v -e "$line" -e "-o verify=off: source bytes are served" "$T/$m.log" ||
			fail "$m (verify=$vopt): log is not lines of '$line': $(cat "$T/$m.log")"
		echo "ok: $m (verify=$vopt): first read EIO: $(grep -m1 "$line" "$T/$m.log")"
	done
	expect_mount_fail "$line" "$T/bad-$m" "$T/mnt" -o verify=mount
done

# One broken archive among a tensor's chunks fails only the reads that need
# its bytes: lm_head.weight's first half (rank 0's chunk) reads and is
# right, its second half (the broken archive's) fails with EIO and a log
# line naming the file, then so does a read of the whole tensor.  Direct
# I/O, so that each read asks for exactly its bytes.
half=65536 # lm_head.weight: [512, 64] float32, two chunks of 256 rows
truth_bytes "$DCP/fsdp2_ws2/.expected-default.tsv" "$DCP/fsdp2_ws2/checkpoint" lm_head.weight "$T/lm_head"
want=$(head -c $half "$T/lm_head" | sha256sum | cut -d' ' -f1)
mnt="$T/mnt-one-bad"
gfs_mount_fg "$T/bad-lazy-eocd" "$mnt" -o tensors_direct 2>"$T/one-bad.log" || fail "mount one-bad"
got=$(timeout 60 dd if="$mnt/tensors/lm_head.weight" bs=$half count=1 status=none | sha256sum |
	cut -d' ' -f1)
[ "$got" = "$want" ] || fail "one-bad: lm_head.weight's first chunk: sha256 $got, want $want"
if timeout 60 dd if="$mnt/tensors/lm_head.weight" bs=$half skip=1 count=1 of=/dev/null \
	status=none 2>"$T/dd.err"; then
	fail "one-bad: the broken chunk's bytes read without an error"
fi
grep -q "Input/output error" "$T/dd.err" || fail "one-bad: $(cat "$T/dd.err")"
cat_fails_eio "$mnt/tensors/lm_head.weight"
gfs_umount "$mnt" || fail "unmount $mnt"
grep -q "__1_0.distcp: chunk archive at offset [0-9]*: not a zip archive" "$T/one-bad.log" ||
	fail "one-bad: no log line naming the file: $(cat "$T/one-bad.log")"
echo "ok: one broken chunk fails only the reads of its bytes"
echo "PASS: $ncases DCP fixtures, default and bf16"
