/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — PEFT LoRA adapters -> the merged model as computed tensors
 * (lora.h).  Names and scales as PEFT v0.20 writes and computes them.
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/util/json.h"
#include "gatherfs/importers/import.h"
#include "gatherfs/importers/import_plain.h"
#include "gatherfs/importers/lora.h"

#define PEFT_PREFIX "base_model.model."
#define CONFIG_MAX ((uint64_t)1 << 24)
#define NAME_MAX_ 4096 /* as the layout's limit on tensor names */

/* What a key is to a LoRA merge. */
enum {
	R_BASE = -1, /* a base tensor (name normalised) */
	R_ORIG = -2, /* modules_to_save's original_module copy: not in the merge */
	R_A = 0,     /* lora_A.weight [r, in] */
	R_B,         /* lora_B.weight [out, r] */
	R_BB,        /* lora_B.bias [out] */
	R_EA,        /* lora_embedding_A [r, num_embeddings] */
	R_EB,        /* lora_embedding_B [dim, r] */
	R_M,         /* lora_magnitude_vector [out] */
	R_COUNT
};

static const char *const role_names[] = {
	"lora_A.weight", "lora_B.weight", "lora_B.bias", "lora_embedding_A",
	"lora_embedding_B", "lora_magnitude_vector",
};

/* The adapter tensors of one targeted module. */
typedef struct lmod {
	char *path;
	const gfs_layout *l[R_COUNT]; /* NULL: absent */
	size_t idx[R_COUNT];
	bool used, bias_used;
} lmod;

typedef struct lcfg {
	cJSON *root;
	const char *path;
	double r, alpha;
	bool rslora, fifo;
	const cJSON *rank_pattern, *alpha_pattern;
} lcfg;

typedef struct lbuild {
	const gfs_lora_opts *o;
	lcfg cfg;
	lmod *mods;
	size_t nmods, cap_mods;
	gfs_layout *out;
	uint32_t *remap_base, *remap_ad; /* source index maps */
} lbuild;

/*
 * classify(): the role of key name and, into norm (NAME_MAX_ + 1 bytes),
 * its merged name (R_BASE) or its module path (LoRA roles).
 */
static gfs_err classify(const char *name, char *norm, int *role)
{
	char buf[NAME_MAX_ + 1];
	char *tok[NAME_MAX_ / 2 + 2];
	size_t n = 0, lo = SIZE_MAX;
	const char *s = strncmp(name, PEFT_PREFIX, strlen(PEFT_PREFIX)) == 0
				? name + strlen(PEFT_PREFIX) : name;

	if (strlen(s) > NAME_MAX_)
		return gfs_fail(GFS_ERR_LIMIT, "%s: name too long", name);
	strcpy(buf, s);
	for (char *p = buf, *save = NULL, *t; (t = strtok_r(p, ".", &save)); p = NULL)
		tok[n++] = t;
	for (size_t k = 0; k < n && lo == SIZE_MAX; k++)
		if (strncmp(tok[k], "lora_", 5) == 0)
			lo = k;
	norm[0] = '\0';
	if (lo != SIZE_MAX) {
		const char *t = tok[lo], *last = tok[n - 1];
		const size_t rest = n - lo - 1;

		if (strcmp(t, "lora_A") == 0 && rest && strcmp(last, "weight") == 0)
			*role = R_A;
		else if (strcmp(t, "lora_B") == 0 && rest && strcmp(last, "weight") == 0)
			*role = R_B;
		else if (strcmp(t, "lora_B") == 0 && rest && strcmp(last, "bias") == 0)
			*role = R_BB;
		else if (strcmp(t, "lora_embedding_A") == 0 && rest <= 1)
			*role = R_EA;
		else if (strcmp(t, "lora_embedding_B") == 0 && rest <= 1)
			*role = R_EB;
		else if (strcmp(t, "lora_magnitude_vector") == 0 && rest <= 2)
			*role = R_M;
		else
			return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: unsupported LoRA tensor", name);
		if (lo == 0 || rest > 2)
			return gfs_fail(GFS_ERR_FORMAT, "%s: not a PEFT LoRA tensor name", name);
		for (size_t k = 0; k < lo; k++) {
			strcat(norm, tok[k]);
			if (k + 1 < lo)
				strcat(norm, ".");
		}
		return GFS_OK;
	}
	*role = R_BASE;
	for (size_t k = 0; k < n; k++) {
		if (strcmp(tok[k], "original_module") == 0) {
			*role = R_ORIG;
			return GFS_OK;
		}
		if (strcmp(tok[k], "base_layer") == 0)
			continue;
		if (strcmp(tok[k], "modules_to_save") == 0) {
			if (n - k - 1 >= 2)
				k++; /* the adapter name */
			continue;
		}
		if (norm[0])
			strcat(norm, ".");
		strcat(norm, tok[k]);
	}
	if (!norm[0])
		return gfs_fail(GFS_ERR_FORMAT, "%s: empty name after PEFT's prefix", name);
	return GFS_OK;
}

size_t gfs_lora_count(const gfs_layout *l)
{
	size_t n = 0;

	for (size_t i = 0; i < l->ntensors; i++) {
		char norm[NAME_MAX_ + 1];
		int role;

		if (classify(l->tensors[i].name, norm, &role) == GFS_OK && role >= 0)
			n++;
	}
	return n;
}

/* ------------------------------------------------------------- the config */

static gfs_err load_config(const char *path, lcfg *c)
{
	struct stat st;
	char *text = NULL;
	const cJSON *v;
	gfs_err err;
	const int fd = open(path, O_RDONLY | O_CLOEXEC);

	memset(c, 0, sizeof(*c));
	c->path = path;
	if (fd < 0)
		return gfs_fail(GFS_ERR_NOTFOUND,
				"%s: cannot open (a LoRA merge needs the adapter's adapter_config.json: lora_alpha is in no tensor)",
				path);
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > CONFIG_MAX) {
		close(fd);
		return gfs_fail(GFS_ERR_FORMAT, "%s: not a regular file of at most 16 MiB", path);
	}
	text = malloc((size_t)st.st_size + 1);
	err = text ? gfs_pread_full(fd, text, (size_t)st.st_size, 0, path)
		   : gfs_fail(GFS_ERR_NOMEM, "out of memory");
	close(fd);
	if (!err)
		err = gfs_json_parse(text, (size_t)st.st_size, path, &c->root);
	free(text);
	if (err)
		return err;
	v = gfs_json_get(c->root, "peft_type");
	if (!cJSON_IsString(v) || strcmp(v->valuestring, "LORA") != 0)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: peft_type is %s%s%s, not \"LORA\"", path,
				cJSON_IsString(v) ? "\"" : "", cJSON_IsString(v) ? v->valuestring : "missing",
				cJSON_IsString(v) ? "\"" : "");
	v = gfs_json_get(c->root, "r");
	if (!cJSON_IsNumber(v) || !(v->valuedouble >= 1) || v->valuedouble != floor(v->valuedouble))
		return gfs_fail(GFS_ERR_FORMAT, "%s: r must be a positive integer", path);
	c->r = v->valuedouble;
	v = gfs_json_get(c->root, "lora_alpha");
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
		return gfs_fail(GFS_ERR_FORMAT, "%s: lora_alpha must be a finite number", path);
	c->alpha = v->valuedouble;
	c->rslora = cJSON_IsTrue(gfs_json_get(c->root, "use_rslora"));
	c->fifo = cJSON_IsTrue(gfs_json_get(c->root, "fan_in_fan_out"));
	c->rank_pattern = gfs_json_get(c->root, "rank_pattern");
	c->alpha_pattern = gfs_json_get(c->root, "alpha_pattern");
	if (c->rank_pattern && !cJSON_IsObject(c->rank_pattern) && !cJSON_IsNull(c->rank_pattern))
		return gfs_fail(GFS_ERR_FORMAT, "%s: rank_pattern must be an object", path);
	if (c->alpha_pattern && !cJSON_IsObject(c->alpha_pattern) && !cJSON_IsNull(c->alpha_pattern))
		return gfs_fail(GFS_ERR_FORMAT, "%s: alpha_pattern must be an object", path);
	return GFS_OK;
}

/*
 * pattern_value(): PEFT's get_pattern_key: the value of the first key k of
 * pattern with module matching (.*\.)?(k)$ (Python re.match: anchored at
 * the start).  false if none matches.
 */
static gfs_err pattern_value(const lcfg *c, const cJSON *pattern, const char *module,
			     double *val, bool *found)
{
	const cJSON *e;

	*found = false;
	if (!cJSON_IsObject(pattern))
		return GFS_OK;
	cJSON_ArrayForEach(e, pattern) {
		const size_t n = strlen(e->string) + 16;
		char *re = malloc(n);
		regex_t rx;
		int rc;

		if (!re)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		snprintf(re, n, "^(.*\\.)?(%s)$", e->string);
		rc = regcomp(&rx, re, REG_EXTENDED | REG_NOSUB);
		free(re);
		if (rc != 0)
			return gfs_fail(GFS_ERR_FORMAT, "%s: pattern '%s' is not a regular expression gatherfs reads",
					c->path, e->string);
		rc = regexec(&rx, module, 0, NULL, 0);
		regfree(&rx);
		if (rc == 0) {
			if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble))
				return gfs_fail(GFS_ERR_FORMAT, "%s: pattern '%s': not a finite number",
						c->path, e->string);
			*val = e->valuedouble;
			*found = true;
			return GFS_OK;
		}
	}
	return GFS_OK;
}

/* module_scale(): s for module, checking r against the rank in the shapes. */
static gfs_err module_scale(const lcfg *c, const char *module, uint64_t r_shape, double *s)
{
	double r = c->r, alpha = c->alpha;
	bool found;
	gfs_err err = pattern_value(c, c->rank_pattern, module, &r, &found);

	if (!err)
		err = pattern_value(c, c->alpha_pattern, module, &alpha, &found);
	if (err)
		return err;
	if (r <= 0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: r = %g", c->path, module, r);
	if (r != (double)r_shape)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: %s: r = %g in the config, but its LoRA tensors have rank %llu",
				c->path, module, r, (unsigned long long)r_shape);
	*s = c->rslora ? alpha / sqrt(r) : alpha / r;
	if (!isfinite(*s) || (*s == 0 && alpha != 0))
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: the scale lora_alpha/%s = %g is not finite",
				c->path, module, c->rslora ? "sqrt(r)" : "r", *s);
	return GFS_OK;
}

/* ---------------------------------------------------------------- modules */

static lmod *find_mod(const lbuild *b, const char *path)
{
	for (size_t i = 0; i < b->nmods; i++)
		if (strcmp(b->mods[i].path, path) == 0)
			return &b->mods[i];
	return NULL;
}

/* collect(): register the LoRA tensors of l. */
static gfs_err collect(lbuild *b, const gfs_layout *l)
{
	for (size_t i = 0; i < l->ntensors; i++) {
		const gfs_tensor *t = &l->tensors[i];
		char norm[NAME_MAX_ + 1];
		int role;
		lmod *m;
		gfs_err err = classify(t->name, norm, &role);

		if (err)
			return err;
		if (role < 0)
			continue;
		if (t->alias_of >= 0)
			return gfs_fail(GFS_ERR_FORMAT, "%s: a LoRA tensor cannot be a tied alias", t->name);
		if (t->numel == 0)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: an empty LoRA tensor (shape [0]: an adapter saved under ZeRO-3 without gathering its parameters)",
					t->name);
		m = find_mod(b, norm);
		if (!m) {
			if (!gfs_grow((void **)&b->mods, &b->cap_mods, b->nmods, sizeof(*m), 16))
				return gfs_fail(GFS_ERR_NOMEM, "out of memory");
			m = &b->mods[b->nmods];
			memset(m, 0, sizeof(*m));
			m->path = gfs_strdup(norm);
			if (!m->path)
				return gfs_fail(GFS_ERR_NOMEM, "out of memory");
			b->nmods++;
		}
		if (m->l[role])
			return gfs_fail(GFS_ERR_FORMAT, "%s: a second %s for module %s (one adapter only)",
					t->name, role_names[role], norm);
		m->l[role] = l;
		m->idx[role] = i;
	}
	for (size_t i = 0; i < b->nmods; i++) {
		const lmod *m = &b->mods[i];
		const bool lin = m->l[R_A] || m->l[R_B], emb = m->l[R_EA] || m->l[R_EB];

		if (lin && emb)
			return gfs_fail(GFS_ERR_FORMAT, "module %s has both lora_A/B and lora_embedding_A/B",
					m->path);
		if ((lin && (!m->l[R_A] || !m->l[R_B])) || (emb && (!m->l[R_EA] || !m->l[R_EB])) ||
		    (!lin && !emb))
			return gfs_fail(GFS_ERR_FORMAT, "module %s: the adapter lacks its %s", m->path,
					!lin && !emb ? "lora_A/lora_B" :
					lin ? (m->l[R_A] ? "lora_B.weight" : "lora_A.weight")
					    : (m->l[R_EA] ? "lora_embedding_B" : "lora_embedding_A"));
	}
	return GFS_OK;
}

/* ---------------------------------------------------------------- output */

static const uint32_t *remap_of(const lbuild *b, const gfs_layout *l, const gfs_layout *base)
{
	return l == base || l == base->inputs ? b->remap_base : b->remap_ad;
}

/* add_input(): input copy of tensor idx of l; *ii its index. */
static gfs_err add_input(lbuild *b, const gfs_layout *l, size_t idx, const gfs_layout *base,
			 int64_t *ii)
{
	const gfs_tensor *t = gfs_layout_target(l, idx);
	size_t k;
	gfs_err err;

	if (t->comp)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: already a computed tensor", t->name);
	err = gfs_layout_add_input(b->out, l->tensors[idx].name, t->dtype, t->ndim, t->shape, &k);
	if (!err)
		err = gfs_layout_copy_pieces(b->out->inputs, k, t, remap_of(b, l, base));
	*ii = (int64_t)k;
	return err;
}

/*
 * add_operands(): the operands of computed tensor t of l (a dequantized FP8
 * weight) as inputs of the output; c: its computation on them.
 */
static gfs_err add_operands(lbuild *b, const gfs_layout *l, const gfs_tensor *t,
			    const gfs_layout *base, gfs_compute *c)
{
	gfs_err err = GFS_OK;

	*c = *t->comp;
	for (int k = 0; k < GFS_OPIN_COUNT && !err; k++)
		if (c->in[k] >= 0)
			err = add_input(b, l->inputs, (size_t)c->in[k], base, &c->in[k]);
	return err;
}

/* add_plain(): output tensor name with the pieces (or computation) of entry idx of l. */
static gfs_err add_plain(lbuild *b, const char *name, const gfs_layout *l, size_t idx,
			 const gfs_layout *base)
{
	const gfs_tensor *t = gfs_layout_target(l, idx);
	gfs_compute c;
	size_t k;
	gfs_err err;

	if (t->comp && t->comp->op != GFS_OP_DEQUANT)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: already a computed tensor", t->name);
	err = gfs_layout_add_tensor(b->out, name, t->dtype, t->ndim, t->shape, &k);
	if (!err && t->comp)
		err = add_operands(b, l, t, base, &c);
	if (!err && t->comp)
		return gfs_layout_set_compute(b->out, k, &c);
	return err ? err : gfs_layout_copy_pieces(b->out, k, t, remap_of(b, l, base));
}

/* add_merged(): output tensor name = module m merged onto W (entry wi of wl). */
static gfs_err add_merged(lbuild *b, const char *name, lmod *m, bool bias, const gfs_layout *wl,
			  size_t wi, const gfs_layout *base)
{
	const gfs_tensor *W = gfs_layout_target(wl, wi);
	const bool emb = m->l[R_EA] != NULL;
	const int ra = emb ? R_EA : R_A, rb = emb ? R_EB : R_B;
	gfs_compute c = { .op = GFS_OP_LORA, .in = GFS_OPIN_NONE };
	const gfs_tensor *A = &m->l[ra]->tensors[m->idx[ra]];
	size_t k;
	gfs_err err;

	if (A->ndim != 2)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s must be 2-D", A->name, role_names[ra]);
	err = module_scale(&b->cfg, m->path, A->shape[0], &c.scale);
	if (!err && W->comp && W->comp->op == GFS_OP_DEQUANT && !bias) {
		/* a dequantized FP8 weight: its FP8 bytes and scale are the weight operand */
		gfs_compute d;

		err = add_operands(b, wl, W, base, &d);
		c.in[GFS_OPIN_W] = d.in[GFS_OPIN_W];
		c.in[GFS_OPIN_S] = d.in[GFS_OPIN_S];
		c.block[0] = d.block[0];
		c.block[1] = d.block[1];
	} else if (!err) {
		err = add_input(b, wl, wi, base, &c.in[GFS_OPIN_W]);
	}
	if (err)
		return err;
	if (bias) {
		c.op = GFS_OP_LORA_BIAS;
		err = add_input(b, m->l[R_BB], m->idx[R_BB], base, &c.in[GFS_OPIN_A]);
	} else {
		if (emb || b->cfg.fifo)
			c.flags |= GFS_OPF_T;
		err = add_input(b, m->l[ra], m->idx[ra], base, &c.in[GFS_OPIN_A]);
		if (!err)
			err = add_input(b, m->l[rb], m->idx[rb], base, &c.in[GFS_OPIN_B]);
		if (!err && m->l[R_M]) {
			c.op = GFS_OP_DORA;
			err = add_input(b, m->l[R_M], m->idx[R_M], base, &c.in[GFS_OPIN_M]);
		}
	}
	if (!err)
		err = gfs_layout_add_tensor(b->out, name, W->dtype, W->ndim, W->shape, &k);
	if (!err)
		err = gfs_layout_set_compute(b->out, k, &c);
	if (bias)
		m->bias_used = true;
	else
		m->used = true;
	return err;
}

/* module_of(): m for merged name norm ending in suffix, else NULL. */
static lmod *module_of(const lbuild *b, const char *norm, const char *suffix)
{
	char path[NAME_MAX_ + 1];
	const size_t n = strlen(norm), sn = strlen(suffix);

	if (n <= sn || strcmp(norm + n - sn, suffix) != 0)
		return NULL;
	memcpy(path, norm, n - sn);
	path[n - sn] = '\0';
	return find_mod(b, path);
}

/*
 * add_sources(): add l's sources to b->out (*remap: l's source index to
 * b->out's) and its checksummed records, remapped: the output's tensors and
 * inputs read them (gfs_layout_finish() keeps those some piece reads).
 */
static gfs_err add_sources(lbuild *b, const gfs_layout *l, uint32_t **remap)
{
	*remap = gfs_calloc(l->nsources + 1, sizeof(**remap));
	if (!*remap)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < l->nsources; i++) {
		const gfs_err err = gfs_layout_add_source(b->out, l->sources[i].abspath,
							  l->sources[i].size, &(*remap)[i]);

		if (err)
			return err;
	}
	for (size_t i = 0; i < l->nrecords; i++) {
		gfs_record r = l->records[i];
		gfs_err err;

		r.src = (*remap)[r.src];
		err = gfs_layout_add_record(b->out, &r, l->records[i].name);
		if (err)
			return err;
	}
	return GFS_OK;
}

/* replacement(): the adapter's own copy of base tensor norm, or -1. */
static int64_t replacement(const gfs_layout *ad, const char *norm)
{
	for (size_t i = 0; ad && i < ad->ntensors; i++) {
		char n2[NAME_MAX_ + 1];
		int role;

		if (classify(ad->tensors[i].name, n2, &role) == GFS_OK && role == R_BASE &&
		    strcmp(n2, norm) == 0)
			return (int64_t)i;
	}
	return -1;
}

static gfs_err build(lbuild *b, const gfs_layout *base, const gfs_layout *ad, bool *untied)
{
	const gfs_layout *emb_l = NULL;
	size_t emb_i = 0;
	bool have_head = false;
	gfs_err err;

	err = gfs_layout_new("lora", base->base_dir, &b->out);
	if (!err && base->root_dir)
		err = gfs_layout_set_root(b->out, base->root_dir);
	if (!err) {
		char info[1024];

		snprintf(info, sizeof(info), "%s, merged with the LoRA adapter of %s",
			 base->info ? base->info : base->format, b->cfg.path);
		err = gfs_layout_set_info(b->out, info);
	}
	if (!err)
		err = add_sources(b, base, &b->remap_base);
	if (!err && ad)
		err = add_sources(b, ad, &b->remap_ad);
	if (!err) {
		err = collect(b, ad ? ad : base);
		if (err && ad)
			err = gfs_fail_prefix(err, "%s", ad->base_dir);
	}
	if (!err && b->nmods == 0)
		err = gfs_fail(GFS_ERR_FORMAT, "%s: the adapter holds no LoRA tensor%s",
			       ad ? ad->base_dir : base->base_dir,
			       ad && ad->ntensors == 0 ? " (an empty adapter file, as HF Trainer's fallback save writes)" : "");
	for (size_t i = 0; i < base->ntensors && !err; i++) {
		const gfs_tensor *t = &base->tensors[i];
		char norm[NAME_MAX_ + 1];
		const gfs_layout *wl = base;
		size_t wi = i;
		int64_t rep;
		int role;
		lmod *m;

		err = classify(t->name, norm, &role);
		if (err || role != R_BASE)
			continue;
		if (strcmp(norm, "lm_head.weight") == 0)
			have_head = true;
		if (t->alias_of >= 0) {
			char tn[NAME_MAX_ + 1];
			int trole;
			const gfs_tensor *tt = &base->tensors[t->alias_of];

			err = classify(tt->name, tn, &trole);
			if (!err && trole == R_BASE && module_of(b, tn, ".weight") && !b->o->tied_peft) {
				err = add_plain(b, norm, base, i, base); /* the unmerged target, untied */
				*untied = true;
			} else if (!err) {
				err = gfs_layout_add_alias(b->out, norm, tn);
			}
			continue;
		}
		rep = ad ? replacement(ad, norm) : -1;
		if (rep >= 0) {
			wl = ad;
			wi = (size_t)rep;
		}
		if ((m = module_of(b, norm, ".weight"))) {
			err = add_merged(b, norm, m, false, wl, wi, base);
			if (m->l[R_EA] && !emb_l) {
				emb_l = wl;
				emb_i = wi;
			}
		} else if ((m = module_of(b, norm, ".bias")) && m->l[R_BB]) {
			err = add_merged(b, norm, m, true, wl, wi, base);
		} else {
			err = add_plain(b, norm, wl, wi, base);
		}
	}
	if (!err && !ad && b->out->ntensors == 0)
		err = gfs_fail(GFS_ERR_NOTFOUND,
			       "%s: the checkpoint holds only the adapter, no base weights (saved with exclude_frozen_parameters, as HF Trainer does): give the base model with -o base=DIR",
			       base->root_dir ? base->root_dir : base->base_dir);
	for (size_t i = 0; i < b->nmods && !err; i++) {
		const lmod *m = &b->mods[i];
		const gfs_layout *al = ad ? ad : base;

		if (!m->used)
			err = gfs_fail(GFS_ERR_FORMAT,
				       "%s: the adapter targets %s, but the base %s has no %s.weight (an adapter for another model?)",
				       al->root_dir ? al->root_dir : al->base_dir, m->path,
				       base->root_dir ? base->root_dir : base->base_dir, m->path);
		else if (m->l[R_BB] && !m->bias_used)
			err = gfs_fail(GFS_ERR_FORMAT,
				       "the adapter has %s.lora_B.bias, but the base has no %s.bias",
				       m->path, m->path);
	}
	if (!err && emb_l && !have_head && b->o->tie_default && !b->o->tied_peft) {
		err = add_plain(b, "lm_head.weight", emb_l, emb_i, base);
		*untied = true;
	}
	if (!err)
		err = gfs_layout_finish(b->out, b->cfg.path);
	return err;
}

gfs_err gfs_lora_merge(const gfs_layout *base, const gfs_layout *adapter,
		       const gfs_lora_opts *o, gfs_layout **out, bool *untied)
{
	lbuild b = { .o = o };
	gfs_err err;

	assert(base->finished && (!adapter || adapter->finished) && o->config);
	*untied = false;
	err = load_config(o->config, &b.cfg);
	if (!err)
		err = build(&b, base, adapter, untied);
	for (size_t i = 0; i < b.nmods; i++)
		free(b.mods[i].path);
	free(b.mods);
	free(b.remap_base);
	free(b.remap_ad);
	cJSON_Delete(b.cfg.root);
	if (err) {
		gfs_layout_free(b.out);
		return err;
	}
	*out = b.out;
	return GFS_OK;
}

/* ------------------------------------------------------------ front ends */

/*
 * tie_default(): config.json of dir says tie_word_embeddings (true when it
 * does not say, as transformers assumes); false without a readable config.
 */
static bool tie_default(const char *dir)
{
	char *path = dir ? gfs_path_join(dir, "config.json") : NULL;
	struct stat st;
	bool tie = false;
	const int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;

	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	    (uint64_t)st.st_size <= CONFIG_MAX) {
		char *text = malloc((size_t)st.st_size + 1);
		cJSON *root = NULL;

		if (text && gfs_pread_full(fd, text, (size_t)st.st_size, 0, path) == GFS_OK &&
		    gfs_json_parse(text, (size_t)st.st_size, path, &root) == GFS_OK) {
			const cJSON *v = gfs_json_get(root, "tie_word_embeddings");

			tie = !v || cJSON_IsTrue(v);
		}
		cJSON_Delete(root);
		free(text);
	}
	if (fd >= 0)
		close(fd);
	free(path);
	return tie;
}

/* format_name(): layout format f (gfs_layout.format) for a message. */
static const char *format_name(const char *f)
{
	static const char *const names[][2] = {
		{ "deepspeed", "DeepSpeed ZeRO" }, { "dcp", "PyTorch DCP" },
		{ "zero3", "gatherfs ZeRO-3" },    { "plain", "plain model (Hugging Face files)" },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(f, names[i][0]) == 0)
			return names[i][1];
	return f;
}

/*
 * no_peft(): fail if checkpoint l (in dir) is no PEFT checkpoint: no
 * adapter_config (its path) and no LoRA tensor.
 */
static gfs_err no_peft(const gfs_layout *l, const char *dir, const char *config)
{
	struct stat st;

	if (stat(config, &st) == 0 || errno != ENOENT || gfs_lora_count(l) > 0)
		return GFS_OK;
	return gfs_fail(GFS_ERR_NOTFOUND,
			"%s: -o merge=lora (--merge lora) needs a PEFT checkpoint (adapter_config.json and adapter weights); this is a %s checkpoint with neither",
			dir, format_name(l->format));
}

/* import_dir(): gfs_import() of path with default options. */
static gfs_err import_dir(const char *path, const char *what, gfs_layout **out)
{
	const gfs_err err = gfs_import(path, NULL, out);

	return err ? gfs_fail_prefix(err, "%s", what) : GFS_OK;
}

gfs_err gfs_lora_apply(const gfs_lora_cli *c, gfs_layout **layout, bool *untied)
{
	gfs_layout *base = NULL, *ad = NULL, *out = NULL;
	gfs_lora_opts o = { 0 };
	char *config = NULL;
	const char *dir;
	gfs_err err = GFS_OK;

	*untied = false;
	if (c->tied && strcmp(c->tied, "peft") != 0 && strcmp(c->tied, "untied") != 0)
		return gfs_fail(GFS_ERR_INVAL, "-o lora_tied=%s: expected peft or untied", c->tied);
	if (c->merge && strcmp(c->merge, "lora") != 0)
		return gfs_fail(GFS_ERR_INVAL, "-o merge=%s: expected lora", c->merge);
	if (c->base && !c->merge)
		return gfs_fail(GFS_ERR_INVAL, "-o base= needs -o merge=lora");
	if (c->lora && c->merge)
		return gfs_fail(GFS_ERR_INVAL, "-o lora= and -o merge=lora exclude each other");
	if (!c->lora && !c->merge)
		return c->tied ? gfs_fail(GFS_ERR_INVAL, "-o lora_tied= needs -o lora= or -o merge=lora")
			       : GFS_OK;
	o.tied_peft = c->tied && strcmp(c->tied, "peft") == 0;
	if (c->lora) {
		base = *layout;
		err = gfs_import_plain_dir(c->lora, NULL, &ad);
		if (err)
			err = gfs_fail_prefix(err, "-o lora");
		config = gfs_path_join(c->lora, "adapter_config.json");
	} else {
		dir = (*layout)->root_dir ? (*layout)->root_dir : (*layout)->base_dir;
		config = gfs_path_join(dir, "adapter_config.json");
		err = config ? no_peft(*layout, dir, config) : GFS_OK;
		if (!err && c->base) {
			ad = *layout;
			err = import_dir(c->base, "-o base", &base);
		} else {
			base = *layout;
		}
	}
	if (!config && !err)
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (!err) {
		dir = base->root_dir ? base->root_dir : base->base_dir;
		o.tie_default = tie_default(dir);
		o.config = config;
		err = gfs_lora_merge(base, ad, &o, &out, untied);
	}
	if (base != *layout)
		gfs_layout_free(base);
	if (ad != *layout)
		gfs_layout_free(ad);
	free(config);
	if (err)
		return err;
	gfs_layout_free(*layout);
	*layout = out;
	return GFS_OK;
}

/* ------------------------------------------------------------ adapter view */

/*
 * file_name(): the adapter-file name of wrapped key name (role from
 * classify(), module or merged name in norm): the adapter name dropped.
 */
static void file_name(const char *name, int role, const char *norm, char *out, size_t n)
{
	const char *pre = strncmp(name, PEFT_PREFIX, strlen(PEFT_PREFIX)) == 0 ? PEFT_PREFIX : "";

	if (role >= 0) {
		snprintf(out, n, "%s%s.%s", pre, norm, role_names[role]);
	} else {
		/* modules_to_save.<adapter>.<param> -> modules_to_save.<param> */
		const char *m = strstr(name, ".modules_to_save.");
		const char *next = m ? strchr(m + strlen(".modules_to_save."), '.') : NULL;

		if (next)
			snprintf(out, n, "%.*s.modules_to_save%s", (int)(m - name), name, next);
		else
			snprintf(out, n, "%s", name);
	}
}

/*
 * is_adapter_file(): l already is an adapter file: only LoRA tensors, named
 * as in a file (no adapter name to strip).
 */
static bool is_adapter_file(const gfs_layout *l)
{
	for (size_t i = 0; i < l->ntensors; i++) {
		char norm[NAME_MAX_ + 1], fname[NAME_MAX_ + 64];
		int role;

		if (classify(l->tensors[i].name, norm, &role) != GFS_OK || role < 0)
			return false;
		file_name(l->tensors[i].name, role, norm, fname, sizeof(fname));
		if (strcmp(fname, l->tensors[i].name) != 0)
			return false;
	}
	return true;
}

gfs_err gfs_lora_adapter(const gfs_layout *l, gfs_layout **out)
{
	lbuild b = { 0 };
	gfs_err err;

	if (gfs_lora_count(l) == 0)
		return gfs_fail(GFS_ERR_NOTFOUND, "%s: no LoRA tensor", l->base_dir);
	err = gfs_layout_new("peft-adapter", l->base_dir, &b.out);
	if (!err && l->root_dir)
		err = gfs_layout_set_root(b.out, l->root_dir);
	if (!err)
		err = add_sources(&b, l, &b.remap_base);
	if (!err)
		err = collect(&b, l);
	for (size_t i = 0; i < l->ntensors && !err; i++) {
		const gfs_tensor *t = &l->tensors[i];
		char norm[NAME_MAX_ + 1], fname[NAME_MAX_ + 64];
		int role;
		bool keep;

		if (i == 0 && is_adapter_file(l)) {
			err = gfs_fail(GFS_ERR_NOTFOUND, "%s: already a PEFT adapter file", l->base_dir);
			break;
		}
		err = classify(t->name, norm, &role);
		if (err)
			break;
		keep = role >= 0 || strstr(t->name, ".modules_to_save.") != NULL;
		if (!keep && role == R_BASE && strstr(t->name, ".base_layer.")) {
			const lmod *m = module_of(&b, norm, ".weight");

			keep = m && m->l[R_EA]; /* PEFT saves a targeted embedding's weight */
		}
		if (!keep || t->alias_of >= 0)
			continue;
		file_name(t->name, role, norm, fname, sizeof(fname));
		err = add_plain(&b, fname, l, i, l);
	}
	if (!err)
		err = gfs_layout_finish(b.out, l->base_dir);
	for (size_t i = 0; i < b.nmods; i++)
		free(b.mods[i].path);
	free(b.mods);
	free(b.remap_base);
	if (err) {
		gfs_layout_free(b.out);
		return err;
	}
	*out = b.out;
	return GFS_OK;
}

gfs_err gfs_lora_saved_note(const gfs_layout *l, char **note)
{
	char *path = l->root_dir ? gfs_path_join(l->root_dir, "adapter_model.safetensors") : NULL;
	gfs_layout *saved = NULL;
	struct stat st;
	size_t empty = 0, cap;

	*note = NULL;
	if (!path || stat(path, &st) != 0 || !S_ISREG(st.st_mode) || gfs_lora_count(l) == 0 ||
	    gfs_import_plain_file(path, NULL, &saved) != GFS_OK) {
		free(path);
		return GFS_OK;
	}
	for (size_t i = 0; i < saved->ntensors; i++)
		empty += saved->tensors[i].numel == 0;
	cap = strlen(path) + 256;
	if ((saved->ntensors == 0 || empty) && !(*note = malloc(cap))) {
		gfs_layout_free(saved);
		free(path);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	if (saved->ntensors == 0)
		snprintf(*note, cap,
			 "%s holds no tensor (%llu bytes: HF Trainer's fallback save); adapter/adapter_model.safetensors has the adapter from the checkpoint",
			 path, (unsigned long long)st.st_size);
	else if (empty)
		snprintf(*note, cap,
			 "%s has %zu of %zu tensors of shape [0] (saved under ZeRO-3 without gathering); adapter/adapter_model.safetensors has the adapter from the checkpoint",
			 path, empty, saved->ntensors);
	gfs_layout_free(saved);
	free(path);
	return GFS_OK;
}
