#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/ds-pipeline.sh [CKPT] [BUILDDIR] [GIB]: a DeepSpeed PipelineModule
# checkpoint mounted as one model, against a plain parallel read of its layer
# files, in the same run (issue 45).
#
# CKPT: a DeepSpeed pipeline save (its directory, with `latest`; default: a
# sparse Llama-70B-shaped one, 80 blocks, hidden 8192, ffn 28672, 64 heads,
# 8 kv heads, vocabulary 128256, bf16 with BF16_Optimizer (ZeRO-1), PP 8 x
# TP 1 x DP 1, written once by bench/gen_ds_pipeline.py under
# /var/tmp/gatherfs-bench/benchdspipe-70b: 83 layer files, 8 mp_rank files,
# 8 optimizer files, about 1 TB of holes).  Rows:
#   mount time        gatherfs CKPT MNT until MNT/model.safetensors can be
#                     stat'ed (median of 3 fresh mounts); and once more
#                     with the files' pages dropped first (cold)
#   daemon RSS        VmRSS after mount, VmHWM after the read
#   first read        the first GIB GiB (default: all) of MNT/model.safetensors
#                     (the fp32 masters from the stages' optimizer partitions,
#                     every record's CRC-32 checked first, the default
#                     -o verify=read) with dd bs=1M, from a fresh mount
#   baseline          bench/preadall.py 8 over all the layer files (the bf16
#                     module weights, no re-arrangement, no check); with GIB,
#                     over as many of their first bytes as the first read read
# BENCH_SHARD_SIZE=5G (say): the first read is of the Hugging Face shards of
# that size instead (model.safetensors.index.json and its files, as vLLM and
# transformers open them), shard after shard (bench/lib.sh).
# The payloads are holes, read as zeros at memory speed, the files' pages
# dropped from the page cache before each read (bench_drop), so this measures
# gatherfs's own cost (index, partition mapping, CRC-32 of every record)
# against a reader's, not storage.
# Needs a user allowed to mount FUSE and python3 with torch (for the generator).
set -eu
B=$(cd "${2:-.}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
C=${1:-/var/tmp/gatherfs-bench/benchdspipe-70b}
if [ -z "${1:-}" ] && [ ! -e "$C/.gen-done" ]; then
	/usr/bin/python3 "$here/gen_ds_pipeline.py" "$C"
fi
. "$here/lib.sh"
bench_workdir
shards=$(find "$C/$(cat "$C/latest")" -name 'layer_*-model_states.pt' | sort)

bench_first_read layer "${3:-}"
echo "command: ${BENCH_SHARD_SIZE:+BENCH_SHARD_SIZE=$BENCH_SHARD_SIZE }bench/ds-pipeline.sh ${1:-\"\"} ${2:-.} ${3:-}"
