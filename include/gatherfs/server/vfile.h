/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — virtual files: a size and a sorted list of segments.
 *
 * Every file gatherfs presents (the torch zip, the per-tensor files, the
 * index, passed-through files) is a gfs_vfile.  Its segments tile
 * [0, size) in order, without gaps or overlaps.  A segment is one of:
 *
 *   MEM     bytes held by the vfile itself (text, padding);
 *   TENSOR  a byte range of a layout entry, in the output dtype, read
 *           through gfs_tensor_read();
 *   FD      a byte range of an open file descriptor (passed-through files);
 *   GEN     bytes produced on demand by a generator callback (headers
 *           written when read, lazily computed CRC-32s).
 *
 * gfs_vfile_read() is the one read function: it finds the first segment by
 * binary search and copies segment by segment.  A vfile is built with the
 * gfs_vfile_add_*() calls, or its segments are computed by the view that
 * made it (gfs_vfile_new_computed(): the torch zip and safetensors files
 * keep no segment list), then only read; reads are thread-safe and take no
 * lock (generators must be thread-safe themselves).
 */
#ifndef GATHERFS_VFILE_H
#define GATHERFS_VFILE_H

#include "gatherfs/server/crccache.h"
#include "gatherfs/server/server.h"

/* Where TENSOR segments get their bytes: a layout, its open sources and the
 * requested output dtype (GFS_DT_INVALID: every tensor in its own dtype). */
typedef struct gfs_vctx {
	const gfs_layout *layout;
	const gfs_srcset *src;
	gfs_dtype want;
	const gfs_crccache *crc_cache; /* the persistent CRC cache, or NULL */
} gfs_vctx;

/*
 * A generator: fills buf with bytes [off, off + len) of the generated
 * segment identified by arg.  Called concurrently from many threads.
 */
typedef gfs_err (*gfs_vgen_fn)(void *ctx, uint64_t arg, uint64_t off,
			       uint8_t *buf, size_t len);

typedef struct gfs_vgen {
	gfs_vgen_fn fn;
	void *ctx;
} gfs_vgen;

typedef enum gfs_seg_kind {
	GFS_SEG_MEM,
	GFS_SEG_TENSOR,
	GFS_SEG_FD,
	GFS_SEG_GEN,
} gfs_seg_kind;

typedef struct gfs_seg {
	uint64_t voff; /* offset of the segment in the virtual file */
	uint64_t len;  /* > 0 */
	gfs_seg_kind kind;
	union {
		struct {
			size_t boff; /* offset in the vfile's byte store */
		} mem;
		struct {
			size_t entry; /* layout entry */
			uint64_t off; /* offset in its output bytes */
			const gfs_vgen *guard; /* NULL, or called before serving bytes */
			uint64_t guard_arg;
		} tensor;
		struct {
			int fd;
			uint64_t off;
			const char *label; /* names the file in messages */
		} fd;
		struct {
			const gfs_vgen *gen;
			uint64_t arg;
		} gen;
	} u;
} gfs_seg;

typedef struct gfs_vfile gfs_vfile;

/*
 * gfs_vfile_new(): an empty vfile (size 0).  ctx may be NULL if no TENSOR
 * segment is added; otherwise it must outlive the vfile.
 * @return GFS_OK and *out, freed with gfs_vfile_free().
 */
gfs_err gfs_vfile_new(const gfs_vctx *ctx, gfs_vfile **out);

/* gfs_vfile_free(): free the vfile and its byte store; NULL allowed. */
void gfs_vfile_free(gfs_vfile *vf);

/*
 * gfs_vfile_own(): vf owns p (e.g. the state of its generators): free_fn(p)
 * runs when vf is freed, after nothing reads it any more.  Once per vfile
 * made by gfs_vfile_new().
 */
void gfs_vfile_own(gfs_vfile *vf, void *p, void (*free_fn)(void *));

/*
 * Segments computed when needed instead of stored, for files of many
 * segments that follow a rule (the torch zip, the safetensors files): n
 * segments tiling [0, size).  seg(ctx, i, out) writes segment i (< n; kind
 * TENSOR, FD or GEN, never MEM: a computed vfile has no byte store);
 * find(ctx, off) is the index of the segment holding byte off (< size).
 * Both are called from many threads at once and must not fail.
 */
typedef struct gfs_vsegs {
	void (*seg)(const void *ctx, size_t i, gfs_seg *out);
	size_t (*find)(const void *ctx, uint64_t off);
	const void *ctx;
	size_t n;
	uint64_t size;
} gfs_vsegs;

/*
 * gfs_vfile_size_add(): *size += len, for a file of at most 2^63 - 1 bytes
 * (off_t), the bound every vfile keeps: how views that compute their
 * segments place them.  @return GFS_OK, or GFS_ERR_LIMIT with *size as it
 * was.
 */
gfs_err gfs_vfile_size_add(uint64_t *size, uint64_t len);

/*
 * gfs_vfile_new_computed(): a vfile whose segments are those segs (copied;
 * segs->ctx borrowed, it must outlive the vfile) computes.  Nothing can be
 * added to it.  ctx as for gfs_vfile_new().  @return GFS_OK and *out, or
 * GFS_ERR_LIMIT for a size above 2^63 - 1.
 */
gfs_err gfs_vfile_new_computed(const gfs_vctx *ctx, const gfs_vsegs *segs, gfs_vfile **out);

/* Room for a vfile of one tensor (gfs_vfile_one()), e.g. on the stack. */
typedef struct gfs_vfile_buf {
	_Alignas(max_align_t) unsigned char space[192];
} gfs_vfile_buf;

/*
 * gfs_vfile_one(): in buf, the vfile of output bytes [0, len) of layout
 * entry `entry` of ctx's layout (len within gfs_tensor_out_nbytes()), as
 * gfs_vfile_add_tensor() would make it: files of one tensor need no vfile
 * kept for them.  Valid while buf and ctx are; not to be freed or added to.
 * @return GFS_OK and *out, or the error gfs_vfile_add_tensor() would return
 */
gfs_err gfs_vfile_one(const gfs_vctx *ctx, size_t entry, uint64_t len, gfs_vfile_buf *buf,
		      const gfs_vfile **out);

/*
 * gfs_vfile_add_mem(): append len bytes copied from data.  Consecutive MEM
 * appends form one segment.  len 0 is a no-op.
 */
gfs_err gfs_vfile_add_mem(gfs_vfile *vf, const void *data, size_t len);

/*
 * gfs_vfile_add_tensor(): append bytes [off, off + len) of layout entry
 * `entry` in the context's output dtype.  The range must lie inside
 * gfs_tensor_out_nbytes().  len 0 is a no-op.
 */
gfs_err gfs_vfile_add_tensor(gfs_vfile *vf, size_t entry, uint64_t off,
			     uint64_t len);

/*
 * gfs_vfile_add_tensor_guarded(): as gfs_vfile_add_tensor(), and every read
 * or map of the segment first calls guard (borrowed, must outlive the
 * vfile) with argument arg, off 0, no buffer and len 0; its error fails the
 * read instead of serving the bytes.
 */
gfs_err gfs_vfile_add_tensor_guarded(gfs_vfile *vf, size_t entry, uint64_t off,
				     uint64_t len, const gfs_vgen *guard, uint64_t arg);

/*
 * gfs_vfile_add_fd(): append bytes [off, off + len) of the open descriptor
 * fd (borrowed: it must stay open while the vfile is read).  label (borrowed
 * too) names the file in error messages.  len 0 is a no-op.
 */
gfs_err gfs_vfile_add_fd(gfs_vfile *vf, int fd, uint64_t off, uint64_t len,
			 const char *label);

/* Writes item k of a generated text into b (gfs_vgen_items()). */
typedef gfs_err (*gfs_vgen_item_fn)(const void *ctx, size_t k, gfs_buf *b);

/*
 * gfs_vgen_items(): for a generator of text made of n items laid end to
 * end, item k at [start[k], start[k + 1]) (start[0] is 0), each written
 * by item(ctx, k, b) into an emptied b: bytes [off, off + len) of the
 * items into buf, *filled of them (less than len past start[n]).
 * O(log n) plus the items that overlap the range.
 */
gfs_err gfs_vgen_items(const uint64_t *start, size_t n, gfs_vgen_item_fn item, const void *ctx,
		       uint64_t off, uint8_t *buf, size_t len, size_t *filled);

/*
 * gfs_vfile_add_gen(): append len bytes produced by gen (borrowed, must
 * outlive the vfile) with argument arg.  len 0 is a no-op.
 */
gfs_err gfs_vfile_add_gen(gfs_vfile *vf, const gfs_vgen *gen, uint64_t arg,
			  uint64_t len);

/*
 * gfs_vfile_shrink(): give back the room vf grew for more segments and
 * bytes, once it is complete (adding to it later stays allowed).
 */
void gfs_vfile_shrink(gfs_vfile *vf);

/* gfs_vfile_size(): total size in bytes. */
uint64_t gfs_vfile_size(const gfs_vfile *vf);

/* gfs_vfile_nsegs()/gfs_vfile_seg(): the segments, in file order; seg i into *out. */
size_t gfs_vfile_nsegs(const gfs_vfile *vf);
void gfs_vfile_seg(const gfs_vfile *vf, size_t i, gfs_seg *out);

/*
 * gfs_vfile_find(): index of the segment containing byte off.
 * off < gfs_vfile_size().  O(log nsegs).
 */
size_t gfs_vfile_find(const gfs_vfile *vf, uint64_t off);

/*
 * gfs_vfile_read(): copy bytes [off, off + len) into buf, clipped to the end
 * of the file; *got receives the number of bytes copied (0 at or past the
 * end).  On failure nothing is guaranteed about buf; the error names the
 * file or tensor that failed.
 */
gfs_err gfs_vfile_read(const gfs_vfile *vf, uint64_t off, void *buf, size_t len,
		       size_t *got);

/* One extent of a mapped read: bytes in memory, or a range of a descriptor. */
typedef struct gfs_vext {
	const void *mem; /* non-NULL: the bytes (valid while the vfile lives) */
	int fd;          /* mem NULL: read len bytes of fd at off */
	uint64_t off;
	size_t len;      /* > 0 */
} gfs_vext;

/*
 * gfs_vfile_map(): describe bytes [off, off + len), clipped to the end of
 * the file, as at most max extents without copying tensor bytes, so that a
 * caller can splice them.  GEN bytes are produced into scratch (scratch_len
 * bytes, which must outlive the use of the extents).  *got receives the
 * byte count (0 at or past the end) and *n the number of extents.
 * @return GFS_OK; GFS_ERR_LIMIT if the range needs gfs_vfile_read() instead
 * (more than max extents, converted dtypes, strided or compressed pieces,
 * GEN bytes beyond scratch); or a generator's error.
 */
gfs_err gfs_vfile_map(const gfs_vfile *vf, uint64_t off, size_t len, gfs_vext *ext,
		      size_t max, uint8_t *scratch, size_t scratch_len, size_t *n,
		      size_t *got);

/*
 * gfs_vfile_cached(): whether reading bytes [off, off + len) would find
 * its first source byte in the page cache (a probe of one byte with
 * RWF_NOWAIT, nothing else read): true too if the range needs no source.
 * false if that byte is not cached, the source has no page cache (FUSE
 * with direct I/O: EOPNOTSUPP), or the range cannot be mapped
 * (gfs_vfile_map()).  For telling slow storage from a busy CPU.
 */
bool gfs_vfile_cached(const gfs_vfile *vf, uint64_t off, size_t len);

#endif
