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

/*
 * gfs_merge_lora_round(): rows x cols of out (dtype odt) = W + s * (c @ R),
 * rounded once: gfs_merge_round() of gfs_merge_widen() of W (rows x cols of
 * dtype wdt, little endian) after gfs_merge_lora_rows(), the same bits,
 * without a float64 copy of the block.  P as for gfs_merge_lora_rows().  W
 * and out may be unaligned and must not overlap.
 */
void gfs_merge_lora_round(gfs_dtype wdt, const void *W, size_t rows, size_t cols, size_t r,
			  double s, const double *c, const double *P, bool exact_products,
			  gfs_dtype odt, void *out);

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
