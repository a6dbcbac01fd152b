/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the check of a layout's declarations against the data
 * (declcheck.h).
 */
#include "config.h"

#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/server/declcheck.h"

enum { DC_CHUNK = 1 << 16 };

/* dc_line(): *why = the malloc'd line fmt makes; GFS_OK, or out of memory. */
static gfs_err dc_line(char **why, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static gfs_err dc_line(char **why, const char *fmt, ...)
{
	va_list ap;
	char line[2048];

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	*why = gfs_strdup(line);
	return *why ? GFS_OK : gfs_fail(GFS_ERR_NOMEM, "out of memory");
}

/* dc_replica(): does replica r hold the bytes served at its place?  *why if not. */
static gfs_err dc_replica(const gfs_layout *l, const gfs_srcset *s, const gfs_replica *r,
			  uint8_t *a, uint8_t *b, char **why, uint64_t *bytes)
{
	const gfs_tensor *t = &l->tensors[r->ti];
	gfs_err err = GFS_OK;

	for (uint64_t k = 0; !err && k < r->p.count; k++) {
		const uint64_t toff = r->p.toff + k * r->p.dst_stride;
		const uint64_t soff = r->p.src_off + k * r->p.src_stride;

		err = gfs_srcset_check(l, s, r->p.src);
		for (uint64_t o = 0; !err && o < r->p.len; o += DC_CHUNK) {
			const size_t n = r->p.len - o < DC_CHUNK ? (size_t)(r->p.len - o) : DC_CHUNK;

			err = gfs_tensor_read_raw(l, s, t, toff + o, a, n);
			if (!err)
				err = gfs_pread_full(gfs_srcset_fd(s, r->p.src), b, n, soff + o,
						     l->sources[r->p.src].path);
			if (!err && memcmp(a, b, n) != 0)
				return dc_line(why,
					       "%s is wrong: the copies of %s differ (%s at offset %" PRIu64
					       " holds other bytes than the ones served, tensor bytes [%" PRIu64
					       ", %" PRIu64 "))",
					       l->decls.what, t->name, l->sources[r->p.src].path, soff + o,
					       toff + o, toff + o + n);
			*bytes += n;
		}
	}
	return err;
}

/*
 * dc_cmp(): compare slice y of claim c with slice 0: *same true if
 * byte-identical (stopping at the first difference).
 */
static gfs_err dc_cmp(const gfs_layout *l, const gfs_srcset *s, const gfs_split_claim *c,
		      uint32_t y, uint8_t *a, uint8_t *b, bool *same, uint64_t *bytes)
{
	const gfs_tensor *t = &l->tensors[c->ti];
	gfs_err err = GFS_OK;

	*same = true;
	for (uint64_t k = 0; !err && *same && k < c->count; k++)
		for (uint64_t o = 0; !err && *same && o < c->len; o += DC_CHUNK) {
			const size_t n = c->len - o < DC_CHUNK ? (size_t)(c->len - o) : DC_CHUNK;
			const uint64_t at = k * c->stride + o;

			err = gfs_tensor_read_raw(l, s, t, at, a, n);
			if (!err)
				err = gfs_tensor_read_raw(l, s, t, y * c->step + at, b, n);
			*same = err || memcmp(a, b, n) == 0;
			*bytes += 2 * n;
		}
	return err;
}

/* dc_constant(): are all the elements of slice 0 of claim c equal?  In *konst. */
static gfs_err dc_constant(const gfs_layout *l, const gfs_srcset *s, const gfs_split_claim *c,
			   uint8_t *a, bool *konst, uint64_t *bytes)
{
	const gfs_tensor *t = &l->tensors[c->ti];
	const size_t es = gfs_dtype_size(t->dtype);
	uint8_t first[16];
	gfs_err err = GFS_OK;

	assert(es <= sizeof(first) && DC_CHUNK % es == 0 && c->len % es == 0);
	*konst = true;
	err = gfs_tensor_read_raw(l, s, t, 0, first, es);
	for (uint64_t k = 0; !err && *konst && k < c->count; k++)
		for (uint64_t o = 0; !err && *konst && o < c->len; o += DC_CHUNK) {
			const size_t n = c->len - o < DC_CHUNK ? (size_t)(c->len - o) : DC_CHUNK;

			err = gfs_tensor_read_raw(l, s, t, k * c->stride + o, a, n);
			for (size_t e = 0; !err && *konst && e < n; e += es)
				*konst = memcmp(a + e, first, es) == 0;
			*bytes += n;
		}
	return err;
}

/* dc_split(): does split claim c hold (its slices not identical, or constant)?  *why if not. */
static gfs_err dc_split(const gfs_layout *l, const gfs_srcset *s, const gfs_split_claim *c,
			uint8_t *a, uint8_t *b, char **why, uint64_t *bytes)
{
	bool same = true, konst = false;
	gfs_err err = GFS_OK;

	for (uint32_t y = 1; !err && same && y < c->nparts; y++)
		err = dc_cmp(l, s, c, y, a, b, &same, bytes);
	if (!err && same)
		err = dc_constant(l, s, c, a, &konst, bytes);
	if (err || !same || konst)
		return err;
	return dc_line(why,
		       "%s is wrong: %s is declared split between %" PRIu32
		       " %ss, but %ss 0 to %" PRIu32
		       " hold byte-identical slices that are not constant (a replicated tensor declared split)",
		       l->decls.what, l->tensors[c->ti].name, c->nparts, l->decls.part, l->decls.part,
		       c->nparts - 1);
}

gfs_err gfs_decl_check(const gfs_layout *l, const gfs_srcset *s, char **why, uint64_t *bytes)
{
	uint8_t *a = malloc(DC_CHUNK), *b = malloc(DC_CHUNK);
	uint64_t nb = 0;
	gfs_err err = a && b ? GFS_OK : gfs_fail(GFS_ERR_NOMEM, "out of memory");

	*why = NULL;
	for (size_t i = 0; !err && !*why && l->decls.what && i < l->nreplicas; i++)
		if (gfs_layout_governed(l, l->replicas[i].ti))
			err = dc_replica(l, s, &l->replicas[i], a, b, why, &nb);
	for (size_t i = 0; !err && !*why && i < l->decls.nsplits; i++)
		err = dc_split(l, s, &l->decls.splits[i], a, b, why, &nb);
	free(a);
	free(b);
	if (bytes)
		*bytes = nb;
	return err;
}
