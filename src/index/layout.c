/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the layout index: building, validation and name lookup.
 */
#include "config.h"

#include <assert.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gatherfs/index/layout.h"

/* A tensor name must fit in a path component after escaping, and in zip. */
#define GFS_NAME_MAX 4096

static char *make_absolute(const char *dir)
{
	char cwd[PATH_MAX];
	size_t n;
	char *out;

	if (dir[0] == '/')
		return gfs_strdup(dir);
	if (!getcwd(cwd, sizeof(cwd)))
		return NULL;
	n = strlen(cwd) + 1 + strlen(dir) + 1;
	out = malloc(n);
	if (out)
		snprintf(out, n, "%s/%s", cwd, dir);
	return out;
}

gfs_err gfs_layout_new(const char *format, const char *base_dir, gfs_layout **out)
{
	gfs_layout *l = calloc(1, sizeof(*l));

	if (!l)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	l->format = gfs_strdup(format);
	l->base_dir = make_absolute(base_dir);
	if (!l->format || !l->base_dir) {
		gfs_layout_free(l);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	*out = l;
	return GFS_OK;
}

/* What an entry needs only while the layout is built. */
typedef struct gfs_tbuild {
	gfs_piece *build;   /* its pieces (cap_build of them) */
	size_t cap_build;
	char *alias_target; /* an alias: its target's name */
} gfs_tbuild;

gfs_err gfs_layout_declare(gfs_layout *l, const char *what, const char *part)
{
	assert(l && !l->finished && what && part && !l->decls.what);
	l->decls.what = gfs_strdup(what);
	l->decls.part = gfs_strdup(part);
	if (!l->decls.what || !l->decls.part)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	return GFS_OK;
}

gfs_err gfs_layout_govern(gfs_layout *l, size_t ti, const gfs_split_claim *split)
{
	gfs_decls *d = &l->decls;
	const gfs_tensor *t;

	assert(l && !l->finished && d->what && ti < gfs_layout_nentries(l));
	assert(!d->ngoverned || d->governed[d->ngoverned - 1] < ti);
	t = &l->tensors[ti];
	if (t->alias_of >= 0)
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: an alias cannot follow declarations",
				t->name);
	if (split) {
		const uint64_t es = gfs_dtype_size(t->dtype);
		uint64_t a = 0, b = 0, last = 0;
		const bool fits = split->nparts >= 2 && split->count >= 1 &&
				  gfs_mul_u64(split->nparts - 1, split->step, &a) &&
				  gfs_mul_u64(split->count - 1, split->stride, &b) &&
				  gfs_add_u64(a, b, &last) && gfs_add_u64(last, split->len, &last);

		if (split->ti != ti || !fits || split->len == 0 || split->len % es ||
		    split->step < split->len || (split->count > 1 && split->stride < split->len) ||
		    last > t->nbytes)
			return gfs_fail(GFS_ERR_FORMAT, "tensor %s: a malformed split claim", t->name);
		if (!gfs_grow((void **)&d->splits, &d->cap_splits, d->nsplits, sizeof(*d->splits), 8))
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		d->splits[d->nsplits++] = *split;
	}
	if (!gfs_grow((void **)&d->governed, &d->cap_governed, d->ngoverned, sizeof(*d->governed),
		      8))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	d->governed[d->ngoverned++] = ti;
	return GFS_OK;
}

bool gfs_layout_governed(const gfs_layout *l, size_t i)
{
	const gfs_tensor *t = gfs_layout_target(l, i);
	const size_t ti = (size_t)(t - l->tensors);
	size_t lo = 0, hi = l->decls.ngoverned;

	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;

		if (l->decls.governed[mid] == ti)
			return true;
		if (l->decls.governed[mid] < ti)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

void gfs_layout_free(gfs_layout *l)
{
	if (!l)
		return;
	gfs_arena_free(&l->arena);
	for (size_t i = 0; i < l->ntexts; i++) {
		free(l->texts[i].name);
		free(l->texts[i].text);
	}
	free(l->texts);
	for (size_t i = 0; i < l->nomitted; i++) {
		free(l->omitted[i].name);
		free(l->omitted[i].text);
	}
	free(l->omitted);
	free(l->replicas);
	free(l->decls.what);
	free(l->decls.part);
	free(l->decls.governed);
	free(l->decls.splits);
	for (size_t i = 0; i < l->nsources; i++) {
		free(l->sources[i].path);
		free(l->sources[i].abspath);
	}
	for (size_t i = 0; l->tbuild && i < gfs_layout_nentries(l); i++) {
		free(l->tbuild[i].alias_target);
		free(l->tbuild[i].build);
	}
	free(l->tbuild);
	for (size_t i = 0; i < gfs_layout_nentries(l); i++) {
		free(l->tensors[i].slots);
		free(l->tensors[i].ext);
		free(l->tensors[i].comp);
	}
	gfs_optim_clear(&l->optim);
	gfs_layout_free(l->inputs);
	for (size_t i = 0; i < l->nobjects; i++)
		free(l->objects[i].name);
	free(l->records);
	free(l->rec_piece0);
	free(l->rec_pieces);
	free(l->piece0);
	for (size_t i = 0; i < l->nrflats; i++) {
		free(l->rflats[i]->ranks);
		free(l->rflats[i]);
	}
	free(l->rflats);
	free(l->rec_rf0);
	free(l->rec_rfs);
	free(l->rf_ent0);
	free(l->rf_ents);
	for (size_t i = 0; i < l->nmetafiles; i++)
		free(l->metafiles[i]);
	free(l->metafiles);
	free(l->objects);
	free(l->sources);
	free(l->tensors);
	free(l->hash);
	free(l->format);
	free(l->info);
	free(l->base_dir);
	free(l->note);
	free(l->root_dir);
	free(l);
}

static gfs_err replace_str(char **field, const char *value)
{
	char *copy = NULL;

	if (value) {
		copy = gfs_strdup(value);
		if (!copy)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	free(*field);
	*field = copy;
	return GFS_OK;
}

gfs_err gfs_layout_set_info(gfs_layout *l, const char *info)
{
	assert(!l->finished);
	return replace_str(&l->info, info);
}

gfs_err gfs_layout_set_note(gfs_layout *l, const char *note)
{
	return replace_str(&l->note, note);
}

gfs_err gfs_layout_set_root(gfs_layout *l, const char *root_dir)
{
	char *abs;

	assert(!l->finished);
	if (!root_dir)
		return replace_str(&l->root_dir, NULL);
	abs = make_absolute(root_dir);
	if (!abs)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	free(l->root_dir);
	l->root_dir = abs;
	return GFS_OK;
}

gfs_err gfs_layout_add_metafile(gfs_layout *l, const char *path)
{
	char *abs;

	if (!gfs_grow((void **)&l->metafiles, &l->cap_metafiles, l->nmetafiles,
		      sizeof(*l->metafiles), 4))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	abs = make_absolute(path);
	if (!abs)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	l->metafiles[l->nmetafiles++] = abs;
	return GFS_OK;
}

gfs_err gfs_layout_add_source(gfs_layout *l, const char *path, uint64_t size,
			      uint32_t *idx)
{
	gfs_source *s;

	assert(!l->finished);
	for (size_t i = 0; i < l->nsources; i++) {
		if (strcmp(l->sources[i].path, path) == 0) {
			if (l->sources[i].size != size)
				return gfs_fail(GFS_ERR_FORMAT,
						"source %s listed twice with different sizes", path);
			*idx = (uint32_t)i;
			return GFS_OK;
		}
	}
	if (l->nsources >= GFS_MAX_SOURCES)
		return gfs_fail(GFS_ERR_LIMIT, "too many source files (more than %lu)",
				(unsigned long)GFS_MAX_SOURCES);
	if (!gfs_grow((void **)&l->sources, &l->cap_sources, l->nsources, sizeof(*s), 8))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	s = &l->sources[l->nsources];
	memset(s, 0, sizeof(*s));
	s->path = gfs_strdup(path);
	if (path[0] == '/') {
		s->abspath = gfs_strdup(path);
	} else if (s->path) {
		const size_t n = strlen(l->base_dir) + 1 + strlen(path) + 1;

		s->abspath = malloc(n);
		if (s->abspath)
			snprintf(s->abspath, n, "%s/%s", l->base_dir, path);
	}
	if (!s->path || !s->abspath) {
		free(s->path);
		free(s->abspath);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	s->size = size;
	*idx = (uint32_t)l->nsources++;
	return GFS_OK;
}

static gfs_err check_name(const char *name)
{
	const size_t n = strlen(name);

	if (n == 0)
		return gfs_fail(GFS_ERR_FORMAT, "empty tensor name");
	if (n > GFS_NAME_MAX)
		return gfs_fail(GFS_ERR_LIMIT, "tensor name longer than %d bytes", GFS_NAME_MAX);
	return GFS_OK;
}

/* push_tensor(): a new entry at the end: a model tensor unless state. */
static gfs_tensor *push_tensor(gfs_layout *l, const char *name, const char *state)
{
	const size_t n = gfs_layout_nentries(l);
	gfs_tensor *t;

	if (!gfs_grow((void **)&l->tensors, &l->cap_tensors, n, sizeof(*t), 8) ||
	    !gfs_grow((void **)&l->tbuild, &l->cap_tbuild, n, sizeof(*l->tbuild), 8))
		return NULL;
	l->tbuild[n] = (gfs_tbuild){ 0 };
	t = &l->tensors[n];
	memset(t, 0, sizeof(*t));
	t->name = gfs_arena_strdup(&l->arena, name);
	/* entries of one state come together: they share its name */
	if (state && l->last_state && strcmp(l->last_state, state) == 0)
		t->state = l->last_state;
	else if (state)
		t->state = l->last_state = gfs_arena_strdup(&l->arena, state);
	if (!t->name || (state && !t->state))
		return NULL;
	t->alias_of = -1;
	if (state)
		l->noptim++;
	else
		l->ntensors++;
	return t;
}

/* add_entry(): a model tensor (state NULL) or an optimizer-state entry. */
static gfs_err add_entry(gfs_layout *l, const char *state, const char *name, gfs_dtype dtype,
			 uint32_t ndim, const uint64_t *shape, size_t *idx)
{
	uint64_t numel = 1;
	uint64_t nbytes;
	gfs_tensor *t;
	gfs_err err;

	assert(!l->finished);
	if (!state && l->noptim)
		return gfs_fail(GFS_ERR_INVAL, "tensor %s: model tensors come before optimizer state",
				name);
	if (state && (!*state || strlen(state) > GFS_NAME_MAX))
		return gfs_fail(GFS_ERR_FORMAT, "%s: invalid optimizer state name", name);
	err = check_name(name);
	if (err)
		return err;
	if (gfs_dtype_size(dtype) == 0)
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: invalid dtype", name);
	if (ndim > GFS_MAX_DIMS)
		return gfs_fail(GFS_ERR_LIMIT, "tensor %s: %u dimensions (at most %d)",
				name, ndim, GFS_MAX_DIMS);
	for (uint32_t d = 0; d < ndim; d++)
		if (!gfs_mul_u64(numel, shape[d], &numel))
			return gfs_fail(GFS_ERR_FORMAT, "tensor %s: shape overflows", name);
	if (!gfs_mul_u64(numel, gfs_dtype_size(dtype), &nbytes) || nbytes > INT64_MAX)
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: size overflows", name);
	t = push_tensor(l, name, state);
	if (!t)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	t->shape = gfs_arena_alloc(&l->arena, (ndim ? ndim : 1) * sizeof(shape[0]));
	if (!t->shape) {
		if (state)
			l->noptim--;
		else
			l->ntensors--;
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	t->dtype = dtype;
	t->ndim = ndim;
	if (ndim)
		memcpy(t->shape, shape, ndim * sizeof(shape[0]));
	t->numel = numel;
	t->nbytes = nbytes;
	*idx = gfs_layout_nentries(l) - 1;
	return GFS_OK;
}

gfs_err gfs_layout_add_tensor(gfs_layout *l, const char *name, gfs_dtype dtype,
			      uint32_t ndim, const uint64_t *shape, size_t *idx)
{
	return add_entry(l, NULL, name, dtype, ndim, shape, idx);
}

gfs_err gfs_layout_add_state(gfs_layout *l, const char *state, const char *param,
			     gfs_dtype dtype, uint32_t ndim, const uint64_t *shape,
			     size_t *idx)
{
	assert(state);
	return add_entry(l, state, param, dtype, ndim, shape, idx);
}

void gfs_hval_clear(gfs_hval *v)
{
	for (size_t i = 0; i < v->n; i++)
		gfs_hval_clear(&v->items[i]);
	free(v->items);
	free(v->s);
	memset(v, 0, sizeof(*v));
}

void gfs_optim_clear(gfs_optim *o)
{
	for (size_t g = 0; g < o->ngroups; g++) {
		for (size_t k = 0; k < o->groups[g].n; k++) {
			free(o->groups[g].items[k].key);
			gfs_hval_clear(&o->groups[g].items[k].v);
		}
		free(o->groups[g].items);
	}
	free(o->groups);
	free(o->version);
	free(o->model_srcs);
	memset(o, 0, sizeof(*o));
}

gfs_err gfs_layout_add_alias(gfs_layout *l, const char *name, const char *target)
{
	gfs_tensor *t;
	gfs_err err;

	assert(!l->finished);
	if (l->noptim)
		return gfs_fail(GFS_ERR_INVAL, "alias %s: model tensors come before optimizer state",
				name);
	err = check_name(name);
	if (err)
		return err;
	t = push_tensor(l, name, NULL);
	if (!t)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	l->tbuild[gfs_layout_nentries(l) - 1].alias_target = gfs_strdup(target);
	if (!l->tbuild[gfs_layout_nentries(l) - 1].alias_target)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	t->alias_of = INT64_MAX;
	return GFS_OK;
}

/* resolve_aliases(): turn alias_target names into indices (needs the hash). */
static gfs_err resolve_aliases(gfs_layout *l, const char *label)
{
	for (size_t i = 0; i < l->ntensors; i++) {
		gfs_tensor *t = &l->tensors[i];
		const char *target = l->tbuild[i].alias_target;
		const gfs_tensor *tt;
		int64_t ti;

		if (!target)
			continue;
		ti = gfs_layout_find(l, target);
		if (ti < 0)
			return gfs_fail(GFS_ERR_FORMAT, "%s: alias %s: target %s does not exist",
					label, t->name, target);
		tt = &l->tensors[ti];
		if (l->tbuild[ti].alias_target)
			return gfs_fail(GFS_ERR_FORMAT, "%s: alias %s: target %s is itself an alias",
					label, t->name, target);
		t->dtype = tt->dtype;
		t->ndim = tt->ndim;
		t->shape = tt->shape;
		t->numel = tt->numel;
		t->nbytes = tt->nbytes;
		t->alias_of = ti;
	}
	for (size_t i = 0; i < l->ntensors; i++) {
		free(l->tbuild[i].alias_target);
		l->tbuild[i].alias_target = NULL;
	}
	return GFS_OK;
}

static gfs_err push_piece(gfs_layout *l, size_t ti, gfs_piece_kind kind,
			  uint32_t src, uint64_t src_off, uint64_t len)
{
	gfs_tensor *t;
	gfs_tbuild *b;
	uint64_t toff = 0;
	gfs_piece *last = NULL;

	assert(!l->finished);
	assert(ti < gfs_layout_nentries(l));
	t = &l->tensors[ti];
	b = &l->tbuild[ti];
	if (t->alias_of >= 0)
		return gfs_fail(GFS_ERR_FORMAT, "alias %s cannot have pieces", t->name);
	if (t->rf)
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: partitioned on a flat: no other pieces",
				t->name);
	if (len == 0)
		return GFS_OK;
	if (kind == GFS_PIECE_FILE && src >= l->nsources)
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: piece names source %u of %zu",
				t->name, src, l->nsources);
	if (t->npieces) {
		last = &b->build[t->npieces - 1];
		if (last->count != 1 || last->kind == GFS_PIECE_ZSTD)
			return gfs_fail(GFS_ERR_FORMAT,
					"tensor %s: a piece appended in order after a strided or zstd piece",
					t->name);
		toff = last->toff + last->len;
	}
	if (!gfs_add_u64(toff, len, &toff) || toff > t->nbytes)
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: pieces exceed its %llu bytes",
				t->name, (unsigned long long)t->nbytes);
	toff -= len;
	if (last && last->kind == kind &&
	    (kind == GFS_PIECE_ZERO ||
	     (last->src == src && last->src_off + last->len == src_off))) {
		last->len += len;
		return GFS_OK;
	}
	if (t->npieces >= UINT32_MAX)
		return gfs_fail(GFS_ERR_LIMIT, "tensor %s: more than %lu pieces", t->name,
				(unsigned long)UINT32_MAX);
	if (!gfs_grow((void **)&b->build, &b->cap_build, t->npieces, sizeof(*b->build), 8))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	b->build[t->npieces++] = (gfs_piece){
		.toff = toff, .len = len, .src_off = src_off, .count = 1, .src = src, .kind = kind,
	};
	return GFS_OK;
}

gfs_err gfs_layout_add_piece(gfs_layout *l, size_t ti, uint32_t src,
			     uint64_t src_off, uint64_t len)
{
	return push_piece(l, ti, GFS_PIECE_FILE, src, src_off, len);
}

gfs_err gfs_layout_add_zero(gfs_layout *l, size_t ti, uint64_t len)
{
	return push_piece(l, ti, GFS_PIECE_ZERO, 0, 0, len);
}

gfs_err gfs_layout_add_general(gfs_layout *l, size_t ti, const gfs_piece *p)
{
	gfs_tensor *t;
	gfs_tbuild *b;
	uint64_t span, end, src_span, src_end;

	assert(!l->finished);
	assert(ti < gfs_layout_nentries(l));
	t = &l->tensors[ti];
	b = &l->tbuild[ti];
	if (t->alias_of >= 0)
		return gfs_fail(GFS_ERR_FORMAT, "alias %s cannot have pieces", t->name);
	if (t->rf)
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: partitioned on a flat: no other pieces",
				t->name);
	if (p->kind != GFS_PIECE_FILE && p->kind != GFS_PIECE_ZERO && p->kind != GFS_PIECE_ZSTD)
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: unknown piece kind", t->name);
	if (p->kind != GFS_PIECE_ZERO && p->src >= l->nsources)
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: piece names source %u of %zu",
				t->name, p->src, l->nsources);
	if (p->len == 0 || p->count == 0)
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: empty piece (length or count 0)",
				t->name);
	if (p->count > 1 && (p->dst_stride <= p->len || p->src_stride < p->len))
		return gfs_fail(GFS_ERR_FORMAT,
				"tensor %s: strided piece with strides %llu/%llu not past its %llu-byte runs",
				t->name, (unsigned long long)p->dst_stride,
				(unsigned long long)p->src_stride, (unsigned long long)p->len);
	if (!gfs_mul_u64(p->count - 1, p->dst_stride, &span) || !gfs_add_u64(span, p->len, &span) ||
	    !gfs_add_u64(p->toff, span, &end) || end > t->nbytes)
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: pieces exceed its %llu bytes",
				t->name, (unsigned long long)t->nbytes);
	if (!gfs_mul_u64(p->count - 1, p->src_stride, &src_span) ||
	    !gfs_add_u64(src_span, p->len, &src_span) ||
	    !gfs_add_u64(p->src_off, src_span, &src_end))
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: piece source range overflows", t->name);
	if (p->kind == GFS_PIECE_ZSTD &&
	    (src_end > p->frame_size || !gfs_add_u64(p->frame_off, p->frame_len, &end)))
		return gfs_fail(GFS_ERR_FORMAT,
				"tensor %s: piece reads bytes up to %llu of a zstd frame of %llu bytes",
				t->name, (unsigned long long)src_end,
				(unsigned long long)p->frame_size);
	if (t->npieces >= UINT32_MAX)
		return gfs_fail(GFS_ERR_LIMIT, "tensor %s: more than %lu pieces", t->name,
				(unsigned long)UINT32_MAX);
	if (!gfs_grow((void **)&b->build, &b->cap_build, t->npieces, sizeof(*b->build), 8))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	b->build[t->npieces] = *p;
	if (p->count == 1) {
		b->build[t->npieces].dst_stride = 0;
		b->build[t->npieces].src_stride = 0;
	}
	if (p->kind != GFS_PIECE_ZSTD) {
		b->build[t->npieces].frame_off = 0;
		b->build[t->npieces].frame_len = 0;
		b->build[t->npieces].frame_size = 0;
	}
	if (p->kind == GFS_PIECE_ZERO) {
		b->build[t->npieces].src = 0;
		b->build[t->npieces].src_off = 0;
	}
	b->build[t->npieces].reach = 0;
	t->npieces++;
	return GFS_OK;
}

gfs_err gfs_layout_copy_pieces(gfs_layout *l, size_t ti, const gfs_tensor *t,
			       const uint32_t *remap)
{
	assert(l && t && remap);
	for (size_t p = 0; p < t->npieces; p++) {
		gfs_piece pc = gfs_tensor_piece(t, p);
		gfs_err err;

		if (pc.kind != GFS_PIECE_ZERO)
			pc.src = remap[pc.src];
		err = gfs_layout_add_general(l, ti, &pc);
		if (err)
			return err;
	}
	return GFS_OK;
}

gfs_err gfs_layout_add_rflat(gfs_layout *l, uint32_t nranks, const uint32_t *srcs,
			     const uint64_t *offs, uint64_t nbytes, uint32_t *idx)
{
	gfs_rflat *f;
	uint64_t end;

	assert(!l->finished);
	if (nranks == 0 || l->nrflats >= UINT32_MAX)
		return gfs_fail(GFS_ERR_LIMIT, "a regular flat of %u ranks (the %zu-th)", nranks,
				l->nrflats + 1);
	for (uint32_t k = 0; k < nranks; k++) {
		if (srcs[k] >= l->nsources)
			return gfs_fail(GFS_ERR_FORMAT, "regular flat: rank %u names source %u of %zu",
					k, srcs[k], l->nsources);
		if (k > 0 && srcs[k] == srcs[k - 1])
			return gfs_fail(GFS_ERR_FORMAT,
					"regular flat: ranks %u and %u have the same source", k - 1, k);
		if (!gfs_add_u64(offs[k], nbytes, &end))
			return gfs_fail(GFS_ERR_FORMAT, "regular flat: rank %u's bytes overflow", k);
	}
	if (!gfs_grow((void **)&l->rflats, &l->cap_rflats, l->nrflats, sizeof(*l->rflats), 8))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	f = calloc(1, sizeof(*f));
	if (f)
		f->ranks = gfs_calloc(nranks, sizeof(*f->ranks));
	if (!f || !f->ranks) {
		free(f);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	f->nbytes = nbytes;
	f->nranks = nranks;
	for (uint32_t k = 0; k < nranks; k++)
		f->ranks[k] = (gfs_rflat_rank){ .off = offs[k], .src = srcs[k], .rec = GFS_NO_RECORD };
	*idx = (uint32_t)l->nrflats;
	l->rflats[l->nrflats++] = f;
	return GFS_OK;
}

gfs_err gfs_layout_add_partition(gfs_layout *l, size_t ti, uint32_t f, uint64_t off,
				 uint64_t plen)
{
	gfs_tensor *t;
	uint64_t end, np;

	assert(!l->finished && ti < gfs_layout_nentries(l) && f < l->nrflats);
	t = &l->tensors[ti];
	if (t->alias_of >= 0 || t->comp || t->npieces || t->rf)
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: a partition of a tensor with pieces",
				t->name);
	if (plen == 0 || !gfs_add_u64(off, plen, &end) || end > l->rflats[f]->nbytes)
		return gfs_fail(GFS_ERR_FORMAT,
				"tensor %s: partitions of %llu bytes at %llu outside a flat of %llu",
				t->name, (unsigned long long)plen, (unsigned long long)off,
				(unsigned long long)l->rflats[f]->nbytes);
	np = t->nbytes / plen + (t->nbytes % plen != 0);
	if (np > l->rflats[f]->nranks)
		return gfs_fail(GFS_ERR_FORMAT,
				"tensor %s: %llu bytes need %llu partitions of %llu, the flat has %u ranks",
				t->name, (unsigned long long)t->nbytes, (unsigned long long)np,
				(unsigned long long)plen, l->rflats[f]->nranks);
	if (np == 0)
		return GFS_OK;
	t->rf = l->rflats[f];
	t->rf_off = off;
	t->rf_plen = plen;
	t->npieces = (size_t)np;
	if (np > l->rflats[f]->maxp)
		l->rflats[f]->maxp = (uint32_t)np;
	return GFS_OK;
}

/* push_text(): append the pair (name, text) to *arr of *n. */
static gfs_err push_text(gfs_text **arr, size_t *n, const char *name, const char *text)
{
	gfs_text *a = gfs_reallocarray(*arr, *n + 1, sizeof(*a));

	if (!a)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	*arr = a;
	a[*n].name = gfs_strdup(name);
	a[*n].text = gfs_strdup(text);
	if (!a[*n].name || !a[*n].text) {
		free(a[*n].name);
		free(a[*n].text);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	(*n)++;
	return GFS_OK;
}

gfs_err gfs_layout_add_text(gfs_layout *l, const char *name, const char *text)
{
	assert(l && name && text);
	if (!name[0] || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return gfs_fail(GFS_ERR_INVAL, "'%s': not a plain file name", name);
	for (size_t i = 0; i < l->ntexts; i++)
		if (strcmp(l->texts[i].name, name) == 0)
			return gfs_fail(GFS_ERR_INVAL, "%s: generated twice", name);
	return push_text(&l->texts, &l->ntexts, name, text);
}

gfs_err gfs_layout_add_omitted(gfs_layout *l, const char *name, const char *why)
{
	assert(l && name && why);
	return push_text(&l->omitted, &l->nomitted, name, why);
}

gfs_err gfs_layout_add_replica(gfs_layout *l, size_t ti, const gfs_piece *p)
{
	const gfs_tensor *t;
	uint64_t end, src_end;

	assert(l && !l->finished && p && ti < gfs_layout_nentries(l));
	t = &l->tensors[ti];
	if (t->alias_of >= 0 || p->kind != GFS_PIECE_FILE || p->src >= l->nsources ||
	    p->len == 0 || p->count == 0 ||
	    (p->count > 1 && (p->dst_stride <= p->len || p->src_stride < p->len)))
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: a malformed replica piece", t->name);
	end = p->count > 1 ? p->toff + (p->count - 1) * p->dst_stride + p->len : p->toff + p->len;
	src_end = p->count > 1 ? p->src_off + (p->count - 1) * p->src_stride + p->len
			       : p->src_off + p->len;
	if (end > t->nbytes || end < p->toff || src_end > l->sources[p->src].size ||
	    src_end < p->src_off)
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: a replica piece outside the tensor or %s",
				t->name, l->sources[p->src].path);
	if (!gfs_grow((void **)&l->replicas, &l->nreplicas_cap, l->nreplicas, sizeof(*l->replicas),
		      8))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	l->replicas[l->nreplicas].ti = ti;
	l->replicas[l->nreplicas].p = *p;
	l->replicas[l->nreplicas].on_read = false;
	if (p->count == 1)
		l->replicas[l->nreplicas].p.dst_stride = l->replicas[l->nreplicas].p.src_stride = 0;
	l->nreplicas++;
	return GFS_OK;
}

gfs_err gfs_layout_add_replica_on_read(gfs_layout *l, size_t ti, const gfs_piece *p)
{
	const gfs_err err = gfs_layout_add_replica(l, ti, p);

	if (!err)
		l->replicas[l->nreplicas - 1].on_read = true;
	return err;
}

gfs_err gfs_layout_add_object(gfs_layout *l, const char *name, uint32_t src,
			      uint64_t src_off, uint64_t len)
{
	gfs_object *o;
	gfs_err err;

	assert(!l->finished);
	err = check_name(name);
	if (err)
		return err;
	if (src >= l->nsources)
		return gfs_fail(GFS_ERR_FORMAT, "object %s: names source %u of %zu", name, src,
				l->nsources);
	if (!gfs_grow((void **)&l->objects, &l->cap_objects, l->nobjects, sizeof(*o), 8))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	o = &l->objects[l->nobjects];
	o->name = gfs_strdup(name);
	if (!o->name)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	o->src = src;
	o->src_off = src_off;
	o->len = len;
	l->nobjects++;
	return GFS_OK;
}

/* FNV-1a of the state (if any), a NUL, and the name. */
static uint64_t name_hash(const char *state, const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; state && *state; state++) {
		h ^= (uint8_t)*state;
		h *= 1099511628211ull;
	}
	h *= 1099511628211ull;
	for (; *s; s++) {
		h ^= (uint8_t)*s;
		h *= 1099511628211ull;
	}
	return h;
}

/* same_key(): entry t is (state, name). */
static bool same_key(const gfs_tensor *t, const char *state, const char *name)
{
	if (!t->state != !state || (state && strcmp(t->state, state) != 0))
		return false;
	return strcmp(t->name, name) == 0;
}

static gfs_err build_hash(gfs_layout *l, const char *label)
{
	size_t cap = 16;

	while (cap < gfs_layout_nentries(l) * 2)
		cap *= 2;
	l->hash = malloc(cap * sizeof(*l->hash));
	if (!l->hash)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	memset(l->hash, 0xff, cap * sizeof(*l->hash));
	l->hash_cap = cap;
	for (size_t i = 0; i < gfs_layout_nentries(l); i++) {
		const gfs_tensor *t = &l->tensors[i];
		size_t h = (size_t)name_hash(t->state, t->name) & (cap - 1);

		while (l->hash[h] != UINT32_MAX) {
			if (same_key(&l->tensors[l->hash[h]], t->state, t->name))
				return t->state
					? gfs_fail(GFS_ERR_FORMAT,
						   "%s: optimizer state %s of %s appears twice",
						   label, t->state, t->name)
					: gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s appears twice",
						   label, t->name);
			h = (h + 1) & (cap - 1);
		}
		l->hash[h] = (uint32_t)i;
	}
	return GFS_OK;
}

static int piece_cmp(const void *a, const void *b)
{
	const gfs_piece *x = a, *y = b;

	return x->toff < y->toff ? -1 : x->toff > y->toff;
}

/* sorted_by_toff(): are t's pieces (being built) in toff order already? */
static bool sorted_by_toff(const gfs_tensor *t, const gfs_piece *build)
{
	for (size_t p = 1; p < t->npieces; p++)
		if (build[p].toff < build[p - 1].toff)
			return false;
	return true;
}

/* check_source(): piece pc reads inside its source (FILE) or frame (ZSTD). */
static gfs_err check_source(const gfs_layout *l, const char *label, const gfs_tensor *t,
			    const gfs_piece *pc)
{
	uint64_t off = pc->src_off, end = gfs_piece_src_end(pc);

	if (pc->kind == GFS_PIECE_ZERO)
		return GFS_OK;
	if (pc->kind == GFS_PIECE_ZSTD) {
		off = pc->frame_off;
		end = pc->frame_off + pc->frame_len;
	}
	if (end > l->sources[pc->src].size)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: tensor %s: bytes %llu..%llu of %s lie past its end (%llu bytes)",
				label, t->name, (unsigned long long)off, (unsigned long long)end,
				l->sources[pc->src].path,
				(unsigned long long)l->sources[pc->src].size);
	return GFS_OK;
}

/*
 * check_contiguous(): pieces all of count 1, sorted by toff: they must follow
 * each other from 0 to nbytes.
 */
static gfs_err check_contiguous(const char *label, const gfs_tensor *t,
				const gfs_piece *build)
{
	uint64_t covered = 0;

	for (size_t p = 0; p < t->npieces; p++) {
		const gfs_piece *pc = &build[p];

		if (pc->toff > covered)
			break;
		if (pc->toff < covered)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: tensor %s: pieces overlap at byte %llu",
					label, t->name, (unsigned long long)pc->toff);
		covered += pc->len;
	}
	if (covered != t->nbytes)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: tensor %s: pieces cover %llu of its %llu bytes",
				label, t->name, (unsigned long long)covered,
				(unsigned long long)t->nbytes);
	return GFS_OK;
}

/*
 * span_of(): gfs_piece_candidates() over n pieces pcs sorted by toff with
 * their reach set.
 */
static gfs_piece_span span_of(const gfs_piece *pcs, size_t n, uint64_t off, uint64_t end)
{
	size_t lo = 0, hi = n;
	gfs_piece_span sp;

	/* first piece whose reach passes off (reach is non-decreasing) */
	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;

		if (pcs[mid].reach > off)
			hi = mid;
		else
			lo = mid + 1;
	}
	sp.first = lo;
	/* one past the last piece starting before end (toff is non-decreasing) */
	hi = n;
	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;

		if (pcs[mid].toff < end)
			lo = mid + 1;
		else
			hi = mid;
	}
	sp.last = lo;
	return sp;
}

/*
 * check_strided(): walk the runs of a tensor with strided pieces in tensor
 * order: at every position exactly one run starts or continues, and no other
 * run starts before it ends.  *budget counts down the runs walked.
 */
static gfs_err check_strided(const char *label, const gfs_tensor *t, const gfs_piece *build,
			     uint64_t *budget)
{
	uint64_t pos = 0;

	while (pos < t->nbytes) {
		gfs_piece_span sp = span_of(build, t->npieces, pos, pos + 1);
		uint64_t run_end = 0;
		size_t owner = SIZE_MAX;

		if (*budget == 0)
			return gfs_fail(GFS_ERR_LIMIT, "%s: more than %llu strided runs to check",
					label, (unsigned long long)GFS_MAX_RUNS);
		(*budget)--;
		for (size_t i = sp.first; i < sp.last; i++) {
			uint64_t start, end;

			if (!gfs_piece_run_at(&build[i], pos, &start, &end))
				continue;
			if (start != pos || owner != SIZE_MAX)
				return gfs_fail(GFS_ERR_FORMAT,
						"%s: tensor %s: pieces overlap at byte %llu",
						label, t->name, (unsigned long long)pos);
			owner = i;
			run_end = end;
		}
		if (owner == SIZE_MAX)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: tensor %s: pieces leave a gap at byte %llu of its %llu bytes",
					label, t->name, (unsigned long long)pos,
					(unsigned long long)t->nbytes);
		sp = span_of(build, t->npieces, pos, run_end);
		for (size_t i = sp.first; i < sp.last; i++) {
			uint64_t start, end;

			if (i != owner && gfs_piece_next_run(&build[i], pos, &start, &end) &&
			    start < run_end)
				return gfs_fail(GFS_ERR_FORMAT,
						"%s: tensor %s: pieces overlap at byte %llu",
						label, t->name, (unsigned long long)start);
		}
		pos = run_end;
	}
	return GFS_OK;
}

/*
 * tiles_regularly(): do t's pieces (sorted by toff) tile it as consecutive
 * blocks, proven by arithmetic, without walking runs?  A block is either a
 * contiguous piece starting where the previous block ends, or pieces of the
 * same count C and dst_stride S whose first runs lie end to end from the
 * block's start B to B + S: run k of each is then its first run moved by
 * k * S, so together they cover [B, B + C * S) once.  This is how tensor
 * parallelism splits a matrix by columns (a Megatron row-parallel weight:
 * thousands of rows, a few pieces).  false means "not shown", not "bad":
 * the caller then walks the runs, which gives the precise error.
 */
static bool tiles_regularly(const gfs_tensor *t, const gfs_piece *build)
{
	uint64_t pos = 0;
	size_t p = 0;

	while (p < t->npieces) {
		const gfs_piece *first = &build[p];
		uint64_t period_end, at, block_end;

		if (first->toff != pos || first->len == 0)
			return false;
		if (first->count <= 1) {
			pos += first->len;
			p++;
			continue;
		}
		if (!gfs_add_u64(pos, first->dst_stride, &period_end) ||
		    !gfs_mul_u64(first->count, first->dst_stride, &block_end) ||
		    !gfs_add_u64(pos, block_end, &block_end))
			return false;
		at = pos;
		while (p < t->npieces && at < period_end) {
			const gfs_piece *pc = &build[p];

			if (pc->toff != at || pc->len == 0 || pc->count != first->count ||
			    pc->dst_stride != first->dst_stride)
				return false;
			at += pc->len;
			p++;
		}
		if (at != period_end)
			return false;
		pos = block_end;
	}
	return pos == t->nbytes;
}

gfs_err gfs_layout_add_record(gfs_layout *l, const gfs_record *r, const char *name)
{
	gfs_record *dst;

	assert(!l->finished && r->src < l->nsources && name);
	assert(r->kind == GFS_PIECE_FILE || r->kind == GFS_PIECE_ZSTD);
	if (l->nrecords >= UINT32_MAX - 1)
		return gfs_fail(GFS_ERR_LIMIT, "too many checksummed records");
	if (!gfs_grow((void **)&l->records, &l->cap_records, l->nrecords, sizeof(*l->records),
		      16))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	dst = &l->records[l->nrecords];
	*dst = *r;
	if (!l->last_rec_name || strcmp(l->last_rec_name, name) != 0)
		l->last_rec_name = gfs_arena_strdup(&l->arena, name);
	dst->name = l->last_rec_name;
	if (!dst->name)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	l->lazy_records |= r->lazy;
	l->nrecords++;
	return GFS_OK;
}

const char *gfs_record_name(const gfs_record *r, char *buf, size_t n)
{
	assert(n > 0);
	if (r->item)
		snprintf(buf, n, "%s of the item at offset %llu", r->name,
			 (unsigned long long)(r->item - 1));
	else
		snprintf(buf, n, "%s", r->name);
	return buf;
}

/* rec_key_cmp(): order of records by (src, kind, frame_off, off). */
static int rec_key_cmp(uint32_t src, gfs_piece_kind kind, uint64_t frame_off, uint64_t off,
		       const gfs_record *r)
{
	if (src != r->src)
		return src < r->src ? -1 : 1;
	if (kind != r->kind)
		return kind < r->kind ? -1 : 1;
	if (frame_off != r->frame_off)
		return frame_off < r->frame_off ? -1 : 1;
	return off < r->off ? -1 : off > r->off;
}

static int record_cmp(const void *a, const void *b)
{
	const gfs_record *x = a, *y = b;
	const int c = rec_key_cmp(x->src, x->kind, x->frame_off, x->off, y);

	return c ? c : x->len < y->len ? -1 : x->len > y->len;
}

/*
 * piece_record(): the record holding every source byte of pc, or
 * GFS_NO_RECORD.  *hint is a record index to try first (or
 * GFS_NO_RECORD), set to the last record whose key is <= the piece's
 * start: the pieces of consecutive tensors often share records (one per
 * rank and flat group), found then in O(1).
 */
static uint32_t piece_record(const gfs_layout *l, const gfs_piece *pc, uint32_t *hint)
{
	const uint64_t fo = pc->kind == GFS_PIECE_ZSTD ? pc->frame_off : 0;
	size_t lo = 0, hi = l->nrecords;
	const gfs_record *r;

	if (pc->kind == GFS_PIECE_ZERO)
		return GFS_NO_RECORD;
	/* the hint's record, or the one after it (the next tensor's piece from one source) */
	for (size_t h = *hint; h < l->nrecords && h <= (size_t)*hint + 1 && lo < hi; h++) {
		if (rec_key_cmp(pc->src, pc->kind, fo, pc->src_off, &l->records[h]) < 0)
			break;
		if (h + 1 == l->nrecords ||
		    rec_key_cmp(pc->src, pc->kind, fo, pc->src_off, &l->records[h + 1]) < 0)
			lo = hi = h + 1;
	}
	/* the last record whose key is <= the piece's start */
	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;

		if (rec_key_cmp(pc->src, pc->kind, fo, pc->src_off, &l->records[mid]) < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	if (lo == 0)
		return GFS_NO_RECORD;
	*hint = (uint32_t)(lo - 1);
	r = &l->records[lo - 1];
	if (r->src != pc->src || r->kind != pc->kind || r->frame_off != fo ||
	    gfs_piece_src_end(pc) > r->off + r->len)
		return GFS_NO_RECORD;
	return (uint32_t)(lo - 1);
}

/* rflat_index(): the index of l's regular flat f (a linear search: flats are few). */
static uint32_t rflat_index(const gfs_layout *l, const gfs_rflat *f)
{
	size_t i = 0;

	while (l->rflats[i] != f)
		i++;
	assert(i < l->nrflats);
	return (uint32_t)i;
}

/*
 * index_rflats(): l->rf_ent0 and l->rf_ents (the entries on each regular
 * flat), l->rec_rf0 and l->rec_rfs (the flat ranks of each record).
 */
static gfs_err index_rflats(gfs_layout *l)
{
	size_t *at, n = 0;
	uint32_t *flat_of;
	const size_t ne = gfs_layout_nentries(l);

	l->rf_ent0 = gfs_calloc(l->nrflats + 1, sizeof(*l->rf_ent0));
	l->rec_rf0 = gfs_calloc(l->nrecords + 1, sizeof(*l->rec_rf0));
	flat_of = gfs_calloc(ne ? ne : 1, sizeof(*flat_of));
	at = gfs_calloc((l->nrflats > l->nrecords ? l->nrflats : l->nrecords) + 1, sizeof(*at));
	if (!l->rf_ent0 || !l->rec_rf0 || !flat_of || !at)
		goto nomem;
	for (size_t i = 0, last = 0; i < ne; i++) {
		const gfs_rflat *f = l->tensors[i].rf;

		if (!f)
			continue;
		if (l->rflats[last] != f)
			last = rflat_index(l, f);
		flat_of[i] = (uint32_t)last;
		l->rf_ent0[last + 1]++;
	}
	for (size_t f = 0; f < l->nrflats; f++)
		l->rf_ent0[f + 1] += l->rf_ent0[f];
	l->rf_ents = gfs_calloc(l->rf_ent0[l->nrflats] ? l->rf_ent0[l->nrflats] : 1,
				sizeof(*l->rf_ents));
	if (!l->rf_ents)
		goto nomem;
	for (size_t i = 0; i < ne; i++)
		if (l->tensors[i].rf)
			l->rf_ents[l->rf_ent0[flat_of[i]] + at[flat_of[i]]++] = (uint32_t)i;
	for (size_t f = 0; f < l->nrflats; f++)
		for (uint32_t k = 0; k < l->rflats[f]->nranks; k++)
			if (l->rflats[f]->ranks[k].rec != GFS_NO_RECORD) {
				l->rec_rf0[l->rflats[f]->ranks[k].rec + 1]++;
				n++;
			}
	for (size_t r = 0; r < l->nrecords; r++)
		l->rec_rf0[r + 1] += l->rec_rf0[r];
	l->rec_rfs = gfs_calloc(n ? n : 1, sizeof(*l->rec_rfs));
	if (!l->rec_rfs)
		goto nomem;
	memset(at, 0, ((l->nrflats > l->nrecords ? l->nrflats : l->nrecords) + 1) * sizeof(*at));
	for (size_t f = 0; f < l->nrflats; f++)
		for (uint32_t k = 0; k < l->rflats[f]->nranks; k++) {
			const uint32_t r = l->rflats[f]->ranks[k].rec;

			if (r != GFS_NO_RECORD)
				l->rec_rfs[l->rec_rf0[r] + at[r]++] =
					(gfs_rflat_ref){ .flat = (uint32_t)f, .rank = k };
		}
	free(at);
	free(flat_of);
	return GFS_OK;
nomem:
	free(at);
	free(flat_of);
	return gfs_fail(GFS_ERR_NOMEM, "out of memory");
}

/* index_record_pieces(): l->rec_piece0 and l->rec_pieces, by counting. */
static gfs_err index_record_pieces(gfs_layout *l)
{
	size_t *at;
	size_t n = 0;

	l->rec_piece0 = gfs_calloc(l->nrecords + 1, sizeof(*l->rec_piece0));
	l->piece0 = gfs_calloc(gfs_layout_nentries(l) + 1, sizeof(*l->piece0));
	if (!l->rec_piece0 || !l->piece0)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < gfs_layout_nentries(l); i++) {
		l->piece0[i + 1] = l->piece0[i] + l->tensors[i].npieces;
		if (l->piece0[i + 1] > UINT32_MAX)
			return gfs_fail(GFS_ERR_LIMIT, "more than %lu pieces in all",
					(unsigned long)UINT32_MAX);
	}
	for (size_t i = 0; i < gfs_layout_nentries(l); i++)
		for (size_t p = 0; !l->tensors[i].rf && p < l->tensors[i].npieces; p++)
			if (l->tensors[i].slots[p].rec != GFS_NO_RECORD)
				l->rec_piece0[l->tensors[i].slots[p].rec + 1]++;
	for (size_t r = 0; r < l->nrecords; r++)
		l->rec_piece0[r + 1] += l->rec_piece0[r];
	n = l->rec_piece0[l->nrecords];
	l->rec_pieces = gfs_calloc(n ? n : 1, sizeof(*l->rec_pieces));
	at = gfs_calloc(l->nrecords ? l->nrecords : 1, sizeof(*at));
	if (!l->rec_pieces || !at) {
		free(at);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	for (size_t i = 0; i < gfs_layout_nentries(l); i++) {
		for (size_t p = 0; !l->tensors[i].rf && p < l->tensors[i].npieces; p++) {
			const uint32_t r = l->tensors[i].slots[p].rec;

			/* piece0[] is bounded by UINT32_MAX */
			if (r != GFS_NO_RECORD)
				l->rec_pieces[l->rec_piece0[r] + at[r]++] = (uint32_t)(l->piece0[i] + p);
		}
	}
	free(at);
	return index_rflats(l);
}

/*
 * assign_records(): give every piece of tl's entries (tl is l, or l's inputs
 * table, whose sources are l's) its record of l, and mark it in used.
 */
static gfs_err assign_records(const gfs_layout *l, gfs_layout *tl, uint32_t *used)
{
	/* per source: the record the previous piece from it was looked up at */
	uint32_t *hint = malloc((l->nsources ? l->nsources : 1) * sizeof(*hint));

	if (!hint)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t k = 0; k < l->nsources; k++)
		hint[k] = GFS_NO_RECORD;
	for (size_t i = 0; i < gfs_layout_nentries(tl); i++) {
		gfs_tensor *t = &tl->tensors[i];

		for (size_t p = 0; !t->rf && p < t->npieces; p++) {
			const gfs_piece pc = gfs_tensor_piece(t, p);

			assert(pc.kind == GFS_PIECE_ZERO || pc.src < l->nsources);
			t->slots[p].rec = piece_record(l, &pc, &hint[pc.src]);
			if (t->slots[p].rec != GFS_NO_RECORD)
				used[t->slots[p].rec] = 1;
		}
	}
	free(hint);
	return GFS_OK;
}

/*
 * assign_rflat_records(): give every rank of l's regular flats that some
 * tensor has a piece on the record holding all its bytes (a piece inside
 * them is inside it), and mark it in used.
 */
static void assign_rflat_records(gfs_layout *l, uint32_t *used)
{
	uint32_t hint = GFS_NO_RECORD;

	for (size_t i = 0; i < l->nrflats; i++) {
		gfs_rflat *f = l->rflats[i];

		for (uint32_t k = 0; k < f->maxp; k++) {
			const gfs_piece pc = { .len = f->nbytes, .src_off = f->ranks[k].off, .count = 1,
					       .src = f->ranks[k].src, .kind = GFS_PIECE_FILE };

			f->ranks[k].rec = piece_record(l, &pc, &hint);
			if (f->ranks[k].rec != GFS_NO_RECORD)
				used[f->ranks[k].rec] = 1;
		}
	}
}

/* remap_records(): renumber the records of tl's pieces through remap. */
static void remap_records(gfs_layout *tl, const uint32_t *remap)
{
	for (size_t i = 0; i < gfs_layout_nentries(tl); i++) {
		gfs_tensor *t = &tl->tensors[i];

		for (size_t p = 0; !t->rf && p < t->npieces; p++)
			if (t->slots[p].rec != GFS_NO_RECORD)
				t->slots[p].rec = remap[t->slots[p].rec];
	}
}

/*
 * sort_records(): l->records in record_cmp() order.  A counting sort by
 * source (through a permutation: no second copy of the records), then each
 * source's run sorted on its own unless it is already in order, as the
 * importers mostly add a file's records.  O(records) then.
 */
#define SORT_AHEAD 16 /* sort_records(): records a cycle's moves prefetch ahead */

static gfs_err sort_records(gfs_layout *l)
{
	const size_t n = l->nrecords;
	uint32_t *perm = gfs_calloc(n ? n : 1, sizeof(*perm));
	size_t *at = gfs_calloc(l->nsources + 1, sizeof(*at));

	if (!perm || !at) {
		free(perm);
		free(at);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	for (size_t i = 0; i < n; i++)
		at[l->records[i].src + 1]++;
	for (size_t k = 0; k < l->nsources; k++)
		at[k + 1] += at[k];
	for (size_t i = 0; i < n; i++) /* perm[k]: the record that goes to k; n < UINT32_MAX */
		perm[at[l->records[i].src]++] = (uint32_t)i;
	for (size_t k = 0; k < n; k++) { /* apply it, a cycle at a time; done: perm[j] == j */
		gfs_record tmp;
		size_t j = k, ahead = k;

		if (perm[k] == k)
			continue;
		tmp = l->records[k];
		/* the records moved SORT_AHEAD steps later in the cycle are prefetched */
		for (int d = 0; d < SORT_AHEAD && perm[ahead] != k; d++)
			ahead = perm[ahead];
		for (;;) {
			const size_t from = perm[j];

			if (perm[ahead] != k) {
				ahead = perm[ahead];
				__builtin_prefetch(&l->records[ahead]);
				__builtin_prefetch((const char *)&l->records[ahead] +
						   sizeof(*l->records) - 1);
			}
			perm[j] = (uint32_t)j;
			if (from == k) {
				l->records[j] = tmp;
				break;
			}
			l->records[j] = l->records[from];
			j = from;
		}
	}
	/* at[k] is now the end of source k's run */
	for (size_t k = 0, a = 0; k < l->nsources; a = at[k++]) {
		bool sorted = true;

		for (size_t i = a + 1; sorted && i < at[k]; i++)
			sorted = record_cmp(&l->records[i - 1], &l->records[i]) <= 0;
		if (!sorted)
			qsort(l->records + a, at[k] - a, sizeof(*l->records), record_cmp);
	}
	free(perm);
	free(at);
	return GFS_OK;
}

/*
 * finish_records(): sort and deduplicate the records, give every piece (of
 * the inputs table's too) its record, and drop the records no piece reads.  O((records + pieces) log
 * records).
 */
static gfs_err finish_records(gfs_layout *l, const char *label)
{
	uint32_t *remap;
	size_t n = 0;
	gfs_err err;

	for (size_t i = 0; i < l->nrecords; i++) {
		const gfs_record *r = &l->records[i];
		uint64_t end;

		char rn[512];

		if (!gfs_add_u64(r->off, r->len, &end) ||
		    end > (r->kind == GFS_PIECE_ZSTD ? r->frame_size : l->sources[r->src].size))
			return gfs_fail(GFS_ERR_FORMAT, "%s: record %s lies past the end of %s",
					label, gfs_record_name(r, rn, sizeof(rn)),
					l->sources[r->src].path);
	}
	err = sort_records(l);
	if (err)
		return err;
	for (size_t i = 0; i < l->nrecords; i++) {
		if (n > 0 && record_cmp(&l->records[n - 1], &l->records[i]) == 0)
			continue;
		l->records[n++] = l->records[i];
	}
	l->nrecords = n;
	remap = gfs_calloc(n ? n : 1, sizeof(*remap));
	if (!remap)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	err = assign_records(l, l, remap);
	if (!err && l->inputs)
		err = assign_records(l, l->inputs, remap);
	if (err) {
		free(remap);
		return err;
	}
	assign_rflat_records(l, remap);
	n = 0;
	for (size_t i = 0; i < l->nrecords; i++) {
		if (!remap[i])
			continue;
		remap[i] = (uint32_t)n;
		l->records[n++] = l->records[i];
	}
	l->nrecords = n;
	remap_records(l, remap);
	if (l->inputs)
		remap_records(l->inputs, remap);
	for (size_t i = 0; i < l->nrflats; i++)
		for (uint32_t k = 0; k < l->rflats[i]->nranks; k++)
			if (l->rflats[i]->ranks[k].rec != GFS_NO_RECORD)
				l->rflats[i]->ranks[k].rec = remap[l->rflats[i]->ranks[k].rec];
	free(remap);
	return index_record_pieces(l);
}

/* reads_record(): some piece of t (an input: not indexed in rec_pieces) is in record r. */
static bool reads_record(const gfs_tensor *t, uint32_t r)
{
	for (size_t p = 0; p < t->npieces; p++)
		if (t->slots[p].rec == r)
			return true;
	return false;
}

size_t gfs_record_tensors(const gfs_layout *l, uint32_t r, size_t *out, size_t max)
{
	size_t n = 0;

	assert(l->finished && r < l->nrecords);
	for (size_t i = 0; i < gfs_layout_nentries(l); i++) {
		const gfs_tensor *t = gfs_layout_target(l, i);
		const size_t ti = (size_t)(t - l->tensors);
		bool hit = false;

		if (t->comp) {
			for (int k = 0; k < GFS_OPIN_COUNT && !hit; k++)
				hit = t->comp->in[k] >= 0 &&
				      reads_record(&l->inputs->tensors[t->comp->in[k]], r);
		} else if (t->rf) {
			for (size_t k = l->rec_rf0[r]; k < l->rec_rf0[r + 1] && !hit; k++)
				hit = l->rflats[l->rec_rfs[k].flat] == t->rf &&
				      l->rec_rfs[k].rank < t->npieces;
		} else {
			/* the record's pieces are in layout order: binary search
			 * ti's first piece */
			size_t lo = l->rec_piece0[r], hi = l->rec_piece0[r + 1];

			while (lo < hi) {
				const size_t mid = lo + (hi - lo) / 2;

				if (l->rec_pieces[mid] < l->piece0[ti])
					lo = mid + 1;
				else
					hi = mid;
			}
			hit = lo < l->rec_piece0[r + 1] && l->rec_pieces[lo] < l->piece0[ti + 1];
		}
		if (!hit)
			continue;
		if (n < max)
			out[n] = i;
		n++;
	}
	return n;
}

bool gfs_record_each_piece(const gfs_layout *l, uint32_t r,
			   bool (*fn)(void *ctx, gfs_piece_ref ref), void *ctx)
{
	assert(l->finished && r < l->nrecords);
	for (size_t i = l->rec_piece0[r]; i < l->rec_piece0[r + 1]; i++)
		if (!fn(ctx, gfs_layout_piece_ref(l, l->rec_pieces[i])))
			return false;
	for (size_t k = l->rec_rf0[r]; k < l->rec_rf0[r + 1]; k++) {
		const gfs_rflat_ref *x = &l->rec_rfs[k];

		for (size_t e = l->rf_ent0[x->flat]; e < l->rf_ent0[x->flat + 1]; e++)
			if (x->rank < l->tensors[l->rf_ents[e]].npieces &&
			    !fn(ctx, (gfs_piece_ref){ l->rf_ents[e], x->rank }))
				return false;
	}
	return true;
}

const char *gfs_record_describe(const gfs_layout *l, uint32_t r, size_t max_names,
				char *buf, size_t n)
{
	enum { NAMES = 64 };
	size_t idx[NAMES];
	const gfs_record *rec = &l->records[r];
	const size_t want = max_names < NAMES ? max_names : NAMES;
	char rn[512];
	const size_t total = gfs_record_tensors(l, r, idx, want);
	size_t used;

	assert(n > 0);
	used = (size_t)snprintf(buf, n, "%s: record %s (%s ", l->sources[rec->src].abspath,
				gfs_record_name(rec, rn, sizeof(rn)), total == 1 ? "tensor" : "tensors");
	for (size_t k = 0; k < total && k < want && used < n; k++) {
		const gfs_tensor *t = &l->tensors[idx[k]];

		used += (size_t)snprintf(buf + used, n - used, "%s%s%s%s", k ? ", " : "",
					 t->state ? t->state : "", t->state ? " of " : "",
					 t->name);
	}
	if (total > want && used < n)
		used += (size_t)snprintf(buf + used, n - used, " and %zu more", total - want);
	if (used < n)
		snprintf(buf + used, n - used, ")");
	return buf;
}

/*
 * compact(): store t's checked pieces (sorted, reach set) as slots, with
 * a side table for ZSTD pieces and, in a tensor with strided pieces, for
 * all (see gfs_pslot); build: its pieces as built.
 */
static gfs_err compact(gfs_tensor *t, const gfs_piece *build)
{
	size_t next = 0;

	for (size_t p = 0; p < t->npieces; p++)
		next += t->strided || build[p].kind == GFS_PIECE_ZSTD;
	t->slots = gfs_calloc(t->npieces ? t->npieces : 1, sizeof(*t->slots));
	t->ext = next ? gfs_calloc(next, sizeof(*t->ext)) : NULL;
	if (!t->slots || (next && !t->ext))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	next = 0;
	for (size_t p = 0; p < t->npieces; p++) {
		const gfs_piece *pc = &build[p];
		gfs_pslot *sl = &t->slots[p];

		assert(pc->src < GFS_MAX_SOURCES);
		sl->toff = pc->toff;
		sl->rec = pc->rec;
		sl->bits = pc->src | (uint32_t)pc->kind << GFS_PSLOT_KIND_SHIFT;
		sl->off = pc->src_off;
		if (t->strided || pc->kind == GFS_PIECE_ZSTD) {
			t->ext[next] = (gfs_pext){
				.src_off = pc->src_off, .len = pc->len, .count = pc->count,
				.dst_stride = pc->dst_stride, .src_stride = pc->src_stride,
				.frame_off = pc->frame_off, .frame_len = pc->frame_len,
				.frame_size = pc->frame_size, .reach = pc->reach,
			};
			sl->bits |= GFS_PSLOT_EXT;
			sl->off = next++;
		}
	}
	return GFS_OK;
}

gfs_err gfs_layout_finish(gfs_layout *l, const char *label)
{
	uint64_t budget = GFS_MAX_RUNS;
	gfs_err err;

	assert(!l->finished);
	if (gfs_layout_nentries(l) >= UINT32_MAX)
		return gfs_fail(GFS_ERR_LIMIT, "%s: too many tensors", label);
	for (size_t i = 0; i < l->optim.nmodel_srcs; i++)
		if (l->optim.model_srcs[i] >= l->nsources)
			return gfs_fail(GFS_ERR_FORMAT, "%s: model-states file %u of %zu sources",
					label, l->optim.model_srcs[i], l->nsources);
	if (l->cap_tensors > gfs_layout_nentries(l) && gfs_layout_nentries(l) > 0) {
		/* sealed: no more entries */
		gfs_tensor *t = gfs_reallocarray(l->tensors, gfs_layout_nentries(l), sizeof(*t));

		if (t) {
			l->tensors = t;
			l->cap_tensors = gfs_layout_nentries(l);
		}
	}
	err = build_hash(l, label);
	if (err)
		return err;
	err = resolve_aliases(l, label);
	if (!err)
		err = gfs_layout_check_computed(l, label);
	if (err)
		return err;
	for (size_t i = 0; i < l->nobjects; i++) {
		const gfs_object *o = &l->objects[i];
		uint64_t end;

		if (!gfs_add_u64(o->src_off, o->len, &end) || end > l->sources[o->src].size)
			return gfs_fail(GFS_ERR_FORMAT, "%s: object %s lies past the end of %s",
					label, o->name, l->sources[o->src].path);
		if (gfs_layout_find(l, o->name) >= 0)
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s is both a tensor and an object",
					label, o->name);
	}
	for (size_t i = 0; i < gfs_layout_nentries(l); i++) {
		gfs_tensor *t = &l->tensors[i];
		gfs_piece *build = l->tbuild[i].build;
		uint64_t reach = 0;

		if (t->alias_of >= 0 || t->comp || t->rf)
			continue;
		if (!sorted_by_toff(t, build)) /* importers mostly add pieces in order */
			qsort(build, t->npieces, sizeof(*build), piece_cmp);
		t->strided = false;
		for (size_t p = 0; p < t->npieces; p++) {
			gfs_piece *pc = &build[p];
			const uint64_t end = gfs_piece_end(pc);

			if (end > reach)
				reach = end;
			pc->reach = reach;
			if (pc->count > 1)
				t->strided = true;
			err = check_source(l, label, t, pc);
			if (err)
				return err;
		}
		if (!t->strided)
			err = check_contiguous(label, t, build);
		else if (!tiles_regularly(t, build))
			err = check_strided(label, t, build, &budget);
		if (!err)
			err = compact(t, build);
		if (err)
			return err;
	}
	for (size_t i = 0; i < gfs_layout_nentries(l); i++)
		free(l->tbuild[i].build);
	free(l->tbuild);
	l->tbuild = NULL;
	l->cap_tbuild = 0;
	for (size_t i = 0; i < l->nrflats; i++) {
		const gfs_rflat *f = l->rflats[i];

		for (uint32_t k = 0; k < f->nranks; k++) {
			const gfs_source *src = &l->sources[f->ranks[k].src];

			if (f->ranks[k].off + f->nbytes > src->size)
				return gfs_fail(GFS_ERR_FORMAT,
						"%s: flat bytes %llu..%llu of %s lie past its end (%llu bytes)",
						label, (unsigned long long)f->ranks[k].off,
						(unsigned long long)(f->ranks[k].off + f->nbytes),
						src->path, (unsigned long long)src->size);
		}
	}
	err = finish_records(l, label);
	if (err)
		return err;
	l->finished = true;
	return GFS_OK;
}

gfs_piece_span gfs_piece_candidates(const gfs_tensor *t, uint64_t off, uint64_t end)
{
	const gfs_pslot *const sl = t->slots;
	size_t lo = 0, hi = t->npieces;
	gfs_piece_span sp;

	assert(t->npieces == 0 || sl || t->rf);
	if (t->rf) {
		const uint64_t last = end / t->rf_plen + (end % t->rf_plen != 0);

		sp.first = off < t->nbytes ? (size_t)(off / t->rf_plen) : t->npieces;
		sp.last = last < t->npieces ? (size_t)last : t->npieces;
		if (sp.last < sp.first)
			sp.last = sp.first;
		return sp;
	}
	/* first piece whose reach passes off (reach is non-decreasing); without
	 * strided pieces a piece's reach is the next one's toff */
	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;
		const uint64_t reach = t->strided ? t->ext[mid].reach
				       : mid + 1 < t->npieces ? sl[mid + 1].toff : t->nbytes;

		if (reach > off)
			hi = mid;
		else
			lo = mid + 1;
	}
	sp.first = lo;
	/* one past the last piece starting before end (toff is non-decreasing) */
	hi = t->npieces;
	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;

		if (sl[mid].toff < end)
			lo = mid + 1;
		else
			hi = mid;
	}
	sp.last = lo;
	return sp;
}

bool gfs_piece_run_at(const gfs_piece *p, uint64_t pos, uint64_t *start, uint64_t *end)
{
	uint64_t k, s;

	if (pos < p->toff)
		return false;
	k = p->count > 1 ? (pos - p->toff) / p->dst_stride : 0;
	if (k >= p->count)
		return false;
	s = p->toff + k * p->dst_stride;
	if (pos >= s + p->len)
		return false;
	*start = s;
	*end = s + p->len;
	return true;
}

bool gfs_piece_next_run(const gfs_piece *p, uint64_t pos, uint64_t *start, uint64_t *end)
{
	uint64_t k;

	if (pos <= p->toff) {
		k = 0;
	} else if (p->count == 1) {
		return false;
	} else {
		k = (pos - p->toff + p->dst_stride - 1) / p->dst_stride;
		if (k >= p->count)
			return false;
	}
	*start = p->toff + k * p->dst_stride;
	*end = *start + p->len;
	return true;
}

int64_t gfs_layout_find_state(const gfs_layout *l, const char *state, const char *param)
{
	size_t h;

	assert(l->hash);
	h = (size_t)name_hash(state, param) & (l->hash_cap - 1);
	while (l->hash[h] != UINT32_MAX) {
		if (same_key(&l->tensors[l->hash[h]], state, param))
			return l->hash[h];
		h = (h + 1) & (l->hash_cap - 1);
	}
	return -1;
}

gfs_piece_ref gfs_layout_piece_ref(const gfs_layout *l, uint32_t g)
{
	size_t lo = 0, hi = gfs_layout_nentries(l);

	assert(l->finished && g < l->piece0[hi]);
	/* the last entry whose first piece is at or before g (piece0[hi] > g
	 * throughout): entries without pieces come before it */
	while (hi - lo > 1) {
		const size_t mid = lo + (hi - lo) / 2;

		if (l->piece0[mid] <= g)
			lo = mid;
		else
			hi = mid;
	}
	return (gfs_piece_ref){ (uint32_t)lo, (uint32_t)(g - l->piece0[lo]) };
}

int64_t gfs_layout_find(const gfs_layout *l, const char *name)
{
	return gfs_layout_find_state(l, NULL, name);
}

const gfs_tensor *gfs_layout_target(const gfs_layout *l, size_t i)
{
	const gfs_tensor *t;

	assert(i < gfs_layout_nentries(l));
	t = &l->tensors[i];
	return t->alias_of >= 0 ? &l->tensors[t->alias_of] : t;
}
