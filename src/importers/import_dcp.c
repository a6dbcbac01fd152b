/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — PyTorch Distributed Checkpoint (DCP) importer.
 *
 * Reads `.metadata` (a pickled torch.distributed.checkpoint Metadata) with
 * the safe pickle reader.  For every key of state_dict_metadata, in order:
 *   - TensorStorageMetadata: its global size, dtype and chunks (N-D boxes).
 *     Each chunk's _StorageInfo names a .distcp file, an offset and a length
 *     holding a complete torch.save zip of the chunk (optionally one zstd
 *     frame of it: transform "stream.zstd/1").  The inner zip's data.pkl
 *     gives the storage record and offset of the chunk's bytes.  A chunk
 *     becomes one contiguous piece, or strided pieces when it is split on an
 *     inner dimension (count runs of a row block each).
 *   - BytesStorageMetadata: a non-tensor entry (gfs_layout.objects).
 * Chunks must tile each tensor exactly; items must lie inside their files.
 * Tensor payloads are never read; a zstd item is decompressed once (into
 * an anonymous memory file, then dropped) to read its zip directory.
 *
 * Lazy chunks: an uncompressed item whose shape (dcp_shape) was seen is
 * not opened; its record is placed where the sampled archive of that shape
 * held its own, as a lazy record the first check confirms
 * (gfs_dcp_confirm()).
 */
#define _GNU_SOURCE
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "gatherfs/importers/import.h"
#include "gatherfs/readers/dcpmeta.h"
#include "gatherfs/readers/pickle.h"
#include "gatherfs/readers/torchzip.h"
#include "gatherfs/util/pfor.h"

#define DCP_MAX_METADATA ((uint64_t)1 << 30)
#define DCP_MAX_INNER_PICKLE ((uint64_t)1 << 24)
#define DCP_MAX_FRAME ((uint64_t)1 << 34)
#define DCP_MAX_PIECES ((uint64_t)1 << 24)
#define DCP_ZSTD_DESCRIPTOR "stream.zstd/1"
#define DCP_MAX_SHAPES 256         /* item shapes learned; past them, chunks are opened */
#define DCP_SHAPE_MOD 4096         /* tensor bytes of one shape agree modulo this */
#define DCP_RNAME_MAX 512
#define DCP_HASH_CACHE 4096        /* fqn hashes remembered by string id (a power of 2) */
#define DCP_HASH_WAYS 4            /* in sets of this many: ids that share a slot do not evict each other */
#define DCP_PROBE_BATCH 64         /* storage-item probes whose slots are prefetched together */

/*
 * A shape of chunk archive: items of extra bytes besides their tensor's,
 * whose tensor bytes are mod modulo DCP_SHAPE_MOD, past 4 GiB or not.
 * torch.save lays such archives out alike (records aligned in the item,
 * the same names); the sampled one held its storage record, exactly the
 * tensor's bytes, at roff in the item.
 */
typedef struct dcp_shape {
	uint64_t extra;
	uint64_t roff;
	uint32_t mod;
	bool big;
	char rname[DCP_RNAME_MAX];
} dcp_shape;

/* One .distcp file named by the storage data. */
typedef struct dcp_file {
	char *rel;   /* relative_path as stored */
	char *path;  /* dir/rel, for messages */
	int fd;
	uint64_t size;
	uint32_t src; /* layout source index */
} dcp_file;

typedef struct dcp_ckpt {
	const char *dir;
	char *meta_path;
	gfs_dcpmeta *md;
	uint64_t *itab;    /* storage items by (fqn, offset): index + 1 | key hash << 32 */
	size_t itab_cap;   /* two halves (a key's top bit picks one), each probed on its own */
	dcp_file *files;
	size_t nfiles, cap_files;
	uint32_t *fkey;    /* relative_path string id + 1 -> its file (fval), open addressing */
	uint32_t *fval;
	size_t fcap, fused;
	gfs_layout *l;
	uint64_t npieces;
	bool zstd;
	bool eager;        /* GATHERFS_DCP_EAGER: open every chunk archive */
	uint32_t hc_id[DCP_HASH_CACHE]; /* fqn_hash(): string id + 1 (0: empty) */
	uint64_t hc_h[DCP_HASH_CACHE];  /* and its str_hash() */
	uint32_t hc_next;               /* the way a miss replaces next (round robin) */
	dcp_shape *shapes; /* [DCP_MAX_SHAPES] */
	size_t nshapes;
	size_t nlazy;      /* chunks not opened */
} dcp_ckpt;

/* Where the bytes of one chunk are. */
typedef struct chunk_loc {
	gfs_piece_kind kind;
	uint32_t src;
	uint64_t off;        /* FILE: file offset; ZSTD: decompressed offset */
	uint64_t frame_off;
	uint64_t frame_len;
	uint64_t frame_size;
} chunk_loc;

/* ------------------------------------------------------------ metadata */

/* ints(): the int tuple id (a torch.Size) of non-negative ints into out[]. */
static bool ints(const gfs_dcpmeta *md, uint32_t id, uint32_t *n, uint64_t *out)
{
	uint32_t len = 0;
	const int64_t *v = gfs_dcpmeta_ints(md, id, &len);

	if (!v || len > GFS_MAX_DIMS)
		return false;
	for (uint32_t i = 0; i < len; i++) {
		if (v[i] < 0)
			return false;
		out[i] = (uint64_t)v[i];
	}
	*n = len;
	return true;
}

static uint64_t str_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	return h;
}

/*
 * fqn_hash(): str_hash() of string id fqn_id (fqn), remembered by id in a
 * set-associative cache: storage items come rank after rank, each rank
 * naming every fqn, so a direct-mapped cache would hash the two names of
 * every colliding pair once a rank.
 */
static uint64_t fqn_hash(dcp_ckpt *c, uint32_t fqn_id, const char *fqn)
{
	const size_t set = (size_t)(((uint64_t)fqn_id * 0x9e3779b97f4a7c15ULL) >> 32) &
			   (DCP_HASH_CACHE / DCP_HASH_WAYS - 1);
	const size_t base = set * DCP_HASH_WAYS;
	size_t s;

	for (s = base; s < base + DCP_HASH_WAYS; s++)
		if (c->hc_id[s] == fqn_id + 1)
			return c->hc_h[s];
	s = base + c->hc_next++ % DCP_HASH_WAYS;
	c->hc_id[s] = fqn_id + 1;
	c->hc_h[s] = str_hash(fqn);
	return c->hc_h[s];
}

/* item_key(): the hash of (fqn, offset); its low bits pick the slot, its high 32 are kept. */
static uint64_t item_key(uint64_t fqn_hash, uint32_t offset)
{
	uint64_t h = fqn_hash ^ ((uint64_t)offset * 0x9e3779b97f4a7c15ULL);

	h ^= h >> 29;
	return h * 0xbf58476d1ce4e5b9ULL;
}

/* item_slot(): the first slot item_probe() of key k reads (in the half k's top bit picks). */
static inline size_t item_slot(const dcp_ckpt *c, uint64_t k)
{
	const size_t half = c->itab_cap / 2;

	return (size_t)(k >> 63) * half + ((size_t)k & (half - 1));
}

/*
 * item_probe(): the storage item of (fqn, offset), offset an int tuple id
 * (equal tuples have one id) or GFS_DCP_NONE; fqn_id is fqn's string id
 * and k item_key() of them.  Slots whose kept hash differs are passed
 * without reading their item; an item naming the same string id needs no
 * strcmp.  @return the item, or NULL and *empty the free slot that ended
 * the probe (where such an item goes).
 */
static const gfs_dcp_item *item_probe(const dcp_ckpt *c, uint32_t fqn_id, const char *fqn,
				      uint64_t k, uint32_t offset, size_t *empty)
{
	const size_t half = c->itab_cap / 2, base = (size_t)(k >> 63) * half;

	for (size_t s = item_slot(c, k);; s = base + ((s + 1) & (half - 1))) {
		const gfs_dcp_item *it;

		if (!c->itab[s]) {
			*empty = s;
			return NULL;
		}
		if (c->itab[s] >> 32 != k >> 32)
			continue;
		it = &c->md->items[(uint32_t)c->itab[s] - 1];
		if (it->offset == offset &&
		    (it->fqn == fqn_id || strcmp(gfs_dcpmeta_str(c->md, it->fqn), fqn) == 0))
			return it;
	}
}

/* item_find(): item_probe() of (fqn, offset), h str_hash(fqn). */
static const gfs_dcp_item *item_find(const dcp_ckpt *c, uint32_t fqn_id, const char *fqn,
				     uint64_t h, uint32_t offset)
{
	size_t empty;

	return item_probe(c, fqn_id, fqn, item_key(h, offset), offset, &empty);
}

/*
 * The storage items of the chunks of the imported tensors, looked up ahead
 * of import_tensor() on gfs_pfor() threads (chunk_items_find()).  Entry i
 * owns res[base[i], base[i + 1]) if own[i]: a tensor entry of the prefix,
 * the first entry naming its tensor (a memoized tensor named by several
 * entries is looked up in import_tensor(), chunk by chunk).
 */
typedef struct chunk_items {
	const dcp_ckpt *c;
	size_t *base;    /* [nentries + 1], non-decreasing */
	bool *own;       /* [nentries] */
	uint32_t *res;   /* [base[nentries]]: item index + 1, 0 if none */
} chunk_items;

#define CHUNK_ITEMS_BLOCK 4096 /* results a gfs_pfor() step fills */

/* chunk_items_free(): free what ci holds and empty it. */
static void chunk_items_free(chunk_items *ci)
{
	free(ci->base);
	free(ci->own);
	free(ci->res);
	*ci = (chunk_items){ 0 };
}

/* chunk_items_block(): fill res[b * CHUNK_ITEMS_BLOCK, ...) (a gfs_pfor() body). */
static gfs_err chunk_items_block(void *ctx, size_t b)
{
	const chunk_items *ci = ctx;
	const dcp_ckpt *c = ci->c;
	const size_t n = ci->base[c->md->nentries];
	const size_t p0 = b * CHUNK_ITEMS_BLOCK;
	const size_t p1 = n - p0 < CHUNK_ITEMS_BLOCK ? n : p0 + CHUNK_ITEMS_BLOCK;
	size_t lo = 0, hi = c->md->nentries, e;
	uint64_t h = 0;

	while (hi - lo > 1) { /* the last entry with base <= p0 */
		const size_t mid = lo + (hi - lo) / 2;

		if (ci->base[mid] <= p0)
			lo = mid;
		else
			hi = mid;
	}
	e = lo;
	h = str_hash(gfs_dcpmeta_str(c->md, c->md->entries[e].fqn));
	for (size_t q0 = p0; q0 < p1; q0 += DCP_PROBE_BATCH) {
		const size_t q1 = p1 - q0 < DCP_PROBE_BATCH ? p1 : q0 + DCP_PROBE_BATCH;
		uint64_t key[DCP_PROBE_BATCH];
		uint32_t ent[DCP_PROBE_BATCH];

		for (size_t q = q0; q < q1; q++) {
			const gfs_dcp_chunk *ch;

			while (ci->base[e + 1] <= q) {
				e++;
				if (ci->base[e + 1] > q)
					h = str_hash(gfs_dcpmeta_str(c->md, c->md->entries[e].fqn));
			}
			ch = &c->md->chunks[c->md->tensors[c->md->entries[e].tensor].first +
					    (q - ci->base[e])];
			key[q - q0] = item_key(h, ch->offsets);
			ent[q - q0] = (uint32_t)e;
			__builtin_prefetch(&c->itab[item_slot(c, key[q - q0])]);
		}
		for (size_t q = q0; q < q1; q++) {
			const gfs_dcp_entry *en = &c->md->entries[ent[q - q0]];
			const gfs_dcp_chunk *ch = &c->md->chunks[c->md->tensors[en->tensor].first +
								 (q - ci->base[ent[q - q0]])];
			const gfs_dcp_item *it;
			size_t empty;

			it = item_probe(c, en->fqn, gfs_dcpmeta_str(c->md, en->fqn), key[q - q0],
					ch->offsets, &empty);
			ci->res[q] = it ? (uint32_t)(it - c->md->items) + 1 : 0;
		}
	}
	return GFS_OK;
}

/*
 * chunk_items_find(): ci->base, own and res for the entries of the prefix
 * (plen bytes; 0: all), the lookups on gfs_pfor() threads.  @return
 * GFS_OK, or GFS_ERR_NOMEM (ci then holds nothing to free).
 */
static gfs_err chunk_items_find(const dcp_ckpt *c, const char *prefix, size_t plen,
				chunk_items *ci)
{
	const gfs_dcpmeta *md = c->md;
	bool *seen = gfs_calloc(md->ntensors ? md->ntensors : 1, sizeof(*seen));
	size_t n = 0;
	gfs_err err;

	*ci = (chunk_items){ .c = c };
	ci->base = gfs_calloc(md->nentries + 1, sizeof(*ci->base));
	ci->own = gfs_calloc(md->nentries ? md->nentries : 1, sizeof(*ci->own));
	if (!seen || !ci->base || !ci->own)
		goto nomem;
	for (size_t i = 0; i < md->nentries; i++) {
		const gfs_dcp_entry *e = &md->entries[i];

		ci->base[i] = n;
		if (e->kind != GFS_DCP_TENSOR || seen[e->tensor] ||
		    (plen && strncmp(gfs_dcpmeta_str(md, e->fqn), prefix, plen) != 0))
			continue;
		seen[e->tensor] = true;
		ci->own[i] = true;
		n += md->tensors[e->tensor].nchunks;
	}
	ci->base[md->nentries] = n;
	ci->res = gfs_calloc(n ? n : 1, sizeof(*ci->res));
	if (!ci->res)
		goto nomem;
	free(seen);
	err = gfs_pfor((n + CHUNK_ITEMS_BLOCK - 1) / CHUNK_ITEMS_BLOCK, chunk_items_block, ci);
	if (err)
		chunk_items_free(ci);
	return err;
nomem:
	free(seen);
	chunk_items_free(ci);
	return gfs_fail(GFS_ERR_NOMEM, "out of memory");
}

/* One half of the item table's build (items_index()): the keys' top bit picks it. */
typedef struct item_half {
	dcp_ckpt *c;
	const uint64_t *keys;
	size_t dup[2]; /* the first item each half found listed before; SIZE_MAX: none */
} item_half;

/*
 * items_insert(): put the items whose key's top bit is h in half h of the
 * table, in item order (a gfs_pfor() body).  One probe an item: it finds
 * a duplicate (the first one is noted, and the half stops), or the slot
 * the item goes in.  The table is much larger than the caches: the slots
 * of a batch of items are prefetched before they are probed.
 */
static gfs_err items_insert(void *ctx, size_t h)
{
	item_half *ih = ctx;
	dcp_ckpt *c = ih->c;
	const size_t n = c->md->nitems;

	for (size_t i0 = 0; i0 < n; i0 += DCP_PROBE_BATCH) {
		const size_t nb = n - i0 < DCP_PROBE_BATCH ? n - i0 : DCP_PROBE_BATCH;

		for (size_t j = i0; j < i0 + nb; j++)
			if (ih->keys[j] >> 63 == h)
				__builtin_prefetch(&c->itab[item_slot(c, ih->keys[j])]);
		for (size_t j = i0; j < i0 + nb; j++) {
			const gfs_dcp_item *it = &c->md->items[j];
			size_t s;

			if (ih->keys[j] >> 63 != h)
				continue;
			if (item_probe(c, it->fqn, gfs_dcpmeta_str(c->md, it->fqn), ih->keys[j],
				       it->offset, &s)) {
				ih->dup[h] = j;
				return GFS_OK;
			}
			c->itab[s] = (ih->keys[j] >> 32 << 32) | (j + 1);
		}
	}
	return GFS_OK;
}

/*
 * items_index(): the table of the storage items by (fqn, offset), built
 * as two halves on two threads; an item listed twice is an error naming
 * the first such item, as a serial build finds it.
 */
static gfs_err items_index(dcp_ckpt *c)
{
	const size_t n = c->md->nitems;
	uint64_t *keys = gfs_calloc(n ? n : 1, sizeof(*keys));
	size_t count[2] = { 0, 0 }, half = 8;
	item_half ih = { .c = c, .keys = keys, .dup = { SIZE_MAX, SIZE_MAX } };
	gfs_err err;

	if (!keys)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		const gfs_dcp_item *it = &c->md->items[i];

		keys[i] = item_key(fqn_hash(c, it->fqn, gfs_dcpmeta_str(c->md, it->fqn)), it->offset);
		count[keys[i] >> 63]++;
	}
	while (half < 2 * (count[0] > count[1] ? count[0] : count[1])) /* each half at most half full */
		half *= 2;
	c->itab_cap = 2 * half;
	c->itab = gfs_calloc(c->itab_cap, sizeof(*c->itab));
	if (!c->itab) {
		free(keys);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	err = gfs_pfor(2, items_insert, &ih);
	free(keys);
	if (!err && (ih.dup[0] != SIZE_MAX || ih.dup[1] != SIZE_MAX))
		err = gfs_fail(GFS_ERR_FORMAT, "%s: storage data lists %s twice at one offset",
			       c->meta_path,
			       gfs_dcpmeta_str(c->md, c->md->items[ih.dup[0] < ih.dup[1] ? ih.dup[0]
											 : ih.dup[1]].fqn));
	return err;
}

static gfs_err read_metadata(dcp_ckpt *c)
{
	uint8_t *buf = NULL;
	struct stat st;
	int fd;
	gfs_err err = gfs_open_regular(c->meta_path, 0, &fd, &st);

	if (err)
		return err;
	if ((uint64_t)st.st_size > DCP_MAX_METADATA || st.st_size == 0) {
		close(fd);
		return gfs_fail(st.st_size ? GFS_ERR_LIMIT : GFS_ERR_FORMAT,
				"%s: %lld bytes is not a plausible DCP .metadata", c->meta_path,
				(long long)st.st_size);
	}
	buf = malloc((size_t)st.st_size);
	if (!buf) {
		close(fd);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	err = gfs_pread_full(fd, buf, (size_t)st.st_size, 0, c->meta_path);
	close(fd);
	if (!err)
		err = gfs_dcp_parse_metadata(buf, (size_t)st.st_size, c->meta_path, &c->md);
	free(buf);
	if (err)
		return err;
	return items_index(c);
}

gfs_err gfs_dcp_parse_metadata(const uint8_t *buf, size_t len, const char *label,
			       gfs_dcpmeta **out)
{
	*out = NULL;
	if (len > UINT32_MAX)
		return gfs_fail(GFS_ERR_LIMIT, "%s: %zu bytes is not a plausible DCP .metadata",
				label, len);
	return gfs_dcpmeta_load(buf, len, label, 0, out);
}

/* ------------------------------------------------------------ files */

static size_t fslot(uint32_t id, size_t cap)
{
	return (size_t)(((uint64_t)id * 0x9e3779b97f4a7c15ULL) >> 20) & (cap - 1);
}

/* file_remember(): map string id rel to file i. */
static gfs_err file_remember(dcp_ckpt *c, uint32_t rel, size_t i)
{
	size_t s;

	if (2 * (c->fused + 1) > c->fcap) {
		const size_t ncap = c->fcap ? 2 * c->fcap : 64;
		uint32_t *k = gfs_calloc(ncap, sizeof(*k)), *v = gfs_calloc(ncap, sizeof(*v));

		if (!k || !v) {
			free(k);
			free(v);
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		}
		for (size_t j = 0; j < c->fcap; j++) {
			if (!c->fkey[j])
				continue;
			for (s = fslot(c->fkey[j] - 1, ncap); k[s]; s = (s + 1) & (ncap - 1))
				;
			k[s] = c->fkey[j];
			v[s] = c->fval[j];
		}
		free(c->fkey);
		free(c->fval);
		c->fkey = k;
		c->fval = v;
		c->fcap = ncap;
	}
	for (s = fslot(rel, c->fcap); c->fkey[s]; s = (s + 1) & (c->fcap - 1))
		;
	c->fkey[s] = rel + 1;
	c->fval[s] = (uint32_t)i;
	c->fused++;
	return GFS_OK;
}

/* file_get(): the file named by string id rel_id, opened on first use. */
static gfs_err file_get(dcp_ckpt *c, uint32_t rel_id, dcp_file **out)
{
	const char *rel = gfs_dcpmeta_str(c->md, rel_id);
	dcp_file *f;
	struct stat st;
	size_t n;

	for (size_t s = c->fcap ? fslot(rel_id, c->fcap) : 0; c->fcap && c->fkey[s];
	     s = (s + 1) & (c->fcap - 1)) {
		if (c->fkey[s] == rel_id + 1) {
			*out = &c->files[c->fval[s]];
			return GFS_OK;
		}
	}
	for (size_t i = 0; i < c->nfiles; i++) {
		if (strcmp(c->files[i].rel, rel) == 0) {
			*out = &c->files[i];
			return file_remember(c, rel_id, i);
		}
	}
	if (rel[0] == '\0' || rel[0] == '/' || strstr(rel, "..") || strchr(rel, '/'))
		return gfs_fail(GFS_ERR_FORMAT, "%s: storage file name '%s' is not a file of the checkpoint directory",
				c->meta_path, rel);
	if (!gfs_grow((void **)&c->files, &c->cap_files, c->nfiles, sizeof(*c->files), 8))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	f = &c->files[c->nfiles];
	memset(f, 0, sizeof(*f));
	f->fd = -1;
	f->rel = gfs_strdup(rel);
	n = strlen(c->dir) + 1 + strlen(rel) + 1;
	f->path = malloc(n);
	if (!f->rel || !f->path) {
		free(f->rel);
		free(f->path);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	snprintf(f->path, n, "%s/%s", c->dir, rel);
	c->nfiles++;
	f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0)
		return gfs_fail(errno == ENOENT ? GFS_ERR_NOTFOUND : GFS_ERR_IO,
				"%s: cannot open: %s (named by %s)", f->path, strerror(errno),
				c->meta_path);
	if (fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode))
		return gfs_fail(GFS_ERR_FORMAT, "%s: not a regular file", f->path);
	f->size = (uint64_t)st.st_size;
	/*
	 * No read-ahead: the import reads a few hundred bytes at each end of
	 * every chunk archive, and read-ahead past them would fill the page
	 * cache with the payloads (holes of sparse files included).
	 */
	(void)posix_fadvise(f->fd, 0, 0, POSIX_FADV_RANDOM);
	*out = f;
	if (file_remember(c, rel_id, c->nfiles - 1))
		return GFS_ERR_NOMEM;
	return gfs_layout_add_source(c->l, rel, f->size, &f->src);
}

/* item_file(): the file and byte range of a storage item, checked. */
static gfs_err item_file(dcp_ckpt *c, const gfs_dcp_item *it, dcp_file **f, uint64_t *off,
			 uint64_t *len)
{
	uint64_t end;
	const gfs_err err = file_get(c, it->rel, f);

	if (err)
		return err;
	*off = it->off;
	*len = it->len;
	if (!gfs_add_u64(*off, *len, &end) || end > (*f)->size)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: item of %s at bytes %llu..+%llu lies past its end (%llu bytes): truncated",
				(*f)->path, gfs_dcpmeta_str(c->md, it->fqn), (unsigned long long)*off,
				(unsigned long long)*len, (unsigned long long)(*f)->size);
	return GFS_OK;
}

/* item_transform(): false for none, true for zstd; other transforms fail. */
static gfs_err item_transform(const dcp_ckpt *c, const gfs_dcp_item *it, bool *zstd)
{
	const char *first = gfs_dcpmeta_str(c->md, it->td0);

	*zstd = false;
	if (it->ntd == 0)
		return GFS_OK;
	if (it->ntd == 1 && first && strcmp(first, DCP_ZSTD_DESCRIPTOR) == 0) {
		*zstd = true;
		return GFS_OK;
	}
	return gfs_fail(GFS_ERR_UNSUPPORTED,
			"%s: %s: unsupported stream transforms (%u, the first '%s'); only a single %s is",
			c->meta_path, gfs_dcpmeta_str(c->md, it->fqn), it->ntd, first ? first : "?",
			DCP_ZSTD_DESCRIPTOR);
}

/*
 * unzstd(): decompress the single frame at [off, off + len) of f into a new
 * anonymous memory file (*mfd) of *size bytes.
 */
static gfs_err unzstd(const dcp_file *f, const char *fqn, uint64_t off, uint64_t len,
		      int *mfd, uint64_t *size)
{
	enum { IN = 1 << 17, OUT = 1 << 18 };
	ZSTD_DCtx *d = ZSTD_createDCtx();
	uint8_t *in = malloc(IN), *outb = malloc(OUT);
	uint64_t done = 0, total = 0;
	bool ended = false;
	gfs_err err = GFS_OK;
	const int fd = memfd_create("gatherfs-dcp", MFD_CLOEXEC);

	*mfd = -1;
	if (!d || !in || !outb || fd < 0) {
		err = fd < 0 ? gfs_fail(GFS_ERR_IO, "memfd_create: %s", strerror(errno))
			     : gfs_fail(GFS_ERR_NOMEM, "out of memory");
		goto out;
	}
	(void)ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, 27);
	while (!err && !ended && done < len) {
		const size_t n = len - done < IN ? (size_t)(len - done) : IN;
		ZSTD_inBuffer ib = { in, n, 0 };

		err = gfs_pread_full(f->fd, in, n, off + done, f->path);
		while (!err) {
			ZSTD_outBuffer ob = { outb, OUT, 0 };
			const size_t ret = ZSTD_decompressStream(d, &ob, &ib);

			if (ZSTD_isError(ret)) {
				err = gfs_fail(GFS_ERR_FORMAT, "%s: %s: zstd frame at offset %llu: %s",
					       f->path, fqn, (unsigned long long)off,
					       ZSTD_getErrorName(ret));
				break;
			}
			if (total + ob.pos > DCP_MAX_FRAME) {
				err = gfs_fail(GFS_ERR_LIMIT, "%s: %s: zstd frame decompresses past %llu bytes",
					       f->path, fqn, (unsigned long long)DCP_MAX_FRAME);
				break;
			}
			if (ob.pos && write(fd, outb, ob.pos) != (ssize_t)ob.pos) {
				err = gfs_fail(GFS_ERR_IO, "memory file: write failed: %s", strerror(errno));
				break;
			}
			total += ob.pos;
			if (ret == 0) {
				ended = true;
				break;
			}
			if (ib.pos == ib.size && ob.pos < ob.size)
				break; /* needs more input */
		}
		done += ib.pos;
	}
	if (!err && (!ended || done != len))
		err = gfs_fail(GFS_ERR_FORMAT,
			       "%s: %s: item at offset %llu is not exactly one zstd frame of %llu bytes (truncated or corrupt)",
			       f->path, fqn, (unsigned long long)off, (unsigned long long)len);
out:
	ZSTD_freeDCtx(d);
	free(in);
	free(outb);
	if (err) {
		if (fd >= 0)
			close(fd);
		return err;
	}
	*mfd = fd;
	*size = total;
	return GFS_OK;
}

/*
 * inner_tensor(): open the torch.save zip occupying [base, base + len) of
 * zfd and find the bytes of its single tensor, which must have dtype dt,
 * shape sizes[0..ndim) (sizes NULL: any) and be contiguous.  *data_off:
 * offset in zfd; *tbytes: the tensor's bytes.  *whole receives the
 * offset, size and stored CRC-32 of the storage record holding it, and
 * rname (rname_n bytes) its name.
 */
static gfs_err inner_tensor(const char *label, int zfd, uint64_t base, uint64_t len,
			    gfs_dtype dt, uint32_t ndim, const uint64_t *sizes,
			    uint64_t *data_off, uint64_t *tbytes, gfs_record *whole, char *rname,
			    size_t rname_n)
{
	gfs_tzip *z = NULL;
	gfs_pickle *pk = NULL;
	const gfs_tzip_record *rec, *srec;
	const gfs_pv *v;
	const gfs_pv_tensor *t;
	uint8_t *buf = NULL;
	size_t blen = 0;
	uint64_t rec_off, rec_size, expect = 1, nbytes = gfs_dtype_size(dt), first, end;
	gfs_dtype got;
	static const gfs_tzip_limits lim = { .windows = true };
	gfs_err err = gfs_tzip_open(zfd, base, len, label, &lim, &z);

	if (err)
		return err;
	rec = gfs_tzip_find(z, "data.pkl");
	if (!rec) {
		err = gfs_fail(GFS_ERR_FORMAT, "%s: no data.pkl in the chunk's archive", label);
		goto out;
	}
	err = gfs_tzip_read_record(z, rec, DCP_MAX_INNER_PICKLE, &buf, &blen);
	if (!err)
		err = gfs_pickle_load(buf, blen, label, NULL, &pk);
	if (err)
		goto out;
	v = gfs_pickle_root(pk);
	if (!v || v->kind != GFS_PV_TENSOR) {
		err = gfs_fail(GFS_ERR_FORMAT, "%s: the chunk's data.pkl holds %s, not a tensor",
			       label, v ? gfs_pv_kind_name(v->kind) : "nothing");
		goto out;
	}
	t = v->u.tensor;
	got = t->dtype ? gfs_dtype_parse(t->dtype) : gfs_dtype_from_storage_class(t->storage.cls);
	if (got != dt) {
		err = gfs_fail(GFS_ERR_FORMAT, "%s: chunk dtype %s, the metadata says %s", label,
			       t->dtype ? t->dtype : t->storage.cls, gfs_dtype_name(dt));
		goto out;
	}
	if (sizes && t->ndim != ndim) {
		err = gfs_fail(GFS_ERR_FORMAT, "%s: chunk has %u dimensions, the metadata says %u",
			       label, t->ndim, ndim);
		goto out;
	}
	for (uint32_t d = t->ndim; d-- > 0;) {
		const uint64_t sd = (uint64_t)t->size[d];

		if (t->size[d] < 0 || (sizes && sd != sizes[d])) {
			err = gfs_fail(GFS_ERR_FORMAT,
				       "%s: chunk size %lld in dimension %u, the metadata says %llu",
				       label, (long long)t->size[d], d,
				       (unsigned long long)(sizes ? sizes[d] : 0));
			goto out;
		}
		if (sd > 1 && t->stride[d] != (int64_t)expect) {
			err = gfs_fail(GFS_ERR_UNSUPPORTED,
				       "%s: chunk is not contiguous (stride %lld in dimension %u)",
				       label, (long long)t->stride[d], d);
			goto out;
		}
		if (!gfs_mul_u64(expect, sd ? sd : 1, &expect) || expect > INT64_MAX ||
		    !gfs_mul_u64(nbytes, sd, &nbytes)) {
			err = gfs_fail(GFS_ERR_FORMAT, "%s: chunk sizes overflow", label);
			goto out;
		}
	}
	err = gfs_tzip_storage_record(z, t->storage.key, &srec);
	if (err) {
		err = gfs_fail_prefix(err, "%s", label);
		goto out;
	}
	rec_off = srec->data_off;
	rec_size = srec->size;
	whole->off = rec_off;
	whole->len = rec_size;
	whole->crc32 = srec->crc32;
	snprintf(rname, rname_n, "%s", srec->name);
	if (t->offset < 0 || !gfs_mul_u64((uint64_t)t->offset, gfs_dtype_size(dt), &first) ||
	    !gfs_add_u64(first, nbytes, &end) || end > rec_size) {
		err = gfs_fail(GFS_ERR_FORMAT,
			       "%s: chunk bytes lie outside its storage record (%llu bytes): truncated or corrupt",
			       label, (unsigned long long)rec_size);
		goto out;
	}
	*data_off = rec_off + first;
	*tbytes = nbytes;
out:
	free(buf);
	gfs_pickle_free(pk);
	gfs_tzip_close(z);
	return err;
}

gfs_err gfs_dcp_confirm(const gfs_record *r, int fd, const char *path, uint32_t *crc)
{
	const gfs_dtype dt = (gfs_dtype)r->dtype;
	const uint64_t base = r->item - 1;
	gfs_record whole = { 0 };
	uint64_t data = 0, tbytes = 0;
	char label[4200], rname[DCP_RNAME_MAX];
	gfs_err err;

	assert(r->lazy && r->item);
	snprintf(label, sizeof(label), "%s: chunk archive at offset %llu", path,
		 (unsigned long long)base);
	err = inner_tensor(label, fd, base, r->frame_len, dt, 0, NULL, &data, &tbytes, &whole,
			   rname, sizeof(rname));
	if (err) {
		char msg[GFS_ERRMSG_MAX];

		snprintf(msg, sizeof(msg), "%s", gfs_errmsg());
		return gfs_fail(GFS_ERR_IO, "%s", msg);
	}
	if (whole.off != r->off || whole.len != r->len || data != r->off || tbytes != r->len)
		return gfs_fail(GFS_ERR_IO,
				"%s: its tensor (%llu bytes) is at offset %llu of record %s (offset %llu, %llu bytes); .metadata places %llu bytes at offset %llu",
				label, (unsigned long long)tbytes, (unsigned long long)data, rname,
				(unsigned long long)whole.off, (unsigned long long)whole.len,
				(unsigned long long)r->len, (unsigned long long)r->off);
	*crc = whole.crc32;
	return GFS_OK;
}

/* ------------------------------------------------------------ chunks */

/* box_overlap(): do two N-D boxes intersect? */
static bool box_overlap(uint32_t n, const uint64_t *ao, const uint64_t *as,
			const uint64_t *bo, const uint64_t *bs)
{
	for (uint32_t d = 0; d < n; d++)
		if (ao[d] + as[d] <= bo[d] || bo[d] + bs[d] <= ao[d])
			return false;
	return true;
}

/*
 * emit_chunk(): pieces for a contiguous chunk box (offsets o, sizes s) of a
 * tensor of shape S whose bytes are at loc.  The innermost split dimension d
 * gives runs of s[d] * prod(S[d+1..]) elements; dims before it whose inner
 * neighbour is full merge into one strided piece; the rest enumerate.
 */
static gfs_err emit_chunk(dcp_ckpt *c, size_t ti, uint32_t n, const uint64_t *S,
			  const uint64_t *o, const uint64_t *s, gfs_dtype dt,
			  const chunk_loc *loc)
{
	const uint64_t es = gfs_dtype_size(dt);
	uint64_t dstride[GFS_MAX_DIMS], sstride[GFS_MAX_DIMS], idx[GFS_MAX_DIMS] = { 0 };
	uint64_t numel = 1, run, count = 1;
	int d = (int)n - 1, m;

	for (uint32_t k = 0; k < n; k++)
		numel *= s[k];
	if (numel == 0)
		return GFS_OK;
	for (int k = (int)n - 1; k >= 0; k--) {
		dstride[k] = k == (int)n - 1 ? es : dstride[k + 1] * S[k + 1];
		sstride[k] = k == (int)n - 1 ? es : sstride[k + 1] * s[k + 1];
	}
	while (d >= 0 && s[d] == S[d])
		d--;
	if (d < 0) { /* the whole tensor (or a scalar) */
		const gfs_piece p = {
			.len = numel * es, .count = 1, .kind = loc->kind, .src = loc->src,
			.src_off = loc->off, .frame_off = loc->frame_off,
			.frame_len = loc->frame_len, .frame_size = loc->frame_size,
		};

		c->npieces++;
		return gfs_layout_add_general(c->l, ti, &p);
	}
	run = s[d] * dstride[d];
	m = d - 1;
	if (m >= 0) {
		count = s[m];
		while (m >= 1 && s[m] == S[m]) {
			count *= s[m - 1];
			m--;
		}
	}
	/* enumerate dims [0, m) ; dim m.. merged into count runs of stride dstride[d - 1] */
	for (;;) {
		gfs_piece p = {
			.len = run, .count = count, .kind = loc->kind, .src = loc->src,
			.dst_stride = d > 0 ? dstride[d - 1] : 0,
			.src_stride = d > 0 ? sstride[d - 1] : 0,
			.frame_off = loc->frame_off, .frame_len = loc->frame_len,
			.frame_size = loc->frame_size,
		};
		uint64_t toff = 0, soff = 0;
		gfs_err err;
		int k;

		for (uint32_t j = 0; j < n; j++) {
			const uint64_t ij = (int)j < m ? idx[j] : 0;

			toff += (o[j] + ij) * dstride[j];
			soff += ij * sstride[j];
		}
		p.toff = toff;
		p.src_off = loc->off + soff;
		if (++c->npieces > DCP_MAX_PIECES)
			return gfs_fail(GFS_ERR_LIMIT, "%s: more than %llu pieces", c->meta_path,
					(unsigned long long)DCP_MAX_PIECES);
		err = gfs_layout_add_general(c->l, ti, &p);
		if (err)
			return err;
		for (k = m - 1; k >= 0; k--) {
			if (++idx[k] < s[k])
				break;
			idx[k] = 0;
		}
		if (k < 0)
			break;
	}
	return GFS_OK;
}

/*
 * A chunk being located: its storage item and file, found serially, then
 * (chunk_locate(), on gfs_pfor() threads) where in its archive its bytes
 * are and the storage record holding them.
 */
typedef struct chunk_job {
	size_t file;         /* in c->files (which grows while a batch is made) */
	const gfs_dcp_item *it;
	uint64_t off, len;   /* the item's bytes in f */
	const uint64_t *sizes;
	uint64_t nbytes;     /* the chunk's */
	bool zstd;
	bool lazy;           /* placed from its shape, not opened */
	bool failed;
	chunk_loc loc;
	gfs_record rec;
	char rname[DCP_RNAME_MAX]; /* the storage record's name, if opened */
	const char *shape_rname;   /* lazy: its shape's record name */
} chunk_job;

typedef struct locate_ctx {
	const dcp_ckpt *c;
	chunk_job *jobs;
	gfs_dtype dt;
	uint32_t ndim;
} locate_ctx;

/* Chunks located together; bounds the jobs' memory (CHUNK_BATCH * ~700 B). */
#define CHUNK_BATCH 256

/* chunk_locate(): fill jobs[i].loc and .rec (a gfs_pfor() body). */
static gfs_err chunk_locate(void *ctx, size_t i)
{
	const locate_ctx *lc = ctx;
	chunk_job *j = &lc->jobs[i];
	const dcp_file *f = &lc->c->files[j->file];
	const char *fqn = gfs_dcpmeta_str(lc->c->md, j->it->fqn);
	uint64_t data = 0, size = 0, tbytes = 0;
	char label[8192];
	int mfd;
	gfs_err err;

	if (j->lazy)
		return GFS_OK;
	snprintf(label, sizeof(label), "%s@%llu (%s)", f->path, (unsigned long long)j->off,
		 fqn);
	memset(&j->loc, 0, sizeof(j->loc));
	memset(&j->rec, 0, sizeof(j->rec));
	j->loc.src = f->src;
	if (!j->zstd) {
		err = inner_tensor(label, f->fd, j->off, j->len, lc->dt, lc->ndim, j->sizes,
				   &data, &tbytes, &j->rec, j->rname, sizeof(j->rname));
		j->loc.kind = GFS_PIECE_FILE;
		j->loc.off = data;
	} else {
		err = unzstd(f, fqn, j->off, j->len, &mfd, &size);
		if (!err) {
			err = inner_tensor(label, mfd, 0, size, lc->dt, lc->ndim, j->sizes, &data,
					   &tbytes, &j->rec, j->rname, sizeof(j->rname));
			close(mfd);
		}
		j->loc.kind = GFS_PIECE_ZSTD;
		j->loc.off = data;
		j->loc.frame_off = j->off;
		j->loc.frame_len = j->len;
		j->loc.frame_size = size;
	}
	j->failed = err != GFS_OK;
	return err;
}

/* shape_of(): the learned shape of an item of len bytes holding nbytes of tensor, or NULL. */
static dcp_shape *shape_of(const dcp_ckpt *c, uint64_t len, uint64_t nbytes)
{
	const uint64_t extra = len - nbytes;
	const uint32_t mod = (uint32_t)(nbytes % DCP_SHAPE_MOD);
	const bool big = len > UINT32_MAX;

	for (size_t i = 0; i < c->nshapes; i++)
		if (c->shapes[i].extra == extra && c->shapes[i].mod == mod && c->shapes[i].big == big)
			return &c->shapes[i];
	return NULL;
}

/*
 * chunk_place(): if j's item has a learned shape, place its record from it
 * (a lazy record) instead of opening its archive.
 */
static void chunk_place(dcp_ckpt *c, chunk_job *j, uint32_t src, gfs_dtype dt)
{
	const dcp_shape *sh;

	j->lazy = false;
	if (c->eager || j->zstd || j->nbytes == 0 || j->len < j->nbytes ||
	    !(sh = shape_of(c, j->len, j->nbytes)))
		return;
	memset(&j->loc, 0, sizeof(j->loc));
	memset(&j->rec, 0, sizeof(j->rec));
	j->loc.kind = GFS_PIECE_FILE;
	j->loc.src = src;
	j->loc.off = j->off + sh->roff;
	j->rec.off = j->loc.off;
	j->rec.len = j->nbytes;
	j->rec.lazy = true;
	j->rec.dtype = (uint8_t)dt;
	j->shape_rname = sh->rname;
	j->lazy = true;
	c->nlazy++;
}

/*
 * chunk_learn(): after an opened uncompressed chunk whose storage record
 * is exactly its bytes, remember the shape of its item.
 */
static void chunk_learn(dcp_ckpt *c, const chunk_job *j)
{
	dcp_shape *sh;

	if (c->eager || j->lazy || j->zstd || j->nbytes == 0 || j->rec.len != j->nbytes ||
	    j->loc.off != j->rec.off || j->rec.off < j->off || c->nshapes == DCP_MAX_SHAPES ||
	    shape_of(c, j->len, j->nbytes))
		return;
	sh = &c->shapes[c->nshapes++];
	sh->extra = j->len - j->nbytes;
	sh->mod = (uint32_t)(j->nbytes % DCP_SHAPE_MOD);
	sh->big = j->len > UINT32_MAX;
	sh->roff = j->rec.off - j->off;
	snprintf(sh->rname, sizeof(sh->rname), "%s", j->rname);
}

/* chunk_record(): add the storage record of a located chunk to the layout. */
static gfs_err chunk_record(dcp_ckpt *c, chunk_job *j)
{
	j->rec.src = j->loc.src;
	j->rec.kind = j->loc.kind;
	j->rec.frame_off = j->loc.frame_off;
	j->rec.frame_len = j->lazy ? j->len : j->loc.frame_len; /* lazy: the item's length */
	j->rec.frame_size = j->loc.frame_size;
	c->zstd |= j->zstd;
	j->rec.item = j->off + 1;
	return gfs_layout_add_record(c->l, &j->rec, j->lazy ? j->shape_rname : j->rname);
}

/* box_cmp(): order chunks by their first offset. */
typedef struct box_key {
	uint64_t o0;
	size_t k;
} box_key;

static int box_cmp(const void *pa, const void *pb)
{
	const box_key *a = pa, *b = pb;

	if (a->o0 != b->o0)
		return a->o0 < b->o0 ? -1 : 1;
	return (a->k > b->k) - (a->k < b->k);
}

/*
 * overlaps(): find two non-empty boxes of the nch in box that intersect,
 * sorted on dimension 0: a box is only compared with those that start
 * inside its extent there.  @return true and *a < *b.
 */
static bool overlaps(uint32_t ndim, uint64_t (*box)[2][GFS_MAX_DIMS], const uint64_t *vol,
		     size_t nch, size_t *a, size_t *b)
{
	box_key *order = gfs_calloc(nch ? nch : 1, sizeof(*order));
	size_t n = 0;
	bool found = false;

	if (!order) { /* out of memory: compare all pairs */
		for (size_t k = 0; k < nch; k++)
			for (size_t j = 0; j < k; j++)
				if (vol[j] && vol[k] &&
				    box_overlap(ndim, box[j][0], box[j][1], box[k][0], box[k][1])) {
					*a = j;
					*b = k;
					return true;
				}
		return false;
	}
	for (size_t k = 0; k < nch; k++)
		if (vol[k])
			order[n++] = (box_key){ ndim ? box[k][0][0] : 0, k };
	qsort(order, n, sizeof(*order), box_cmp);
	for (size_t i = 0; i < n && !found; i++) {
		const size_t p = order[i].k;

		for (size_t j = i + 1; j < n && !found &&
		     (ndim == 0 || order[j].o0 < box[p][0][0] + box[p][1][0]); j++) {
			const size_t q = order[j].k;

			if (box_overlap(ndim, box[p][0], box[p][1], box[q][0], box[q][1])) {
				*a = p < q ? p : q;
				*b = p < q ? q : p;
				found = true;
			}
		}
	}
	free(order);
	return found;
}

/*
 * import_tensor(): tensor t of entry fqn (string id fqn_id), named name
 * in the view; pre: its chunks' items as chunk_items_find() found them, or
 * NULL to look them up here.
 */
static gfs_err import_tensor(dcp_ckpt *c, uint32_t fqn_id, const char *fqn, const char *name,
			     const gfs_dcp_tensor *t, const uint32_t *pre)
{
	const char *dts = gfs_dcpmeta_str(c->md, t->dtype);
	const gfs_dcp_chunk *chunks = c->md->chunks + t->first;
	const size_t nch = t->nchunks;
	const uint64_t h = fqn_hash(c, fqn_id, fqn);
	uint64_t shape[GFS_MAX_DIMS], numel = 1, covered = 0, *vol = NULL;
	uint64_t (*box)[2][GFS_MAX_DIMS] = NULL;
	chunk_job *jobs = NULL;
	uint32_t ndim;
	const gfs_dtype dt = dts ? gfs_dtype_parse(dts) : GFS_DT_INVALID;
	size_t ti, ja = 0, jb = SIZE_MAX;
	gfs_err err = GFS_OK;

	if (dt == GFS_DT_INVALID)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: %s: missing or unsupported dtype %s",
				c->meta_path, fqn, dts ? dts : "");
	if (!ints(c->md, t->size, &ndim, shape))
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: bad size", c->meta_path, fqn);
	if (!t->has_chunks)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: chunks is not a list", c->meta_path, fqn);
	err = gfs_layout_add_tensor(c->l, name, dt, ndim, shape, &ti);
	if (err)
		return gfs_fail_prefix(err, "%s", c->meta_path);
	numel = c->l->tensors[ti].numel;
	box = gfs_calloc(nch ? nch : 1, sizeof(*box));
	vol = gfs_calloc(nch ? nch : 1, sizeof(*vol));
	jobs = gfs_calloc(nch < CHUNK_BATCH ? (nch ? nch : 1) : CHUNK_BATCH, sizeof(*jobs));
	if (!box || !vol || !jobs) {
		free(box);
		free(vol);
		free(jobs);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	for (size_t k = 0; k < nch && !err; k++) {
		uint32_t n1 = 0, n2 = 0;

		if (!ints(c->md, chunks[k].offsets, &n1, box[k][0]) ||
		    !ints(c->md, chunks[k].sizes, &n2, box[k][1]) || n1 != ndim || n2 != ndim) {
			err = gfs_fail(GFS_ERR_FORMAT, "%s: %s: chunk %zu has bad offsets or sizes",
				       c->meta_path, fqn, k);
			break;
		}
		vol[k] = 1;
		for (uint32_t d = 0; d < ndim; d++) {
			if (box[k][0][d] > shape[d] || box[k][1][d] > shape[d] - box[k][0][d]) {
				err = gfs_fail(GFS_ERR_FORMAT,
					       "%s: %s: chunk %zu reaches past the tensor in dimension %u",
					       c->meta_path, fqn, k, d);
				break;
			}
			vol[k] *= box[k][1][d];
		}
		covered += vol[k];
	}
	if (err || !overlaps(ndim, box, vol, nch, &ja, &jb))
		jb = SIZE_MAX;
	/*
	 * Chunks in batches: their items and files serially, their archives
	 * in parallel, then their records and pieces serially in chunk order.
	 * The first error in chunk order is the one reported, as a serial loop
	 * would.
	 */
	for (size_t k = 0; k < nch && !err;) {
		locate_ctx lc = { .c = c, .jobs = jobs, .dt = dt, .ndim = ndim };
		size_t nj = 0, nopen = 0, kj[CHUNK_BATCH];
		gfs_err perr = GFS_OK, lerr = GFS_OK;
		char pmsg[GFS_ERRMSG_MAX], lmsg[GFS_ERRMSG_MAX];

		for (; k < nch && nj < CHUNK_BATCH && !perr; k++) {
			chunk_job *j = &jobs[nj];
			dcp_file *f;

			if (k == jb) { /* the chunks before it are located first */
				perr = gfs_fail(GFS_ERR_FORMAT, "%s: %s: chunks %zu and %zu overlap",
						c->meta_path, fqn, ja, jb);
				break;
			}
			if (vol[k] == 0)
				continue;
			if (pre)
				j->it = pre[k] ? &c->md->items[pre[k] - 1] : NULL;
			else
				j->it = item_find(c, fqn_id, fqn, h, chunks[k].offsets);
			if (!j->it) {
				perr = gfs_fail(GFS_ERR_FORMAT,
						"%s: %s: chunk %zu has no storage data entry",
						c->meta_path, fqn, k);
				break;
			}
			perr = item_file(c, j->it, &f, &j->off, &j->len);
			if (!perr)
				perr = item_transform(c, j->it, &j->zstd);
			if (perr)
				break;
			j->file = (size_t)(f - c->files);
			j->sizes = box[k][1];
			j->nbytes = vol[k] * gfs_dtype_size(dt);
			j->failed = false;
			chunk_place(c, j, f->src, dt);
			nopen += !j->lazy;
			kj[nj++] = k;
		}
		if (perr)
			snprintf(pmsg, sizeof(pmsg), "%s", gfs_errmsg());
		/* a batch of lazy chunks only (the usual case once shapes are learned) starts no thread */
		if (nopen)
			lerr = gfs_pfor(nj, chunk_locate, &lc);
		if (lerr)
			snprintf(lmsg, sizeof(lmsg), "%s", gfs_errmsg());
		for (size_t i = 0; i < nj && !err; i++) {
			if (jobs[i].failed) {
				err = gfs_fail(lerr, "%s", lmsg);
				break;
			}
			chunk_learn(c, &jobs[i]);
			err = chunk_record(c, &jobs[i]);
			if (!err)
				err = emit_chunk(c, ti, ndim, shape, box[kj[i]][0], box[kj[i]][1], dt,
						 &jobs[i].loc);
		}
		if (!err && perr)
			err = gfs_fail(perr, "%s", pmsg);
	}
	free(box);
	free(vol);
	free(jobs);
	if (!err && covered != numel)
		err = gfs_fail(GFS_ERR_FORMAT,
			       "%s: %s: chunks cover %llu of its %llu elements (they do not tile it)",
			       c->meta_path, fqn, (unsigned long long)covered,
			       (unsigned long long)numel);
	return err;
}

static gfs_err import_object(dcp_ckpt *c, uint32_t fqn_id, const char *fqn, const char *name)
{
	const gfs_dcp_item *it = item_find(c, fqn_id, fqn, fqn_hash(c, fqn_id, fqn), GFS_DCP_NONE);
	dcp_file *f;
	uint64_t off, len;
	gfs_err err;

	if (!it)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: no storage data entry", c->meta_path, fqn);
	err = item_file(c, it, &f, &off, &len);
	return err ? err : gfs_layout_add_object(c->l, name, f->src, off, len);
}

static void ckpt_free(dcp_ckpt *c)
{
	for (size_t i = 0; i < c->nfiles; i++) {
		if (c->files[i].fd >= 0)
			close(c->files[i].fd);
		free(c->files[i].rel);
		free(c->files[i].path);
	}
	free(c->files);
	free(c->shapes);
	free(c->fkey);
	free(c->fval);
	free(c->itab);
	free(c->meta_path);
	gfs_dcpmeta_free(c->md);
	gfs_layout_free(c->l);
}

gfs_err gfs_import_dcp(const char *dir, const char *prefix, gfs_layout **out)
{
	dcp_ckpt c = { .dir = dir };
	const size_t plen = prefix ? strlen(prefix) : 0;
	size_t ntensors = 0, nobjects = 0;
	chunk_items ci = { 0 };
	char info[512];
	gfs_err err;

	c.meta_path = malloc(strlen(dir) + sizeof("/.metadata"));
	c.shapes = gfs_calloc(DCP_MAX_SHAPES, sizeof(*c.shapes));
	c.eager = getenv("GATHERFS_DCP_EAGER") && strcmp(getenv("GATHERFS_DCP_EAGER"), "1") == 0;
	if (!c.meta_path || !c.shapes) {
		free(c.meta_path);
		free(c.shapes);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	sprintf(c.meta_path, "%s/.metadata", dir);
	err = gfs_layout_new("dcp", dir, &c.l);
	if (!err)
		err = gfs_layout_set_root(c.l, dir);
	if (!err)
		err = gfs_layout_add_metafile(c.l, c.meta_path);
	if (!err)
		err = read_metadata(&c);
	if (!err)
		err = chunk_items_find(&c, prefix, plen, &ci);
	for (size_t i = 0; !err && i < c.md->nentries; i++) {
		const gfs_dcp_entry *e = &c.md->entries[i];
		const char *fqn = gfs_dcpmeta_str(c.md, e->fqn);

		if (plen && strncmp(fqn, prefix, plen) != 0)
			continue;
		if (e->kind == GFS_DCP_TENSOR) {
			err = import_tensor(&c, e->fqn, fqn, fqn + plen, &c.md->tensors[e->tensor],
					    ci.own[i] ? ci.res + ci.base[i] : NULL);
			ntensors++;
		} else if (e->kind == GFS_DCP_BYTES) {
			err = import_object(&c, e->fqn, fqn, fqn + plen);
			nobjects++;
		} else {
			err = gfs_fail(GFS_ERR_FORMAT,
				       "%s: %s is neither TensorStorageMetadata nor BytesStorageMetadata",
				       c.meta_path, fqn);
		}
	}
	if (!err && plen && ntensors + nobjects == 0)
		err = gfs_fail(GFS_ERR_NOTFOUND, "%s: no key starts with the prefix '%s'",
			       c.meta_path, prefix);
	if (!err) {
		const char *ver = gfs_dcpmeta_str(c.md, c.md->version);

		snprintf(info, sizeof(info),
			 "PyTorch DCP%s%s, %zu tensors, %zu objects, %zu files%s%s%s",
			 ver ? " " : "", ver ? ver : "", ntensors, nobjects, c.nfiles,
			 c.zstd ? ", zstd" : "", plen ? ", prefix " : "", plen ? prefix : "");
		err = gfs_layout_set_info(c.l, info);
	}
	chunk_items_free(&ci);
	if (!err) {
		gfs_dcpmeta_free(c.md); /* before the layout is sealed: its peak */
		c.md = NULL;
		err = gfs_layout_finish(c.l, c.meta_path);
	}
	if (!err) {
		*out = c.l;
		c.l = NULL;
	}
	ckpt_free(&c);
	return err;
}
