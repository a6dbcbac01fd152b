/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the safetensors view: a layout (or a subset of its entries)
 * presented as a .safetensors file.
 *
 *   8 bytes   little-endian length N of the JSON header
 *   N bytes   JSON header, padded with spaces to a multiple of 8:
 *             {"__metadata__": {"format": "pt", ...},
 *              "<name>": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}, ...}
 *   data      every tensor's bytes, back to back: no gaps, no overlap
 *
 * Tensors appear in the header in model order; their data is laid out by
 * decreasing element size (stable in model order), so that every tensor is
 * naturally aligned in the file.  Tied aliases are omitted (safetensors
 * forbids overlapping tensors) and listed in __metadata__ under
 * "gatherfs.aliases" as a JSON object {alias: target}, encoded as a string.
 * Composing the view reads no tensor data.  The header's tensor entries
 * are written when read (kept: 20 bytes a tensor, not its ~100 bytes of JSON).
 */
#ifndef GATHERFS_VIEW_SAFETENSORS_H
#define GATHERFS_VIEW_SAFETENSORS_H

#include "gatherfs/server/vfile.h"

/*
 * gfs_stview_new(): compose the safetensors file of entries[0..n) of ctx's
 * layout (all entries, in order, when entries is NULL).  ctx must outlive
 * the vfile.  @return GFS_OK and *out, freed with gfs_vfile_free().
 */
gfs_err gfs_stview_new(const gfs_vctx *ctx, const size_t *entries, size_t n,
		       gfs_vfile **out);

#endif
