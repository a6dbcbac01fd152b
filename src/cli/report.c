/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — output helpers of diff, stats and check (see report.h).
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gatherfs/cli/report.h"
#include "gatherfs/util/pfor.h"

void gfs_jl_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (*c == '"' || *c == '\\')
			fprintf(f, "\\%c", *c);
		else if (*c < 0x20 || *c == 0x7f)
			fprintf(f, "\\u%04x", *c);
		else
			fputc(*c, f);
	}
	fputc('"', f);
}

void gfs_jl_num(FILE *f, double v)
{
	if (isnan(v))
		fputs("\"NaN\"", f);
	else if (isinf(v))
		fputs(v > 0 ? "\"Infinity\"" : "\"-Infinity\"", f);
	else
		fprintf(f, "%.17g", v);
}

void gfs_jl_shape(FILE *f, const gfs_tensor *t)
{
	if (!t) {
		fputs("null", f);
		return;
	}
	fputc('[', f);
	for (uint32_t d = 0; d < t->ndim; d++)
		fprintf(f, "%s%" PRIu64, d ? "," : "", t->shape[d]);
	fputc(']', f);
}

void gfs_fmt_shape(const gfs_tensor *t, char *buf, size_t n)
{
	size_t used = (size_t)snprintf(buf, n, "[");

	for (uint32_t d = 0; d < t->ndim && used < n; d++)
		used += (size_t)snprintf(buf + used, n - used, "%s%" PRIu64, d ? ", " : "",
					 t->shape[d]);
	if (used < n)
		snprintf(buf + used, n - used, "]");
}

const char *gfs_fmt_num(double v, char *buf, size_t n)
{
	if (isnan(v))
		return "nan";
	if (isinf(v))
		return v > 0 ? "inf" : "-inf";
	snprintf(buf, n, "%.6g", v);
	return buf;
}

void gfs_html_str(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs("&quot;", f); break;
		default: fputc(*s, f);
		}
	}
}

long gfs_layer_of(const char *name)
{
	static const char *const keys[] = { "layers.", "h.", "blocks.", "layer." };

	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
		const size_t kl = strlen(keys[k]);

		for (const char *p = strstr(name, keys[k]); p; p = strstr(p + 1, keys[k])) {
			char *end;
			long v;

			if (p != name && p[-1] != '.')
				continue;
			if (p[kl] < '0' || p[kl] > '9')
				continue;
			errno = 0;
			v = strtol(p + kl, &end, 10);
			if (!errno && (*end == '.' || *end == '\0') && v >= 0 && v < 1000000)
				return v;
		}
	}
	return -1;
}

size_t gfs_layer_bar(char **labels, double *values, size_t *n, long *last, const char *name)
{
	const long layer = gfs_layer_of(name);

	assert(labels && values && n && last && name);
	if (layer != *last || *n == 0) {
		char label[32];

		if (layer < 0)
			snprintf(label, sizeof(label), "other");
		else
			snprintf(label, sizeof(label), "layer %ld", layer);
		labels[*n] = strdup(label);
		values[(*n)++] = 0;
		*last = layer;
	}
	return *n - 1;
}

FILE *gfs_html_open(const char *path, const char *title)
{
	FILE *f = fopen(path, "w");

	if (!f) {
		fprintf(stderr, "gatherfs-inspect: %s: cannot create: %s\n", path, strerror(errno));
		return NULL;
	}
	fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>", f);
	gfs_html_str(f, title);
	fputs("</title>\n<style>\n"
	      "body{font-family:sans-serif;margin:1.5em;color:#222}\n"
	      "table{border-collapse:collapse;font-size:13px}\n"
	      "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}\n"
	      "td:first-child,th:first-child{text-align:left;font-family:monospace}\n"
	      "tr.equal td{background:#f3fbf3}tr.close td{background:#fbfbe8}\n"
	      "tr.differs td,tr.mismatch td,tr.only_a td,tr.only_b td{background:#fbecec}\n"
	      "svg{background:#fafafa;border:1px solid #ddd}\n"
	      "</style></head><body>\n<h1>", f);
	gfs_html_str(f, title);
	fputs("</h1>\n", f);
	return f;
}

void gfs_html_chart(FILE *f, const char *title, const char *ylabel, char *const *labels,
		    const double *values, size_t n, bool log)
{
	const double w = 900, h = 300, left = 70, bottom = 60, top = 20;
	const double bw = n ? (w - left - 10) / (double)n : 0;
	double lo = INFINITY, hi = -INFINITY;

	for (size_t k = 0; k < n; k++) {
		double v = values[k];

		if (!isfinite(v) || (log && v <= 0))
			continue;
		v = log ? log10(v) : v;
		lo = v < lo ? v : lo;
		hi = v > hi ? v : hi;
	}
	const bool none = !(lo <= hi); /* nothing to draw: all zero (log) or none */

	if (none) {
		lo = 0;
		hi = 1;
	}
	if (log) {
		lo = floor(lo);
		hi = ceil(hi);
	} else {
		lo = lo > 0 ? 0 : lo;
	}
	if (hi <= lo)
		hi = lo + 1;
	fputs("<h2>", f);
	gfs_html_str(f, title);
	fprintf(f, "</h2>\n<svg width=\"%.0f\" height=\"%.0f\" role=\"img\">\n", w, h + bottom);
	if (none)
		fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"14\">%s</text>\n", left + 20, h / 2,
			log ? "no change: every value equal" : "nothing to show");
	fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#888\"/>\n", left,
		top, left, h);
	fprintf(f, "<text x=\"12\" y=\"%.0f\" font-size=\"12\" transform=\"rotate(-90 12 %.0f)\">",
		h / 2, h / 2);
	gfs_html_str(f, ylabel);
	fputs("</text>\n", f);
	/* log: a tick per decade (at most 10); linear: 5 ticks */
	const int nt = log && hi - lo <= 10 ? (int)(hi - lo) : 4;

	for (int t = 0; t <= nt; t++) {
		const double v = lo + (hi - lo) * t / nt, y = h - (h - top) * t / nt;

		fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">",
			left - 4, y + 3);
		if (log)
			fprintf(f, "1e%.3g", v);
		else
			fprintf(f, "%.3g", v);
		fputs("</text>\n", f);
	}
	for (size_t k = 0; k < n; k++) {
		const double x = left + bw * (double)k;
		double v = values[k], y;

		if (log)
			v = v > 0 ? log10(v) : lo;
		if (!isfinite(v))
			v = hi;
		y = h - (h - top) * (v - lo) / (hi - lo);
		fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#4a78b5\">"
			"<title>", x + bw * 0.1, y, bw * 0.8, h - y);
		gfs_html_str(f, labels[k]);
		fprintf(f, ": %.6g</title></rect>\n", values[k]);
		if (n <= 64) {
			fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" font-size=\"10\" "
				"transform=\"rotate(60 %.1f %.0f)\">", x + bw / 2, h + 12, x + bw / 2,
				h + 12);
			gfs_html_str(f, labels[k]);
			fputs("</text>\n", f);
		}
	}
	fputs("</svg>\n", f);
}

int gfs_html_close(FILE *f, const char *path)
{
	int bad;

	fputs("</body></html>\n", f);
	bad = ferror(f);
	if (fclose(f) != 0)
		bad = 1;
	if (bad)
		fprintf(stderr, "gatherfs-inspect: %s: cannot write the page\n", path);
	return bad ? 1 : 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct run_ctx {
	gfs_err (*fn)(void *ctx, size_t k, uint64_t *bytes);
	void *ctx;
	size_t n;
	uint64_t total;
	bool progress;
	atomic_size_t done;
	atomic_uint_fast64_t bytes;
	pthread_mutex_t mu; /* who draws */
	double t0, last;
} run_ctx;

static void draw(run_ctx *r, bool final)
{
	const double t = now_s();
	const uint64_t b = atomic_load(&r->bytes);
	const double rate = t > r->t0 ? (double)b / (t - r->t0) : 0;
	const double eta = rate > 0 && r->total > b ? (double)(r->total - b) / rate : 0;

	if (!final && t - r->last < 0.2)
		return;
	r->last = t;
	fprintf(stderr, "\r%zu/%zu tensors, %.1f/%.1f MB, %.0f MB/s, ETA %.0f s   ",
		atomic_load(&r->done), r->n, (double)b / 1e6, (double)r->total / 1e6, rate / 1e6,
		eta);
	if (final)
		fputc('\n', stderr);
	fflush(stderr);
}

static gfs_err run_one(void *ctx, size_t k)
{
	run_ctx *r = ctx;
	uint64_t bytes = 0;
	const gfs_err err = r->fn(r->ctx, k, &bytes);

	atomic_fetch_add(&r->bytes, bytes);
	atomic_fetch_add(&r->done, 1);
	if (r->progress && pthread_mutex_trylock(&r->mu) == 0) {
		draw(r, false);
		pthread_mutex_unlock(&r->mu);
	}
	return err;
}

gfs_err gfs_report_run(const gfs_report_opts *o, size_t n, uint64_t total_bytes,
		       gfs_err (*fn)(void *ctx, size_t k, uint64_t *bytes), void *ctx)
{
	run_ctx r = { .fn = fn, .ctx = ctx, .n = n, .total = total_bytes,
		      .progress = o->progress, .t0 = now_s() };
	gfs_err err;

	atomic_init(&r.done, 0);
	atomic_init(&r.bytes, 0);
	pthread_mutex_init(&r.mu, NULL);
	err = gfs_pfor(n, run_one, &r);
	if (r.progress)
		draw(&r, true);
	pthread_mutex_destroy(&r.mu);
	return err;
}
