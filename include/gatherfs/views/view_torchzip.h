/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the torch zip view: a layout presented as the file torch.save()
 * would write for its state dict (DESIGN.md §3, formats-brief §D).
 *
 * Records, all under "<prefix>/", STORED, each data start 64-byte aligned by
 * an "FB" padding extra field in the local header, as torch writes them:
 *
 *   data.pkl   pickle protocol 2 of an OrderedDict name -> tensor, using only
 *              opcodes torch.load(weights_only=True) accepts; each tensor is
 *              torch._utils._rebuild_tensor_v2(persid('storage',
 *              torch.<X>Storage, key, 'cpu', numel), 0, size, stride, False,
 *              OrderedDict()); a tied alias references its target's storage
 *              key (the memoised persid tuple);
 *   byteorder  "little";
 *   data/<key> the bytes of each unique tensor in the output dtype, keys
 *              "0", "1", ... in first-seen order of the pickle;
 *   version    "3\n".
 *
 * Local headers carry flag bit 3 with zero CRC and sizes; the data
 * descriptor after each record and the central directory carry the CRC-32
 * and sizes.  ZIP64 end records are always written, ZIP64 extra fields where
 * a size or offset needs them.
 *
 * CRC-32s of tensor records are computed lazily: reading a record's data
 * descriptor computes that record's CRC; reading any CRC field of the
 * central directory computes every missing CRC in one parallel pass over the
 * data.  Results are cached for the life of the view.  Composing the view
 * reads no tensor data.
 */
#ifndef GATHERFS_VIEW_TORCHZIP_H
#define GATHERFS_VIEW_TORCHZIP_H

#include "gatherfs/server/vfile.h"

typedef struct gfs_tzview gfs_tzview;

/*
 * gfs_tzview_new(): compose the torch zip of entries[0..n) of ctx's layout
 * (every entry, in order, when entries is NULL) with archive prefix
 * `prefix` (e.g. "pytorch_model"; no '/').  An alias whose target is not
 * among the entries still references a storage holding the target's bytes.
 * ctx must outlive the view.  Only metadata is used.  @return GFS_OK and
 * *out, freed with gfs_tzview_free().
 */
gfs_err gfs_tzview_new(const gfs_vctx *ctx, const char *prefix, const size_t *entries,
		       size_t n, gfs_tzview **out);

/* gfs_tzview_free(): free the view and its vfile; NULL allowed. */
void gfs_tzview_free(gfs_tzview *z);

/* gfs_tzview_vfile(): the composed file. */
const gfs_vfile *gfs_tzview_vfile(const gfs_tzview *z);

/*
 * gfs_tzview_compute_crcs(): compute every CRC-32 not yet known, using up to
 * nthreads threads (the caller counts as one; 0 means one per online CPU,
 * at most 8).  Thread-safe; records being computed by another caller are
 * waited for.  @return GFS_OK, or the first read error.
 */
gfs_err gfs_tzview_compute_crcs(gfs_tzview *z, unsigned nthreads);

/*
 * A pickle writer for views that compose their own data.pkl (protocol 2,
 * the opcodes torch.save writes), whose tensors are layout entries served
 * from the sources: gfs_pkw_new() writes PROTO; the caller emits the
 * object with gfs_pkw_op() (raw opcodes: '}' EMPTY_DICT, ']' EMPTY_LIST,
 * '(' MARK, 'u' SETITEMS, 's' SETITEM, 'e' APPENDS, 't' TUPLE, 0x85..0x87
 * TUPLE1..3, ')' EMPTY_TUPLE, 'N' NONE, 0x88 NEWTRUE, 0x89 NEWFALSE) and
 * the value helpers; gfs_tzview_new_pickle() appends STOP and composes the
 * zip, storage data/k holding the k-th distinct entry written.
 */
typedef struct gfs_pkw gfs_pkw;

/* gfs_pkw_new(): a writer over ctx (must outlive the views made from it). */
gfs_err gfs_pkw_new(const gfs_vctx *ctx, gfs_pkw **out);

/* gfs_pkw_free(): NULL allowed. */
void gfs_pkw_free(gfs_pkw *w);

/* gfs_pkw_op(): one raw opcode byte. */
void gfs_pkw_op(gfs_pkw *w, char op);

/* gfs_pkw_int(), gfs_pkw_float(), gfs_pkw_str(): an int, a float, a str. */
void gfs_pkw_int(gfs_pkw *w, int64_t v);
void gfs_pkw_float(gfs_pkw *w, double v);
void gfs_pkw_str(gfs_pkw *w, const char *s);

/*
 * gfs_pkw_tensor(): torch._utils._rebuild_tensor_v2 of layout entry
 * `entry` (in ctx's output dtype) presented with shape[0..ndim), which must
 * have the entry's element count, C-contiguous, with requires_grad.
 */
gfs_err gfs_pkw_tensor(gfs_pkw *w, size_t entry, uint32_t ndim, const uint64_t *shape,
		       bool requires_grad);

/*
 * gfs_tzview_new_pickle(): the torch zip of the object written to w (w is
 * finished by this call and can only be freed afterwards), archive prefix
 * `prefix`.  Records and CRCs as for gfs_tzview_new().
 */
gfs_err gfs_tzview_new_pickle(gfs_pkw *w, const char *prefix, gfs_tzview **out);

#endif
