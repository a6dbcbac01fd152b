/*
 * gatherfs — the layout index: the table of output tensors.
 *
 * For each output tensor, in output order: its name, dtype, shape, and the
 * pieces that make up its contiguous row-major little-endian bytes.  A piece
 * says "these len bytes come from source file src at offset src_off" or
 * "len zero bytes".  Pieces are sorted and tile [0, nbytes) exactly.  An alias
 * (a tied weight) names its target instead of having pieces; it has the
 * target's dtype and shape.
 *
 * Importers build a layout with gfs_layout_new(), gfs_layout_add_*() and
 * gfs_layout_finish(), which validates it.  A finished layout is immutable
 * and safe to share between threads.  The JSON form is documented in
 * docs/layout-json.md.
 */
#ifndef GATHERFS_LAYOUT_H
#define GATHERFS_LAYOUT_H

#include "gatherfs/common.h"
#include "gatherfs/dtype.h"

#define GFS_MAX_DIMS 16
#define GFS_LAYOUT_VERSION 1

typedef enum gfs_piece_kind {
	GFS_PIECE_FILE = 0, /* bytes from a source file */
	GFS_PIECE_ZERO = 1, /* zero bytes */
} gfs_piece_kind;

typedef struct gfs_piece {
	uint64_t toff;    /* offset of the piece inside the tensor's bytes */
	uint64_t len;     /* bytes, > 0 */
	uint64_t src_off; /* FILE: offset in the source file */
	uint32_t src;     /* FILE: index into gfs_layout.sources */
	gfs_piece_kind kind;
} gfs_piece;

typedef struct gfs_source {
	char *path;    /* as written in the layout (relative to base_dir, or absolute) */
	char *abspath; /* resolved */
	uint64_t size; /* expected file size in bytes */
} gfs_source;

typedef struct gfs_tensor {
	char *name;
	gfs_dtype dtype;
	uint32_t ndim;
	uint64_t shape[GFS_MAX_DIMS];
	uint64_t numel;
	uint64_t nbytes;  /* numel * dtype size */
	int64_t alias_of; /* index of the target tensor, or -1 */
	char *alias_target; /* while building: name of the alias target, else NULL */
	gfs_piece *pieces;
	size_t npieces;
	size_t cap_pieces;
} gfs_tensor;

typedef struct gfs_layout {
	char *format;   /* source format: "deepspeed", "json", ... */
	char *info;     /* one line describing the checkpoint, may be NULL */
	char *base_dir; /* absolute directory relative source paths resolve against */
	char *root_dir; /* absolute checkpoint directory whose other files are passed through, may be NULL */
	gfs_source *sources;
	size_t nsources;
	size_t cap_sources;
	gfs_tensor *tensors;
	size_t ntensors;
	size_t cap_tensors;
	/* name lookup, built by gfs_layout_finish() */
	uint32_t *hash;
	size_t hash_cap;
	bool finished;
} gfs_layout;

/*
 * gfs_layout_new(): an empty layout for the given format name and base
 * directory (made absolute).  @return GFS_OK and *out.
 */
gfs_err gfs_layout_new(const char *format, const char *base_dir, gfs_layout **out);

/* gfs_layout_free(): free everything; NULL allowed. */
void gfs_layout_free(gfs_layout *l);

/* gfs_layout_set_info(), gfs_layout_set_root(): optional descriptive fields. */
gfs_err gfs_layout_set_info(gfs_layout *l, const char *info);
gfs_err gfs_layout_set_root(gfs_layout *l, const char *root_dir);

/*
 * gfs_layout_add_source(): register a source file (deduplicated by path)
 * with its expected size.  @return GFS_OK and *idx.
 */
gfs_err gfs_layout_add_source(gfs_layout *l, const char *path, uint64_t size,
			      uint32_t *idx);

/*
 * gfs_layout_add_tensor(): append a tensor with no pieces yet.  numel and
 * nbytes are computed with overflow checks.  @return GFS_OK and *idx.
 */
gfs_err gfs_layout_add_tensor(gfs_layout *l, const char *name, gfs_dtype dtype,
			      uint32_t ndim, const uint64_t *shape, size_t *idx);

/*
 * gfs_layout_add_alias(): append an alias entry named name for target.  The
 * target may be added later; gfs_layout_finish() resolves it (it must be a
 * tensor, not an alias) and gives the alias the target's dtype and shape.
 */
gfs_err gfs_layout_add_alias(gfs_layout *l, const char *name, const char *target);

/*
 * gfs_layout_add_piece(): append a FILE piece to tensor ti, right after its
 * previous piece.  Adjacent pieces from one source are merged.
 */
gfs_err gfs_layout_add_piece(gfs_layout *l, size_t ti, uint32_t src,
			     uint64_t src_off, uint64_t len);

/* gfs_layout_add_zero(): append a ZERO piece of len bytes to tensor ti. */
gfs_err gfs_layout_add_zero(gfs_layout *l, size_t ti, uint64_t len);

/*
 * gfs_layout_finish(): validate and seal: unique names, pieces tile each
 * tensor exactly, every FILE piece lies inside its source's recorded size,
 * alias targets are tensors.  label names the layout's origin in messages.
 */
gfs_err gfs_layout_finish(gfs_layout *l, const char *label);

/* gfs_layout_find(): index of the tensor named name, or -1.  O(1). */
int64_t gfs_layout_find(const gfs_layout *l, const char *name);

/*
 * gfs_layout_target(): the tensor holding the bytes of entry i (itself, or
 * its alias target).
 */
const gfs_tensor *gfs_layout_target(const gfs_layout *l, size_t i);

/*
 * gfs_layout_to_json(): serialise to the documented JSON schema.  The caller
 * frees *text with free().
 */
gfs_err gfs_layout_to_json(const gfs_layout *l, char **text);

/*
 * gfs_layout_from_json(): parse and validate a layout JSON held in
 * text[0..len).  Relative source paths resolve against the "base_dir" field
 * or, if absent, json_dir.  label names the file in messages.
 */
gfs_err gfs_layout_from_json(const char *text, size_t len, const char *label,
			     const char *json_dir, gfs_layout **out);

/* gfs_layout_load_file(): read a layout JSON file (see gfs_layout_from_json). */
gfs_err gfs_layout_load_file(const char *path, gfs_layout **out);

#endif
