/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — bounded parallel loops: gfs_pfor() on threads of its own (many
 * rank files' metadata at mount), gfs_pool_for() on a pool of threads kept
 * for the mount's life (the blocks of one read of a computed tensor).
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

/* The most threads gfs_pfor_threads() and gfs_pool_new_threads() start. */
#define GFS_POOL_MAX_THREADS 64

/*
 * gfs_pfor_threads(): gfs_pfor() on up to nthreads threads (at most
 * GFS_POOL_MAX_THREADS), whatever the CPUs: for loops whose iterations
 * mostly wait (small reads on slow storage).
 */
gfs_err gfs_pfor_threads(size_t n, size_t nthreads, gfs_err (*fn)(void *ctx, size_t i),
			 void *ctx);

typedef struct gfs_pool gfs_pool;

/*
 * gfs_pool_new(): a pool of min(online CPUs, GFS_PFOR_MAX_THREADS) - 1
 * idle threads (none on one CPU: then gfs_pool_for() is a serial loop).
 * @return GFS_OK and *out, or GFS_ERR_NOMEM (no thread could start: a pool
 * without threads is still returned, *out is set either way on GFS_OK).
 */
gfs_err gfs_pool_new(gfs_pool **out);

/*
 * gfs_pool_new_threads(): a pool of n idle threads (n <= GFS_POOL_MAX_THREADS;
 * 0: gfs_pool_for() is a serial loop), for loops whose iterations mostly
 * wait (reads in flight on slow storage) rather than compute.  As
 * gfs_pool_new() otherwise.
 */
gfs_err gfs_pool_new_threads(size_t n, gfs_pool **out);

/* gfs_pool_free(): stops and joins the threads; p idle, or NULL. */
void gfs_pool_free(gfs_pool *p);

/*
 * gfs_pool_for(): gfs_pfor() with p's idle threads helping the calling
 * thread, which takes indices too: never waits for a busy pool, and several
 * threads may call it at once (each call gets the threads idle at the time).
 * Same result and error as gfs_pfor().  p NULL: a serial loop.
 */
gfs_err gfs_pool_for(gfs_pool *p, size_t n, gfs_err (*fn)(void *ctx, size_t i), void *ctx);

#endif
