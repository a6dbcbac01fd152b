/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — a safe pickle reader: a pickle VM that builds inert values.
 *
 * The VM follows CPython's _pickle.c where it matters for safety (the MARK
 * "fence" that hides the values below the top mark, memo semantics, argument
 * checks) but builds gfs_pv nodes instead of Python objects; see pickle.h.
 *
 * Memory: every node lives in a bump arena owned by the gfs_pickle.  Arrays
 * that grow (list items, dict entries, hash indexes) grow in place when they
 * are the last allocation of the current chunk, otherwise they are copied
 * and the old copy is abandoned until gfs_pickle_free(); with geometric
 * growth that wastes at most the final size.  VM scratch (stack, marks,
 * memo) is malloc'ed and freed at the end of the load.  Arena chunks and
 * scratch both count against gfs_pickle_limits.max_bytes.
 *
 * Keys: dict keys and set items compare by value for None, bool, int, big
 * int, str, bytes and tuples of hashable values (True == 1, as in Python),
 * and by identity for everything else (floats, objects, globals,
 * frozensets...).  Each node caches its hash when it is created (a tuple's
 * from its elements' cached hashes), so hashing never recurses, and
 * comparing keys is bounded in depth and work.  A dict or set gets an
 * open-addressing index once it holds more than INDEX_MIN entries.
 */
#include "config.h"

#include <assert.h>
#include <locale.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/readers/pickle.h"

#define DEFAULT_MAX_DEPTH ((size_t)10000)
#define DEFAULT_MAX_MEMO ((size_t)1 << 22)
#define DEFAULT_MAX_BYTES ((size_t)1 << 30)

#define ARENA_FIRST_CHUNK ((size_t)4 * 1024)
#define ARENA_CHUNK ((size_t)64 * 1024)
#define ARENA_ALIGN (alignof(max_align_t))

#define INDEX_MIN 32            /* dicts and sets larger than this get an index */
#define KEY_MAX_DEPTH 64        /* tuple nesting followed when comparing keys */
#define KEY_EQ_BUDGET 100000    /* node comparisons allowed per key lookup */
#define MAX_DECIMAL_DIGITS 4300 /* as CPython's int('...') limit */
#define BIGINT_LIMBS 450        /* 32-bit limbs for MAX_DECIMAL_DIGITS digits */
#define MAX_FLOAT_TEXT 127
#define HIGHEST_PROTOCOL 5

/* Pickle opcodes (CPython Lib/pickletools.py). */
enum {
	OP_MARK = '(',
	OP_STOP = '.',
	OP_POP = '0',
	OP_POP_MARK = '1',
	OP_DUP = '2',
	OP_FLOAT = 'F',
	OP_INT = 'I',
	OP_BININT = 'J',
	OP_BININT1 = 'K',
	OP_LONG = 'L',
	OP_BININT2 = 'M',
	OP_NONE = 'N',
	OP_PERSID = 'P',
	OP_BINPERSID = 'Q',
	OP_REDUCE = 'R',
	OP_STRING = 'S',
	OP_BINSTRING = 'T',
	OP_SHORT_BINSTRING = 'U',
	OP_UNICODE = 'V',
	OP_BINUNICODE = 'X',
	OP_APPEND = 'a',
	OP_BUILD = 'b',
	OP_GLOBAL = 'c',
	OP_DICT = 'd',
	OP_EMPTY_DICT = '}',
	OP_APPENDS = 'e',
	OP_GET = 'g',
	OP_BINGET = 'h',
	OP_INST = 'i',
	OP_LONG_BINGET = 'j',
	OP_LIST = 'l',
	OP_EMPTY_LIST = ']',
	OP_OBJ = 'o',
	OP_PUT = 'p',
	OP_BINPUT = 'q',
	OP_LONG_BINPUT = 'r',
	OP_SETITEM = 's',
	OP_TUPLE = 't',
	OP_EMPTY_TUPLE = ')',
	OP_SETITEMS = 'u',
	OP_BINFLOAT = 'G',
	OP_PROTO = 0x80,
	OP_NEWOBJ = 0x81,
	OP_EXT1 = 0x82,
	OP_EXT2 = 0x83,
	OP_EXT4 = 0x84,
	OP_TUPLE1 = 0x85,
	OP_TUPLE2 = 0x86,
	OP_TUPLE3 = 0x87,
	OP_NEWTRUE = 0x88,
	OP_NEWFALSE = 0x89,
	OP_LONG1 = 0x8a,
	OP_LONG4 = 0x8b,
	OP_BINBYTES = 'B',
	OP_SHORT_BINBYTES = 'C',
	OP_SHORT_BINUNICODE = 0x8c,
	OP_BINUNICODE8 = 0x8d,
	OP_BINBYTES8 = 0x8e,
	OP_EMPTY_SET = 0x8f,
	OP_ADDITEMS = 0x90,
	OP_FROZENSET = 0x91,
	OP_NEWOBJ_EX = 0x92,
	OP_STACK_GLOBAL = 0x93,
	OP_MEMOIZE = 0x94,
	OP_FRAME = 0x95,
	OP_BYTEARRAY8 = 0x96,
	OP_NEXT_BUFFER = 0x97,
	OP_READONLY_BUFFER = 0x98,
};

static const char *const op_names[256] = {
	[OP_MARK] = "MARK",
	[OP_STOP] = "STOP",
	[OP_POP] = "POP",
	[OP_POP_MARK] = "POP_MARK",
	[OP_DUP] = "DUP",
	[OP_FLOAT] = "FLOAT",
	[OP_INT] = "INT",
	[OP_BININT] = "BININT",
	[OP_BININT1] = "BININT1",
	[OP_LONG] = "LONG",
	[OP_BININT2] = "BININT2",
	[OP_NONE] = "NONE",
	[OP_PERSID] = "PERSID",
	[OP_BINPERSID] = "BINPERSID",
	[OP_REDUCE] = "REDUCE",
	[OP_STRING] = "STRING",
	[OP_BINSTRING] = "BINSTRING",
	[OP_SHORT_BINSTRING] = "SHORT_BINSTRING",
	[OP_UNICODE] = "UNICODE",
	[OP_BINUNICODE] = "BINUNICODE",
	[OP_APPEND] = "APPEND",
	[OP_BUILD] = "BUILD",
	[OP_GLOBAL] = "GLOBAL",
	[OP_DICT] = "DICT",
	[OP_EMPTY_DICT] = "EMPTY_DICT",
	[OP_APPENDS] = "APPENDS",
	[OP_GET] = "GET",
	[OP_BINGET] = "BINGET",
	[OP_INST] = "INST",
	[OP_LONG_BINGET] = "LONG_BINGET",
	[OP_LIST] = "LIST",
	[OP_EMPTY_LIST] = "EMPTY_LIST",
	[OP_OBJ] = "OBJ",
	[OP_PUT] = "PUT",
	[OP_BINPUT] = "BINPUT",
	[OP_LONG_BINPUT] = "LONG_BINPUT",
	[OP_SETITEM] = "SETITEM",
	[OP_TUPLE] = "TUPLE",
	[OP_EMPTY_TUPLE] = "EMPTY_TUPLE",
	[OP_SETITEMS] = "SETITEMS",
	[OP_BINFLOAT] = "BINFLOAT",
	[OP_PROTO] = "PROTO",
	[OP_NEWOBJ] = "NEWOBJ",
	[OP_EXT1] = "EXT1",
	[OP_EXT2] = "EXT2",
	[OP_EXT4] = "EXT4",
	[OP_TUPLE1] = "TUPLE1",
	[OP_TUPLE2] = "TUPLE2",
	[OP_TUPLE3] = "TUPLE3",
	[OP_NEWTRUE] = "NEWTRUE",
	[OP_NEWFALSE] = "NEWFALSE",
	[OP_LONG1] = "LONG1",
	[OP_LONG4] = "LONG4",
	[OP_BINBYTES] = "BINBYTES",
	[OP_SHORT_BINBYTES] = "SHORT_BINBYTES",
	[OP_SHORT_BINUNICODE] = "SHORT_BINUNICODE",
	[OP_BINUNICODE8] = "BINUNICODE8",
	[OP_BINBYTES8] = "BINBYTES8",
	[OP_EMPTY_SET] = "EMPTY_SET",
	[OP_ADDITEMS] = "ADDITEMS",
	[OP_FROZENSET] = "FROZENSET",
	[OP_NEWOBJ_EX] = "NEWOBJ_EX",
	[OP_STACK_GLOBAL] = "STACK_GLOBAL",
	[OP_MEMOIZE] = "MEMOIZE",
	[OP_FRAME] = "FRAME",
	[OP_BYTEARRAY8] = "BYTEARRAY8",
	[OP_NEXT_BUFFER] = "NEXT_BUFFER",
	[OP_READONLY_BUFFER] = "READONLY_BUFFER",
};

/* ------------------------------------------------------------------ types */

/* A chunk header; its data follows, suitably aligned for any node. */
typedef struct arena_chunk {
	alignas(max_align_t) struct arena_chunk *next;
	size_t size; /* usable bytes after the header */
	size_t used;
} arena_chunk;

/*
 * Full-size chunks that gfs_pickle_free() keeps for the next loads, until
 * gfs_pickle_pool_drain(): an importer reading many rank files one after
 * the other then reuses pages already faulted in, not fresh ones.
 */
#define POOL_MAX ((size_t)4096) /* chunks: 256 MiB */
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static arena_chunk *pool;
static size_t pool_n;

/* pool_get(): a pooled full-size chunk, or NULL. */
static arena_chunk *pool_get(void)
{
	arena_chunk *c;

	(void)pthread_mutex_lock(&pool_mu);
	c = pool;
	if (c) {
		pool = c->next;
		pool_n--;
	}
	(void)pthread_mutex_unlock(&pool_mu);
	return c;
}

/* pool_put(): keep a full-size chunk c, or free it when the pool is full. */
static void pool_put(arena_chunk *c)
{
	(void)pthread_mutex_lock(&pool_mu);
	if (pool_n < POOL_MAX) {
		c->next = pool;
		pool = c;
		pool_n++;
		c = NULL;
	}
	(void)pthread_mutex_unlock(&pool_mu);
	free(c);
}

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

/* ------------------------------------------------------------------ errors */

static gfs_err vfail(const vm *m, gfs_err err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static gfs_err vfail(const vm *m, gfs_err err, const char *fmt, ...)
{
	char msg[512];
	const char *const name = op_names[m->op];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	assert(err != GFS_OK);
	if (name)
		gfs_fail(err, "%s: %s at offset %zu in %s", m->label, msg, m->op_off, name);
	else
		gfs_fail(err, "%s: %s at offset %zu", m->label, msg, m->op_off);
	return err;
}

static gfs_err truncated(const vm *m)
{
	return vfail(m, GFS_ERR_FORMAT, "truncated");
}

/* ------------------------------------------------------------------ memory */

static unsigned char *chunk_data(arena_chunk *c)
{
	return (unsigned char *)(c + 1);
}

static size_t align_up(size_t n)
{
	return (n + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1);
}

static gfs_err charge(vm *m, size_t n)
{
	gfs_pickle *const p = m->p;

	assert(p->bytes <= p->max_bytes);
	if (n > p->max_bytes - p->bytes)
		return vfail(m, GFS_ERR_LIMIT, "memory use exceeds the limit of %zu bytes",
			     p->max_bytes);
	p->bytes += n;
	return GFS_OK;
}

/* arena_take(): size bytes (zeroed if zero) from the arena. */
static gfs_err arena_take(vm *m, size_t size, bool zero, void **out)
{
	gfs_pickle *const p = m->p;
	arena_chunk *const head = p->chunks;
	arena_chunk *c;
	size_t need = 0, csize = 0;
	bool dedicated;
	gfs_err err;

	if (size > SIZE_MAX - ARENA_ALIGN - sizeof(arena_chunk) - ARENA_CHUNK)
		return vfail(m, GFS_ERR_LIMIT, "allocation of %zu bytes is too large", size);
	need = align_up(size ? size : 1);
	if (head && head->size - head->used >= need) {
		unsigned char *const mem = chunk_data(head) + head->used;

		head->used += need;
		if (zero)
			memset(mem, 0, size);
		*out = mem;
		return GFS_OK;
	}
	if (p->chunk_size < ARENA_FIRST_CHUNK)
		p->chunk_size = ARENA_FIRST_CHUNK;
	/* Large blocks get a chunk of their own. */
	dedicated = need > p->chunk_size / 4;
	csize = dedicated ? need : p->chunk_size;
	err = charge(m, sizeof(arena_chunk) + csize);
	if (err)
		return err;
	c = csize == ARENA_CHUNK ? pool_get() : NULL;
	if (!c)
		c = malloc(sizeof(arena_chunk) + csize);
	if (!c)
		return vfail(m, GFS_ERR_NOMEM, "out of memory allocating %zu bytes", csize);
	c->size = csize;
	c->used = need;
	if (!dedicated && p->chunk_size < ARENA_CHUNK)
		p->chunk_size *= 2;
	if (dedicated && head) {
		/* Keep the partly filled head for small nodes. */
		c->next = head->next;
		head->next = c;
	} else {
		c->next = head;
		p->chunks = c;
	}
	if (zero)
		memset(chunk_data(c), 0, size);
	*out = chunk_data(c);
	return GFS_OK;
}

static gfs_err vm_alloc(vm *m, size_t size, void **out)
{
	return arena_take(m, size, false, out);
}

static gfs_err vm_zalloc(vm *m, size_t size, void **out)
{
	return arena_take(m, size, true, out);
}

/*
 * arena_grow(): make room for need elements of elem bytes in the arena array
 * arr of capacity cap.  Sets *out_arr and *out_cap (unchanged when there is
 * room already).
 */
static gfs_err arena_grow(vm *m, void *arr, size_t cap, size_t need, size_t elem,
			  void **out_arr, size_t *out_cap)
{
	arena_chunk *const head = m->p->chunks;
	size_t ncap = cap ? cap : 4;
	size_t old_bytes = 0, new_bytes = 0;
	void *n = NULL;
	gfs_err err;

	*out_arr = arr;
	*out_cap = cap;
	if (need <= cap)
		return GFS_OK;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2)
			return vfail(m, GFS_ERR_LIMIT, "array of %zu elements is too large", need);
		ncap *= 2;
	}
	if (ncap > (SIZE_MAX / 2) / elem)
		return vfail(m, GFS_ERR_LIMIT, "array of %zu elements is too large", need);
	old_bytes = align_up(cap * elem);
	new_bytes = align_up(ncap * elem);
	if (arr && cap && head &&
	    (unsigned char *)arr + old_bytes == chunk_data(head) + head->used &&
	    new_bytes - old_bytes <= head->size - head->used) {
		head->used += new_bytes - old_bytes;
		*out_cap = ncap;
		return GFS_OK;
	}
	err = vm_alloc(m, new_bytes, &n);
	if (err)
		return err;
	if (cap)
		memcpy(n, arr, cap * elem);
	*out_arr = n;
	*out_cap = ncap;
	return GFS_OK;
}

/*
 * scratch_grow(): as arena_grow() for malloc'ed VM scratch, capped at maxn
 * elements (need <= maxn).  New elements are zeroed.
 */
static gfs_err scratch_grow(vm *m, void *arr, size_t cap, size_t need, size_t elem,
			    size_t maxn, void **out_arr, size_t *out_cap)
{
	size_t ncap = 0;
	unsigned char *n;
	gfs_err err;

	assert(need <= maxn);
	*out_arr = arr;
	*out_cap = cap;
	if (need <= cap)
		return GFS_OK;
	ncap = cap > maxn / 2 ? maxn : (cap ? cap * 2 : 64);
	if (ncap < need)
		ncap = need;
	if (ncap > maxn)
		ncap = maxn;
	if (ncap > SIZE_MAX / elem)
		return vfail(m, GFS_ERR_LIMIT, "VM array of %zu elements is too large", ncap);
	err = charge(m, (ncap - cap) * elem);
	if (err)
		return err;
	n = realloc(arr, ncap * elem);
	if (!n)
		return vfail(m, GFS_ERR_NOMEM, "out of memory growing a VM array to %zu elements",
			     ncap);
	memset(n + cap * elem, 0, (ncap - cap) * elem);
	*out_arr = n;
	*out_cap = ncap;
	return GFS_OK;
}

/* ------------------------------------------------------------------ hashing */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static uint64_t hash_bytes(uint64_t seed, const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ seed;

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ULL;
	}
	return mix64(h ^ n);
}

static uint64_t hash_int(uint64_t seed, int64_t i)
{
	return mix64(seed ^ TAG_INT ^ (uint64_t)i);
}

static pnode *pn(gfs_pv *v)
{
	return (pnode *)(void *)v;
}

static const pnode *cpn(const gfs_pv *v)
{
	return (const pnode *)(const void *)v;
}

/* cidx(): the index slot of a DICT or SET node. */
static kindex **cidx(gfs_pv *v)
{
	assert(v->kind == GFS_PV_DICT || v->kind == GFS_PV_SET);
	return &((cnode *)(void *)v)->idx;
}

static const kindex *ccidx(const gfs_pv *v)
{
	assert(v->kind == GFS_PV_DICT || v->kind == GFS_PV_SET);
	return ((const cnode *)(const void *)v)->idx;
}

/* key_hash(): the hash under which v is stored as a dict key or set item. */
static uint64_t key_hash(uint64_t seed, const gfs_pv *v)
{
	const pnode *const n = cpn(v);

	if (n->flags & PN_BYVALUE)
		return n->hash;
	return mix64(seed ^ (uint64_t)(uintptr_t)v);
}

static bool int_like(const gfs_pv *v, int64_t *out)
{
	if (v->kind == GFS_PV_INT) {
		*out = v->u.i;
		return true;
	}
	if (v->kind == GFS_PV_BOOL) {
		*out = v->u.b;
		return true;
	}
	return false;
}

/*
 * key_eq(): Python == for hashable keys.  @return 1 equal, 0 different,
 * -1 undecided (nesting deeper than KEY_MAX_DEPTH or *budget exhausted).
 */
static int key_eq(const gfs_pv *a, const gfs_pv *b, unsigned depth, size_t *budget)
{
	const pnode *const pa = cpn(a);
	const pnode *const pb = cpn(b);
	int64_t ia = 0, ib = 0;

	if (a == b)
		return 1;
	if (!(pa->flags & PN_BYVALUE) || !(pb->flags & PN_BYVALUE) || pa->hash != pb->hash)
		return 0;
	if (*budget == 0 || depth >= KEY_MAX_DEPTH)
		return -1;
	(*budget)--;
	if (int_like(a, &ia) && int_like(b, &ib))
		return ia == ib;
	if (a->kind != b->kind)
		return 0;
	switch (a->kind) {
	case GFS_PV_NONE:
		return 1;
	case GFS_PV_BIGINT:
	case GFS_PV_STR:
	case GFS_PV_BYTES:
		return a->u.s.len == b->u.s.len && memcmp(a->u.s.ptr, b->u.s.ptr, a->u.s.len) == 0;
	case GFS_PV_TUPLE:
		if (a->u.seq.len != b->u.seq.len)
			return 0;
		for (size_t i = 0; i < a->u.seq.len; i++) {
			const int r = key_eq(a->u.seq.items[i], b->u.seq.items[i], depth + 1,
					     budget);

			if (r != 1)
				return r;
		}
		return 1;
	default:
		assert(!"PN_BYVALUE set on a kind compared by identity");
		return 0;
	}
}

/* ------------------------------------------------------------------ nodes */

static gfs_err new_node(vm *m, gfs_pv_kind kind, gfs_pv **out)
{
	void *mem = NULL;
	const bool c = kind == GFS_PV_DICT || kind == GFS_PV_SET;
	const gfs_err err = vm_zalloc(m, c ? sizeof(cnode) : sizeof(pnode), &mem);

	if (err)
		return err;
	*out = &((pnode *)mem)->pv;
	(*out)->kind = kind;
	return GFS_OK;
}

/* new_none(), new_bool(), new_int(): the load's shared node where it has one. */
static gfs_err new_none(vm *m, gfs_pv **out)
{
	gfs_err err = GFS_OK;

	if (!m->none_v) {
		err = new_node(m, GFS_PV_NONE, &m->none_v);
		if (!err) {
			pn(m->none_v)->flags = PN_BYVALUE;
			pn(m->none_v)->hash = mix64(m->seed ^ TAG_NONE);
		}
	}
	*out = m->none_v;
	return err;
}

static gfs_err new_bool(vm *m, bool b, gfs_pv **out)
{
	gfs_err err = GFS_OK;

	if (!m->bool_v[b]) {
		err = new_node(m, GFS_PV_BOOL, &m->bool_v[b]);
		if (!err) {
			m->bool_v[b]->u.b = b;
			pn(m->bool_v[b])->flags = PN_BYVALUE;
			pn(m->bool_v[b])->hash = hash_int(m->seed, b);
		}
	}
	*out = m->bool_v[b];
	return err;
}

static gfs_err new_int(vm *m, int64_t i, gfs_pv **out)
{
	gfs_pv **const shared = i >= 0 && i < SMALL_INTS ? &m->small_int[i] : NULL;
	gfs_err err;

	if (shared && *shared) {
		*out = *shared;
		return GFS_OK;
	}
	err = new_node(m, GFS_PV_INT, out);
	if (!err) {
		(*out)->u.i = i;
		pn(*out)->flags = PN_BYVALUE;
		pn(*out)->hash = hash_int(m->seed, i);
		if (shared)
			*shared = *out;
	}
	return err;
}

static gfs_err new_float(vm *m, double f, gfs_pv **out)
{
	const gfs_err err = new_node(m, GFS_PV_FLOAT, out);

	if (!err)
		(*out)->u.f = f;
	return err;
}

/*
 * new_blob(): a STR, BYTES or BIGINT node with room for len bytes plus a
 * NUL; the caller fills *data (up to len bytes) and calls seal_blob().
 */
static gfs_err new_blob(vm *m, gfs_pv_kind kind, size_t len, gfs_pv **out, char **data)
{
	void *mem = NULL;
	gfs_err err;

	assert(kind == GFS_PV_STR || kind == GFS_PV_BYTES || kind == GFS_PV_BIGINT);
	if (len == SIZE_MAX)
		return vfail(m, GFS_ERR_LIMIT, "string of %zu bytes is too large", len);
	err = vm_alloc(m, len + 1, &mem);
	if (err)
		return err;
	err = new_node(m, kind, out);
	if (err)
		return err;
	*data = mem;
	(*out)->u.s.ptr = mem;
	(*out)->u.s.len = len;
	return GFS_OK;
}

/* seal_blob(): set the final length of a new_blob() node and hash it. */
static void seal_blob(const vm *m, gfs_pv *v, char *data, size_t len, bool mutable_bytes)
{
	const uint64_t tag = v->kind == GFS_PV_STR ? TAG_STR :
			     v->kind == GFS_PV_BYTES ? TAG_BYTES : TAG_BIGINT;

	assert(data == v->u.s.ptr && len <= v->u.s.len);
	data[len] = '\0';
	v->u.s.len = len;
	if (mutable_bytes) {
		pn(v)->flags = PN_UNHASHABLE;
		return;
	}
	pn(v)->flags = PN_BYVALUE;
	pn(v)->hash = hash_bytes(m->seed ^ tag, data, len);
}

static gfs_err new_bytes(vm *m, gfs_pv_kind kind, const void *src, size_t len,
			 bool mutable_bytes, gfs_pv **out)
{
	char *data = NULL;
	const gfs_err err = new_blob(m, kind, len, out, &data);

	if (err)
		return err;
	if (len)
		memcpy(data, src, len);
	seal_blob(m, *out, data, len, mutable_bytes);
	return GFS_OK;
}

static int64_t u64_to_i64(uint64_t v)
{
	if (v <= (uint64_t)INT64_MAX)
		return (int64_t)v;
	return -(int64_t)(~v) - 1;
}

/*
 * new_long(): the integer with little-endian two's complement bytes b[0..n):
 * an INT if it fits in int64_t, else a BIGINT of the shortest encoding.
 */
static gfs_err new_long(vm *m, const uint8_t *b, size_t n, gfs_pv **out)
{
	uint64_t v = 0;

	while (n > 1 && ((b[n - 1] == 0x00 && !(b[n - 2] & 0x80)) ||
			 (b[n - 1] == 0xff && (b[n - 2] & 0x80))))
		n--;
	if (n > 8)
		return new_bytes(m, GFS_PV_BIGINT, b, n, false, out);
	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)b[i] << (8 * i);
	if (n > 0 && n < 8 && (b[n - 1] & 0x80))
		v |= ~(uint64_t)0 << (8 * n);
	return new_int(m, u64_to_i64(v), out);
}

static gfs_err new_seq(vm *m, gfs_pv_kind kind, size_t cap, gfs_pv **out)
{
	void *items = NULL;
	gfs_err err;

	if (cap) {
		if (cap > SIZE_MAX / sizeof(gfs_pv *))
			return vfail(m, GFS_ERR_LIMIT, "sequence of %zu items is too large", cap);
		err = vm_alloc(m, cap * sizeof(gfs_pv *), &items);
		if (err)
			return err;
	}
	err = new_node(m, kind, out);
	if (err)
		return err;
	(*out)->u.seq.items = items;
	(*out)->u.seq.cap = cap;
	if (kind != GFS_PV_TUPLE)
		pn(*out)->flags = PN_UNHASHABLE;
	return GFS_OK;
}

/* new_tuple(): an immutable TUPLE of items[0..n), hashed from its items. */
static gfs_err new_tuple(vm *m, gfs_pv *const *items, size_t n, gfs_pv **out)
{
	uint64_t h = mix64(m->seed ^ TAG_TUPLE ^ n);
	unsigned flags = PN_BYVALUE;
	gfs_err err;

	if (n == 0 && m->empty_tuple) {
		*out = m->empty_tuple;
		return GFS_OK;
	}
	err = new_seq(m, GFS_PV_TUPLE, n, out);
	if (err)
		return err;
	if (n == 0)
		m->empty_tuple = *out;
	for (size_t i = 0; i < n; i++) {
		(*out)->u.seq.items[i] = items[i];
		if (cpn(items[i])->flags & PN_UNHASHABLE)
			flags = PN_UNHASHABLE;
		h = mix64(h ^ key_hash(m->seed, items[i])) + i;
	}
	(*out)->u.seq.len = n;
	pn(*out)->flags = flags;
	pn(*out)->hash = h;
	return GFS_OK;
}

static gfs_err seq_push(vm *m, gfs_pv *seq, gfs_pv *item)
{
	void *items = NULL;
	size_t cap = 0;
	const gfs_err err = arena_grow(m, seq->u.seq.items, seq->u.seq.cap, seq->u.seq.len + 1,
				       sizeof(gfs_pv *), &items, &cap);

	if (err)
		return err;
	seq->u.seq.items = items;
	seq->u.seq.cap = cap;
	seq->u.seq.items[seq->u.seq.len++] = item;
	return GFS_OK;
}

static gfs_err new_dict(vm *m, gfs_pv **out)
{
	const gfs_err err = new_node(m, GFS_PV_DICT, out);

	if (!err)
		pn(*out)->flags = PN_UNHASHABLE;
	return err;
}

static gfs_err new_set(vm *m, bool frozen, gfs_pv **out)
{
	const gfs_err err = new_seq(m, GFS_PV_SET, 0, out);

	if (!err)
		pn(*out)->flags = frozen ? PN_FROZEN : PN_UNHASHABLE;
	return err;
}

/*
 * new_global(): a GLOBAL module.name.  Both strings live in one buffer
 * "module.name\0module\0", so global.name is also the tail of the qualified
 * name "module.name" that starts strlen(module) + 1 bytes before it.
 */
static gfs_err new_global(vm *m, const char *mod, size_t ml, const char *name, size_t nl,
			  gfs_pv **out)
{
	char *buf = NULL;
	void *mem = NULL;
	gfs_err err;

	if (ml == 0 || nl == 0)
		return vfail(m, GFS_ERR_FORMAT, "empty module or class name");
	if (memchr(mod, '\0', ml) || memchr(name, '\0', nl))
		return vfail(m, GFS_ERR_FORMAT, "NUL byte in a module or class name");
	if (ml > SIZE_MAX / 4 || nl > SIZE_MAX / 4)
		return vfail(m, GFS_ERR_LIMIT, "global name is too long");
	err = vm_alloc(m, 2 * ml + nl + 3, &mem);
	if (err)
		return err;
	buf = mem;
	memcpy(buf, mod, ml);
	buf[ml] = '.';
	memcpy(buf + ml + 1, name, nl);
	buf[ml + 1 + nl] = '\0';
	memcpy(buf + ml + nl + 2, mod, ml);
	buf[2 * ml + nl + 2] = '\0';
	err = new_node(m, GFS_PV_GLOBAL, out);
	if (err)
		return err;
	(*out)->u.global.name = buf + ml + 1;
	(*out)->u.global.module = buf + ml + nl + 2;
	return GFS_OK;
}

static gfs_err new_object(vm *m, const gfs_pv *cls, gfs_pv *args, gfs_pv **out)
{
	const gfs_err err = new_node(m, GFS_PV_OBJECT, out);

	assert(args->kind == GFS_PV_TUPLE);
	if (!err) {
		(*out)->u.obj.cls = cls;
		(*out)->u.obj.args = args;
	}
	return err;
}

static gfs_err new_persid(vm *m, gfs_pv *id, gfs_pv **out)
{
	const gfs_err err = new_node(m, GFS_PV_PERSID, out);

	if (!err)
		(*out)->u.persid = id;
	return err;
}

/* ------------------------------------------------------------------ dicts and sets */

static size_t centry_count(const gfs_pv *c)
{
	return c->kind == GFS_PV_DICT ? c->u.dict.len : c->u.seq.len;
}

static const gfs_pv *centry_key(const gfs_pv *c, size_t i)
{
	return c->kind == GFS_PV_DICT ? c->u.dict.items[i].key : c->u.seq.items[i];
}

static void index_put(kindex *x, uint64_t h, size_t i)
{
	size_t s = h & x->mask;

	while (x->slot[s])
		s = (s + 1) & x->mask;
	x->slot[s] = (uint32_t)(i + 1);
}

/* index_build(): (re)build the index of c with room for 4 * its entries. */
static gfs_err index_build(vm *m, gfs_pv *c)
{
	const size_t n = centry_count(c);
	size_t slots = 64;
	void *mem = NULL;
	kindex *x;
	gfs_err err;

	while (slots / 4 < n)
		slots *= 2;
	err = vm_alloc(m, sizeof(kindex), &mem);
	if (err)
		return err;
	x = mem;
	err = vm_zalloc(m, slots * sizeof(uint32_t), &mem);
	if (err)
		return err;
	x->slot = mem;
	x->mask = slots - 1;
	x->seed = m->seed;
	for (size_t i = 0; i < n; i++)
		index_put(x, key_hash(m->seed, centry_key(c, i)), i);
	*cidx(c) = x;
	return GFS_OK;
}

/* index_added(): update the index of c after its last entry was appended. */
static gfs_err index_added(vm *m, gfs_pv *c)
{
	const size_t n = centry_count(c);
	kindex *const x = *cidx(c);

	if (!x)
		return n > INDEX_MIN ? index_build(m, c) : GFS_OK;
	if (2 * n > x->mask + 1)
		return index_build(m, c);
	index_put(x, key_hash(m->seed, centry_key(c, n - 1)), n - 1);
	return GFS_OK;
}

/* cfind(): look key up in dict or set c: *found and its entry *pos. */
static gfs_err cfind(const vm *m, const gfs_pv *c, const gfs_pv *key, bool *found, size_t *pos)
{
	const kindex *const x = ccidx(c);
	const uint64_t h = key_hash(m->seed, key);
	const size_t n = centry_count(c);
	size_t budget = KEY_EQ_BUDGET;
	int r = 0;

	*found = false;
	if (x) {
		for (size_t s = h & x->mask; x->slot[s]; s = (s + 1) & x->mask) {
			const size_t i = x->slot[s] - 1;
			const gfs_pv *const k = centry_key(c, i);

			if (key_hash(m->seed, k) != h)
				continue;
			r = key_eq(key, k, 0, &budget);
			if (r == 1)
				*pos = i;
			if (r != 0)
				break;
		}
	} else {
		for (size_t i = 0; i < n; i++) {
			r = key_eq(key, centry_key(c, i), 0, &budget);
			if (r == 1)
				*pos = i;
			if (r != 0)
				break;
		}
	}
	if (r < 0)
		return vfail(m, GFS_ERR_LIMIT, "%s key too deeply nested or too costly to compare",
			     gfs_pv_kind_name(c->kind));
	*found = r == 1;
	return GFS_OK;
}

static gfs_err check_hashable(const vm *m, const gfs_pv *key, const char *what)
{
	if (cpn(key)->flags & PN_UNHASHABLE)
		return vfail(m, GFS_ERR_FORMAT, "unhashable %s used as %s",
			     gfs_pv_kind_name(key->kind), what);
	return GFS_OK;
}

/* dict_set(): d[key] = val, keeping insertion order. */
static gfs_err dict_set(vm *m, gfs_pv *d, gfs_pv *key, gfs_pv *val)
{
	void *items = NULL;
	size_t cap = 0, pos = 0;
	bool found;
	gfs_err err;

	assert(d->kind == GFS_PV_DICT);
	err = check_hashable(m, key, "a dict key");
	if (!err)
		err = cfind(m, d, key, &found, &pos);
	if (err)
		return err;
	if (found) {
		d->u.dict.items[pos].value = val;
		return GFS_OK;
	}
	if (d->u.dict.len >= UINT32_MAX - 1)
		return vfail(m, GFS_ERR_LIMIT, "dict has too many entries");
	err = arena_grow(m, d->u.dict.items, d->u.dict.cap, d->u.dict.len + 1,
			 sizeof(gfs_pv_item), &items, &cap);
	if (err)
		return err;
	d->u.dict.items = items;
	d->u.dict.cap = cap;
	d->u.dict.items[d->u.dict.len].key = key;
	d->u.dict.items[d->u.dict.len].value = val;
	d->u.dict.len++;
	return index_added(m, d);
}

/* set_add(): add item to set s unless an equal item is there. */
static gfs_err set_add(vm *m, gfs_pv *s, gfs_pv *item)
{
	size_t pos = 0;
	bool found;
	gfs_err err;

	assert(s->kind == GFS_PV_SET);
	err = check_hashable(m, item, "a set item");
	if (!err)
		err = cfind(m, s, item, &found, &pos);
	if (err || found)
		return err;
	if (s->u.seq.len >= UINT32_MAX - 1)
		return vfail(m, GFS_ERR_LIMIT, "set has too many items");
	err = seq_push(m, s, item);
	if (err)
		return err;
	return index_added(m, s);
}

/* ------------------------------------------------------------------ stack and memo */

static size_t fence(const vm *m)
{
	return m->nmarks ? m->marks[m->nmarks - 1] : 0;
}

static gfs_err underflow(const vm *m)
{
	if (m->nmarks)
		return vfail(m, GFS_ERR_FORMAT, "stack underflow (unexpected MARK)");
	return vfail(m, GFS_ERR_FORMAT, "stack underflow");
}

static gfs_err push(vm *m, gfs_pv *v)
{
	void *stack = NULL;
	size_t cap = 0;
	gfs_err err;

	if (m->sp + m->nmarks >= m->max_depth)
		return vfail(m, GFS_ERR_LIMIT, "stack depth exceeds the limit of %zu", m->max_depth);
	err = scratch_grow(m, m->stack, m->stack_cap, m->sp + 1, sizeof(gfs_pv *), m->max_depth,
			   &stack, &cap);
	if (err)
		return err;
	m->stack = stack;
	m->stack_cap = cap;
	m->stack[m->sp++] = v;
	return GFS_OK;
}

static gfs_err pop(vm *m, gfs_pv **out)
{
	if (m->sp <= fence(m))
		return underflow(m);
	*out = m->stack[--m->sp];
	return GFS_OK;
}

static gfs_err peek(const vm *m, gfs_pv **out)
{
	if (m->sp <= fence(m))
		return underflow(m);
	*out = m->stack[m->sp - 1];
	return GFS_OK;
}

static gfs_err push_mark(vm *m)
{
	void *marks = NULL;
	size_t cap = 0;
	gfs_err err;

	if (m->sp + m->nmarks >= m->max_depth)
		return vfail(m, GFS_ERR_LIMIT, "stack depth exceeds the limit of %zu", m->max_depth);
	err = scratch_grow(m, m->marks, m->marks_cap, m->nmarks + 1, sizeof(size_t),
			   m->max_depth, &marks, &cap);
	if (err)
		return err;
	m->marks = marks;
	m->marks_cap = cap;
	m->marks[m->nmarks++] = m->sp;
	return GFS_OK;
}

/* pop_mark(): drop the top mark; the values above it are stack[*start..sp). */
static gfs_err pop_mark(vm *m, size_t *start)
{
	if (!m->nmarks)
		return vfail(m, GFS_ERR_FORMAT, "no MARK on the stack");
	*start = m->marks[--m->nmarks];
	assert(*start <= m->sp);
	return GFS_OK;
}

/* mark_target(): after pop_mark(), the value just below the mark. */
static gfs_err mark_target(const vm *m, size_t start, gfs_pv **out)
{
	if (start <= fence(m))
		return vfail(m, GFS_ERR_FORMAT, "stack underflow (nothing below the MARK)");
	*out = m->stack[start - 1];
	return GFS_OK;
}

static gfs_err memo_put(vm *m, uint64_t idx)
{
	gfs_pv *v = NULL;
	void *memo = NULL;
	size_t cap = 0;
	gfs_err err;

	err = peek(m, &v);
	if (err)
		return err;
	if (idx >= m->max_memo)
		return vfail(m, GFS_ERR_LIMIT, "memo index %llu exceeds the limit of %zu",
			     (unsigned long long)idx, m->max_memo);
	err = scratch_grow(m, m->memo, m->memo_cap, (size_t)idx + 1, sizeof(gfs_pv *),
			   m->max_memo, &memo, &cap);
	if (err)
		return err;
	m->memo = memo;
	m->memo_cap = cap;
	if (!m->memo[idx])
		m->memo_count++;
	m->memo[idx] = v;
	return GFS_OK;
}

static gfs_err memo_get(vm *m, uint64_t idx)
{
	if (idx >= m->memo_cap || !m->memo[idx])
		return vfail(m, GFS_ERR_FORMAT, "memo entry %llu is undefined",
			     (unsigned long long)idx);
	return push(m, m->memo[idx]);
}

/* ------------------------------------------------------------------ input */

static gfs_err need(const vm *m, size_t n)
{
	return m->len - m->pos < n ? truncated(m) : GFS_OK;
}

static gfs_err read_u8(vm *m, uint8_t *out)
{
	const gfs_err err = need(m, 1);

	if (!err)
		*out = m->buf[m->pos++];
	return err;
}

static gfs_err read_u16(vm *m, uint16_t *out)
{
	const gfs_err err = need(m, 2);

	if (!err) {
		*out = gfs_le16(m->buf + m->pos);
		m->pos += 2;
	}
	return err;
}

static gfs_err read_u32(vm *m, uint32_t *out)
{
	const gfs_err err = need(m, 4);

	if (!err) {
		*out = gfs_le32(m->buf + m->pos);
		m->pos += 4;
	}
	return err;
}

static gfs_err read_u64(vm *m, uint64_t *out)
{
	const gfs_err err = need(m, 8);

	if (!err) {
		*out = gfs_le64(m->buf + m->pos);
		m->pos += 8;
	}
	return err;
}

/* read_data(): n bytes of payload, bounds-checked before anything is allocated. */
static gfs_err read_data(vm *m, uint64_t n, const uint8_t **out)
{
	if (n > (uint64_t)(m->len - m->pos))
		return vfail(m, GFS_ERR_FORMAT, "truncated: %llu bytes declared, %zu left",
			     (unsigned long long)n, m->len - m->pos);
	*out = m->buf + m->pos;
	m->pos += (size_t)n;
	return GFS_OK;
}

/* read_line(): the bytes up to the next '\n' (excluded), which is consumed. */
static gfs_err read_line(vm *m, const char **s, size_t *n)
{
	const uint8_t *nl = NULL;

	if (m->pos >= m->len)
		return truncated(m);
	nl = memchr(m->buf + m->pos, '\n', m->len - m->pos);
	if (!nl)
		return vfail(m, GFS_ERR_FORMAT, "truncated (no end of line)");
	*s = (const char *)(m->buf + m->pos);
	*n = (size_t)(nl - (m->buf + m->pos));
	m->pos += *n + 1;
	return GFS_OK;
}

/* ------------------------------------------------------------------ text numbers */

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

static void trim(const char **s, size_t *n)
{
	while (*n && is_blank(**s)) {
		(*s)++;
		(*n)--;
	}
	while (*n && is_blank((*s)[*n - 1]))
		(*n)--;
}

/* split_decimal(): [+-]digits with blanks around.  @return false if malformed. */
static bool split_decimal(const char *s, size_t n, bool *neg, const char **digits, size_t *nd)
{
	trim(&s, &n);
	*neg = false;
	if (n && (*s == '+' || *s == '-')) {
		*neg = *s == '-';
		s++;
		n--;
	}
	if (!n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	while (n > 1 && *s == '0') {
		s++;
		n--;
	}
	*digits = s;
	*nd = n;
	return true;
}

/* parse_u64(): digits as a uint64_t.  @return false on overflow. */
static bool parse_u64(const char *d, size_t nd, uint64_t *out)
{
	uint64_t v = 0;

	for (size_t i = 0; i < nd; i++) {
		if (!gfs_mul_u64(v, 10, &v) || !gfs_add_u64(v, (uint64_t)(d[i] - '0'), &v))
			return false;
	}
	*out = v;
	return true;
}

/* decimal_bigint(): a decimal that does not fit in int64_t, as BIGINT. */
static gfs_err decimal_bigint(vm *m, bool neg, const char *d, size_t nd, gfs_pv **out)
{
	static const uint32_t pow10[10] = {
		1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000,
	};
	uint32_t limb[BIGINT_LIMBS];
	uint8_t bytes[BIGINT_LIMBS * 4 + 1];
	size_t nl = 0, nb = 0;

	if (nd > MAX_DECIMAL_DIGITS)
		return vfail(m, GFS_ERR_LIMIT, "integer literal of %zu digits exceeds the limit of %d",
			     nd, MAX_DECIMAL_DIGITS);
	for (size_t i = 0; i < nd;) {
		const size_t k = i == 0 && nd % 9 ? nd % 9 : 9;
		uint64_t carry = 0;

		for (size_t j = 0; j < k; j++)
			carry = carry * 10 + (uint64_t)(d[i + j] - '0');
		for (size_t j = 0; j < nl; j++) {
			const uint64_t t = (uint64_t)limb[j] * pow10[k] + carry;

			limb[j] = (uint32_t)t;
			carry = t >> 32;
		}
		if (carry) {
			assert(nl < BIGINT_LIMBS);
			limb[nl++] = (uint32_t)carry;
		}
		i += k;
	}
	nb = nl * 4 + 1;
	for (size_t j = 0; j < nl; j++)
		for (size_t b = 0; b < 4; b++)
			bytes[4 * j + b] = (uint8_t)(limb[j] >> (8 * b));
	bytes[nb - 1] = 0;
	if (neg) {
		unsigned carry = 1;

		for (size_t j = 0; j < nb; j++) {
			const unsigned t = (uint8_t)~bytes[j] + carry;

			bytes[j] = (uint8_t)t;
			carry = t >> 8;
		}
	}
	return new_long(m, bytes, nb, out);
}

/* text_int(): the argument of INT or LONG (without the L suffix). */
static gfs_err text_int(vm *m, const char *s, size_t n, gfs_pv **out)
{
	const char *d = NULL;
	size_t nd = 0;
	bool neg;
	uint64_t mag = 0;

	if (!split_decimal(s, n, &neg, &d, &nd))
		return vfail(m, GFS_ERR_FORMAT, "malformed integer literal");
	if (parse_u64(d, nd, &mag)) {
		if (!neg && mag <= (uint64_t)INT64_MAX)
			return new_int(m, (int64_t)mag, out);
		if (neg && mag <= (uint64_t)INT64_MAX + 1)
			return new_int(m, mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag,
				       out);
	}
	return decimal_bigint(m, neg, d, nd, out);
}

/* text_index(): the decimal argument of GET or PUT. */
static gfs_err text_index(vm *m, uint64_t *out)
{
	const char *s = NULL, *d = NULL;
	size_t n = 0, nd = 0;
	bool neg;
	gfs_err err;

	err = read_line(m, &s, &n);
	if (err)
		return err;
	if (!split_decimal(s, n, &neg, &d, &nd) || neg)
		return vfail(m, GFS_ERR_FORMAT, "malformed memo index");
	if (!parse_u64(d, nd, out))
		return vfail(m, GFS_ERR_LIMIT, "memo index exceeds the limit of %zu", m->max_memo);
	return GFS_OK;
}

static gfs_err text_float(vm *m, const char *s, size_t n, gfs_pv **out)
{
	static const char allowed[] = "0123456789+-.eEinfatyINFATY";
	const char *const point = localeconv()->decimal_point;
	char text[MAX_FLOAT_TEXT + 1];
	char *end = NULL;
	double f;

	trim(&s, &n);
	if (n == 0 || n > MAX_FLOAT_TEXT)
		return vfail(m, GFS_ERR_FORMAT, "malformed float literal");
	for (size_t i = 0; i < n; i++) {
		if (!s[i] || !strchr(allowed, s[i]))
			return vfail(m, GFS_ERR_FORMAT, "malformed float literal");
		/* strtod() follows the locale; pickle always writes '.'. */
		text[i] = s[i] == '.' && point && point[0] && !point[1] ? point[0] : s[i];
	}
	text[n] = '\0';
	f = strtod(text, &end);
	if (end != text + n)
		return vfail(m, GFS_ERR_FORMAT, "malformed float literal");
	return new_float(m, f, out);
}

/* ------------------------------------------------------------------ text strings */

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * text_string(): STRING's quoted argument, unescaped as codecs.escape_decode
 * (a backslash-newline cannot occur: the argument ends at the first newline).
 */
static gfs_err text_string(vm *m, const char *s, size_t n, gfs_pv **out)
{
	char *o = NULL;
	size_t k = 0;
	gfs_err err;

	if (n < 2 || s[0] != s[n - 1] || (s[0] != '\'' && s[0] != '"'))
		return vfail(m, GFS_ERR_FORMAT, "STRING argument is not quoted");
	s++;
	n -= 2;
	err = new_blob(m, GFS_PV_STR, n, out, &o);
	if (err)
		return err;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (c != '\\') {
			o[k++] = c;
			continue;
		}
		if (++i == n)
			return vfail(m, GFS_ERR_FORMAT, "trailing \\ in STRING argument");
		c = s[i];
		switch (c) {
		case '\\': case '\'': case '"': o[k++] = c; break;
		case 'a': o[k++] = '\a'; break;
		case 'b': o[k++] = '\b'; break;
		case 'f': o[k++] = '\f'; break;
		case 'n': o[k++] = '\n'; break;
		case 'r': o[k++] = '\r'; break;
		case 't': o[k++] = '\t'; break;
		case 'v': o[k++] = '\v'; break;
		case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
			unsigned v = (unsigned)(c - '0');

			for (int j = 0; j < 2 && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '7'; j++)
				v = v * 8 + (unsigned)(s[++i] - '0');
			o[k++] = (char)(uint8_t)v;
			break;
		}
		case 'x': {
			const int hi = i + 1 < n ? hex_digit(s[i + 1]) : -1;
			const int lo = i + 2 < n ? hex_digit(s[i + 2]) : -1;

			if (hi < 0 || lo < 0)
				return vfail(m, GFS_ERR_FORMAT, "invalid \\x escape in STRING argument");
			o[k++] = (char)(hi * 16 + lo);
			i += 2;
			break;
		}
		default:
			o[k++] = '\\';
			o[k++] = c;
			break;
		}
	}
	seal_blob(m, *out, o, k, false);
	return GFS_OK;
}

static size_t utf8_put(uint32_t cp, char *o)
{
	if (cp < 0x80) {
		if (o)
			o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		if (o) {
			o[0] = (char)(0xc0 | (cp >> 6));
			o[1] = (char)(0x80 | (cp & 0x3f));
		}
		return 2;
	}
	if (cp < 0x10000) {
		if (o) {
			o[0] = (char)(0xe0 | (cp >> 12));
			o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
			o[2] = (char)(0x80 | (cp & 0x3f));
		}
		return 3;
	}
	if (o) {
		o[0] = (char)(0xf0 | (cp >> 18));
		o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[3] = (char)(0x80 | (cp & 0x3f));
	}
	return 4;
}

/*
 * raw_unicode_decode(): decode raw-unicode-escape s[0..n) to UTF-8 into o
 * (or only measure when o is NULL).  Lone surrogates are encoded as three
 * bytes.  @return false on a malformed escape.
 */
static bool raw_unicode_decode(const char *s, size_t n, char *o, size_t *outlen)
{
	size_t k = 0;

	for (size_t i = 0; i < n;) {
		const uint8_t c = (uint8_t)s[i++];
		uint32_t cp = 0;
		size_t count;

		if (c != '\\' || i == n || (s[i] != 'u' && s[i] != 'U')) {
			k += utf8_put(c, o ? o + k : NULL);
			continue;
		}
		count = s[i++] == 'u' ? 4 : 8;
		if (n - i < count)
			return false;
		for (; count; count--) {
			const int h = hex_digit(s[i++]);

			if (h < 0)
				return false;
			cp = cp << 4 | (uint32_t)h;
		}
		if (cp > 0x10ffff)
			return false;
		k += utf8_put(cp, o ? o + k : NULL);
	}
	*outlen = k;
	return true;
}

static gfs_err text_unicode(vm *m, const char *s, size_t n, gfs_pv **out)
{
	size_t len = 0;
	char *o = NULL;
	gfs_err err;

	if (!raw_unicode_decode(s, n, NULL, &len))
		return vfail(m, GFS_ERR_FORMAT, "malformed \\u escape in UNICODE argument");
	err = new_blob(m, GFS_PV_STR, len, out, &o);
	if (err)
		return err;
	raw_unicode_decode(s, n, o, &len);
	seal_blob(m, *out, o, len, false);
	return GFS_OK;
}

/* ------------------------------------------------------------------ calls */

static bool str_eq(const gfs_pv *v, const char *s, size_t n)
{
	return v->kind == GFS_PV_STR && v->u.s.len == n && memcmp(v->u.s.ptr, s, n) == 0;
}

static bool is_cstr(const gfs_pv *v)
{
	return v->kind == GFS_PV_STR && !memchr(v->u.s.ptr, '\0', v->u.s.len);
}

/* read_dims(): a size or stride tuple of make_tensor(). */
static gfs_err read_dims(const vm *m, const gfs_pv *t, const char *what, int64_t *dims)
{
	for (size_t i = 0; i < t->u.seq.len; i++) {
		const gfs_pv *const d = t->u.seq.items[i];

		if (d->kind != GFS_PV_INT)
			return vfail(m, GFS_ERR_FORMAT, "tensor %s[%zu] is a %s, not an int", what, i,
				     gfs_pv_kind_name(d->kind));
		if (d->u.i < 0)
			return vfail(m, GFS_ERR_FORMAT, "tensor %s[%zu] is negative (%lld)", what, i,
				     (long long)d->u.i);
		dims[i] = d->u.i;
	}
	return GFS_OK;
}

/*
 * make_tensor(): _rebuild_tensor_v2/v3(persid, offset, size, stride,
 * requires_grad, hooks[, dtype][, metadata]).  *out stays NULL when the
 * arguments do not have that shape.
 */
static gfs_err make_tensor(vm *m, const gfs_pv *args, bool v3, gfs_pv **out)
{
	const size_t n = args->u.seq.len;
	gfs_pv *const *const a = args->u.seq.items;
	const gfs_pv *pid = NULL, *cls = NULL, *key = NULL, *loc = NULL, *numel = NULL;
	const gfs_pv *dtype = NULL;
	gfs_pv_tensor *t;
	void *mem = NULL;
	gfs_err err;

	*out = NULL;
	if (n != (v3 ? 7u : 6u) && n != (v3 ? 8u : 7u))
		return GFS_OK;
	if (a[0]->kind != GFS_PV_PERSID || a[1]->kind != GFS_PV_INT ||
	    a[2]->kind != GFS_PV_TUPLE || a[3]->kind != GFS_PV_TUPLE || a[4]->kind != GFS_PV_BOOL)
		return GFS_OK;
	if (v3) {
		dtype = a[6];
		if (dtype->kind != GFS_PV_GLOBAL || strcmp(dtype->u.global.module, "torch") != 0)
			return GFS_OK;
	}
	pid = a[0]->u.persid;
	if (pid->kind != GFS_PV_TUPLE || pid->u.seq.len != 5)
		return GFS_OK;
	cls = pid->u.seq.items[1];
	key = pid->u.seq.items[2];
	loc = pid->u.seq.items[3];
	numel = pid->u.seq.items[4];
	/* v3 (FP8 and other dtypes without a typed storage): torch.storage.UntypedStorage,
	 * its numel in bytes, as torch 2.1+ writes it */
	if (!str_eq(pid->u.seq.items[0], "storage", 7) || cls->kind != GFS_PV_GLOBAL ||
	    (strcmp(cls->u.global.module, "torch") != 0 &&
	     !(v3 && gfs_pv_is_global(cls, "torch.storage", "UntypedStorage"))) || key->kind != GFS_PV_STR ||
	    loc->kind != GFS_PV_STR || numel->kind != GFS_PV_INT)
		return GFS_OK;

	if (!is_cstr(key) || !is_cstr(loc))
		return vfail(m, GFS_ERR_FORMAT, "tensor storage key or location contains a NUL byte");
	if (numel->u.i < 0)
		return vfail(m, GFS_ERR_FORMAT, "tensor storage numel is negative (%lld)",
			     (long long)numel->u.i);
	if (a[1]->u.i < 0)
		return vfail(m, GFS_ERR_FORMAT, "tensor storage offset is negative (%lld)",
			     (long long)a[1]->u.i);
	if (a[2]->u.seq.len != a[3]->u.seq.len)
		return vfail(m, GFS_ERR_FORMAT, "tensor has %zu sizes but %zu strides",
			     a[2]->u.seq.len, a[3]->u.seq.len);
	if (a[2]->u.seq.len > GFS_PV_MAX_DIMS)
		return vfail(m, GFS_ERR_FORMAT, "tensor has %zu dimensions, more than %d",
			     a[2]->u.seq.len, GFS_PV_MAX_DIMS);
	err = vm_zalloc(m, sizeof(*t), &mem);
	if (err)
		return err;
	t = mem;
	if (a[2]->u.seq.len > 0) {
		int64_t *dims;

		err = vm_alloc(m, 2 * a[2]->u.seq.len * sizeof(*dims), &mem);
		if (err)
			return err;
		dims = mem;
		err = read_dims(m, a[2], "size", dims);
		if (!err)
			err = read_dims(m, a[3], "stride", dims + a[2]->u.seq.len);
		if (err)
			return err;
		t->size = dims;
		t->stride = dims + a[2]->u.seq.len;
	}
	t->storage.cls = cls->u.global.name;
	t->storage.key = key->u.s.ptr;
	t->storage.location = loc->u.s.ptr;
	t->storage.numel = numel->u.i;
	t->dtype = dtype ? dtype->u.global.name : NULL;
	t->offset = a[1]->u.i;
	t->ndim = (uint32_t)a[2]->u.seq.len;
	t->requires_grad = a[4]->u.b;
	err = new_node(m, GFS_PV_TENSOR, out);
	if (!err)
		(*out)->u.tensor = t;
	return err;
}

static bool is_seq(const gfs_pv *v)
{
	return v->kind == GFS_PV_TUPLE || v->kind == GFS_PV_LIST || v->kind == GFS_PV_SET;
}

static gfs_err make_set(vm *m, bool frozen, const gfs_pv *src, gfs_pv **out)
{
	gfs_err err = new_set(m, frozen, out);

	for (size_t i = 0; !err && src && i < src->u.seq.len; i++)
		err = set_add(m, *out, src->u.seq.items[i]);
	return err;
}

/*
 * call(): the value of fn(*args) (REDUCE): the interpreted callables listed
 * in pickle.h, otherwise an inert OBJECT.
 */
static gfs_err call(vm *m, gfs_pv *fn, gfs_pv *args, gfs_pv **out)
{
	const size_t n = args->u.seq.len;
	gfs_pv *const *const a = args->u.seq.items;
	const bool frozen = gfs_pv_is_global(fn, "builtins", "frozenset");
	const bool v3 = gfs_pv_is_global(fn, "torch._utils", "_rebuild_tensor_v3");
	gfs_err err;

	assert(args->kind == GFS_PV_TUPLE);
	if (fn->kind != GFS_PV_GLOBAL)
		return new_object(m, fn, args, out);
	if (gfs_pv_is_global(fn, "collections", "OrderedDict") && n == 0)
		return new_dict(m, out);
	if ((frozen || gfs_pv_is_global(fn, "builtins", "set")) &&
	    (n == 0 || (n == 1 && is_seq(a[0]))))
		return make_set(m, frozen, n ? a[0] : NULL, out);
	if (gfs_pv_is_global(fn, "torch", "Size") && n == 1 && a[0]->kind == GFS_PV_TUPLE) {
		*out = a[0];
		return GFS_OK;
	}
	if (gfs_pv_is_global(fn, "torch", "Size") && n == 1 && a[0]->kind == GFS_PV_LIST)
		return new_tuple(m, a[0]->u.seq.items, a[0]->u.seq.len, out);
	if (gfs_pv_is_global(fn, "builtins", "getattr") && n == 2 &&
	    a[0]->kind == GFS_PV_GLOBAL && is_cstr(a[1])) {
		err = new_node(m, GFS_PV_ENUM, out);
		if (!err) {
			(*out)->u.enm.cls = a[0];
			(*out)->u.enm.member = a[1]->u.s.ptr;
		}
		return err;
	}
	if (v3 || gfs_pv_is_global(fn, "torch._utils", "_rebuild_tensor_v2")) {
		err = make_tensor(m, args, v3, out);
		if (err || *out)
			return err;
	}
	/* torch 2.x pickles tensors of subclasses and tensors with Python
	 * attributes (DeepSpeed's ds_id) as _rebuild_from_type_v2(func, type,
	 * args, state): the tensor is func(*args). */
	if (gfs_pv_is_global(fn, "torch._tensor", "_rebuild_from_type_v2") && n == 4 &&
	    a[2]->kind == GFS_PV_TUPLE &&
	    (gfs_pv_is_global(a[0], "torch._utils", "_rebuild_tensor_v2") ||
	     gfs_pv_is_global(a[0], "torch._utils", "_rebuild_tensor_v3"))) {
		err = make_tensor(m, a[2],
				  gfs_pv_is_global(a[0], "torch._utils", "_rebuild_tensor_v3"), out);
		if (err || *out)
			return err;
	}
	if (((gfs_pv_is_global(fn, "torch._utils", "_rebuild_parameter") && n == 3) ||
	     (gfs_pv_is_global(fn, "torch._utils", "_rebuild_parameter_with_state") && n == 4)) &&
	    a[0]->kind == GFS_PV_TENSOR) {
		*out = a[0];
		return GFS_OK;
	}
	return new_object(m, fn, args, out);
}

/* ------------------------------------------------------------------ opcodes */

/*
 * push_new(): push *v unless err.  Takes &v, not v, so that
 * push_new(m, new_x(m, &v), &v) reads v only after new_x() has set it.
 */
static gfs_err push_new(vm *m, gfs_err err, gfs_pv *const *v)
{
	return err ? err : push(m, *v);
}

static gfs_err op_binint(vm *m, size_t width)
{
	gfs_pv *v = NULL;
	uint8_t b8 = 0;
	uint16_t b16 = 0;
	uint32_t b32 = 0;
	gfs_err err;

	switch (width) {
	case 1:
		err = read_u8(m, &b8);
		return err ? err : push_new(m, new_int(m, b8, &v), &v);
	case 2:
		err = read_u16(m, &b16);
		return err ? err : push_new(m, new_int(m, b16, &v), &v);
	default:
		assert(width == 4);
		err = read_u32(m, &b32);
		if (err)
			return err;
		/* Sign-extend the 32-bit two's complement value. */
		return push_new(m, new_int(m, u64_to_i64((b32 & 0x80000000u) ?
			(uint64_t)b32 | 0xffffffff00000000ULL : b32), &v), &v);
	}
}

static gfs_err op_long_bin(vm *m, size_t width)
{
	const uint8_t *data = NULL;
	uint8_t n8 = 0;
	uint32_t n32 = 0;
	uint64_t n = 0;
	gfs_pv *v = NULL;
	gfs_err err;

	if (width == 1) {
		err = read_u8(m, &n8);
		n = n8;
	} else {
		err = read_u32(m, &n32);
		if (!err && (n32 & 0x80000000u))
			return vfail(m, GFS_ERR_FORMAT, "negative byte count");
		n = n32;
	}
	if (!err)
		err = read_data(m, n, &data);
	if (err)
		return err;
	return push_new(m, new_long(m, data, (size_t)n, &v), &v);
}

/* op_counted(): BINSTRING, BINUNICODE, BINBYTES... : a length then the bytes. */
static gfs_err op_counted(vm *m, size_t width, bool is_signed, gfs_pv_kind kind, bool mutable_bytes)
{
	const uint8_t *data = NULL;
	uint64_t n = 0;
	uint8_t n8 = 0;
	uint32_t n32 = 0;
	gfs_pv *v = NULL;
	gfs_err err;

	switch (width) {
	case 1:
		err = read_u8(m, &n8);
		n = n8;
		break;
	case 4:
		err = read_u32(m, &n32);
		if (!err && is_signed && (n32 & 0x80000000u))
			return vfail(m, GFS_ERR_FORMAT, "negative length");
		n = n32;
		break;
	default:
		assert(width == 8);
		err = read_u64(m, &n);
		break;
	}
	if (!err)
		err = read_data(m, n, &data);
	if (err)
		return err;
	return push_new(m, new_bytes(m, kind, data, (size_t)n, mutable_bytes, &v), &v);
}

static gfs_err op_text(vm *m)
{
	const char *s = NULL;
	size_t n = 0;
	gfs_pv *v = NULL;
	gfs_err err = read_line(m, &s, &n);

	if (err)
		return err;
	switch (m->op) {
	case OP_INT:
		if (n == 2 && s[0] == '0' && (s[1] == '0' || s[1] == '1'))
			err = new_bool(m, s[1] == '1', &v);
		else
			err = text_int(m, s, n, &v);
		break;
	case OP_LONG:
		if (n && s[n - 1] == 'L')
			n--;
		err = text_int(m, s, n, &v);
		break;
	case OP_FLOAT:
		err = text_float(m, s, n, &v);
		break;
	case OP_STRING:
		err = text_string(m, s, n, &v);
		break;
	default:
		assert(m->op == OP_UNICODE);
		err = text_unicode(m, s, n, &v);
		break;
	}
	return push_new(m, err, &v);
}

static gfs_err op_binfloat(vm *m)
{
	uint64_t bits = 0;
	double f;
	gfs_pv *v = NULL;
	const gfs_err err = need(m, 8);

	if (err)
		return err;
	for (size_t i = 0; i < 8; i++)
		bits = bits << 8 | m->buf[m->pos + i];
	m->pos += 8;
	memcpy(&f, &bits, sizeof(f));
	return push_new(m, new_float(m, f, &v), &v);
}

/* op_tuple_n(): TUPLE1/2/3 and EMPTY_TUPLE. */
static gfs_err op_tuple_n(vm *m, size_t n)
{
	gfs_pv *v = NULL;

	if (m->sp - fence(m) < n)
		return underflow(m);
	m->sp -= n;
	return push_new(m, new_tuple(m, m->stack + m->sp, n, &v), &v);
}

/* op_marked(): TUPLE, LIST, DICT, FROZENSET, POP_MARK: consume the values above the mark. */
static gfs_err op_marked(vm *m)
{
	size_t start = 0, n = 0;
	gfs_pv **items = NULL;
	gfs_pv *v = NULL;
	gfs_err err = pop_mark(m, &start);

	if (err)
		return err;
	items = m->stack + start;
	n = m->sp - start;
	m->sp = start;
	switch (m->op) {
	case OP_POP_MARK:
		return GFS_OK;
	case OP_TUPLE:
		return push_new(m, new_tuple(m, items, n, &v), &v);
	case OP_LIST:
		err = new_seq(m, GFS_PV_LIST, n, &v);
		if (!err) {
			if (n)
				memcpy(v->u.seq.items, items, n * sizeof(*items));
			v->u.seq.len = n;
		}
		return push_new(m, err, &v);
	case OP_DICT:
		if (n % 2)
			return vfail(m, GFS_ERR_FORMAT, "odd number of items (%zu)", n);
		err = new_dict(m, &v);
		for (size_t i = 0; !err && i < n; i += 2)
			err = dict_set(m, v, items[i], items[i + 1]);
		return push_new(m, err, &v);
	default:
		assert(m->op == OP_FROZENSET);
		err = new_set(m, true, &v);
		for (size_t i = 0; !err && i < n; i++)
			err = set_add(m, v, items[i]);
		return push_new(m, err, &v);
	}
}

/* list_of(): where APPEND(S) put items: a LIST, or an OBJECT's obj.list. */
static gfs_err list_of(vm *m, gfs_pv *target, gfs_pv **out)
{
	gfs_err err;

	if (target->kind == GFS_PV_LIST) {
		*out = target;
		return GFS_OK;
	}
	if (target->kind != GFS_PV_OBJECT)
		return vfail(m, GFS_ERR_FORMAT, "cannot append to %s",
			     gfs_pv_kind_name(target->kind));
	if (!target->u.obj.list) {
		err = new_seq(m, GFS_PV_LIST, 0, &target->u.obj.list);
		if (err)
			return err;
	}
	*out = target->u.obj.list;
	return GFS_OK;
}

/* dict_of(): where SETITEM(S) put items: a DICT, or an OBJECT's obj.items. */
static gfs_err dict_of(vm *m, gfs_pv *target, gfs_pv **out)
{
	gfs_err err;

	if (target->kind == GFS_PV_DICT) {
		*out = target;
		return GFS_OK;
	}
	if (target->kind != GFS_PV_OBJECT)
		return vfail(m, GFS_ERR_FORMAT, "cannot set items on %s",
			     gfs_pv_kind_name(target->kind));
	if (!target->u.obj.items) {
		err = new_dict(m, &target->u.obj.items);
		if (err)
			return err;
	}
	*out = target->u.obj.items;
	return GFS_OK;
}

static gfs_err op_append(vm *m)
{
	gfs_pv *v = NULL, *target = NULL, *list = NULL;
	gfs_err err = pop(m, &v);

	if (!err)
		err = peek(m, &target);
	if (!err)
		err = list_of(m, target, &list);
	return err ? err : seq_push(m, list, v);
}

static gfs_err op_setitem(vm *m)
{
	gfs_pv *k = NULL, *v = NULL, *target = NULL, *d = NULL;
	gfs_err err = pop(m, &v);

	if (!err)
		err = pop(m, &k);
	if (!err)
		err = peek(m, &target);
	if (!err)
		err = dict_of(m, target, &d);
	return err ? err : dict_set(m, d, k, v);
}

/* op_marked_into(): APPENDS, SETITEMS, ADDITEMS: the values above the mark go into the value below it. */
static gfs_err op_marked_into(vm *m)
{
	size_t start = 0, n = 0;
	gfs_pv **items = NULL;
	gfs_pv *target = NULL, *into = NULL;
	gfs_err err = pop_mark(m, &start);

	if (!err)
		err = mark_target(m, start, &target);
	if (err)
		return err;
	items = m->stack + start;
	n = m->sp - start;
	m->sp = start;
	switch (m->op) {
	case OP_APPENDS:
		err = list_of(m, target, &into);
		for (size_t i = 0; !err && i < n; i++)
			err = seq_push(m, into, items[i]);
		return err;
	case OP_SETITEMS:
		if (n % 2)
			return vfail(m, GFS_ERR_FORMAT, "odd number of items (%zu)", n);
		err = dict_of(m, target, &into);
		for (size_t i = 0; !err && i < n; i += 2)
			err = dict_set(m, into, items[i], items[i + 1]);
		return err;
	default:
		assert(m->op == OP_ADDITEMS);
		if (target->kind != GFS_PV_SET || (cpn(target)->flags & PN_FROZEN))
			return vfail(m, GFS_ERR_FORMAT, "cannot add items to %s%s",
				     target->kind == GFS_PV_SET ? "frozen " : "",
				     gfs_pv_kind_name(target->kind));
		for (size_t i = 0; !err && i < n; i++)
			err = set_add(m, target, items[i]);
		return err;
	}
}

static gfs_err op_global(vm *m)
{
	const char *mod = NULL, *name = NULL;
	size_t ml = 0, nl = 0;
	gfs_pv *v = NULL;
	gfs_err err = read_line(m, &mod, &ml);

	if (!err)
		err = read_line(m, &name, &nl);
	if (err)
		return err;
	return push_new(m, new_global(m, mod, ml, name, nl, &v), &v);
}

static gfs_err op_stack_global(vm *m)
{
	gfs_pv *mod = NULL, *name = NULL, *v = NULL;
	gfs_err err = pop(m, &name);

	if (!err)
		err = pop(m, &mod);
	if (err)
		return err;
	if (mod->kind != GFS_PV_STR || name->kind != GFS_PV_STR)
		return vfail(m, GFS_ERR_FORMAT, "module and name must be str, not %s and %s",
			     gfs_pv_kind_name(mod->kind), gfs_pv_kind_name(name->kind));
	return push_new(m, new_global(m, mod->u.s.ptr, mod->u.s.len, name->u.s.ptr,
				      name->u.s.len, &v), &v);
}

static gfs_err op_reduce(vm *m)
{
	gfs_pv *fn = NULL, *args = NULL, *v = NULL;
	gfs_err err = pop(m, &args);

	if (!err)
		err = pop(m, &fn);
	if (err)
		return err;
	if (args->kind != GFS_PV_TUPLE)
		return vfail(m, GFS_ERR_FORMAT, "arguments are a %s, not a tuple",
			     gfs_pv_kind_name(args->kind));
	return push_new(m, call(m, fn, args, &v), &v);
}

/* op_newobj(): NEWOBJ and NEWOBJ_EX: cls.__new__(cls, *args, **kwargs). */
static gfs_err op_newobj(vm *m)
{
	gfs_pv *cls = NULL, *args = NULL, *kwargs = NULL, *g = NULL, *t = NULL, *v = NULL;
	gfs_err err = GFS_OK;

	if (m->op == OP_NEWOBJ_EX)
		err = pop(m, &kwargs);
	if (!err)
		err = pop(m, &args);
	if (!err)
		err = pop(m, &cls);
	if (err)
		return err;
	if (args->kind != GFS_PV_TUPLE)
		return vfail(m, GFS_ERR_FORMAT, "arguments are a %s, not a tuple",
			     gfs_pv_kind_name(args->kind));
	if (kwargs && kwargs->kind != GFS_PV_DICT)
		return vfail(m, GFS_ERR_FORMAT, "keyword arguments are a %s, not a dict",
			     gfs_pv_kind_name(kwargs->kind));
	if (kwargs && kwargs->u.dict.len) {
		gfs_pv *const parts[3] = { cls, args, kwargs };

		err = new_global(m, "copyreg", 7, "__newobj_ex__", 13, &g);
		if (!err)
			err = new_tuple(m, parts, 3, &t);
		return err ? err : push_new(m, new_object(m, g, t, &v), &v);
	}
	if (gfs_pv_is_global(cls, "collections", "OrderedDict") && args->u.seq.len == 0)
		return push_new(m, new_dict(m, &v), &v);
	return push_new(m, new_object(m, cls, args, &v), &v);
}

/* op_inst_obj(): INST (class named inline) and OBJ (class first after the mark). */
static gfs_err op_inst_obj(vm *m)
{
	const char *mod = NULL, *name = NULL;
	size_t ml = 0, nl = 0, start = 0, n = 0;
	gfs_pv *cls = NULL, *args = NULL, *v = NULL;
	gfs_err err = GFS_OK;

	if (m->op == OP_INST) {
		err = read_line(m, &mod, &ml);
		if (!err)
			err = read_line(m, &name, &nl);
	}
	if (!err)
		err = pop_mark(m, &start);
	if (err)
		return err;
	n = m->sp - start;
	m->sp = start;
	if (m->op == OP_INST) {
		err = new_global(m, mod, ml, name, nl, &cls);
	} else if (n == 0) {
		return vfail(m, GFS_ERR_FORMAT, "no class after the MARK");
	} else {
		cls = m->stack[start++];
		n--;
	}
	if (!err)
		err = new_tuple(m, m->stack + start, n, &args);
	return err ? err : push_new(m, new_object(m, cls, args, &v), &v);
}

static gfs_err op_build(vm *m)
{
	gfs_pv *state = NULL, *inst = NULL;
	gfs_err err = pop(m, &state);

	if (!err)
		err = peek(m, &inst);
	if (err)
		return err;
	/*
	 * Only objects keep their state.  BUILD on a dict is how an
	 * OrderedDict gets its instance attributes (torch's state_dict()
	 * _metadata): they are not items, so they are dropped.
	 */
	if (inst->kind == GFS_PV_OBJECT)
		inst->u.obj.state = state;
	return GFS_OK;
}

static gfs_err op_persid(vm *m)
{
	const char *s = NULL;
	size_t n = 0;
	gfs_pv *id = NULL, *v = NULL;
	gfs_err err;

	if (m->op == OP_PERSID) {
		err = read_line(m, &s, &n);
		if (err)
			return err;
		for (size_t i = 0; i < n; i++)
			if ((uint8_t)s[i] >= 0x80)
				return vfail(m, GFS_ERR_FORMAT, "persistent id is not ASCII");
		err = new_bytes(m, GFS_PV_STR, s, n, false, &id);
	} else {
		err = pop(m, &id);
	}
	if (err)
		return err;
	return push_new(m, new_persid(m, id, &v), &v);
}

static gfs_err op_memo(vm *m)
{
	uint64_t idx = 0;
	uint8_t i8 = 0;
	uint32_t i32 = 0;
	gfs_err err = GFS_OK;

	switch (m->op) {
	case OP_GET:
	case OP_PUT:
		err = text_index(m, &idx);
		break;
	case OP_BINGET:
	case OP_BINPUT:
		err = read_u8(m, &i8);
		idx = i8;
		break;
	case OP_LONG_BINGET:
	case OP_LONG_BINPUT:
		err = read_u32(m, &i32);
		idx = i32;
		break;
	default:
		assert(m->op == OP_MEMOIZE);
		idx = m->memo_count;
		break;
	}
	if (err)
		return err;
	if (m->op == OP_GET || m->op == OP_BINGET || m->op == OP_LONG_BINGET)
		return memo_get(m, idx);
	return memo_put(m, idx);
}

static gfs_err op_pop(vm *m)
{
	gfs_pv *v = NULL;

	if (m->sp > fence(m))
		return pop(m, &v);
	if (m->nmarks && m->sp == fence(m)) {
		m->nmarks--;
		return GFS_OK;
	}
	return underflow(m);
}

static gfs_err op_dup(vm *m)
{
	gfs_pv *v = NULL;
	const gfs_err err = peek(m, &v);

	return err ? err : push(m, v);
}

static gfs_err op_proto_frame(vm *m)
{
	uint8_t proto = 0;
	uint64_t n = 0;
	gfs_err err;

	if (m->op == OP_PROTO) {
		err = read_u8(m, &proto);
		if (!err && proto > HIGHEST_PROTOCOL)
			return vfail(m, GFS_ERR_UNSUPPORTED, "unsupported pickle protocol %u",
				     (unsigned)proto);
		return err;
	}
	err = read_u64(m, &n);
	if (!err && n > (uint64_t)(m->len - m->pos))
		return vfail(m, GFS_ERR_FORMAT, "truncated: frame of %llu bytes, %zu left",
			     (unsigned long long)n, m->len - m->pos);
	return err;
}

static gfs_err op_simple(vm *m)
{
	gfs_pv *v = NULL;

	switch (m->op) {
	case OP_NONE:
		return push_new(m, new_none(m, &v), &v);
	case OP_NEWTRUE:
	case OP_NEWFALSE:
		return push_new(m, new_bool(m, m->op == OP_NEWTRUE, &v), &v);
	case OP_EMPTY_LIST:
		return push_new(m, new_seq(m, GFS_PV_LIST, 0, &v), &v);
	case OP_EMPTY_DICT:
		return push_new(m, new_dict(m, &v), &v);
	default:
		assert(m->op == OP_EMPTY_SET);
		return push_new(m, new_set(m, false, &v), &v);
	}
}

/* step(): run the opcode at m->pos.  Every opcode consumes input. */
static gfs_err step(vm *m)
{
	m->op_off = m->pos;
	m->op = m->buf[m->pos++];
	switch (m->op) {
	case OP_PROTO: case OP_FRAME:
		return op_proto_frame(m);
	case OP_MARK:
		return push_mark(m);
	case OP_POP:
		return op_pop(m);
	case OP_DUP:
		return op_dup(m);
	case OP_NONE: case OP_NEWTRUE: case OP_NEWFALSE:
	case OP_EMPTY_LIST: case OP_EMPTY_DICT: case OP_EMPTY_SET:
		return op_simple(m);
	case OP_INT: case OP_LONG: case OP_FLOAT: case OP_STRING: case OP_UNICODE:
		return op_text(m);
	case OP_BININT1:
		return op_binint(m, 1);
	case OP_BININT2:
		return op_binint(m, 2);
	case OP_BININT:
		return op_binint(m, 4);
	case OP_LONG1:
		return op_long_bin(m, 1);
	case OP_LONG4:
		return op_long_bin(m, 4);
	case OP_BINFLOAT:
		return op_binfloat(m);
	case OP_SHORT_BINSTRING:
		return op_counted(m, 1, false, GFS_PV_STR, false);
	case OP_BINSTRING:
		return op_counted(m, 4, true, GFS_PV_STR, false);
	case OP_SHORT_BINUNICODE:
		return op_counted(m, 1, false, GFS_PV_STR, false);
	case OP_BINUNICODE:
		return op_counted(m, 4, false, GFS_PV_STR, false);
	case OP_BINUNICODE8:
		return op_counted(m, 8, false, GFS_PV_STR, false);
	case OP_SHORT_BINBYTES:
		return op_counted(m, 1, false, GFS_PV_BYTES, false);
	case OP_BINBYTES:
		return op_counted(m, 4, false, GFS_PV_BYTES, false);
	case OP_BINBYTES8:
		return op_counted(m, 8, false, GFS_PV_BYTES, false);
	case OP_BYTEARRAY8:
		return op_counted(m, 8, false, GFS_PV_BYTES, true);
	case OP_EMPTY_TUPLE:
		return op_tuple_n(m, 0);
	case OP_TUPLE1:
		return op_tuple_n(m, 1);
	case OP_TUPLE2:
		return op_tuple_n(m, 2);
	case OP_TUPLE3:
		return op_tuple_n(m, 3);
	case OP_TUPLE: case OP_LIST: case OP_DICT: case OP_FROZENSET: case OP_POP_MARK:
		return op_marked(m);
	case OP_APPEND:
		return op_append(m);
	case OP_SETITEM:
		return op_setitem(m);
	case OP_APPENDS: case OP_SETITEMS: case OP_ADDITEMS:
		return op_marked_into(m);
	case OP_GLOBAL:
		return op_global(m);
	case OP_STACK_GLOBAL:
		return op_stack_global(m);
	case OP_REDUCE:
		return op_reduce(m);
	case OP_NEWOBJ: case OP_NEWOBJ_EX:
		return op_newobj(m);
	case OP_INST: case OP_OBJ:
		return op_inst_obj(m);
	case OP_BUILD:
		return op_build(m);
	case OP_PERSID: case OP_BINPERSID:
		return op_persid(m);
	case OP_GET: case OP_BINGET: case OP_LONG_BINGET:
	case OP_PUT: case OP_BINPUT: case OP_LONG_BINPUT: case OP_MEMOIZE:
		return op_memo(m);
	case OP_EXT1: case OP_EXT2: case OP_EXT4:
		return vfail(m, GFS_ERR_UNSUPPORTED, "extension registry codes are not supported");
	case OP_NEXT_BUFFER: case OP_READONLY_BUFFER:
		return vfail(m, GFS_ERR_UNSUPPORTED, "out-of-band buffers are not supported");
	default:
		return vfail(m, GFS_ERR_FORMAT, "unknown opcode 0x%02x", (unsigned)m->op);
	}
}

static gfs_err run(vm *m)
{
	gfs_pv *root = NULL;
	void *stack = NULL;
	gfs_err err;

	/* Allocate the stack up front: m->stack + n must never be NULL + 0. */
	err = scratch_grow(m, NULL, 0, 1, sizeof(gfs_pv *), m->max_depth, &stack, &m->stack_cap);
	if (err)
		return err;
	m->stack = stack;
	while (m->pos < m->len) {
		if (m->buf[m->pos] == OP_STOP) {
			m->op_off = m->pos;
			m->op = m->buf[m->pos++];
			err = pop(m, &root);
			if (!err)
				m->p->root = root;
			return err;
		}
		err = step(m);
		if (err)
			return err;
	}
	m->op_off = m->len;
	m->op = 0;
	return vfail(m, GFS_ERR_FORMAT, "truncated: no STOP opcode");
}

/* ------------------------------------------------------------------ public */

gfs_err gfs_pickle_load(const uint8_t *buf, size_t len, const char *label,
			const gfs_pickle_limits *lim, gfs_pickle **out)
{
	gfs_pickle *p;
	vm m;
	gfs_err err;

	if (!label)
		label = "pickle";
	if (!out || (!buf && len))
		return gfs_fail(GFS_ERR_INVAL, "%s: gfs_pickle_load: invalid arguments", label);
	*out = NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return gfs_fail(GFS_ERR_NOMEM, "%s: out of memory", label);
	p->max_bytes = lim && lim->max_bytes ? lim->max_bytes : DEFAULT_MAX_BYTES;
	memset(&m, 0, sizeof(m));
	m.p = p;
	m.buf = buf;
	m.len = len;
	m.label = label;
	m.max_depth = lim && lim->max_depth ? lim->max_depth : DEFAULT_MAX_DEPTH;
	m.max_memo = lim && lim->max_memo ? lim->max_memo : DEFAULT_MAX_MEMO;
	/* Seed the key hashes per load so colliding keys cannot be precomputed. */
	m.seed = mix64((uint64_t)(uintptr_t)p ^ (uint64_t)(uintptr_t)&m ^ len);
	err = run(&m);
	free(m.stack);
	free(m.marks);
	free(m.memo);
	if (err) {
		gfs_pickle_free(p);
		return err;
	}
	*out = p;
	return GFS_OK;
}

const gfs_pv *gfs_pickle_root(const gfs_pickle *p)
{
	return p ? p->root : NULL;
}

void gfs_pickle_free(gfs_pickle *p)
{
	arena_chunk *c, *next;

	if (!p)
		return;
	for (c = p->chunks; c; c = next) {
		next = c->next;
		if (c->size == ARENA_CHUNK)
			pool_put(c);
		else
			free(c);
	}
	free(p);
}

void gfs_pickle_pool_drain(void)
{
	arena_chunk *c;

	while ((c = pool_get()) != NULL)
		free(c);
}

/* ------------------------------------------------------------------ accessors */

const gfs_pv *gfs_pv_dict_get(const gfs_pv *dict, const char *key)
{
	const kindex *x;
	size_t kl = 0;

	if (!dict || !key || dict->kind != GFS_PV_DICT)
		return NULL;
	kl = strlen(key);
	x = ccidx(dict);
	if (x) {
		const uint64_t h = hash_bytes(x->seed ^ TAG_STR, key, kl);

		for (size_t s = h & x->mask; x->slot[s]; s = (s + 1) & x->mask) {
			const gfs_pv_item *const it = &dict->u.dict.items[x->slot[s] - 1];

			if (str_eq(it->key, key, kl))
				return it->value;
		}
		return NULL;
	}
	for (size_t i = 0; i < dict->u.dict.len; i++)
		if (str_eq(dict->u.dict.items[i].key, key, kl))
			return dict->u.dict.items[i].value;
	return NULL;
}

size_t gfs_pv_seq_len(const gfs_pv *v)
{
	return v && is_seq(v) ? v->u.seq.len : 0;
}

const gfs_pv *gfs_pv_seq_at(const gfs_pv *v, size_t i)
{
	return v && is_seq(v) && i < v->u.seq.len ? v->u.seq.items[i] : NULL;
}

const char *gfs_pv_str(const gfs_pv *v)
{
	return v && v->kind == GFS_PV_STR ? v->u.s.ptr : NULL;
}

const char *gfs_pv_name(const gfs_pv *v)
{
	const char *str = gfs_pv_str(v);

	return str && strlen(str) == v->u.s.len ? str : NULL;
}

gfs_err gfs_pv_name_fail(const char *path, const char *what, size_t i, const gfs_pv *key)
{
	char shown[GFS_SHOWN_KEY_BUF];
	const char *k;

	if (key && key->kind == GFS_PV_STR)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: %s %zu (\"%s\") holds a NUL byte, which no tensor name can",
				path, what, i, gfs_shown_key(key->u.s.ptr, key->u.s.len, shown));
	k = key ? gfs_pv_kind_name(key->kind) : "nothing";
	return gfs_fail(GFS_ERR_FORMAT, "%s: %s %zu is %s%s, not a string", path, what, i,
			strchr("aeiou", k[0]) ? "an " : "a ", k);
}

bool gfs_pv_int(const gfs_pv *v, int64_t *out)
{
	int64_t i;

	if (!v || !int_like(v, &i))
		return false;
	if (out)
		*out = i;
	return true;
}

static bool is_builtins(const char *mod)
{
	return strcmp(mod, "builtins") == 0 || strcmp(mod, "__builtin__") == 0;
}

bool gfs_pv_is_global(const gfs_pv *v, const char *module, const char *name)
{
	if (!v || !module || !name || v->kind != GFS_PV_GLOBAL)
		return false;
	if (strcmp(v->u.global.name, name) != 0)
		return false;
	return strcmp(v->u.global.module, module) == 0 ||
	       (is_builtins(module) && is_builtins(v->u.global.module));
}

/* global_qualname(): "module.name" of a GLOBAL (see new_global()). */
static const char *global_qualname(const gfs_pv *g)
{
	assert(g->kind == GFS_PV_GLOBAL);
	return g->u.global.name - strlen(g->u.global.module) - 1;
}

bool gfs_pv_enum(const gfs_pv *v, const char **cls_module, const char **cls_name,
		 const char **member, int64_t *value, bool *has_value)
{
	const gfs_pv *cls = NULL, *arg = NULL;

	if (!v)
		return false;
	if (v->kind == GFS_PV_ENUM) {
		cls = v->u.enm.cls;
		if (member)
			*member = v->u.enm.member;
		if (has_value)
			*has_value = false;
	} else if (v->kind == GFS_PV_OBJECT) {
		cls = v->u.obj.cls;
		if (cls->kind != GFS_PV_GLOBAL || v->u.obj.args->u.seq.len != 1 ||
		    v->u.obj.state || v->u.obj.items || v->u.obj.list)
			return false;
		arg = v->u.obj.args->u.seq.items[0];
		if (arg->kind != GFS_PV_INT)
			return false;
		if (member)
			*member = NULL;
		if (value)
			*value = arg->u.i;
		if (has_value)
			*has_value = true;
	} else {
		return false;
	}
	if (cls_module)
		*cls_module = cls->u.global.module;
	if (cls_name)
		*cls_name = global_qualname(cls);
	return true;
}

const char *gfs_pv_kind_name(gfs_pv_kind kind)
{
	switch (kind) {
	case GFS_PV_NONE: return "none";
	case GFS_PV_BOOL: return "bool";
	case GFS_PV_INT: return "int";
	case GFS_PV_BIGINT: return "bigint";
	case GFS_PV_FLOAT: return "float";
	case GFS_PV_STR: return "str";
	case GFS_PV_BYTES: return "bytes";
	case GFS_PV_TUPLE: return "tuple";
	case GFS_PV_LIST: return "list";
	case GFS_PV_DICT: return "dict";
	case GFS_PV_SET: return "set";
	case GFS_PV_GLOBAL: return "global";
	case GFS_PV_OBJECT: return "object";
	case GFS_PV_ENUM: return "enum";
	case GFS_PV_PERSID: return "persid";
	case GFS_PV_TENSOR: return "tensor";
	}
	return "unknown";
}

/* ------------------------------------------------------------------ distributed tensors */

/*
 * cls_in(): v is a GLOBAL called name from one of the modules mods (a
 * NULL-terminated list).
 */
static bool cls_in(const gfs_pv *v, const char *const *mods, const char *name)
{
	for (; *mods; mods++)
		if (gfs_pv_is_global(v, *mods, name))
			return true;
	return false;
}

static const char *const dtensor_mods[] = {
	"torch.distributed.tensor", "torch.distributed.tensor._api", "torch.distributed._tensor",
	"torch.distributed._tensor.api", NULL,
};
static const char *const spec_mods[] = {
	"torch.distributed.tensor._dtensor_spec", "torch.distributed._tensor._dtensor_spec",
	"torch.distributed._tensor.placement_types", NULL,
};
static const char *const place_mods[] = {
	"torch.distributed.tensor.placement_types", "torch.distributed._tensor.placement_types",
	"torch.distributed.tensor._utils", NULL,
};
static const char *const mesh_mods[] = {
	"torch.distributed.device_mesh", "torch.distributed._device_mesh", NULL,
};
static const char *const layout_mods[] = { "torch.distributed._mesh_layout", NULL };
static const char *const stensor_mods[] = {
	"torch.distributed._shard.sharded_tensor.api", "torch.distributed._sharded_tensor.api", NULL,
};
static const char *const lshard_mods[] = {
	"torch.distributed._shard.sharded_tensor.shard", "torch.distributed._sharded_tensor.shard",
	NULL,
};
static const char *const smeta_mods[] = {
	"torch.distributed._shard.metadata", "torch.distributed._shard.sharding_spec.api",
	"torch.distributed._shard.sharding_spec", NULL,
};
static const char *const remote_mods[] = { "torch.distributed.remote_device", NULL };

/*
 * state_field(), obj_field(): attribute key of a BUILD state (a dict, or a
 * (dict or None, slots dict or None) pair), of the OBJECT v's; NULL if
 * absent.
 */
static const gfs_pv *state_field(const gfs_pv *st, const char *key)
{
	if (!st)
		return NULL;
	if (st->kind == GFS_PV_DICT)
		return gfs_pv_dict_get(st, key);
	if (st->kind == GFS_PV_TUPLE && st->u.seq.len == 2) {
		const gfs_pv *r = gfs_pv_dict_get(st->u.seq.items[0], key);

		return r ? r : gfs_pv_dict_get(st->u.seq.items[1], key);
	}
	return NULL;
}

static const gfs_pv *obj_field(const gfs_pv *v, const char *key)
{
	return v && v->kind == GFS_PV_OBJECT ? state_field(v->u.obj.state, key) : NULL;
}

/* is_obj(): v is an OBJECT of class name from mods. */
static bool is_obj(const gfs_pv *v, const char *const *mods, const char *name)
{
	return v && v->kind == GFS_PV_OBJECT && cls_in(v->u.obj.cls, mods, name);
}

/* obj_class(): "module.Name" of an OBJECT's class, or its kind, for messages. */
static const char *obj_class(const gfs_pv *v)
{
	if (!v)
		return "nothing";
	if (v->kind == GFS_PV_OBJECT && v->u.obj.cls->kind == GFS_PV_GLOBAL)
		return global_qualname(v->u.obj.cls);
	return gfs_pv_kind_name(v->kind);
}

/*
 * int_tuple(): the ints of a TUPLE or LIST v (at most max, each >= 0) into
 * out; false if v is not such a sequence.
 */
static bool int_tuple(const gfs_pv *v, size_t max, int64_t *out, uint32_t *n)
{
	if (!v || (v->kind != GFS_PV_TUPLE && v->kind != GFS_PV_LIST) || v->u.seq.len > max)
		return false;
	for (size_t i = 0; i < v->u.seq.len; i++)
		if (v->u.seq.items[i]->kind != GFS_PV_INT || v->u.seq.items[i]->u.i < 0)
			return false;
		else
			out[i] = v->u.seq.items[i]->u.i;
	*n = (uint32_t)v->u.seq.len;
	return true;
}

/*
 * wrapper_parts(): the parts of _rebuild_from_type_v2(
 * _rebuild_wrapper_subclass, CLS, (CLS, dtype, size, stride, ...), state):
 * *cls (the GLOBAL), *wargs (the inner tuple) and *state; false otherwise.
 */
static bool wrapper_parts(const gfs_pv *v, const gfs_pv **cls, const gfs_pv **wargs,
			  const gfs_pv **state)
{
	const gfs_pv *a;

	if (!v || v->kind != GFS_PV_OBJECT ||
	    !gfs_pv_is_global(v->u.obj.cls, "torch._tensor", "_rebuild_from_type_v2"))
		return false;
	a = v->u.obj.args;
	if (a->u.seq.len != 4 ||
	    !gfs_pv_is_global(a->u.seq.items[0], "torch._utils", "_rebuild_wrapper_subclass") ||
	    a->u.seq.items[1]->kind != GFS_PV_GLOBAL || a->u.seq.items[2]->kind != GFS_PV_TUPLE)
		return false;
	*cls = a->u.seq.items[1];
	*wargs = a->u.seq.items[2];
	*state = a->u.seq.items[3];
	return true;
}

const char *gfs_pv_wrapper_class(const gfs_pv *v, const char **module)
{
	const gfs_pv *cls, *wargs, *state;

	if (!wrapper_parts(v, &cls, &wargs, &state))
		return NULL;
	if (module)
		*module = cls->u.global.module;
	return cls->u.global.name;
}

/*
 * wrapper_meta(): check the wrapper's arguments (CLS, dtype, size, stride,
 * storage_offset, layout, device, requires_grad): CLS again, a torch dtype,
 * matching size and stride; set the dtype name and the global shape.
 */
static gfs_err wrapper_meta(const gfs_pv *cls, const gfs_pv *wa, const char *what,
			    const char **dtype, uint32_t *ndim, int64_t *shape)
{
	int64_t stride[GFS_PV_MAX_DIMS];
	uint32_t ns = 0;
	const gfs_pv *dt;

	if (wa->u.seq.len < 5 || wa->u.seq.items[0] != cls)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a %s whose rebuild arguments are not (class, dtype, size, stride, offset, ...)",
				what, cls->u.global.name);
	dt = wa->u.seq.items[1];
	if (dt->kind != GFS_PV_GLOBAL || strcmp(dt->u.global.module, "torch") != 0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a %s whose dtype is no torch dtype", what,
				cls->u.global.name);
	if (!int_tuple(wa->u.seq.items[2], GFS_PV_MAX_DIMS, shape, ndim) ||
	    !int_tuple(wa->u.seq.items[3], GFS_PV_MAX_DIMS, stride, &ns) || ns != *ndim)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a %s whose size or stride is no tuple of up to %d non-negative ints (or they differ in length)",
				what, cls->u.global.name, GFS_PV_MAX_DIMS);
	*dtype = dt->u.global.name;
	return GFS_OK;
}

/* read_placement(): one of a DTensorSpec's placements. */
static gfs_err read_placement(const gfs_pv *p, const char *what, uint32_t ndim,
			      gfs_placement *out)
{
	const gfs_pv *dv;
	int64_t v;

	memset(out, 0, sizeof(*out));
	if (is_obj(p, place_mods, "Replicate")) {
		out->kind = GFS_PL_REPLICATE;
		return GFS_OK;
	}
	if (is_obj(p, place_mods, "Partial") || is_obj(p, place_mods, "_Partial")) {
		out->kind = GFS_PL_PARTIAL;
		return GFS_OK;
	}
	if (is_obj(p, place_mods, "_StridedShard")) {
		out->kind = GFS_PL_STRIDED;
		if (!gfs_pv_int(obj_field(p, "split_factor"), &v) || v < 1)
			return gfs_fail(GFS_ERR_FORMAT, "%s: a _StridedShard placement without a positive split_factor",
					what);
		out->split_factor = v;
	} else if (is_obj(p, place_mods, "Shard")) {
		out->kind = GFS_PL_SHARD;
	} else {
		return gfs_fail(GFS_ERR_FORMAT, "%s: placement %s is none of Shard, Replicate, _StridedShard, Partial",
				what, obj_class(p));
	}
	dv = obj_field(p, "dim");
	if (!dv && p->u.obj.args->u.seq.len >= 1)
		dv = p->u.obj.args->u.seq.items[0];
	if (!gfs_pv_int(dv, &v))
		return gfs_fail(GFS_ERR_FORMAT, "%s: a Shard placement without an int dim", what);
	if (v < 0 || (uint64_t)v >= ndim)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a Shard placement on dim %lld of a %u-dimensional tensor",
				what, (long long)v, ndim);
	out->dim = v;
	return GFS_OK;
}

/*
 * mesh_shape(): a DeviceMesh's shape: the shape of its `mesh` tensor
 * (torch <= 2.8), else the top-level sizes of its `_layout` (_MeshLayout
 * whose `axes` are _FlatLayouts: the product of each one's shape, () for
 * an axis of size 1).
 */
static gfs_err mesh_shape(const gfs_pv *mesh, const char *what, uint32_t *n, int64_t *shape)
{
	const gfs_pv *t = obj_field(mesh, "mesh"), *lay = obj_field(mesh, "_layout"), *axes;

	if (t && t->kind == GFS_PV_TENSOR) {
		if (t->u.tensor->ndim < 1 || t->u.tensor->ndim > GFS_PV_MAX_MESH)
			return gfs_fail(GFS_ERR_FORMAT, "%s: a device mesh of %u dimensions", what,
					t->u.tensor->ndim);
		*n = t->u.tensor->ndim;
		memcpy(shape, t->u.tensor->size, *n * sizeof(*shape));
		return GFS_OK;
	}
	if (!is_obj(lay, layout_mods, "_MeshLayout"))
		return gfs_fail(GFS_ERR_FORMAT, "%s: a device mesh with neither a mesh tensor nor a _MeshLayout (%s)",
				what, obj_class(lay));
	axes = obj_field(lay, "axes");
	if (!axes || axes->kind != GFS_PV_TUPLE || axes->u.seq.len < 1 ||
	    axes->u.seq.len > GFS_PV_MAX_MESH)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a _MeshLayout whose axes are no tuple of 1 to %d layouts",
				what, GFS_PV_MAX_MESH);
	for (size_t i = 0; i < axes->u.seq.len; i++) {
		const gfs_pv *ax = axes->u.seq.items[i];
		int64_t s[GFS_PV_MAX_DIMS];
		uint32_t k = 0;
		uint64_t prod = 1;

		if (!is_obj(ax, layout_mods, "_FlatLayout") ||
		    !int_tuple(obj_field(ax, "shape"), GFS_PV_MAX_DIMS, s, &k))
			return gfs_fail(GFS_ERR_FORMAT, "%s: mesh axis %zu is no _FlatLayout with a shape",
					what, i);
		for (uint32_t j = 0; j < k; j++)
			if (!gfs_mul_u64(prod, (uint64_t)s[j], &prod) || prod > INT32_MAX)
				return gfs_fail(GFS_ERR_FORMAT, "%s: mesh axis %zu is too large", what, i);
		shape[i] = (int64_t)prod;
	}
	*n = (uint32_t)axes->u.seq.len;
	return GFS_OK;
}

gfs_err gfs_pv_read_dtensor(const gfs_pv *v, const char *what, gfs_pv_dtensor *out)
{
	const gfs_pv *cls, *wa, *state, *lt, *spec, *mesh, *pls, *meta, *coord;
	int64_t mshape[GFS_PV_MAX_DIMS];
	uint32_t mn = 0, cn = 0;
	gfs_err err;

	memset(out, 0, sizeof(*out));
	if (!wrapper_parts(v, &cls, &wa, &state) || !cls_in(cls, dtensor_mods, "DTensor"))
		return gfs_fail(GFS_ERR_FORMAT, "%s: not a DTensor", what);
	err = wrapper_meta(cls, wa, what, &out->dtype, &out->ndim, out->shape);
	if (err)
		return err;
	lt = state_field(state, "_local_tensor");
	spec = state_field(state, "_spec");
	if (!lt || lt->kind != GFS_PV_TENSOR)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a DTensor whose _local_tensor is %s, not a tensor",
				what, obj_class(lt));
	out->local = lt->u.tensor;
	if (!is_obj(spec, spec_mods, "DTensorSpec"))
		return gfs_fail(GFS_ERR_FORMAT, "%s: a DTensor whose _spec is %s, not a DTensorSpec",
				what, obj_class(spec));
	meta = obj_field(spec, "tensor_meta");
	if (meta && meta->kind != GFS_PV_NONE) {
		const gfs_pv *ma = meta->kind == GFS_PV_OBJECT ? meta->u.obj.args : NULL;

		if (!is_obj(meta, spec_mods, "TensorMeta") || !ma || ma->u.seq.len < 1 ||
		    !int_tuple(ma->u.seq.items[0], GFS_PV_MAX_DIMS, mshape, &mn))
			return gfs_fail(GFS_ERR_FORMAT, "%s: a DTensorSpec whose tensor_meta is %s, not a TensorMeta(shape, ...)",
					what, obj_class(meta));
		if (mn != out->ndim || memcmp(mshape, out->shape, mn * sizeof(*mshape)) != 0)
			return gfs_fail(GFS_ERR_FORMAT, "%s: the DTensor's size disagrees with its TensorMeta's shape",
					what);
	}
	mesh = obj_field(spec, "mesh");
	if (!is_obj(mesh, mesh_mods, "DeviceMesh"))
		return gfs_fail(GFS_ERR_FORMAT, "%s: a DTensorSpec whose mesh is %s, not a DeviceMesh",
				what, obj_class(mesh));
	err = mesh_shape(mesh, what, &out->mesh_ndim, out->mesh);
	if (err)
		return err;
	for (uint32_t i = 0; i < out->mesh_ndim; i++)
		if (out->mesh[i] < 1 || out->mesh[i] > INT32_MAX)
			return gfs_fail(GFS_ERR_FORMAT, "%s: mesh dimension %u has size %lld", what, i,
					(long long)out->mesh[i]);
	coord = obj_field(mesh, "_coordinate_on_dim");
	if (!int_tuple(coord, GFS_PV_MAX_MESH, out->coord, &cn) || cn != out->mesh_ndim)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a DeviceMesh without its rank's coordinate (_coordinate_on_dim of %u ints)",
				what, out->mesh_ndim);
	for (uint32_t i = 0; i < cn; i++)
		if (out->coord[i] >= out->mesh[i])
			return gfs_fail(GFS_ERR_FORMAT, "%s: mesh coordinate %lld outside mesh dimension %u of size %lld",
					what, (long long)out->coord[i], i, (long long)out->mesh[i]);
	if (!gfs_pv_int(obj_field(mesh, "_rank"), &out->rank) || out->rank < 0)
		out->rank = -1;
	pls = obj_field(spec, "placements");
	if (!pls || pls->kind != GFS_PV_TUPLE || pls->u.seq.len != out->mesh_ndim)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a DTensorSpec whose placements are no tuple of %u (one per mesh dimension)",
				what, out->mesh_ndim);
	for (uint32_t i = 0; i < out->mesh_ndim; i++) {
		err = read_placement(pls->u.seq.items[i], what, out->ndim, &out->pl[i]);
		if (err)
			return err;
	}
	return GFS_OK;
}

/* read_lshard(): a ShardedTensor's local Shard(tensor, ShardMetadata). */
static gfs_err read_lshard(const gfs_pv *s, const gfs_pv_stensor *st, const char *what,
			   gfs_pv_lshard *out)
{
	const gfs_pv *t = obj_field(s, "tensor"), *m = obj_field(s, "metadata"), *pl;
	uint32_t no = 0, ns = 0;
	int64_t r;

	if (!is_obj(s, lshard_mods, "Shard") || !t || t->kind != GFS_PV_TENSOR)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a local shard that is %s, not a Shard of a tensor",
				what, obj_class(s));
	if (!is_obj(m, smeta_mods, "ShardMetadata") ||
	    !int_tuple(obj_field(m, "shard_offsets"), GFS_PV_MAX_DIMS, out->off, &no) ||
	    !int_tuple(obj_field(m, "shard_sizes"), GFS_PV_MAX_DIMS, out->size, &ns) ||
	    no != st->ndim || ns != st->ndim)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a local shard whose metadata is no ShardMetadata with %u offsets and sizes",
				what, st->ndim);
	for (uint32_t d = 0; d < st->ndim; d++)
		if (out->off[d] > st->shape[d] || out->size[d] > st->shape[d] - out->off[d])
			return gfs_fail(GFS_ERR_FORMAT, "%s: a local shard reaching past the tensor on dim %u",
					what, d);
	out->t = t->u.tensor;
	out->rank = -1;
	pl = obj_field(m, "placement");
	if (is_obj(pl, remote_mods, "_remote_device") && gfs_pv_int(obj_field(pl, "_rank"), &r))
		out->rank = r;
	return GFS_OK;
}

gfs_err gfs_pv_read_stensor(const gfs_pv *v, const char *what, gfs_pv_stensor *out)
{
	const gfs_pv *cls, *wa, *state, *shards;
	gfs_err err;

	memset(out, 0, sizeof(*out));
	if (!wrapper_parts(v, &cls, &wa, &state) || !cls_in(cls, stensor_mods, "ShardedTensor"))
		return gfs_fail(GFS_ERR_FORMAT, "%s: not a ShardedTensor", what);
	err = wrapper_meta(cls, wa, what, &out->dtype, &out->ndim, out->shape);
	if (err)
		return err;
	if (state->kind != GFS_PV_TUPLE || state->u.seq.len < 2 ||
	    state->u.seq.items[0]->kind != GFS_PV_LIST)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a ShardedTensor whose state is not (local_shards, metadata, ...)",
				what);
	shards = state->u.seq.items[0];
	if (shards->u.seq.len > GFS_PV_MAX_SHARDS)
		return gfs_fail(GFS_ERR_LIMIT, "%s: a ShardedTensor with %zu local shards, more than %d",
				what, shards->u.seq.len, GFS_PV_MAX_SHARDS);
	for (size_t i = 0; i < shards->u.seq.len; i++) {
		err = read_lshard(shards->u.seq.items[i], out, what, &out->local[i]);
		if (err)
			return err;
	}
	out->nlocal = shards->u.seq.len;
	return GFS_OK;
}
