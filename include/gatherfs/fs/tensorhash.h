/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the SHA-256 of tensor files (user.gatherfs.sha256): computed
 * from exactly the bytes the file serves on the first request, kept for the
 * mount's life.  Thread-safe: one thread computes a file's hash while
 * others asking for it wait.
 */
#ifndef GATHERFS_TENSORHASH_H
#define GATHERFS_TENSORHASH_H

#include "gatherfs/fs/fs.h"

typedef struct gfs_thash gfs_thash;

/* gfs_thash_new(): an empty cache for the nodes of a namespace of nnodes nodes (its tables allocated on the first request). */
gfs_err gfs_thash_new(size_t nnodes, gfs_thash **out);

/* gfs_thash_free(): free it; NULL allowed. */
void gfs_thash_free(gfs_thash *h);

/*
 * gfs_thash_get(): the hex SHA-256 (64 digits and a NUL) of regular file n
 * of fs as gfs_fs_read() serves it; read in chunks of 1 MiB on the first
 * call, then remembered.  @return the read error (nothing is remembered).
 */
gfs_err gfs_thash_get(gfs_thash *h, const gfs_fs *fs, const gfs_node *n, char hex[65]);

#endif
