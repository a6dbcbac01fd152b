/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the inert values of the safe pickle reader: the arena, the
 * nodes the VM (pickle.c) builds, dict keys and set items, and the public
 * gfs_pv_* accessors of pickle.h.
 *
 * Memory: every node lives in a bump arena owned by the gfs_pickle.  Arrays
 * that grow (list items, dict entries, hash indexes) grow in place when they
 * are the last allocation of the current chunk, otherwise they are copied
 * and the old copy is abandoned until gfs_pickle_free(); with geometric
 * growth that wastes at most the final size.  Arena chunks and VM scratch
 * both count against gfs_pickle_limits.max_bytes.
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
#include <pthread.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "pickle_internal.h"

#define ARENA_FIRST_CHUNK ((size_t)4 * 1024)
#define ARENA_CHUNK ((size_t)64 * 1024)
#define ARENA_ALIGN (alignof(max_align_t))

#define INDEX_MIN 32            /* dicts and sets larger than this get an index */
#define KEY_MAX_DEPTH 64        /* tuple nesting followed when comparing keys */
#define KEY_EQ_BUDGET 100000    /* node comparisons allowed per key lookup */

/* ------------------------------------------------------------------ chunk pool */

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
		return gfs_pk_vfail(m, GFS_ERR_LIMIT, "memory use exceeds the limit of %zu bytes",
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
		return gfs_pk_vfail(m, GFS_ERR_LIMIT, "allocation of %zu bytes is too large", size);
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
		return gfs_pk_vfail(m, GFS_ERR_NOMEM, "out of memory allocating %zu bytes", csize);
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

gfs_err gfs_pk_vm_alloc(vm *m, size_t size, void **out)
{
	return arena_take(m, size, false, out);
}

gfs_err gfs_pk_vm_zalloc(vm *m, size_t size, void **out)
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
	size_t old_bytes = 0, gfs_pk_new_bytes = 0;
	void *n = NULL;
	gfs_err err;

	*out_arr = arr;
	*out_cap = cap;
	if (need <= cap)
		return GFS_OK;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2)
			return gfs_pk_vfail(m, GFS_ERR_LIMIT, "array of %zu elements is too large", need);
		ncap *= 2;
	}
	if (ncap > (SIZE_MAX / 2) / elem)
		return gfs_pk_vfail(m, GFS_ERR_LIMIT, "array of %zu elements is too large", need);
	old_bytes = align_up(cap * elem);
	gfs_pk_new_bytes = align_up(ncap * elem);
	if (arr && cap && head &&
	    (unsigned char *)arr + old_bytes == chunk_data(head) + head->used &&
	    gfs_pk_new_bytes - old_bytes <= head->size - head->used) {
		head->used += gfs_pk_new_bytes - old_bytes;
		*out_cap = ncap;
		return GFS_OK;
	}
	err = gfs_pk_vm_alloc(m, gfs_pk_new_bytes, &n);
	if (err)
		return err;
	if (cap)
		memcpy(n, arr, cap * elem);
	*out_arr = n;
	*out_cap = ncap;
	return GFS_OK;
}

/*
 * gfs_pk_scratch_grow(): as arena_grow() for malloc'ed VM scratch, capped at maxn
 * elements (need <= maxn).  New elements are zeroed.
 */
gfs_err gfs_pk_scratch_grow(vm *m, void *arr, size_t cap, size_t need, size_t elem,
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
		return gfs_pk_vfail(m, GFS_ERR_LIMIT, "VM array of %zu elements is too large", ncap);
	err = charge(m, (ncap - cap) * elem);
	if (err)
		return err;
	n = realloc(arr, ncap * elem);
	if (!n)
		return gfs_pk_vfail(m, GFS_ERR_NOMEM, "out of memory growing a VM array to %zu elements",
				    ncap);
	memset(n + cap * elem, 0, (ncap - cap) * elem);
	*out_arr = n;
	*out_cap = ncap;
	return GFS_OK;
}

/* ------------------------------------------------------------------ hashing */

uint64_t gfs_pk_mix64(uint64_t x)
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
	return gfs_pk_mix64(h ^ n);
}

static uint64_t hash_int(uint64_t seed, int64_t i)
{
	return gfs_pk_mix64(seed ^ TAG_INT ^ (uint64_t)i);
}

static pnode *pn(gfs_pv *v)
{
	return (pnode *)(void *)v;
}

const pnode *gfs_pk_cpn(const gfs_pv *v)
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
	const pnode *const n = gfs_pk_cpn(v);

	if (n->flags & PN_BYVALUE)
		return n->hash;
	return gfs_pk_mix64(seed ^ (uint64_t)(uintptr_t)v);
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
	const pnode *const pa = gfs_pk_cpn(a);
	const pnode *const pb = gfs_pk_cpn(b);
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

gfs_err gfs_pk_new_node(vm *m, gfs_pv_kind kind, gfs_pv **out)
{
	void *mem = NULL;
	const bool c = kind == GFS_PV_DICT || kind == GFS_PV_SET;
	const gfs_err err = gfs_pk_vm_zalloc(m, c ? sizeof(cnode) : sizeof(pnode), &mem);

	if (err)
		return err;
	*out = &((pnode *)mem)->pv;
	(*out)->kind = kind;
	return GFS_OK;
}

/* gfs_pk_new_none(), gfs_pk_new_bool(), gfs_pk_new_int(): the load's shared node where it has one. */
gfs_err gfs_pk_new_none(vm *m, gfs_pv **out)
{
	gfs_err err = GFS_OK;

	if (!m->none_v) {
		err = gfs_pk_new_node(m, GFS_PV_NONE, &m->none_v);
		if (!err) {
			pn(m->none_v)->flags = PN_BYVALUE;
			pn(m->none_v)->hash = gfs_pk_mix64(m->seed ^ TAG_NONE);
		}
	}
	*out = m->none_v;
	return err;
}

gfs_err gfs_pk_new_bool(vm *m, bool b, gfs_pv **out)
{
	gfs_err err = GFS_OK;

	if (!m->bool_v[b]) {
		err = gfs_pk_new_node(m, GFS_PV_BOOL, &m->bool_v[b]);
		if (!err) {
			m->bool_v[b]->u.b = b;
			pn(m->bool_v[b])->flags = PN_BYVALUE;
			pn(m->bool_v[b])->hash = hash_int(m->seed, b);
		}
	}
	*out = m->bool_v[b];
	return err;
}

gfs_err gfs_pk_new_int(vm *m, int64_t i, gfs_pv **out)
{
	gfs_pv **const shared = i >= 0 && i < SMALL_INTS ? &m->small_int[i] : NULL;
	gfs_err err;

	if (shared && *shared) {
		*out = *shared;
		return GFS_OK;
	}
	err = gfs_pk_new_node(m, GFS_PV_INT, out);
	if (!err) {
		(*out)->u.i = i;
		pn(*out)->flags = PN_BYVALUE;
		pn(*out)->hash = hash_int(m->seed, i);
		if (shared)
			*shared = *out;
	}
	return err;
}

gfs_err gfs_pk_new_float(vm *m, double f, gfs_pv **out)
{
	const gfs_err err = gfs_pk_new_node(m, GFS_PV_FLOAT, out);

	if (!err)
		(*out)->u.f = f;
	return err;
}

/*
 * gfs_pk_new_blob(): a STR, BYTES or BIGINT node with room for len bytes plus a
 * NUL; the caller fills *data (up to len bytes) and calls gfs_pk_seal_blob().
 */
gfs_err gfs_pk_new_blob(vm *m, gfs_pv_kind kind, size_t len, gfs_pv **out, char **data)
{
	void *mem = NULL;
	gfs_err err;

	assert(kind == GFS_PV_STR || kind == GFS_PV_BYTES || kind == GFS_PV_BIGINT);
	if (len == SIZE_MAX)
		return gfs_pk_vfail(m, GFS_ERR_LIMIT, "string of %zu bytes is too large", len);
	err = gfs_pk_vm_alloc(m, len + 1, &mem);
	if (err)
		return err;
	err = gfs_pk_new_node(m, kind, out);
	if (err)
		return err;
	*data = mem;
	(*out)->u.s.ptr = mem;
	(*out)->u.s.len = len;
	return GFS_OK;
}

/* gfs_pk_seal_blob(): set the final length of a gfs_pk_new_blob() node and hash it. */
void gfs_pk_seal_blob(const vm *m, gfs_pv *v, char *data, size_t len, bool mutable_bytes)
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

gfs_err gfs_pk_new_bytes(vm *m, gfs_pv_kind kind, const void *src, size_t len,
			 bool mutable_bytes, gfs_pv **out)
{
	char *data = NULL;
	const gfs_err err = gfs_pk_new_blob(m, kind, len, out, &data);

	if (err)
		return err;
	if (len)
		memcpy(data, src, len);
	gfs_pk_seal_blob(m, *out, data, len, mutable_bytes);
	return GFS_OK;
}

int64_t gfs_pk_u64_to_i64(uint64_t v)
{
	if (v <= (uint64_t)INT64_MAX)
		return (int64_t)v;
	return -(int64_t)(~v) - 1;
}

/*
 * gfs_pk_new_long(): the integer with little-endian two's complement bytes b[0..n):
 * an INT if it fits in int64_t, else a BIGINT of the shortest encoding.
 */
gfs_err gfs_pk_new_long(vm *m, const uint8_t *b, size_t n, gfs_pv **out)
{
	uint64_t v = 0;

	while (n > 1 && ((b[n - 1] == 0x00 && !(b[n - 2] & 0x80)) ||
			 (b[n - 1] == 0xff && (b[n - 2] & 0x80))))
		n--;
	if (n > 8)
		return gfs_pk_new_bytes(m, GFS_PV_BIGINT, b, n, false, out);
	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)b[i] << (8 * i);
	if (n > 0 && n < 8 && (b[n - 1] & 0x80))
		v |= ~(uint64_t)0 << (8 * n);
	return gfs_pk_new_int(m, gfs_pk_u64_to_i64(v), out);
}

gfs_err gfs_pk_new_seq(vm *m, gfs_pv_kind kind, size_t cap, gfs_pv **out)
{
	void *items = NULL;
	gfs_err err;

	if (cap) {
		if (cap > SIZE_MAX / sizeof(gfs_pv *))
			return gfs_pk_vfail(m, GFS_ERR_LIMIT, "sequence of %zu items is too large", cap);
		err = gfs_pk_vm_alloc(m, cap * sizeof(gfs_pv *), &items);
		if (err)
			return err;
	}
	err = gfs_pk_new_node(m, kind, out);
	if (err)
		return err;
	(*out)->u.seq.items = items;
	(*out)->u.seq.cap = cap;
	if (kind != GFS_PV_TUPLE)
		pn(*out)->flags = PN_UNHASHABLE;
	return GFS_OK;
}

/* gfs_pk_new_tuple(): an immutable TUPLE of items[0..n), hashed from its items. */
gfs_err gfs_pk_new_tuple(vm *m, gfs_pv *const *items, size_t n, gfs_pv **out)
{
	uint64_t h = gfs_pk_mix64(m->seed ^ TAG_TUPLE ^ n);
	unsigned flags = PN_BYVALUE;
	gfs_err err;

	if (n == 0 && m->empty_tuple) {
		*out = m->empty_tuple;
		return GFS_OK;
	}
	err = gfs_pk_new_seq(m, GFS_PV_TUPLE, n, out);
	if (err)
		return err;
	if (n == 0)
		m->empty_tuple = *out;
	for (size_t i = 0; i < n; i++) {
		(*out)->u.seq.items[i] = items[i];
		if (gfs_pk_cpn(items[i])->flags & PN_UNHASHABLE)
			flags = PN_UNHASHABLE;
		h = gfs_pk_mix64(h ^ key_hash(m->seed, items[i])) + i;
	}
	(*out)->u.seq.len = n;
	pn(*out)->flags = flags;
	pn(*out)->hash = h;
	return GFS_OK;
}

gfs_err gfs_pk_seq_push(vm *m, gfs_pv *seq, gfs_pv *item)
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

gfs_err gfs_pk_new_dict(vm *m, gfs_pv **out)
{
	const gfs_err err = gfs_pk_new_node(m, GFS_PV_DICT, out);

	if (!err)
		pn(*out)->flags = PN_UNHASHABLE;
	return err;
}

gfs_err gfs_pk_new_set(vm *m, bool frozen, gfs_pv **out)
{
	const gfs_err err = gfs_pk_new_seq(m, GFS_PV_SET, 0, out);

	if (!err)
		pn(*out)->flags = frozen ? PN_FROZEN : PN_UNHASHABLE;
	return err;
}

/*
 * gfs_pk_new_global(): a GLOBAL module.name.  Both strings live in one buffer
 * "module.name\0module\0", so global.name is also the tail of the qualified
 * name "module.name" that starts strlen(module) + 1 bytes before it.
 */
gfs_err gfs_pk_new_global(vm *m, const char *mod, size_t ml, const char *name, size_t nl,
			  gfs_pv **out)
{
	char *buf = NULL;
	void *mem = NULL;
	gfs_err err;

	if (ml == 0 || nl == 0)
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "empty module or class name");
	if (memchr(mod, '\0', ml) || memchr(name, '\0', nl))
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "NUL byte in a module or class name");
	if (ml > SIZE_MAX / 4 || nl > SIZE_MAX / 4)
		return gfs_pk_vfail(m, GFS_ERR_LIMIT, "global name is too long");
	err = gfs_pk_vm_alloc(m, 2 * ml + nl + 3, &mem);
	if (err)
		return err;
	buf = mem;
	memcpy(buf, mod, ml);
	buf[ml] = '.';
	memcpy(buf + ml + 1, name, nl);
	buf[ml + 1 + nl] = '\0';
	memcpy(buf + ml + nl + 2, mod, ml);
	buf[2 * ml + nl + 2] = '\0';
	err = gfs_pk_new_node(m, GFS_PV_GLOBAL, out);
	if (err)
		return err;
	(*out)->u.global.name = buf + ml + 1;
	(*out)->u.global.module = buf + ml + nl + 2;
	return GFS_OK;
}

gfs_err gfs_pk_new_object(vm *m, const gfs_pv *cls, gfs_pv *args, gfs_pv **out)
{
	const gfs_err err = gfs_pk_new_node(m, GFS_PV_OBJECT, out);

	assert(args->kind == GFS_PV_TUPLE);
	if (!err) {
		(*out)->u.obj.cls = cls;
		(*out)->u.obj.args = args;
	}
	return err;
}

gfs_err gfs_pk_new_persid(vm *m, gfs_pv *id, gfs_pv **out)
{
	const gfs_err err = gfs_pk_new_node(m, GFS_PV_PERSID, out);

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
	err = gfs_pk_vm_alloc(m, sizeof(kindex), &mem);
	if (err)
		return err;
	x = mem;
	err = gfs_pk_vm_zalloc(m, slots * sizeof(uint32_t), &mem);
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
		return gfs_pk_vfail(m, GFS_ERR_LIMIT, "%s key too deeply nested or too costly to compare",
				    gfs_pv_kind_name(c->kind));
	*found = r == 1;
	return GFS_OK;
}

static gfs_err check_hashable(const vm *m, const gfs_pv *key, const char *what)
{
	if (gfs_pk_cpn(key)->flags & PN_UNHASHABLE)
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "unhashable %s used as %s",
				    gfs_pv_kind_name(key->kind), what);
	return GFS_OK;
}

/* gfs_pk_dict_set(): d[key] = val, keeping insertion order. */
gfs_err gfs_pk_dict_set(vm *m, gfs_pv *d, gfs_pv *key, gfs_pv *val)
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
		return gfs_pk_vfail(m, GFS_ERR_LIMIT, "dict has too many entries");
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

/* gfs_pk_set_add(): add item to set s unless an equal item is there. */
gfs_err gfs_pk_set_add(vm *m, gfs_pv *s, gfs_pv *item)
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
		return gfs_pk_vfail(m, GFS_ERR_LIMIT, "set has too many items");
	err = gfs_pk_seq_push(m, s, item);
	if (err)
		return err;
	return index_added(m, s);
}

bool gfs_pk_str_eq(const gfs_pv *v, const char *s, size_t n)
{
	return v->kind == GFS_PV_STR && v->u.s.len == n && memcmp(v->u.s.ptr, s, n) == 0;
}

bool gfs_pk_is_seq(const gfs_pv *v)
{
	return v->kind == GFS_PV_TUPLE || v->kind == GFS_PV_LIST || v->kind == GFS_PV_SET;
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

			if (gfs_pk_str_eq(it->key, key, kl))
				return it->value;
		}
		return NULL;
	}
	for (size_t i = 0; i < dict->u.dict.len; i++)
		if (gfs_pk_str_eq(dict->u.dict.items[i].key, key, kl))
			return dict->u.dict.items[i].value;
	return NULL;
}

size_t gfs_pv_seq_len(const gfs_pv *v)
{
	return v && gfs_pk_is_seq(v) ? v->u.seq.len : 0;
}

const gfs_pv *gfs_pv_seq_at(const gfs_pv *v, size_t i)
{
	return v && gfs_pk_is_seq(v) && i < v->u.seq.len ? v->u.seq.items[i] : NULL;
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

/* gfs_pk_global_qualname(): "module.name" of a GLOBAL (see gfs_pk_new_global()). */
const char *gfs_pk_global_qualname(const gfs_pv *g)
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
		*cls_name = gfs_pk_global_qualname(cls);
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

