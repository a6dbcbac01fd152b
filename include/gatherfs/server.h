/*
 * gatherfs — the byte server for tensors: open the sources of a layout once
 * and read any byte range of any tensor, optionally converted to another
 * floating-point dtype.  Thread-safe: reads use pread on shared descriptors
 * and take no lock; computed tensors (compute.h) are evaluated on read
 * through a cache with its own lock.
 */
#ifndef GATHERFS_SERVER_H
#define GATHERFS_SERVER_H

#include "gatherfs/layout.h"

typedef struct gfs_srcset gfs_srcset;

/*
 * gfs_srcset_open(): open every source of a finished layout read-only and
 * check that each is a regular file whose size equals the size recorded in
 * the layout (so every piece can be served).  Raises RLIMIT_NOFILE to its
 * hard limit when needed.  @return GFS_OK and *out, or an error naming the
 * file.
 */
gfs_err gfs_srcset_open(const gfs_layout *l, gfs_srcset **out);

/* gfs_srcset_close(): close all descriptors and free; NULL allowed. */
void gfs_srcset_close(gfs_srcset *s);

/* gfs_srcset_fd(): the descriptor of source i. */
int gfs_srcset_fd(const gfs_srcset *s, uint32_t i);

/*
 * gfs_srcset_check(): GFS_OK if source i is as gfs_srcset_open() found it,
 * else GFS_ERR_IO naming the file (the check gfs_tensor_read() makes).  A
 * reader that bypasses gfs_tensor_read() (splicing gfs_srcset_fd()) must
 * call it first.
 */
gfs_err gfs_srcset_check(const gfs_layout *l, const gfs_srcset *s, uint32_t i);

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
 */
gfs_err gfs_tensor_read(const gfs_layout *l, const gfs_srcset *s, size_t i,
			gfs_dtype want, uint64_t off, void *buf, size_t len);

/*
 * gfs_tensor_read_raw(): bytes [off, off + len) of tensor t with pieces (an
 * entry of l or of its inputs table: its pieces name l's sources), in its
 * own dtype.  Same checks as gfs_tensor_read().
 */
gfs_err gfs_tensor_read_raw(const gfs_layout *l, const gfs_srcset *s, const gfs_tensor *t,
			    uint64_t off, void *buf, size_t len);

#endif
