/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — what diff, stats and check print: JSON Lines values, shapes,
 * self-contained HTML pages, progress on a terminal, and the run over
 * every tensor in parallel.
 */
#ifndef GATHERFS_REPORT_H
#define GATHERFS_REPORT_H

#include <stdio.h>

#include "gatherfs/cli/reduce.h"

/* Output options of diff, stats and check. */
typedef struct gfs_report_opts {
	bool json;         /* JSON Lines instead of a table */
	const char *html;  /* write a self-contained HTML page there, or NULL */
	double atol, rtol; /* diff's tolerances */
	bool progress;     /* progress on stderr (it is a terminal) */
} gfs_report_opts;

/* gfs_jl_str(): s as a JSON string (escaped) on f. */
void gfs_jl_str(FILE *f, const char *s);

/* gfs_jl_num(): v as a JSON number that reads back as v (%.17g); NaN and
 * infinities as the strings "NaN", "Infinity", "-Infinity". */
void gfs_jl_num(FILE *f, double v);

/* gfs_jl_shape(): t's shape as a JSON array of integers; t NULL: null. */
void gfs_jl_shape(FILE *f, const gfs_tensor *t);

/* gfs_fmt_shape(): t's shape as "[a, b]" in buf (n bytes, cut if short). */
void gfs_fmt_shape(const gfs_tensor *t, char *buf, size_t n);

/* gfs_fmt_num(): v as %.6g, or "nan"/"inf"/"-inf", in buf (n >= 16). */
const char *gfs_fmt_num(double v, char *buf, size_t n);

/* gfs_html_str(): s with & < > " escaped on f. */
void gfs_html_str(FILE *f, const char *s);

/* gfs_layer_of(): the layer number in a tensor name (".layers.N.", ".h.N.",
 * ".blocks.N."), or -1. */
long gfs_layer_of(const char *name);

/*
 * gfs_layer_bar(): the bar of a per-layer chart that tensor name, the next
 * tensor in order, adds to: a new one, labels[*n] ("layer N" or "other",
 * NULL if out of memory) and values[*n] = 0, when its layer differs from
 * *last (the previous tensor's; -2 before the first).  labels and values
 * have room for one bar per tensor.  @return the bar's index.
 */
size_t gfs_layer_bar(char **labels, double *values, size_t *n, long *last, const char *name);

/*
 * gfs_html_open(): create path and write the head of a page titled title,
 * styles inline.  @return the stream, or NULL after one line on stderr.
 */
FILE *gfs_html_open(const char *path, const char *title);

/*
 * gfs_html_chart(): an inline SVG bar chart on f: one bar per group
 * (labels[k], values[k] >= 0, n groups), log scale when log, the y axis
 * named ylabel.
 */
void gfs_html_chart(FILE *f, const char *title, const char *ylabel, char *const *labels,
		    const double *values, size_t n, bool log);

/*
 * gfs_html_close(): end the page and close f.  @return 0, or 1 after one
 * line on stderr naming path when it could not be written.
 */
int gfs_html_close(FILE *f, const char *path);

/*
 * gfs_report_run(): fn(ctx, k) for k in [0, n) on several threads
 * (gfs_pfor()), with a progress line on stderr when o->progress: tensors
 * and bytes done of total_bytes, rate and ETA; fn reports the bytes of its
 * job k in *bytes.  @return the error of the lowest failing job.
 */
gfs_err gfs_report_run(const gfs_report_opts *o, size_t n, uint64_t total_bytes,
		       gfs_err (*fn)(void *ctx, size_t k, uint64_t *bytes), void *ctx);

#endif
