/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — virtual files: segment lists and the one read function.
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/server/declcheck.h"
#include "gatherfs/server/vfile.h"

struct gfs_vfile {
	const gfs_vctx *ctx;
	uint64_t size;
	gfs_seg *segs;
	size_t nsegs;
	size_t cap_segs;
	uint8_t *bytes; /* MEM segment store */
	size_t nbytes;
	size_t cap_bytes;
	void *owned;    /* gfs_vfile_own(): freed with the vfile by free_owned */
	void (*free_owned)(void *);
	gfs_vsegs comp; /* computed segments (comp.seg set), instead of segs */
};

gfs_err gfs_vfile_new(const gfs_vctx *ctx, gfs_vfile **out)
{
	gfs_vfile *vf = calloc(1, sizeof(*vf));

	if (!vf)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	vf->ctx = ctx;
	*out = vf;
	return GFS_OK;
}

gfs_err gfs_vfile_new_computed(const gfs_vctx *ctx, const gfs_vsegs *segs, gfs_vfile **out)
{
	gfs_err err;

	assert(segs && segs->seg && segs->find && (segs->n > 0) == (segs->size > 0));
	if (segs->size > INT64_MAX)
		return gfs_fail(GFS_ERR_LIMIT, "virtual file larger than 2^63 bytes");
	err = gfs_vfile_new(ctx, out);
	if (!err) {
		(*out)->comp = *segs;
		(*out)->size = segs->size;
	}
	return err;
}

/* seg_at(): segment i, the stored one or computed into tmp. */
static const gfs_seg *seg_at(const gfs_vfile *vf, size_t i, gfs_seg *tmp)
{
	if (!vf->comp.seg) {
		assert(i < vf->nsegs);
		return &vf->segs[i];
	}
	assert(i < vf->comp.n);
	vf->comp.seg(vf->comp.ctx, i, tmp);
	assert(tmp->len > 0 && tmp->kind != GFS_SEG_MEM);
	return tmp;
}

/* What gfs_vfile_one() builds in a gfs_vfile_buf. */
typedef struct vfile_one {
	gfs_vfile vf;
	gfs_seg seg;
} vfile_one;

_Static_assert(sizeof(vfile_one) <= sizeof(gfs_vfile_buf), "gfs_vfile_buf too small");

gfs_err gfs_vfile_one(const gfs_vctx *ctx, size_t entry, uint64_t len, gfs_vfile_buf *buf,
		      const gfs_vfile **out)
{
	vfile_one *one = (vfile_one *)buf->space;
	gfs_err err;

	assert(ctx && buf && out);
	*one = (vfile_one){ .vf = { .ctx = ctx, .segs = &one->seg, .cap_segs = 1 } };
	err = gfs_vfile_add_tensor(&one->vf, entry, 0, len);
	*out = err ? NULL : &one->vf;
	return err;
}

void gfs_vfile_shrink(gfs_vfile *vf)
{
	if (vf->cap_segs > vf->nsegs && vf->nsegs > 0) {
		gfs_seg *s = gfs_reallocarray(vf->segs, vf->nsegs, sizeof(*s));

		if (s) {
			vf->segs = s;
			vf->cap_segs = vf->nsegs;
		}
	}
	if (vf->cap_bytes > vf->nbytes && vf->nbytes > 0) {
		uint8_t *b = realloc(vf->bytes, vf->nbytes);

		if (b) {
			vf->bytes = b;
			vf->cap_bytes = vf->nbytes;
		}
	}
}

void gfs_vfile_free(gfs_vfile *vf)
{
	if (!vf)
		return;
	if (vf->free_owned)
		vf->free_owned(vf->owned);
	free(vf->segs);
	free(vf->bytes);
	free(vf);
}

void gfs_vfile_own(gfs_vfile *vf, void *p, void (*free_fn)(void *))
{
	assert(vf && !vf->free_owned && free_fn);
	vf->owned = p;
	vf->free_owned = free_fn;
}

gfs_err gfs_vfile_size_add(uint64_t *size, uint64_t len)
{
	uint64_t end;

	if (!gfs_add_u64(*size, len, &end) || end > INT64_MAX)
		return gfs_fail(GFS_ERR_LIMIT, "virtual file larger than 2^63 bytes");
	*size = end;
	return GFS_OK;
}

/* push_seg(): append a segment of len bytes (> 0) of the given kind. */
static gfs_err push_seg(gfs_vfile *vf, gfs_seg_kind kind, uint64_t len,
			gfs_seg **seg)
{
	const uint64_t voff = vf->size;
	gfs_err err;

	assert(len > 0 && !vf->comp.seg);
	/* first room for one segment: most vfiles have one */
	if (!gfs_grow((void **)&vf->segs, &vf->cap_segs, vf->nsegs, sizeof(*vf->segs), 1))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	err = gfs_vfile_size_add(&vf->size, len);
	if (err)
		return err;
	*seg = &vf->segs[vf->nsegs++];
	memset(*seg, 0, sizeof(**seg));
	(*seg)->voff = voff;
	(*seg)->len = len;
	(*seg)->kind = kind;
	return GFS_OK;
}

gfs_err gfs_vfile_add_mem(gfs_vfile *vf, const void *data, size_t len)
{
	gfs_seg *last = vf->nsegs ? &vf->segs[vf->nsegs - 1] : NULL;
	gfs_seg *seg;
	gfs_err err;

	assert(!vf->comp.seg);
	if (len == 0)
		return GFS_OK;
	if (vf->cap_bytes - vf->nbytes < len) {
		size_t cap = vf->cap_bytes ? vf->cap_bytes : 256;
		uint8_t *bytes;

		while (cap - vf->nbytes < len) {
			if (cap > SIZE_MAX / 2)
				return gfs_fail(GFS_ERR_NOMEM, "out of memory");
			cap *= 2;
		}
		bytes = realloc(vf->bytes, cap);
		if (!bytes)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		vf->bytes = bytes;
		vf->cap_bytes = cap;
	}
	if (last && last->kind == GFS_SEG_MEM) {
		/* The last MEM segment always ends at the end of the store. */
		assert(last->u.mem.boff + last->len == vf->nbytes);
		err = gfs_vfile_size_add(&vf->size, len);
		if (err)
			return err;
		last->len += len;
	} else {
		err = push_seg(vf, GFS_SEG_MEM, len, &seg);
		if (err)
			return err;
		seg->u.mem.boff = vf->nbytes;
	}
	memcpy(vf->bytes + vf->nbytes, data, len);
	vf->nbytes += len;
	return GFS_OK;
}

gfs_err gfs_vfile_add_tensor(gfs_vfile *vf, size_t entry, uint64_t off,
			     uint64_t len)
{
	return gfs_vfile_add_tensor_guarded(vf, entry, off, len, NULL, 0);
}

gfs_err gfs_vfile_add_tensor_guarded(gfs_vfile *vf, size_t entry, uint64_t off,
				     uint64_t len, const gfs_vgen *guard, uint64_t arg)
{
	gfs_seg *seg;
	gfs_err err;

	if (len == 0)
		return GFS_OK;
	assert(vf->ctx && entry < gfs_layout_nentries(vf->ctx->layout));
	assert(off + len <= gfs_tensor_out_nbytes(vf->ctx->layout, entry, vf->ctx->want));
	err = push_seg(vf, GFS_SEG_TENSOR, len, &seg);
	if (err)
		return err;
	seg->u.tensor.entry = entry;
	seg->u.tensor.off = off;
	seg->u.tensor.guard = guard;
	seg->u.tensor.guard_arg = arg;
	return GFS_OK;
}

gfs_err gfs_vfile_add_fd(gfs_vfile *vf, int fd, uint64_t off, uint64_t len,
			 const char *label)
{
	gfs_seg *seg;
	gfs_err err;

	if (len == 0)
		return GFS_OK;
	assert(fd >= 0);
	err = push_seg(vf, GFS_SEG_FD, len, &seg);
	if (err)
		return err;
	seg->u.fd.fd = fd;
	seg->u.fd.off = off;
	seg->u.fd.label = label;
	return GFS_OK;
}

gfs_err gfs_vfile_add_gen(gfs_vfile *vf, const gfs_vgen *gen, uint64_t arg,
			  uint64_t len)
{
	gfs_seg *seg;
	gfs_err err;

	if (len == 0)
		return GFS_OK;
	assert(gen && gen->fn);
	err = push_seg(vf, GFS_SEG_GEN, len, &seg);
	if (err)
		return err;
	seg->u.gen.gen = gen;
	seg->u.gen.arg = arg;
	return GFS_OK;
}

gfs_err gfs_vgen_items(const uint64_t *start, size_t n, gfs_vgen_item_fn item, const void *ctx,
		       uint64_t off, uint8_t *buf, size_t len, size_t *filled)
{
	size_t lo = 0, hi = n, done = 0;
	gfs_buf b = { 0 };
	gfs_err err = GFS_OK;

	assert(start && item && filled);
	while (lo < hi) { /* lo: the last of start[0..n] at or before off */
		const size_t mid = lo + (hi - lo + 1) / 2;

		if (start[mid] <= off)
			lo = mid;
		else
			hi = mid - 1;
	}
	for (size_t k = lo; !err && done < len && k < n; k++) {
		size_t skip, take;

		b.len = 0;
		err = item(ctx, k, &b);
		if (!err && b.oom)
			err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		if (err)
			break;
		assert(b.len == start[k + 1] - start[k]);
		skip = (size_t)(off + done - start[k]);
		take = b.len - skip < len - done ? b.len - skip : len - done;
		memcpy(buf + done, b.p + skip, take);
		done += take;
	}
	free(b.p);
	*filled = done;
	return err;
}

uint64_t gfs_vfile_size(const gfs_vfile *vf)
{
	return vf->size;
}

size_t gfs_vfile_nsegs(const gfs_vfile *vf)
{
	return vf->comp.seg ? vf->comp.n : vf->nsegs;
}

void gfs_vfile_seg(const gfs_vfile *vf, size_t i, gfs_seg *out)
{
	*out = *seg_at(vf, i, out);
}

size_t gfs_vfile_find(const gfs_vfile *vf, uint64_t off)
{
	size_t lo = 0, hi = vf->nsegs;

	assert(off < vf->size);
	if (vf->comp.seg) {
		lo = vf->comp.find(vf->comp.ctx, off);
		assert(lo < vf->comp.n);
		return lo;
	}
	while (hi - lo > 1) {
		const size_t mid = lo + (hi - lo) / 2;

		if (vf->segs[mid].voff <= off)
			lo = mid;
		else
			hi = mid;
	}
	assert(vf->segs[lo].voff <= off && off - vf->segs[lo].voff < vf->segs[lo].len);
	return lo;
}

/* read_seg(): bytes [in, in + n) of segment seg into buf. */
static gfs_err read_seg(const gfs_vfile *vf, const gfs_seg *seg, uint64_t in,
			uint8_t *buf, size_t n)
{
	switch (seg->kind) {
	case GFS_SEG_MEM:
		memcpy(buf, vf->bytes + seg->u.mem.boff + in, n);
		return GFS_OK;
	case GFS_SEG_TENSOR: {
		const gfs_vgen *g = seg->u.tensor.guard;
		const gfs_err err = g ? g->fn(g->ctx, seg->u.tensor.guard_arg, 0, NULL, 0) : GFS_OK;

		return err ? err
			   : gfs_tensor_read(vf->ctx->layout, vf->ctx->src, seg->u.tensor.entry,
					     vf->ctx->want, seg->u.tensor.off + in, buf, n);
	}
	case GFS_SEG_FD:
		return gfs_pread_full(seg->u.fd.fd, buf, n, seg->u.fd.off + in,
				      seg->u.fd.label);
	case GFS_SEG_GEN:
		return seg->u.gen.gen->fn(seg->u.gen.gen->ctx, seg->u.gen.arg, in, buf, n);
	}
	assert(!"unknown segment kind");
	return gfs_fail(GFS_ERR_FORMAT, "unknown segment kind %d", (int)seg->kind);
}

/*
 * check_ahead(): segment i, a TENSOR, is being read: the entry of the next
 * TENSOR segment (past headers between them) has its records checked
 * meanwhile (gfs_tensor_check_ahead()).
 */
static void check_ahead(const gfs_vfile *vf, size_t i, const gfs_seg *seg)
{
	enum { LOOK = 4 }; /* segments: a zip's headers and CRC fields between records */
	const size_t n = vf->comp.seg ? vf->comp.n : vf->nsegs;

	for (size_t j = i + 1; j < n && j <= i + LOOK; j++) {
		gfs_seg tmp;
		const gfs_seg *next = seg_at(vf, j, &tmp);

		if (next->kind == GFS_SEG_TENSOR) {
			gfs_tensor_check_ahead(vf->ctx->layout, vf->ctx->src, seg->u.tensor.entry,
					       next->u.tensor.entry);
			return;
		}
	}
}

gfs_err gfs_vfile_read(const gfs_vfile *vf, uint64_t off, void *buf, size_t len,
		       size_t *got)
{
	uint8_t *dst = buf;
	size_t left;
	size_t i;

	*got = 0;
	if (off >= vf->size || len == 0)
		return GFS_OK;
	if (len > vf->size - off)
		len = (size_t)(vf->size - off);
	left = len;
	for (i = gfs_vfile_find(vf, off); left > 0; i++) {
		gfs_seg tmp;
		const gfs_seg *seg = seg_at(vf, i, &tmp);
		const uint64_t in = off - seg->voff;
		const size_t n = seg->len - in < left ? (size_t)(seg->len - in) : left;
		gfs_err err;

		assert(in < seg->len);
		err = read_seg(vf, seg, in, dst, n);
		if (err)
			return err;
		if (seg->kind == GFS_SEG_TENSOR)
			check_ahead(vf, i, seg);
		dst += n;
		off += n;
		left -= n;
	}
	*got = len;
	return GFS_OK;
}

/* Zero bytes for ZERO pieces of mapped reads. */
static const uint8_t zeros[65536];

/* push_ext(): append an extent, or GFS_ERR_LIMIT when *n reached max. */
static gfs_err push_ext(gfs_vext *ext, size_t max, size_t *n, const void *mem,
			int fd, uint64_t off, size_t len)
{
	assert(len > 0);
	if (*n == max)
		return GFS_ERR_LIMIT; /* not an error to report: fall back to copying */
	ext[*n] = (gfs_vext){ .mem = mem, .fd = fd, .off = off, .len = len };
	(*n)++;
	return GFS_OK;
}

/* map_tensor(): extents of bytes [off, off + len) of a TENSOR segment. */
static gfs_err map_tensor(const gfs_vfile *vf, const gfs_seg *seg, uint64_t off,
			  size_t len, gfs_vext *ext, size_t max, size_t *n)
{
	const gfs_layout *l = vf->ctx->layout;
	const gfs_tensor *t = gfs_layout_target(l, seg->u.tensor.entry);
	const gfs_vgen *g = seg->u.tensor.guard;
	uint64_t pos = seg->u.tensor.off + off;
	const uint64_t end = pos + len;

	if (g) {
		const gfs_err err = g->fn(g->ctx, seg->u.tensor.guard_arg, 0, NULL, 0);

		if (err)
			return err;
	}
	if (t->strided || t->comp || gfs_dtype_out(t->dtype, vf->ctx->want) != t->dtype ||
	    !gfs_srcset_entry_servable(vf->ctx->src, seg->u.tensor.entry) ||
	    !gfs_srcset_replicas_servable(vf->ctx->src, (size_t)(t - l->tensors)))
		return GFS_ERR_LIMIT; /* the copy path checks (the declarations and replicas too) */
	while (pos < end) {
		const gfs_piece_span sp = gfs_piece_candidates(t, pos, end);
		const gfs_piece *pc = NULL;
		gfs_piece pcv;
		uint64_t rs = 0, re = 0;
		size_t take;
		gfs_err err;

		for (size_t i = sp.first; i <= sp.last && i < t->npieces; i++) {
			pcv = gfs_tensor_piece(t, i);
			if (gfs_piece_run_at(&pcv, pos, &rs, &re)) {
				pc = &pcv;
				break;
			}
		}
		if (!pc || pc->count != 1)
			return GFS_ERR_LIMIT; /* gfs_vfile_read() reports holes */
		take = (size_t)((re < end ? re : end) - pos);
		if (pc->kind == GFS_PIECE_ZERO) {
			if (take > sizeof(zeros))
				take = sizeof(zeros);
			err = push_ext(ext, max, n, zeros, -1, 0, take);
		} else if (pc->kind == GFS_PIECE_FILE) {
			/* A changed source, a record not checked yet or a
			 * corrupt one: the copy path checks or reports it
			 * (EIO, logged). */
			if (gfs_srcset_check(l, vf->ctx->src, pc->src) != GFS_OK ||
			    (pc->rec != GFS_NO_RECORD &&
			     !gfs_srcset_rec_servable(vf->ctx->src, pc->rec)))
				return GFS_ERR_LIMIT;
			err = push_ext(ext, max, n, NULL, gfs_srcset_fd(vf->ctx->src, pc->src),
				       pc->src_off + (pos - rs), take);
		} else {
			err = GFS_ERR_LIMIT;
		}
		if (err)
			return err;
		pos += take;
	}
	return GFS_OK;
}

gfs_err gfs_vfile_map(const gfs_vfile *vf, uint64_t off, size_t len, gfs_vext *ext,
		      size_t max, uint8_t *scratch, size_t scratch_len, size_t *n,
		      size_t *got)
{
	size_t left;
	size_t used = 0; /* of scratch */

	*n = 0;
	*got = 0;
	if (off >= vf->size || len == 0)
		return GFS_OK;
	if (len > vf->size - off)
		len = (size_t)(vf->size - off);
	left = len;
	for (size_t i = gfs_vfile_find(vf, off); left > 0; i++) {
		gfs_seg tmp;
		const gfs_seg *seg = seg_at(vf, i, &tmp);
		const uint64_t in = off - seg->voff;
		const size_t k = seg->len - in < left ? (size_t)(seg->len - in) : left;
		gfs_err err;

		assert(in < seg->len);
		switch (seg->kind) {
		case GFS_SEG_MEM:
			err = push_ext(ext, max, n, vf->bytes + seg->u.mem.boff + in, -1, 0, k);
			break;
		case GFS_SEG_TENSOR:
			err = map_tensor(vf, seg, in, k, ext, max, n);
			if (!err)
				check_ahead(vf, i, seg);
			break;
		case GFS_SEG_FD:
			err = push_ext(ext, max, n, NULL, seg->u.fd.fd, seg->u.fd.off + in, k);
			break;
		case GFS_SEG_GEN:
			if (scratch_len - used < k)
				return GFS_ERR_LIMIT;
			err = seg->u.gen.gen->fn(seg->u.gen.gen->ctx, seg->u.gen.arg, in,
						 scratch + used, k);
			if (!err)
				err = push_ext(ext, max, n, scratch + used, -1, 0, k);
			used += k;
			break;
		default:
			assert(!"unknown segment kind");
			err = GFS_ERR_LIMIT;
		}
		if (err)
			return err;
		off += k;
		left -= k;
	}
	*got = len;
	return GFS_OK;
}

bool gfs_vfile_cached(const gfs_vfile *vf, uint64_t off, size_t len)
{
	gfs_vext ext[64];
	uint8_t scratch[4096]; /* zip headers between records, CRC fields */
	size_t n = 0, got = 0;

	if (gfs_vfile_map(vf, off, len, ext, sizeof(ext) / sizeof(ext[0]), scratch,
			  sizeof(scratch), &n, &got) != GFS_OK)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!ext[i].mem)
			return gfs_fd_cached(ext[i].fd, ext[i].off);
	return true;
}
