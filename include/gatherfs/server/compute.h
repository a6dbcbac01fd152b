/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — serving computed tensors (layout.h, layout version 3): each is
 * evaluated lazily, one block of rows at a time, from its inputs read
 * through the byte server, with the arithmetic of merge.h, and rounded once
 * to the output dtype.
 *
 * Memory: per computed tensor, once first read, its low-rank factors as
 * float64 (8 * r * (rows + cols) bytes) and, for DoRA with per-column norms,
 * one float64 per column (computed by one pass over the whole tensor); plus
 * a cache of computed row blocks shared by all threads, at most
 * GFS_CCACHE_BUDGET bytes (GATHERFS_MERGE_CACHE_MB overrides it), least
 * recently used out first; a block one read takes whole is computed
 * straight into the reader's buffer and not kept.  A block is about
 * GFS_CBLOCK_ELEMS elements (at least one row); computing one takes 16
 * bytes per element of working memory, of which up to 8 blocks' worth is
 * kept for reuse.  Thread-safe; the computation runs outside any lock.
 *
 * Threads: the blocks of one read are computed in parallel, by the reading
 * thread and whichever threads of a pool (one fewer than the online CPUs, at
 * most 7, started on the first read) are idle.
 */
#ifndef GATHERFS_COMPUTE_H
#define GATHERFS_COMPUTE_H

#include "gatherfs/server/server.h"

#define GFS_CCACHE_BUDGET ((uint64_t)64 << 20)
#define GFS_CBLOCK_ELEMS 65536

typedef struct gfs_ccache gfs_ccache;

/* gfs_ccache_new(): the (empty) cache for finished layout l. */
gfs_err gfs_ccache_new(const gfs_layout *l, gfs_ccache **out);

/* gfs_ccache_free(): free everything; NULL allowed. */
void gfs_ccache_free(gfs_ccache *c);

/*
 * gfs_compute_read(): bytes [off, off + len) of computed tensor l->tensors[ti]
 * presented in floating-point dtype out (which need not be its own), its
 * inputs read from s.  A failing input read is returned (naming the file).
 * Before a tensor's first block, the checksummed records of its inputs are
 * checked (integrity.h): a corrupt one is GFS_ERR_IO naming the file, the
 * record and the tensor, on every read.
 */
gfs_err gfs_compute_read(const gfs_layout *l, const gfs_srcset *s, gfs_ccache *c, size_t ti,
			 gfs_dtype out, uint64_t off, void *buf, size_t len);

#endif
