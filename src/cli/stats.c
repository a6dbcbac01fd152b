/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — `gatherfs-inspect stats DIR`: per tensor min, max, mean, std,
 * absmax, l2 and the counts of NaN, infinities and zeros, in fp64.
 */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/cli/stats.h"

typedef struct sctx {
	const gfs_rside *x;
	gfs_tstats *st;
} sctx;

static gfs_err stats_one(void *ctx, size_t i, uint64_t *bytes)
{
	sctx *c = ctx;

	*bytes = gfs_tensor_out_nbytes(c->x->l, i, c->x->want);
	return gfs_reduce_stats(c->x, i, &c->st[i]);
}

static void print_json(const gfs_rside *x, size_t i, const gfs_tstats *s)
{
	const gfs_tensor *t = &x->l->tensors[i];

	fputs("{\"name\":", stdout);
	gfs_jl_str(stdout, t->name);
	printf(",\"dtype\":\"%s\",\"shape\":",
	       gfs_dtype_name(gfs_dtype_out(gfs_layout_target(x->l, i)->dtype, x->want)));
	gfs_jl_shape(stdout, t);
	printf(",\"numel\":%" PRIu64 ",\"min\":", t->numel);
	gfs_jl_num(stdout, s->min);
	fputs(",\"max\":", stdout);
	gfs_jl_num(stdout, s->max);
	fputs(",\"mean\":", stdout);
	gfs_jl_num(stdout, s->mean);
	fputs(",\"std\":", stdout);
	gfs_jl_num(stdout, s->std);
	fputs(",\"absmax\":", stdout);
	gfs_jl_num(stdout, s->absmax);
	fputs(",\"l2\":", stdout);
	gfs_jl_num(stdout, s->l2);
	printf(",\"nan\":%" PRIu64 ",\"inf\":%" PRIu64 ",\"zeros\":%" PRIu64 "}\n", s->nan, s->inf,
	       s->zeros);
}

static void print_row(const gfs_rside *x, size_t i, const gfs_tstats *s)
{
	const gfs_tensor *t = &x->l->tensors[i];
	char b[6][32];

	printf("%-48s %-9s %12s %12s %12s %12s %12s %12s %8" PRIu64 " %8" PRIu64 " %10" PRIu64 "\n",
	       t->name, gfs_dtype_name(gfs_dtype_out(gfs_layout_target(x->l, i)->dtype, x->want)),
	       gfs_fmt_num(s->min, b[0], 32), gfs_fmt_num(s->max, b[1], 32),
	       gfs_fmt_num(s->mean, b[2], 32), gfs_fmt_num(s->std, b[3], 32),
	       gfs_fmt_num(s->absmax, b[4], 32), gfs_fmt_num(s->l2, b[5], 32), s->nan, s->inf,
	       s->zeros);
}

/* write_html(): the per-layer norm chart (the l2 norm of each layer's tensors together) and the table. */
static int write_html(const gfs_rside *x, const gfs_tstats *st, const char *path)
{
	const gfs_layout *l = x->l;
	FILE *f = gfs_html_open(path, "gatherfs-inspect stats");
	char **labels;
	double *vals;
	size_t ng = 0;
	long last = -2;

	if (!f)
		return 1;
	fputs("<p>", f);
	gfs_html_str(f, x->what);
	fputs("</p>\n", f);
	labels = calloc(l->ntensors ? l->ntensors : 1, sizeof(*labels));
	vals = calloc(l->ntensors ? l->ntensors : 1, sizeof(*vals));
	for (size_t i = 0; labels && vals && i < l->ntensors; i++)
		vals[gfs_layer_bar(labels, vals, &ng, &last, l->tensors[i].name)] +=
			st[i].l2 * st[i].l2;
	for (size_t k = 0; k < ng; k++)
		vals[k] = sqrt(vals[k]);
	gfs_html_chart(f, "L2 norm per layer (all its tensors together)", "l2", labels, vals, ng,
		       false);
	fputs("<h2>Tensors</h2>\n<table><tr><th>name</th><th>dtype</th><th>numel</th><th>min</th>"
	      "<th>max</th><th>mean</th><th>std</th><th>absmax</th><th>l2</th><th>nan</th>"
	      "<th>inf</th><th>zeros</th></tr>\n", f);
	for (size_t i = 0; i < l->ntensors; i++) {
		const gfs_tstats *s = &st[i];

		fputs("<tr><td>", f);
		gfs_html_str(f, l->tensors[i].name);
		fprintf(f, "</td><td>%s</td><td>%" PRIu64 "</td><td>%.6g</td><td>%.6g</td><td>%.6g</td>"
			"<td>%.6g</td><td>%.6g</td><td>%.6g</td><td>%" PRIu64 "</td><td>%" PRIu64
			"</td><td>%" PRIu64 "</td></tr>\n",
			gfs_dtype_name(gfs_dtype_out(gfs_layout_target(l, i)->dtype, x->want)),
			l->tensors[i].numel, s->min, s->max, s->mean, s->std, s->absmax, s->l2, s->nan,
			s->inf, s->zeros);
	}
	fputs("</table>\n", f);
	for (size_t k = 0; labels && k < ng; k++)
		free(labels[k]);
	free(labels);
	free(vals);
	return gfs_html_close(f, path);
}

int gfs_cli_stats(const gfs_rside *x, const gfs_report_opts *o)
{
	const gfs_layout *l = x->l;
	gfs_tstats *st = calloc(l->ntensors ? l->ntensors : 1, sizeof(*st));
	sctx c = { .x = x, .st = st };
	uint64_t total = 0;
	int rc = 0;

	if (!st) {
		fputs("gatherfs-inspect: out of memory\n", stderr);
		return 1;
	}
	for (size_t i = 0; i < l->ntensors; i++)
		total += gfs_tensor_out_nbytes(l, i, x->want);
	if (gfs_report_run(o, l->ntensors, total, stats_one, &c)) {
		fprintf(stderr, "gatherfs-inspect: %s\n", gfs_errmsg());
		free(st);
		return 1;
	}
	if (!o->json)
		printf("%-48s %-9s %12s %12s %12s %12s %12s %12s %8s %8s %10s\n", "NAME", "DTYPE", "MIN",
		       "MAX", "MEAN", "STD", "ABSMAX", "L2", "NAN", "INF", "ZEROS");
	for (size_t i = 0; i < l->ntensors; i++) {
		if (o->json)
			print_json(x, i, &st[i]);
		else
			print_row(x, i, &st[i]);
	}
	if (o->html)
		rc = write_html(x, st, o->html);
	free(st);
	return rc;
}
