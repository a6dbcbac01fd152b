/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the byte server for tensors: open the sources of a layout once
 * and read any byte range of any tensor, optionally converted to another
 * floating-point dtype.  Thread-safe: reads use pread on shared descriptors
 * and take no lock; computed tensors (compute.h) are evaluated on read
 * through a cache with its own lock.
 */
#ifndef GATHERFS_SERVER_H
#define GATHERFS_SERVER_H

#include "gatherfs/index/layout.h"

typedef struct gfs_srcset gfs_srcset;

/*
 * gfs_srcset_open(): open every source of a finished layout read-only and
 * check that each is a regular file whose size equals the size recorded in
 * the layout (so every piece can be served).  Raises RLIMIT_NOFILE to its
 * hard limit when needed.  @return GFS_OK and *out, or an error naming the
 * file.
 */
gfs_err gfs_srcset_open(const gfs_layout *l, gfs_srcset **out);

/*
 * gfs_zstd_cache_check(): GFS_ERR_INVAL, naming it, if the environment
 * variable GATHERFS_ZSTD_CACHE_MB (the zstd frame cache budget in MiB,
 * 0 to 1048576) is set to anything else.  Readers ignore a malformed value
 * (the default budget applies): front ends call this first.
 */
gfs_err gfs_zstd_cache_check(void);

/* gfs_srcset_close(): close all descriptors and free; NULL allowed. */
void gfs_srcset_close(gfs_srcset *s);

/*
 * gfs_srcset_remote(): is a source of s on a network or FUSE file system
 * (gfs_fd_remote())?
 */
bool gfs_srcset_remote(const gfs_srcset *s);

/*
 * gfs_srcset_parallel_spans(): how many reads of a tensor's bytes had their
 * pieces read in parallel, off the page cache (reads on slow storage).
 */
uint64_t gfs_srcset_parallel_spans(const gfs_srcset *s);

/* gfs_srcset_fd(): the descriptor of source i. */
int gfs_srcset_fd(const gfs_srcset *s, uint32_t i);

/*
 * gfs_srcset_check_fd(): the descriptor the record check reads small
 * records of source i through: an open file of its own with the kernel's
 * read-ahead off (POSIX_FADV_RANDOM), so that the check reads the ranges
 * it asks for (POSIX_FADV_WILLNEED) and not the device's read-ahead window
 * beyond them in every file at once; gfs_srcset_fd(s, i) where the file
 * could not be opened twice (or the open file limit left no room).
 */
int gfs_srcset_check_fd(const gfs_srcset *s, uint32_t i);

/*
 * gfs_srcset_check(): GFS_OK if source i is as gfs_srcset_open() found it,
 * else GFS_ERR_IO naming the file (the check gfs_tensor_read() makes).  A
 * reader that bypasses gfs_tensor_read() (splicing gfs_srcset_fd()) must
 * call it first.
 */
gfs_err gfs_srcset_check(const gfs_layout *l, const gfs_srcset *s, uint32_t i);

/*
 * What is known of a checksummed record of the layout (gfs_record): not
 * checked yet, being checked, matching its stored checksum, or not.  Every
 * record starts UNCHECKED in a new srcset; src/server/integrity.c checks them.
 * Once a record is BAD, gfs_tensor_read() (and so every view) fails every
 * read of its bytes with GFS_ERR_IO naming the file, the record and the
 * tensors with bytes in it.
 */
typedef enum gfs_rec_state {
	GFS_REC_UNCHECKED = 0,
	GFS_REC_BUSY,
	GFS_REC_OK,
	GFS_REC_BAD,
} gfs_rec_state;

/* gfs_srcset_rec_state(): the state of record r. */
gfs_rec_state gfs_srcset_rec_state(const gfs_srcset *s, uint32_t r);

/*
 * gfs_srcset_rec_claim(): true if record r was UNCHECKED and is now BUSY
 * for the caller, who must end the claim with gfs_srcset_rec_settle().
 * Otherwise false, after waiting while another thread holds it BUSY (the
 * state is then OK, BAD, or UNCHECKED if that check could not be made).
 */
bool gfs_srcset_rec_claim(const gfs_srcset *s, uint32_t r);

/*
 * gfs_srcset_rec_try_claim(): gfs_srcset_rec_claim() that never waits:
 * false at once if record r is not UNCHECKED.  For a caller that already
 * holds other claims (waiting then could wait on a thread that waits on
 * one of them).
 */
bool gfs_srcset_rec_try_claim(const gfs_srcset *s, uint32_t r);

/*
 * gfs_srcset_rec_settle(): end a claim: state OK, BAD, or UNCHECKED when
 * the check could not be made (an I/O error); wakes the waiters.
 */
void gfs_srcset_rec_settle(const gfs_srcset *s, uint32_t r, gfs_rec_state state);

/*
 * gfs_srcset_set_piece_crc(): for the checker of a record (holding it
 * BUSY): the CRC-32 of piece p of tensor ti, a contiguous FILE piece in
 * that record.  Known once the record is settled OK.
 */
void gfs_srcset_set_piece_crc(const gfs_srcset *s, size_t ti, size_t p, uint32_t crc);

/*
 * gfs_srcset_piece_crc(): true and *crc, the CRC-32 of the source bytes of
 * piece p of tensor ti, if it is a contiguous FILE piece of a record found
 * OK (a record check computes them on the way); else false.
 */
bool gfs_srcset_piece_crc(const gfs_srcset *s, size_t ti, size_t p, uint32_t *crc);

/* A front end's way to tell the user something (one line, no newline). */
typedef void (*gfs_notice_fn)(const char *line);

/*
 * gfs_srcset_set_verify(): whether reads check the records they touch.  On
 * (the default of a new srcset), gfs_tensor_read() serves no byte of a
 * checksummed record before the whole record has been checked against its
 * stored CRC-32 in this srcset (integrity.h; each record once, on its first
 * use); a corrupt record fails every read of its bytes with GFS_ERR_IO.
 * Off: bytes are served unchecked (unsafe; records found BAD still fail;
 * lazy records, DCP chunks whose archive the import did not open, are
 * still opened and checked on first use).
 * notice (may be NULL) is called once, from a reading thread, when a read
 * must check much more than it returns (a small tensor of a ZeRO-3
 * checkpoint needs every rank's partition).  Call before any read.
 */
void gfs_srcset_set_verify(gfs_srcset *s, bool on, gfs_notice_fn notice);

/*
 * gfs_srcset_rec_servable(): may bytes of record r be served without a
 * check now: it is OK, or the srcset does not verify reads and it is
 * neither BAD nor lazy (gfs_record.lazy).  A reader that bypasses gfs_tensor_read() (splicing) must ask.
 */
bool gfs_srcset_rec_servable(const gfs_srcset *s, uint32_t r);

/*
 * gfs_srcset_replicas_servable(): may bytes of entry ti (a target, not an
 * alias) be served without comparing its on_read replicas
 * (gfs_layout.replicas) first: it has none, they were found equal, or the
 * srcset does not verify reads.  A reader that bypasses gfs_tensor_read() (splicing) must ask.
 */
bool gfs_srcset_replicas_servable(const gfs_srcset *s, size_t ti);

/* gfs_srcset_nbad(): how many records have been found BAD so far. */
size_t gfs_srcset_nbad(const gfs_srcset *s);

/*
 * gfs_tensor_out_nbytes(): size of entry i when presented in dtype
 * gfs_dtype_out(tensor dtype, want).
 */
uint64_t gfs_tensor_out_nbytes(const gfs_layout *l, size_t i, gfs_dtype want);

/*
 * gfs_tensor_read(): copy bytes [off, off + len) of entry i (an alias reads
 * its target), presented in gfs_dtype_out(dtype, want), into buf.
 * off + len must not exceed gfs_tensor_out_nbytes().  Reading a piece whose
 * source was modified, truncated or rewritten since gfs_srcset_open() (its
 * size, mtime or ctime differ) fails with GFS_ERR_IO naming the file: wrong
 * bytes are never returned silently.  A source replaced by rename keeps
 * being served from the open descriptor (the old, consistent content).
 * Reading bytes of a record found corrupt (GFS_REC_BAD) fails with
 * GFS_ERR_IO; bytes of records not checked yet are served.
 */
gfs_err gfs_tensor_read(const gfs_layout *l, const gfs_srcset *s, size_t i,
			gfs_dtype want, uint64_t off, void *buf, size_t len);

/*
 * gfs_tensor_check_ahead(): a sequential reader of entry cur will read
 * entry next after it.  Once no background check of cur's records runs
 * (gfs_tensor_read() starts one at the first read that needs a check),
 * start one of next's, so that next's records are checked while cur's
 * bytes are served, and its first read waits for no check.  Nothing
 * without verification, for a computed entry, or when next's check ran or
 * no background slot is free (then next's first read checks as always).
 * Serves nothing and never fails.
 */
void gfs_tensor_check_ahead(const gfs_layout *l, const gfs_srcset *s, size_t cur, size_t next);

/*
 * gfs_tensor_read_raw(): bytes [off, off + len) of tensor t with pieces (an
 * entry of l or of its inputs table: its pieces name l's sources), in its
 * own dtype.  Same checks as gfs_tensor_read().
 */
gfs_err gfs_tensor_read_raw(const gfs_layout *l, const gfs_srcset *s, const gfs_tensor *t,
			    uint64_t off, void *buf, size_t len);

#endif
