/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the universal view: compose a DeepSpeed universal checkpoint
 * from the layout's masters and optimizer-state entries (view_universal.h,
 * format: ds_to_universal's output, v0.14.5 and v0.19.5).
 */
#include "config.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/views/view_torchzip.h"
#include "gatherfs/views/view_universal.h"

#define MAX_STATES 64
#define STEP "step"

/* A file composed at gfs_uview_new(): latest_universal, the model states, optimizer_state.pt. */
typedef struct uv_file {
	char *path;
	const gfs_vfile *vf;
} uv_file;

/* The plan: trainable params (names of the states' entries) and states. */
typedef struct uv_plan {
	const char *states[MAX_STATES]; /* per-element states, first-seen order */
	size_t nstates;
	bool has_step;
	const char **params;            /* in layout order */
	size_t nparams;
	char dir[512];                  /* "<tag>_universal" */
	char zero[512 + 5];             /* "<tag>_universal/zero" */
} uv_plan;

/*
 * A file zero/<param>/<stem>.pt, composed on first use: its size on the
 * first gfs_uview_size() of its size class (composed, measured, freed:
 * uv_sizes), its torch zip on the first gfs_uview_vfile() (kept: the first
 * to store it wins, a loser frees its copy).
 */
typedef struct uv_lazy {
	_Atomic(gfs_tzview *) zip;
} uv_lazy;

/* What a zero/ file's size depends on (size_key()). */
typedef struct uv_key {
	uint64_t numel;
	uint64_t shape[GFS_MAX_DIMS];
	uint32_t ndim;
	uint32_t stem;
} uv_key;

/* A measured size class (size 0: an empty slot). */
typedef struct uv_size {
	uv_key key;
	uint64_t size;
} uv_size;

/*
 * The sizes of the zero/ files measured so far, by what a size depends on
 * (uv_key): one composition per distinct shape, not per file.  Open
 * addressing, at most half full.
 */
typedef struct uv_sizes {
	pthread_mutex_t mu;
	uv_size *slot;
	size_t cap;         /* 0 or a power of two */
	size_t n;
} uv_sizes;

struct gfs_uview {
	gfs_vctx ctx;       /* as stored: the files are always fp32 */
	uv_plan plan;
	size_t per_param;   /* files per param: fp32, the states, stage 1/2's step */
	char *stems[MAX_STATES + 2]; /* [per_param]: the file names, "fp32.pt"... */
	uint32_t *by_name;  /* [plan.nparams]: the params sorted by name */
	uv_sizes *sizes;    /* (a pointer: filled by const calls) */
	uv_file *files;     /* the files composed at gfs_uview_new(), listed first */
	size_t nfiles, cap_files;
	uv_lazy *lazy;      /* [plan.nparams * per_param], param-major */
	gfs_tzview **zips;  /* they own their vfiles */
	size_t nzips, cap_zips;
	gfs_vfile **owned;  /* other vfiles */
	size_t nowned, cap_owned;
	char note[256];     /* gfs_uview_note(), "" for none */
};

/* ---------------------------------------------------------------- files */

static gfs_err add_file(gfs_uview *u, const char *path, const gfs_vfile *vf)
{
	char *p = gfs_strdup(path);

	if (!p || !gfs_grow((void **)&u->files, &u->cap_files, u->nfiles, sizeof(*u->files), 8)) {
		free(p);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	u->files[u->nfiles++] = (uv_file){ .path = p, .vf = vf };
	return GFS_OK;
}

static gfs_err own_vfile(gfs_uview *u, gfs_vfile **vf)
{
	gfs_err err;

	if (!gfs_grow((void **)&u->owned, &u->cap_owned, u->nowned, sizeof(*u->owned), 16))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	err = gfs_vfile_new(&u->ctx, vf);
	if (!err)
		u->owned[u->nowned++] = *vf;
	return err;
}

/* add_zip(): the torch zip of w (freed here) at path, archive prefix stem. */
static gfs_err add_zip(gfs_uview *u, gfs_pkw *w, const char *path, const char *stem)
{
	gfs_tzview *z = NULL;
	gfs_err err = GFS_OK;

	if (!gfs_grow((void **)&u->zips, &u->cap_zips, u->nzips, sizeof(*u->zips), 4))
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (!err)
		err = gfs_tzview_new_pickle(w, stem, &z);
	gfs_pkw_free(w);
	if (err)
		return gfs_fail_prefix(err, "%s", path);
	u->zips[u->nzips++] = z;
	return add_file(u, path, gfs_tzview_vfile(z));
}

/* ----------------------------------------------------------------- plan */

static bool known_state(const uv_plan *p, const char *s)
{
	for (size_t i = 0; i < p->nstates; i++)
		if (strcmp(p->states[i], s) == 0)
			return true;
	return false;
}

/* f32_entry(): entry i exists, holds bytes and is fp32 with numel elements. */
static gfs_err check_entry(const gfs_layout *l, int64_t i, const char *what, const char *param,
			   uint64_t numel)
{
	const gfs_tensor *t;

	if (i < 0)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "no %s for param %s", what, param);
	t = gfs_layout_target(l, (size_t)i);
	if (t->dtype != GFS_DT_F32)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "the %s of %s is %s, not float32", what, param,
				gfs_dtype_name(t->dtype));
	if (t->numel != numel)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "the %s of %s has %llu elements, not %llu",
				what, param, (unsigned long long)t->numel,
				(unsigned long long)numel);
	return GFS_OK;
}

static gfs_err make_plan(const gfs_layout *l, uv_plan *p)
{
	const gfs_optim *o = &l->optim;
	const char *slash = strrchr(l->base_dir, '/');
	const char *tag = slash ? slash + 1 : l->base_dir;

	if (o->moe)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"a mixture-of-experts checkpoint: no DeepSpeed release loads universal checkpoints of MoE models (deepspeedai/DeepSpeed#5716)");
	if (o->zero_stage < 1 || l->noptim == 0)
		return gfs_fail(GFS_ERR_NOTFOUND, "no DeepSpeed optimizer state");
	if (o->tp_ranks > 1)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"a tensor-parallel checkpoint (%u tensor ranks): the universal view is made for data-parallel and pipeline checkpoints only (its files would need each param's split dimension as cat_dim)",
				o->tp_ranks);
	if (o->round_robin)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"saved with round_robin_gradients: DeepSpeed's universal loader (0.14.5) maps such a checkpoint's params to the wrong bytes");
	if (!o->groups)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"the optimizer's param_groups hold values other than numbers, strings, bools and lists");
	if (!o->version && !o->bf16_optimizer && o->zero_stage < 3)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"no ds_version: DeepSpeed's universal loader requires one");
	if (!*tag || strlen(tag) + sizeof("_universal") > sizeof(p->dir))
		return gfs_fail(GFS_ERR_UNSUPPORTED, "no usable tag name in %s", l->base_dir);
	snprintf(p->dir, sizeof(p->dir), "%s_universal", tag);
	snprintf(p->zero, sizeof(p->zero), "%s/zero", p->dir);
	p->params = gfs_calloc(l->noptim, sizeof(*p->params));
	if (!p->params)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t i = l->ntensors; i < gfs_layout_nentries(l); i++) {
		const gfs_tensor *t = &l->tensors[i];

		if (strcmp(t->state, STEP) == 0) {
			p->has_step = true;
			continue;
		}
		if (!known_state(p, t->state)) {
			if (p->nstates == MAX_STATES)
				return gfs_fail(GFS_ERR_LIMIT, "more than %d optimizer states", MAX_STATES);
			if (strcmp(t->state, "fp32") == 0 || strchr(t->state, '/'))
				return gfs_fail(GFS_ERR_UNSUPPORTED,
						"an optimizer state named %s cannot be a universal file",
						t->state);
			p->states[p->nstates++] = t->state;
		}
		if (strcmp(t->state, p->states[0]) == 0)
			p->params[p->nparams++] = t->name;
	}
	if (p->nstates == 0)
		return gfs_fail(GFS_ERR_NOTFOUND, "no per-element optimizer state");
	if (o->zero_stage == 3 &&
	    (p->nstates != 2 || !known_state(p, "exp_avg") || !known_state(p, "exp_avg_sq")))
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"ZeRO-3 optimizer states other than exp_avg and exp_avg_sq (Adam's): DeepSpeed's ZeRO-3 universal loader reads only those");
	if (!p->has_step)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"no step tensor in the optimizer state: DeepSpeed's universal loader needs one");
	for (size_t k = 0; k < p->nparams; k++) {
		const char *name = p->params[k];
		const int64_t m = gfs_layout_find(l, name);
		uint64_t numel;
		gfs_err err;

		if (strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
			return gfs_fail(GFS_ERR_UNSUPPORTED, "param %s cannot be a folder name", name);
		if (m < 0)
			return gfs_fail(GFS_ERR_UNSUPPORTED, "no fp32 master for param %s", name);
		numel = gfs_layout_target(l, (size_t)m)->numel;
		err = check_entry(l, m, "fp32 master", name, numel);
		for (size_t s = 0; !err && s < p->nstates; s++)
			err = check_entry(l, gfs_layout_find_state(l, p->states[s], name), p->states[s],
					  name, numel);
		if (!err)
			err = check_entry(l, gfs_layout_find_state(l, STEP, name), STEP, name, 1);
		if (err)
			return err;
	}
	return GFS_OK;
}

/* -------------------------------------------------------------- pickles */

static void pk_hval(gfs_pkw *w, const gfs_hval *v)
{
	switch (v->kind) {
	case GFS_HV_NONE:
		gfs_pkw_op(w, 'N');
		break;
	case GFS_HV_BOOL:
		gfs_pkw_op(w, (char)(v->b ? 0x88 : 0x89));
		break;
	case GFS_HV_INT:
		gfs_pkw_int(w, v->i);
		break;
	case GFS_HV_FLOAT:
		gfs_pkw_float(w, v->f);
		break;
	case GFS_HV_STR:
		gfs_pkw_str(w, v->s);
		break;
	case GFS_HV_TUPLE:
	case GFS_HV_LIST:
		gfs_pkw_op(w, v->kind == GFS_HV_LIST ? ']' : '(');
		if (v->kind == GFS_HV_LIST && v->n)
			gfs_pkw_op(w, '(');
		for (size_t i = 0; i < v->n; i++)
			pk_hval(w, &v->items[i]);
		if (v->kind == GFS_HV_TUPLE)
			gfs_pkw_op(w, 't');
		else if (v->n)
			gfs_pkw_op(w, 'e'); /* APPENDS */
		break;
	}
}

/* pk_param_groups(): the torch param_groups list, group g with 'params': [g]. */
static void pk_param_groups(gfs_pkw *w, const gfs_optim *o)
{
	gfs_pkw_op(w, ']');
	gfs_pkw_op(w, '(');
	for (size_t g = 0; g < o->ngroups; g++) {
		gfs_pkw_op(w, '}');
		gfs_pkw_op(w, '(');
		for (size_t k = 0; k < o->groups[g].n; k++) {
			gfs_pkw_str(w, o->groups[g].items[k].key);
			pk_hval(w, &o->groups[g].items[k].v);
		}
		gfs_pkw_str(w, "params");
		gfs_pkw_op(w, ']');
		gfs_pkw_int(w, (int64_t)g);
		gfs_pkw_op(w, 'a'); /* APPEND */
		gfs_pkw_op(w, 'u');
	}
	gfs_pkw_op(w, 'e');
}

static gfs_err add_optimizer_state(gfs_uview *u, const uv_plan *p)
{
	const gfs_layout *l = u->ctx.layout;
	char path[sizeof(p->dir) + 32];
	gfs_pkw *w = NULL;
	gfs_err err = gfs_pkw_new(&u->ctx, &w);

	if (err)
		return err;
	gfs_pkw_op(w, '}');
	gfs_pkw_op(w, '(');
	if (l->optim.zero_stage == 3) {
		const int64_t step = gfs_layout_find_state(l, STEP, p->params[0]);

		gfs_pkw_str(w, "optimizer_state_dict");
		gfs_pkw_op(w, '}');
		gfs_pkw_op(w, '(');
		gfs_pkw_str(w, "state");
		gfs_pkw_op(w, '}');
		gfs_pkw_int(w, 0);
		gfs_pkw_op(w, '}');
		gfs_pkw_str(w, STEP);
		err = gfs_pkw_tensor(w, (size_t)step, 0, NULL, false);
		gfs_pkw_op(w, 's');
		gfs_pkw_op(w, 's');
		gfs_pkw_str(w, "param_groups");
		pk_param_groups(w, &l->optim);
		gfs_pkw_op(w, 'u');
	} else {
		if (l->optim.version) {
			gfs_pkw_str(w, "ds_version");
			gfs_pkw_str(w, l->optim.version);
		}
		gfs_pkw_str(w, "param_groups");
		pk_param_groups(w, &l->optim);
	}
	gfs_pkw_op(w, 'u');
	if (err) {
		gfs_pkw_free(w);
		return err;
	}
	snprintf(path, sizeof(path), "%s/zero/optimizer_state.pt", p->dir);
	return add_zip(u, w, path, "optimizer_state");
}

/* lazy_stem(): the stem of lazy file k ("fp32", a state, "step"). */
static const char *lazy_stem(const gfs_uview *u, size_t k)
{
	const size_t s = k % u->per_param;

	return s == 0 ? "fp32" : s <= u->plan.nstates ? u->plan.states[s - 1] : STEP;
}

/* lazy_entry(): the layout entry lazy file k holds. */
static size_t lazy_entry(const gfs_uview *u, size_t k)
{
	const gfs_layout *l = u->ctx.layout;
	const char *param = u->plan.params[k / u->per_param];
	const size_t s = k % u->per_param;
	const int64_t i = s == 0 ? gfs_layout_find(l, param)
				 : gfs_layout_find_state(l, lazy_stem(u, k), param);

	assert(i >= 0); /* make_plan() checked */
	return (size_t)i;
}

/*
 * lazy_shape(): the shape lazy file k presents its entry's target t in:
 * the step 0-d, stage 3 the flat [numel], stage 1/2 the param's shape (0-d
 * as (1,)).  shape has room for GFS_MAX_DIMS; @return ndim.
 */
static uint32_t lazy_shape(const gfs_uview *u, size_t k, const gfs_tensor *t, uint64_t *shape)
{
	const gfs_layout *l = u->ctx.layout;

	if (strcmp(lazy_stem(u, k), STEP) == 0)
		return 0;
	if (l->optim.zero_stage == 3 || t->ndim == 0) {
		shape[0] = l->optim.zero_stage == 3 ? t->numel : 1;
		return 1;
	}
	memcpy(shape, t->shape, t->ndim * sizeof(*shape));
	return t->ndim;
}

/*
 * compose_lazy(): the torch zip of lazy file k, zero/<param>/<stem>.pt
 * holding its entry in lazy_shape(): stage 1/2 a {'cat_dim': 0, 'param': T}
 * dict, stage 3 the flat tensor; the step is the raw 0-d tensor.  Nothing
 * else of the entry but its element count (fp32: make_plan()) goes into
 * the file (size_key() counts on it).  Errors name the file.
 */
static gfs_err compose_lazy(const gfs_uview *u, size_t k, gfs_tzview **out)
{
	const gfs_layout *l = u->ctx.layout;
	const char *stem = lazy_stem(u, k);
	const size_t i = lazy_entry(u, k);
	const bool requires_grad = k % u->per_param == 0;
	uint64_t shape[GFS_MAX_DIMS];
	const uint32_t ndim = lazy_shape(u, k, gfs_layout_target(l, i), shape);
	gfs_pkw *w = NULL;
	gfs_err err = gfs_pkw_new(&u->ctx, &w);

	if (!err && (strcmp(stem, STEP) == 0 || l->optim.zero_stage == 3)) {
		err = gfs_pkw_tensor(w, i, ndim, shape, requires_grad);
	} else if (!err) {
		gfs_pkw_op(w, '}');
		gfs_pkw_op(w, '(');
		gfs_pkw_str(w, "cat_dim");
		gfs_pkw_int(w, 0);
		gfs_pkw_str(w, "param");
		err = gfs_pkw_tensor(w, i, ndim, shape, requires_grad);
		gfs_pkw_op(w, 'u');
	}
	if (!err)
		err = gfs_tzview_new_pickle(w, stem, out);
	gfs_pkw_free(w);
	if (err) {
		char path[1024];

		gfs_uview_path(u, u->nfiles + k, path, sizeof(path));
		return gfs_fail_prefix(err, "%s", path);
	}
	return GFS_OK;
}

/* ---------------------------------------------------------------- sizes */

/*
 * size_key(): what lazy file k's size depends on (compose_lazy()): its
 * stem, its entry's element count and the shape presented, zero-filled so
 * that equal keys are equal bytes.
 */
static void size_key(const gfs_uview *u, size_t k, uv_key *key)
{
	const gfs_tensor *t = gfs_layout_target(u->ctx.layout, lazy_entry(u, k));

	memset(key, 0, sizeof(*key));
	key->stem = (uint32_t)(k % u->per_param);
	key->numel = t->numel;
	key->ndim = lazy_shape(u, k, t, key->shape);
}

/* key_hash(): FNV-1a of key's bytes. */
static uint64_t key_hash(const uv_key *key)
{
	const unsigned char *b = (const unsigned char *)key;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < sizeof(*key); i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/* size_slot(): the slot of size class key in table slot[0..cap), or an empty one. */
static uv_size *size_slot(uv_size *slot, size_t cap, const uv_key *key)
{
	size_t j = (size_t)key_hash(key) & (cap - 1);

	while (slot[j].size && memcmp(&slot[j].key, key, sizeof(*key)) != 0)
		j = (j + 1) & (cap - 1);
	return &slot[j];
}

/* size_known(): the size of size class key if measured, else 0.  Caller holds u->sizes->mu. */
static uint64_t size_known(const gfs_uview *u, const uv_key *key)
{
	const uv_sizes *t = u->sizes;

	return t->cap ? size_slot(t->slot, t->cap, key)->size : 0;
}

/*
 * size_put(): the size of size class key is size (> 0).  Out of memory
 * only loses the shortcut.  Caller holds u->sizes->mu.
 */
static void size_put(const gfs_uview *u, const uv_key *key, uint64_t size)
{
	uv_sizes *t = u->sizes;
	uv_size *s;

	assert(size > 0);
	if (2 * (t->n + 1) > t->cap) {
		const size_t cap = t->cap ? 2 * t->cap : 16;
		uv_size *g = gfs_calloc(cap, sizeof(*g));

		if (!g)
			return;
		for (size_t j = 0; j < t->cap; j++)
			if (t->slot[j].size)
				*size_slot(g, cap, &t->slot[j].key) = t->slot[j];
		free(t->slot);
		t->slot = g;
		t->cap = cap;
	}
	s = size_slot(t->slot, t->cap, key);
	if (!s->size) {
		*s = (uv_size){ .key = *key, .size = size };
		t->n++;
	}
}

/* ------------------------------------------------------------- the view */

static gfs_err compose(gfs_uview *u, const uv_plan *p)
{
	const gfs_layout *l = u->ctx.layout;
	gfs_vfile *vf = NULL;
	gfs_err err = own_vfile(u, &vf);

	if (!err)
		err = gfs_vfile_add_mem(vf, p->dir, strlen(p->dir));
	if (!err)
		err = add_file(u, "latest_universal", vf);
	for (size_t k = 0; !err && k < l->optim.nmodel_srcs; k++) {
		const uint32_t s = l->optim.model_srcs[k];
		const char *base = strrchr(l->sources[s].path, '/');
		char path[sizeof(p->dir) + 512];

		base = base ? base + 1 : l->sources[s].path;
		if (strlen(base) > 255)
			return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: file name too long", base);
		snprintf(path, sizeof(path), "%s/%s", p->dir, base);
		err = own_vfile(u, &vf);
		if (!err)
			err = gfs_vfile_add_fd(vf, gfs_srcset_fd(u->ctx.src, s), 0,
					       l->sources[s].size, l->sources[s].abspath);
		if (!err)
			err = add_file(u, path, vf);
	}
	if (!err)
		err = add_optimizer_state(u, p);
	if (!err && !(u->lazy = gfs_calloc(p->nparams * u->per_param + 1, sizeof(*u->lazy))))
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t k = 0; !err && k < p->nparams * u->per_param; k++) {
		atomic_init(&u->lazy[k].zip, NULL);
	}
	return err;
}

/* A param's name and index while the params are sorted (index_names()). */
struct uv_name {
	const char *name;
	uint32_t p;
};

static int cmp_uv_name(const void *a, const void *b)
{
	return strcmp(((const struct uv_name *)a)->name, ((const struct uv_name *)b)->name);
}

/* index_names(): u->stems and u->by_name, for gfs_uview_find(). */
static gfs_err index_names(gfs_uview *u)
{
	const uv_plan *p = &u->plan;
	struct uv_name *by = gfs_calloc(p->nparams + 1, sizeof(*by));

	u->by_name = gfs_calloc(p->nparams + 1, sizeof(*u->by_name));
	if (!by || !u->by_name) {
		free(by);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	for (size_t k = 0; k < p->nparams; k++)
		by[k] = (struct uv_name){ p->params[k], (uint32_t)k };
	qsort(by, p->nparams, sizeof(*by), cmp_uv_name);
	for (size_t k = 0; k < p->nparams; k++)
		u->by_name[k] = by[k].p;
	free(by);
	for (size_t s = 0; s < u->per_param; s++) {
		const char *stem = lazy_stem(u, s);

		u->stems[s] = malloc(strlen(stem) + sizeof(".pt"));
		if (!u->stems[s])
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		sprintf(u->stems[s], "%s.pt", stem);
	}
	return GFS_OK;
}

gfs_err gfs_uview_new(const gfs_layout *l, const gfs_srcset *src, const gfs_crccache *crc_cache,
		      gfs_uview **out)
{
	uv_plan p = { 0 };
	gfs_uview *u;
	gfs_err err;

	assert(l->finished);
	err = make_plan(l, &p);
	if (err) {
		free(p.params);
		return err;
	}
	u = calloc(1, sizeof(*u));
	if (!u) {
		free(p.params);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	u->ctx = (gfs_vctx){ .layout = l, .src = src, .want = GFS_DT_INVALID,
			     .crc_cache = crc_cache };
	u->plan = p;
	u->per_param = 1 + p.nstates + (l->optim.zero_stage < 3 ? 1 : 0);
	u->sizes = calloc(1, sizeof(*u->sizes));
	if (!u->sizes || pthread_mutex_init(&u->sizes->mu, NULL) != 0) {
		free(u->sizes);
		u->sizes = NULL;
		gfs_uview_free(u);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	if (p.nparams >= (UINT32_MAX - 1) / u->per_param) {
		gfs_uview_free(u);
		return gfs_fail(GFS_ERR_LIMIT, "universal view: more than 2^32 files");
	}
	if (l->optim.zero_stage == 3 && (l->optim.ngroups > 1 || l->optim.nflat > 1))
		snprintf(u->note, sizeof(u->note),
			 "universal view of ZeRO-3 with %zu param groups in %u sub-groups: DeepSpeed >= 0.18 loads it (older releases read one group); call gatherfs_resume.restore_param_groups() after load_checkpoint (docs/universal.md)",
			 l->optim.ngroups, l->optim.nflat);
	err = compose(u, &u->plan);
	if (!err)
		err = index_names(u);
	if (err) {
		gfs_uview_free(u);
		return err;
	}
	*out = u;
	return GFS_OK;
}

void gfs_uview_free(gfs_uview *u)
{
	if (!u)
		return;
	for (size_t i = 0; i < u->nfiles; i++)
		free(u->files[i].path);
	for (size_t i = 0; i < u->nzips; i++)
		gfs_tzview_free(u->zips[i]);
	for (size_t i = 0; u->lazy && i < u->plan.nparams * u->per_param; i++)
		gfs_tzview_free(atomic_load(&u->lazy[i].zip));
	for (size_t i = 0; i < u->nowned; i++)
		gfs_vfile_free(u->owned[i]);
	free(u->files);
	free(u->lazy);
	free(u->zips);
	free(u->owned);
	free(u->plan.params);
	for (size_t s = 0; s < u->per_param; s++)
		free(u->stems[s]);
	free(u->by_name);
	if (u->sizes) {
		(void)pthread_mutex_destroy(&u->sizes->mu);
		free(u->sizes->slot);
		free(u->sizes);
	}
	free(u);
}

const char *gfs_uview_note(const gfs_uview *u)
{
	return u->note[0] ? u->note : NULL;
}

size_t gfs_uview_nfiles(const gfs_uview *u)
{
	return u->nfiles + u->plan.nparams * u->per_param;
}

size_t gfs_uview_nfixed(const gfs_uview *u)
{
	return u->nfiles;
}

size_t gfs_uview_nparams(const gfs_uview *u)
{
	return u->plan.nparams;
}

size_t gfs_uview_per_param(const gfs_uview *u)
{
	return u->per_param;
}

const char *gfs_uview_zero_dir(const gfs_uview *u)
{
	return u->plan.zero;
}

const char *gfs_uview_param(const gfs_uview *u, size_t p)
{
	assert(p < u->plan.nparams);
	return u->plan.params[p];
}

const char *gfs_uview_stem(const gfs_uview *u, size_t s)
{
	assert(s < u->per_param);
	return u->stems[s];
}

int64_t gfs_uview_find_param(const gfs_uview *u, const char *name)
{
	size_t lo = 0, hi = u->plan.nparams;

	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;
		const int c = strcmp(name, u->plan.params[u->by_name[mid]]);

		if (c == 0)
			return u->by_name[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -1;
}

int64_t gfs_uview_find_stem(const gfs_uview *u, const char *name)
{
	for (size_t s = 0; s < u->per_param; s++)
		if (strcmp(name, u->stems[s]) == 0)
			return (int64_t)s;
	return -1;
}

size_t gfs_uview_path(const gfs_uview *u, size_t i, char *buf, size_t size)
{
	const size_t k = i - u->nfiles;
	int n;

	assert(i < gfs_uview_nfiles(u));
	if (i < u->nfiles)
		n = snprintf(buf, size, "%s", u->files[i].path);
	else
		n = snprintf(buf, size, "%s/zero/%s/%s.pt", u->plan.dir,
			     u->plan.params[k / u->per_param], lazy_stem(u, k));
	assert(n >= 0);
	return (size_t)n;
}

/*
 * made_vfile(): file i's vfile if it exists already (a file made at mount,
 * or a zero/ file composed by an earlier gfs_uview_vfile()), else NULL.
 */
static const gfs_vfile *made_vfile(const gfs_uview *u, size_t i)
{
	const gfs_tzview *z;

	assert(i < gfs_uview_nfiles(u));
	if (i < u->nfiles)
		return u->files[i].vf;
	z = atomic_load_explicit(&u->lazy[i - u->nfiles].zip, memory_order_acquire);
	return z ? gfs_tzview_vfile(z) : NULL;
}

gfs_err gfs_uview_size(const gfs_uview *u, size_t i, uint64_t *size)
{
	const gfs_vfile *vf = made_vfile(u, i);
	uv_key key;
	gfs_tzview *made = NULL;
	gfs_err err;

	if (vf) {
		*size = gfs_vfile_size(vf);
		return GFS_OK;
	}
	(void)pthread_mutex_lock(&u->sizes->mu);
	size_key(u, i - u->nfiles, &key);
	*size = size_known(u, &key);
	(void)pthread_mutex_unlock(&u->sizes->mu);
	if (*size)
		return GFS_OK;
	/* measured and freed: a stat keeps no zip (find over the mount) */
	err = compose_lazy(u, i - u->nfiles, &made);
	if (err)
		return err;
	*size = gfs_vfile_size(gfs_tzview_vfile(made));
	gfs_tzview_free(made);
	(void)pthread_mutex_lock(&u->sizes->mu);
	size_put(u, &key, *size);
	(void)pthread_mutex_unlock(&u->sizes->mu);
	return GFS_OK;
}

gfs_err gfs_uview_vfile(const gfs_uview *u, size_t i, const gfs_vfile **out)
{
	gfs_tzview *made = NULL, *seen = NULL;
	gfs_err err;

	*out = made_vfile(u, i);
	if (*out)
		return GFS_OK;
	err = compose_lazy(u, i - u->nfiles, &made);
	if (err)
		return err;
	/* the first to store its zip wins; a loser frees its copy */
	if (atomic_compare_exchange_strong_explicit(&u->lazy[i - u->nfiles].zip, &seen, made,
						    memory_order_acq_rel, memory_order_acquire))
		seen = made;
	else
		gfs_tzview_free(made);
	*out = gfs_tzview_vfile(seen);
	return GFS_OK;
}
