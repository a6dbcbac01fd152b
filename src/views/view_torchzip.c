/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the torch zip view: compose pytorch_model.bin from a layout.
 *
 * Composition writes the pickle and places every record; the zip headers and
 * the central directory are written when read, and the vfile's segments are
 * computed, not stored (64 bytes kept a tensor besides data.pkl).  The only
 * data-dependent fields, the CRC-32s of tensor records, are computed on
 * first read of them (see view_torchzip.h).
 */
#include "config.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/server/crccache.h"
#include "gatherfs/server/integrity.h"
#include "gatherfs/util/crc32.h"
#include "gatherfs/views/view_torchzip.h"

enum {
	ZIP_ALIGN = 64,        /* data start alignment, as torch writes */
	ZIP_LFH = 30,          /* local file header, fixed part */
	ZIP_CDH = 46,          /* central directory header, fixed part */
	ZIP_FB = 4,            /* "FB" padding extra field header */
	ZIP_Z64_LOCAL = 20,    /* ZIP64 extra in a local header: id, len, 2 sizes */
	ZIP_EOCD64 = 56,
	ZIP_LOC64 = 20,
	ZIP_EOCD = 22,
	ZIP_FLAGS = 0x0808,    /* bit 3: data descriptor, bit 11: UTF-8 names */
	ZIP_DOS_DATE = 0x0021, /* 1980-01-01 */
	ZIP_MADE_BY = 0x0300 | 45, /* Unix, spec 4.5 */
	ZIP_NEED_Z64 = 45,
	ZIP_NEED = 20,
	ZIP_EXT_ATTR = 0100444,
	CRC_READ_BUF = 1 << 20,      /* bytes read per gfs_tensor_read() */
	CRC_CHUNK = 16 << 20,        /* unit of work of the parallel pass */
	CRC_MAX_THREADS = 8,
	PICKLE_BATCH = 1000,         /* SETITEMS batch, as pickle writes */
	PREFIX_MAX = 200,
	NAME_BUF = PREFIX_MAX + 32,  /* "<prefix>/data/<20 digits>" */
};

#define ZIP_MAX32 UINT64_C(0xFFFFFFFF)
#define NO_ENTRY SIZE_MAX

enum { CRC_NONE, CRC_BUSY, CRC_DONE }; /* tz_record.state */

typedef struct tz_record {
	uint64_t hdr_off; /* offset of the local header */
	uint64_t data_off; /* offset of the data */
	uint64_t size;   /* data bytes */
	size_t entry;    /* layout entry of a storage record, NO_ENTRY for the others */
	uint32_t crc;    /* valid once state is CRC_DONE */
	_Atomic int state;
	atomic_bool src_ok; /* the source records of entry match their CRC-32s */
} tz_record;

struct gfs_tzview {
	const gfs_vctx *ctx;
	gfs_vfile *vf;     /* computed segments: tz_seg(), tz_find() */
	uint64_t size;
	gfs_vgen meta;     /* every byte but the storages' data: meta_gen() */
	gfs_vgen guard;    /* storage data: source records checked before serving */
	char *prefix;
	tz_record *recs;   /* data.pkl, byteorder, data/0..n-1, version */
	size_t nrecs;
	uint64_t *cd_start; /* [nrecs + 1]: central directory entries, then the end records */
	size_t *tsegs;     /* the storage records with data, in order */
	size_t ntsegs;
	uint8_t *pkl;      /* data.pkl */
	size_t pkl_len;
	pthread_mutex_t lock; /* with cond: waiting for a CRC another thread computes */
	pthread_cond_t cond;
	atomic_size_t ndone;  /* records in state CRC_DONE */
	_Atomic int cache_state; /* CACHE_*: the persistent CRC cache (ctx->crc_cache) */
	char cache_name[32];  /* its entry, set with the key by cache_load(); "": none */
	uint64_t key_fnv;     /* key of the layout, sources and records */
	uint32_t key_crc;
	uint64_t key_len;
};

enum { CACHE_UNTRIED, CACHE_LOADING, CACHE_LOADED, CACHE_SAVED };

static const char REC_BYTEORDER[] = "little";
static const char REC_VERSION[] = "3\n";

/* ------------------------------------------------------------------ bytes */

static uint8_t *put16(uint8_t *p, uint64_t v)
{
	assert(v <= 0xFFFF);
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	return p + 2;
}

static uint8_t *put32(uint8_t *p, uint64_t v)
{
	assert(v <= ZIP_MAX32);
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
	return p + 4;
}

static uint8_t *put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
	return p + 8;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* ----------------------------------------------------------------- pickle */

/* The pickle being written, and its memo counter. */
typedef struct pkbuf {
	gfs_buf buf;
	uint32_t memo; /* next memo index */
} pkbuf;

static void pk_put(pkbuf *b, const void *data, size_t n)
{
	gfs_buf_put(&b->buf, data, n);
}

static void pk_op(pkbuf *b, uint8_t op)
{
	pk_put(b, &op, 1);
}

/* pk_int(): a non-negative int64, in the shortest weights_only opcode. */
static void pk_int(pkbuf *b, uint64_t v)
{
	uint8_t tmp[2 + 8];

	assert(v <= INT64_MAX); /* so LONG1 needs at most 8 bytes */
	if (v <= 0xFF) {
		tmp[0] = 'K'; /* BININT1 */
		tmp[1] = (uint8_t)v;
		pk_put(b, tmp, 2);
	} else if (v <= 0xFFFF) {
		tmp[0] = 'M'; /* BININT2 */
		put16(tmp + 1, v);
		pk_put(b, tmp, 3);
	} else if (v <= INT32_MAX) {
		tmp[0] = 'J'; /* BININT */
		put32(tmp + 1, v);
		pk_put(b, tmp, 5);
	} else {
		/* LONG1: little-endian two's complement, sign bit clear */
		uint8_t n = 0;

		tmp[0] = 0x8a;
		do {
			tmp[2 + n++] = (uint8_t)v;
			v >>= 8;
		} while (v);
		if (tmp[1 + n] & 0x80)
			tmp[2 + n++] = 0;
		tmp[1] = n;
		pk_put(b, tmp, 2 + (size_t)n);
	}
}

/* pk_str(): BINUNICODE (SHORT_BINUNICODE is not accepted by weights_only). */
static void pk_str(pkbuf *b, const char *s)
{
	const size_t n = strlen(s);
	uint8_t hdr[5] = { 'X' };

	if (n > ZIP_MAX32) {
		b->buf.oom = true;
		return;
	}
	put32(hdr + 1, n);
	pk_put(b, hdr, sizeof(hdr));
	pk_put(b, s, n);
}

static void pk_global(pkbuf *b, const char *module, const char *name)
{
	pk_op(b, 'c'); /* GLOBAL */
	pk_put(b, module, strlen(module));
	pk_op(b, '\n');
	pk_put(b, name, strlen(name));
	pk_op(b, '\n');
}

/* pk_memo_put(): BINPUT the top of the stack; @return its memo index. */
static uint32_t pk_memo_put(pkbuf *b)
{
	const uint32_t idx = b->memo++;
	uint8_t tmp[5];

	if (idx <= 0xFF) {
		tmp[0] = 'q'; /* BINPUT */
		tmp[1] = (uint8_t)idx;
		pk_put(b, tmp, 2);
	} else {
		tmp[0] = 'r'; /* LONG_BINPUT */
		put32(tmp + 1, idx);
		pk_put(b, tmp, 5);
	}
	return idx;
}

static void pk_memo_get(pkbuf *b, uint32_t idx)
{
	uint8_t tmp[5];

	if (idx <= 0xFF) {
		tmp[0] = 'h'; /* BINGET */
		tmp[1] = (uint8_t)idx;
		pk_put(b, tmp, 2);
	} else {
		tmp[0] = 'j'; /* LONG_BINGET */
		put32(tmp + 1, idx);
		pk_put(b, tmp, 5);
	}
}

/* pk_int_tuple(): a tuple of n non-negative integers. */
static void pk_int_tuple(pkbuf *b, const uint64_t *v, uint32_t n)
{
	static const uint8_t small_tuple[4] = { ')', 0x85, 0x86, 0x87 };

	if (n > 3)
		pk_op(b, '('); /* MARK */
	for (uint32_t i = 0; i < n; i++)
		pk_int(b, v[i]);
	pk_op(b, n > 3 ? 't' : small_tuple[n]);
}

/* Memo indices of what is already written; UINT32_MAX: not yet. */
typedef struct pk_memos {
	uint32_t odict;                   /* collections.OrderedDict */
	uint32_t rebuild;                 /* torch._utils._rebuild_tensor_v2 */
	uint32_t rebuild3;                /* torch._utils._rebuild_tensor_v3 (FP8) */
	uint32_t untyped;                 /* torch.storage.UntypedStorage (FP8) */
	uint32_t storage[GFS_DT_COUNT_];  /* torch.<X>Storage */
	uint32_t dtg[GFS_DT_COUNT_];      /* torch.<dtype> (FP8, for _rebuild_tensor_v3) */
	uint32_t *persid;                 /* per layout entry: its storage's persistent id, */
	uint32_t *key_persid;             /* or NULL (a gfs_pkw, of a few tensors): per key */
} pk_memos;

/*
 * pk_persid(): where the persistent id of target ti's storage is memoised:
 * m->persid[ti], or (no dense table) the slot of ti's key among
 * keys[0..nkeys), else slot nkeys (room for it: the caller's), set to
 * UINT32_MAX.  UINT32_MAX: not written yet.
 */
static uint32_t *pk_persid(pk_memos *m, const size_t *keys, size_t nkeys, size_t ti)
{
	if (m->persid)
		return &m->persid[ti];
	for (size_t k = 0; k < nkeys; k++)
		if (keys[k] == ti)
			return &m->key_persid[k];
	m->key_persid[nkeys] = UINT32_MAX;
	return &m->key_persid[nkeys];
}

/* pk_global_memo(): GLOBAL module.name, memoised in *memo. */
static void pk_global_memo(pkbuf *b, uint32_t *memo, const char *module, const char *name)
{
	if (*memo != UINT32_MAX) {
		pk_memo_get(b, *memo);
	} else {
		pk_global(b, module, name);
		*memo = pk_memo_put(b);
	}
}

/*
 * pk_tensor_as(): the REDUCE of _rebuild_tensor_v2 for entry i, presented
 * with shape[0..ndim) (same numel as the entry) and requires_grad; an FP8
 * tensor as torch 2.1+ writes it: _rebuild_tensor_v3 with an UntypedStorage
 * of numel bytes and the dtype (torch.float8_e4m3fn...) as last argument.  The
 * storage of a target seen for the first time gets key *nkeys (recorded in
 * keys[]); later references BINGET its memoised persistent id tuple.
 */
static gfs_err pk_tensor_as(pkbuf *b, const gfs_vctx *ctx, pk_memos *m, size_t i,
			    uint32_t ndim, const uint64_t *shape, bool requires_grad,
			    size_t *keys, size_t *nkeys)
{
	const gfs_layout *l = ctx->layout;
	const size_t ti = l->tensors[i].alias_of >= 0 ? (size_t)l->tensors[i].alias_of : i;
	const gfs_tensor *t = &l->tensors[ti];
	const gfs_dtype out = gfs_dtype_out(t->dtype, ctx->want);
	const bool v3 = gfs_dtype_storage_class(out)[0] == '\0';
	uint64_t stride[GFS_MAX_DIMS];
	uint64_t step = 1;
	uint32_t *persid;

	assert(ndim <= GFS_MAX_DIMS);
	for (uint32_t d = ndim; d-- > 0;) {
		if (shape[d] > INT64_MAX || step > INT64_MAX)
			return gfs_fail(GFS_ERR_UNSUPPORTED,
					"tensor %s: shape does not fit torch's int64", t->name);
		stride[d] = step;
		if (!gfs_mul_u64(step, shape[d] ? shape[d] : 1, &step))
			return gfs_fail(GFS_ERR_UNSUPPORTED,
					"tensor %s: strides overflow", t->name);
	}
	if (step != t->numel && t->numel != 0)
		return gfs_fail(GFS_ERR_INVAL, "tensor %s: presented with another element count",
				t->name);
	if (v3)
		pk_global_memo(b, &m->rebuild3, "torch._utils", "_rebuild_tensor_v3");
	else
		pk_global_memo(b, &m->rebuild, "torch._utils", "_rebuild_tensor_v2");
	pk_op(b, '('); /* MARK: arguments of _rebuild_tensor_v2/v3 */
	persid = pk_persid(m, keys, *nkeys, ti);
	if (*persid != UINT32_MAX) {
		pk_memo_get(b, *persid);
	} else {
		char key[24];

		snprintf(key, sizeof(key), "%zu", *nkeys);
		keys[(*nkeys)++] = ti;
		pk_op(b, '(');
		pk_str(b, "storage");
		if (v3)
			pk_global_memo(b, &m->untyped, "torch.storage", "UntypedStorage");
		else
			pk_global_memo(b, &m->storage[out], "torch", gfs_dtype_storage_class(out));
		pk_str(b, key);
		pk_str(b, "cpu");
		pk_int(b, t->numel);
		pk_op(b, 't');
		*persid = pk_memo_put(b);
	}
	pk_op(b, 'Q');  /* BINPERSID */
	pk_int(b, 0);   /* storage_offset */
	pk_int_tuple(b, shape, ndim);
	pk_int_tuple(b, stride, ndim);
	pk_op(b, requires_grad ? 0x88 : 0x89); /* NEWTRUE / NEWFALSE */
	if (m->odict != UINT32_MAX) {
		pk_memo_get(b, m->odict);
	} else {
		pk_global(b, "collections", "OrderedDict");
		m->odict = pk_memo_put(b);
	}
	pk_op(b, ')');
	pk_op(b, 'R');  /* backward_hooks = OrderedDict() */
	if (v3)
		pk_global_memo(b, &m->dtg[out], "torch", gfs_dtype_name(out));
	pk_op(b, 't');
	pk_op(b, 'R');
	return GFS_OK;
}

/* pk_tensor(): entry i as itself (its own shape, requires_grad False). */
static gfs_err pk_tensor(pkbuf *b, const gfs_vctx *ctx, pk_memos *m, size_t i,
			 size_t *keys, size_t *nkeys)
{
	const gfs_tensor *t = gfs_layout_target(ctx->layout, i);

	return pk_tensor_as(b, ctx, m, i, t->ndim, t->shape, false, keys, nkeys);
}

/*
 * build_pickle(): data.pkl for entries[0..n) of ctx's layout.  keys[k]
 * receives the layout entry whose bytes storage k holds (keys has room for
 * n entries).
 */
static gfs_err build_pickle(const gfs_vctx *ctx, const size_t *entries, size_t n,
			    pkbuf *b, size_t *keys, size_t *nkeys)
{
	const gfs_layout *l = ctx->layout;
	pk_memos m = { .key_persid = NULL };
	gfs_err err = GFS_OK;

	m.persid = malloc((gfs_layout_nentries(l) + 1) * sizeof(*m.persid));
	if (!m.persid)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	memset(m.persid, 0xff, gfs_layout_nentries(l) * sizeof(*m.persid));
	memset(m.storage, 0xff, sizeof(m.storage));
	memset(m.dtg, 0xff, sizeof(m.dtg));
	m.rebuild3 = m.untyped = UINT32_MAX;
	*nkeys = 0;
	pk_put(b, "\x80\x02", 2); /* PROTO 2 */
	pk_global(b, "collections", "OrderedDict");
	m.odict = pk_memo_put(b);
	m.rebuild = UINT32_MAX;
	pk_op(b, ')');
	pk_op(b, 'R'); /* the root: OrderedDict() */
	for (size_t k = 0; k < n && !err; k++) {
		const size_t i = entries[k];

		assert(i < l->ntensors);
		if (k % PICKLE_BATCH == 0)
			pk_op(b, '(');
		pk_str(b, l->tensors[i].name);
		err = pk_tensor(b, ctx, &m, i, keys, nkeys);
		if (k % PICKLE_BATCH == PICKLE_BATCH - 1 || k + 1 == n)
			pk_op(b, 'u'); /* SETITEMS */
	}
	pk_op(b, '.'); /* STOP */
	free(m.persid);
	if (!err && b->buf.oom)
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory writing data.pkl");
	return err;
}

/* ---------------------------------------------------------- source checks */

/*
 * Nothing of a storage record is served, and no CRC-32 of it computed,
 * before the source records its bytes come from (whole zip records of the
 * shards, padding included) match the CRC-32s their zip directories store:
 * so a corrupt shard never becomes a zip with valid CRCs of corrupt data.
 */

/* add_sources(): append to v (deduplicated through seen) the records of entry's bytes. */
static void add_sources(const gfs_layout *l, size_t entry, uint8_t *seen, uint32_t *v,
			size_t *n)
{
	const gfs_tensor *t = gfs_layout_target(l, entry);

	for (size_t p = 0; p < t->npieces; p++) {
		const uint32_t rec = gfs_tensor_piece(t, p).rec;

		if (rec != GFS_NO_RECORD && !seen[rec]) {
			seen[rec] = 1;
			v[(*n)++] = rec;
		}
	}
}

/*
 * check_sources(): make sure the source records of the view's records
 * rs[0..n) are checked and good (in parallel, each read once); the first
 * corrupt one is GFS_ERR_IO naming its file, record and tensors.
 */
static gfs_err check_sources(gfs_tzview *z, const size_t *rs, size_t n)
{
	const gfs_layout *l = z->ctx->layout;
	bool todo = false;
	uint8_t *seen;
	uint32_t *v;
	size_t nv = 0;
	gfs_err err;

	for (size_t k = 0; k < n && !todo; k++)
		todo = z->recs[rs[k]].entry != NO_ENTRY && !atomic_load(&z->recs[rs[k]].src_ok);
	if (!todo)
		return GFS_OK;
	seen = gfs_calloc(l->nrecords ? l->nrecords : 1, 1);
	v = gfs_calloc(l->nrecords ? l->nrecords : 1, sizeof(*v));
	if (!seen || !v) {
		free(seen);
		free(v);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	for (size_t k = 0; k < n; k++)
		if (z->recs[rs[k]].entry != NO_ENTRY && !atomic_load(&z->recs[rs[k]].src_ok))
			add_sources(l, z->recs[rs[k]].entry, seen, v, &nv);
	err = gfs_integrity_require(l, z->ctx->src, v, nv, 0);
	for (size_t k = 0; !err && k < n; k++)
		atomic_store(&z->recs[rs[k]].src_ok, true);
	free(seen);
	free(v);
	return err;
}

/* src_guard(): the guard of storage record arg's data. */
static gfs_err src_guard(void *ctx, uint64_t arg, uint64_t off, uint8_t *buf, size_t len)
{
	gfs_tzview *z = ctx;

	(void)off;
	(void)buf;
	(void)len;
	assert(arg < z->nrecs);
	if (atomic_load(&z->recs[arg].src_ok))
		return GFS_OK;
	return check_sources(z, &(size_t){ (size_t)arg }, 1);
}

/* -------------------------------------------------------------------- CRC */

/* crc_range(): CRC-32 of bytes [off, off + len) of entry, through buf. */
static gfs_err crc_range(const gfs_vctx *ctx, size_t entry, uint64_t off,
			 uint64_t len, uint8_t *buf, uint32_t *out)
{
	uint32_t crc = 0;

	while (len > 0) {
		const size_t n = (size_t)min_u64(len, CRC_READ_BUF);
		const gfs_err err = gfs_tensor_read(ctx->layout, ctx->src, entry,
						    ctx->want, off, buf, n);

		if (err)
			return err;
		crc = gfs_crc32(crc, buf, n);
		off += n;
		len -= n;
	}
	*out = crc;
	return GFS_OK;
}

/*
 * crc_from_sources(): the CRC-32 of record r combined from the CRC-32s the
 * source checks recorded for its pieces, without reading them again:
 * possible when the tensor is served as stored (no dtype conversion) from
 * contiguous FILE pieces of records found OK (never for a computed
 * tensor: its bytes are in no source record).
 */
static bool crc_from_sources(const gfs_tzview *z, size_t r, uint32_t *out)
{
	const gfs_layout *l = z->ctx->layout;
	const gfs_tensor *t = gfs_layout_target(l, z->recs[r].entry);
	const size_t ti = (size_t)(t - l->tensors);
	uint32_t crc = 0;

	if (t->strided || t->comp || gfs_dtype_out(t->dtype, z->ctx->want) != t->dtype)
		return false;
	for (size_t p = 0; p < t->npieces; p++) {
		uint32_t c;

		if (!gfs_srcset_piece_crc(z->ctx->src, ti, p, &c))
			return false;
		crc = gfs_crc32_combine(crc, c, gfs_tensor_piece(t, p).len);
	}
	*out = crc;
	return true;
}

/* publish(): end a computation of record r: success stores crc. */
static void publish(gfs_tzview *z, size_t r, gfs_err err, uint32_t crc)
{
	tz_record *rec = &z->recs[r];

	assert(atomic_load(&rec->state) == CRC_BUSY);
	if (!err) {
		rec->crc = crc;
		atomic_fetch_add(&z->ndone, 1);
	}
	atomic_store(&rec->state, err ? CRC_NONE : CRC_DONE);
	pthread_mutex_lock(&z->lock);
	pthread_cond_broadcast(&z->cond);
	pthread_mutex_unlock(&z->lock);
}

/* crc_one(): make record r's CRC known, computing it in this thread. */
static gfs_err crc_one(gfs_tzview *z, size_t r)
{
	tz_record *rec = &z->recs[r];

	for (;;) {
		int state = CRC_NONE;
		uint8_t *buf;
		uint32_t crc = 0;
		gfs_err err;

		if (atomic_compare_exchange_strong(&rec->state, &state, CRC_BUSY)) {
			assert(rec->entry != NO_ENTRY);
			buf = gfs_iobuf(CRC_READ_BUF);
			err = buf ? check_sources(z, &r, 1)
				  : gfs_fail(GFS_ERR_NOMEM, "out of memory");
			if (!err && !crc_from_sources(z, r, &crc))
				err = crc_range(z->ctx, rec->entry, 0, rec->size, buf, &crc);
			free(buf);
			publish(z, r, err, crc);
			return err;
		}
		if (state == CRC_DONE)
			return GFS_OK;
		pthread_mutex_lock(&z->lock);
		while (atomic_load(&rec->state) == CRC_BUSY)
			pthread_cond_wait(&z->cond, &z->lock);
		pthread_mutex_unlock(&z->lock);
	}
}

/* One unit of the parallel pass: a chunk of a record. */
typedef struct crc_item {
	size_t rec;
	uint64_t off;
	uint64_t len;
	uint32_t crc;
} crc_item;

typedef struct crc_job {
	const gfs_tzview *z;
	crc_item *items;
	size_t nitems;
	atomic_size_t next;
	_Atomic int err;   /* first error, GFS_OK if none */
	char msg[512];     /* its message, written by the thread that set err */
} crc_job;

static void job_fail(crc_job *job, gfs_err err)
{
	int none = GFS_OK;

	if (atomic_compare_exchange_strong(&job->err, &none, (int)err))
		snprintf(job->msg, sizeof(job->msg), "%s", gfs_errmsg());
}

static void *crc_worker(void *arg)
{
	crc_job *job = arg;
	uint8_t *buf = gfs_iobuf(CRC_READ_BUF);

	if (!buf) {
		job_fail(job, gfs_fail(GFS_ERR_NOMEM, "out of memory"));
		return NULL;
	}
	while (atomic_load(&job->err) == GFS_OK) {
		const size_t i = atomic_fetch_add(&job->next, 1);
		crc_item *it;
		gfs_err err;

		if (i >= job->nitems)
			break;
		it = &job->items[i];
		err = crc_range(job->z->ctx, job->z->recs[it->rec].entry, it->off,
				it->len, buf, &it->crc);
		if (err)
			job_fail(job, err);
	}
	free(buf);
	return NULL;
}

/* run_job(): run job on nthreads threads, this one included. */
static void run_job(crc_job *job, unsigned nthreads)
{
	pthread_t tids[CRC_MAX_THREADS];
	unsigned started = 0;

	if (nthreads > job->nitems)
		nthreads = (unsigned)job->nitems;
	while (started + 1 < nthreads &&
	       pthread_create(&tids[started], NULL, crc_worker, job) == 0)
		started++;
	crc_worker(job);
	while (started > 0)
		pthread_join(tids[--started], NULL);
}

/* chunks(): number of work items a record of size bytes is cut into. */
static uint64_t chunks(uint64_t size)
{
	return size ? (size - 1) / CRC_CHUNK + 1 : 1;
}

/*
 * claim_items(): mark every record whose CRC is unknown as ours (BUSY) and
 * cut them into chunks.  @return GFS_OK and *items / *nitems (possibly 0).
 */
static gfs_err claim_items(gfs_tzview *z, crc_item **items, size_t *nitems)
{
	uint64_t cap = 0;
	size_t n = 0;
	crc_item *v;

	for (size_t r = 0; r < z->nrecs; r++)
		if (atomic_load(&z->recs[r].state) == CRC_NONE)
			cap += chunks(z->recs[r].size);
	*items = NULL;
	*nitems = 0;
	if (cap == 0)
		return GFS_OK;
	v = cap <= SIZE_MAX ? gfs_reallocarray(NULL, (size_t)cap, sizeof(*v)) : NULL;
	if (!v)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t r = 0; r < z->nrecs; r++) {
		tz_record *rec = &z->recs[r];
		int state = CRC_NONE;
		uint64_t off = 0;

		/* A record that failed in another thread since the count
		 * may not fit; the caller's crc_one() pass handles it. */
		if (chunks(rec->size) > cap - n ||
		    !atomic_compare_exchange_strong(&rec->state, &state, CRC_BUSY))
			continue;
		do {
			const uint64_t len = min_u64(rec->size - off, CRC_CHUNK);

			assert(n < cap);
			v[n++] = (crc_item){ .rec = r, .off = off, .len = len };
			off += len;
		} while (off < rec->size);
	}
	*items = v;
	*nitems = n;
	return GFS_OK;
}

/* item_sources(): check_sources() of the records job's items belong to. */
static gfs_err item_sources(gfs_tzview *z, const crc_job *job)
{
	size_t *rs = gfs_calloc(job->nitems ? job->nitems : 1, sizeof(*rs));
	size_t n = 0;
	gfs_err err;

	if (!rs)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < job->nitems; i++)
		if (n == 0 || rs[n - 1] != job->items[i].rec)
			rs[n++] = job->items[i].rec;
	err = check_sources(z, rs, n);
	free(rs);
	return err;
}

/*
 * derive_items(): publish the CRC-32 of every record of job that
 * crc_from_sources() gives, and drop its items.
 */
static void derive_items(gfs_tzview *z, crc_job *job)
{
	size_t n = 0;

	for (size_t i = 0; i < job->nitems;) {
		const size_t r = job->items[i].rec;
		size_t j = i;
		uint32_t crc;

		while (j < job->nitems && job->items[j].rec == r)
			j++;
		if (crc_from_sources(z, r, &crc))
			publish(z, r, GFS_OK, crc);
		else
			while (i < j)
				job->items[n++] = job->items[i++];
		i = j;
	}
	job->nitems = n;
}

gfs_err gfs_tzview_compute_crcs(gfs_tzview *z, unsigned nthreads)
{
	crc_job job = { .z = z };
	gfs_err err;

	if (nthreads == 0) {
		const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

		nthreads = ncpu < 1 ? 1 : (unsigned)min_u64((uint64_t)ncpu, CRC_MAX_THREADS);
	}
	nthreads = (unsigned)min_u64(nthreads, CRC_MAX_THREADS);
	err = claim_items(z, &job.items, &job.nitems);
	if (err)
		return err;
	atomic_init(&job.next, 0);
	atomic_init(&job.err, GFS_OK);
	err = item_sources(z, &job);
	if (err)
		job_fail(&job, err);
	else
		derive_items(z, &job);
	if (!err && job.nitems)
		run_job(&job, nthreads);
	err = (gfs_err)atomic_load(&job.err);
	for (size_t i = 0; i < job.nitems;) {
		const size_t r = job.items[i].rec;
		uint32_t crc = job.items[i].crc;

		for (i++; i < job.nitems && job.items[i].rec == r; i++)
			crc = gfs_crc32_combine(crc, job.items[i].crc, job.items[i].len);
		publish(z, r, err, crc);
	}
	free(job.items);
	if (err)
		return gfs_fail(err, "%s", job.msg);
	/* Records other threads were computing meanwhile. */
	for (size_t r = 0; r < z->nrecs; r++) {
		if (atomic_load(&z->recs[r].state) == CRC_DONE)
			continue;
		err = crc_one(z, r);
		if (err)
			return err;
	}
	return GFS_OK;
}

/* ------------------------------------------------------ persistent cache */

/*
 * A remount should not read every tensor again to compute CRCs, so the
 * CRCs of a view are kept in an entry of ctx->crc_cache (crccache.h):
 *
 *   "GFSCRC01", key FNV-1a 64, key CRC-32, key length, nrecs   (u64/u32 LE)
 *   nrecs x (record size u64, CRC u32)
 *   CRC-32 of all the above
 *
 * The key covers the output dtype, the archive prefix, every record's size
 * and layout entry, every piece of those entries, and every source's path,
 * size, mtime (ns), inode and device.  A file is used only if all of it
 * matches; anything else (missing, short, foreign, stale) is ignored and
 * the CRCs are computed as without a cache.  It is written once every CRC
 * is known.
 */
typedef struct keyhash {
	uint64_t fnv;
	uint32_t crc;
	uint64_t len;
} keyhash;

static void kh_put(keyhash *h, const void *data, size_t n)
{
	const uint8_t *p = data;

	for (size_t i = 0; i < n; i++)
		h->fnv = (h->fnv ^ p[i]) * UINT64_C(0x100000001b3);
	h->crc = gfs_crc32(h->crc, p, n);
	h->len += n;
}

static void kh_u64(keyhash *h, uint64_t v)
{
	uint8_t le[8];

	put64(le, v);
	kh_put(h, le, sizeof(le));
}

static void kh_str(keyhash *h, const char *s)
{
	kh_put(h, s, strlen(s) + 1);
}

/* kh_pieces(): a tensor's pieces. */
static void kh_pieces(keyhash *h, const gfs_tensor *t)
{
	kh_u64(h, t->npieces);
	for (size_t p = 0; p < t->npieces; p++) {
		const gfs_piece pcv = gfs_tensor_piece(t, p), *pc = &pcv;
		const uint64_t f[] = { (uint64_t)pc->kind, pc->src, pc->toff, pc->len,
				       pc->src_off, pc->count, pc->dst_stride,
				       pc->src_stride, pc->frame_off, pc->frame_len,
				       pc->frame_size };

		for (size_t k = 0; k < sizeof(f) / sizeof(f[0]); k++)
			kh_u64(h, f[k]);
	}
}

/* kh_compute(): a computed tensor's operation, scale and operands. */
static void kh_compute(keyhash *h, const gfs_layout *l, const gfs_compute *c)
{
	uint64_t scale;

	memcpy(&scale, &c->scale, sizeof(scale));
	kh_u64(h, (uint64_t)c->op);
	kh_u64(h, c->flags);
	kh_u64(h, scale);
	if (c->block[0]) /* DEQUANT, or LORA/DORA of an FP8 weight */
		kh_u64(h, (uint64_t)c->block[0] << 32 | c->block[1]);
	for (int k = 0; k < GFS_OPIN_COUNT; k++) {
		const gfs_tensor *in = c->in[k] >= 0 ? &l->inputs->tensors[c->in[k]] : NULL;

		kh_u64(h, in ? (uint64_t)in->dtype : UINT64_MAX);
		if (in) {
			for (uint32_t d = 0; d < in->ndim; d++)
				kh_u64(h, in->shape[d]);
			kh_pieces(h, in);
		}
	}
}

/* cache_key(): hash the key of z into z->key_*; false if a source is gone. */
static bool cache_key(gfs_tzview *z)
{
	const gfs_layout *l = z->ctx->layout;
	keyhash h = { .fnv = UINT64_C(0xcbf29ce484222325), .crc = 0 };

	kh_str(&h, "gatherfs torch zip CRCs 2"); /* 2: computed from checked sources */
	kh_u64(&h, (uint64_t)z->ctx->want);
	kh_str(&h, z->prefix);
	kh_u64(&h, l->nsources);
	for (size_t i = 0; i < l->nsources; i++) {
		struct stat st;

		if (stat(l->sources[i].abspath, &st) != 0)
			return false;
		kh_str(&h, l->sources[i].abspath);
		kh_u64(&h, (uint64_t)st.st_size);
		kh_u64(&h, (uint64_t)st.st_mtim.tv_sec);
		kh_u64(&h, (uint64_t)st.st_mtim.tv_nsec);
		kh_u64(&h, (uint64_t)st.st_ino);
		kh_u64(&h, (uint64_t)st.st_dev);
	}
	kh_u64(&h, z->nrecs);
	for (size_t r = 0; r < z->nrecs; r++) {
		const tz_record *rec = &z->recs[r];
		const gfs_tensor *t;

		kh_u64(&h, rec->size);
		kh_u64(&h, rec->entry);
		if (rec->entry == NO_ENTRY)
			continue;
		t = gfs_layout_target(l, rec->entry);
		kh_str(&h, t->name);
		kh_u64(&h, (uint64_t)t->dtype);
		kh_u64(&h, t->nbytes);
		kh_pieces(&h, t);
		if (t->comp) /* a computed tensor: its operation and operands */
			kh_compute(&h, l, t->comp);
	}
	z->key_fnv = h.fnv;
	z->key_crc = h.crc;
	z->key_len = h.len;
	return true;
}

enum { CACHE_HDR = 8 + 8 + 4 + 8 + 8, CACHE_REC = 8 + 4 };
static const char CACHE_MAGIC[8] = "GFSCRC01";

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

/* cache_image(): the file contents for z's current CRCs (all known). */
static uint8_t *cache_image(const gfs_tzview *z, size_t *len)
{
	const size_t n = CACHE_HDR + z->nrecs * CACHE_REC + 4;
	uint8_t *img = malloc(n);
	uint8_t *p = img;

	if (!img)
		return NULL;
	memcpy(p, CACHE_MAGIC, sizeof(CACHE_MAGIC));
	p = put64(p + sizeof(CACHE_MAGIC), z->key_fnv);
	p = put32(p, z->key_crc);
	p = put64(p, z->key_len);
	p = put64(p, z->nrecs);
	for (size_t r = 0; r < z->nrecs; r++) {
		p = put64(p, z->recs[r].size);
		p = put32(p, z->recs[r].crc);
	}
	p = put32(p, gfs_crc32(0, img, (size_t)(p - img)));
	assert((size_t)(p - img) == n);
	*len = n;
	return img;
}

/*
 * cache_load(): once per view, compute the key and adopt the cached CRCs
 * of records nobody is computing.  Best effort: never fails.
 */
static void cache_load(gfs_tzview *z)
{
	int state = CACHE_UNTRIED;
	uint8_t *img = NULL;
	size_t len = 0, n;

	if (!z->ctx->crc_cache ||
	    !atomic_compare_exchange_strong(&z->cache_state, &state, CACHE_LOADING))
		return;
	if (!cache_key(z))
		goto out;
	(void)snprintf(z->cache_name, sizeof(z->cache_name), "%016llx-%08lx.crc",
		       (unsigned long long)z->key_fnv, (unsigned long)z->key_crc);
	n = CACHE_HDR + z->nrecs * CACHE_REC + 4;
	img = malloc(n);
	if (!img || !gfs_crccache_get(z->ctx->crc_cache, z->cache_name, img, n, &len))
		goto out;
	if (len != n || memcmp(img, CACHE_MAGIC, sizeof(CACHE_MAGIC)) != 0 ||
	    get64(img + 8) != z->key_fnv || get32(img + 16) != z->key_crc ||
	    get64(img + 20) != z->key_len || get64(img + 28) != z->nrecs ||
	    get32(img + n - 4) != gfs_crc32(0, img, n - 4))
		goto out;
	for (size_t r = 0; r < z->nrecs; r++)
		if (get64(img + CACHE_HDR + r * CACHE_REC) != z->recs[r].size)
			goto out;
	for (size_t r = 0; r < z->nrecs; r++) {
		int none = CRC_NONE;

		if (atomic_compare_exchange_strong(&z->recs[r].state, &none, CRC_BUSY))
			publish(z, r, GFS_OK, get32(img + CACHE_HDR + r * CACHE_REC + 8));
	}
out:
	free(img);
	atomic_store(&z->cache_state, CACHE_LOADED);
}

/* cache_save(): once every CRC is known, write the cache entry (best effort). */
static void cache_save(gfs_tzview *z)
{
	int state = CACHE_LOADED;
	uint8_t *img;
	size_t len;

	if (atomic_load(&z->ndone) != z->nrecs || !z->cache_name[0] ||
	    !atomic_compare_exchange_strong(&z->cache_state, &state, CACHE_SAVED))
		return;
	img = cache_image(z, &len);
	if (img)
		gfs_crccache_put(z->ctx->crc_cache, z->cache_name, img, len);
	free(img);
}

/* ---------------------------------------------------------------- the zip */

/*
 * The zip's headers are written when read.  Record r's local header is at
 * recs[r].hdr_off, its data at recs[r].data_off, its data descriptor right
 * after the data; the central directory's entry r at cd_start[r], the end
 * records at cd_start[nrecs].  The vfile's segments are computed
 * (gfs_vsegs): before each storage record with data a GEN segment of the
 * metadata up to it (meta_gen()), then its TENSOR segment; one GEN segment
 * of the metadata after the last.  Kept per record: its tz_record, its
 * cd_start and, for a storage, its index in tsegs.
 */
enum {
	/* room for any one header: a local header is the largest */
	HDR_MAX = ZIP_LFH + NAME_BUF + ZIP_Z64_LOCAL + ZIP_FB + ZIP_ALIGN,
	DESC_CRC = 4,    /* offset of the CRC in a data descriptor */
	CENTRAL_CRC = 16, /* and in a central directory header */
};

/* known_crc(): make record r's CRC known: r's alone, or with batch every one. */
static gfs_err known_crc(gfs_tzview *z, size_t r, bool batch)
{
	gfs_err err;

	if (atomic_load(&z->recs[r].state) == CRC_DONE)
		return GFS_OK;
	cache_load(z);
	err = batch ? gfs_tzview_compute_crcs(z, 0) : crc_one(z, r);
	if (!err)
		cache_save(z);
	return err;
}

/* record_name(): the full name of record r (written for every header read: no printf). */
static size_t record_name(const gfs_tzview *z, size_t r, char *buf)
{
	const size_t plen = strlen(z->prefix);
	const char *tail = r == 0 ? "/data.pkl" : r == 1 ? "/byteorder"
				: r + 1 == z->nrecs ? "/version" : "/data/";
	size_t n = plen + strlen(tail);

	assert(n + 20 < NAME_BUF);
	memcpy(buf, z->prefix, plen);
	memcpy(buf + plen, tail, n - plen);
	if (r >= 2 && r + 1 < z->nrecs) { /* the storage key, in decimal */
		char digits[20];
		size_t k = 0;

		for (size_t v = r - 2; k == 0 || v > 0; v /= 10)
			digits[k++] = (char)('0' + v % 10);
		while (k > 0)
			buf[n++] = digits[--k];
	}
	buf[n] = '\0';
	return n;
}

/* record_mem(): the bytes of a metadata record; NULL for a storage. */
static const void *record_mem(const gfs_tzview *z, size_t r)
{
	if (r == 0)
		return z->pkl;
	if (r == 1)
		return REC_BYTEORDER;
	if (r + 1 == z->nrecs)
		return REC_VERSION;
	return NULL;
}

/*
 * local_header(): record r's local header, starting at hdr_off, into h (with
 * FB padding so that the data starts 64-byte aligned); its length.
 */
static size_t local_header(const gfs_tzview *z, size_t r, uint64_t hdr_off, uint8_t *h)
{
	const bool z64 = z->recs[r].size >= ZIP_MAX32;
	const size_t xz64 = z64 ? ZIP_Z64_LOCAL : 0;
	char name[NAME_BUF];
	const size_t nlen = record_name(z, r, name);
	const uint64_t pad =
		(ZIP_ALIGN - (hdr_off + ZIP_LFH + nlen + xz64 + ZIP_FB) % ZIP_ALIGN) % ZIP_ALIGN;
	uint8_t *p = h;

	p = put32(p, 0x04034b50);
	p = put16(p, z64 ? ZIP_NEED_Z64 : ZIP_NEED);
	p = put16(p, ZIP_FLAGS);
	p = put16(p, 0); /* STORED */
	p = put16(p, 0); /* time */
	p = put16(p, ZIP_DOS_DATE);
	p = put32(p, 0); /* CRC and sizes: in the data descriptor (flag bit 3) */
	p = put32(p, 0);
	p = put32(p, 0);
	p = put16(p, nlen);
	p = put16(p, xz64 + ZIP_FB + pad);
	memcpy(p, name, nlen);
	p += nlen;
	if (z64) {
		p = put16(p, 0x0001);
		p = put16(p, 16);
		p = put64(p, 0);
		p = put64(p, 0);
	}
	*p++ = 'F';
	*p++ = 'B';
	p = put16(p, pad);
	memset(p, 'Z', (size_t)pad);
	p += pad;
	assert((size_t)(p - h) <= HDR_MAX);
	assert((hdr_off + (uint64_t)(p - h)) % ZIP_ALIGN == 0);
	return (size_t)(p - h);
}

/* descriptor(): the data descriptor of rec into h, CRC field 0; its length. */
static size_t descriptor(const tz_record *rec, uint8_t *h)
{
	uint8_t *p = h;

	p = put32(p, 0x08074b50);
	p = put32(p, 0); /* CRC, at DESC_CRC */
	if (rec->size >= ZIP_MAX32) {
		p = put64(p, rec->size);
		p = put64(p, rec->size);
	} else {
		p = put32(p, rec->size);
		p = put32(p, rec->size);
	}
	return (size_t)(p - h);
}

/* central(): record r's central directory header into h, CRC field 0; its length. */
static size_t central(const gfs_tzview *z, size_t r, uint8_t *h)
{
	const tz_record *rec = &z->recs[r];
	const bool zsize = rec->size >= ZIP_MAX32;
	const bool zoff = rec->hdr_off >= ZIP_MAX32;
	const size_t xlen = zsize || zoff ? 4 + (zsize ? 16 : 0) + (zoff ? 8 : 0) : 0;
	char name[NAME_BUF];
	const size_t nlen = record_name(z, r, name);
	uint8_t *p = h;

	p = put32(p, 0x02014b50);
	p = put16(p, ZIP_MADE_BY);
	p = put16(p, xlen ? ZIP_NEED_Z64 : ZIP_NEED);
	p = put16(p, ZIP_FLAGS);
	p = put16(p, 0); /* STORED */
	p = put16(p, 0);
	p = put16(p, ZIP_DOS_DATE);
	p = put32(p, 0); /* CRC, at CENTRAL_CRC */
	p = put32(p, zsize ? ZIP_MAX32 : rec->size);
	p = put32(p, zsize ? ZIP_MAX32 : rec->size);
	p = put16(p, nlen);
	p = put16(p, xlen);
	p = put16(p, 0); /* comment */
	p = put16(p, 0); /* disk */
	p = put16(p, 0); /* internal attributes */
	p = put32(p, (uint64_t)ZIP_EXT_ATTR << 16);
	p = put32(p, zoff ? ZIP_MAX32 : rec->hdr_off);
	memcpy(p, name, nlen);
	p += nlen;
	if (xlen) {
		p = put16(p, 0x0001);
		p = put16(p, xlen - 4);
		if (zsize) {
			p = put64(p, rec->size);
			p = put64(p, rec->size);
		}
		if (zoff)
			p = put64(p, rec->hdr_off);
	}
	assert((size_t)(p - h) <= HDR_MAX);
	return (size_t)(p - h);
}

/* end_records(): ZIP64 end of central directory, its locator and the EOCD into h. */
static size_t end_records(const gfs_tzview *z, uint8_t *h)
{
	const uint64_t eocd64 = z->cd_start[z->nrecs];
	const uint64_t cd_off = z->cd_start[0];
	const uint64_t cd_size = eocd64 - cd_off;
	const uint64_t n = z->nrecs;
	uint8_t *p = h;

	p = put32(p, 0x06064b50);
	p = put64(p, ZIP_EOCD64 - 12);
	p = put16(p, ZIP_MADE_BY);
	p = put16(p, ZIP_NEED_Z64);
	p = put32(p, 0);
	p = put32(p, 0);
	p = put64(p, n);
	p = put64(p, n);
	p = put64(p, cd_size);
	p = put64(p, cd_off);
	p = put32(p, 0x07064b50);
	p = put32(p, 0);
	p = put64(p, eocd64);
	p = put32(p, 1);
	p = put32(p, 0x06054b50);
	p = put16(p, 0);
	p = put16(p, 0);
	p = put16(p, min_u64(n, 0xFFFF));
	p = put16(p, min_u64(n, 0xFFFF));
	p = put32(p, min_u64(cd_size, ZIP_MAX32));
	p = put32(p, min_u64(cd_off, ZIP_MAX32));
	p = put16(p, 0);
	assert(p == h + ZIP_EOCD64 + ZIP_LOC64 + ZIP_EOCD);
	return (size_t)(p - h);
}

/*
 * rec_at(): the record whose local header, data or descriptor holds byte
 * pos; hint (or the record after it) first, as reads go forward.
 */
static size_t rec_at(const gfs_tzview *z, uint64_t pos, size_t hint)
{
	size_t lo = 0, hi = z->nrecs;

	for (size_t r = hint; r < z->nrecs && r <= hint + 1; r++)
		if (z->recs[r].hdr_off <= pos &&
		    (r + 1 == z->nrecs || pos < z->recs[r + 1].hdr_off))
			return r;

	while (hi - lo > 1) {
		const size_t mid = lo + (hi - lo) / 2;

		if (z->recs[mid].hdr_off <= pos)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* cd_at(): the central directory entry holding byte pos. */
static size_t cd_at(const gfs_tzview *z, uint64_t pos)
{
	size_t lo = 0, hi = z->nrecs;

	while (hi - lo > 1) {
		const size_t mid = lo + (hi - lo) / 2;

		if (z->cd_start[mid] <= pos)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/*
 * meta_gen(): the GEN callback of the metadata: bytes [arg + off, arg + off
 * + len) of the file, none of them a storage's data.  A CRC field is
 * computed only when asked for: a descriptor's for its record alone, a
 * central directory's with every other one (one parallel pass).
 */
static gfs_err meta_gen(void *ctx, uint64_t arg, uint64_t off, uint8_t *buf, size_t len)
{
	gfs_tzview *z = ctx;
	uint64_t pos = arg + off;
	size_t hint = SIZE_MAX;

	while (len > 0) {
		uint8_t h[HDR_MAX];
		const uint8_t *src = h;
		uint64_t start, n, in;
		size_t r = 0, crc_at = SIZE_MAX, take;

		if (pos < z->cd_start[0]) {
			const tz_record *rec = &z->recs[r = hint = rec_at(z, pos, hint)];

			if (pos < rec->data_off) {
				start = rec->hdr_off;
				n = local_header(z, r, rec->hdr_off, h);
			} else if (pos - rec->data_off < rec->size) {
				start = rec->data_off;
				n = rec->size;
				src = record_mem(z, r);
				assert(src);
			} else {
				start = rec->data_off + rec->size;
				n = descriptor(rec, h);
				crc_at = DESC_CRC;
			}
		} else if (pos < z->cd_start[z->nrecs]) {
			r = cd_at(z, pos);
			start = z->cd_start[r];
			n = central(z, r, h);
			crc_at = CENTRAL_CRC;
		} else {
			start = z->cd_start[z->nrecs];
			n = end_records(z, h);
		}
		in = pos - start;
		assert(in < n);
		take = (size_t)min_u64(n - in, len);
		if (crc_at != SIZE_MAX && in < crc_at + 4 && in + take > crc_at) {
			const gfs_err err = known_crc(z, r, crc_at == CENTRAL_CRC);

			if (err)
				return err;
			put32(h + crc_at, z->recs[r].crc);
		}
		memcpy(buf, src + in, take);
		buf += take;
		pos += take;
		len -= take;
	}
	return GFS_OK;
}

/* tz_seg(): segment i of the zip (a gfs_vsegs seg function). */
static void tz_seg(const void *ctx, size_t i, gfs_seg *out)
{
	const gfs_tzview *z = ctx;
	const size_t j = i / 2;

	assert(j <= z->ntsegs);
	if (i % 2) {
		const tz_record *rec = &z->recs[z->tsegs[j]];

		*out = (gfs_seg){ .voff = rec->data_off, .len = rec->size, .kind = GFS_SEG_TENSOR,
				  .u.tensor = { .entry = rec->entry, .guard = &z->guard,
						.guard_arg = z->tsegs[j] } };
	} else {
		const tz_record *prev = j ? &z->recs[z->tsegs[j - 1]] : NULL;
		const uint64_t start = prev ? prev->data_off + prev->size : 0;
		const uint64_t end = j < z->ntsegs ? z->recs[z->tsegs[j]].data_off : z->size;

		*out = (gfs_seg){ .voff = start, .len = end - start, .kind = GFS_SEG_GEN,
				  .u.gen = { .gen = &z->meta, .arg = start } };
	}
}

/* tz_find(): the segment holding byte off (a gfs_vsegs find function). */
static size_t tz_find(const void *ctx, uint64_t off)
{
	const gfs_tzview *z = ctx;
	size_t lo = 0, hi = z->ntsegs; /* the storages with data_off <= off: [0, lo) */

	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;

		if (z->recs[z->tsegs[mid]].data_off <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return 0;
	{
		const tz_record *rec = &z->recs[z->tsegs[lo - 1]];

		return off - rec->data_off < rec->size ? 2 * lo - 1 : 2 * lo;
	}
}

/* init_records(): sizes, entries and known CRCs of every record. */
static gfs_err init_records(gfs_tzview *z, const size_t *keys, size_t nkeys)
{
	z->nrecs = nkeys + 3;
	z->recs = gfs_calloc(z->nrecs, sizeof(*z->recs));
	if (!z->recs)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t r = 0; r < z->nrecs; r++) {
		tz_record *rec = &z->recs[r];
		const void *mem = record_mem(z, r);

		rec->entry = NO_ENTRY;
		atomic_init(&rec->src_ok, false);
		if (r == 0) {
			rec->size = z->pkl_len;
		} else if (mem) {
			rec->size = strlen(mem);
		} else {
			rec->entry = keys[r - 2];
			rec->size = gfs_tensor_out_nbytes(z->ctx->layout, rec->entry,
							  z->ctx->want);
		}
		if (mem || rec->size == 0) {
			rec->crc = gfs_crc32(0, mem, (size_t)rec->size);
			atomic_init(&rec->state, CRC_DONE);
			atomic_fetch_add(&z->ndone, 1);
		} else {
			atomic_init(&rec->state, CRC_NONE);
		}
	}
	return GFS_OK;
}

/* compose(): where every record, header and directory entry goes, and the vfile. */
static gfs_err compose(gfs_tzview *z)
{
	uint8_t h[HDR_MAX];
	uint64_t pos = 0;
	gfs_err err = GFS_OK;

	z->cd_start = gfs_calloc(z->nrecs + 1, sizeof(*z->cd_start));
	z->tsegs = gfs_calloc(z->nrecs, sizeof(*z->tsegs));
	if (!z->cd_start || !z->tsegs)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t r = 0; r < z->nrecs && !err; r++) {
		tz_record *rec = &z->recs[r];

		rec->hdr_off = pos;
		err = gfs_vfile_size_add(&pos, local_header(z, r, pos, h));
		rec->data_off = pos;
		if (!err)
			err = gfs_vfile_size_add(&pos, rec->size);
		if (!err)
			err = gfs_vfile_size_add(&pos, descriptor(rec, h));
		if (rec->entry != NO_ENTRY && rec->size > 0)
			z->tsegs[z->ntsegs++] = r;
	}
	for (size_t r = 0; r < z->nrecs && !err; r++) {
		z->cd_start[r] = pos;
		err = gfs_vfile_size_add(&pos, central(z, r, h));
	}
	z->cd_start[z->nrecs] = pos;
	if (!err)
		err = gfs_vfile_size_add(&pos, end_records(z, h));
	if (err)
		return err;
	z->size = pos;
	return gfs_vfile_new_computed(z->ctx, &(gfs_vsegs){ .seg = tz_seg, .find = tz_find,
							     .ctx = z, .n = 2 * z->ntsegs + 1,
							     .size = z->size },
				      &z->vf);
}

/* keep_pickle(): z takes the bytes of b (emptied) as its data.pkl. */
static gfs_err keep_pickle(gfs_tzview *z, gfs_buf *b)
{
	uint8_t *p;

	if (b->oom)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory writing data.pkl");
	assert(b->len > 0); /* PROTO at least: realloc() never frees */
	p = realloc(b->p, b->len);
	if (!p)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory writing data.pkl");
	z->pkl = p;
	z->pkl_len = b->len;
	*b = (gfs_buf){ 0 };
	return GFS_OK;
}

/* tz_alloc(): an empty view of ctx with archive prefix `prefix`. */
static gfs_err tz_alloc(const gfs_vctx *ctx, const char *prefix, gfs_tzview **out)
{
	gfs_tzview *z;

	assert(ctx->layout->finished);
	if (!*prefix || strlen(prefix) > PREFIX_MAX || strchr(prefix, '/'))
		return gfs_fail(GFS_ERR_INVAL, "invalid archive prefix \"%s\"", prefix);
	z = calloc(1, sizeof(*z));
	if (!z)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (pthread_mutex_init(&z->lock, NULL) != 0) {
		free(z);
		return gfs_fail(GFS_ERR_NOMEM, "cannot create a mutex");
	}
	if (pthread_cond_init(&z->cond, NULL) != 0) {
		pthread_mutex_destroy(&z->lock);
		free(z);
		return gfs_fail(GFS_ERR_NOMEM, "cannot create a condition variable");
	}
	z->ctx = ctx;
	z->meta = (gfs_vgen){ .fn = meta_gen, .ctx = z };
	z->guard = (gfs_vgen){ .fn = src_guard, .ctx = z };
	z->prefix = gfs_strdup(prefix);
	if (!z->prefix) {
		gfs_tzview_free(z);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	*out = z;
	return GFS_OK;
}

gfs_err gfs_tzview_new(const gfs_vctx *ctx, const char *prefix, const size_t *entries,
		       size_t n, gfs_tzview **out)
{
	pkbuf pk = { 0 };
	size_t *all = NULL;
	size_t *keys;
	size_t nkeys = 0;
	gfs_tzview *z;
	gfs_err err = tz_alloc(ctx, prefix, &z);

	if (err)
		return err;
	if (!entries) {
		n = ctx->layout->ntensors;
		all = gfs_calloc(n, sizeof(*all));
		for (size_t i = 0; all && i < n; i++)
			all[i] = i;
		entries = all;
	}
	keys = gfs_calloc(n, sizeof(*keys));
	if (!keys || !entries)
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	else
		err = build_pickle(ctx, entries, n, &pk, keys, &nkeys);
	if (!err)
		err = keep_pickle(z, &pk.buf);
	if (!err)
		err = init_records(z, keys, nkeys);
	if (!err)
		err = compose(z);
	free(keys);
	free(all);
	free(pk.buf.p);
	if (err) {
		gfs_tzview_free(z);
		return err;
	}
	*out = z;
	return GFS_OK;
}

/* ------------------------------------------------------- pickle writer */

struct gfs_pkw {
	const gfs_vctx *ctx;
	pkbuf b;
	pk_memos m;
	size_t *keys; /* layout entry of each storage key */
	size_t nkeys;
	size_t cap_keys;
	size_t cap_key_persid; /* of m.key_persid */
};

gfs_err gfs_pkw_new(const gfs_vctx *ctx, gfs_pkw **out)
{
	gfs_pkw *w = calloc(1, sizeof(*w));

	if (!w)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	w->ctx = ctx;
	/* memos per key, not per layout entry: O(1) to set up (the universal
	 * view makes one writer per file) */
	memset(w->m.storage, 0xff, sizeof(w->m.storage));
	memset(w->m.dtg, 0xff, sizeof(w->m.dtg));
	w->m.odict = w->m.rebuild = w->m.rebuild3 = w->m.untyped = UINT32_MAX;
	pk_put(&w->b, "\x80\x02", 2); /* PROTO 2 */
	*out = w;
	return GFS_OK;
}

void gfs_pkw_free(gfs_pkw *w)
{
	if (!w)
		return;
	free(w->m.key_persid);
	free(w->keys);
	free(w->b.buf.p);
	free(w);
}

void gfs_pkw_op(gfs_pkw *w, char op)
{
	pk_op(&w->b, (uint8_t)op);
}

void gfs_pkw_int(gfs_pkw *w, int64_t v)
{
	if (v >= 0) {
		pk_int(&w->b, (uint64_t)v);
	} else if (v >= INT32_MIN) {
		uint8_t tmp[5] = { 'J' }; /* BININT: signed 32-bit */

		put32(tmp + 1, (uint32_t)(int32_t)v);
		pk_put(&w->b, tmp, sizeof(tmp));
	} else {
		uint8_t tmp[2 + 8] = { 0x8a, 8 }; /* LONG1, 8 bytes two's complement */

		put64(tmp + 2, (uint64_t)v);
		pk_put(&w->b, tmp, sizeof(tmp));
	}
}

void gfs_pkw_float(gfs_pkw *w, double v)
{
	uint8_t tmp[9] = { 'G' }; /* BINFLOAT: big-endian IEEE 754 double */
	uint64_t bits;

	memcpy(&bits, &v, sizeof(bits));
	for (int i = 0; i < 8; i++)
		tmp[1 + i] = (uint8_t)(bits >> (56 - 8 * i));
	pk_put(&w->b, tmp, sizeof(tmp));
}

void gfs_pkw_str(gfs_pkw *w, const char *s)
{
	pk_str(&w->b, s);
}

gfs_err gfs_pkw_tensor(gfs_pkw *w, size_t entry, uint32_t ndim, const uint64_t *shape,
		       bool requires_grad)
{
	assert(entry < gfs_layout_nentries(w->ctx->layout));
	if (!gfs_grow((void **)&w->keys, &w->cap_keys, w->nkeys, sizeof(*w->keys), 4) ||
	    !gfs_grow((void **)&w->m.key_persid, &w->cap_key_persid, w->nkeys,
		      sizeof(*w->m.key_persid), 4))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	return pk_tensor_as(&w->b, w->ctx, &w->m, entry, ndim, shape, requires_grad, w->keys,
			    &w->nkeys);
}

gfs_err gfs_tzview_new_pickle(gfs_pkw *w, const char *prefix, gfs_tzview **out)
{
	gfs_tzview *z;
	gfs_err err = tz_alloc(w->ctx, prefix, &z);

	if (err)
		return err;
	pk_op(&w->b, '.'); /* STOP */
	err = keep_pickle(z, &w->b.buf);
	if (!err)
		err = init_records(z, w->keys, w->nkeys);
	if (!err)
		err = compose(z);
	if (err) {
		gfs_tzview_free(z);
		return err;
	}
	*out = z;
	return GFS_OK;
}

void gfs_tzview_free(gfs_tzview *z)
{
	if (!z)
		return;
	gfs_vfile_free(z->vf);
	free(z->recs);
	free(z->cd_start);
	free(z->tsegs);
	free(z->pkl);
	free(z->prefix);
	pthread_cond_destroy(&z->cond);
	pthread_mutex_destroy(&z->lock);
	free(z);
}

const gfs_vfile *gfs_tzview_vfile(const gfs_tzview *z)
{
	return z->vf;
}
