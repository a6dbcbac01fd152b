/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — `gatherfs-inspect diff A B`: the tensors of two checkpoints
 * compared by name, value by value, in one streaming pass over both.
 */
#include "config.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/cli/diff.h"

typedef enum dstatus { D_EQUAL, D_CLOSE, D_DIFFERS, D_ONLY_A, D_ONLY_B, D_MISMATCH, D_N } dstatus;

static const char *const status_name[D_N] = { "equal", "close", "differs",
					      "only_a", "only_b", "mismatch" };

/* One row: a tensor of A and/or B. */
typedef struct drow {
	int64_t ia, ib; /* entries, -1 where absent */
	dstatus st;
	gfs_tdiff d;
} drow;

typedef struct dctx {
	const gfs_rside *a, *b;
	const gfs_report_opts *o;
	drow *rows;
	size_t *jobs; /* the rows to compare */
} dctx;

static bool same_shape(const gfs_tensor *x, const gfs_tensor *y)
{
	if (x->ndim != y->ndim)
		return false;
	for (uint32_t d = 0; d < x->ndim; d++)
		if (x->shape[d] != y->shape[d])
			return false;
	return true;
}

static gfs_err compare_one(void *ctx, size_t k, uint64_t *bytes)
{
	dctx *c = ctx;
	drow *r = &c->rows[c->jobs[k]];
	const gfs_err err = gfs_reduce_diff(c->a, (size_t)r->ia, c->b, (size_t)r->ib, c->o->atol,
					    c->o->rtol, &r->d);

	*bytes = gfs_tensor_out_nbytes(c->a->l, (size_t)r->ia, c->a->want) +
		 gfs_tensor_out_nbytes(c->b->l, (size_t)r->ib, c->b->want);
	if (!err)
		r->st = r->d.ndiff == 0 ? D_EQUAL : r->d.nfar == 0 ? D_CLOSE : D_DIFFERS;
	return err;
}

static const gfs_tensor *tensor_of(const gfs_rside *x, int64_t i)
{
	return i < 0 ? NULL : &x->l->tensors[i];
}

static const char *dtype_of(const gfs_rside *x, int64_t i)
{
	return i < 0 ? NULL : gfs_dtype_name(gfs_dtype_out(gfs_layout_target(x->l, (size_t)i)->dtype,
							    x->want));
}

static double rel_change(const drow *r)
{
	if (r->st != D_EQUAL && r->st != D_CLOSE && r->st != D_DIFFERS)
		return NAN;
	if (r->d.sq_a == 0)
		return r->d.sq_diff == 0 ? 0 : INFINITY;
	return sqrt(r->d.sq_diff) / sqrt(r->d.sq_a);
}

static void print_json(const dctx *c, const drow *r)
{
	const bool cmp = r->st <= D_DIFFERS;
	const gfs_tensor *ta = tensor_of(c->a, r->ia), *tb = tensor_of(c->b, r->ib);
	const char *da = dtype_of(c->a, r->ia), *db = dtype_of(c->b, r->ib);

	fputs("{\"name\":", stdout);
	gfs_jl_str(stdout, (ta ? ta : tb)->name);
	printf(",\"status\":\"%s\",\"dtype_a\":", status_name[r->st]);
	da ? gfs_jl_str(stdout, da) : (void)fputs("null", stdout);
	fputs(",\"dtype_b\":", stdout);
	db ? gfs_jl_str(stdout, db) : (void)fputs("null", stdout);
	fputs(",\"shape_a\":", stdout);
	gfs_jl_shape(stdout, ta);
	fputs(",\"shape_b\":", stdout);
	gfs_jl_shape(stdout, tb);
	if (!cmp) {
		printf(",\"numel\":null,\"ndiff\":null,\"max_abs\":null,\"max_rel\":null,"
		       "\"mean_abs\":null,\"cosine\":null,\"nan_a\":null,\"nan_b\":null,"
		       "\"inf_a\":null,\"inf_b\":null}\n");
		return;
	}
	printf(",\"numel\":%" PRIu64 ",\"ndiff\":%" PRIu64 ",\"max_abs\":", r->d.numel, r->d.ndiff);
	gfs_jl_num(stdout, r->d.max_abs);
	fputs(",\"max_rel\":", stdout);
	gfs_jl_num(stdout, r->d.max_rel);
	fputs(",\"mean_abs\":", stdout);
	gfs_jl_num(stdout, r->d.mean_abs);
	fputs(",\"cosine\":", stdout);
	gfs_jl_num(stdout, r->d.cosine);
	printf(",\"nan_a\":%" PRIu64 ",\"nan_b\":%" PRIu64 ",\"inf_a\":%" PRIu64
	       ",\"inf_b\":%" PRIu64 "}\n", r->d.nan_a, r->d.nan_b, r->d.inf_a, r->d.inf_b);
}

static void print_row(const dctx *c, const drow *r)
{
	const gfs_tensor *ta = tensor_of(c->a, r->ia), *tb = tensor_of(c->b, r->ib);
	char sh[160], n1[32], n2[32], n3[32];

	if (r->st == D_MISMATCH) {
		char sb[80];

		gfs_fmt_shape(ta, sh, 80);
		gfs_fmt_shape(tb, sb, sizeof(sb));
		printf("%-8s  %-48s  shape %s vs %s\n", status_name[r->st], ta->name, sh, sb);
		return;
	}
	if (r->st == D_ONLY_A || r->st == D_ONLY_B) {
		const gfs_tensor *t = ta ? ta : tb;

		gfs_fmt_shape(t, sh, sizeof(sh));
		printf("%-8s  %-48s  %s %s\n", status_name[r->st], t->name,
		       dtype_of(ta ? c->a : c->b, ta ? r->ia : r->ib), sh);
		return;
	}
	printf("%-8s  %-48s %12" PRIu64 " %12" PRIu64 " %12s %12s %12s %10.7f", status_name[r->st],
	       ta->name, r->d.numel, r->d.ndiff, gfs_fmt_num(r->d.max_abs, n1, sizeof(n1)),
	       gfs_fmt_num(r->d.max_rel, n2, sizeof(n2)), gfs_fmt_num(r->d.mean_abs, n3, sizeof(n3)),
	       r->d.cosine);
	if (r->d.nan_a || r->d.nan_b || r->d.inf_a || r->d.inf_b)
		printf("  nan %" PRIu64 "/%" PRIu64 " inf %" PRIu64 "/%" PRIu64, r->d.nan_a,
		       r->d.nan_b, r->d.inf_a, r->d.inf_b);
	putchar('\n');
}

/* worse(): r is a worse result than w (status first, then relative change). */
static bool worse(const drow *r, const drow *w)
{
	static const int rank[D_N] = { 0, 1, 4, 3, 3, 2 };

	if (!w)
		return r->st != D_EQUAL;
	if (rank[r->st] != rank[w->st])
		return rank[r->st] > rank[w->st];
	return r->st == D_DIFFERS || r->st == D_CLOSE ? rel_change(r) > rel_change(w) : false;
}

static int write_html(const dctx *c, const drow *rows, size_t n, const size_t *count)
{
	FILE *f = gfs_html_open(c->o->html, "gatherfs-inspect diff");
	char **labels = NULL;
	double *vals = NULL;
	size_t ng = 0;
	long last = -2;

	if (!f)
		return 1;
	fputs("<p>A: ", f);
	gfs_html_str(f, c->a->what);
	fputs("<br>B: ", f);
	gfs_html_str(f, c->b->what);
	fputs("</p>\n<p>", f);
	for (int s = 0; s < D_N; s++)
		fprintf(f, "%s%s %zu", s ? ", " : "", status_name[s], count[s]);
	fputs("</p>\n", f);
	labels = calloc(n ? n : 1, sizeof(*labels));
	vals = calloc(n ? n : 1, sizeof(*vals));
	/* per layer: the largest relative change ||a-b||/||a|| of its tensors */
	for (size_t k = 0; labels && vals && k < n; k++) {
		const drow *r = &rows[k];
		const size_t g = gfs_layer_bar(labels, vals, &ng, &last,
					       tensor_of(r->ia >= 0 ? c->a : c->b,
							 r->ia >= 0 ? r->ia : r->ib)->name);
		const double v = rel_change(r);

		if (!isnan(v) && (v > vals[g] || isinf(v)))
			vals[g] = v;
	}
	gfs_html_chart(f, "Relative change per layer (largest ||a-b||/||a|| of its tensors)",
		       "||a-b|| / ||a||", labels, vals, ng, true);
	fputs("<h2>Tensors</h2>\n<table><tr><th>name</th><th>status</th><th>dtype A</th>"
	      "<th>dtype B</th><th>numel</th><th>ndiff</th><th>max_abs</th><th>max_rel</th>"
	      "<th>||a-b||/||a||</th><th>cosine</th></tr>\n", f);
	for (size_t k = 0; k < n; k++) {
		const drow *r = &rows[k];
		const char *da = dtype_of(c->a, r->ia), *db = dtype_of(c->b, r->ib);

		fprintf(f, "<tr class=\"%s\"><td>", status_name[r->st]);
		gfs_html_str(f, tensor_of(r->ia >= 0 ? c->a : c->b, r->ia >= 0 ? r->ia : r->ib)->name);
		fprintf(f, "</td><td>%s</td><td>%s</td><td>%s</td>", status_name[r->st], da ? da : "-",
			db ? db : "-");
		if (r->st <= D_DIFFERS)
			fprintf(f, "<td>%" PRIu64 "</td><td>%" PRIu64 "</td><td>%.6g</td><td>%.6g</td>"
				"<td>%.6g</td><td>%.9f</td></tr>\n", r->d.numel, r->d.ndiff,
				r->d.max_abs, r->d.max_rel, rel_change(r), r->d.cosine);
		else
			fputs("<td></td><td></td><td></td><td></td><td></td><td></td></tr>\n", f);
	}
	fputs("</table>\n", f);
	for (size_t k = 0; labels && k < ng; k++)
		free(labels[k]);
	free(labels);
	free(vals);
	return gfs_html_close(f, c->o->html);
}

int gfs_cli_diff(const gfs_rside *a, const gfs_rside *b, const gfs_report_opts *o)
{
	const gfs_layout *la = a->l, *lb = b->l;
	drow *rows = calloc(la->ntensors + lb->ntensors + 1, sizeof(*rows));
	size_t *jobs = calloc(la->ntensors + 1, sizeof(*jobs));
	size_t n = 0, njobs = 0, count[D_N] = { 0 };
	uint64_t total = 0;
	dctx c = { .a = a, .b = b, .o = o, .rows = rows, .jobs = jobs };
	const drow *worst = NULL;
	gfs_err err;
	int rc;

	if (!rows || !jobs) {
		free(rows);
		free(jobs);
		fputs("gatherfs-inspect: out of memory\n", stderr);
		return 1;
	}
	/* A's tensors in A's order, then B's own in B's order; an alias on one
	 * side only (a tied head the other side does not store) is no tensor */
	for (size_t i = 0; i < la->ntensors; i++) {
		const int64_t j = gfs_layout_find(lb, la->tensors[i].name);
		drow *r = &rows[n];

		if (j < 0 && la->tensors[i].alias_of >= 0) {
			fprintf(stderr, "gatherfs-inspect: note: %s: in A only, an alias of %s: not compared\n",
				la->tensors[i].name, la->tensors[la->tensors[i].alias_of].name);
			continue;
		}
		n++;
		*r = (drow){ .ia = (int64_t)i, .ib = j };
		if (j < 0)
			r->st = D_ONLY_A;
		else if (!same_shape(&la->tensors[i], &lb->tensors[j]) ||
			 gfs_reduce_values(a, i) != gfs_reduce_values(b, (size_t)j))
			r->st = D_MISMATCH;
		else {
			jobs[njobs++] = n - 1;
			total += gfs_tensor_out_nbytes(la, i, a->want) +
				 gfs_tensor_out_nbytes(lb, (size_t)j, b->want);
		}
	}
	for (size_t j = 0; j < lb->ntensors; j++) {
		if (gfs_layout_find(la, lb->tensors[j].name) >= 0)
			continue;
		if (lb->tensors[j].alias_of >= 0) {
			fprintf(stderr, "gatherfs-inspect: note: %s: in B only, an alias of %s: not compared\n",
				lb->tensors[j].name, lb->tensors[lb->tensors[j].alias_of].name);
			continue;
		}
		rows[n++] = (drow){ .ia = -1, .ib = (int64_t)j, .st = D_ONLY_B };
	}
	err = gfs_report_run(o, njobs, total, compare_one, &c);
	if (err) {
		fprintf(stderr, "gatherfs-inspect: %s\n", gfs_errmsg());
		free(rows);
		free(jobs);
		return 1;
	}
	if (!o->json)
		printf("%-8s  %-48s %12s %12s %12s %12s %12s %10s\n", "STATUS", "NAME", "NUMEL", "NDIFF",
		       "MAX_ABS", "MAX_REL", "MEAN_ABS", "COSINE");
	for (size_t k = 0; k < n; k++) {
		const drow *r = &rows[k];

		count[r->st]++;
		if (worse(r, worst))
			worst = r;
		if (o->json)
			print_json(&c, r);
		else
			print_row(&c, r);
	}
	rc = count[D_DIFFERS] + count[D_ONLY_A] + count[D_ONLY_B] + count[D_MISMATCH] ? 1 : 0;
	if (o->json) {
		fputs("{\"summary\":{", stdout);
		for (int s = 0; s < D_N; s++)
			printf("\"%s\":%zu,", status_name[s], count[s]);
		printf("\"tensors\":%zu,\"worst\":", n);
		if (worst)
			gfs_jl_str(stdout, tensor_of(worst->ia >= 0 ? a : b,
						     worst->ia >= 0 ? worst->ia : worst->ib)->name);
		else
			fputs("null", stdout);
		fputs("}}\n", stdout);
	} else {
		printf("%s: %zu tensors: %zu equal, %zu close, %zu differ, %zu only in A, %zu only in B, "
		       "%zu mismatch", rc ? "DIFFERENT" : "SAME", n, count[D_EQUAL], count[D_CLOSE],
		       count[D_DIFFERS], count[D_ONLY_A], count[D_ONLY_B], count[D_MISMATCH]);
		if (worst)
			printf("; worst: %s (%s)",
			       tensor_of(worst->ia >= 0 ? a : b, worst->ia >= 0 ? worst->ia : worst->ib)->name,
			       status_name[worst->st]);
		putchar('\n');
	}
	if (o->html && write_html(&c, rows, n, count))
		rc = 1;
	free(rows);
	free(jobs);
	return rc;
}
