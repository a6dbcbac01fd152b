#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Every DeepSpeed rank file is the file its name says.  In copies of real
# ZeRO-1, ZeRO-2, ZeRO-3 and BF16_Optimizer checkpoints, a rank file copied
# over another, renamed over another, two rank files swapped, and a rank
# file from a checkpoint of another world size: both the mount and
# `gatherfs-inspect verify` refuse with one line naming the file.  A zip
# whose folder is archive/ (torch.save to a file object) records no name:
# it mounts, with one note.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
U="$top_srcdir/tests/data/universal"
mkdir -p "$T/mnt"

# fresh CASE: a writable copy of CASE's tag directory at $T/ck.
fresh() {
	rm -rf "$T/ck"
	cp -r "$1/checkpoint/global_step3" "$T/ck" && chmod -R u+w "$T/ck" || fail "copy $1"
}

# refused PATTERN: the mount and verify of $T/ck fail with one line matching PATTERN.
refused() {
	expect_mount_fail "$1" "$T/ck" "$T/mnt"
	if timeout 120 "$INSPECT" verify "$T/ck" >"$T/out" 2>"$T/err"; then
		fail "verify accepted $T/ck ($1)"
	fi
	[ "$(wc -l < "$T/err")" -eq 1 ] || fail "verify: not one line: $(cat "$T/err")"
	grep -q -- "$1" "$T/err" || fail "verify: '$(cat "$T/err")' lacks '$1'"
}

# stage label, checkpoint, a checkpoint of another world size, file prefix
for c in "ZeRO-1 $CKPTS/z1_ws2_fp32 $U/z1_ws4_fp32 -" \
	"BF16_Optimizer $CKPTS/z1_ws2_bf16_bf16optimizer $U/z1_ws4_bf16opt bf16_" \
	"ZeRO-2 $CKPTS/z2_ws2_fp32_twotags $CKPTS/z2_ws3_fp32_roundrobin -" \
	"ZeRO-3 $CKPTS/z3_ws2_fp32 $U/z3_ws4_fp32_1group -"; do
	set -- $c
	what=$1 case=$2 other=$3 p=$4
	[ "$p" = - ] && p=
	o0="${p}zero_pp_rank_0_mp_rank_00_optim_states"
	o1="${p}zero_pp_rank_1_mp_rank_00_optim_states"
	o2="${p}zero_pp_rank_2_mp_rank_00_optim_states"
	[ -d "$case" ] && [ -d "$other" ] || skip "fixture $case or $other missing"
	echo "== $what"

	fresh "$case"
	timeout 120 "$INSPECT" verify "$T/ck" >/dev/null 2>&1 || fail "$what: the intact copy fails verify"

	# (a) rank 0 copied over rank 1
	cp "$T/ck/$o0.pt" "$T/ck/$o1.pt"
	refused "/$o1.pt: its zip folder is $o0/, not the file's own name: a copied or renamed rank file"

	# (b) rank 0 renamed over rank 1, then two ranks swapped
	fresh "$case"
	mv "$T/ck/$o0.pt" "$T/ck/$o1.pt"
	refused "/$o1.pt: its zip folder is $o0/"
	fresh "$case"
	mv "$T/ck/$o0.pt" "$T/ck/swap" && mv "$T/ck/$o1.pt" "$T/ck/$o0.pt" && mv "$T/ck/swap" "$T/ck/$o1.pt"
	refused "/$o0.pt: its zip folder is $o1/"

	# (c) a rank file of a checkpoint of another world size: over rank 1,
	# over rank 0, and one more rank
	ows=$(ls "$other/checkpoint/global_step3" | grep -c '_optim_states.pt$')
	fresh "$case"
	cp "$other/checkpoint/global_step3/$o1.pt" "$T/ck/$o1.pt"
	refused "/$o1.pt: its partition_count says world size $ows, but $o0.pt says 2"
	fresh "$case"
	cp "$other/checkpoint/global_step3/$o0.pt" "$T/ck/$o0.pt"
	refused "/$o0.pt: its partition_count says world size $ows, but $o1.pt says 2 (2 optimizer states files found)"
	fresh "$case"
	cp "$other/checkpoint/global_step3/$o2.pt" "$T/ck/$o2.pt"
	refused "/$o2.pt: its partition_count says world size $ows, but $o0.pt says 2 (3 optimizer states files found)"

	# the model states: copied (ZeRO-3, one per rank), from another world size
	fresh "$case"
	if [ "$what" = ZeRO-3 ]; then
		m0=zero_pp_rank_0_mp_rank_00_model_states m1=zero_pp_rank_1_mp_rank_00_model_states
		cp "$T/ck/$m0.pt" "$T/ck/$m1.pt"
		refused "/$m1.pt: its zip folder is $m0/"
		fresh "$case"
		cp "$T/ck/$m1.pt" "$T/ck/$m0.pt"
		refused "/$m0.pt: its zip folder is $m1/"
		fresh "$case"
		cp "$other/checkpoint/global_step3/$m0.pt" "$T/ck/$m0.pt"
		refused "/$m0.pt: dp_world_size is $ows, but the optimizer states files say 2"
	else
		cp "$other/checkpoint/global_step3/mp_rank_00_model_states.pt" "$T/ck/"
		refused "/mp_rank_00_model_states.pt: dp_world_size is $ows, but the optimizer states files say 2"
	fi
done

# ZeRO-3 without frozen params: the model states of ranks > 0 are not read,
# only their first zip record's name
echo "== ZeRO-3, no frozen params"
fresh "$CKPTS/z3_ws2_bf16"
m0=zero_pp_rank_0_mp_rank_00_model_states m1=zero_pp_rank_1_mp_rank_00_model_states
cp "$T/ck/$m0.pt" "$T/ck/$m1.pt"
refused "/$m1.pt: its zip folder is $m0/"

echo "== a zip folder archive/ (torch.save to a file object): no name to check"
fresh "$CKPTS/z1_ws2_fp32"
for f in "$T/ck/"*_optim_states.pt; do
	"$PYTHON3" - "$f" <<'EOF' || fail "rewrite $f"
import sys, zipfile
path = sys.argv[1]
with zipfile.ZipFile(path) as z:
    recs = [(i.filename.split("/", 1)[1], z.read(i)) for i in z.infolist()]
with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
    for name, data in recs:
        z.writestr("archive/" + name, data)
EOF
done
gfs_mount "$T/ck" "$T/mnt" 2>"$T/err" || fail "mount of archive/ zips: $(cat "$T/err")"
[ "$(grep -c 'note: 2 of the 3 rank files (.*_optim_states.pt, ...) have the zip folder archive/' "$T/err")" -eq 1 ] &&
	[ "$(wc -l < "$T/err")" -eq 1 ] || fail "want one note: $(cat "$T/err")"
check_cat "$T/mnt" "$CKPTS/z1_ws2_fp32/.expected-default.tsv"
gfs_umount "$T/mnt" || fail "unmount"
timeout 120 "$INSPECT" verify "$T/ck" >/dev/null 2>"$T/err" || fail "verify: $(cat "$T/err")"
[ "$(grep -c 'note: .*zip folder archive/' "$T/err")" -eq 1 ] || fail "verify: want one note: $(cat "$T/err")"
echo "PASS: rank files"
