/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the mounted namespace, independent of FUSE.
 *
 *   /                   directory
 *   /pytorch_model.bin  the state dict as a torch zip (view_torchzip.h)
 *   /model.safetensors  the state dict as safetensors (view_safetensors.h)
 *   /layout.json        the layout index as JSON (gfs_layout_to_json()),
 *                       written only when asked for: sized on its first
 *                       stat (O(layout) once), read a unit at a time
 *   /tensors/           one regular file per tensor holding its raw bytes
 *                       in the output dtype; a tied alias is a symlink to
 *                       its target's file
 *   /tensors/INDEX      tab-separated text: a header line, then per tensor
 *                       name, dtype, shape, bytes, alias target ("-" if none)
 *   /<name>             each regular file of the checkpoint root directory
 *                       (layout->root_dir), passed through unchanged (or
 *                       replaced by gfs_fs_opts.replace), but the layout's
 *                       sources and plain model files
 *                       (gfs_plain_is_model_name())
 *   /optim/<state>/<name>       optimizer state `state` of param `name` (raw
 *                               bytes in the output dtype, named as in tensors/)
 *   /optim/<state>.safetensors  every param's `state`, keyed by param name
 *   /latest_universal, /<tag>_universal/...
 *                       a DeepSpeed universal checkpoint (view_universal.h)
 *   /adapter/           with gfs_fs_opts.adapter: adapter_model.safetensors
 *                       (a safetensors view of that layout) and, when its
 *                       root_dir has one, adapter_config.json
 *
 * With a shard size, pytorch_model.bin and model.safetensors are replaced by
 * Hugging Face shards and their index files (shards.h):
 * pytorch_model-0000i-of-0000N.bin + pytorch_model.bin.index.json and
 * model-0000i-of-0000N.safetensors + model.safetensors.index.json.  The
 * views option chooses which of bin, safetensors, tensors, layout, optim
 * and universal appear.  A layout the universal view cannot serve (see
 * gfs_uview_new()) gets no universal files and, with views GFS_VIEW_ALL, a
 * note saying why (else see gfs_fs_view_absent()).
 *
 * Tensor file names are the state-dict keys with '%', '/' and control bytes
 * written as %XX (upper-case hex); the names ".", ".." and "INDEX" are
 * written "%2E", "%2E%2E" and "%49NDEX".  Decoding every %XX gives the key
 * back.  A name longer than 255 bytes (NAME_MAX) is cut to at most 237
 * bytes, at a character boundary, followed by "%~" and 16 hex digits of a
 * 64-bit FNV-1a hash of the key: "%~" is no escape, so such a name is
 * recognisably cut.  Tensor files carry the extended attributes
 * user.gatherfs.dtype, user.gatherfs.shape ("[1000, 64]") and
 * user.gatherfs.name (the key) and user.gatherfs.sha256 (the hex SHA-256
 * of the bytes the file serves, computed on the first request and kept for
 * the mount's life: tensorhash.h); INDEX has the whole escaped key too.
 *
 * Ownership and permissions (see perm.h): every node is owned by the common
 * owner (group) of the files behind it, else by the user (group) running
 * gatherfs, and each class may read it only if it could read every one of
 * those files along its path.  Behind a tensors/ file: its sources; behind
 * pytorch_model.bin, model.safetensors and their shards: the sources of
 * their tensors; behind layout.json: every source; behind every one of
 * them, INDEX, the HF index files and tensors/: the importer's metadata
 * inputs (gfs_layout.inputs); behind the root: those and the checkpoint
 * directory's listing; behind a passed-through file: that file.  Nothing
 * is writable; directories are searchable where readable.  The kernel
 * checks these modes (the FUSE front end mounts with default_permissions).
 *
 * Checkpoint files whose names a view may take (pytorch_model.bin,
 * model.safetensors, their HF shard and index names, layout.json,
 * tensors), whatever views are shown, are never passed through; nor are
 * symbolic links that leave the checkpoint directory (or dangle) but for
 * a Hugging Face cache snapshot's links into its blobs/ (hfcache.h), nor
 * files other than regular files and directories (subdirectories are not
 * shown).  Each is reported through gfs_fs_opts.notice.  Nor, silently, are
 * the files that point at files the mount does not show, which a loader
 * would follow from the mount and fail: DeepSpeed's `latest` (it names a
 * tag directory) and DCP's `.metadata` (it indexes the .distcp shards).  Inode numbers are
 * static; the namespace never changes after gfs_fs_new(), and every
 * function here is thread-safe.
 */
#ifndef GATHERFS_FS_H
#define GATHERFS_FS_H

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

#include "gatherfs/server/vfile.h"

#define GFS_FS_ROOT_INO 1

typedef enum gfs_node_type {
	GFS_NODE_DIR,
	GFS_NODE_REG,
	GFS_NODE_LNK,
} gfs_node_type;

/*
 * A node: most are stored by the gfs_fs; the universal view's param folders
 * and their files are made on request in a caller's buffer (gfs_fs_node()).
 */
typedef struct gfs_node {
	uint32_t ino;         /* its inode number (gfs_fs_new() refuses 2^32 - 1 nodes) */
	uint32_t parent;      /* ino of the parent directory (the root's is its own) */
	const char *name;     /* name in the parent ("" for the root) */
	union {
		const gfs_vfile *vf; /* REG: the contents, or NULL: see gfs_fs_vfile() */
		const char *link;    /* LNK: the target, relative to the parent */
	};
	int64_t entry;        /* a tensors/ or optim/ file, or a link: its layout entry; a
			       * universal view's file: <= -2 (composed on first use); else -1 */
	struct timespec mtime;
	gfs_node_type type;
	mode_t perm;          /* permission bits */
	uid_t uid;
	gid_t gid;
	bool zip_view;        /* REG: a torch zip view (pytorch_model.bin or a shard) */
} gfs_node;

typedef struct gfs_fs gfs_fs;

/* The views a mount shows (gfs_fs_opts.views). */
enum {
	GFS_VIEW_BIN = 1,         /* pytorch_model.bin (or its shards) */
	GFS_VIEW_SAFETENSORS = 2, /* model.safetensors (or its shards) */
	GFS_VIEW_TENSORS = 4,     /* tensors/ */
	GFS_VIEW_LAYOUT = 8,      /* layout.json */
	GFS_VIEW_OPTIM = 16,      /* optim/ */
	GFS_VIEW_UNIVERSAL = 32,  /* latest_universal, <tag>_universal/ */
	GFS_VIEW_ALL = 63,
};

/* A root file whose content the mount replaces (e.g. an edited config.json). */
typedef struct gfs_fs_file {
	const char *name;
	const char *text; /* the whole content */
} gfs_fs_file;

typedef struct gfs_fs_opts {
	gfs_dtype want;      /* GFS_DT_INVALID: tensors as stored */
	unsigned views;      /* GFS_VIEW_* bits */
	uint64_t shard_size; /* 0: single files; else HF shards of at most this many bytes */
	const gfs_crccache *crc_cache; /* the persistent CRC cache, NULL: none */
	void (*notice)(const char *line); /* told about every file left out; may be NULL */
	const gfs_layout *adapter;     /* the adapter/ view's tensors, NULL: no adapter/ */
	const gfs_srcset *adapter_src; /* its open sources */
	const gfs_fs_file *replace;    /* root files shown with other content (borrowed) */
	size_t nreplace;
} gfs_fs_opts;

/*
 * gfs_views_parse(): a list of view names (bin, safetensors, tensors,
 * layout, optim, universal, all) separated by ':' or '+' into GFS_VIEW_* bits.
 */
gfs_err gfs_views_parse(const char *s, unsigned *views);

/* gfs_view_name(): the name of one GFS_VIEW_* bit (or of GFS_VIEW_ALL), else NULL. */
const char *gfs_view_name(unsigned view);

/*
 * gfs_fs_new(): build the namespace of a finished layout whose sources are
 * open in src, with options o.  Composes every view and opens every
 * passed-through file now, so that all errors surface here (layout.json,
 * written later, can only run out of memory); reads no tensor data.  l and
 * src must outlive the gfs_fs.  @return GFS_OK and *out, freed with
 * gfs_fs_free(), or an error naming the file.
 */
gfs_err gfs_fs_new(const gfs_layout *l, const gfs_srcset *src, const gfs_fs_opts *o,
		   gfs_fs **out);

/* gfs_fs_free(): close passed-through files and free everything; NULL allowed. */
void gfs_fs_free(gfs_fs *fs);

/*
 * gfs_fs_nnotes()/gfs_fs_note(): things the namespace left out, one line
 * each (a universal view it cannot serve and why, checkpoint files hidden
 * behind a view), for the caller to log.
 */
size_t gfs_fs_nnotes(const gfs_fs *fs);
const char *gfs_fs_note(const gfs_fs *fs, size_t i);

/*
 * gfs_fs_view_absent(): why view (one GFS_VIEW_* bit asked for in
 * gfs_fs_opts.views) shows no file for this checkpoint, e.g. "no optimizer
 * state"; NULL if it shows files or was not asked for.  Only optim and
 * universal can be absent: the other views show any checkpoint.  A
 * universal view the checkpoint has but DeepSpeed could not load is a note
 * (gfs_fs_note()) only with views GFS_VIEW_ALL; with views asked for by
 * name the caller reports it from here.
 */
const char *gfs_fs_view_absent(const gfs_fs *fs, unsigned view);

/*
 * gfs_fs_node(): the node with inode number ino, or NULL: a stored node, or
 * one made in buf (a universal param folder or its file: no memory per
 * file), valid while buf is.  The same for gfs_fs_lookup() and
 * gfs_fs_dir_entry().
 */
const gfs_node *gfs_fs_node(const gfs_fs *fs, uint64_t ino, gfs_node *buf);

/* gfs_fs_ino(): the inode number of node n, one of fs's (gfs_fs_node() finds n by it). */
uint64_t gfs_fs_ino(const gfs_fs *fs, const gfs_node *n);

/* gfs_fs_lookup(): the entry `name` of directory dir, or NULL.  O(log n). */
const gfs_node *gfs_fs_lookup(const gfs_fs *fs, const gfs_node *dir,
			      const char *name, gfs_node *buf);

/*
 * gfs_fs_dir_count()/gfs_fs_dir_entry(): the entries of directory dir
 * (without "." and ".."), in a fixed order: the root's virtual files first,
 * tensors/INDEX first then the tensors in model order.
 */
size_t gfs_fs_dir_count(const gfs_fs *fs, const gfs_node *dir);
const gfs_node *gfs_fs_dir_entry(const gfs_fs *fs, const gfs_node *dir, size_t i,
				 gfs_node *buf);

/*
 * gfs_fs_stat(): the attributes of node n.  A universal view's file is
 * composed on its first stat to know its size.  @return GFS_OK, or that
 * composition's error naming the file (out of memory; *st then has size 0
 * and is not to be replied).
 */
gfs_err gfs_fs_stat(const gfs_fs *fs, const gfs_node *n, struct stat *st);

/* gfs_fs_statfs(): file system totals (read-only, nothing free). */
void gfs_fs_statfs(const gfs_fs *fs, struct statvfs *sv);

/*
 * gfs_fs_vfile(): the contents of regular file n: n->vf; for a file of one
 * tensor (n->vf NULL, n->entry set: tensors/ and optim/ files) a vfile
 * made in buf, valid while buf is; a universal view's file's vfile
 * (composed on first use, then kept); NULL for layout.json (written on
 * demand) and for a universal file that cannot be composed: read those
 * with gfs_fs_read(), which says why.  O(1) and no allocation but for a
 * universal file's first use.
 */
const gfs_vfile *gfs_fs_vfile(const gfs_fs *fs, const gfs_node *n, gfs_vfile_buf *buf);

/*
 * gfs_fs_read(): read bytes [off, off + len) of regular file n into buf,
 * clipped to its size; *got receives the count.  See gfs_vfile_read().
 */
gfs_err gfs_fs_read(const gfs_fs *fs, const gfs_node *n, uint64_t off,
		    void *buf, size_t len, size_t *got);

/*
 * gfs_fs_getxattr(): the value of extended attribute `name` of n, without a
 * terminating NUL.  *len receives its length.  size 0: only the length is
 * returned.  @return GFS_ERR_UNSUPPORTED for a name outside user.* (no
 * security labels, no ACLs), GFS_ERR_NOTFOUND if n has no such attribute,
 * GFS_ERR_LIMIT if it is longer than size.
 */
gfs_err gfs_fs_getxattr(const gfs_fs *fs, const gfs_node *n, const char *name,
			char *buf, size_t size, size_t *len);

/*
 * gfs_fs_listxattr(): the NUL-terminated names of n's extended attributes,
 * concatenated; size and *len as for gfs_fs_getxattr().
 */
gfs_err gfs_fs_listxattr(const gfs_fs *fs, const gfs_node *n, char *buf,
			 size_t size, size_t *len);

/*
 * gfs_fs_escape_name(): the tensors/ file name of state-dict key `name`
 * (see above; at most 255 bytes).  The caller frees *out.
 */
gfs_err gfs_fs_escape_name(const char *name, char **out);

#endif
