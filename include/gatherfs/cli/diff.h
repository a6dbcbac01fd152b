/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — `gatherfs-inspect diff`: is it the same model?  It prints on
 * standard output (a table, or JSON Lines with o->json) and returns the
 * exit status; a source that cannot be read is one line on stderr naming
 * it and exit status 1, never a partial result.  See docs/diff.md.
 */
#ifndef GATHERFS_CLI_DIFF_H
#define GATHERFS_CLI_DIFF_H

#include "gatherfs/cli/report.h"

/*
 * gfs_cli_diff(): compare the model tensors of a and b by name.  @return 0:
 * the same names and every tensor equal or close; 1: anything else, or an
 * error.
 */
int gfs_cli_diff(const gfs_rside *a, const gfs_rside *b, const gfs_report_opts *o);

#endif
