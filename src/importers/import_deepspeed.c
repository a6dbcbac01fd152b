/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — DeepSpeed ZeRO 1/2/3 (and BF16_Optimizer) importer.
 *
 * Reads the pickles of every *_model_states.pt and *_optim_states.pt of one
 * tag and maps every output byte to ranges of those files (DESIGN.md §2):
 *   - key order: rank 0's `module` keys;
 *   - trainable params: fp32 masters from the optimizer partitions
 *     (stage 1/2: single_partition_of_fp32_groups, one flat per param group
 *     split across ranks; stage 3: fp32_flat_groups, each param split into
 *     ceil(numel / ws) elements per rank);
 *   - frozen params: stage 3 gathered from every rank's
 *     frozen_param_fragments, stage 2 from rank 0's, stage 1 and
 *     BF16_Optimizer from `module`, in their stored dtype;
 *   - buffers from `module` in their stored dtype;
 *   - `shared_params` aliases.
 * Padding elements are never mapped.  Tensor payloads are never read.
 * Every rank file must be the file its name says: its zip folder is its
 * own name (or archive/, which names nothing: a note), the optimizer
 * states files agree on stage and partition_count (the world size), and
 * the model states read record that dp_world_size.
 *
 * Split models (docs/deepspeed-3d.md): a pipeline (layer files; one
 * ds_ckpt per stage, each mapped as above, keys `N.NAME` by layer and a
 * tied weight once as tied_modules.KEY.NAME), mixture of experts (expert
 * files; dense and expert param groups) and tensor parallelism (one
 * ds_ckpt per tensor rank, slices joined as universal_checkpoint_info's
 * patterns say).
 */
#include "config.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/importers/import.h"
#include "gatherfs/readers/pickle.h"
#include "gatherfs/readers/torchzip.h"
#include "gatherfs/util/json.h"
#include "gatherfs/util/pfor.h"
#include "gatherfs/util/pyre.h"

#define DS_MAX_PICKLE ((uint64_t)1 << 30)
#define DS_MAX_RANKS 65536
/* What an optimizer state name (a folder name under optim/) must not hold. */
#define STATE_BAD_BYTES "/\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f" \
	"\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\x7f"

/* One opened .pt file of the checkpoint. */
typedef struct ds_file {
	char *name;     /* file name inside the tag directory */
	char *path;     /* full path, for messages */
	int fd;
	uint64_t size;
	gfs_tzip *zip;
	gfs_pickle *pk;
	const gfs_pv *root;
	int64_t src;    /* layout source index once used, else -1 */
	struct ds_frag *frags; /* ZeRO-3 rank > 0 with frozen params: [nfrags], in the
				  order of rank 0's frozen_param_shapes */
	size_t nfrags;
	bool anonymous; /* its zip folder is archive/ (torch.save to a file
			   object): it records no name to check */
	/* optimizer states file: what it says it was written with */
	int stage;
	bool bf16opt;
	uint64_t ws;    /* its partition_count */
} ds_file;

/* A 1-D run of elements made of consecutive pieces of source files. */
typedef struct flat_seg {
	uint32_t src;
	uint64_t off;   /* byte offset in the source */
	uint64_t start; /* first element of this segment in the flat */
	uint64_t nelem;
} flat_seg;

typedef struct flat {
	flat_seg *segs;
	size_t n, cap;
	uint64_t total; /* elements */
	gfs_dtype dtype;
} flat;

/* Where a tensor's bytes are, as read from a pickle. */
typedef struct tview {
	gfs_dtype dtype;
	uint32_t ndim;
	uint64_t shape[GFS_MAX_DIMS];
	uint64_t numel;
	uint32_t src;
	uint64_t off; /* byte offset of element 0 in the source */
} tview;

typedef enum plan_kind { PLAN_MODULE, PLAN_TRAIN, PLAN_FROZEN, PLAN_ALIAS } plan_kind;

/* What to do with a trainable param: its place in the flats. */
typedef struct train_param {
	const char *name;
	const gfs_pv *shape;
	size_t group;    /* stage 1/2: param group index */
	uint64_t offset; /* stage 1/2: element offset in the group flat; stage 3: per-rank offset */
	bool used;       /* pipeline: served (here, or by an earlier stage: dup) */
	bool dup;        /* pipeline: a tied weight an earlier stage serves */
} train_param;

typedef struct ds_ckpt {
	const char *label;   /* the directory the user named */
	char *tagdir;
	int stage;           /* 1, 2, 3; BF16_Optimizer imports as 1 */
	bool bf16_optimizer;
	uint64_t ws;
	ds_file *optim;      /* [noptim] by rank */
	size_t noptim;
	ds_file *model;      /* stage 3: [ws] by rank; else [1] */
	size_t nmodel;
	gfs_layout *l;
	train_param *train;
	size_t ntrain;
	/* name -> index into train, open addressing */
	uint32_t *tmap;
	size_t tmap_cap;
	flat *rank_flats;    /* stage 3: [ws] */
	flat *group_flats;   /* stage 1/2: [ngroups] */
	size_t ngroups;
	size_t nsub;         /* stage 3: sub-groups (fp32_flat_groups per rank) */
	struct ds_state *states; /* optimizer states, in rank 0's order */
	size_t nstates;
	struct fshape_key *fkeys; /* rank 0's frozen_param_shapes by name */
	size_t nfkeys;
	struct rf_set *rfsets;   /* stage 3: the per-rank flats seen by emit_slices() */
	size_t nrfsets;
	/* a pipeline (PipelineModule) checkpoint: one ds_ckpt per stage
	 * (model-parallel rank) sharing l, and the layer files */
	struct ds_ckpt *stages;
	size_t nstages;
	ds_file *layers;     /* [nlayers] by layer index; fd -1 and no name where absent */
	size_t nlayers;
	struct pipe_layer *play; /* [nlayers] */
	bool tp;             /* stages are tensor ranks (no layer files), not pipeline stages */
	const char *tp_split; /* -o tp_split=FILE: the split patterns, or NULL */
	/* a mixture-of-experts checkpoint */
	ds_file *experts;    /* [nexperts] expert files, MoE layer by layer, global id order */
	size_t nexperts;
	uint64_t *moe_n;     /* [nmoe] experts of each MoE layer */
	size_t nmoe;
	uint64_t ep;         /* expert-parallel size */
	size_t gdense, gexp; /* the optimizer's dense and expert param groups */
	struct moe_param *mparams; /* [nmparams]: dense ones in `module` order, then experts */
	size_t nmparams;
	flat *mflats;        /* [1 + ep]: dense masters, then each expert-parallel rank's */
	ds_file *zip_held;   /* the expert file whose zip moe_zip() read again, or NULL */
} ds_ckpt;

/*
 * Stage 3 per-rank flats (rank_flats, or a state's flats) as regular flats
 * of the layout: when every rank's flat has the same segments (one per
 * sub-group: same start, length and dtype, neighbouring ranks in other
 * files), a param's partitions lie at the same offset of one segment on
 * every rank: one gfs_layout_add_partition(), not ws pieces.
 */
typedef struct rf_set {
	const flat *flats;  /* [ws] */
	bool uniform;
	uint32_t *ids;      /* [segments of rank 0]: layout regular flat, or UINT32_MAX */
} rf_set;

/*
 * One optimizer state of the torch optimizer DeepSpeed wraps.  Per-element
 * states are flats laid out like the fp32 masters; a 0-d tensor state (the
 * step) is a value per flat group, taken from rank 0.
 */
typedef struct ds_state {
	const char *name;   /* borrowed from rank 0's pickle */
	bool scalar;
	flat *flats;        /* per-element: stage 1/2 [ngroups], stage 3 [ws] */
	tview *values;      /* scalar: per flat group (stage 1/2 ngroups, stage 3 nsub) */
} ds_state;

/* ------------------------------------------------------------------ files */

/* kind_phrase(): "a dict", "an object"... for messages. */
static const char *kind_phrase(const gfs_pv *v, char *buf, size_t n)
{
	const char *k = v ? gfs_pv_kind_name(v->kind) : "nothing";

	snprintf(buf, n, "%s%s", !v ? "" : strchr("aeiou", k[0]) ? "an " : "a ", k);
	return buf;
}

/* printable(): s with control bytes as '?', cut to n - 1 bytes, in buf. */
static const char *printable(const char *s, char *buf, size_t n)
{
	size_t i = 0;

	assert(n > 0);
	for (; s[i] && i + 1 < n; i++)
		buf[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
	buf[i] = '\0';
	return buf;
}

/*
 * name_check(): a torch.save to a path names the zip folder after the
 * file (zero_pp_rank_1_mp_rank_00_optim_states/data.pkl), and copying or
 * renaming the file keeps it: prefix, f's zip folder, must be f's name
 * without ".pt", or "archive" (torch.save to a file object records no
 * name: f->anonymous is set).
 */
static gfs_err name_check(ds_file *f, const char *prefix)
{
	const size_t n = strlen(f->name);
	char shown[160];

	assert(n > 3 && strcmp(f->name + n - 3, ".pt") == 0);
	if (strlen(prefix) == n - 3 && strncmp(prefix, f->name, n - 3) == 0)
		return GFS_OK;
	if (strcmp(prefix, "archive") == 0) {
		f->anonymous = true;
		return GFS_OK;
	}
	return gfs_fail(GFS_ERR_FORMAT,
			"%s: its zip folder is %s/, not the file's own name: a copied or renamed rank file",
			f->path, printable(prefix, shown, sizeof(shown)));
}

/*
 * name_peek(): name_check() of f, opened by file_stat() but not read,
 * from the name of its first zip record alone (one pread).
 */
static gfs_err name_peek(ds_file *f)
{
	char *prefix;
	gfs_err err = gfs_tzip_peek_prefix(f->fd, f->size, f->path, &prefix);

	if (!err && prefix)
		err = name_check(f, prefix);
	free(prefix);
	return err;
}

/*
 * file_stat(): open dir/name (f->fd) and check that it is a non-empty
 * regular file, setting f's name, path and size.
 */
static gfs_err file_stat(ds_file *f, const char *dir, const char *name)
{
	struct stat st;
	const size_t plen = strlen(dir) + 1 + strlen(name) + 1;

	f->fd = -1;
	f->src = -1;
	f->name = gfs_strdup(name);
	f->path = malloc(plen);
	if (!f->name || !f->path)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	snprintf(f->path, plen, "%s/%s", dir, name);
	f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0)
		return gfs_fail(errno == ENOENT ? GFS_ERR_NOTFOUND : GFS_ERR_IO,
				"%s: cannot open: %s", f->path, strerror(errno));
	if (fstat(f->fd, &st) != 0)
		return gfs_fail(GFS_ERR_IO, "%s: stat failed: %s", f->path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return gfs_fail(GFS_ERR_FORMAT, "%s: not a regular file", f->path);
	f->size = (uint64_t)st.st_size;
	if (f->size == 0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: empty file (0 bytes), not a torch checkpoint",
				f->path);
	return GFS_OK;
}

/*
 * file_read(): read the zip directory and the pickle of f, checked by
 * file_stat(); the zip's folder must be f's name (name_check()).
 */
static gfs_err file_read(ds_file *f)
{
	const gfs_tzip_record *rec;
	uint8_t *buf = NULL;
	size_t len = 0;
	char label[4096 + 64];
	gfs_err err = gfs_tzip_open(f->fd, 0, f->size, f->path, NULL, &f->zip);

	if (!err)
		err = name_check(f, gfs_tzip_prefix(f->zip));
	if (err)
		return err;
	rec = gfs_tzip_find(f->zip, "data.pkl");
	if (!rec)
		return gfs_fail(GFS_ERR_FORMAT, "%s: no data.pkl in the archive", f->path);
	err = gfs_tzip_read_record(f->zip, rec, DS_MAX_PICKLE, &buf, &len);
	if (err)
		return err;
	snprintf(label, sizeof(label), "%s:%s", f->path, rec->name);
	err = gfs_pickle_load(buf, len, label, NULL, &f->pk);
	free(buf);
	if (err)
		return err;
	f->root = gfs_pickle_root(f->pk);
	if (!f->root || f->root->kind != GFS_PV_DICT)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: not a DeepSpeed checkpoint file: its pickle holds %s, not a dict",
				f->path, kind_phrase(f->root, label, sizeof(label)));
	return GFS_OK;
}

static gfs_err file_open(ds_file *f, const char *dir, const char *name)
{
	const gfs_err err = file_stat(f, dir, name);

	return err ? err : file_read(f);
}

static void frags_free(ds_file *f);

static void file_close(ds_file *f)
{
	frags_free(f);
	gfs_pickle_free(f->pk);
	gfs_tzip_close(f->zip);
	if (f->fd >= 0)
		close(f->fd);
	free(f->name);
	free(f->path);
}

/*
 * file_release(): free what f read (pickle, zip directory) and close it,
 * keeping its name, path and size: a file checked but not read again.
 */
static void file_release(ds_file *f)
{
	gfs_pickle_free(f->pk);
	f->pk = NULL;
	f->root = NULL;
	gfs_tzip_close(f->zip);
	f->zip = NULL;
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
}

/*
 * has_frozen(): does the ZeRO-3 model states file f list frozen params
 * (whose fragments every rank's model states file holds)?
 */
static bool has_frozen(const ds_file *f)
{
	const gfs_pv *fs = gfs_pv_dict_get(f->root, "frozen_param_shapes");

	return fs && fs->kind == GFS_PV_DICT && fs->u.dict.len > 0;
}

static gfs_err file_source(ds_ckpt *c, ds_file *f, uint32_t *src)
{
	if (f->src < 0) {
		uint32_t idx;
		const gfs_err err = gfs_layout_add_source(c->l, f->name, f->size, &idx);

		if (err)
			return err;
		f->src = idx;
	}
	*src = (uint32_t)f->src;
	return GFS_OK;
}

/* ---------------------------------------------------------------- tensors */

static gfs_err shape_from_pv(const gfs_pv *v, const char *path, const char *what,
			     uint32_t *ndim, uint64_t *shape, uint64_t *numel)
{
	const size_t n = gfs_pv_seq_len(v);
	uint64_t total = 1;

	if (!v || v->kind != GFS_PV_TUPLE)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: shape is not a tuple", path, what);
	if (n > GFS_MAX_DIMS)
		return gfs_fail(GFS_ERR_LIMIT, "%s: %s: %zu dimensions", path, what, n);
	for (size_t d = 0; d < n; d++) {
		int64_t x;

		if (!gfs_pv_int(gfs_pv_seq_at(v, d), &x) || x < 0)
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s: bad shape dimension", path, what);
		shape[d] = (uint64_t)x;
		if (!gfs_mul_u64(total, shape[d], &total))
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s: shape overflows", path, what);
	}
	*ndim = (uint32_t)n;
	*numel = total;
	return GFS_OK;
}

/*
 * Where a tensor's bytes lie in its file, found without touching the
 * layout: what tensor_place() needs once the pickle is freed.
 */
typedef struct tloc {
	tview tv;          /* all but src */
	uint64_t first;    /* byte offset of element 0 in the record */
	uint64_t rec_off;  /* the record holding it */
	uint64_t rec_size;
	uint32_t crc32;
	const char *rec_name; /* the zip directory's, or an owned copy */
} tloc;

/*
 * tensor_locate(): locate the bytes of a pickled tensor of file f.  The
 * tensor must be C-contiguous and lie inside its storage record.  Touches
 * nothing but f: safe on a thread per file.
 */
static gfs_err tensor_locate(const ds_file *f, const gfs_pv *v, const char *what, tloc *out)
{
	const gfs_pv_tensor *t;
	const gfs_tzip_record *rec;
	tview *const tv = &out->tv;
	uint64_t esize, expect = 1, nbytes, end;
	gfs_err err;

	if (!v || v->kind != GFS_PV_TENSOR) {
		char kind[32];

		return gfs_fail(GFS_ERR_FORMAT, "%s: %s is %s, not a tensor", f->path, what,
				v ? kind_phrase(v, kind, sizeof(kind)) : "missing");
	}
	t = v->u.tensor;
	tv->dtype = t->dtype ? gfs_dtype_parse(t->dtype)
			     : gfs_dtype_from_storage_class(t->storage.cls);
	if (tv->dtype == GFS_DT_INVALID)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: %s: unsupported storage type %s", f->path,
				what, t->dtype ? t->dtype : t->storage.cls);
	esize = gfs_dtype_size(tv->dtype);
	if (t->ndim > GFS_MAX_DIMS)
		return gfs_fail(GFS_ERR_LIMIT, "%s: %s: too many dimensions", f->path, what);
	tv->ndim = t->ndim;
	tv->numel = 1;
	for (uint32_t d = 0; d < t->ndim; d++) {
		if (t->size[d] < 0)
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s: negative size", f->path, what);
		tv->shape[d] = (uint64_t)t->size[d];
		if (!gfs_mul_u64(tv->numel, tv->shape[d], &tv->numel))
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s: size overflows", f->path, what);
	}
	for (uint32_t d = t->ndim; d-- > 0;) {
		if (tv->shape[d] > 1 && t->stride[d] != (int64_t)expect && tv->numel > 0)
			return gfs_fail(GFS_ERR_UNSUPPORTED,
					"%s: %s is not contiguous (stride %lld in dimension %u)",
					f->path, what, (long long)t->stride[d], d);
		(void)gfs_mul_u64(expect, tv->shape[d] ? tv->shape[d] : 1, &expect);
	}
	if (t->offset < 0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: negative storage offset", f->path, what);
	err = gfs_tzip_storage_record(f->zip, t->storage.key, &rec);
	if (err)
		return gfs_fail_prefix(err, "%s", what);
	if (!gfs_mul_u64((uint64_t)t->offset, esize, &out->first) ||
	    !gfs_mul_u64(tv->numel, esize, &nbytes) || !gfs_add_u64(out->first, nbytes, &end) ||
	    end > rec->size)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: %s: elements %lld..+%llu lie outside storage data/%s (%llu bytes): truncated or corrupt",
				f->path, what, (long long)t->offset, (unsigned long long)tv->numel,
				t->storage.key, (unsigned long long)rec->size);
	out->rec_off = rec->data_off;
	out->rec_size = rec->size;
	out->crc32 = rec->crc32;
	out->rec_name = rec->name;
	return GFS_OK;
}

/*
 * tensor_place(): the view of a located tensor of file f, its file a source
 * of the layout and its record registered (the whole record is checked: a
 * CRC covers it all).
 */
static gfs_err tensor_place(ds_ckpt *c, ds_file *f, const tloc *loc, tview *out)
{
	gfs_err err;

	*out = loc->tv;
	err = file_source(c, f, &out->src);
	if (!err) {
		const gfs_record r = {
			.src = out->src, .kind = GFS_PIECE_FILE,
			.off = loc->rec_off, .len = loc->rec_size, .crc32 = loc->crc32,
		};

		err = gfs_layout_add_record(c->l, &r, loc->rec_name);
	}
	if (err)
		return err;
	out->off = loc->rec_off + loc->first;
	return GFS_OK;
}

/* tensor_view(): tensor_locate() then tensor_place(). */
static gfs_err tensor_view(ds_ckpt *c, ds_file *f, const gfs_pv *v, const char *what,
			   tview *out)
{
	tloc loc;
	const gfs_err err = tensor_locate(f, v, what, &loc);

	return err ? err : tensor_place(c, f, &loc, out);
}

/* ------------------------------------------------------ frozen fragments */

/*
 * A frozen param's fragment in the model states file of a rank > 0, read
 * when the file is opened, so that its pickle is freed at once (the import
 * holds one rank's pickle per thread, not ws of them).
 */
typedef struct ds_frag {
	gfs_err err;       /* GFS_OK, or why the fragment is unusable */
	char *msg;         /* err: the message tensor_locate() gave */
	gfs_dtype dtype;
	uint64_t numel;
	uint64_t first;    /* as in tloc */
	uint64_t rec_off;
	uint64_t rec_size;
	uint32_t crc32;
	char *rec_name;
} ds_frag;

static void frags_free(ds_file *f)
{
	for (size_t k = 0; k < f->nfrags; k++) {
		free(f->frags[k].msg);
		free(f->frags[k].rec_name);
	}
	free(f->frags);
	f->frags = NULL;
	f->nfrags = 0;
}

/*
 * frags_read(): the fragments in f of the frozen params fshapes (rank 0's
 * frozen_param_shapes) names.  A bad fragment is kept as its error, given
 * when the param is emitted, as if it were read then.
 */
static gfs_err frags_read(ds_file *f, const gfs_pv *fshapes)
{
	const gfs_pv *frags = gfs_pv_dict_get(f->root, "frozen_param_fragments");
	const size_t n = fshapes->u.dict.len;

	f->frags = gfs_calloc(n ? n : 1, sizeof(*f->frags));
	if (!f->frags)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	f->nfrags = n;
	for (size_t k = 0; k < n; k++) {
		const char *name = gfs_pv_name(fshapes->u.dict.items[k].key);
		ds_frag *const fr = &f->frags[k];
		tloc loc;

		if (!name)
			continue; /* never emitted: build_entries() refuses the name */
		fr->err = tensor_locate(f, gfs_pv_dict_get(frags, name), name, &loc);
		if (fr->err) {
			fr->msg = gfs_strdup(gfs_errmsg());
			if (!fr->msg)
				return gfs_fail(GFS_ERR_NOMEM, "out of memory");
			continue;
		}
		fr->dtype = loc.tv.dtype;
		fr->numel = loc.tv.numel;
		fr->first = loc.first;
		fr->rec_off = loc.rec_off;
		fr->rec_size = loc.rec_size;
		fr->crc32 = loc.crc32;
		fr->rec_name = gfs_strdup(loc.rec_name);
		if (!fr->rec_name)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	return GFS_OK;
}

/* frag_view(): tensor_view() of fragment k of f, read by frags_read(). */
static gfs_err frag_view(ds_ckpt *c, ds_file *f, size_t k, tview *out)
{
	const ds_frag *fr = &f->frags[k];
	tloc loc = { .tv = { .dtype = fr->dtype, .ndim = 1, .shape = { fr->numel },
			     .numel = fr->numel },
		     .first = fr->first, .rec_off = fr->rec_off, .rec_size = fr->rec_size,
		     .crc32 = fr->crc32, .rec_name = fr->rec_name };

	assert(k < f->nfrags);
	if (fr->err)
		return gfs_fail(fr->err, "%s", fr->msg);
	return tensor_place(c, f, &loc, out);
}

/* ------------------------------------------------------------------ flats */

static gfs_err flat_append(flat *fl, const tview *tv, uint64_t nelem, const char *what)
{
	if (fl->n == 0 && fl->dtype == GFS_DT_INVALID)
		fl->dtype = tv->dtype;
	if (tv->dtype != fl->dtype)
		return gfs_fail(GFS_ERR_FORMAT, "%s: dtype %s differs from %s", what,
				gfs_dtype_name(tv->dtype), gfs_dtype_name(fl->dtype));
	if (nelem == 0)
		return GFS_OK;
	if (!gfs_grow((void **)&fl->segs, &fl->cap, fl->n, sizeof(*fl->segs), 8))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	fl->segs[fl->n++] = (flat_seg){
		.src = tv->src, .off = tv->off, .start = fl->total, .nelem = nelem,
	};
	fl->total += nelem;
	return GFS_OK;
}

/*
 * flat_walk(): elements [start, start + n) of fl as pieces appended to
 * tensor ti or, with replica, as replicas of its bytes from 0 on.
 */
static gfs_err flat_walk(gfs_layout *l, size_t ti, const flat *fl, uint64_t start, uint64_t n,
			 bool replica)
{
	const uint64_t es = gfs_dtype_size(fl->dtype);
	uint64_t toff = 0;
	size_t lo = 0, hi = fl->n;

	assert(start + n <= fl->total);
	if (n == 0)
		return GFS_OK;
	while (hi - lo > 1) {
		const size_t mid = lo + (hi - lo) / 2;

		if (fl->segs[mid].start <= start)
			lo = mid;
		else
			hi = mid;
	}
	for (size_t s = lo; n > 0; s++) {
		const flat_seg *sg = &fl->segs[s];
		const uint64_t in = start - sg->start;
		const uint64_t take = sg->nelem - in < n ? sg->nelem - in : n;
		const gfs_piece rp = { .kind = GFS_PIECE_FILE, .src = sg->src, .toff = toff,
				       .src_off = sg->off + in * es, .len = take * es, .count = 1 };
		const gfs_err err = replica ? gfs_layout_add_replica(l, ti, &rp)
					    : gfs_layout_add_piece(l, ti, sg->src, sg->off + in * es,
								   take * es);

		assert(s < fl->n && start >= sg->start && in < sg->nelem);
		if (err)
			return err;
		start += take;
		toff += take * es;
		n -= take;
	}
	return GFS_OK;
}

/* flat_emit(): add pieces for elements [start, start + n) of fl to tensor ti. */
static gfs_err flat_emit(gfs_layout *l, size_t ti, const flat *fl, uint64_t start,
			 uint64_t n)
{
	return flat_walk(l, ti, fl, start, n, false);
}

static void flats_free(flat *fl, size_t n)
{
	for (size_t i = 0; fl && i < n; i++)
		free(fl[i].segs);
	free(fl);
}

/* ------------------------------------------------------- name -> param map */

static uint64_t str_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++) {
		h ^= (uint8_t)*s;
		h *= 1099511628211ull;
	}
	return h;
}

static gfs_err tmap_build(ds_ckpt *c)
{
	size_t cap = 16;

	while (cap < c->ntrain * 2)
		cap *= 2;
	c->tmap = malloc(cap * sizeof(*c->tmap));
	if (!c->tmap)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	memset(c->tmap, 0xff, cap * sizeof(*c->tmap));
	c->tmap_cap = cap;
	for (size_t i = 0; i < c->ntrain; i++) {
		size_t h = (size_t)str_hash(c->train[i].name) & (cap - 1);

		while (c->tmap[h] != UINT32_MAX) {
			if (strcmp(c->train[c->tmap[h]].name, c->train[i].name) == 0)
				return gfs_fail(GFS_ERR_FORMAT, "%s: param %s appears twice in param_shapes",
						c->model[0].path, c->train[i].name);
			h = (h + 1) & (cap - 1);
		}
		c->tmap[h] = (uint32_t)i;
	}
	return GFS_OK;
}

static const train_param *tmap_find(const ds_ckpt *c, const char *name)
{
	size_t h = (size_t)str_hash(name) & (c->tmap_cap - 1);

	while (c->tmap[h] != UINT32_MAX) {
		if (strcmp(c->train[c->tmap[h]].name, name) == 0)
			return &c->train[c->tmap[h]];
		h = (h + 1) & (c->tmap_cap - 1);
	}
	return NULL;
}

static gfs_err train_push(ds_ckpt *c, const char *name, const gfs_pv *shape, size_t group,
			  uint64_t offset, size_t *cap)
{
	if (!gfs_grow((void **)&c->train, cap, c->ntrain, sizeof(*c->train), 64))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	c->train[c->ntrain++] = (train_param){
		.name = name, .shape = shape, .group = group, .offset = offset,
	};
	return GFS_OK;
}

/* --------------------------------------------------------- discovery */

typedef struct ds_name {
	char *name;
	uint64_t rank;
	bool model;
} ds_name;

/* parse_u64(): decimal digits at *p, advancing; false if none or overflow. */
static bool parse_u64(const char **p, uint64_t *out)
{
	uint64_t v = 0;
	const char *s = *p;

	if (*s < '0' || *s > '9')
		return false;
	for (; *s >= '0' && *s <= '9'; s++)
		if (!gfs_mul_u64(v, 10, &v) || !gfs_add_u64(v, (uint64_t)(*s - '0'), &v))
			return false;
	*p = s;
	*out = v;
	return true;
}

static bool eat(const char **p, const char *lit)
{
	const size_t n = strlen(lit);

	if (strncmp(*p, lit, n) != 0)
		return false;
	*p += n;
	return true;
}

/* What classify() recognises. */
typedef enum ds_kind {
	DS_OTHER,   /* not ours (expp_rank_* stubs of MoE runs included) */
	DS_OPTIM,   /* [bf16_]zero_pp_rank_R_mp_rank_MM_optim_states.pt */
	DS_ZMODEL,  /* zero_pp_rank_R_mp_rank_MM_model_states.pt */
	DS_MPMODEL, /* mp_rank_MM_model_states.pt */
	DS_LAYER,   /* layer_XX-model_states.pt, layer_XX-model_TT-model_states.pt */
	DS_EXPERT,  /* layer_L_expert_X_mp_rank_MM_model_states.pt */
} ds_kind;

/*
 * classify(): the kind of file name; *rank is R (a layer file: XX), *mp
 * MM (a layer file: TT, 0 without it).
 */
static ds_kind classify(const char *name, uint64_t *rank, uint64_t *mp)
{
	const char *p = name;

	*rank = 0;
	*mp = 0;
	if (eat(&p, "mp_rank_"))
		return parse_u64(&p, mp) && strcmp(p, "_model_states.pt") == 0 ? DS_MPMODEL
										: DS_OTHER;
	if (eat(&p, "layer_")) {
		if (!parse_u64(&p, rank))
			return DS_OTHER;
		if (eat(&p, "_expert_"))
			return parse_u64(&p, mp) && eat(&p, "_mp_rank_") && parse_u64(&p, mp) &&
			       strcmp(p, "_model_states.pt") == 0 ? DS_EXPERT : DS_OTHER;
		if (strcmp(p, "-model_states.pt") == 0)
			return DS_LAYER;
		return eat(&p, "-model_") && parse_u64(&p, mp) &&
		       strcmp(p, "-model_states.pt") == 0 ? DS_LAYER : DS_OTHER;
	}
	(void)eat(&p, "bf16_");
	if (!eat(&p, "zero_pp_rank_") || !parse_u64(&p, rank) || !eat(&p, "_mp_rank_") ||
	    !parse_u64(&p, mp))
		return DS_OTHER;
	if (strcmp(p, "_optim_states.pt") == 0)
		return DS_OPTIM;
	if (strcmp(p, "_model_states.pt") == 0 && strncmp(name, "bf16_", 5) != 0)
		return DS_ZMODEL;
	return DS_OTHER;
}

/* The files of one model-parallel rank (pipeline stage). */
typedef struct ds_listing {
	char **optim;   /* [n_optim_slots] by rank, NULL where absent */
	size_t noptim;  /* highest rank + 1 */
	char **zmodel;  /* by rank */
	size_t nzmodel;
	char *mpmodel;
	size_t count_optim, count_zmodel;
} ds_listing;

/* The files of a tag directory. */
typedef struct ds_dir {
	ds_listing *mp;  /* [nmp] by model-parallel rank; mp[0] always exists */
	size_t nmp;
	char **layers;   /* pipeline layer files by layer index, NULL where absent */
	size_t nlayers;
	char *expert;    /* an expert file (MoE), or NULL */
	size_t nexpert;  /* expert files */
	char *tp_layer;  /* a layer file of tensor-parallel rank > 0, or NULL */
} ds_dir;

static void listing_free(ds_listing *ls)
{
	for (size_t i = 0; i < ls->noptim; i++)
		free(ls->optim[i]);
	for (size_t i = 0; i < ls->nzmodel; i++)
		free(ls->zmodel[i]);
	free(ls->optim);
	free(ls->zmodel);
	free(ls->mpmodel);
}

/* dir_free(): free what list_tagdir() filled in d; d is left empty. */
static void dir_free(ds_dir *d)
{
	for (size_t i = 0; i < d->nmp; i++)
		listing_free(&d->mp[i]);
	for (size_t i = 0; i < d->nlayers; i++)
		free(d->layers[i]);
	free(d->mp);
	free(d->layers);
	free(d->expert);
	free(d->tp_layer);
	memset(d, 0, sizeof(*d));
}

static gfs_err slot_put(char ***arr, size_t *n, uint64_t rank, const char *name,
			const char *dir)
{
	if (rank >= DS_MAX_RANKS)
		return gfs_fail(GFS_ERR_LIMIT, "%s/%s: rank %llu is too large", dir, name,
				(unsigned long long)rank);
	if (rank >= *n) {
		char **a = gfs_reallocarray(*arr, (size_t)rank + 1, sizeof(*a));

		if (!a)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		memset(a + *n, 0, ((size_t)rank + 1 - *n) * sizeof(*a));
		*arr = a;
		*n = (size_t)rank + 1;
	}
	if ((*arr)[rank])
		return gfs_fail(GFS_ERR_FORMAT, "%s: two files for rank %llu: %s and %s", dir,
				(unsigned long long)rank, (*arr)[rank], name);
	(*arr)[rank] = gfs_strdup(name);
	return (*arr)[rank] ? GFS_OK : gfs_fail(GFS_ERR_NOMEM, "out of memory");
}

/* mp_slot(): the listing of model-parallel rank mp of d, made on first use. */
static gfs_err mp_slot(ds_dir *d, uint64_t mp, const char *name, const char *dir,
		       ds_listing **out)
{
	if (mp >= DS_MAX_RANKS)
		return gfs_fail(GFS_ERR_LIMIT, "%s/%s: model-parallel rank %llu is too large", dir,
				name, (unsigned long long)mp);
	if (mp >= d->nmp) {
		ds_listing *a = gfs_reallocarray(d->mp, (size_t)mp + 1, sizeof(*a));

		if (!a)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		memset(a + d->nmp, 0, ((size_t)mp + 1 - d->nmp) * sizeof(*a));
		d->mp = a;
		d->nmp = (size_t)mp + 1;
	}
	*out = &d->mp[mp];
	return GFS_OK;
}

/* keep_name(): *slot = a copy of name unless it holds one already. */
static gfs_err keep_name(char **slot, const char *name)
{
	if (!*slot && !(*slot = gfs_strdup(name)))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	return GFS_OK;
}

/*
 * list_tagdir(): the DeepSpeed files of tag directory dir (classify()), by
 * model-parallel rank, layer and kind, in d (dir_free() frees it).  Two
 * files for one slot (rank, layer) are refused.
 */
static gfs_err list_tagdir(const char *dir, ds_dir *d)
{
	DIR *dh = opendir(dir);
	const struct dirent *de;
	ds_listing *ls;
	gfs_err err;

	memset(d, 0, sizeof(*d));
	if (!dh)
		return gfs_fail(errno == ENOENT ? GFS_ERR_NOTFOUND : GFS_ERR_IO,
				"%s: cannot open directory: %s", dir, strerror(errno));
	err = mp_slot(d, 0, "", dir, &ls);
	while (!err && (de = readdir(dh)) != NULL) {
		uint64_t rank, mp;
		const ds_kind kind = classify(de->d_name, &rank, &mp);

		if (kind == DS_OTHER)
			continue;
		if (kind == DS_EXPERT) {
			d->nexpert++;
			err = keep_name(&d->expert, de->d_name);
			continue;
		}
		if (kind == DS_LAYER) {
			err = mp > 0 ? keep_name(&d->tp_layer, de->d_name)
				     : slot_put(&d->layers, &d->nlayers, rank, de->d_name, dir);
			continue;
		}
		err = mp_slot(d, mp, de->d_name, dir, &ls);
		if (err)
			break;
		if (kind == DS_OPTIM) {
			err = slot_put(&ls->optim, &ls->noptim, rank, de->d_name, dir);
			ls->count_optim++;
		} else if (kind == DS_ZMODEL) {
			err = slot_put(&ls->zmodel, &ls->nzmodel, rank, de->d_name, dir);
			ls->count_zmodel++;
		} else {
			err = keep_name(&ls->mpmodel, de->d_name);
		}
	}
	closedir(dh);
	if (err)
		dir_free(d);
	return err;
}

/* ------------------------------------------------------------ stage, ws */

static gfs_err read_stage(ds_ckpt *c, const ds_file *f, const gfs_pv *osd, int *stage,
			  bool *bf16opt)
{
	const gfs_pv *zs = gfs_pv_dict_get(osd, "zero_stage");
	const char *mod, *cls, *member;
	int64_t value;
	bool has_value;

	(void)c;
	*bf16opt = false;
	if (!zs) {
		if (!gfs_pv_dict_get(osd, "single_partition_of_fp32_groups"))
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: not a DeepSpeed ZeRO optimizer state (no zero_stage, no fp32 partitions)",
					f->path);
		*bf16opt = true;
		*stage = 1;
		return GFS_OK;
	}
	if (gfs_pv_int(zs, &value)) {
		has_value = true;
	} else if (gfs_pv_enum(zs, &mod, &cls, &member, &value, &has_value)) {
		static const char *const names[] = { "disabled", "optimizer_states", "gradients",
						     "weights" };

		if (!has_value) {
			value = -1;
			for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
				if (strcmp(member, names[i]) == 0)
					value = (int64_t)i;
			if (value < 0)
				return gfs_fail(GFS_ERR_FORMAT, "%s: unknown zero_stage %s.%s",
						f->path, cls, member);
		}
	} else {
		char kind[32];

		return gfs_fail(GFS_ERR_FORMAT, "%s: zero_stage is %s", f->path,
				kind_phrase(zs, kind, sizeof(kind)));
	}
	if (value < 1 || value > 3)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: ZeRO stage %lld is not supported",
				f->path, (long long)value);
	*stage = (int)value;
	return GFS_OK;
}

static gfs_err read_ws(const ds_file *f, const gfs_pv *osd, uint64_t *ws)
{
	const gfs_pv *pc = gfs_pv_dict_get(osd, "partition_count");
	int64_t v = 0;

	if (gfs_pv_int(pc, &v)) {
		/* stage 3: an int */
	} else if (pc && (pc->kind == GFS_PV_LIST || pc->kind == GFS_PV_TUPLE) &&
		   gfs_pv_seq_len(pc) > 0) {
		for (size_t i = 0; i < gfs_pv_seq_len(pc); i++) {
			int64_t x;

			if (!gfs_pv_int(gfs_pv_seq_at(pc, i), &x))
				return gfs_fail(GFS_ERR_FORMAT, "%s: partition_count holds a non-integer",
						f->path);
			if (x > v)
				v = x;
		}
	} else {
		return gfs_fail(GFS_ERR_FORMAT, "%s: no usable partition_count", f->path);
	}
	if (v < 1 || v > DS_MAX_RANKS)
		return gfs_fail(GFS_ERR_FORMAT, "%s: partition_count %lld is out of range", f->path,
				(long long)v);
	*ws = (uint64_t)v;
	return GFS_OK;
}

static const gfs_pv *osd_of(const ds_file *f)
{
	return gfs_pv_dict_get(f->root, "optimizer_state_dict");
}

/* ------------------------------------------------------- trainable params */

/* param_numel(): numel of a torch.Size in param_shapes. */
static gfs_err param_numel(const ds_file *f, const char *name, const gfs_pv *shape,
			   uint64_t *numel)
{
	uint64_t dims[GFS_MAX_DIMS];
	uint32_t ndim;

	return shape_from_pv(shape, f->path, name, &ndim, dims, numel);
}

/* append_partition(): add tensor list[g] of file f (named list_name) to dst. */
static gfs_err append_partition(ds_ckpt *c, ds_file *f, const gfs_pv *list,
				const char *list_name, size_t g, flat *dst)
{
	char what[96];
	tview tv;
	gfs_err err;

	snprintf(what, sizeof(what), "%s[%zu]", list_name, g);
	err = tensor_view(c, f, gfs_pv_seq_at(list, g), what, &tv);
	return err ? err : flat_append(dst, &tv, tv.numel, f->path);
}

/* shapes_of(): param_shapes as a list of dicts. */
static gfs_err shapes_of(const ds_file *m0, const gfs_pv **ps)
{
	*ps = gfs_pv_dict_get(m0->root, "param_shapes");
	if (!*ps || ((*ps)->kind != GFS_PV_LIST && (*ps)->kind != GFS_PV_TUPLE))
		return gfs_fail(GFS_ERR_FORMAT, "%s: param_shapes is missing or not a list",
				m0->path);
	for (size_t g = 0; g < gfs_pv_seq_len(*ps); g++)
		if (gfs_pv_seq_at(*ps, g)->kind != GFS_PV_DICT)
			return gfs_fail(GFS_ERR_FORMAT, "%s: param_shapes[%zu] is not a dict",
					m0->path, g);
	return GFS_OK;
}

/*
 * push_param(): entry i of param group g's param_shapes dict (shapes): its
 * name must be a string without a NUL byte; *n is its element
 * count, and it becomes a trainable entry at element off of the group.
 */
static gfs_err push_param(ds_ckpt *c, const gfs_pv *shapes, size_t i, size_t g, uint64_t off,
			  size_t *cap, uint64_t *n)
{
	const ds_file *m0 = &c->model[0];
	const gfs_pv_item *it = &shapes->u.dict.items[i];
	const char *name = gfs_pv_name(it->key);
	gfs_err err;

	assert(i < shapes->u.dict.len);
	if (!name)
		return gfs_pv_name_fail(m0->path, "param_shapes key", i, it->key);
	err = param_numel(m0, name, it->value, n);
	return err ? err : train_push(c, name, it->value, g, off, cap);
}

static gfs_err plan_stage12(ds_ckpt *c)
{
	const ds_file *m0 = &c->model[0];
	const gfs_pv *ps;
	size_t cap = 0;
	gfs_err err = shapes_of(m0, &ps);

	if (err)
		return err;
	c->ngroups = gfs_pv_seq_len(ps);
	c->group_flats = calloc(c->ngroups ? c->ngroups : 1, sizeof(*c->group_flats));
	if (!c->group_flats)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (uint64_t r = 0; r < c->ws; r++) {
		ds_file *f = &c->optim[r];
		const gfs_pv *parts = gfs_pv_dict_get(osd_of(f), "single_partition_of_fp32_groups");

		if (!parts || (parts->kind != GFS_PV_LIST && parts->kind != GFS_PV_TUPLE))
			return gfs_fail(GFS_ERR_FORMAT, "%s: no single_partition_of_fp32_groups list",
					f->path);
		if (gfs_pv_seq_len(parts) != c->ngroups)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: %zu fp32 partitions, but param_shapes in %s has %zu groups",
					f->path, gfs_pv_seq_len(parts), m0->path, c->ngroups);
		for (size_t g = 0; g < c->ngroups; g++) {
			err = append_partition(c, f, parts, "single_partition_of_fp32_groups", g,
					       &c->group_flats[g]);
			if (err)
				return err;
		}
	}
	for (size_t g = 0; g < c->ngroups; g++) {
		const gfs_pv *shapes = gfs_pv_seq_at(ps, g);
		const flat *fl = &c->group_flats[g];
		uint64_t off = 0, pad = 0;

		for (size_t i = 0; i < shapes->u.dict.len; i++) {
			uint64_t n;

			err = push_param(c, shapes, i, g, off, &cap, &n);
			if (err)
				return err;
			if (!gfs_add_u64(off, n, &off) || off > fl->total)
				return gfs_fail(GFS_ERR_FORMAT,
						"%s: param group %zu needs more elements than the %llu in the fp32 partitions of %llu ranks (a rank file is missing, truncated or from another run)",
						c->tagdir, g, (unsigned long long)fl->total,
						(unsigned long long)c->ws);
		}
		/* What is left must be the group padding recorded by DeepSpeed. */
		for (uint64_t r = 0; r < c->ws; r++) {
			const gfs_pv *gp = gfs_pv_dict_get(osd_of(&c->optim[r]), "group_paddings");
			int64_t p;

			if (gp && gfs_pv_int(gfs_pv_seq_at(gp, g), &p) && p > 0)
				pad += (uint64_t)p;
		}
		if (off != fl->total && off + pad != fl->total &&
		    (fl->total - off) >= 2 * c->ws)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: param group %zu: params take %llu elements but the fp32 partitions hold %llu (padding %llu)",
					c->tagdir, g, (unsigned long long)off,
					(unsigned long long)fl->total, (unsigned long long)pad);
	}
	return GFS_OK;
}

static gfs_err plan_stage3(ds_ckpt *c)
{
	const ds_file *m0 = &c->model[0];
	const gfs_pv *ps;
	size_t cap = 0;
	uint64_t off = 0;
	gfs_err err = shapes_of(m0, &ps);

	if (err)
		return err;
	c->rank_flats = calloc((size_t)c->ws, sizeof(*c->rank_flats));
	if (!c->rank_flats)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (uint64_t r = 0; r < c->ws; r++) {
		ds_file *f = &c->optim[r];
		const gfs_pv *groups = gfs_pv_dict_get(osd_of(f), "fp32_flat_groups");

		if (!groups || (groups->kind != GFS_PV_LIST && groups->kind != GFS_PV_TUPLE))
			return gfs_fail(GFS_ERR_FORMAT, "%s: no fp32_flat_groups list", f->path);
		if (r == 0)
			c->nsub = gfs_pv_seq_len(groups);
		else if (gfs_pv_seq_len(groups) != c->nsub)
			return gfs_fail(GFS_ERR_FORMAT, "%s: %zu fp32_flat_groups, rank 0 has %zu",
					f->path, gfs_pv_seq_len(groups), c->nsub);
		for (size_t g = 0; g < gfs_pv_seq_len(groups); g++) {
			err = append_partition(c, f, groups, "fp32_flat_groups", g, &c->rank_flats[r]);
			if (err)
				return err;
		}
	}
	for (size_t g = 0; g < gfs_pv_seq_len(ps); g++) {
		const gfs_pv *shapes = gfs_pv_seq_at(ps, g);

		for (size_t i = 0; i < shapes->u.dict.len; i++) {
			uint64_t n, part;

			err = push_param(c, shapes, i, g, off, &cap, &n);
			if (err)
				return err;
			part = n / c->ws + (n % c->ws != 0);
			if (!gfs_add_u64(off, part, &off))
				return gfs_fail(GFS_ERR_FORMAT, "%s: param sizes overflow", m0->path);
		}
	}
	for (uint64_t r = 0; r < c->ws; r++)
		if (c->rank_flats[r].total != off)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: fp32_flat_groups hold %llu elements, param_shapes need %llu per rank (file truncated, or from another run or world size)",
					c->optim[r].path, (unsigned long long)c->rank_flats[r].total,
					(unsigned long long)off);
	return GFS_OK;
}

/* rf_set_of(): the rf_set of per-rank flats fl, made on first use; NULL if out of memory. */
static const rf_set *rf_set_of(ds_ckpt *c, const flat *fl)
{
	rf_set *rs;
	const flat *f0 = &fl[0];

	for (size_t i = 0; i < c->nrfsets; i++)
		if (c->rfsets[i].flats == fl)
			return &c->rfsets[i];
	rs = gfs_reallocarray(c->rfsets, c->nrfsets + 1, sizeof(*c->rfsets));
	if (!rs)
		return NULL;
	c->rfsets = rs;
	rs = &c->rfsets[c->nrfsets];
	*rs = (rf_set){ .flats = fl, .uniform = f0->n > 0 };
	rs->ids = malloc((f0->n ? f0->n : 1) * sizeof(*rs->ids));
	if (!rs->ids)
		return NULL;
	c->nrfsets++;
	memset(rs->ids, 0xff, (f0->n ? f0->n : 1) * sizeof(*rs->ids));
	for (uint64_t r = 1; rs->uniform && r < c->ws; r++) {
		const flat *f = &fl[r];

		rs->uniform = f->n == f0->n && f->dtype == f0->dtype;
		for (size_t g = 0; rs->uniform && g < f0->n; g++)
			rs->uniform = f->segs[g].start == f0->segs[g].start &&
				      f->segs[g].nelem == f0->segs[g].nelem &&
				      f->segs[g].src != fl[r - 1].segs[g].src;
	}
	return rs;
}

/*
 * emit_partition(): if per-rank flats fl are regular (rf_set) and the
 * partitions of part elements at element off lie in one segment, give
 * entry ti its pieces as a partition of that segment's regular flat: true
 * in *done (else nothing is added).
 */
static gfs_err emit_partition(ds_ckpt *c, size_t ti, const flat *fl, uint64_t off, uint64_t part,
			      bool *done)
{
	const rf_set *rs = rf_set_of(c, fl);
	const flat *f0 = &fl[0];
	const uint64_t es = gfs_dtype_size(f0->dtype);
	size_t lo = 0, hi = f0->n;
	const flat_seg *sg;

	*done = false;
	if (!rs)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (!rs->uniform || part == 0)
		return GFS_OK;
	while (hi - lo > 1) {
		const size_t mid = lo + (hi - lo) / 2;

		if (f0->segs[mid].start <= off)
			lo = mid;
		else
			hi = mid;
	}
	sg = &f0->segs[lo];
	if (off < sg->start || off - sg->start > sg->nelem || sg->nelem - (off - sg->start) < part)
		return GFS_OK;
	if (rs->ids[lo] == UINT32_MAX) {
		uint32_t *srcs = malloc((size_t)c->ws * sizeof(*srcs));
		uint64_t *offs = malloc((size_t)c->ws * sizeof(*offs));
		gfs_err err = GFS_ERR_NOMEM;

		if (srcs && offs) {
			for (uint64_t r = 0; r < c->ws; r++) {
				srcs[r] = fl[r].segs[lo].src;
				offs[r] = fl[r].segs[lo].off;
			}
			err = gfs_layout_add_rflat(c->l, (uint32_t)c->ws, srcs, offs, sg->nelem * es,
						   &rs->ids[lo]);
		} else {
			err = gfs_fail(err, "out of memory");
		}
		free(srcs);
		free(offs);
		if (err)
			return err;
	}
	*done = true;
	return gfs_layout_add_partition(c->l, ti, rs->ids[lo], (off - sg->start) * es, part * es);
}

/*
 * emit_slices(): the pieces of param tp (numel elements) in entry ti, from
 * flats laid out like the fp32 masters: stage 1/2 group_flats[tp->group]
 * from tp->offset; stage 3 ceil(numel / ws) elements of each rank_flats[r]
 * from tp->offset, cut to numel (the padding is never mapped).  what names
 * the flats in messages.
 */
static gfs_err emit_slices(ds_ckpt *c, size_t ti, const train_param *tp, uint64_t numel,
			   const flat *group_flats, const flat *rank_flats, const char *what)
{
	const uint64_t part = numel / c->ws + (numel % c->ws != 0);
	bool done;
	gfs_err err0;

	if (c->stage < 3)
		return flat_emit(c->l, ti, &group_flats[tp->group], tp->offset, numel);
	err0 = emit_partition(c, ti, rank_flats, tp->offset, part, &done);
	if (err0 || done)
		return err0;
	for (uint64_t r = 0; r < c->ws; r++) {
		const uint64_t first = r * part;
		const uint64_t take = first >= numel ? 0
			: (numel - first < part ? numel - first : part);
		gfs_err err;

		if (rank_flats[r].dtype != rank_flats[0].dtype)
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s dtype differs from rank 0",
					c->optim[r].path, what);
		err = flat_emit(c->l, ti, &rank_flats[r], tp->offset, take);
		if (err)
			return err;
	}
	return GFS_OK;
}

static gfs_err emit_trainable(ds_ckpt *c, const train_param *tp, const gfs_pv *module_t)
{
	uint64_t shape[GFS_MAX_DIMS], numel;
	uint32_t ndim;
	size_t ti;
	const flat *fl = c->stage == 3 ? &c->rank_flats[0] : &c->group_flats[tp->group];
	gfs_err err = shape_from_pv(tp->shape, c->model[0].path, tp->name, &ndim, shape, &numel);

	if (err)
		return err;
	if (c->stage < 3 && module_t && module_t->kind == GFS_PV_TENSOR) {
		const gfs_pv_tensor *mt = module_t->u.tensor;
		bool same = mt->ndim == ndim;

		for (uint32_t d = 0; same && d < ndim; d++)
			same = (uint64_t)mt->size[d] == shape[d];
		if (!same)
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s: module shape differs from param_shapes",
					c->model[0].path, tp->name);
	}
	err = gfs_layout_add_tensor(c->l, tp->name, fl->dtype == GFS_DT_INVALID ? GFS_DT_F32
										 : fl->dtype,
				    ndim, shape, &ti);
	if (err)
		return err;
	return emit_slices(c, ti, tp, numel, c->group_flats, c->rank_flats, "fp32_flat_groups");
}

/* ---------------------------------------------------------- other entries */

/* emit_view(): a tensor whose bytes are one contiguous view of a file. */
static gfs_err emit_view(ds_ckpt *c, const char *name, const tview *tv, uint64_t numel,
			 uint32_t ndim, const uint64_t *shape)
{
	size_t ti;
	gfs_err err = gfs_layout_add_tensor(c->l, name, tv->dtype, ndim, shape, &ti);

	if (err)
		return err;
	return gfs_layout_add_piece(c->l, ti, tv->src, tv->off,
				    numel * gfs_dtype_size(tv->dtype));
}

static gfs_err emit_module(ds_ckpt *c, const char *name, const gfs_pv *v, bool is_buffer)
{
	tview tv;
	gfs_err err = tensor_view(c, &c->model[0], v, name, &tv);

	if (err)
		return err;
	if (c->stage == 3 && !is_buffer && tv.numel == 0 && tv.ndim == 1)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: %s is a ZeRO-3 placeholder, but no optimizer partition or frozen fragment holds its data",
				c->model[0].path, name);
	return emit_view(c, name, &tv, tv.numel, tv.ndim, tv.shape);
}

/*
 * emit_frozen(): frozen param name of shape shape_pv, item k of rank 0's
 * frozen_param_shapes.
 */
static gfs_err emit_frozen(ds_ckpt *c, const char *name, const gfs_pv *shape_pv, size_t k)
{
	uint64_t shape[GFS_MAX_DIMS], numel;
	uint32_t ndim;
	gfs_err err = shape_from_pv(shape_pv, c->model[0].path, name, &ndim, shape, &numel);

	if (err)
		return err;
	if (c->stage == 2) {
		ds_file *f = &c->model[0];
		const gfs_pv *frag = gfs_pv_dict_get(gfs_pv_dict_get(f->root, "frozen_param_fragments"),
						     name);
		tview tv;

		err = tensor_view(c, f, frag, name, &tv);
		if (err)
			return err;
		if (tv.numel < numel)
			return gfs_fail(GFS_ERR_FORMAT, "%s: frozen fragment %s holds %llu of %llu elements",
					f->path, name, (unsigned long long)tv.numel,
					(unsigned long long)numel);
		return emit_view(c, name, &tv, numel, ndim, shape);
	}
	{
		flat fl = { .dtype = GFS_DT_INVALID };
		size_t ti;

		for (uint64_t r = 0; !err && r < c->ws; r++) {
			ds_file *f = &c->model[r];
			tview tv;

			if (r == 0)
				err = tensor_view(c, f, gfs_pv_dict_get(gfs_pv_dict_get(
						f->root, "frozen_param_fragments"), name), name, &tv);
			else
				err = frag_view(c, f, k, &tv);
			if (!err)
				err = flat_append(&fl, &tv, tv.numel, f->path);
		}
		if (!err && fl.total < numel)
			err = gfs_fail(GFS_ERR_FORMAT,
				       "%s: frozen fragments of %s hold %llu of %llu elements",
				       c->tagdir, name, (unsigned long long)fl.total,
				       (unsigned long long)numel);
		if (!err)
			err = gfs_layout_add_tensor(c->l, name, fl.dtype, ndim, shape, &ti);
		if (!err)
			err = flat_emit(c->l, ti, &fl, 0, numel);
		free(fl.segs);
		return err;
	}
}

/* An item of rank 0's frozen_param_shapes, for fshape_find(). */
typedef struct fshape_key {
	const char *name;
	size_t k; /* item index */
} fshape_key;

static int fshape_cmp(const void *a, const void *b)
{
	return strcmp(((const fshape_key *)a)->name, ((const fshape_key *)b)->name);
}

/*
 * fshapes_index(): c->fkeys, the items of fshapes (rank 0's
 * frozen_param_shapes) whose key is a name, sorted by name.
 */
static gfs_err fshapes_index(ds_ckpt *c, const gfs_pv *fshapes)
{
	c->fkeys = gfs_calloc(fshapes->u.dict.len ? fshapes->u.dict.len : 1, sizeof(*c->fkeys));
	if (!c->fkeys)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < fshapes->u.dict.len; i++) {
		const char *name = gfs_pv_name(fshapes->u.dict.items[i].key);

		if (name)
			c->fkeys[c->nfkeys++] = (fshape_key){ name, i };
	}
	qsort(c->fkeys, c->nfkeys, sizeof(*c->fkeys), fshape_cmp);
	return GFS_OK;
}

/*
 * fshape_find(): the shape of frozen param name in fshapes, indexed by
 * fshapes_index(), and its item index *k (the ranks' fragments are read by
 * index: frags_read()), or NULL.
 */
static const gfs_pv *fshape_find(const ds_ckpt *c, const gfs_pv *fshapes, const char *name,
				 size_t *k)
{
	const fshape_key key = { name, 0 };
	const fshape_key *hit;

	if (!fshapes)
		return NULL;
	hit = bsearch(&key, c->fkeys, c->nfkeys, sizeof(*c->fkeys), fshape_cmp);
	if (!hit)
		return NULL;
	*k = hit->k;
	return fshapes->u.dict.items[hit->k].value;
}

static bool in_list(const gfs_pv *list, const char *name)
{
	for (size_t i = 0; i < gfs_pv_seq_len(list); i++) {
		const char *s = gfs_pv_str(gfs_pv_seq_at(list, i));

		if (s && strcmp(s, name) == 0)
			return true;
	}
	return false;
}

static gfs_err build_entries(ds_ckpt *c)
{
	const ds_file *m0 = &c->model[0];
	const gfs_pv *module = gfs_pv_dict_get(m0->root, "module");
	const gfs_pv *buffers = gfs_pv_dict_get(m0->root, "buffer_names");
	const gfs_pv *shared = gfs_pv_dict_get(m0->root, "shared_params");
	const gfs_pv *fshapes = c->stage >= 2 ? gfs_pv_dict_get(m0->root, "frozen_param_shapes") : NULL;
	size_t used = 0;
	gfs_err err;

	if (!module || module->kind != GFS_PV_DICT)
		return gfs_fail(GFS_ERR_FORMAT, "%s: no `module` state dict", m0->path);
	if (fshapes && fshapes->kind != GFS_PV_DICT)
		fshapes = NULL;
	if (fshapes) {
		err = fshapes_index(c, fshapes);
		if (err)
			return err;
	}
	if (shared && shared->kind != GFS_PV_DICT)
		shared = NULL;
	for (size_t i = 0; i < module->u.dict.len; i++) {
		const gfs_pv_item *it = &module->u.dict.items[i];
		const char *name = gfs_pv_name(it->key);
		const char *target = gfs_pv_name(gfs_pv_dict_get(shared, name ? name : ""));
		const train_param *tp;
		const gfs_pv *fs;
		size_t k;

		if (!name)
			return gfs_pv_name_fail(m0->path, "module key", i, it->key);
		if (target && gfs_pv_dict_get(module, target)) {
			err = gfs_layout_add_alias(c->l, name, target);
		} else if (target && !tmap_find(c, name)) {
			/* a tied alias whose target was saved nowhere (save_checkpoint
			 * with exclude_frozen_parameters, as HF Trainer does for PEFT
			 * models): dropped, as zero_to_fp32 drops it */
			continue;
		} else if ((tp = tmap_find(c, name)) != NULL) {
			err = emit_trainable(c, tp, it->value);
			used++;
		} else if ((fs = fshape_find(c, fshapes, name, &k)) != NULL) {
			err = emit_frozen(c, name, fs, k);
		} else {
			err = emit_module(c, name, it->value, in_list(buffers, name));
		}
		if (err)
			return err;
	}
	if (used != c->ntrain) {
		for (size_t i = 0; i < c->ntrain; i++)
			if (!gfs_pv_dict_get(module, c->train[i].name))
				return gfs_fail(GFS_ERR_FORMAT,
						"%s: param %s is in param_shapes but not in `module`",
						m0->path, c->train[i].name);
	}
	/* Aliases whose name is not in `module` come last, as zero_to_fp32 does. */
	for (size_t i = 0; shared && i < shared->u.dict.len; i++) {
		const char *alias = gfs_pv_name(shared->u.dict.items[i].key);
		const char *target = gfs_pv_name(shared->u.dict.items[i].value);

		if (alias && target && !gfs_pv_dict_get(module, alias) &&
		    gfs_pv_dict_get(module, target)) {
			err = gfs_layout_add_alias(c->l, alias, target);
			if (err)
				return err;
		}
	}
	return GFS_OK;
}

/* ------------------------------------------------------- optimizer state */

/* dict_get_int(): the value of int key k in a pickled dict, or NULL. */
static const gfs_pv *dict_get_int(const gfs_pv *d, int64_t k)
{
	if (!d || d->kind != GFS_PV_DICT)
		return NULL;
	for (size_t i = 0; i < d->u.dict.len; i++) {
		int64_t x;

		if (d->u.dict.items[i].key->kind == GFS_PV_INT &&
		    gfs_pv_int(d->u.dict.items[i].key, &x) && x == k)
			return d->u.dict.items[i].value;
	}
	return NULL;
}

/* base_state(): the torch optimizer state_dict inside rank r's optimizer state. */
static const gfs_pv *base_state(const ds_ckpt *c, size_t r)
{
	return gfs_pv_dict_get(osd_of(&c->optim[r]),
			       c->stage == 3 ? "optimizer_state_dict" : "base_optimizer_state");
}

/* group_state(): state[g] of rank r's torch optimizer, or NULL. */
static const gfs_pv *group_state(const ds_ckpt *c, size_t r, size_t g)
{
	return dict_get_int(gfs_pv_dict_get(base_state(c, r), "state"), (int64_t)g);
}

/* fp32_part(): rank r's fp32 partition g (stage 1/2 group, stage 3 sub-group). */
static gfs_err fp32_part(ds_ckpt *c, size_t r, size_t g, tview *tv)
{
	const char *list = c->stage == 3 ? "fp32_flat_groups" : "single_partition_of_fp32_groups";
	char what[96];

	snprintf(what, sizeof(what), "%s[%zu]", list, g);
	return tensor_view(c, &c->optim[r], gfs_pv_seq_at(gfs_pv_dict_get(osd_of(&c->optim[r]), list), g),
			   what, tv);
}

/*
 * plan_states(): find the optimizer states in rank 0's state[0] and check
 * that every rank and flat group holds the same ones: each per-element
 * state exactly as long as that rank's fp32 partition, each 0-d one (the
 * step) 0-d.  Non-tensor values are not carried.  A checkpoint without
 * optimizer state (state[0] empty or absent everywhere) has none.
 */
static gfs_err plan_states(ds_ckpt *c)
{
	const size_t nflat = c->stage == 3 ? c->nsub : c->ngroups;
	const gfs_pv *st0 = group_state(c, 0, 0);
	gfs_err err;

	if (nflat == 0 || !st0 || st0->kind != GFS_PV_DICT || st0->u.dict.len == 0) {
		for (uint64_t r = 0; r < c->ws; r++)
			for (size_t g = 0; g < nflat; g++) {
				const gfs_pv *st = group_state(c, r, g);

				if (st && st->kind == GFS_PV_DICT && st->u.dict.len)
					return gfs_fail(GFS_ERR_FORMAT,
							"%s: optimizer state of flat group %zu exists, but rank 0 has none for group 0",
							c->optim[r].path, g);
			}
		return GFS_OK;
	}
	c->states = gfs_calloc(st0->u.dict.len, sizeof(*c->states));
	if (!c->states)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t k = 0; k < st0->u.dict.len; k++) {
		const char *name = gfs_pv_name(st0->u.dict.items[k].key);
		const gfs_pv *v = st0->u.dict.items[k].value;
		ds_state *s = &c->states[c->nstates];

		if (!name || strpbrk(name, STATE_BAD_BYTES) || !*name || strcmp(name, ".") == 0 ||
		    strcmp(name, "..") == 0)
			return gfs_fail(GFS_ERR_FORMAT, "%s: optimizer state %zu has no usable name",
					c->optim[0].path, k);
		if (!v || v->kind != GFS_PV_TENSOR)
			continue;
		s->name = name;
		s->scalar = v->u.tensor->ndim == 0;
		if (s->scalar)
			s->values = gfs_calloc(nflat, sizeof(*s->values));
		else
			s->flats = gfs_calloc(c->stage == 3 ? (size_t)c->ws : nflat, sizeof(*s->flats));
		if (!s->values && !s->flats)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		for (size_t i = 0; s->flats && i < (c->stage == 3 ? (size_t)c->ws : nflat); i++)
			s->flats[i].dtype = GFS_DT_INVALID;
		c->nstates++;
	}
	for (uint64_t r = 0; r < c->ws; r++) {
		for (size_t g = 0; g < nflat; g++) {
			const gfs_pv *st = group_state(c, r, g);
			size_t ntensor = 0;
			uint64_t pad = 0;
			int64_t p;
			tview part;

			if (!st || st->kind != GFS_PV_DICT)
				return gfs_fail(GFS_ERR_FORMAT,
						"%s: no optimizer state for flat group %zu (rank 0 has %s)",
						c->optim[r].path, g, c->states[0].name);
			err = fp32_part(c, (size_t)r, g, &part);
			if (err)
				return err;
			if (c->stage < 3 && !c->bf16_optimizer &&
			    gfs_pv_int(gfs_pv_seq_at(gfs_pv_dict_get(osd_of(&c->optim[r]),
								     "group_paddings"), g), &p) &&
			    p > 0)
				pad = (uint64_t)p;
			for (size_t k = 0; k < c->nstates; k++) {
				ds_state *s = &c->states[k];
				const gfs_pv *v = gfs_pv_dict_get(st, s->name);
				char what[128];
				tview tv;

				snprintf(what, sizeof(what), "optimizer state %s of flat group %zu", s->name, g);
				if (!v)
					return gfs_fail(GFS_ERR_FORMAT, "%s: %s is missing",
							c->optim[r].path, what);
				err = tensor_view(c, &c->optim[r], v, what, &tv);
				if (err)
					return err;
				if (s->scalar) {
					if (tv.ndim != 0)
						return gfs_fail(GFS_ERR_FORMAT,
								"%s: %s has %llu elements, rank 0 group 0 has a scalar",
								c->optim[r].path, what,
								(unsigned long long)tv.numel);
					if (r == 0)
						s->values[g] = tv;
					continue;
				}
				/* DeepSpeedZeroOptimizer saves the last rank's fp32
				 * partition without its padding, the moments with it */
				if (tv.ndim != 1 ||
				    (tv.numel != part.numel && tv.numel != part.numel + pad))
					return gfs_fail(GFS_ERR_FORMAT,
							"%s: %s has %llu elements, its fp32 partition %llu",
							c->optim[r].path, what, (unsigned long long)tv.numel,
							(unsigned long long)part.numel);
				err = flat_append(&s->flats[c->stage == 3 ? (size_t)r : g], &tv, tv.numel,
						  c->optim[r].path);
				if (err)
					return err;
			}
			for (size_t k = 0; k < st->u.dict.len; k++)
				ntensor += st->u.dict.items[k].value->kind == GFS_PV_TENSOR;
			if (ntensor != c->nstates)
				return gfs_fail(GFS_ERR_FORMAT,
						"%s: flat group %zu holds %zu optimizer-state tensors, rank 0 group 0 holds %zu",
						c->optim[r].path, g, ntensor, c->nstates);
		}
	}
	return GFS_OK;
}

/* emit_states(): every state of every trainable param, state by state. */
static gfs_err emit_states(ds_ckpt *c)
{
	for (size_t k = 0; k < c->nstates; k++) {
		const ds_state *s = &c->states[k];

		for (size_t i = 0; i < c->ntrain; i++) {
			const train_param *tp = &c->train[i];
			uint64_t shape[GFS_MAX_DIMS], numel;
			uint32_t ndim;
			size_t ti;
			gfs_err err;

			if (tp->dup)
				continue;
			err = shape_from_pv(tp->shape, c->model[0].path, tp->name, &ndim, shape, &numel);

			if (!err && s->scalar && tp->group >= (c->stage == 3 ? c->nsub : c->ngroups))
				err = gfs_fail(GFS_ERR_FORMAT,
					       "%s: param %s is in param_shapes group %zu, but the optimizer state has %zu groups",
					       c->model[0].path, tp->name, tp->group,
					       c->stage == 3 ? c->nsub : c->ngroups);
			if (!err && s->scalar) {
				const tview *tv = &s->values[tp->group];

				err = gfs_layout_add_state(c->l, s->name, tp->name, tv->dtype, 0, NULL, &ti);
				if (!err)
					err = gfs_layout_add_piece(c->l, ti, tv->src, tv->off,
								   gfs_dtype_size(tv->dtype));
			} else if (!err) {
				const gfs_dtype dt = s->flats[c->stage == 3 ? 0 : tp->group].dtype;

				err = gfs_layout_add_state(c->l, s->name, tp->name,
							   dt == GFS_DT_INVALID ? GFS_DT_F32 : dt, ndim,
							   shape, &ti);
				if (!err)
					err = emit_slices(c, ti, tp, numel, s->flats, s->flats, s->name);
			}
			if (err)
				return err;
		}
	}
	return GFS_OK;
}

/*
 * hval_from_pv(): a plain value (None, bool, int, float, str, and tuples or
 * lists of those) of param_groups.  @return false for anything else.
 */
static bool hval_from_pv(const gfs_pv *v, gfs_hval *out, int depth)
{
	memset(out, 0, sizeof(*out));
	if (!v || depth > 8)
		return false;
	switch (v->kind) {
	case GFS_PV_NONE:
		out->kind = GFS_HV_NONE;
		return true;
	case GFS_PV_BOOL:
		out->kind = GFS_HV_BOOL;
		out->b = v->u.b;
		return true;
	case GFS_PV_INT:
		out->kind = GFS_HV_INT;
		out->i = v->u.i;
		return true;
	case GFS_PV_FLOAT:
		out->kind = GFS_HV_FLOAT;
		out->f = v->u.f;
		return true;
	case GFS_PV_STR:
		if (!gfs_pv_name(v))
			return false;
		out->kind = GFS_HV_STR;
		out->s = gfs_strdup(v->u.s.ptr);
		return out->s != NULL;
	case GFS_PV_TUPLE:
	case GFS_PV_LIST:
		out->kind = v->kind == GFS_PV_TUPLE ? GFS_HV_TUPLE : GFS_HV_LIST;
		out->items = gfs_calloc(v->u.seq.len ? v->u.seq.len : 1, sizeof(*out->items));
		if (!out->items)
			return false;
		for (size_t i = 0; i < v->u.seq.len; i++) {
			out->n = i + 1;
			if (!hval_from_pv(v->u.seq.items[i], &out->items[i], depth + 1)) {
				gfs_hval_clear(out);
				return false;
			}
		}
		out->n = v->u.seq.len;
		return true;
	default:
		return false;
	}
}

/*
 * read_param_groups(): rank 0's torch param_groups without "params".  A
 * value that is not plain leaves the layout without param_groups (the
 * universal view then says why it is not served).
 */
static gfs_err read_param_groups(ds_ckpt *c, gfs_optim *o)
{
	const gfs_pv *pg = gfs_pv_dict_get(base_state(c, 0), "param_groups");
	const size_t n = gfs_pv_seq_len(pg);

	if (!pg || pg->kind != GFS_PV_LIST || n == 0)
		return GFS_OK;
	o->groups = gfs_calloc(n, sizeof(*o->groups));
	if (!o->groups)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	o->ngroups = n;
	for (size_t g = 0; g < n; g++) {
		const gfs_pv *d = gfs_pv_seq_at(pg, g);
		gfs_pgroup *grp = &o->groups[g];

		if (!d || d->kind != GFS_PV_DICT)
			goto unusable;
		grp->items = gfs_calloc(d->u.dict.len ? d->u.dict.len : 1, sizeof(*grp->items));
		if (!grp->items)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		for (size_t k = 0; k < d->u.dict.len; k++) {
			const char *key = gfs_pv_name(d->u.dict.items[k].key);
			gfs_hparam *hp = &grp->items[grp->n];

			if (!key)
				goto unusable;
			if (strcmp(key, "params") == 0)
				continue;
			hp->key = gfs_strdup(key);
			if (!hp->key)
				return gfs_fail(GFS_ERR_NOMEM, "out of memory");
			grp->n++;
			if (!hval_from_pv(d->u.dict.items[k].value, &hp->v, 0))
				goto unusable;
		}
	}
	return GFS_OK;
unusable:
	for (size_t g = 0; g < o->ngroups; g++) {
		for (size_t k = 0; k < o->groups[g].n; k++) {
			free(o->groups[g].items[k].key);
			gfs_hval_clear(&o->groups[g].items[k].v);
		}
		free(o->groups[g].items);
	}
	free(o->groups);
	o->groups = NULL;
	o->ngroups = 0;
	return GFS_OK;
}

/* build_optim(): the layout's optimizer metadata. */
static gfs_err build_optim(ds_ckpt *c)
{
	gfs_optim *o = &c->l->optim;
	const gfs_pv *zo = gfs_pv_dict_get(gfs_pv_dict_get(c->optim[0].root, "ds_config"),
					   "zero_optimization");
	const char *ver = gfs_pv_name(gfs_pv_dict_get(osd_of(&c->optim[0]), "ds_version"));
	const gfs_pv *rr = gfs_pv_dict_get(zo, "round_robin_gradients");

	if (!ver)
		ver = gfs_pv_name(gfs_pv_dict_get(c->optim[0].root, "ds_version"));
	o->zero_stage = c->stage;
	o->bf16_optimizer = c->bf16_optimizer;
	o->round_robin = rr && rr->kind == GFS_PV_BOOL && rr->u.b;
	o->world_size = (uint32_t)c->ws;
	o->nflat = (uint32_t)(c->stage == 3 ? c->nsub : c->ngroups);
	if (ver && !(o->version = gfs_strdup(ver)))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	o->model_srcs = gfs_calloc(c->nmodel, sizeof(*o->model_srcs));
	if (!o->model_srcs)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t r = 0; r < c->nmodel; r++) {
		const gfs_err err = file_source(c, &c->model[r], &o->model_srcs[r]);

		if (err)
			return err;
		o->nmodel_srcs++;
	}
	return read_param_groups(c, o);
}

/* ------------------------------------------------------------ top level */

/* holds_optim(): does directory path hold a *_optim_states.pt file? */
static bool holds_optim(const char *path)
{
	DIR *d = opendir(path);
	const struct dirent *de;
	bool found = false;

	if (!d)
		return false;
	while (!found && (de = readdir(d)) != NULL) {
		uint64_t rank, mp;

		found = classify(de->d_name, &rank, &mp) == 1;
	}
	closedir(d);
	return found;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Tag names listed in a message: control bytes shown as '?', at most this many. */
#define TAGS_LISTED 8

/*
 * only_tag(): dir has no `latest`.  If dir holds rank files itself it is a
 * tag directory (*tag NULL).  Else its subdirectories holding
 * *_optim_states.pt files are its tags: exactly one is used (*tag, to free);
 * several are an error listing them; none leaves *tag NULL (dir is then
 * reported as holding no rank files).
 */
static gfs_err only_tag(const char *dir, char **tag)
{
	char **tags = NULL;
	size_t n = 0, cap = 0;
	char msg[1024];
	size_t used;
	const struct dirent *de;
	bool nomem = false;
	DIR *d;

	*tag = NULL;
	if (holds_optim(dir))
		return GFS_OK;
	d = opendir(dir);
	if (!d)
		return gfs_fail(GFS_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
	while ((de = readdir(d)) != NULL) {
		char path[4096];
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    (size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path) ||
		    stat(path, &st) != 0 || !S_ISDIR(st.st_mode) || !holds_optim(path))
			continue;
		nomem = !gfs_grow((void **)&tags, &cap, n, sizeof(*tags), 8) ||
			!(tags[n] = gfs_strdup(de->d_name));
		if (nomem)
			break;
		n++;
	}
	closedir(d);
	if (nomem) {
		for (size_t i = 0; i < n; i++)
			free(tags[i]);
		free(tags);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	if (n <= 1) {
		*tag = n ? tags[0] : NULL;
		free(tags);
		return GFS_OK;
	}
	qsort(tags, n, sizeof(*tags), cmp_str);
	used = 0;
	for (size_t i = 0; i < n && i < TAGS_LISTED && used < sizeof(msg); i++) {
		used += (size_t)snprintf(msg + used, sizeof(msg) - used, "%s%s", i ? ", " : "",
					 tags[i]);
	}
	if (n > TAGS_LISTED && used < sizeof(msg))
		snprintf(msg + used, sizeof(msg) - used, ", ... (%zu in all)", n);
	for (char *c = msg; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
	for (size_t i = 0; i < n; i++)
		free(tags[i]);
	free(tags);
	return gfs_fail(GFS_ERR_INVAL,
			"%s: no `latest` file and %zu tag directories (%s): choose one with --tag (mount: -o tag=)",
			dir, n, msg);
}

/*
 * resolve_tagdir(): the tag directory to read: dir/tag, dir/$(cat latest),
 * the only tag directory of a save directory without `latest` (*note then
 * says so; to free), or dir itself.
 */
static gfs_err resolve_tagdir(const char *dir, const char *tag, char **tagdir, char **root,
			      char **note)
{
	char path[4096];
	char buf[512];
	char *only = NULL;
	struct stat st;
	ssize_t n;
	int fd;

	*note = NULL;
	if (stat(dir, &st) != 0)
		return gfs_fail(errno == ENOENT ? GFS_ERR_NOTFOUND : GFS_ERR_IO, "%s: %s", dir,
				strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return gfs_fail(GFS_ERR_INVAL, "%s: not a directory", dir);
	*root = gfs_strdup(dir);
	if (!*root)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (!tag) {
		snprintf(path, sizeof(path), "%s/latest", dir);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 && errno != ENOENT)
			return gfs_fail(GFS_ERR_IO, "%s: %s", path, strerror(errno));
		if (fd < 0) {
			/* No `latest`: DIR is the tag directory, or holds only one. */
			gfs_err err = only_tag(dir, &only);

			if (err)
				return err;
			if (!only) {
				*tagdir = gfs_strdup(dir);
				return *tagdir ? GFS_OK : gfs_fail(GFS_ERR_NOMEM, "out of memory");
			}
			snprintf(buf, sizeof(buf), "%s", only);
			free(only);
			n = (ssize_t)strlen(buf);
			if (snprintf(path, sizeof(path), "%s has no `latest` file: using its only tag directory, %s",
				     dir, buf) >= (int)sizeof(path))
				path[sizeof(path) - 1] = '\0';
			for (char *c = path; *c; c++)
				if ((unsigned char)*c < 0x20 || *c == 0x7f)
					*c = '?';
			*note = gfs_strdup(path);
			if (!*note)
				return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		} else {
			n = read(fd, buf, sizeof(buf) - 1);
			close(fd);
			if (n < 0)
				return gfs_fail(GFS_ERR_IO, "%s: %s", path, strerror(errno));
			buf[n] = '\0';
		}
		while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' ||
				 buf[n - 1] == '\t'))
			buf[--n] = '\0';
		if (n == 0 || strchr(buf, '/') || strcmp(buf, "..") == 0 || strlen(buf) != (size_t)n)
			return gfs_fail(GFS_ERR_FORMAT, "%s: does not hold a valid tag name", path);
		tag = buf;
	} else if (strchr(tag, '/') || strcmp(tag, "..") == 0 || !*tag) {
		return gfs_fail(GFS_ERR_INVAL, "invalid tag '%s'", tag);
	}
	snprintf(path, sizeof(path), "%s/%s", dir, tag);
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return gfs_fail(GFS_ERR_NOTFOUND, "%s: tag directory '%s' not found", dir, tag);
	*tagdir = gfs_strdup(path);
	return *tagdir ? GFS_OK : gfs_fail(GFS_ERR_NOMEM, "out of memory");
}

/*
 * The files of the ranks, opened in parallel (gfs_pfor()).  ZeRO-3 model
 * states files: rank 0's is read alongside the others, which wait for it
 * (m0_done) before they use it; gfs_pfor() takes index 0 first, so some
 * thread always has it.
 */
typedef struct open_job {
	ds_ckpt *c;
	const ds_listing *ls;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool m0_done;
	bool m0_ok;
} open_job;

/*
 * open_optim(): optimizer states file of rank i, if found: its ZeRO stage,
 * optimizer and partition_count, compared across ranks by vote_optim().
 */
static gfs_err open_optim(void *ctx, size_t i)
{
	const open_job *j = ctx;
	ds_file *f = &j->c->optim[i];
	gfs_err err;

	if (!j->ls->optim[i])
		return GFS_OK;
	err = file_open(f, j->c->tagdir, j->ls->optim[i]);
	if (!err && !osd_of(f))
		err = gfs_fail(GFS_ERR_FORMAT, "%s: no optimizer_state_dict", f->path);
	if (!err)
		err = read_stage(j->c, f, osd_of(f), &f->stage, &f->bf16opt);
	if (!err)
		err = read_ws(f, osd_of(f), &f->ws);
	return err;
}

/* The ZeRO stage, optimizer and world size an optimizer states file says. */
typedef struct ds_sig {
	uint64_t ws;
	int stage;
	bool bf16opt;
} ds_sig;

static ds_sig sig_of(const ds_file *f)
{
	return (ds_sig){ .ws = f->ws, .stage = f->stage, .bf16opt = f->bf16opt };
}

static int sig_cmp(const void *a, const void *b)
{
	const ds_sig *x = a, *y = b;

	if (x->ws != y->ws)
		return x->ws < y->ws ? -1 : 1;
	if (x->stage != y->stage)
		return x->stage < y->stage ? -1 : 1;
	return (int)x->bf16opt - (int)y->bf16opt;
}

/* sig_phrase(): "ZeRO stage 2", "BF16_Optimizer". */
static const char *sig_phrase(const ds_sig *s, char *buf, size_t n)
{
	if (s->bf16opt)
		snprintf(buf, n, "BF16_Optimizer");
	else
		snprintf(buf, n, "ZeRO stage %d", s->stage);
	return buf;
}

/*
 * sig_better(): does a run of run files saying cand beat best_run saying
 * best?  More files win; then a world size equal to count, the files
 * found; then what rank 0 (r0, NULL if absent) says.
 */
static bool sig_better(const ds_sig *cand, size_t run, const ds_sig *best, size_t best_run,
		       size_t count, const ds_sig *r0)
{
	if (run != best_run)
		return run > best_run;
	if ((cand->ws == count) != (best->ws == count))
		return cand->ws == count;
	return r0 && sig_cmp(cand, r0) == 0;
}

/*
 * vote_optim(): the stage and world size of the checkpoint: what most of
 * the count optimizer states files found say (a tie goes to a world size
 * equal to count, then to rank 0's).  A file that says otherwise is from
 * another checkpoint: refused, named.
 */
static gfs_err vote_optim(ds_ckpt *c, const ds_listing *ls, size_t count)
{
	ds_sig *all = malloc(count * sizeof(*all));
	const ds_sig r0 = sig_of(&c->optim[0]);
	ds_sig best = { 0 };
	const ds_file *ref = NULL;
	size_t n = 0, best_run = 0;

	if (!all)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t r = 0; r < c->noptim; r++)
		if (ls->optim[r])
			all[n++] = sig_of(&c->optim[r]);
	assert(n == count && n > 0);
	qsort(all, n, sizeof(*all), sig_cmp);
	for (size_t i = 0, run; i < n; i += run) {
		for (run = 1; i + run < n && sig_cmp(&all[i], &all[i + run]) == 0; run++)
			;
		if (sig_better(&all[i], run, &best, best_run, count, ls->optim[0] ? &r0 : NULL)) {
			best = all[i];
			best_run = run;
		}
	}
	free(all);
	for (size_t r = 0; r < c->noptim && !ref; r++) {
		const ds_sig s = sig_of(&c->optim[r]);

		if (ls->optim[r] && sig_cmp(&s, &best) == 0)
			ref = &c->optim[r];
	}
	assert(ref);
	for (size_t r = 0; r < c->noptim; r++) {
		const ds_file *f = &c->optim[r];
		const ds_sig s = sig_of(f);
		char a[32], b[32];

		if (!ls->optim[r] || sig_cmp(&s, &best) == 0)
			continue;
		if (s.ws != best.ws)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: its partition_count says world size %llu, but %s says %llu (%zu optimizer states files found): a rank file from a checkpoint of another world size",
					f->path, (unsigned long long)s.ws, ref->name,
					(unsigned long long)best.ws, count);
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: written with %s, but %s with %s: a rank file from another checkpoint",
				f->path, sig_phrase(&s, a, sizeof(a)), ref->name,
				sig_phrase(&best, b, sizeof(b)));
	}
	c->ws = best.ws;
	c->stage = best.stage;
	c->bf16_optimizer = best.bf16opt;
	return GFS_OK;
}

/*
 * ws_check(): the model states file f, read, records the world size the
 * optimizer states files say (dp_world_size; not checked if absent).
 */
static gfs_err ws_check(const ds_ckpt *c, const ds_file *f)
{
	const gfs_pv *v = gfs_pv_dict_get(f->root, "dp_world_size");
	int64_t n;

	if (!v)
		return GFS_OK;
	if (!gfs_pv_int(v, &n)) {
		char kind[32];

		return gfs_fail(GFS_ERR_FORMAT, "%s: dp_world_size is %s, not an integer", f->path,
				kind_phrase(v, kind, sizeof(kind)));
	}
	if (n < 0 || (uint64_t)n != c->ws)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: dp_world_size is %lld, but the optimizer states files say %llu: a file from a checkpoint of another world size",
				f->path, (long long)n, (unsigned long long)c->ws);
	return GFS_OK;
}

/* open_model(): ZeRO-3 model states file of rank r. */
static gfs_err open_model(void *ctx, size_t r)
{
	open_job *j = ctx;
	ds_ckpt *c = j->c;
	bool m0_ok;
	gfs_err err;

	if (r >= j->ls->nzmodel || !j->ls->zmodel[r])
		err = gfs_fail(GFS_ERR_NOTFOUND,
			       "%s: model states file of rank %zu (of %llu) is missing",
			       c->tagdir, r, (unsigned long long)c->ws);
	else if (r == 0)
		err = file_open(&c->model[r], c->tagdir, j->ls->zmodel[r]);
	else
		err = file_stat(&c->model[r], c->tagdir, j->ls->zmodel[r]);
	(void)pthread_mutex_lock(&j->mu);
	if (r == 0) {
		j->m0_done = true;
		j->m0_ok = !err;
		(void)pthread_cond_broadcast(&j->cv);
	}
	while (!j->m0_done)
		(void)pthread_cond_wait(&j->cv, &j->mu);
	m0_ok = j->m0_ok;
	(void)pthread_mutex_unlock(&j->mu);
	if (r == 0 || err)
		return err;
	/* only frozen params are read from the other ranks' files (names,
	 * shapes, buffers and aliases come from rank 0's, as in
	 * zero_to_fp32): without frozen params their pickles are not parsed
	 * (a ZeRO-3 rank's holds param_shapes and a placeholder for every
	 * param: most of the import's time at scale); with them their
	 * fragments are located, then each file is freed at once, so the
	 * import holds a few ranks' pickles (one per thread), not ws of them */
	if (m0_ok && has_frozen(&c->model[0])) {
		err = file_read(&c->model[r]);
		if (!err)
			err = ws_check(c, &c->model[r]);
		if (!err)
			err = frags_read(&c->model[r],
					 gfs_pv_dict_get(c->model[0].root, "frozen_param_shapes"));
	} else {
		err = name_peek(&c->model[r]);
	}
	file_release(&c->model[r]);
	return err;
}

static gfs_err open_files(ds_ckpt *c, const ds_listing *ls)
{
	gfs_err err;

	if (ls->count_optim == 0)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: not a DeepSpeed ZeRO checkpoint: no *_optim_states.pt files",
				c->tagdir);
	c->optim = calloc(ls->noptim, sizeof(*c->optim));
	if (!c->optim)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	c->noptim = ls->noptim;
	for (size_t r = 0; r < ls->noptim; r++)
		c->optim[r].fd = -1;
	err = gfs_pfor(ls->noptim, open_optim, &(open_job){ .c = c, .ls = ls });
	if (!err)
		err = vote_optim(c, ls, ls->count_optim);
	if (err)
		return err;
	if (ls->noptim > c->ws)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: found %s for rank %zu, but the rank files say the world size is %llu (a shard from another world size?)",
				c->tagdir, ls->optim[ls->noptim - 1], ls->noptim - 1,
				(unsigned long long)c->ws);
	for (size_t r = 0; r < c->ws; r++)
		if (r >= ls->noptim || !ls->optim[r])
			return gfs_fail(GFS_ERR_NOTFOUND,
					"%s: optimizer states file of rank %zu (of %llu) is missing",
					c->tagdir, r, (unsigned long long)c->ws);
	if (c->stage == 3) {
		if (ls->nzmodel > c->ws)
			return gfs_fail(GFS_ERR_FORMAT, "%s: model states file %s is beyond world size %llu",
					c->tagdir, ls->zmodel[ls->nzmodel - 1], (unsigned long long)c->ws);
		c->model = calloc((size_t)c->ws, sizeof(*c->model));
		if (!c->model)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		for (uint64_t r = 0; r < c->ws; r++)
			c->model[r].fd = -1;
		c->nmodel = (size_t)c->ws;
		open_job j = { .c = c, .ls = ls };

		(void)pthread_mutex_init(&j.mu, NULL);
		(void)pthread_cond_init(&j.cv, NULL);
		err = gfs_pfor((size_t)c->ws, open_model, &j);
		(void)pthread_cond_destroy(&j.cv);
		(void)pthread_mutex_destroy(&j.mu);
		if (err)
			return err;
	} else {
		const char *name = ls->mpmodel ? ls->mpmodel : (ls->nzmodel ? ls->zmodel[0] : NULL);

		if (!name)
			return gfs_fail(GFS_ERR_NOTFOUND, "%s: mp_rank_00_model_states.pt is missing",
					c->tagdir);
		c->model = calloc(1, sizeof(*c->model));
		if (!c->model)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		c->model[0].fd = -1;
		c->nmodel = 1;
		err = file_open(&c->model[0], c->tagdir, name);
		if (err)
			return err;
	}
	return ws_check(c, &c->model[0]);
}

/*
 * moe_plain_open(): the mp_rank file alone of a mixture-of-experts
 * checkpoint without ZeRO (listing ls, no *_optim_states.pt but the
 * expp_rank_* ones).
 */
static gfs_err moe_plain_open(ds_ckpt *c, const ds_listing *ls)
{
	if (!ls->mpmodel)
		return gfs_fail(GFS_ERR_NOTFOUND, "%s/mp_rank_00_model_states.pt is missing", c->tagdir);
	c->model = calloc(1, sizeof(*c->model));
	if (!c->model)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	c->model[0].fd = -1;
	c->nmodel = 1;
	return file_open(&c->model[0], c->tagdir, ls->mpmodel);
}

/*
 * anon_note(): *note (resolve_tagdir()'s, or NULL; to free) extended with
 * a line on the files whose zip folder is archive/, whose names
 * name_check() could not check.
 */
static gfs_err anon_note(const ds_ckpt *c, char **note)
{
	const ds_file *first = NULL;
	size_t n = 0;
	char buf[8192];
	char *s;

	for (size_t r = 0; r < c->noptim + c->nmodel; r++) {
		const ds_file *f = r < c->noptim ? &c->optim[r] : &c->model[r - c->noptim];

		if (f->anonymous && n++ == 0)
			first = f;
	}
	if (n == 0)
		return GFS_OK;
	snprintf(buf, sizeof(buf),
		 "%s%s%zu of the %zu rank files (%s%s) %s the zip folder archive/ (torch.save to a file object), not %s: a copied or renamed one cannot be told from the rank its name says",
		 *note ? *note : "", *note ? "; " : "", n, c->noptim + c->nmodel, first->name,
		 n > 1 ? ", ..." : "", n > 1 ? "have" : "has", n > 1 ? "their names" : "its name");
	s = gfs_strdup(buf);
	if (!s)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	free(*note);
	*note = s;
	return GFS_OK;
}

/* -------------------------------------------------------------- pipelines */

#define TIED "tied_modules."
#define TIED_LEN (sizeof(TIED) - 1)

/* MPWORD(): what a model-parallel rank of c is, for messages. */
#define MPWORD(c) ((c)->tp ? "tensor rank" : "pipeline stage")

/* How the entries of a pipeline layer file are named and served. */
typedef struct pipe_layer {
	size_t stage;     /* the stage holding the layer */
	const char *tied; /* its TiedLayerSpec key (borrowed from param_shapes), or NULL */
	size_t tied_len;
} pipe_layer;

/*
 * stage_open(): the files of pipeline stage y (listing ls): its optimizer
 * states files with its mp_rank file (open_files()), or, without ZeRO or
 * BF16_Optimizer, its mp_rank file alone.
 */
static gfs_err stage_open(ds_ckpt *c, size_t y, const ds_listing *ls)
{
	ds_ckpt *s = &c->stages[y];
	gfs_err err;

	s->label = c->label;
	s->tagdir = gfs_strdup(c->tagdir);
	if (!s->tagdir)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (!ls->mpmodel)
		return gfs_fail(GFS_ERR_NOTFOUND, "%s/mp_rank_%02zu_model_states.pt is missing (%s %zu)",
				c->tagdir, y, MPWORD(c), y);
	if (ls->count_optim) {
		err = open_files(s, ls);
		if (!err && s->stage == 3)
			err = gfs_fail(GFS_ERR_UNSUPPORTED,
				       "%s: ZeRO-3 with pipeline or tensor parallelism is not supported",
				       c->tagdir);
		return err;
	}
	s->model = calloc(1, sizeof(*s->model));
	if (!s->model)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	s->model[0].fd = -1;
	s->nmodel = 1;
	err = file_open(&s->model[0], s->tagdir, ls->mpmodel);
	if (!err && (!gfs_pv_dict_get(s->model[0].root, "optimizer") ||
		     gfs_pv_dict_get(s->model[0].root, "optimizer")->kind == GFS_PV_NONE))
		err = gfs_fail(GFS_ERR_NOTFOUND,
			       "%s/zero_pp_rank_0_mp_rank_%02zu_optim_states.pt is missing: %s holds no optimizer state, so it is in *_optim_states.pt files, and there are none",
			       c->tagdir, y, s->model[0].path);
	return err;
}

/*
 * stages_check(): the stages are of one save: the same optimizer files
 * kinds, ZeRO stage and data-parallel size, and as many stages as each
 * mp_rank file's mp_world_size.
 */
static gfs_err stages_check(const ds_ckpt *c)
{
	const ds_ckpt *s0 = &c->stages[0];

	for (size_t y = 0; y < c->nstages; y++) {
		const ds_ckpt *s = &c->stages[y];
		const gfs_pv *v = gfs_pv_dict_get(s->model[0].root, "mp_world_size");
		int64_t n;

		if ((s->noptim == 0) != (s0->noptim == 0))
			return gfs_fail(GFS_ERR_NOTFOUND,
					"%s/zero_pp_rank_0_mp_rank_%02zu_optim_states.pt is missing: %s %zu has optimizer states files",
					c->tagdir, s->noptim ? (size_t)0 : y, MPWORD(c),
					s->noptim ? y : (size_t)0);
		if (s->ws != s0->ws || s->stage != s0->stage || s->bf16_optimizer != s0->bf16_optimizer)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: %s %zu was written with %llu data-parallel ranks and ZeRO stage %d, %s 0 with %llu and %d: files of two saves",
					s->model[0].path, MPWORD(c), y, (unsigned long long)s->ws, s->stage,
					MPWORD(c), (unsigned long long)s0->ws, s0->stage);
		if (!v || v->kind == GFS_PV_NONE)
			continue;
		if (!gfs_pv_int(v, &n) || n < 1)
			return gfs_fail(GFS_ERR_FORMAT, "%s: mp_world_size is not a positive integer",
					s->model[0].path);
		if ((uint64_t)n > c->nstages)
			return gfs_fail(GFS_ERR_NOTFOUND,
					"%s/mp_rank_%02zu_model_states.pt is missing: %s says %lld model-parallel ranks (mp_world_size)",
					c->tagdir, c->nstages, s->model[0].name, (long long)n);
		if ((uint64_t)n < c->nstages)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: mp_world_size is %lld, but files of %zu model-parallel ranks are here: files of two saves",
					s->model[0].path, (long long)n, c->nstages);
	}
	return GFS_OK;
}

/* pipe_open(): the stages' files and the layer files named in d. */
static gfs_err pipe_open(ds_ckpt *c, const ds_dir *d)
{
	gfs_err err = GFS_OK;

	c->stages = gfs_calloc(d->nmp, sizeof(*c->stages));
	c->layers = gfs_calloc(d->nlayers, sizeof(*c->layers));
	if (!c->stages || !c->layers)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	c->nstages = d->nmp;
	c->nlayers = d->nlayers;
	for (size_t i = 0; i < c->nlayers; i++)
		c->layers[i].fd = -1;
	for (size_t y = 0; !err && y < c->nstages; y++)
		err = stage_open(c, y, &d->mp[y]);
	if (!err)
		err = stages_check(c);
	for (size_t i = 0; !err && i < c->nlayers; i++)
		if (d->layers[i])
			err = file_open(&c->layers[i], c->tagdir, d->layers[i]);
	return err;
}

/* train_any(): the trainable param name of any stage, or NULL; its stage in *y. */
static train_param *train_any(const ds_ckpt *c, const char *name, size_t *y)
{
	for (size_t k = 0; k < c->nstages; k++) {
		const ds_ckpt *s = &c->stages[k];
		const train_param *tp = s->tmap ? tmap_find(s, name) : NULL;

		if (tp) {
			*y = k;
			return &s->train[tp - s->train];
		}
	}
	return NULL;
}

/* same_shape(): does tensor v have the shape of param_shapes entry tp? */
static bool same_shape(const ds_ckpt *s, const train_param *tp, const gfs_pv *v)
{
	uint64_t shape[GFS_MAX_DIMS], numel;
	uint32_t ndim;
	bool same;

	if (!v || v->kind != GFS_PV_TENSOR ||
	    shape_from_pv(tp->shape, s->model[0].path, tp->name, &ndim, shape, &numel))
		return false;
	same = v->u.tensor->ndim == ndim;
	for (uint32_t d = 0; same && d < ndim; d++)
		same = v->u.tensor->size[d] >= 0 && (uint64_t)v->u.tensor->size[d] == shape[d];
	return same;
}

/* key_name(): buf = prefix + "." + local name, or GFS_ERR_LIMIT naming f. */
static gfs_err key_name(char *buf, size_t n, const ds_file *f, const char *prefix, size_t plen,
			const char *local)
{
	if ((size_t)snprintf(buf, n, "%.*s.%s", (int)plen, prefix, local) >= n)
		return gfs_fail(GFS_ERR_LIMIT, "%s: key %.64s... is too long", f->path, local);
	return GFS_OK;
}

/*
 * tied_fits(): is every entry of layer file f a param tied_modules.K.NAME
 * of some stage, of its shape (K: key[0..klen))?
 */
static bool tied_fits(const ds_ckpt *c, const ds_file *f, const char *key, size_t klen)
{
	char pre[512], name[4096];

	if ((size_t)snprintf(pre, sizeof(pre), TIED "%.*s", (int)klen, key) >= sizeof(pre))
		return false;
	for (size_t k = 0; k < f->root->u.dict.len; k++) {
		const char *local = gfs_pv_name(f->root->u.dict.items[k].key);
		const train_param *tp;
		size_t y;

		if (!local || key_name(name, sizeof(name), f, pre, strlen(pre), local) ||
		    !(tp = train_any(c, name, &y)) ||
		    !same_shape(&c->stages[y], tp, f->root->u.dict.items[k].value))
			return false;
	}
	return true;
}

/*
 * pipe_tied(): the TiedLayerSpec key of layer file f, whose first entry
 * (local name p0) is no stage's param "N.p0": the one key K whose params
 * tied_modules.K.* fit it (tied_fits()), else none.
 */
static gfs_err pipe_tied(const ds_ckpt *c, const ds_file *f, const char *p0, pipe_layer *pl)
{
	const size_t plen = strlen(p0);

	for (size_t y = 0; y < c->nstages; y++) {
		const ds_ckpt *s = &c->stages[y];

		for (size_t t = 0; t < s->ntrain; t++) {
			const char *n = s->train[t].name;
			const size_t nl = strlen(n);
			size_t klen;

			if (strncmp(n, TIED, TIED_LEN) != 0 || nl < TIED_LEN + 2 + plen ||
			    n[nl - plen - 1] != '.' || strcmp(n + nl - plen, p0) != 0)
				continue;
			klen = nl - plen - 1 - TIED_LEN;
			if ((pl->tied && klen == pl->tied_len &&
			     strncmp(pl->tied, n + TIED_LEN, klen) == 0) ||
			    !tied_fits(c, f, n + TIED_LEN, klen))
				continue;
			if (pl->tied)
				return gfs_fail(GFS_ERR_UNSUPPORTED,
						"%s: its weights fit two tied modules, " TIED "%.*s and " TIED "%.*s: which one it holds is not recorded",
						f->path, (int)pl->tied_len, pl->tied, (int)klen,
						n + TIED_LEN);
			pl->tied = n + TIED_LEN;
			pl->tied_len = klen;
		}
	}
	return GFS_OK;
}

/*
 * pipe_untied_check(): without param_shapes (no ZeRO, no BF16_Optimizer)
 * no param is named: a TiedLayerSpec weight (tied_modules.KEY.NAME in the
 * model) cannot be told from a layer's own.  Refused when the stages'
 * optimizers hold more params than the layer files hold tensors (a
 * weight tied across stages); else the entries are "N.NAME".
 */
static gfs_err pipe_untied_check(const ds_ckpt *c)
{
	uint64_t nopt = 0, nlay = 0;

	for (size_t y = 0; y < c->nstages; y++) {
		const gfs_pv *pg = gfs_pv_dict_get(gfs_pv_dict_get(c->stages[y].model[0].root,
								   "optimizer"), "param_groups");

		for (size_t g = 0; g < gfs_pv_seq_len(pg); g++)
			nopt += gfs_pv_seq_len(gfs_pv_dict_get(gfs_pv_seq_at(pg, g), "params"));
	}
	for (size_t i = 0; i < c->nlayers; i++)
		if (c->layers[i].root)
			nlay += c->layers[i].root->u.dict.len;
	if (nopt > nlay)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: the stages' optimizers hold %llu params but the layer files %llu tensors: a TiedLayerSpec weight shared by stages, whose name (" TIED "KEY.NAME) a checkpoint without ZeRO or BF16_Optimizer does not record (no param_shapes)",
				c->tagdir, (unsigned long long)nopt, (unsigned long long)nlay);
	return GFS_OK;
}

/* pipe_plan(): each stage's trainable params and how each layer file is served. */
static gfs_err pipe_plan(ds_ckpt *c)
{
	size_t stage = 0;
	bool named = false;
	gfs_err err = GFS_OK;

	for (size_t y = 0; !err && y < c->nstages; y++) {
		ds_ckpt *s = &c->stages[y];

		s->l = c->l;
		if (s->noptim == 0)
			continue;
		err = plan_stage12(s);
		if (!err)
			err = tmap_build(s);
		named = true;
	}
	if (!err && !named)
		err = pipe_untied_check(c);
	c->play = gfs_calloc(c->nlayers ? c->nlayers : 1, sizeof(*c->play));
	if (!err && !c->play)
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; !err && i < c->nlayers; i++) {
		const ds_file *f = &c->layers[i];
		const char *p0;
		char pre[32], name[4096];
		size_t y;

		c->play[i].stage = stage;
		if (!f->root || f->root->u.dict.len == 0)
			continue;
		p0 = gfs_pv_name(f->root->u.dict.items[0].key);
		if (!p0)
			return gfs_pv_name_fail(f->path, "layer key", 0, f->root->u.dict.items[0].key);
		(void)snprintf(pre, sizeof(pre), "%zu", i);
		err = key_name(name, sizeof(name), f, pre, strlen(pre), p0);
		if (!err && train_any(c, name, &y))
			c->play[i].stage = stage = y;
		else if (!err && named)
			err = pipe_tied(c, f, p0, &c->play[i]);
	}
	return err;
}

/* pipe_entry(): entry name of stage s, value v of layer file f. */
static gfs_err pipe_entry(ds_ckpt *c, ds_ckpt *s, ds_file *f, const char *name, const gfs_pv *v)
{
	tview tv;
	size_t y;
	train_param *tp = train_any(c, name, &y);
	gfs_err err;

	if (tp && y == (size_t)(s - c->stages)) {
		tp->used = true;
		return emit_trainable(s, tp, v);
	}
	err = tensor_view(c, f, v, name, &tv);
	return err ? err : emit_view(c, name, &tv, tv.numel, tv.ndim, tv.shape);
}

/*
 * pipe_tied_value(): the module value of tied param name (tied_modules.K.P)
 * in the first layer file of K, or NULL.
 */
static const gfs_pv *pipe_tied_value(const ds_ckpt *c, const char *name)
{
	for (size_t i = 0; i < c->nlayers; i++) {
		const pipe_layer *pl = &c->play[i];
		const char *rest = name + TIED_LEN;

		if (pl->tied && strncmp(rest, pl->tied, pl->tied_len) == 0 &&
		    rest[pl->tied_len] == '.')
			return gfs_pv_dict_get(c->layers[i].root, rest + pl->tied_len + 1);
	}
	return NULL;
}

/*
 * pipe_missing(): the error for param name of stage y, which no layer file
 * holds: the file of layer N for a param "N.NAME"; for a tied weight, the
 * first layer file absent (a TiedLayerSpec used only through a forward_fn
 * has no file, but its module is built, and saved, at its first use).
 */
static gfs_err pipe_missing(const ds_ckpt *c, size_t y, const char *name)
{
	const char *p = name;
	uint64_t n = 0;
	bool suffix = false;

	for (size_t i = 0; i < c->nlayers; i++)
		if (c->layers[i].name)
			suffix = strstr(c->layers[i].name, "-model_00-") != NULL;
	if (!parse_u64(&p, &n) || *p != '.')
		for (n = 0; n < c->nlayers && c->layers[n].name; n++)
			;
	return gfs_fail(GFS_ERR_NOTFOUND,
			"%s/layer_%02llu%s-model_states.pt is missing: param %s of pipeline stage %zu (%s) is in no layer file",
			c->tagdir, (unsigned long long)n, suffix ? "-model_00" : "", name, y,
			c->stages[y].model[0].name);
}

/* served_before(): does a stage before y hold trainable param name? */
static bool served_before(const ds_ckpt *c, size_t y, const char *name)
{
	for (size_t k = 0; k < y; k++)
		if (c->stages[k].tmap && tmap_find(&c->stages[k], name))
			return true;
	return false;
}

/*
 * pipe_entries(): the model's entries in its state_dict() order: stage by
 * stage, its tied weights not served yet (each once, in param_shapes
 * order), then its layers in layer order, each layer's entries in its
 * file's order; trainable params as fp32 masters of the stage holding
 * them, the rest (and everything without ZeRO) as the layer files hold it.
 */
static gfs_err pipe_entries(ds_ckpt *c)
{
	gfs_err err = GFS_OK;

	for (size_t y = 0; !err && y < c->nstages; y++) {
		ds_ckpt *s = &c->stages[y];

		for (size_t t = 0; !err && t < s->ntrain; t++) {
			train_param *tp = &s->train[t];
			const gfs_pv *v;

			if (strncmp(tp->name, TIED, TIED_LEN) != 0)
				continue;
			if (served_before(c, y, tp->name)) {
				tp->used = tp->dup = true;
				continue;
			}
			tp->used = true;
			v = pipe_tied_value(c, tp->name);
			err = v ? emit_trainable(s, tp, v) : pipe_missing(c, y, tp->name);
		}
		for (size_t i = 0; !err && i < c->nlayers; i++) {
			ds_file *f = &c->layers[i];
			char pre[32];

			if (!f->root || c->play[i].stage != y || c->play[i].tied)
				continue;
			(void)snprintf(pre, sizeof(pre), "%zu", i);
			for (size_t k = 0; !err && k < f->root->u.dict.len; k++) {
				const gfs_pv_item *it = &f->root->u.dict.items[k];
				const char *local = gfs_pv_name(it->key);
				char name[4096];

				if (!local)
					return gfs_pv_name_fail(f->path, "layer key", k, it->key);
				err = key_name(name, sizeof(name), f, pre, strlen(pre), local);
				if (!err)
					err = pipe_entry(c, s, f, name, it->value);
			}
		}
	}
	for (size_t y = 0; !err && y < c->nstages; y++)
		for (size_t t = 0; !err && t < c->stages[y].ntrain; t++)
			if (!c->stages[y].train[t].used)
				err = pipe_missing(c, y, c->stages[y].train[t].name);
	return err;
}

/*
 * pipe_model_srcs(): after build_optim() of stage 0, every stage's
 * mp_rank_YY_model_states.pt as a model-states source, in stage order (the
 * universal view copies them, as ds_to_universal.py does).
 */
static gfs_err pipe_model_srcs(ds_ckpt *c)
{
	gfs_optim *o = &c->l->optim;
	uint32_t *srcs = gfs_calloc(c->nstages, sizeof(*srcs));

	if (!srcs)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t y = 0; y < c->nstages; y++) {
		const gfs_err err = file_source(&c->stages[y], &c->stages[y].model[0], &srcs[y]);

		if (err) {
			free(srcs);
			return err;
		}
	}
	free(o->model_srcs);
	o->model_srcs = srcs;
	o->nmodel_srcs = c->nstages;
	return GFS_OK;
}

/* pipe_build(): the layout of a pipeline checkpoint opened by pipe_open(). */
static gfs_err pipe_build(ds_ckpt *c, char **note)
{
	const ds_ckpt *s0 = &c->stages[0];
	const char *slash = strrchr(c->tagdir, '/');
	char info[256];
	gfs_err err = GFS_OK;

	for (size_t y = 0; !err && y < c->nstages; y++)
		err = anon_note(&c->stages[y], note);
	for (size_t y = 0; !err && y < c->nstages; y++) {
		const ds_ckpt *s = &c->stages[y];

		for (size_t r = 0; !err && r < s->noptim; r++)
			err = gfs_layout_add_metafile(c->l, s->optim[r].path);
		if (!err)
			err = gfs_layout_add_metafile(c->l, s->model[0].path);
	}
	for (size_t i = 0; !err && i < c->nlayers; i++)
		if (c->layers[i].path)
			err = gfs_layout_add_metafile(c->l, c->layers[i].path);
	if (!err)
		err = gfs_layout_set_note(c->l, *note);
	if (!err)
		err = pipe_plan(c);
	if (!err)
		err = pipe_entries(c);
	for (size_t y = 0; !err && s0->noptim && y < c->nstages; y++) {
		err = plan_states(&c->stages[y]);
		if (!err)
			err = emit_states(&c->stages[y]);
	}
	if (!err && s0->noptim) {
		err = build_optim(&c->stages[0]);
		if (!err)
			err = pipe_model_srcs(c);
		c->l->optim.pipe_stages = (uint32_t)c->nstages;
	}
	if (err)
		return err;
	if (s0->noptim)
		snprintf(info, sizeof(info),
			 "DeepSpeed pipeline, %zu stages, ZeRO-%d%s, %llu data-parallel ranks, tag %s",
			 c->nstages, s0->stage, s0->bf16_optimizer ? " (BF16_Optimizer)" : "",
			 (unsigned long long)s0->ws, slash ? slash + 1 : c->tagdir);
	else
		snprintf(info, sizeof(info), "DeepSpeed pipeline, %zu stages, no ZeRO, tag %s",
			 c->nstages, slash ? slash + 1 : c->tagdir);
	return gfs_layout_set_info(c->l, info);
}

static void ckpt_free(ds_ckpt *c)
{
	for (size_t r = 0; r < c->noptim; r++)
		file_close(&c->optim[r]);
	for (size_t r = 0; c->model && r < c->nmodel; r++)
		file_close(&c->model[r]);
	free(c->optim);
	free(c->model);
	free(c->train);
	free(c->tmap);
	flats_free(c->rank_flats, (size_t)c->ws);
	flats_free(c->group_flats, c->ngroups);
	for (size_t k = 0; k < c->nstates; k++) {
		flats_free(c->states[k].flats, c->stage == 3 ? (size_t)c->ws : c->ngroups);
		free(c->states[k].values);
	}
	free(c->states);
	free(c->fkeys);
	for (size_t i = 0; i < c->nrfsets; i++)
		free(c->rfsets[i].ids);
	free(c->rfsets);
	for (size_t y = 0; y < c->nstages; y++) {
		c->stages[y].l = NULL;
		ckpt_free(&c->stages[y]);
	}
	free(c->stages);
	for (size_t i = 0; i < c->nlayers; i++)
		file_close(&c->layers[i]);
	free(c->layers);
	free(c->play);
	for (size_t i = 0; i < c->nexperts; i++)
		file_close(&c->experts[i]);
	free(c->experts);
	free(c->moe_n);
	free(c->mparams);
	flats_free(c->mflats, c->mflats ? (size_t)c->ep + 1 : 0);
	free(c->tagdir);
	gfs_layout_free(c->l);
}

/* -------------------------------------------------------------------- MoE */

#define EXPERTS_AT "experts.deepspeed_experts."

/*
 * A param of a mixture-of-experts checkpoint: its module tensor and where
 * its master (and each optimizer state) lies.
 */
typedef struct moe_param {
	const char *name;    /* borrowed from a pickle */
	ds_file *f;          /* the file holding its module tensor */
	const gfs_pv *value; /* its module tensor */
	size_t flat;         /* 0: the dense flat; 1 + e: expert-parallel rank e's */
	uint64_t off;        /* element offset in that flat */
	const char *alias;   /* a second name of this param (a tied weight), or NULL */
	bool module_value;   /* no optimizer holds it (a buffer, a frozen param): the module tensor */
	uint64_t numel;
	uint32_t ndim;
	uint64_t shape[GFS_MAX_DIMS];
} moe_param;

/*
 * moe_open(): the expert files num_experts (in c's mp_rank file) names,
 * layer_L_expert_X_mp_rank_00_model_states.pt, every one of them and no
 * other (d->nexpert counts those found).
 */
static gfs_err moe_open(ds_ckpt *c, const ds_dir *d)
{
	const ds_file *m0 = &c->model[0];
	const gfs_pv *ne = gfs_pv_dict_get(m0->root, "num_experts");
	uint64_t total = 0;
	size_t k = 0;

	if (!ne || (ne->kind != GFS_PV_LIST && ne->kind != GFS_PV_TUPLE) || gfs_pv_seq_len(ne) == 0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: expert files (%s), but no num_experts list",
				m0->path, d->expert);
	c->nmoe = gfs_pv_seq_len(ne);
	c->moe_n = gfs_calloc(c->nmoe, sizeof(*c->moe_n));
	if (!c->moe_n)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t L = 0; L < c->nmoe; L++) {
		int64_t n;

		if (!gfs_pv_int(gfs_pv_seq_at(ne, L), &n) || n < 1 || n > DS_MAX_RANKS)
			return gfs_fail(GFS_ERR_FORMAT, "%s: num_experts[%zu] is not an integer in 1..%d",
					m0->path, L, DS_MAX_RANKS);
		c->moe_n[L] = (uint64_t)n;
		total += (uint64_t)n;
	}
	if (total < d->nexpert)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: %zu expert files, but num_experts in %s says %llu: expert files of two saves",
				c->tagdir, d->nexpert, m0->name, (unsigned long long)total);
	c->experts = gfs_calloc((size_t)total, sizeof(*c->experts));
	if (!c->experts)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	c->nexperts = (size_t)total;
	for (size_t i = 0; i < c->nexperts; i++)
		c->experts[i].fd = -1;
	for (size_t L = 0; L < c->nmoe; L++)
		for (uint64_t x = 0; x < c->moe_n[L]; x++) {
			char name[128];
			gfs_err err;

			snprintf(name, sizeof(name), "layer_%zu_expert_%llu_mp_rank_00_model_states.pt", L,
				 (unsigned long long)x);
			err = file_open(&c->experts[k], c->tagdir, name);
			/* only its pickle is used (names, shapes): no fd is held
			 * per expert (thousands of them) */
			gfs_tzip_close(c->experts[k].zip);
			c->experts[k].zip = NULL;
			if (c->experts[k].fd >= 0)
				close(c->experts[k].fd);
			c->experts[k++].fd = -1;
			if (err == GFS_ERR_NOTFOUND)
				return gfs_fail(err,
						"%s/%s is missing: expert %llu of MoE layer %zu (num_experts in %s)",
						c->tagdir, name, (unsigned long long)x, L, m0->name);
			if (err)
				return err;
		}
	return GFS_OK;
}

/*
 * moe_groups(): the optimizer's two param groups: the dense one and the
 * expert one (moe: True, named ep_size_N: c->ep = N, which divides the
 * world size and each layer's expert count).
 */
static gfs_err moe_groups(ds_ckpt *c)
{
	const gfs_pv *pg = gfs_pv_dict_get(base_state(c, 0), "param_groups");
	const gfs_pv *parts = gfs_pv_dict_get(osd_of(&c->optim[0]), "single_partition_of_fp32_groups");
	size_t ndense = 0, nexp = 0;

	if (c->stage == 3)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: a ZeRO-3 mixture-of-experts checkpoint is not supported", c->tagdir);
	if (!pg || gfs_pv_seq_len(pg) != gfs_pv_seq_len(parts))
		return gfs_fail(GFS_ERR_FORMAT, "%s: %zu param groups but %zu fp32 partitions",
				c->optim[0].path, gfs_pv_seq_len(pg), gfs_pv_seq_len(parts));
	for (size_t g = 0; g < gfs_pv_seq_len(pg); g++) {
		const gfs_pv *grp = gfs_pv_seq_at(pg, g);
		const gfs_pv *moe = gfs_pv_dict_get(grp, "moe");
		const char *nm = gfs_pv_name(gfs_pv_dict_get(grp, "name"));
		const char *p = nm;

		if (!moe || moe->kind != GFS_PV_BOOL || !moe->u.b) {
			c->gdense = g;
			ndense++;
			continue;
		}
		if (!nm || !eat(&p, "ep_size_") || !parse_u64(&p, &c->ep) || *p || c->ep < 1 ||
		    c->ep > c->ws || c->ws % c->ep != 0)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: expert param group %zu is not named ep_size_N with N dividing the %llu ranks",
					c->optim[0].path, g, (unsigned long long)c->ws);
		c->gexp = g;
		nexp++;
	}
	if (ndense != 1 || nexp != 1)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: %zu dense and %zu expert param groups: only one of each is supported",
				c->optim[0].path, ndense, nexp);
	for (size_t L = 0; L < c->nmoe; L++)
		if (c->moe_n[L] % c->ep != 0)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: num_experts[%zu] is %llu, not a multiple of the expert-parallel size %llu",
					c->model[0].path, L, (unsigned long long)c->moe_n[L],
					(unsigned long long)c->ep);
	return GFS_OK;
}

/* The tensor of rank r, param group g, laid out like its fp32 partition. */
typedef gfs_err (*moe_part_fn)(ds_ckpt *c, size_t r, size_t g, const char *state, tview *tv);

/* moe_fp32_part(): rank r's fp32 partition of param group g (a moe_part_fn). */
static gfs_err moe_fp32_part(ds_ckpt *c, size_t r, size_t g, const char *state, tview *tv)
{
	(void)state;
	return fp32_part(c, r, g, tv);
}

/* moe_state_part(): rank r's optimizer state `state` of param group g (a moe_part_fn). */
static gfs_err moe_state_part(ds_ckpt *c, size_t r, size_t g, const char *state, tview *tv)
{
	char what[128];

	snprintf(what, sizeof(what), "optimizer state %s of param group %zu", state, g);
	return tensor_view(c, &c->optim[r], gfs_pv_dict_get(group_state(c, r, g), state), what, tv);
}

/*
 * moe_flats(): fl[0] the dense group's partitions of every rank; fl[1 + e]
 * the expert group's partitions of expert-parallel rank e's expert
 * data-parallel ranks (e, e + ep, e + 2 ep, ...), as DeepSpeed groups them.
 */
static gfs_err moe_flats(ds_ckpt *c, moe_part_fn part, const char *state, flat *fl)
{
	gfs_err err = GFS_OK;

	for (uint64_t i = 0; i <= c->ep; i++)
		fl[i].dtype = GFS_DT_INVALID;
	for (uint64_t r = 0; !err && r < c->ws; r++) {
		tview tv;

		err = part(c, (size_t)r, c->gdense, state, &tv);
		if (!err)
			err = flat_append(&fl[0], &tv, tv.numel, c->optim[r].path);
	}
	for (uint64_t e = 0; !err && e < c->ep; e++)
		for (uint64_t r = e; !err && r < c->ws; r += c->ep) {
			tview tv;

			err = part(c, (size_t)r, c->gexp, state, &tv);
			if (!err)
				err = flat_append(&fl[1 + e], &tv, tv.numel, c->optim[r].path);
		}
	return err;
}

/* moe_push(): entry k of dict of tensors sd in file f as a param of flat fl at *off. */
/* moe_nentries(): the entries of module and of every expert file's state dict. */
static size_t moe_nentries(const ds_ckpt *c, const gfs_pv *module)
{
	size_t count = module->u.dict.len;

	for (size_t i = 0; i < c->nexperts; i++)
		count += c->experts[i].root->u.dict.len;
	return count;
}

static gfs_err moe_push(ds_ckpt *c, ds_file *f, const gfs_pv *sd, size_t k, size_t fl,
			uint64_t *off)
{
	const gfs_pv_item *it = &sd->u.dict.items[k];
	moe_param *p = &c->mparams[c->nmparams];
	const gfs_pv_tensor *t;

	p->name = gfs_pv_name(it->key);
	if (!p->name)
		return gfs_pv_name_fail(f->path, "state dict key", k, it->key);
	if (!it->value || it->value->kind != GFS_PV_TENSOR)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s is not a tensor", f->path, p->name);
	t = it->value->u.tensor;
	if (t->ndim > GFS_MAX_DIMS)
		return gfs_fail(GFS_ERR_LIMIT, "%s: %s: too many dimensions", f->path, p->name);
	p->f = f;
	p->value = it->value;
	p->flat = fl;
	p->off = *off;
	p->ndim = t->ndim;
	p->numel = 1;
	for (uint32_t d = 0; d < t->ndim; d++) {
		if (t->size[d] < 0 || !gfs_mul_u64(p->numel, (uint64_t)t->size[d], &p->numel))
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s: bad size", f->path, p->name);
		p->shape[d] = (uint64_t)t->size[d];
	}
	if (!gfs_add_u64(*off, p->numel, off))
		return gfs_fail(GFS_ERR_FORMAT, "%s: sizes overflow", f->path);
	c->nmparams++;
	return GFS_OK;
}

/*
 * moe_fits(): params taking used elements fit flat fl of group g written
 * by the ranks from r0 on, step apart: it holds them and at most the
 * padding those ranks record (group_paddings).
 */
static gfs_err moe_fits(const ds_ckpt *c, const flat *fl, size_t g, uint64_t r0, uint64_t step,
			uint64_t used, const char *what)
{
	uint64_t pad = 0;

	for (uint64_t r = r0; r < c->ws; r += step) {
		int64_t p;

		if (gfs_pv_int(gfs_pv_seq_at(gfs_pv_dict_get(osd_of(&c->optim[r]), "group_paddings"), g),
			       &p) && p > 0)
			pad += (uint64_t)p;
	}
	if (used > fl->total || (used != fl->total && used + pad != fl->total))
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: %s take %llu elements, but their fp32 partitions hold %llu (padding %llu): a rank file is missing or from another run, or the model has buffers or frozen params",
				c->tagdir, what, (unsigned long long)used, (unsigned long long)fl->total,
				(unsigned long long)pad);
	return GFS_OK;
}

/*
 * moe_dense_names(): the names of the dense group's params in the order
 * of its flat, from the ranks' param_slice_mappings (rank by rank, a param
 * split between ranks once), in *names (to free; *n of them).  *names is
 * NULL when a rank records none (DeepSpeed before 0.10): every `module`
 * entry is then taken for a param.
 */
static gfs_err moe_dense_names(const ds_ckpt *c, const char ***names, size_t *n)
{
	size_t cap = 0;

	*names = NULL;
	*n = 0;
	for (uint64_t r = 0; r < c->ws; r++) {
		const gfs_pv *g = gfs_pv_seq_at(gfs_pv_dict_get(osd_of(&c->optim[r]),
								"param_slice_mappings"), c->gdense);

		if (!g || g->kind != GFS_PV_DICT)
			return GFS_OK;
		cap += g->u.dict.len;
	}
	*names = gfs_calloc(cap ? cap : 1, sizeof(**names));
	if (!*names)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (uint64_t r = 0; r < c->ws; r++) {
		const gfs_pv *g = gfs_pv_seq_at(gfs_pv_dict_get(osd_of(&c->optim[r]),
								"param_slice_mappings"), c->gdense);

		for (size_t k = 0; k < g->u.dict.len; k++) {
			const char *name = gfs_pv_name(g->u.dict.items[k].key);

			if (!name)
				return gfs_pv_name_fail(c->optim[r].path, "param_slice_mappings key", k,
							g->u.dict.items[k].key);
			if (*n == 0 || strcmp((*names)[*n - 1], name) != 0)
				(*names)[(*n)++] = name;
		}
	}
	return GFS_OK;
}

/* same_tensor(): do pickled tensors a and b view the same elements of one storage? */
static bool same_tensor(const gfs_pv *a, const gfs_pv *b)
{
	const gfs_pv_tensor *x = a->u.tensor, *y = b->u.tensor;

	if (x->offset != y->offset || x->ndim != y->ndim || !x->storage.key || !y->storage.key ||
	    strcmp(x->storage.key, y->storage.key) != 0)
		return false;
	for (uint32_t d = 0; d < x->ndim; d++)
		if (x->size[d] != y->size[d] || x->stride[d] != y->stride[d])
			return false;
	return true;
}

/*
 * moe_dense(): `module`'s entries as the dense params of c->mparams, in
 * order; with the dense group's names (moe_dense_names(), n of them, in
 * the same order), an entry not among them is a second name of an earlier
 * param when it is the same tensor (a tied weight), else served as the
 * module holds it (a buffer, a frozen param).
 */
static gfs_err moe_dense(ds_ckpt *c, const gfs_pv *module, const char **names, size_t n,
			 uint64_t *off)
{
	ds_file *m0 = &c->model[0];
	size_t j = 0;
	gfs_err err = GFS_OK;

	for (size_t k = 0; !err && k < module->u.dict.len; k++) {
		moe_param *p = &c->mparams[c->nmparams];

		err = moe_push(c, m0, module, k, 0, off);
		if (err || !names)
			continue;
		if (j < n && strcmp(p->name, names[j]) == 0) {
			j++;
			continue;
		}
		*off -= p->numel;
		p->module_value = true;
		for (size_t i = 0; i + 1 < c->nmparams && !p->alias; i++)
			if (!c->mparams[i].module_value && !c->mparams[i].alias &&
			    same_tensor(c->mparams[i].value, p->value))
				p->alias = c->mparams[i].name;
	}
	if (!err && names && j < n)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: param %s of the optimizer's param_slice_mappings is not in `module` (or not in its order)",
				m0->path, names[j]);
	return err;
}

/* expert_id(): is key an entry of expert gid (...experts.deepspeed_experts.GID.NAME)? */
static bool expert_id(const char *key, uint64_t gid)
{
	const char *p = strstr(key, EXPERTS_AT);
	uint64_t n;

	if (!p)
		return false;
	p += sizeof(EXPERTS_AT) - 1;
	return parse_u64(&p, &n) && *p == '.' && n == gid;
}

/*
 * moe_plan(): the params in c->mparams: `module`'s entries (moe_dense():
 * the dense params, in order, the dense flat), then the experts, MoE layer by layer
 * in global id order, each in its expert-parallel rank's flat (rank e
 * holds experts e * n/ep .. (e + 1) * n/ep - 1 of each layer, layer by
 * layer).
 */
static gfs_err moe_plan(ds_ckpt *c)
{
	const ds_file *m0 = &c->model[0];
	const gfs_pv *module = gfs_pv_dict_get(m0->root, "module");
	uint64_t *eoff;
	const char **names = NULL;
	size_t count, nnames = 0;
	uint64_t off = 0;
	gfs_err err;

	if (!module || module->kind != GFS_PV_DICT)
		return gfs_fail(GFS_ERR_FORMAT, "%s: no `module` state dict", m0->path);
	count = moe_nentries(c, module);
	c->mparams = gfs_calloc(count ? count : 1, sizeof(*c->mparams));
	c->mflats = gfs_calloc((size_t)c->ep + 1, sizeof(*c->mflats));
	eoff = gfs_calloc((size_t)c->ep, sizeof(*eoff));
	if (!c->mparams || !c->mflats || !eoff) {
		free(eoff);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	err = moe_flats(c, moe_fp32_part, NULL, c->mflats);
	if (!err)
		err = moe_dense_names(c, &names, &nnames);
	if (!err)
		err = moe_dense(c, module, names, nnames, &off);
	free(names);
	if (!err)
		err = moe_fits(c, &c->mflats[0], c->gdense, 0, 1, off, "the dense params (`module`)");
	for (size_t L = 0, base = 0; !err && L < c->nmoe; base += c->moe_n[L++]) {
		const uint64_t nlocal = c->moe_n[L] / c->ep;

		for (uint64_t gid = 0; !err && gid < c->moe_n[L]; gid++) {
			ds_file *f = &c->experts[base + gid];
			const uint64_t e = gid / nlocal;

			for (size_t k = 0; !err && k < f->root->u.dict.len; k++) {
				err = moe_push(c, f, f->root, k, 1 + (size_t)e, &eoff[e]);
				if (!err && !expert_id(c->mparams[c->nmparams - 1].name, gid))
					err = gfs_fail(GFS_ERR_FORMAT,
						       "%s: %s is not a key of expert %llu",
						       f->path, c->mparams[c->nmparams - 1].name,
						       (unsigned long long)gid);
			}
		}
	}
	for (uint64_t e = 0; !err && e < c->ep; e++) {
		char what[96];

		snprintf(what, sizeof(what), "the experts of expert-parallel rank %llu",
			 (unsigned long long)e);
		err = moe_fits(c, &c->mflats[1 + e], c->gexp, e, c->ep, eoff[e], what);
	}
	free(eoff);
	return err;
}

/*
 * moe_zip(): file f's zip directory read again when moe_open() closed it
 * (an expert file), closing the one read before: one expert's fd at a time.
 */
static gfs_err moe_zip(ds_ckpt *c, ds_file *f)
{
	if (f->zip)
		return GFS_OK;
	if (c->zip_held) {
		gfs_tzip_close(c->zip_held->zip);
		c->zip_held->zip = NULL;
		close(c->zip_held->fd);
		c->zip_held->fd = -1;
		c->zip_held = NULL;
	}
	f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0)
		return gfs_fail(errno == ENOENT ? GFS_ERR_NOTFOUND : GFS_ERR_IO, "%s: cannot open: %s",
				f->path, strerror(errno));
	c->zip_held = f;
	return gfs_tzip_open(f->fd, 0, f->size, f->path, NULL, &f->zip);
}

/*
 * moe_emit_one(): param p as a model tensor (state NULL) or as optimizer
 * state `state`: its elements of flats fl, or, a 0-d state, the value of
 * its flat in scal.  A second name of a param is an alias of it, and an
 * entry no optimizer holds is the module's tensor (it has no states).
 */
static gfs_err moe_emit_one(ds_ckpt *c, const moe_param *p, const flat *fl, const tview *scal,
			    const char *state)
{
	size_t ti;
	gfs_err err;

	if (p->module_value && state)
		return GFS_OK;
	if (p->alias)
		return gfs_layout_add_alias(c->l, p->name, p->alias);
	if (p->module_value) {
		tview tv;

		err = moe_zip(c, p->f);
		if (!err)
			err = tensor_view(c, p->f, p->value, p->name, &tv);
		return err ? err : emit_view(c, p->name, &tv, tv.numel, tv.ndim, tv.shape);
	}
	if (scal) {
		const tview *tv = &scal[p->flat];

		err = gfs_layout_add_state(c->l, state, p->name, tv->dtype, 0, NULL, &ti);
		return err ? err : gfs_layout_add_piece(c->l, ti, tv->src, tv->off,
							gfs_dtype_size(tv->dtype));
	}
	if (p->off + p->numel > fl[p->flat].total)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: optimizer state %s of %s lies beyond the %llu elements its ranks hold",
				c->tagdir, state, p->name, (unsigned long long)fl[p->flat].total);
	if (state)
		err = gfs_layout_add_state(c->l, state, p->name, fl[p->flat].dtype, p->ndim, p->shape,
					   &ti);
	else
		err = gfs_layout_add_tensor(c->l, p->name, fl[p->flat].dtype, p->ndim, p->shape, &ti);
	return err ? err : flat_emit(c->l, ti, &fl[p->flat], p->off, p->numel);
}

/*
 * moe_emit(): every param (moe_emit_one()) in the model's state_dict()
 * order: `module`'s, each MoE layer's experts right after the last entry
 * sharing their prefix (...deepspeed_moe.: the gate), or at the end when
 * none does.
 */
static gfs_err moe_emit(ds_ckpt *c, const flat *fl, const tview *scal, const char *state)
{
	const size_t ndense = gfs_pv_dict_get(c->model[0].root, "module")->u.dict.len;
	size_t *at = gfs_calloc(c->nmoe, sizeof(*at));
	size_t *first = gfs_calloc(c->nmoe + 1, sizeof(*first));
	gfs_err err = GFS_OK;

	if (!at || !first) {
		free(at);
		free(first);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	first[0] = ndense;
	for (size_t L = 0, base = 0; L < c->nmoe; base += c->moe_n[L++]) {
		first[L + 1] = first[L];
		for (size_t x = 0; x < c->moe_n[L]; x++)
			first[L + 1] += c->experts[base + x].root->u.dict.len;
		at[L] = ndense;
		if (first[L + 1] > first[L]) {
			const char *k0 = c->mparams[first[L]].name;
			const size_t plen = (size_t)(strstr(k0, EXPERTS_AT) - k0);

			for (size_t i = 0; plen > 0 && i < ndense; i++)
				if (strncmp(c->mparams[i].name, k0, plen) == 0)
					at[L] = i;
		}
	}
	for (size_t i = 0; !err && i <= ndense; i++) {
		if (i < ndense)
			err = moe_emit_one(c, &c->mparams[i], fl, scal, state);
		for (size_t L = 0; !err && L < c->nmoe; L++)
			if (at[L] == (i < ndense ? i : ndense))
				for (size_t j = first[L]; !err && j < first[L + 1]; j++)
					err = moe_emit_one(c, &c->mparams[j], fl, scal, state);
	}
	free(at);
	free(first);
	return err;
}

/*
 * moe_states(): the optimizer states rank 0 holds for its dense group,
 * each laid out like the masters (moe_flats()); a 0-d one (the step)
 * from expert-data-parallel rank 0 of each flat.
 */
static gfs_err moe_states(ds_ckpt *c)
{
	const gfs_pv *st0 = group_state(c, 0, c->gdense);
	gfs_err err = GFS_OK;

	for (size_t k = 0; !err && st0 && st0->kind == GFS_PV_DICT && k < st0->u.dict.len; k++) {
		const char *name = gfs_pv_name(st0->u.dict.items[k].key);
		const gfs_pv *v = st0->u.dict.items[k].value;
		flat *fl;
		tview *scal = NULL;

		if (!name || strpbrk(name, STATE_BAD_BYTES) || !*name || strcmp(name, ".") == 0 ||
		    strcmp(name, "..") == 0)
			return gfs_fail(GFS_ERR_FORMAT, "%s: optimizer state %zu has no usable name",
					c->optim[0].path, k);
		if (!v || v->kind != GFS_PV_TENSOR)
			continue;
		fl = gfs_calloc((size_t)c->ep + 1, sizeof(*fl));
		if (!fl)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		if (v->u.tensor->ndim == 0) {
			scal = gfs_calloc((size_t)c->ep + 1, sizeof(*scal));
			err = scal ? moe_state_part(c, 0, c->gdense, name, &scal[0])
				   : gfs_fail(GFS_ERR_NOMEM, "out of memory");
			for (uint64_t e = 0; !err && e < c->ep; e++)
				err = moe_state_part(c, (size_t)e, c->gexp, name, &scal[1 + e]);
		} else {
			err = moe_flats(c, moe_state_part, name, fl);
		}
		if (!err)
			err = moe_emit(c, fl, scal, name);
		flats_free(fl, (size_t)c->ep + 1);
		free(scal);
	}
	return err;
}

/*
 * moe_build_plain(): the layout of a mixture-of-experts checkpoint without
 * ZeRO (no *_optim_states.pt but the expp_rank_* files, holding the torch
 * optimizer's state by param index): every entry as `module` and the
 * expert files hold it, in moe_emit()'s order; no optimizer states.  A
 * model in 16 bits is refused: its fp32 masters are in that optimizer
 * state.
 */
static gfs_err moe_build_plain(ds_ckpt *c)
{
	ds_file *m0 = &c->model[0];
	const gfs_pv *module = gfs_pv_dict_get(m0->root, "module");
	const char *slash = strrchr(c->tagdir, '/');
	size_t count;
	uint64_t off = 0, total = 0;
	char info[256];
	gfs_err err = GFS_OK;

	if (!module || module->kind != GFS_PV_DICT)
		return gfs_fail(GFS_ERR_FORMAT, "%s: no `module` state dict", m0->path);
	count = moe_nentries(c, module);
	c->mparams = gfs_calloc(count ? count : 1, sizeof(*c->mparams));
	if (!c->mparams)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t k = 0; !err && k < module->u.dict.len; k++)
		err = moe_push(c, m0, module, k, 0, &off);
	for (size_t L = 0, base = 0; !err && L < c->nmoe; base += c->moe_n[L++])
		for (uint64_t gid = 0; !err && gid < c->moe_n[L]; gid++) {
			ds_file *f = &c->experts[base + gid];

			for (size_t k = 0; !err && k < f->root->u.dict.len; k++) {
				err = moe_push(c, f, f->root, k, 0, &off);
				if (!err && !expert_id(c->mparams[c->nmparams - 1].name, gid))
					err = gfs_fail(GFS_ERR_FORMAT, "%s: %s is not a key of expert %llu",
						       f->path, c->mparams[c->nmparams - 1].name,
						       (unsigned long long)gid);
			}
		}
	for (size_t i = 0; !err && i < c->nmparams; i++) {
		const char *dt = c->mparams[i].value->u.tensor->dtype;
		const char *cls = c->mparams[i].value->u.tensor->storage.cls;
		const gfs_dtype d = dt ? gfs_dtype_parse(dt) : gfs_dtype_from_storage_class(cls);

		c->mparams[i].module_value = true;
		if (d == GFS_DT_F16 || d == GFS_DT_BF16)
			err = gfs_fail(GFS_ERR_UNSUPPORTED,
				       "%s: %s is %s in a mixture-of-experts checkpoint without ZeRO: its fp32 master is in the torch optimizer state of the expp_rank_*_optim_states.pt files, which gatherfs does not read",
				       c->mparams[i].f->path, c->mparams[i].name, gfs_dtype_name(d));
	}
	for (size_t i = 0; !err && i < c->nexperts; i++)
		err = gfs_layout_add_metafile(c->l, c->experts[i].path);
	if (!err)
		err = moe_emit(c, NULL, NULL, NULL);
	if (err)
		return err;
	for (size_t L = 0; L < c->nmoe; L++)
		total += c->moe_n[L];
	snprintf(info, sizeof(info),
		 "DeepSpeed mixture of experts (%llu experts in %zu MoE layers), no ZeRO, tag %s",
		 (unsigned long long)total, c->nmoe, slash ? slash + 1 : c->tagdir);
	return gfs_layout_set_info(c->l, info);
}

/* moe_build(): the layout of a mixture-of-experts checkpoint. */
static gfs_err moe_build(ds_ckpt *c)
{
	const char *slash = strrchr(c->tagdir, '/');
	uint64_t total = 0;
	char info[256];
	gfs_err err = GFS_OK;

	for (size_t i = 0; !err && i < c->nexperts; i++)
		err = gfs_layout_add_metafile(c->l, c->experts[i].path);
	if (!err)
		err = moe_groups(c);
	if (!err)
		err = moe_plan(c);
	if (!err)
		err = moe_emit(c, c->mflats, NULL, NULL);
	if (!err)
		err = moe_states(c);
	if (!err)
		err = build_optim(c);
	if (err)
		return err;
	c->l->optim.moe = true;
	for (size_t L = 0; L < c->nmoe; L++)
		total += c->moe_n[L];
	snprintf(info, sizeof(info),
		 "DeepSpeed mixture of experts (%llu experts in %zu MoE layers, expert-parallel size %llu), ZeRO-%d%s, %llu ranks, tag %s",
		 (unsigned long long)total, c->nmoe, (unsigned long long)c->ep, c->stage,
		 c->bf16_optimizer ? " (BF16_Optimizer)" : "", (unsigned long long)c->ws,
		 slash ? slash + 1 : c->tagdir);
	return gfs_layout_set_info(c->l, info);
}

/* ------------------------------------------------------ tensor parallelism */

/* What universal_checkpoint_info (TP_COL: a tp_split file only) says of a param. */
enum { TP_REP, TP_AVG, TP_SUB2, TP_SUB, TP_ROW, TP_VOCAB, TP_NKINDS, TP_COL = TP_NKINDS };

/* Bounds of a tp_split file. */
#define TP_SPLIT_MAX_BYTES (1u << 20)
#define TP_SPLIT_MAX_PATS 4096

static const char *const tp_keys[TP_NKINDS] = {
	"tp_replicated_parameter_patterns", "parameter_to_average_patterns",
	"parameter_with_2_sub_params_cat_dim_0", "parameter_with_sub_params",
	"parameter_with_row_parallelism_patterns", "vocabulary_parameter_patterns",
};

/* The compiled patterns of universal_checkpoint_info, or of a tp_split file. */
typedef struct tp_info {
	gfs_pyre *pats;  /* [npats] */
	int *kind;       /* [npats]: TP_* */
	size_t npats;
	int64_t vocab;   /* original_vocab_size, or -1 */
	const char *file; /* the tp_split file (the first pattern matching decides), or NULL */
} tp_info;

/* tp_info_free(): free what tp_info_read() allocated in ti. */
static void tp_info_free(tp_info *ti)
{
	free(ti->pats);
	free(ti->kind);
}

/*
 * tp_info_read(): the patterns of universal_checkpoint_info in file f (a
 * dict of lists of strings), each compiled; a pattern outside pyre.h's subset
 * is refused.  No universal_checkpoint_info: refused (the split dimension
 * is never guessed).
 */
static gfs_err tp_info_read(const ds_ckpt *c, const ds_file *f, tp_info *ti)
{
	const gfs_pv *uci = gfs_pv_dict_get(f->root, "universal_checkpoint_info");
	size_t n = 0;

	memset(ti, 0, sizeof(*ti));
	ti->vocab = -1;
	if (!uci || uci->kind != GFS_PV_DICT)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: %zu tensor-parallel ranks and no universal_checkpoint_info patterns in %s: which dimension each param is split on is not recorded (refused, not guessed; -o tp_split=FILE gives it)",
				c->tagdir, c->nstages, f->name);
	for (int k = 0; k < TP_NKINDS; k++)
		n += gfs_pv_seq_len(gfs_pv_dict_get(uci, tp_keys[k]));
	ti->pats = gfs_calloc(n ? n : 1, sizeof(*ti->pats));
	ti->kind = gfs_calloc(n ? n : 1, sizeof(*ti->kind));
	if (!ti->pats || !ti->kind)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (int k = 0; k < TP_NKINDS; k++) {
		const gfs_pv *list = gfs_pv_dict_get(uci, tp_keys[k]);

		if (list && list->kind != GFS_PV_LIST && list->kind != GFS_PV_TUPLE)
			return gfs_fail(GFS_ERR_FORMAT, "%s: universal_checkpoint_info %s is not a list",
					f->path, tp_keys[k]);
		for (size_t i = 0; i < gfs_pv_seq_len(list); i++) {
			const char *p = gfs_pv_name(gfs_pv_seq_at(list, i));
			char shown[160];

			if (!p)
				return gfs_fail(GFS_ERR_FORMAT,
						"%s: universal_checkpoint_info %s[%zu] is not a string",
						f->path, tp_keys[k], i);
			if (!gfs_pyre_compile(p, &ti->pats[ti->npats]))
				return gfs_fail(GFS_ERR_UNSUPPORTED,
						"%s: universal_checkpoint_info %s pattern %s uses a regular-expression feature gatherfs does not evaluate (groups, alternation, {m,n}, or an escape other than \\d \\w \\s)",
						f->path, tp_keys[k], printable(p, shown, sizeof(shown)));
			ti->kind[ti->npats++] = k;
		}
	}
	if (gfs_pv_dict_get(uci, "original_vocab_size") &&
	    (!gfs_pv_int(gfs_pv_dict_get(uci, "original_vocab_size"), &ti->vocab) || ti->vocab < 1))
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: universal_checkpoint_info original_vocab_size is not a positive integer",
				f->path);
	return GFS_OK;
}

/*
 * tp_split_read(): the patterns of the tp_split file at path: a JSON object
 * whose members map a pattern (re.match, pyre.h's subset) to 0 or 1 (the
 * dimension the slices are joined on) or "replicated", in file order.
 * Anything else is refused with one line naming the file.
 */
static gfs_err tp_split_read(const char *path, tp_info *ti)
{
	char *text = NULL;
	size_t len = 0, n;
	cJSON *j = NULL;
	const cJSON *it;
	gfs_err err;

	memset(ti, 0, sizeof(*ti));
	ti->vocab = -1;
	ti->file = path;
	err = gfs_read_text(path, TP_SPLIT_MAX_BYTES, &text, &len);
	if (err)
		return gfs_fail_prefix(err, "tp_split");
	err = gfs_json_parse(text, len, path, &j);
	free(text);
	if (err)
		return err;
	n = cJSON_IsObject(j) ? (size_t)cJSON_GetArraySize(j) : 0;
	if (n == 0 || n > TP_SPLIT_MAX_PATS) {
		cJSON_Delete(j);
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: a tp_split file is a JSON object of 1 to %d patterns, each mapped to 0, 1 or \"replicated\"",
				path, TP_SPLIT_MAX_PATS);
	}
	ti->pats = gfs_calloc(n, sizeof(*ti->pats));
	ti->kind = gfs_calloc(n, sizeof(*ti->kind));
	if (!ti->pats || !ti->kind)
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	cJSON_ArrayForEach(it, j) {
		char shown[160];

		if (err)
			break;
		if (!gfs_pyre_compile(it->string, &ti->pats[ti->npats])) {
			err = gfs_fail(GFS_ERR_UNSUPPORTED,
				       "%s: tp_split pattern %s uses a regular-expression feature gatherfs does not evaluate (groups, alternation, {m,n}, or an escape other than \\d \\w \\s)",
				       path, printable(it->string, shown, sizeof(shown)));
		} else if (cJSON_IsString(it) && strcmp(it->valuestring, "replicated") == 0) {
			ti->kind[ti->npats++] = TP_REP;
		} else if (cJSON_IsNumber(it) && (it->valuedouble == 0 || it->valuedouble == 1)) {
			ti->kind[ti->npats++] = it->valuedouble == 1 ? TP_ROW : TP_COL;
		} else {
			err = gfs_fail(GFS_ERR_FORMAT,
				       "%s: tp_split pattern %s: the value is not 0, 1 or \"replicated\"",
				       path, printable(it->string, shown, sizeof(shown)));
		}
	}
	cJSON_Delete(j);
	return err;
}

/*
 * tp_split_classify(): kind of the first pattern of the tp_split file
 * that param name matches; none is refused.
 */
static gfs_err tp_split_classify(const ds_ckpt *c, tp_info *ti, const char *name, int *kind)
{
	for (size_t i = 0; i < ti->npats; i++) {
		const int m = gfs_pyre_match(&ti->pats[i], name);

		if (m < 0)
			return gfs_fail(GFS_ERR_UNSUPPORTED,
					"%s: param %s: matching the tp_split patterns of %s takes too long",
					c->tagdir, name, ti->file);
		if (m) {
			*kind = ti->kind[i];
			return GFS_OK;
		}
	}
	return gfs_fail(GFS_ERR_NOTFOUND,
			"%s: param %s matches no pattern of the tp_split file %s: how its tensor-parallel slices join is not known",
			c->tagdir, name, ti->file);
}

/* tp_matches(): does param name match a pattern of kind k?  -1: too costly to tell. */
static int tp_matches(tp_info *ti, int k, const char *name)
{
	for (size_t i = 0; i < ti->npats; i++) {
		int m;

		if (ti->kind[i] != k)
			continue;
		m = gfs_pyre_match(&ti->pats[i], name);
		if (m)
			return m;
	}
	return 0;
}

/* How a param's tensor-parallel slices make it. */
typedef struct tp_how {
	int dim;        /* concatenated on it; -1 replicated (rank 0's) */
	bool sub2;      /* two sub-params: the first halves (dim 0) of every slice, then the second */
	uint64_t rows;  /* dim 0 of the result: all of it, or original_vocab_size */
} tp_how;

/*
 * tp_classify(): how param name (slice shape ndim, shape) is made, as
 * ds_to_universal.py does: replicated, else averaged or split in
 * sub-params (refused: not a view of the slices, but two sub-params on
 * dim 0), else concatenated on dim 1 (row parallelism) or 0; a vocabulary
 * param cut to original_vocab_size rows.  The full shape in out_shape.
 * A buffer (buffer_names) no pattern matches is refused: the dim 0 rule
 * is ds_to_universal.py's for params, which it applies to no buffer.
 */
static gfs_err tp_classify(const ds_ckpt *c, tp_info *ti, const char *name, uint32_t ndim,
			   const uint64_t *shape, tp_how *how, uint64_t *out_shape)
{
	int m[TP_NKINDS] = { 0 };

	if (ti->file) { /* the first matching pattern decides: one kind, or TP_COL (none) */
		int kind = TP_COL;
		const gfs_err err = tp_split_classify(c, ti, name, &kind);

		if (err)
			return err;
		if (kind != TP_COL)
			m[kind] = 1;
	} else {
		for (int k = 0; k < TP_NKINDS; k++)
			if ((m[k] = tp_matches(ti, k, name)) < 0)
				return gfs_fail(GFS_ERR_UNSUPPORTED,
						"%s: param %s: matching the universal_checkpoint_info %s takes too long",
						c->tagdir, name, tp_keys[k]);
	}
	if (!ti->file && in_list(gfs_pv_dict_get(c->stages[0].model[0].root, "buffer_names"), name)) {
		bool any = false;

		for (int k = 0; k < TP_NKINDS; k++)
			any = any || m[k];
		if (!any)
			return gfs_fail(GFS_ERR_UNSUPPORTED,
					"%s: buffer %s matches no universal_checkpoint_info pattern: whether it is split between the tensor ranks is not recorded (refused, not guessed; -o tp_split=FILE gives it)",
					c->tagdir, name);
	}
	memset(how, 0, sizeof(*how));
	memcpy(out_shape, shape, ndim * sizeof(*shape));
	if (m[TP_REP]) {
		how->dim = -1;
	} else if (m[TP_AVG] || m[TP_SUB]) {
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: param %s matches universal_checkpoint_info %s: made by arithmetic on the slices, not served",
				c->tagdir, name, tp_keys[m[TP_AVG] ? TP_AVG : TP_SUB]);
	} else {
		how->sub2 = m[TP_SUB2] != 0;
		how->dim = !how->sub2 && m[TP_ROW] ? 1 : 0;
		if ((uint32_t)how->dim >= ndim || (how->sub2 && shape[0] % 2 != 0))
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: param %s has %u dimensions (size %llu), it cannot be split as %s says",
					c->tagdir, name, ndim, ndim ? (unsigned long long)shape[0] : 0ull,
					ti->file ? ti->file : "universal_checkpoint_info");
		out_shape[how->dim] *= c->nstages;
	}
	how->rows = ndim ? out_shape[0] : 0;
	if (m[TP_VOCAB] && how->sub2)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: param %s is both a vocabulary param and two sub-params: not supported",
				c->tagdir, name);
	if (m[TP_VOCAB] && ti->vocab >= 0) {
		if (ndim == 0 || (uint64_t)ti->vocab > out_shape[0])
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: vocabulary param %s has fewer rows than original_vocab_size %lld",
					c->tagdir, name, (long long)ti->vocab);
		how->rows = out_shape[0] = (uint64_t)ti->vocab;
	} else if (m[TP_VOCAB]) {
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: param %s matches vocabulary_parameter_patterns, but universal_checkpoint_info has no original_vocab_size",
				c->tagdir, name);
	}
	return GFS_OK;
}

/*
 * tp_emit(): the pieces of entry ti: the slices (fl[y] from element
 * off[y], each of shape ndim/shape) put together as how says.
 */
static gfs_err tp_emit(const ds_ckpt *c, size_t ti, const flat *const *fl, const uint64_t *off,
		       uint32_t ndim, const uint64_t *shape, const tp_how *how)
{
	uint64_t numel = 1, outer = 1, run, keep;
	gfs_err err = GFS_OK;

	for (uint32_t d = 0; d < ndim; d++)
		numel *= shape[d];
	keep = ndim && shape[0] ? numel / shape[0] * how->rows : numel; /* elements of one slice's rows kept */
	if (how->dim < 0) {
		/* served from tensor rank 0; the other ranks' copies are replicas verify compares */
		err = flat_emit(c->l, ti, fl[0], off[0], keep);
		for (size_t y = 1; !err && y < c->nstages; y++)
			err = flat_walk(c->l, ti, fl[y], off[y], keep, true);
		return err;
	}
	if (how->sub2) {
		for (uint64_t h = 0; !err && h < 2; h++)
			for (size_t y = 0; !err && y < c->nstages; y++)
				err = flat_emit(c->l, ti, fl[y], off[y] + h * (numel / 2), numel / 2);
		return err;
	}
	for (uint32_t d = 0; d < (uint32_t)how->dim; d++)
		outer *= shape[d];
	run = outer ? numel / outer : 0;
	if (how->dim == 0) {
		uint64_t left = numel / (shape[0] ? shape[0] : 1) * how->rows;

		for (size_t y = 0; !err && y < c->nstages && left; y++) {
			const uint64_t n = numel < left ? numel : left;

			err = flat_emit(c->l, ti, fl[y], off[y], n);
			left -= n;
		}
		return err;
	}
	/* dim > 0: rows of dim 0 beyond how->rows are cut */
	outer = outer / (shape[0] ? shape[0] : 1) * how->rows;
	for (uint64_t o = 0; !err && o < outer; o++)
		for (size_t y = 0; !err && y < c->nstages; y++)
			err = flat_emit(c->l, ti, fl[y], off[y] + o * run, run);
	return err;
}

/*
 * tp_slices(): the slices of param name (rank 0's `module` entry v0) on
 * every tensor rank: fl[y] from element off[y], of shape ndim/shape, the
 * same on every rank.  A trainable param (in rank 0's param_shapes): each
 * rank's fp32 masters, or with state >= 0 its optimizer state number
 * state (rank 0's numbering, found by name on the others); else each
 * rank's `module` tensor, as a one-piece flat own[y].
 */
static gfs_err tp_slices(ds_ckpt *c, const char *name, int state, const flat **fl, uint64_t *off,
			 flat *own, uint32_t *ndim, uint64_t *shape)
{
	const ds_ckpt *s0 = &c->stages[0];
	const bool train = s0->tmap && tmap_find(s0, name);

	for (size_t y = 0; y < c->nstages; y++) {
		ds_ckpt *s = &c->stages[y];
		const train_param *tp = train && s->tmap ? tmap_find(s, name) : NULL;
		uint64_t sh[GFS_MAX_DIMS], numel;
		uint32_t nd;
		gfs_err err;

		if (train && !tp)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: param %s is in the param_shapes of %s but not of %s: files of two saves",
					s->model[0].path, name, s0->model[0].name, s->model[0].name);
		if (tp) {
			const flat *base = s->group_flats;

			err = shape_from_pv(tp->shape, s->model[0].path, name, &nd, sh, &numel);
			if (!err && state >= 0) {
				size_t k = 0;

				while (k < s->nstates &&
				       strcmp(s->states[k].name, s0->states[state].name) != 0)
					k++;
				if (k == s->nstates || s->states[k].scalar)
					return gfs_fail(GFS_ERR_FORMAT,
							"%s: no optimizer state %s like %s's",
							s->optim[0].path, s0->states[state].name,
							s0->optim[0].name);
				base = s->states[k].flats;
			}
			fl[y] = &base[tp->group];
			off[y] = tp->offset;
		} else {
			tview tv;

			err = tensor_view(c, &s->model[0],
					  gfs_pv_dict_get(gfs_pv_dict_get(s->model[0].root, "module"), name),
					  name, &tv);
			if (!err)
				err = flat_append(&own[y], &tv, tv.numel, s->model[0].path);
			nd = tv.ndim;
			memcpy(sh, tv.shape, sizeof(sh));
			fl[y] = &own[y];
			off[y] = 0;
		}
		if (err)
			return err;
		if (y == 0) {
			*ndim = nd;
			memcpy(shape, sh, nd * sizeof(*sh));
		} else if (nd != *ndim || memcmp(sh, shape, nd * sizeof(*sh)) != 0) {
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: %s has another shape than in %s: slices of unequal size are not supported",
					s->model[0].path, name, s0->model[0].name);
		}
	}
	return GFS_OK;
}

/*
 * tp_entry(): model tensor name (state < 0), or its optimizer state number
 * state of rank 0, put together from the tensor ranks' slices.
 */
static gfs_err tp_entry(ds_ckpt *c, tp_info *ti, const char *name, int state)
{
	const ds_ckpt *s0 = &c->stages[0];
	const flat **fl = gfs_calloc(c->nstages, sizeof(*fl));
	uint64_t *off = gfs_calloc(c->nstages, sizeof(*off));
	flat *own = gfs_calloc(c->nstages, sizeof(*own));
	uint64_t shape[GFS_MAX_DIMS], full[GFS_MAX_DIMS];
	uint32_t ndim = 0;
	tp_how how;
	size_t idx;
	gfs_err err = fl && off && own ? GFS_OK : gfs_fail(GFS_ERR_NOMEM, "out of memory");

	for (size_t y = 0; own && y < c->nstages; y++)
		own[y].dtype = GFS_DT_INVALID;
	if (!err)
		err = tp_slices(c, name, state, fl, off, own, &ndim, shape);
	if (!err)
		err = tp_classify(c, ti, name, ndim, shape, &how, full);
	if (!err && state >= 0)
		err = gfs_layout_add_state(c->l, s0->states[state].name, name,
					   fl[0]->dtype == GFS_DT_INVALID ? GFS_DT_F32 : fl[0]->dtype,
					   ndim, full, &idx);
	else if (!err)
		err = gfs_layout_add_tensor(c->l, name,
					    fl[0]->dtype == GFS_DT_INVALID ? GFS_DT_F32 : fl[0]->dtype,
					    ndim, full, &idx);
	if (!err)
		err = tp_emit(c, idx, fl, off, ndim, shape, &how);
	free(fl);
	free(off);
	flats_free(own, own ? c->nstages : 0);
	return err;
}

/*
 * tp_build(): the layout of a tensor-parallel checkpoint: rank 0's
 * `module` entries in order, each put together from every tensor rank's
 * slice as universal_checkpoint_info says (fp32 masters for trainable
 * params), then the optimizer states of rank 0's param_shapes params.
 */
static gfs_err tp_build(ds_ckpt *c, char **note)
{
	ds_ckpt *s0 = &c->stages[0];
	const gfs_pv *module = gfs_pv_dict_get(s0->model[0].root, "module");
	const char *slash = strrchr(c->tagdir, '/');
	char info[256];
	tp_info ti;
	gfs_err err = c->tp_split ? tp_split_read(c->tp_split, &ti) : tp_info_read(c, &s0->model[0], &ti);

	for (size_t y = 0; !err && y < c->nstages; y++)
		err = anon_note(&c->stages[y], note);
	for (size_t y = 0; !err && y < c->nstages; y++) {
		ds_ckpt *s = &c->stages[y];

		s->l = c->l;
		for (size_t r = 0; !err && r < s->noptim; r++)
			err = gfs_layout_add_metafile(c->l, s->optim[r].path);
		if (!err)
			err = gfs_layout_add_metafile(c->l, s->model[0].path);
		if (!err && s->noptim)
			err = plan_stage12(s);
		if (!err && s->noptim)
			err = tmap_build(s);
		if (!err && s->noptim)
			err = plan_states(s);
	}
	if (!err)
		err = gfs_layout_set_note(c->l, *note);
	if (!err && (!module || module->kind != GFS_PV_DICT))
		err = gfs_fail(GFS_ERR_FORMAT, "%s: no `module` state dict", s0->model[0].path);
	for (size_t i = 0; !err && i < module->u.dict.len; i++) {
		const char *name = gfs_pv_name(module->u.dict.items[i].key);

		err = name ? tp_entry(c, &ti, name, -1)
			   : gfs_pv_name_fail(s0->model[0].path, "module key", i,
					      module->u.dict.items[i].key);
	}
	for (size_t k = 0; !err && k < s0->nstates; k++)
		for (size_t i = 0; !err && i < s0->ntrain; i++) {
			const train_param *tp = &s0->train[i];
			const tview *tv = &s0->states[k].values[tp->group];
			size_t idx;

			if (!s0->states[k].scalar) {
				err = tp_entry(c, &ti, tp->name, (int)k);
				continue;
			}
			err = gfs_layout_add_state(c->l, s0->states[k].name, tp->name, tv->dtype, 0, NULL,
						   &idx);
			if (!err)
				err = gfs_layout_add_piece(c->l, idx, tv->src, tv->off,
							   gfs_dtype_size(tv->dtype));
		}
	tp_info_free(&ti);
	if (!err && s0->noptim) {
		err = build_optim(s0);
		c->l->optim.tp_ranks = (uint32_t)c->nstages;
	}
	if (err)
		return err;
	if (s0->noptim)
		snprintf(info, sizeof(info),
			 "DeepSpeed tensor parallel, %zu tensor ranks, ZeRO-%d%s, %llu data-parallel ranks, tag %s",
			 c->nstages, s0->stage, s0->bf16_optimizer ? " (BF16_Optimizer)" : "",
			 (unsigned long long)s0->ws, slash ? slash + 1 : c->tagdir);
	else
		snprintf(info, sizeof(info), "DeepSpeed tensor parallel, %zu tensor ranks, no ZeRO, tag %s",
			 c->nstages, slash ? slash + 1 : c->tagdir);
	return gfs_layout_set_info(c->l, info);
}

/*
 * mp_one(): a checkpoint with files of model-parallel rank 0 only records
 * mp_world_size 1 (or none): the files of the other ranks are not missing.
 */
static gfs_err mp_one(const ds_ckpt *c)
{
	const ds_file *m0 = &c->model[0];
	int64_t n;

	if (gfs_pv_int(gfs_pv_dict_get(m0->root, "mp_world_size"), &n) && n > 1)
		return gfs_fail(GFS_ERR_NOTFOUND,
				"%s/mp_rank_01_model_states.pt is missing: %s says %lld model-parallel ranks (mp_world_size)",
				c->tagdir, m0->name, (long long)n);
	return GFS_OK;
}

/*
 * not_dense(): refuse what this importer cannot serve: layer files of
 * tensor ranks > 0 (pipeline and tensor parallelism), expert files with
 * more than one model-parallel rank.
 */
static gfs_err not_dense(const char *tagdir, const ds_dir *d)
{
	if (d->expert && (d->nlayers || d->nmp > 1))
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s/%s: a mixture-of-experts checkpoint with pipeline or tensor parallelism: not supported",
				tagdir, d->expert);
	if (d->tp_layer)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s/%s: a layer file of tensor-parallel rank > 0: tensor parallelism is not supported (DeepSpeed does not record which dimension a param is split on)",
				tagdir, d->tp_layer);
	return GFS_OK;
}

gfs_err gfs_import_deepspeed(const char *dir, const char *tag, const char *tp_split,
			     gfs_layout **out)
{
	ds_ckpt c = { .label = dir, .tp_split = tp_split };
	ds_dir d = { 0 };
	char *root = NULL, *note = NULL;
	char info[256];
	bool pipe = false;
	gfs_err err = resolve_tagdir(dir, tag, &c.tagdir, &root, &note);

	if (!err)
		err = list_tagdir(c.tagdir, &d);
	if (!err)
		err = not_dense(c.tagdir, &d);
	if (err)
		goto out;
	pipe = d.nlayers > 0 || d.nmp > 1;
	c.tp = d.nlayers == 0;
	if (tp_split && !(pipe && c.tp)) {
		err = gfs_fail(GFS_ERR_INVAL,
			       "%s: a tp_split applies to a tensor-parallel checkpoint only, not to this %s one",
			       c.tagdir, d.nlayers ? "pipeline" : d.expert ? "mixture-of-experts" : "data-parallel");
		goto out;
	}
	if (pipe) {
		err = pipe_open(&c, &d);
	} else {
		err = d.expert && d.mp[0].count_optim == 0 ? moe_plain_open(&c, &d.mp[0])
							   : open_files(&c, &d.mp[0]);
		if (!err)
			err = mp_one(&c);
		if (!err && d.expert)
			err = moe_open(&c, &d);
		if (!err)
			err = anon_note(&c, &note);
	}
	dir_free(&d);
	gfs_pickle_pool_drain(); /* the ranks' pickles are read: not kept while emitting */
	if (!err)
		err = gfs_layout_new("deepspeed", c.tagdir, &c.l);
	if (!err)
		err = gfs_layout_set_root(c.l, root);
	if (!err && pipe) {
		err = c.tp ? tp_build(&c, &note) : pipe_build(&c, &note);
		goto finish;
	}
	for (size_t r = 0; !err && r < c.noptim; r++)
		err = gfs_layout_add_metafile(c.l, c.optim[r].path);
	for (size_t r = 0; !err && r < c.nmodel; r++)
		err = gfs_layout_add_metafile(c.l, c.model[r].path);
	if (!err)
		err = gfs_layout_set_note(c.l, note);
	if (!err && c.nexperts) {
		err = c.noptim ? moe_build(&c) : moe_build_plain(&c);
		goto finish;
	}
	if (!err)
		err = c.stage == 3 ? plan_stage3(&c) : plan_stage12(&c);
	if (!err)
		err = tmap_build(&c);
	if (!err)
		err = build_entries(&c);
	if (!err)
		err = plan_states(&c);
	if (!err)
		err = emit_states(&c);
	if (!err)
		err = build_optim(&c);
	if (!err) {
		const char *slash = strrchr(c.tagdir, '/');

		snprintf(info, sizeof(info), "DeepSpeed ZeRO-%d%s, %llu ranks, tag %s", c.stage,
			 c.bf16_optimizer ? " (BF16_Optimizer)" : "", (unsigned long long)c.ws,
			 slash ? slash + 1 : c.tagdir);
		err = gfs_layout_set_info(c.l, info);
	}
finish:
	if (!err)
		err = gfs_layout_finish(c.l, c.tagdir);
	if (!err) {
		*out = c.l;
		c.l = NULL;
	}
out:
	dir_free(&d);
	ckpt_free(&c);
	free(root);
	free(note);
	return err;
}
