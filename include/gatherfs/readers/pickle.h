/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — a safe pickle reader.
 *
 * gfs_pickle_load() runs a pickle virtual machine for protocols 0 to 5 over a
 * byte buffer and builds a tree of inert values.  It never imports or calls
 * anything: GLOBAL / STACK_GLOBAL produce GFS_PV_GLOBAL nodes, REDUCE /
 * NEWOBJ / NEWOBJ_EX / BUILD on them produce GFS_PV_OBJECT nodes that just
 * record the class, the arguments and the state.  A few well-known callables
 * are interpreted because checkpoints depend on them:
 *
 *   collections.OrderedDict()            -> GFS_PV_DICT
 *   builtins.set(list) / frozenset(list) -> GFS_PV_SET (also __builtin__.)
 *   torch.Size(tuple)                    -> GFS_PV_TUPLE
 *   builtins.getattr(GLOBAL cls, 'name') -> GFS_PV_ENUM (member by name)
 *   torch._utils._rebuild_tensor_v2(persid, offset, size, stride, ...)
 *   torch._utils._rebuild_tensor_v3(..., dtype)   -> GFS_PV_TENSOR
 *   torch._utils._rebuild_parameter(tensor, ...)  -> that GFS_PV_TENSOR
 *   torch._tensor._rebuild_from_type_v2(_rebuild_tensor_v2 or _v3, type,
 *                                       args, state)  -> GFS_PV_TENSOR
 *
 * (src/readers/pickle_classes.c: its classes[] table is the whole list of
 * classes and callables the reader recognises, with the modules of each.)
 *
 * `Enum(value)` (Python <= 3.10 pickles enums that way) stays a
 * GFS_PV_OBJECT of the class with one int argument; gfs_pv_enum() reads both
 * encodings.
 *
 * Other decisions a consumer may rely on:
 *
 *   STRING / BINSTRING / SHORT_BINSTRING (Python 2 str) -> GFS_PV_STR with
 *     the raw bytes; UNICODE (protocol 0) is decoded to UTF-8.
 *   BYTEARRAY8 -> GFS_PV_BYTES.
 *   An integer that does not fit in int64_t -> GFS_PV_BIGINT holding the
 *     shortest little-endian two's complement encoding (always > 8 bytes).
 *   torch.Size(tuple) yields that very TUPLE node; _rebuild_parameter*()
 *     yields the inner TENSOR node unchanged.
 *   NEWOBJ_EX with keyword arguments -> an OBJECT whose cls is the GLOBAL
 *     copyreg.__newobj_ex__ and whose args are (cls, args, kwargs); without
 *     keyword arguments it is the same as NEWOBJ.
 *   BUILD stores its state only on an OBJECT (replacing earlier state); on
 *     any other value it is ignored.  In particular BUILD on an OrderedDict
 *     sets instance attributes (torch's state_dict()._metadata), not items.
 *   Dict keys and set items are compared as Python does for None, bool,
 *     int (True == 1), big int, str, bytes and tuples of those; any other
 *     value (float, object, frozenset...) is compared by identity.  A list,
 *     dict or set used as a key is an error.
 *   limits.max_bytes bounds the arena and the VM's scratch (stack, memo).
 *   A STR may contain NUL bytes (use u.s.len); GLOBAL names, ENUM members
 *     and tensor storage keys and locations never do.
 *
 * All nodes live in an arena owned by the gfs_pickle and are freed together
 * by gfs_pickle_free().  Nodes are never modified once built except LIST,
 * DICT, SET and OBJECT ones while loading, so one node may stand for several
 * equal values: every None, True, False, empty tuple and int in [0, 256) of
 * a pickle is one node.  Memo references make the tree a DAG (the same node
 * can appear in several places); pickle can also build cycles (a list that
 * contains itself), so generic walkers must bound their depth and, since
 * sharing lets a small pickle describe a huge tree, the nodes they visit.
 */
#ifndef GATHERFS_PICKLE_H
#define GATHERFS_PICKLE_H

#include "gatherfs/util/common.h"

typedef enum gfs_pv_kind {
	GFS_PV_NONE,
	GFS_PV_BOOL,
	GFS_PV_INT,    /* fits in int64_t */
	GFS_PV_BIGINT, /* LONG1/LONG4/LONG that does not fit: raw LE two's complement bytes */
	GFS_PV_FLOAT,
	GFS_PV_STR,    /* UTF-8 as stored, NUL-terminated for convenience */
	GFS_PV_BYTES,  /* also bytearray */
	GFS_PV_TUPLE,
	GFS_PV_LIST,
	GFS_PV_DICT,   /* ordered; assigning an existing key replaces its value in place */
	GFS_PV_SET,    /* also frozenset */
	GFS_PV_GLOBAL, /* a reference to module.name, never resolved */
	GFS_PV_OBJECT, /* inert result of calling/instantiating a GLOBAL */
	GFS_PV_ENUM,   /* getattr(cls, 'member') */
	GFS_PV_PERSID, /* a persistent id (BINPERSID / PERSID), value = the id object */
	GFS_PV_TENSOR, /* torch._utils._rebuild_tensor_v2/v3 */
} gfs_pv_kind;

#define GFS_PV_MAX_DIMS 16

typedef struct gfs_pv gfs_pv;

/* A dict entry.  Keys may be any value (str, int, tuple...). */
typedef struct gfs_pv_item {
	gfs_pv *key;
	gfs_pv *value;
} gfs_pv_item;

/* Storage referenced by a tensor: torch's ('storage', cls, key, location, numel). */
typedef struct gfs_pv_storage {
	const char *cls;      /* storage class name, e.g. "FloatStorage", "UntypedStorage" */
	const char *key;      /* record name under data/ */
	const char *location; /* "cpu", "cuda:0", ... */
	int64_t numel;        /* storage numel as pickled (elements, or bytes if untyped) */
} gfs_pv_storage;

typedef struct gfs_pv_tensor {
	gfs_pv_storage storage;
	const char *dtype;  /* v3 only: dtype name as in torch ("float32", ...), else NULL */
	int64_t offset;     /* storage_offset, in elements */
	uint32_t ndim;      /* <= GFS_PV_MAX_DIMS */
	const int64_t *size;   /* [ndim] */
	const int64_t *stride; /* [ndim] */
	bool requires_grad;
} gfs_pv_tensor;

struct gfs_pv {
	gfs_pv_kind kind;
	union {
		bool b;
		int64_t i;
		double f;
		struct {
			const char *ptr; /* NUL-terminated (an extra byte past len) */
			size_t len;
		} s;                     /* STR, BYTES, BIGINT */
		struct {
			gfs_pv **items;
			size_t len;
			size_t cap;
		} seq;                   /* TUPLE, LIST, SET */
		struct {
			gfs_pv_item *items;
			size_t len;
			size_t cap;
		} dict;                  /* DICT */
		struct {
			const char *module;
			const char *name;
		} global;                /* GLOBAL */
		struct {
			const gfs_pv *cls;  /* the GLOBAL (or other value) called */
			gfs_pv *args;       /* TUPLE of arguments (may be empty) */
			gfs_pv *state;      /* BUILD state, or NULL */
			gfs_pv *items;      /* DICT filled by SETITEM(S) on the object, or NULL */
			gfs_pv *list;       /* LIST filled by APPEND(S) on the object, or NULL */
		} obj;                   /* OBJECT */
		struct {
			const gfs_pv *cls;  /* GLOBAL of the enum class */
			const char *member;
		} enm;                   /* ENUM */
		gfs_pv *persid;          /* PERSID */
		gfs_pv_tensor *tensor;   /* TENSOR */
	} u;
};

/* Hard limits.  Zero fields take the defaults below. */
typedef struct gfs_pickle_limits {
	size_t max_depth;  /* stack + mark depth, default 10000 */
	size_t max_memo;   /* highest memo index + 1, default 1 << 22 */
	size_t max_bytes;  /* total arena allocation, default 1 GiB */
} gfs_pickle_limits;

typedef struct gfs_pickle gfs_pickle;

/*
 * gfs_pickle_load(): parse a pickle held in buf[0..len).  label names the
 * source in error messages (e.g. "rank0.pt:archive/data.pkl").  lim may be
 * NULL for the defaults.  The buffer is not referenced after return.
 * @return GFS_OK and *out, or an error (never crashes, never loops forever:
 * each opcode consumes input).  The caller frees *out with gfs_pickle_free().
 */
gfs_err gfs_pickle_load(const uint8_t *buf, size_t len, const char *label,
			const gfs_pickle_limits *lim, gfs_pickle **out);

/* gfs_pickle_root(): the object left on the stack by STOP. */
const gfs_pv *gfs_pickle_root(const gfs_pickle *p);

/*
 * gfs_pickle_free(): free the pickle and every node; NULL is allowed.  Up
 * to 256 MiB of its memory is kept for the next gfs_pickle_load() calls of
 * any thread, until gfs_pickle_pool_drain().
 */
void gfs_pickle_free(gfs_pickle *p);

/*
 * gfs_pickle_pool_drain(): free the memory gfs_pickle_free() kept; for an
 * importer done reading pickles.  Thread-safe.
 */
void gfs_pickle_pool_drain(void);

/*
 * Accessors.  All are NULL-safe: they return NULL / false when v is NULL or
 * of the wrong kind, so lookups can be chained.
 */

/*
 * gfs_pv_dict_get(): value for the str key, or NULL.  Linear search for
 * small dicts, hashed (O(1) on average) for dicts of more than 32 entries.
 */
const gfs_pv *gfs_pv_dict_get(const gfs_pv *dict, const char *key);

/* gfs_pv_seq_len()/gfs_pv_seq_at(): TUPLE, LIST and SET elements. */
size_t gfs_pv_seq_len(const gfs_pv *v);
const gfs_pv *gfs_pv_seq_at(const gfs_pv *v, size_t i);

/* gfs_pv_str(): the NUL-terminated string of a STR node, or NULL. */
const char *gfs_pv_str(const gfs_pv *v);

/*
 * gfs_pv_name(): the string of a STR node that holds no NUL byte (a C
 * string carries all of it), or NULL.  For names read from a file: other
 * control bytes are kept (tensors/ names write them %XX, messages '?').
 */
const char *gfs_pv_name(const gfs_pv *v);

/*
 * gfs_pv_name_fail(): fails with GFS_ERR_FORMAT and "PATH: WHAT I ...":
 * why key, which gfs_pv_name() refused, is no name: not a string (and what
 * it is), or a string holding a NUL byte (shown by gfs_shown_key()).
 */
gfs_err gfs_pv_name_fail(const char *path, const char *what, size_t i, const gfs_pv *key);

/* gfs_pv_int(): true and *out for an INT (or BOOL) node. */
bool gfs_pv_int(const gfs_pv *v, int64_t *out);

/* gfs_pv_is_global(): v is a GLOBAL module.name (accepts builtins/__builtin__ alike). */
bool gfs_pv_is_global(const gfs_pv *v, const char *module, const char *name);

/*
 * gfs_pv_enum(): read an enum member in either encoding.  For
 * getattr(cls, 'member') sets *member (and *has_value = false); for
 * cls(int) sets *value (and *has_value = true, *member = NULL).  *cls_name
 * receives the class's qualified name "module.Name" (e.g. *cls_module
 * "deepspeed.runtime.zero.config", *cls_name
 * "deepspeed.runtime.zero.config.ZeroStageEnum").  Any output pointer may be
 * NULL.  The cls(int) form matches any OBJECT of a GLOBAL called with one
 * int and no state, items or list: check the class name.
 * @return false if v is neither form.
 */
bool gfs_pv_enum(const gfs_pv *v, const char **cls_module, const char **cls_name,
		 const char **member, int64_t *value, bool *has_value);

/* gfs_pv_kind_name(): "dict", "tensor"... for messages. */
const char *gfs_pv_kind_name(gfs_pv_kind kind);

/*
 * Distributed tensors: what torch.save writes for a DTensor (FSDP2, TP)
 * and a ShardedTensor (FSDP1's SHARDED_STATE_DICT).  Both are pickled as
 * torch._tensor._rebuild_from_type_v2(torch._utils._rebuild_wrapper_subclass,
 * CLS, (CLS, dtype, size, stride, offset, layout, device, requires_grad),
 * state), which the VM keeps as an inert OBJECT; gfs_pv_read_dtensor() and
 * gfs_pv_read_stensor() read such an object without executing anything.  They
 * accept only these classes where they read a value (each with its
 * arguments checked):
 *
 *   DTensor            torch.distributed.tensor.DTensor (also ._api,
 *                      torch.distributed._tensor.DTensor, ._tensor.api)
 *   DTensorSpec        ..._dtensor_spec.DTensorSpec: mesh, placements,
 *                      tensor_meta (TensorMeta(shape, stride, dtype), or None)
 *   DeviceMesh         torch.distributed.device_mesh.DeviceMesh (or
 *                      ._device_mesh): its shape from `mesh` (a tensor,
 *                      torch <= 2.8) or `_layout` (_MeshLayout of
 *                      _FlatLayout axes, torch >= 2.9; a shape () is 1), its rank's
 *                      coordinate from `_coordinate_on_dim`, its rank
 *                      from `_rank` when present
 *   Shard(dim), Replicate(), _StridedShard(dim, split_factor), Partial
 *                      ..placement_types (Partial is reported, not read)
 *   ShardedTensor      torch.distributed._shard.sharded_tensor.api
 *                      .ShardedTensor: state (local_shards, metadata, ...),
 *                      each local shard a sharded_tensor.shard.Shard of a
 *                      tensor and a ShardMetadata(shard_offsets,
 *                      shard_sizes, placement _remote_device)
 *
 * Other fields (torch 2.14's ShardOrderEntry, _rank_map, hashes, process
 * group state, sharding specs) are ignored whatever they hold.
 */
#define GFS_PV_MAX_MESH 8

typedef enum gfs_placement_kind {
	GFS_PL_REPLICATE,
	GFS_PL_SHARD,
	GFS_PL_STRIDED, /* _StridedShard */
	GFS_PL_PARTIAL,
} gfs_placement_kind;

typedef struct gfs_placement {
	gfs_placement_kind kind;
	int64_t dim;          /* SHARD, STRIDED: the tensor dimension (>= 0) */
	int64_t split_factor; /* STRIDED */
} gfs_placement;

typedef struct gfs_pv_dtensor {
	const gfs_pv_tensor *local; /* the rank's local shard (_local_tensor) */
	const char *dtype;          /* the DTensor's dtype name ("float32") */
	uint32_t ndim;
	int64_t shape[GFS_PV_MAX_DIMS];  /* global shape */
	uint32_t mesh_ndim;              /* >= 1, = the number of placements */
	int64_t mesh[GFS_PV_MAX_MESH];   /* mesh shape */
	int64_t coord[GFS_PV_MAX_MESH];  /* the saving rank's coordinate */
	int64_t rank;                    /* the saving rank (DeviceMesh._rank), -1 if absent */
	gfs_placement pl[GFS_PV_MAX_MESH];
} gfs_pv_dtensor;

#define GFS_PV_MAX_SHARDS 16 /* local shards of one ShardedTensor on one rank */

typedef struct gfs_pv_lshard {
	const gfs_pv_tensor *t;
	int64_t off[GFS_PV_MAX_DIMS];
	int64_t size[GFS_PV_MAX_DIMS];
	int64_t rank; /* its placement's rank, -1 if none */
} gfs_pv_lshard;

typedef struct gfs_pv_stensor {
	const char *dtype;
	uint32_t ndim;
	int64_t shape[GFS_PV_MAX_DIMS];
	size_t nlocal;
	gfs_pv_lshard local[GFS_PV_MAX_SHARDS];
} gfs_pv_stensor;

/*
 * gfs_pv_wrapper_class(): for a value pickled as a wrapper tensor subclass
 * (see above), the class's name ("DTensor", "ShardedTensor"...) and *module;
 * NULL for anything else.
 */
const char *gfs_pv_wrapper_class(const gfs_pv *v, const char **module);

/*
 * gfs_pv_read_dtensor(): read the DTensor v.  what names it in messages ("FILE:
 * KEY").  Checks: the classes above, sizes and strides non-negative ints
 * (at most GFS_PV_MAX_DIMS), the wrapper's size equal to TensorMeta's, a
 * mesh of 1..GFS_PV_MAX_MESH positive sizes, as many placements and
 * coordinates as mesh dimensions, each coordinate inside its mesh size,
 * shard dims inside the tensor, the local shard a tensor.  Placements are
 * returned as read (Partial too).
 * @return GFS_OK and *out, or GFS_ERR_FORMAT naming what.
 */
gfs_err gfs_pv_read_dtensor(const gfs_pv *v, const char *what, gfs_pv_dtensor *out);

/*
 * gfs_pv_read_stensor(): read the ShardedTensor v: the global dtype and shape
 * and each local shard (at most GFS_PV_MAX_SHARDS): its tensor, offsets and
 * sizes (as many as the tensor's dimensions, non-negative, inside the global
 * shape) and placement rank.  @return GFS_OK and *out, or GFS_ERR_FORMAT.
 */
gfs_err gfs_pv_read_stensor(const gfs_pv *v, const char *what, gfs_pv_stensor *out);

#endif
