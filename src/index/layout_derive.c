/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — derived layouts: a new layout over the sources of a finished
 * one whose tensors are byte ranges of the first one's tensors (a QKV
 * split, a vocabulary trim, one layer of a stacked tensor).  Each range
 * becomes clipped copies of the pieces that hold it: no byte is computed.
 */
#include "config.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/index/layout.h"

gfs_err gfs_layout_derive(const gfs_layout *src, const char *format, gfs_layout **out)
{
	gfs_layout *l = NULL;
	gfs_err err;

	assert(src && src->finished && format && out);
	*out = NULL;
	if (src->inputs || src->noptim)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"a layout with computed tensors or optimizer state cannot be re-arranged");
	err = gfs_layout_new(format, src->base_dir, &l);
	if (!err && src->info)
		err = gfs_layout_set_info(l, src->info);
	if (!err && src->note)
		err = gfs_layout_set_note(l, src->note);
	for (size_t i = 0; !err && i < src->nmetafiles; i++)
		err = gfs_layout_add_metafile(l, src->metafiles[i]);
	for (size_t i = 0; !err && i < src->nsources; i++) {
		uint32_t idx;

		err = gfs_layout_add_source(l, src->sources[i].path, src->sources[i].size, &idx);
		assert(err || idx == i);
	}
	for (size_t i = 0; !err && i < src->nrecords; i++)
		err = gfs_layout_add_record(l, &src->records[i], src->records[i].name);
	for (size_t i = 0; !err && i < src->nobjects; i++)
		err = gfs_layout_add_object(l, src->objects[i].name, src->objects[i].src,
					    src->objects[i].src_off, src->objects[i].len);
	for (size_t i = 0; !err && i < src->nomitted; i++)
		err = gfs_layout_add_omitted(l, src->omitted[i].name, src->omitted[i].text);
	for (size_t i = 0; !err && i < src->ntexts; i++)
		err = gfs_layout_add_text(l, src->texts[i].name, src->texts[i].text);
	if (err) {
		gfs_layout_free(l);
		return err;
	}
	*out = l;
	return GFS_OK;
}

/* first_piece(): the first piece of t whose reach passes off (pieces are sorted by toff). */
static size_t first_piece(const gfs_tensor *t, uint64_t off)
{
	size_t lo = 0, hi = t->npieces;

	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;

		if (gfs_tensor_piece(t, mid).reach <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * add_run(): the bytes [a, b) of run k of piece p (inside the run) to
 * tensor ti of dst, where source tensor byte x goes to x + shift.
 */
static gfs_err add_run(gfs_layout *dst, size_t ti, const gfs_piece *p, uint64_t k, uint64_t a,
		       uint64_t b, uint64_t shift)
{
	gfs_piece q = *p;

	q.count = 1;
	q.dst_stride = q.src_stride = 0;
	q.toff = a + shift;
	q.len = b - a;
	q.src_off = p->src_off + k * p->src_stride + (a - (p->toff + k * p->dst_stride));
	return gfs_layout_add_general(dst, ti, &q);
}

/* clip(): the part of piece p inside the source bytes [a, b), shifted by shift. */
static gfs_err clip(gfs_layout *dst, size_t ti, const gfs_piece *p, uint64_t a, uint64_t b,
		    uint64_t shift)
{
	uint64_t k0, k1, f0, f1;
	bool head, tail;
	gfs_err err = GFS_OK;

	if (p->count == 1) {
		const uint64_t s = p->toff > a ? p->toff : a;
		const uint64_t e = p->toff + p->len < b ? p->toff + p->len : b;

		return s < e ? add_run(dst, ti, p, 0, s, e, shift) : GFS_OK;
	}
	k0 = a > p->toff ? (a - p->toff) / p->dst_stride : 0;
	if (k0 < p->count && p->toff + k0 * p->dst_stride + p->len <= a)
		k0++; /* a lies in the gap after run k0 */
	if (k0 >= p->count || p->toff + k0 * p->dst_stride >= b)
		return GFS_OK;
	k1 = (b - 1 - p->toff) / p->dst_stride;
	if (k1 >= p->count)
		k1 = p->count - 1;
	if (k0 == k1) {
		const uint64_t s = p->toff + k0 * p->dst_stride;

		return add_run(dst, ti, p, k0, s > a ? s : a, s + p->len < b ? s + p->len : b,
			       shift);
	}
	/* runs k0 < k1 meet [a, b): only the first may start before a, only the last end after b */
	head = p->toff + k0 * p->dst_stride < a;
	tail = p->toff + k1 * p->dst_stride + p->len > b;
	f0 = head ? k0 + 1 : k0;
	f1 = tail ? k1 : k1 + 1;
	if (head)
		err = add_run(dst, ti, p, k0, a, p->toff + k0 * p->dst_stride + p->len, shift);
	if (!err && f1 > f0) {
		gfs_piece q = *p;

		q.toff = p->toff + f0 * p->dst_stride + shift;
		q.src_off = p->src_off + f0 * p->src_stride;
		q.count = f1 - f0;
		if (q.count == 1)
			q.dst_stride = q.src_stride = 0;
		err = gfs_layout_add_general(dst, ti, &q);
	}
	if (!err && tail)
		err = add_run(dst, ti, p, k1, p->toff + k1 * p->dst_stride, b, shift);
	return err;
}

gfs_err gfs_layout_add_extent(gfs_layout *dst, size_t ti, uint64_t toff, const gfs_layout *src,
			      size_t si, uint64_t off, uint64_t len)
{
	const gfs_tensor *t;
	uint64_t end;

	assert(dst && !dst->finished && src && src->finished && si < src->ntensors);
	t = &src->tensors[si];
	if (t->alias_of >= 0)
		t = &src->tensors[t->alias_of];
	if (t->comp)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: a computed tensor cannot be re-arranged",
				t->name);
	if (!gfs_add_u64(off, len, &end) || end > t->nbytes)
		return gfs_fail(GFS_ERR_INVAL, "%s: bytes [%llu, +%llu) lie outside its %llu bytes",
				t->name, (unsigned long long)off, (unsigned long long)len,
				(unsigned long long)t->nbytes);
	if (toff < off && off - toff > UINT64_MAX / 2)
		return gfs_fail(GFS_ERR_INVAL, "%s: offset out of range", t->name);
	for (size_t i = first_piece(t, off); i < t->npieces && len; i++) {
		const gfs_piece p = gfs_tensor_piece(t, i);
		gfs_err err;

		if (p.toff >= end)
			break;
		/* shift: source tensor byte x lands at x - off + toff (mod 2^64) */
		err = clip(dst, ti, &p, off, end, toff - off);
		if (err)
			return gfs_fail_prefix(err, "%s", t->name);
	}
	return GFS_OK;
}
