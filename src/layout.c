/*
 * gatherfs — the layout index: building, validation and name lookup.
 */
#include "config.h"

#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gatherfs/layout.h"

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

void gfs_layout_free(gfs_layout *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->nsources; i++) {
		free(l->sources[i].path);
		free(l->sources[i].abspath);
	}
	for (size_t i = 0; i < l->ntensors; i++) {
		free(l->tensors[i].name);
		free(l->tensors[i].alias_target);
		free(l->tensors[i].pieces);
		free(l->tensors[i].comp);
	}
	gfs_layout_free(l->inputs);
	for (size_t i = 0; i < l->nobjects; i++)
		free(l->objects[i].name);
	free(l->objects);
	free(l->sources);
	free(l->tensors);
	free(l->hash);
	free(l->format);
	free(l->info);
	free(l->base_dir);
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
	if (l->nsources >= UINT32_MAX)
		return gfs_fail(GFS_ERR_LIMIT, "too many source files");
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

static gfs_tensor *push_tensor(gfs_layout *l, const char *name)
{
	gfs_tensor *t;

	if (!gfs_grow((void **)&l->tensors, &l->cap_tensors, l->ntensors, sizeof(*t), 8))
		return NULL;
	t = &l->tensors[l->ntensors];
	memset(t, 0, sizeof(*t));
	t->name = gfs_strdup(name);
	if (!t->name)
		return NULL;
	t->alias_of = -1;
	l->ntensors++;
	return t;
}

gfs_err gfs_layout_add_tensor(gfs_layout *l, const char *name, gfs_dtype dtype,
			      uint32_t ndim, const uint64_t *shape, size_t *idx)
{
	uint64_t numel = 1;
	uint64_t nbytes;
	gfs_tensor *t;
	gfs_err err;

	assert(!l->finished);
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
	t = push_tensor(l, name);
	if (!t)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	t->dtype = dtype;
	t->ndim = ndim;
	if (ndim)
		memcpy(t->shape, shape, ndim * sizeof(shape[0]));
	t->numel = numel;
	t->nbytes = nbytes;
	*idx = l->ntensors - 1;
	return GFS_OK;
}

gfs_err gfs_layout_add_alias(gfs_layout *l, const char *name, const char *target)
{
	gfs_tensor *t;
	gfs_err err;

	assert(!l->finished);
	err = check_name(name);
	if (err)
		return err;
	t = push_tensor(l, name);
	if (!t)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	t->alias_target = gfs_strdup(target);
	if (!t->alias_target)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	t->alias_of = INT64_MAX;
	return GFS_OK;
}

/* resolve_aliases(): turn alias_target names into indices (needs the hash). */
static gfs_err resolve_aliases(gfs_layout *l, const char *label)
{
	for (size_t i = 0; i < l->ntensors; i++) {
		gfs_tensor *t = &l->tensors[i];
		const gfs_tensor *tt;
		int64_t ti;

		if (!t->alias_target)
			continue;
		ti = gfs_layout_find(l, t->alias_target);
		if (ti < 0)
			return gfs_fail(GFS_ERR_FORMAT, "%s: alias %s: target %s does not exist",
					label, t->name, t->alias_target);
		tt = &l->tensors[ti];
		if (tt->alias_target)
			return gfs_fail(GFS_ERR_FORMAT, "%s: alias %s: target %s is itself an alias",
					label, t->name, t->alias_target);
		t->dtype = tt->dtype;
		t->ndim = tt->ndim;
		memcpy(t->shape, tt->shape, sizeof(t->shape));
		t->numel = tt->numel;
		t->nbytes = tt->nbytes;
		t->alias_of = ti;
	}
	for (size_t i = 0; i < l->ntensors; i++) {
		free(l->tensors[i].alias_target);
		l->tensors[i].alias_target = NULL;
	}
	return GFS_OK;
}

static gfs_err push_piece(gfs_layout *l, size_t ti, gfs_piece_kind kind,
			  uint32_t src, uint64_t src_off, uint64_t len)
{
	gfs_tensor *t;
	uint64_t toff = 0;
	gfs_piece *last = NULL;

	assert(!l->finished);
	assert(ti < l->ntensors);
	t = &l->tensors[ti];
	if (t->alias_of >= 0)
		return gfs_fail(GFS_ERR_FORMAT, "alias %s cannot have pieces", t->name);
	if (len == 0)
		return GFS_OK;
	if (kind == GFS_PIECE_FILE && src >= l->nsources)
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: piece names source %u of %zu",
				t->name, src, l->nsources);
	if (t->npieces) {
		last = &t->pieces[t->npieces - 1];
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
	if (!gfs_grow((void **)&t->pieces, &t->cap_pieces, t->npieces, sizeof(*t->pieces), 8))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	t->pieces[t->npieces++] = (gfs_piece){
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
	uint64_t span, end, src_span, src_end;

	assert(!l->finished);
	assert(ti < l->ntensors);
	t = &l->tensors[ti];
	if (t->alias_of >= 0)
		return gfs_fail(GFS_ERR_FORMAT, "alias %s cannot have pieces", t->name);
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
	if (!gfs_grow((void **)&t->pieces, &t->cap_pieces, t->npieces, sizeof(*t->pieces), 8))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	t->pieces[t->npieces] = *p;
	if (p->count == 1) {
		t->pieces[t->npieces].dst_stride = 0;
		t->pieces[t->npieces].src_stride = 0;
	}
	if (p->kind != GFS_PIECE_ZSTD) {
		t->pieces[t->npieces].frame_off = 0;
		t->pieces[t->npieces].frame_len = 0;
		t->pieces[t->npieces].frame_size = 0;
	}
	if (p->kind == GFS_PIECE_ZERO) {
		t->pieces[t->npieces].src = 0;
		t->pieces[t->npieces].src_off = 0;
	}
	t->pieces[t->npieces].reach = 0;
	t->npieces++;
	return GFS_OK;
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

/* FNV-1a */
static uint64_t name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++) {
		h ^= (uint8_t)*s;
		h *= 1099511628211ull;
	}
	return h;
}

static gfs_err build_hash(gfs_layout *l, const char *label)
{
	size_t cap = 16;

	while (cap < l->ntensors * 2)
		cap *= 2;
	l->hash = malloc(cap * sizeof(*l->hash));
	if (!l->hash)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	memset(l->hash, 0xff, cap * sizeof(*l->hash));
	l->hash_cap = cap;
	for (size_t i = 0; i < l->ntensors; i++) {
		size_t h = (size_t)name_hash(l->tensors[i].name) & (cap - 1);

		while (l->hash[h] != UINT32_MAX) {
			if (strcmp(l->tensors[l->hash[h]].name, l->tensors[i].name) == 0)
				return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s appears twice",
						label, l->tensors[i].name);
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
static gfs_err check_contiguous(const char *label, const gfs_tensor *t)
{
	uint64_t covered = 0;

	for (size_t p = 0; p < t->npieces; p++) {
		const gfs_piece *pc = &t->pieces[p];

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
 * check_strided(): walk the runs of a tensor with strided pieces in tensor
 * order: at every position exactly one run starts or continues, and no other
 * run starts before it ends.  *budget counts down the runs walked.
 */
static gfs_err check_strided(const char *label, const gfs_tensor *t, uint64_t *budget)
{
	uint64_t pos = 0;

	while (pos < t->nbytes) {
		gfs_piece_span sp = gfs_piece_candidates(t, pos, pos + 1);
		uint64_t run_end = 0;
		size_t owner = SIZE_MAX;

		if (*budget == 0)
			return gfs_fail(GFS_ERR_LIMIT, "%s: more than %llu strided runs to check",
					label, (unsigned long long)GFS_MAX_RUNS);
		(*budget)--;
		for (size_t i = sp.first; i < sp.last; i++) {
			uint64_t start, end;

			if (!gfs_piece_run_at(&t->pieces[i], pos, &start, &end))
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
		sp = gfs_piece_candidates(t, pos, run_end);
		for (size_t i = sp.first; i < sp.last; i++) {
			uint64_t start, end;

			if (i != owner && gfs_piece_next_run(&t->pieces[i], pos, &start, &end) &&
			    start < run_end)
				return gfs_fail(GFS_ERR_FORMAT,
						"%s: tensor %s: pieces overlap at byte %llu",
						label, t->name, (unsigned long long)start);
		}
		pos = run_end;
	}
	return GFS_OK;
}

gfs_err gfs_layout_finish(gfs_layout *l, const char *label)
{
	uint64_t budget = GFS_MAX_RUNS;
	gfs_err err;

	assert(!l->finished);
	if (l->ntensors >= UINT32_MAX)
		return gfs_fail(GFS_ERR_LIMIT, "%s: too many tensors", label);
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
	for (size_t i = 0; i < l->ntensors; i++) {
		gfs_tensor *t = &l->tensors[i];
		uint64_t reach = 0;

		if (t->alias_of >= 0 || t->comp)
			continue;
		if (t->npieces > 1) /* qsort(NULL, 0) is undefined */
			qsort(t->pieces, t->npieces, sizeof(*t->pieces), piece_cmp);
		t->strided = false;
		for (size_t p = 0; p < t->npieces; p++) {
			gfs_piece *pc = &t->pieces[p];
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
		err = t->strided ? check_strided(label, t, &budget) : check_contiguous(label, t);
		if (err)
			return err;
	}
	l->finished = true;
	return GFS_OK;
}

gfs_piece_span gfs_piece_candidates(const gfs_tensor *t, uint64_t off, uint64_t end)
{
	size_t lo = 0, hi = t->npieces;
	gfs_piece_span sp;

	/* first piece whose reach passes off (reach is non-decreasing) */
	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;

		if (t->pieces[mid].reach > off)
			hi = mid;
		else
			lo = mid + 1;
	}
	sp.first = lo;
	/* one past the last piece starting before end (toff is non-decreasing) */
	hi = t->npieces;
	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;

		if (t->pieces[mid].toff < end)
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

int64_t gfs_layout_find(const gfs_layout *l, const char *name)
{
	size_t h;

	assert(l->hash);
	h = (size_t)name_hash(name) & (l->hash_cap - 1);
	while (l->hash[h] != UINT32_MAX) {
		if (strcmp(l->tensors[l->hash[h]].name, name) == 0)
			return l->hash[h];
		h = (h + 1) & (l->hash_cap - 1);
	}
	return -1;
}

const gfs_tensor *gfs_layout_target(const gfs_layout *l, size_t i)
{
	const gfs_tensor *t;

	assert(i < l->ntensors);
	t = &l->tensors[i];
	return t->alias_of >= 0 ? &l->tensors[t->alias_of] : t;
}
