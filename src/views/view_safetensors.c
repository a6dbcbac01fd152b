/* SPDX-License-Identifier: Apache-2.0 */
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
	uint32_t hidx; /* position in the header */
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
 * The file, written when read: its vfile's segments are computed (a GEN
 * segment of the header, then one TENSOR segment per tensor with data, in
 * data order), and the header's tensor entries are written when read: per
 * tensor 24 bytes kept instead of its ~100 bytes of JSON and a stored
 * segment.  The header is the 8-byte length, the opening text pre[], then
 * entry k, ", \"<name>\": {...}", at hoff[k] after the opening text; "}"
 * and the padding follow the last.
 */
typedef struct st_head {
	gfs_vgen gen;
	const gfs_vctx *ctx;
	size_t ni;
	uint32_t *entry;  /* per tensor in header (model) order: its layout entry */
	uint64_t *begin;  /* its data offset (end: begin + its output size) */
	uint64_t *hoff;   /* [ni + 1]: where its text starts; hoff[ni]: the "}" */
	uint32_t *data;   /* [ndata]: the tensors with data, in data order (indices of entry[]) */
	size_t ndata;
	uint8_t *pre;     /* the length and the opening text */
	size_t npre;
	uint64_t len;     /* of the header: npre + hoff[ni] + 1 + padding */
} st_head;

static void head_free(void *p)
{
	st_head *sh = p;

	if (!sh)
		return;
	free(sh->entry);
	free(sh->begin);
	free(sh->hoff);
	free(sh->data);
	free(sh->pre);
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

/* head_gen(): bytes [off, off + len) of the header (a gfs_vgen_fn). */
static gfs_err head_gen(void *ctx, uint64_t arg, uint64_t off, uint8_t *buf, size_t len)
{
	const st_head *sh = ctx;
	size_t done = 0;
	gfs_err err;

	(void)arg;
	assert(off <= sh->len && len <= sh->len - off);
	if (off < sh->npre) {
		done = (size_t)(sh->npre - off) < len ? (size_t)(sh->npre - off) : len;
		memcpy(buf, sh->pre + off, done);
		if (done == len)
			return GFS_OK;
	}
	off = off + done - sh->npre; /* in the entries */
	buf += done;
	len -= done;
	err = gfs_vgen_items(sh->hoff, sh->ni, head_item, sh, off, buf, len, &done);
	for (off += done; !err && done < len; off++, done++) /* "}" then the padding */
		buf[done] = off == sh->hoff[sh->ni] ? '}' : ' ';
	return err;
}

/* head_seg(): segment i of the file (a gfs_vsegs seg function). */
static void head_seg(const void *ctx, size_t i, gfs_seg *out)
{
	const st_head *sh = ctx;
	size_t k;

	if (i == 0) {
		*out = (gfs_seg){ .len = sh->len, .kind = GFS_SEG_GEN, .u.gen = { &sh->gen, 0 } };
		return;
	}
	assert(i <= sh->ndata);
	k = sh->data[i - 1];
	*out = (gfs_seg){
		.voff = sh->len + sh->begin[k],
		.len = gfs_tensor_out_nbytes(sh->ctx->layout, sh->entry[k], sh->ctx->want),
		.kind = GFS_SEG_TENSOR,
		.u.tensor = { .entry = sh->entry[k] },
	};
}

/* head_find(): the segment holding byte off (a gfs_vsegs find function). */
static size_t head_find(const void *ctx, uint64_t off)
{
	const st_head *sh = ctx;
	size_t lo = 0, hi = sh->ndata; /* the tensors starting at or before off: [0, lo) */

	if (off < sh->len)
		return 0;
	off -= sh->len;
	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;

		if (sh->begin[sh->data[mid]] <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	assert(lo > 0);
	return lo;
}

gfs_err gfs_stview_new(const gfs_vctx *ctx, const size_t *entries, size_t n,
		       gfs_vfile **out)
{
	const gfs_layout *l = ctx->layout;
	st_item *items;
	size_t ni = 0;
	sbuf h = { 0 }, b = { 0 };
	uint64_t off = 0, hlen, size;
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
	for (size_t k = 0; k < ni && !err; k++) {
		items[k].begin = off;
		err = gfs_vfile_size_add(&off, gfs_tensor_out_nbytes(l, items[k].entry, ctx->want));
		items[k].end = off;
	}
	qsort(items, ni, sizeof(*items), by_order);

	*sh = (st_head){ .gen = { .fn = head_gen, .ctx = sh }, .ctx = ctx, .ni = ni,
			 .entry = gfs_calloc(ni + 1, sizeof(*sh->entry)),
			 .begin = gfs_calloc(ni + 1, sizeof(*sh->begin)),
			 .hoff = gfs_calloc(ni + 1, sizeof(*sh->hoff)),
			 .data = gfs_calloc(ni + 1, sizeof(*sh->data)) };
	if (!err && (!sh->entry || !sh->begin || !sh->hoff || !sh->data))
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (err)
		goto out;
	for (size_t k = 0; k < ni; k++) {
		sh->entry[k] = (uint32_t)items[k].entry;
		sh->begin[k] = items[k].begin;
		items[k].hidx = (uint32_t)k;
	}
	for (size_t k = 0; k < ni && !b.oom; k++) {
		b.len = 0;
		(void)head_item(sh, k, &b); /* b.oom says */
		sh->hoff[k + 1] = sh->hoff[k] + b.len;
	}
	sb_put(&h, "\0\0\0\0\0\0\0\0", 8); /* the length, set below */
	sb_str(&h, "{\"__metadata__\": {\"format\": \"pt\"");
	aliases_json(l, entries, n, &h);
	sb_str(&h, "}");
	if (h.oom || b.oom) {
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory composing the safetensors header");
		goto out;
	}
	/* the entries, "}" and spaces up to a multiple of 8 */
	hlen = h.len - 8 + sh->hoff[ni] + 1;
	hlen += (8 - hlen % 8) % 8;
	for (int i = 0; i < 8; i++)
		h.p[i] = (uint8_t)(hlen >> (8 * i));
	sh->len = 8 + hlen;
	sh->npre = h.len;
	sh->pre = h.p;
	h.p = NULL;
	qsort(items, ni, sizeof(*items), by_esize_desc);
	for (size_t k = 0; k < ni; k++)
		if (items[k].end > items[k].begin)
			sh->data[sh->ndata++] = items[k].hidx;
	size = sh->len;
	err = gfs_vfile_size_add(&size, off);
	if (err)
		goto out;
	err = gfs_vfile_new_computed(ctx, &(gfs_vsegs){ .seg = head_seg, .find = head_find,
							 .ctx = sh, .n = sh->ndata + 1,
							 .size = size },
				     out);
	if (!err) {
		gfs_vfile_own(*out, sh, head_free);
		sh = NULL;
	}
out:
	head_free(sh);
	free(items);
	free(h.p);
	free(b.p);
	return err;
}
