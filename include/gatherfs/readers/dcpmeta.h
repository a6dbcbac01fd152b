/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — a reader for PyTorch DCP `.metadata` pickles.
 *
 * gfs_dcpmeta_load() runs a pickle virtual machine (protocols 2 to 5, the
 * binary opcodes) over a DCP Metadata pickle and keeps only what an
 * importer needs, as compact C records: it never builds the object graph
 * of the generic reader (pickle.h), so a million-chunk checkpoint costs
 * tens of bytes a chunk.  It never imports or calls anything.  Values are
 * 8-byte tagged words; DCP objects are reduced to records as soon as their
 * BUILD arrives:
 *
 *   ChunkStorageMetadata(offsets, sizes)       -> a gfs_dcp_chunk
 *   MetadataIndex(fqn, offset, index)          -> (fqn, offset) of an item
 *   _StorageInfo(relative_path, offset, length,
 *                transform_descriptors)        -> the rest of the item
 *   TensorProperties(dtype, ...)               -> the dtype's name
 *   TensorStorageMetadata(properties, size, chunks) -> a gfs_dcp_tensor
 *   BytesStorageMetadata()                     -> an entry of kind BYTES
 *   torch.Size(tuple)                          -> the tuple
 *
 * Tuples of ints are interned (one id for equal tuples).  Dicts, lists and
 * other tuples are kept only while they may still be used: a value BUILD,
 * REDUCE or NEWOBJ consumes is recycled unless a memo entry that the pickle
 * fetches later (found by a first pass over the opcodes) or a DUP holds it.
 *
 * Globals are whitelisted: torch.Size, torch.<name> (dtypes, layouts),
 * torch.serialization._get_layout, pathlib paths, collections.OrderedDict,
 * copyreg._reconstructor, builtins.object and builtins.getattr, and any
 * class of a torch.distributed module (the DCP classes above by name;
 * others become inert values).  Any other global, opcode or an int outside
 * [-2^59, 2^59) is refused.  Bad input gives one error line naming label.
 */
#ifndef GATHERFS_DCPMETA_H
#define GATHERFS_DCPMETA_H

#include "gatherfs/util/common.h"

/* An absent string or tuple id. */
#define GFS_DCP_NONE UINT32_MAX

typedef enum gfs_dcp_kind {
	GFS_DCP_TENSOR, /* TensorStorageMetadata */
	GFS_DCP_BYTES,  /* BytesStorageMetadata */
	GFS_DCP_OTHER,  /* any other value */
} gfs_dcp_kind;

/* A chunk: ids of its offsets and sizes int tuples (GFS_DCP_NONE: not a tuple of ints). */
typedef struct gfs_dcp_chunk {
	uint32_t offsets;
	uint32_t sizes;
} gfs_dcp_chunk;

typedef struct gfs_dcp_tensor {
	uint32_t dtype;   /* string id of torch.<name> of its properties, or GFS_DCP_NONE */
	uint32_t size;    /* int tuple id, or GFS_DCP_NONE */
	bool has_chunks;  /* chunks is a list */
	size_t first;     /* its chunks are chunks[first, first + nchunks) */
	size_t nchunks;   /* a list entry that is not a chunk is {NONE, NONE} */
} gfs_dcp_tensor;

/* A state_dict_metadata entry, in pickle order. */
typedef struct gfs_dcp_entry {
	uint32_t fqn;      /* string id (a name: no NUL, no control character) */
	gfs_dcp_kind kind;
	uint32_t tensor;   /* GFS_DCP_TENSOR: index in tensors */
} gfs_dcp_entry;

/* A storage_data entry, in pickle order. */
typedef struct gfs_dcp_item {
	uint32_t fqn;      /* string id (a name) */
	uint32_t offset;   /* int tuple id, or GFS_DCP_NONE for None */
	uint32_t rel;      /* relative_path string id (a name) */
	uint32_t ntd;      /* number of transform_descriptors (0 if None or absent) */
	uint32_t td0;      /* the first one's string id, or GFS_DCP_NONE */
	uint64_t off;      /* offset and length in the file, >= 0 */
	uint64_t len;
} gfs_dcp_item;

typedef struct gfs_dcpmeta {
	const gfs_dcp_entry *entries;
	size_t nentries;
	const gfs_dcp_tensor *tensors;
	size_t ntensors;
	const gfs_dcp_chunk *chunks;
	size_t nchunks;
	const gfs_dcp_item *items;
	size_t nitems;
	uint32_t version; /* string id, or GFS_DCP_NONE */
	size_t nfast;     /* objects the fast path read (for tests) */
	bool split_scan;  /* the prescan ran as two halves (for tests) */
	bool lazy;        /* read without the prescan (for tests) */
	struct gfs_dcpmeta_pools *pools; /* private */
} gfs_dcpmeta;

/*
 * gfs_dcpmeta_load(): parse the DCP .metadata pickle buf[0..len) (not
 * referenced after return) and check its shape: a Metadata object whose
 * state_dict_metadata dict has name keys and whose storage_data dict maps
 * MetadataIndex objects (a name, an int tuple or None) to _StorageInfo
 * objects (a name, non-negative offset and length).  label names the file
 * in messages.  max_bytes bounds all the memory the reader holds, the
 * records it returns included (0: 1 GiB).  len must be at most 1 GiB.
 * @return GFS_OK and *out (free with gfs_dcpmeta_free()), or an error
 * and *out NULL.
 */
gfs_err gfs_dcpmeta_load(const uint8_t *buf, size_t len, const char *label, size_t max_bytes,
			 gfs_dcpmeta **out);

/*
 * gfs_dcpmeta_set_fast(): use the fast paths or not (on), split the
 * prescan over two threads for pickles of at least split_min bytes (0: the
 * default, 4 MiB), and (lazy, with on) first read without the prescan,
 * falling back to the prescan on any error or on a GET of an entry the
 * fast path defined.  The fast paths are a shortcut for DCP's small
 * dataclasses, the split prescan and the lazy read; the results and
 * errors are the same either way.  For tests that check so; the default
 * is on, 0, lazy.  Not thread-safe: set it before any load.
 */
void gfs_dcpmeta_set_fast(bool on, size_t split_min, bool lazy);

/* gfs_dcpmeta_free(): free everything; NULL is allowed. */
void gfs_dcpmeta_free(gfs_dcpmeta *m);

/*
 * gfs_dcpmeta_same(): do two loads (of one .metadata, e.g. with and without
 * the fast paths) hold the same records with the same ids, strings and int
 * tuples?  For the tests and the fuzzer.
 */
bool gfs_dcpmeta_same(const gfs_dcpmeta *a, const gfs_dcpmeta *b);

/* gfs_dcpmeta_str(): the NUL-terminated string of id, or NULL for GFS_DCP_NONE. */
const char *gfs_dcpmeta_str(const gfs_dcpmeta *m, uint32_t id);

/* gfs_dcpmeta_ints(): the ints of tuple id and *n their count; NULL for GFS_DCP_NONE. */
const int64_t *gfs_dcpmeta_ints(const gfs_dcpmeta *m, uint32_t id, uint32_t *n);

#endif
