/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — export: write a view of a layout to regular files, streaming
 * through the same byte server the mount uses, with memory independent of
 * the model size and an atomic finish (temporary name, fsync, rename).
 */
#ifndef GATHERFS_EXPORT_H
#define GATHERFS_EXPORT_H

#include "gatherfs/server/server.h"

typedef enum gfs_format {
	GFS_FORMAT_NONE = 0,
	GFS_FORMAT_BIN,         /* torch zip (pytorch_model.bin) */
	GFS_FORMAT_SAFETENSORS, /* model.safetensors */
} gfs_format;

/* A small file written beside the shards (config.json...). */
typedef struct gfs_export_file {
	const char *name; /* a plain file name */
	const char *text;
	size_t len;
} gfs_export_file;

typedef struct gfs_export_opts {
	gfs_format format;
	gfs_dtype want;      /* GFS_DT_INVALID: tensors in their own dtype */
	uint64_t shard_size; /* 0: one file; else HF shards + index in a directory */
	bool progress;       /* draw a progress bar on stderr */
	bool signals;        /* on SIGINT/SIGTERM/SIGHUP remove every temporary file,
				then die of the signal (see export.c) */
	const gfs_export_file *extra; /* with shard_size: files written into out too, */
	size_t nextra;                /* under the same rules as the shards */
} gfs_export_opts;

/*
 * gfs_format_from_name(): "bin"/"pt"/"torch" or "safetensors"/"st", or a
 * file name ending in .bin, .pt, .pth or .safetensors.  GFS_FORMAT_NONE if
 * unknown.
 */
gfs_format gfs_format_from_name(const char *s);

/*
 * gfs_export_check_target(): path (not followed if a symbolic link) is a
 * name export may write: missing, or a regular file (want_dir: a
 * directory).  Anything else (a device, a FIFO, a socket, a symbolic link,
 * a directory where a file is meant) is GFS_ERR_INVAL naming path and what
 * it is.
 */
gfs_err gfs_export_check_target(const char *path, bool want_dir);

/*
 * gfs_export(): write the view.  Without shard_size, out is the file to
 * write, or "-": standard output, written as it is produced (no temporary
 * file; o->signals must be off); with shard_size, out is a directory
 * (created if missing) that receives the shard files and the index, named as
 * transformers names them, and o->extra's files.  Before anything is created every name is
 * checked without following a symbolic link: out must be missing or a
 * regular file (with shard_size: a directory), each shard and the index
 * (and each extra file) missing or a regular file; anything else (a device, a FIFO, a socket, a
 * symbolic link, a directory where a file is meant) is GFS_ERR_INVAL naming
 * it and what it is, and nothing is touched.  Each name is checked again at
 * its rename, which replaces only a regular file (a missing name with
 * RENAME_NOREPLACE, so nothing that appears meanwhile is replaced).  Every file
 * is written under a temporary name (.NAME.XXXXXX), all are flushed with
 * fsync(), then renamed into place, the index last; a previous index in the
 * directory is removed before the first rename.  On any error, or with
 * o->signals on SIGINT/SIGTERM/SIGHUP, every temporary file (and the
 * directory, if this call created it) is removed: nothing new is left.
 * Only a crash (SIGKILL, power loss) can leave a .NAME.XXXXXX file, or,
 * during the renames, shards without an index; an index is only ever
 * visible together with every shard it names.
 */
gfs_err gfs_export(const gfs_layout *l, const gfs_srcset *s, const char *out,
		   const gfs_export_opts *o);

#endif
