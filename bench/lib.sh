# SPDX-License-Identifier: Apache-2.0
# bench/lib.sh: sourced by the bench scripts (POSIX sh).
#
# bench_workdir: W, a new temporary directory with the mount point W/m;
# on exit the mount there is undone (if any), the daemon $pid waited for
# (if the script set one) and W removed.
bench_workdir() {
	W=$(mktemp -d "${TMPDIR:-/tmp}/gatherfs-bench.XXXXXX")
	trap bench_cleanup EXIT
	mkdir "$W/m"
}

bench_cleanup() {
	timeout 10 fusermount3 -u "$W/m" 2>/dev/null || true
	[ -z "${pid:-}" ] || wait "$pid" 2>/dev/null || true
	rm -rf "$W"
}

# bench_ckpt [CKPT]: C, the checkpoint CKPT, or (none given) the ZeRO-3
# checkpoint of the integrity benchmarks (2 ranks, 8 layers, hidden 1024:
# 1.8 GB of shards), written once by gen_deepspeed.py under
# /var/tmp/gatherfs-bench/integrity.  Needs $here, the bench directory.
bench_ckpt() {
	C=${1:-/var/tmp/gatherfs-bench/integrity}
	if [ -z "${1:-}" ] && [ ! -e "$C/.gen-done" ]; then
		/usr/bin/python3 "$here/gen_deepspeed.py" "$C" --stage 3 --ws 2 --layers 8 \
			--hidden 1024 >/dev/null
	fi
}

# bench_setup [CKPT]: bench_ckpt CKPT, bench_workdir, and shards, the
# checkpoint's *.pt files (sorted): the preamble of the ZeRO-3 benchmarks.
bench_setup() {
	bench_ckpt "${1:-}"
	bench_workdir
	shards=$(find "$C/" -name '*.pt' | sort)
}

# bench_ab ROUNDS [CKPT [BUILD_B [BUILD_A [N]]]]: the arguments of an A/B
# benchmark: B and A, the build directories (absolute; A empty when not
# given), rounds (N, default ROUNDS), then bench_setup CKPT.
bench_ab() {
	rounds=${5:-$1}
	B=$(cd "${3:-.}" && pwd)
	A=${4:+$(cd "$4" && pwd)}
	bench_setup "${2:-}"
}

# bench_drop FILE...: the files' clean pages dropped from the page cache (a
# sparse file's: the zeros its holes were read as), so that the next read of
# them is cold, not a copy from memory.
bench_drop() { for _bd_f in "$@"; do dd if="$_bd_f" iflag=nocache count=0 status=none; done; }

# bench_first_read LABEL [GIB]: the rows of the first-read benchmarks
# (megatron.sh, ds-pipeline.sh, verl.sh) of checkpoint C, whose source files
# are $shards (LABEL names their kind): mount time (median of 3 fresh mounts,
# until MNT/model.safetensors can be stat'ed), the daemon's RSS after mount
# and its peak after the read, one mount with the files' pages dropped
# first (cold: every header read from storage), the first GIB GiB (default: all) of
# MNT/model.safetensors read with dd bs=1M from a fresh mount, and
# bench/preadall.py 8 over as many of the shards' first bytes (with GIB;
# all of them without), both cold (bench_drop); then the ratio of the two.
# With BENCH_SHARD_SIZE (e.g. 5G) the view is the Hugging Face shards
# (-o shard_size=BENCH_SHARD_SIZE: model.safetensors.index.json and its
# model-NNNNN-of-NNNNN.safetensors, what vLLM and transformers open), read
# shard after shard in the index's order.
# Needs B, C, here, shards and W (bench_workdir).
bench_first_read() {
	_bf_opts=${BENCH_SHARD_SIZE:+-o shard_size=$BENCH_SHARD_SIZE}
	_bf_head=model.safetensors
	[ -z "${BENCH_SHARD_SIZE:-}" ] || _bf_head=model.safetensors.index.json
	mounts=""
	for _bf_i in 1 2 3; do
		s=$(bench_now)
		"$B/gatherfs" $_bf_opts "$C" "$W/m" 2>/dev/null
		timeout 600 stat "$W/m/$_bf_head" >/dev/null
		e=$(bench_now)
		mounts="$mounts $(echo "$e - $s" | bc)"
		timeout 10 fusermount3 -u "$W/m"
	done
	mt=$(echo $mounts | tr ' ' '\n' | sort -n | sed -n 2p)
	bench_drop $shards
	s=$(bench_now)
	"$B/gatherfs" $_bf_opts "$C" "$W/m" 2>/dev/null
	timeout 600 stat "$W/m/$_bf_head" >/dev/null
	cold=$(echo "$(bench_now) - $s" | bc)
	timeout 10 fusermount3 -u "$W/m"
	"$B/gatherfs" -f $_bf_opts "$C" "$W/m" 2>/dev/null &
	pid=$!
	until timeout 10 stat "$W/m/$_bf_head" >/dev/null 2>&1; do sleep 0.01; done
	rss=$(awk '/VmRSS/ { print $2 }' /proc/"$pid"/status)
	if [ -n "${BENCH_SHARD_SIZE:-}" ]; then
		_bf_files=$(/usr/bin/python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))["weight_map"]
print("\n".join(sorted(set(m.values()))))' "$W/m/$_bf_head")
	else
		_bf_files=model.safetensors
	fi
	size=$(cd "$W/m" && stat -c %s $_bf_files | awk '{ s += $1 } END { printf "%.0f", s }')
	gib=${2:-}
	count=$(( ${gib:-0} * 1024 ))
	[ "$count" -gt 0 ] || count=$(( (size + 1048575) / 1048576 ))
	bench_drop $shards
	s=$(bench_now)
	_bf_left=$count
	for _bf_f in $_bf_files; do
		[ "$_bf_left" -gt 0 ] || break
		timeout 3600 dd if="$W/m/$_bf_f" of=/dev/null bs=1M count=$_bf_left status=none
		_bf_left=$(( _bf_left - ($(stat -c %s "$W/m/$_bf_f") + 1048575) / 1048576 ))
	done
	e=$(bench_now)
	hwm=$(awk '/VmHWM/ { print $2 }' /proc/"$pid"/status)
	timeout 10 fusermount3 -u "$W/m"
	wait "$pid" || true
	read_s=$(echo "$e - $s" | bc)
	read_b=$(( count * 1048576 < size ? count * 1048576 : size ))
	bench_drop $shards
	s=$(bench_now)
	base_b=$(/usr/bin/python3 "$here/preadall.py" 8 ${gib:+--bytes=$read_b} $shards)
	e=$(bench_now)
	base_s=$(echo "$e - $s" | bc)
	echo "checkpoint $C ($(stat -c %s $shards | awk '{ s += $1 } END { printf "%.0f", s }') bytes in $(echo $shards | wc -w) $1 files)"
	echo "$(echo $_bf_files | wc -w) file(s) of ${_bf_head}: $size bytes${BENCH_SHARD_SIZE:+ (BENCH_SHARD_SIZE=$BENCH_SHARD_SIZE)}"
	awk -v m="$mt" -v all="$mounts" 'BEGIN { printf "mount time (median of 3)   %8.3f s   (%s)\n", m, all }'
	awk -v c="$cold" 'BEGIN { printf "mount time, files cold     %8.3f s   (their pages dropped first)\n", c }'
	awk -v r="$rss" -v h="$hwm" 'BEGIN { printf "daemon RSS after mount     %8.1f MiB, peak %.1f MiB after the read\n", r / 1024, h / 1024 }'
	awk -v b="$read_b" -v t="$read_s" -v bb="$base_b" -v bt="$base_s" -v k="$1" \
		-v h="$([ -n "${BENCH_SHARD_SIZE:-}" ] && echo shards || echo model.safetensors)" 'BEGIN {
		printf "first read, %-19s %8.2f GB in %7.2f s = %6.2f GB/s\n", h, b / 1e9, t, b / t / 1e9
		printf "baseline, preadall.py 8 %-7s %7.2f GB in %7.2f s = %6.2f GB/s\n", k, bb / 1e9, bt, bb / bt / 1e9
		printf "ratio (gatherfs / baseline)      %6.2fx\n", (b / t) / (bb / bt)
	}'
}

# bench_now: the time now, in seconds (with nanoseconds).
bench_now() { date +%s.%N; }

# bench_time CMD...: run CMD (its output dropped); T, the seconds it took.
bench_time() {
	_bt_s=$(bench_now)
	"$@" >/dev/null
	T=$(echo "$(bench_now) - $_bt_s" | bc)
}

# ds_shim DIR: DIR/zero_to_fp32.py, a copy of $DS_ZERO_TO_FP32 (DeepSpeed's
# deepspeed/utils/zero_to_fp32.py, v0.14.5, from a source tree), and
# DS_PYTHONPATH, the PYTHONPATH it runs with, set to one of:
#   real  the whole tree (its deepspeed, op_builder and accelerator, as
#         `git archive v0.14.5 deepspeed op_builder accelerator version.txt`
#         writes them, and the apt packages python3-pydantic python3-cpuinfo
#         python3-tqdm python3-packaging python3-psutil): the script imports
#         DeepSpeed as a user's run does (`import deepspeed`, 4-9 s on the
#         bench machine).  A stand-in for hjson (json under its name, not in
#         Debian 12) goes in DIR if python cannot import it.
#   shim  otherwise, DIR: DIR/deepspeed holds only what the script imports
#         (a logger and the tree's deepspeed/checkpoint/constants.py) and
#         the classes DeepSpeed's shards pickle by name (stubs, as
#         gen_deepspeed.py writes them): DeepSpeed's import is not timed.
# DS_MODE says which.  Returns 1 (with the reason on stderr) if
# DS_ZERO_TO_FP32 is unset or not such a file.
ds_shim() {
	if [ -z "${DS_ZERO_TO_FP32:-}" ]; then
		echo "DS_ZERO_TO_FP32 unset (path of DeepSpeed v0.14.5's deepspeed/utils/zero_to_fp32.py)" >&2
		return 1
	fi
	consts=$(dirname "$DS_ZERO_TO_FP32")/../checkpoint/constants.py
	if [ ! -f "$DS_ZERO_TO_FP32" ] || [ ! -f "$consts" ]; then
		echo "DS_ZERO_TO_FP32=$DS_ZERO_TO_FP32: not in a DeepSpeed source tree (no $consts)" >&2
		return 1
	fi
	mkdir -p "$1"
	cp "$DS_ZERO_TO_FP32" "$1/zero_to_fp32.py"
	tree=$(cd "$(dirname "$DS_ZERO_TO_FP32")/../.." && pwd)
	if [ -d "$tree/op_builder" ] && [ -d "$tree/accelerator" ]; then
		/usr/bin/python3 -c 'import hjson' 2>/dev/null ||
			printf 'from json import load, loads, dump, dumps\n' >"$1/hjson.py"
		DS_PYTHONPATH=$tree:$1
		if PYTHONPATH=$DS_PYTHONPATH /usr/bin/python3 -c 'import deepspeed' >/dev/null 2>&1; then
			DS_MODE=real
			return 0
		fi
		echo "ds_shim: $tree: import deepspeed failed; timing zero_to_fp32.py without DeepSpeed's import" >&2
	fi
	DS_MODE=shim
	DS_PYTHONPATH=$1
	mkdir -p "$1/deepspeed/utils" "$1/deepspeed/checkpoint" "$1/deepspeed/runtime/zero" \
		"$1/deepspeed/runtime/fp16"
	cp "$consts" "$1/deepspeed/checkpoint/constants.py"
	for d in deepspeed deepspeed/checkpoint deepspeed/runtime deepspeed/runtime/zero \
		deepspeed/runtime/fp16; do
		: >"$1/$d/__init__.py"
	done
	printf 'import logging\nlogger = logging.getLogger("DeepSpeed")\n' \
		>"$1/deepspeed/utils/__init__.py"
	cat >"$1/deepspeed/runtime/zero/config.py" <<-'PY'
	import enum
	class ZeroStageEnum(int, enum.Enum):
	    disabled = 0
	    optimizer_states = 1
	    gradients = 2
	    weights = 3
	    max_stage = 4
	PY
	printf 'class LossScaler:\n    pass\n' >"$1/deepspeed/runtime/fp16/loss_scaler.py"
	printf 'class fragment_address:\n    pass\n' >"$1/deepspeed/utils/tensor_fragment.py"
}

# ds_to_sd SHIM CKPT OUT: seconds of DeepSpeed's way to a state dict:
# zero_to_fp32.py CKPT OUT, then torch.load(OUT) (two processes).  SHIM is
# ds_shim's DIR, run with its DS_PYTHONPATH.
ds_to_sd() {
	s=$(date +%s.%N)
	PYTHONPATH=$DS_PYTHONPATH /usr/bin/python3 "$1/zero_to_fp32.py" "$2" "$3" >/dev/null 2>&1 ||
		{ echo "zero_to_fp32.py $2 failed" >&2; return 1; }
	/usr/bin/python3 -c 'import sys, torch; torch.load(sys.argv[1])' "$3"
	e=$(date +%s.%N)
	rm -f "$3"
	echo "$e - $s" | bc
}

# gfs_to_sd BUILD CKPT MNT: seconds of gatherfs's way to a state dict: a
# fresh mount with -o nocrccache (every source record checked), then
# torch.load(MNT/pytorch_model.bin), mount time included.
gfs_to_sd() {
	s=$(date +%s.%N)
	"$1/gatherfs" -o nocrccache "$2" "$3" || return 1
	/usr/bin/python3 -c 'import sys, torch; torch.load(sys.argv[1])' "$3/pytorch_model.bin"
	e=$(date +%s.%N)
	timeout 10 fusermount3 -u "$3"
	echo "$e - $s" | bc
}

# timed_dd_s FILE [TIMEOUT]: seconds of a dd bs=1M of FILE (at most TIMEOUT,
# default 600 s) once it can be stat'ed (the wait not timed).
timed_dd_s() {
	until timeout 10 stat "$1" >/dev/null 2>&1; do sleep 0.01; done
	s=$(date +%s.%N)
	timeout "${2:-600}" dd if="$1" of=/dev/null bs=1M status=none
	e=$(date +%s.%N)
	echo "$e - $s" | bc
}

# mounted_dd_s MNT: timed_dd_s of MNT/pytorch_model.bin, then MNT unmounted.
mounted_dd_s() {
	t=$(timed_dd_s "$1/pytorch_model.bin")
	timeout 10 fusermount3 -u "$1"
	echo "$t"
}

# first_dd_s BUILD CKPT MNT: seconds of the first dd bs=1M of
# pytorch_model.bin from a fresh mount with -o nocrccache (mount not timed).
first_dd_s() {
	"$1/gatherfs" -o nocrccache "$2" "$3" || return 1
	mounted_dd_s "$3"
}

# sqfs_dd_s IMAGE MNT: seconds of the first dd bs=1M of pytorch_model.bin
# from a fresh squashfuse_ll mount of IMAGE (mount not timed).
sqfs_dd_s() {
	squashfuse_ll "$1" "$2" || return 1
	mounted_dd_s "$2"
}
