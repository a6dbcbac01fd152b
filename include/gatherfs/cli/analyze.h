/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — `gatherfs-inspect diff`, `stats` and `check`: is it the same
 * model, what do its tensors hold, what is wrong with it.  Each prints on
 * standard output (a table, or JSON Lines with o->json) and returns the
 * exit status; a source that cannot be read is one line on stderr naming
 * it and exit status 1, never a partial result.  See docs/diff.md.
 */
#ifndef GATHERFS_ANALYZE_H
#define GATHERFS_ANALYZE_H

#include "gatherfs/cli/report.h"

/*
 * gfs_cli_diff(): compare the model tensors of a and b by name.  @return 0:
 * the same names and every tensor equal or close; 1: anything else, or an
 * error.
 */
int gfs_cli_diff(const gfs_rside *a, const gfs_rside *b, const gfs_report_opts *o);

/* gfs_cli_stats(): statistics of every model tensor of x.  @return 0, or 1 on an error. */
int gfs_cli_stats(const gfs_rside *x, const gfs_report_opts *o);

/*
 * gfs_cli_check(): the findings nan, inf, zero, identical and config of
 * x's model tensors (config: against the config.json of config_dir, the
 * checkpoint directory, or x's generated config.json; none: no config
 * finding).  @return 0: no finding; 1: findings or an error.
 */
int gfs_cli_check(const gfs_rside *x, const char *config_dir, const gfs_report_opts *o);

#endif
