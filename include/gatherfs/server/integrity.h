/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — source integrity: check the checksummed records of a layout
 * (gfs_record: zip records of torch.save archives, each with the CRC-32
 * its central directory stores) against their bytes.
 *
 * A check reads a whole record, padding and bytes no view serves included
 * (for a record inside a zstd frame: decompresses the whole frame, which
 * also verifies the frame's content checksum when it carries one), and
 * leaves the record OK or BAD in the srcset (gfs_srcset_rec_state()); from
 * then on the byte server refuses every read of a BAD record's bytes.
 * Bytes of pieces that lie in no record (safetensors files, raw dumps named
 * by a layout JSON) cannot be checked.
 */
#ifndef GATHERFS_INTEGRITY_H
#define GATHERFS_INTEGRITY_H

#include "gatherfs/server/server.h"

/* What a check did. */
typedef struct gfs_integrity_stats {
	size_t checked;    /* records this call checked */
	uint64_t bytes;    /* source bytes it read (compressed bytes for zstd) */
	size_t frames;     /* zstd frames among them */
	size_t frames_sum; /* ... of which carry a content checksum */
} gfs_integrity_stats;

/*
 * gfs_integrity_check(): make the state of records recs[0..n) of l
 * (duplicates allowed; recs NULL: every record, n ignored) known in s:
 * check those not checked yet, on up to nthreads threads (the caller
 * counts as one; 0: one per online CPU, at least 16 for slow storage, at
 * most 32), and wait for those
 * other threads are checking.  *nbad (may be NULL) receives how many of
 * them are BAD, *st (may be NULL) what this call did.  A record that does
 * not match its CRC-32, or whose zstd frame does not decode (or fails its
 * content checksum), is BAD: that is not an error.  @return GFS_OK, or the
 * first error reading a source (the records it left are UNCHECKED).
 * Sources on local file systems are read through mappings: the first such
 * check installs a process-wide SIGBUS handler, which turns a source
 * truncated under a check into that check's GFS_ERR_IO and passes every
 * other SIGBUS to the handler there was before (src/server/integrity.c).
 */
gfs_err gfs_integrity_check(const gfs_layout *l, const gfs_srcset *s, const uint32_t *recs,
			    size_t n, unsigned nthreads, size_t *nbad, gfs_integrity_stats *st);

/*
 * gfs_integrity_require(): gfs_integrity_check(), then GFS_ERR_IO naming
 * the first BAD record of recs (its file, name and the tensors with bytes
 * in it) if there is one.
 */
gfs_err gfs_integrity_require(const gfs_layout *l, const gfs_srcset *s, const uint32_t *recs,
			      size_t n, unsigned nthreads);

/*
 * gfs_integrity_unsummed(): the bytes of the pieces of every entry (model
 * tensors and optimizer-state entries) that lie in no checksummed record,
 * so no check can vouch for them; *ntensors (may be NULL) receives how many
 * entries have such bytes, and unsummed[i] (an array of l->nsources, may be
 * NULL) is set true for every source holding some.
 */
uint64_t gfs_integrity_unsummed(const gfs_layout *l, bool *unsummed, size_t *ntensors);

/*
 * gfs_unsummed: an iterator over the sources holding bytes that lie in no
 * checksummed record (gfs_integrity_unsummed()), with the totals.
 */
typedef struct gfs_unsummed {
	const gfs_layout *l;
	uint64_t bytes;  /* such bytes, all sources */
	size_t ntensors; /* entries with such bytes */
	bool *src;       /* [l->nsources]: the source holds some */
	size_t next;     /* the next source index to look at */
} gfs_unsummed;

/*
 * gfs_unsummed_init(): count l's unsummed bytes into *u and start the walk
 * over their sources; false when out of memory (*u is then empty and
 * gfs_unsummed_free() needs no call).  Free it with gfs_unsummed_free().
 */
bool gfs_unsummed_init(gfs_unsummed *u, const gfs_layout *l);

/* gfs_unsummed_next(): the next such source in source order, NULL at the end
 * (and at once when there are no such bytes). */
const gfs_source *gfs_unsummed_next(gfs_unsummed *u);

/* gfs_unsummed_free(): free what gfs_unsummed_init() took; u may be NULL. */
void gfs_unsummed_free(gfs_unsummed *u);

#endif
