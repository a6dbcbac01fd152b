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

gfs_err gfs_stview_new(const gfs_vctx *ctx, const size_t *entries, size_t n,
		       gfs_vfile **out)
{
	const gfs_layout *l = ctx->layout;
	st_item *items;
	size_t ni = 0;
	sbuf h = { 0 };
	uint64_t off = 0;
	uint8_t len8[8];
	gfs_vfile *vf = NULL;
	gfs_err err;

	assert(l->finished);
	if (!entries)
		n = l->ntensors;
	items = gfs_calloc(n, sizeof(*items));
	if (!items)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t k = 0; k < n; k++) {
		const size_t e = entries ? entries[k] : k;
		const gfs_tensor *t = &l->tensors[e];

		assert(e < gfs_layout_nentries(l));
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

	sb_str(&h, "{\"__metadata__\": {\"format\": \"pt\"");
	aliases_json(l, entries, n, &h);
	sb_str(&h, "}");
	for (size_t k = 0; k < ni; k++) {
		const gfs_tensor *t = &l->tensors[items[k].entry];

		sb_str(&h, ", ");
		sb_json_str(&h, t->name);
		sb_str(&h, ": {\"dtype\": \"");
		sb_str(&h, gfs_dtype_st_name(gfs_dtype_out(t->dtype, ctx->want)));
		sb_str(&h, "\", \"shape\": [");
		for (uint32_t d = 0; d < t->ndim; d++) {
			if (d)
				sb_str(&h, ", ");
			sb_u64(&h, t->shape[d]);
		}
		sb_str(&h, "], \"data_offsets\": [");
		sb_u64(&h, items[k].begin);
		sb_str(&h, ", ");
		sb_u64(&h, items[k].end);
		sb_str(&h, "]}");
	}
	sb_str(&h, "}");
	while (!h.oom && h.len % 8 != 0)
		sb_str(&h, " ");
	if (h.oom) {
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory composing the safetensors header");
		goto out;
	}
	for (int i = 0; i < 8; i++)
		len8[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
	err = gfs_vfile_new(ctx, &vf);
	if (!err)
		err = gfs_vfile_add_mem(vf, len8, sizeof(len8));
	if (!err)
		err = gfs_vfile_add_mem(vf, h.p, h.len);
	qsort(items, ni, sizeof(*items), by_esize_desc);
	for (size_t k = 0; !err && k < ni; k++)
		err = gfs_vfile_add_tensor(vf, items[k].entry, 0, items[k].end - items[k].begin);
	if (!err) {
		*out = vf;
		vf = NULL;
	}
out:
	gfs_vfile_free(vf);
	free(items);
	free(h.p);
	return err;
}
