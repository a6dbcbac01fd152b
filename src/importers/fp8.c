/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — FP8 checkpoints dequantized: quantization_config read, each
 * FP8 weight paired with its scale and checked against the block grid, the
 * model rebuilt with GFS_OP_DEQUANT computed tensors (fp8.h).
 */
#include "config.h"

#include <assert.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/util/json.h"
#include "gatherfs/importers/fp8.h"

#define CONFIG_MAX ((uint64_t)1 << 24)

enum { ST_BLOCK, ST_CHANNEL, ST_TENSOR };

typedef struct qcfg {
	char *path;            /* config.json */
	cJSON *root;
	bool ct;               /* compressed-tensors, else fp8 */
	int strategy;          /* ST_* */
	uint32_t bm, bn;       /* ST_BLOCK */
	gfs_dtype wdt;         /* the weights' FP8 dtype */
	const char *suffix;    /* "weight_scale_inv" or "weight_scale" */
	const cJSON *ignore;   /* compressed-tensors: array of module names / "re:" patterns */
} qcfg;

/* str_of(): the string member key of o, or NULL (absent or null); *bad if another type. */
static const char *str_of(const cJSON *o, const char *key, bool *bad)
{
	const cJSON *v = gfs_json_get(o, key);

	if (!v || cJSON_IsNull(v))
		return NULL;
	if (!cJSON_IsString(v)) {
		*bad = true;
		return NULL;
	}
	return v->valuestring;
}

/* block_of(): a [BM, BN] array of whole numbers 1..2^31 into bm, bn. */
static bool block_of(const cJSON *v, uint32_t *bm, uint32_t *bn)
{
	uint32_t b[2];

	if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2)
		return false;
	for (int k = 0; k < 2; k++) {
		const cJSON *x = cJSON_GetArrayItem(v, k);

		if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > 2147483648.0 ||
		    x->valuedouble != (double)(uint32_t)x->valuedouble)
			return false;
		b[k] = (uint32_t)x->valuedouble;
	}
	*bm = b[0];
	*bn = b[1];
	return true;
}

/* parse_fp8(): quant_method "fp8". */
static gfs_err parse_fp8(qcfg *q, const cJSON *qc)
{
	bool bad = false;
	const char *fmt = str_of(qc, "fmt", &bad);
	const char *sfmt = str_of(qc, "scale_fmt", &bad);
	const cJSON *bs = gfs_json_get(qc, "weight_block_size");

	if (bad)
		return gfs_fail(GFS_ERR_FORMAT, "%s: quantization_config: fmt and scale_fmt must be strings",
				q->path);
	if (fmt && strcmp(fmt, "e4m3") != 0 && strcmp(fmt, "e5m2") != 0)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: quantization_config: fmt \"%.32s\" is not supported (e4m3, e5m2)",
				q->path, fmt);
	if (sfmt && strcmp(sfmt, "ue8m0") != 0)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: quantization_config: scale_fmt \"%.32s\" is not supported (ue8m0)",
				q->path, sfmt);
	q->wdt = fmt && strcmp(fmt, "e5m2") == 0 ? GFS_DT_F8_E5M2 : GFS_DT_F8_E4M3;
	q->suffix = "weight_scale_inv";
	if (!bs || cJSON_IsNull(bs)) {
		q->strategy = ST_TENSOR;
		return GFS_OK;
	}
	if (!block_of(bs, &q->bm, &q->bn))
		return gfs_fail(GFS_ERR_FORMAT, "%s: quantization_config: weight_block_size must be [BM, BN], whole numbers >= 1",
				q->path);
	q->strategy = ST_BLOCK;
	return GFS_OK;
}

/* parse_ct(): quant_method "compressed-tensors" (float-quantized weights). */
static gfs_err parse_ct(qcfg *q, const cJSON *qc)
{
	bool bad = false, seen = false;
	const char *fmt = str_of(qc, "format", &bad);
	const cJSON *groups = gfs_json_get(qc, "config_groups");
	const cJSON *g;

	if (bad || (fmt && strcmp(fmt, "float-quantized") != 0))
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: quantization_config: compressed-tensors format \"%.32s\" is not supported (float-quantized)",
				q->path, fmt ? fmt : "?");
	q->ct = true;
	q->wdt = GFS_DT_F8_E4M3;
	q->suffix = "weight_scale";
	q->ignore = gfs_json_get(qc, "ignore");
	if (q->ignore && !cJSON_IsNull(q->ignore) && !cJSON_IsArray(q->ignore))
		return gfs_fail(GFS_ERR_FORMAT, "%s: quantization_config: ignore must be a list", q->path);
	if (!cJSON_IsObject(groups))
		return gfs_fail(GFS_ERR_FORMAT, "%s: quantization_config: no config_groups", q->path);
	cJSON_ArrayForEach(g, groups) {
		const cJSON *w = gfs_json_get(g, "weights");
		const char *type = str_of(w, "type", &bad), *st = str_of(w, "strategy", &bad);
		const char *gf = str_of(g, "format", &bad);
		const cJSON *nb = gfs_json_get(w, "num_bits");
		const cJSON *sym = gfs_json_get(w, "symmetric");
		int strategy;
		uint32_t bm = 0, bn = 0;

		if (!cJSON_IsObject(w) || bad || !type || strcmp(type, "float") != 0 ||
		    !cJSON_IsNumber(nb) || nb->valuedouble != 8 || cJSON_IsFalse(sym) ||
		    (gf && strcmp(gf, "float-quantized") != 0))
			return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: quantization_config: group %s: only symmetric 8-bit float weights (float-quantized) are supported",
					q->path, g->string ? g->string : "?");
		if (st && strcmp(st, "channel") == 0)
			strategy = ST_CHANNEL;
		else if (st && strcmp(st, "tensor") == 0)
			strategy = ST_TENSOR;
		else if (st && strcmp(st, "block") == 0 &&
			 block_of(gfs_json_get(w, "block_structure"), &bm, &bn))
			strategy = ST_BLOCK;
		else
			return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: quantization_config: group %s: weight strategy \"%.32s\" is not supported (channel, tensor, block with block_structure)",
					q->path, g->string ? g->string : "?", st ? st : "?");
		if (seen && (strategy != q->strategy || bm != q->bm || bn != q->bn))
			return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: quantization_config: config_groups with different weight strategies",
					q->path);
		seen = true;
		q->strategy = strategy;
		q->bm = bm;
		q->bn = bn;
	}
	if (!seen)
		return gfs_fail(GFS_ERR_FORMAT, "%s: quantization_config: no config_groups", q->path);
	return GFS_OK;
}

/* load_qcfg(): the quantization_config of l's config.json. */
static gfs_err load_qcfg(const gfs_layout *l, qcfg *q)
{
	const char *dir = l->root_dir ? l->root_dir : l->base_dir;
	const cJSON *qc;
	const char *qm;
	bool bad = false;
	char *text = NULL;
	size_t len;
	gfs_err err;

	q->path = gfs_path_join(dir, "config.json");
	if (!q->path)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	err = gfs_read_text(q->path, CONFIG_MAX, &text, &len);
	if (!err)
		err = gfs_json_parse(text, len, q->path, &q->root);
	free(text);
	if (err)
		return gfs_fail_prefix(err, "-o dequant needs the checkpoint's config.json");
	qc = gfs_json_get(q->root, "quantization_config");
	if (!cJSON_IsObject(qc))
		return gfs_fail(GFS_ERR_FORMAT, "%s: no quantization_config: -o dequant needs an FP8-quantized checkpoint",
				q->path);
	qm = str_of(qc, "quant_method", &bad);
	if (qm && strcmp(qm, "fp8") == 0)
		return parse_fp8(q, qc);
	if (qm && strcmp(qm, "compressed-tensors") == 0)
		return parse_ct(q, qc);
	return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: quantization_config: quant_method \"%.32s\" is not supported (fp8, compressed-tensors)",
			q->path, qm ? qm : "?");
}

/* ignored(): module is in q's ignore list (a name, or a "re:" pattern matching all of it). */
static bool ignored(const qcfg *q, const char *module)
{
	const cJSON *v;

	if (!cJSON_IsArray(q->ignore))
		return false;
	cJSON_ArrayForEach(v, q->ignore) {
		const char *s = cJSON_IsString(v) ? v->valuestring : NULL;
		regex_t re;
		regmatch_t m;
		bool hit;

		if (!s)
			continue;
		if (strncmp(s, "re:", 3) != 0) {
			if (strcmp(s, module) == 0)
				return true;
			continue;
		}
		if (regcomp(&re, s + 3, REG_EXTENDED) != 0)
			continue;
		hit = regexec(&re, module, 1, &m, 0) == 0 && m.rm_so == 0 &&
		      module[m.rm_eo] == '\0';
		regfree(&re);
		if (hit)
			return true;
	}
	return false;
}

/* ends(): s ends with suffix; *stem its length without it. */
static bool ends(const char *s, const char *suffix, size_t *stem)
{
	const size_t n = strlen(s), k = strlen(suffix);

	if (n < k || strcmp(s + n - k, suffix) != 0)
		return false;
	if (stem)
		*stem = n - k;
	return true;
}

/* file_of(): the source file holding t's first bytes (for messages). */
static const char *file_of(const gfs_layout *l, const gfs_tensor *t)
{
	for (size_t p = 0; p < t->npieces; p++) {
		const gfs_piece pc = gfs_tensor_piece(t, p);

		if (pc.kind != GFS_PIECE_ZERO)
			return l->sources[pc.src].abspath;
	}
	return l->root_dir ? l->root_dir : l->base_dir;
}

/* is_activation(): an activation or KV-cache quantization parameter (left out). */
static bool is_activation(const char *name)
{
	static const char *const sfx[] = { ".input_scale", ".output_scale", ".k_scale",
					   ".v_scale", ".input_zero_point", "_activation_scale" };

	for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++)
		if (ends(name, sfx[i], NULL))
			return true;
	return false;
}

typedef struct dqb {
	const gfs_layout *base;
	const qcfg *q;
	gfs_layout *out;
	gfs_dtype odt;
	uint32_t *remap;
} dqb;

/* add_input(): input copy of base tensor t; *ii its index. */
static gfs_err add_input(dqb *b, const gfs_tensor *t, int64_t *ii)
{
	size_t k;
	gfs_err err = gfs_layout_add_input(b->out, t->name, t->dtype, t->ndim, t->shape, &k);

	if (!err)
		err = gfs_layout_copy_pieces(b->out->inputs, k, t, b->remap);
	*ii = (int64_t)k;
	return err;
}

/* shape_str(): t's shape as "[a, b, c]" into buf. */
static const char *shape_str(const gfs_tensor *t, char *buf, size_t n)
{
	size_t o = (size_t)snprintf(buf, n, "[");

	for (uint32_t d = 0; d < t->ndim && o < n; d++)
		o += (size_t)snprintf(buf + o, n - o, "%s%llu", d ? ", " : "",
				      (unsigned long long)t->shape[d]);
	if (o < n)
		snprintf(buf + o, n - o, "]");
	return buf;
}

/*
 * add_dequant(): the computed tensor for FP8 weight W with its scale: the
 * first stem bytes of W's name followed by sfx, after the checks of fp8.h.
 */
static gfs_err add_dequant(dqb *b, const gfs_tensor *W, size_t stem, const char *sfx)
{
	const gfs_layout *l = b->base;
	const qcfg *q = b->q;
	gfs_compute c = { .op = GFS_OP_DEQUANT, .in = GFS_OPIN_NONE };
	const size_t sl = strlen(sfx);
	char *sname = malloc(stem + sl + 1);
	char ws[96], ss[96];
	const gfs_tensor *S;
	int64_t si;
	uint64_t M, N, gm, gn;
	size_t k;
	gfs_err err;

	if (!sname)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	memcpy(sname, W->name, stem);
	memcpy(sname + stem, sfx, sl + 1);
	si = gfs_layout_find(l, sname);
	if (si < 0) {
		err = gfs_fail(GFS_ERR_FORMAT, "%s: FP8 weight %s has no scale %s", file_of(l, W),
			       W->name, sname);
		free(sname);
		return err;
	}
	free(sname);
	S = gfs_layout_target(l, (size_t)si);
	if (W->dtype != q->wdt)
		return gfs_fail(GFS_ERR_FORMAT, "%s: weight %s is %s, but %s says %s", file_of(l, W),
				W->name, gfs_dtype_st_name(W->dtype), q->path,
				gfs_dtype_st_name(q->wdt));
	if (S->dtype != GFS_DT_F32 && S->dtype != GFS_DT_BF16 && S->dtype != GFS_DT_F8_E8M0)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: scale %s is %s: not supported (F32, BF16, F8_E8M0)",
				file_of(l, S), S->name, gfs_dtype_st_name(S->dtype));
	if (W->ndim < 2)
		return gfs_fail(GFS_ERR_FORMAT, "%s: FP8 weight %s is %u-D (2-D, or stacked 3-D experts)",
				file_of(l, W), W->name, W->ndim);
	M = W->shape[W->ndim - 2];
	N = W->shape[W->ndim - 1];
	switch (q->strategy) {
	case ST_BLOCK:
		c.block[0] = q->bm;
		c.block[1] = q->bn;
		break;
	case ST_CHANNEL:
		c.block[0] = 1;
		c.block[1] = N > UINT32_MAX ? UINT32_MAX : N ? (uint32_t)N : 1;
		break;
	default:
		c.block[0] = M > UINT32_MAX ? UINT32_MAX : M ? (uint32_t)M : 1;
		c.block[1] = N > UINT32_MAX ? UINT32_MAX : N ? (uint32_t)N : 1;
	}
	gm = M / c.block[0] + (M % c.block[0] != 0);
	gn = N / c.block[1] + (N % c.block[1] != 0);
	{
		bool ok;

		if (S->ndim == W->ndim) {
			ok = S->shape[S->ndim - 2] == gm && S->shape[S->ndim - 1] == gn &&
			     memcmp(S->shape, W->shape, (W->ndim - 2) * sizeof(W->shape[0])) == 0;
		} else {
			ok = S->ndim <= 1 && S->numel == 1 && W->ndim == 2 && gm == 1 && gn == 1;
		}
		if (!ok) {
			if (q->strategy == ST_BLOCK)
				return gfs_fail(GFS_ERR_FORMAT,
						"%s: scale %s %s is not the block grid of weight %s %s: ceil(%llu/%u) x ceil(%llu/%u) = [%llu, %llu] for block size [%u, %u] (%s)",
						file_of(l, S), S->name, shape_str(S, ss, sizeof(ss)), W->name,
						shape_str(W, ws, sizeof(ws)), (unsigned long long)M, q->bm,
						(unsigned long long)N, q->bn, (unsigned long long)gm,
						(unsigned long long)gn, q->bm, q->bn, q->path);
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: scale %s %s does not fit weight %s %s: per-%s scale expected",
					file_of(l, S), S->name, shape_str(S, ss, sizeof(ss)), W->name,
					shape_str(W, ws, sizeof(ws)),
					q->strategy == ST_CHANNEL ? "channel [M, 1]" : "tensor (0-d or [1])");
		}
	}
	err = add_input(b, W, &c.in[GFS_OPIN_W]);
	if (!err)
		err = add_input(b, S, &c.in[GFS_OPIN_S]);
	if (!err)
		err = gfs_layout_add_tensor(b->out, W->name, b->odt, W->ndim, W->shape, &k);
	if (!err)
		err = gfs_layout_set_compute(b->out, k, &c);
	return err;
}

/* add_entry(): base entry i into the dequantized model (or left out). */
static gfs_err add_entry(dqb *b, size_t i)
{
	const gfs_layout *l = b->base;
	const gfs_tensor *e = &l->tensors[i];
	const gfs_tensor *t = gfs_layout_target(l, i);
	size_t stem, k;
	gfs_err err;

	if (is_activation(e->name))
		return GFS_OK;
	if (ends(e->name, ".weight_zero_point", NULL))
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: %s: asymmetric quantization (a zero point) is not supported",
				file_of(l, t), e->name);
	if (!b->q->ct && ends(e->name, "_scale_inv", &stem) && !ends(e->name, ".weight_scale_inv", NULL)) {
		/* the scale of stacked experts X (X_scale_inv) is taken with X */
		char *wname = gfs_strndup(e->name, stem);
		const int64_t wi = wname ? gfs_layout_find(l, wname) : -1;

		free(wname);
		if (wi >= 0 && gfs_dtype_is_fp8(gfs_layout_target(l, (size_t)wi)->dtype))
			return GFS_OK;
	}
	if (ends(e->name, b->q->suffix, &stem) && stem > 0 && e->name[stem - 1] == '.') {
		char *wname = malloc(stem + sizeof("weight"));
		int64_t wi;

		if (!wname)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		memcpy(wname, e->name, stem);
		memcpy(wname + stem, "weight", sizeof("weight"));
		wi = gfs_layout_find(l, wname);
		free(wname);
		if (wi < 0 || !gfs_dtype_is_fp8(gfs_layout_target(l, (size_t)wi)->dtype))
			return gfs_fail(GFS_ERR_FORMAT, "%s: scale %s has no FP8 weight %.*sweight",
					file_of(l, t), e->name, (int)stem, e->name);
		return GFS_OK;
	}
	if (t->comp)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: already a computed tensor", e->name);
	if (e->alias_of >= 0)
		return gfs_layout_add_alias(b->out, e->name, t->name);
	if (t->dtype == GFS_DT_F8_E4M3 || t->dtype == GFS_DT_F8_E5M2) {
		if (!ends(t->name, ".weight", &stem)) {
			if (t->ndim == 3 && !b->q->ct) /* stacked experts X [E, M, N], X_scale_inv */
				return add_dequant(b, t, strlen(t->name), "_scale_inv");
			return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s is %s but no quantized weight (X.weight, or stacked experts X [E, M, N] with X_scale_inv)",
					file_of(l, t), t->name, gfs_dtype_st_name(t->dtype));
		}
		if (b->q->ct) {
			char *mod = gfs_strndup(t->name, stem);
			const bool ign = mod && ignored(b->q, mod);

			free(mod);
			if (!mod)
				return gfs_fail(GFS_ERR_NOMEM, "out of memory");
			if (ign)
				return gfs_fail(GFS_ERR_FORMAT, "%s: weight %s is FP8, but %s ignores its module",
						file_of(l, t), t->name, b->q->path);
		}
		return add_dequant(b, t, stem + 1, b->q->suffix);
	}
	err = gfs_layout_add_tensor(b->out, e->name, t->dtype, t->ndim, t->shape, &k);
	return err ? err : gfs_layout_copy_pieces(b->out, k, t, b->remap);
}

/* build(): b->out from b->base. */
static gfs_err build(dqb *b)
{
	const gfs_layout *l = b->base;
	char info[1024];
	gfs_err err = gfs_layout_new("dequant", l->base_dir, &b->out);

	if (!err && l->root_dir)
		err = gfs_layout_set_root(b->out, l->root_dir);
	if (!err) {
		snprintf(info, sizeof(info), "%s, FP8 dequantized to %s", l->info ? l->info : l->format,
			 gfs_dtype_name(b->odt));
		err = gfs_layout_set_info(b->out, info);
	}
	if (!err && !(b->remap = gfs_calloc(l->nsources + 1, sizeof(*b->remap))))
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < l->nsources && !err; i++)
		err = gfs_layout_add_source(b->out, l->sources[i].abspath, l->sources[i].size,
					    &b->remap[i]);
	for (size_t i = 0; i < l->nrecords && !err; i++) {
		gfs_record r = l->records[i];

		r.src = b->remap[r.src];
		err = gfs_layout_add_record(b->out, &r, l->records[i].name);
	}
	for (size_t i = 0; i < l->ntensors && !err; i++)
		err = add_entry(b, i);
	if (!err)
		err = gfs_layout_finish(b->out, b->q->path);
	return err;
}

gfs_err gfs_fp8_dequant(const gfs_layout *base, gfs_dtype out, gfs_layout **res)
{
	qcfg q = { 0 };
	dqb b = { .base = base, .q = &q, .odt = out };
	gfs_err err;

	assert(base->finished);
	assert(out == GFS_DT_F32 || out == GFS_DT_F16 || out == GFS_DT_BF16);
	err = load_qcfg(base, &q);
	if (!err)
		err = build(&b);
	free(b.remap);
	cJSON_Delete(q.root);
	free(q.path);
	if (err) {
		gfs_layout_free(b.out);
		return err;
	}
	*res = b.out;
	return GFS_OK;
}

/* set_str(): root[key] = s (replaced or added); false when out of memory. */
static bool set_str(cJSON *root, const char *key, const char *s)
{
	cJSON *v = cJSON_CreateString(s);

	if (v && (cJSON_GetObjectItemCaseSensitive(root, key)
			  ? cJSON_ReplaceItemInObjectCaseSensitive(root, key, v)
			  : cJSON_AddItemToObject(root, key, v)))
		return true;
	cJSON_Delete(v);
	return false;
}

gfs_err gfs_fp8_config(const gfs_layout *l, const char *text, gfs_dtype out, char **res)
{
	char *path = NULL, *own = NULL;
	cJSON *root = NULL;
	size_t len = text ? strlen(text) : 0;
	gfs_err err = GFS_OK;

	*res = NULL;
	if (!text) {
		if (!l->root_dir)
			return GFS_OK;
		path = gfs_path_join(l->root_dir, "config.json");
		if (!path)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		err = gfs_read_text(path, CONFIG_MAX, &own, &len);
		text = own;
		if (err == GFS_ERR_NOTFOUND) {
			free(path);
			return GFS_OK;
		}
	}
	if (!err)
		err = gfs_json_parse(text, len, path ? path : "config.json", &root);
	if (!err && !cJSON_IsObject(root))
		err = gfs_fail(GFS_ERR_FORMAT, "%s: not a JSON object", path ? path : "config.json");
	if (!err) {
		cJSON_DeleteItemFromObjectCaseSensitive(root, "quantization_config");
		if ((cJSON_GetObjectItemCaseSensitive(root, "torch_dtype") &&
		     !set_str(root, "torch_dtype", gfs_dtype_name(out))) ||
		    !set_str(root, "dtype", gfs_dtype_name(out)) || !(*res = cJSON_Print(root)))
			err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	cJSON_Delete(root);
	free(own);
	free(path);
	return err;
}

gfs_err gfs_fp8_check_dtype(const gfs_layout *l, gfs_dtype want)
{
	const char *sn = want == GFS_DT_F32 ? "fp32" : want == GFS_DT_F16 ? "fp16" : "bf16";

	if (want == GFS_DT_INVALID)
		return GFS_OK;
	for (size_t i = 0; i < l->ntensors; i++) {
		const gfs_tensor *t = &l->tensors[i];

		if (t->alias_of < 0 && gfs_dtype_is_fp8(t->dtype))
			return gfs_fail(GFS_ERR_UNSUPPORTED,
					"tensor %s is %s: FP8 is not converted to %s (dequantize the model instead: -o dequant=%s, --dequant %s)",
					t->name, gfs_dtype_st_name(t->dtype), gfs_dtype_name(want), sn, sn);
	}
	return GFS_OK;
}
