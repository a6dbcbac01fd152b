/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — a reader for PyTorch DCP `.metadata` pickles; see dcpmeta.h.
 *
 * Two passes over the opcodes.  The first only decodes them (every length
 * checked) and marks the memo indices some GET fetches (a large pickle's
 * in two halves on two threads, split at a frame); the second runs the
 * VM.  A memo entry nobody fetches is counted (MEMOIZE numbers entries
 * by count, as CPython does) but not stored; the fetched ones live in a
 * dense array indexed through a rank over the bitmap.  With the fast path
 * on, a first try skips the prescan: the VM keeps every entry it defines
 * in a hash and the fast path assumes nobody fetches its own entries; on
 * a GET of one, or on any error, the load starts over with the prescan
 * (the results and errors are the prescan's, only found sooner).
 *
 * Values (dv) are 64-bit words: a 4-bit tag and a 60-bit payload.  Ints
 * and the ids of strings, interned int tuples, globals and reduced records
 * fit in the word; lists, dicts, other tuples and objects awaiting their
 * BUILD are nodes.  A node has one reference unless pinned (stored in a
 * fetched memo entry, or DUP'ed): an unpinned node consumed by REDUCE,
 * NEWOBJ, BUILD or POP is recycled, with its item buffer, for the next
 * node.  An object BUILD reduces is replaced on the stack by its record;
 * a pinned one forwards to the record.
 *
 * A GET of the class of a ChunkStorageMetadata, MetadataIndex or
 * _StorageInfo first tries fast_object(): the whole object, as DCP pickles
 * it, on a local stack without nodes (a large checkpoint holds a million
 * of each); on anything unusual it leaves the opcodes to the VM.
 *
 * Every allocation the VM holds is charged against max_bytes.
 */
#include "config.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/readers/dcpmeta.h"
#include "gatherfs/util/pfor.h"

#define DEFAULT_MAX_BYTES ((size_t)1 << 30)
#define MAX_INPUT ((size_t)1 << 30) /* keeps string ids under ID_LIMIT */
#define MAX_DEPTH ((size_t)1 << 16) /* stack + marks */
#define MAX_GLOBALS 4096
#define MAX_INT_TUPLE 64             /* longer tuples of ints stay nodes */
#define INT_MIN60 (-((int64_t)1 << 59))
#define INT_MAX60 (((int64_t)1 << 59) - 1)
#define ID_BITS 30
#define ID_BAD (((uint32_t)1 << ID_BITS) - 1)  /* packed: not of the right kind */
#define ID_NONE (((uint32_t)1 << ID_BITS) - 2) /* packed: None */
#define ID_LIMIT ID_NONE
#define HIGHEST_PROTOCOL 5
#define SPLIT_MIN ((size_t)1 << 22) /* smaller pickles are prescanned by one thread */

static bool fast_on = true;           /* gfs_dcpmeta_set_fast() */
static size_t split_min = SPLIT_MIN;
static bool lazy_on = true;           /* gfs_dcpmeta_set_fast(): run without the prescan first */

enum {
	OP_MARK = '(', OP_STOP = '.', OP_POP = '0', OP_POP_MARK = '1', OP_DUP = '2',
	OP_BININT = 'J', OP_BININT1 = 'K', OP_BININT2 = 'M', OP_NONE = 'N', OP_REDUCE = 'R',
	OP_BINSTRING = 'T', OP_SHORT_BINSTRING = 'U', OP_BINUNICODE = 'X', OP_APPEND = 'a',
	OP_BUILD = 'b', OP_GLOBAL = 'c', OP_DICT = 'd', OP_EMPTY_DICT = '}', OP_APPENDS = 'e',
	OP_BINGET = 'h', OP_LONG_BINGET = 'j', OP_LIST = 'l', OP_EMPTY_LIST = ']',
	OP_BINPUT = 'q', OP_LONG_BINPUT = 'r', OP_SETITEM = 's', OP_TUPLE = 't',
	OP_EMPTY_TUPLE = ')', OP_SETITEMS = 'u', OP_BINFLOAT = 'G', OP_BINBYTES = 'B',
	OP_SHORT_BINBYTES = 'C', OP_PROTO = 0x80, OP_NEWOBJ = 0x81, OP_TUPLE1 = 0x85,
	OP_TUPLE2 = 0x86, OP_TUPLE3 = 0x87, OP_NEWTRUE = 0x88, OP_NEWFALSE = 0x89,
	OP_LONG1 = 0x8a, OP_SHORT_BINUNICODE = 0x8c, OP_BINUNICODE8 = 0x8d,
	OP_BINBYTES8 = 0x8e, OP_NEWOBJ_EX = 0x92, OP_STACK_GLOBAL = 0x93,
	OP_MEMOIZE = 0x94, OP_FRAME = 0x95,
};

typedef uint64_t dv;
enum {
	T_NONE, T_BOOL, T_INT, T_STR, T_TUP, T_GLOBAL, T_NODE, T_CHUNK, T_MINDEX, T_SINFO,
	T_TSM, T_BSM, T_PROPS, T_META, T_OPAQUE,
};
#define TAG(v) ((unsigned)((v) & 15u))
#define PAY(v) ((v) >> 4)
#define MK(t, p) (((uint64_t)(p) << 4) | (uint64_t)(t))
#define PACK2(a, b) ((uint64_t)(a) | ((uint64_t)(b) << ID_BITS))
#define LO30(p) ((uint32_t)((p) & ID_BAD))
#define HI30(p) ((uint32_t)(((p) >> ID_BITS) & ID_BAD))
#define ABSENT MK(T_OPAQUE, 1)

enum { K_FREE, K_TUPLE, K_LIST, K_DICT, K_OBJ, K_FWD };

typedef struct node {
	uint8_t kind;
	uint8_t pinned;
	uint32_t len, cap; /* items (a dict: 2 a pair) */
	dv *items;
	dv cls; /* K_OBJ: its GLOBAL; K_FWD: the record it became */
} node;

/* Classes and callables the VM knows. */
enum {
	G_SIZE, G_TORCH, G_LAYOUT, G_PATH, G_ODICT, G_RECON, G_OBJECT, G_GETATTR,
	G_METADATA, G_TSM, G_BSM, G_CHUNK, G_MINDEX, G_PROPS, G_SINFO, G_DCP_OTHER,
};

typedef struct glob {
	uint32_t mod, name; /* string ids */
	int kind;
} glob;

typedef struct sinfo {
	uint32_t rel, ntd, td0;
	bool ok;
	uint64_t off, len;
} sinfo;

typedef struct meta_rec {
	dv sdm, sd, version;
} meta_rec;

struct gfs_dcpmeta_pools {
	char *str; /* each: u32 length, bytes, NUL */
	size_t str_len, str_cap;
	int64_t *ints;
	size_t ints_len, ints_cap;
	struct tup {
		uint32_t off, n;
	} *tup;
	size_t ntup, tup_cap;
	gfs_dcp_entry *entries;
	gfs_dcp_tensor *tensors;
	size_t tensors_cap;
	gfs_dcp_chunk *chunks;
	size_t chunks_cap;
	gfs_dcp_item *items;
};

/* The dataclass fields the reader reads (fnames[] their names). */
enum {
	F_RELATIVE_PATH, F_OFFSET, F_LENGTH, F_TRANSFORM_DESCRIPTORS, F_PROPERTIES, F_SIZE, F_CHUNKS, F_OFFSETS, F_SIZES, F_FQN, F_DTYPE, F_STATE_DICT_METADATA, F_STORAGE_DATA, F_VERSION, F_COUNT,
};

typedef struct vm {
	const uint8_t *buf;
	size_t len, pos;
	const char *label;
	size_t bytes, max_bytes;
	gfs_dcpmeta *out;
	struct gfs_dcpmeta_pools *P;
	dv *stack;
	size_t sp, stack_cap;
	size_t *marks;
	size_t nmarks, marks_cap;
	uint64_t *ref; /* memo indices some GET fetches */
	size_t ref_words;
	uint32_t *rank; /* fetched indices in words before */
	dv *memo;       /* [rank of a fetched index] */
	uint64_t *occ;  /* memo indices defined */
	size_t occ_words, memo_count;
	bool lazy; /* no prescan: every entry the VM defines is in mh, none in memo */
	struct mslot {
		uint64_t key; /* memo index + 1; 0: empty */
		dv v;
	} *mh;
	size_t mh_cap, mh_n;
	uint32_t fid[F_COUNT]; /* a string id found equal to each field's name, or ID_BAD */
	node *nodes;
	size_t nnodes, nodes_cap;
	uint32_t *freel;
	size_t nfree, free_cap;
	glob *globs;
	size_t nglobs, globs_cap;
	uint32_t *htab; /* int tuple intern table: tuple id + 1 */
	size_t hcap;
	sinfo *sinfos;
	size_t nsinfo, sinfo_cap;
	meta_rec *metas;
	size_t nmeta, meta_cap;
} vm;

/* ------------------------------------------------------------ errors, memory */

static gfs_err vfail(const vm *m, gfs_err err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static gfs_err vfail(const vm *m, gfs_err err, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return gfs_fail(err, "%s: DCP metadata at byte %zu: %s", m->label, m->pos, msg);
}

/* grow_slow(): grow() when *arr must be reallocated. */
static gfs_err grow_slow(vm *m, void **arr, size_t *cap, size_t need, size_t elem)
{
	size_t ncap = *cap ? *cap : 8;
	void *p;

	while (ncap < need) {
		if (ncap > SIZE_MAX / 2 / elem)
			return vfail(m, GFS_ERR_LIMIT, "too large");
		ncap *= 2;
	}
	if ((ncap - *cap) * elem > m->max_bytes - m->bytes)
		return vfail(m, GFS_ERR_LIMIT, "needs more than the reader's limit of %zu bytes",
			     m->max_bytes);
	p = realloc(*arr, ncap * elem);
	if (!p)
		return vfail(m, GFS_ERR_NOMEM, "out of memory");
	m->bytes += (ncap - *cap) * elem;
	*arr = p;
	*cap = ncap;
	return GFS_OK;
}

/* grow(): room for need elements of elem bytes in *arr (capacity *cap), charged. */
static inline gfs_err grow(vm *m, void **arr, size_t *cap, size_t need, size_t elem)
{
	return need <= *cap ? GFS_OK : grow_slow(m, arr, cap, need, elem);
}

/* ------------------------------------------------------------ decoding */

typedef struct arg {
	int64_t i;        /* int argument, or a length */
	const uint8_t *p; /* data argument */
} arg;

static gfs_err truncated(const vm *m)
{
	return vfail(m, GFS_ERR_FORMAT, "truncated (the pickle ends inside an opcode or without STOP)");
}

static uint64_t le(const uint8_t *p, size_t n)
{
	uint64_t v = 0;

	for (size_t k = n; k-- > 0;)
		v = v << 8 | p[k];
	return v;
}

/* What follows each opcode: A_NONE, A_FIXED or A_COUNTED | width << 3, A_LINES. */
enum { A_BAD, A_NONE, A_FIXED, A_COUNTED, A_LINES };
#define FX(w) (A_FIXED | (w) << 3)
#define CN(w) (A_COUNTED | (w) << 3)
static const uint8_t op_arg[256] = {
	[OP_MARK] = A_NONE, [OP_STOP] = A_NONE, [OP_POP] = A_NONE, [OP_POP_MARK] = A_NONE,
	[OP_DUP] = A_NONE, [OP_NONE] = A_NONE, [OP_NEWTRUE] = A_NONE, [OP_NEWFALSE] = A_NONE,
	[OP_EMPTY_TUPLE] = A_NONE, [OP_TUPLE1] = A_NONE, [OP_TUPLE2] = A_NONE,
	[OP_TUPLE3] = A_NONE, [OP_TUPLE] = A_NONE, [OP_EMPTY_LIST] = A_NONE, [OP_LIST] = A_NONE,
	[OP_APPEND] = A_NONE, [OP_APPENDS] = A_NONE, [OP_EMPTY_DICT] = A_NONE,
	[OP_DICT] = A_NONE, [OP_SETITEM] = A_NONE, [OP_SETITEMS] = A_NONE,
	[OP_STACK_GLOBAL] = A_NONE, [OP_REDUCE] = A_NONE, [OP_NEWOBJ] = A_NONE,
	[OP_NEWOBJ_EX] = A_NONE, [OP_BUILD] = A_NONE, [OP_MEMOIZE] = A_NONE,
	[OP_PROTO] = FX(1), [OP_BININT1] = FX(1), [OP_BINGET] = FX(1), [OP_BINPUT] = FX(1),
	[OP_BININT2] = FX(2), [OP_BININT] = FX(4), [OP_LONG_BINGET] = FX(4),
	[OP_LONG_BINPUT] = FX(4), [OP_FRAME] = FX(8), [OP_BINFLOAT] = FX(8),
	[OP_SHORT_BINUNICODE] = CN(1), [OP_SHORT_BINBYTES] = CN(1),
	[OP_SHORT_BINSTRING] = CN(1), [OP_LONG1] = CN(1), [OP_BINUNICODE] = CN(4),
	[OP_BINBYTES] = CN(4), [OP_BINSTRING] = CN(4), [OP_BINUNICODE8] = CN(8),
	[OP_BINBYTES8] = CN(8), [OP_GLOBAL] = A_LINES,
};

/* decode_slow(): decode() for any opcode, with every bound checked. */
static gfs_err decode_slow(vm *m, size_t *pos, uint8_t *op, arg *a)
{
	size_t w, left;
	unsigned kind;

	m->pos = *pos;
	if (*pos >= m->len)
		return truncated(m);
	*op = m->buf[(*pos)++];
	kind = op_arg[*op] & 7u;
	w = op_arg[*op] >> 3;
	left = m->len - *pos;
	a->p = m->buf + *pos;
	a->i = 0;
	if (kind == A_NONE)
		return GFS_OK;
	if (kind == A_BAD)
		return vfail(m, GFS_ERR_UNSUPPORTED, "opcode 0x%02x is not used by DCP metadata",
			     *op);
	if (kind == A_LINES) {
		const uint8_t *nl1 = memchr(a->p, '\n', left), *nl2;

		nl2 = nl1 ? memchr(nl1 + 1, '\n', left - (size_t)(nl1 + 1 - a->p)) : NULL;
		if (!nl2)
			return truncated(m);
		a->i = nl2 + 1 - a->p;
		*pos += (size_t)a->i;
		return GFS_OK;
	}
	if (left < w)
		return truncated(m);
	a->i = (int64_t)le(a->p, w);
	if (*op == OP_BININT)
		a->i = (int64_t)(int32_t)(uint32_t)a->i;
	*pos += w;
	if (kind == A_COUNTED) {
		const uint64_t n = (uint64_t)a->i;

		if (*op == OP_BINSTRING && (int32_t)(uint32_t)n < 0)
			return vfail(m, GFS_ERR_FORMAT, "negative string length");
		if (n > m->len - *pos)
			return truncated(m);
		a->p = m->buf + *pos;
		*pos += (size_t)n;
	}
	return GFS_OK;
}

/* le_fixed(): the little-endian integer of w <= 8 bytes at p, 8 bytes readable there. */
static inline uint64_t le_fixed(const uint8_t *p, size_t w)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	return w == 8 ? v : v & (((uint64_t)1 << (8 * w)) - 1);
}

/*
 * decode(): the opcode at *pos and its argument; advances *pos past both.
 * Counted data is bounds-checked (a->i its length, a->p its bytes).  The
 * opcodes without an argument or with a fixed one are decoded inline when
 * 9 bytes are left (the longest of them); the rest by decode_slow().
 */
static inline gfs_err decode(vm *m, size_t *pos, uint8_t *op, arg *a)
{
	const size_t at = *pos;

	if (at + 9 <= m->len) {
		const uint8_t o = m->buf[at], k = op_arg[o];

		if ((k & 7u) == A_NONE || (k & 7u) == A_FIXED) {
			const size_t w = k >> 3;

			m->pos = at;
			*op = o;
			a->p = m->buf + at + 1;
			a->i = w ? (int64_t)le_fixed(a->p, w) : 0;
			if (o == OP_BININT)
				a->i = (int64_t)(int32_t)(uint32_t)a->i;
			*pos = at + 1 + w;
			return GFS_OK;
		}
	}
	return decode_slow(m, pos, op, a);
}

static unsigned popcount(uint64_t x)
{
	x = x - ((x >> 1) & 0x5555555555555555ULL);
	x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	return (unsigned)((x * 0x0101010101010101ULL) >> 56);
}

static bool bit(const uint64_t *b, size_t words, uint64_t i)
{
	return i / 64 < words && (b[i / 64] >> (i % 64) & 1);
}

static gfs_err set_bit(vm *m, uint64_t **b, size_t *words, uint64_t i)
{
	const size_t old = *words;
	gfs_err err;

	if (i / 64 < old) {
		(*b)[i / 64] |= (uint64_t)1 << (i % 64);
		return GFS_OK;
	}
	if (i >= m->len) /* each defined entry took an opcode */
		return vfail(m, GFS_ERR_FORMAT, "memo index %llu is beyond the pickle's length",
			     (unsigned long long)i);
	err = grow(m, (void **)b, words, (size_t)(i / 64 + 1), sizeof(**b));
	if (err)
		return err;
	memset(*b + old, 0, (*words - old) * sizeof(**b));
	(*b)[i / 64] |= (uint64_t)1 << (i % 64);
	return GFS_OK;
}

/*
 * scan_ops(): the prescan of the opcodes from offset from (an opcode's) up
 * to STOP or to the first opcode at or past offset to: mark the memo
 * indices GETs fetch, add the MEMOIZEs to *nmemo, raise *nput past the
 * BINPUT indices.  *end receives the offset reached (past STOP: *stop).
 */
static gfs_err scan_ops(vm *m, size_t from, size_t to, size_t *nmemo, size_t *nput,
			size_t *end, bool *stop)
{
	size_t pos = from;
	uint8_t op = 0;
	arg a;
	gfs_err err = GFS_OK; /* the loop may end on a fast path, before any decode() */

	/* the usual opcodes inline; decode() for the rest and for messages */
	do {
		const size_t at = pos;

		if (pos + 9 <= m->len) {
			const uint8_t k = op_arg[m->buf[pos]];

			op = m->buf[pos];
			if ((k & 7u) == A_NONE) {
				*nmemo += op == OP_MEMOIZE;
				pos++;
				continue;
			}
			if ((k & 7u) == A_FIXED && op != OP_BINGET && op != OP_LONG_BINGET &&
			    op != OP_BINPUT && op != OP_LONG_BINPUT) {
				pos += 1 + (k >> 3);
				continue;
			}
			if (op == OP_BINGET || op == OP_LONG_BINGET) {
				const uint64_t idx = op == OP_BINGET ? m->buf[pos + 1]
								     : le_fixed(m->buf + pos + 1, 4);

				if (idx / 64 < m->ref_words) { /* else set_bit() grows the bitmap */
					m->ref[idx / 64] |= (uint64_t)1 << (idx % 64);
					pos += op == OP_BINGET ? 2 : 5;
					continue;
				}
			}
			if (op == OP_SHORT_BINUNICODE && pos + 2 + m->buf[pos + 1] <= m->len) {
				pos += 2 + m->buf[pos + 1];
				continue;
			}
		}
		pos = at;
		err = decode(m, &pos, &op, &a);
		if (!err && (op == OP_BINGET || op == OP_LONG_BINGET))
			err = set_bit(m, &m->ref, &m->ref_words, (uint64_t)a.i);
		if (err)
			return err;
		*nmemo += op == OP_MEMOIZE;
		if ((op == OP_BINPUT || op == OP_LONG_BINPUT) && (uint64_t)a.i >= *nput &&
		    (uint64_t)a.i < m->len)
			*nput = (size_t)a.i + 1;
	} while (op != OP_STOP && pos < to);
	*end = pos;
	*stop = op == OP_STOP;
	return GFS_OK;
}

/*
 * frame_split(): the offset of a FRAME opcode at or past the middle of
 * the pickle, following the frames from the start (PROTO, then FRAME
 * after FRAME, as protocols 4 and 5 write them); 0 if the chain breaks
 * first or the pickle is small.  Only a hint: scan_split() checks that an
 * opcode starts there.
 */
static size_t frame_split(const vm *m)
{
	size_t pos = m->len >= 2 && m->buf[0] == OP_PROTO ? 2 : 0;

	if (!fast_on || m->len < split_min)
		return 0;
	while (pos + 9 <= m->len && m->buf[pos] == OP_FRAME) {
		const uint64_t n = le_fixed(m->buf + pos + 1, 8);

		if (pos >= m->len / 2)
			return pos;
		if (n > m->len - pos - 9)
			return 0;
		pos += 9 + (size_t)n;
	}
	return 0;
}

/* One half of a parallel prescan: its own VM copy (bitmap, counts). */
typedef struct scan_half {
	vm w;
	size_t from, to, nmemo, nput, end;
	bool stop;
} scan_half;

static gfs_err scan_half_run(void *ctx, size_t i)
{
	scan_half *h = &((scan_half *)ctx)[i];

	return scan_ops(&h->w, h->from, h->to, &h->nmemo, &h->nput, &h->end, &h->stop);
}

/*
 * scan_split(): scan_ops() of the whole pickle as two halves on two
 * threads, split at a frame_split() offset.  @return true with the counts
 * (m->ref holding the marks of both) when the first half ends exactly at
 * the split or at STOP before it and neither half failed; false (m
 * unchanged) otherwise, for the serial scan to find the error.
 */
static bool scan_split(vm *m, size_t *nmemo, size_t *nput)
{
	const size_t split = frame_split(m);
	scan_half h[2];
	bool ok;

	if (!split)
		return false;
	for (int i = 0; i < 2; i++) {
		h[i] = (scan_half){ .w = *m, .from = i ? split : 0, .to = i ? SIZE_MAX : split };
		h[i].w.ref = NULL;
		h[i].w.ref_words = 0;
		h[i].w.bytes = 0;
	}
	ok = gfs_pfor(2, scan_half_run, h) == GFS_OK && (h[0].stop || h[0].end == split);
	if (ok) {
		const int big = h[0].stop || h[0].w.ref_words >= h[1].w.ref_words ? 0 : 1;
		const scan_half *o = &h[1 - big];

		if (!h[0].stop)
			for (size_t w = 0; w < o->w.ref_words; w++)
				h[big].w.ref[w] |= o->w.ref[w];
		ok = h[big].w.ref_words * sizeof(uint64_t) <= m->max_bytes - m->bytes;
		if (ok) {
			m->ref = h[big].w.ref;
			m->ref_words = h[big].w.ref_words;
			m->bytes += m->ref_words * sizeof(uint64_t);
			h[big].w.ref = NULL;
			*nmemo = h[0].nmemo + (h[0].stop ? 0 : h[1].nmemo);
			*nput = h[0].stop || h[0].nput >= h[1].nput ? h[0].nput : h[1].nput;
		}
	}
	free(h[0].w.ref);
	free(h[1].w.ref);
	return ok;
}

/*
 * prescan(): check the opcodes up to STOP, mark the memo indices fetched,
 * rank them, and size the bitmap of defined indices for every index the
 * pickle can define (MEMOIZE's are below their count, BINPUT's given).
 */
static gfs_err prescan(vm *m)
{
	size_t nref = 0, nmemo = 0, nput = 0, end = 0;
	bool stop = false;
	gfs_err err = GFS_OK;

	m->out->split_scan = scan_split(m, &nmemo, &nput);
	if (!m->out->split_scan)
		err = scan_ops(m, 0, SIZE_MAX, &nmemo, &nput, &end, &stop);
	if (err)
		return err;
	if (nmemo > nput)
		nput = nmemo;
	if (nput) { /* memo_put() sets bits below nput without growing the bitmap */
		err = grow(m, (void **)&m->occ, &m->occ_words, (nput + 63) / 64, sizeof(*m->occ));
		if (err)
			return err;
		memset(m->occ, 0, m->occ_words * sizeof(*m->occ));
	}
	if (m->ref_words) {
		size_t cap = 0;

		err = grow(m, (void **)&m->rank, &cap, m->ref_words, sizeof(*m->rank));
		for (size_t w = 0; !err && w < m->ref_words; w++) {
			m->rank[w] = (uint32_t)nref;
			nref += (size_t)popcount(m->ref[w]);
		}
		cap = 0;
		if (!err)
			err = grow(m, (void **)&m->memo, &cap, nref, sizeof(*m->memo));
	}
	return err;
}

/* ------------------------------------------------------------ values */

static gfs_err new_str(vm *m, const uint8_t *s, size_t n, dv *out)
{
	struct gfs_dcpmeta_pools *P = m->P;
	const size_t at = P->str_len;
	const uint32_t n32 = (uint32_t)n;
	gfs_err err;

	if (n > MAX_INPUT || at + 5 + n >= ID_LIMIT)
		return vfail(m, GFS_ERR_LIMIT, "more string bytes than the reader holds");
	err = grow(m, (void **)&P->str, &P->str_cap, at + 5 + n, 1);
	if (err)
		return err;
	memcpy(P->str + at, &n32, 4);
	memcpy(P->str + at + 4, s, n);
	P->str[at + 4 + n] = '\0';
	P->str_len = at + 5 + n;
	*out = MK(T_STR, at);
	return GFS_OK;
}

static const char *str_at(const struct gfs_dcpmeta_pools *P, uint32_t id, uint32_t *n)
{
	if (n)
		memcpy(n, P->str + id, 4);
	return P->str + id + 4;
}

/* str_is(): is v the string s of len bytes? */
static inline bool str_is(const vm *m, dv v, const char *s, size_t len)
{
	uint32_t n;
	const char *p;

	if (TAG(v) != T_STR)
		return false;
	p = str_at(m->P, (uint32_t)PAY(v), &n);
	return n == len && memcmp(p, s, n) == 0;
}

static uint64_t mix(uint64_t h, uint64_t x)
{
	h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	h *= 0xff51afd7ed558ccdULL;
	return h ^ (h >> 33);
}

static uint64_t ints_hash(const int64_t *v, size_t n)
{
	uint64_t h = n;

	for (size_t i = 0; i < n; i++)
		h = mix(h, (uint64_t)v[i]);
	return h;
}

static bool tup_eq(const struct gfs_dcpmeta_pools *P, uint32_t id, const int64_t *v, size_t n)
{
	return P->tup[id].n == n && memcmp(P->ints + P->tup[id].off, v, n * sizeof(*v)) == 0;
}

static gfs_err rehash(vm *m)
{
	const size_t ncap = m->hcap ? m->hcap * 2 : 1024;
	uint32_t *t;

	if (ncap * sizeof(*t) > m->max_bytes - m->bytes)
		return vfail(m, GFS_ERR_LIMIT, "needs more than the reader's limit of %zu bytes",
			     m->max_bytes);
	t = calloc(ncap, sizeof(*t));
	if (!t)
		return vfail(m, GFS_ERR_NOMEM, "out of memory");
	for (size_t id = 0; id < m->P->ntup; id++) {
		size_t h = (size_t)ints_hash(m->P->ints + m->P->tup[id].off, m->P->tup[id].n);

		while (t[h & (ncap - 1)])
			h++;
		t[h & (ncap - 1)] = (uint32_t)id + 1;
	}
	m->bytes += (ncap - m->hcap) * sizeof(*t);
	free(m->htab);
	m->htab = t;
	m->hcap = ncap;
	return GFS_OK;
}

/* intern(): the id of the int tuple v[0..n). */
static gfs_err intern(vm *m, const int64_t *v, size_t n, dv *out)
{
	struct gfs_dcpmeta_pools *P = m->P;
	size_t h = (size_t)ints_hash(v, n);
	gfs_err err = GFS_OK;

	if ((P->ntup + 1) * 2 > m->hcap)
		err = rehash(m);
	if (err)
		return err;
	for (;; h++) {
		const uint32_t e = m->htab[h & (m->hcap - 1)];

		if (!e)
			break;
		if (tup_eq(P, e - 1, v, n)) {
			*out = MK(T_TUP, e - 1);
			return GFS_OK;
		}
	}
	if (P->ntup >= ID_LIMIT || P->ints_len + n > UINT32_MAX)
		return vfail(m, GFS_ERR_LIMIT, "more tuples than the reader holds");
	err = grow(m, (void **)&P->ints, &P->ints_cap, P->ints_len + n, sizeof(*P->ints));
	if (!err)
		err = grow(m, (void **)&P->tup, &P->tup_cap, P->ntup + 1, sizeof(*P->tup));
	if (err)
		return err;
	if (n)
		memcpy(P->ints + P->ints_len, v, n * sizeof(*v));
	P->tup[P->ntup] = (struct tup){ (uint32_t)P->ints_len, (uint32_t)n };
	P->ints_len += n;
	m->htab[h & (m->hcap - 1)] = (uint32_t)P->ntup + 1;
	*out = MK(T_TUP, P->ntup);
	P->ntup++;
	return GFS_OK;
}

static int64_t int_of(dv v)
{
	uint64_t x = PAY(v);

	if (x & ((uint64_t)1 << 59))
		return (int64_t)(x | ~(((uint64_t)1 << 60) - 1));
	return (int64_t)x;
}

static gfs_err new_int(vm *m, int64_t i, dv *out)
{
	if (i < INT_MIN60 || i > INT_MAX60)
		return vfail(m, GFS_ERR_UNSUPPORTED, "integer %lld is out of range for DCP metadata",
			     (long long)i);
	*out = MK(T_INT, (uint64_t)i & (((uint64_t)1 << 60) - 1));
	return GFS_OK;
}

static node *N(const vm *m, dv v)
{
	return TAG(v) == T_NODE ? &m->nodes[PAY(v)] : NULL;
}

/* res(): v, or the record a pinned object became. */
static dv res(const vm *m, dv v)
{
	const node *n = N(m, v);

	return n && n->kind == K_FWD ? n->cls : v;
}

static int kind_of(const vm *m, dv v)
{
	const node *n = N(m, res(m, v));

	return n ? n->kind : -1;
}

static gfs_err new_node(vm *m, int kind, dv *out)
{
	size_t id;

	if (m->nfree) {
		id = m->freel[--m->nfree];
	} else {
		gfs_err err;

		if (m->nnodes >= UINT32_MAX)
			return vfail(m, GFS_ERR_LIMIT, "too many values");
		err = grow(m, (void **)&m->nodes, &m->nodes_cap, m->nnodes + 1, sizeof(*m->nodes));
		if (err)
			return err;
		id = m->nnodes++;
		memset(&m->nodes[id], 0, sizeof(m->nodes[id]));
	}
	m->nodes[id].kind = (uint8_t)kind;
	m->nodes[id].pinned = 0;
	m->nodes[id].len = 0;
	m->nodes[id].cls = MK(T_NONE, 0);
	*out = MK(T_NODE, id);
	return GFS_OK;
}

/* recycle(): give back an unpinned node that nothing else refers to. */
static void recycle(vm *m, dv v)
{
	node *n = N(m, v);

	if (!n || n->pinned || n->kind == K_FREE)
		return;
	n->kind = K_FREE;
	n->len = 0;
	/* without room in the free list (over the limit) the node is just not reused */
	if (grow(m, (void **)&m->freel, &m->free_cap, m->nfree + 1, sizeof(*m->freel)) == GFS_OK)
		m->freel[m->nfree++] = (uint32_t)PAY(v);
}

static void pin(vm *m, dv v)
{
	node *n = N(m, v);

	if (n)
		n->pinned = 1;
}

static gfs_err node_add(vm *m, dv nv, const dv *items, size_t k)
{
	node *n = N(m, nv);
	size_t cap = n->cap;
	gfs_err err;

	if ((size_t)n->len + k > UINT32_MAX)
		return vfail(m, GFS_ERR_LIMIT, "a container of more than 2^32 items");
	err = grow(m, (void **)&n->items, &cap, (size_t)n->len + k, sizeof(dv));
	if (err)
		return err;
	n->cap = (uint32_t)cap;
	if (k)
		memcpy(n->items + n->len, items, k * sizeof(dv));
	n->len += (uint32_t)k;
	return GFS_OK;
}

/* ------------------------------------------------------------ stack */

static size_t fence(const vm *m)
{
	return m->nmarks ? m->marks[m->nmarks - 1] : 0;
}

static inline gfs_err push(vm *m, dv v)
{
	gfs_err err;

	if (m->sp + m->nmarks >= MAX_DEPTH)
		return vfail(m, GFS_ERR_LIMIT, "stack deeper than %zu", MAX_DEPTH);
	err = grow(m, (void **)&m->stack, &m->stack_cap, m->sp + 1, sizeof(dv));
	if (err)
		return err;
	m->stack[m->sp++] = v;
	return GFS_OK;
}

static gfs_err pop(vm *m, dv *v)
{
	if (m->sp <= fence(m))
		return vfail(m, GFS_ERR_FORMAT, "stack underflow");
	*v = m->stack[--m->sp];
	return GFS_OK;
}

/* pop_mark(): the start of the items above the top mark, which is removed. */
static gfs_err pop_mark(vm *m, size_t *start)
{
	if (!m->nmarks)
		return vfail(m, GFS_ERR_FORMAT, "no MARK");
	*start = m->marks[--m->nmarks];
	return GFS_OK;
}

/* ------------------------------------------------------------ building */

/* tuple_of(): a tuple of items[0..n): interned if all ints, else a node. */
static gfs_err tuple_of(vm *m, const dv *items, size_t n, dv *out)
{
	int64_t v[MAX_INT_TUPLE];
	bool ints = n <= MAX_INT_TUPLE;
	gfs_err err;

	for (size_t i = 0; ints && i < n; i++) {
		ints = TAG(items[i]) == T_INT;
		v[i] = ints ? int_of(items[i]) : 0;
	}
	if (ints)
		return intern(m, v, n, out);
	err = new_node(m, K_TUPLE, out);
	return err ? err : node_add(m, *out, items, n);
}

static gfs_err str_lines(vm *m, const arg *a, dv *mod, dv *name)
{
	const uint8_t *p = a->p, *nl = memchr(p, '\n', (size_t)a->i);
	gfs_err err;

	assert(nl);
	err = new_str(m, p, (size_t)(nl - p), mod);
	return err ? err : new_str(m, nl + 1, (size_t)(a->p + a->i - 1 - (nl + 1)), name);
}

static int classify(const char *mod, const char *name)
{
	static const struct {
		const char *name;
		int kind;
	} dcp[] = {
		{ "Metadata", G_METADATA }, { "TensorStorageMetadata", G_TSM },
		{ "BytesStorageMetadata", G_BSM }, { "ChunkStorageMetadata", G_CHUNK },
		{ "MetadataIndex", G_MINDEX }, { "TensorProperties", G_PROPS },
		{ "_StorageInfo", G_SINFO },
	};
	const bool builtins = strcmp(mod, "builtins") == 0 || strcmp(mod, "__builtin__") == 0;

	if (strcmp(mod, "torch") == 0)
		return strcmp(name, "Size") == 0 ? G_SIZE : G_TORCH;
	if (strcmp(mod, "torch.serialization") == 0 && strcmp(name, "_get_layout") == 0)
		return G_LAYOUT;
	if (strcmp(mod, "pathlib") == 0 &&
	    (strcmp(name, "PurePosixPath") == 0 || strcmp(name, "PosixPath") == 0 ||
	     strcmp(name, "PureWindowsPath") == 0 || strcmp(name, "WindowsPath") == 0 ||
	     strcmp(name, "PurePath") == 0 || strcmp(name, "Path") == 0))
		return G_PATH;
	if (strcmp(mod, "collections") == 0 && strcmp(name, "OrderedDict") == 0)
		return G_ODICT;
	if (strcmp(mod, "copyreg") == 0 && strcmp(name, "_reconstructor") == 0)
		return G_RECON;
	if (builtins && strcmp(name, "object") == 0)
		return G_OBJECT;
	if (builtins && strcmp(name, "getattr") == 0)
		return G_GETATTR;
	if (strncmp(mod, "torch.distributed.", 18) == 0) {
		for (size_t i = 0; i < sizeof(dcp) / sizeof(dcp[0]); i++)
			if (strcmp(name, dcp[i].name) == 0)
				return dcp[i].kind;
		return G_DCP_OTHER;
	}
	return -1;
}

static gfs_err new_global(vm *m, dv mod, dv name, dv *out)
{
	const char *ms = str_at(m->P, (uint32_t)PAY(mod), NULL);
	const char *ns = str_at(m->P, (uint32_t)PAY(name), NULL);
	int kind;
	gfs_err err;

	for (size_t i = 0; i < m->nglobs; i++) {
		if (strcmp(str_at(m->P, m->globs[i].mod, NULL), ms) == 0 &&
		    strcmp(str_at(m->P, m->globs[i].name, NULL), ns) == 0) {
			*out = MK(T_GLOBAL, i);
			return GFS_OK;
		}
	}
	kind = classify(ms, ns);
	if (kind < 0 || strlen(ms) > 200 || strlen(ns) > 200)
		return vfail(m, GFS_ERR_UNSUPPORTED, "global %.200s.%.200s is not used by DCP metadata",
			     ms, ns);
	if (m->nglobs >= MAX_GLOBALS)
		return vfail(m, GFS_ERR_LIMIT, "more than %d globals", MAX_GLOBALS);
	err = grow(m, (void **)&m->globs, &m->globs_cap, m->nglobs + 1, sizeof(*m->globs));
	if (err)
		return err;
	m->globs[m->nglobs] = (glob){ (uint32_t)PAY(mod), (uint32_t)PAY(name), kind };
	*out = MK(T_GLOBAL, m->nglobs++);
	return GFS_OK;
}

static int gkind(const vm *m, dv v)
{
	return TAG(v) == T_GLOBAL ? m->globs[PAY(v)].kind : -1;
}

/* tuple_at(): item i of a tuple value (interned or node), or ABSENT. */
static dv tuple_at(vm *m, dv t, size_t i)
{
	const node *n = N(m, t);

	if (TAG(t) == T_TUP) {
		dv v = ABSENT;

		if (i < m->P->tup[PAY(t)].n)
			(void)new_int(m, m->P->ints[m->P->tup[PAY(t)].off + i], &v);
		return v;
	}
	return n && n->kind == K_TUPLE && i < n->len ? res(m, n->items[i]) : ABSENT;
}

static bool is_tuple(const vm *m, dv v)
{
	return TAG(v) == T_TUP || kind_of(m, v) == K_TUPLE;
}

/* call(): fn(*args) for REDUCE, NEWOBJ (newobj) and NEWOBJ_EX. */
static gfs_err call(vm *m, dv fn, dv args, bool newobj, dv *out)
{
	const int k = gkind(m, fn);
	dv cls;
	gfs_err err = GFS_OK;

	*out = MK(T_OPAQUE, 0);
	if (k < 0)
		return vfail(m, GFS_ERR_FORMAT, "calls a value that is not a global");
	if (!is_tuple(m, args))
		return vfail(m, GFS_ERR_FORMAT, "arguments are not a tuple");
	switch (k) {
	case G_SIZE:
		if (!newobj && TAG(tuple_at(m, args, 0)) == T_TUP)
			*out = tuple_at(m, args, 0);
		else if (!newobj)
			return vfail(m, GFS_ERR_FORMAT, "torch.Size of something else than ints");
		break;
	case G_ODICT:
		err = new_node(m, K_DICT, out);
		break;
	case G_RECON:
		cls = tuple_at(m, args, 0);
		if (!newobj && gkind(m, cls) >= G_METADATA && gkind(m, cls) < G_DCP_OTHER) {
			err = new_node(m, K_OBJ, out);
			if (!err)
				N(m, *out)->cls = cls;
		}
		break;
	case G_METADATA: case G_TSM: case G_BSM: case G_CHUNK: case G_MINDEX: case G_PROPS:
	case G_SINFO:
		err = new_node(m, K_OBJ, out);
		if (!err)
			N(m, *out)->cls = fn;
		break;
	default:
		break;
	}
	recycle(m, args);
	return err;
}

/* A dataclass state's field dict as its key, value words (len even; none: len 0). */
typedef struct fields {
	const dv *kv;
	uint32_t len;
} fields;

/* fields_of(): the field dict of a dataclass state (a dict, or (dict|None, slots dict)). */
static fields fields_of(const vm *m, dv state)
{
	const node *n = N(m, state);

	if (n && n->kind == K_TUPLE && n->len == 2)
		n = N(m, res(m, n->items[kind_of(m, n->items[0]) == K_DICT ? 0 : 1]));
	if (!n || n->kind != K_DICT)
		return (fields){ NULL, 0 };
	return (fields){ n->items, n->len & ~(uint32_t)1 };
}

static const struct fname {
	const char *s;
	size_t n;
} fnames[F_COUNT] = {
	[F_RELATIVE_PATH] = { "relative_path", sizeof("relative_path") - 1 },
	[F_OFFSET] = { "offset", sizeof("offset") - 1 },
	[F_LENGTH] = { "length", sizeof("length") - 1 },
	[F_TRANSFORM_DESCRIPTORS] = { "transform_descriptors", sizeof("transform_descriptors") - 1 },
	[F_PROPERTIES] = { "properties", sizeof("properties") - 1 },
	[F_SIZE] = { "size", sizeof("size") - 1 },
	[F_CHUNKS] = { "chunks", sizeof("chunks") - 1 },
	[F_OFFSETS] = { "offsets", sizeof("offsets") - 1 },
	[F_SIZES] = { "sizes", sizeof("sizes") - 1 },
	[F_FQN] = { "fqn", sizeof("fqn") - 1 },
	[F_DTYPE] = { "dtype", sizeof("dtype") - 1 },
	[F_STATE_DICT_METADATA] = { "state_dict_metadata", sizeof("state_dict_metadata") - 1 },
	[F_STORAGE_DATA] = { "storage_data", sizeof("storage_data") - 1 },
	[F_VERSION] = { "version", sizeof("version") - 1 },
};

/*
 * field(): the value of the first key in f equal to field k's name.  A
 * key whose string id was found equal before matches without comparing
 * bytes (strings never change); the id of a key found equal is kept.
 */
static inline dv field(vm *m, fields f, int k)
{
	for (uint32_t i = 0; i < f.len; i += 2) {
		const dv key = res(m, f.kv[i]);

		if (TAG(key) == T_STR && ((uint32_t)PAY(key) == m->fid[k] ||
					  str_is(m, key, fnames[k].s, fnames[k].n))) {
			m->fid[k] = (uint32_t)PAY(key);
			return res(m, f.kv[i + 1]);
		}
	}
	return ABSENT;
}

static uint32_t id_of(dv v, unsigned tag)
{
	return TAG(v) == tag ? (uint32_t)PAY(v) : ID_BAD;
}

static gfs_err reduce_sinfo(vm *m, fields f, dv *out)
{
	const dv rel = field(m, f, F_RELATIVE_PATH), off = field(m, f, F_OFFSET);
	const dv len = field(m, f, F_LENGTH);
	const dv td = field(m, f, F_TRANSFORM_DESCRIPTORS);
	const node *tn = N(m, td);
	sinfo s = { .rel = id_of(rel, T_STR), .td0 = ID_NONE };
	gfs_err err;

	s.ok = TAG(off) == T_INT && int_of(off) >= 0 && TAG(len) == T_INT && int_of(len) >= 0;
	s.off = s.ok ? (uint64_t)int_of(off) : 0;
	s.len = s.ok ? (uint64_t)int_of(len) : 0;
	if (tn && (tn->kind == K_LIST || tn->kind == K_TUPLE) && tn->len) {
		s.ntd = tn->len;
		s.td0 = id_of(res(m, tn->items[0]), T_STR);
	} else if (TAG(td) == T_TUP) {
		s.ntd = m->P->tup[PAY(td)].n;
	}
	if (m->nsinfo >= ID_LIMIT)
		return vfail(m, GFS_ERR_LIMIT, "too many storage items");
	err = grow(m, (void **)&m->sinfos, &m->sinfo_cap, m->nsinfo + 1, sizeof(*m->sinfos));
	if (err)
		return err;
	m->sinfos[m->nsinfo] = s;
	*out = MK(T_SINFO, m->nsinfo++);
	return GFS_OK;
}

static gfs_err reduce_tsm(vm *m, dv st, fields f, dv *out)
{
	struct gfs_dcpmeta_pools *P = m->P;
	const dv props = field(m, f, F_PROPERTIES), size = field(m, f, F_SIZE);
	const dv chunks = field(m, f, F_CHUNKS);
	const node *cn = N(m, chunks);
	gfs_dcp_tensor t = {
		.dtype = TAG(props) == T_PROPS ? (uint32_t)PAY(props) : ID_NONE,
		.size = id_of(size, T_TUP),
		.has_chunks = cn && cn->kind == K_LIST,
		.first = m->out->nchunks,
	};
	gfs_err err;

	if (t.has_chunks) {
		err = grow(m, (void **)&P->chunks, &P->chunks_cap, m->out->nchunks + cn->len,
			   sizeof(*P->chunks));
		if (err)
			return err;
		for (uint32_t i = 0; i < cn->len; i++) {
			const dv c = res(m, cn->items[i]);

			P->chunks[m->out->nchunks++] = TAG(c) == T_CHUNK
				? (gfs_dcp_chunk){ LO30(PAY(c)), HI30(PAY(c)) }
				: (gfs_dcp_chunk){ ID_BAD, ID_BAD };
		}
		t.nchunks = cn->len;
		if (kind_of(m, st) == K_DICT && !N(m, st)->pinned)
			recycle(m, chunks); /* else the state may still be fetched */
	}
	if (m->out->ntensors >= ID_LIMIT)
		return vfail(m, GFS_ERR_LIMIT, "too many tensors");
	err = grow(m, (void **)&P->tensors, &P->tensors_cap, m->out->ntensors + 1,
		   sizeof(*P->tensors));
	if (err)
		return err;
	P->tensors[m->out->ntensors] = t;
	*out = MK(T_TSM, m->out->ntensors++);
	return GFS_OK;
}

/*
 * reduce(): the record of a BUILD of class kind k with state st, whose
 * field dict is f (fields_of(st), or the fast path's words with st None).
 */
static gfs_err reduce(vm *m, int k, dv st, fields f, dv *out)
{
	dv a, b;
	gfs_err err;

	switch (k) {
	case G_CHUNK:
		*out = MK(T_CHUNK, PACK2(id_of(field(m, f, F_OFFSETS), T_TUP),
					 id_of(field(m, f, F_SIZES), T_TUP)));
		return GFS_OK;
	case G_MINDEX:
		a = field(m, f, F_FQN);
		b = field(m, f, F_OFFSET);
		*out = MK(T_MINDEX, PACK2(id_of(a, T_STR),
					  TAG(b) == T_NONE || b == ABSENT ? ID_NONE : id_of(b, T_TUP)));
		return GFS_OK;
	case G_SINFO:
		return reduce_sinfo(m, f, out);
	case G_PROPS:
		a = kind_of(m, st) == K_TUPLE ? tuple_at(m, st, 0) : field(m, f, F_DTYPE);
		*out = MK(T_PROPS, gkind(m, a) == G_TORCH ? m->globs[PAY(a)].name : ID_NONE);
		return GFS_OK;
	case G_TSM:
		return reduce_tsm(m, st, f, out);
	case G_BSM:
		*out = MK(T_BSM, 0);
		return GFS_OK;
	case G_METADATA:
		err = grow(m, (void **)&m->metas, &m->meta_cap, m->nmeta + 1, sizeof(*m->metas));
		if (err)
			return err;
		m->metas[m->nmeta] = (meta_rec){ field(m, f, F_STATE_DICT_METADATA),
						 field(m, f, F_STORAGE_DATA),
						 field(m, f, F_VERSION) };
		pin(m, m->metas[m->nmeta].sdm);
		pin(m, m->metas[m->nmeta].sd);
		*out = MK(T_META, m->nmeta++);
		return GFS_OK;
	default:
		*out = MK(T_OPAQUE, 0);
		return GFS_OK;
	}
}

/*
 * is_bsm(): is v a BytesStorageMetadata?  One pickled without state (a
 * dataclass with no fields gets no BUILD) stays the object NEWOBJ made.
 */
static bool is_bsm(const vm *m, dv v)
{
	const node *n = N(m, v);

	return TAG(v) == T_BSM || (n && n->kind == K_OBJ && gkind(m, n->cls) == G_BSM);
}

static gfs_err op_build(vm *m)
{
	dv st = 0, inst, r = 0;
	node *n;
	gfs_err err = pop(m, &st);

	if (!err && m->sp <= fence(m))
		err = vfail(m, GFS_ERR_FORMAT, "stack underflow");
	if (err)
		return err;
	inst = m->stack[m->sp - 1];
	n = N(m, inst);
	if (n && n->kind == K_OBJ) {
		err = reduce(m, gkind(m, n->cls), st, fields_of(m, st), &r);
		if (err)
			return err;
		n = N(m, inst); /* nodes may have moved */
		if (n->pinned) {
			n->kind = K_FWD;
			n->cls = r;
		} else {
			recycle(m, inst);
		}
		m->stack[m->sp - 1] = r;
	}
	recycle(m, st);
	return GFS_OK;
}

/* into(): APPEND(S)/SETITEM(S): items[start, sp) into the container below them. */
static gfs_err into(vm *m, size_t start, int kind)
{
	dv target;

	if (start <= fence(m))
		return vfail(m, GFS_ERR_FORMAT, "stack underflow");
	target = res(m, m->stack[start - 1]);
	if (kind_of(m, target) != kind)
		return vfail(m, GFS_ERR_FORMAT, "%s into something else than a %s",
			     kind == K_LIST ? "APPEND" : "SETITEM", kind == K_LIST ? "list" : "dict");
	if (kind == K_DICT && (m->sp - start) % 2)
		return vfail(m, GFS_ERR_FORMAT, "SETITEMS with an odd number of values");
	for (size_t i = start; i < m->sp; i++) {
		const dv v = m->stack[i];

		if (N(m, v) == N(m, target) && N(m, v))
			pin(m, v); /* a container holding itself: never recycled */
	}
	{
		const gfs_err err = node_add(m, target, m->stack + start, m->sp - start);

		m->sp = start;
		return err;
	}
}

/* mh_slot(): the slot of memo index idx in m->mh (a power-of-two table), or the empty one it would take. */
static struct mslot *mh_slot(struct mslot *t, size_t cap, uint64_t idx)
{
	size_t h = (size_t)(((idx + 1) * 0x9E3779B97F4A7C15ULL) >> 20);

	for (;; h++) {
		struct mslot *s = &t[h & (cap - 1)];

		if (s->key == idx + 1 || !s->key)
			return s;
	}
}

/* mh_put(): m->mh[idx] = v, growing the table (charged) at half full. */
static gfs_err mh_put(vm *m, uint64_t idx, dv v)
{
	struct mslot *s;

	if ((m->mh_n + 1) * 2 > m->mh_cap) {
		const size_t ncap = m->mh_cap ? m->mh_cap * 2 : 1024;
		struct mslot *t;

		if (ncap * sizeof(*t) > m->max_bytes - m->bytes)
			return vfail(m, GFS_ERR_LIMIT,
				     "needs more than the reader's limit of %zu bytes", m->max_bytes);
		t = calloc(ncap, sizeof(*t));
		if (!t)
			return vfail(m, GFS_ERR_NOMEM, "out of memory");
		for (size_t i = 0; i < m->mh_cap; i++)
			if (m->mh[i].key)
				*mh_slot(t, ncap, m->mh[i].key - 1) = m->mh[i];
		m->bytes += (ncap - m->mh_cap) * sizeof(*t);
		free(m->mh);
		m->mh = t;
		m->mh_cap = ncap;
	}
	s = mh_slot(m->mh, m->mh_cap, idx);
	m->mh_n += !s->key;
	*s = (struct mslot){ idx + 1, v };
	return GFS_OK;
}

/* mh_get(): the value of memo index idx in m->mh, if there. */
static inline bool mh_get(const vm *m, uint64_t idx, dv *v)
{
	const struct mslot *s = m->mh_cap ? mh_slot(m->mh, m->mh_cap, idx) : NULL;

	if (!s || !s->key)
		return false;
	*v = s->v;
	return true;
}

static inline gfs_err memo_put(vm *m, uint64_t idx)
{
	gfs_err err;

	if (m->sp <= fence(m))
		return vfail(m, GFS_ERR_FORMAT, "stack underflow");
	if (idx / 64 < m->occ_words) { /* prescan() sized it: always, unless corrupt */
		const uint64_t b = (uint64_t)1 << (idx % 64);

		m->memo_count += !(m->occ[idx / 64] & b);
		m->occ[idx / 64] |= b;
	} else {
		err = set_bit(m, &m->occ, &m->occ_words, idx);
		if (err)
			return err;
		m->memo_count++;
	}
	if (m->lazy) {
		pin(m, m->stack[m->sp - 1]);
		return mh_put(m, idx, m->stack[m->sp - 1]);
	}
	if (bit(m->ref, m->ref_words, idx)) {
		const dv v = m->stack[m->sp - 1];
		const uint64_t w = m->ref[idx / 64] & (((uint64_t)1 << (idx % 64)) - 1);

		m->memo[m->rank[idx / 64] + (size_t)popcount(w)] = v;
		pin(m, v);
	}
	return GFS_OK;
}

static gfs_err memo_get(vm *m, uint64_t idx)
{
	const uint64_t w = idx / 64 < m->ref_words
		? m->ref[idx / 64] & (((uint64_t)1 << (idx % 64)) - 1) : 0;
	dv v;

	if (!bit(m->occ, m->occ_words, idx))
		return vfail(m, GFS_ERR_FORMAT, "memo entry %llu is undefined", (unsigned long long)idx);
	if (m->lazy) /* not in mh: the fast path defined it (gfs_dcpmeta_load() starts over) */
		return mh_get(m, idx, &v) ? push(m, res(m, v))
			: vfail(m, GFS_ERR_FORMAT, "memo entry %llu is not kept", (unsigned long long)idx);
	assert(bit(m->ref, m->ref_words, idx));
	return push(m, res(m, m->memo[m->rank[idx / 64] + (size_t)popcount(w)]));
}

/*
 * memo_peek(): the value memo entry idx holds (resolved), if it is defined
 * and fetched (any GET's index is).
 */
static bool memo_peek(const vm *m, uint64_t idx, dv *v)
{
	uint64_t w;

	if (m->lazy) {
		if (!bit(m->occ, m->occ_words, idx) || !mh_get(m, idx, v))
			return false;
		*v = res(m, *v);
		return true;
	}
	if (!bit(m->occ, m->occ_words, idx) || !bit(m->ref, m->ref_words, idx))
		return false;
	w = m->ref[idx / 64] & (((uint64_t)1 << (idx % 64)) - 1);
	*v = res(m, m->memo[m->rank[idx / 64] + (size_t)popcount(w)]);
	return true;
}

/*
 * The fast path: a ChunkStorageMetadata, MetadataIndex or _StorageInfo
 * pickled as DCP does (a million of each in a large checkpoint):
 *
 *   GET cls  EMPTY_TUPLE NEWOBJ [MEMOIZE]  EMPTY_DICT [MEMOIZE]  MARK
 *     (key value)...  SETITEMS  BUILD
 *
 * each key and value made of GETs of values that are no node, BININT*,
 * NONE, NEWTRUE/NEWFALSE, tuples of ints, torch.Size(tuple of ints) by
 * REDUCE, and MEMOIZEs of entries no GET fetches.  fast_object() runs such
 * an object on a small local stack and pushes the record BUILD makes.  On
 * anything else (another opcode, a node value, a fetched or redefined
 * memo entry, a full stack, fewer than 9 bytes left) it gives up before
 * changing anything but the int tuples it interned, which the generic VM
 * interns again at the same opcodes (finding them): it then runs the same
 * opcodes, so results and errors are the generic VM's.
 */
#define FAST_STACK 24
#define T_WRAP 15u /* fast path only: a 1-tuple holding the int tuple of its payload */

/*
 * fast_memo_ok(): can the fast path's j-th MEMOIZE define an entry nobody
 * fetches?  Without the prescan (m->lazy) it assumes so: a GET of such an
 * entry fails in memo_get(), and the load starts over with the prescan.
 */
static bool fast_memo_ok(const vm *m, size_t j)
{
	const uint64_t idx = (uint64_t)m->memo_count + j;

	return idx / 64 < m->occ_words && !(m->occ[idx / 64] >> (idx % 64) & 1) &&
	       (m->lazy || !bit(m->ref, m->ref_words, idx));
}

/*
 * fast_tuple(): TUPLE1/2/3 or EMPTY_TUPLE (at) of the k words on top of
 * st[0..*n): interned ints, or a T_WRAP of a 1-tuple of a tuple.
 * @return false to give up (*err GFS_OK), or on an error of intern().
 */
static bool fast_tuple(vm *m, size_t at, dv *st, size_t *n, size_t k, gfs_err *err)
{
	int64_t v[3];

	if (*n < k)
		return false;
	for (size_t i = 0; i < k; i++) {
		const dv x = st[*n - k + i];

		if (TAG(x) != T_INT) {
			if (k != 1 || TAG(x) != T_TUP)
				return false;
			st[*n - 1] = MK(T_WRAP, PAY(x));
			return true;
		}
		v[i] = int_of(x);
	}
	m->pos = at; /* intern()'s messages name the opcode, as the generic VM's */
	*err = intern(m, v, k, &st[*n - k]);
	*n -= k;
	*n += 1;
	return *err == GFS_OK;
}

/*
 * fast_memoize(): the fast path's optional MEMOIZE at *pos, passed (the
 * nmemo-th entry it defines); false to give up (fast_memo_ok()).
 */
static bool fast_memoize(const vm *m, const uint8_t *b, size_t *pos, size_t *nmemo)
{
	if (b[*pos] != OP_MEMOIZE)
		return true;
	if (!fast_memo_ok(m, (*nmemo)++))
		return false;
	(*pos)++;
	return true;
}

/* fast_run(): fast_object() but for m->pos, which it may leave anywhere when it gives up. */
static gfs_err fast_run(vm *m, uint64_t cls_idx, bool *done)
{
	const uint8_t *const b = m->buf;
	const size_t start = m->pos;
	size_t pos = start, n = 0, nmemo = 0, at;
	dv cls = 0, st[FAST_STACK], r = 0;
	int kind;
	gfs_err err = GFS_OK;

	*done = false;
	if (!memo_peek(m, cls_idx, &cls))
		return GFS_OK;
	kind = gkind(m, cls);
	if ((kind != G_CHUNK && kind != G_MINDEX && kind != G_SINFO) ||
	    m->sp + m->nmarks + FAST_STACK + 4 >= MAX_DEPTH || m->len - pos < 16 ||
	    b[pos] != OP_EMPTY_TUPLE || b[pos + 1] != OP_NEWOBJ)
		return GFS_OK;
	if (!fast_tuple(m, pos, st, &n, 0, &err)) /* the empty tuple NEWOBJ takes */
		return err;
	n = 0;
	pos += 2;
	if (!fast_memoize(m, b, &pos, &nmemo) || b[pos++] != OP_EMPTY_DICT ||
	    !fast_memoize(m, b, &pos, &nmemo) || b[pos++] != OP_MARK)
		return GFS_OK;
	for (;;) {
		uint64_t idx;
		dv v;

		if (m->len - pos < 9 || n == FAST_STACK)
			return GFS_OK;
		at = pos;
		switch (b[pos]) {
		case OP_BINGET: case OP_LONG_BINGET:
			idx = b[pos] == OP_BINGET ? b[pos + 1] : le_fixed(b + pos + 1, 4);
			pos += b[pos] == OP_BINGET ? 2 : 5;
			if (!memo_peek(m, idx, &v) || TAG(v) == T_NODE)
				return GFS_OK;
			st[n++] = v;
			break;
		case OP_BININT1:
			st[n++] = MK(T_INT, b[pos + 1]);
			pos += 2;
			break;
		case OP_BININT2:
			st[n++] = MK(T_INT, le_fixed(b + pos + 1, 2));
			pos += 3;
			break;
		case OP_BININT:
			(void)new_int(m, (int32_t)(uint32_t)le_fixed(b + pos + 1, 4), &st[n++]);
			pos += 5;
			break;
		case OP_NONE:
			st[n++] = MK(T_NONE, 0);
			pos++;
			break;
		case OP_NEWTRUE: case OP_NEWFALSE:
			st[n++] = MK(T_BOOL, b[pos] == OP_NEWTRUE);
			pos++;
			break;
		case OP_EMPTY_TUPLE: case OP_TUPLE1: case OP_TUPLE2: case OP_TUPLE3:
			if (!fast_tuple(m, at, st, &n,
					b[pos] == OP_EMPTY_TUPLE ? 0 : (size_t)(b[pos] - OP_TUPLE1 + 1),
					&err))
				return err;
			pos++;
			break;
		case OP_MEMOIZE:
			if (!n || !fast_memoize(m, b, &pos, &nmemo))
				return GFS_OK;
			break;
		case OP_REDUCE: /* torch.Size((ints,)) */
			if (n < 2 || gkind(m, st[n - 2]) != G_SIZE || TAG(st[n - 1]) != T_WRAP)
				return GFS_OK;
			st[n - 2] = MK(T_TUP, PAY(st[n - 1]));
			n--;
			pos++;
			break;
		case OP_SETITEMS:
			if (n % 2 || b[pos + 1] != OP_BUILD)
				return GFS_OK;
			for (size_t i = 0; i < n; i++)
				if (TAG(st[i]) == T_WRAP)
					return GFS_OK;
			m->pos = pos + 1; /* reduce()'s messages name the BUILD */
			err = reduce(m, kind, MK(T_NONE, 0), (fields){ st, (uint32_t)n }, &r);
			if (!err)
				err = push(m, r);
			if (err)
				return err;
			for (size_t j = 0; j < nmemo; j++) {
				const uint64_t idx2 = (uint64_t)m->memo_count + j;

				m->occ[idx2 / 64] |= (uint64_t)1 << (idx2 % 64);
			}
			m->memo_count += nmemo;
			m->out->nfast++;
			m->pos = pos + 2;
			*done = true;
			return GFS_OK;
		default:
			return GFS_OK;
		}
	}
}

/*
 * fast_object(): the fast path for the GET of memo entry cls_idx that
 * ended at m->pos.  Sets *done and m->pos past the BUILD when it ran the
 * object; else leaves the VM (m->pos too) to run the GET.
 */
static gfs_err fast_object(vm *m, uint64_t cls_idx, bool *done)
{
	const size_t start = m->pos;
	const gfs_err err = fast_run(m, cls_idx, done);

	if (!err && !*done)
		m->pos = start;
	return err;
}

/* step(): run one opcode; *stop at STOP. */
static gfs_err step(vm *m, bool *stop)
{
	uint8_t op = 0;
	arg a;
	dv v = 0, x = 0, y = 0;
	size_t start = 0;
	gfs_err err = decode(m, &m->pos, &op, &a);

	if (err)
		return err;
	switch (op) {
	case OP_PROTO:
		if (a.i > HIGHEST_PROTOCOL)
			return vfail(m, GFS_ERR_UNSUPPORTED, "pickle protocol %lld", (long long)a.i);
		return GFS_OK;
	case OP_FRAME:
		return GFS_OK;
	case OP_STOP:
		*stop = true;
		return GFS_OK;
	case OP_MARK:
		if (m->sp + m->nmarks >= MAX_DEPTH)
			return vfail(m, GFS_ERR_LIMIT, "stack deeper than %zu", MAX_DEPTH);
		err = grow(m, (void **)&m->marks, &m->marks_cap, m->nmarks + 1, sizeof(*m->marks));
		if (!err)
			m->marks[m->nmarks++] = m->sp;
		return err;
	case OP_POP:
		if (m->sp > fence(m)) {
			recycle(m, m->stack[--m->sp]);
			return GFS_OK;
		}
		return pop_mark(m, &start);
	case OP_POP_MARK:
		err = pop_mark(m, &start);
		m->sp = err ? m->sp : start;
		return err;
	case OP_DUP:
		if (m->sp <= fence(m))
			return vfail(m, GFS_ERR_FORMAT, "stack underflow");
		pin(m, m->stack[m->sp - 1]);
		return push(m, m->stack[m->sp - 1]);
	case OP_NONE:
		return push(m, MK(T_NONE, 0));
	case OP_NEWTRUE: case OP_NEWFALSE:
		return push(m, MK(T_BOOL, op == OP_NEWTRUE));
	case OP_BININT: case OP_BININT1: case OP_BININT2:
		err = new_int(m, a.i, &v);
		return err ? err : push(m, v);
	case OP_LONG1: {
		const size_t n = (size_t)a.i;
		uint64_t u;

		if (n > 8)
			return vfail(m, GFS_ERR_UNSUPPORTED, "integer of %zu bytes in DCP metadata", n);
		u = le(a.p, n);
		if (n && n < 8 && (a.p[n - 1] & 0x80))
			u |= ~(uint64_t)0 << (8 * n);
		err = new_int(m, (int64_t)u, &v);
		return err ? err : push(m, v);
	}
	case OP_BINFLOAT: case OP_SHORT_BINBYTES: case OP_BINBYTES: case OP_BINBYTES8:
		return push(m, MK(T_OPAQUE, 0));
	case OP_SHORT_BINUNICODE: case OP_BINUNICODE: case OP_BINUNICODE8: case OP_SHORT_BINSTRING:
	case OP_BINSTRING:
		err = new_str(m, a.p, (size_t)a.i, &v);
		return err ? err : push(m, v);
	case OP_EMPTY_TUPLE: case OP_TUPLE1: case OP_TUPLE2: case OP_TUPLE3: {
		const size_t n = op == OP_EMPTY_TUPLE ? 0 : (size_t)(op - OP_TUPLE1 + 1);

		if (m->sp - fence(m) < n)
			return vfail(m, GFS_ERR_FORMAT, "stack underflow");
		err = tuple_of(m, m->stack + m->sp - n, n, &v);
		m->sp -= err ? 0 : n;
		return err ? err : push(m, v);
	}
	case OP_TUPLE: case OP_LIST: case OP_DICT:
		err = pop_mark(m, &start);
		if (!err && op == OP_TUPLE)
			err = tuple_of(m, m->stack + start, m->sp - start, &v);
		else if (!err && op == OP_DICT && (m->sp - start) % 2)
			err = vfail(m, GFS_ERR_FORMAT, "DICT with an odd number of values");
		else if (!err)
			err = new_node(m, op == OP_LIST ? K_LIST : K_DICT, &v);
		if (!err && op != OP_TUPLE)
			err = node_add(m, v, m->stack + start, m->sp - start);
		m->sp = err ? m->sp : start;
		return err ? err : push(m, v);
	case OP_EMPTY_LIST: case OP_EMPTY_DICT:
		err = new_node(m, op == OP_EMPTY_LIST ? K_LIST : K_DICT, &v);
		return err ? err : push(m, v);
	case OP_APPEND: case OP_SETITEM: {
		const size_t n = op == OP_APPEND ? 1 : 2;

		if (m->sp - fence(m) < n)
			return vfail(m, GFS_ERR_FORMAT, "stack underflow");
		return into(m, m->sp - n, op == OP_APPEND ? K_LIST : K_DICT);
	}
	case OP_APPENDS: case OP_SETITEMS:
		err = pop_mark(m, &start);
		return err ? err : into(m, start, op == OP_APPENDS ? K_LIST : K_DICT);
	case OP_GLOBAL:
		err = str_lines(m, &a, &x, &y);
		if (!err)
			err = new_global(m, x, y, &v);
		return err ? err : push(m, v);
	case OP_STACK_GLOBAL:
		err = pop(m, &y);
		if (!err)
			err = pop(m, &x);
		if (!err && (TAG(x) != T_STR || TAG(y) != T_STR))
			err = vfail(m, GFS_ERR_FORMAT, "STACK_GLOBAL of something else than strings");
		if (!err)
			err = new_global(m, x, y, &v);
		return err ? err : push(m, v);
	case OP_REDUCE: case OP_NEWOBJ: case OP_NEWOBJ_EX:
		if (op == OP_NEWOBJ_EX) {
			err = pop(m, &y);
			recycle(m, y);
		}
		if (!err)
			err = pop(m, &x);
		if (!err)
			err = pop(m, &y);
		if (!err)
			err = call(m, res(m, y), res(m, x), op != OP_REDUCE, &v);
		return err ? err : push(m, v);
	case OP_BUILD:
		return op_build(m);
	case OP_BINPUT: case OP_LONG_BINPUT:
		return memo_put(m, (uint64_t)a.i);
	case OP_MEMOIZE:
		return memo_put(m, m->memo_count);
	case OP_BINGET: case OP_LONG_BINGET: {
		bool done = false;

		err = fast_on ? fast_object(m, (uint64_t)a.i, &done) : GFS_OK;
		return err || done ? err : memo_get(m, (uint64_t)a.i);
	}
	default:
		return vfail(m, GFS_ERR_UNSUPPORTED, "opcode 0x%02x", op);
	}
}

/* ------------------------------------------------------------ the result */

/*
 * is_name(): string id holds no NUL byte (a C string carries it all), and
 * with plain no control byte either (0x00-0x1f, 0x7f: for file names).
 */
static bool is_name(const vm *m, uint32_t id, bool plain)
{
	uint32_t n;
	const char *s;

	if (id >= ID_LIMIT)
		return false;
	s = str_at(m->P, id, &n);
	for (uint32_t i = 0; i < n; i++)
		if (s[i] == '\0' || (plain && ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)))
			return false;
	return true;
}

static gfs_err finish(vm *m, dv root)
{
	struct gfs_dcpmeta_pools *P = m->P;
	gfs_dcpmeta *o = m->out;
	const meta_rec *mr = TAG(root) == T_META ? &m->metas[PAY(root)] : NULL;
	const node *sdm, *sd;
	size_t cap = 0;
	gfs_err err;

	if (!mr)
		return gfs_fail(GFS_ERR_FORMAT, "%s: not a DCP .metadata (no Metadata object)",
				m->label);
	sdm = N(m, res(m, mr->sdm));
	sd = N(m, res(m, mr->sd));
	if (!sdm || sdm->kind != K_DICT || !sd || sd->kind != K_DICT)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: Metadata lacks a state_dict_metadata or storage_data dict", m->label);
	o->version = TAG(mr->version) == T_STR ? (uint32_t)PAY(mr->version) : GFS_DCP_NONE;
	err = grow(m, (void **)&P->entries, &cap, sdm->len / 2 + 1, sizeof(*P->entries));
	for (uint32_t i = 0; !err && i < sdm->len / 2; i++) {
		const dv k = res(m, sdm->items[2 * i]), v = res(m, sdm->items[2 * i + 1]);

		if (TAG(k) != T_STR)
			return gfs_fail(GFS_ERR_FORMAT, "%s: state_dict_metadata key %u is not a string",
					m->label, i);
		if (!is_name(m, (uint32_t)PAY(k), false)) {
			char shown[GFS_SHOWN_KEY_BUF];
			uint32_t n;
			const char *s = str_at(m->P, (uint32_t)PAY(k), &n);

			return gfs_fail(GFS_ERR_FORMAT,
					"%s: state_dict_metadata key %u (\"%s\") holds a NUL byte, which no tensor name can",
					m->label, i, gfs_shown_key(s, n, shown));
		}
		P->entries[i] = (gfs_dcp_entry){
			.fqn = (uint32_t)PAY(k),
			.kind = TAG(v) == T_TSM ? GFS_DCP_TENSOR
				: is_bsm(m, v) ? GFS_DCP_BYTES : GFS_DCP_OTHER,
			.tensor = TAG(v) == T_TSM ? (uint32_t)PAY(v) : GFS_DCP_NONE,
		};
	}
	if (err)
		return err;
	o->nentries = sdm->len / 2;
	cap = 0;
	err = grow(m, (void **)&P->items, &cap, sd->len / 2 + 1, sizeof(*P->items));
	for (uint32_t i = 0; !err && i < sd->len / 2; i++) {
		const dv k = res(m, sd->items[2 * i]), v = res(m, sd->items[2 * i + 1]);
		const uint32_t fqn = TAG(k) == T_MINDEX ? LO30(PAY(k)) : ID_BAD;
		const uint32_t off = TAG(k) == T_MINDEX ? HI30(PAY(k)) : ID_BAD;
		const sinfo *s = TAG(v) == T_SINFO ? &m->sinfos[PAY(v)] : NULL;

		if (!is_name(m, fqn, false) || off == ID_BAD)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: storage data entry %u: key is not a MetadataIndex with a plain name",
					m->label, i);
		if (!s || !s->ok || !is_name(m, s->rel, true))
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: storage data entry %u: value is not a _StorageInfo",
					m->label, i);
		P->items[i] = (gfs_dcp_item){
			.fqn = fqn, .offset = off == ID_NONE ? GFS_DCP_NONE : off, .rel = s->rel,
			.ntd = s->ntd, .td0 = s->td0 >= ID_LIMIT ? GFS_DCP_NONE : s->td0,
			.off = s->off, .len = s->len,
		};
	}
	if (err)
		return err;
	o->nitems = sd->len / 2;
	for (size_t i = 0; i < o->ntensors; i++) {
		gfs_dcp_tensor *t = &P->tensors[i];

		if (t->size >= ID_LIMIT)
			t->size = GFS_DCP_NONE;
		if (t->dtype >= ID_LIMIT)
			t->dtype = GFS_DCP_NONE;
	}
	for (size_t i = 0; i < o->nchunks; i++) {
		if (P->chunks[i].offsets >= ID_LIMIT)
			P->chunks[i].offsets = GFS_DCP_NONE;
		if (P->chunks[i].sizes >= ID_LIMIT)
			P->chunks[i].sizes = GFS_DCP_NONE;
	}
	/* the arrays are never NULL, empty or not */
	err = grow(m, (void **)&P->tensors, &P->tensors_cap, 1, sizeof(*P->tensors));
	if (!err)
		err = grow(m, (void **)&P->chunks, &P->chunks_cap, 1, sizeof(*P->chunks));
	if (err)
		return err;
	o->entries = P->entries;
	o->tensors = P->tensors;
	o->chunks = P->chunks;
	o->items = P->items;
	return GFS_OK;
}

static void vm_free(vm *m)
{
	for (size_t i = 0; i < m->nnodes; i++)
		free(m->nodes[i].items);
	free(m->nodes);
	free(m->freel);
	free(m->stack);
	free(m->marks);
	free(m->ref);
	free(m->rank);
	free(m->memo);
	free(m->occ);
	free(m->mh);
	free(m->globs);
	free(m->htab);
	free(m->sinfos);
	free(m->metas);
}

/*
 * lazy_occ(): without the prescan, the bitmap of defined memo indices
 * sized for every index the pickle can define (below its length: each
 * took an opcode), zeroed; pages untouched until used.
 */
static gfs_err lazy_occ(vm *m)
{
	const size_t words = m->len / 64 + 1;

	if (words * sizeof(*m->occ) > m->max_bytes - m->bytes)
		return vfail(m, GFS_ERR_LIMIT, "needs more than the reader's limit of %zu bytes",
			     m->max_bytes);
	m->occ = calloc(words, sizeof(*m->occ));
	if (!m->occ)
		return vfail(m, GFS_ERR_NOMEM, "out of memory");
	m->occ_words = words;
	m->bytes += words * sizeof(*m->occ);
	return GFS_OK;
}

/*
 * load(): gfs_dcpmeta_load() with the prescan, or (lazy) without it: the
 * VM keeps every memo entry it defines in a hash and the fast path
 * assumes no GET fetches the entries it defines; any error (such a GET
 * included) is for the caller to try again with the prescan.
 */
static gfs_err load(const uint8_t *buf, size_t len, const char *label, size_t max_bytes,
		    bool lazy, gfs_dcpmeta **out)
{
	vm m = { .buf = buf, .len = len, .label = label, .lazy = lazy,
		 .max_bytes = max_bytes ? max_bytes : DEFAULT_MAX_BYTES };
	bool stop = false;
	gfs_err err;

	for (int k = 0; k < F_COUNT; k++)
		m.fid[k] = ID_BAD;

	m.out = calloc(1, sizeof(*m.out));
	m.P = calloc(1, sizeof(*m.P));
	if (!m.out || !m.P) {
		free(m.out);
		free(m.P);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	m.out->pools = m.P;
	/* never NULL: the empty tuple's ints are P->ints + 0, an empty stack's top m.stack + 0 */
	err = grow(&m, (void **)&m.P->ints, &m.P->ints_cap, 1, sizeof(*m.P->ints));
	if (!err)
		err = grow(&m, (void **)&m.stack, &m.stack_cap, 1, sizeof(*m.stack));
	if (!err)
		err = lazy ? lazy_occ(&m) : prescan(&m);
	m.out->lazy = lazy;
	m.pos = 0;
	while (!err && !stop)
		err = step(&m, &stop);
	if (!err && m.sp <= fence(&m))
		err = vfail(&m, GFS_ERR_FORMAT, "STOP with nothing on the stack");
	if (!err)
		err = finish(&m, res(&m, m.stack[m.sp - 1]));
	vm_free(&m);
	if (err) {
		gfs_dcpmeta_free(m.out);
		return err;
	}
	*out = m.out;
	return GFS_OK;
}

gfs_err gfs_dcpmeta_load(const uint8_t *buf, size_t len, const char *label, size_t max_bytes,
			 gfs_dcpmeta **out)
{
	if (!out || (!buf && len))
		return gfs_fail(GFS_ERR_INVAL, "gfs_dcpmeta_load: bad argument");
	*out = NULL;
	label = label ? label : "metadata";
	if (len > MAX_INPUT)
		return gfs_fail(GFS_ERR_LIMIT, "%s: DCP metadata of %zu bytes (the reader takes %zu)",
				label, len, MAX_INPUT);
	if (fast_on && lazy_on && load(buf, len, label, max_bytes, true, out) == GFS_OK)
		return GFS_OK;
	return load(buf, len, label, max_bytes, false, out);
}

void gfs_dcpmeta_set_fast(bool on, size_t split, bool lazy)
{
	fast_on = on;
	split_min = split ? split : SPLIT_MIN;
	lazy_on = lazy;
}

void gfs_dcpmeta_free(gfs_dcpmeta *m)
{
	if (!m)
		return;
	free(m->pools->str);
	free(m->pools->ints);
	free(m->pools->tup);
	free(m->pools->entries);
	free(m->pools->tensors);
	free(m->pools->chunks);
	free(m->pools->items);
	free(m->pools);
	free(m);
}

bool gfs_dcpmeta_same(const gfs_dcpmeta *a, const gfs_dcpmeta *b)
{
	if (a->nentries != b->nentries || a->ntensors != b->ntensors || a->nchunks != b->nchunks ||
	    a->nitems != b->nitems || a->version != b->version)
		return false;
	for (size_t i = 0; i < a->nentries; i++)
		if (a->entries[i].fqn != b->entries[i].fqn || a->entries[i].kind != b->entries[i].kind ||
		    a->entries[i].tensor != b->entries[i].tensor)
			return false;
	for (size_t i = 0; i < a->ntensors; i++)
		if (a->tensors[i].dtype != b->tensors[i].dtype || a->tensors[i].size != b->tensors[i].size ||
		    a->tensors[i].has_chunks != b->tensors[i].has_chunks ||
		    a->tensors[i].first != b->tensors[i].first ||
		    a->tensors[i].nchunks != b->tensors[i].nchunks)
			return false;
	for (size_t i = 0; i < a->nchunks; i++) {
		uint32_t na = 0, nb = 0;
		const int64_t *va, *vb;

		if (a->chunks[i].offsets != b->chunks[i].offsets || a->chunks[i].sizes != b->chunks[i].sizes)
			return false;
		va = gfs_dcpmeta_ints(a, a->chunks[i].sizes, &na);
		vb = gfs_dcpmeta_ints(b, b->chunks[i].sizes, &nb);
		if (!va != !vb || na != nb || (va && memcmp(va, vb, na * sizeof(*va)) != 0))
			return false;
	}
	for (size_t i = 0; i < a->nitems; i++) {
		const gfs_dcp_item *x = &a->items[i], *y = &b->items[i];

		if (x->fqn != y->fqn || x->offset != y->offset || x->rel != y->rel || x->ntd != y->ntd ||
		    x->td0 != y->td0 || x->off != y->off || x->len != y->len ||
		    strcmp(gfs_dcpmeta_str(a, x->fqn), gfs_dcpmeta_str(b, y->fqn)) != 0 ||
		    strcmp(gfs_dcpmeta_str(a, x->rel), gfs_dcpmeta_str(b, y->rel)) != 0)
			return false;
	}
	return true;
}

const char *gfs_dcpmeta_str(const gfs_dcpmeta *m, uint32_t id)
{
	return id == GFS_DCP_NONE ? NULL : str_at(m->pools, id, NULL);
}

const int64_t *gfs_dcpmeta_ints(const gfs_dcpmeta *m, uint32_t id, uint32_t *n)
{
	if (id == GFS_DCP_NONE)
		return NULL;
	*n = m->pools->tup[id].n;
	return m->pools->ints + m->pools->tup[id].off;
}
