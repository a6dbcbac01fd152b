/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — read-ahead for sequential readers of a virtual file on slow
 * storage.
 *
 * On storage where one request takes milliseconds (Lustre, GPFS, NFS,
 * object-store mounts) a reader that asks for one range at a time is
 * bound by the latency, not the bandwidth.  A gfs_prefetch is a pool of
 * fixed-size chunk buffers (its budget: the memory it may hold) and of
 * worker threads, started on first use; a gfs_pfstream is the read-ahead
 * state of one open file.  Once a stream has seen sequential reads that
 * were slow to serve (a reader on local disk or the page cache never gets
 * there: it keeps the caller's own, zero-copy path), it keeps the chunks
 * ahead of the reader being filled by the workers, across all the sources
 * the file's segments name, and serves the reader from them.
 *
 * Chunks are filled with gfs_vfile_read(): the prefetched bytes went
 * through every check the caller's own read makes (changed sources,
 * records found corrupt, the integrity guard of a segment).  A chunk whose
 * fill failed is not served: the caller reads the range itself and gets
 * the error.  All calls are thread-safe.
 */
#ifndef GATHERFS_PREFETCH_H
#define GATHERFS_PREFETCH_H

#include "gatherfs/server/vfile.h"

/* Size of one chunk (and the alignment of chunks in the file): 1 MiB. */
#define GFS_PF_CHUNK ((size_t)1 << 20)

/* Default budget: 64 MiB, 64 chunks in flight. */
#define GFS_PF_DEFAULT ((uint64_t)64 << 20)

/* Largest budget: 1 GiB. */
#define GFS_PF_MAX ((uint64_t)1 << 30)

typedef struct gfs_prefetch gfs_prefetch;
typedef struct gfs_pfstream gfs_pfstream;

/* A range served from the read-ahead: len bytes at mem, held until put. */
typedef struct gfs_pfhit {
	const uint8_t *mem;
	size_t len;
	void *hold[2]; /* chunks pinned (internal) */
} gfs_pfhit;

/*
 * gfs_prefetch_new(): a pool that holds at most budget bytes of chunks
 * (rounded down to whole chunks, GFS_PF_CHUNK <= budget <= GFS_PF_MAX) and
 * one worker thread per chunk, at most 64, started when first needed.
 * @return GFS_OK and *out, freed with gfs_prefetch_free().
 */
gfs_err gfs_prefetch_new(uint64_t budget, gfs_prefetch **out);

/*
 * gfs_prefetch_free(): stop the workers (each finishes its fill) and free
 * the pool with its chunks and the streams still open (files open when a
 * session ends), which must not be used any more.  NULL allowed.
 */
void gfs_prefetch_free(gfs_prefetch *p);

/*
 * gfs_pfstream_open(): the read-ahead state of one open file of vf
 * (borrowed: it must outlive the stream).  @return GFS_OK and *out, closed
 * with gfs_pfstream_close().
 */
gfs_err gfs_pfstream_open(gfs_prefetch *p, const gfs_vfile *vf, gfs_pfstream **out);

/*
 * gfs_pfstream_close(): wait for the stream's chunks being filled and for
 * every gfs_pfstream_get() to be ended (by gfs_pfstream_put() or
 * gfs_pfstream_timed(): a reader may close its file while the thread that
 * answered its last read has yet to end it), return its chunks to the pool
 * and free it.  NULL allowed.
 */
void gfs_pfstream_close(gfs_pfstream *s);

/*
 * gfs_pfstream_get(): a read of bytes [off, off + len) of the file, len > 0.
 * Records the access (a read elsewhere than where the last one ended drops
 * the stream's read-ahead) and, once the stream is prefetching, keeps the
 * chunks ahead of off being filled.  true if the range (clipped to the end
 * of the file, and not empty) is served from the read-ahead: *hit holds
 * its bytes, at hit->mem (in a chunk, or copied into buf, len bytes, when
 * the range spans two chunks) until gfs_pfstream_put(); waits for chunks
 * still being filled.  false: the caller reads the range itself, then
 * reports how long that took with gfs_pfstream_timed().  Either way the
 * call must be ended by exactly one of those two.
 */
bool gfs_pfstream_get(gfs_pfstream *s, uint64_t off, size_t len, uint8_t *buf,
		      gfs_pfhit *hit);

/* gfs_pfstream_put(): release the bytes of a hit of gfs_pfstream_get(). */
void gfs_pfstream_put(gfs_pfstream *s, gfs_pfhit *hit);

/*
 * gfs_pfstream_timed(): the caller served the range of its last
 * gfs_pfstream_get() (which returned false) itself in ns nanoseconds.
 * Two sequential reads in a row that took GFS_PF_SLOW_NS or more start
 * the stream's read-ahead.
 */
void gfs_pfstream_timed(gfs_pfstream *s, uint64_t ns);

/* What a pool did. */
typedef struct gfs_prefetch_stats {
	uint64_t streams; /* times a stream started its read-ahead */
	uint64_t filled;  /* bytes read into chunks */
	uint64_t served;  /* bytes served from chunks */
} gfs_prefetch_stats;

/* gfs_prefetch_stats_get(): what p did so far. */
gfs_prefetch_stats gfs_prefetch_stats_get(gfs_prefetch *p);

/* Service time from which a sequential read counts as slow: 1 ms. */
#define GFS_PF_SLOW_NS 1000000u

#endif
