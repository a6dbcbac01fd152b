/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the arithmetic of merged (LoRA, DoRA) tensors: exact widening
 * to float64, the low-rank update of a block of rows, and a single rounding
 * to the output dtype.  No I/O, no state; compute.h feeds it.
 *
 * Precision.  Every operand (fp32, bf16, fp16, fp64 values of W, A, B, m)
 * is widened exactly to float64.  A product of two fp32/bf16/fp16 values
 * has at most 48 significant bits, so it is exact in float64 (53 bits).
 * The r products of a dot product are summed in float64 (in a fixed order),
 * then scaled by s and added to W: r + 1 roundings of relative size 2^-53 each,
 * so the float64 value differs from the exact merge by at most
 * (r + 1) * 2^-53 * max(|W|, |s| * sum_k |B_ik||A_kj|), the operands' scale.
 * That is (r + 1) * 2^-29 of one fp32 ulp at that scale (2^-21 for r = 255):
 * the one rounding to the output dtype (round to nearest, ties to even,
 * directly from float64 — bf16 is not reached through fp32) is therefore
 * the correctly rounded merge except when the exact value lies within that
 * distance of a rounding boundary, and always within 1 ulp of the operand
 * scale.  fp64 operands lose the exact-product property (documented
 * departure: then the error is that of a float64 dot product).
 *
 * To bf16, on x86-64 CPUs with FMA, a block may first be computed in fp32
 * (twice the lanes) with a bound on its error: where no bf16 rounding
 * boundary lies within that bound, the fp32 value rounds to the same bf16 as
 * the float64 one, and the rest is computed in float64.  The output is the
 * float64 computation's, bit for bit (merge.c, "The bf16 filter").
 */
#ifndef GATHERFS_MERGE_H
#define GATHERFS_MERGE_H

#include <stdbool.h>

#include "gatherfs/arith/dtype.h"

/*
 * gfs_merge_widen(): n elements of floating-point dtype dt at src (little
 * endian, unaligned allowed) to float64, exactly.
 */
void gfs_merge_widen(gfs_dtype dt, const void *src, double *dst, size_t n);

/*
 * gfs_merge_round(): n float64 values to floating-point dtype dt, each
 * rounded once to nearest, ties to even (overflow to infinity, NaN stays
 * NaN).  dst may be unaligned.
 */
void gfs_merge_round(gfs_dtype dt, const double *src, void *dst, size_t n);

/*
 * gfs_merge_packed_len(): the elements of R [r, cols] packed by
 * gfs_merge_pack() (cols rounded up to a whole strip).
 */
size_t gfs_merge_packed_len(size_t r, size_t cols);

/*
 * gfs_merge_pack(): R [r, cols] (row-major) into P, gfs_merge_packed_len()
 * elements, in the order the update reads it (strips of columns, padded
 * with zeros).
 */
void gfs_merge_pack(size_t r, size_t cols, const double *R, double *P);

/*
 * gfs_merge_lora_rows(): the low-rank update of rows rows of cols columns,
 * in place: v[i][j] += s * sum_{k < r} c[i][k] * R[k][j].  c is [rows, r],
 * v is [rows, cols], both row-major; P is R [r, cols] packed by
 * gfs_merge_pack().  exact_products: every c[i][k] * R[k][j] is exact in
 * float64 (both widened from fp32, bf16 or fp16), which lets the sum fuse
 * its multiply-adds with the same result.
 */
void gfs_merge_lora_rows(size_t rows, size_t cols, size_t r, double s, const double *c,
			 const double *P, double *v, bool exact_products);

/* R in fp32 for gfs_merge_lora_round()'s bf16 filter (merge.c). */
typedef struct gfs_merge_r32 gfs_merge_r32;

#define GFS_MERGE_R32_MAX 256 /* the largest rank the bf16 filter takes */

/*
 * gfs_merge_r32_new(): the bf16 filter's copy of R [r, cols] packed in P
 * (gfs_merge_pack()); NULL (no filter) when a value of R is not a finite
 * fp32, r is 0 or above GFS_MERGE_R32_MAX, or memory is short.  Free it
 * with gfs_merge_r32_free() (NULL allowed).
 */
gfs_merge_r32 *gfs_merge_r32_new(size_t r, size_t cols, const double *P);
void gfs_merge_r32_free(gfs_merge_r32 *q);

/*
 * gfs_merge_lora_round(): rows x cols of out (dtype odt) = W + s * (c @ R),
 * rounded once: gfs_merge_round() of gfs_merge_widen() of W (rows x cols of
 * dtype wdt, little endian) after gfs_merge_lora_rows(), the same bits,
 * without a float64 copy of the block.  P as for gfs_merge_lora_rows(); q:
 * gfs_merge_r32_new() of the same r, cols and P, or NULL.  W and out may be
 * unaligned and must not overlap.
 */
void gfs_merge_lora_round(gfs_dtype wdt, const void *W, size_t rows, size_t cols, size_t r,
			  double s, const double *c, const double *P, const gfs_merge_r32 *q,
			  bool exact_products, gfs_dtype odt, void *out);

/*
 * gfs_merge_dora_rows(): DoRA with one norm per row: v[i][j] *= m[i] /
 * ||v[i]||_2 for each of rows rows.
 */
void gfs_merge_dora_rows(size_t rows, size_t cols, const double *m, double *v);

/* gfs_merge_sumsq_cols(): sumsq[j] += sum_i v[i][j]^2 over rows rows. */
void gfs_merge_sumsq_cols(size_t rows, size_t cols, const double *v, double *sumsq);

/* gfs_merge_scale_cols(): v[i][j] *= f[j] for rows rows. */
void gfs_merge_scale_cols(size_t rows, size_t cols, const double *f, double *v);

#endif
