/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — `gatherfs-inspect check`: what is wrong with it?  It prints
 * on standard output (a table, or JSON Lines with o->json) and returns the
 * exit status; a source that cannot be read is one line on stderr naming
 * it and exit status 1, never a partial result.  See docs/diff.md.
 */
#ifndef GATHERFS_CLI_CHECK_H
#define GATHERFS_CLI_CHECK_H

#include "gatherfs/cli/report.h"

/*
 * gfs_cli_check(): the findings nan, inf, zero, identical and config of
 * x's model tensors (config: against the config.json of config_dir, the
 * checkpoint directory, or x's generated config.json; none: no config
 * finding).  @return 0: no finding; 1: findings or an error.
 */
int gfs_cli_check(const gfs_rside *x, const char *config_dir, const gfs_report_opts *o);

#endif
