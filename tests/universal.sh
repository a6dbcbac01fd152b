#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Optimizer state and the DeepSpeed universal checkpoint view (issue 15), on
# real DeepSpeed 0.14.5 checkpoints (tests/data/universal: ZeRO-1 fp32,
# ZeRO-2 bf16, BF16_Optimizer, ZeRO-3 one group at 2 and at 4 ranks (where
# ds_to_universal pads 1-element params to 3), ZeRO-2 OtherLM with a 0-d
# param (where ds_to_universal crashes)) and DeepSpeed 0.19.5 ones (ZeRO-3
# with two param groups, fp32 at 2 ranks and bf16 at 3, with 0.19.5's own
# ds_to_universal output: same tensors, tensor bytes and pickled structure);
#   - python/gatherfs_resume.py's restore_param_groups() mends, on a
#     stand-in engine (DeepSpeed is absent), what DeepSpeed's ZeRO-3 loader
#     leaves (group 0's hyperparameters everywhere, one shared step tensor);
#   - every file of the mounted <tag>_universal/ decodes with torch.load to
#     what universal_expected.json says (check_universal.py), and the optim/
#     files hold the same bytes; gatherfs-inspect ls --optim / cat --optim
#     agree; -o dtype=bf16 leaves the universal files fp32;
#   - the layout JSON round trip keeps the optimizer state;
#   - DeepSpeed's own ds_to_universal output in the checkpoint dir is hidden
#     behind the view, with a log line, and decodes to the same values;
#   - -o views= leaves the views out;
#   - what DeepSpeed's loader maps to the wrong bytes (round-robin) gets no
#     universal view and one line saying why; ZeRO-3 with several param
#     groups or sub-groups gets the view and one line (DeepSpeed >= 0.18);
#   - corrupted optimizer state (a missing state, a partition of the wrong
#     size) is refused with one line naming the file.
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/mount-lib.sh"
mount_setup
U="$top_srcdir/tests/data/universal"
CHECK="$top_srcdir/tests/tools/check_universal.py"
mnt="$T/mnt"

for case in z1_ws4_fp32 z2_ws4_bf16 z1_ws4_bf16opt z3_ws2_fp32_1group z3_ws4_fp32_1group \
	other_z2_ws4_fp32 z3_ws2_2groups_fp32 z3_ws3_2groups_bf16; do
	echo "== $case"
	ck="$U/$case/checkpoint"
	real=
	[ -d "$ck/global_step3_universal" ] && real="--real $ck/global_step3_universal"
	gfs_mount "$ck" "$mnt" 2>"$T/log" || fail "mount $case"
	case $case in *2groups*)
		grep -q "universal view of ZeRO-3 with 2 param groups in 2 sub-groups: DeepSpeed >= 0.18 loads it" \
			"$T/log" || fail "$case: no note: $(cat "$T/log")"
		# restore_param_groups() on a stand-in engine (no DeepSpeed here), from the mount
		"$PYTHON3" "$top_srcdir/tests/tools/resume_helper_test.py" \
			"$top_srcdir/python/gatherfs_resume.py" "$mnt" global_step3_universal ||
			fail "$case: gatherfs_resume.py";;
	z2_ws4_bf16)
		"$PYTHON3" "$top_srcdir/tests/tools/resume_helper_test.py" \
			"$top_srcdir/python/gatherfs_resume.py" --noop "$mnt" ||
			fail "$case: gatherfs_resume.py is not a no-op";;
	esac
	# shellcheck disable=SC2086
	"$PYTHON3" "$CHECK" "$mnt" "$U/$case" $real || fail "$case: universal view"
	if [ -n "$real" ]; then
		grep -q "latest_universal: hidden behind the universal view" "$T/log" &&
			grep -q "global_step3_universal: hidden behind the universal view" "$T/log" ||
			fail "$case: no log line for the hidden ds_to_universal output: $(cat "$T/log")"
	fi
	# inspect agrees with the mount, byte for byte
	nparams=$(ls "$mnt/global_step3_universal/zero" | grep -vc '^optimizer_state.pt$')
	"$INSPECT" ls --optim "$ck" > "$T/ls" || fail "ls --optim"
	[ "$(grep -c '^exp_avg ' "$T/ls")" -eq "$nparams" ] && [ "$(grep -c '^step ' "$T/ls")" -eq "$nparams" ] ||
		fail "$case: ls --optim: $(head -3 "$T/ls")"
	"$INSPECT" ls --optim --json "$ck" | grep -q '"state":[[:space:]]*"exp_avg_sq"' || fail "ls --optim --json"
	p=$(sed -n '2s/^[^ ]* *\([^ ]*\) .*/\1/p' "$T/ls")
	for s in exp_avg exp_avg_sq step; do
		"$INSPECT" cat --optim=$s "$ck" "$p" | cmp - "$mnt/optim/$s/$p" ||
			fail "$case: cat --optim=$s differs from optim/$s/$p"
	done
	"$INSPECT" cat --optim=nope "$ck" "$p" 2>"$T/err" && fail "cat of an unknown state"
	grep -q "no optimizer state nope of '$p'" "$T/err" || fail "cat --optim=nope: $(cat "$T/err")"
	gfs_umount "$mnt" || fail "unmount"
	# the layout JSON round trip keeps the optimizer state: same universal view
	"$INSPECT" layout "$ck" > "$T/layout.json" || fail "layout"
	"$INSPECT" layout --layout "$T/layout.json" | cmp - "$T/layout.json" || fail "$case: JSON round trip"
	gfs_mount "$T/layout.json" "$mnt" 2>/dev/null || fail "mount the layout JSON"
	"$PYTHON3" "$CHECK" "$mnt" "$U/$case" || fail "$case: universal view of the layout JSON"
	gfs_umount "$mnt" || fail "unmount"
	# -o dtype=bf16: optim/ follows it, the universal files stay fp32
	gfs_mount "$ck" "$mnt" -o dtype=bf16 2>/dev/null || fail "mount -o dtype=bf16"
	"$PYTHON3" - "$mnt" "$p" <<-'EOF' || fail "$case: universal files under -o dtype=bf16"
	import os, sys, torch
	z = os.path.join(sys.argv[1], "global_step3_universal", "zero", sys.argv[2])
	for f in ("fp32.pt", "exp_avg.pt"):
	    o = torch.load(os.path.join(z, f))
	    t = o["param"] if isinstance(o, dict) else o
	    assert t.dtype == torch.float32, (f, t.dtype)
	    n = t.numel()
	b = os.path.getsize(os.path.join(sys.argv[1], "optim", "exp_avg", sys.argv[2]))
	assert b == 2 * n, ("optim/ does not follow -o dtype=bf16", b, n)
	EOF
	gfs_umount "$mnt" || fail "unmount"
done

echo "== -o views="
ck="$U/z1_ws4_fp32/checkpoint"
gfs_mount "$ck" "$mnt" -o views=bin+tensors 2>/dev/null || fail "mount views=bin+tensors"
# without the view, the checkpoint's own latest_universal is passed through
[ ! -e "$mnt/optim" ] && [ ! -e "$mnt/global_step3_universal" ] &&
	cmp "$mnt/latest_universal" "$ck/latest_universal" ||
	fail "views=bin+tensors still shows optim/ or the universal view"
gfs_umount "$mnt" || fail "unmount"
gfs_mount "$ck" "$mnt" -o views=universal 2>/dev/null || fail "mount views=universal"
[ "$(ls "$mnt" | tr '\n' ' ')" = "global_step3_universal latest_universal " ] ||
	fail "views=universal: $(ls "$mnt")"
gfs_umount "$mnt" || fail "unmount"
gfs_mount "$ck" "$mnt" -o views=optim 2>/dev/null || fail "mount views=optim"
[ -f "$mnt/optim/exp_avg.safetensors" ] && [ ! -e "$mnt/global_step3_universal" ] || fail "views=optim"
gfs_umount "$mnt" || fail "unmount"

echo "== refused: what DeepSpeed's universal loader maps to the wrong bytes"
for c in z2_ws3_fp32_roundrobin:round_robin_gradients; do
	gfs_mount "$CKPTS/${c%%:*}/checkpoint" "$mnt" 2>"$T/log" || fail "mount ${c%%:*}"
	[ "$(wc -l < "$T/log")" -eq 1 ] && grep -q "no DeepSpeed universal checkpoint view: .*${c#*:}" "$T/log" ||
		fail "${c%%:*}: $(cat "$T/log")"
	[ ! -e "$mnt/latest_universal" ] && [ -f "$mnt/optim/exp_avg.safetensors" ] ||
		fail "${c%%:*}: universal view served, or optim/ missing"
	echo "ok: $(cat "$T/log")"
	gfs_umount "$mnt" || fail "unmount"
done

echo "== ZeRO-3 with several param groups or sub-groups (DeepSpeed 0.14.5): served, one note"
for c in z3_ws2_fp32:"2 param groups in 2 sub-groups" z3_ws3_fp32_subgroups:"2 param groups in 3 sub-groups"; do
	gfs_mount "$CKPTS/${c%%:*}/checkpoint" "$mnt" 2>"$T/log" || fail "mount ${c%%:*}"
	[ "$(wc -l < "$T/log")" -eq 1 ] &&
		grep -q "universal view of ZeRO-3 with ${c#*:}: DeepSpeed >= 0.18 loads it" "$T/log" ||
		fail "${c%%:*}: $(cat "$T/log")"
	"$PYTHON3" - "$mnt" "$CKPTS/${c%%:*}/checkpoint/global_step3" <<-'EOF' || fail "${c%%:*}: universal view"
	import os, sys, torch
	sys.path.insert(0, os.path.join(os.environ["top_srcdir"], "tests", "tools"))
	from check_universal import load_any, plain_groups
	u = os.path.join(sys.argv[1], "global_step3_universal", "zero")
	opt = torch.load(os.path.join(u, "optimizer_state.pt"))["optimizer_state_dict"]
	ranks = sorted(f for f in os.listdir(sys.argv[2]) if f.endswith("optim_states.pt"))
	r = [load_any(os.path.join(sys.argv[2], f))["optimizer_state_dict"] for f in ranks]
	base = r[0]["optimizer_state_dict"]
	assert plain_groups(opt["param_groups"]) == plain_groups(base["param_groups"]), opt["param_groups"]
	assert [g["weight_decay"] for g in opt["param_groups"]] == [0.1, 0.0]
	assert float(opt["state"][0]["step"]) == float(base["state"][0]["step"])
	# every param's fp32 file is the concatenation of its partitions, sub-group by sub-group
	names = sorted(d for d in os.listdir(u) if d != "optimizer_state.pt")
	n = sum(torch.load(os.path.join(u, d, "fp32.pt")).numel() for d in names)
	flat = sum(int(t.numel()) for t in r[0]["fp32_flat_groups"]) * len(r)
	assert n <= flat and flat - n < 64 * len(names) * len(r), (n, flat)
	print("ok:", len(names), "params,", len(opt["param_groups"]), "groups")
	EOF
	gfs_umount "$mnt" || fail "unmount"
done

echo "== refused: corrupted optimizer state"
for k in missing:"optimizer state exp_avg_sq of flat group 0 is missing" \
	short:"optimizer state exp_avg of flat group 0 has 30425 elements" \
	long:"optimizer state exp_avg_sq of flat group 0 has 30430 elements"; do
	rm -rf "$T/bad" && mkdir -p "$T/bad"
	cp -r "$U/z1_ws4_bf16opt/checkpoint/global_step3" "$T/bad/" && chmod -R u+w "$T/bad"
	"$PYTHON3" "$top_srcdir/tests/tools/make_bad_optim.py" "$T/bad/global_step3" "${k%%:*}" >/dev/null ||
		fail "make_bad_optim.py ${k%%:*}"
	expect_mount_fail "_optim_states.pt: ${k#*:}" "$T/bad/global_step3" "$mnt"
	"$INSPECT" ls --optim "$T/bad/global_step3" >/dev/null 2>&1 && fail "inspect accepted ${k%%:*}"
done
rm -rf "$T/bad" && mkdir -p "$T/bad"
cp -r "$U/z3_ws2_fp32_1group/checkpoint/global_step3" "$T/bad/" && chmod -R u+w "$T/bad"
"$PYTHON3" "$top_srcdir/tests/tools/make_bad_optim.py" "$T/bad/global_step3" short >/dev/null ||
	fail "make_bad_optim.py ZeRO-3"
expect_mount_fail "zero_pp_rank_1_mp_rank_00_optim_states.pt: optimizer state exp_avg of flat group 0 has" \
	"$T/bad/global_step3" "$mnt"
echo "PASS"
