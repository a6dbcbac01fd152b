#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/megatron.sh [CKPT] [BUILDDIR] [GIB]: a Megatron-Core torch_dist or
# legacy checkpoint mounted as a Hugging Face model, against a plain parallel
# read of its .distcp (or mp_rank_*/model_optim_rng.pt) files, in the same run.
#
# CKPT: a Megatron save (default: a sparse Llama-70B-shaped torch_dist
# checkpoint at TP 8 x PP 4, bf16, written once by bench/gen_megatron.py under
# /var/tmp/gatherfs-bench/mg70b: 141 GB of holes; "dsv3": a DeepSeek-V3-shaped
# one, bench/gen_megatron.py --shape dsv3, 61 layers, 256 + 1 experts, MLA, EP
# 8 x PP 4, bf16, under /var/tmp/gatherfs-bench/dsv3; "legacy": the default's
# shape saved in the legacy form, bench/gen_megatron.py --format legacy, 32
# mp_rank_TT_PPP/model_optim_rng.pt files, under
# /var/tmp/gatherfs-bench/benchlegacy-mg70b).  The iteration read is the one
# latest_checkpointed_iteration.txt names (CKPT itself without it).  Rows:
#   mount time        gatherfs CKPT MNT until MNT/model.safetensors can be
#                     stat'ed (median of 3 fresh mounts); and once more
#                     with the files' pages dropped first (cold)
#   daemon RSS        VmRSS after mount, VmHWM after the read
#   first read        the first GIB GiB (default: all) of MNT/model.safetensors
#                     (the HF view: QKV split per query group, gate/up split,
#                     vocabulary trimmed; every record's CRC-32 checked first,
#                     the default -o verify=read) with dd bs=1M, from a fresh
#                     mount
#   baseline          bench/preadall.py 8 over all the .distcp files, or a
#                     legacy save's model_optim_rng.pt files (the same bytes
#                     and the rest of the archives, no re-arrangement, no
#                     check); with GIB, over as many of their first bytes as
#                     the first read read
# BENCH_SHARD_SIZE=5G (say): the first read is of the Hugging Face shards of
# that size instead (model.safetensors.index.json and its files, as vLLM and
# transformers open them), shard after shard (bench/lib.sh).
# The payloads are holes, read as zeros at memory speed, the shards' pages
# dropped from the page cache before each read (bench_drop), so this
# measures gatherfs's own cost (index, re-arrangement, CRC-32 of every
# record) against a reader's, not storage.
# Needs a user allowed to mount FUSE and python3 (for the generator).
set -eu
B=$(cd "${2:-.}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
C=${1:-/var/tmp/gatherfs-bench/mg70b}
if [ "$C" = dsv3 ]; then
	C=/var/tmp/gatherfs-bench/dsv3
	[ -e "$C/.gen-done" ] || /usr/bin/python3 "$here/gen_megatron.py" "$C" --shape dsv3
elif [ "$C" = legacy ]; then
	C=/var/tmp/gatherfs-bench/benchlegacy-mg70b
	[ -e "$C/.gen-done" ] || /usr/bin/python3 "$here/gen_megatron.py" "$C" --format legacy
elif [ -z "${1:-}" ] && [ ! -e "$C/.gen-done" ]; then
	/usr/bin/python3 "$here/gen_megatron.py" "$C"
fi
. "$here/lib.sh"
bench_workdir
it=$C
if [ -f "$C/latest_checkpointed_iteration.txt" ]; then
	tag=$(cat "$C/latest_checkpointed_iteration.txt")
	case $tag in
	release) it=$C/release ;;
	*) it=$C/$(printf 'iter_%07d' "$tag") ;;
	esac
fi
shards=$(find "$it" -maxdepth 1 -name '*.distcp' | sort)
kind=.distcp
if [ -z "$shards" ]; then
	shards=$(find "$it" -maxdepth 2 -path '*/mp_rank_*/model_optim_rng.pt' | sort)
	kind=.pt
fi

bench_first_read "$kind" "${3:-}"
echo "command: ${BENCH_SHARD_SIZE:+BENCH_SHARD_SIZE=$BENCH_SHARD_SIZE }bench/megatron.sh ${1:-\"\"} ${2:-.} ${3:-}"
