/*
 * gatherfs — private header of the FUSE front end (fuse_ll.c, fuse_main.c),
 * the only place where libfuse is visible.
 */
#ifndef GATHERFS_FUSE_LL_H
#define GATHERFS_FUSE_LL_H

#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>

#include "gatherfs/fs.h"

/* Largest read request (and -o max_read) we ask the kernel for. */
#define GFS_LL_MAX_READ 1048576 /* 1 MiB */

/* The session's userdata. */
typedef struct gfs_mount {
	const gfs_fs *fs;
	unsigned max_read;                     /* -o max_read, repeated in init() */
	struct fuse_conn_info_opts *conn_opts; /* -o overrides for init() */
} gfs_mount;

/*
 * gfs_ll_ops: the low-level operations.  Read-only, stateless: inode
 * numbers are gfs_fs's, forget is a no-op, reads take no lock.  Every
 * modifying operation fails with EROFS.
 */
extern const struct fuse_lowlevel_ops gfs_ll_ops;

#endif
