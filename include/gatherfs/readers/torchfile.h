/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — a torch.save file opened for its pickle: the zip's central
 * directory and data.pkl read by the safe pickle reader (nothing executed),
 * the file kept open for the storages' byte ranges.
 */
#ifndef GATHERFS_TORCHFILE_H
#define GATHERFS_TORCHFILE_H

#include "gatherfs/readers/pickle.h"
#include "gatherfs/readers/torchzip.h"

/*
 * gfs_torch_open(): open the regular file at path (non-empty), its zip and
 * its data.pkl (at most max_pickle bytes), whose root must be a dict (else
 * GFS_ERR_FORMAT "PATH: its pickle holds no dict: not WHAT").  A missing
 * file is GFS_ERR_NOTFOUND.  *fd, *size, *zip and *pk stay set as far as
 * they got, for gfs_torch_close() (also on failure; *fd -1 and NULLs
 * where nothing was opened).
 */
gfs_err gfs_torch_open(const char *path, uint64_t max_pickle, const char *what, int *fd,
		       uint64_t *size, gfs_tzip **zip, gfs_pickle **pk);

/* gfs_torch_close(): undo gfs_torch_open(). */
void gfs_torch_close(int fd, gfs_tzip *zip, gfs_pickle *pk);

#endif
