/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — streaming reductions over a tensor's values, read through the
 * byte server in chunks (memory independent of the tensor's size), every
 * value widened to fp64 (exact for fp64/fp32/fp16/bf16; integers exact below
 * 2^53; a complex tensor is its real and imaginary parts): the numbers of
 * `gatherfs-inspect diff`, `stats` and `check`.  One tensor is reduced in
 * one thread, chunk by chunk in order (a fixed chunk size, fixed lanes
 * within a chunk, the same bits with or without AVX2), so the results do
 * not depend on the threads that run the tensors nor on the CPU.
 */
#ifndef GATHERFS_REDUCE_H
#define GATHERFS_REDUCE_H

#include "gatherfs/server/server.h"

/* One side of a reduction: a layout, its open sources, the dtype asked for. */
typedef struct gfs_rside {
	const gfs_layout *l;
	const gfs_srcset *s;
	gfs_dtype want;  /* GFS_DT_INVALID: each tensor in its own dtype */
	const char *what; /* the source as the user named it, for messages */
} gfs_rside;

/* Statistics of one tensor (NaN and infinities counted, left out of the rest). */
typedef struct gfs_tstats {
	uint64_t numel;  /* values (a complex element counts twice) */
	uint64_t nan, inf, zeros;
	uint64_t finite;
	double min, max, absmax; /* of the finite values (NaN when there are none) */
	double mean, std;        /* population std; NaN when no finite value */
	double l2;               /* sqrt of the sum of squares of the finite values */
} gfs_tstats;

/* The comparison of one tensor of each side with the same number of values. */
typedef struct gfs_tdiff {
	uint64_t numel, ndiff; /* values, values not bit-identical (NaN equals NaN) */
	uint64_t nfar;         /* differing values outside the tolerance, NaN against a number */
	double max_abs, max_rel, mean_abs, cosine;
	double sq_diff, sq_a;  /* sum (a-b)^2, sum a^2 over the finite pairs */
	uint64_t nan_a, nan_b, inf_a, inf_b;
} gfs_tdiff;

/* gfs_reduce_chunk_bytes(): the most bytes one reduction holds at a time, per side. */
size_t gfs_reduce_chunk_bytes(void);

/*
 * gfs_reduce_values(): how many fp64 values entry i of side x widens to
 * (numel, twice numel for a complex dtype).
 */
uint64_t gfs_reduce_values(const gfs_rside *x, size_t i);

/* gfs_reduce_stats(): the statistics of entry i of x.  @return the read error, naming the file. */
gfs_err gfs_reduce_stats(const gfs_rside *x, size_t i, gfs_tstats *out);

/*
 * gfs_reduce_diff(): compare entry ia of a with entry ib of b (the same
 * number of values, gfs_reduce_values()).  A value pair is close when
 * |a - b| <= atol + rtol * max(|a|, |b|); max_rel is the largest
 * |a - b| / max(|a|, |b|) (0 where both are 0); mean_abs is the sum of
 * |a - b| over the pairs of numbers, divided by numel; cosine is over the
 * finite pairs (1 when no value differs or both are all zero, 0 when one is).
 */
gfs_err gfs_reduce_diff(const gfs_rside *a, size_t ia, const gfs_rside *b, size_t ib,
			double atol, double rtol, gfs_tdiff *out);

/*
 * gfs_reduce_sha256(): the SHA-256 of the bytes entry i of x presents
 * (in x->want), as `cat` writes them.
 */
gfs_err gfs_reduce_sha256(const gfs_rside *x, size_t i, uint8_t digest[32]);

#endif
