#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The safetensors and Hugging Face sharded views, and gatherfs-inspect
# export: for every fixture, the sharded views pass check_shards.py, and
# every exported file (single bin and safetensors, default and bf16, and
# every shard and index) is byte-identical to the mounted file of the same
# view.  An export from a checkpoint with a truncated shard fails and leaves
# nothing behind.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
SHARD=100K

ncases=0
for case in "$CKPTS"/*/; do
	case=${case%/}
	name=$(basename "$case")
	[ -d "$case/checkpoint" ] || continue
	for mode in default bf16; do
		opt= dt=
		[ $mode = bf16 ] && opt="-o dtype=bf16" && dt="--dtype bf16"
		echo "== $name ($mode)"
		mnt="$T/mnt"
		out="$T/out"
		rm -rf "$out" && mkdir -p "$out"
		# single files
		# shellcheck disable=SC2086
		gfs_mount "$case/checkpoint" "$mnt" $opt || fail "mount $name"
		for f in pytorch_model.bin model.safetensors; do
			# shellcheck disable=SC2086
			"$INSPECT" export $dt "$case/checkpoint" "$out/$f" || fail "export $f"
			cmp "$out/$f" "$mnt/$f" || fail "$name ($mode): exported $f differs from the mount"
		done
		gfs_umount "$mnt" || fail "unmount"
		# sharded views
		# shellcheck disable=SC2086
		gfs_mount "$case/checkpoint" "$mnt" -o shard_size=$SHARD $opt || fail "mount $name sharded"
		[ ! -e "$mnt/pytorch_model.bin" ] && [ ! -e "$mnt/model.safetensors" ] ||
			fail "sharded view still shows single files"
		"$PYTHON3" "$top_srcdir/tests/tools/check_shards.py" "$mnt" "$case/.expected-$mode.tsv" ||
			fail "$name ($mode): sharded views"
		for fmt in safetensors bin; do
			# shellcheck disable=SC2086
			"$INSPECT" export $dt --shard-size $SHARD --format $fmt "$case/checkpoint" "$out/sh-$fmt" ||
				fail "export shards $fmt"
			for f in "$out/sh-$fmt"/*; do
				cmp "$f" "$mnt/$(basename "$f")" ||
					fail "$name ($mode): exported $(basename "$f") differs from the mount"
			done
		done
		# (and config.json beside them, compared with the mount's above)
		n_st=$(ls "$out/sh-safetensors" | grep -c -e '^model' -e '^pytorch_model')
		n_bin=$(ls "$out/sh-bin" | grep -c -e '^model' -e '^pytorch_model')
		n_mnt=$(ls "$mnt" | grep -c -e '^model' -e '^pytorch_model')
		[ $((n_st + n_bin)) -eq "$n_mnt" ] || fail "export wrote $n_st + $n_bin files, the mount shows $n_mnt"
		gfs_umount "$mnt" || fail "unmount"
	done
	ncases=$((ncases + 1))
done
[ $ncases -gt 0 ] || fail "no fixtures"

# A truncated shard: export fails with one line and leaves no file at all.
cp -r "$CKPTS/z3_ws2_fp32/checkpoint" "$T/broken"
chmod -R u+w "$T/broken"
f="$T/broken/global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt"
truncate -s 300000 "$f"
mkdir -p "$T/empty"
if "$INSPECT" export "$T/broken" "$T/empty/model.safetensors" 2>"$T/err"; then
	fail "export of a truncated checkpoint succeeded"
fi
[ "$(wc -l < "$T/err")" -eq 1 ] || fail "want one error line, got: $(cat "$T/err")"
grep -q zero_pp_rank_1_mp_rank_00_optim_states.pt "$T/err" || fail "error does not name the file"
[ -z "$(ls -A "$T/empty")" ] || fail "export left files behind: $(ls -A "$T/empty")"
echo "ok: truncated shard: $(cat "$T/err")"

# A source that changes size between import and export: nothing written.
"$INSPECT" layout "$CKPTS/z3_ws2_fp32/checkpoint" > "$T/layout.json"
sed "s|$CKPTS/z3_ws2_fp32/checkpoint|$T/broken|g" "$T/layout.json" > "$T/broken.json"
if "$INSPECT" export --layout "$T/broken.json" "$T/empty/pytorch_model.bin" 2>"$T/err"; then
	fail "export from a changed source succeeded"
fi
[ -z "$(ls -A "$T/empty")" ] || fail "export left files behind: $(ls -A "$T/empty")"
echo "ok: changed source: $(cat "$T/err")"
echo "views: $ncases fixtures OK"
