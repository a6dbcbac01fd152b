/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — DeepSpeed importer: one rank file (ds_internal.h).
 *
 * Opens a *_model_states.pt / *_optim_states.pt / layer or expert file,
 * checks that its zip folder is its own name, reads its pickle, and turns
 * the tensors it holds into views of their bytes (tview: dtype, shape,
 * source and offset); ZeRO-3 frozen_param_fragments of ranks > 0.
 * Tensor payloads are never read.
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ds_internal.h"

/* ------------------------------------------------------------------ files */

const char *ds_kind_phrase(const gfs_pv *v, char *buf, size_t n)
{
	const char *k = v ? gfs_pv_kind_name(v->kind) : "nothing";

	snprintf(buf, n, "%s%s", !v ? "" : strchr("aeiou", k[0]) ? "an " : "a ", k);
	return buf;
}

const char *ds_printable(const char *s, char *buf, size_t n)
{
	size_t i = 0;

	assert(n > 0);
	for (; s[i] && i + 1 < n; i++)
		buf[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
	buf[i] = '\0';
	return buf;
}

gfs_err ds_name_check(ds_file *f, const char *prefix)
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
			f->path, ds_printable(prefix, shown, sizeof(shown)));
}

gfs_err ds_name_peek(ds_file *f)
{
	char *prefix;
	gfs_err err = gfs_tzip_peek_prefix(f->fd, f->size, f->path, &prefix);

	if (!err && prefix)
		err = ds_name_check(f, prefix);
	free(prefix);
	return err;
}

gfs_err ds_file_stat(ds_file *f, const char *dir, const char *name)
{
	struct stat st;
	gfs_err err;
	const size_t plen = strlen(dir) + 1 + strlen(name) + 1;

	f->fd = -1;
	f->src = -1;
	f->name = gfs_strdup(name);
	f->path = malloc(plen);
	if (!f->name || !f->path)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	snprintf(f->path, plen, "%s/%s", dir, name);
	err = gfs_open_regular(f->path, 0, &f->fd, &st);
	if (err)
		return err;
	f->size = (uint64_t)st.st_size;
	if (f->size == 0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: empty file (0 bytes), not a torch checkpoint",
				f->path);
	return GFS_OK;
}

gfs_err ds_file_read(ds_file *f)
{
	const gfs_tzip_record *rec;
	uint8_t *buf = NULL;
	size_t len = 0;
	char label[4096 + 64];
	gfs_err err = gfs_tzip_open(f->fd, 0, f->size, f->path, NULL, &f->zip);

	if (!err)
		err = ds_name_check(f, gfs_tzip_prefix(f->zip));
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
				f->path, ds_kind_phrase(f->root, label, sizeof(label)));
	return GFS_OK;
}

gfs_err ds_file_open(ds_file *f, const char *dir, const char *name)
{
	const gfs_err err = ds_file_stat(f, dir, name);

	return err ? err : ds_file_read(f);
}

static void frags_free(ds_file *f);

void ds_file_close(ds_file *f)
{
	frags_free(f);
	gfs_pickle_free(f->pk);
	gfs_tzip_close(f->zip);
	if (f->fd >= 0)
		close(f->fd);
	free(f->name);
	free(f->path);
}

void ds_file_release(ds_file *f)
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

bool ds_has_frozen(const ds_file *f)
{
	const gfs_pv *fs = gfs_pv_dict_get(f->root, "frozen_param_shapes");

	return fs && fs->kind == GFS_PV_DICT && fs->u.dict.len > 0;
}

gfs_err ds_file_source(ds_ckpt *c, ds_file *f, uint32_t *src)
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

gfs_err ds_shape_from_pv(const gfs_pv *v, const char *path, const char *what,
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
				v ? ds_kind_phrase(v, kind, sizeof(kind)) : "missing");
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
	err = ds_file_source(c, f, &out->src);
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

gfs_err ds_tensor_view(ds_ckpt *c, ds_file *f, const gfs_pv *v, const char *what,
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

gfs_err ds_frags_read(ds_file *f, const gfs_pv *fshapes)
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
			continue; /* never emitted: ds_build_entries() refuses the name */
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

gfs_err ds_frag_view(ds_ckpt *c, ds_file *f, size_t k, tview *out)
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
