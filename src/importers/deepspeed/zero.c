/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — DeepSpeed importer: ZeRO 1/2/3 and BF16_Optimizer partitions
 * (ds_internal.h).
 *
 * Flats (1-D runs of elements over pieces of rank files) and the name ->
 * trainable param map; reading stage and world size from an optimizer
 * states file; planning where each trainable param's fp32 master lies
 * (stage 1/2: one flat per param group split across ranks; stage 3: each
 * param split into ceil(numel / ws) elements per rank); emitting trainable,
 * frozen, buffer and alias entries in rank 0's `module` order; and the
 * torch optimizer's states (per-element flats, scalar steps) and
 * param_groups for the optim/ view; the layout's info line.
 */
#include "config.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_internal.h"

/* ------------------------------------------------------------------ flats */

gfs_err ds_flat_append(flat *fl, const tview *tv, uint64_t nelem, const char *what)
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

gfs_err ds_flat_walk(gfs_layout *l, size_t ti, const flat *fl, uint64_t start, uint64_t n,
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

gfs_err ds_flat_emit(gfs_layout *l, size_t ti, const flat *fl, uint64_t start,
		     uint64_t n)
{
	return ds_flat_walk(l, ti, fl, start, n, false);
}

void ds_flats_free(flat *fl, size_t n)
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

gfs_err ds_tmap_build(ds_ckpt *c)
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

const train_param *ds_tmap_find(const ds_ckpt *c, const char *name)
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

/* ------------------------------------------------------------ stage, ws */

gfs_err ds_read_stage(ds_ckpt *c, const ds_file *f, const gfs_pv *osd, int *stage,
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
				ds_kind_phrase(zs, kind, sizeof(kind)));
	}
	if (value < 1 || value > 3)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: ZeRO stage %lld is not supported",
				f->path, (long long)value);
	*stage = (int)value;
	return GFS_OK;
}

gfs_err ds_read_ws(const ds_file *f, const gfs_pv *osd, uint64_t *ws)
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

const gfs_pv *ds_osd_of(const ds_file *f)
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

	return ds_shape_from_pv(shape, f->path, name, &ndim, dims, numel);
}

/* append_partition(): add tensor list[g] of file f (named list_name) to dst. */
static gfs_err append_partition(ds_ckpt *c, ds_file *f, const gfs_pv *list,
				const char *list_name, size_t g, flat *dst)
{
	char what[96];
	tview tv;
	gfs_err err;

	snprintf(what, sizeof(what), "%s[%zu]", list_name, g);
	err = ds_tensor_view(c, f, gfs_pv_seq_at(list, g), what, &tv);
	return err ? err : ds_flat_append(dst, &tv, tv.numel, f->path);
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

gfs_err ds_plan_stage12(ds_ckpt *c)
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
		const gfs_pv *parts = gfs_pv_dict_get(ds_osd_of(f), "single_partition_of_fp32_groups");

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
			const gfs_pv *gp = gfs_pv_dict_get(ds_osd_of(&c->optim[r]), "group_paddings");
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

gfs_err ds_plan_stage3(ds_ckpt *c)
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
		const gfs_pv *groups = gfs_pv_dict_get(ds_osd_of(f), "fp32_flat_groups");

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
		return ds_flat_emit(c->l, ti, &group_flats[tp->group], tp->offset, numel);
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
		err = ds_flat_emit(c->l, ti, &rank_flats[r], tp->offset, take);
		if (err)
			return err;
	}
	return GFS_OK;
}

gfs_err ds_emit_trainable(ds_ckpt *c, const train_param *tp, const gfs_pv *module_t)
{
	uint64_t shape[GFS_MAX_DIMS], numel;
	uint32_t ndim;
	size_t ti;
	const flat *fl = c->stage == 3 ? &c->rank_flats[0] : &c->group_flats[tp->group];
	gfs_err err = ds_shape_from_pv(tp->shape, c->model[0].path, tp->name, &ndim, shape, &numel);

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

gfs_err ds_emit_view(ds_ckpt *c, const char *name, const tview *tv, uint64_t numel,
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
	gfs_err err = ds_tensor_view(c, &c->model[0], v, name, &tv);

	if (err)
		return err;
	if (c->stage == 3 && !is_buffer && tv.numel == 0 && tv.ndim == 1)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: %s is a ZeRO-3 placeholder, but no optimizer partition or frozen fragment holds its data",
				c->model[0].path, name);
	return ds_emit_view(c, name, &tv, tv.numel, tv.ndim, tv.shape);
}

/*
 * emit_frozen(): frozen param name of shape shape_pv, item k of rank 0's
 * frozen_param_shapes.
 */
static gfs_err emit_frozen(ds_ckpt *c, const char *name, const gfs_pv *shape_pv, size_t k)
{
	uint64_t shape[GFS_MAX_DIMS], numel;
	uint32_t ndim;
	gfs_err err = ds_shape_from_pv(shape_pv, c->model[0].path, name, &ndim, shape, &numel);

	if (err)
		return err;
	if (c->stage == 2) {
		ds_file *f = &c->model[0];
		const gfs_pv *frag = gfs_pv_dict_get(gfs_pv_dict_get(f->root, "frozen_param_fragments"),
						     name);
		tview tv;

		err = ds_tensor_view(c, f, frag, name, &tv);
		if (err)
			return err;
		if (tv.numel < numel)
			return gfs_fail(GFS_ERR_FORMAT, "%s: frozen fragment %s holds %llu of %llu elements",
					f->path, name, (unsigned long long)tv.numel,
					(unsigned long long)numel);
		return ds_emit_view(c, name, &tv, numel, ndim, shape);
	}
	{
		flat fl = { .dtype = GFS_DT_INVALID };
		size_t ti;

		for (uint64_t r = 0; !err && r < c->ws; r++) {
			ds_file *f = &c->model[r];
			tview tv;

			if (r == 0)
				err = ds_tensor_view(c, f, gfs_pv_dict_get(gfs_pv_dict_get(
						f->root, "frozen_param_fragments"), name), name, &tv);
			else
				err = ds_frag_view(c, f, k, &tv);
			if (!err)
				err = ds_flat_append(&fl, &tv, tv.numel, f->path);
		}
		if (!err && fl.total < numel)
			err = gfs_fail(GFS_ERR_FORMAT,
				       "%s: frozen fragments of %s hold %llu of %llu elements",
				       c->tagdir, name, (unsigned long long)fl.total,
				       (unsigned long long)numel);
		if (!err)
			err = gfs_layout_add_tensor(c->l, name, fl.dtype, ndim, shape, &ti);
		if (!err)
			err = ds_flat_emit(c->l, ti, &fl, 0, numel);
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
 * index: ds_frags_read()), or NULL.
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

bool ds_in_list(const gfs_pv *list, const char *name)
{
	for (size_t i = 0; i < gfs_pv_seq_len(list); i++) {
		const char *s = gfs_pv_str(gfs_pv_seq_at(list, i));

		if (s && strcmp(s, name) == 0)
			return true;
	}
	return false;
}

gfs_err ds_build_entries(ds_ckpt *c)
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
		} else if (target && !ds_tmap_find(c, name)) {
			/* a tied alias whose target was saved nowhere (save_checkpoint
			 * with exclude_frozen_parameters, as HF Trainer does for PEFT
			 * models): dropped, as zero_to_fp32 drops it */
			continue;
		} else if ((tp = ds_tmap_find(c, name)) != NULL) {
			err = ds_emit_trainable(c, tp, it->value);
			used++;
		} else if ((fs = fshape_find(c, fshapes, name, &k)) != NULL) {
			err = emit_frozen(c, name, fs, k);
		} else {
			err = emit_module(c, name, it->value, ds_in_list(buffers, name));
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

const gfs_pv *ds_base_state(const ds_ckpt *c, size_t r)
{
	return gfs_pv_dict_get(ds_osd_of(&c->optim[r]),
			       c->stage == 3 ? "optimizer_state_dict" : "base_optimizer_state");
}

const gfs_pv *ds_group_state(const ds_ckpt *c, size_t r, size_t g)
{
	return dict_get_int(gfs_pv_dict_get(ds_base_state(c, r), "state"), (int64_t)g);
}

gfs_err ds_fp32_part(ds_ckpt *c, size_t r, size_t g, tview *tv)
{
	const char *list = c->stage == 3 ? "fp32_flat_groups" : "single_partition_of_fp32_groups";
	char what[96];

	snprintf(what, sizeof(what), "%s[%zu]", list, g);
	return ds_tensor_view(c, &c->optim[r], gfs_pv_seq_at(gfs_pv_dict_get(ds_osd_of(&c->optim[r]), list), g),
			   what, tv);
}

gfs_err ds_plan_states(ds_ckpt *c)
{
	const size_t nflat = c->stage == 3 ? c->nsub : c->ngroups;
	const gfs_pv *st0 = ds_group_state(c, 0, 0);
	gfs_err err;

	if (nflat == 0 || !st0 || st0->kind != GFS_PV_DICT || st0->u.dict.len == 0) {
		for (uint64_t r = 0; r < c->ws; r++)
			for (size_t g = 0; g < nflat; g++) {
				const gfs_pv *st = ds_group_state(c, r, g);

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
			const gfs_pv *st = ds_group_state(c, r, g);
			size_t ntensor = 0;
			uint64_t pad = 0;
			int64_t p;
			tview part;

			if (!st || st->kind != GFS_PV_DICT)
				return gfs_fail(GFS_ERR_FORMAT,
						"%s: no optimizer state for flat group %zu (rank 0 has %s)",
						c->optim[r].path, g, c->states[0].name);
			err = ds_fp32_part(c, (size_t)r, g, &part);
			if (err)
				return err;
			if (c->stage < 3 && !c->bf16_optimizer &&
			    gfs_pv_int(gfs_pv_seq_at(gfs_pv_dict_get(ds_osd_of(&c->optim[r]),
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
				err = ds_tensor_view(c, &c->optim[r], v, what, &tv);
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
				err = ds_flat_append(&s->flats[c->stage == 3 ? (size_t)r : g], &tv, tv.numel,
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

gfs_err ds_emit_states(ds_ckpt *c)
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
			err = ds_shape_from_pv(tp->shape, c->model[0].path, tp->name, &ndim, shape, &numel);

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
	const gfs_pv *pg = gfs_pv_dict_get(ds_base_state(c, 0), "param_groups");
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

gfs_err ds_build_optim(ds_ckpt *c)
{
	gfs_optim *o = &c->l->optim;
	const gfs_pv *zo = gfs_pv_dict_get(gfs_pv_dict_get(c->optim[0].root, "ds_config"),
					   "zero_optimization");
	const char *ver = gfs_pv_name(gfs_pv_dict_get(ds_osd_of(&c->optim[0]), "ds_version"));
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
		const gfs_err err = ds_file_source(c, &c->model[r], &o->model_srcs[r]);

		if (err)
			return err;
		o->nmodel_srcs++;
	}
	return read_param_groups(c, o);
}

/* ------------------------------------------------------------ info line */

gfs_err ds_set_info(const ds_ckpt *c, const char *what, const ds_ckpt *z, const char *ranks)
{
	const char *slash = strrchr(c->tagdir, '/');
	char zero[96] = "no ZeRO", info[256];

	if (z)
		snprintf(zero, sizeof(zero), "ZeRO-%d%s, %llu %s", z->stage,
			 z->bf16_optimizer ? " (BF16_Optimizer)" : "", (unsigned long long)z->ws, ranks);
	snprintf(info, sizeof(info), "DeepSpeed %s%s%s, tag %s", what ? what : "", what ? ", " : "",
		 zero, slash ? slash + 1 : c->tagdir);
	return gfs_layout_set_info(c->l, info);
}
