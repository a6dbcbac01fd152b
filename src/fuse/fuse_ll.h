/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — private header of the FUSE front end (fuse_ll.c, fuse_main.c),
 * the only place where libfuse is visible.
 */
#ifndef GATHERFS_FUSE_LL_H
#define GATHERFS_FUSE_LL_H

#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>
#include <stdbool.h>
#include <stdint.h>

#include "gatherfs/fs/fs.h"
#include "gatherfs/server/prefetch.h"

/*
 * Largest read request (and -o max_read) we ask the kernel for: replies
 * of up to 768 KiB are spliced (see fuse_ll.c), larger ones copied.
 * Direct-I/O reads (the zip views) come in requests of this size.
 */
#define GFS_LL_MAX_READ 786432 /* 768 KiB */

/*
 * Default read-ahead window of a mount (-o readahead_kb): how many bytes of
 * a buffered reader's file (model.safetensors, its shards, tensors/) the
 * kernel asks for ahead of it, in requests of up to GFS_LL_MAX_READ, several
 * in flight.  Sources on local disks: 512 KiB (larger windows made
 * safetensors' mmap loading slower: 0.51 s at 512 KiB, 0.63 s at 4 MiB).
 * Sources on a network or FUSE file system (gfs_srcset_remote()), where a
 * request takes milliseconds: 4 MiB keeps enough of them in flight (a TP 4
 * x PP 2 Megatron view over 2 ms requests: 0.31 GB/s at 512 KiB, 0.60 at
 * 4 MiB).  bench/RESULTS.md, stop 52.
 */
#define GFS_LL_READAHEAD_KB 512
#define GFS_LL_READAHEAD_KB_REMOTE 4096

/* Largest -o readahead_kb: init() offers the kernel a 64 MiB read-ahead at most. */
#define GFS_LL_READAHEAD_KB_MAX 65536

/*
 * gfs_ll_set_readahead(): set the read-ahead window of the FUSE mount at
 * mountpoint (absolute) to kb KiB through /sys/class/bdi (needs root).
 * @return true if set or kb is 0; false, with the kernel's default
 * (128 KiB) kept, if not permitted or the mount is not found in
 * /proc/self/mountinfo.  Call after mounting; it sends no request to the
 * file system.
 */
bool gfs_ll_set_readahead(const char *mountpoint, unsigned kb);

/*
 * gfs_ll_mount_type(): if something is mounted at mountpoint (absolute),
 * true and the type of the last mount there ("fuse.gatherfs", "autofs")
 * in type[0..len).
 */
bool gfs_ll_mount_type(const char *mountpoint, char *type, size_t len);

/*
 * gfs_ll_crc_cache_dir(): the default directory of the persistent CRC
 * cache: $XDG_CACHE_HOME/gatherfs, else $HOME/.cache/gatherfs, else
 * /var/cache/gatherfs.  Freed by the caller; NULL if out of memory.
 */
char *gfs_ll_crc_cache_dir(void);

/* The session's userdata. */
typedef struct gfs_mount {
	const gfs_fs *fs;
	const gfs_srcset *src;                 /* the sources fs reads */
	unsigned max_read;                     /* -o max_read, repeated in init() */
	struct fuse_conn_info_opts *conn_opts; /* -o overrides for init() */
	bool nosplice;                         /* -o nosplice: always copy reads */
	bool bin_cache;                        /* -o bin_cache: no direct_io for zip views */
	bool tensors_direct;                   /* -o tensors_direct: direct_io for tensors/, optim/ files */
	bool splice;                           /* set by init(): splice reads */
	bool no_opendir;                       /* set by init(): opendir answers ENOSYS */
	gfs_prefetch *prefetch;                /* read-ahead of direct-I/O files, or NULL */
	/* the INIT exchange, as gfs_ll_custom_io()'s device wrappers see it */
	_Atomic bool init_done;                /* its reply is written */
	bool init_read;                        /* its request is read: */
	uint64_t init_unique;                  /* its id */
	bool mmap_offered;                     /* the kernel offers FUSE_DIRECT_IO_ALLOW_MMAP */
	bool direct_mmap;                      /* and we asked for it: direct-I/O files map shared */
} gfs_mount;

/*
 * gfs_ll_custom_io(): after fuse_session_mount(), route se's /dev/fuse
 * reads and writes through gfs_ll's own wrappers, which pass every
 * request and reply through unchanged but one: the INIT reply asks for
 * FUSE_DIRECT_IO_ALLOW_MMAP (Linux 6.6) when the kernel offers it, which
 * libfuse 3.14 does not know; then direct-I/O files (pytorch_model.bin,
 * -o tensors_direct) can be mapped shared (m->direct_mmap).  m must be
 * se's userdata.  @return 0, or -errno (nothing changed).
 */
int gfs_ll_custom_io(struct fuse_session *se, gfs_mount *m);

/*
 * gfs_ll_ops: the low-level operations.  Read-only: inode numbers are
 * gfs_fs's, forget is a no-op; the only state is the read-ahead stream of
 * a direct-I/O file open with -o prefetch (its file handle).  Every
 * modifying operation fails with EROFS.
 */
extern const struct fuse_lowlevel_ops gfs_ll_ops;

#endif
