/*
 * gatherfs — the safetensors view (header JSON written by hand: exact
 * integers, no dependency on a JSON printer's number format).
 */
#include "config.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/views/view_safetensors.h"

/* The header is text built in a gfs_buf. */
typedef gfs_buf sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
	gfs_buf_put(b, s, n);
}

static void sb_str(sbuf *b, const char *s)
{
	sb_put(b, s, strlen(s));
}

static void sb_u64(sbuf *b, uint64_t v)
{
	char tmp[24];

	sb_put(b, tmp, (size_t)snprintf(tmp, sizeof(tmp), "%" PRIu64, v));
}

/* sb_json_str(): s as a JSON string literal (quotes included). */
static void sb_json_str(sbuf *b, const char *s)
{
	sb_put(b, "\"", 1);
	for (; *s; s++) {
		const unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\') {
			const char esc[2] = { '\\', (char)c };

			sb_put(b, esc, 2);
		} else if (c < 0x20) {
			char esc[8];

			snprintf(esc, sizeof(esc), "\\u%04x", c);
			sb_put(b, esc, 6);
		} else {
			sb_put(b, (const char *)&c, 1);
		}
	}
	sb_put(b, "\"", 1);
}

typedef struct st_item {
	size_t entry;
	size_t esize;
	size_t order; /* position in model order, for a stable sort */
	uint64_t begin, end;
} st_item;

static int by_esize_desc(const void *a, const void *b)
{
	const st_item *x = a, *y = b;

	if (x->esize != y->esize)
		return x->esize < y->esize ? 1 : -1;
	return x->order < y->order ? -1 : x->order > y->order;
}

static int by_order(const void *a, const void *b)
{
	const st_item *x = a, *y = b;

	return x->order < y->order ? -1 : x->order > y->order;
}

/* The "gatherfs.aliases" metadata value: a JSON object as a string. */
static void aliases_json(const gfs_layout *l, const size_t *entries, size_t n, sbuf *out)
{
	sbuf obj = { 0 };
	bool first = true;

	sb_str(&obj, "{");
	for (size_t k = 0; k < n; k++) {
		const gfs_tensor *t = &l->tensors[entries ? entries[k] : k];

		if (t->alias_of < 0)
			continue;
		if (!first)
			sb_str(&obj, ", ");
		first = false;
		sb_json_str(&obj, t->name);
		sb_str(&obj, ": ");
		sb_json_str(&obj, l->tensors[t->alias_of].name);
	}
	sb_str(&obj, "}");
	if (obj.oom)
		out->oom = true;
	else if (!first) {
		sb_str(out, ", \"gatherfs.aliases\": ");
		sb_json_str(out, (const char *)obj.p);
	}
	free(obj.p);
}

/*
 * The header's tensor entries, written when read (a GEN segment): per
 * tensor 20 bytes instead of its ~100 bytes of JSON.  Entry k is
 * ", \"<name>\": {...}", at offset hoff[k] of the segment; "}" and the
 * padding follow the last.
 */
typedef struct st_head {
	gfs_vgen gen;
	const gfs_vctx *ctx;
	size_t ni;
	uint32_t *entry;  /* per tensor in header (model) order: its layout entry */
	uint64_t *begin;  /* its data offset (end: begin + its output size) */
	uint64_t *hoff;   /* [ni + 1]: where its text starts; hoff[ni]: the "}" */
	uint64_t len;     /* of the segment: hoff[ni] + 1 + padding */
} st_head;

static void head_free(void *p)
{
	st_head *sh = p;

	if (!sh)
		return;
	free(sh->entry);
	free(sh->begin);
	free(sh->hoff);
	free(sh);
}

/* head_item(): the header text of tensor k appended to b (a gfs_vgen_item_fn). */
static gfs_err head_item(const void *ctx, size_t k, sbuf *b)
{
	const st_head *sh = ctx;
	const gfs_layout *l = sh->ctx->layout;
	const gfs_tensor *t = &l->tensors[sh->entry[k]];

	sb_str(b, ", ");
	sb_json_str(b, t->name);
	sb_str(b, ": {\"dtype\": \"");
	sb_str(b, gfs_dtype_st_name(gfs_dtype_out(t->dtype, sh->ctx->want)));
	sb_str(b, "\", \"shape\": [");
	for (uint32_t d = 0; d < t->ndim; d++) {
		if (d)
			sb_str(b, ", ");
		sb_u64(b, t->shape[d]);
	}
	sb_str(b, "], \"data_offsets\": [");
	sb_u64(b, sh->begin[k]);
	sb_str(b, ", ");
	sb_u64(b, sh->begin[k] + gfs_tensor_out_nbytes(l, sh->entry[k], sh->ctx->want));
	sb_str(b, "]}");
	return b->oom ? gfs_fail(GFS_ERR_NOMEM, "out of memory writing a safetensors header")
		      : GFS_OK;
}

/* head_gen(): bytes [off, off + len) of the tensor entries (a gfs_vgen_fn). */
static gfs_err head_gen(void *ctx, uint64_t arg, uint64_t off, uint8_t *buf, size_t len)
{
	const st_head *sh = ctx;
	size_t done;
	gfs_err err;

	(void)arg;
	assert(off <= sh->len && len <= sh->len - off);
	err = gfs_vgen_items(sh->hoff, sh->ni, head_item, sh, off, buf, len, &done);
	for (off += done; !err && done < len; off++, done++) /* "}" then the padding */
		buf[done] = off == sh->hoff[sh->ni] ? '}' : ' ';
	return err;
}

gfs_err gfs_stview_new(const gfs_vctx *ctx, const size_t *entries, size_t n,
		       gfs_vfile **out)
{
	const gfs_layout *l = ctx->layout;
	st_item *items;
	size_t ni = 0;
	sbuf h = { 0 }, b = { 0 };
	uint64_t off = 0, hlen;
	uint8_t len8[8];
	gfs_vfile *vf = NULL;
	st_head *sh = NULL;
	gfs_err err = GFS_OK;

	assert(l->finished);
	if (!entries)
		n = l->ntensors;
	items = gfs_calloc(n, sizeof(*items));
	sh = calloc(1, sizeof(*sh));
	if (!items || !sh) {
		free(items);
		free(sh);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	for (size_t k = 0; k < n; k++) {
		const size_t e = entries ? entries[k] : k;
		const gfs_tensor *t = &l->tensors[e];

		assert(e < gfs_layout_nentries(l) && e < UINT32_MAX);
		if (t->alias_of >= 0)
			continue;
		items[ni++] = (st_item){
			.entry = e,
			.esize = gfs_dtype_size(gfs_dtype_out(t->dtype, ctx->want)),
			.order = k,
		};
	}
	qsort(items, ni, sizeof(*items), by_esize_desc);
	for (size_t k = 0; k < ni; k++) {
		items[k].begin = off;
		off += gfs_tensor_out_nbytes(l, items[k].entry, ctx->want);
		items[k].end = off;
	}
	qsort(items, ni, sizeof(*items), by_order);

	*sh = (st_head){ .gen = { .fn = head_gen, .ctx = sh }, .ctx = ctx, .ni = ni,
			 .entry = gfs_calloc(ni + 1, sizeof(*sh->entry)),
			 .begin = gfs_calloc(ni + 1, sizeof(*sh->begin)),
			 .hoff = gfs_calloc(ni + 1, sizeof(*sh->hoff)) };
	if (!sh->entry || !sh->begin || !sh->hoff) {
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < ni; k++) {
		sh->entry[k] = (uint32_t)items[k].entry;
		sh->begin[k] = items[k].begin;
	}
	for (size_t k = 0; k < ni && !b.oom; k++) {
		b.len = 0;
		(void)head_item(sh, k, &b); /* b.oom says */
		sh->hoff[k + 1] = sh->hoff[k] + b.len;
	}
	sb_str(&h, "{\"__metadata__\": {\"format\": \"pt\"");
	aliases_json(l, entries, n, &h);
	sb_str(&h, "}");
	if (h.oom || b.oom) {
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory composing the safetensors header");
		goto out;
	}
	/* the entries, "}" and spaces up to a multiple of 8 */
	hlen = h.len + sh->hoff[ni] + 1;
	sh->len = sh->hoff[ni] + 1 + (8 - hlen % 8) % 8;
	hlen += (8 - hlen % 8) % 8;
	for (int i = 0; i < 8; i++)
		len8[i] = (uint8_t)(hlen >> (8 * i));
	err = gfs_vfile_new(ctx, &vf);
	if (!err) {
		const st_head *kept = sh;

		gfs_vfile_own(vf, sh, head_free);
		sh = NULL;
		err = gfs_vfile_add_mem(vf, len8, sizeof(len8));
		if (!err)
			err = gfs_vfile_add_mem(vf, h.p, h.len);
		if (!err)
			err = gfs_vfile_add_gen(vf, &kept->gen, 0, kept->len);
	}
	qsort(items, ni, sizeof(*items), by_esize_desc);
	for (size_t k = 0; !err && k < ni; k++)
		err = gfs_vfile_add_tensor(vf, items[k].entry, 0, items[k].end - items[k].begin);
	if (!err) {
		*out = vf;
		vf = NULL;
	}
out:
	gfs_vfile_free(vf);
	head_free(sh);
	free(items);
	free(h.p);
	free(b.p);
	return err;
}
