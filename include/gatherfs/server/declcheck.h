/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the check of a layout's declarations (gfs_layout.decls: what
 * an importer followed without being able to check it from metadata, a
 * DeepSpeed tp_split file or universal_checkpoint_info) against the data.
 *
 * Every replica of a governed entry is compared with the bytes served at
 * its place, in full.  Every split claim compares its slices with the
 * first one, stopping at the first byte that differs (real slices differ
 * within their first bytes), and only when all are identical reads the
 * first slice once more to see whether it is constant (a constant tensor,
 * zeros or ones, splits into identical slices legitimately).  So the cost
 * is the bytes of the replicas twice, and a few bytes of each split
 * tensor, but for slices that are identical (wrong, or constant).
 */
#ifndef GATHERFS_DECLCHECK_H
#define GATHERFS_DECLCHECK_H

#include "gatherfs/server/server.h"

/*
 * gfs_decl_check(): check the declarations of l against the bytes of s
 * (read as gfs_tensor_read_raw() does: records checked first under
 * verification).  *why: NULL if they hold, else a malloc'd line naming
 * what declared, the tensor that proves it wrong and the slices (ranks)
 * or file involved.  *bytes (may be NULL): bytes compared.  @return
 * GFS_OK, or an error reading (a source changed, a corrupt record).
 */
gfs_err gfs_decl_check(const gfs_layout *l, const gfs_srcset *s, char **why, uint64_t *bytes);

/*
 * gfs_srcset_decls_require(): gfs_decl_check() of s's layout, once a
 * srcset (concurrent callers wait for the one check); GFS_OK if they
 * hold, else GFS_ERR_IO with the line naming the tensor that proved them
 * wrong (every later call answers the same).
 */
gfs_err gfs_srcset_decls_require(const gfs_srcset *s);

/* gfs_srcset_decls_wrong(): did gfs_srcset_decls_require() prove s's declarations wrong? */
bool gfs_srcset_decls_wrong(const gfs_srcset *s);

/*
 * gfs_srcset_entry_servable(): may bytes of entry i be served without the
 * declarations' check now: it follows none, the srcset does not verify,
 * or the check found them right.  A reader that bypasses gfs_tensor_read()
 * (splicing) must ask.
 */
bool gfs_srcset_entry_servable(const gfs_srcset *s, size_t i);

#endif
