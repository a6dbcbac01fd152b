/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — layout index <-> JSON (schema: docs/layout-json.md).
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/util/json.h"
#include "gatherfs/index/layout.h"

#define LAYOUT_MAGIC "gatherfs_layout"
#define LAYOUT_JSON_MAX ((uint64_t)1 << 31)

static cJSON *shape_json(const gfs_tensor *t)
{
	cJSON *arr = cJSON_CreateArray();

	for (uint32_t d = 0; arr && d < t->ndim; d++) {
		cJSON *v = gfs_json_u64_item(t->shape[d]);

		if (!v || !cJSON_AddItemToArray(arr, v)) {
			cJSON_Delete(v);
			cJSON_Delete(arr);
			return NULL;
		}
	}
	return arr;
}

/* tensor_is_general(): does t need version-2 pieces (explicit "at")? */
static bool tensor_is_general(const gfs_tensor *t)
{
	for (size_t p = 0; p < t->npieces; p++) {
		const gfs_piece pc = gfs_tensor_piece(t, p);

		if (pc.count > 1 || pc.kind == GFS_PIECE_ZSTD)
			return true;
	}
	return false;
}

static cJSON *piece_json(const gfs_piece *p, bool general)
{
	cJSON *o = cJSON_CreateObject();
	bool ok = o != NULL;

	if (ok && general)
		ok = gfs_json_add_u64(o, "at", p->toff);
	if (ok && p->kind == GFS_PIECE_ZERO) {
		ok = gfs_json_add_u64(o, "zero", p->len);
	} else if (ok) {
		ok = gfs_json_add_u64(o, "source", p->src) &&
		     gfs_json_add_u64(o, "offset", p->src_off) &&
		     gfs_json_add_u64(o, "length", p->len);
	}
	if (ok && p->count > 1)
		ok = gfs_json_add_u64(o, "count", p->count) &&
		     gfs_json_add_u64(o, "dst_stride", p->dst_stride) &&
		     gfs_json_add_u64(o, "src_stride", p->src_stride);
	if (ok && p->kind == GFS_PIECE_ZSTD) {
		cJSON *z = cJSON_AddObjectToObject(o, "zstd");

		ok = z && gfs_json_add_u64(z, "offset", p->frame_off) &&
		     gfs_json_add_u64(z, "length", p->frame_len) &&
		     gfs_json_add_u64(z, "size", p->frame_size);
	}
	if (!ok) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* compute_json(): the "compute" member of computed tensor t (version 3). */
static cJSON *compute_json(const gfs_layout *l, const gfs_compute *c)
{
	static const char *const roles[] = { "weight", "lora_A", "lora_B", "magnitude", "weight_scale" };
	cJSON *o = cJSON_CreateObject();
	bool ok = o && cJSON_AddStringToObject(o, "op", gfs_op_name(c->op)) &&
		  cJSON_AddNumberToObject(o, "scale", c->scale) &&
		  cJSON_AddBoolToObject(o, "transpose", (c->flags & GFS_OPF_T) != 0);

	if (ok && c->block[0]) { /* DEQUANT, or LORA/DORA of an FP8 weight */
		const double bs[2] = { c->block[0], c->block[1] };
		cJSON *b = cJSON_CreateDoubleArray(bs, 2);

		ok = b && cJSON_AddItemToObject(o, "block", b);
		if (!ok)
			cJSON_Delete(b);
	}

	for (int k = 0; ok && k < GFS_OPIN_COUNT; k++)
		if (c->in[k] >= 0)
			ok = cJSON_AddStringToObject(o, roles[k], l->inputs->tensors[c->in[k]].name);
	if (!ok) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/*
 * tensor_json(): t as a JSON object; without with_pieces, its "pieces" array
 * is left empty (entry_unit() writes it).
 */
static cJSON *tensor_json(const gfs_layout *l, const gfs_tensor *t, bool with_pieces)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *shape = NULL;
	cJSON *pieces = NULL;

	if (!o || !cJSON_AddStringToObject(o, "name", t->name))
		goto fail;
	if (t->alias_of >= 0) {
		if (!cJSON_AddStringToObject(o, "alias_of", l->tensors[t->alias_of].name))
			goto fail;
		return o;
	}
	if (!cJSON_AddStringToObject(o, "dtype", gfs_dtype_name(t->dtype)))
		goto fail;
	shape = shape_json(t);
	if (!shape || !cJSON_AddItemToObject(o, "shape", shape))
		goto fail;
	shape = NULL;
	if (t->comp) {
		cJSON *c = compute_json(l, t->comp);

		if (!c || !cJSON_AddItemToObject(o, "compute", c)) {
			cJSON_Delete(c);
			goto fail;
		}
		return o;
	}
	pieces = cJSON_CreateArray();
	if (!pieces || !cJSON_AddItemToObject(o, "pieces", pieces)) {
		cJSON_Delete(pieces);
		goto fail;
	}
	for (size_t p = 0; with_pieces && p < t->npieces; p++) {
		const gfs_piece pc = gfs_tensor_piece(t, p);
		cJSON *pj = piece_json(&pc, tensor_is_general(t));

		if (!pj || !cJSON_AddItemToArray(pieces, pj)) {
			cJSON_Delete(pj);
			goto fail;
		}
	}
	return o;
fail:
	cJSON_Delete(shape);
	cJSON_Delete(o);
	return NULL;
}

/* ---------------------------------------------------- optimizer metadata */

/* hval_json(): a plain value: null, bool, string, array (list), {"int": n},
 * {"float": x}, {"tuple": [...]}. */
static cJSON *hval_json(const gfs_hval *v)
{
	cJSON *o = NULL, *arr;

	switch (v->kind) {
	case GFS_HV_NONE:
		return cJSON_CreateNull();
	case GFS_HV_BOOL:
		return cJSON_CreateBool(v->b);
	case GFS_HV_STR:
		return cJSON_CreateString(v->s);
	case GFS_HV_INT:
		o = cJSON_CreateObject();
		if (o && !cJSON_AddNumberToObject(o, "int", (double)v->i)) {
			cJSON_Delete(o);
			return NULL;
		}
		return o;
	case GFS_HV_FLOAT:
		o = cJSON_CreateObject();
		if (o && !cJSON_AddNumberToObject(o, "float", v->f)) {
			cJSON_Delete(o);
			return NULL;
		}
		return o;
	case GFS_HV_TUPLE:
	case GFS_HV_LIST:
		arr = cJSON_CreateArray();
		for (size_t i = 0; arr && i < v->n; i++) {
			cJSON *e = hval_json(&v->items[i]);

			if (!e || !cJSON_AddItemToArray(arr, e)) {
				cJSON_Delete(e);
				cJSON_Delete(arr);
				return NULL;
			}
		}
		if (!arr || v->kind == GFS_HV_LIST)
			return arr;
		o = cJSON_CreateObject();
		if (!o || !cJSON_AddItemToObject(o, "tuple", arr)) {
			cJSON_Delete(o);
			cJSON_Delete(arr);
			return NULL;
		}
		return o;
	}
	return NULL;
}

static cJSON *optim_json(const gfs_layout *l)
{
	const gfs_optim *o = &l->optim;
	cJSON *j = cJSON_CreateObject();
	cJSON *ms, *groups;

	if (!j || !gfs_json_add_u64(j, "zero_stage", (uint64_t)o->zero_stage) ||
	    !cJSON_AddBoolToObject(j, "bf16_optimizer", o->bf16_optimizer) ||
	    !cJSON_AddBoolToObject(j, "round_robin", o->round_robin) ||
	    !gfs_json_add_u64(j, "world_size", o->world_size) ||
	    !gfs_json_add_u64(j, "flat_groups", o->nflat) ||
	    (o->version && !cJSON_AddStringToObject(j, "version", o->version)) ||
	    (o->pipe_stages && !gfs_json_add_u64(j, "pipeline_stages", o->pipe_stages)) ||
	    (o->tp_ranks && !gfs_json_add_u64(j, "tensor_ranks", o->tp_ranks)) ||
	    (o->moe && !cJSON_AddBoolToObject(j, "moe", true)) ||
	    !(ms = cJSON_AddArrayToObject(j, "model_states")))
		goto fail;
	for (size_t i = 0; i < o->nmodel_srcs; i++) {
		cJSON *v = gfs_json_u64_item(o->model_srcs[i]);

		if (!v || !cJSON_AddItemToArray(ms, v)) {
			cJSON_Delete(v);
			goto fail;
		}
	}
	if (!o->groups)
		return j;
	groups = cJSON_AddArrayToObject(j, "param_groups");
	for (size_t g = 0; groups && g < o->ngroups; g++) {
		cJSON *gj = cJSON_CreateObject();

		if (!gj || !cJSON_AddItemToArray(groups, gj)) {
			cJSON_Delete(gj);
			goto fail;
		}
		for (size_t k = 0; k < o->groups[g].n; k++) {
			cJSON *v = hval_json(&o->groups[g].items[k].v);

			if (!v || !cJSON_AddItemToObject(gj, o->groups[g].items[k].key, v)) {
				cJSON_Delete(v);
				goto fail;
			}
		}
	}
	if (groups)
		return j;
fail:
	cJSON_Delete(j);
	return NULL;
}

static gfs_err parse_hval(const cJSON *v, gfs_hval *out, int depth)
{
	const cJSON *x = NULL;

	memset(out, 0, sizeof(*out));
	if (depth > 8)
		return gfs_fail(GFS_ERR_LIMIT, "param_groups nest too deeply");
	if (cJSON_IsNull(v)) {
		out->kind = GFS_HV_NONE;
	} else if (cJSON_IsBool(v)) {
		out->kind = GFS_HV_BOOL;
		out->b = cJSON_IsTrue(v);
	} else if (cJSON_IsString(v)) {
		out->kind = GFS_HV_STR;
		out->s = gfs_strdup(v->valuestring);
		if (!out->s)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	} else if (cJSON_IsObject(v) && (x = gfs_json_get(v, "float")) && cJSON_IsNumber(x)) {
		out->kind = GFS_HV_FLOAT;
		out->f = x->valuedouble;
	} else if (cJSON_IsObject(v) && (x = gfs_json_get(v, "int")) && cJSON_IsNumber(x) &&
		   x->valuedouble == (double)(int64_t)x->valuedouble &&
		   x->valuedouble >= -(double)GFS_JSON_MAX_INT &&
		   x->valuedouble <= (double)GFS_JSON_MAX_INT) {
		out->kind = GFS_HV_INT;
		out->i = (int64_t)x->valuedouble;
	} else if (cJSON_IsArray(v) ||
		   (cJSON_IsObject(v) && cJSON_IsArray(x = gfs_json_get(v, "tuple")))) {
		const cJSON *arr = cJSON_IsArray(v) ? v : x, *e;
		const size_t n = (size_t)cJSON_GetArraySize(arr);

		out->kind = cJSON_IsArray(v) ? GFS_HV_LIST : GFS_HV_TUPLE;
		out->items = gfs_calloc(n ? n : 1, sizeof(*out->items));
		if (!out->items)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		cJSON_ArrayForEach(e, arr) {
			const gfs_err err = parse_hval(e, &out->items[out->n++], depth + 1);

			if (err)
				return err;
		}
	} else {
		return gfs_fail(GFS_ERR_FORMAT,
				"optimizer param_groups: a value must be null, a bool, a string, a list, {\"int\"}, {\"float\"} or {\"tuple\"}");
	}
	return GFS_OK;
}

static gfs_err parse_optim(gfs_layout *l, const cJSON *j)
{
	gfs_optim *o = &l->optim;
	const cJSON *ms = gfs_json_get(j, "model_states"), *pg = gfs_json_get(j, "param_groups");
	const cJSON *e;
	uint64_t stage, ws, nflat;
	const char *ver;
	gfs_err err;

	if (!cJSON_IsObject(j))
		return gfs_fail(GFS_ERR_FORMAT, "\"optimizer\" must be an object");
	err = gfs_json_u64(gfs_json_get(j, "zero_stage"), NULL, "zero_stage", &stage);
	if (!err)
		err = gfs_json_u64(gfs_json_get(j, "world_size"), NULL, "world_size", &ws);
	if (!err)
		err = gfs_json_u64(gfs_json_get(j, "flat_groups"), NULL, "flat_groups", &nflat);
	if (err)
		return err;
	if (stage > 3 || ws > UINT32_MAX || nflat > UINT32_MAX)
		return gfs_fail(GFS_ERR_FORMAT, "optimizer: zero_stage, world_size or flat_groups out of range");
	o->zero_stage = (int)stage;
	o->world_size = (uint32_t)ws;
	o->nflat = (uint32_t)nflat;
	o->bf16_optimizer = cJSON_IsTrue(gfs_json_get(j, "bf16_optimizer"));
	o->round_robin = cJSON_IsTrue(gfs_json_get(j, "round_robin"));
	o->moe = cJSON_IsTrue(gfs_json_get(j, "moe"));
	for (int k = 0; k < 2; k++) {
		const char *key = k ? "tensor_ranks" : "pipeline_stages";
		uint64_t n = 0;

		if (gfs_json_get(j, key)) {
			err = gfs_json_u64(gfs_json_get(j, key), NULL, key, &n);
			if (!err && n > UINT32_MAX)
				err = gfs_fail(GFS_ERR_FORMAT, "optimizer: %s out of range", key);
			if (err)
				return err;
		}
		*(k ? &o->tp_ranks : &o->pipe_stages) = (uint32_t)n;
	}
	if (gfs_json_get(j, "version")) {
		err = gfs_json_str(gfs_json_get(j, "version"), NULL, "optimizer version", &ver);
		if (err)
			return err;
		o->version = gfs_strdup(ver);
		if (!o->version)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	if (ms) {
		if (!cJSON_IsArray(ms))
			return gfs_fail(GFS_ERR_FORMAT, "model_states must be an array");
		o->model_srcs = gfs_calloc((size_t)cJSON_GetArraySize(ms) + 1, sizeof(*o->model_srcs));
		if (!o->model_srcs)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		cJSON_ArrayForEach(e, ms) {
			uint64_t src;

			err = gfs_json_u64(e, NULL, "a model_states source", &src);
			if (err)
				return err;
			if (src >= l->nsources)
				return gfs_fail(GFS_ERR_FORMAT, "model_states source %llu out of range",
						(unsigned long long)src);
			o->model_srcs[o->nmodel_srcs++] = (uint32_t)src;
		}
	}
	if (!pg)
		return GFS_OK;
	if (!cJSON_IsArray(pg))
		return gfs_fail(GFS_ERR_FORMAT, "param_groups must be an array");
	o->groups = gfs_calloc((size_t)cJSON_GetArraySize(pg) + 1, sizeof(*o->groups));
	if (!o->groups)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	cJSON_ArrayForEach(e, pg) {
		gfs_pgroup *g = &o->groups[o->ngroups++];
		const cJSON *kv;

		if (!cJSON_IsObject(e))
			return gfs_fail(GFS_ERR_FORMAT, "each param group must be an object");
		g->items = gfs_calloc((size_t)cJSON_GetArraySize(e) + 1, sizeof(*g->items));
		if (!g->items)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		cJSON_ArrayForEach(kv, e) {
			gfs_hparam *hp = &g->items[g->n++];

			hp->key = gfs_strdup(kv->string);
			if (!hp->key)
				return gfs_fail(GFS_ERR_NOMEM, "out of memory");
			err = parse_hval(kv, &hp->v, 0);
			if (err)
				return err;
		}
	}
	return GFS_OK;
}

/* has_optim(): does the document have the optimizer sections? */
static bool has_optim(const gfs_layout *l)
{
	return l->noptim > 0 || l->optim.zero_stage > 0;
}

/*
 * skeleton_json(): the text of the document with empty "tensors" and
 * "optimizer_state" arrays.
 */
static gfs_err skeleton_json(const gfs_layout *l, char **text)
{
	cJSON *root = cJSON_CreateObject();
	cJSON *sources, *tensors;
	char *out;

	const bool optim = has_optim(l);
	const bool v3 = optim || l->inputs != NULL;
	bool v2 = l->nobjects > 0;

	for (size_t i = 0; i < gfs_layout_nentries(l) && !v2; i++)
		v2 = tensor_is_general(&l->tensors[i]);
	if (!root)
		goto nomem;
	if (!gfs_json_add_u64(root, LAYOUT_MAGIC, v3 ? 3 : v2 ? 2 : GFS_LAYOUT_VERSION) ||
	    !cJSON_AddStringToObject(root, "format", l->format) ||
	    (l->info && !cJSON_AddStringToObject(root, "info", l->info)) ||
	    !cJSON_AddStringToObject(root, "base_dir", l->base_dir) ||
	    (l->root_dir && !cJSON_AddStringToObject(root, "root_dir", l->root_dir)))
		goto nomem;
	sources = cJSON_AddArrayToObject(root, "sources");
	tensors = cJSON_AddArrayToObject(root, "tensors");
	if (!sources || !tensors)
		goto nomem;
	for (size_t i = 0; i < l->nsources; i++) {
		cJSON *s = cJSON_CreateObject();

		if (!s || !cJSON_AddItemToArray(sources, s)) {
			cJSON_Delete(s);
			goto nomem;
		}
		if (!cJSON_AddStringToObject(s, "path", l->sources[i].path) ||
		    !gfs_json_add_u64(s, "size", l->sources[i].size))
			goto nomem;
	}
	if (optim) {
		const cJSON *states = cJSON_AddArrayToObject(root, "optimizer_state");
		cJSON *opt = optim_json(l);

		if (!states || !opt || !cJSON_AddItemToObject(root, "optimizer", opt)) {
			cJSON_Delete(opt);
			goto nomem;
		}
	}
	if (l->inputs) {
		cJSON *inputs = cJSON_AddArrayToObject(root, "inputs");

		if (!inputs)
			goto nomem;
		for (size_t i = 0; i < l->inputs->ntensors; i++) {
			cJSON *t = tensor_json(l->inputs, &l->inputs->tensors[i], true);

			if (!t || !cJSON_AddItemToArray(inputs, t)) {
				cJSON_Delete(t);
				goto nomem;
			}
		}
	}
	if (l->nobjects) {
		cJSON *objects = cJSON_AddArrayToObject(root, "objects");

		if (!objects)
			goto nomem;
		for (size_t i = 0; i < l->nobjects; i++) {
			const gfs_object *ob = &l->objects[i];
			cJSON *o = cJSON_CreateObject();

			if (!o || !cJSON_AddItemToArray(objects, o)) {
				cJSON_Delete(o);
				goto nomem;
			}
			if (!cJSON_AddStringToObject(o, "name", ob->name) ||
			    !gfs_json_add_u64(o, "source", ob->src) ||
			    !gfs_json_add_u64(o, "offset", ob->src_off) ||
			    !gfs_json_add_u64(o, "length", ob->len))
				goto nomem;
		}
	}
	out = cJSON_Print(root);
	if (!out)
		goto nomem;
	cJSON_Delete(root);
	*text = out;
	return GFS_OK;
nomem:
	cJSON_Delete(root);
	return gfs_fail(GFS_ERR_NOMEM, "out of memory while writing the layout JSON");
}

/*
 * Units: 0 the head (up to the "tensors" array's '['), 1 + i model tensor
 * i, then with optimizer sections the middle (from the "tensors" array's
 * ']' to the "optimizer_state" array's '[') and one per optimizer-state
 * entry, last the tail.
 */
size_t gfs_layout_json_nunits(const gfs_layout *l)
{
	return l->ntensors + 2 + (has_optim(l) ? l->noptim + 1 : 0);
}

/* split_at(): the offset just past marker in s, or 0 if it is not there. */
static size_t split_at(const char *s, const char *marker)
{
	const char *m = strstr(s, marker);

	return m ? (size_t)(m - s) + strlen(marker) : 0;
}

/*
 * skeleton_unit(): unit u (0 head, 1 middle, 2 tail) of the skeleton,
 * moved to the front of the malloc()ed *text.
 */
static gfs_err skeleton_unit(const gfs_layout *l, int u, char **text, size_t *len)
{
	char *s = NULL;
	gfs_err err = skeleton_json(l, &s);
	size_t a, b;

	if (err)
		return err;
	/* no raw newline inside a JSON string: the markers are structural */
	a = split_at(s, "\n\t\"tensors\":\t[");
	b = has_optim(l) ? split_at(s + a, "\n\t\"optimizer_state\":\t[") : 0;
	assert(a > 0 && (b > 0 || !has_optim(l)));
	if (u == 0) {
		*len = a;
	} else if (u == 1 && b) {
		*len = b;
		memmove(s, s + a, b);
	} else {
		*len = strlen(s + a + b);
		memmove(s, s + a + b, *len);
	}
	s[*len] = '\0';
	*text = s;
	return GFS_OK;
}

/* A growing text; oom once an append failed. */
typedef struct jbuf {
	char *p;
	size_t n, cap;
	bool oom;
} jbuf;

static void jb_put(jbuf *b, const char *s, size_t len)
{
	if (b->oom)
		return;
	if (b->cap - b->n <= len) {
		size_t cap = b->cap ? b->cap : 256;
		char *g;

		while (cap - b->n <= len)
			cap *= 2;
		g = realloc(b->p, cap);
		if (!g) {
			b->oom = true;
			return;
		}
		b->p = g;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, len);
	b->n += len;
	b->p[b->n] = '\0';
}

/* jb_lit(): append a string literal. */
#define jb_lit(b, lit) jb_put((b), (lit), sizeof(lit) - 1)

/* jb_member(): "key":<TAB>v at depth tabs, after ",\n" unless first. */
static void jb_member(jbuf *b, int depth, bool first, const char *key, uint64_t v)
{
	static const char tabs[] = "\t\t\t\t\t\t\t\t";
	char num[24];

	if (first)
		jb_put(b, "\n", 1);
	else
		jb_put(b, ",\n", 2);
	jb_put(b, tabs, (size_t)depth);
	jb_put(b, "\"", 1);
	jb_put(b, key, strlen(key));
	jb_put(b, "\":\t", 3);
	jb_put(b, num, (size_t)snprintf(num, sizeof(num), "%" PRIu64, v));
}

/*
 * pieces_text(): t's pieces as piece_json() objects in the document's
 * array print them (members at depth 5), separated by ", ".
 */
static void pieces_text(jbuf *b, const gfs_tensor *t)
{
	const bool general = tensor_is_general(t);

	for (size_t k = 0; k < t->npieces; k++) {
		const gfs_piece pc = gfs_tensor_piece(t, k), *p = &pc;
		bool first = true;

		jb_put(b, k ? ", {" : "{", k ? 3 : 1);
		if (general) {
			jb_member(b, 5, first, "at", p->toff);
			first = false;
		}
		if (p->kind == GFS_PIECE_ZERO) {
			jb_member(b, 5, first, "zero", p->len);
		} else {
			jb_member(b, 5, first, "source", p->src);
			jb_member(b, 5, false, "offset", p->src_off);
			jb_member(b, 5, false, "length", p->len);
		}
		if (p->count > 1) {
			jb_member(b, 5, false, "count", p->count);
			jb_member(b, 5, false, "dst_stride", p->dst_stride);
			jb_member(b, 5, false, "src_stride", p->src_stride);
		}
		if (p->kind == GFS_PIECE_ZSTD) {
			jb_lit(b, ",\n\t\t\t\t\t\"zstd\":\t{");
			jb_member(b, 6, true, "offset", p->frame_off);
			jb_member(b, 6, false, "length", p->frame_len);
			jb_member(b, 6, false, "size", p->frame_size);
			jb_lit(b, "\n\t\t\t\t\t}");
		}
		jb_lit(b, "\n\t\t\t\t}");
	}
}

/* digits(): the length of v in decimal. */
static size_t digits(uint64_t v)
{
	size_t n = 1;

	for (; v >= 10; v /= 10)
		n++;
	return n;
}

/* member_len(): the length of what jb_member() appends. */
static size_t member_len(int depth, bool first, const char *key, uint64_t v)
{
	return (first ? 1 : 2) + (size_t)depth + 1 + strlen(key) + 3 + digits(v);
}

/* pieces_len(): the length of what pieces_text() appends, by arithmetic. */
static uint64_t pieces_len(const gfs_tensor *t)
{
	const bool general = tensor_is_general(t);
	uint64_t n = 0;

	for (size_t k = 0; k < t->npieces; k++) {
		const gfs_piece pc = gfs_tensor_piece(t, k), *p = &pc;
		bool first = true;

		n += k ? 3 : 1;
		if (general) {
			n += member_len(5, first, "at", p->toff);
			first = false;
		}
		if (p->kind == GFS_PIECE_ZERO) {
			n += member_len(5, first, "zero", p->len);
		} else {
			n += member_len(5, first, "source", p->src) +
			     member_len(5, false, "offset", p->src_off) +
			     member_len(5, false, "length", p->len);
		}
		if (p->count > 1)
			n += member_len(5, false, "count", p->count) +
			     member_len(5, false, "dst_stride", p->dst_stride) +
			     member_len(5, false, "src_stride", p->src_stride);
		if (p->kind == GFS_PIECE_ZSTD)
			n += sizeof(",\n\t\t\t\t\t\"zstd\":\t{") - 1 +
			     member_len(6, true, "offset", p->frame_off) +
			     member_len(6, false, "length", p->frame_len) +
			     member_len(6, false, "size", p->frame_size) +
			     sizeof("\n\t\t\t\t\t}") - 1;
		n += sizeof("\n\t\t\t\t}") - 1;
	}
	return n;
}

static const char pieces_marker[] = "\"pieces\":\t[";

/*
 * entry_frame(): entry i's object as cJSON prints it, with an empty
 * "pieces" array, in *s (malloc()ed); *cut: the '[' of that array, NULL
 * if the entry has no pieces.
 */
static gfs_err entry_frame(const gfs_layout *l, size_t i, char **s, const char **cut)
{
	const bool state = i >= l->ntensors;
	cJSON *t = tensor_json(l, &l->tensors[i], false);

	if (t && state && !cJSON_AddStringToObject(t, "state", l->tensors[i].state)) {
		cJSON_Delete(t);
		t = NULL;
	}
	*s = t ? cJSON_Print(t) : NULL;
	cJSON_Delete(t);
	if (!*s)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory while writing the layout JSON");
	/* a raw tab never occurs inside a JSON string: the marker is structural */
	*cut = l->tensors[i].npieces ? strstr(*s, pieces_marker) : NULL;
	assert(*cut || !l->tensors[i].npieces);
	if (*cut)
		*cut += sizeof(pieces_marker) - 2;
	return GFS_OK;
}

/*
 * entry_unit(): entry i's object as it stands inside the document's array
 * (two more tabs after each newline: cJSON indents by depth, and the array
 * and the root object each add one), after ", " unless first in its array.
 * cJSON writes all but the pieces, written here into its empty "pieces"
 * array: O(pieces) without a cJSON node per piece.
 */
static gfs_err entry_unit(const gfs_layout *l, size_t i, char **text, size_t *len)
{
	const bool first = i == 0 || i == l->ntensors;
	jbuf b = { 0 };
	const char *cut;
	char *s;
	gfs_err err = entry_frame(l, i, &s, &cut);

	if (err)
		return err;
	if (!first)
		jb_put(&b, ", ", 2);
	for (const char *c = s; *c; c++) {
		jb_put(&b, c, 1);
		if (*c == '\n')
			jb_put(&b, "\t\t", 2);
		if (c == cut)
			pieces_text(&b, &l->tensors[i]);
	}
	free(s);
	if (b.oom || !b.p) {
		free(b.p);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory while writing the layout JSON");
	}
	*len = b.n;
	*text = b.p;
	return GFS_OK;
}

gfs_err gfs_layout_json_unit(const gfs_layout *l, size_t u, char **text, size_t *len)
{
	const size_t n = gfs_layout_json_nunits(l);

	assert(u < n);
	if (u == 0)
		return skeleton_unit(l, 0, text, len);
	if (u == n - 1)
		return skeleton_unit(l, 2, text, len);
	if (u <= l->ntensors)
		return entry_unit(l, u - 1, text, len);
	if (u == l->ntensors + 1)
		return skeleton_unit(l, 1, text, len);
	return entry_unit(l, u - 2, text, len);
}

/* entry_size(): the length of entry_unit(l, i), its pieces not written. */
static gfs_err entry_size(const gfs_layout *l, size_t i, uint64_t *size)
{
	const bool first = i == 0 || i == l->ntensors;
	const char *cut;
	char *s;
	uint64_t n = first ? 0 : 2;
	gfs_err err = entry_frame(l, i, &s, &cut);

	if (err)
		return err;
	for (const char *c = s; *c; c++)
		n += *c == '\n' ? 3 : 1;
	if (cut)
		n += pieces_len(&l->tensors[i]);
	free(s);
	*size = n;
	return GFS_OK;
}

gfs_err gfs_layout_json_unit_size(const gfs_layout *l, size_t u, uint64_t *size)
{
	const size_t n = gfs_layout_json_nunits(l);
	char *text = NULL;
	size_t len = 0;
	gfs_err err;

	assert(u < n);
	if (u >= 1 && u < n - 1 && u != l->ntensors + 1)
		return entry_size(l, u <= l->ntensors ? u - 1 : u - 2, size);
	err = gfs_layout_json_unit(l, u, &text, &len);
	free(text);
	*size = len;
	return err;
}

gfs_err gfs_layout_to_json(const gfs_layout *l, char **text)
{
	const size_t n = gfs_layout_json_nunits(l);
	char *out = NULL;
	size_t used = 0, cap = 0;

	for (size_t u = 0; u < n; u++) {
		char *s = NULL;
		size_t len = 0;
		const gfs_err err = gfs_layout_json_unit(l, u, &s, &len);

		if (err) {
			free(out);
			return err;
		}
		if (used + len + 1 > cap) {
			char *g = realloc(out, cap = 2 * (used + len + 1));

			if (!g) {
				free(s);
				free(out);
				return gfs_fail(GFS_ERR_NOMEM, "out of memory while writing the layout JSON");
			}
			out = g;
		}
		memcpy(out + used, s, len);
		used += len;
		out[used] = '\0';
		free(s);
	}
	*text = out;
	return GFS_OK;
}

/*
 * Parsing.  Messages below name what is wrong inside the document ("tensor
 * X: piece source must be a number") and never the file: the file's label
 * is put in front once, by gfs_layout_from_json().  ctx is "tensor NAME" or
 * "object NAME" (a long name cut short) for the values inside one.
 */
#define CTX_MAX 160

static void set_ctx(char *ctx, const char *kind, const char *name)
{
	if (snprintf(ctx, CTX_MAX, "%s %s", kind, name) >= CTX_MAX)
		memcpy(ctx + CTX_MAX - 4, "...", 4);
}

static gfs_err parse_shape(const cJSON *shape, const char *ctx, uint32_t *ndim, uint64_t *dims)
{
	const cJSON *d;
	uint32_t n = 0;

	if (!cJSON_IsArray(shape))
		return gfs_fail(GFS_ERR_FORMAT, "%s: shape must be an array", ctx);
	cJSON_ArrayForEach(d, shape) {
		gfs_err err;

		if (n >= GFS_MAX_DIMS)
			return gfs_fail(GFS_ERR_LIMIT, "%s: more than %d dimensions", ctx,
					GFS_MAX_DIMS);
		err = gfs_json_u64(d, ctx, "a shape dimension", &dims[n]);
		if (err)
			return err;
		n++;
	}
	*ndim = n;
	return GFS_OK;
}

static gfs_err source_index(const gfs_layout *l, const cJSON *v, const char *ctx,
			    const char *what, uint32_t *out)
{
	uint64_t src;
	gfs_err err = gfs_json_u64(v, ctx, what, &src);

	if (!err && src >= l->nsources)
		err = gfs_fail(GFS_ERR_FORMAT, "%s: %s %llu out of range (%zu sources)", ctx, what,
			       (unsigned long long)src, l->nsources);
	if (!err)
		*out = (uint32_t)src;
	return err;
}

/* parse_general(): a piece with "at" (version 2: any order, strides, zstd). */
static gfs_err parse_general(gfs_layout *l, size_t ti, const cJSON *p, const char *ctx)
{
	const cJSON *zero = gfs_json_get(p, "zero");
	const cJSON *z = gfs_json_get(p, "zstd");
	gfs_piece pc = { .count = 1, .kind = zero ? GFS_PIECE_ZERO : GFS_PIECE_FILE };
	gfs_err err = gfs_json_u64(gfs_json_get(p, "at"), ctx, "piece at", &pc.toff);

	if (!err && zero) {
		err = gfs_json_u64(zero, ctx, "zero", &pc.len);
	} else if (!err) {
		err = source_index(l, gfs_json_get(p, "source"), ctx, "piece source", &pc.src);
		if (!err)
			err = gfs_json_u64(gfs_json_get(p, "offset"), ctx, "piece offset", &pc.src_off);
		if (!err)
			err = gfs_json_u64(gfs_json_get(p, "length"), ctx, "piece length", &pc.len);
	}
	if (!err && gfs_json_get(p, "count")) {
		err = gfs_json_u64(gfs_json_get(p, "count"), ctx, "piece count", &pc.count);
		if (!err)
			err = gfs_json_u64(gfs_json_get(p, "dst_stride"), ctx, "piece dst_stride",
					   &pc.dst_stride);
		if (!err)
			err = gfs_json_u64(gfs_json_get(p, "src_stride"), ctx, "piece src_stride",
					   &pc.src_stride);
	}
	if (!err && z) {
		if (zero)
			return gfs_fail(GFS_ERR_FORMAT, "%s: a zero piece cannot be zstd", ctx);
		pc.kind = GFS_PIECE_ZSTD;
		err = gfs_json_u64(gfs_json_get(z, "offset"), ctx, "zstd offset", &pc.frame_off);
		if (!err)
			err = gfs_json_u64(gfs_json_get(z, "length"), ctx, "zstd length", &pc.frame_len);
		if (!err)
			err = gfs_json_u64(gfs_json_get(z, "size"), ctx, "zstd size", &pc.frame_size);
	}
	return err ? err : gfs_layout_add_general(l, ti, &pc);
}

static gfs_err parse_pieces(gfs_layout *l, size_t ti, const cJSON *pieces, const char *ctx)
{
	const cJSON *p;
	int general = -1; /* unknown, 0: all in order, 1: all with "at" */

	if (!cJSON_IsArray(pieces))
		return gfs_fail(GFS_ERR_FORMAT, "%s: pieces must be an array", ctx);
	cJSON_ArrayForEach(p, pieces) {
		const cJSON *zero = gfs_json_get(p, "zero");
		const int g = gfs_json_get(p, "at") != NULL;
		uint64_t off, len;
		uint32_t src;
		gfs_err err;

		if (!cJSON_IsObject(p))
			return gfs_fail(GFS_ERR_FORMAT, "%s: a piece must be an object", ctx);
		if (general >= 0 && g != general)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: either every piece has \"at\" or none does", ctx);
		general = g;
		if (!g && (gfs_json_get(p, "count") || gfs_json_get(p, "zstd")))
			return gfs_fail(GFS_ERR_FORMAT, "%s: a strided or zstd piece needs \"at\"",
					ctx);
		if (g) {
			err = parse_general(l, ti, p, ctx);
		} else if (zero) {
			err = gfs_json_u64(zero, ctx, "zero", &len);
			if (!err)
				err = gfs_layout_add_zero(l, ti, len);
		} else {
			err = source_index(l, gfs_json_get(p, "source"), ctx, "piece source", &src);
			if (!err)
				err = gfs_json_u64(gfs_json_get(p, "offset"), ctx, "piece offset", &off);
			if (!err)
				err = gfs_json_u64(gfs_json_get(p, "length"), ctx, "piece length", &len);
			if (!err)
				err = gfs_layout_add_piece(l, ti, src, off, len);
		}
		if (err)
			return err;
	}
	return GFS_OK;
}

/* parse_compute(): the "compute" member of tensor ti (version 3). */
static gfs_err parse_compute(gfs_layout *l, size_t ti, const cJSON *c, const char *name)
{
	static const char *const roles[] = { "weight", "lora_A", "lora_B", "magnitude", "weight_scale" };
	gfs_compute comp = { .in = GFS_OPIN_NONE };
	const cJSON *block = gfs_json_get(c, "block");
	const cJSON *scale = gfs_json_get(c, "scale");
	const cJSON *tr = gfs_json_get(c, "transpose");
	const char *op;
	gfs_err err;

	if (!cJSON_IsObject(c))
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: compute must be an object", name);
	err = gfs_json_str(gfs_json_get(c, "op"), NULL, "compute op", &op);
	if (err)
		return gfs_fail_prefix(err, "tensor %s", name);
	comp.op = gfs_op_parse(op);
	if (!comp.op)
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: unknown compute op '%s'", name, op);
	if (!cJSON_IsNumber(scale))
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: compute scale must be a number", name);
	comp.scale = scale->valuedouble;
	if (tr && !cJSON_IsBool(tr))
		return gfs_fail(GFS_ERR_FORMAT, "tensor %s: compute transpose must be true or false", name);
	if (tr && cJSON_IsTrue(tr))
		comp.flags |= GFS_OPF_T;
	if (block) {
		if (!cJSON_IsArray(block) || cJSON_GetArraySize(block) != 2)
			return gfs_fail(GFS_ERR_FORMAT, "tensor %s: compute block must be [BM, BN]", name);
		for (int k = 0; k < 2; k++) {
			const cJSON *v = cJSON_GetArrayItem(block, k);

			if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > UINT32_MAX ||
			    v->valuedouble != (double)(uint32_t)v->valuedouble)
				return gfs_fail(GFS_ERR_FORMAT, "tensor %s: compute block must be [BM, BN], whole numbers >= 1",
						name);
			comp.block[k] = (uint32_t)v->valuedouble;
		}
	}
	for (int k = 0; k < GFS_OPIN_COUNT; k++) {
		const cJSON *v = gfs_json_get(c, roles[k]);
		const char *in;

		if (!v)
			continue;
		err = gfs_json_str(v, NULL, roles[k], &in);
		if (err)
			return gfs_fail_prefix(err, "tensor %s", name);
		comp.in[k] = l->inputs ? gfs_layout_find(l->inputs, in) : -1;
		if (comp.in[k] < 0)
			return gfs_fail(GFS_ERR_FORMAT, "tensor %s: %s '%s' is not in \"inputs\"", name, roles[k], in);
	}
	return gfs_layout_set_compute(l, ti, &comp);
}

static gfs_err parse_objects(gfs_layout *l, const cJSON *v)
{
	const cJSON *o;

	if (!cJSON_IsArray(v))
		return gfs_fail(GFS_ERR_FORMAT, "\"objects\" must be an array");
	cJSON_ArrayForEach(o, v) {
		char ctx[CTX_MAX];
		const char *name;
		uint64_t off, len;
		uint32_t src;
		gfs_err err = gfs_json_str(gfs_json_get(o, "name"), NULL, "object name", &name);

		if (err)
			return err;
		set_ctx(ctx, "object", name);
		err = source_index(l, gfs_json_get(o, "source"), ctx, "source", &src);
		if (!err)
			err = gfs_json_u64(gfs_json_get(o, "offset"), ctx, "offset", &off);
		if (!err)
			err = gfs_json_u64(gfs_json_get(o, "length"), ctx, "length", &len);
		if (!err)
			err = gfs_layout_add_object(l, name, src, off, len);
		if (err)
			return err;
	}
	return GFS_OK;
}

static gfs_err parse_tensor(gfs_layout *l, const cJSON *t, bool optim)
{
	char ctx[CTX_MAX];
	const char *name, *alias, *dtname, *state = NULL;
	uint64_t dims[GFS_MAX_DIMS];
	uint32_t ndim = 0;
	gfs_dtype dt;
	size_t ti;
	gfs_err err;

	if (!cJSON_IsObject(t))
		return gfs_fail(GFS_ERR_FORMAT, "each tensor must be an object");
	err = gfs_json_str(gfs_json_get(t, "name"), NULL, "tensor name", &name);
	if (!err && optim)
		err = gfs_json_str(gfs_json_get(t, "state"), NULL, "optimizer state", &state);
	if (err)
		return err;
	if (optim && gfs_json_get(t, "alias_of"))
		return gfs_fail(GFS_ERR_FORMAT, "optimizer state %s of %s cannot be an alias",
				state, name);
	set_ctx(ctx, optim ? "optimizer state of" : "tensor", name);
	if (gfs_json_get(t, "alias_of")) {
		err = gfs_json_str(gfs_json_get(t, "alias_of"), ctx, "alias_of", &alias);
		return err ? err : gfs_layout_add_alias(l, name, alias);
	}
	err = gfs_json_str(gfs_json_get(t, "dtype"), ctx, "dtype", &dtname);
	if (err)
		return err;
	dt = gfs_dtype_parse(dtname);
	if (dt == GFS_DT_INVALID)
		return gfs_fail(GFS_ERR_FORMAT, "%s: unknown dtype '%s'", ctx, dtname);
	err = parse_shape(gfs_json_get(t, "shape"), ctx, &ndim, dims);
	if (!err)
		err = state ? gfs_layout_add_state(l, state, name, dt, ndim, dims, &ti)
			    : gfs_layout_add_tensor(l, name, dt, ndim, dims, &ti);
	if (!err && gfs_json_get(t, "compute")) {
		if (gfs_json_get(t, "pieces"))
			return gfs_fail(GFS_ERR_FORMAT, "tensor %s: a computed tensor has no pieces",
					name);
		return parse_compute(l, ti, gfs_json_get(t, "compute"), name);
	}
	if (!err)
		err = parse_pieces(l, ti, gfs_json_get(t, "pieces"), ctx);
	return err;
}

/* join_dir(): dir/path, or path when it is absolute; NULL if out of memory. */
static char *join_dir(const char *dir, const char *path)
{
	const size_t n = strlen(dir) + 1 + strlen(path) + 1;
	char *out;

	if (path[0] == '/')
		return gfs_strdup(path);
	out = malloc(n);
	if (out)
		snprintf(out, n, "%s/%s", dir, path);
	return out;
}

/* parse_root(): the layout in root, not finished (messages without the file). */
static gfs_err parse_root(const cJSON *root, const char *json_dir, gfs_layout **out)
{
	const cJSON *v, *s, *t;
	const char *format = "json", *base_dir = NULL, *str;
	char *base = NULL;
	uint64_t version;
	gfs_layout *l = NULL;
	gfs_err err;

	if (!cJSON_IsObject(root))
		return gfs_fail(GFS_ERR_FORMAT, "not a gatherfs layout (not a JSON object)");
	v = gfs_json_get(root, LAYOUT_MAGIC);
	if (!v)
		return gfs_fail(GFS_ERR_FORMAT, "not a gatherfs layout (no \"%s\" member)",
				LAYOUT_MAGIC);
	err = gfs_json_u64(v, NULL, LAYOUT_MAGIC, &version);
	if (err)
		return err;
	if (version < GFS_LAYOUT_VERSION || version > GFS_LAYOUT_VERSION_MAX)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "layout version %llu (this gatherfs reads %d to %d)",
				(unsigned long long)version, GFS_LAYOUT_VERSION,
				GFS_LAYOUT_VERSION_MAX);
	if (gfs_json_get(root, "format") &&
	    (err = gfs_json_str(gfs_json_get(root, "format"), NULL, "format", &format)))
		return err;
	if (gfs_json_get(root, "base_dir") &&
	    (err = gfs_json_str(gfs_json_get(root, "base_dir"), NULL, "base_dir", &base_dir)))
		return err;
	/* A relative base_dir is relative to the directory holding the JSON file. */
	base = base_dir ? join_dir(json_dir, base_dir) : gfs_strdup(json_dir);
	if (!base)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	err = gfs_layout_new(format, base, &l);
	free(base);
	if (err)
		return err;
	if (gfs_json_get(root, "info")) {
		err = gfs_json_str(gfs_json_get(root, "info"), NULL, "info", &str);
		if (!err)
			err = gfs_layout_set_info(l, str);
	}
	if (!err && gfs_json_get(root, "root_dir")) {
		err = gfs_json_str(gfs_json_get(root, "root_dir"), NULL, "root_dir", &str);
		if (!err)
			err = gfs_layout_set_root(l, str);
	}
	v = gfs_json_get(root, "sources");
	if (!err && !cJSON_IsArray(v))
		err = gfs_fail(GFS_ERR_FORMAT, "\"sources\" must be an array");
	if (!err) {
		cJSON_ArrayForEach(s, v) {
			const char *path;
			uint64_t size;
			uint32_t idx;

			err = gfs_json_str(gfs_json_get(s, "path"), NULL, "source path", &path);
			if (!err)
				err = gfs_json_u64(gfs_json_get(s, "size"), NULL, "source size", &size);
			if (!err)
				err = gfs_layout_add_source(l, path, size, &idx);
			if (err)
				break;
		}
	}
	v = gfs_json_get(root, "inputs");
	if (!err && v && version < GFS_LAYOUT_VERSION_COMPUTE)
		err = gfs_fail(GFS_ERR_FORMAT, "\"inputs\" needs layout version %d",
			       GFS_LAYOUT_VERSION_COMPUTE);
	if (!err && v && !cJSON_IsArray(v))
		err = gfs_fail(GFS_ERR_FORMAT, "\"inputs\" must be an array");
	if (!err && v) {
		err = gfs_layout_new("inputs", l->base_dir, &l->inputs);
		for (size_t i = 0; !err && i < l->nsources; i++) {
			uint32_t idx;

			err = gfs_layout_add_source(l->inputs, l->sources[i].path, l->sources[i].size,
						    &idx);
		}
		cJSON_ArrayForEach(t, v) {
			if (err)
				break;
			err = parse_tensor(l->inputs, t, false);
		}
		if (!err)
			err = gfs_layout_finish_inputs(l, "\"inputs\"");
	}
	v = gfs_json_get(root, "tensors");
	if (!err && !cJSON_IsArray(v))
		err = gfs_fail(GFS_ERR_FORMAT, "\"tensors\" must be an array");
	if (!err) {
		cJSON_ArrayForEach(t, v) {
			err = parse_tensor(l, t, false);
			if (err)
				break;
		}
	}
	v = gfs_json_get(root, "optimizer_state");
	if (!err && v && !cJSON_IsArray(v))
		err = gfs_fail(GFS_ERR_FORMAT, "\"optimizer_state\" must be an array");
	if (!err && v) {
		cJSON_ArrayForEach(t, v) {
			err = parse_tensor(l, t, true);
			if (err)
				break;
		}
	}
	if (!err && gfs_json_get(root, "optimizer"))
		err = parse_optim(l, gfs_json_get(root, "optimizer"));
	if (!err && gfs_json_get(root, "objects"))
		err = parse_objects(l, gfs_json_get(root, "objects"));
	if (err) {
		gfs_layout_free(l);
		return err;
	}
	*out = l;
	return GFS_OK;
}

gfs_err gfs_layout_from_json(const char *text, size_t len, const char *label,
			     const char *json_dir, gfs_layout **out)
{
	cJSON *root;
	gfs_layout *l = NULL;
	gfs_err err = gfs_json_parse(text, len, label, &root);

	if (err)
		return err;
	err = parse_root(root, json_dir, &l);
	cJSON_Delete(root);
	if (err)
		return gfs_fail_prefix(err, "%s", label);
	err = gfs_layout_finish(l, label);
	if (err) {
		gfs_layout_free(l);
		return err;
	}
	*out = l;
	return GFS_OK;
}

gfs_err gfs_layout_load_file(const char *path, gfs_layout **out)
{
	struct stat st;
	char *text = NULL, *dir = NULL;
	gfs_err err;
	const int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return gfs_fail(errno == ENOENT ? GFS_ERR_NOTFOUND : GFS_ERR_IO,
				"%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &st) != 0) {
		err = gfs_fail(GFS_ERR_IO, "%s: stat failed: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > LAYOUT_JSON_MAX) {
		err = gfs_fail(GFS_ERR_FORMAT, "%s: not a regular file of at most 2 GiB", path);
		goto out;
	}
	text = malloc((size_t)st.st_size + 1);
	dir = gfs_strdup(path);
	if (!text || !dir) {
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		goto out;
	}
	err = gfs_pread_full(fd, text, (size_t)st.st_size, 0, path);
	if (!err)
		err = gfs_layout_from_json(text, (size_t)st.st_size, path, dirname(dir), out);
	if (!err) {
		err = gfs_layout_add_metafile(*out, path);
		if (err) {
			gfs_layout_free(*out);
			*out = NULL;
		}
	}
out:
	free(text);
	free(dir);
	close(fd);
	return err;
}
