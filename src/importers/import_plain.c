/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — plain model files importer: model.safetensors, pytorch_model.bin
 * and their sharded forms (import_plain.h).
 *
 * Reads safetensors headers, torch zip central directories and data.pkl
 * pickles; never a tensor payload.
 */
#include "config.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/importers/import_plain.h"
#include "gatherfs/util/json.h"
#include "gatherfs/readers/pickle.h"
#include "gatherfs/readers/torchzip.h"

#define PLAIN_MAX_PICKLE ((uint64_t)1 << 30)
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* The files gfs_import_plain_dir() looks for, in order of preference. */
static const char *const dir_files[] = {
	"model.safetensors", "model.safetensors.index.json",
	"pytorch_model.bin", "pytorch_model.bin.index.json",
	"adapter_model.safetensors", "adapter_model.bin",
};
enum { N_MODEL_FILES = 4 }; /* dir_files[0..4): model files; the rest: adapters */

/* A key of an index's weight_map: the shard it is in, and whether it was found. */
typedef struct pl_want {
	const char *name; /* borrowed from the index JSON */
	uint32_t shard;
	bool seen;
} pl_want;

typedef struct pl_import {
	gfs_layout *l;
	const char *dir;    /* directory of the files */
	const char *prefix; /* keep keys starting with it (stripped); NULL: all */
	size_t plen;
	/* sharded: the index's weight_map, hashed by name */
	const char *index_name;
	char **shards;      /* shard file names, in index order of first mention */
	size_t nshards;
	pl_want *want;
	size_t nwant;
	uint32_t *hash;     /* indices into want, UINT32_MAX empty */
	size_t hcap;
	size_t kept;        /* tensors (and aliases) added to the layout */
	uint64_t strided_budget; /* GFS_PLAIN_MAX_STRIDED, less what views spent */
} pl_import;

/* ----------------------------------------------------------------- helpers */

static uint64_t str_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++) {
		h ^= (uint8_t)*s;
		h *= 1099511628211ull;
	}
	return h;
}

/* name_ok(): a key usable as a tensor name: no control character. */
static bool name_ok(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

/* shown(): s for a one-line message: itself, or a placeholder if it holds control characters. */
static const char *shown(const char *s)
{
	return s && name_ok(s) ? s : "(a string with control characters)";
}

/* ends_with(): s ends in suffix. */
static bool ends_with(const char *s, const char *suffix)
{
	const size_t n = strlen(s), k = strlen(suffix);

	return n >= k && strcmp(s + n - k, suffix) == 0;
}

/*
 * kept_name(): the layout name of key (without the prefix), or NULL if the
 * prefix filter drops it.
 */
static const char *kept_name(const pl_import *pl, const char *key)
{
	if (!pl->prefix)
		return key;
	return strncmp(key, pl->prefix, pl->plen) == 0 ? key + pl->plen : NULL;
}

/*
 * open_file(): open dir/name read-only, a regular file; path receives the
 * full name.  listed_in names the index that named the file, for messages.
 */
static gfs_err open_file(const pl_import *pl, const char *name, const char *listed_in,
			 char *path, size_t pathsz, int *fd, uint64_t *size)
{
	struct stat st;

	if ((size_t)snprintf(path, pathsz, "%s/%s", pl->dir, name) >= pathsz)
		return gfs_fail(GFS_ERR_LIMIT, "%s/%s: path too long", pl->dir, name);
	*fd = open(path, O_RDONLY | O_CLOEXEC);
	if (*fd < 0) {
		const int e = errno;

		if (listed_in)
			return gfs_fail(e == ENOENT ? GFS_ERR_NOTFOUND : GFS_ERR_IO,
					"%s: cannot open: %s (a shard named by %s)", path, strerror(e),
					listed_in);
		return gfs_fail(e == ENOENT ? GFS_ERR_NOTFOUND : GFS_ERR_IO, "%s: cannot open: %s",
				path, strerror(e));
	}
	if (fstat(*fd, &st) != 0) {
		const int e = errno;

		close(*fd);
		*fd = -1;
		return gfs_fail(GFS_ERR_IO, "%s: stat failed: %s", path, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(*fd);
		*fd = -1;
		return gfs_fail(GFS_ERR_FORMAT, "%s: not a regular file", path);
	}
	*size = (uint64_t)st.st_size;
	return GFS_OK;
}

/*
 * check_key(): against a sharded model's index: key must be listed for
 * shard (marked found).  Unsharded (no index): always fine.
 */
static gfs_err check_key(pl_import *pl, const char *path, const char *key, int64_t shard)
{
	size_t h;

	if (shard < 0)
		return GFS_OK;
	h = (size_t)str_hash(key) & (pl->hcap - 1);
	while (pl->hash[h] != UINT32_MAX) {
		pl_want *w = &pl->want[pl->hash[h]];

		if (strcmp(w->name, key) == 0) {
			if (w->shard != (uint32_t)shard)
				return gfs_fail(GFS_ERR_FORMAT,
						"%s: holds %s, which %s puts in %s (index and shards disagree)",
						path, key, pl->index_name, pl->shards[w->shard]);
			if (w->seen)
				return gfs_fail(GFS_ERR_FORMAT, "%s: holds %s twice", path, key);
			w->seen = true;
			return GFS_OK;
		}
		h = (h + 1) & (pl->hcap - 1);
	}
	return gfs_fail(GFS_ERR_FORMAT, "%s: holds %s, which %s does not list (index and shards disagree)",
			path, key, pl->index_name);
}

/* add_source(): register file name (size bytes) as a layout source. */
static gfs_err add_source(pl_import *pl, const char *name, uint64_t size, uint32_t *src)
{
	return gfs_layout_add_source(pl->l, name, size, src);
}

/* ------------------------------------------------------------- safetensors */

typedef struct st_entry {
	const char *name;
	gfs_dtype dtype;
	uint32_t ndim;
	uint64_t shape[GFS_MAX_DIMS];
	uint64_t begin, end;
} st_entry;

static int by_offsets(const void *a, const void *b)
{
	const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

/* st_entry_parse(): one header entry `name: {dtype, shape, data_offsets}`. */
static gfs_err st_entry_parse(const char *path, const cJSON *it, uint64_t data_len,
			      st_entry *e)
{
	const cJSON *dt = gfs_json_get(it, "dtype"), *shape = gfs_json_get(it, "shape");
	const cJSON *offs = gfs_json_get(it, "data_offsets");
	const char *dts = NULL;
	uint64_t numel = 1, nbytes;
	char what[64];
	gfs_err err;

	e->name = it->string;
	if (!e->name)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a header entry has no name", path);
	if (!cJSON_IsObject(it))
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: header entry is not an object", path, e->name);
	err = gfs_json_str(dt, path, "dtype", &dts);
	if (err)
		return gfs_fail_prefix(err, "%s", e->name);
	/* C128 is no safetensors dtype (the safetensors library refuses it) */
	e->dtype = gfs_dtype_parse(dts);
	if (e->dtype == GFS_DT_INVALID || e->dtype == GFS_DT_C128 ||
	    strcmp(gfs_dtype_st_name(e->dtype), dts) != 0)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: %s: dtype \"%.32s\" is not supported (F64, F32, F16, BF16, C64, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2, F8_E8M0)",
				path, e->name, shown(dts));
	if (!cJSON_IsArray(shape))
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: shape is not an array", path, e->name);
	if ((size_t)cJSON_GetArraySize(shape) > GFS_MAX_DIMS)
		return gfs_fail(GFS_ERR_LIMIT, "%s: %s: more than %d dimensions", path, e->name,
				GFS_MAX_DIMS);
	e->ndim = 0;
	for (const cJSON *d = shape->child; d; d = d->next) {
		snprintf(what, sizeof(what), "shape[%u]", e->ndim);
		err = gfs_json_u64(d, path, what, &e->shape[e->ndim]);
		if (err)
			return gfs_fail_prefix(err, "%s", e->name);
		if (!gfs_mul_u64(numel, e->shape[e->ndim], &numel))
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s: shape overflows", path, e->name);
		e->ndim++;
	}
	if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: data_offsets is not a pair [begin, end]",
				path, e->name);
	err = gfs_json_u64(offs->child, path, "data_offsets[0]", &e->begin);
	if (!err)
		err = gfs_json_u64(offs->child->next, path, "data_offsets[1]", &e->end);
	if (err)
		return gfs_fail_prefix(err, "%s", e->name);
	if (e->end < e->begin)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: data_offsets [%llu, %llu] end before they begin",
				path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end);
	if (e->end > data_len)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: %s: data_offsets [%llu, %llu] lie past the end of the file's %llu data bytes (truncated?)",
				path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
				(unsigned long long)data_len);
	if (!gfs_mul_u64(numel, gfs_dtype_size(e->dtype), &nbytes) || nbytes != e->end - e->begin)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: %s: data_offsets [%llu, %llu] hold %llu bytes, its dtype and shape need %llu",
				path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
				(unsigned long long)(e->end - e->begin), (unsigned long long)nbytes);
	return GFS_OK;
}

/*
 * st_tile(): the entries' data regions, sorted by offset, tile
 * [0, data_len) exactly (the safetensors format's rule: no gap, no overlap,
 * no unindexed byte).
 */
static gfs_err st_tile(const char *path, st_entry *e, size_t n, uint64_t data_len)
{
	st_entry **sorted = gfs_calloc(n ? n : 1, sizeof(*sorted));
	uint64_t pos = 0;
	gfs_err err = GFS_OK;

	if (!sorted)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		sorted[i] = &e[i];
	qsort(sorted, n, sizeof(*sorted), by_offsets);
	for (size_t i = 0; i < n && !err; i++) {
		if (sorted[i]->begin < pos)
			err = gfs_fail(GFS_ERR_FORMAT, "%s: tensors %s and %s overlap (data bytes %llu..%llu)",
				       path, sorted[i - 1]->name, sorted[i]->name,
				       (unsigned long long)sorted[i]->begin, (unsigned long long)pos);
		else if (sorted[i]->begin > pos)
			err = gfs_fail(GFS_ERR_FORMAT,
				       "%s: data bytes %llu..%llu belong to no tensor (a gap before %s)",
				       path, (unsigned long long)pos, (unsigned long long)sorted[i]->begin,
				       sorted[i]->name);
		pos = sorted[i]->end;
	}
	if (!err && pos != data_len)
		err = gfs_fail(GFS_ERR_FORMAT,
			       "%s: the header's tensors end at data byte %llu, the file holds %llu data bytes",
			       path, (unsigned long long)pos, (unsigned long long)data_len);
	free(sorted);
	return err;
}

/* st_import(): the safetensors file name; shard: its index in pl->shards, or -1. */
static gfs_err st_import(pl_import *pl, const char *name, int64_t shard)
{
	char path[PATH_MAX];
	uint8_t len8[8];
	uint64_t size = 0, hlen, data_len;
	char *head = NULL;
	cJSON *root = NULL;
	st_entry *e = NULL;
	size_t n = 0, cap;
	uint32_t src;
	int fd = -1;
	gfs_err err = open_file(pl, name, shard >= 0 ? pl->index_name : NULL, path, sizeof(path),
				&fd, &size);

	if (err)
		return err;
	if (size < 8) {
		err = gfs_fail(GFS_ERR_FORMAT, "%s: %llu bytes: too short for a safetensors file (truncated?)",
			       path, (unsigned long long)size);
		goto out;
	}
	err = gfs_pread_full(fd, len8, sizeof(len8), 0, path);
	if (err)
		goto out;
	hlen = gfs_le64(len8);
	if (hlen > GFS_PLAIN_MAX_HEADER) {
		err = gfs_fail(GFS_ERR_LIMIT,
			       "%s: safetensors header length %llu exceeds the %llu-byte limit (not a safetensors file?)",
			       path, (unsigned long long)hlen, (unsigned long long)GFS_PLAIN_MAX_HEADER);
		goto out;
	}
	if (hlen > size - 8) {
		err = gfs_fail(GFS_ERR_FORMAT,
			       "%s: the safetensors header (%llu bytes) runs past the end of the %llu-byte file (truncated?)",
			       path, (unsigned long long)hlen, (unsigned long long)size);
		goto out;
	}
	head = malloc(hlen ? hlen : 1);
	if (!head) {
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		goto out;
	}
	err = gfs_pread_full(fd, head, hlen, 8, path);
	if (err)
		goto out;
	if (hlen == 0 || head[0] != '{') {
		err = gfs_fail(GFS_ERR_FORMAT, "%s: the safetensors header does not start with '{'", path);
		goto out;
	}
	err = gfs_json_parse(head, hlen, path, &root);
	if (err)
		goto out;
	if (!cJSON_IsObject(root)) {
		err = gfs_fail(GFS_ERR_FORMAT, "%s: the safetensors header is not a JSON object", path);
		goto out;
	}
	data_len = size - 8 - hlen;
	cap = (size_t)cJSON_GetArraySize(root);
	e = gfs_calloc(cap ? cap : 1, sizeof(*e));
	if (!e) {
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (const cJSON *it = root->child; it && !err; it = it->next) {
		if (it->string && strcmp(it->string, "__metadata__") == 0) {
			if (!cJSON_IsObject(it))
				err = gfs_fail(GFS_ERR_FORMAT, "%s: __metadata__ is not an object", path);
			for (const cJSON *m = it->child; !err && m; m = m->next)
				if (!cJSON_IsString(m))
					err = gfs_fail(GFS_ERR_FORMAT,
						       "%s: __metadata__ value %s is not a string", path,
						       shown(m->string));
			continue;
		}
		assert(n < cap);
		err = st_entry_parse(path, it, data_len, &e[n]);
		n++;
	}
	if (!err)
		err = st_tile(path, e, n, data_len);
	if (!err)
		err = add_source(pl, name, size, &src);
	for (size_t i = 0; i < n && !err; i++) {
		const char *kname;
		size_t ti;

		err = check_key(pl, path, e[i].name, shard);
		kname = kept_name(pl, e[i].name);
		if (err || !kname)
			continue;
		err = gfs_layout_add_tensor(pl->l, kname, e[i].dtype, e[i].ndim, e[i].shape, &ti);
		if (!err && e[i].end > e[i].begin)
			err = gfs_layout_add_piece(pl->l, ti, src, 8 + hlen + e[i].begin,
						   e[i].end - e[i].begin);
		if (err)
			err = gfs_fail_prefix(err, "%s", path);
		pl->kept++;
	}
out:
	free(e);
	cJSON_Delete(root);
	free(head);
	if (fd >= 0)
		close(fd);
	return err;
}

/* --------------------------------------------------------------- torch zip */

/* A tensor of a torch zip, remembered to find tied pairs. */
typedef struct bin_view {
	const gfs_pv_tensor *t;
	gfs_dtype dtype;
	int64_t entry; /* its layout entry, or -1 if the prefix dropped it */
} bin_view;

/* same_view(): a and b view one storage identically (a tied pair). */
static bool same_view(const bin_view *a, const bin_view *b)
{
	if (strcmp(a->t->storage.key, b->t->storage.key) != 0 || a->t->offset != b->t->offset ||
	    a->dtype != b->dtype || a->t->ndim != b->t->ndim)
		return false;
	for (uint32_t d = 0; d < a->t->ndim; d++)
		if (a->t->size[d] != b->t->size[d] || a->t->stride[d] != b->t->stride[d])
			return false;
	return true;
}

/*
 * bin_pieces(): the pieces of a view with shape size[0..ndim), element
 * strides stride[], first element at source byte base, esize-byte
 * elements.  The innermost dimensions that are C-contiguous make one run;
 * a contiguous view is one piece.  Otherwise one outer dimension (the
 * largest whose runs do not touch in the tensor nor overlap in the source)
 * becomes the piece's run count, and every index of the other outer
 * dimensions one piece.  Interleaved strided pieces spend runs x pieces of
 * *budget.  The caller checked the view's extent.
 */
static gfs_err bin_pieces(gfs_layout *l, size_t ti, uint32_t src, uint64_t base, uint64_t esize,
			  uint32_t ndim, const int64_t *size, const int64_t *stride,
			  const char *path, const char *key, uint64_t *budget)
{
	uint64_t sz[GFS_MAX_DIMS], st[GFS_MAX_DIMS], dst[GFS_MAX_DIMS], idx[GFS_MAX_DIMS];
	uint64_t run = 1, npieces = 1, below = 1;
	uint32_t m = 0, k, c = UINT32_MAX;

	for (uint32_t d = 0; d < ndim; d++) {
		if (size[d] == 0)
			return GFS_OK;
		if (size[d] > 1) {
			sz[m] = (uint64_t)size[d];
			st[m++] = (uint64_t)stride[d];
		}
	}
	for (k = m; k > 0 && st[k - 1] == run; k--)
		run *= sz[k - 1];
	if (k == 0)
		return gfs_layout_add_piece(l, ti, src, base, run * esize);
	for (uint32_t d = m; d-- > 0;) {
		dst[d] = below;
		below *= sz[d];
	}
	/* dims < k - 1 have dst[d] >= sz[k - 1] * run > run: runs never touch */
	for (uint32_t d = 0; d + 1 < k; d++)
		if (st[d] >= run && (c == UINT32_MAX || sz[d] > sz[c]))
			c = d;
	for (uint32_t d = 0; d < k; d++)
		if (d != c)
			npieces *= sz[d];
	if (npieces > GFS_PLAIN_MAX_PIECES)
		return gfs_fail(GFS_ERR_LIMIT,
				"%s: %s is a non-contiguous view that would take %llu pieces (more than %llu): save it with .contiguous()",
				path, key, (unsigned long long)npieces,
				(unsigned long long)GFS_PLAIN_MAX_PIECES);
	/* interleaved strided pieces cost the layout's tiling check runs x pieces */
	if (c != UINT32_MAX && npieces > 1) {
		const uint64_t cost = npieces * sz[c] > GFS_PLAIN_MAX_STRIDED / npieces
					      ? UINT64_MAX : npieces * sz[c] * npieces;

		if (cost > *budget)
			return gfs_fail(GFS_ERR_LIMIT,
					"%s: %s is a non-contiguous view too fragmented to serve (%llu interleaved pieces of %llu runs of %llu bytes%s): save it with .contiguous()",
					path, key, (unsigned long long)npieces, (unsigned long long)sz[c],
					(unsigned long long)(run * esize),
					cost > GFS_PLAIN_MAX_STRIDED ? ""
					: ", too many with the model's other non-contiguous views");
		*budget -= cost;
	}
	memset(idx, 0, sizeof(idx));
	for (uint64_t p = 0; p < npieces; p++) {
		gfs_piece pc = {
			.kind = GFS_PIECE_FILE, .src = src, .len = run * esize, .count = 1,
			.src_off = base,
		};
		gfs_err err;

		for (uint32_t d = 0; d < k; d++) {
			pc.toff += idx[d] * dst[d] * esize;
			pc.src_off += idx[d] * st[d] * esize;
		}
		if (c != UINT32_MAX) {
			pc.count = sz[c];
			pc.dst_stride = dst[c] * esize;
			pc.src_stride = st[c] * esize;
		}
		err = gfs_layout_add_general(l, ti, &pc);
		if (err)
			return gfs_fail_prefix(err, "%s", path);
		/* next index over the outer dimensions but c, last fastest */
		for (uint32_t d = k; d-- > 0;) {
			if (d == c)
				continue;
			if (++idx[d] < sz[d])
				break;
			idx[d] = 0;
		}
	}
	return GFS_OK;
}

/*
 * bin_extent(): check the view t of esize-byte elements lies inside its
 * storage record of rec_size bytes; *first: its first byte in the record.
 */
static gfs_err bin_extent(const char *path, const char *key, const gfs_pv_tensor *t,
			  uint64_t esize, uint64_t rec_size, uint64_t *numel, uint64_t *first)
{
	uint64_t last, end;

	*numel = 1;
	if (t->offset < 0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: negative storage offset", path, key);
	last = (uint64_t)t->offset;
	for (uint32_t d = 0; d < t->ndim; d++) {
		uint64_t span;

		if (t->size[d] < 0 || t->stride[d] < 0)
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s: negative size or stride in dimension %u",
					path, key, d);
		if (!gfs_mul_u64(*numel, (uint64_t)t->size[d], numel))
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s: size overflows", path, key);
		if (t->size[d] > 0 &&
		    (!gfs_mul_u64((uint64_t)t->size[d] - 1, (uint64_t)t->stride[d], &span) ||
		     !gfs_add_u64(last, span, &last)))
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s: strides overflow", path, key);
	}
	if (!gfs_mul_u64((uint64_t)t->offset, esize, first))
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: storage offset overflows", path, key);
	if (*numel == 0)
		return GFS_OK;
	if (!gfs_add_u64(last, 1, &end) || !gfs_mul_u64(end, esize, &end) || end > rec_size)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: %s: the view (storage offset %lld) reaches past the %llu bytes of its storage data/%s: truncated or corrupt",
				path, key, (long long)t->offset, (unsigned long long)rec_size,
				shown(t->storage.key));
	return GFS_OK;
}

/* bin_open(): open a torch zip and load its data.pkl. */
static gfs_err bin_open(int fd, uint64_t size, const char *path, gfs_tzip **zip,
			gfs_pickle **pk)
{
	const gfs_tzip_record *rec;
	uint8_t head[2] = { 0 };
	uint8_t *buf = NULL;
	size_t len = 0;
	char label[PATH_MAX + 64];
	gfs_err err;

	if (size == 0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: empty file (0 bytes), not a torch checkpoint", path);
	err = gfs_pread_full(fd, head, size < 2 ? 1 : 2, 0, path);
	if (err)
		return err;
	if (head[0] == 0x80)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: a legacy (non-zip) torch.save file: not supported (re-save it with torch >= 1.6)",
				path);
	err = gfs_tzip_open(fd, 0, size, path, NULL, zip);
	if (err)
		return err;
	rec = gfs_tzip_find(*zip, "byteorder");
	if (rec) {
		err = gfs_tzip_read_record(*zip, rec, 16, &buf, &len);
		if (err)
			return err;
		if (len != 6 || memcmp(buf, "little", 6) != 0)
			err = gfs_fail(GFS_ERR_UNSUPPORTED, "%s: not a little-endian torch file", path);
		free(buf);
		buf = NULL;
		if (err)
			return err;
	}
	rec = gfs_tzip_find(*zip, "data.pkl");
	if (!rec)
		return gfs_fail(GFS_ERR_FORMAT, "%s: no data.pkl in the archive", path);
	err = gfs_tzip_read_record(*zip, rec, PLAIN_MAX_PICKLE, &buf, &len);
	if (err)
		return err;
	snprintf(label, sizeof(label), "%s:%s", path, rec->name);
	err = gfs_pickle_load(buf, len, label, NULL, pk);
	free(buf);
	return err;
}

/* view_hash(): bucket of a view's storage key and offset in a table of cap (a power of 2). */
static size_t view_hash(const gfs_pv_tensor *t, size_t cap)
{
	return (size_t)((str_hash(t->storage.key) ^ ((uint64_t)t->offset * 0x9e3779b97f4a7c15ull)) &
			(cap - 1));
}

/*
 * bin_tensor(): add key (layout name kname) viewing t of the zip's source
 * src: an alias of an earlier identical view of views[] (found through
 * the table vh of vcap slots), else a tensor with its pieces, remembered in
 * vh.  v->t and v->dtype are set.
 */
static gfs_err bin_tensor(pl_import *pl, const char *path, const char *key, const char *kname,
			  bin_view *views, size_t i, uint32_t *vh, size_t vcap, uint32_t src,
			  uint64_t base)
{
	bin_view *v = &views[i];
	const gfs_pv_tensor *t = v->t;
	uint64_t shape[GFS_MAX_DIMS];
	size_t h = view_hash(t, vcap), ti;
	gfs_err err;

	for (; vh[h] != UINT32_MAX; h = (h + 1) & (vcap - 1))
		if (same_view(&views[vh[h]], v))
			return gfs_layout_add_alias(pl->l, kname,
						    pl->l->tensors[views[vh[h]].entry].name);
	for (uint32_t d = 0; d < t->ndim; d++)
		shape[d] = (uint64_t)t->size[d];
	err = gfs_layout_add_tensor(pl->l, kname, v->dtype, t->ndim, shape, &ti);
	if (!err)
		err = bin_pieces(pl->l, ti, src, base, gfs_dtype_size(v->dtype), t->ndim, t->size,
				 t->stride, path, key, &pl->strided_budget);
	if (err)
		return err;
	v->entry = (int64_t)ti;
	vh[h] = (uint32_t)i;
	return GFS_OK;
}

/* bin_import(): the torch zip name; shard: its index in pl->shards, or -1. */
static gfs_err bin_import(pl_import *pl, const char *name, int64_t shard)
{
	char path[PATH_MAX];
	uint64_t size = 0;
	gfs_tzip *zip = NULL;
	gfs_pickle *pk = NULL;
	const gfs_pv *root;
	bin_view *views = NULL;
	uint32_t *vh = NULL;
	size_t vcap = 16;
	uint32_t src;
	int fd = -1;
	gfs_err err = open_file(pl, name, shard >= 0 ? pl->index_name : NULL, path, sizeof(path),
				&fd, &size);

	if (err)
		return err;
	err = bin_open(fd, size, path, &zip, &pk);
	if (err)
		goto out;
	root = gfs_pickle_root(pk);
	if (!root || root->kind != GFS_PV_DICT) {
		const char *k = root ? gfs_pv_kind_name(root->kind) : "nothing";

		err = gfs_fail(GFS_ERR_FORMAT, "%s: its pickle holds %s%s, not a state dict", path,
			       strchr("aeiou", k[0]) ? "an " : "a ", k);
		goto out;
	}
	while (vcap < 2 * root->u.dict.len)
		vcap *= 2;
	views = gfs_calloc(root->u.dict.len ? root->u.dict.len : 1, sizeof(*views));
	vh = gfs_calloc(vcap, sizeof(*vh));
	if (!views || !vh) {
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		goto out;
	}
	memset(vh, 0xff, vcap * sizeof(*vh));
	err = add_source(pl, name, size, &src);
	for (size_t i = 0; i < root->u.dict.len && !err; i++) {
		const gfs_pv_item *it = &root->u.dict.items[i];
		const char *key = gfs_pv_name(it->key), *kname;
		const gfs_pv_tensor *t;
		bin_view *v = &views[i];
		const gfs_tzip_record *zr;
		uint64_t rec_off, rec_size, numel, first = 0;

		v->entry = -1;
		if (!key) {
			err = gfs_pv_name_fail(path, "key", i, it->key);
			break;
		}
		if (!it->value || it->value->kind != GFS_PV_TENSOR) {
			const char *k = it->value ? gfs_pv_kind_name(it->value->kind) : "nothing";

			err = gfs_fail(GFS_ERR_FORMAT, "%s: %s is %s%s, not a tensor (not a plain state dict)",
				       path, key, strchr("aeiou", k[0]) ? "an " : "a ", k);
			break;
		}
		t = it->value->u.tensor;
		v->t = t;
		v->dtype = t->dtype ? gfs_dtype_parse(t->dtype)
				    : gfs_dtype_from_storage_class(t->storage.cls);
		if (v->dtype == GFS_DT_INVALID) {
			err = gfs_fail(GFS_ERR_UNSUPPORTED, "%s: %s: unsupported dtype %s", path, key,
				       shown(t->dtype ? t->dtype : t->storage.cls));
			break;
		}
		if (t->ndim > GFS_MAX_DIMS) {
			err = gfs_fail(GFS_ERR_LIMIT, "%s: %s: more than %d dimensions", path, key,
				       GFS_MAX_DIMS);
			break;
		}
		err = gfs_tzip_storage_record(zip, t->storage.key, &zr);
		if (err) {
			err = gfs_fail_prefix(err, "%s: %s", path, key);
			break;
		}
		rec_off = zr->data_off;
		rec_size = zr->size;
		err = bin_extent(path, key, t, gfs_dtype_size(v->dtype), rec_size, &numel, &first);
		if (!err)
			err = check_key(pl, path, key, shard);
		kname = kept_name(pl, key);
		if (err || !kname)
			continue;
		pl->kept++;
		err = bin_tensor(pl, path, key, kname, views, i, vh, vcap, src, rec_off + first);
		if (!err) {
			/* the whole storage record is checked: its CRC-32 covers it all */
			const gfs_record r = { .src = src, .kind = GFS_PIECE_FILE, .off = rec_off,
					       .len = rec_size, .crc32 = zr->crc32 };

			err = gfs_layout_add_record(pl->l, &r, zr->name);
		}
	}
out:
	free(vh);
	free(views);
	gfs_pickle_free(pk);
	gfs_tzip_close(zip);
	if (fd >= 0)
		close(fd);
	return err;
}

/* ------------------------------------------------------------------ index */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* shard_name_ok(): a file name next to the index: no path, no control character. */
static bool shard_name_ok(const char *s)
{
	return *s && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 &&
	       name_ok(s);
}

/* What the first bytes of a file say it is (plain_sniff()). */
typedef enum pl_kind {
	PL_UNKNOWN,     /* none of these: st_import() names the problem */
	PL_SAFETENSORS, /* a sane 8-byte header length, then '{' */
	PL_TORCH_ZIP,   /* "PK\3\4" */
	PL_LEGACY,      /* a pickle (0x80 = PROTO): refused by bin_open() */
} pl_kind;

/*
 * plain_sniff(): the kind of a file of size bytes starting with the n bytes
 * b (n <= 9 is all it looks at).  Safetensors comes first and is strict: its
 * little-endian header length is at most GFS_PLAIN_MAX_HEADER and fits in
 * the file, and the header starts with '{'.  So a safetensors file whose
 * length's low byte is 0x80 (a header of 128, 384, ... bytes) is not taken
 * for a pickle, and no zip is taken for safetensors (byte 8 of a zip local
 * header is its compression method, never '{').
 */
static pl_kind plain_sniff(const uint8_t *b, size_t n, uint64_t size)
{
	if (n >= 9 && size >= 9) {
		const uint64_t hlen = gfs_le64(b);

		if (b[8] == '{' && hlen <= GFS_PLAIN_MAX_HEADER && hlen <= size - 8)
			return PL_SAFETENSORS;
	}
	if (n >= 4 && memcmp(b, "PK\3\4", 4) == 0)
		return PL_TORCH_ZIP;
	if (n >= 1 && b[0] == 0x80)
		return PL_LEGACY;
	return PL_UNKNOWN;
}

/* file_kind(): plain_sniff() of the file at path; PL_UNKNOWN if unreadable. */
static pl_kind file_kind(const char *path)
{
	uint8_t b[9];
	struct stat st;
	const int fd = open(path, O_RDONLY | O_CLOEXEC);
	pl_kind kind = PL_UNKNOWN;
	ssize_t n;

	if (fd < 0)
		return PL_UNKNOWN;
	if (fstat(fd, &st) == 0 && (n = pread(fd, b, sizeof(b), 0)) > 0)
		kind = plain_sniff(b, (size_t)n, (uint64_t)st.st_size);
	close(fd);
	return kind;
}

/* is_torch(): a torch.save file, zip or legacy (bin_import()'s, else st_import()'s). */
static bool is_torch(pl_kind kind)
{
	return kind == PL_TORCH_ZIP || kind == PL_LEGACY;
}

/* index_load(): read and hash the weight_map of the index JSON name. */
static gfs_err index_load(pl_import *pl, const char *name, cJSON **json)
{
	char path[PATH_MAX];
	uint64_t size = 0;
	char *text = NULL;
	const cJSON *wm;
	size_t n;
	uint32_t src;
	int fd = -1;
	gfs_err err = open_file(pl, name, NULL, path, sizeof(path), &fd, &size);

	if (err)
		return err;
	if (size > GFS_PLAIN_MAX_INDEX) {
		close(fd);
		return gfs_fail(GFS_ERR_LIMIT, "%s: %llu bytes: larger than an index can be", path,
				(unsigned long long)size);
	}
	text = malloc(size ? size : 1);
	err = text ? gfs_pread_full(fd, text, size, 0, path) : gfs_fail(GFS_ERR_NOMEM, "out of memory");
	close(fd);
	if (!err)
		err = gfs_json_parse(text, size, path, json);
	free(text);
	if (err)
		return err;
	err = add_source(pl, name, size, &src);
	if (err)
		return err;
	wm = gfs_json_get(*json, "weight_map");
	if (!cJSON_IsObject(wm))
		return gfs_fail(GFS_ERR_FORMAT, "%s: no weight_map object", path);
	n = (size_t)cJSON_GetArraySize(wm);
	if (n == 0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: the weight_map is empty", path);
	pl->want = gfs_calloc(n, sizeof(*pl->want));
	pl->hcap = 16;
	while (pl->hcap < 2 * n)
		pl->hcap *= 2;
	pl->hash = gfs_calloc(pl->hcap, sizeof(*pl->hash));
	if (!pl->want || !pl->hash)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	memset(pl->hash, 0xff, pl->hcap * sizeof(*pl->hash));
	for (const cJSON *it = wm->child; it; it = it->next) {
		const char *file = NULL;
		size_t h, s;

		if (!it->string)
			return gfs_fail(GFS_ERR_FORMAT, "%s: a weight_map entry has no name", path);
		err = gfs_json_str(it, path, "a weight_map value", &file);
		if (err)
			return err;
		if (!shard_name_ok(file))
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: %s: shard \"%.64s\" is not a file name next to the index",
					path, it->string, shown(file));
		for (s = 0; s < pl->nshards && strcmp(pl->shards[s], file) != 0; s++)
			;
		if (s == pl->nshards) {
			char **a = gfs_reallocarray(pl->shards, s + 1, sizeof(*a));

			if (!a)
				return gfs_fail(GFS_ERR_NOMEM, "out of memory");
			pl->shards = a;
			a[s] = gfs_strdup(file);
			if (!a[s])
				return gfs_fail(GFS_ERR_NOMEM, "out of memory");
			pl->nshards++;
		}
		h = (size_t)str_hash(it->string) & (pl->hcap - 1);
		while (pl->hash[h] != UINT32_MAX) {
			if (strcmp(pl->want[pl->hash[h]].name, it->string) == 0)
				return gfs_fail(GFS_ERR_FORMAT, "%s: weight_map lists %s twice", path,
						it->string);
			h = (h + 1) & (pl->hcap - 1);
		}
		pl->want[pl->nwant] = (pl_want){ .name = it->string, .shard = (uint32_t)s };
		pl->hash[h] = (uint32_t)pl->nwant++;
	}
	return GFS_OK;
}

/* index_import(): the index JSON name and every shard it names, in name order. */
static gfs_err index_import(pl_import *pl, const char *name)
{
	cJSON *json = NULL;
	char **order = NULL;
	gfs_err err;

	pl->index_name = name;
	err = index_load(pl, name, &json);
	if (!err) {
		order = gfs_calloc(pl->nshards, sizeof(*order));
		if (!order)
			err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	if (!err) {
		memcpy(order, pl->shards, pl->nshards * sizeof(*order));
		qsort(order, pl->nshards, sizeof(*order), cmp_str);
	}
	for (size_t i = 0; !err && i < pl->nshards; i++) {
		char path[PATH_MAX];
		size_t s = 0;

		while (pl->shards[s] != order[i])
			s++;
		snprintf(path, sizeof(path), "%s/%s", pl->dir, order[i]);
		err = is_torch(file_kind(path)) ? bin_import(pl, order[i], (int64_t)s)
						: st_import(pl, order[i], (int64_t)s);
	}
	for (size_t i = 0; !err && i < pl->nwant; i++)
		if (!pl->want[i].seen)
			err = gfs_fail(GFS_ERR_FORMAT,
				       "%s/%s: lists %s in %s, which does not hold it (index and shards disagree)",
				       pl->dir, name, pl->want[i].name, pl->shards[pl->want[i].shard]);
	free(order);
	cJSON_Delete(json);
	return err;
}

/* ------------------------------------------------------------- top level */

static void plain_free(pl_import *pl)
{
	for (size_t i = 0; i < pl->nshards; i++)
		free(pl->shards[i]);
	free(pl->shards);
	free(pl->want);
	free(pl->hash);
	gfs_layout_free(pl->l);
}

/*
 * plain_run(): import file name of directory dir (kind by name and
 * contents); root: pass dir's other files through.
 */
static gfs_err plain_run(const char *dir, const char *name, const char *prefix, bool root,
			 gfs_layout **out)
{
	pl_import pl = { .dir = dir, .prefix = prefix && *prefix ? prefix : NULL,
			 .strided_budget = GFS_PLAIN_MAX_STRIDED };
	char path[PATH_MAX], info[PATH_MAX + 64];
	const char *kind;
	gfs_err err;

	pl.plen = pl.prefix ? strlen(pl.prefix) : 0;
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
		return gfs_fail(GFS_ERR_LIMIT, "%s/%s: path too long", dir, name);
	err = gfs_layout_new("plain", dir, &pl.l);
	if (!err && root)
		err = gfs_layout_set_root(pl.l, dir);
	if (!err) {
		if (ends_with(name, ".index.json")) {
			kind = "sharded";
			err = index_import(&pl, name);
		} else if (is_torch(file_kind(path))) {
			kind = "torch zip";
			err = bin_import(&pl, name, -1);
		} else {
			kind = "safetensors";
			err = st_import(&pl, name, -1);
		}
	}
	if (!err && pl.prefix && pl.kept == 0)
		err = gfs_fail(GFS_ERR_NOTFOUND, "%s: no key starts with '%s'", path, pl.prefix);
	if (!err) {
		if (pl.nshards)
			snprintf(info, sizeof(info), "plain model files, %s: %s and %zu shards", kind,
				 name, pl.nshards);
		else
			snprintf(info, sizeof(info), "plain model file, %s: %s", kind, name);
		err = gfs_layout_set_info(pl.l, info);
	}
	if (!err)
		err = gfs_layout_finish(pl.l, path);
	if (!err) {
		*out = pl.l;
		pl.l = NULL;
	}
	plain_free(&pl);
	return err;
}

/* is_reg(): dir/name is a regular file (following links). */
static bool is_reg(const char *dir, const char *name)
{
	char path[PATH_MAX];
	struct stat st;

	return (size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) < sizeof(path) &&
	       stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

gfs_err gfs_import_plain_dir(const char *dir, const char *prefix, gfs_layout **out)
{
	struct stat st;

	if (stat(dir, &st) != 0)
		return gfs_fail(errno == ENOENT ? GFS_ERR_NOTFOUND : GFS_ERR_IO, "%s: %s", dir,
				strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return gfs_fail(GFS_ERR_INVAL, "%s: not a directory", dir);
	for (size_t i = 0; i < ARRAY_LEN(dir_files); i++)
		if (is_reg(dir, dir_files[i]))
			return plain_run(dir, dir_files[i], prefix, true, out);
	return gfs_fail(GFS_ERR_NOTFOUND,
			"%s: no plain model files (model.safetensors, pytorch_model.bin, their .index.json, adapter_model.safetensors or .bin)",
			dir);
}

gfs_err gfs_import_plain_file(const char *path, const char *prefix, gfs_layout **out)
{
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX];

	if (!slash)
		return plain_run(".", path, prefix, false, out);
	if ((size_t)(slash - path) >= sizeof(dir))
		return gfs_fail(GFS_ERR_LIMIT, "%s: path too long", path);
	if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	if (!slash[1])
		return gfs_fail(GFS_ERR_INVAL, "%s: not a file name", path);
	return plain_run(dir, slash + 1, prefix, false, out);
}

/* shard_form(): name is STEM-DIGITS-of-DIGITS.EXT. */
static bool shard_form(const char *name, const char *stem, const char *ext)
{
	const size_t sl = strlen(stem);
	const char *p = name + sl;
	size_t digits = 0;

	if (strncmp(name, stem, sl) != 0 || *p++ != '-')
		return false;
	while (*p >= '0' && *p <= '9')
		p++, digits++;
	if (!digits || strncmp(p, "-of-", 4) != 0)
		return false;
	p += 4;
	digits = 0;
	while (*p >= '0' && *p <= '9')
		p++, digits++;
	return digits && strcmp(p, ext) == 0;
}

bool gfs_plain_is_model_name(const char *name)
{
	for (size_t i = 0; i < N_MODEL_FILES; i++)
		if (strcmp(name, dir_files[i]) == 0)
			return true;
	return shard_form(name, "model", ".safetensors") || shard_form(name, "pytorch_model", ".bin");
}

bool gfs_plain_has_model(const char *dir)
{
	for (size_t i = 0; i < N_MODEL_FILES; i++)
		if (is_reg(dir, dir_files[i]))
			return true;
	return false;
}

bool gfs_plain_is_file(const char *path)
{
	uint8_t b[9];
	struct stat st;
	const int fd = open(path, O_RDONLY | O_CLOEXEC);
	bool yes = false;

	if (fd < 0)
		return false;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		if (ends_with(path, ".index.json")) {
			yes = true;
		} else {
			const ssize_t n = pread(fd, b, sizeof(b), 0);

			yes = n > 0 && plain_sniff(b, (size_t)n, (uint64_t)st.st_size) != PL_UNKNOWN;
		}
	}
	close(fd);
	return yes;
}

/* is_source(): root/name is a source of l. */
static bool is_source(const gfs_layout *l, const char *root, const char *name)
{
	const size_t dlen = strlen(root);

	for (size_t i = 0; i < l->nsources; i++) {
		const char *p = l->sources[i].abspath;

		if (strncmp(p, root, dlen) == 0 && p[dlen] == '/' && strcmp(p + dlen + 1, name) == 0)
			return true;
	}
	return false;
}

gfs_err gfs_plain_hidden_note(const gfs_layout *l, char **note)
{
	gfs_buf b = { 0 };
	char **names = NULL;
	size_t n = 0, cap = 0;
	DIR *d;
	const struct dirent *de;
	const bool plain = strcmp(l->format, "plain") == 0;
	bool oom = false;

	*note = NULL;
	if (!l->root_dir || !(d = opendir(l->root_dir)))
		return GFS_OK;
	while (!oom && (de = readdir(d))) {
		if (!gfs_plain_is_model_name(de->d_name) || !is_reg(l->root_dir, de->d_name) ||
		    is_source(l, l->root_dir, de->d_name))
			continue;
		oom = !gfs_grow((void **)&names, &cap, n, sizeof(*names), 4) ||
		      !(names[n] = gfs_strdup(de->d_name));
		n += !oom;
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof(*names), cmp_str);
	if (n && !oom) {
		gfs_buf_put(&b, l->root_dir, strlen(l->root_dir));
		gfs_buf_put(&b, ": hiding ", 9);
		for (size_t i = 0; i < n; i++) {
			if (i)
				gfs_buf_put(&b, ", ", 2);
			gfs_buf_put(&b, names[i], strlen(names[i]));
		}
		if (plain) {
			static const char shows[] = ": the mount shows the model it was imported from (";

			gfs_buf_put(&b, shows, strlen(shows));
			gfs_buf_put(&b, l->sources[0].path, strlen(l->sources[0].path));
			gfs_buf_put(&b, ")", 1);
		} else {
			static const char shows[] = ": the mount shows the ";
			static const char instead[] =
				" checkpoint (-o format=plain mounts the plain files instead)";

			gfs_buf_put(&b, shows, strlen(shows));
			gfs_buf_put(&b, l->format, strlen(l->format));
			gfs_buf_put(&b, instead, strlen(instead));
		}
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	if (oom || b.oom) {
		free(b.p);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	*note = (char *)b.p;
	return GFS_OK;
}
