/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — FP8 weight-quantized Hugging Face checkpoints dequantized
 * (-o dequant=, docs/fp8.md): the model the checkpoint quantizes as a layout
 * of computed tensors (layout.h, GFS_OP_DEQUANT), and its config.json.
 *
 * Formats, from config.json's quantization_config:
 *   quant_method "fp8" (DeepSeek-V3, Qwen3-FP8...): X.weight (F8_E4M3, or
 *     F8_E5M2 with fmt "e5m2") and X.weight_scale_inv of the block grid
 *     ceil(M / BM) x ceil(N / BN), weight_block_size [BM, BN] (no block
 *     size: one scale per tensor); scale F32, BF16 or F8_E8M0 (scale_fmt
 *     "ue8m0" or none); stacked experts X [E, M, N] (F8) take X_scale_inv
 *     [E, gm, gn] (transformers' fused naming, e.g. mlp.experts.down_proj);
 *   quant_method "compressed-tensors", format "float-quantized": X.weight
 *     and X.weight_scale per output channel ([M, 1]), per tensor (0-d or
 *     [1]) or per block (strategy "block", block_structure), as its
 *     config_groups say; modules of its ignore list (names, "re:" regular
 *     expressions) are left as stored.
 * Scales and activation parameters (input_scale, output_scale, k_scale,
 * v_scale, X_activation_scale) leave the model; every other tensor stays as stored.
 */
#ifndef GATHERFS_FP8_H
#define GATHERFS_FP8_H

#include "gatherfs/index/layout.h"

/*
 * gfs_fp8_dequant(): the dequantized model of base (a finished layout with
 * a root directory holding config.json) in floating-point dtype out (F32,
 * F16 or BF16).  Errors (one line naming the tensor and its file, or the
 * config): no or unknown quantization_config (quant_method, fmt, scale_fmt,
 * format, strategy), an FP8 weight without its scale, a scale without its
 * weight, a scale dtype other than F32, BF16, F8_E8M0, a scale whose shape
 * is not the block grid of its weight (or a block size the grid disagrees
 * with), an FP8 tensor that is no weight, an ignored module stored as FP8,
 * a zero point (weight_zero_point, or symmetric: false).
 * @return GFS_OK and a finished layout in *res (root_dir of base).
 */
gfs_err gfs_fp8_dequant(const gfs_layout *base, gfs_dtype out, gfs_layout **res);

/*
 * gfs_fp8_config(): config.json for the dequantized model: text (or, when
 * NULL, l's root config.json) without quantization_config and with "dtype"
 * (and "torch_dtype" if present) the name of out.  *res is NULL when l has
 * no config.json.  @return GFS_OK and *res (free it).
 */
gfs_err gfs_fp8_config(const gfs_layout *l, const char *text, gfs_dtype out, char **res);

/*
 * gfs_fp8_check_dtype(): refuse (one line naming the tensor) -o dtype= want
 * (not GFS_DT_INVALID) on a layout holding an FP8 tensor: FP8 converts only
 * through -o dequant=.
 */
gfs_err gfs_fp8_check_dtype(const gfs_layout *l, gfs_dtype want);

#endif
