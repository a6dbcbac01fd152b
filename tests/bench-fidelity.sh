#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The checkpoint generator of the benchmarks writes what DeepSpeed writes.
set -eu
exec sh "${top_srcdir:-.}/bench/check_fidelity.sh" "${top_builddir:-.}"
