#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# fuzz/run-one.sh TOP_SRCDIR SECONDS fuzz/NAME: run one libFuzzer target
# of `make fuzz-run` for SECONDS on a fresh copy of its seed corpus
# (fuzz/corpus/NAME), its output in fuzz/NAME.log.  Exit 0 and print the
# fuzzer's last line, or print the log's tail and exit 1.  `make fuzz-run`
# runs $(FUZZ_JOBS) of these at a time.
set -u
top=$1 seconds=$2 t=$3
n=$(basename "$t")
work=fuzz/corpus-work/$n
rm -rf "$work" && mkdir -p "$work" && cp "$top/fuzz/corpus/$n"/* "$work/" || exit 1
if ./"$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 "$work" 2>"fuzz/$n.log"; then
	echo "$n ($seconds s): $(tail -1 "fuzz/$n.log")"
else
	echo "$n: FAILED"
	tail -50 "fuzz/$n.log"
	exit 1
fi
