/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — `gatherfs-inspect check DIR`: the silent failures of
 * checkpoint conversions as named findings: NaN or infinite values, a
 * weight matrix of zeros, two weight matrices with identical bytes, and
 * tensors that disagree with config.json.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gatherfs/cli/check.h"
#include "gatherfs/util/json.h"

#define CONFIG_MAX ((size_t)16 << 20)
/* The config checks follow layers 0 to LAYER_MAX - 1 and experts 0 to EXPERT_MAX - 1. */
#define LAYER_MAX 16384
#define EXPERT_MAX 4096

typedef struct cctx {
	const gfs_rside *x;
	gfs_tstats *st;
	uint8_t (*hash)[32];
	bool *hashed;
} cctx;

/* hashable(): a weight matrix that is its own bytes (no alias). */
static bool hashable(const gfs_layout *l, size_t i)
{
	return l->tensors[i].ndim >= 2 && l->tensors[i].alias_of < 0;
}

static gfs_err check_one(void *ctx, size_t i, uint64_t *bytes)
{
	cctx *c = ctx;
	gfs_err err = gfs_reduce_stats(c->x, i, &c->st[i]);

	*bytes = gfs_tensor_out_nbytes(c->x->l, i, c->x->want);
	/* a matrix of zeros is a zero finding: not compared as identical */
	if (!err && hashable(c->x->l, i) && c->st[i].zeros != c->st[i].numel) {
		err = gfs_reduce_sha256(c->x, i, c->hash[i]);
		c->hashed[i] = !err;
		*bytes *= 2;
	}
	return err;
}

static size_t nfindings;

/* finding(): one finding: its kind, the tensors (n names), a detail line. */
__attribute__((format(printf, 5, 6)))
static void finding(const gfs_report_opts *o, const char *kind, const char *const *names, size_t n,
		    const char *fmt, ...)
{
	char detail[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	nfindings++;
	if (o->json) {
		printf("{\"finding\":\"%s\",\"tensors\":[", kind);
		for (size_t k = 0; k < n; k++) {
			if (k)
				putchar(',');
			gfs_jl_str(stdout, names[k]);
		}
		fputs("],\"detail\":", stdout);
		gfs_jl_str(stdout, detail);
		fputs("}\n", stdout);
		return;
	}
	printf("%-9s %s", kind, detail);
	for (size_t k = 0; k < n; k++)
		printf("%s%s", k ? ", " : ": ", names[k]);
	putchar('\n');
}

/* read_config(): config.json as JSON: the layout's own, or the first file found in dirs. */
static cJSON *read_config(const gfs_layout *l, const char *const *dirs, size_t ndirs)
{
	cJSON *j = NULL;

	for (size_t k = 0; k < l->ntexts; k++)
		if (strcmp(l->texts[k].name, "config.json") == 0) {
			if (gfs_json_parse(l->texts[k].text, strlen(l->texts[k].text), "config.json", &j))
				fprintf(stderr, "gatherfs-inspect: %s\n", gfs_errmsg());
			return j;
		}
	for (size_t d = 0; d < ndirs; d++) {
		char path[4096];
		FILE *f;
		char *text;
		size_t n;

		if (!dirs[d])
			continue;
		snprintf(path, sizeof(path), "%s/config.json", dirs[d]);
		f = fopen(path, "rb");
		if (!f)
			continue;
		text = malloc(CONFIG_MAX);
		n = text ? fread(text, 1, CONFIG_MAX, f) : 0;
		if (text && n < CONFIG_MAX && !ferror(f) &&
		    gfs_json_parse(text, n, path, &j) != GFS_OK)
			fprintf(stderr, "gatherfs-inspect: %s\n", gfs_errmsg());
		else if (text && (n >= CONFIG_MAX || ferror(f)))
			fprintf(stderr, "gatherfs-inspect: %s: unreadable or larger than 16 MiB: not used\n",
				path);
		else if (j)
			fprintf(stderr, "gatherfs-inspect: checking against %s\n", path);
		free(text);
		fclose(f);
		return j;
	}
	return NULL;
}

/* cfg_int(): the first of keys in the config that is a non-negative integer, or -1. */
static long cfg_int(const cJSON *cfg, const char *const *keys)
{
	for (; *keys; keys++) {
		const cJSON *v = gfs_json_get(cfg, *keys);

		if (!v) {
			const cJSON *tc = gfs_json_get(cfg, "text_config");

			v = tc ? gfs_json_get(tc, *keys) : NULL;
		}
		if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 1e9 &&
		    v->valuedouble == (double)(long)v->valuedouble)
			return (long)v->valuedouble;
	}
	return -1;
}

static bool ends_with(const char *s, const char *suffix)
{
	const size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

static bool is_embedding(const char *name)
{
	return ends_with(name, "embed_tokens.weight") || ends_with(name, "wte.weight") ||
	       ends_with(name, "word_embeddings.weight") || strcmp(name, "tok_embeddings.weight") == 0;
}

static bool is_head(const char *name)
{
	return strcmp(name, "lm_head.weight") == 0 || ends_with(name, "output_layer.weight") ||
	       strcmp(name, "embed_out.weight") == 0 || strcmp(name, "output.weight") == 0;
}

/* expert_of(): the expert number in name (".experts.E."), or -1. */
static long expert_of(const char *name)
{
	const char *p = strstr(name, ".experts.");
	char *end;
	long v;

	if (!p || p[9] < '0' || p[9] > '9')
		return -1;
	errno = 0;
	v = strtol(p + 9, &end, 10);
	return !errno && *end == '.' && v < 1000000 ? v : -1;
}

/* A tensor of a layer: its layer and its name after the layer number, expert numbers as '*'. */
typedef struct lsuffix {
	long layer;
	char *suffix;
	const char *name;
} lsuffix;

static int cmp_lsuffix(const void *pa, const void *pb)
{
	const lsuffix *a = pa, *b = pb;
	const int c = strcmp(a->suffix, b->suffix);

	return c ? c : (a->layer > b->layer) - (a->layer < b->layer);
}

/* suffix_of(): name after ".L." (the layer number li), ".experts.N." written ".experts.*.". */
static char *suffix_of(const char *name, long li)
{
	char num[32], *out, *e;
	const char *p;

	snprintf(num, sizeof(num), ".%ld.", li);
	p = strstr(name, num);
	out = strdup(p ? p + strlen(num) : name);
	e = out ? strstr(out, "experts.") : NULL;
	if (e && (e == out || e[-1] == '.') && e[8] >= '0' && e[8] <= '9') {
		char *d = e + 8, *end = d;

		while (*end >= '0' && *end <= '9')
			end++;
		*d = '*';
		memmove(d + 1, end, strlen(end) + 1);
	}
	return out;
}

/*
 * check_layer_tensors(): a tensor that other layers hold and a layer lacks
 * (the config implies every layer alike, unless it says the layers differ:
 * dense and MoE layers mixed, hybrid layer types).
 */
static void check_layer_tensors(const gfs_layout *l, const cJSON *cfg, const char *prefix,
				const bool *seen, size_t cap, const gfs_report_opts *o)
{
	static const char *const mixed[] = { "first_k_dense_replace", "moe_layer_freq",
					     "decoder_sparse_step", "mlp_only_layers", "layer_types",
					     "interleave_moe_layer_step", "moe_layer_start_index",
					     "hybrid_override_pattern", "no_rope_layers", NULL };
	lsuffix *v = calloc(l->ntensors ? l->ntensors : 1, sizeof(*v));
	size_t *mark = calloc(cap + 1, sizeof(*mark)); /* the group (+ 1) that last saw a layer */
	size_t n = 0, nlayers = 0;

	for (const char *const *k = mixed; *k; k++)
		if (gfs_json_get(cfg, *k))
			goto out;
	for (size_t li = 0; li < cap; li++)
		nlayers += seen[li];
	for (size_t i = 0; v && mark && i < l->ntensors; i++) {
		const long li = gfs_layer_of(l->tensors[i].name);
		char *sfx;

		if (li < 0 || (size_t)li >= cap || !(sfx = suffix_of(l->tensors[i].name, li)))
			continue;
		v[n++] = (lsuffix){ .layer = li, .suffix = sfx, .name = l->tensors[i].name };
	}
	qsort(v, n, sizeof(*v), cmp_lsuffix);
	for (size_t a = 0; a < n;) {
		size_t b = a, have = 0;

		while (b < n && strcmp(v[a].suffix, v[b].suffix) == 0) {
			have += mark[v[b].layer] != a + 1;
			mark[v[b].layer] = a + 1;
			b++;
		}
		for (size_t li = 0; have < nlayers && li < cap; li++) {
			char miss[600];
			const char *nm[1] = { miss };

			if (!seen[li] || mark[li] == a + 1)
				continue;
			snprintf(miss, sizeof(miss), "%s%zu.%s", prefix, li, v[a].suffix);
			finding(o, "config", nm, 1, "%zu of %zu layers hold it, layer %zu does not",
				have, nlayers, li);
		}
		a = b;
	}
out:
	for (size_t k = 0; k < n; k++)
		free(v[k].suffix);
	free(v);
	free(mark);
}

static void check_config(const gfs_rside *x, const cJSON *cfg, const gfs_report_opts *o)
{
	static const char *const k_layers[] = { "num_hidden_layers", "n_layer", "num_layers", NULL };
	static const char *const k_experts[] = { "num_local_experts", "num_experts",
						 "n_routed_experts", "moe_num_experts", NULL };
	static const char *const k_vocab[] = { "vocab_size", "padded_vocab_size", NULL };
	static const char *const k_hidden[] = { "hidden_size", "n_embd", "d_model", NULL };
	const gfs_layout *l = x->l;
	const long ne = cfg_int(cfg, k_experts);
	long nl = cfg_int(cfg, k_layers);
	const long vocab = cfg_int(cfg, k_vocab), hidden = cfg_int(cfg, k_hidden);
	long maxl = -1;
	size_t cap;
	char prefix[256] = "";
	bool *seen;
	uint64_t *experts; /* per layer: a bit per expert seen (EXPERT_MAX bits) */
	long *nexp;        /* per layer: how many experts seen */

	for (size_t i = 0; i < l->ntensors; i++) {
		const long li = gfs_layer_of(l->tensors[i].name);

		if (li > maxl)
			maxl = li;
	}
	if (maxl >= LAYER_MAX || nl > LAYER_MAX) {
		fprintf(stderr, "gatherfs-inspect: note: layer numbers up to %ld: layer and expert "
				"checks skipped (at most %d layers)\n", maxl > nl ? maxl : nl, LAYER_MAX);
		maxl = nl = -1;
	}
	cap = (size_t)(maxl > nl ? maxl : nl) + 1;

	seen = calloc(cap + 1, sizeof(*seen));
	nexp = calloc(cap + 1, sizeof(*nexp));
	experts = calloc((cap + 1) * (EXPERT_MAX / 64), sizeof(*experts));
	if (!seen || !nexp || !experts) {
		fputs("gatherfs-inspect: out of memory: config not checked\n", stderr);
		goto out;
	}
	for (size_t i = 0; i < l->ntensors; i++) {
		const char *name = l->tensors[i].name;
		const long li = gfs_layer_of(name), e = expert_of(name);

		if (li < 0 || (size_t)li >= cap)
			continue;
		if (!seen[li] && !prefix[0]) {
			/* the name up to the layer number: "model.layers." */
			char num[32];
			const char *p;

			snprintf(num, sizeof(num), ".%ld.", li);
			p = strstr(name, num);
			if (p && (size_t)(p - name) + 1 < sizeof(prefix))
				snprintf(prefix, sizeof(prefix), "%.*s", (int)(p - name + 1), name);
		}
		seen[li] = true;
		if (e >= 0 && e < EXPERT_MAX) {
			uint64_t *bits = &experts[(size_t)li * (EXPERT_MAX / 64)];

			if (!(bits[e / 64] >> (e % 64) & 1)) {
				bits[e / 64] |= (uint64_t)1 << (e % 64);
				nexp[li]++;
			}
		}
	}
	if (nl >= 0) {
		for (long li = 0; li < nl; li++)
			if (!seen[li]) {
				char miss[300];
				const char *nm[1] = { miss };

				snprintf(miss, sizeof(miss), "%s%ld.", prefix[0] ? prefix : "layers.", li);
				finding(o, "config", nm, 1,
					"num_hidden_layers is %ld but layer %ld has no tensor", nl, li);
			}
		for (long li = nl; li <= maxl; li++)
			if (seen[li]) {
				char extra[300];
				const char *nm[1] = { extra };

				snprintf(extra, sizeof(extra), "%s%ld.", prefix[0] ? prefix : "layers.", li);
				finding(o, "config", nm, 1,
					"num_hidden_layers is %ld but layer %ld has tensors", nl, li);
			}
	}
	for (long li = 0; ne > 0 && li <= maxl; li++) {
		char lname[300];
		const char *nm[1] = { lname };

		if (!nexp[li] || nexp[li] == ne)
			continue;
		snprintf(lname, sizeof(lname), "%s%ld.", prefix[0] ? prefix : "layers.", li);
		finding(o, "config", nm, 1, "the config has %ld experts per MoE layer, layer %ld holds %ld",
			ne, li, nexp[li]);
	}
	check_layer_tensors(l, cfg, prefix[0] ? prefix : "layers.", seen, cap, o);
	for (size_t i = 0; i < l->ntensors; i++) {
		const gfs_tensor *t = &l->tensors[i];
		const char *nm[1] = { t->name };

		if (!is_embedding(t->name) || t->ndim != 2)
			continue;
		if (vocab >= 0 && t->shape[0] < (uint64_t)vocab)
			finding(o, "config", nm, 1, "vocab_size is %ld but the embedding has %" PRIu64
				" rows", vocab, t->shape[0]);
		if (hidden >= 0 && t->shape[1] != (uint64_t)hidden)
			finding(o, "config", nm, 1, "hidden_size is %ld but the embedding has %" PRIu64
				" columns", hidden, t->shape[1]);
	}
out:
	free(seen);
	free(nexp);
	free(experts);
}

/* tied(): the config declares tensors i and j a tied pair (embedding and head). */
static bool tied(const gfs_layout *l, const cJSON *cfg, size_t i, size_t j)
{
	const cJSON *tie = cfg ? gfs_json_get(cfg, "tie_word_embeddings") : NULL;
	const char *a = l->tensors[i].name, *b = l->tensors[j].name;

	/* transformers' default is true */
	if (cJSON_IsFalse(tie))
		return false;
	return (is_embedding(a) && is_head(b)) || (is_embedding(b) && is_head(a));
}

typedef struct hsort {
	size_t i;
	const uint8_t *h;
	gfs_dtype dt;
} hsort;

static int cmp_hsort(const void *pa, const void *pb)
{
	const hsort *a = pa, *b = pb;
	const int c = memcmp(a->h, b->h, 32);

	if (c)
		return c;
	if (a->dt != b->dt)
		return a->dt < b->dt ? -1 : 1;
	return a->i < b->i ? -1 : a->i > b->i;
}

static void check_identical(const cctx *c, const cJSON *cfg, const gfs_report_opts *o)
{
	const gfs_layout *l = c->x->l;
	hsort *v = calloc(l->ntensors ? l->ntensors : 1, sizeof(*v));
	const char **names = calloc(l->ntensors ? l->ntensors : 1, sizeof(*names));
	size_t n = 0;

	if (!v || !names) {
		fputs("gatherfs-inspect: out of memory: identical tensors not checked\n", stderr);
		free(v);
		free(names);
		return;
	}
	for (size_t i = 0; i < l->ntensors; i++)
		if (c->hashed[i])
			v[n++] = (hsort){ .i = i, .h = c->hash[i],
					  .dt = gfs_layout_target(l, i)->dtype };
	qsort(v, n, sizeof(*v), cmp_hsort);
	for (size_t a = 0; a < n;) {
		size_t b = a + 1, m = 0;

		while (b < n && memcmp(v[a].h, v[b].h, 32) == 0 && v[a].dt == v[b].dt)
			b++;
		if (b - a == 2 && tied(l, cfg, v[a].i, v[a + 1].i)) {
			fprintf(stderr, "gatherfs-inspect: note: %s and %s: a tied pair stored twice "
				"(identical bytes, as the config declares)\n",
				l->tensors[v[a].i].name, l->tensors[v[a + 1].i].name);
		} else if (b - a >= 2) {
			for (size_t k = a; k < b; k++)
				names[m++] = l->tensors[v[k].i].name;
			finding(o, "identical", names, m,
				"%zu weight matrices hold identical bytes (%s)", m,
				gfs_dtype_name(v[a].dt));
		}
		a = b;
	}
	free(v);
	free(names);
}

int gfs_cli_check(const gfs_rside *x, const char *config_dir, const gfs_report_opts *o)
{
	const gfs_layout *l = x->l;
	const size_t cap = l->ntensors ? l->ntensors : 1;
	cctx c = { .x = x, .st = calloc(cap, sizeof(*c.st)), .hash = calloc(cap, sizeof(*c.hash)),
		   .hashed = calloc(cap, sizeof(*c.hashed)) };
	char *dcopy = config_dir ? strdup(config_dir) : NULL;
	const char *dirs[3] = { NULL, NULL, NULL };
	uint64_t total = 0;
	cJSON *cfg;
	struct stat stt;
	int rc = 1;

	if (!c.st || !c.hash || !c.hashed || (config_dir && !dcopy)) {
		fputs("gatherfs-inspect: out of memory\n", stderr);
		goto out;
	}
	for (size_t i = 0; i < l->ntensors; i++)
		total += gfs_tensor_out_nbytes(l, i, x->want);
	if (gfs_report_run(o, l->ntensors, total, check_one, &c)) {
		fprintf(stderr, "gatherfs-inspect: %s\n", gfs_errmsg());
		goto out;
	}
	nfindings = 0;
	for (size_t i = 0; i < l->ntensors; i++) {
		const gfs_tensor *t = &l->tensors[i];
		const char *nm[1] = { t->name };

		if (t->alias_of >= 0)
			continue;
		if (c.st[i].nan)
			finding(o, "nan", nm, 1, "%" PRIu64 " NaN of %" PRIu64 " values", c.st[i].nan,
				c.st[i].numel);
		if (c.st[i].inf)
			finding(o, "inf", nm, 1, "%" PRIu64 " infinite of %" PRIu64 " values",
				c.st[i].inf, c.st[i].numel);
		if (t->ndim >= 2 && c.st[i].numel && c.st[i].zeros == c.st[i].numel)
			finding(o, "zero", nm, 1, "a weight matrix of %" PRIu64 " zeros", c.st[i].numel);
	}
	/* config.json: the layout's own, then --hf-config, the checkpoint root, DIR */
	if (dcopy && stat(dcopy, &stt) == 0)
		dirs[0] = S_ISDIR(stt.st_mode) ? dcopy : dirname(dcopy);
	dirs[1] = l->root_dir;
	cfg = read_config(l, dirs, 2);
	check_identical(&c, cfg, o);
	if (cfg)
		check_config(x, cfg, o);
	else
		fprintf(stderr, "gatherfs-inspect: note: no config.json: its checks are skipped\n");
	cJSON_Delete(cfg);
	if (!o->json)
		printf("%s: %zu findings in %zu tensors\n", nfindings ? "FINDINGS" : "OK", nfindings,
		       l->ntensors);
	rc = nfindings ? 1 : 0;
out:
	free(c.st);
	free(c.hash);
	free(c.hashed);
	free(dcopy);
	return rc;
}
