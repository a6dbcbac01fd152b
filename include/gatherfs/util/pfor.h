/*
 * gatherfs — a bounded parallel loop, for reading many rank files' metadata.
 */
#ifndef GATHERFS_PFOR_H
#define GATHERFS_PFOR_H

#include "gatherfs/util/common.h"

/* The most threads gfs_pfor() starts. */
#define GFS_PFOR_MAX_THREADS 8

/*
 * gfs_pfor(): fn(ctx, i) for every i in [0, n), on up to
 * min(online CPUs, GFS_PFOR_MAX_THREADS) threads (in the calling thread alone
 * for n < 2 or one CPU).  Indices are taken in increasing order; once one
 * fails no higher index starts.  @return GFS_OK, or the error (and message)
 * of the lowest failing index: what a serial loop stopping at its first
 * error returns.  fn must be safe to run concurrently for distinct i.
 */
gfs_err gfs_pfor(size_t n, gfs_err (*fn)(void *ctx, size_t i), void *ctx);

#endif
