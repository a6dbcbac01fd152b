/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — internals shared by the files of the safe pickle reader
 * (src/readers/pickle*.c); nothing outside src/readers/ includes this.
 *
 *   pickle.c          the VM: opcodes, stack, marks, memo, literals, load
 *   pickle_values.c   the inert values: arena, nodes, hashable keys, dicts
 *                     and sets, and the public gfs_pv_* accessors
 *   pickle_classes.c  the classes and callables the reader recognises (one
 *                     table) and what REDUCE builds from them: sets,
 *                     OrderedDict, torch.Size, enums, tensors and storages
 *   pickle_dist.c     DTensor and ShardedTensor readers (gfs_pv_read_*)
 *
 * Every gfs_pk_* function below keeps the contract of the static one it
 * was: errors are set with gfs_fail() (gfs_pk_vfail() names the offset and
 * the opcode) and returned; allocations count against the load's limits.
 */
#ifndef GATHERFS_READERS_PICKLE_INTERNAL_H
#define GATHERFS_READERS_PICKLE_INTERNAL_H

#include <stdalign.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gatherfs/readers/pickle.h"

/* A chunk header; its data follows, suitably aligned for any node. */
typedef struct arena_chunk {
	alignas(max_align_t) struct arena_chunk *next;
	size_t size; /* usable bytes after the header */
	size_t used;
} arena_chunk;

struct gfs_pickle {
	arena_chunk *chunks; /* the head is the chunk being filled */
	size_t chunk_size;   /* size of the next chunk: doubles up to ARENA_CHUNK */
	size_t bytes;        /* charged so far: chunks and VM scratch */
	size_t max_bytes;
	const gfs_pv *root;
};

/* Open-addressing hash index over the keys of a large dict or set. */
typedef struct kindex {
	uint32_t *slot; /* entry index + 1; 0 marks an empty slot */
	size_t mask;    /* slot count - 1; the slot count is a power of two */
	uint64_t seed;  /* hash seed of the load that built it */
} kindex;

/* Every node is allocated as a pnode; a gfs_pv * is its first member. */
typedef struct pnode {
	gfs_pv pv;
	uint64_t hash; /* PN_BYVALUE nodes: hash of the value */
	unsigned flags;
} pnode;

/* DICT and SET nodes are allocated as a cnode, a pnode first. */
typedef struct cnode {
	pnode n;
	kindex *idx; /* index once large, else NULL */
} cnode;

/* Values built once per load and shared (pickle.h). */
#define SMALL_INTS 256

#define PN_BYVALUE 1u    /* hashed and compared by value */
#define PN_UNHASHABLE 2u /* list, dict, set, bytearray or a tuple holding one */
#define PN_FROZEN 4u     /* SET built as a frozenset: ADDITEMS refused */

/* Hash tags keep values of different kinds apart. */
#define TAG_NONE 0x6e6f6e65ULL
#define TAG_INT 0x696e7420ULL
#define TAG_BIGINT 0x62696769ULL
#define TAG_STR 0x73747220ULL
#define TAG_BYTES 0x62797465ULL
#define TAG_TUPLE 0x7475706cULL

typedef struct vm {
	gfs_pickle *p;
	const uint8_t *buf;
	size_t len;
	size_t pos;
	size_t op_off; /* offset of the opcode being run */
	uint8_t op;
	const char *label;
	size_t max_depth;
	size_t max_memo;
	uint64_t seed;
	gfs_pv **stack;
	size_t sp;
	size_t stack_cap;
	size_t *marks; /* stack heights at each MARK */
	size_t nmarks;
	size_t marks_cap;
	gfs_pv **memo;
	size_t memo_cap;
	size_t memo_count; /* defined entries, the index MEMOIZE uses */
	gfs_pv *none_v, *bool_v[2], *empty_tuple, *small_int[SMALL_INTS]; /* shared, once built */
} vm;


/* ------------------------------------------------------------------ pickle.c */

/* gfs_pk_vfail(): fail with err and "LABEL: MSG at offset N in OPCODE". */
gfs_err gfs_pk_vfail(const vm *m, gfs_err err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------------ pickle_values.c */

/* gfs_pk_mix64(): a 64-bit finaliser (hash seeds and key hashes). */
uint64_t gfs_pk_mix64(uint64_t x);
/* gfs_pk_cpn(): the pnode that holds v. */
const pnode *gfs_pk_cpn(const gfs_pv *v);
/* gfs_pk_vm_alloc(), gfs_pk_vm_zalloc(): size bytes (zeroed) from the arena. */
gfs_err gfs_pk_vm_alloc(vm *m, size_t size, void **out);
gfs_err gfs_pk_vm_zalloc(vm *m, size_t size, void **out);
/*
 * gfs_pk_scratch_grow(): grow the malloc'ed VM array arr (cap elements of
 * elem bytes) to hold need, at most maxn; charged against max_bytes.
 */
gfs_err gfs_pk_scratch_grow(vm *m, void *arr, size_t cap, size_t need, size_t elem,
			    size_t maxn, void **out_arr, size_t *out_cap);
/* gfs_pk_u64_to_i64(): v as the two's complement int64_t. */
int64_t gfs_pk_u64_to_i64(uint64_t v);

/* Node constructors: *out is a new node (or a shared one: None, bools, small ints, ()). */
gfs_err gfs_pk_new_node(vm *m, gfs_pv_kind kind, gfs_pv **out);
gfs_err gfs_pk_new_none(vm *m, gfs_pv **out);
gfs_err gfs_pk_new_bool(vm *m, bool b, gfs_pv **out);
gfs_err gfs_pk_new_int(vm *m, int64_t i, gfs_pv **out);
gfs_err gfs_pk_new_float(vm *m, double f, gfs_pv **out);
/* gfs_pk_new_blob(), gfs_pk_seal_blob(): a STR or BYTES node of len bytes
 * to fill at *data, then its final length set and the node hashed. */
gfs_err gfs_pk_new_blob(vm *m, gfs_pv_kind kind, size_t len, gfs_pv **out, char **data);
void gfs_pk_seal_blob(const vm *m, gfs_pv *v, char *data, size_t len, bool mutable_bytes);
gfs_err gfs_pk_new_bytes(vm *m, gfs_pv_kind kind, const void *src, size_t len,
			 bool mutable_bytes, gfs_pv **out);
/* gfs_pk_new_long(): the little-endian two's complement int of n bytes b. */
gfs_err gfs_pk_new_long(vm *m, const uint8_t *b, size_t n, gfs_pv **out);
gfs_err gfs_pk_new_seq(vm *m, gfs_pv_kind kind, size_t cap, gfs_pv **out);
gfs_err gfs_pk_new_tuple(vm *m, gfs_pv *const *items, size_t n, gfs_pv **out);
gfs_err gfs_pk_new_dict(vm *m, gfs_pv **out);
gfs_err gfs_pk_new_set(vm *m, bool frozen, gfs_pv **out);
/* gfs_pk_new_global(): GLOBAL module.name (one buffer "module.name\0module\0"). */
gfs_err gfs_pk_new_global(vm *m, const char *mod, size_t ml, const char *name, size_t nl,
			  gfs_pv **out);
/* gfs_pk_new_object(): an inert OBJECT cls(*args). */
gfs_err gfs_pk_new_object(vm *m, const gfs_pv *cls, gfs_pv *args, gfs_pv **out);
gfs_err gfs_pk_new_persid(vm *m, gfs_pv *id, gfs_pv **out);
/* gfs_pk_seq_push(), gfs_pk_dict_set(), gfs_pk_set_add(): add to a list,
 * dict (d[key] = val, in insertion order) or set. */
gfs_err gfs_pk_seq_push(vm *m, gfs_pv *seq, gfs_pv *item);
gfs_err gfs_pk_dict_set(vm *m, gfs_pv *d, gfs_pv *key, gfs_pv *val);
gfs_err gfs_pk_set_add(vm *m, gfs_pv *s, gfs_pv *item);
/* gfs_pk_str_eq(): v is the str s of n bytes; gfs_pk_is_seq(): a tuple, list or set. */
bool gfs_pk_str_eq(const gfs_pv *v, const char *s, size_t n);
bool gfs_pk_is_seq(const gfs_pv *v);
/* gfs_pk_global_qualname(): "module.name" of a GLOBAL. */
const char *gfs_pk_global_qualname(const gfs_pv *g);

/* ------------------------------------------------------------------ pickle_classes.c */

/* The classes and callables the reader recognises: rows of classes[]. */
typedef enum gfs_pk_class {
	GFS_PK_ORDERED_DICT,
	GFS_PK_SET,
	GFS_PK_FROZENSET,
	GFS_PK_GETATTR,
	GFS_PK_TORCH_SIZE,
	GFS_PK_REBUILD_TENSOR_V2,
	GFS_PK_REBUILD_TENSOR_V3,
	GFS_PK_REBUILD_FROM_TYPE_V2,
	GFS_PK_REBUILD_PARAMETER,
	GFS_PK_REBUILD_PARAMETER_WITH_STATE,
	GFS_PK_REBUILD_WRAPPER_SUBCLASS,
	GFS_PK_DTENSOR,
	GFS_PK_DTENSOR_SPEC,
	GFS_PK_TENSOR_META,
	GFS_PK_REPLICATE,
	GFS_PK_PARTIAL,
	GFS_PK_PARTIAL_OLD, /* _Partial */
	GFS_PK_STRIDED_SHARD,
	GFS_PK_SHARD,       /* a DTensor placement */
	GFS_PK_DEVICE_MESH,
	GFS_PK_MESH_LAYOUT,
	GFS_PK_FLAT_LAYOUT,
	GFS_PK_SHARDED_TENSOR,
	GFS_PK_LOCAL_SHARD, /* a ShardedTensor's local Shard */
	GFS_PK_SHARD_METADATA,
	GFS_PK_REMOTE_DEVICE,
	GFS_PK_NCLASSES
} gfs_pk_class;

/* gfs_pk_is_class(): v is a GLOBAL naming class c from one of its modules
 * (builtins and __builtin__ are one module, as in gfs_pv_is_global()). */
bool gfs_pk_is_class(const gfs_pv *v, gfs_pk_class c);
/* gfs_pk_is_object(): v is an OBJECT of class c. */
bool gfs_pk_is_object(const gfs_pv *v, gfs_pk_class c);

/* gfs_pk_call(): the value of fn(*args) (REDUCE): a recognised callable's
 * value (pickle_classes.c), otherwise an inert OBJECT. */
gfs_err gfs_pk_call(vm *m, gfs_pv *fn, gfs_pv *args, gfs_pv **out);

#endif
