/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — `gatherfs-inspect stats`: what do its tensors hold?  It
 * prints on standard output (a table, or JSON Lines with o->json) and
 * returns the exit status; a source that cannot be read is one line on
 * stderr naming it and exit status 1, never a partial result.  See
 * docs/diff.md.
 */
#ifndef GATHERFS_CLI_STATS_H
#define GATHERFS_CLI_STATS_H

#include "gatherfs/cli/report.h"

/* gfs_cli_stats(): statistics of every model tensor of x.  @return 0, or 1 on an error. */
int gfs_cli_stats(const gfs_rside *x, const gfs_report_opts *o);

#endif
