#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/verl.sh [RANKS] [BUILDDIR] [GIB]: a verl FSDP2 checkpoint of RANKS
# per-rank state dicts (default 256) mounted as a Hugging Face model, against
# a plain parallel read of its rank files, in the same run.
#
# The checkpoint: a sparse Llama-2-7B-shaped save (32 layers, hidden 4096,
# ffn 11008, 32 heads, vocabulary 32000, bf16, untied) as verl's
# FSDPCheckpointManager writes it under FSDP2 on a 1-D mesh of RANKS ranks
# (model_world_size_RANKS_rank_R.pt, each holding 291 DTensor local shards,
# Shard(0)), written once by bench/gen_verl.py under
# /var/tmp/gatherfs-bench/benchverl-RANKS: 13.5 GB of holes.  Rows:
#   mount time        gatherfs CKPT MNT until MNT/model.safetensors can be
#                     stat'ed (median of 3 fresh mounts); and once more
#                     with the files' pages dropped first (cold)
#   daemon RSS        VmRSS after mount, VmHWM after the read
#   first read        the first GIB GiB (default: all) of MNT/model.safetensors
#                     (every record's CRC-32 checked first, the default
#                     -o verify=read) with dd bs=1M, from a fresh mount
#   baseline          bench/preadall.py 8 over all the rank files (the same
#                     bytes, no re-arrangement, no check); with GIB, over as
#                     many of their first bytes as the first read read
# BENCH_SHARD_SIZE=5G (say): the first read is of the Hugging Face shards of
# that size instead (model.safetensors.index.json and its files, as vLLM and
# transformers open them), shard after shard (bench/lib.sh).
# The payloads are holes, read as zeros at memory speed, the files' pages
# dropped from the page cache before each read (bench_drop), so this measures
# gatherfs's own cost (index, RANKS x 291 pickled DTensors, re-arrangement,
# CRC-32 of every record) against a reader's, not storage.
# Needs a user allowed to mount FUSE and python3 with torch (the generator).
set -eu
ranks=${1:-256}
B=$(cd "${2:-.}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
C=/var/tmp/gatherfs-bench/benchverl-$ranks
[ -e "$C/.gen-done" ] || /usr/bin/python3 "$here/gen_verl.py" "$C" --ranks "$ranks"
. "$here/lib.sh"
bench_workdir
shards=$(find "$C" -name 'model_world_size_*_rank_*.pt' | sort)

bench_first_read rank "${3:-}"
echo "command: ${BENCH_SHARD_SIZE:+BENCH_SHARD_SIZE=$BENCH_SHARD_SIZE }bench/verl.sh $ranks ${2:-.} ${3:-}"
